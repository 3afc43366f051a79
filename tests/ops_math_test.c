/* Tests of the elementwise ops of api/math.c: rounding, the libm functions,
 * remainders and divisions, bitwise ops and shifts, sign, logaddexp and
 * isclose. Values against float64 loops in C (libm) on every float dtype,
 * integer semantics against hand-computed values at the edges (negative
 * operands, zero divisors, INT_MIN, shift counts out of range), special
 * values, dtype errors, and one kernel for each composition. */
#include "test_util.h"

#define PI 3.14159265358979323846

typedef kiln_tensor *(*unary_fn)(kiln_tensor *);
typedef kiln_tensor *(*binary_fn)(kiln_tensor *, kiln_tensor *);

static double ref_round(double x) { return nearbyint(x); }
static double ref_sign(double x) { return x > 0 ? 1 : x < 0 ? -1 : x; }

typedef struct unary_case {
    const char *name;
    unary_fn fn;
    double (*ref)(double);
    double lo, hi;
} unary_case;

static const unary_case unary_cases[] = {
    {"floor", kiln_floor, floor, -20, 20},   {"ceil", kiln_ceil, ceil, -20, 20},
    {"trunc", kiln_trunc, trunc, -20, 20},   {"round", kiln_round, ref_round, -20, 20},
    {"sign", kiln_sign, ref_sign, -3, 3},    {"tan", kiln_tan, tan, -1.5, 1.5},
    {"asin", kiln_asin, asin, -1, 1},        {"acos", kiln_acos, acos, -1, 1},
    {"atan", kiln_atan, atan, -20, 20},      {"sinh", kiln_sinh, sinh, -5, 5},
    {"cosh", kiln_cosh, cosh, -5, 5},        {"asinh", kiln_asinh, asinh, -20, 20},
    {"acosh", kiln_acosh, acosh, 1, 20},     {"atanh", kiln_atanh, atanh, -0.99, 0.99},
    {"erf", kiln_erf, erf, -4, 4},           {"erfc", kiln_erfc, erfc, -3, 9},
    {"expm1", kiln_expm1, expm1, -3, 3},     {"log1p", kiln_log1p, log1p, -0.9, 5},
};
#define NUNARY (int)(sizeof unary_cases / sizeof unary_cases[0])

TU_TEST(math, unary_every_float_dtype) {
    TU_RNG(r);
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    enum { N = 5 * 29 };
    double in[N], want[N];
    for (int c = 0; c < NUNARY; c++) {
        for (int k = 0; k < nf; k++) {
            kiln_dtype dt = fl[k];
            tu_fill(&r, dt, in, N, unary_cases[c].lo, unary_cases[c].hi);
            kiln_tensor *y = unary_cases[c].fn(tu_tensor(ctx, dt, TU_S(5, 29), in));
            TU_ASSERT_SHAPE(y, 5, 29);
            for (int i = 0; i < N; i++)
                want[i] = unary_cases[c].ref(in[i]);
            cr_assert(kiln_dtype_of(y) == dt, "[%s] kiln_%s of %s gave %s", tu_exec_name(),
                      unary_cases[c].name, tu_dt_name(dt), tu_dt_name(kiln_dtype_of(y)));
            TU_EXPECT(y, dt, want, N);
        }
    }
}

/* Values near 0, where expm1, log1p, erf, sinh, asinh, atanh and tan must
 * keep their relative digits (1 - erfc or exp - 1 would lose them all). */
TU_TEST(math, tiny_arguments_keep_their_digits) {
    const double v[] = {1e-9, -3e-7, 2.5e-5};
    unary_fn fns[] = {kiln_expm1, kiln_log1p, kiln_erf, kiln_sinh, kiln_asinh, kiln_atanh,
                      kiln_tan, kiln_asin, kiln_atan};
    double (*refs[])(double) = {expm1, log1p, erf, sinh, asinh, atanh, tan, asin, atan};
    for (int f = 0; f < 9; f++) {
        for (int d = 0; d < 2; d++) {
            kiln_dtype dt = d ? KILN_F64 : KILN_F32;
            double got[3];
            TU_READ(fns[f](tu_tensor(ctx, dt, TU_S(3), v)), got, 3);
            for (int i = 0; i < 3; i++) {
                double x = tu_round(dt, v[i]), want = refs[f](x);
                double ulp = d ? 0x1p-52 : 0x1p-23;
                cr_assert(fabs(got[i] - want) <= 4 * ulp * fabs(want),
                          "[%s] %s: function %d of %g is %.17g, expected %.17g", tu_exec_name(),
                          tu_dt_name(dt), f, x, got[i], want);
            }
        }
    }
}

TU_TEST(math, rounding_edges) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        kiln_dtype dt = fl[k];
        kiln_tensor *x = tu_tensor(ctx, dt, TU_S(12),
                                   (double[]){0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.25, 3.75, -0.0,
                                              INFINITY, -INFINITY, NAN});
        TU_EXPECT_VALS(kiln_round(x), dt, 0, 2, 2, -0.0, -2, -2, -0.0, 4, -0.0, INFINITY,
                       -INFINITY, NAN);
        TU_EXPECT_VALS(kiln_floor(x), dt, 0, 1, 2, -1, -2, -3, -1, 3, -0.0, INFINITY, -INFINITY,
                       NAN);
        TU_EXPECT_VALS(kiln_ceil(x), dt, 1, 2, 3, -0.0, -1, -2, -0.0, 4, -0.0, INFINITY,
                       -INFINITY, NAN);
        TU_EXPECT_VALS(kiln_trunc(x), dt, 0, 1, 2, -0.0, -1, -2, -0.0, 3, -0.0, INFINITY,
                       -INFINITY, NAN);
        TU_EXPECT_VALS(kiln_sign(x), dt, 1, 1, 1, -1, -1, -1, -1, 1, -0.0, 1, -1, NAN);
        /* the sign of a zero result: round(-0.5), ceil(-0.25), sign(-0) are -0 */
        double v[12];
        TU_READ(kiln_round(x), v, 12);
        cr_assert(signbit(v[3]) && signbit(v[6]) && !signbit(v[0]),
                  "[%s] %s: round loses the sign of a zero result", tu_exec_name(),
                  tu_dt_name(dt));
        TU_READ(kiln_ceil(x), v, 12);
        cr_assert(signbit(v[6]), "[%s] %s: ceil(-0.25) is not -0", tu_exec_name(), tu_dt_name(dt));
    }
    /* past 2^52 (f64) and 2^23 (f32) every value is an integer already;
     * round(x + 0.5) would round twice */
    kiln_tensor *big = tu_tensor(ctx, KILN_F64, TU_S(3),
                                 (double[]){4503599627370497.0, 0.49999999999999994, -1e300});
    TU_EXPECT_VALS(kiln_round(big), KILN_F64, 4503599627370497.0, 0, -1e300);
    kiln_tensor *bigf = tu_tensor(ctx, KILN_F32, TU_S(2), (double[]){8388609.0, 0.49999997});
    TU_EXPECT_VALS(kiln_round(bigf), KILN_F32, 8388609.0, 0);
    /* integers and bool are their own rounding; sign keeps the dtype */
    const int64_t iv[] = {INT64_MIN, -7, 0, 9, INT64_MAX};
    const int64_t isign[] = {-1, -1, 0, 1, 1};
    kiln_tensor *xi = tu_tensor_i64(ctx, KILN_I64, TU_S(5), iv);
    TU_EXPECT_I64(kiln_round(xi), KILN_I64, iv, 5);
    TU_EXPECT_I64(kiln_floor(xi), KILN_I64, iv, 5);
    TU_EXPECT_I64(kiln_sign(xi), KILN_I64, isign, 5);
    kiln_tensor *xu = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){0, 7, 255});
    TU_EXPECT_VALS(kiln_ceil(xu), KILN_U8, 0, 7, 255);
    TU_EXPECT_VALS(kiln_sign(xu), KILN_U8, 0, 1, 1);
    kiln_tensor *xb = tu_tensor(ctx, KILN_BOOL, TU_S(2), (double[]){1, 0});
    TU_EXPECT_VALS(kiln_trunc(xb), KILN_BOOL, 1, 0);
    TU_EXPECT_VALS(kiln_sign(xb), KILN_BOOL, 1, 0);
}

TU_TEST(math, libm_special_values) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        kiln_dtype dt = fl[k];
        kiln_tensor *x = tu_tensor(ctx, dt, TU_S(6), (double[]){0, 1, -1, 2, INFINITY, NAN});
        TU_EXPECT_NEAR_VALS(kiln_asin(x), dt, 0, PI / 2, -PI / 2, NAN, NAN, NAN);
        TU_EXPECT_NEAR_VALS(kiln_acos(x), dt, PI / 2, 0, PI, NAN, NAN, NAN);
        TU_EXPECT_NEAR_VALS(kiln_atanh(x), dt, 0, INFINITY, -INFINITY, NAN, NAN, NAN);
        TU_EXPECT_NEAR_VALS(kiln_acosh(x), dt, NAN, 0, NAN, acosh(2.0), INFINITY, NAN);
        TU_EXPECT_NEAR_VALS(kiln_atan(x), dt, 0, PI / 4, -PI / 4, atan(2.0), PI / 2, NAN);
        TU_EXPECT_NEAR_VALS(kiln_erf(x), dt, 0, erf(1.0), -erf(1.0), erf(2.0), 1, NAN);
        TU_EXPECT_NEAR_VALS(kiln_erfc(x), dt, 1, erfc(1.0), erfc(-1.0), erfc(2.0), 0, NAN);
        TU_EXPECT_NEAR_VALS(kiln_log1p(x), dt, 0, log(2.0), -INFINITY, log(3.0), INFINITY, NAN);
        TU_EXPECT_NEAR_VALS(kiln_expm1(x), dt, 0, expm1(1.0), expm1(-1.0), expm1(2.0), INFINITY,
                            NAN);
        TU_EXPECT_NEAR_VALS(kiln_cosh(x), dt, 1, cosh(1.0), cosh(1.0), cosh(2.0), INFINITY, NAN);
    }
    /* integers compute in f32, as kiln_exp */
    kiln_tensor *xi = tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){0, 1, 3});
    kiln_tensor *t = kiln_atan(xi);
    TU_ASSERT_DTYPE(t, KILN_F32);
    TU_EXPECT_NEAR_VALS(t, KILN_F32, 0, atan(1.0), atan(3.0));
}

/* ---- binary -------------------------------------------------------------- */

static double ref_fmod(double a, double b) { return fmod(a, b); }
static double ref_mod(double a, double b) {
    double r = fmod(a, b);
    if (r != 0 && (r < 0) != (b < 0))
        r += b;
    return r;
}
static double ref_floordiv(double a, double b) { return floor(a / b); }
static double ref_truncdiv(double a, double b) { return trunc(a / b); }
static double ref_logaddexp(double a, double b) {
    double m = fmax(a, b);
    return m + log1p(exp(-fabs(a - b)));
}

typedef struct binary_case {
    const char *name;
    binary_fn fn;
    double (*ref)(double, double);
    double lo, hi;
    bool away_from_zero; /* b's magnitude at least 0.5 */
} binary_case;

static const binary_case binary_cases[] = {
    {"atan2", kiln_atan2, atan2, -5, 5, false},
    {"copysign", kiln_copysign, copysign, -5, 5, false},
    {"fmod", kiln_fmod, ref_fmod, -20, 20, true},
    {"mod", kiln_mod, ref_mod, -20, 20, true},
    {"floor_divide", kiln_floor_divide, ref_floordiv, -20, 20, true},
    {"trunc_divide", kiln_trunc_divide, ref_truncdiv, -20, 20, true},
    {"logaddexp", kiln_logaddexp, ref_logaddexp, -30, 30, false},
};
#define NBINARY (int)(sizeof binary_cases / sizeof binary_cases[0])

TU_TEST(math, binary_every_float_dtype) {
    TU_RNG(r);
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    enum { N = 4 * 23 };
    double a[N], b[N], want[N];
    for (int c = 0; c < NBINARY; c++) {
        for (int k = 0; k < nf; k++) {
            kiln_dtype dt = fl[k];
            tu_fill(&r, dt, a, N, binary_cases[c].lo, binary_cases[c].hi);
            tu_fill(&r, dt, b, 23, 0.5, 6);
            for (int i = 0; i < 23; i++)
                if (!binary_cases[c].away_from_zero || i % 2)
                    b[i] = tu_round(dt, b[i] * (i % 3 ? -1 : 1));
            /* b is [23], broadcast over a's rows */
            for (int i = 0; i < N; i++)
                want[i] = binary_cases[c].ref(a[i], b[i % 23]);
            kiln_tensor *y = binary_cases[c].fn(tu_tensor(ctx, dt, TU_S(4, 23), a),
                                                tu_tensor(ctx, dt, TU_S(23), b));
            TU_ASSERT_SHAPE(y, 4, 23);
            cr_assert(kiln_dtype_of(y) == dt, "[%s] kiln_%s of %s gave %s", tu_exec_name(),
                      binary_cases[c].name, tu_dt_name(dt), tu_dt_name(kiln_dtype_of(y)));
            TU_EXPECT(y, dt, want, N);
        }
    }
}

TU_TEST(math, float_remainder_edges) {
    kiln_tensor *a = tu_tensor(ctx, KILN_F64, TU_S(7), (double[]){5.5, -5.5, 5.5, -5.5, 6, -6, 1});
    kiln_tensor *b = tu_tensor(ctx, KILN_F64, TU_S(7), (double[]){2, 2, -2, -2, 3, 3, 0});
    TU_EXPECT_VALS(kiln_fmod(a, b), KILN_F64, 1.5, -1.5, 1.5, -1.5, 0, -0.0, NAN);
    TU_EXPECT_VALS(kiln_mod(a, b), KILN_F64, 1.5, 0.5, -0.5, -1.5, 0, 0, NAN);
    double v[7];
    TU_READ(kiln_fmod(a, b), v, 7);
    cr_assert(signbit(v[5]), "[%s] fmod(-6, 3) is not -0", tu_exec_name());
    TU_READ(kiln_mod(a, kiln_neg(b)), v, 7);
    cr_assert(signbit(v[4]) && signbit(v[5]), "[%s] mod(±6, -3) is not -0 (b's sign)",
              tu_exec_name());
    /* fmod is exact where a - trunc(a/b) b is not: a huge quotient */
    kiln_tensor *h = tu_tensor(ctx, KILN_F64, TU_S(1), (double[]){1e17});
    kiln_tensor *d = tu_tensor(ctx, KILN_F64, TU_S(1), (double[]){3});
    TU_EXPECT_VALS(kiln_fmod(h, d), KILN_F64, fmod(1e17, 3));
    /* atan2's quadrants and signed zeros; copysign of NaN and -0 */
    kiln_tensor *y = tu_tensor(ctx, KILN_F32, TU_S(5), (double[]){0, -0.0, 1, -1, 0});
    kiln_tensor *x = tu_tensor(ctx, KILN_F32, TU_S(5), (double[]){-1, -1, 0, -1, 0});
    TU_EXPECT_NEAR_VALS(kiln_atan2(y, x), KILN_F32, PI, -PI, PI / 2, -3 * PI / 4, 0);
    kiln_tensor *m = tu_tensor(ctx, KILN_F32, TU_S(3), (double[]){2, -3, NAN});
    kiln_tensor *s = tu_tensor(ctx, KILN_F32, TU_S(3), (double[]){-0.0, 1, -1});
    TU_EXPECT_VALS(kiln_copysign(m, s), KILN_F32, -2, 3, NAN);
    float f[3];
    cr_assert_eq(kiln_to_host(kiln_copysign(m, s), f, sizeof f), KILN_OK);
    cr_assert(signbit(f[2]), "[%s] copysign(NaN, -1) keeps NaN's sign", tu_exec_name());
    /* logaddexp without overflow, and with infinities */
    kiln_tensor *p = tu_tensor(ctx, KILN_F32, TU_S(5), (double[]){1000, -INFINITY, INFINITY, 3, NAN});
    kiln_tensor *q = tu_tensor(ctx, KILN_F32, TU_S(5), (double[]){1000, -INFINITY, -INFINITY, 3, 0});
    TU_EXPECT_NEAR_VALS(kiln_logaddexp(p, q), KILN_F32, 1000 + log(2.0), -INFINITY, INFINITY,
                        3 + log(2.0), NAN);
}

/* floor(a / b) would take the quotient's rounding: 1 / 0.1 rounds up to 10
 * in f64 though 0.1 is above a tenth (Python's 1 // 0.1 is 9.0). */
TU_TEST(math, floor_divide_is_exact) {
    kiln_tensor *a = tu_tensor(ctx, KILN_F64, TU_S(6), (double[]){1, -1, 7, 0, -0.0, 1});
    kiln_tensor *b = tu_tensor(ctx, KILN_F64, TU_S(6), (double[]){0.1, 0.1, -2, -3, 3, 0});
    TU_EXPECT_VALS(kiln_floor_divide(a, b), KILN_F64, 9, -10, -4, -0.0, -0.0, INFINITY);
    double v[6];
    TU_READ(kiln_floor_divide(a, b), v, 6);
    cr_assert(signbit(v[3]) && signbit(v[4]), "[%s] 0 // -3 and -0 // 3 are -0 (a / b's sign)",
              tu_exec_name());
    kiln_tensor *f = tu_tensor(ctx, KILN_F32, TU_S(2), (double[]){1, 5});
    kiln_tensor *g = tu_tensor(ctx, KILN_F32, TU_S(2), (double[]){0.1, -0.5});
    TU_EXPECT_VALS(kiln_floor_divide(f, g), KILN_F32, 9, -10);
}

TU_TEST(math, integer_remainders_and_divisions) {
    const kiln_dtype ints[] = {KILN_I32, KILN_I64};
    for (int k = 0; k < 2; k++) {
        kiln_dtype dt = ints[k];
        kiln_tensor *a = tu_tensor(ctx, dt, TU_S(7), (double[]){7, -7, 7, -7, 6, 5, -5});
        kiln_tensor *b = tu_tensor(ctx, dt, TU_S(7), (double[]){2, 2, -2, -2, 3, 0, 0});
        TU_EXPECT_VALS(kiln_fmod(a, b), dt, 1, -1, 1, -1, 0, 0, 0);
        TU_EXPECT_VALS(kiln_mod(a, b), dt, 1, 1, -1, -1, 0, 0, 0);
        TU_EXPECT_VALS(kiln_floor_divide(a, b), dt, 3, -4, -4, 3, 2, 0, 0);
        TU_EXPECT_VALS(kiln_trunc_divide(a, b), dt, 3, -3, -3, 3, 2, 0, 0);
    }
    /* INT_MIN by -1 wraps, its remainder is 0 */
    const int64_t mn[] = {INT64_MIN, INT64_MIN}, m1[] = {-1, 7};
    kiln_tensor *a = tu_tensor_i64(ctx, KILN_I64, TU_S(2), mn);
    kiln_tensor *b = tu_tensor_i64(ctx, KILN_I64, TU_S(2), m1);
    const int64_t fm[] = {0, INT64_MIN % 7}, md[] = {0, INT64_MIN % 7 + 7};
    const int64_t tq[] = {INT64_MIN, INT64_MIN / 7}, fq[] = {INT64_MIN, INT64_MIN / 7 - 1};
    TU_EXPECT_I64(kiln_fmod(a, b), KILN_I64, fm, 2);
    TU_EXPECT_I64(kiln_mod(a, b), KILN_I64, md, 2);
    TU_EXPECT_I64(kiln_trunc_divide(a, b), KILN_I64, tq, 2);
    TU_EXPECT_I64(kiln_floor_divide(a, b), KILN_I64, fq, 2);
    /* u8 */
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){250, 9, 4});
    kiln_tensor *v = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){7, 4, 0});
    TU_EXPECT_VALS(kiln_mod(u, v), KILN_U8, 5, 1, 0);
    TU_EXPECT_VALS(kiln_trunc_divide(u, v), KILN_U8, 35, 2, 0);
    /* a random sweep against C's operators */
    TU_RNG(r);
    enum { N = 64 };
    int64_t x[N], y[N], wf[N], wm[N], wt[N], wd[N];
    for (int i = 0; i < N; i++) {
        x[i] = tu_int(&r, -1000, 1000);
        y[i] = tu_int(&r, -30, 30);
        if (y[i] == 0)
            y[i] = 3;
        wf[i] = x[i] % y[i];
        wm[i] = wf[i] != 0 && (wf[i] < 0) != (y[i] < 0) ? wf[i] + y[i] : wf[i];
        wt[i] = x[i] / y[i];
        wd[i] = wt[i] - (wf[i] != 0 && (wf[i] < 0) != (y[i] < 0));
    }
    kiln_tensor *tx = tu_tensor_i64(ctx, KILN_I32, TU_S(N), x);
    kiln_tensor *ty = tu_tensor_i64(ctx, KILN_I32, TU_S(N), y);
    TU_EXPECT_I64(kiln_fmod(tx, ty), KILN_I32, wf, N);
    TU_EXPECT_I64(kiln_mod(tx, ty), KILN_I32, wm, N);
    TU_EXPECT_I64(kiln_trunc_divide(tx, ty), KILN_I32, wt, N);
    TU_EXPECT_I64(kiln_floor_divide(tx, ty), KILN_I32, wd, N);
}

TU_TEST(math, bitwise) {
    const int64_t a[] = {0x0F0F, -1, INT32_MIN, 12345, 0}, b[] = {0x00FF, 0x5A5A, -1, -12346, 7};
    int64_t wand[5], wor[5], wxor[5], wnot[5];
    for (int i = 0; i < 5; i++) {
        wand[i] = a[i] & b[i];
        wor[i] = a[i] | b[i];
        wxor[i] = a[i] ^ b[i];
        wnot[i] = ~a[i];
    }
    const kiln_dtype ints[] = {KILN_I32, KILN_I64};
    for (int k = 0; k < 2; k++) {
        kiln_tensor *x = tu_tensor_i64(ctx, ints[k], TU_S(5), a);
        kiln_tensor *y = tu_tensor_i64(ctx, ints[k], TU_S(5), b);
        TU_EXPECT_I64(kiln_bitwise_and(x, y), ints[k], wand, 5);
        TU_EXPECT_I64(kiln_bitwise_or(x, y), ints[k], wor, 5);
        TU_EXPECT_I64(kiln_bitwise_xor(x, y), ints[k], wxor, 5);
        TU_EXPECT_I64(kiln_bitwise_not(x), ints[k], wnot, 5);
    }
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){0, 0xA5, 255});
    TU_EXPECT_VALS(kiln_bitwise_not(u), KILN_U8, 255, 0x5A, 0);
    kiln_tensor *p = tu_tensor(ctx, KILN_BOOL, TU_S(4), (double[]){0, 0, 1, 1});
    kiln_tensor *q = tu_tensor(ctx, KILN_BOOL, TU_S(4), (double[]){0, 1, 0, 1});
    TU_EXPECT_VALS(kiln_bitwise_not(p), KILN_BOOL, 1, 1, 0, 0);
    TU_EXPECT_VALS(kiln_bitwise_and(p, q), KILN_BOOL, 0, 0, 0, 1);
    TU_EXPECT_VALS(kiln_bitwise_or(p, q), KILN_BOOL, 0, 1, 1, 1);
    TU_EXPECT_VALS(kiln_bitwise_xor(p, q), KILN_BOOL, 0, 1, 1, 0);
    /* bool with u8 promotes to u8 */
    kiln_tensor *u4 = tu_tensor(ctx, KILN_U8, TU_S(4), (double[]){0, 0xA5, 255, 6});
    TU_EXPECT_VALS(kiln_bitwise_or(p, u4), KILN_U8, 0, 0xA5, 255, 7);
}

TU_TEST(math, shifts) {
    /* counts in range, at the width, beyond it, negative */
    const int64_t x[] = {1, -8, -8, 5, -5, 3, -1}, s[] = {3, 1, 31, 32, 40, -1, 0};
    const int64_t shl32[] = {8, -16, 0, 0, 0, 0, -1};
    const int64_t shr32[] = {0, -4, -1, 0, -1, 0, -1};
    kiln_tensor *a = tu_tensor_i64(ctx, KILN_I32, TU_S(7), x);
    kiln_tensor *b = tu_tensor_i64(ctx, KILN_I32, TU_S(7), s);
    TU_EXPECT_I64(kiln_shift_left(a, b), KILN_I32, shl32, 7);
    TU_EXPECT_I64(kiln_shift_right(a, b), KILN_I32, shr32, 7);
    const int64_t x64[] = {1, INT64_MIN, -3, 7}, s64[] = {62, 63, 64, 2};
    const int64_t shl64[] = {INT64_C(1) << 62, 0, 0, 28};
    const int64_t shr64[] = {0, -1, -1, 1};
    kiln_tensor *c = tu_tensor_i64(ctx, KILN_I64, TU_S(4), x64);
    kiln_tensor *d = tu_tensor_i64(ctx, KILN_I64, TU_S(4), s64);
    TU_EXPECT_I64(kiln_shift_left(c, d), KILN_I64, shl64, 4);
    TU_EXPECT_I64(kiln_shift_right(c, d), KILN_I64, shr64, 4);
    /* u8 shifts are logical and wrap at 8 bits */
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(4), (double[]){0x81, 0x81, 0xFF, 3});
    kiln_tensor *k = tu_tensor(ctx, KILN_U8, TU_S(4), (double[]){1, 7, 8, 2});
    TU_EXPECT_VALS(kiln_shift_left(u, k), KILN_U8, 2, 0x80, 0, 12);
    TU_EXPECT_VALS(kiln_shift_right(u, k), KILN_U8, 0x40, 1, 0, 0);
}

TU_TEST(math, isclose) {
    kiln_tensor *a = tu_tensor(ctx, KILN_F64, TU_S(8),
                               (double[]){1, 1, 100, INFINITY, INFINITY, NAN, NAN, 0});
    kiln_tensor *b = tu_tensor(ctx, KILN_F64, TU_S(8),
                               (double[]){1 + 1e-9, 1.1, 100.5, INFINITY, -INFINITY, NAN, 1, 1e-9});
    kiln_tensor *c = kiln_isclose(a, b, 1e-5, 1e-8, false);
    TU_ASSERT_DTYPE(c, KILN_BOOL);
    TU_EXPECT_VALS(c, KILN_BOOL, 1, 0, 0, 1, 0, 0, 0, 1);
    TU_EXPECT_VALS(kiln_isclose(a, b, 1e-2, 0, true), KILN_BOOL, 1, 0, 1, 1, 0, 1, 0, 0);
    /* integers compare exactly */
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){5, 6, 7});
    kiln_tensor *j = tu_tensor(ctx, KILN_I64, TU_S(3), (double[]){5, 7, 7});
    TU_EXPECT_VALS(kiln_isclose(i, j, 0, 0, false), KILN_BOOL, 1, 0, 1);
    TU_ASSERT_STATUS(kiln_isclose(a, b, -1, 0, false), KILN_ERR_ARG);
    TU_ASSERT_STATUS(kiln_isclose(a, b, 0, NAN, false), KILN_ERR_ARG);
}

TU_TEST(math, errors_name_the_op) {
    kiln_tensor *f = kiln_ones(ctx, KILN_F32, TU_S(2, 3));
    kiln_tensor *i = kiln_ones(ctx, KILN_I32, TU_S(2, 3));
    kiln_tensor *bl = kiln_ones(ctx, KILN_BOOL, TU_S(2, 3));
    TU_ASSERT_ERROR(kiln_bitwise_and(f, i), KILN_ERR_DTYPE, "kiln_bitwise_and");
    TU_ASSERT_ERROR(kiln_bitwise_not(f), KILN_ERR_DTYPE, "kiln_bitwise_not");
    TU_ASSERT_ERROR(kiln_shift_left(bl, bl), KILN_ERR_DTYPE, "kiln_shift_left");
    TU_ASSERT_ERROR(kiln_shift_right(f, i), KILN_ERR_DTYPE, "kiln_shift_right");
    TU_ASSERT_ERROR(kiln_fmod(bl, bl), KILN_ERR_DTYPE, "kiln_fmod");
    TU_ASSERT_ERROR(kiln_mod(bl, bl), KILN_ERR_DTYPE, "kiln_mod");
    TU_ASSERT_ERROR(kiln_floor_divide(bl, bl), KILN_ERR_DTYPE, "kiln_floor_divide");
    TU_ASSERT_ERROR(kiln_trunc_divide(bl, bl), KILN_ERR_DTYPE, "kiln_trunc_divide");
    TU_ASSERT_ERROR(kiln_atan2(f, kiln_ones(ctx, KILN_F32, TU_S(4))), KILN_ERR_SHAPE,
                     "kiln_atan2");
    cr_assert_null(kiln_tan(NULL));
    TU_ASSERT_STATUS(kiln_logaddexp(f, NULL), KILN_ERR_ARG);
    /* an error passes on through every op */
    kiln_tensor *bad = kiln_bitwise_not(f);
    TU_ASSERT_STATUS(kiln_round(bad), KILN_ERR_DTYPE);
    TU_ASSERT_STATUS(kiln_sign(bad), KILN_ERR_DTYPE);
    TU_ASSERT_STATUS(kiln_isclose(bad, f, 0, 0, false), KILN_ERR_DTYPE);
}

/* Each composition is one kernel with its neighbours; so is a chain of the
 * single ops. */
TU_TEST(math, one_kernel_each) {
    if (tu_cur_exec()->dev != KILN_CPU || tu_cur_exec()->mode != KILN_LAZY)
        return;
    TU_RNG(r);
    double a[64], b[64], c[64], d[64];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(8, 8), -3, 3, a);
    kiln_tensor *y = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(8, 8), 0.5, 3, b);
    kiln_tensor *i = tu_rand_tensor(ctx, &r, KILN_I32, TU_S(8, 8), -30, 30, c);
    kiln_tensor *j = tu_rand_tensor(ctx, &r, KILN_I32, TU_S(8, 8), 1, 7, d);
    kiln_tensor *outs[] = {
        kiln_logaddexp(x, y),
        kiln_isclose(x, y, 1e-3, 1e-3, true),
        kiln_trunc_divide(i, j),
        kiln_floor_divide(x, y),
        kiln_add(kiln_round(kiln_tan(x)), kiln_mod(kiln_sign(x), kiln_atan2(x, y))),
    };
    for (int k = 0; k < 5; k++) {
        int64_t before = kiln_ctx_stats(ctx).kernels;
        cr_assert_eq(kiln_realize(outs[k]), KILN_OK, "%s", kiln_error_message(outs[k]));
        cr_assert_eq(kiln_ctx_stats(ctx).kernels - before, 1, "composition %d took %lld kernels",
                     k, (long long)(kiln_ctx_stats(ctx).kernels - before));
    }
}
