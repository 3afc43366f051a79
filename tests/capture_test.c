/* capture_test.c — what a sync point captures (graph/capture.c, built in one
 * walk, graph/walk.c's graph_walk): the pending nodes in post-order, then
 * the leaves in the order they are first read, the targets' places, and a
 * signature equal exactly when the structure is; every node's scratch clear
 * afterwards. And graph_broadcast (graph/view.c): the node a reshape then an
 * expand would make, without the reshape's own node. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

static graph_node *leaf(graph_ctx *g, int64_t n) {
    graph_buffer *b = graph_buffer_new(sizeof(float) * (size_t)n);
    cr_assert(b);
    graph_node *x = graph_buffer_node(g, KILN_F32, 1, &n, b);
    graph_buffer_unref(b);
    cr_assert(x);
    return x;
}

static bool same_sig(const graph_capture *a, const graph_capture *b) {
    return a->siglen == b->siglen && !memcmp(a->sig, b->sig, a->siglen);
}

/* y = exp(a * b) + b over leaves a, b; out[0..3] the nodes made */
static graph_node *build(graph_node *a, graph_node *b, graph_node **out) {
    out[0] = graph_binary(GRAPH_MUL, a, b);
    out[1] = graph_unary(GRAPH_EXP, out[0]);
    out[2] = graph_binary(GRAPH_ADD, out[1], b);
    cr_assert(out[0] && out[1] && out[2]);
    return out[2];
}

/* Drops n nodes, then checks that g holds none and frees it. */
static void close_ctx(graph_ctx *g, int n, graph_node *const *ns) {
    for (int i = 0; i < n; i++)
        graph_unref(ns[i]);
    cr_assert_eq(graph_ctx_live_nodes(g), 0);
    graph_ctx_free(g);
}

/* Drops build's nodes and its two leaves. */
static void drop(graph_node **m, graph_node *a, graph_node *b) {
    for (int i = 2; i >= 0; i--)
        graph_unref(m[i]);
    graph_unref(a);
    graph_unref(b);
}

Test(capture, lists_pending_in_post_order_then_leaves_as_first_read) {
    graph_ctx *g = graph_ctx_new();
    graph_node *a = leaf(g, 5), *b = leaf(g, 5), *m[3];
    graph_node *y = build(a, b, m);
    graph_capture c;
    cr_assert_eq(graph_capture_new(1, &y, &c), KILN_OK);
    cr_assert_eq(c.npending, 3);
    cr_assert_eq(c.nleaves, 2);
    cr_assert_eq(c.nodes[0], m[0]);
    cr_assert_eq(c.nodes[1], m[1]);
    cr_assert_eq(c.nodes[2], m[2]);
    cr_assert_eq(c.nodes[3], a, "a is read first (by the product)");
    cr_assert_eq(c.nodes[4], b);
    cr_assert_eq(c.ntargets, 1);
    cr_assert_eq(c.targets[0], 2);
    for (int i = 0; i < 5; i++)
        cr_assert_null(c.nodes[i]->scratch, "node %d's scratch left set", i);
    graph_capture_free(&c);
    drop(m, a, b);
    cr_assert_eq(graph_ctx_live_nodes(g), 0);
    graph_ctx_free(g);
}

Test(capture, signature_is_the_structure_not_the_leaves) {
    graph_ctx *g = graph_ctx_new();
    graph_node *a = leaf(g, 5), *b = leaf(g, 5), *c2 = leaf(g, 5), *d = leaf(g, 5);
    graph_node *m1[3], *m2[3], *m3[3], *m4[3];
    graph_node *y1 = build(a, b, m1), *y2 = build(c2, d, m2);
    graph_node *y3 = build(a, a, m3); /* one leaf read twice */
    graph_node *y4 = build(b, a, m4); /* the same shape of graph, leaves swapped */
    graph_capture c[4];
    graph_node *ys[4] = {y1, y2, y3, y4};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(graph_capture_new(1, &ys[i], &c[i]), KILN_OK);
    cr_assert(same_sig(&c[0], &c[1]), "other leaves, the same structure");
    cr_assert(same_sig(&c[0], &c[3]), "leaves in another order, the same structure");
    cr_assert(!same_sig(&c[0], &c[2]), "a leaf read twice is another structure");
    cr_assert_eq(c[2].nleaves, 1);
    for (int i = 0; i < 4; i++)
        graph_capture_free(&c[i]);
    /* exp(a * b) + a: the same nodes and leaves, only which leaf the sum
     * reads differs */
    graph_node *y5 = graph_binary(GRAPH_ADD, m1[1], a);
    graph_capture c5, c1;
    cr_assert_eq(graph_capture_new(1, &y5, &c5), KILN_OK);
    cr_assert_eq(graph_capture_new(1, &y1, &c1), KILN_OK);
    cr_assert_eq(c5.siglen, c1.siglen);
    cr_assert(!same_sig(&c5, &c1), "which leaf a node reads is structure");
    graph_capture_free(&c5);
    graph_capture_free(&c1);
    graph_unref(y5);

    /* two targets, the second also a source of the first; and their order */
    graph_node *two[2] = {y1, m1[1]}, *owt[2] = {m1[1], y1};
    graph_capture t1, t2;
    cr_assert_eq(graph_capture_new(2, two, &t1), KILN_OK);
    cr_assert_eq(graph_capture_new(2, owt, &t2), KILN_OK);
    cr_assert_eq(t1.npending, 3);
    cr_assert_eq(t1.targets[0], 2);
    cr_assert_eq(t1.targets[1], 1);
    cr_assert(!same_sig(&t1, &t2), "which node is which target is structure");
    graph_capture_free(&t1);
    graph_capture_free(&t2);

    graph_node **all[4] = {m1, m2, m3, m4};
    for (int k = 0; k < 4; k++)
        for (int i = 2; i >= 0; i--)
            graph_unref(all[k][i]);
    close_ctx(g, 4, (graph_node *[]){a, b, c2, d});
}

Test(capture, a_realized_target_is_a_leaf) {
    graph_ctx *g = graph_ctx_new();
    graph_node *a = leaf(g, 5), *b = leaf(g, 5), *m[3];
    graph_node *y = build(a, b, m);
    /* a target already realized, beside a pending one */
    graph_node *ts[2] = {a, y};
    graph_capture c;
    cr_assert_eq(graph_capture_new(2, ts, &c), KILN_OK);
    cr_assert_eq(c.npending, 3);
    cr_assert_eq(c.nleaves, 2);
    cr_assert_eq(c.nodes[c.targets[0]], a);
    cr_assert_eq(c.nodes[c.targets[1]], y);
    cr_assert_geq(c.targets[0], c.npending);
    graph_capture_free(&c);
    /* nothing pending at all */
    graph_capture e;
    cr_assert_eq(graph_capture_new(1, &a, &e), KILN_OK);
    cr_assert_eq(e.npending, 0);
    cr_assert_eq(e.nleaves, 1);
    cr_assert_eq(e.targets[0], 0);
    cr_assert_null(a->scratch);
    graph_capture_free(&e);
    drop(m, a, b);
    graph_ctx_free(g);
}

/* A chain far deeper than the C stack, with a leaf per link: the walk is
 * iterative, and its look-ahead along the stack stays inside it. */
Test(capture, a_deep_chain) {
    enum { DEPTH = 100000 };
    graph_ctx *g = graph_ctx_new();
    graph_node *x = leaf(g, 3), *one = leaf(g, 3);
    graph_node *y = graph_ref(x);
    for (int i = 0; i < DEPTH; i++) {
        graph_node *z = graph_binary(i % 2 ? GRAPH_MUL : GRAPH_ADD, y, one);
        cr_assert(z);
        graph_unref(y);
        y = z;
    }
    graph_capture c;
    cr_assert_eq(graph_capture_new(1, &y, &c), KILN_OK);
    cr_assert_eq(c.npending, DEPTH);
    cr_assert_eq(c.nleaves, 2);
    cr_assert_eq(c.nodes[DEPTH], x);
    cr_assert_eq(c.nodes[DEPTH + 1], one);
    cr_assert_eq(c.targets[0], DEPTH - 1);
    graph_capture_free(&c);
    graph_unref(y);
    graph_unref(x);
    graph_unref(one);
    cr_assert_eq(graph_ctx_live_nodes(g), 0);
    graph_ctx_free(g);
}

static bool stop_at_third(void *ctx, graph_node *n, int64_t i) {
    int *seen = ctx;
    cr_assert_eq((intptr_t)n->scratch, i + 1, "a listed node's scratch is its index + 1");
    for (int s = 0; s < n->nsrc; s++)
        cr_assert(n->src[s]->buf || n->src[s]->scratch, "a source is listed before its consumer");
    (*seen)++;
    return i < 2;
}

Test(capture, a_walk_stopped_by_its_visit_clears_every_node) {
    graph_ctx *g = graph_ctx_new();
    graph_node *a = leaf(g, 5), *b = leaf(g, 5), *m[3];
    graph_node *y = build(a, b, m);
    graph_node *z = graph_unary(GRAPH_NEG, y);
    graph_node **order = NULL;
    int64_t count = -1;
    int seen = 0;
    cr_assert_eq(graph_walk(1, &z, true, stop_at_third, &seen, &order, &count), KILN_ERR_OOM);
    cr_assert_eq(seen, 3);
    for (int i = 0; i < 3; i++)
        cr_assert_null(m[i]->scratch);
    cr_assert_null(z->scratch);
    graph_unref(z);
    drop(m, a, b);
    graph_ctx_free(g);
}

/* graph_broadcast(x) against the reshape-then-expand it stands for: nodes
 * are interned, so the same view is the same node. */
static void check_broadcast(graph_node *x, int ndim, const int64_t *shape) {
    int64_t shp[KILN_MAX_DIMS];
    int lead = ndim - x->ndim;
    for (int d = 0; d < ndim; d++)
        shp[d] = d < lead ? 1 : x->shape[d - lead];
    graph_node *r = graph_reshape(x, ndim, shp);
    cr_assert(r);
    graph_node *e = graph_expand(r, shape), *b = graph_broadcast(x, ndim, shape);
    cr_assert(e && b);
    cr_assert_eq(b, e, "broadcast of a %s node to %d dims: not the reshaped expand",
                 graph_op_name(x->op), ndim);
    graph_unref(r);
    graph_unref(e);
    graph_unref(b);
}

Test(capture, broadcast_is_reshape_then_expand) {
    graph_ctx *g = graph_ctx_new();
    graph_node *x = leaf(g, 6);
    graph_scalar s = {.f = 2.5};
    graph_node *zero_d = graph_const(g, KILN_F32, s);
    const int64_t start[1] = {1}, step[1] = {2}, len[1] = {2}, one[1] = {1};
    const int64_t before[1] = {2}, after[1] = {1};
    graph_node *sliced = graph_slice(x, start, step, len);
    graph_node *single = graph_slice(x, start, step, one);
    graph_node *padded = graph_pad(sliced, before, after); /* masked */
    graph_node *pad1 = graph_pad(single, before, after);
    const int64_t to3[3] = {4, 3, 2}, to2[2] = {3, 5}, to1[2] = {4, 1}, top[2] = {2, 5};
    check_broadcast(x, 2, (const int64_t[]){3, 6});
    check_broadcast(zero_d, 3, to3);
    check_broadcast(sliced, 3, to3);
    check_broadcast(single, 2, to2);
    check_broadcast(single, 2, to1);
    check_broadcast(padded, 2, top);
    check_broadcast(pad1, 2, (const int64_t[]){3, 4});
    close_ctx(g, 6, (graph_node *[]){pad1, padded, single, sliced, zero_d, x});
}

/* What a node is beyond its sources enters the signature through its digest:
 * a constant's value, a view's strides, a dtype, a shape. */
Test(capture, digests_tell_parameters_apart) {
    graph_ctx *g = graph_ctx_new();
    const int64_t s23[2] = {2, 3};
    graph_buffer *buf = graph_buffer_new(sizeof(float) * 6);
    graph_node *x = graph_buffer_node(g, KILN_F32, 2, s23, buf);
    graph_buffer_unref(buf);
    graph_scalar a = {.f = 2.5}, b = {.f = 3.5};
    const int perm[2] = {1, 0};
    const int64_t start[2] = {0, 0}, step1[2] = {1, 1}, step2[2] = {1, 2}, len[2] = {2, 2};
    graph_node *fa = graph_full(g, KILN_F32, 2, s23, a), *fb = graph_full(g, KILN_F32, 2, s23, b);
    graph_node *ys[6];
    ys[0] = graph_binary(GRAPH_ADD, x, fa);
    ys[1] = graph_binary(GRAPH_ADD, x, fb);            /* another constant */
    ys[2] = graph_unary(GRAPH_EXP, graph_permute(x, perm)); /* 3x2 */
    graph_node *s1 = graph_slice(x, start, step1, len), *s2 = graph_slice(x, start, step2, len);
    ys[3] = graph_unary(GRAPH_EXP, s1);
    ys[4] = graph_unary(GRAPH_EXP, s2);                /* other strides, same shape */
    ys[5] = graph_cast(ys[3], KILN_F64);               /* another dtype */
    graph_capture c[6];
    for (int i = 0; i < 6; i++) {
        cr_assert(ys[i]);
        cr_assert_eq(graph_capture_new(1, &ys[i], &c[i]), KILN_OK);
    }
    cr_assert_eq(c[0].siglen, c[1].siglen);
    cr_assert(!same_sig(&c[0], &c[1]), "constants 2.5 and 3.5 captured alike");
    cr_assert_eq(c[3].siglen, c[4].siglen);
    cr_assert(!same_sig(&c[3], &c[4]), "slices of steps 1 and 2 captured alike");
    cr_assert(!same_sig(&c[2], &c[3]));
    cr_assert(!same_sig(&c[3], &c[5]));
    for (int i = 0; i < 6; i++)
        graph_capture_free(&c[i]);
    graph_unref(ys[2]->src[0]); /* the permute, made inline above */
    for (int i = 5; i >= 0; i--)
        graph_unref(ys[i]);
    graph_unref(s1);
    graph_unref(s2);
    graph_unref(fa);
    graph_unref(fb);
    graph_unref(x);
    cr_assert_eq(graph_ctx_live_nodes(g), 0);
    graph_ctx_free(g);
}
