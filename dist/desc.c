/* desc.c — a collective's descriptor: made from its graph node, named,
 * checked, and the shape of its result. */
#include <stdio.h>
#include <string.h>

#include "dist/internal.h"
#include "graph/graph.h"

void dist_desc_of(const graph_node *n, dist_desc *d) {
    const graph_node *a = n->src[0];
    memset(d, 0, sizeof *d);
    d->op = n->op == GRAPH_ALL_REDUCE       ? DIST_ALL_REDUCE
            : n->op == GRAPH_ALL_GATHER     ? DIST_ALL_GATHER
            : n->op == GRAPH_REDUCE_SCATTER ? DIST_REDUCE_SCATTER
                                            : DIST_BROADCAST;
    d->reduce = (kiln_reduce_op)n->p.reduce;
    d->root = n->p.root;
    d->axis = n->p.axis;
    d->dtype = a->dtype;
    d->ndim = a->ndim;
    memcpy(d->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
}

static const char *reduce_name(kiln_reduce_op r) {
    switch (r) {
    case KILN_REDUCE_SUM: return "sum";
    case KILN_REDUCE_MEAN: return "mean";
    case KILN_REDUCE_MAX: return "max";
    case KILN_REDUCE_MIN: return "min";
    }
    return "?";
}

void dist_desc_name(const dist_desc *d, char *out, size_t cap) {
    switch (d->op) {
    case DIST_ALL_REDUCE: snprintf(out, cap, "all_reduce(%s)", reduce_name(d->reduce)); return;
    case DIST_ALL_GATHER: snprintf(out, cap, "all_gather(axis %d)", d->axis); return;
    case DIST_REDUCE_SCATTER:
        snprintf(out, cap, "reduce_scatter(%s, axis %d)", reduce_name(d->reduce), d->axis);
        return;
    case DIST_BROADCAST: snprintf(out, cap, "broadcast(root %d)", d->root); return;
    }
    snprintf(out, cap, "collective %d?", (int)d->op);
}

void dist_result_shape(const dist_world *w, const dist_desc *d, int64_t *shape) {
    memcpy(shape, d->shape, sizeof(int64_t) * (size_t)d->ndim);
    if (d->op == DIST_ALL_GATHER)
        shape[d->axis] *= dist_size(w);
    else if (d->op == DIST_REDUCE_SCATTER)
        shape[d->axis] /= dist_size(w);
}

int64_t dist_numel(const dist_desc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++)
        n *= d->shape[i];
    return n;
}

kiln_status dist_check_desc(const dist_world *w, const dist_desc *d, int i, int n,
                            const char *what, char *msg, size_t cap) {
    char why[160] = "";
    int size = dist_size(w);
    if ((unsigned)d->op > DIST_BROADCAST)
        snprintf(why, sizeof why, "op %d is not a collective", (int)d->op);
    else if ((unsigned)d->dtype >= KILN_NUM_DTYPES)
        snprintf(why, sizeof why, "dtype %d is not a kiln_dtype", (int)d->dtype);
    else if (d->ndim < 0 || d->ndim > KILN_MAX_DIMS)
        snprintf(why, sizeof why, "ndim %d is outside [0, %d]", d->ndim, KILN_MAX_DIMS);
    else if ((d->op == DIST_ALL_REDUCE || d->op == DIST_REDUCE_SCATTER) &&
             (unsigned)d->reduce > KILN_REDUCE_MIN)
        snprintf(why, sizeof why, "reduce op %d is not a kiln_reduce_op", (int)d->reduce);
    else if ((d->op == DIST_ALL_REDUCE || d->op == DIST_REDUCE_SCATTER) &&
             d->reduce == KILN_REDUCE_MEAN && !graph_dtype_is_float(d->dtype))
        snprintf(why, sizeof why, "a mean of %s: floating-point dtypes only",
                 graph_dtype_name(d->dtype));
    else if (d->op == DIST_BROADCAST && (d->root < 0 || d->root >= size))
        snprintf(why, sizeof why, "root %d is outside the world's ranks [0, %d)", d->root, size);
    else if ((d->op == DIST_ALL_GATHER || d->op == DIST_REDUCE_SCATTER) &&
             (d->axis < 0 || d->axis >= d->ndim))
        snprintf(why, sizeof why, "axis %d is outside [0, %d)", d->axis, d->ndim);
    if (!why[0]) {
        /* Bytes of the largest buffer a collective makes (an all-gather's
         * result, or an f16 source widened to f32) must fit int64_t. */
        int64_t lim = INT64_MAX / 8 / (d->op == DIST_ALL_GATHER ? size : 1);
        int64_t numel = 1;
        for (int k = 0; k < d->ndim && !why[0]; k++) {
            if (d->shape[k] < 0)
                snprintf(why, sizeof why, "dimension %d is %lld", k, (long long)d->shape[k]);
            else if (d->shape[k] > 0 && numel > lim / d->shape[k])
                snprintf(why, sizeof why, "the shape is too large");
            else
                numel *= d->shape[k];
        }
    }
    if (!why[0] && d->op == DIST_REDUCE_SCATTER && d->shape[d->axis] % size != 0)
        snprintf(why, sizeof why, "axis %d's size %lld does not divide by the world size %d",
                 d->axis, (long long)d->shape[d->axis], size);
    if (!why[0])
        return KILN_OK;
    char name[64];
    dist_desc_name(d, name, sizeof name);
    snprintf(msg, cap, "%s: collective %d of %d, %s: %s", what, i + 1, n, name, why);
    return KILN_ERR_ARG;
}
