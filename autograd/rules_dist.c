/* rules_dist.c — the vector-Jacobian products of the collectives. Every rank
 * differentiates the same graph, so every rank records the same gradient
 * collectives in the same order, which dist/ requires. With y_s the result
 * on rank s and g_s its gradient there:
 *   all_reduce(sum)     x_r's gradient is sum_s g_s: all_reduce(sum) of g;
 *   all_reduce(mean)    (1/N) sum_s g_s: all_reduce(mean) of g;
 *   all_reduce(max/min) sum_s g_s where x_r holds the extreme, split evenly
 *                       between the ranks that tie (as kiln_max splits it);
 *   all_gather          piece r of sum_s g_s: reduce_scatter(sum) of g;
 *   reduce_scatter      the g_s joined: all_gather of g (over N for a mean,
 *                       masked and split as above for max and min);
 *   broadcast(root)     sum_s g_s on the root, zero elsewhere. */
#include "autograd/internal.h"

static graph_node *coll(graph_op op, graph_node *a, int reduce, int axis) {
    const graph_comm *c = a ? graph_ctx_comm(a->g) : NULL;
    graph_node *r = c ? graph_collective(op, a, reduce, axis, 0, c->size) : NULL;
    graph_unref(a);
    return r;
}

static graph_node *cast_take(graph_node *a, kiln_dtype dt) {
    graph_node *r = a ? graph_cast(a, dt) : NULL;
    graph_unref(a);
    return r;
}

/* Where x holds the extreme y (both of x's shape), the share of g (the sum
 * over ranks of the gradient, x's shape) that x gets: g / (how many ranks
 * hold it). */
static graph_node *extreme_share(graph_node *x, graph_node *y, graph_node *g) {
    graph_node *mask = cast_take(autograd_take_binary(GRAPH_EQ, graph_ref(x), y), x->dtype);
    graph_node *count = coll(GRAPH_ALL_REDUCE, graph_ref(mask), KILN_REDUCE_SUM, 0);
    return autograd_take_binary(GRAPH_DIV, autograd_take_binary(GRAPH_MUL, g, mask), count);
}

/* A bool of shape like's: whether this process is rank `root`. Computed from
 * an arange rather than folded to a constant, so that the rule's graph keeps
 * the all-reduce every rank must run, on the ranks whose share is zero too. */
static graph_node *is_rank(const graph_node *like, int rank, int root, int size) {
    graph_node *ranks = graph_arange(like->g, KILN_I32, size, 0, 1);
    int64_t start[1] = {rank}, step[1] = {1}, len[1] = {1};
    graph_node *mine = ranks ? graph_slice(ranks, start, step, len) : NULL;
    graph_unref(ranks);
    graph_node *here = autograd_take_reshape(mine, 0, NULL);
    graph_node *want = graph_const(like->g, KILN_I32, (graph_scalar){.i = root});
    int64_t ones[KILN_MAX_DIMS];
    for (int d = 0; d < like->ndim; d++)
        ones[d] = 1;
    graph_node *eq = autograd_take_reshape(autograd_take_binary(GRAPH_EQ, here, want),
                                           like->ndim, ones);
    graph_node *r = eq ? graph_expand(eq, like->shape) : NULL;
    graph_unref(eq);
    return r;
}

graph_node *autograd_collective_vjp(graph_node *n, graph_node *g) {
    const graph_comm *c = graph_ctx_comm(n->g);
    if (!c)
        return NULL;
    graph_node *x = n->src[0];
    int axis = n->p.axis, reduce = n->p.reduce;
    bool extreme = reduce == KILN_REDUCE_MAX || reduce == KILN_REDUCE_MIN;
    switch (n->op) {
    case GRAPH_ALL_REDUCE:
        if (!extreme)
            return coll(GRAPH_ALL_REDUCE, graph_ref(g), reduce, 0);
        return extreme_share(x, graph_ref(n), coll(GRAPH_ALL_REDUCE, graph_ref(g),
                                                   KILN_REDUCE_SUM, 0));
    case GRAPH_ALL_GATHER:
        return coll(GRAPH_REDUCE_SCATTER, graph_ref(g), KILN_REDUCE_SUM, axis);
    case GRAPH_REDUCE_SCATTER: {
        graph_node *all = coll(GRAPH_ALL_GATHER, graph_ref(g), 0, axis);
        if (reduce == KILN_REDUCE_MEAN)
            return autograd_take_binary(GRAPH_DIV, all, autograd_full(x, c->size));
        if (!extreme)
            return all;
        return extreme_share(x, coll(GRAPH_ALL_GATHER, graph_ref(n), 0, axis), all);
    }
    case GRAPH_BROADCAST:
        return autograd_take_where(is_rank(x, c->rank, n->p.root, c->size),
                                   coll(GRAPH_ALL_REDUCE, graph_ref(g), KILN_REDUCE_SUM, 0),
                                   autograd_full(x, 0));
    default:
        return NULL;
    }
}
