/* reduce.c — sum, mean, max, min, argmax and argmin over axes. */
#include "api/api.h"

/* Drops the reduced axes (which the graph keeps with size 1) unless keepdim. */
static graph_node *finish_shape(graph_node *r, uint32_t mask, bool keepdim) {
    if (keepdim || !r)
        return r;
    int nd = 0;
    int64_t shp[KILN_MAX_DIMS];
    for (int d = 0; d < r->ndim; d++)
        if (!(mask & (1u << d)))
            shp[nd++] = r->shape[d];
    graph_node *v = graph_reshape(r, nd, shp);
    graph_unref(r);
    return v;
}

static kiln_tensor *reduce(const char *op, graph_op gop, kiln_tensor *t, int naxes,
                           const int *axes, bool keepdim) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    graph_node *a = t->node;
    uint32_t mask;
    if ((e = api_axes(op, ctx, a, naxes, axes, &mask)))
        return e;
    if (gop != GRAPH_SUM) {
        for (int d = 0; d < a->ndim; d++)
            if ((mask & (1u << d)) && a->shape[d] == 0)
                return api_fail(ctx, KILN_ERR_SHAPE,
                                "%s: cannot reduce axis %d of size 0 (shape %s): the "
                                "reduction has no identity",
                                op, d, api_shape_str(a));
    }
    kiln_dtype out = a->dtype;
    if (gop == GRAPH_SUM && !graph_dtype_is_float(a->dtype))
        out = KILN_I64;
    if (gop == GRAPH_ARGMAX || gop == GRAPH_ARGMIN)
        out = KILN_I64;
    graph_node *in = gop == GRAPH_SUM ? graph_cast(a, out) : graph_ref(a);
    graph_node *r = in ? graph_reduce(gop, in, mask, out) : NULL;
    graph_unref(in);
    return api_wrap(ctx, finish_shape(r, mask, keepdim), op);
}

kiln_tensor *kiln_sum(kiln_tensor *t, int naxes, const int *axes, bool keepdim) {
    return reduce("kiln_sum", GRAPH_SUM, t, naxes, axes, keepdim);
}
kiln_tensor *kiln_max(kiln_tensor *t, int naxes, const int *axes, bool keepdim) {
    return reduce("kiln_max", GRAPH_RMAX, t, naxes, axes, keepdim);
}
kiln_tensor *kiln_min(kiln_tensor *t, int naxes, const int *axes, bool keepdim) {
    return reduce("kiln_min", GRAPH_RMIN, t, naxes, axes, keepdim);
}
kiln_tensor *kiln_argmax(kiln_tensor *t, int naxes, const int *axes, bool keepdim) {
    return reduce("kiln_argmax", GRAPH_ARGMAX, t, naxes, axes, keepdim);
}
kiln_tensor *kiln_argmin(kiln_tensor *t, int naxes, const int *axes, bool keepdim) {
    return reduce("kiln_argmin", GRAPH_ARGMIN, t, naxes, axes, keepdim);
}

kiln_tensor *kiln_mean(kiln_tensor *t, int naxes, const int *axes, bool keepdim) {
    const char *op = "kiln_mean";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    graph_node *a = t->node;
    uint32_t mask;
    if ((e = api_axes(op, ctx, a, naxes, axes, &mask)))
        return e;
    /* Half types accumulate in f32 and round once at the end. */
    kiln_dtype out = graph_dtype_is_float(a->dtype) ? a->dtype : KILN_F32;
    kiln_dtype acc = (out == KILN_F16 || out == KILN_BF16) ? KILN_F32 : out;
    int64_t count = 1;
    for (int d = 0; d < a->ndim; d++)
        if (mask & (1u << d))
            count *= a->shape[d];
    graph_node *in = graph_cast(a, acc);
    graph_node *s = in ? graph_reduce(GRAPH_SUM, in, mask, acc) : NULL;
    graph_node *n = s ? graph_full(ctx->g, acc, s->ndim, s->shape,
                                   graph_scalar_from_double((double)count, acc))
                      : NULL;
    graph_node *m = n ? graph_binary(GRAPH_DIV, s, n) : NULL;
    graph_node *r = m ? graph_cast(m, out) : NULL;
    graph_unref(in);
    graph_unref(s);
    graph_unref(n);
    graph_unref(m);
    return api_wrap(ctx, finish_shape(r, mask, keepdim), op);
}
