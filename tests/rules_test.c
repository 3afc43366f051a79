/* Tests of lower/'s rewrite rules: every composite op that decomposes into
 * primitives, on every executor, over the whole input range (±0, denormals,
 * the smallest normals, ±inf, NaN, huge and tiny magnitudes, and a dense
 * sweep of the range where the result varies, and half a million seeded
 * random inputs: near 0, over [-30, 30] and over the magnitudes 2^-40 to
 * 2^7, where a sweep's regular spacing missed a rule's rare worst inputs),
 * against long double libm.
 * The error is measured in ulp of the result's dtype (a subnormal result's
 * ulp is the smallest subnormal, times |x| where the result is x times a
 * subnormal factor); the worst is printed and must stay within
 * the bound stated beside the rule. NaN and infinities must match exactly.
 * The f32 rules built on e^x give +0 where e^x (the result, or its factor)
 * is below 2^-126 (lower/rules_math.c's flush_below_normal): there a zero
 * passes, and anything else is measured as usual. */
#include <float.h>

#include "test_util.h"

enum { NSWEEP = 24000, NRAND = 500000 };

typedef long double (*ref_fn)(long double);

static long double ref_sigmoid(long double x) {
    if (x >= 0)
        return 1.0L / (1.0L + expl(-x));
    long double e = expl(x);
    return e / (1.0L + e);
}

/* where the sigmoid underflows, -0 (graph/dtype.c's: -inf gives -0, not NaN) */
static long double ref_silu(long double x) {
    long double s = ref_sigmoid(x);
    return s == 0 ? -0.0L : x * s;
}
/* gelu's erf form, -0 where erfc underflows (graph/dtype.c's) */
static long double ref_gelu(long double x) {
    long double c = erfcl(-x * 0.707106781186547524400844362104849039L);
    return c == 0 ? -0.0L : 0.5L * x * c;
}
static long double ref_rsqrt(long double x) { return 1.0L / sqrtl(x); }
static long double ref_recip(long double x) { return 1.0L / x; }

typedef struct rule_case {
    const char *name;
    kiln_tensor *(*op)(kiln_tensor *);
    ref_fn ref;
    double bound_f32, bound_f64; /* ulp */
    bool flushes;                /* f32: +0 where e^x is below 2^-126 */
} rule_case;

static const rule_case cases[] = {
    {"exp", kiln_exp, expl, 2, 2, true},
    {"log", kiln_log, logl, 2, 2, false},
    {"tanh", kiln_tanh, tanhl, 4, 4, false},
    {"sigmoid", kiln_sigmoid, ref_sigmoid, 3, 3, true},
    {"silu", kiln_silu, ref_silu, 4, 4, true},
    {"rsqrt", kiln_rsqrt, ref_rsqrt, 1.5, 1.5, false},
    {"recip", kiln_recip, ref_recip, 0.5, 0.5, false},
    {"gelu", kiln_gelu, ref_gelu, 6, 7, false},
};

/* The inputs: special values, then magnitudes spread evenly over the
 * exponent range (both signs), then a dense sweep of [-30, 30]. */
static int inputs(bool f64, double *x) {
    double tiny = f64 ? 0x1p-1074 : 0x1p-149, minn = f64 ? DBL_MIN : FLT_MIN,
           big = f64 ? DBL_MAX : FLT_MAX;
    const double special[] = {0.0, -0.0, tiny, -tiny, minn, -minn, big, -big, INFINITY,
                              -INFINITY, NAN, 1.0, -1.0, 0.5, 2.0, 88.72, -87.5, -103.9,
                              709.7, -708.5, -745.0, 1e-8, -1e-8, 20.0, -20.0};
    int n = 0;
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        x[n++] = special[i];
    int emin = f64 ? -1074 : -149, emax = f64 ? 1023 : 127;
    for (int i = 0; i < NSWEEP / 2; i++) {
        double e = emin + (emax - emin + 1.0) * i / (NSWEEP / 2);
        double v = ldexp(1.0 + (i * 0.6180339887) - floor(i * 0.6180339887), (int)floor(e));
        x[n++] = (i & 1) ? -v : v;
    }
    for (int i = 0; i < NSWEEP / 2; i++)
        x[n++] = -30.0 + 60.0 * i / (NSWEEP / 2) + 1e-4 * (i % 7);
    uint64_t r = 0x9e3779b97f4a7c15u; /* xorshift64, seeded: the same inputs every run */
    for (int i = 0; i < NRAND; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        double u = (double)(r >> 11) * 0x1p-53, sign = (r & 1) ? -1.0 : 1.0;
        switch (i % 3) {
        case 0: x[n++] = -30.0 + 60.0 * u; break;
        case 1: x[n++] = sign * 2.0 * u; break;
        default: x[n++] = sign * ldexp(1.0 + u, (int)((r >> 1) % 48) - 40);
        }
    }
    if (!f64)
        for (int i = 0; i < n; i++)
            x[i] = (float)x[i];
    return n;
}

/* |got - want| in ulp of want in the dtype. */
static double ulp_error(long double want, double got, bool f64) {
    int e;
    frexpl(want, &e); /* |want| in [2^(e-1), 2^e) */
    int lowest = f64 ? -1021 : -125, mant = f64 ? 53 : 24;
    if (e < lowest)
        e = lowest;
    long double ulp = ldexpl(1.0L, e - mant);
    return (double)(fabsl((long double)got - want) / ulp);
}

static void check(kiln_ctx *ctx, const rule_case *c, bool f64) {
    static double x[NSWEEP + NRAND + 64], got[NSWEEP + NRAND + 64];
    static float xf[NSWEEP + NRAND + 64];
    int n = inputs(f64, x);
    for (int i = 0; i < n; i++)
        xf[i] = (float)x[i];
    kiln_dtype dt = f64 ? KILN_F64 : KILN_F32;
    kiln_tensor *t = kiln_from_data(ctx, dt, TU_S(n), f64 ? (const void *)x : (const void *)xf);
    kiln_tensor *y = c->op(t);
    TU_ASSERT_OK(y);
    if (f64) {
        cr_assert_eq(kiln_to_host(y, got, sizeof *got * (size_t)n), KILN_OK);
    } else {
        cr_assert_eq(kiln_to_host(y, xf, sizeof *xf * (size_t)n), KILN_OK);
        for (int i = 0; i < n; i++)
            got[i] = xf[i];
    }
    double worst = 0, at = 0;
    for (int i = 0; i < n; i++) {
        long double want = c->ref((long double)x[i]);
        double rounded = f64 ? (double)want : (double)(float)want;
        if (isnan(rounded) || isinf(rounded)) {
            cr_assert(isnan(rounded) ? isnan(got[i]) : got[i] == rounded,
                      "[%s] %s %s(%a) = %a, expected %a", tu_exec_name(), f64 ? "f64" : "f32",
                      c->name, x[i], got[i], rounded);
            continue;
        }
        cr_assert(isfinite(got[i]), "[%s] %s %s(%a) = %a, expected %a", tu_exec_name(),
                  f64 ? "f64" : "f32", c->name, x[i], got[i], rounded);
        bool tiny = fabsl(want) < FLT_MIN || (fabs(x[i]) > 1 && fabsl(want / x[i]) < FLT_MIN);
        if (!f64 && c->flushes && tiny && got[i] == 0)
            continue;
        double err = ulp_error(want, got[i], f64);
        /* x times a subnormal factor (silu's e far left, f64 gelu's erfc
         * near x = -37.6, where the result is still normal) carries the
         * factor's subnormal quantum times |x|: graph/dtype.c's formula, and
         * the rule's, lose that much */
        if (fabs(x[i]) > 1 && fabsl(want / x[i]) < 2 * (f64 ? DBL_MIN : FLT_MIN))
            err /= fabs(x[i]);
        if (err > worst)
            worst = err, at = x[i];
    }
    double bound = f64 ? c->bound_f64 : c->bound_f32;
    fprintf(stderr, "rules: [%s] %s %s worst %.3f ulp (at %a), bound %.1f\n", tu_exec_name(),
            f64 ? "f64" : "f32", c->name, worst, at, bound);
    /* the bound of a correctly rounded result is 0.5 ulp of the exact value */
    cr_assert(worst <= bound + 1e-3, "[%s] %s %s: %.3f ulp at %a, above the rule's %.1f",
              tu_exec_name(), f64 ? "f64" : "f32", c->name, worst, at, bound);
}

TU_TEST(rules, every_rule_within_its_bound) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        check(ctx, &cases[i], false);
        check(ctx, &cases[i], true);
    }
}

/* Where e^x falls below 2^-126 the compiled f32 rules give +0 (an operation
 * with a subnormal result or operand takes a microcode assist per lane:
 * lower/rules_math.c); just above it they give the normal value as usual,
 * and the float64 reference keeps every subnormal. Then a softmax whose
 * rows spread far past 87 (most of each row's e^(x - max) flushed) against
 * float64 loops. */
TU_TEST(rules, e_to_the_x_below_the_least_normal_is_zero) {
    static const float x[] = {-0x1.5d589ep+6f, -87.34f, -90.0f, -100.0f, -103.9f, -150.0f,
                              -INFINITY, -87.0f, 0.5f};
    enum { N = sizeof x / sizeof *x };
    bool ref = tu_cur_exec()->dev == KILN_REF;
    kiln_tensor *t = kiln_from_data(ctx, KILN_F32, TU_S(N), x);
    float e[N], s[N];
    cr_assert_eq(kiln_to_host(kiln_exp(t), e, sizeof e), KILN_OK);
    cr_assert_eq(kiln_to_host(kiln_sigmoid(t), s, sizeof s), KILN_OK);
    for (int i = 0; i < N; i++) {
        float want = (float)expl((long double)x[i]);
        bool flushed = !ref && want < FLT_MIN;
        float tol = 2 * (want < FLT_MIN ? 0x1p-149f : want * 0x1p-23f);
        cr_assert(flushed ? e[i] == 0 && !signbit(e[i]) : fabsf(e[i] - want) <= tol,
                  "[%s] exp(%a) = %a, expected %a", tu_exec_name(), x[i], e[i],
                  flushed ? 0.0 : want);
        float sw = (float)(1.0L / (1.0L + expl(-(long double)x[i])));
        float stol = 3 * (sw < FLT_MIN ? 0x1p-149f : sw * 0x1p-23f);
        cr_assert(flushed ? s[i] == 0 : fabsf(s[i] - sw) <= stol,
                  "[%s] sigmoid(%a) = %a, expected %a", tu_exec_name(), x[i], s[i], sw);
    }
    /* the first input is the f32 just above ln 2^-126: e^x there is normal */
    cr_assert(e[0] >= FLT_MIN, "[%s] exp(%a) = %a, below 2^-126", tu_exec_name(), x[0], e[0]);

    /* a softmax over rows uniform in [-150, 150] */
    enum { R = 4, C = 300 };
    static float l[R * C];
    TU_RNG(rng);
    for (int i = 0; i < R * C; i++)
        l[i] = (float)tu_unif(&rng, -150, 150);
    kiln_tensor *lt = kiln_from_data(ctx, KILN_F32, TU_S(R, C), l);
    static float sm[R * C];
    cr_assert_eq(kiln_to_host(kiln_softmax(lt, 1), sm, sizeof sm), KILN_OK);
    for (int r = 0; r < R; r++) {
        double mx = -INFINITY, sum = 0;
        for (int c = 0; c < C; c++)
            mx = fmax(mx, l[r * C + c]);
        for (int c = 0; c < C; c++)
            sum += exp((double)l[r * C + c] - mx);
        for (int c = 0; c < C; c++) {
            double w = exp((double)l[r * C + c] - mx) / sum;
            cr_assert(fabs(sm[r * C + c] - w) <= 1e-6 * w + 2 * FLT_MIN,
                      "[%s] softmax row %d column %d: %a, expected %a", tu_exec_name(), r, c,
                      sm[r * C + c], w);
        }
    }
}
