/* scan.c — cumulative ops along one axis: kiln_cumsum, kiln_cumprod,
 * kiln_cummax, kiln_cummin and kiln_logcumsumexp, as Hillis-Steele scans.
 * After pass k every element has combined the 2^(k+1) elements ending at it:
 * a pass combines the previous one with itself shifted by 2^k along the axis
 * (a padded view whose new elements are the combine's identity), so
 * ceil(log2 n) passes compute the scan. Each pass is one kernel (a value read
 * twice is materialised rather than recomputed), and the work is n log n
 * against a sequential scan's n: the price of a composition that every
 * executor, autograd and fusion already handle, paid where scans are rare
 * and short (a scan kernel kind is the way to go faster). Gradients come from
 * the passes' own rules: a sum's is exact; cummax and cummin split a tie's
 * gradient between the tied elements, as kiln_maximum does. */
#include <math.h>
#include <stdint.h>

#include "api/api.h"

typedef enum scan_kind { SCAN_SUM, SCAN_PROD, SCAN_MAX, SCAN_MIN, SCAN_LOGSUMEXP } scan_kind;

/* The value that leaves a sum, product or log-sum unchanged. Max and min
 * need none: they are idempotent, so where no element lies 2^k before, the
 * element itself stands in (no infinity or integer extreme per dtype). */
static double identity(scan_kind k) {
    return k == SCAN_SUM ? 0 : k == SCAN_PROD ? 1 : -INFINITY;
}

static kiln_tensor *combine(scan_kind k, kiln_tensor *a, kiln_tensor *b) {
    switch (k) {
    case SCAN_SUM: return kiln_add(a, b);
    case SCAN_PROD: return kiln_mul(a, b);
    case SCAN_MAX: return kiln_maximum(a, b);
    case SCAN_MIN: return kiln_minimum(a, b);
    default: return kiln_logaddexp(a, b);
    }
}

static kiln_tensor *scan(const char *op, scan_kind k, kiln_tensor *t, int axis) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int nd = t->node->ndim, ax;
    if (nd == 0)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: a 0-d tensor has no axis %d", op, axis);
    if ((e = api_one_axis(op, ctx, t->node, axis, &ax)))
        return e;
    kiln_dtype dt = t->node->dtype;
    /* as NumPy and PyTorch: integer sums and products in i64, log-sums in a float */
    if ((k == SCAN_SUM || k == SCAN_PROD) && !graph_dtype_is_float(dt))
        dt = KILN_I64;
    if (k == SCAN_LOGSUMEXP && !graph_dtype_is_float(dt))
        dt = KILN_F32;
    kiln_scope_begin(ctx);
    kiln_tensor *x = kiln_cast(t, dt);
    int64_t n = t->node->shape[ax];
    int64_t pads[2 * KILN_MAX_DIMS] = {0};
    bool idempotent = k == SCAN_MAX || k == SCAN_MIN;
    kiln_tensor *all = idempotent ? kiln_full(ctx, KILN_BOOL, nd, t->node->shape, 1) : NULL;
    for (int64_t shift = 1; shift < n; shift *= 2) {
        pads[2 * ax] = shift;
        kiln_tensor *before =
            kiln_slice(kiln_pad(x, pads, idempotent ? 0 : identity(k)), ax, 0, n, 1);
        if (idempotent)
            before = kiln_where(kiln_slice(kiln_pad(all, pads, 0), ax, 0, n, 1), before, x);
        x = combine(k, before, x);
    }
    return api_finish(ctx, x);
}

kiln_tensor *kiln_cumsum(kiln_tensor *t, int axis) { return scan("kiln_cumsum", SCAN_SUM, t, axis); }
kiln_tensor *kiln_cumprod(kiln_tensor *t, int axis) {
    return scan("kiln_cumprod", SCAN_PROD, t, axis);
}
kiln_tensor *kiln_cummax(kiln_tensor *t, int axis) { return scan("kiln_cummax", SCAN_MAX, t, axis); }
kiln_tensor *kiln_cummin(kiln_tensor *t, int axis) { return scan("kiln_cummin", SCAN_MIN, t, axis); }
kiln_tensor *kiln_logcumsumexp(kiln_tensor *t, int axis) {
    return scan("kiln_logcumsumexp", SCAN_LOGSUMEXP, t, axis);
}
