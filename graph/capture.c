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

static void feed(void *ctx, const void *bytes, size_t len) { feed_bytes(ctx, bytes, len); }

static void feed_i64(sigbuf *b, int64_t v) { feed_bytes(b, &v, sizeof v); }

/* During a capture a node's scratch holds its index + 1. */
static int64_t index_of(const graph_node *n) { return (int64_t)(intptr_t)n->scratch - 1; }

static bool add_leaf(graph_capture *c, graph_node *n, int64_t *cap, sigbuf *b) {
    if (n->scratch)
        return true;
    int64_t at = c->npending + c->nleaves;
    if (at == *cap) {
        int64_t ncap = *cap * 2;
        graph_node **p = realloc(c->nodes, sizeof *p * (size_t)ncap);
        if (!p)
            return false;
        c->nodes = p;
        *cap = ncap;
    }
    c->nodes[at] = n;
    c->nleaves++;
    n->scratch = (void *)(intptr_t)(at + 1);
    int head[2] = {(int)n->dtype, n->ndim};
    feed_bytes(b, head, sizeof head);
    feed_bytes(b, n->shape, sizeof(int64_t) * (size_t)n->ndim);
    return true;
}

kiln_status graph_capture_new(int n, graph_node *const *targets, graph_capture *c) {
    memset(c, 0, sizeof *c);
    graph_node **order = NULL;
    int64_t count = 0;
    kiln_status st = graph_postorder(n, targets, true, &order, &count);
    if (st != KILN_OK)
        return st;
    int64_t cap = count + 16;
    c->nodes = realloc(order, sizeof *order * (size_t)cap);
    c->targets = malloc(sizeof *c->targets * (size_t)(n ? n : 1));
    if (!c->nodes || !c->targets) {
        free(c->nodes ? c->nodes : order);
        free(c->targets);
        memset(c, 0, sizeof *c);
        return KILN_ERR_OOM;
    }
    c->npending = count;
    for (int64_t i = 0; i < count; i++)
        c->nodes[i]->scratch = (void *)(intptr_t)(i + 1);
    sigbuf b = {0};
    /* about what a node of a few dimensions and two sources takes */
    b.cap = (size_t)count * 64 + 256;
    b.p = malloc(b.cap);
    b.failed = !b.p;
    if (b.failed)
        b.cap = 0;
    bool ok = true;
    feed_i64(&b, count);
    for (int64_t i = 0; ok && i < count; i++) {
        graph_node *x = c->nodes[i];
        int head[4] = {(int)x->op, (int)x->dtype, x->ndim, x->nsrc};
        feed_bytes(&b, head, sizeof head);
        feed_bytes(&b, x->shape, sizeof(int64_t) * (size_t)x->ndim);
        graph_feed_params(x, feed, &b);
        /* A leaf is described where it is first read, so that the signature
         * is one pass; its index says where. */
        for (int s = 0; ok && s < x->nsrc; s++) {
            ok = add_leaf(c, x->src[s], &cap, &b);
            feed_i64(&b, index_of(x->src[s]));
        }
    }
    c->ntargets = n;
    for (int r = 0; ok && r < n; r++) {
        ok = add_leaf(c, targets[r], &cap, &b);
        c->targets[r] = index_of(targets[r]);
        feed_i64(&b, c->targets[r]);
    }
    for (int64_t i = 0; i < c->npending + c->nleaves; i++)
        c->nodes[i]->scratch = NULL;
    c->sig = b.p;
    c->siglen = b.len;
    if (!ok || b.failed) {
        graph_capture_free(c);
        return KILN_ERR_OOM;
    }
    return KILN_OK;
}

void graph_capture_free(graph_capture *c) {
    free(c->nodes);
    free(c->targets);
    free(c->sig);
    memset(c, 0, sizeof *c);
}
