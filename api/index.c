/* index.c — indexing by an index tensor: kiln_gather and kiln_index_select
 * as GRAPH_GATHER (one load of the index and one of the data per element,
 * fused with the elementwise work around it; its gradient is a scatter-add),
 * and kiln_scatter_add, composed from comparisons with a range, where and
 * sums: along the indexed axis of size K, each of the J source elements of a
 * row is compared with 0..K-1, so the work is J x K per row (one fused
 * reduction kernel, no J x K tensor in memory), quadratic for a long axis,
 * where a scatter kernel would be linear (for later). Indices already
 * computed are checked (an index outside [0, K) is KILN_ERR_ARG naming it);
 * lazily computed ones cannot be checked without a sync, and one outside the
 * range selects nothing (0; scatter_add: adds nothing). */
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

/* [..., J] indices against 0..K-1: a [..., J, K] bool of where each points. */
static kiln_tensor *points(kiln_tensor *idx, int64_t K) {
    kiln_tensor *cols = kiln_arange(kiln_ctx_of(idx), KILN_I64, 0, (double)K, 1);
    return kiln_eq(kiln_unsqueeze(kiln_cast(idx, KILN_I64), -1), cols);
}

/* The sum over axis of vals where hot holds, else 0: with one hit per row
 * exact in any dtype (integer sums run in i64), so cast back to vals'. */
static kiln_tensor *pick_sum(kiln_tensor *hot, kiln_tensor *vals, int axis) {
    kiln_ctx *ctx = kiln_ctx_of(vals);
    kiln_dtype dt = kiln_dtype_of(vals);
    kiln_tensor *z = kiln_where(hot, vals, kiln_scalar(ctx, dt, 0));
    return kiln_cast(kiln_sum(z, 1, &axis, false), dt);
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

/* src cut to the index's shape, its axis ax last, in dt: [..., J]. */
static kiln_tensor *source_rows(kiln_tensor *src, const graph_node *I, int ax, kiln_dtype dt) {
    kiln_tensor *s = src;
    for (int d = 0; d < I->ndim; d++)
        if (src->node->shape[d] != I->shape[d])
            s = kiln_slice(s, d, 0, I->shape[d], 1);
    return kiln_cast(api_axis_last(s, ax, NULL), dt);
}

/* r (t's shape off ax cut to the index's) padded with zeros to t's. */
static kiln_tensor *pad_to(kiln_tensor *r, const graph_node *t, const graph_node *I, int ax) {
    int64_t pads[2 * KILN_MAX_DIMS] = {0};
    bool pad = false;
    for (int d = 0; d < t->ndim; d++)
        if (d != ax && I->shape[d] < t->shape[d]) {
            pads[2 * d + 1] = t->shape[d] - I->shape[d];
            pad = true;
        }
    return pad ? kiln_pad(r, pads, 0) : r;
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
    const graph_node *I = index->node;
    if ((e = check_source(op, ctx, I, src->node)))
        return e;
    int64_t K = t->node->shape[ax];
    kiln_scope_begin(ctx);
    /* the source [..., J] -> [..., J, 1], against [..., J, K] pointers,
     * summed over J: [..., K], added where it belongs (the index covers at
     * most t's sizes off the axis: zeros past them) */
    kiln_tensor *sl = kiln_unsqueeze(source_rows(src, I, ax, kiln_dtype_of(t)), -1);
    kiln_tensor *add = api_axis_back(pick_sum(points(api_axis_last(index, ax, NULL), K), sl, -2), ax);
    return api_finish(ctx, kiln_add(t, pad_to(add, t->node, I, ax)));
}

/* The lowest value of dt: where a masked max puts what no index points at
 * (never seen: the result is masked again by `covered`). */
static double lowest(kiln_dtype dt) {
    switch (dt) {
    case KILN_I8: return -128;
    case KILN_I32: return -2147483648.0;
    case KILN_I64: return -9223372036854775808.0;
    case KILN_U8:
    case KILN_BOOL: return 0;
    default: return -INFINITY;
    }
}

static double highest(kiln_dtype dt) {
    switch (dt) {
    case KILN_I8: return 127;
    case KILN_I32: return 2147483647.0;
    case KILN_I64: return 9223372036854775807.0; /* rounds to 2^63: casts saturate */
    case KILN_U8: return 255;
    case KILN_BOOL: return 1;
    default: return INFINITY;
    }
}

/* kiln_scatter and kiln_scatter_reduce: t with src's elements combined into
 * the places index points at along ax. The pointers are [..., K, J] (each
 * destination against every source element of its row), reduced over J. */
static kiln_tensor *scatter_op(const char *op, kiln_tensor *t, int axis, kiln_tensor *index,
                               kiln_tensor *src, int reduce, bool include_self) {
    kiln_tensor *args[3] = {t, index, src};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 3, args, &ctx);
    if (e || !t || !index || !src)
        return e;
    if (reduce < -1 || reduce > KILN_SCATTER_MEAN)
        return api_fail(ctx, KILN_ERR_ARG, "%s: input %s: unknown reduction %d", op,
                        api_shape_str(t->node), reduce);
    int ax;
    if ((e = check_index(op, ctx, t->node, index->node, axis, &ax)))
        return e;
    const graph_node *I = index->node;
    if ((e = check_source(op, ctx, I, src->node)))
        return e;
    kiln_dtype dt = t->node->dtype;
    int64_t K = t->node->shape[ax], J = I->shape[ax];
    kiln_scope_begin(ctx);
    /* [..., J] -> [..., 1, J] values against [..., K, J] pointers */
    kiln_tensor *sv = kiln_unsqueeze(source_rows(src, I, ax, dt), -2);
    kiln_tensor *hot = kiln_transpose(points(api_axis_last(index, ax, NULL), K), -1, -2);
    int last = -1;
    kiln_tensor *count = kiln_sum(kiln_cast(hot, KILN_I64), 1, &last, false); /* [..., K] */
    kiln_tensor *covered = api_gt_literal(count, 0);
    kiln_tensor *r; /* [..., K]: the combination of what points at each place */
    switch (reduce) {
    case -1: { /* assignment: the last source element in row order wins */
        kiln_tensor *j = kiln_arange(ctx, KILN_I64, 0, (double)J, 1);
        kiln_tensor *at = kiln_max(kiln_where(hot, j, kiln_scalar(ctx, KILN_I64, -1)), 1, &last,
                                   true);
        kiln_tensor *one = kiln_bitwise_and(hot, kiln_eq(j, at));
        r = kiln_cast(kiln_sum(kiln_where(one, sv, kiln_scalar(ctx, dt, 0)), 1, &last, false), dt);
        include_self = false;
        break;
    }
    case KILN_SCATTER_SUM:
    case KILN_SCATTER_MEAN: /* integers in i64 (a u8 mean must not wrap) */
        r = kiln_sum(kiln_where(hot, sv, kiln_scalar(ctx, dt, 0)), 1, &last, false);
        break;
    case KILN_SCATTER_PROD:
        r = kiln_cast(kiln_prod(kiln_where(hot, sv, kiln_scalar(ctx, dt, 1)), 1, &last, false), dt);
        break;
    case KILN_SCATTER_AMAX:
        r = kiln_max(kiln_where(hot, sv, kiln_scalar(ctx, dt, lowest(dt))), 1, &last, false);
        break;
    default:
        r = kiln_min(kiln_where(hot, sv, kiln_scalar(ctx, dt, highest(dt))), 1, &last, false);
        break;
    }
    r = api_axis_back(r, ax);
    count = api_axis_back(count, ax);
    covered = api_axis_back(covered, ax);
    /* the index covers at most t's sizes off the axis: t itself past them */
    r = pad_to(r, t->node, I, ax);
    count = pad_to(count, t->node, I, ax);
    covered = pad_to(covered, t->node, I, ax);
    if (include_self) {
        switch (reduce) {
        case KILN_SCATTER_SUM: r = kiln_add(r, kiln_cast(t, kiln_dtype_of(r))); break;
        case KILN_SCATTER_MEAN:
            r = kiln_add(r, kiln_cast(t, kiln_dtype_of(r)));
            count = api_add_literal(count, 1);
            break;
        case KILN_SCATTER_PROD: r = kiln_mul(r, t); break;
        case KILN_SCATTER_AMAX: r = kiln_maximum(r, t); break;
        default: r = kiln_minimum(r, t); break;
        }
    }
    if (reduce == KILN_SCATTER_MEAN) {
        /* integers divide with floor rounding, as PyTorch's */
        kiln_tensor *n =
            kiln_cast(kiln_maximum(count, kiln_scalar(ctx, KILN_I64, 1)), kiln_dtype_of(r));
        r = graph_dtype_is_float(dt) ? kiln_div(r, n) : kiln_floor_divide(r, n);
    }
    return api_finish(ctx, kiln_where(covered, kiln_cast(r, dt), t));
}

kiln_tensor *kiln_scatter(kiln_tensor *t, int axis, kiln_tensor *index, kiln_tensor *src) {
    return scatter_op("kiln_scatter", t, axis, index, src, -1, false);
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
