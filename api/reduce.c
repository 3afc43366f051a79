/* reduce.c — sum, mean, max, min, argmax, argmin, var and std over axes. */
#include <math.h>
#include <string.h>

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

/* Variance about the mean: sum((x - mean)^2) / (N - correction), the
 * two-pass form (no cancellation of a sum of squares); half types and
 * integers compute in f32, as kiln_mean does. N - correction <= 0 divides by
 * zero, as NumPy and PyTorch do (inf or NaN). */
static kiln_tensor *variance(const char *op, kiln_tensor *t, int naxes, const int *axes,
                             double correction, bool keepdim, bool root) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    uint32_t mask;
    if ((e = api_axes(op, ctx, t->node, naxes, axes, &mask)))
        return e;
    if (!isfinite(correction))
        return api_fail(ctx, KILN_ERR_ARG, "%s: correction %g is not finite", op, correction);
    kiln_dtype dt = t->node->dtype;
    kiln_dtype out = graph_dtype_is_float(dt) ? dt : KILN_F32;
    kiln_dtype acc = out == KILN_F16 || out == KILN_BF16 ? KILN_F32 : out;
    int64_t count = 1;
    int ax[KILN_MAX_DIMS], nax = 0;
    for (int d = 0; d < t->node->ndim; d++)
        if (mask & (1u << d)) {
            count *= t->node->shape[d];
            ax[nax++] = d;
        }
    kiln_scope_begin(ctx);
    kiln_tensor *x = kiln_cast(t, acc);
    kiln_tensor *d = kiln_sub(x, kiln_mean(x, nax, ax, true));
    kiln_tensor *v = api_div_literal(kiln_sum(kiln_mul(d, d), nax, ax, keepdim),
                                     (double)count - correction);
    if (root)
        v = kiln_sqrt(v);
    return api_finish(ctx, kiln_cast(v, out));
}

kiln_tensor *kiln_var(kiln_tensor *t, int naxes, const int *axes, double correction,
                      bool keepdim) {
    return variance("kiln_var", t, naxes, axes, correction, keepdim, false);
}

kiln_tensor *kiln_std(kiln_tensor *t, int naxes, const int *axes, double correction,
                      bool keepdim) {
    return variance("kiln_std", t, naxes, axes, correction, keepdim, true);
}

/* The product over the axes, as a pairwise tree: the reduced elements laid
 * out along a last axis (padded with a one when odd), neighbours multiplied,
 * halving it each pass. Each pass reads the one before twice, so it is its
 * own kernel: ceil(log2 n) kernels and n - 1 multiplications in all, exact
 * for integers (which wrap in i64, as NumPy's prod), rounded like a pairwise
 * sum for floats (half types in f32, rounded once), and differentiable with
 * zeros in the input (no division by x). A dedicated reduction kernel would
 * save the passes' memory traffic; prod is rare enough that this one does
 * not exist yet. */
kiln_tensor *kiln_prod(kiln_tensor *t, int naxes, const int *axes, bool keepdim) {
    const char *op = "kiln_prod";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    const graph_node *a = t->node;
    uint32_t mask;
    if ((e = api_axes(op, ctx, a, naxes, axes, &mask)))
        return e;
    kiln_dtype dt = a->dtype;
    kiln_dtype out = graph_dtype_is_float(dt) ? dt : KILN_I64;
    kiln_dtype acc = out == KILN_F16 || out == KILN_BF16 ? KILN_F32 : out;
    int nd = a->ndim, perm[KILN_MAX_DIMS], nkeep = 0;
    int64_t flat[KILN_MAX_DIMS], res[KILN_MAX_DIMS], n = 1;
    for (int d = 0; d < nd; d++)
        if (!(mask & (1u << d))) {
            flat[nkeep] = a->shape[d];
            perm[nkeep++] = d;
        }
    for (int d = 0, k = nkeep; d < nd; d++)
        if (mask & (1u << d)) {
            perm[k++] = d;
            n *= a->shape[d];
        }
    for (int d = 0; d < nd; d++)
        res[d] = (mask & (1u << d)) ? 1 : a->shape[d];
    flat[nkeep] = n;
    kiln_scope_begin(ctx);
    kiln_tensor *x;
    if (n == 0) { /* the empty product */
        int64_t one[KILN_MAX_DIMS];
        memcpy(one, flat, sizeof(int64_t) * (size_t)nkeep);
        one[nkeep] = 1;
        x = kiln_ones(ctx, acc, nkeep + 1, one);
    } else {
        x = kiln_reshape(kiln_permute(kiln_cast(t, acc), perm), nkeep + 1, flat);
        int64_t pads[2 * KILN_MAX_DIMS] = {0};
        for (int64_t len = n; len > 1; len = (len + 1) / 2) {
            if (len % 2) {
                pads[2 * nkeep + 1] = 1;
                x = kiln_pad(x, pads, 1);
            }
            x = kiln_mul(kiln_slice(x, nkeep, 0, KILN_END, 2), kiln_slice(x, nkeep, 1, KILN_END, 2));
        }
    }
    /* [kept..., 1] back to the reduced shape, then keepdim's or not */
    x = kiln_reshape(x, nd, res);
    if (!keepdim) {
        int64_t kept[KILN_MAX_DIMS];
        memcpy(kept, flat, sizeof(int64_t) * (size_t)nkeep);
        x = kiln_reshape(x, nkeep, kept);
    }
    return api_finish(ctx, kiln_cast(x, out));
}
