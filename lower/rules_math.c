/* rules_math.c — float ops as primitives, in f32 or f64 (half types compute
 * in f32 and are rounded by the driver). Each rule states its error bound
 * in ulp of the result's dtype, for primitives that are correctly rounded
 * except exp2/log2/sin/cos, whose error (e2, l2: at most 1 ulp with glibc and
 * LLVM's libm calls, 2 ulp for CUDA's exp2f) adds as stated; tests/rules_test.c
 * measures them. */
#include "lower/rules.h"

#define LN2 0.69314718055994530942

static int sign_of(ir_builder *b, kiln_dtype dt, int x) {
    kiln_dtype it = rules_bits_type(dt);
    int64_t sign = dt == KILN_F64 ? INT64_MIN : INT32_MIN;
    return rules_p2(b, PRIM_AND, it, rules_p1(b, PRIM_BITCAST, it, x), rules_i(b, it, sign));
}

/* |v| carrying the sign bits s (from sign_of). */
static int with_sign(ir_builder *b, kiln_dtype dt, int v, int s) {
    kiln_dtype it = rules_bits_type(dt);
    return rules_p1(b, PRIM_BITCAST, dt, rules_p2(b, PRIM_OR, it, rules_p1(b, PRIM_BITCAST, it, v), s));
}

/* exp is a primitive (lower.h says why): bound e (libm's, below 1 ulp). */
static int exp_rule(ir_builder *b, kiln_dtype dt, int x) { return rules_p1(b, PRIM_EXP, dt, x); }

/* log(x) = log2(x) * ln 2: unlike exp, no reduction is needed, as a relative
 * error of log2's result stays relative through one multiplication, near 1
 * as well (log2 is accurate there). Special values are log2's: -inf at ±0,
 * NaN below 0. Bound: l2 + 0.5 ulp (measured: f32 1.28, f64 1.45 ulp). */
static int log_rule(ir_builder *b, kiln_dtype dt, int x) {
    return rules_p2(b, PRIM_MUL, dt, rules_p1(b, PRIM_LOG2, dt, x), rules_f(b, dt, LN2));
}

/* tanh(|x|) = m / (m + 2) with m = expm1(2|x|) by Kahan's trick
 * (u = exp(y); u == 1 ? y : (u - 1) y / log u, whose errors cancel), so
 * that it stays accurate near 0; 1 beyond 20 (where 1 - tanh < 2^-57); the
 * sign of x put back on the bits (tanh(-0) = -0). Bound: 4 ulp (measured:
 * f32 2.56, f64 2.49 ulp). */
static int tanh_rule(ir_builder *b, kiln_dtype dt, int x) {
    int y = rules_p1(b, PRIM_ABS, dt, x);
    int y2 = rules_p2(b, PRIM_ADD, dt, y, y);
    int u = exp_rule(b, dt, y2);
    int one = rules_f(b, dt, 1.0);
    int m = rules_p2(b, PRIM_DIV, dt,
                     rules_p2(b, PRIM_MUL, dt, rules_p2(b, PRIM_SUB, dt, u, one), y2), log_rule(b, dt, u));
    m = rules_sel(b, dt, rules_test(b, PRIM_EQ, u, one), y2, m);
    int t = rules_p2(b, PRIM_DIV, dt, m, rules_p2(b, PRIM_ADD, dt, m, rules_f(b, dt, 2.0)));
    t = rules_sel(b, dt, rules_test(b, PRIM_LT, rules_f(b, dt, 20.0), y), one, t);
    return with_sign(b, dt, t, sign_of(b, dt, x));
}

/* sigmoid(x): e = exp(-|x|), never overflowing; 1 / (1 + e) for x >= 0,
 * e / (1 + e) below. Bound: e2 + 2 ulp (measured: f32 1.83, f64 1.74 ulp). */
static int sigmoid_parts(ir_builder *b, kiln_dtype dt, int x, int *e, int *d, int *pos) {
    *e = exp_rule(b, dt, rules_p1(b, PRIM_NEG, dt, rules_p1(b, PRIM_ABS, dt, x)));
    *d = rules_p2(b, PRIM_ADD, dt, rules_f(b, dt, 1.0), *e);
    *pos = rules_test(b, PRIM_LE, rules_f(b, dt, 0.0), x);
    return rules_sel(b, dt, *pos, rules_p2(b, PRIM_DIV, dt, rules_f(b, dt, 1.0), *d),
                     rules_p2(b, PRIM_DIV, dt, *e, *d));
}

/* silu(x) = x / (1 + e) for x >= 0 (and NaN), x e / (1 + e) below. Far
 * left e = exp(x) is subnormal while x e is not, so x e is formed as
 * (x h) h with h = exp(x / 2), normal there; -0 where h underflows (so that
 * -inf gives -0, not -inf * 0). Bound: 4 ulp (measured: f32 3.75,
 * f64 3.75 ulp). */
static int silu_rule(ir_builder *b, kiln_dtype dt, int x) {
    int e, d, pos;
    sigmoid_parts(b, dt, x, &e, &d, &pos);
    int first = rules_test(b, PRIM_OR, pos, rules_test(b, PRIM_NE, x, x));
    int h = exp_rule(b, dt, rules_p2(b, PRIM_MUL, dt, x, rules_f(b, dt, 0.5)));
    int xe = rules_p2(b, PRIM_MUL, dt, rules_p2(b, PRIM_MUL, dt, x, h), h);
    int neg = rules_p2(b, PRIM_DIV, dt, xe, d);
    neg = rules_sel(b, dt, rules_test(b, PRIM_EQ, h, rules_f(b, dt, 0.0)), rules_f(b, dt, -0.0), neg);
    return rules_sel(b, dt, first, rules_p2(b, PRIM_DIV, dt, x, d), neg);
}

/* gelu(x) = x/2 erfc(-x/sqrt 2), the erf form, with -0 where erfc underflows
 * (as graph/'s definition has it, so that -inf gives -0, not -inf * 0). In
 * the tail erfc(z) falls like exp(-z^2), so z's own rounding would cost
 * 2 z^2 half-ulps (about 700 ulp at z = 26): f32 computes in f64, where that
 * is far below an f32 ulp, and f64 carries z as hi + lo (1/sqrt 2 split in
 * two, the product's error by fma) and corrects erfc(hi) by its derivative,
 * -lo 2/sqrt(pi) exp(-hi^2). Bound: erfc's (glibc: 5 ulp in f64) plus 2 ulp
 * in f64, 1 ulp in f32 (measured: f64 2.67, f32 0.5 ulp). */
static int gelu_rule(ir_builder *b, kiln_dtype dt, int x) {
    if (dt != KILN_F64)
        return rules_cast(b, KILN_F64, dt, gelu_rule(b, KILN_F64, rules_cast(b, dt, KILN_F64, x)));
    int nx = rules_p1(b, PRIM_NEG, dt, x), chi = rules_f(b, dt, 0.7071067811865476);
    int hi = rules_p2(b, PRIM_MUL, dt, nx, chi);
    int lo = ir_prim(b, PRIM_FMA, dt, nx, chi, rules_p1(b, PRIM_NEG, dt, hi));
    lo = ir_prim(b, PRIM_FMA, dt, nx, rules_f(b, dt, -4.833646656726457e-17), lo);
    lo = rules_sel(b, dt, rules_test(b, PRIM_NE, lo, lo), rules_f(b, dt, 0.0), lo); /* x = ±inf */
    int d = rules_p1(b, PRIM_EXP, dt, rules_p1(b, PRIM_NEG, dt, rules_p2(b, PRIM_MUL, dt, hi, hi)));
    d = rules_p2(b, PRIM_MUL, dt, rules_p2(b, PRIM_MUL, dt, lo, rules_f(b, dt, 1.1283791670955126)), d);
    int c = rules_p2(b, PRIM_SUB, dt, rules_p1(b, PRIM_ERFC, dt, hi), d);
    int v = rules_p2(b, PRIM_MUL, dt, rules_p2(b, PRIM_MUL, dt, rules_f(b, dt, 0.5), x), c);
    return rules_sel(b, dt, rules_test(b, PRIM_EQ, c, rules_f(b, dt, 0.0)), rules_f(b, dt, -0.0), v);
}

int rules_float(ir_builder *b, graph_op op, kiln_dtype dt, int x, int y) {
    switch (op) {
    case GRAPH_NEG:
        return rules_p1(b, PRIM_NEG, dt, x);
    case GRAPH_ABS:
        return rules_p1(b, PRIM_ABS, dt, x);
    case GRAPH_SQRT:
        return rules_p1(b, PRIM_SQRT, dt, x);
    case GRAPH_SIN:
        return rules_p1(b, PRIM_SIN, dt, x);
    case GRAPH_COS:
        return rules_p1(b, PRIM_COS, dt, x);
    case GRAPH_ADD:
        return rules_p2(b, PRIM_ADD, dt, x, y);
    case GRAPH_SUB:
        return rules_p2(b, PRIM_SUB, dt, x, y);
    case GRAPH_MUL:
        return rules_p2(b, PRIM_MUL, dt, x, y);
    case GRAPH_DIV:
        return rules_p2(b, PRIM_DIV, dt, x, y);
    case GRAPH_MAXIMUM:
        return rules_p2(b, PRIM_MAX, dt, x, y);
    case GRAPH_MINIMUM:
        return rules_p2(b, PRIM_MIN, dt, x, y);
    case GRAPH_RECIP: /* correctly rounded: 0.5 ulp (measured 0.5) */
        return rules_p2(b, PRIM_DIV, dt, rules_f(b, dt, 1.0), x);
    case GRAPH_RSQRT: /* two roundings: 1.5 ulp (measured: f32 1.41, f64 1.48) */
        return rules_p2(b, PRIM_DIV, dt, rules_f(b, dt, 1.0), rules_p1(b, PRIM_SQRT, dt, x));
    case GRAPH_RELU: { /* exact; NaN kept, -0 to +0 */
        int keep = rules_test(b, PRIM_OR, rules_test(b, PRIM_LT, rules_f(b, dt, 0.0), x),
                              rules_test(b, PRIM_NE, x, x));
        return rules_sel(b, dt, keep, x, rules_f(b, dt, 0.0));
    }
    case GRAPH_EXP:
        return exp_rule(b, dt, x);
    case GRAPH_LOG:
        return log_rule(b, dt, x);
    case GRAPH_TANH:
        return tanh_rule(b, dt, x);
    case GRAPH_SIGMOID: {
        int e, d, pos;
        return sigmoid_parts(b, dt, x, &e, &d, &pos);
    }
    case GRAPH_SILU:
        return silu_rule(b, dt, x);
    case GRAPH_GELU:
        return gelu_rule(b, dt, x);
    case GRAPH_POW:
        return rules_p2(b, PRIM_POW, dt, x, y);
    default:
        /* an op with no float rule: left as it is, so that the renderer
         * refuses the kernel by name */
        return ir_alu(b, op, dt, x, y);
    }
}
