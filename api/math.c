/* math.c — the elementwise ops beyond the basic arithmetic: rounding, the
 * rest of libm, remainders and divisions, bitwise ops and shifts (one graph
 * op each), and sign, logaddexp, trunc_divide and isclose (compositions of
 * those, each one fused kernel). Dtype rules and NaN behaviour are in kiln.h. */
#include <math.h>

#include "api/api.h"

/* ---- one graph op each ---- */

#define KEEP(name, gop, dts)                                                                       \
    kiln_tensor *kiln_##name(kiln_tensor *t) { return api_unary("kiln_" #name, gop, t, dts); }

KEEP(floor, GRAPH_FLOOR, API_ANY)
KEEP(ceil, GRAPH_CEIL, API_ANY)
KEEP(trunc, GRAPH_TRUNC, API_ANY)
KEEP(round, GRAPH_ROUND, API_ANY)
KEEP(tan, GRAPH_TAN, API_FLOAT)
KEEP(asin, GRAPH_ASIN, API_FLOAT)
KEEP(acos, GRAPH_ACOS, API_FLOAT)
KEEP(atan, GRAPH_ATAN, API_FLOAT)
KEEP(sinh, GRAPH_SINH, API_FLOAT)
KEEP(cosh, GRAPH_COSH, API_FLOAT)
KEEP(asinh, GRAPH_ASINH, API_FLOAT)
KEEP(acosh, GRAPH_ACOSH, API_FLOAT)
KEEP(atanh, GRAPH_ATANH, API_FLOAT)
KEEP(erf, GRAPH_ERF, API_FLOAT)
KEEP(erfc, GRAPH_ERFC, API_FLOAT)
KEEP(expm1, GRAPH_EXPM1, API_FLOAT)
KEEP(log1p, GRAPH_LOG1P, API_FLOAT)
KEEP(bitwise_not, GRAPH_BITNOT, API_BITS)

#define BINARY(name, gop, dts)                                                                     \
    kiln_tensor *kiln_##name(kiln_tensor *a, kiln_tensor *b) {                                     \
        return api_binary("kiln_" #name, gop, a, b, dts);                                          \
    }

BINARY(atan2, GRAPH_ATAN2, API_FLOAT)
BINARY(copysign, GRAPH_COPYSIGN, API_FLOAT)
BINARY(fmod, GRAPH_FMOD, API_NUMBER)
BINARY(mod, GRAPH_MOD, API_NUMBER)
BINARY(bitwise_and, GRAPH_BITAND, API_BITS)
BINARY(bitwise_or, GRAPH_BITOR, API_BITS)
BINARY(bitwise_xor, GRAPH_BITXOR, API_BITS)
BINARY(shift_left, GRAPH_SHL, API_INTEGER)
BINARY(shift_right, GRAPH_SHR, API_INTEGER)

/* ---- compositions ---- */

/* The context of the n arguments when they are usable, else NULL with *err
 * the handle to return. */
static kiln_ctx *usable(const char *op, int n, kiln_tensor *a, kiln_tensor *b,
                        kiln_tensor **err) {
    kiln_tensor *args[2] = {a, b};
    kiln_ctx *ctx = NULL;
    *err = api_check(op, n, args, &ctx);
    return *err ? NULL : ctx;
}

kiln_tensor *kiln_sign(kiln_tensor *t) {
    kiln_tensor *e;
    kiln_ctx *ctx = usable("kiln_sign", 1, t, NULL, &e);
    if (!ctx)
        return e;
    kiln_dtype dt = t->node->dtype;
    if (dt == KILN_BOOL)
        return api_wrap(ctx, graph_ref(t->node), "kiln_sign");
    kiln_scope_begin(ctx);
    /* x itself where it is neither above nor below 0: 0, -0 and NaN */
    kiln_tensor *r = kiln_where(api_gt_literal(t, 0), kiln_scalar(ctx, dt, 1),
                                dt == KILN_U8 ? t
                                              : kiln_where(api_lt_literal(t, 0),
                                                           kiln_scalar(ctx, dt, -1), t));
    return api_finish(ctx, r);
}

kiln_tensor *kiln_logaddexp(kiln_tensor *a, kiln_tensor *b) {
    kiln_tensor *e;
    kiln_ctx *ctx = usable("kiln_logaddexp", 2, a, b, &e);
    if (!ctx)
        return e;
    kiln_dtype dt = graph_dtype_promote(a->node->dtype, b->node->dtype);
    if (!graph_dtype_is_float(dt))
        dt = KILN_F32;
    kiln_scope_begin(ctx);
    kiln_tensor *x = kiln_cast(a, dt), *y = kiln_cast(b, dt);
    /* a - b is NaN only for equal infinities (or a NaN, which maximum passes
     * on anyway): there the difference is 0 and the result max + log 2. At
     * a = b, |a - b|'s zero gradient leaves maximum's tie to halve g. */
    kiln_tensor *d = kiln_sub(x, y);
    d = kiln_where(kiln_ne(d, d), kiln_scalar(ctx, dt, 0), d);
    kiln_tensor *r = kiln_add(kiln_maximum(x, y), kiln_log1p(kiln_exp(kiln_neg(kiln_abs(d)))));
    return api_finish(ctx, r);
}

/* The float dtype a division computes in: f32 for the half types, whose
 * quotient rounded to 8 or 11 bits before floor or trunc would land on the
 * wrong integer about once in 2^8 (PyTorch computes them in f32 too). */
static kiln_dtype divide_dtype(kiln_dtype dt) {
    return dt == KILN_F16 || dt == KILN_BF16 ? KILN_F32 : dt;
}

kiln_tensor *kiln_floor_divide(kiln_tensor *a, kiln_tensor *b) {
    kiln_tensor *e;
    kiln_ctx *ctx = usable("kiln_floor_divide", 2, a, b, &e);
    if (!ctx)
        return e;
    kiln_dtype dt = graph_dtype_promote(a->node->dtype, b->node->dtype);
    if (!graph_dtype_is_float(dt))
        return api_binary("kiln_floor_divide", GRAPH_DIV, a, b, API_NUMBER);
    kiln_scope_begin(ctx);
    kiln_dtype ct = divide_dtype(dt);
    kiln_tensor *x = kiln_cast(a, ct), *y = kiln_cast(b, ct);
    /* floor(a / b) would take the quotient's rounding: 1 / 0.1 rounds to 10
     * though the true quotient is below it. (a - fmod(a, b)) / b is within
     * half an ulp of an integer, one too high where fmod's sign is not b's;
     * rounding that to the nearest integer gives the floor. A zero divisor
     * gives a / b (±inf or NaN), as PyTorch's. */
    kiln_tensor *m = kiln_fmod(x, y);
    kiln_tensor *q = kiln_div(kiln_sub(x, m), y);
    kiln_tensor *zero = kiln_scalar(ctx, ct, 0);
    kiln_tensor *past = kiln_bitwise_and(kiln_ne(m, zero),
                                         kiln_bitwise_xor(kiln_lt(m, zero), kiln_lt(y, zero)));
    q = kiln_where(past, api_sub_literal(q, 1), q);
    kiln_tensor *f = kiln_floor(q);
    f = kiln_where(api_gt_literal(kiln_sub(q, f), 0.5), api_add_literal(f, 1), f);
    kiln_tensor *d = kiln_div(x, y);
    /* a zero quotient keeps the sign of a / b */
    f = kiln_where(kiln_eq(f, zero), kiln_copysign(zero, d), f);
    f = kiln_where(kiln_eq(y, zero), d, f);
    return api_finish(ctx, kiln_cast(f, dt));
}

kiln_tensor *kiln_trunc_divide(kiln_tensor *a, kiln_tensor *b) {
    kiln_tensor *e;
    kiln_ctx *ctx = usable("kiln_trunc_divide", 2, a, b, &e);
    if (!ctx)
        return e;
    kiln_dtype dt = graph_dtype_promote(a->node->dtype, b->node->dtype);
    if (dt == KILN_BOOL)
        return api_binary("kiln_trunc_divide", GRAPH_DIV, a, b, API_NUMBER);
    kiln_scope_begin(ctx);
    if (graph_dtype_is_float(dt)) {
        kiln_dtype ct = divide_dtype(dt);
        return api_finish(ctx, kiln_cast(kiln_trunc(kiln_div(kiln_cast(a, ct), kiln_cast(b, ct))), dt));
    }
    /* floor division, one up where it rounded down past zero: a remainder
     * with a's sign that is nonzero, and operands of different signs */
    kiln_tensor *q = kiln_div(a, b);
    kiln_tensor *r = kiln_fmod(a, b);
    kiln_tensor *differ = kiln_bitwise_xor(api_lt_literal(a, 0), api_lt_literal(b, 0));
    kiln_tensor *up = kiln_bitwise_and(api_ne_literal(r, 0), differ);
    return api_finish(ctx, kiln_add(q, kiln_cast(up, dt)));
}

kiln_tensor *kiln_isclose(kiln_tensor *a, kiln_tensor *b, double rtol, double atol,
                          bool equal_nan) {
    kiln_tensor *e;
    kiln_ctx *ctx = usable("kiln_isclose", 2, a, b, &e);
    if (!ctx)
        return e;
    if (!(rtol >= 0) || !(atol >= 0))
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_isclose: %s and %s: rtol %g and atol %g must be non-negative",
                        api_shape_str(a->node), api_shape_str(b->node), rtol, atol);
    kiln_dtype dt = graph_dtype_promote(a->node->dtype, b->node->dtype);
    kiln_scope_begin(ctx);
    if (!graph_dtype_is_float(dt))
        dt = KILN_F64; /* integers compare exactly in f64 up to 2^53, as NumPy's */
    kiln_tensor *x = kiln_cast(a, dt), *y = kiln_cast(b, dt);
    /* equal values first (inf with inf), then the tolerance, which an
     * infinity never meets (inf - inf is NaN, inf <= inf is false there) */
    kiln_tensor *tol = api_add_literal(api_mul_literal(kiln_abs(y), rtol), atol);
    kiln_tensor *d = kiln_abs(kiln_sub(x, y));
    kiln_tensor *finite = api_lt_literal(kiln_abs(y), INFINITY);
    kiln_tensor *r = kiln_bitwise_or(kiln_eq(x, y), kiln_bitwise_and(finite, kiln_le(d, tol)));
    if (equal_nan)
        r = kiln_bitwise_or(r, kiln_bitwise_and(kiln_ne(x, x), kiln_ne(y, y)));
    return api_finish(ctx, r);
}
