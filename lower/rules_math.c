/* rules_math.c — float ops as primitives, in f32 or f64 (half types compute
 * in f32 and are rounded by the driver). Each rule states its error bound
 * in ulp of the result's dtype, for primitives that are correctly rounded
 * except exp2/log2/sin/cos, whose error (e2, l2: at most 1 ulp with glibc and
 * LLVM's libm calls, 2 ulp for CUDA's exp2f) adds as stated; tests/rules_test.c
 * measures them. */
#include <float.h>
#include <math.h>

#include "lower/rules.h"

#define LN2 0.69314718055994530942
/* ln 2 in two f32 parts: the high one's 15 bits times any f32 exponent (8
 * bits with its sign) are exact, so n ln 2 = n hi + n lo loses nothing in
 * the first product (exp's reduction, log's k ln 2). */
#define LN2_HI_F32 0.693145751953125
#define LN2_LO_F32 1.428606765330187e-06

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

static int f(ir_builder *b, double v) { return rules_f(b, KILN_F32, v); }
static int add(ir_builder *b, int x, int y) { return rules_p2(b, PRIM_ADD, KILN_F32, x, y); }
static int mul(ir_builder *b, int x, int y) { return rules_p2(b, PRIM_MUL, KILN_F32, x, y); }
static int fma3(ir_builder *b, int x, int y, int z) { return ir_prim(b, PRIM_FMA, KILN_F32, x, y, z); }

/* c[0] + x (c[1] + x (c[2] + ...)) in f32, by fma. */
static int horner(ir_builder *b, int x, const double *c, int n) {
    int p = f(b, c[n - 1]);
    for (int i = n - 2; i >= 0; i--)
        p = fma3(b, p, x, f(b, c[i]));
    return p;
}

/* min(x, hi) for f32 x, NaN giving hi: one compare and one select, where
 * PRIM_MIN's NaN-propagating form takes two of each; for a caller whose
 * result carries a NaN x by other means. */
static int below(ir_builder *b, int x, double hi) {
    return rules_sel(b, KILN_F32, rules_test(b, PRIM_LT, x, f(b, hi)), x, f(b, hi));
}

/* The constant that rounds x / ln 2 to an integer n by one fma (1.5 2^23:
 * its ulp is 1) and leaves n + 127 + bias in the low mantissa bits of the
 * sum, so that those bits shifted into the exponent field are 2^(n + bias)
 * (for n + 127 + bias in [1, 254]). */
static int exp_magic(ir_builder *b, double bias) { return f(b, 0x1.8p23 + 127 + bias); }

/* e^(x + xl) = e^r 2^n for x in f32's finite range, xl a small low part
 * (|xl| well below ulp(x); -1 for none): j = x / ln 2 + magic (exp_magic's,
 * or a select of two), n = j - magic, r = x - n ln 2 + xl by fma against
 * ln 2 in two parts (|r| <= ln 2 / 2), and e^r, returned, by a degree-6
 * polynomial fitted here to e^r's relative error (3.1e-9 with its
 * coefficients in f32 and the first two 1; the degree-7 Taylor series it
 * replaces reached 6e-9 with one fma more). *scale is 2^(n + bias), from
 * j's bits: no floor and no float-to-integer cast (which needed NaN kept
 * away from it); the multiplying by it is the caller's. exp_reduce stops
 * at r (tanh takes e^r - 1 from it). */
static int exp_reduce(ir_builder *b, int x, int xl, int magic, int *scale) {
    int j = fma3(b, x, f(b, 1.44269504088896341), magic);
    int n = rules_p2(b, PRIM_SUB, KILN_F32, j, magic);
    int r = fma3(b, rules_p1(b, PRIM_NEG, KILN_F32, n), f(b, LN2_HI_F32), x);
    r = fma3(b, rules_p1(b, PRIM_NEG, KILN_F32, n), f(b, LN2_LO_F32), r);
    if (xl >= 0)
        r = add(b, r, xl);
    *scale = rules_p1(b, PRIM_BITCAST, KILN_F32,
                      rules_p2(b, PRIM_SHL, KILN_I32, rules_p1(b, PRIM_BITCAST, KILN_I32, j),
                               rules_i(b, KILN_I32, 23)));
    return r;
}

static int exp_f32_reduced(ir_builder *b, int x, int xl, int magic, int *scale) {
    static const double fit[] = {1.0, 1.0, 0x1.fffffcp-2, 0x1.555492p-3, 0x1.5558acp-5, 0x1.12397ep-7,
                                 0x1.6a5186p-10};
    return horner(b, exp_reduce(b, x, xl, magic, scale), fit, 7);
}

/* the f32 just above ln 2^-126 = -87.3365447...: e^x at the f32 below it
 * is subnormal, which every clamped lane would then compute */
#define EXP_LEAST_NORMAL_F32 (-0x1.5d589ep+6)

/* Where e^x falls below f32's least normal, 2^-126 (x < ln 2^-126), the
 * f32 rules return +0 rather than the subnormal: an operation whose result
 * is subnormal takes a microcode assist per lane on x86 (no flush-to-zero
 * is set: kiln leaves its caller's floating-point state alone), as does
 * every later one that reads it. A softmax over rows of N(0, 30^2) took
 * 47.7 ms where N(0, 1) took 5.6 (4096 x 4096), and fused attention whose
 * scores spread past 87 36 ms where 4.6 (b8 h8 s256 d64): most of their
 * e^(s - max) were subnormals, and so were the products that read them.
 * The flushed values are below 1.2e-38, which no sum of such terms with
 * its largest, e^0 = 1, can show. The input is clamped to the threshold
 * first, so that lanes past it compute a normal value the select drops. */
static int flush_below_normal(ir_builder *b, int x, int e) {
    return rules_sel(b, KILN_F32, rules_test(b, PRIM_LT, x, f(b, EXP_LEAST_NORMAL_F32)),
                     f(b, 0.0), e);
}

/* e^-y in f32 for y >= 0 or NaN (sigmoid's and silu's e^-|x|): exp_f32
 * without its overflow side: y is clamped to -ln 2^-126, and the result is
 * e^r 2^(n+64) 2^-64, or +0 past the clamp (flush_below_normal). A NaN y
 * flows through as NaN. */
static int exp_nonpos_f32(ir_builder *b, int y) {
    int yc = rules_p2(b, PRIM_MIN, KILN_F32, y, f(b, -EXP_LEAST_NORMAL_F32));
    int ny = rules_p1(b, PRIM_NEG, KILN_F32, yc);
    int scale, p = exp_f32_reduced(b, ny, -1, exp_magic(b, 64), &scale);
    return flush_below_normal(b, rules_p1(b, PRIM_NEG, KILN_F32, y),
                              mul(b, mul(b, p, scale), f(b, 0x1p-64)));
}

/* e^x in f32 from primitives that every target vectorises (no libm call).
 * x is clamped to [ln 2^-126, 89], below which the result is +0
 * (flush_below_normal) and past whose top e^x rounds to inf as it does
 * there; below 0 e^r 2^(n+64) 2^-64, above e^r 2^(n-1) 2 (2^n itself has
 * no exponent field at n = 128, and e^88.7 is finite). NaN flows through
 * the clamps, the arithmetic and the flush's test (false on NaN). 35
 * operations before, about 20 now (two floors, two casts, six selects
 * gone). Bound: 2 ulp where e^x is normal (measured in tests/rules_test.c
 * through exp, tanh, sigmoid and silu). */
static int exp_f32(ir_builder *b, int x) {
    int xc = rules_p2(b, PRIM_MIN, KILN_F32,
                      rules_p2(b, PRIM_MAX, KILN_F32, x, f(b, EXP_LEAST_NORMAL_F32)), f(b, 89.0));
    /* The two sides (x's sign bit set: bias 64 and 2^-64; clear: bias -1
     * and 2) are chosen by a mask of x's sign bit, not by two selects on
     * x < 0: gcc threaded the selects on one condition into two copies of
     * everything between them, e^r's polynomial and its reduction twice
     * per element, blended (row softmax 4096^2 on the Zen 3 EPYC: the
     * e^x pass was 56 instructions a vector). The magics' bits differ by
     * their biases' 65 (both in [2^23, 2^24), where an ulp is 1); 2 and
     * 2^-64 by 0x20800000. -0 takes the negative side: e^0 either way. */
    int sbit = rules_p2(b, PRIM_SHR, KILN_I32, rules_p1(b, PRIM_BITCAST, KILN_I32, x),
                        rules_i(b, KILN_I32, 31));
    int mask = rules_p2(b, PRIM_SUB, KILN_I32, rules_i(b, KILN_I32, 0), sbit);
    int magic = rules_p1(b, PRIM_BITCAST, KILN_F32,
                         rules_p2(b, PRIM_ADD, KILN_I32,
                                  rules_p1(b, PRIM_BITCAST, KILN_I32, exp_magic(b, -1)),
                                  rules_p2(b, PRIM_AND, KILN_I32, mask, rules_i(b, KILN_I32, 65))));
    int side = rules_p1(b, PRIM_BITCAST, KILN_F32,
                        rules_p2(b, PRIM_SUB, KILN_I32, rules_i(b, KILN_I32, 0x40000000),
                                 rules_p2(b, PRIM_AND, KILN_I32, mask,
                                          rules_i(b, KILN_I32, 0x20800000))));
    int scale, p = exp_f32_reduced(b, xc, -1, magic, &scale);
    return flush_below_normal(b, x, mul(b, mul(b, p, scale), side));
}

/* exp: the rule above in f32; in f64 the primitive (libm's, below 1 ulp),
 * until an f64 polynomial has been measured against it. */
static int exp_rule(ir_builder *b, kiln_dtype dt, int x) {
    return dt == KILN_F32 ? exp_f32(b, x) : rules_p1(b, PRIM_EXP, dt, x);
}

/* ln x in f32 from primitives that every target vectorises (libm's logf
 * kept a loop scalar). x = 2^k m with m in [sqrt 1/2, sqrt 2), from x's
 * bits (x's subnormals scaled by 2^23 first): the bits plus 1 - sqrt 1/2's
 * bits carry into the exponent field exactly where m passes sqrt 2, so k is
 * that field less 127 and m's bits are the sum's mantissa plus sqrt 1/2's.
 * Then with f = m - 1 (exact), s = f / (2 + f), z = s^2 and hf = f^2 / 2,
 * ln m = 2 atanh s = f - (hf - s (hf + R)), R = z (2/3 + z (2/5 + z (2/7 +
 * z 2/9))) the atanh series past its first term (truncated at 4e-9 of R,
 * which is at most 1/50 of f), so that f itself, exact, carries the result
 * and the rounded parts are small beside it; k ln 2 in two parts
 * (LN2_HI_F32). Specials by selects after: 0 gives -inf, a
 * negative x or NaN NaN, +inf +inf. Bound: 2 ulp (measured in
 * tests/rules_test.c). */
static int log_f32(ir_builder *b, int x) {
    int tiny = rules_test(b, PRIM_LT, x, f(b, FLT_MIN));
    int xs = rules_sel(b, KILN_F32, tiny, mul(b, x, f(b, 0x1p23)), x);
    int kadj = rules_sel(b, KILN_F32, tiny, f(b, -23.0), f(b, 0.0));
    int sum = rules_p2(b, PRIM_ADD, KILN_I32, rules_p1(b, PRIM_BITCAST, KILN_I32, xs),
                       rules_i(b, KILN_I32, 0x3f800000 - 0x3f3504f3));
    int k = rules_p2(b, PRIM_SUB, KILN_I32,
                     rules_p2(b, PRIM_SHR, KILN_I32, sum, rules_i(b, KILN_I32, 23)),
                     rules_i(b, KILN_I32, 127));
    int kf = add(b, rules_p1(b, PRIM_CAST, KILN_F32, k), kadj);
    int m = rules_p1(b, PRIM_BITCAST, KILN_F32,
                     rules_p2(b, PRIM_ADD, KILN_I32,
                              rules_p2(b, PRIM_AND, KILN_I32, sum, rules_i(b, KILN_I32, 0x7fffff)),
                              rules_i(b, KILN_I32, 0x3f3504f3)));
    int fm = rules_p2(b, PRIM_SUB, KILN_F32, m, f(b, 1.0));
    int s = rules_p2(b, PRIM_DIV, KILN_F32, fm, add(b, fm, f(b, 2.0)));
    int z = mul(b, s, s);
    static const double series[] = {2.0 / 3, 2.0 / 5, 2.0 / 7, 2.0 / 9};
    int r = mul(b, z, horner(b, z, series, 4));
    int hf = mul(b, mul(b, fm, fm), f(b, 0.5));
    /* t = s (hf + R) + k ln2_lo; ln x = k ln2_hi - ((hf - t) - f) */
    int t = fma3(b, s, add(b, hf, r), mul(b, kf, f(b, LN2_LO_F32)));
    int lnx = fma3(b, kf, f(b, LN2_HI_F32),
                   rules_p1(b, PRIM_NEG, KILN_F32,
                            rules_p2(b, PRIM_SUB, KILN_F32, rules_p2(b, PRIM_SUB, KILN_F32, hf, t), fm)));
    int pos = rules_test(b, PRIM_LT, f(b, 0.0), x);
    int fin = rules_test(b, PRIM_LT, x, f(b, INFINITY));
    lnx = rules_sel(b, KILN_F32, fin, lnx, x); /* +inf, and NaN */
    lnx = rules_sel(b, KILN_F32, pos, lnx, f(b, NAN));
    return rules_sel(b, KILN_F32, rules_test(b, PRIM_EQ, x, f(b, 0.0)), f(b, -INFINITY), lnx);
}

/* log: log_f32 in f32; in f64 log2(x) * ln 2: unlike exp, no reduction is
 * needed, as a relative error of log2's result stays relative through one
 * multiplication, near 1 as well (log2 is accurate there). Special values
 * are log2's: -inf at ±0, NaN below 0. Bound: l2 + 0.5 ulp (measured: f64
 * 1.45 ulp). */
static int log_rule(ir_builder *b, kiln_dtype dt, int x) {
    if (dt == KILN_F32)
        return log_f32(b, x);
    return rules_p2(b, PRIM_MUL, dt, rules_p1(b, PRIM_LOG2, dt, x), rules_f(b, dt, LN2));
}

/* tanh(|x|) = m / (m + 2) with m = expm1(2|x|) by Kahan's trick
 * (u = exp(y); u == 1 ? y : (u - 1) y / log u, whose errors cancel), so
 * that it stays accurate near 0; 1 beyond 20 (where 1 - tanh < 2^-57); the
 * sign of x put back on the bits (tanh(-0) = -0). Bound: 4 ulp (measured:
 * f32 2.56, f64 2.49 ulp). */
/* tanh in f32 without log (so that it vectorises): m / (m + 2) with
 * m = e^z - 1 for z = 2|x|, one formula for every x: with z = r + n ln 2
 * (exp_reduce), m = 2^n (e^r - 1) + (2^n - 1), e^r - 1 = r Q(r) with
 * Q = 1 + r P(r) a degree-5 fit of (e^r - 1) / r (1.4e-8; its coefficients
 * in f32), so that m keeps its relative accuracy as z goes to 0 (where
 * n = 0 and m = r Q), and 2^n - 1 is exact. z is clamped to 40 (tanh rounds to 1 from 9.02 on),
 * so no overflow and one scaling. The two branches it replaces (a fit of
 * tanh below 0.55, 1 - 2 / (e^z + 1) above, both evaluated) took 15
 * operations more: the 11-op chain with tanh and sigmoid over 16M, 2
 * threads, 12.3-13 -> 10.7-11 ms. NaN is put back by a select; the sign
 * on the bits. Bound: 3 ulp (measured in tests/rules_test.c, random inputs
 * included: 2.36 ulp, near |x| = 0.06, where the two branches measured
 * 1.6). */
static int tanh_f32(ir_builder *b, int x) {
    static const double fit[] = {0x1.fffffep-2, 0x1.5554b4p-3, 0x1.5556f2p-5, 0x1.12253ap-7,
                                 0x1.6b9c3ep-10};
    int y = rules_p1(b, PRIM_ABS, KILN_F32, x);
    int scale, r = exp_reduce(b, below(b, add(b, y, y), 40.0), -1, exp_magic(b, 0), &scale);
    /* r Q(r) = r + r (r P(r)), one rounding where Q's own and the product's were two */
    int rq = fma3(b, mul(b, r, horner(b, r, fit, 5)), r, r);
    int m = fma3(b, scale, rq, rules_p2(b, PRIM_SUB, KILN_F32, scale, f(b, 1.0)));
    int t = rules_p2(b, PRIM_DIV, KILN_F32, m, add(b, m, f(b, 2.0)));
    t = rules_sel(b, KILN_F32, rules_test(b, PRIM_NE, x, x), x, t);
    return with_sign(b, KILN_F32, t, sign_of(b, KILN_F32, x));
}

static int tanh_rule(ir_builder *b, kiln_dtype dt, int x) {
    if (dt == KILN_F32)
        return tanh_f32(b, x);
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
 * e / (1 + e) below, as one division of the numerator picked first (the
 * same roundings; a quotient for each branch, picked after, cost a second
 * division, the slowest vector arithmetic there is: the 11-op chain with
 * tanh and sigmoid over 16M, 2 threads, 19.1 -> 17.9 ms). Bound: e2 + 2 ulp
 * (measured: f32 1.83, f64 1.74 ulp). */
static int sigmoid_parts(ir_builder *b, kiln_dtype dt, int x, int *e, int *d, int *pos) {
    int y = rules_p1(b, PRIM_ABS, dt, x);
    *e = dt == KILN_F32 ? exp_nonpos_f32(b, y) : exp_rule(b, dt, rules_p1(b, PRIM_NEG, dt, y));
    *d = rules_p2(b, PRIM_ADD, dt, rules_f(b, dt, 1.0), *e);
    *pos = rules_test(b, PRIM_LE, rules_f(b, dt, 0.0), x);
    return rules_p2(b, PRIM_DIV, dt, rules_sel(b, dt, *pos, rules_f(b, dt, 1.0), *e), *d);
}

/* silu(x) = x / (1 + e) for x >= 0 (and NaN), x e / (1 + e) below, one
 * division of the numerator picked first (as sigmoid). Far left e = exp(x)
 * is subnormal while x e is not, so there x e is formed as (x h) h with
 * h = exp(x / 2), normal there; -0 where h underflows (so that -inf gives
 * -0, not -inf * 0). Where e is normal x e is one product: (x h) h there
 * carried h's error twice, 4.14 ulp at x = -0.765 among 4M random inputs,
 * over the bound. Bound: 4 ulp (measured: f32 2.5, f64 2.4 ulp). */
static int silu_rule(ir_builder *b, kiln_dtype dt, int x) {
    int e, d, pos;
    sigmoid_parts(b, dt, x, &e, &d, &pos);
    int first = rules_test(b, PRIM_OR, pos, rules_test(b, PRIM_NE, x, x));
    int h = exp_rule(b, dt, rules_p2(b, PRIM_MUL, dt, x, rules_f(b, dt, 0.5)));
    int xe = rules_p2(b, PRIM_MUL, dt, rules_p2(b, PRIM_MUL, dt, x, h), h);
    int normal = rules_test(b, PRIM_LE, rules_f(b, dt, dt == KILN_F64 ? DBL_MIN : FLT_MIN), e);
    xe = rules_sel(b, dt, normal, rules_p2(b, PRIM_MUL, dt, x, e), xe);
    int q = rules_p2(b, PRIM_DIV, dt, rules_sel(b, dt, first, x, xe), d);
    int zero = rules_test(b, PRIM_EQ, h, rules_f(b, dt, 0.0));
    return rules_sel(b, dt, first, q, rules_sel(b, dt, zero, rules_f(b, dt, -0.0), q));
}

/* gelu in f32: x Phi(x), with Phi(x) = Q(a) for x < 0 and 1 - Q(a) above,
 * Q(a) = erfc(a) / 2 and a = |x| / sqrt 2. Q(a) = e^(-a^2) t P(t) with
 * t = 1 / (1 + a/2) and P a degree-10 polynomial fitted here to
 * Q(a) e^(a^2) / t over a in [0, 10.35] (by least squares reweighted
 * towards the minimax relative error, then its coefficients rounded to f32
 * one at a time with the rest refitted: 3.7e-9), so one formula serves
 * every x: no Taylor branch near 0 and no erfc fit with its exponent
 * corrected by a two-sum, both of which every vector evaluated (about 100
 * operations an element, compute-bound at any size: gelu(a*b+c) over 16M,
 * 2 threads, 16 ms -> 11 ms, where a*b+c alone takes 7.5-8). a is
 * carried as ah + al (1/sqrt 2 in two parts, the product's error by fma)
 * and a^2 as h + l, so that e^(-a^2) is e^(-h) (1 - l): in the tail e^(-a^2)
 * would otherwise lose 2 a^2 half-ulps to a's rounding. e^(-h) comes scaled
 * by 2^40, normal for every h up to 10.35^2 = 107 (2^-114 there, and Q(a)
 * 2^40 too), so one scaling by 2^(n+40) and no range selects; |x| is clamped to 14.6 first,
 * past which gelu(x) rounds to -0 for x < 0 (selected) and to x above.
 * A NaN x is clamped to 14.6 too and carried by the product x Phi. The error is mostly t's two roundings
 * (R's sensitivity to t is 2.26 at a = 0), which eps below undoes: 6.3 ulp
 * without it. The former rule measured 6.89 ulp at x = -3.475, over its
 * bound, among random inputs its sweep had missed. Bound: 6 ulp
 * (measured in tests/rules_test.c, random inputs included: 3.3 ulp; 3.7
 * over 4M random inputs). */
static int gelu_f32(ir_builder *b, int x) {
    static const double fit[] = {0x1.20dbe8p-3,  0x1.210498p-3, 0x1.f64c64p-4,  0x1.7b1e4ep-4,
                                 0x1.cfaa9p-6,   0x1.0092acp-6, -0x1.faddd4p-8, -0x1.2f8b3ap-3,
                                 0x1.8b43a2p-3,  -0x1.8adacp-4, 0x1.277332p-6};
    int y = below(b, rules_p1(b, PRIM_ABS, KILN_F32, x), 14.6);
    int chi = f(b, 0.70710678118654752440);
    int ah = mul(b, y, chi);
    int al = fma3(b, y, chi, rules_p1(b, PRIM_NEG, KILN_F32, ah));
    al = fma3(b, y, f(b, 1.2101617152815436e-08), al);
    int h = mul(b, ah, ah);
    int l = fma3(b, ah, ah, rules_p1(b, PRIM_NEG, KILN_F32, h));
    l = fma3(b, add(b, ah, ah), al, l);
    int d = fma3(b, ah, f(b, 0.5), f(b, 1.0));
    int t = rules_p2(b, PRIM_DIV, KILN_F32, f(b, 1.0), d);
    int r = mul(b, t, horner(b, t, fit, 11));
    /* t = t_exact (1 - eps) to first order; R's relative error is then
     * eps times -(2 + a) (ln R)'(a), between 2.26 (a = 0) and 1: k below
     * (linear in t, within 0.07), put into e^(...) with -l */
    int dl = fma3(b, ah, f(b, 0.5), rules_p2(b, PRIM_SUB, KILN_F32, f(b, 1.0), d)); /* exact */
    dl = fma3(b, al, f(b, 0.5), dl);
    int eps = fma3(b, rules_p1(b, PRIM_NEG, KILN_F32, d), t, f(b, 1.0));
    eps = fma3(b, rules_p1(b, PRIM_NEG, KILN_F32, dl), t, eps);
    int k = fma3(b, t, f(b, 1.336), f(b, 0.987));
    int lo = fma3(b, eps, k, rules_p1(b, PRIM_NEG, KILN_F32, l));
    int scale, e = exp_f32_reduced(b, rules_p1(b, PRIM_NEG, KILN_F32, h), lo, exp_magic(b, 40), &scale);
    e = mul(b, e, scale);
    int q = mul(b, r, e); /* Q(a) 2^40 */
    int down = f(b, 0x1p-40);
    int neg = rules_test(b, PRIM_LT, x, f(b, 0.0));
    /* x Q(a) is subnormal for |x| above 13.05, and a vector holding a
     * subnormal product costs a microcode assist (over a hundred cycles) on
     * x86: the branch for x < 0 was evaluated for every x, so every x above
     * 13.05 (and below -14.6, selected away) made one. It takes 0 there
     * instead (-0 past -14.6, the result there): only the true
     * subnormal results (-14.6 < x < -13.05) still pay. With q scaled by
     * 2^32, q itself was subnormal at the clamp (r e^(-h) 2^32 is 2^-126.3
     * at |x| = 14.6), so every |x| past it paid too; 2^40 leaves it normal.
     * x >= 0 is cleared by its bits (x & -(sign bit)), not by a select on
     * x < 0: gcc folds such a select into the final one, which implies it,
     * and multiplies by x again. gelu(x W^T + b) over 2048 x 2048 with
     * pre-activations of deviation 22: 56 -> 18 ms, as with deviation 1. */
    int xi = rules_p1(b, PRIM_BITCAST, KILN_I32, x);
    int sign = rules_p2(b, PRIM_SUB, KILN_I32, rules_i(b, KILN_I32, 0),
                        rules_p2(b, PRIM_SHR, KILN_I32, xi, rules_i(b, KILN_I32, 31)));
    int xb = rules_p1(b, PRIM_BITCAST, KILN_F32, rules_p2(b, PRIM_AND, KILN_I32, xi, sign));
    xb = rules_sel(b, KILN_F32, rules_test(b, PRIM_LT, x, f(b, -14.6)), f(b, -0.0), xb);
    int below = mul(b, mul(b, xb, q), down);
    int above = mul(b, x, fma3(b, rules_p1(b, PRIM_NEG, KILN_F32, q), down, f(b, 1.0)));
    return rules_sel(b, KILN_F32, neg, below, above);
}

/* gelu(x) = x/2 erfc(-x/sqrt 2), the erf form, with -0 where erfc underflows
 * (as graph/'s definition has it, so that -inf gives -0, not -inf * 0). In
 * the tail erfc(z) falls like exp(-z^2), so z's own rounding would cost
 * 2 z^2 half-ulps (about 700 ulp at z = 26): f64 carries z as hi + lo
 * (1/sqrt 2 split in two, the product's error by fma) and corrects erfc(hi)
 * by its derivative, -lo 2/sqrt(pi) exp(-hi^2). Bound: erfc's (glibc: 5 ulp in f64) plus 2 ulp
 * in f64 (measured 2.67 ulp). f32 and the half types use gelu_f32. */
static int gelu_rule(ir_builder *b, kiln_dtype dt, int x) {
    if (dt != KILN_F64)
        return gelu_f32(b, x);
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

/* Round half to even, exact (0 ulp): t = trunc(x) and the fraction d = x - t
 * (exact); t moves one away from zero where |d| > 1/2, or |d| = 1/2 and t
 * is odd (t - 2 floor(t/2) != 0, each step exact). NaN and inf pass through
 * (d is NaN there and every test false); -0.4 gives -0. */
static int round_even(ir_builder *b, kiln_dtype dt, int x) {
    int t = rules_p1(b, PRIM_TRUNC, dt, x);
    int ad = rules_p1(b, PRIM_ABS, dt, rules_p2(b, PRIM_SUB, dt, x, t));
    int half = rules_f(b, dt, 0.5);
    int pair = rules_p2(b, PRIM_MUL, dt, rules_f(b, dt, 2.0),
                        rules_p1(b, PRIM_FLOOR, dt, rules_p2(b, PRIM_MUL, dt, t, half)));
    int odd = rules_test(b, PRIM_NE, rules_p2(b, PRIM_SUB, dt, t, pair), rules_f(b, dt, 0.0));
    int up = rules_test(b, PRIM_OR, rules_test(b, PRIM_LT, half, ad),
                        rules_test(b, PRIM_AND, rules_test(b, PRIM_EQ, ad, half), odd));
    int step = rules_sel(b, dt, rules_test(b, PRIM_LT, x, rules_f(b, dt, 0.0)),
                         rules_f(b, dt, -1.0), rules_f(b, dt, 1.0));
    return rules_sel(b, dt, up, rules_p2(b, PRIM_ADD, dt, t, step), t);
}

/* |x| with y's sign bit, on the bit patterns: exact, NaN's sign included. */
static int copysign_rule(ir_builder *b, kiln_dtype dt, int x, int y) {
    kiln_dtype it = rules_bits_type(dt);
    int64_t sign = dt == KILN_F64 ? INT64_MIN : INT32_MIN;
    int mag = rules_p2(b, PRIM_AND, it, rules_p1(b, PRIM_BITCAST, it, x), rules_i(b, it, ~sign));
    int s = rules_p2(b, PRIM_AND, it, rules_p1(b, PRIM_BITCAST, it, y), rules_i(b, it, sign));
    return rules_p1(b, PRIM_BITCAST, dt, rules_p2(b, PRIM_OR, it, mag, s));
}

/* Python's remainder: fmod (exact) moved by y into y's sign where they
 * differ (one rounding, as graph/dtype.c has it); a zero remainder takes
 * y's sign. */
static int mod_rule(ir_builder *b, kiln_dtype dt, int x, int y) {
    int zero = rules_f(b, dt, 0.0);
    int r = rules_p2(b, PRIM_FMOD, dt, x, y);
    int differ = rules_test(b, PRIM_NE, rules_test(b, PRIM_LT, r, zero),
                            rules_test(b, PRIM_LT, y, zero));
    int move = rules_test(b, PRIM_AND, rules_test(b, PRIM_NE, r, zero), differ);
    r = rules_sel(b, dt, move, rules_p2(b, PRIM_ADD, dt, r, y), r);
    return rules_sel(b, dt, rules_test(b, PRIM_EQ, r, zero), copysign_rule(b, dt, zero, y), r);
}

/* Float ops that are one primitive each (its arity decides the operands). */
static const rules_direct float_direct[GRAPH_NUM_OPS] = {
    [GRAPH_FLOOR] = {true, PRIM_FLOOR},
    [GRAPH_TRUNC] = {true, PRIM_TRUNC},
    [GRAPH_TAN] = {true, PRIM_TAN},
    [GRAPH_ASIN] = {true, PRIM_ASIN},
    [GRAPH_ACOS] = {true, PRIM_ACOS},
    [GRAPH_ATAN] = {true, PRIM_ATAN},
    [GRAPH_SINH] = {true, PRIM_SINH},
    [GRAPH_COSH] = {true, PRIM_COSH},
    [GRAPH_ASINH] = {true, PRIM_ASINH},
    [GRAPH_ACOSH] = {true, PRIM_ACOSH},
    [GRAPH_ATANH] = {true, PRIM_ATANH},
    [GRAPH_ERF] = {true, PRIM_ERF},
    [GRAPH_ERFC] = {true, PRIM_ERFC},
    [GRAPH_EXPM1] = {true, PRIM_EXPM1},
    [GRAPH_LOG1P] = {true, PRIM_LOG1P},
    [GRAPH_ATAN2] = {true, PRIM_ATAN2},
    [GRAPH_FMOD] = {true, PRIM_FMOD},
    [GRAPH_NEG] = {true, PRIM_NEG},
    [GRAPH_ABS] = {true, PRIM_ABS},
    [GRAPH_SQRT] = {true, PRIM_SQRT},
    [GRAPH_SIN] = {true, PRIM_SIN},
    [GRAPH_COS] = {true, PRIM_COS},
    [GRAPH_ADD] = {true, PRIM_ADD},
    [GRAPH_SUB] = {true, PRIM_SUB},
    [GRAPH_MUL] = {true, PRIM_MUL},
    [GRAPH_DIV] = {true, PRIM_DIV},
    [GRAPH_MAXIMUM] = {true, PRIM_MAX},
    [GRAPH_MINIMUM] = {true, PRIM_MIN},
    [GRAPH_POW] = {true, PRIM_POW},
};

int rules_float(ir_builder *b, graph_op op, kiln_dtype dt, int x, int y) {
    int direct = rules_direct_op(b, float_direct, op, dt, x, y);
    if (direct >= 0)
        return direct;
    switch (op) {
    case GRAPH_CEIL:
        return rules_p1(b, PRIM_NEG, dt, rules_p1(b, PRIM_FLOOR, dt, rules_p1(b, PRIM_NEG, dt, x)));
    case GRAPH_ROUND:
        return round_even(b, dt, x);
    case GRAPH_MOD:
        return mod_rule(b, dt, x, y);
    case GRAPH_COPYSIGN:
        return copysign_rule(b, dt, x, y);
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
    default:
        /* an op with no float rule: left as it is, so that the renderer
         * refuses the kernel by name */
        return ir_alu(b, op, dt, x, y);
    }
}
