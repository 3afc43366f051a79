/* rules_int.c — integer ops, casts and half-type rounding as primitives:
 * NumPy's floor division, exponentiation by squaring, saturating float to
 * integer casts, and rounding of an f32 or f64 value to f16 or bf16 as bit
 * operations. Every rule here is exact: it matches graph/dtype.c bit for
 * bit (0 ulp), except where a comment says otherwise. */
#include <string.h>

#include "lower/rules.h"

static int width(kiln_dtype dt) {
    return dt == KILN_I64 ? 64 : dt == KILN_I32 ? 32 : 8;
}

static bool is_signed(kiln_dtype dt) { return graph_dtype_is_signed(dt); }

/* bool: the C remainder r of x by y is nonzero and of the other sign than
 * y, where the truncating quotient and remainder differ from the floored. */
static int past_zero(ir_builder *b, kiln_dtype dt, int r, int y) {
    int zero = rules_i(b, dt, 0);
    return rules_test(b, PRIM_AND, rules_test(b, PRIM_NE, r, zero),
                      rules_test(b, PRIM_LT, rules_p2(b, PRIM_XOR, dt, r, y), zero));
}

/* a // b rounded toward -inf, a // 0 = 0, MIN // -1 = MIN (wrapped): the
 * truncating quotient, less one past zero. Unsigned types need no correction. */
static int floor_div(ir_builder *b, kiln_dtype dt, int x, int y) {
    int q = rules_p2(b, PRIM_DIV, dt, x, y);
    if (!is_signed(dt))
        return q;
    int off = past_zero(b, dt, rules_p2(b, PRIM_MOD, dt, x, y), y);
    return rules_p2(b, PRIM_SUB, dt, q, rules_p1(b, PRIM_CAST, dt, off));
}

/* base ** e by squaring over every bit of e that can be set (the result
 * wraps as graph/dtype.c's, whose low bits are the same); a negative e
 * gives 1 for base 1, ±1 for base -1, else 0. */
static int int_pow(ir_builder *b, kiln_dtype dt, int x, int e) {
    int zero = rules_i(b, dt, 0), one = rules_i(b, dt, 1);
    int r = one, sq = x, k = e;
    int bits = is_signed(dt) ? width(dt) - 1 : width(dt);
    for (int i = 0; i < bits; i++) {
        int set = rules_test(b, PRIM_NE, rules_p2(b, PRIM_AND, dt, k, one), zero);
        r = rules_sel(b, dt, set, rules_p2(b, PRIM_MUL, dt, r, sq), r);
        if (i + 1 < bits) {
            sq = rules_p2(b, PRIM_MUL, dt, sq, sq);
            k = rules_p2(b, PRIM_SHR, dt, k, rules_i(b, dt, 1));
        }
    }
    if (!is_signed(dt))
        return r;
    int minus1 = rules_i(b, dt, -1);
    int odd = rules_test(b, PRIM_NE, rules_p2(b, PRIM_AND, dt, e, one), zero);
    int neg = rules_sel(b, dt, rules_test(b, PRIM_EQ, x, one), one,
                        rules_sel(b, dt, rules_test(b, PRIM_EQ, x, minus1),
                                  rules_sel(b, dt, odd, minus1, one), zero));
    return rules_sel(b, dt, rules_test(b, PRIM_LT, e, zero), neg, r);
}

/* Shifts with graph/dtype.c's rules for counts outside [0, width): 0, or
 * all sign bits for a negative value shifted right by width or more. A
 * signed right shift is the logical one of ~x, inverted, for negative x. */
static int shift(ir_builder *b, graph_op op, kiln_dtype dt, int x, int y) {
    int zero = rules_i(b, dt, 0), w = rules_i(b, dt, width(dt));
    int ok = rules_test(b, PRIM_AND, rules_test(b, PRIM_LE, zero, y), rules_test(b, PRIM_LT, y, w));
    int s = rules_sel(b, dt, ok, y, zero);
    if (op == GRAPH_SHL)
        return rules_sel(b, dt, ok, rules_p2(b, PRIM_SHL, dt, x, s), zero);
    if (!is_signed(dt))
        return rules_sel(b, dt, ok, rules_p2(b, PRIM_SHR, dt, x, s), zero);
    int ones = rules_i(b, dt, -1);
    int neg = rules_test(b, PRIM_LT, x, zero);
    int nx = rules_p2(b, PRIM_XOR, dt, x, ones);
    int r = rules_sel(b, dt, neg, rules_p2(b, PRIM_XOR, dt, rules_p2(b, PRIM_SHR, dt, nx, s), ones),
                      rules_p2(b, PRIM_SHR, dt, x, s));
    int big = rules_sel(b, dt, neg, ones, zero);
    return rules_sel(b, dt, ok, r, rules_sel(b, dt, rules_test(b, PRIM_LT, y, zero), zero, big));
}

/* Integer ops that are one primitive each (its arity decides the operands). */
static const rules_direct int_direct[GRAPH_NUM_OPS] = {
    [GRAPH_BITAND] = {true, PRIM_AND},
    [GRAPH_BITOR] = {true, PRIM_OR},
    [GRAPH_BITXOR] = {true, PRIM_XOR},
    [GRAPH_FMOD] = {true, PRIM_MOD},
    [GRAPH_NEG] = {true, PRIM_NEG},
    [GRAPH_ADD] = {true, PRIM_ADD},
    [GRAPH_SUB] = {true, PRIM_SUB},
    [GRAPH_MUL] = {true, PRIM_MUL},
};

int rules_int(ir_builder *b, graph_op op, kiln_dtype dt, int x, int y) {
    int direct = rules_direct_op(b, int_direct, op, dt, x, y);
    if (direct >= 0)
        return direct;
    switch (op) {
    case GRAPH_FLOOR:
    case GRAPH_CEIL:
    case GRAPH_TRUNC:
    case GRAPH_ROUND:
        return x;
    case GRAPH_BITNOT:
        return rules_p2(b, PRIM_XOR, dt, x, rules_i(b, dt, dt == KILN_U8 ? 0xFF : -1));
    case GRAPH_SHL:
    case GRAPH_SHR:
        return shift(b, op, dt, x, y);
    case GRAPH_MOD: { /* the C remainder, plus y past zero */
        int r = rules_p2(b, PRIM_MOD, dt, x, y);
        if (!is_signed(dt))
            return r;
        return rules_sel(b, dt, past_zero(b, dt, r, y), rules_p2(b, PRIM_ADD, dt, r, y), r);
    }
    case GRAPH_ABS:
        return is_signed(dt) ? rules_p1(b, PRIM_ABS, dt, x) : x;
    case GRAPH_RELU: {
        int zero = rules_i(b, dt, 0);
        return rules_sel(b, dt, rules_test(b, PRIM_LT, zero, x), x, zero);
    }
    case GRAPH_DIV:
        return floor_div(b, dt, x, y);
    case GRAPH_POW:
        return int_pow(b, dt, x, y);
    case GRAPH_MAXIMUM:
        return rules_sel(b, dt, rules_test(b, PRIM_LT, y, x), x, y);
    case GRAPH_MINIMUM:
        return rules_sel(b, dt, rules_test(b, PRIM_LT, x, y), x, y);
    default:
        /* a float op on an integer dtype: computed in f64, then cast back */
        return rules_cast(b, KILN_F64, dt,
                          rules_float(b, op, KILN_F64, rules_cast(b, dt, KILN_F64, x),
                                      y >= 0 ? rules_cast(b, dt, KILN_F64, y) : -1));
    }
}

static int64_t f64_bits(double d) {
    int64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static int64_t f32_bits(float f) {
    int32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int64_t bits_of(kiln_dtype dt, double v) {
    return dt == KILN_F64 ? f64_bits(v) : f32_bits((float)v);
}

/* Rounds x (of src, f32 or f64) to the nearest even value of half in one
 * step: normal results by adding half an ulp (and the kept lsb) to the bit
 * pattern and clearing the dropped bits, so that a carry moves into the
 * exponent exactly as rounding does; results below half's smallest normal by
 * adding and subtracting a constant whose ulp is half's subnormal quantum
 * (the hardware's round to nearest even does the rounding); overflow to
 * infinity; infinities and NaN kept as they are (a store keeps NaN quiet).
 * Exact: 0 ulp against graph_round_f16 / graph_round_bf16. */
int rules_round_half(ir_builder *b, kiln_dtype half, kiln_dtype src, int x) {
    bool f16 = half == KILN_F16;
    kiln_dtype it = rules_bits_type(src);
    int mant = src == KILN_F64 ? 52 : 23, prec = f16 ? 11 : 8, emin = f16 ? -14 : -126;
    double maxv = f16 ? 65504.0 : 0x1.fep127;
    int drop = mant - (prec - 1);
    int64_t sign = src == KILN_F64 ? INT64_MIN : INT32_MIN;
    int u = rules_p1(b, PRIM_BITCAST, it, x);
    int s = rules_p2(b, PRIM_AND, it, u, rules_i(b, it, sign));
    int a = rules_p2(b, PRIM_AND, it, u, rules_i(b, it, ~sign));
    int lsb = rules_p2(b, PRIM_AND, it, rules_p2(b, PRIM_SHR, it, a, rules_i(b, it, drop)),
                       rules_i(b, it, 1));
    int r = rules_p2(b, PRIM_ADD, it, rules_p2(b, PRIM_ADD, it, a, rules_i(b, it, ((int64_t)1 << (drop - 1)) - 1)),
                     lsb);
    r = rules_p2(b, PRIM_AND, it, r, rules_i(b, it, ~(((int64_t)1 << drop) - 1)));
    /* bf16 from f32 shares f32's exponent range: the bit rounding is right
     * for f32's subnormals too */
    if (f16 || src == KILN_F64) {
        double c = __builtin_ldexp(1.0, emin - prec + 1 + mant);
        int ax = rules_p1(b, PRIM_BITCAST, src, a);
        int y = rules_p2(b, PRIM_SUB, src, rules_p2(b, PRIM_ADD, src, ax, rules_f(b, src, c)),
                         rules_f(b, src, c));
        int tiny = rules_test(b, PRIM_LT, a, rules_i(b, it, bits_of(src, __builtin_ldexp(1.0, emin))));
        r = rules_sel(b, it, tiny, rules_p1(b, PRIM_BITCAST, it, y), r);
    }
    int inf = rules_i(b, it, bits_of(src, __builtin_inf()));
    r = rules_sel(b, it, rules_test(b, PRIM_LT, rules_i(b, it, bits_of(src, maxv)), r), inf, r);
    r = rules_sel(b, it, rules_test(b, PRIM_LE, inf, a), a, r);
    int v = rules_p1(b, PRIM_BITCAST, src, rules_p2(b, PRIM_OR, it, r, s));
    return src == KILN_F32 ? v : rules_p1(b, PRIM_CAST, KILN_F32, v);
}

/* Truncation toward zero saturating at to's range, NaN to 0: the bounds are
 * compared after truncation (255.7 gives 255 for u8); an out-of-range value
 * is replaced by 0 before the cast, which then never sees one. */
static int saturate(ir_builder *b, kiln_dtype src, kiln_dtype to, int x) {
    int64_t ilo = to == KILN_I32 ? INT32_MIN : to == KILN_U8 ? 0 : to == KILN_I8 ? -128 : INT64_MIN;
    int64_t ihi = to == KILN_I32 ? INT32_MAX : to == KILN_U8 ? 255 : to == KILN_I8 ? 127 : INT64_MAX;
    /* (double)INT64_MAX is 2^63, so "hi <= t" is what keeps the cast in range */
    double lo = (double)ilo, hi = (double)ihi;
    int t = rules_p1(b, PRIM_TRUNC, src, x);
    int below = rules_test(b, PRIM_LE, t, rules_f(b, src, lo));
    int above = rules_test(b, PRIM_LE, rules_f(b, src, hi), t);
    int nan = rules_test(b, PRIM_NE, x, x);
    int out = rules_test(b, PRIM_OR, below, rules_test(b, PRIM_OR, above, nan));
    int r = rules_p1(b, PRIM_CAST, to, rules_sel(b, src, out, rules_f(b, src, 0.0), t));
    r = rules_sel(b, to, below, rules_i(b, to, ilo), r);
    r = rules_sel(b, to, above, rules_i(b, to, ihi), r);
    return rules_sel(b, to, nan, rules_i(b, to, 0), r);
}

int rules_cast(ir_builder *b, kiln_dtype from, kiln_dtype to, int x) {
    bool ff = graph_dtype_is_float(from), tf = graph_dtype_is_float(to);
    kiln_dtype src = rules_ctype(from);
    if (from == to)
        return x;
    if (to == KILN_BOOL)
        return rules_test(b, PRIM_NE, x, ff ? rules_f(b, src, 0.0) : rules_i(b, src, 0));
    if (to == KILN_F16 || to == KILN_BF16) {
        /* integers go through f64, exact for all but int64 beyond 2^53,
         * which may round twice (at most 1 ulp of the half type there) */
        if (!ff)
            x = rules_p1(b, PRIM_CAST, KILN_F64, x), src = KILN_F64;
        return rules_round_half(b, to, src, x);
    }
    if (tf)
        return rules_ctype(from) == to ? x : rules_p1(b, PRIM_CAST, to, x);
    if (ff)
        return saturate(b, src, to, x);
    return rules_p1(b, PRIM_CAST, to, x);
}

/* f16 bits h (an i32 holding 16 bits) as the f32 value they encode:
 * normals and infinities/NaN by moving the fields into f32's places (a NaN
 * keeps its payload), subnormals as mant * 2^-24, which f32 holds exactly. */
static int f16_bits_value(ir_builder *b, int h) {
    const kiln_dtype it = KILN_I32;
    int s = rules_p2(b, PRIM_SHL, it, rules_p2(b, PRIM_AND, it, h, rules_i(b, it, 0x8000)),
                     rules_i(b, it, 16));
    int e = rules_p2(b, PRIM_AND, it, rules_p2(b, PRIM_SHR, it, h, rules_i(b, it, 10)),
                     rules_i(b, it, 31));
    int m = rules_p2(b, PRIM_AND, it, h, rules_i(b, it, 1023));
    int top = rules_test(b, PRIM_EQ, e, rules_i(b, it, 31));
    int fe = rules_sel(b, it, top, rules_i(b, it, 255),
                       rules_p2(b, PRIM_ADD, it, e, rules_i(b, it, 112)));
    int bits = rules_p2(b, PRIM_OR, it, rules_p2(b, PRIM_SHL, it, fe, rules_i(b, it, 23)),
                        rules_p2(b, PRIM_SHL, it, m, rules_i(b, it, 13)));
    int sub = rules_p1(b, PRIM_BITCAST, it,
                       rules_p2(b, PRIM_MUL, KILN_F32, rules_p1(b, PRIM_CAST, KILN_F32, m),
                                rules_f(b, KILN_F32, 0x1p-24)));
    bits = rules_sel(b, it, rules_test(b, PRIM_EQ, e, rules_i(b, it, 0)), sub, bits);
    return rules_p1(b, PRIM_BITCAST, KILN_F32, rules_p2(b, PRIM_OR, it, bits, s));
}

/* The f16 bits (in an i32) of v, an f32 that f16 holds exactly (it was
 * loaded or rounded as f16): the inverse of f16_bits_value. A NaN keeps the
 * payload's top bits, quieted where they would read as an infinity. */
static int f16_value_bits(ir_builder *b, int v) {
    const kiln_dtype it = KILN_I32;
    int u = rules_p1(b, PRIM_BITCAST, it, v);
    int s = rules_p2(b, PRIM_AND, it, rules_p2(b, PRIM_SHR, it, u, rules_i(b, it, 16)),
                     rules_i(b, it, 0x8000));
    int a = rules_p2(b, PRIM_AND, it, u, rules_i(b, it, 0x7fffffff));
    int e = rules_p2(b, PRIM_SHR, it, a, rules_i(b, it, 23));
    int m = rules_p2(b, PRIM_AND, it, rules_p2(b, PRIM_SHR, it, a, rules_i(b, it, 13)),
                     rules_i(b, it, 1023));
    int biased = rules_p2(b, PRIM_SUB, it, e, rules_i(b, it, 112));
    int normal = rules_p2(b, PRIM_OR, it, rules_p2(b, PRIM_SHL, it, biased, rules_i(b, it, 10)), m);
    int inf = rules_i(b, it, 0x7f800000);
    int nan = rules_test(b, PRIM_LT, inf, a);
    int lost = rules_test(b, PRIM_AND, nan, rules_test(b, PRIM_EQ, m, rules_i(b, it, 0)));
    int special = rules_p2(b, PRIM_OR, it, rules_i(b, it, 0x7c00),
                           rules_sel(b, it, lost, rules_i(b, it, 0x200), m));
    /* below f16's smallest normal 2^-14: mant = |v| * 2^24, exact */
    int tiny = rules_p1(b, PRIM_CAST, it,
                        rules_p2(b, PRIM_MUL, KILN_F32, rules_p1(b, PRIM_BITCAST, KILN_F32, a),
                                 rules_f(b, KILN_F32, 0x1p24)));
    int r = rules_sel(b, it, rules_test(b, PRIM_LE, inf, a), special, normal);
    r = rules_sel(b, it, rules_test(b, PRIM_LT, a, rules_i(b, it, 0x38800000)), tiny, r);
    return rules_p2(b, PRIM_OR, it, r, s);
}

int rules_bitcast(ir_builder *b, kiln_dtype from, kiln_dtype to, int x) {
    if (from == to)
        return x;
    /* the 1-byte integers: a wrapping conversion keeps the bits */
    if (!graph_dtype_is_float(from) && !graph_dtype_is_float(to))
        return rules_p1(b, PRIM_CAST, to, x);
    /* The half types compute as f32 values: bf16's bits are the top half of
     * its f32's, f16's are re-encoded. */
    const kiln_dtype it = KILN_I32;
    if (from == KILN_BF16 && to == KILN_F16)
        return f16_bits_value(b, rules_p2(b, PRIM_SHR, it, rules_p1(b, PRIM_BITCAST, it, x),
                                          rules_i(b, it, 16)));
    if (from == KILN_F16 && to == KILN_BF16)
        return rules_p1(b, PRIM_BITCAST, KILN_F32,
                        rules_p2(b, PRIM_SHL, it, f16_value_bits(b, x), rules_i(b, it, 16)));
    return rules_p1(b, PRIM_BITCAST, to, x);
}
