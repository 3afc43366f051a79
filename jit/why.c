/* why.c — see why.h. A description keeps, per captured node (pending nodes,
 * then leaves), what the signature holds of it: op, dtype, shape and a hash
 * of its parameters, with the value of a constant in the clear for the
 * message (random seeds are bound inputs, leaves, and never differ here). The history holds the last HISTORY
 * misses; a capture is compared with the most recent one whose nodes have
 * the same ops in the same order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/why.h"

enum { HISTORY = 8 };

typedef struct node_desc {
    int op, dtype, ndim, nsrc;
    int64_t shape[KILN_MAX_DIMS];
    uint64_t params; /* a hash of the node's parameters */
    graph_scalar value; /* a constant's, for the message */
} node_desc;

typedef struct desc {
    int64_t sync, npending, n;
    node_desc *nodes;
} desc;

struct jit_why {
    desc past[HISTORY];
    int next;
};

static void hash_feed(void *ctx, const void *bytes, size_t len) {
    uint64_t *h = ctx;
    const unsigned char *p = bytes;
    for (size_t i = 0; i < len; i++)
        *h = (*h ^ p[i]) * 1099511628211ull;
}

static bool describe(const graph_capture *cap, int64_t sync, desc *d) {
    d->sync = sync;
    d->npending = cap->npending;
    d->n = cap->npending + cap->nleaves;
    d->nodes = calloc((size_t)(d->n ? d->n : 1), sizeof *d->nodes);
    if (!d->nodes)
        return false;
    for (int64_t i = 0; i < d->n; i++) {
        const graph_node *x = cap->nodes[i];
        node_desc *nd = &d->nodes[i];
        nd->op = i < cap->npending ? (int)x->op : -1; /* a leaf is data, whatever made it */
        nd->dtype = (int)x->dtype;
        nd->ndim = x->ndim;
        nd->nsrc = i < cap->npending ? x->nsrc : 0;
        memcpy(nd->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
        nd->params = 1469598103934665603ull;
        /* Every parameter lives in p, zeroed where a node kind has none
         * (graph_proto), so its bytes stand for what the signature feeds. */
        if (i < cap->npending)
            hash_feed(&nd->params, &x->p, sizeof x->p);
        nd->value = x->p.value;
    }
    return true;
}

static bool same_structure(const desc *a, const desc *b) {
    if (a->n != b->n || a->npending != b->npending)
        return false;
    for (int64_t i = 0; i < a->n; i++)
        if (a->nodes[i].op != b->nodes[i].op || a->nodes[i].nsrc != b->nodes[i].nsrc)
            return false;
    return true;
}

static const char *what_node(const node_desc *n, char *buf, size_t len) {
    if (n->op < 0)
        snprintf(buf, len, "input %s", graph_dtype_name((kiln_dtype)n->dtype));
    else
        snprintf(buf, len, "%s %s", graph_op_name((graph_op)n->op), graph_dtype_name((kiln_dtype)n->dtype));
    return buf;
}

/* The first difference between two captures of one structure. */
static void explain(const desc *now, const desc *was, char *msg, size_t len) {
    for (int64_t i = 0; i < now->n; i++) {
        const node_desc *a = &now->nodes[i], *b = &was->nodes[i];
        char who[64], sa[KILN_MAX_DIMS * 21 + 3], sb[KILN_MAX_DIMS * 21 + 3];
        what_node(a, who, sizeof who);
        if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim)) {
            graph_format_shape(sa, sizeof sa, a->ndim, a->shape);
            graph_format_shape(sb, sizeof sb, b->ndim, b->shape);
            snprintf(msg, len,
                     "like the program of sync %lld, but node %lld (%s) has shape %s where it "
                     "had %s",
                     (long long)was->sync, (long long)i, who, sa, sb);
            return;
        }
        if (a->dtype != b->dtype) {
            snprintf(msg, len,
                     "like the program of sync %lld, but node %lld (%s) was %s",
                     (long long)was->sync, (long long)i, who, graph_dtype_name((kiln_dtype)b->dtype));
            return;
        }
        if (a->params == b->params)
            continue;
        if (a->op == GRAPH_CONST) {
            char va[40], vb[40];
            if (graph_dtype_is_float((kiln_dtype)a->dtype)) {
                snprintf(va, sizeof va, "%.9g", a->value.f);
                snprintf(vb, sizeof vb, "%.9g", b->value.f);
            } else {
                snprintf(va, sizeof va, "%lld", (long long)a->value.i);
                snprintf(vb, sizeof vb, "%lld", (long long)b->value.i);
            }
            snprintf(msg, len,
                     "like the program of sync %lld, but constant %lld (%s) is %s where it was "
                     "%s (a value that changes from sync to sync belongs in a tensor)",
                     (long long)was->sync, (long long)i, who, va, vb);
        } else {
            snprintf(msg, len,
                     "like the program of sync %lld, but the parameters of node %lld (%s: its "
                     "view, axis or range) differ",
                     (long long)was->sync, (long long)i, who);
        }
        return;
    }
    snprintf(msg, len, "like the program of sync %lld, with other targets or inputs read twice",
             (long long)was->sync);
}

static void desc_free(desc *d) {
    free(d->nodes);
    d->nodes = NULL;
    d->n = 0;
}

void jit_why_miss(jit_why **w, const graph_capture *cap, int64_t sync, char *msg, size_t len) {
    snprintf(msg, len, "a structure not seen before (%lld nodes)", (long long)cap->npending);
    if (!*w && !(*w = calloc(1, sizeof **w)))
        return;
    jit_why *h = *w;
    desc now;
    if (!describe(cap, sync, &now))
        return;
    /* the most recent first */
    bool found = false;
    for (int k = 1; k <= HISTORY && !found; k++) {
        const desc *was = &h->past[(h->next - k + HISTORY) % HISTORY];
        if (was->nodes && same_structure(&now, was)) {
            explain(&now, was, msg, len);
            found = true;
        }
    }
    desc_free(&h->past[h->next]);
    h->past[h->next] = now;
    h->next = (h->next + 1) % HISTORY;
}

void jit_why_free(jit_why *w) {
    if (!w)
        return;
    for (int k = 0; k < HISTORY; k++)
        desc_free(&w->past[k]);
    free(w);
}
