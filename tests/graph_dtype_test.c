/* graph_dtype_test.c — dtype arithmetic of graph/dtype.c: the f16 and bf16
 * encodings and rounding (exhaustively over all 65536 bit patterns), integer
 * wrapping and saturation, floor division, integer powers, NaN rules, and
 * the scalar loads and stores every executor's buffers go through. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "graph/graph.h"

static graph_scalar I(int64_t v)
{
    graph_scalar s = {.i = v};
    return s;
}

static graph_scalar F(double v)
{
    graph_scalar s = {.f = v};
    return s;
}

static int64_t bin_i(graph_op op, kiln_dtype dt, int64_t a, int64_t b)
{
    return graph_scalar_binary(op, dt, I(a), I(b)).i;
}

static double bin_f(graph_op op, kiln_dtype dt, double a, double b)
{
    return graph_scalar_binary(op, dt, F(a), F(b)).f;
}

static int64_t cvt_fi(double v, kiln_dtype dt)
{
    return graph_scalar_convert(F(v), true, dt).i;
}

static int64_t cvt_ii(int64_t v, kiln_dtype dt)
{
    return graph_scalar_convert(I(v), false, dt).i;
}

static double cvt_if(int64_t v, kiln_dtype dt)
{
    return graph_scalar_convert(I(v), false, dt).f;
}

static bool same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* ---- f16 ---- */

Test(graph_dtype, f16_round_trips_every_bit_pattern)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = graph_f16_to_f32((uint16_t)h);
        cr_assert_eq(graph_f32_to_f16(f), h, "f16 0x%04x -> %a -> 0x%04x", h, (double)f,
                     graph_f32_to_f16(f));
        if (isnan(f))
            continue;
        cr_assert(same_double(graph_round_f16(f), f), "0x%04x is not a fixed point", h);
        uint16_t stored;
        graph_scalar_store(&stored, KILN_F16, 0, F(f));
        cr_assert_eq(stored, h);
        cr_assert(same_double(graph_scalar_load(&stored, KILN_F16, 0).f, f));
    }
}

Test(graph_dtype, f16_decodes_known_values)
{
    cr_assert_eq(graph_f16_to_f32(0x3C00), 1.0f);
    cr_assert_eq(graph_f16_to_f32(0xC000), -2.0f);
    cr_assert_eq(graph_f16_to_f32(0x7BFF), 65504.0f);
    cr_assert_eq(graph_f16_to_f32(0x0400), 0x1p-14f);
    cr_assert_eq(graph_f16_to_f32(0x0001), 0x1p-24f);
    cr_assert_eq(graph_f16_to_f32(0x03FF), 0x3FFp-24f);
    cr_assert(isinf(graph_f16_to_f32(0x7C00)) && graph_f16_to_f32(0x7C00) > 0);
    cr_assert(isinf(graph_f16_to_f32(0xFC00)) && graph_f16_to_f32(0xFC00) < 0);
    cr_assert(isnan(graph_f16_to_f32(0x7E00)));
    cr_assert(signbit(graph_f16_to_f32(0x8000)) && graph_f16_to_f32(0x8000) == 0.0f);
}

/* Checks rounding at the midpoint between every two neighbouring values lo
 * (bit pattern h) and hi (h + 1) of a 16-bit format, and just either side of
 * it, in float and in double: the double checks would fail if the rounding
 * went through float first. */
static void check_midpoints(const char *name, uint16_t h, double lo, double hi,
                            uint16_t (*from_f32)(float), double (*round_d)(double),
                            double hi_value)
{
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
    double even_value = (h & 1) ? hi_value : lo;
    double mid = (lo + hi) / 2;
    cr_assert_eq((double)(float)mid, mid);
    cr_assert_eq(from_f32((float)mid), even, "%s tie %a", name, mid);
    cr_assert_eq(from_f32(nextafterf((float)mid, 0.0f)), h, "%s below %a", name, mid);
    cr_assert_eq(from_f32(nextafterf((float)mid, INFINITY)), h + 1, "%s above %a", name, mid);
    cr_assert(same_double(round_d(mid), even_value), "%s round tie %a", name, mid);
    cr_assert(same_double(round_d(nextafter(mid, 0.0)), lo), "%s round below %a", name, mid);
    cr_assert(same_double(round_d(nextafter(mid, INFINITY)), hi_value), "%s round above %a",
              name, mid);
    /* the same, mirrored */
    uint16_t s = 0x8000;
    cr_assert_eq(from_f32((float)-mid), even | s, "%s tie %a", name, -mid);
    cr_assert_eq(from_f32(nextafterf((float)-mid, 0.0f)), h | s);
    cr_assert(same_double(round_d(-nextafter(mid, INFINITY)), -hi_value));
}

Test(graph_dtype, f16_rounds_to_nearest_even_everywhere)
{
    for (uint16_t h = 0; h < 0x7C00; h++) {
        double lo = graph_f16_to_f32(h);
        /* above the largest finite value the next step would be 2^16 */
        double hi = h == 0x7BFF ? 65536.0 : graph_f16_to_f32((uint16_t)(h + 1));
        check_midpoints("f16", h, lo, hi, graph_f32_to_f16, graph_round_f16,
                        graph_f16_to_f32((uint16_t)(h + 1)));
    }
}

Test(graph_dtype, f16_overflow_underflow_and_subnormals)
{
    cr_assert_eq(graph_f32_to_f16(65504.0f), 0x7BFF);
    cr_assert_eq(graph_f32_to_f16(65519.0f), 0x7BFF);
    cr_assert_eq(graph_f32_to_f16(65520.0f), 0x7C00);
    cr_assert_eq(graph_f32_to_f16(1e10f), 0x7C00);
    cr_assert_eq(graph_f32_to_f16(-1e10f), 0xFC00);
    cr_assert_eq(graph_f32_to_f16(INFINITY), 0x7C00);
    cr_assert_eq(graph_f32_to_f16(-0.0f), 0x8000);
    cr_assert_eq(graph_f32_to_f16(0x1p-24f), 0x0001);
    cr_assert_eq(graph_f32_to_f16(0x1p-25f), 0x0000);   /* tie with 0: even */
    cr_assert_eq(graph_f32_to_f16(-0x1p-25f), 0x8000);
    cr_assert_eq(graph_f32_to_f16(0x1.8p-24f), 0x0002); /* tie 1 vs 2: even */
    cr_assert_eq(graph_f32_to_f16(0x1.000002p-25f), 0x0001);
    cr_assert_eq(graph_f32_to_f16(0x1p-30f), 0x0000);
    cr_assert_eq(graph_f32_to_f16(0x1.ff8p-15f), 0x03FF); /* largest subnormal */
    cr_assert_eq(graph_f32_to_f16(0x1.ffcp-15f), 0x0400); /* its tie with 2^-14: even */
    cr_assert_eq(graph_round_f16(0x1p-25), 0.0);
    cr_assert_eq(graph_round_f16(0x1.0000000001p-25), 0x1p-24);
    cr_assert_eq(graph_round_f16(0x1.8p-24), 0x1p-23);
    cr_assert_eq(graph_round_f16(65520.0), INFINITY);
    cr_assert_eq(graph_round_f16(65519.99), 65504.0);
    cr_assert_eq(graph_round_f16(1e300), INFINITY);
    cr_assert_eq(graph_round_f16(-1e-300), 0.0);
    cr_assert(signbit(graph_round_f16(-1e-300)));
    cr_assert(isnan(graph_round_f16(NAN)));
    uint16_t nan = graph_f32_to_f16(NAN);
    cr_assert((nan & 0x7C00) == 0x7C00 && (nan & 0x3FF) != 0);
}

Test(graph_dtype, rounding_from_double_is_not_double_rounding)
{
    /* Through float, 1 + 2^-11 + 2^-40 first becomes the tie 1 + 2^-11 and
     * then rounds down to even; the correct result is up. */
    cr_assert_eq(graph_round_f16(1.0 + 0x1p-11 + 0x1p-40), 1.0 + 0x1p-10);
    cr_assert_eq(graph_round_bf16(1.0 + 0x1p-8 + 0x1p-40), 1.0 + 0x1p-7);
    cr_assert_eq(graph_scalar_from_double(1.0 + 0x1p-11 + 0x1p-40, KILN_F16).f, 1.0 + 0x1p-10);
    uint16_t h;
    graph_scalar_store(&h, KILN_F16, 0, F(1.0 + 0x1p-11 + 0x1p-40));
    cr_assert_eq(h, 0x3C01);
    graph_scalar_store(&h, KILN_BF16, 0, F(1.0 + 0x1p-8 + 0x1p-40));
    cr_assert_eq(h, 0x3F81);
}

/* ---- bf16 ---- */

Test(graph_dtype, bf16_round_trips_every_bit_pattern)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = graph_bf16_to_f32((uint16_t)h);
        cr_assert_eq(graph_f32_to_bf16(f), h, "bf16 0x%04x", h);
        if (isnan(f))
            continue;
        cr_assert(same_double(graph_round_bf16(f), f), "0x%04x is not a fixed point", h);
        uint16_t stored;
        graph_scalar_store(&stored, KILN_BF16, 0, F(f));
        cr_assert_eq(stored, h);
        cr_assert(same_double(graph_scalar_load(&stored, KILN_BF16, 0).f, f));
    }
}

Test(graph_dtype, bf16_rounds_to_nearest_even_everywhere)
{
    for (uint16_t h = 0; h < 0x7F80; h++) {
        double lo = graph_bf16_to_f32(h);
        double hi = h == 0x7F7F ? 0x1p128 : graph_bf16_to_f32((uint16_t)(h + 1));
        check_midpoints("bf16", h, lo, hi, graph_f32_to_bf16, graph_round_bf16,
                        graph_bf16_to_f32((uint16_t)(h + 1)));
    }
}

Test(graph_dtype, bf16_special_values)
{
    cr_assert_eq(graph_f32_to_bf16(1.0f), 0x3F80);
    cr_assert_eq(graph_f32_to_bf16(0x1.01p0f), 0x3F80);  /* tie: even */
    cr_assert_eq(graph_f32_to_bf16(0x1.03p0f), 0x3F82);  /* tie: even, upward */
    cr_assert_eq(graph_f32_to_bf16(0x1p-133f), 0x0001); /* smallest subnormal */
    cr_assert_eq(graph_f32_to_bf16(0x1p-134f), 0x0000);
    cr_assert_eq(graph_f32_to_bf16(3.4e38f), 0x7F80);   /* past max + half ulp */
    cr_assert_eq(graph_f32_to_bf16(-INFINITY), 0xFF80);
    uint16_t nan = graph_f32_to_bf16(NAN);
    cr_assert((nan & 0x7F80) == 0x7F80 && (nan & 0x7F) != 0);
    cr_assert_eq(graph_round_bf16(0x1p-134), 0.0);
    cr_assert_eq(graph_round_bf16(0x1.8p-133), 0x1p-132);
}

/* ---- conversions ---- */

Test(graph_dtype, float_kinds)
{
    cr_assert(graph_dtype_is_float(KILN_F32));
    cr_assert(graph_dtype_is_float(KILN_F64));
    cr_assert(graph_dtype_is_float(KILN_F16));
    cr_assert(graph_dtype_is_float(KILN_BF16));
    cr_assert(!graph_dtype_is_float(KILN_I32));
    cr_assert(!graph_dtype_is_float(KILN_I64));
    cr_assert(!graph_dtype_is_float(KILN_U8));
    cr_assert(!graph_dtype_is_float(KILN_BOOL));
}

Test(graph_dtype, float_to_int_truncates_and_saturates)
{
    cr_assert_eq(cvt_fi(3.9, KILN_I32), 3);
    cr_assert_eq(cvt_fi(-3.9, KILN_I32), -3);
    cr_assert_eq(cvt_fi(NAN, KILN_I32), 0);
    cr_assert_eq(cvt_fi(NAN, KILN_I64), 0);
    cr_assert_eq(cvt_fi(NAN, KILN_U8), 0);
    cr_assert_eq(cvt_fi(1e10, KILN_I32), INT32_MAX);
    cr_assert_eq(cvt_fi(-1e10, KILN_I32), INT32_MIN);
    cr_assert_eq(cvt_fi(2147483647.9, KILN_I32), INT32_MAX);
    cr_assert_eq(cvt_fi(-2147483648.9, KILN_I32), INT32_MIN);
    cr_assert_eq(cvt_fi(INFINITY, KILN_I32), INT32_MAX);
    cr_assert_eq(cvt_fi(1e30, KILN_I64), INT64_MAX);
    cr_assert_eq(cvt_fi(0x1p63, KILN_I64), INT64_MAX);
    cr_assert_eq(cvt_fi(-0x1p63, KILN_I64), INT64_MIN);
    cr_assert_eq(cvt_fi(-INFINITY, KILN_I64), INT64_MIN);
    cr_assert_eq(cvt_fi(0x1.fffffffffffffp62, KILN_I64), INT64_C(0x7FFFFFFFFFFFFC00));
    cr_assert_eq(cvt_fi(-5.5, KILN_U8), 0);
    cr_assert_eq(cvt_fi(255.9, KILN_U8), 255);
    cr_assert_eq(cvt_fi(300.0, KILN_U8), 255);
    cr_assert_eq(cvt_fi(0.5, KILN_BOOL), 1);
    cr_assert_eq(cvt_fi(-0.0, KILN_BOOL), 0);
    cr_assert_eq(cvt_fi(NAN, KILN_BOOL), 1);
}

Test(graph_dtype, int_to_int_wraps)
{
    cr_assert_eq(cvt_ii(INT64_C(0x80000000), KILN_I32), INT32_MIN);
    cr_assert_eq(cvt_ii(INT64_C(0x100000005), KILN_I32), 5);
    cr_assert_eq(cvt_ii(-1, KILN_I32), -1);
    cr_assert_eq(cvt_ii(-1, KILN_U8), 255);
    cr_assert_eq(cvt_ii(256, KILN_U8), 0);
    cr_assert_eq(cvt_ii(-257, KILN_U8), 255);
    cr_assert_eq(cvt_ii(2, KILN_BOOL), 1);
    cr_assert_eq(cvt_ii(256, KILN_BOOL), 1); /* != 0, not the low bits */
    cr_assert_eq(cvt_ii(0, KILN_BOOL), 0);
    cr_assert_eq(cvt_ii(INT64_MIN, KILN_I64), INT64_MIN);
}

Test(graph_dtype, int_to_float_rounds_once)
{
    /* via double, 2^60 + 2^36 + 1 would become the f32 tie 2^60 + 2^36 */
    cr_assert_eq(cvt_if(INT64_C(1) << 60 | INT64_C(1) << 36 | 1, KILN_F32), 0x1p60 + 0x1p37);
    cr_assert_eq(cvt_if(-(INT64_C(1) << 60 | INT64_C(1) << 36 | 1), KILN_F32),
                 -(0x1p60 + 0x1p37));
    cr_assert_eq(cvt_if(INT64_MAX, KILN_F64), 0x1p63);
    cr_assert_eq(cvt_if(INT64_MIN, KILN_F64), -0x1p63);
    cr_assert_eq(cvt_if(INT64_MAX, KILN_F32), 0x1p63);
    cr_assert_eq(cvt_if(2049, KILN_F16), 2048.0);
    cr_assert_eq(cvt_if(2051, KILN_F16), 2052.0);
    cr_assert_eq(cvt_if(65519, KILN_F16), 65504.0);
    cr_assert_eq(cvt_if(65520, KILN_F16), INFINITY);
    cr_assert_eq(cvt_if(-70000, KILN_F16), -INFINITY);
    cr_assert_eq(cvt_if(257, KILN_BF16), 256.0);
    cr_assert_eq(cvt_if(259, KILN_BF16), 260.0);
    cr_assert_eq(cvt_if(INT64_MIN, KILN_BF16), -0x1p63);
    cr_assert_eq(cvt_if(0, KILN_F32), 0.0);
    cr_assert(!signbit(cvt_if(0, KILN_F32)));
}

Test(graph_dtype, float_to_float_and_casts)
{
    cr_assert_eq(graph_scalar_from_double(0.1, KILN_F32).f, (double)0.1f);
    cr_assert_eq(graph_scalar_from_double(0.1, KILN_F64).f, 0.1);
    cr_assert_eq(graph_scalar_from_double(1e39, KILN_F32).f, INFINITY);
    cr_assert_eq(graph_scalar_to_double(I(-7), KILN_I32), -7.0);
    cr_assert_eq(graph_scalar_to_double(F(2.5), KILN_F16), 2.5);

    cr_assert_eq(graph_scalar_unary(GRAPH_CAST, KILN_F32, KILN_I32, F(-2.75)).i, -2);
    cr_assert_eq(graph_scalar_unary(GRAPH_CAST, KILN_I32, KILN_BOOL, I(-3)).i, 1);
    cr_assert_eq(graph_scalar_unary(GRAPH_CAST, KILN_BOOL, KILN_F16, I(1)).f, 1.0);
    cr_assert_eq(graph_scalar_unary(GRAPH_CAST, KILN_F64, KILN_F16, F(1.0 + 0x1p-11)).f, 1.0);
    cr_assert_eq(graph_scalar_unary(GRAPH_CAST, KILN_F16, KILN_BF16, F(1.0 + 0x1p-10)).f, 1.0);
    cr_assert_eq(graph_scalar_unary(GRAPH_CAST, KILN_U8, KILN_I32, I(200)).i, 200);
    cr_assert_eq(graph_scalar_unary(GRAPH_CAST, KILN_I32, KILN_U8, I(-56)).i, 200);
    cr_assert_eq(graph_scalar_unary(GRAPH_CAST, KILN_F32, KILN_U8, F(-56.0)).i, 0);
    cr_assert_eq(graph_scalar_unary(GRAPH_CAST, KILN_I64, KILN_F64, I(123)).f, 123.0);
}

/* ---- unary ops ---- */

Test(graph_dtype, integer_unary_keeps_dtype_and_wraps)
{
    cr_assert_eq(graph_scalar_unary(GRAPH_ABS, KILN_I64, KILN_I64, I(INT64_MIN)).i, INT64_MIN);
    cr_assert_eq(graph_scalar_unary(GRAPH_ABS, KILN_I32, KILN_I32, I(INT32_MIN)).i, INT32_MIN);
    cr_assert_eq(graph_scalar_unary(GRAPH_ABS, KILN_I32, KILN_I32, I(-5)).i, 5);
    cr_assert_eq(graph_scalar_unary(GRAPH_NEG, KILN_I64, KILN_I64, I(INT64_MIN)).i, INT64_MIN);
    cr_assert_eq(graph_scalar_unary(GRAPH_NEG, KILN_I32, KILN_I32, I(INT32_MIN)).i, INT32_MIN);
    cr_assert_eq(graph_scalar_unary(GRAPH_NEG, KILN_I32, KILN_I32, I(7)).i, -7);
    cr_assert_eq(graph_scalar_unary(GRAPH_NEG, KILN_U8, KILN_U8, I(1)).i, 255);
    cr_assert_eq(graph_scalar_unary(GRAPH_RELU, KILN_I32, KILN_I32, I(-4)).i, 0);
    cr_assert_eq(graph_scalar_unary(GRAPH_RELU, KILN_I32, KILN_I32, I(4)).i, 4);
    cr_assert_eq(graph_scalar_unary(GRAPH_ABS, KILN_U8, KILN_U8, I(200)).i, 200);
}

static double un(graph_op op, kiln_dtype dt, double x)
{
    return graph_scalar_unary(op, dt, dt, F(x)).f;
}

Test(graph_dtype, float_unary_values)
{
    cr_assert_eq(un(GRAPH_NEG, KILN_F32, 1.5), -1.5);
    cr_assert_eq(un(GRAPH_ABS, KILN_F16, -2.0), 2.0);
    cr_assert_eq(un(GRAPH_EXP, KILN_F32, 1.0), (double)(float)exp(1.0));
    cr_assert_eq(un(GRAPH_EXP, KILN_F64, 1.0), exp(1.0));
    cr_assert_eq(un(GRAPH_LOG, KILN_F64, 1.0), 0.0);
    cr_assert_eq(un(GRAPH_SQRT, KILN_F64, 9.0), 3.0);
    cr_assert_eq(un(GRAPH_RSQRT, KILN_F64, 4.0), 0.5);
    cr_assert_eq(un(GRAPH_RECIP, KILN_F64, 4.0), 0.25);
    cr_assert_eq(un(GRAPH_RECIP, KILN_F32, 0.0), INFINITY);
    cr_assert_eq(un(GRAPH_SIN, KILN_F64, 0.5), sin(0.5));
    cr_assert_eq(un(GRAPH_COS, KILN_F64, 0.5), cos(0.5));
    cr_assert_eq(un(GRAPH_TANH, KILN_F64, 0.5), tanh(0.5));
    cr_assert_eq(un(GRAPH_TANH, KILN_F64, 1000.0), 1.0);
    cr_assert(isnan(un(GRAPH_LOG, KILN_F32, -1.0)));
    cr_assert(isnan(un(GRAPH_RELU, KILN_F32, NAN)));
    cr_assert_eq(un(GRAPH_RELU, KILN_F32, -3.0), 0.0);
    cr_assert_eq(un(GRAPH_RELU, KILN_BF16, 3.0), 3.0);
    cr_assert_eq(un(GRAPH_EXP, KILN_F16, 12.0), INFINITY); /* e^12 > 65504 */
}

Test(graph_dtype, activations_are_stable)
{
    cr_assert_eq(un(GRAPH_SIGMOID, KILN_F64, 0.0), 0.5);
    cr_assert_eq(un(GRAPH_SIGMOID, KILN_F64, 1000.0), 1.0);
    cr_assert_eq(un(GRAPH_SIGMOID, KILN_F64, -1000.0), 0.0);
    cr_assert_eq(un(GRAPH_SIGMOID, KILN_F64, INFINITY), 1.0);
    cr_assert_eq(un(GRAPH_SIGMOID, KILN_F64, -INFINITY), 0.0);
    cr_assert_float_eq(un(GRAPH_SIGMOID, KILN_F64, -30.0), exp(-30.0) / (1 + exp(-30.0)), 1e-25);
    cr_assert_float_eq(un(GRAPH_SIGMOID, KILN_F64, 2.0), 1.0 / (1.0 + exp(-2.0)), 1e-16);

    cr_assert_eq(un(GRAPH_SILU, KILN_F64, 0.0), 0.0);
    cr_assert_eq(un(GRAPH_SILU, KILN_F64, 1000.0), 1000.0);
    cr_assert_eq(un(GRAPH_SILU, KILN_F64, -1000.0), 0.0);
    cr_assert_eq(un(GRAPH_SILU, KILN_F64, -INFINITY), 0.0);
    cr_assert_eq(un(GRAPH_SILU, KILN_F64, INFINITY), INFINITY);
    cr_assert_float_eq(un(GRAPH_SILU, KILN_F64, -2.0), -2.0 / (1.0 + exp(2.0)), 1e-16);

    cr_assert_float_eq(un(GRAPH_GELU, KILN_F64, 1.0), 0.8413447460685429, 1e-15);
    cr_assert_float_eq(un(GRAPH_GELU, KILN_F64, -1.0), -0.15865525393145707, 1e-15);
    cr_assert_eq(un(GRAPH_GELU, KILN_F64, 0.0), 0.0);
    cr_assert_eq(un(GRAPH_GELU, KILN_F64, INFINITY), INFINITY);
    cr_assert_eq(un(GRAPH_GELU, KILN_F64, -INFINITY), 0.0);
    /* 1 + erf(x / sqrt 2) cancels to 0 here; the exact value is not 0 */
    double g = un(GRAPH_GELU, KILN_F64, -10.0);
    cr_assert(g < 0.0 && g > -1e-20, "gelu(-10) = %g", g);
    cr_assert(!isnan(un(GRAPH_GELU, KILN_F32, -100.0)));
}

/* ---- binary ops ---- */

Test(graph_dtype, integer_arithmetic_wraps)
{
    cr_assert_eq(bin_i(GRAPH_ADD, KILN_I32, INT32_MAX, 1), INT32_MIN);
    cr_assert_eq(bin_i(GRAPH_SUB, KILN_I32, INT32_MIN, 1), INT32_MAX);
    cr_assert_eq(bin_i(GRAPH_MUL, KILN_I32, 65536, 65536), 0);
    cr_assert_eq(bin_i(GRAPH_MUL, KILN_I32, 65537, 65537), 131073);
    cr_assert_eq(bin_i(GRAPH_ADD, KILN_I64, INT64_MAX, 1), INT64_MIN);
    cr_assert_eq(bin_i(GRAPH_MUL, KILN_I64, INT64_MIN, -1), INT64_MIN);
    cr_assert_eq(bin_i(GRAPH_ADD, KILN_U8, 200, 100), 44);
    cr_assert_eq(bin_i(GRAPH_SUB, KILN_U8, 3, 5), 254);
    cr_assert_eq(bin_i(GRAPH_MUL, KILN_U8, 16, 17), 16);
    cr_assert_eq(bin_i(GRAPH_ADD, KILN_BOOL, 1, 1), 1);
    cr_assert_eq(bin_i(GRAPH_MUL, KILN_BOOL, 1, 0), 0);
    cr_assert_eq(bin_i(GRAPH_MAXIMUM, KILN_I32, -3, 2), 2);
    cr_assert_eq(bin_i(GRAPH_MINIMUM, KILN_I64, INT64_MIN, 2), INT64_MIN);
}

Test(graph_dtype, integer_division_floors)
{
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I32, 7, 2), 3);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I32, -7, 2), -4);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I32, 7, -2), -4);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I32, -7, -2), 3);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I32, 6, -3), -2);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I32, -6, 3), -2);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I32, 0, -3), 0);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I64, 1, 0), 0);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I64, -1, 0), 0);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_U8, 200, 0), 0);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_U8, 200, 7), 28);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I64, INT64_MIN, -1), INT64_MIN);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I32, INT32_MIN, -1), INT32_MIN);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I64, INT64_MIN, 1), INT64_MIN);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I64, INT64_MIN, 2), INT64_MIN / 2);
    cr_assert_eq(bin_i(GRAPH_DIV, KILN_I64, INT64_MAX, -2), -(INT64_MAX / 2) - 1);
}

Test(graph_dtype, integer_powers)
{
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, 2, 10), 1024);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, 3, 0), 1);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, 0, 0), 1);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, 0, 5), 0);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, -2, 3), -8);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, 2, -1), 0);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, 0, -1), 0);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, 1, -5), 1);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, -1, -3), -1);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, -1, -4), 1);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I64, -1, INT64_MIN), 1);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I64, -1, INT64_MAX), -1);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, 2, 31), INT32_MIN);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I32, 2, 32), 0);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I64, 2, 62), INT64_C(1) << 62);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I64, 2, 63), INT64_MIN);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I64, 2, 64), 0);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_I64, 1, INT64_MAX), 1);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_U8, 3, 5), 243);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_U8, 3, 6), 729 % 256);
    cr_assert_eq(bin_i(GRAPH_POW, KILN_U8, 2, 8), 0);
    /* 3^40 wraps: compare with repeated wrapping multiplication */
    uint64_t p = 1;
    for (int k = 0; k < 40; k++)
        p *= 3;
    cr_assert_eq((uint64_t)bin_i(GRAPH_POW, KILN_I64, 3, 40), p);
    uint32_t p32 = 1;
    for (int k = 0; k < 25; k++)
        p32 *= 7;
    cr_assert_eq((uint32_t)bin_i(GRAPH_POW, KILN_I32, 7, 25), p32);
}

Test(graph_dtype, float_binary_rounds_to_dtype)
{
    cr_assert_eq(bin_f(GRAPH_ADD, KILN_F16, 1.0, 0x1p-11), 1.0);
    cr_assert_eq(bin_f(GRAPH_ADD, KILN_F16, 1.0 + 0x1p-10, 0x1p-11), 1.0 + 0x1p-9);
    cr_assert_eq(bin_f(GRAPH_ADD, KILN_F16, 60000.0, 10000.0), INFINITY);
    cr_assert_eq(bin_f(GRAPH_ADD, KILN_BF16, 256.0, 1.0), 256.0);
    cr_assert_eq(bin_f(GRAPH_DIV, KILN_F32, 1.0, 3.0), (double)(1.0f / 3.0f));
    cr_assert_eq(bin_f(GRAPH_DIV, KILN_F64, 1.0, 3.0), 1.0 / 3.0);
    cr_assert_eq(bin_f(GRAPH_DIV, KILN_F32, 1.0, 0.0), INFINITY);
    cr_assert(isnan(bin_f(GRAPH_DIV, KILN_F32, 0.0, 0.0)));
    cr_assert_eq(bin_f(GRAPH_MUL, KILN_F32, 0x1p100, 0x1p100), INFINITY);
    cr_assert_eq(bin_f(GRAPH_SUB, KILN_F64, 0.5, 0.25), 0.25);
    cr_assert_eq(bin_f(GRAPH_POW, KILN_F32, 2.0, 0.5), (double)(float)sqrt(2.0));
    cr_assert_eq(bin_f(GRAPH_POW, KILN_F64, 3.0, 2.0), 9.0);
    cr_assert(isnan(bin_f(GRAPH_POW, KILN_F64, -8.0, 1.0 / 3.0)));
}

Test(graph_dtype, maximum_minimum_propagate_nan)
{
    cr_assert(isnan(bin_f(GRAPH_MAXIMUM, KILN_F32, NAN, 1.0)));
    cr_assert(isnan(bin_f(GRAPH_MAXIMUM, KILN_F32, 1.0, NAN)));
    cr_assert(isnan(bin_f(GRAPH_MINIMUM, KILN_F64, NAN, 1.0)));
    cr_assert(isnan(bin_f(GRAPH_MINIMUM, KILN_F64, 1.0, NAN)));
    cr_assert_eq(bin_f(GRAPH_MAXIMUM, KILN_F32, 1.0, 2.0), 2.0);
    cr_assert_eq(bin_f(GRAPH_MAXIMUM, KILN_F32, -INFINITY, -3.0), -3.0);
    cr_assert_eq(bin_f(GRAPH_MINIMUM, KILN_F16, 1.0, 2.0), 1.0);
}

Test(graph_dtype, comparisons_give_bool)
{
    struct {
        graph_op op;
        int lt, eq, gt, nan;
    } cases[] = {
        {GRAPH_LT, 1, 0, 0, 0}, {GRAPH_LE, 1, 1, 0, 0}, {GRAPH_GT, 0, 0, 1, 0},
        {GRAPH_GE, 0, 1, 1, 0}, {GRAPH_EQ, 0, 1, 0, 0}, {GRAPH_NE, 1, 0, 1, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        graph_op op = cases[c].op;
        cr_assert_eq(graph_scalar_binary(op, KILN_F32, F(1), F(2)).i, cases[c].lt);
        cr_assert_eq(graph_scalar_binary(op, KILN_F32, F(2), F(2)).i, cases[c].eq);
        cr_assert_eq(graph_scalar_binary(op, KILN_F32, F(3), F(2)).i, cases[c].gt);
        cr_assert_eq(graph_scalar_binary(op, KILN_F64, F(NAN), F(2)).i, cases[c].nan);
        cr_assert_eq(graph_scalar_binary(op, KILN_F64, F(2), F(NAN)).i, cases[c].nan);
        cr_assert_eq(graph_scalar_binary(op, KILN_F16, F(NAN), F(NAN)).i, cases[c].nan);
        cr_assert_eq(graph_scalar_binary(op, KILN_I64, I(INT64_MIN), I(INT64_MAX)).i,
                     cases[c].lt);
        cr_assert_eq(graph_scalar_binary(op, KILN_U8, I(7), I(7)).i, cases[c].eq);
        cr_assert_eq(graph_scalar_binary(op, KILN_BOOL, I(1), I(0)).i, cases[c].gt);
    }
    cr_assert_eq(graph_scalar_binary(GRAPH_EQ, KILN_F32, F(0.0), F(-0.0)).i, 1);
}

/* ---- memory ---- */

Test(graph_dtype, load_and_store_every_dtype)
{
    union {
        float f32[3];
        double f64[3];
        uint16_t u16[3];
        int32_t i32[3];
        int64_t i64[3];
        uint8_t u8[3];
    } m;
    memset(&m, 0, sizeof m);

    graph_scalar_store(&m, KILN_F32, 2, F(0.1));
    cr_assert_eq(m.f32[2], 0.1f);
    cr_assert_eq(graph_scalar_load(&m, KILN_F32, 2).f, (double)0.1f);

    graph_scalar_store(&m, KILN_F64, 1, F(0.1));
    cr_assert_eq(graph_scalar_load(&m, KILN_F64, 1).f, 0.1);

    graph_scalar_store(&m, KILN_F16, 1, F(-2.5));
    cr_assert_eq(m.u16[1], 0xC100);
    cr_assert_eq(graph_scalar_load(&m, KILN_F16, 1).f, -2.5);

    graph_scalar_store(&m, KILN_BF16, 2, F(-2.5));
    cr_assert_eq(m.u16[2], 0xC020);
    cr_assert_eq(graph_scalar_load(&m, KILN_BF16, 2).f, -2.5);

    graph_scalar_store(&m, KILN_I32, 1, I(-123456));
    cr_assert_eq(m.i32[1], -123456);
    cr_assert_eq(graph_scalar_load(&m, KILN_I32, 1).i, -123456);

    graph_scalar_store(&m, KILN_I64, 2, I(INT64_MIN));
    cr_assert_eq(graph_scalar_load(&m, KILN_I64, 2).i, INT64_MIN);

    graph_scalar_store(&m, KILN_U8, 1, I(250));
    cr_assert_eq(m.u8[1], 250);
    cr_assert_eq(graph_scalar_load(&m, KILN_U8, 1).i, 250);

    graph_scalar_store(&m, KILN_BOOL, 0, I(1));
    cr_assert_eq(m.u8[0], 1);
    m.u8[2] = 7; /* any nonzero byte reads as true */
    cr_assert_eq(graph_scalar_load(&m, KILN_BOOL, 2).i, 1);
    m.u8[2] = 0;
    cr_assert_eq(graph_scalar_load(&m, KILN_BOOL, 2).i, 0);

    graph_scalar_store(&m, KILN_F16, 0, F(NAN));
    cr_assert(isnan(graph_scalar_load(&m, KILN_F16, 0).f));
    graph_scalar_store(&m, KILN_BF16, 0, F(-INFINITY));
    cr_assert_eq(graph_scalar_load(&m, KILN_BF16, 0).f, -INFINITY);
}
