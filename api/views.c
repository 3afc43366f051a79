/* views.c — movement ops (reshape, permute, transpose, expand, slice, pad,
 * flip, squeeze, unsqueeze) and cat: argument checks, then graph views. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

#define ENTER(op, t, ctx)                                                                    \
    kiln_ctx *ctx;                                                                           \
    do {                                                                                     \
        kiln_tensor *e_ = api_check(op, 1, &(t), &ctx);                                      \
        if (e_ || !(t))                                                                      \
            return e_;                                                                       \
    } while (0)

kiln_tensor *kiln_reshape(kiln_tensor *t, int ndim, const int64_t *dims) {
    ENTER("kiln_reshape", t, ctx);
    graph_node *a = t->node;
    if (ndim < 0 || ndim > KILN_MAX_DIMS || (ndim && !dims))
        return api_fail(ctx, KILN_ERR_SHAPE, "kiln_reshape: %d dimensions for shape %s", ndim,
                        api_shape_str(a));
    int64_t shp[KILN_MAX_DIMS], known = 1;
    int infer = -1;
    /* Dimensions whose product overflows would wrap to some count, perhaps
     * the input's: refused before anything multiplies them. */
    for (int d = 0; d < ndim; d++)
        shp[d] = dims[d] < 0 ? 1 : dims[d];
    kiln_tensor *e = api_check_shape("kiln_reshape", ctx, ndim, shp);
    if (e)
        return e;
    for (int d = 0; d < ndim; d++) {
        shp[d] = dims[d];
        if (dims[d] == -1 && infer < 0)
            infer = d;
        else if (dims[d] < 0)
            goto bad;
        else
            known *= dims[d];
    }
    int64_t n = graph_numel(a);
    if (infer >= 0) {
        if (known == 0 || n % known != 0)
            goto bad;
        shp[infer] = n / known;
    } else if (known != n) {
        goto bad;
    }
    return api_wrap(ctx, graph_reshape(a, ndim, shp), "kiln_reshape");
bad:;
    char want[KILN_MAX_DIMS * 21 + 3];
    graph_format_shape(want, sizeof want, ndim, dims);
    return api_fail(ctx, KILN_ERR_SHAPE,
                    "kiln_reshape: cannot reshape %s (%lld elements) to %s", api_shape_str(a),
                    (long long)graph_numel(a), want);
}

kiln_tensor *kiln_permute(kiln_tensor *t, const int *perm) {
    ENTER("kiln_permute", t, ctx);
    graph_node *a = t->node;
    int p[KILN_MAX_DIMS];
    uint32_t seen = 0;
    if (a->ndim && !perm)
        return api_fail(ctx, KILN_ERR_ARG, "kiln_permute: perm is NULL for shape %s",
                        api_shape_str(a));
    for (int d = 0; d < a->ndim; d++) {
        if (!api_axis(perm[d], a->ndim, &p[d]) || (seen & (1u << p[d])))
            return api_fail(ctx, KILN_ERR_ARG,
                            "kiln_permute: perm is not a permutation of the %d axes of %s "
                            "(entry %d is %d)",
                            a->ndim, api_shape_str(a), d, perm[d]);
        seen |= 1u << p[d];
    }
    return api_wrap(ctx, graph_permute(a, p), "kiln_permute");
}

kiln_tensor *kiln_transpose(kiln_tensor *t, int axis_a, int axis_b) {
    ENTER("kiln_transpose", t, ctx);
    graph_node *a = t->node;
    int x, y;
    if (!api_axis(axis_a, a->ndim, &x) || !api_axis(axis_b, a->ndim, &y))
        return api_fail(ctx, KILN_ERR_ARG, "kiln_transpose: axes %d and %d for shape %s",
                        axis_a, axis_b, api_shape_str(a));
    int p[KILN_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++)
        p[d] = d;
    p[x] = y;
    p[y] = x;
    return api_wrap(ctx, graph_permute(a, p), "kiln_transpose");
}

kiln_tensor *kiln_expand(kiln_tensor *t, int ndim, const int64_t *dims) {
    ENTER("kiln_expand", t, ctx);
    graph_node *a = t->node;
    int64_t shp[KILN_MAX_DIMS];
    char want[KILN_MAX_DIMS * 21 + 3] = "?";
    if (ndim < a->ndim || ndim > KILN_MAX_DIMS || (ndim && !dims))
        goto bad;
    graph_format_shape(want, sizeof want, ndim, dims);
    int lead = ndim - a->ndim;
    for (int d = 0; d < ndim; d++) {
        int64_t have = d < lead ? 1 : a->shape[d - lead];
        int64_t w = dims[d];
        if (w == -1 && d >= lead)
            w = have;
        if (w < 0 || (have != 1 && have != w))
            goto bad;
        shp[d] = w;
    }
    kiln_tensor *e = api_check_shape("kiln_expand", ctx, ndim, shp); /* [2^32, 2^32] */
    if (e)
        return e;
    return api_wrap(ctx, api_broadcast_to(a, ndim, shp), "kiln_expand");
bad:
    return api_fail(ctx, KILN_ERR_SHAPE, "kiln_expand: cannot broadcast %s to %s",
                    api_shape_str(a), want);
}

/* Python's slice.indices(n): clamps start and stop, returns the length. */
static int64_t slice_indices(int64_t n, int64_t *start, int64_t *stop, int64_t step) {
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
    int64_t s = *start, e = *stop;
    if (s < 0) {
        s = s < -n ? lo : s + n;
    } else if (s > hi) {
        s = hi;
    }
    if (e < 0) {
        e = e < -n ? lo : e + n;
    } else if (e > hi) {
        e = hi;
    }
    *start = s;
    *stop = e;
    if (step > 0)
        return s < e ? (e - s - 1) / step + 1 : 0;
    return e < s ? (s - e - 1) / (-step) + 1 : 0;
}

kiln_tensor *kiln_slice(kiln_tensor *t, int axis, int64_t start, int64_t stop, int64_t step) {
    ENTER("kiln_slice", t, ctx);
    graph_node *a = t->node;
    int ax;
    if (!api_axis(axis, a->ndim, &ax))
        return api_fail(ctx, KILN_ERR_ARG, "kiln_slice: axis %d is out of range for shape %s",
                        axis, api_shape_str(a));
    if (step == 0 || step == INT64_MIN)
        return api_fail(ctx, KILN_ERR_ARG, "kiln_slice: step %lld is not allowed (shape %s)",
                        (long long)step, api_shape_str(a));
    if (stop == KILN_END && step < 0)
        stop = KILN_BEGIN_REV;
    int64_t len = slice_indices(a->shape[ax], &start, &stop, step);
    int64_t st[KILN_MAX_DIMS], sp[KILN_MAX_DIMS], ln[KILN_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        st[d] = 0;
        sp[d] = 1;
        ln[d] = a->shape[d];
    }
    st[ax] = len ? start : 0;
    sp[ax] = step;
    ln[ax] = len;
    return api_wrap(ctx, graph_slice(a, st, sp, ln), "kiln_slice");
}

kiln_tensor *kiln_pad(kiln_tensor *t, const int64_t *pads, double value) {
    ENTER("kiln_pad", t, ctx);
    graph_node *a = t->node;
    if (a->ndim && !pads)
        return api_fail(ctx, KILN_ERR_ARG, "kiln_pad: pads is NULL for shape %s",
                        api_shape_str(a));
    int64_t before[KILN_MAX_DIMS], after[KILN_MAX_DIMS], shp[KILN_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) {
        before[d] = pads[2 * d];
        after[d] = pads[2 * d + 1];
        if (before[d] < 0 || after[d] < 0 || before[d] > INT64_MAX / 4 ||
            after[d] > INT64_MAX / 4)
            return api_fail(ctx, KILN_ERR_ARG,
                            "kiln_pad: padding (%lld, %lld) of axis %d of %s is not allowed",
                            (long long)before[d], (long long)after[d], d, api_shape_str(a));
        shp[d] = a->shape[d] + before[d] + after[d];
    }
    kiln_tensor *bad = api_check_shape("kiln_pad", ctx, a->ndim, shp);
    if (bad)
        return bad;
    graph_node *p = graph_pad(a, before, after);
    if (!p || value == 0.0)
        return api_wrap(ctx, p, "kiln_pad");
    /* A nonzero fill: the padded mask of an all-true tensor selects the data. */
    graph_node *ones = graph_full(ctx->g, KILN_BOOL, a->ndim, a->shape, (graph_scalar){.i = 1});
    graph_node *inside = ones ? graph_pad(ones, before, after) : NULL;
    graph_node *fill = graph_full(ctx->g, a->dtype, a->ndim, shp,
                                  api_scalar(value, a->dtype));
    graph_node *r = inside && fill ? graph_where(inside, p, fill) : NULL;
    graph_unref(ones);
    graph_unref(inside);
    graph_unref(fill);
    graph_unref(p);
    return api_wrap(ctx, r, "kiln_pad");
}

kiln_tensor *kiln_flip(kiln_tensor *t, int naxes, const int *axes) {
    ENTER("kiln_flip", t, ctx);
    uint32_t mask;
    kiln_tensor *e = api_axes("kiln_flip", ctx, t->node, naxes, axes, &mask);
    if (e)
        return e;
    return api_wrap(ctx, graph_flip(t->node, mask), "kiln_flip");
}

kiln_tensor *kiln_squeeze(kiln_tensor *t, int naxes, const int *axes) {
    ENTER("kiln_squeeze", t, ctx);
    graph_node *a = t->node;
    uint32_t mask = 0;
    if (axes) {
        kiln_tensor *e = api_axes("kiln_squeeze", ctx, a, naxes, axes, &mask);
        if (e)
            return e;
        for (int d = 0; d < a->ndim; d++)
            if ((mask & (1u << d)) && a->shape[d] != 1)
                return api_fail(ctx, KILN_ERR_SHAPE,
                                "kiln_squeeze: axis %d of shape %s has size %lld, not 1", d,
                                api_shape_str(a), (long long)a->shape[d]);
    } else {
        for (int d = 0; d < a->ndim; d++)
            if (a->shape[d] == 1)
                mask |= 1u << d;
    }
    int nd = 0;
    int64_t shp[KILN_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++)
        if (!(mask & (1u << d)))
            shp[nd++] = a->shape[d];
    return api_wrap(ctx, graph_reshape(a, nd, shp), "kiln_squeeze");
}

kiln_tensor *kiln_unsqueeze(kiln_tensor *t, int axis) {
    ENTER("kiln_unsqueeze", t, ctx);
    graph_node *a = t->node;
    int ax;
    if (a->ndim >= KILN_MAX_DIMS || !api_axis(axis, a->ndim + 1, &ax))
        return api_fail(ctx, KILN_ERR_ARG, "kiln_unsqueeze: axis %d for shape %s", axis,
                        api_shape_str(a));
    int64_t shp[KILN_MAX_DIMS];
    for (int d = 0, s = 0; d <= a->ndim; d++)
        shp[d] = d == ax ? 1 : a->shape[s++];
    return api_wrap(ctx, graph_reshape(a, a->ndim + 1, shp), "kiln_unsqueeze");
}

kiln_tensor *kiln_cat(int n, kiln_tensor *const *ts, int axis) {
    if (n <= 0 || !ts)
        return NULL;
    kiln_ctx *ctx;
    kiln_tensor *e = api_check("kiln_cat", n, ts, &ctx);
    if (e || !ts[0])
        return e;
    graph_node *first = ts[0]->node;
    int ax;
    if (!api_axis(axis, first->ndim, &ax))
        return api_fail(ctx, KILN_ERR_ARG, "kiln_cat: axis %d is out of range for shape %s",
                        axis, api_shape_str(first));
    kiln_dtype dt = first->dtype;
    for (int i = 1; i < n; i++) {
        graph_node *x = ts[i]->node;
        bool ok = x->ndim == first->ndim;
        for (int d = 0; ok && d < x->ndim; d++)
            ok = d == ax || x->shape[d] == first->shape[d];
        if (!ok)
            return api_fail(ctx, KILN_ERR_SHAPE,
                            "kiln_cat: tensor %d has shape %s, which does not fit %s along "
                            "axis %d",
                            i, api_shape_str(x), api_shape_str(first), axis);
        dt = graph_dtype_promote(dt, x->dtype);
    }
    /* The joined axis's length, checked as it is summed (two [2^62] views
     * would wrap to a negative size). */
    int64_t shp[KILN_MAX_DIMS];
    memcpy(shp, first->shape, sizeof(int64_t) * (size_t)first->ndim);
    bool over = false;
    for (int i = 1; i < n && !over; i++)
        over = __builtin_add_overflow(shp[ax], ts[i]->node->shape[ax], &shp[ax]);
    if (over || (e = api_check_shape("kiln_cat", ctx, first->ndim, shp)) != NULL)
        return e ? e
                 : api_fail(ctx, KILN_ERR_SHAPE,
                            "kiln_cat: %d tensors of shapes like %s joined along axis %d have "
                            "too many elements",
                            n, api_shape_str(first), axis);
    graph_node **srcs = calloc((size_t)n, sizeof *srcs);
    if (!srcs)
        return api_wrap(ctx, NULL, "kiln_cat");
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok = (srcs[i] = graph_cast(ts[i]->node, dt)) != NULL && ok;
    graph_node *r = ok ? (n == 1 ? graph_ref(srcs[0]) : graph_cat(n, srcs, ax)) : NULL;
    for (int i = 0; i < n; i++)
        graph_unref(srcs[i]);
    free(srcs);
    return api_wrap(ctx, r, "kiln_cat");
}
