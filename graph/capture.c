/* capture.c — what a sync point captures: the pending graph below its
 * targets, the leaves that graph reads, and the structural signature under
 * which its compiled program is cached. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/internal.h"

typedef struct sigbuf {
    unsigned char *p;
    size_t len, cap;
    bool failed;
} sigbuf;

static void feed_grow(sigbuf *b, const void *bytes, size_t len) {
    if (b->failed)
        return;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + len)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, bytes, len);
    b->len += len;
}

/* The signature is fed a few bytes at a time, thousands of times per sync:
 * the common case (room left) is inline, the buffer sized up front. */
static inline void feed_bytes(sigbuf *b, const void *bytes, size_t len) {
    if (b->len + len <= b->cap) {
        memcpy(b->p + b->len, bytes, len);
        b->len += len;
    } else {
        feed_grow(b, bytes, len);
    }
}

static void feed_i64(sigbuf *b, int64_t v) { feed_bytes(b, &v, sizeof v); }

/* What a capture's walk builds as it lists the pending nodes. */
typedef struct capture_walk {
    sigbuf b;
    graph_node **leaves;
    int64_t nleaves, leaves_cap;
} capture_walk;

/* During a capture a pending node's scratch holds its index + 1 (graph_walk
 * puts it there) and a leaf's -(its place among the leaves + 1): how the
 * signature names a source, since the leaves' indices (after every pending
 * node) are only known once the walk has ended. */
static int64_t code_of(const graph_node *n) {
    intptr_t s = (intptr_t)n->scratch;
    return s > 0 ? s - 1 : s;
}

/* A leaf is described where it is first read, so that the signature is one
 * pass. */
static bool add_leaf(capture_walk *w, graph_node *n) {
    if (n->scratch)
        return true;
    if (w->nleaves == w->leaves_cap) {
        int64_t ncap = w->leaves_cap ? w->leaves_cap * 2 : 16;
        graph_node **p = realloc(w->leaves, sizeof *p * (size_t)ncap);
        if (!p)
            return false;
        w->leaves = p;
        w->leaves_cap = ncap;
    }
    w->leaves[w->nleaves++] = n;
    n->scratch = (void *)(intptr_t)-w->nleaves;
    int head[2] = {(int)n->dtype, n->ndim};
    feed_bytes(&w->b, head, sizeof head);
    feed_bytes(&w->b, n->shape, sizeof(int64_t) * (size_t)n->ndim);
    return true;
}

/* Node x is listed: its sources already were (or are leaves). It is named
 * by its digest (graph_node.sig) and its sources: what it reads sits in its
 * first cache line. */
static bool capture_visit(void *ctx, graph_node *x, int64_t i) {
    (void)i;
    capture_walk *w = ctx;
    uint64_t head[2] = {x->sig, (uint64_t)x->nsrc};
    feed_bytes(&w->b, head, sizeof head);
    for (int s = 0; s < x->nsrc; s++) {
        if (!add_leaf(w, x->src[s]))
            return false;
        feed_i64(&w->b, code_of(x->src[s]));
    }
    return !w->b.failed;
}

/* One walk lists the pending nodes and builds the signature as it goes
 * (before, a walk listed them and three more passes numbered, described and
 * cleared them: on a 1000-op chain each pass missed the cache on every node). */
kiln_status graph_capture_new(int n, graph_node *const *targets, graph_capture *c) {
    memset(c, 0, sizeof *c);
    capture_walk w;
    memset(&w, 0, sizeof w);
    size_t *hint = n ? graph_ctx_sig_hint(targets[0]->g) : NULL;
    w.b.cap = (hint ? *hint : 0) + 1024;
    w.b.p = malloc(w.b.cap);
    w.b.failed = !w.b.p;
    if (w.b.failed)
        w.b.cap = 0;
    feed_i64(&w.b, 0); /* the count of pending nodes, written once known */
    graph_node **order = NULL;
    int64_t count = 0;
    kiln_status st = graph_walk(n, targets, true, capture_visit, &w, &order, &count);
    bool ok = st == KILN_OK && !w.b.failed;
    c->targets = malloc(sizeof *c->targets * (size_t)(n ? n : 1));
    ok = ok && c->targets;
    for (int r = 0; ok && r < n; r++) {
        ok = add_leaf(&w, targets[r]);
        feed_i64(&w.b, code_of(targets[r]));
    }
    c->npending = count;
    c->nleaves = w.nleaves;
    c->ntargets = n;
    graph_node **all = ok ? realloc(order, sizeof *order * (size_t)(count + w.nleaves + 1)) : NULL;
    if (all) {
        order = all;
        if (w.nleaves)
            memcpy(all + count, w.leaves, sizeof *all * (size_t)w.nleaves);
        for (int r = 0; r < n; r++) {
            int64_t code = code_of(targets[r]);
            c->targets[r] = code >= 0 ? code : count - code - 1;
        }
    }
    for (int64_t i = 0; st == KILN_OK && i < count; i++)
        order[i]->scratch = NULL;
    for (int64_t i = 0; i < w.nleaves; i++)
        w.leaves[i]->scratch = NULL;
    free(w.leaves);
    c->nodes = all ? all : order;
    c->sig = w.b.p;
    c->siglen = w.b.len;
    if (!all || w.b.failed) {
        graph_capture_free(c);
        return KILN_ERR_OOM;
    }
    memcpy(c->sig, &count, sizeof count);
    if (hint)
        *hint = c->siglen;
    return KILN_OK;
}

void graph_capture_free(graph_capture *c) {
    free(c->nodes);
    free(c->targets);
    free(c->sig);
    memset(c, 0, sizeof *c);
}
