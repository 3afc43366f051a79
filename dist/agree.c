/* agree.c — dist_agree: every rank checks, before any data moves, that all
 * ranks are about to run the same collectives. The common case costs one
 * 16-byte all-reduce of a digest; only a mismatch gathers what each rank
 * holds, to name the first difference identically on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dist/internal.h"
#include "graph/graph.h"

/* A descriptor's canonical encoding: op, reduce, root, axis, dtype, ndim,
 * shape; the fields the op does not use are 0, so that they cannot differ. */
enum { ENC = 6 + KILN_MAX_DIMS };
/* How many descriptors a mismatch compares by name: enough to name the
 * first difference of any sync that a person would read about. */
enum { SLOTS = 64 };

static void encode(const dist_desc *d, int64_t *e) {
    memset(e, 0, sizeof(int64_t) * ENC);
    bool reduces = d->op == DIST_ALL_REDUCE || d->op == DIST_REDUCE_SCATTER;
    e[0] = d->op;
    e[1] = reduces ? d->reduce : 0;
    e[2] = d->op == DIST_BROADCAST ? d->root : 0;
    e[3] = d->op == DIST_ALL_GATHER || d->op == DIST_REDUCE_SCATTER ? d->axis : 0;
    e[4] = d->dtype;
    e[5] = d->ndim;
    int nd = d->ndim < 0 ? 0 : d->ndim > KILN_MAX_DIMS ? KILN_MAX_DIMS : d->ndim;
    for (int k = 0; k < nd; k++)
        e[6 + k] = d->shape[k];
}

static uint64_t digest(int n, const dist_desc *d) {
    XXH3_state_t *s = XXH3_createState();
    int64_t nn = n, e[ENC];
    uint64_t h;
    if (!s) {
        /* Out of memory: hash one descriptor at a time into a running seed. */
        h = XXH3_64bits(&nn, sizeof nn);
        for (int i = 0; i < n; i++) {
            encode(&d[i], e);
            h = XXH3_64bits_withSeed(e, sizeof e, h);
        }
        return h;
    }
    XXH3_64bits_reset(s);
    XXH3_64bits_update(s, &nn, sizeof nn);
    for (int i = 0; i < n; i++) {
        encode(&d[i], e);
        XXH3_64bits_update(s, e, sizeof e);
    }
    h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

/* "all_reduce(sum) f32 [4,3]" of an encoding. */
static void describe(const int64_t *e, char *out, size_t cap) {
    dist_desc d;
    memset(&d, 0, sizeof d);
    d.op = (dist_op)e[0];
    d.reduce = (kiln_reduce_op)e[1];
    d.root = (int)e[2];
    d.axis = (int)e[3];
    d.dtype = (kiln_dtype)e[4];
    d.ndim = (int)e[5];
    char name[64];
    dist_desc_name(&d, name, sizeof name);
    size_t len = (size_t)snprintf(out, cap, "%s %s [", name, graph_dtype_name(d.dtype));
    int nd = d.ndim < 0 ? 0 : d.ndim > KILN_MAX_DIMS ? KILN_MAX_DIMS : d.ndim;
    for (int k = 0; k < nd && len < cap; k++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", k ? "," : "", (long long)e[6 + k]);
    if (len < cap)
        snprintf(out + len, cap - len, "]");
}

/* Whether ranks a and b hold the same thing at collective i. */
static bool same_at(const int64_t *counts, const int64_t *slots, int a, int b, int i) {
    bool ha = i < counts[a], hb = i < counts[b];
    if (ha != hb)
        return false;
    return !ha || !memcmp(slots + ((size_t)a * SLOTS + (size_t)i) * ENC,
                          slots + ((size_t)b * SLOTS + (size_t)i) * ENC, sizeof(int64_t) * ENC);
}

/* Appends s to out at *len (clipped to cap). */
static void add(char *out, size_t cap, size_t *len, const char *s) {
    if (*len + 1 >= cap)
        return;
    int k = snprintf(out + *len, cap - *len, "%s", s);
    *len += (size_t)k < cap - *len ? (size_t)k : cap - *len - 1;
}

/* The message of a mismatch, from every rank's count and first SLOTS
 * encodings; the same text on every rank. */
static void mismatch_message(const dist_world *w, const int64_t *counts, const int64_t *slots,
                             const char *what, char *msg, size_t cap) {
    int size = w->size;
    int64_t most = 0;
    for (int r = 0; r < size; r++)
        most = counts[r] > most ? counts[r] : most;
    int first = -1;
    for (int i = 0; i < SLOTS && i < most && first < 0; i++)
        for (int r = 1; r < size; r++)
            if (!same_at(counts, slots, 0, r, i)) {
                first = i;
                break;
            }
    if (first < 0) {
        if (most > SLOTS)
            snprintf(msg, cap,
                     "%s: the ranks disagree on a collective after the first %d of %lld", what,
                     SLOTS, (long long)most);
        else
            snprintf(msg, cap, "%s: the ranks disagree on their collectives", what);
        return;
    }
    size_t len = 0;
    char part[256];
    snprintf(part, sizeof part, "%s: the ranks disagree on collective %d of %lld: ", what,
             first + 1, (long long)most);
    add(msg, cap, &len, part);
    /* Each rank's group: ranks holding the same thing, numbered in the
     * order of their lowest rank. */
    int *group = malloc(sizeof *group * (size_t)size);
    if (!group) {
        add(msg, cap, &len, "(out of memory naming the ranks)");
        return;
    }
    int groups = 0;
    for (int r = 0; r < size; r++) {
        group[r] = -1;
        for (int q = 0; q < r && group[r] < 0; q++)
            if (same_at(counts, slots, q, r, first))
                group[r] = group[q];
        if (group[r] < 0)
            group[r] = groups++;
    }
    for (int g = 0, r = 0; g < groups; g++) {
        while (group[r] != g)
            r++; /* r: the group's lowest rank */
        int members = 0;
        char ranks[512] = "";
        size_t rl = 0;
        /* Runs of three or more as "0-3"; shorter ones one by one. */
        for (int q = r; q < size; q++) {
            if (group[q] != g)
                continue;
            int end = q;
            while (end + 1 < size && group[end + 1] == g)
                end++;
            if (end - q < 2)
                end = q;
            char run[32];
            if (end > q)
                snprintf(run, sizeof run, "%s%d-%d", rl ? ", " : "", q, end);
            else
                snprintf(run, sizeof run, "%s%d", rl ? ", " : "", q);
            add(ranks, sizeof ranks, &rl, run);
            members += end - q + 1;
            q = end;
        }
        const char *who = members > 1 ? "ranks" : "rank", *sep = g ? ", " : "";
        char body[800], held[160];
        if (first < counts[r]) {
            describe(slots + ((size_t)r * SLOTS + (size_t)first) * ENC, held, sizeof held);
            snprintf(body, sizeof body, "%s%s %s %s %s", sep, who, ranks,
                     members > 1 ? "have" : "has", held);
        } else if (first == 0) {
            snprintf(body, sizeof body, "%s%s %s %s none", sep, who, ranks,
                     members > 1 ? "run" : "runs");
        } else {
            snprintf(body, sizeof body, "%s%s %s %s only %d", sep, who, ranks,
                     members > 1 ? "run" : "runs", first);
        }
        add(msg, cap, &len, body);
    }
    free(group);
}

/* The second step, after the digests differed: gathers every rank's count
 * and first SLOTS descriptors and names the difference. */
static kiln_status explain(dist_world *w, int n, const dist_desc *d, const char *what, char *msg,
                           size_t cap) {
    int size = w->size;
    w->agree_count = n;
    int64_t *counts = calloc((size_t)size, sizeof *counts);
    int64_t *mine = calloc((size_t)SLOTS * ENC, sizeof *mine);
    int64_t *slots = calloc((size_t)size * SLOTS * ENC, sizeof *slots);
    if (!counts || !mine || !slots) {
        free(counts);
        free(mine);
        free(slots);
        /* The other ranks now wait in the all-gather below for this one,
         * and will time out: nothing better is left to do. */
        snprintf(msg, cap, "%s: the ranks disagree on their collectives (out of memory naming "
                           "the difference)", what);
        return KILN_ERR_OOM;
    }
    for (int i = 0; i < n && i < SLOTS; i++)
        encode(&d[i], mine + (size_t)i * ENC);
    kmpi_handle req;
    dist_mpi_lock();
    int rc = w->mpi->iallgather(&w->comm, &w->agree_count, counts, 1, KMPI_I64, &req);
    dist_mpi_unlock();
    kiln_status st = dist_finish(w, rc, "MPI_Iallgather", &req, what, msg, cap);
    if (st == KILN_OK) {
        dist_mpi_lock();
        rc = w->mpi->iallgather(&w->comm, mine, slots, (int64_t)SLOTS * ENC, KMPI_I64, &req);
        dist_mpi_unlock();
        st = dist_finish(w, rc, "MPI_Iallgather", &req, what, msg, cap);
    }
    if (st == KILN_OK) {
        mismatch_message(w, counts, slots, what, msg, cap);
        st = KILN_ERR_DIST;
    }
    if (!w->abandoned) {
        free(counts);
        free(mine);
        free(slots);
    }
    return st;
}

kiln_status dist_agree(dist_world *w, int n, const dist_desc *d, const char *what, char *msg,
                       size_t cap) {
    pthread_mutex_lock(&w->mu);
    kiln_status st = dist_check_broken(w, what, msg, cap);
    if (st != KILN_OK) {
        pthread_mutex_unlock(&w->mu);
        return st;
    }
    /* An invalid descriptor still takes part, so that its rank's peers are
     * not left waiting: if every rank holds the same one they all refuse it
     * (validity depends only on the descriptor and the world size); if not,
     * the mismatch names it on every rank. */
    char bad[512] = "";
    kiln_status local = KILN_OK;
    if (n < 0 || (n > 0 && !d)) {
        snprintf(bad, sizeof bad, "%s: %d collectives%s", what, n, n > 0 ? " at NULL" : "");
        local = KILN_ERR_ARG;
        n = 0;
    }
    for (int i = 0; i < n && local == KILN_OK; i++)
        local = dist_check_desc(w, &d[i], i, n, what, bad, sizeof bad);
    uint64_t h = digest(n, d);
    /* max(h) == ~max(~h) == min(h) exactly when every rank's h is the same. */
    uint64_t *both = w->agree_buf;
    both[0] = h;
    both[1] = ~h;
    kmpi_handle req;
    dist_mpi_lock();
    int rc = w->mpi->iallreduce(&w->comm, NULL, both, 2, KMPI_U64, KMPI_MAX, &req);
    dist_mpi_unlock();
    st = dist_finish(w, rc, "MPI_Iallreduce", &req, what, msg, cap);
    if (st == KILN_OK) {
        if (both[0] != ~both[1])
            st = explain(w, n, d, what, msg, cap);
        else if (local != KILN_OK) {
            snprintf(msg, cap, "%s", bad);
            st = local;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return st;
}
