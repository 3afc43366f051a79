/* index.c — indexing by an index tensor: kiln_gather and kiln_index_select
 * as GRAPH_GATHER (one load of the index and one of the data per element,
 * fused with the elementwise work around it; its gradient is a scatter-add),
 * and kiln_scatter_add, kiln_scatter and kiln_scatter_reduce as GRAPH_SCATTER:
 * t copied, then each source element combined into the place its index
 * names, in order, J steps per row along the axis (one kernel whose rows run
 * in parallel; a mean is a scatter of sums and one of counts). Indices
 * already computed are checked (an index outside [0, K) is KILN_ERR_ARG
 * naming it); lazily computed ones cannot be checked without a sync, and one
 * outside the range selects nothing (0; the scatters: writes nothing). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

/* Checks an index for axis ax of t, shaped like t except that on ax its size
 * is free and elsewhere at most t's (PyTorch's gather and scatter rule). */
static kiln_tensor *check_index(const char *op, kiln_ctx *ctx, const graph_node *t,
                                const graph_node *idx, int axis, int *ax) {
    if (!api_index_dtype(idx->dtype))
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: index %s is %s; it must be i32, i64 or u8", op,
                        api_shape_str(idx), kiln_dtype_name(idx->dtype));
    kiln_tensor *e = api_one_axis(op, ctx, t, axis, ax);
    if (e)
        return e;
    bool fits = idx->ndim == t->ndim && t->ndim + 1 <= KILN_MAX_DIMS;
    for (int d = 0; fits && d < t->ndim; d++)
        fits = d == *ax || idx->shape[d] <= t->shape[d];
    if (!fits)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "%s: index %s does not fit input %s along axis %d: it needs the input's "
                        "dimensions, each at most the input's size except on the axis",
                        op, api_shape_str(idx), api_shape_str(t), axis);
    return api_check_indices(ctx, op, idx, 0, t->shape[*ax], "index", t, NULL);
}

kiln_tensor *kiln_gather(kiln_tensor *t, int axis, kiln_tensor *index) {
    const char *op = "kiln_gather";
    kiln_tensor *args[2] = {t, index};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 2, args, &ctx);
    if (e || !t || !index)
        return e;
    int ax;
    if ((e = check_index(op, ctx, t->node, index->node, axis, &ax)))
        return e;
    return api_wrap(ctx, graph_gather(t->node, ax, index->node), op);
}

kiln_tensor *kiln_index_select(kiln_tensor *t, int axis, kiln_tensor *index) {
    const char *op = "kiln_index_select";
    kiln_tensor *args[2] = {t, index};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 2, args, &ctx);
    if (e || !t || !index)
        return e;
    int ax;
    if (index->node->ndim != 1)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: index %s is not a vector", op,
                        api_shape_str(index->node));
    if ((e = api_one_axis(op, ctx, t->node, axis, &ax)))
        return e;
    /* checked here: the broadcast view kiln_gather gets holds no data itself */
    if (api_index_dtype(index->node->dtype) &&
        (e = api_check_indices(ctx, op, index->node, 0, t->node->shape[ax], "index", t->node,
                               NULL)))
        return e;
    /* the vector along the axis, broadcast over the other dimensions */
    int nd = t->node->ndim;
    int64_t line[KILN_MAX_DIMS], full[KILN_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        line[d] = d == ax ? index->node->shape[0] : 1;
        full[d] = d == ax ? index->node->shape[0] : t->node->shape[d];
    }
    kiln_scope_begin(ctx);
    kiln_tensor *wide = kiln_expand(kiln_reshape(index, nd, line), nd, full);
    kiln_tensor *r = kiln_gather(t, ax, wide);
    if (kiln_error(r) != KILN_OK) {
        kiln_keep(r);
        kiln_scope_end(ctx);
        return api_fail(ctx, kiln_error(r), "%s: %s", op, kiln_error_message(r));
    }
    return api_finish(ctx, r);
}

/* The scatters' checks of src against the index (at least its shape). */
static kiln_tensor *check_source(const char *op, kiln_ctx *ctx, const graph_node *I,
                                 const graph_node *S) {
    bool fits = S->ndim == I->ndim;
    for (int d = 0; fits && d < I->ndim; d++)
        fits = S->shape[d] >= I->shape[d];
    return fits ? NULL
                : api_fail(ctx, KILN_ERR_SHAPE, "%s: source %s is smaller than index %s", op,
                           api_shape_str(S), api_shape_str(I));
}

/* GRAPH_SCATTER of src into t (inside the caller's scope): src cut to the
 * index's shape in t's dtype, and where the index is smaller than t off the
 * axis both padded to t's sizes, the index with -1 (cast to i64 first so
 * that -1 exists), which writes nothing. */
static kiln_tensor *scatter_node(const char *op, kiln_tensor *t, int ax, kiln_tensor *index,
                                 kiln_tensor *src, int reduce, bool include_self) {
    kiln_ctx *ctx = kiln_ctx_of(t);
    const graph_node *T = t->node, *I = index->node;
    kiln_tensor *s = src, *i = index;
    for (int d = 0; d < I->ndim; d++)
        if (src->node->shape[d] != I->shape[d])
            s = kiln_slice(s, d, 0, I->shape[d], 1);
    s = kiln_cast(s, kiln_dtype_of(t));
    int64_t pads[2 * KILN_MAX_DIMS] = {0};
    bool pad = false;
    for (int d = 0; d < T->ndim; d++)
        if (d != ax && I->shape[d] < T->shape[d]) {
            pads[2 * d + 1] = T->shape[d] - I->shape[d];
            pad = true;
        }
    if (pad) {
        i = kiln_pad(kiln_cast(index, KILN_I64), pads, -1);
        s = kiln_pad(s, pads, 0);
    }
    if (kiln_error(i) != KILN_OK)
        return i;
    if (kiln_error(s) != KILN_OK)
        return s;
    return api_wrap(ctx, graph_scatter(t->node, ax, i->node, s->node, reduce, include_self), op);
}

kiln_tensor *kiln_scatter_add(kiln_tensor *t, int axis, kiln_tensor *index, kiln_tensor *src) {
    const char *op = "kiln_scatter_add";
    kiln_tensor *args[3] = {t, index, src};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 3, args, &ctx);
    if (e || !t || !index || !src)
        return e;
    int ax;
    if ((e = check_index(op, ctx, t->node, index->node, axis, &ax)))
        return e;
    if ((e = check_source(op, ctx, index->node, src->node)))
        return e;
    kiln_scope_begin(ctx);
    return api_finish(ctx, scatter_node(op, t, ax, index, src, KILN_SCATTER_SUM, true));
}

/* kiln_scatter and kiln_scatter_reduce: one GRAPH_SCATTER, except the mean:
 * a scatter of sums (integers in i64, so that a u8 mean does not wrap;
 * halves in f32) over one of counts. */
static kiln_tensor *scatter_op(const char *op, kiln_tensor *t, int axis, kiln_tensor *index,
                               kiln_tensor *src, int reduce, bool include_self) {
    kiln_tensor *args[3] = {t, index, src};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 3, args, &ctx);
    if (e || !t || !index || !src)
        return e;
    if (reduce < GRAPH_SCATTER_ASSIGN || reduce > KILN_SCATTER_MEAN)
        return api_fail(ctx, KILN_ERR_ARG, "%s: input %s: unknown reduction %d", op,
                        api_shape_str(t->node), reduce);
    int ax;
    if ((e = check_index(op, ctx, t->node, index->node, axis, &ax)))
        return e;
    const graph_node *I = index->node;
    if ((e = check_source(op, ctx, I, src->node)))
        return e;
    kiln_scope_begin(ctx);
    if (reduce != KILN_SCATTER_MEAN)
        return api_finish(ctx, scatter_node(op, t, ax, index, src, reduce, include_self));
    kiln_dtype dt = t->node->dtype;
    bool fl = graph_dtype_is_float(dt);
    kiln_dtype wide = !fl ? KILN_I64 : dt == KILN_F16 || dt == KILN_BF16 ? KILN_F32 : dt;
    kiln_tensor *sum = scatter_node(op, kiln_cast(t, wide), ax, index, kiln_cast(src, wide),
                                    KILN_SCATTER_SUM, include_self);
    kiln_tensor *ones = kiln_ones(ctx, KILN_I64, I->ndim, I->shape);
    kiln_tensor *base = kiln_full(ctx, KILN_I64, t->node->ndim, t->node->shape, include_self);
    kiln_tensor *count = scatter_node(op, base, ax, index, ones, KILN_SCATTER_SUM, true);
    /* nothing points at a place: its sum is t's value, over 1 */
    kiln_tensor *n = kiln_cast(api_maximum_literal(count, 1), wide);
    kiln_tensor *r = fl ? kiln_div(sum, n) : kiln_floor_divide(sum, n);
    return api_finish(ctx, kiln_cast(r, dt));
}

kiln_tensor *kiln_scatter(kiln_tensor *t, int axis, kiln_tensor *index, kiln_tensor *src) {
    return scatter_op("kiln_scatter", t, axis, index, src, GRAPH_SCATTER_ASSIGN, false);
}

kiln_tensor *kiln_scatter_reduce(kiln_tensor *t, int axis, kiln_tensor *index, kiln_tensor *src,
                                 kiln_scatter_reduction reduce, bool include_self) {
    return scatter_op("kiln_scatter_reduce", t, axis, index, src, (int)reduce, include_self);
}

kiln_tensor *kiln_index(kiln_tensor *t, int axis, kiln_tensor *index) {
    const char *op = "kiln_index";
    kiln_tensor *args[2] = {t, index};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 2, args, &ctx);
    if (e || !t || !index)
        return e;
    int ax;
    const graph_node *T = t->node, *I = index->node;
    if (!api_index_dtype(I->dtype))
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: index %s is %s; it must be i32, i64 or u8", op,
                        api_shape_str(I), kiln_dtype_name(I->dtype));
    if ((e = api_one_axis(op, ctx, T, axis, &ax)))
        return e;
    if (T->ndim - 1 + I->ndim > KILN_MAX_DIMS)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s indexed by %s on axis %d has more than %d dimensions",
                        op, api_shape_str(T), api_shape_str(I), axis, KILN_MAX_DIMS);
    int64_t K = T->shape[ax];
    /* NumPy's rule: negatives count from the end */
    if ((e = api_check_indices(ctx, op, I, -K, K, "index", T, NULL)))
        return e;
    int64_t n = graph_numel(I), shape[KILN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < ax; d++)
        shape[nd++] = T->shape[d];
    for (int d = 0; d < I->ndim; d++)
        shape[nd++] = I->shape[d];
    for (int d = ax + 1; d < T->ndim; d++)
        shape[nd++] = T->shape[d];
    kiln_scope_begin(ctx);
    kiln_tensor *flat = kiln_cast(kiln_reshape(index, 1, &n), KILN_I64);
    /* negatives count from the end */
    flat = kiln_where(api_lt_literal(flat, 0), api_add_literal(flat, (double)K), flat);
    return api_finish(ctx, kiln_reshape(kiln_index_select(t, ax, flat), nd, shape));
}
