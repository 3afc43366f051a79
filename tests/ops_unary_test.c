/* Tests of the elementwise unary ops: values against float64 loops in C on
 * every dtype, result dtypes, special values, integer wrapping, and inputs
 * that are views. */
#include "test_util.h"

typedef kiln_tensor *(*unary_fn)(kiln_tensor *);

typedef struct unary_case {
    const char *name;
    unary_fn fn;
    double (*ref)(double);
    double lo, hi;    /* input range for floats */
    double ilo, ihi;  /* input range for integers */
    bool keeps_dtype; /* neg, abs, relu */
} unary_case;

static double ref_neg(double x) { return -x; }
static double ref_abs(double x) { return fabs(x); }
static double ref_rsqrt(double x) { return 1.0 / sqrt(x); }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_relu(double x) { return x > 0 ? x : 0.0; }
static double ref_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double ref_recip(double x) { return 1.0 / x; }

static const unary_case cases[] = {
    {"neg", kiln_neg, ref_neg, -10, 10, -100, 100, true},
    {"abs", kiln_abs, ref_abs, -10, 10, -100, 100, true},
    {"exp", kiln_exp, exp, -5, 5, -5, 5, false},
    {"log", kiln_log, log, 0.01, 10, 1, 100, false},
    {"sqrt", kiln_sqrt, sqrt, 0, 10, 0, 200, false},
    {"rsqrt", kiln_rsqrt, ref_rsqrt, 0.01, 10, 1, 200, false},
    {"sin", kiln_sin, sin, -6, 6, -6, 6, false},
    {"cos", kiln_cos, cos, -6, 6, -6, 6, false},
    {"tanh", kiln_tanh, tanh, -4, 4, -4, 4, false},
    {"sigmoid", kiln_sigmoid, ref_sigmoid, -8, 8, -8, 8, false},
    {"relu", kiln_relu, ref_relu, -3, 3, -50, 50, true},
    {"gelu", kiln_gelu, ref_gelu, -4, 4, -4, 4, false},
    {"silu", kiln_silu, ref_silu, -6, 6, -6, 6, false},
    {"recip", kiln_recip, ref_recip, 0.1, 4, 1, 20, false},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

TU_TEST(unary, every_op_every_float_dtype) {
    TU_RNG(r);
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    enum { N = 4 * 37 };
    double in[N], want[N];
    for (int c = 0; c < NCASES; c++) {
        for (int k = 0; k < nf; k++) {
            kiln_dtype dt = fl[k];
            tu_fill(&r, dt, in, N, cases[c].lo, cases[c].hi);
            if (cases[c].fn == kiln_recip)
                for (int i = 0; i < N; i += 2)
                    in[i] = -in[i];
            kiln_tensor *x = tu_tensor(ctx, dt, TU_S(4, 37), in);
            kiln_tensor *y = cases[c].fn(x);
            TU_ASSERT_SHAPE(y, 4, 37);
            for (int i = 0; i < N; i++)
                want[i] = cases[c].ref(in[i]);
            cr_assert(kiln_dtype_of(y) == dt, "[%s] kiln_%s of %s gave %s", tu_exec_name(),
                      cases[c].name, tu_dt_name(dt), tu_dt_name(kiln_dtype_of(y)));
            TU_EXPECT(y, dt, want, N);
        }
    }
}

TU_TEST(unary, integer_and_bool_inputs) {
    TU_RNG(r);
    const kiln_dtype ints[] = {KILN_I32, KILN_I64, KILN_U8, KILN_BOOL};
    enum { N = 3 * 11 };
    double in[N], want[N];
    for (int c = 0; c < NCASES; c++) {
        for (int k = 0; k < 4; k++) {
            kiln_dtype dt = ints[k];
            if (cases[c].fn == kiln_neg && dt == KILN_BOOL)
                continue;
            if (cases[c].fn == kiln_neg && dt == KILN_U8)
                continue;
            double lo = cases[c].ilo, hi = cases[c].ihi;
            if (dt == KILN_U8 && lo < 0)
                lo = 0;
            if (dt == KILN_BOOL &&
                (cases[c].fn == kiln_log || cases[c].fn == kiln_rsqrt || cases[c].fn == kiln_recip))
                continue; /* 0 is outside their domain */
            tu_fill(&r, dt, in, N, lo, hi);
            kiln_tensor *x = tu_tensor(ctx, dt, TU_S(3, 11), in);
            kiln_tensor *y = cases[c].fn(x);
            TU_ASSERT_SHAPE(y, 3, 11);
            kiln_dtype out = cases[c].keeps_dtype ? dt : KILN_F32;
            cr_assert(kiln_dtype_of(y) == out, "[%s] kiln_%s of %s gave %s, expected %s",
                      tu_exec_name(), cases[c].name, tu_dt_name(dt), tu_dt_name(kiln_dtype_of(y)),
                      tu_dt_name(out));
            for (int i = 0; i < N; i++)
                want[i] = cases[c].ref(in[i]);
            TU_EXPECT(y, out, want, N);
        }
    }
}

TU_TEST(unary, integer_wrapping) {
    /* neg and abs wrap to the width, as NumPy does */
    TU_EXPECT_VALS(kiln_neg(tu_tensor(ctx, KILN_U8, TU_S(4), (double[]){0, 1, 200, 255})), KILN_U8,
                   0, 255, 56, 1);
    TU_EXPECT_VALS(kiln_abs(tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){0, 200, 255})), KILN_U8, 0,
                   200, 255);
    TU_EXPECT_VALS(
        kiln_neg(tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){-2147483648.0, 2147483647.0, -5})),
        KILN_I32, -2147483648.0, -2147483647.0, 5);
    TU_EXPECT_VALS(kiln_abs(tu_tensor(ctx, KILN_I32, TU_S(2), (double[]){-2147483648.0, -7})),
                   KILN_I32, -2147483648.0, 7);
    const int64_t v[] = {INT64_MIN, INT64_MAX, -(1ll << 60) - 1, 3};
    const int64_t neg[] = {INT64_MIN, -INT64_MAX, (1ll << 60) + 1, -3};
    const int64_t abs_[] = {INT64_MIN, INT64_MAX, (1ll << 60) + 1, 3};
    const int64_t relu[] = {0, INT64_MAX, 0, 3};
    kiln_tensor *x = tu_tensor_i64(ctx, KILN_I64, TU_S(4), v);
    TU_EXPECT_I64(kiln_neg(x), KILN_I64, neg, 4);
    TU_EXPECT_I64(kiln_abs(x), KILN_I64, abs_, 4);
    TU_EXPECT_I64(kiln_relu(x), KILN_I64, relu, 4);
}

TU_TEST(unary, bool_keeps_dtype) {
    kiln_tensor *b = tu_tensor(ctx, KILN_BOOL, TU_S(4), (double[]){0, 1, 1, 0});
    TU_EXPECT_VALS(kiln_abs(b), KILN_BOOL, 0, 1, 1, 0);
    TU_EXPECT_VALS(kiln_relu(b), KILN_BOOL, 0, 1, 1, 0);
    TU_EXPECT_NEAR_VALS(kiln_exp(b), KILN_F32, 1, exp(1.0), exp(1.0), 1);
}

TU_TEST(unary, special_values) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        kiln_dtype dt = fl[k];
        kiln_tensor *x =
            tu_tensor(ctx, dt, TU_S(6), (double[]){0.0, -0.0, -1.0, INFINITY, -INFINITY, NAN});
        TU_EXPECT_VALS(kiln_sqrt(x), dt, 0, 0, NAN, INFINITY, NAN, NAN);
        TU_EXPECT_VALS(kiln_log(x), dt, -INFINITY, -INFINITY, NAN, INFINITY, NAN, NAN);
        TU_EXPECT_VALS(kiln_recip(x), dt, INFINITY, -INFINITY, -1, 0, 0, NAN);
        TU_EXPECT_VALS(kiln_rsqrt(x), dt, INFINITY, -INFINITY, NAN, 0, NAN, NAN);
        TU_EXPECT_NEAR_VALS(kiln_exp(x), dt, 1, 1, exp(-1.0), INFINITY, 0, NAN);
        TU_EXPECT_NEAR_VALS(kiln_tanh(x), dt, 0, 0, tanh(-1.0), 1, -1, NAN);
        TU_EXPECT_NEAR_VALS(kiln_sigmoid(x), dt, 0.5, 0.5, ref_sigmoid(-1.0), 1, 0, NAN);
        TU_EXPECT_VALS(kiln_abs(x), dt, 0, 0, 1, INFINITY, INFINITY, NAN);
        TU_EXPECT_VALS(kiln_neg(x), dt, 0, 0, 1, -INFINITY, INFINITY, NAN);
        TU_EXPECT_NEAR_VALS(kiln_sin(x), dt, 0, 0, sin(-1.0), NAN, NAN, NAN);
        TU_EXPECT_NEAR_VALS(kiln_cos(x), dt, 1, 1, cos(-1.0), NAN, NAN, NAN);

        /* signs of zero */
        double v[6];
        TU_READ(kiln_abs(x), v, 6);
        cr_assert(!signbit(v[1]), "[%s] %s abs(-0.0) is -0.0", tu_exec_name(), tu_dt_name(dt));
        TU_READ(kiln_neg(x), v, 6);
        cr_assert(signbit(v[0]) && !signbit(v[1]), "[%s] %s neg does not flip the sign of zero",
                  tu_exec_name(), tu_dt_name(dt));
    }
}

TU_TEST(unary, overflow_to_inf) {
    /* exp overflows each dtype's range at a different point */
    kiln_tensor *h = tu_tensor(ctx, KILN_F16, TU_S(2), (double[]){11.5, 10.5});
    TU_EXPECT_NEAR_VALS(kiln_exp(h), KILN_F16, INFINITY, exp(10.5));
    kiln_tensor *f = tu_tensor(ctx, KILN_F32, TU_S(2), (double[]){89, 88});
    TU_EXPECT_NEAR_VALS(kiln_exp(f), KILN_F32, INFINITY, exp(88.0));
    kiln_tensor *b = tu_tensor(ctx, KILN_BF16, TU_S(1), (double[]){89});
    TU_EXPECT_VALS(kiln_exp(b), KILN_BF16, INFINITY);
    kiln_tensor *d = tu_tensor(ctx, KILN_F64, TU_S(2), (double[]){710, 709});
    TU_EXPECT_NEAR_VALS(kiln_exp(d), KILN_F64, INFINITY, exp(709.0));
    /* recip of an f16 subnormal overflows */
    kiln_tensor *s = tu_tensor(ctx, KILN_F16, TU_S(1), (double[]){ldexp(1.0, -20)});
    TU_EXPECT_VALS(kiln_recip(s), KILN_F16, INFINITY);
}

TU_TEST(unary, gelu_is_exact_erf_form) {
    /* At these points the tanh approximation differs from the erf form by
     * more than f64 tolerance. */
    double in[5] = {-3, -1.5, 0.5, 1.0, 2.5}, want[5];
    for (int i = 0; i < 5; i++)
        want[i] = ref_gelu(in[i]);
    TU_EXPECT(kiln_gelu(tu_tensor(ctx, KILN_F64, TU_S(5), in)), KILN_F64, want, 5);
}

TU_TEST(unary, scalar_and_empty) {
    kiln_tensor *s = kiln_scalar(ctx, KILN_F32, 0.25);
    kiln_tensor *y = kiln_sqrt(s);
    TU_ASSERT_SCALAR_SHAPE(y);
    cr_assert_eq(TU_ITEM(y), 0.5);
    kiln_tensor *e = kiln_zeros(ctx, KILN_F32, TU_S(2, 0, 3));
    int n = 0;
    for (int c = 0; c < NCASES; c++) {
        kiln_tensor *z = cases[c].fn(e);
        TU_ASSERT_SHAPE(z, 2, 0, 3);
        cr_assert_eq(kiln_realize(z), KILN_OK);
        n++;
    }
    cr_assert_eq(n, NCASES);
}

TU_TEST(unary, on_views) {
    TU_RNG(r);
    double in[5 * 6];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(5, 6), -2, 2, in);
    /* transposed: y[j][i] = exp(x[i][j]) */
    kiln_tensor *y = kiln_exp(kiln_transpose(x, 0, 1));
    TU_ASSERT_SHAPE(y, 6, 5);
    double want[30];
    for (int j = 0; j < 6; j++)
        for (int i = 0; i < 5; i++)
            want[j * 5 + i] = exp(in[i * 6 + j]);
    TU_EXPECT(y, KILN_F32, want, 30);

    /* sliced with a step and reversed: column 5, 3, 1 of every row */
    kiln_tensor *z = kiln_tanh(kiln_slice(x, 1, -1, KILN_BEGIN_REV, -2));
    TU_ASSERT_SHAPE(z, 5, 3);
    double wz[15];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++)
            wz[i * 3 + j] = tanh(in[i * 6 + 5 - 2 * j]);
    TU_EXPECT(z, KILN_F32, wz, 15);

    /* broadcast row */
    kiln_tensor *row = kiln_slice(x, 0, 2, 3, 1);
    kiln_tensor *w = kiln_abs(kiln_expand(row, TU_S(4, 6)));
    TU_ASSERT_SHAPE(w, 4, 6);
    double ww[24];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++)
            ww[i * 6 + j] = fabs(in[2 * 6 + j]);
    TU_EXPECT(w, KILN_F32, ww, 24);
}

TU_TEST(unary, chains) {
    TU_RNG(r);
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        kiln_dtype dt = fl[k];
        double in[64], want[64];
        kiln_tensor *x = tu_rand_tensor(ctx, &r, dt, TU_S(8, 8), -3, 3, in);
        kiln_tensor *y = kiln_sigmoid(kiln_exp(kiln_neg(kiln_abs(x))));
        for (int i = 0; i < 64; i++) {
            /* each step rounds to dt, as the separate ops would */
            double v = tu_round(dt, fabs(in[i]));
            v = tu_round(dt, -v);
            v = tu_round(dt, exp(v));
            want[i] = ref_sigmoid(v);
        }
        TU_EXPECT(y, dt, want, 64);
    }
}
