/* run.c — dist_run: moves the data of collectives that dist_agree accepted.
 * Consecutive all-reduces of one dtype and reduce op share one message (a
 * bucket); an all-gather or reduce-scatter along an inner axis is regrouped
 * around MPI, which only knows rank-major blocks; f16 and bf16 travel as f32
 * so that they round once, at the end, and u8 sums as u32 (see wire_type). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/internal.h"
#include "graph/graph.h"

/* The most elements one MPI call is given: its counts are ints. */
#define CHUNK ((int64_t)1 << 30)

static bool is_half(kiln_dtype t) { return t == KILN_F16 || t == KILN_BF16; }

/* The type a reduction of t travels as. Integer sums travel unsigned, whose
 * wrapping C defines (a signed overflow inside MPI would be undefined). u8
 * sums travel as u32, truncated back: Open MPI 4.1's AVX reductions
 * saturate 8- and 16-bit sums (255 + 1 gives 255) where C wraps, while
 * 32-bit ones wrap, and a sum modulo 2^32 is the same modulo 256. */
static kmpi_type wire_type(kiln_dtype t, kiln_reduce_op r) {
    switch (t) {
    case KILN_F32:
    case KILN_F16:
    case KILN_BF16: return KMPI_F32;
    case KILN_F64: return KMPI_F64;
    case KILN_I32: return r == KILN_REDUCE_SUM ? KMPI_U32 : KMPI_I32;
    case KILN_I64: return r == KILN_REDUCE_SUM ? KMPI_U64 : KMPI_I64;
    case KILN_U8: return r == KILN_REDUCE_SUM ? KMPI_U32 : KMPI_U8;
    case KILN_I8: return r == KILN_REDUCE_SUM ? KMPI_U32 : KMPI_I8;
    case KILN_BOOL: return KMPI_U8;
    }
    return KMPI_U8;
}

/* Whether t travels wider than it is stored (through a scratch, then). */
static bool widened(kiln_dtype t, kiln_reduce_op r) {
    return is_half(t) || ((t == KILN_U8 || t == KILN_I8) && r == KILN_REDUCE_SUM);
}

static size_t wire_size(kiln_dtype t, kiln_reduce_op r) {
    return widened(t, r) ? 4 : graph_dtype_size(t);
}

static kmpi_op wire_op(kiln_dtype t, kiln_reduce_op r) {
    if (t == KILN_BOOL)
        return r == KILN_REDUCE_MIN ? KMPI_LAND : KMPI_LOR;
    return r == KILN_REDUCE_MAX ? KMPI_MAX : r == KILN_REDUCE_MIN ? KMPI_MIN : KMPI_SUM;
}

/* Moving bytes without reducing them: the widest unit that divides them
 * keeps the count within MPI's int for as long as possible. */
static kmpi_type unit_of(int64_t bytes, int64_t *unit) {
    if (bytes % 8 == 0)
        return *unit = 8, KMPI_U64;
    if (bytes % 4 == 0)
        return *unit = 4, KMPI_U32;
    if (bytes % 2 == 0)
        return *unit = 2, KMPI_U16;
    return *unit = 1, KMPI_U8;
}

/* Scratch whose address MPI may still hold after a timeout is never freed
 * (see dist_world.abandoned). */
static void release(const dist_world *w, void *p) {
    if (!w->abandoned)
        free(p);
}

static void *scratch(size_t bytes, const char *what, char *msg, size_t cap, kiln_status *st) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        snprintf(msg, cap, "%s: out of memory for a %zu-byte collective buffer", what, bytes);
        *st = KILN_ERR_OOM;
    }
    return p;
}

static kiln_status allreduce_in_place(dist_world *w, void *buf, int64_t count, kmpi_type type,
                                      size_t es, kmpi_op op, const char *what, char *msg,
                                      size_t cap) {
    kiln_status st = KILN_OK;
    for (int64_t at = 0; at < count && st == KILN_OK; at += CHUNK) {
        int64_t c = count - at < CHUNK ? count - at : CHUNK;
        kmpi_handle req;
        dist_mpi_lock();
        w->counts.messages++;
        int rc = w->mpi->iallreduce(&w->comm, NULL, (char *)buf + (size_t)at * es, c, type, op,
                                    &req);
        dist_mpi_unlock();
        st = dist_finish(w, rc, "MPI_Iallreduce", &req, what, msg, cap);
    }
    return st;
}

/* n elements of t from src into out, as they travel. */
static void widen(kiln_dtype t, const void *src, int64_t n, void *out) {
    const uint16_t *h = src;
    const uint8_t *b = src;
    for (int64_t i = 0; i < n; i++) {
        if (t == KILN_U8 || t == KILN_I8) /* the low 8 bits of a sum are those of the bytes' */
            ((uint32_t *)out)[i] = b[i];
        else
            ((float *)out)[i] = t == KILN_F16 ? graph_f16_to_f32(h[i]) : graph_bf16_to_f32(h[i]);
    }
}

/* Back from the wire into t's dst, a half dividing by div first (1 unless a
 * mean) so that it rounds once. */
static void narrow(kiln_dtype t, const void *in, int64_t n, float div, void *dst) {
    const float *f = in;
    const uint32_t *u = in;
    for (int64_t i = 0; i < n; i++) {
        if (t == KILN_U8 || t == KILN_I8) {
            ((uint8_t *)dst)[i] = (uint8_t)u[i];
            continue;
        }
        float v = div == 1.0f ? f[i] : f[i] / div;
        ((uint16_t *)dst)[i] = t == KILN_F16 ? graph_f32_to_f16(v) : graph_f32_to_bf16(v);
    }
}

static void divide(kiln_dtype t, void *buf, int64_t n, int size) {
    if (t == KILN_F32) {
        float *f = buf;
        for (int64_t i = 0; i < n; i++)
            f[i] /= (float)size;
    } else if (t == KILN_F64) {
        double *f = buf;
        for (int64_t i = 0; i < n; i++)
            f[i] /= (double)size;
    }
}

/* Copies one source into its place in a bucket (as it travels), and back. */
static void pack(const dist_desc *d, const void *src, int64_t n, void *at) {
    if (widened(d->dtype, d->reduce))
        widen(d->dtype, src, n, at);
    else
        memcpy(at, src, (size_t)n * graph_dtype_size(d->dtype));
}

static void unpack(const dist_desc *d, const void *at, int64_t n, int size, void *dst) {
    bool mean = d->reduce == KILN_REDUCE_MEAN;
    if (widened(d->dtype, d->reduce)) {
        narrow(d->dtype, at, n, mean ? (float)size : 1.0f, dst);
    } else {
        memcpy(dst, at, (size_t)n * graph_dtype_size(d->dtype));
        if (mean)
            divide(d->dtype, dst, n, size);
    }
}

/* All-reduces d[0..k) of one dtype and reduce op as one message. One alone
 * that travels as it is stored is reduced in dst itself, which saves a
 * scratch. */
static kiln_status all_reduce(dist_world *w, int k, const dist_desc *d, const void *const *src,
                              void *const *dst, const char *what, char *msg, size_t cap) {
    kiln_dtype t = d[0].dtype;
    kmpi_type type = wire_type(t, d[0].reduce);
    kmpi_op op = wire_op(t, d[0].reduce);
    size_t es = wire_size(t, d[0].reduce);
    if (k == 1 && !widened(t, d[0].reduce)) {
        int64_t n = dist_numel(&d[0]);
        if (n == 0)
            return KILN_OK;
        if (dst[0] != src[0])
            memcpy(dst[0], src[0], (size_t)n * es);
        kiln_status st = allreduce_in_place(w, dst[0], n, type, es, op, what, msg, cap);
        if (st == KILN_OK && d[0].reduce == KILN_REDUCE_MEAN)
            divide(t, dst[0], n, w->size);
        return st;
    }
    int64_t total = 0;
    for (int i = 0; i < k; i++)
        total += dist_numel(&d[i]);
    if (total == 0)
        return KILN_OK;
    kiln_status st = KILN_OK;
    char *buf = scratch((size_t)total * es, what, msg, cap, &st);
    if (!buf)
        return st;
    int64_t at = 0;
    for (int i = 0; i < k; i++) {
        int64_t n = dist_numel(&d[i]);
        pack(&d[i], src[i], n, buf + (size_t)at * es);
        at += n;
    }
    st = allreduce_in_place(w, buf, total, type, es, op, what, msg, cap);
    at = 0;
    for (int i = 0; i < k && st == KILN_OK; i++) {
        int64_t n = dist_numel(&d[i]);
        unpack(&d[i], buf + (size_t)at * es, n, w->size, dst[i]);
        at += n;
    }
    release(w, buf);
    return st;
}

/* The product of shape[0..axis): how many rows the axis cuts. */
static int64_t outer_of(const dist_desc *d) {
    int64_t o = 1;
    for (int k = 0; k < d->axis; k++)
        o *= d->shape[k];
    return o;
}

static kiln_status too_large(const dist_desc *d, const char *what, char *msg, size_t cap) {
    char name[64];
    dist_desc_name(d, name, sizeof name);
    snprintf(msg, cap, "%s: %s of %lld elements: one rank's block is too large for one MPI call",
             what, name, (long long)dist_numel(d));
    return KILN_ERR_DIST;
}

/* MPI gathers rank-major blocks [rank][outer][inner]; the result joined
 * along axis is [outer][rank][inner], so an inner axis is regrouped from a
 * scratch (unless outer is 1, when the two agree). */
static kiln_status all_gather(dist_world *w, const dist_desc *d, const void *src, void *dst,
                              const char *what, char *msg, size_t cap) {
    int64_t bytes = dist_numel(d) * (int64_t)graph_dtype_size(d->dtype);
    if (bytes == 0)
        return KILN_OK;
    int64_t unit;
    kmpi_type type = unit_of(bytes, &unit);
    if (bytes / unit > INT32_MAX)
        return too_large(d, what, msg, cap);
    int64_t outer = outer_of(d);
    kiln_status st = KILN_OK;
    char *buf = outer == 1 ? dst : scratch((size_t)bytes * (size_t)w->size, what, msg, cap, &st);
    if (!buf)
        return st;
    kmpi_handle req;
    dist_mpi_lock();
    w->counts.messages++;
    int rc = w->mpi->iallgather(&w->comm, src, buf, bytes / unit, type, &req);
    dist_mpi_unlock();
    st = dist_finish(w, rc, "MPI_Iallgather", &req, what, msg, cap);
    if (outer != 1) {
        size_t inner = (size_t)(bytes / outer);
        for (int r = 0; r < w->size && st == KILN_OK; r++)
            for (int64_t o = 0; o < outer; o++)
                memcpy((char *)dst + ((size_t)o * (size_t)w->size + (size_t)r) * inner,
                       buf + (size_t)r * (size_t)bytes + (size_t)o * inner, inner);
        release(w, buf);
    }
    return st;
}

/* MPI scatters rank-major blocks, rank r getting block r; piece r along an
 * inner axis is spread over every row, so the source is packed first
 * [outer][rank][piece] -> [rank][outer][piece]. */
static kiln_status reduce_scatter(dist_world *w, const dist_desc *d, const void *src, void *dst,
                                  const char *what, char *msg, size_t cap) {
    int64_t n = dist_numel(d), m = n / w->size;
    if (n == 0)
        return KILN_OK;
    if (m > INT32_MAX)
        return too_large(d, what, msg, cap);
    kiln_dtype t = d->dtype;
    bool wider = widened(t, d->reduce);
    size_t es = wire_size(t, d->reduce);
    int64_t outer = outer_of(d);
    kiln_status st = KILN_OK;
    void *wide = NULL, *packed = NULL, *out = NULL;
    const void *send = src;
    if (wider) {
        if (!(wide = scratch((size_t)n * es, what, msg, cap, &st)))
            return st;
        widen(t, src, n, wide);
        send = wide;
    }
    if (outer != 1) {
        if (!(packed = scratch((size_t)n * es, what, msg, cap, &st))) {
            free(wide);
            return st;
        }
        size_t row = (size_t)(m / outer) * es;
        for (int64_t o = 0; o < outer; o++)
            for (int r = 0; r < w->size; r++)
                memcpy((char *)packed + ((size_t)r * (size_t)outer + (size_t)o) * row,
                       (const char *)send + ((size_t)o * (size_t)w->size + (size_t)r) * row, row);
        send = packed;
    }
    if (wider && !(out = scratch((size_t)m * es, what, msg, cap, &st))) {
        free(wide);
        free(packed);
        return st;
    }
    kmpi_handle req;
    dist_mpi_lock();
    w->counts.messages++;
    int rc = w->mpi->ireduce_scatter_block(&w->comm, send, out ? out : dst, m,
                                           wire_type(t, d->reduce), wire_op(t, d->reduce), &req);
    dist_mpi_unlock();
    st = dist_finish(w, rc, "MPI_Ireduce_scatter_block", &req, what, msg, cap);
    if (st == KILN_OK) {
        if (out)
            narrow(t, out, m, d->reduce == KILN_REDUCE_MEAN ? (float)w->size : 1.0f, dst);
        else if (d->reduce == KILN_REDUCE_MEAN)
            divide(t, dst, m, w->size);
    }
    release(w, wide);
    release(w, packed);
    release(w, out);
    return st;
}

static kiln_status broadcast(dist_world *w, const dist_desc *d, const void *src, void *dst,
                             const char *what, char *msg, size_t cap) {
    int64_t bytes = dist_numel(d) * (int64_t)graph_dtype_size(d->dtype);
    if (bytes == 0)
        return KILN_OK;
    if (w->rank == d->root && dst != src)
        memcpy(dst, src, (size_t)bytes);
    int64_t unit;
    kmpi_type type = unit_of(bytes, &unit);
    int64_t count = bytes / unit;
    kiln_status st = KILN_OK;
    for (int64_t at = 0; at < count && st == KILN_OK; at += CHUNK) {
        int64_t c = count - at < CHUNK ? count - at : CHUNK;
        kmpi_handle req;
        dist_mpi_lock();
        w->counts.messages++;
        int rc = w->mpi->ibcast(&w->comm, (char *)dst + at * unit, c, type, d->root, &req);
        dist_mpi_unlock();
        st = dist_finish(w, rc, "MPI_Ibcast", &req, what, msg, cap);
    }
    return st;
}

dist_counts dist_get_counts(const dist_world *w) { return w->counts; }

kiln_status dist_run(dist_world *w, int n, const dist_desc *d, const void *const *src,
                     void *const *dst, const char *what, char *msg, size_t cap) {
    pthread_mutex_lock(&w->mu);
    w->counts.collectives += n;
    kiln_status st = dist_check_broken(w, what, msg, cap);
    for (int i = 0; i < n && st == KILN_OK; i++)
        st = dist_check_desc(w, &d[i], i, n, what, msg, cap);
    for (int i = 0; i < n && st == KILN_OK;) {
        if (d[i].op != DIST_ALL_REDUCE) {
            if (d[i].op == DIST_ALL_GATHER)
                st = all_gather(w, &d[i], src[i], dst[i], what, msg, cap);
            else if (d[i].op == DIST_REDUCE_SCATTER)
                st = reduce_scatter(w, &d[i], src[i], dst[i], what, msg, cap);
            else
                st = broadcast(w, &d[i], src[i], dst[i], what, msg, cap);
            i++;
            continue;
        }
        /* The bucket: the all-reduces from i on that share its dtype and
         * reduce op and, together, fit bucket_bytes. One larger than that
         * goes alone. */
        size_t es = wire_size(d[i].dtype, d[i].reduce);
        size_t total = (size_t)dist_numel(&d[i]) * es;
        int j = i + 1;
        while (j < n && d[j].op == DIST_ALL_REDUCE && d[j].dtype == d[i].dtype &&
               d[j].reduce == d[i].reduce &&
               total + (size_t)dist_numel(&d[j]) * es <= w->bucket_bytes) {
            total += (size_t)dist_numel(&d[j]) * es;
            j++;
        }
        st = all_reduce(w, j - i, &d[i], &src[i], &dst[i], what, msg, cap);
        i = j;
    }
    pthread_mutex_unlock(&w->mu);
    return st;
}
