/* layout.c — creation and layout ops composed from ranges, comparisons and
 * where: kiln_eye, kiln_linspace, kiln_tril and kiln_triu. Each is one fused
 * kernel with whatever reads it; none materialises an index tensor. */
#include <math.h>

#include "api/api.h"

kiln_tensor *kiln_eye(kiln_ctx *ctx, kiln_dtype dt, int64_t n, int64_t m) {
    if (!ctx)
        return NULL;
    if (!api_valid_dtype(dt))
        return api_fail(ctx, KILN_ERR_DTYPE, "kiln_eye: unknown dtype %d", (int)dt);
    const int64_t dims[2] = {n, m};
    kiln_tensor *bad = api_check_shape("kiln_eye", ctx, 2, dims);
    if (bad)
        return bad;
    kiln_scope_begin(ctx);
    kiln_tensor *rows = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)n, 1), 1);
    kiln_tensor *cols = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)m, 1), 0);
    kiln_tensor *r = kiln_cast(kiln_eq(rows, cols), dt);
    /* an empty side gives arange's empty vector: the shape still says [n, m] */
    if (n == 0 || m == 0)
        r = kiln_zeros(ctx, dt, 2, dims);
    return api_finish(ctx, r);
}

kiln_tensor *kiln_linspace(kiln_ctx *ctx, kiln_dtype dt, double start, double stop, int64_t n) {
    if (!ctx)
        return NULL;
    if (!api_valid_dtype(dt))
        return api_fail(ctx, KILN_ERR_DTYPE, "kiln_linspace: unknown dtype %d", (int)dt);
    if (n < 0 || !isfinite(start) || !isfinite(stop))
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_linspace: %lld points from %g to %g: the count must be >= 0 and "
                        "the bounds finite",
                        (long long)n, start, stop);
    kiln_tensor *bad = api_check_shape("kiln_linspace", ctx, 1, &n);
    if (bad)
        return bad;
    if (n <= 1)
        return n == 0 ? kiln_zeros(ctx, dt, 1, &n) : kiln_full(ctx, dt, 1, &n, start);
    /* start + i step in f64, and the last point exactly stop, as NumPy's */
    double step = (stop - start) / (double)(n - 1);
    kiln_scope_begin(ctx);
    const int64_t one = 1;
    kiln_tensor *parts[2] = {
        api_wrap(ctx, graph_arange(ctx->g, dt, n - 1, start, step), "kiln_linspace"),
        kiln_full(ctx, dt, 1, &one, stop)};
    return api_finish(ctx, kiln_cat(2, parts, 0));
}

/* Keeps the elements of the last two axes with col - row <= k (lower) or
 * >= k (upper), zero elsewhere. */
static kiln_tensor *triangle(const char *op, kiln_tensor *t, int64_t k, bool lower) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int nd = t->node->ndim;
    if (nd < 2)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s needs at least 2 dimensions", op,
                        api_shape_str(t->node));
    int64_t n = t->node->shape[nd - 2], m = t->node->shape[nd - 1];
    kiln_scope_begin(ctx);
    kiln_tensor *rows = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)n, 1), 1);
    kiln_tensor *cols = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)m, 1), 0);
    kiln_tensor *d = kiln_sub(cols, rows);
    kiln_tensor *keep = lower ? kiln_le_scalar(d, (double)k) : kiln_ge_scalar(d, (double)k);
    kiln_tensor *r = n == 0 || m == 0
                         ? t
                         : kiln_where(keep, t, kiln_scalar(ctx, kiln_dtype_of(t), 0));
    return api_finish(ctx, r);
}

kiln_tensor *kiln_tril(kiln_tensor *t, int64_t k) { return triangle("kiln_tril", t, k, true); }
kiln_tensor *kiln_triu(kiln_tensor *t, int64_t k) { return triangle("kiln_triu", t, k, false); }
