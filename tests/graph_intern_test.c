/* graph_intern_test.c — graph/node.c's hash-consing: the same op on the same
 * sources is one node, however many nodes the table holds and however many
 * were removed from it before (open addressing with backward-shift removal:
 * a wrong shift loses a live node or leaves a freed one findable, which
 * ASan then reports); nodes with more sources than fit inline. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "graph/graph.h"

enum { N = 20000 };

static graph_node *konst(graph_ctx *g, int64_t v) {
    graph_scalar s = {.i = v};
    graph_node *n = graph_const(g, KILN_I64, s);
    cr_assert(n);
    return n;
}

Test(graph_intern, survivors_stay_findable_through_removals) {
    graph_ctx *g = graph_ctx_new();
    cr_assert(g);
    graph_node **nodes = calloc(N, sizeof *nodes);
    cr_assert(nodes);
    for (int i = 0; i < N; i++)
        nodes[i] = konst(g, i * 7919 % 100003);
    cr_assert_eq(graph_ctx_live_nodes(g), N);
    /* every node is found again, and is the one made first */
    for (int i = 0; i < N; i++) {
        graph_node *again = konst(g, i * 7919 % 100003);
        cr_assert_eq(again, nodes[i], "constant %d interned twice", i);
        graph_unref(again);
    }
    /* drop about two thirds, in a scattered order */
    uint64_t state = 12345;
    bool *dropped = calloc(N, sizeof *dropped);
    cr_assert(dropped);
    for (int i = 0; i < N; i++) {
        state = state * 6364136223846793005u + 1442695040888963407u;
        if ((state >> 33) % 3) {
            graph_unref(nodes[i]);
            nodes[i] = NULL;
            dropped[i] = true;
        }
    }
    int64_t live = 0;
    for (int i = 0; i < N; i++)
        live += !dropped[i];
    cr_assert_eq(graph_ctx_live_nodes(g), live);
    for (int i = 0; i < N; i++) {
        graph_node *again = konst(g, i * 7919 % 100003);
        if (dropped[i]) {
            /* a new node: the old one is gone from the table */
            cr_assert_eq(again->refs, 1, "dropped constant %d still interned", i);
            nodes[i] = again;
        } else {
            cr_assert_eq(again, nodes[i], "surviving constant %d lost", i);
            cr_assert_eq(again->refs, 2);
            graph_unref(again);
        }
    }
    cr_assert_eq(graph_ctx_live_nodes(g), N);
    for (int i = 0; i < N; i++)
        graph_unref(nodes[i]);
    cr_assert_eq(graph_ctx_live_nodes(g), 0);
    free(nodes);
    free(dropped);
    graph_ctx_free(g);
}

Test(graph_intern, ops_on_the_same_sources_are_one_node) {
    graph_ctx *g = graph_ctx_new();
    const int64_t shape[2] = {3, 5};
    graph_buffer *b = graph_buffer_new(15 * sizeof(float));
    graph_node *x = graph_buffer_node(g, KILN_F32, 2, shape, b);
    graph_node *y = graph_buffer_node(g, KILN_F32, 2, shape, b);
    graph_buffer_unref(b);
    cr_assert(x && y && x != y, "buffer nodes are never shared");
    graph_node *s1 = graph_binary(GRAPH_MUL, x, y), *s2 = graph_binary(GRAPH_MUL, x, y);
    graph_node *s3 = graph_binary(GRAPH_MUL, y, x), *d = graph_binary(GRAPH_SUB, x, y);
    cr_assert_eq(s1, s2);
    cr_assert_neq(s1, s3, "sources in another order are another node");
    cr_assert_neq(s1, d);
    /* a cat of five sources holds them outside the node */
    graph_node *srcs[5] = {x, y, s1, s3, d};
    graph_node *c1 = graph_cat(5, srcs, 0), *c2 = graph_cat(5, srcs, 0);
    cr_assert(c1);
    cr_assert_eq(c1, c2);
    cr_assert_eq(c1->nsrc, 5);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(c1->src[i], srcs[i]);
    cr_assert_eq(c1->shape[0], 15);
    graph_node *t1 = graph_permute(x, (const int[]){1, 0}), *t2 = graph_permute(x, (const int[]){1, 0});
    cr_assert_eq(t1, t2);
    cr_assert_neq(t1, x);
    graph_node *all[] = {x, y, s1, s2, s3, d, c1, c2, t1, t2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        graph_unref(all[i]);
    cr_assert_eq(graph_ctx_live_nodes(g), 0);
    graph_ctx_free(g);
}

/* Collects n and everything it reads from into seen (a live node's
 * sources are live). */
static void reach(graph_node *n, graph_node **seen, int *nseen, int cap) {
    for (int i = 0; i < *nseen; i++)
        if (seen[i] == n)
            return;
    cr_assert_lt(*nseen, cap);
    seen[(*nseen)++] = n;
    for (int i = 0; i < n->nsrc; i++)
        reach(n->src[i], seen, nseen, cap);
}

/* A node made from a source nothing was made from before skips the table (it
 * waits as that source's pending node): random ops over random live nodes,
 * made, made again, dropped in any order, realized and cut from their
 * sources, each make checked against every live node searched by brute
 * force. A pending node not found again fails here; a freed one found, under
 * ASan. */
Test(graph_intern, first_consumers_kept_beside_the_table_stay_findable) {
    enum { POOL = 48, STEPS = 20000, SEEN = 4096 };
    graph_ctx *g = graph_ctx_new();
    const int64_t shape[1] = {4};
    graph_buffer *b = graph_buffer_new(4 * sizeof(float));
    graph_node **seen = malloc(SEEN * sizeof *seen);
    cr_assert(g && b && seen);
    graph_node *held[POOL]; /* one reference each */
    int nheld = 0;
    graph_node *leaves[4];
    for (int i = 0; i < 4; i++)
        cr_assert((leaves[i] = graph_buffer_node(g, KILN_F32, 1, shape, b)));
    graph_buffer_unref(b);
    uint64_t state = 99;
#define NEXT() (state = state * 6364136223846793005u + 1442695040888963407u, (int)(state >> 33))
    int found = 0, fresh = 0;
    for (int step = 0; step < STEPS; step++) {
        int r = NEXT() % 8;
        if (r < 5 || nheld < 2) {
            if (nheld == POOL)
                continue;
            /* sources among the few newest nodes and the leaves, so that ops
             * repeat often */
            int few = nheld < 3 ? nheld : 3;
            graph_node *pa = few && NEXT() % 3 ? held[nheld - 1 - NEXT() % few] : leaves[NEXT() % 2];
            graph_node *pb = few && NEXT() % 3 ? held[nheld - 1 - NEXT() % few] : leaves[NEXT() % 2];
            graph_op op = NEXT() % 2 ? GRAPH_ADD : GRAPH_MUL;
            int nseen = 0;
            for (int i = 0; i < nheld; i++)
                reach(held[i], seen, &nseen, SEEN);
            graph_node *want = NULL;
            for (int i = 0; i < nseen; i++)
                if (seen[i]->op == op && seen[i]->src[0] == pa && seen[i]->src[1] == pb)
                    want = seen[i];
            graph_node *n = graph_binary(op, pa, pb);
            cr_assert(n);
            if (want) {
                cr_assert_eq(n, want, "step %d: a live %s not found again", step,
                             graph_op_name(op));
                found++;
            } else {
                cr_assert_eq(n->refs, 1, "step %d: a %s found that is not live", step,
                             graph_op_name(op));
                fresh++;
            }
            held[nheld++] = n;
        } else if (r < 7) {
            int i = NEXT() % nheld;
            graph_node *n = held[i];
            held[i] = held[--nheld];
            graph_unref(n);
        } else {
            /* realized and cut from its sources: it leaves hash-consing */
            graph_node *n = held[NEXT() % nheld];
            if (!n->buf) {
                cr_assert((n->buf = graph_buffer_new(4 * sizeof(float))));
                graph_forget_sources(n);
            }
        }
    }
#undef NEXT
    cr_log_info("%d found again, %d made fresh", found, fresh);
    cr_assert_gt(found, 300, "only %d found again", found);
    cr_assert_gt(fresh, 1000, "only %d made fresh", fresh);
    while (nheld)
        graph_unref(held[--nheld]);
    for (int i = 0; i < 4; i++)
        graph_unref(leaves[i]);
    cr_assert_eq(graph_ctx_live_nodes(g), 0);
    free(seen);
    graph_ctx_free(g);
}

/* graph_full's memo (node.c) holds recent fulls without a reference: it must
 * give the node the table would, lose a node when it dies (ASan reports a
 * freed one given out), and never mix dtypes, values or shapes. */
Test(graph_intern, fulls_of_one_value_are_one_node_while_alive) {
    graph_ctx *g = graph_ctx_new();
    const int64_t s34[2] = {3, 4}, s43[2] = {4, 3};
    graph_scalar f = {.f = 2.5}, i2 = {.i = 2}, f2 = {.f = 2.0};
    graph_node *a = graph_full(g, KILN_F32, 2, s34, f), *b = graph_full(g, KILN_F32, 2, s34, f);
    graph_node *c = graph_full(g, KILN_F32, 2, s43, f), *d = graph_full(g, KILN_F64, 2, s34, f);
    graph_node *e = graph_full(g, KILN_I32, 2, s34, i2), *h = graph_full(g, KILN_F32, 2, s34, f2);
    cr_assert(a && c && d && e && h);
    cr_assert_eq(a, b);
    cr_assert(a != c && a != d && a != e && a != h && c != d && e != h);
    graph_scalar v;
    cr_assert(graph_const_value(e, &v) && v.i == 2 && e->dtype == KILN_I32);
    cr_assert(graph_const_value(h, &v) && v.f == 2.0 && h->dtype == KILN_F32);
    graph_node *all[6] = {a, b, c, d, e, h};
    for (int i = 0; i < 6; i++)
        graph_unref(all[i]);
    cr_assert_eq(graph_ctx_live_nodes(g), 0);
    /* asked again after they died: new nodes, and the memo gives them again */
    graph_node *a2 = graph_full(g, KILN_F32, 2, s34, f), *b2 = graph_full(g, KILN_F32, 2, s34, f);
    cr_assert(a2 && a2 == b2);
    cr_assert(graph_const_value(a2, &v) && v.f == 2.5);
    graph_unref(a2);
    graph_unref(b2);
    /* more values alive than the memo holds: each still one node */
    enum { M = 200 };
    graph_node *many[M];
    for (int i = 0; i < M; i++) {
        graph_scalar x = {.f = i * 0.25};
        cr_assert(many[i] = graph_full(g, KILN_F32, 2, s34, x));
    }
    for (int i = M - 1; i >= 0; i--) {
        graph_scalar x = {.f = i * 0.25};
        graph_node *again = graph_full(g, KILN_F32, 2, s34, x);
        cr_assert_eq(again, many[i], "value %d: another node", i);
        graph_unref(again);
    }
    for (int i = 0; i < M; i += 2)
        graph_unref(many[i]);
    for (int i = 0; i < M; i++) {
        graph_scalar x = {.f = i * 0.25};
        graph_node *again = graph_full(g, KILN_F32, 2, s34, x);
        cr_assert(again && graph_const_value(again, &v) && v.f == i * 0.25);
        if (i % 2)
            cr_assert_eq(again, many[i]);
        graph_unref(again);
    }
    for (int i = 1; i < M; i += 2)
        graph_unref(many[i]);
    cr_assert_eq(graph_ctx_live_nodes(g), 0);
    graph_ctx_free(g);
}
