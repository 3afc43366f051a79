/* Tests of autograd: every differentiable op's gradient against central
 * finite differences in float64 (through broadcasting, views, reductions over
 * several axes and batched matmul), on the reference evaluator and the
 * compiled CPU path; a Hessian-vector product; accumulation across backward
 * calls; no-grad scopes, detach and zero_grad; error cases; and a small
 * training loop that must converge and stop compiling after its first step. */
#include "test_util.h"

/* The executors the gradient checks run on. */
static const tu_exec grad_execs[] = {
    {KILN_REF, KILN_LAZY, "ref/lazy"},
    {KILN_CPU, KILN_LAZY, "cpu/lazy"},
};

static void run_grad(void (*body)(kiln_ctx *), const char *test) {
    int ran = 0;
    for (size_t i = 0; i < sizeof grad_execs / sizeof grad_execs[0]; i++) {
        kiln_ctx *ctx = kiln_ctx_new(grad_execs[i].dev);
        if (!ctx)
            continue;
        kiln_ctx_set_mode(ctx, grad_execs[i].mode);
        *tu_cur_exec_slot() = &grad_execs[i];
        body(ctx);
        kiln_ctx_free(ctx);
        ran++;
    }
    *tu_cur_exec_slot() = NULL;
    cr_assert(ran > 0, "%s: no executor is available", test);
}

#define GRAD_TEST(name)                                                                            \
    static void grad_body_##name(kiln_ctx *ctx);                                                   \
    Test(grad, name) { run_grad(grad_body_##name, "grad/" #name); }                                \
    static void grad_body_##name(kiln_ctx *ctx)

/* ---- finite-difference checks --------------------------------------------- */

#define MAXIN 3

/* How inputs are drawn: uniform in [lo, hi]; or magnitudes in [lo, hi] with a
 * random sign (away from a kink at 0); or lo + an integer + a fraction in
 * [0.2, 0.8] (away from the jumps of a cast to an integer). */
typedef enum { GEN_UNIFORM, GEN_SIGNED, GEN_FRACTION } gen_mode;

typedef struct fd_case {
    const char *name;
    int nin;
    int ndim[MAXIN];
    int64_t dims[MAXIN][4];
    gen_mode gen;
    double lo, hi;
    kiln_tensor *(*f)(kiln_tensor **x);
    double tol; /* 0: the default */
    double h;   /* the finite-difference step; 0: the default */
} fd_case;

static kiln_tensor *make(kiln_ctx *ctx, int ndim, const int64_t *dims, const double *v) {
    return kiln_from_data(ctx, KILN_F64, ndim, dims, v);
}

/* sum(f(x) * w) for inputs vals. */
static double weighted(kiln_ctx *ctx, const fd_case *c, double *const *vals, const double *w) {
    kiln_scope_begin(ctx);
    kiln_tensor *x[MAXIN];
    for (int i = 0; i < c->nin; i++)
        x[i] = make(ctx, c->ndim[i], c->dims[i], vals[i]);
    kiln_tensor *y = c->f(x);
    kiln_tensor *wt = make(ctx, kiln_ndim(y), kiln_shape(y), w);
    double s = TU_ITEM(kiln_sum(kiln_mul(y, wt), 0, NULL, false));
    kiln_scope_end(ctx);
    return s;
}

static void fill(tu_rng *r, const fd_case *c, double *v, int64_t n) {
    for (int64_t k = 0; k < n; k++) {
        switch (c->gen) {
        case GEN_UNIFORM:
            v[k] = tu_unif(r, c->lo, c->hi);
            break;
        case GEN_SIGNED:
            v[k] = tu_unif(r, c->lo, c->hi) * (tu_next(r) & 1 ? 1 : -1);
            break;
        case GEN_FRACTION:
            v[k] = c->lo + (double)tu_int(r, 0, (int64_t)(c->hi - c->lo) - 1) + tu_unif(r, 0.2, 0.8);
            break;
        }
    }
}

/* Checks kiln_gradients of sum(f(x) * w), w random, against central
 * differences; returns the worst relative error over the inputs. */
static double fd_check(kiln_ctx *ctx, const fd_case *c) {
    tu_rng r = tu_rng_from(c->name, 7);
    double *vals[MAXIN];
    int64_t n[MAXIN];
    for (int i = 0; i < c->nin; i++) {
        n[i] = tu_numel(c->ndim[i], c->dims[i]);
        vals[i] = malloc(sizeof(double) * (size_t)n[i]);
        fill(&r, c, vals[i], n[i]);
    }
    kiln_scope_begin(ctx);
    kiln_tensor *x[MAXIN], *g[MAXIN];
    for (int i = 0; i < c->nin; i++)
        x[i] = make(ctx, c->ndim[i], c->dims[i], vals[i]);
    kiln_tensor *y = c->f(x);
    TU_ASSERT_DTYPE(y, KILN_F64);
    int64_t ny = kiln_numel(y);
    double *w = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
    for (int64_t k = 0; k < ny; k++)
        w[k] = tu_unif(&r, -1, 1);
    kiln_tensor *wt = make(ctx, kiln_ndim(y), kiln_shape(y), w);
    kiln_status st = kiln_gradients(y, wt, c->nin, x, g);
    cr_assert(st == KILN_OK, "[%s] %s: kiln_gradients: %s", tu_exec_name(), c->name,
              kiln_ctx_last_error(ctx));
    double worst = 0;
    const double h = c->h ? c->h : 1e-6;
    for (int i = 0; i < c->nin; i++) {
        TU_ASSERT_SHAPE_N(g[i], c->ndim[i], c->dims[i]);
        double *got = malloc(sizeof(double) * (size_t)n[i]);
        TU_READ(g[i], got, n[i]);
        double maxerr = 0, scale = 0;
        for (int64_t k = 0; k < n[i]; k++) {
            double keep = vals[i][k];
            vals[i][k] = keep + h;
            double up = weighted(ctx, c, vals, w);
            vals[i][k] = keep - h;
            double down = weighted(ctx, c, vals, w);
            vals[i][k] = keep;
            double fd = (up - down) / (2 * h);
            maxerr = fmax(maxerr, fabs(fd - got[k]));
            scale = fmax(scale, fabs(fd));
        }
        double rel = maxerr / fmax(scale, 1e-3);
        worst = fmax(worst, rel);
        cr_assert(rel <= (c->tol ? c->tol : 1e-6),
                  "[%s] %s: input %d: gradient off by %.3g relative to finite differences",
                  tu_exec_name(), c->name, i, rel);
        free(got);
    }
    kiln_scope_end(ctx);
    for (int i = 0; i < c->nin; i++)
        free(vals[i]);
    free(w);
    return worst;
}

static void fd_run(kiln_ctx *ctx, const fd_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double e = fd_check(ctx, &cases[i]);
        printf("grad [%s] %-22s worst relative error %.2e\n", tu_exec_name(), cases[i].name, e);
    }
}

/* ---- elementwise ----------------------------------------------------------- */

static kiln_tensor *f_neg(kiln_tensor **x) { return kiln_neg(x[0]); }
static kiln_tensor *f_abs(kiln_tensor **x) { return kiln_abs(x[0]); }
static kiln_tensor *f_exp(kiln_tensor **x) { return kiln_exp(x[0]); }
static kiln_tensor *f_log(kiln_tensor **x) { return kiln_log(x[0]); }
static kiln_tensor *f_sqrt(kiln_tensor **x) { return kiln_sqrt(x[0]); }
static kiln_tensor *f_rsqrt(kiln_tensor **x) { return kiln_rsqrt(x[0]); }
static kiln_tensor *f_sin(kiln_tensor **x) { return kiln_sin(x[0]); }
static kiln_tensor *f_cos(kiln_tensor **x) { return kiln_cos(x[0]); }
static kiln_tensor *f_tanh(kiln_tensor **x) { return kiln_tanh(x[0]); }
static kiln_tensor *f_sigmoid(kiln_tensor **x) { return kiln_sigmoid(x[0]); }
static kiln_tensor *f_relu(kiln_tensor **x) { return kiln_relu(x[0]); }
static kiln_tensor *f_gelu(kiln_tensor **x) { return kiln_gelu(x[0]); }
static kiln_tensor *f_silu(kiln_tensor **x) { return kiln_silu(x[0]); }
static kiln_tensor *f_recip(kiln_tensor **x) { return kiln_recip(x[0]); }
static kiln_tensor *f_tan(kiln_tensor **x) { return kiln_tan(x[0]); }
static kiln_tensor *f_asin(kiln_tensor **x) { return kiln_asin(x[0]); }
static kiln_tensor *f_acos(kiln_tensor **x) { return kiln_acos(x[0]); }
static kiln_tensor *f_atan(kiln_tensor **x) { return kiln_atan(x[0]); }
static kiln_tensor *f_sinh(kiln_tensor **x) { return kiln_sinh(x[0]); }
static kiln_tensor *f_cosh(kiln_tensor **x) { return kiln_cosh(x[0]); }
static kiln_tensor *f_asinh(kiln_tensor **x) { return kiln_asinh(x[0]); }
static kiln_tensor *f_acosh(kiln_tensor **x) { return kiln_acosh(x[0]); }
static kiln_tensor *f_atanh(kiln_tensor **x) { return kiln_atanh(x[0]); }
static kiln_tensor *f_erf(kiln_tensor **x) { return kiln_erf(x[0]); }
static kiln_tensor *f_erfc(kiln_tensor **x) { return kiln_erfc(x[0]); }
static kiln_tensor *f_expm1(kiln_tensor **x) { return kiln_expm1(x[0]); }
static kiln_tensor *f_log1p(kiln_tensor **x) { return kiln_log1p(x[0]); }
/* rounding is piecewise constant: a product keeps a nonzero gradient path
 * beside the rounded one (which must contribute exactly 0), with inputs
 * away from the steps */
static kiln_tensor *f_rounding(kiln_tensor **x) {
    kiln_tensor *r = kiln_add(kiln_add(kiln_floor(x[0]), kiln_ceil(x[0])),
                              kiln_add(kiln_trunc(x[0]), kiln_round(x[0])));
    return kiln_add(kiln_mul(r, x[0]), kiln_sign(x[0]));
}

#define UNARY(nm, fn, gen, lo, hi)                                                                 \
    {nm, 1, {2}, {{3, 4}}, gen, lo, hi, fn, 0, 0}

static const fd_case unary_cases[] = {
    UNARY("neg", f_neg, GEN_UNIFORM, -2, 2),
    UNARY("abs", f_abs, GEN_SIGNED, 0.1, 2),
    UNARY("exp", f_exp, GEN_UNIFORM, -2, 2),
    UNARY("log", f_log, GEN_UNIFORM, 0.2, 3),
    UNARY("sqrt", f_sqrt, GEN_UNIFORM, 0.2, 3),
    UNARY("rsqrt", f_rsqrt, GEN_UNIFORM, 0.2, 3),
    UNARY("sin", f_sin, GEN_UNIFORM, -3, 3),
    UNARY("cos", f_cos, GEN_UNIFORM, -3, 3),
    UNARY("tanh", f_tanh, GEN_UNIFORM, -2, 2),
    UNARY("sigmoid", f_sigmoid, GEN_UNIFORM, -3, 3),
    UNARY("relu", f_relu, GEN_SIGNED, 0.1, 2),
    UNARY("gelu", f_gelu, GEN_SIGNED, 0.05, 3),
    UNARY("silu", f_silu, GEN_UNIFORM, -3, 3),
    UNARY("recip", f_recip, GEN_SIGNED, 0.3, 2),
    UNARY("tan", f_tan, GEN_UNIFORM, -1.2, 1.2),
    UNARY("asin", f_asin, GEN_UNIFORM, -0.9, 0.9),
    UNARY("acos", f_acos, GEN_UNIFORM, -0.9, 0.9),
    UNARY("atan", f_atan, GEN_UNIFORM, -3, 3),
    UNARY("sinh", f_sinh, GEN_UNIFORM, -2, 2),
    UNARY("cosh", f_cosh, GEN_UNIFORM, -2, 2),
    UNARY("asinh", f_asinh, GEN_UNIFORM, -3, 3),
    UNARY("acosh", f_acosh, GEN_UNIFORM, 1.2, 4),
    UNARY("atanh", f_atanh, GEN_UNIFORM, -0.9, 0.9),
    UNARY("erf", f_erf, GEN_UNIFORM, -2, 2),
    UNARY("erfc", f_erfc, GEN_UNIFORM, -2, 2),
    UNARY("expm1", f_expm1, GEN_UNIFORM, -2, 2),
    UNARY("log1p", f_log1p, GEN_UNIFORM, -0.7, 3),
    UNARY("floor ceil trunc round sign", f_rounding, GEN_FRACTION, -3, 3),
};

GRAD_TEST(unary) { fd_run(ctx, unary_cases, sizeof unary_cases / sizeof unary_cases[0]); }

static kiln_tensor *f_add(kiln_tensor **x) { return kiln_add(x[0], x[1]); }
static kiln_tensor *f_sub(kiln_tensor **x) { return kiln_sub(x[0], x[1]); }
static kiln_tensor *f_mul(kiln_tensor **x) { return kiln_mul(x[0], x[1]); }
static kiln_tensor *f_div(kiln_tensor **x) { return kiln_div(x[0], kiln_add_scalar(x[1], 2.5)); }
static kiln_tensor *f_pow(kiln_tensor **x) {
    return kiln_pow(kiln_add_scalar(x[0], 2.2), x[1]);
}
static kiln_tensor *f_pow_scalar(kiln_tensor **x) {
    return kiln_pow_scalar(kiln_add_scalar(x[0], 2.2), 3);
}
static kiln_tensor *f_maximum(kiln_tensor **x) { return kiln_maximum(x[0], x[1]); }
static kiln_tensor *f_minimum(kiln_tensor **x) { return kiln_minimum(x[0], x[1]); }
static kiln_tensor *f_atan2(kiln_tensor **x) { return kiln_atan2(x[0], x[1]); }
/* divisors kept away from 0, and quotients away from integers, where the
 * remainders jump */
static kiln_tensor *f_fmod(kiln_tensor **x) {
    return kiln_fmod(kiln_mul_scalar(x[0], 3), kiln_add_scalar(x[1], 2.5));
}
static kiln_tensor *f_mod(kiln_tensor **x) {
    return kiln_mod(kiln_mul_scalar(x[0], 3), kiln_add_scalar(x[1], 2.5));
}
static kiln_tensor *f_copysign(kiln_tensor **x) { return kiln_copysign(x[0], x[1]); }
static kiln_tensor *f_logaddexp(kiln_tensor **x) { return kiln_logaddexp(x[0], x[1]); }
static kiln_tensor *f_where(kiln_tensor **x) {
    return kiln_where(kiln_gt_scalar(x[2], 0), x[0], x[1]);
}
static kiln_tensor *f_scalar_ops(kiln_tensor **x) {
    return kiln_div_scalar(kiln_sub_scalar(kiln_mul_scalar(x[0], 3), 1), 4);
}

/* [3,1] with [1,4]: broadcasting is reduced back by the expand rule. */
#define BIN(nm, fn)                                                                                \
    {nm, 2, {2, 2}, {{3, 1}, {1, 4}}, GEN_UNIFORM, -2, 2, fn, 0, 0}

static const fd_case binary_cases[] = {
    BIN("add [3,1]+[1,4]", f_add),
    BIN("sub", f_sub),
    BIN("mul", f_mul),
    BIN("div", f_div),
    BIN("pow", f_pow),
    BIN("maximum", f_maximum),
    BIN("minimum", f_minimum),
    BIN("atan2", f_atan2),
    BIN("fmod", f_fmod),
    BIN("mod", f_mod),
    BIN("copysign", f_copysign),
    BIN("logaddexp", f_logaddexp),
    {"pow_scalar", 1, {2}, {{3, 4}}, GEN_UNIFORM, -2, 2, f_pow_scalar, 0, 0},
    {"scalar ops", 1, {1}, {{5}}, GEN_UNIFORM, -2, 2, f_scalar_ops, 0, 0},
    {"where", 3, {2, 2, 2}, {{2, 3}, {1, 3}, {2, 1}}, GEN_UNIFORM, -2, 2, f_where, 0, 0},
};

GRAD_TEST(binary) { fd_run(ctx, binary_cases, sizeof binary_cases / sizeof binary_cases[0]); }

/* ---- casts, reductions, views, cat, matmul ------------------------------- */

static kiln_tensor *f_cast_f32(kiln_tensor **x) {
    return kiln_cast(kiln_mul_scalar(kiln_cast(x[0], KILN_F32), 3), KILN_F64);
}
/* The integer copy of x is a constant to autograd: d/dx = trunc(x). */
static kiln_tensor *f_cast_int(kiln_tensor **x) {
    return kiln_mul(x[0], kiln_cast(kiln_cast(x[0], KILN_I32), KILN_F64));
}
static kiln_tensor *f_sum02(kiln_tensor **x) { return kiln_sum(x[0], TU_AXES(0, 2), false); }
static kiln_tensor *f_sum_keep(kiln_tensor **x) { return kiln_sum(x[0], TU_AXES(-1, 1), true); }
static kiln_tensor *f_sum_all(kiln_tensor **x) { return kiln_sum(kiln_exp(x[0]), 0, NULL, false); }
static kiln_tensor *f_mean1(kiln_tensor **x) { return kiln_mean(x[0], TU_AXES(1), false); }
static kiln_tensor *f_max1(kiln_tensor **x) { return kiln_max(x[0], TU_AXES(1), false); }
static kiln_tensor *f_max_all(kiln_tensor **x) { return kiln_max(x[0], 0, NULL, true); }
static kiln_tensor *f_min02(kiln_tensor **x) { return kiln_min(x[0], TU_AXES(0, 2), true); }
static kiln_tensor *f_softmax(kiln_tensor **x) {
    kiln_tensor *m = kiln_max(x[0], TU_AXES(-1), true);
    kiln_tensor *e = kiln_exp(kiln_sub(x[0], m));
    return kiln_div(e, kiln_sum(e, TU_AXES(-1), true));
}

static const fd_case reduce_cases[] = {
    {"cast f64-f32-f64", 1, {2}, {{2, 3}}, GEN_UNIFORM, -2, 2, f_cast_f32, 1e-3, 0x1p-10},
    {"cast to i32 stops", 1, {1}, {{6}}, GEN_FRACTION, -3, 3, f_cast_int, 0, 0},
    {"sum axes 0,2", 1, {3}, {{2, 3, 4}}, GEN_UNIFORM, -2, 2, f_sum02, 0, 0},
    {"sum keepdim -1,1", 1, {3}, {{2, 3, 4}}, GEN_UNIFORM, -2, 2, f_sum_keep, 0, 0},
    {"sum all of exp", 1, {2}, {{3, 4}}, GEN_UNIFORM, -2, 2, f_sum_all, 0, 0},
    {"mean axis 1", 1, {3}, {{2, 3, 2}}, GEN_UNIFORM, -2, 2, f_mean1, 0, 0},
    {"max axis 1", 1, {3}, {{2, 4, 3}}, GEN_UNIFORM, -2, 2, f_max1, 0, 0},
    {"max all keepdim", 1, {2}, {{3, 4}}, GEN_UNIFORM, -2, 2, f_max_all, 0, 0},
    {"min axes 0,2 keepdim", 1, {3}, {{2, 3, 4}}, GEN_UNIFORM, -2, 2, f_min02, 0, 0},
    {"softmax rows", 1, {2}, {{3, 5}}, GEN_UNIFORM, -2, 2, f_softmax, 0, 0},
};

GRAD_TEST(reduce_cast) { fd_run(ctx, reduce_cases, sizeof reduce_cases / sizeof reduce_cases[0]); }

static kiln_tensor *f_permute(kiln_tensor **x) {
    return kiln_mul(kiln_permute(x[0], (const int[]){2, 0, 1}), kiln_permute(x[0], (const int[]){2, 0, 1}));
}
static kiln_tensor *f_slice_step(kiln_tensor **x) {
    return kiln_sin(kiln_slice(kiln_slice(x[0], 1, 1, KILN_END, 2), 0, -1, KILN_BEGIN_REV, -2));
}
static kiln_tensor *f_pad_flip(kiln_tensor **x) {
    const int64_t pads[] = {1, 2, 0, 1};
    return kiln_exp(kiln_flip(kiln_pad(x[0], pads, 0.5), TU_AXES(1)));
}
static kiln_tensor *f_expand(kiln_tensor **x) {
    return kiln_mul(kiln_expand(x[0], TU_S(2, 3, 4)), kiln_arange(kiln_ctx_of(x[0]), KILN_F64, 0, 4, 1));
}
static kiln_tensor *f_reshape_t(kiln_tensor **x) {
    /* A reshape that no view expresses (of a transpose), then a slice. */
    kiln_tensor *t = kiln_reshape(kiln_transpose(x[0], 0, 1), TU_S(2, 6));
    return kiln_tanh(kiln_slice(t, 1, 1, 5, 3));
}
static kiln_tensor *f_squeeze(kiln_tensor **x) {
    return kiln_unsqueeze(kiln_squeeze(kiln_mul(x[0], x[0]), 0, NULL), 0);
}
static kiln_tensor *f_cat(kiln_tensor **x) {
    kiln_tensor *parts[3] = {x[0], kiln_exp(x[1]), x[0]};
    return kiln_cat(3, parts, 1);
}
static kiln_tensor *f_view_chain(kiln_tensor **x) {
    /* slice with a step, permute, pad and flip composed into one view */
    const int64_t pads[] = {1, 0, 0, 2};
    kiln_tensor *s = kiln_slice(x[0], 1, 0, KILN_END, 2);
    return kiln_cos(kiln_flip(kiln_pad(kiln_transpose(s, 0, 1), pads, 0), 0, NULL));
}

/* q, k and v sliced from one [b, s, 3*h*d] projection and split into heads
 * ([b, h, s, d], as attention reads them): their gradients are spread back
 * over the projection and joined (autograd's join of boxes into a cat); q
 * read twice, the slices taken in the order given. */
static kiln_tensor *heads_of(kiln_tensor *x, const int *order) {
    const int64_t hs[] = {2, 3, 2, 2};
    const int perm[] = {0, 2, 1, 3};
    kiln_tensor *p[3];
    for (int i = 0; i < 3; i++) {
        int j = order[i];
        p[j] = kiln_permute(kiln_reshape(kiln_slice(x, 2, 4 * j, 4 * j + 4, 1), 4, hs), perm);
    }
    return kiln_add(kiln_mul(p[0], kiln_sin(p[1])), kiln_mul(kiln_cos(p[2]), p[0]));
}
/* every other feature of a [2, 3, 8]: the gradient's rows span two axes of
 * the source and its features step by 2 (autograd spreads it over the
 * source read as [6, 4, 2]) */
static kiln_tensor *f_slice_step_rows(kiln_tensor **x) {
    return kiln_sin(kiln_slice(x[0], 2, 1, KILN_END, 2));
}
static kiln_tensor *f_heads(kiln_tensor **x) { return heads_of(x[0], (const int[]){0, 1, 2}); }
static kiln_tensor *f_heads_apart(kiln_tensor **x) {
    return heads_of(x[0], (const int[]){2, 0, 1});
}

static kiln_tensor *f_cumsum(kiln_tensor **x) { return kiln_cumsum(x[0], 1); }
static kiln_tensor *f_cumprod(kiln_tensor **x) { return kiln_cumprod(x[0], 0); }
static kiln_tensor *f_cummax(kiln_tensor **x) { return kiln_cummax(x[0], -1); }
static kiln_tensor *f_logcumsumexp(kiln_tensor **x) { return kiln_logcumsumexp(x[0], 1); }
static kiln_tensor *f_gather(kiln_tensor **x) {
    kiln_ctx *ctx = kiln_ctx_of(x[0]);
    kiln_tensor *i = kiln_from_data(ctx, KILN_I64, 2, TU_DIMS(2, 3), (const int64_t[]){3, 0, 3, 1, 1, 2});
    return kiln_gather(kiln_exp(x[0]), 1, i);
}
/* along axis 0, the index narrower than the input (its gradient is padded),
 * repeated indices (theirs add up) and lazily computed ones out of range */
static kiln_tensor *f_gather_axis0(kiln_tensor **x) {
    kiln_ctx *ctx = kiln_ctx_of(x[0]);
    kiln_tensor *i = kiln_from_data(ctx, KILN_I32, 2, TU_DIMS(3, 2), (const int32_t[]){3, 0, 3, 3, 1, 2});
    kiln_tensor *lazy = kiln_sub_scalar(kiln_mul_scalar(i, 2), 2); /* 4, -2, 4, 4, 0, 2 */
    return kiln_add(kiln_gather(kiln_sin(x[0]), 0, i), kiln_gather(x[0], 0, lazy));
}
/* An index that is a view (a transpose) but no row broadcast: each element
 * its own index, so the gradient's general rule applies, not the row one. */
static kiln_tensor *f_gather_view_index(kiln_tensor **x) {
    kiln_ctx *ctx = kiln_ctx_of(x[0]);
    kiln_tensor *i = kiln_from_data(ctx, KILN_I64, 2, TU_DIMS(3, 3),
                                    (const int64_t[]){0, 3, 1, 2, 2, 0, 1, 3, 3});
    return kiln_gather(kiln_tanh(x[0]), 0, kiln_transpose(i, 0, 1));
}
static kiln_tensor *f_index(kiln_tensor **x) {
    kiln_ctx *ctx = kiln_ctx_of(x[0]);
    kiln_tensor *i = kiln_from_data(ctx, KILN_I64, 2, TU_DIMS(2, 2), (const int64_t[]){-1, 0, 2, -1});
    return kiln_exp(kiln_index(x[0], 1, i));
}
static kiln_tensor *f_index_select(kiln_tensor **x) {
    kiln_ctx *ctx = kiln_ctx_of(x[0]);
    kiln_tensor *i = kiln_from_data(ctx, KILN_U8, 1, TU_DIMS(4), (const uint8_t[]){2, 0, 2, 1});
    return kiln_mul(kiln_index_select(x[0], 1, i), kiln_index_select(x[0], 1, i));
}
static kiln_tensor *f_embedding(kiln_tensor **x) {
    kiln_ctx *ctx = kiln_ctx_of(x[0]);
    kiln_tensor *i = kiln_from_data(ctx, KILN_I64, 2, TU_DIMS(2, 3), (const int64_t[]){4, 0, 4, 2, 2, 4});
    return kiln_tanh(kiln_embedding(i, x[0]));
}
static kiln_tensor *f_scatter_add(kiln_tensor **x) {
    kiln_ctx *ctx = kiln_ctx_of(x[0]);
    kiln_tensor *i = kiln_from_data(ctx, KILN_I64, 2, TU_DIMS(2, 3), (const int64_t[]){3, 0, 3, 1, 1, 2});
    return kiln_scatter_add(x[0], 1, i, kiln_sin(x[1]));
}
static kiln_tensor *f_pad_modes(kiln_tensor **x) {
    const int64_t p[] = {1, 1, 2, 1};
    return kiln_add(kiln_pad_mode(x[0], p, KILN_PAD_REFLECT),
                    kiln_mul(kiln_pad_mode(x[0], p, KILN_PAD_REPLICATE), kiln_pad_mode(x[0], p, KILN_PAD_CIRCULAR)));
}
static kiln_tensor *f_conv1d(kiln_tensor **x) {
    kiln_tensor *c = kiln_conv1d(x[0], x[1], NULL, 1, 1, 1, 1); /* [1, 3, 6] */
    return kiln_add(kiln_max_pool1d(c, 3, 2, 1), kiln_avg_pool1d(c, 2, 2, 0));
}
static kiln_tensor *f_prod(kiln_tensor **x) { return kiln_prod(x[0], TU_AXES(0, 2), false); }
static kiln_tensor *f_var(kiln_tensor **x) { return kiln_var(x[0], TU_AXES(1), 1, false); }
static kiln_tensor *f_std(kiln_tensor **x) { return kiln_std(x[0], 0, NULL, 0, true); }
static kiln_tensor *f_stack_roll(kiln_tensor **x) {
    kiln_tensor *parts[2] = {kiln_roll(x[0], 2, 1), kiln_exp(x[1])};
    return kiln_stack(2, parts, 1);
}
static kiln_tensor *f_repeat(kiln_tensor **x) {
    return kiln_mul(kiln_repeat(x[0], 3, TU_DIMS(2, 1, 3)), kiln_repeat_interleave(x[0], 3, 1));
}
static kiln_tensor *f_diagonal(kiln_tensor **x) {
    return kiln_add(kiln_sin(kiln_diagonal(x[0], 1, 1, 2)), kiln_diagonal(x[0], -1, 2, 1));
}
static kiln_tensor *f_diag(kiln_tensor **x) { return kiln_mul(kiln_diag(x[0], -1), kiln_exp(kiln_diag(x[0], 1))); }

static const fd_case view_cases[] = {
    {"cumsum", 1, {2}, {{3, 9}}, GEN_UNIFORM, -2, 2, f_cumsum, 0, 0},
    {"cumprod", 1, {2}, {{6, 2}}, GEN_SIGNED, 0.5, 1.5, f_cumprod, 0, 0},
    {"cummax", 1, {2}, {{2, 7}}, GEN_UNIFORM, -2, 2, f_cummax, 0, 0},
    {"logcumsumexp", 1, {2}, {{2, 5}}, GEN_UNIFORM, -3, 3, f_logcumsumexp, 0, 0},
    {"gather", 1, {2}, {{2, 4}}, GEN_UNIFORM, -2, 2, f_gather, 0, 0},
    {"gather axis 0, narrow and lazy index", 1, {2}, {{5, 3}}, GEN_UNIFORM, -2, 2, f_gather_axis0, 0, 0},
    {"index_select", 1, {2}, {{2, 3}}, GEN_UNIFORM, -2, 2, f_index_select, 0, 0},
    {"embedding", 1, {2}, {{5, 3}}, GEN_UNIFORM, -2, 2, f_embedding, 0, 0},
    {"gather by a transposed index", 1, {2}, {{4, 3}}, GEN_UNIFORM, -2, 2, f_gather_view_index, 0,
     0},
    {"advanced index, negatives", 1, {2}, {{2, 3}}, GEN_UNIFORM, -2, 2, f_index, 0, 0},
    {"scatter_add", 2, {2, 2}, {{2, 4}, {2, 3}}, GEN_UNIFORM, -2, 2, f_scatter_add, 0, 0},
    {"pad modes", 1, {2}, {{3, 3}}, GEN_UNIFORM, -2, 2, f_pad_modes, 0, 0},
    {"conv1d and 1-d pools", 2, {3, 3}, {{1, 2, 6}, {3, 2, 3}}, GEN_UNIFORM, -2, 2, f_conv1d, 0, 0},
    {"prod axes 0,2", 1, {3}, {{3, 2, 3}}, GEN_SIGNED, 0.5, 1.5, f_prod, 0, 0},
    {"var axis 1", 1, {2}, {{3, 5}}, GEN_UNIFORM, -2, 2, f_var, 0, 0},
    {"std all, keepdim", 1, {2}, {{3, 4}}, GEN_UNIFORM, -2, 2, f_std, 0, 0},
    {"stack of a roll", 2, {2, 2}, {{2, 5}, {2, 5}}, GEN_UNIFORM, -2, 2, f_stack_roll, 0, 0},
    {"repeat and repeat_interleave", 1, {2}, {{2, 3}}, GEN_UNIFORM, -2, 2, f_repeat, 0, 0},
    {"diagonal", 1, {3}, {{2, 3, 4}}, GEN_UNIFORM, -2, 2, f_diagonal, 0, 0},
    {"diag of a vector", 1, {1}, {{3}}, GEN_UNIFORM, -2, 2, f_diag, 0, 0},
    {"permute", 1, {3}, {{2, 3, 4}}, GEN_UNIFORM, -2, 2, f_permute, 0, 0},
    {"slice with steps", 1, {2}, {{5, 6}}, GEN_UNIFORM, -2, 2, f_slice_step, 0, 0},
    {"pad and flip", 1, {2}, {{2, 3}}, GEN_UNIFORM, -2, 2, f_pad_flip, 0, 0},
    {"expand [3,1]->[2,3,4]", 1, {2}, {{3, 1}}, GEN_UNIFORM, -2, 2, f_expand, 0, 0},
    {"reshape of transpose", 1, {2}, {{3, 4}}, GEN_UNIFORM, -2, 2, f_reshape_t, 0, 0},
    {"squeeze/unsqueeze", 1, {3}, {{1, 3, 1}}, GEN_UNIFORM, -2, 2, f_squeeze, 0, 0},
    {"cat", 2, {2, 2}, {{2, 3}, {2, 2}}, GEN_UNIFORM, -2, 2, f_cat, 0, 0},
    {"view chain", 1, {2}, {{4, 5}}, GEN_UNIFORM, -2, 2, f_view_chain, 0, 0},
    {"every other feature", 1, {3}, {{2, 3, 8}}, GEN_UNIFORM, -2, 2, f_slice_step_rows, 0, 0},
    {"heads of a fused projection", 1, {3}, {{2, 3, 12}}, GEN_UNIFORM, -2, 2, f_heads, 0, 0},
    {"heads of a fused projection, v first", 1, {3}, {{2, 3, 12}}, GEN_UNIFORM, -2, 2,
     f_heads_apart, 0, 0},
};

GRAD_TEST(views) { fd_run(ctx, view_cases, sizeof view_cases / sizeof view_cases[0]); }

static kiln_tensor *f_ce_ex(kiln_tensor **x) {
    kiln_ctx *c = kiln_ctx_of(x[0]);
    kiln_tensor *t = tu_tensor(c, KILN_I64, TU_S(4), (double[]){2, -100, 0, 1});
    kiln_tensor *w = tu_tensor(c, KILN_F64, TU_S(3), (double[]){0.5, 2, 1.25});
    return kiln_cross_entropy_ex(x[0], t, w, -100, 0.2, KILN_REDUCTION_NONE);
}
static kiln_tensor *f_ce_ex_mean(kiln_tensor **x) {
    kiln_ctx *c = kiln_ctx_of(x[0]);
    kiln_tensor *t = tu_tensor(c, KILN_I64, TU_S(2, 3), (double[]){0, 1, -100, 2, 2, 0});
    return kiln_reshape(kiln_cross_entropy_ex(x[0], t, NULL, -100, 0.1, KILN_REDUCTION_MEAN), 1,
                        TU_DIMS(1));
}
static kiln_tensor *f_bce(kiln_tensor **x) {
    kiln_ctx *c = kiln_ctx_of(x[0]);
    kiln_tensor *pw = tu_tensor(c, KILN_F64, TU_S(4), (double[]){0.5, 1, 2, 3});
    return kiln_binary_cross_entropy_with_logits(x[0], kiln_sigmoid(x[1]), NULL, pw,
                                                 KILN_REDUCTION_NONE);
}
static kiln_tensor *f_huber(kiln_tensor **x) {
    return kiln_add(kiln_huber_loss(x[0], x[1], 0.7, KILN_REDUCTION_NONE),
                    kiln_smooth_l1_loss(x[0], x[1], 0.4, KILN_REDUCTION_NONE));
}
static kiln_tensor *f_kl(kiln_tensor **x) {
    return kiln_add(kiln_kl_div(kiln_log_softmax(x[0], 1), kiln_softmax(x[1], 1), false,
                                KILN_REDUCTION_NONE),
                    kiln_kl_div(x[0], x[1], true, KILN_REDUCTION_NONE));
}
static kiln_tensor *f_attention(kiln_tensor **x) {
    kiln_ctx *c = kiln_ctx_of(x[0]);
    kiln_tensor *keep = tu_tensor(c, KILN_BOOL, TU_S(2, 3), (double[]){1, 0, 1, 1, 1, 0});
    return kiln_attention(x[0], x[1], x[2], keep, false, 0);
}

static kiln_tensor *f_scatter_reduce(kiln_tensor **x) {
    kiln_ctx *c = kiln_ctx_of(x[0]);
    kiln_tensor *idx = tu_tensor(c, KILN_I64, TU_S(2, 3), (double[]){3, 0, 3, 1, 1, 2});
    kiln_tensor *r = kiln_scatter_reduce(x[0], 1, idx, x[1], KILN_SCATTER_MEAN, true);
    r = kiln_add(r, kiln_scatter_reduce(x[0], 1, idx, x[1], KILN_SCATTER_PROD, false));
    r = kiln_add(r, kiln_scatter_reduce(x[0], 1, idx, x[1], KILN_SCATTER_AMAX, true));
    return kiln_add(r, kiln_scatter(x[0], 1, idx, kiln_sin(x[1])));
}

/* The other combinations, along axis 0 of a 3-d tensor (rows of 2 inner
 * positions), with duplicates and an index smaller than t off the axis. */
static kiln_tensor *f_scatter_reduce_more(kiln_tensor **x) {
    kiln_ctx *c = kiln_ctx_of(x[0]);
    kiln_tensor *idx = tu_tensor(c, KILN_I32, TU_S(4, 2, 2),
                                 (double[]){2, 0, 1, 2, 2, 2, 0, 1, 0, 0, 2, 1, 1, 2, 2, 0});
    kiln_tensor *r = kiln_scatter_reduce(x[0], 0, idx, x[1], KILN_SCATTER_AMIN, false);
    r = kiln_add(r, kiln_scatter_reduce(x[0], 0, idx, x[1], KILN_SCATTER_SUM, false));
    r = kiln_add(r, kiln_mul(r, kiln_scatter_reduce(x[0], 0, idx, x[1], KILN_SCATTER_PROD, true)));
    r = kiln_add(r, kiln_scatter_reduce(x[0], 0, idx, x[1], KILN_SCATTER_MEAN, false));
    return kiln_add(r, kiln_scatter_reduce(x[0], 0, idx, kiln_sin(x[1]), KILN_SCATTER_AMAX, false));
}

static const fd_case loss_cases[] = {
    {"cross_entropy_ex weights, ignore, smoothing", 1, {2}, {{4, 3}}, GEN_UNIFORM, -2, 2, f_ce_ex,
     0, 0},
    {"cross_entropy_ex over a map, mean", 1, {3}, {{2, 3, 3}}, GEN_UNIFORM, -2, 2, f_ce_ex_mean, 0,
     0},
    {"bce with logits, pos_weight", 2, {2, 2}, {{3, 4}, {3, 4}}, GEN_UNIFORM, -3, 3, f_bce, 0, 0},
    {"huber and smooth l1", 2, {1, 1}, {{8}, {8}}, GEN_UNIFORM, -2, 2, f_huber, 0, 0},
    {"kl_div", 2, {2, 2}, {{2, 4}, {2, 4}}, GEN_UNIFORM, -2, 2, f_kl, 0, 0},
    {"scatter_reduce mean, prod, amax; scatter", 2, {2, 2}, {{2, 4}, {2, 3}}, GEN_UNIFORM, -2, 2,
     f_scatter_reduce, 0, 0},
    {"scatter_reduce amin, sum, prod, mean, amax on axis 0", 2, {3, 3}, {{3, 3, 2}, {4, 2, 2}},
     GEN_UNIFORM, -2, 2, f_scatter_reduce_more, 0, 0},
    {"attention, bool mask, grouped heads", 3, {4, 4, 4}, {{1, 4, 2, 3}, {1, 2, 3, 3}, {1, 2, 3, 2}},
     GEN_UNIFORM, -1, 1, f_attention, 0, 0},
};

GRAD_TEST(losses) { fd_run(ctx, loss_cases, sizeof loss_cases / sizeof loss_cases[0]); }

static kiln_tensor *f_matmul(kiln_tensor **x) { return kiln_matmul(x[0], x[1]); }
static kiln_tensor *f_linear(kiln_tensor **x) {
    return kiln_tanh(kiln_add(kiln_matmul(x[0], x[1]), x[2]));
}

static const fd_case matmul_cases[] = {
    {"matmul 2-d", 2, {2, 2}, {{3, 4}, {4, 2}}, GEN_UNIFORM, -2, 2, f_matmul, 0, 0},
    {"matmul batch bcast", 2, {4, 3}, {{2, 1, 3, 4}, {3, 4, 2}}, GEN_UNIFORM, -2, 2, f_matmul, 0, 0},
    {"matmul vec @ mat", 2, {1, 2}, {{4}, {4, 3}}, GEN_UNIFORM, -2, 2, f_matmul, 0, 0},
    {"matmul mat @ vec", 2, {3, 1}, {{2, 3, 4}, {4}}, GEN_UNIFORM, -2, 2, f_matmul, 0, 0},
    {"linear+bias+tanh", 3, {2, 2, 1}, {{4, 3}, {3, 2}, {2}}, GEN_UNIFORM, -1, 1, f_linear, 0, 0},
};

GRAD_TEST(matmul) { fd_run(ctx, matmul_cases, sizeof matmul_cases / sizeof matmul_cases[0]); }

/* ---- einsum, masks and windows --------------------------------------------- */

static kiln_tensor *f_einsum_bilinear(kiln_tensor **x) { return kiln_einsum("bn,anm,bm->ba", 3, x); }
static kiln_tensor *f_einsum_ellipsis(kiln_tensor **x) {
    return kiln_einsum("...ij,...jk->...ik", 2, x);
}
/* a diagonal, a trace and an implicit product with a broadcast letter */
static kiln_tensor *f_einsum_diag(kiln_tensor **x) {
    kiln_tensor *d = kiln_add(kiln_einsum("ii->i", 1, x), kiln_einsum("jj", 1, x));
    kiln_tensor *p[2] = {kiln_sin(x[0]), x[1]};
    return kiln_mul(d, kiln_einsum("ij,jk", 2, p)); /* [3] * [3,3] */
}
static kiln_tensor *f_masked_fill(kiln_tensor **x) {
    const unsigned char m[4] = {1, 0, 0, 1};
    kiln_tensor *mask = kiln_from_data(kiln_ctx_of(x[0]), KILN_BOOL, 2, TU_DIMS(1, 4), m);
    return kiln_masked_fill(kiln_exp(x[0]), mask, 2.5);
}
static kiln_tensor *f_unfold_overlap(kiln_tensor **x) {
    kiln_tensor *u = kiln_unfold(x[0], 1, 3, 1);
    return kiln_mul(u, kiln_sin(u));
}
/* Windows over a pad (a view of the masked view) along both axes. */
static kiln_tensor *f_unfold_pad_2d(kiln_tensor **x) {
    kiln_tensor *p = kiln_pad(x[0], TU_DIMS(1, 0, 2, 1), 0.0);
    kiln_tensor *u = kiln_unfold(kiln_unfold(p, 0, 3, 2), 1, 2, 1);
    return kiln_mul(u, kiln_cos(u));
}
static kiln_tensor *f_unfold_gaps(kiln_tensor **x) { return kiln_exp(kiln_unfold(x[0], 0, 2, 3)); }

static const fd_case select_cases[] = {
    {"einsum bn,anm,bm->ba", 3, {2, 3, 2}, {{2, 4}, {3, 4, 5}, {2, 5}}, GEN_UNIFORM, -1, 1, f_einsum_bilinear, 0, 0},
    {"einsum ...ij,...jk->...ik", 2, {4, 3}, {{2, 1, 3, 4}, {4, 4, 2}}, GEN_UNIFORM, -1, 1, f_einsum_ellipsis, 0, 0},
    {"einsum ii->i, jj, ij,jk", 2, {2, 2}, {{3, 3}, {1, 3}}, GEN_UNIFORM, -1, 1, f_einsum_diag, 0, 0},
    {"masked_fill", 1, {2}, {{3, 4}}, GEN_UNIFORM, -2, 2, f_masked_fill, 0, 0},
    {"unfold overlapping", 1, {2}, {{2, 7}}, GEN_UNIFORM, -2, 2, f_unfold_overlap, 0, 0},
    {"unfold of a pad, both axes", 1, {2}, {{4, 3}}, GEN_UNIFORM, -2, 2, f_unfold_pad_2d, 0, 0},
    {"unfold with gaps", 1, {2}, {{8, 2}}, GEN_UNIFORM, -2, 2, f_unfold_gaps, 0, 0},
};

GRAD_TEST(einsum_select) { fd_run(ctx, select_cases, sizeof select_cases / sizeof select_cases[0]); }

/* ---- second order ---------------------------------------------------------- */


/* ---- api/conv.c: convolutions, pooling, resizing ---- */

static kiln_tensor *f_conv3d(kiln_tensor **x) {
    kiln_tensor *v = kiln_reshape(x[0], 5, TU_DIMS(1, 2, 4, 4, 3));
    kiln_tensor *w = kiln_reshape(x[1], 5, TU_DIMS(3, 2, 2, 2, 2));
    return kiln_conv3d(v, w, x[2], TU_DIMS(1, 2, 1), TU_DIMS(1, 0, 1), TU_DIMS(1, 1, 2), 1);
}
/* Strided, dilated and grouped: the im2col view's overlapping kernel and
 * output axes. */
static kiln_tensor *f_conv2d_sdg(kiln_tensor **x) {
    return kiln_conv2d(x[0], x[1], x[2], 2, 1, 1, 0, 1, 2, 2);
}
/* A kernel larger than its output: the gradient splits the output axes. */
static kiln_tensor *f_conv2d_big_kernel(kiln_tensor **x) {
    return kiln_conv2d(x[0], x[1], NULL, 1, 1, 1, 0, 1, 1, 1);
}
static kiln_tensor *f_conv_t2d(kiln_tensor **x) {
    return kiln_conv_transpose2d(x[0], x[1], x[2], TU_DIMS(2, 1), TU_DIMS(1, 1), TU_DIMS(1, 0),
                                 TU_DIMS(1, 2), 2);
}
static kiln_tensor *f_conv_t1d(kiln_tensor **x) {
    /* padding above dil*(k-1): the zero-inserted input is cut */
    return kiln_conv_transpose1d(x[0], x[1], NULL, 3, 2, 1, 1, 1);
}
static kiln_tensor *f_conv_t3d(kiln_tensor **x) {
    kiln_tensor *v = kiln_reshape(x[0], 5, TU_DIMS(1, 2, 2, 2, 3));
    kiln_tensor *w = kiln_reshape(x[1], 5, TU_DIMS(2, 1, 2, 2, 2));
    return kiln_conv_transpose3d(v, w, NULL, TU_DIMS(2, 1, 2), TU_DIMS(0, 1, 1), TU_DIMS(1, 0, 0),
                                 TU_DIMS(1, 1, 1), 1);
}
static kiln_tensor *f_pools_2d(kiln_tensor **x) {
    kiln_tensor *m = kiln_max_pool2d_ex(x[0], TU_DIMS(2, 3), TU_DIMS(2, 2), TU_DIMS(1, 1),
                                        TU_DIMS(2, 1), true, NULL);
    kiln_tensor *a = kiln_avg_pool2d_ex(x[0], TU_DIMS(3, 2), TU_DIMS(2, 2), TU_DIMS(1, 1), true,
                                        false);
    return kiln_add(kiln_sum(m, 0, NULL, false), kiln_mul(a, a));
}
static kiln_tensor *f_pools_3d(kiln_tensor **x) {
    kiln_tensor *m = kiln_max_pool3d(x[0], TU_DIMS(2, 2, 2), TU_DIMS(2, 1, 2), TU_DIMS(1, 0, 1),
                                     TU_DIMS(1, 1, 1), true, NULL);
    kiln_tensor *a = kiln_avg_pool3d(x[0], TU_DIMS(2, 3, 2), TU_DIMS(1, 1, 2), TU_DIMS(1, 1, 0),
                                     false, true);
    return kiln_add(kiln_sum(m, 0, NULL, false), kiln_sum(kiln_exp(a), 0, NULL, false));
}
static kiln_tensor *f_pools_1d(kiln_tensor **x) {
    kiln_tensor *m = kiln_max_pool1d_ex(x[0], 3, 2, 1, 2, true, NULL);
    kiln_tensor *a = kiln_avg_pool1d_ex(x[0], 2, 3, 1, true, false);
    return kiln_add(kiln_sum(m, 0, NULL, false), kiln_sum(kiln_mul(a, a), 0, NULL, false));
}
static kiln_tensor *f_unpool(kiln_tensor **x) {
    kiln_tensor *idx;
    kiln_tensor *p = kiln_max_pool2d_ex(x[0], TU_DIMS(2, 2), TU_DIMS(2, 2), TU_DIMS(0, 0),
                                        TU_DIMS(1, 1), false, &idx);
    return kiln_mul(kiln_max_unpool2d(kiln_sin(p), idx, 4, 5), x[0]);
}
static kiln_tensor *f_adaptive(kiln_tensor **x) {
    kiln_tensor *a = kiln_adaptive_avg_pool2d(x[0], 3, 4);
    kiln_tensor *m = kiln_adaptive_max_pool2d(x[0], 2, 3);
    return kiln_add(kiln_sum(kiln_mul(a, a), 0, NULL, false), kiln_sum(m, 0, NULL, false));
}
static kiln_tensor *f_adaptive_1d(kiln_tensor **x) {
    kiln_tensor *a = kiln_adaptive_avg_pool1d(x[0], 4);
    kiln_tensor *m = kiln_adaptive_max_pool1d(x[0], 3);
    return kiln_add(kiln_sum(kiln_exp(a), 0, NULL, false), kiln_sum(m, 0, NULL, false));
}
static kiln_tensor *f_adaptive_3d(kiln_tensor **x) {
    kiln_tensor *a = kiln_adaptive_avg_pool3d(x[0], 2, 3, 2);
    kiln_tensor *m = kiln_adaptive_max_pool3d(x[0], 3, 2, 3);
    return kiln_add(kiln_sum(kiln_mul(a, a), 0, NULL, false), kiln_sum(m, 0, NULL, false));
}
static kiln_tensor *f_interp_2d(kiln_tensor **x) {
    kiln_tensor *c = kiln_interpolate(x[0], 2, TU_DIMS(7, 3), KILN_INTERP_BICUBIC, false);
    kiln_tensor *l = kiln_interpolate(x[0], 2, TU_DIMS(3, 8), KILN_INTERP_LINEAR, true);
    kiln_tensor *n = kiln_interpolate(x[0], 2, TU_DIMS(6, 4), KILN_INTERP_NEAREST, false);
    return kiln_add(kiln_add(kiln_sum(kiln_mul(c, c), 0, NULL, false), kiln_sum(l, 0, NULL, false)),
                    kiln_sum(kiln_exp(n), 0, NULL, false));
}
static kiln_tensor *f_interp_1d(kiln_tensor **x) {
    kiln_tensor *l = kiln_interpolate(x[0], 1, TU_DIMS(9), KILN_INTERP_LINEAR, false);
    return kiln_mul(l, l);
}

static kiln_tensor *f_unpool_1d_3d(kiln_tensor **x) {
    /* x [2, 3, 4, 4] as [C, D, H, W] for 3-d, and [2, 3*4*4] as [C, L] */
    kiln_tensor *i3, *i1;
    kiln_tensor *p3 = kiln_max_pool3d(x[0], TU_DIMS(2, 2, 2), TU_DIMS(1, 2, 2), TU_DIMS(0, 0, 0),
                                      TU_DIMS(1, 1, 1), false, &i3);
    kiln_tensor *u3 = kiln_max_unpool3d(kiln_sin(p3), i3, TU_DIMS(3, 4, 5));
    kiln_tensor *l = kiln_reshape(x[0], TU_S(2, 48));
    kiln_tensor *p1 = kiln_max_pool1d_ex(l, 3, 2, 1, 1, false, &i1);
    kiln_tensor *u1 = kiln_max_unpool1d(kiln_mul(p1, p1), i1, 50);
    return kiln_add(kiln_sum(kiln_mul(u3, u3), 0, NULL, false),
                    kiln_sum(kiln_exp(u1), 0, NULL, false));
}
static kiln_tensor *f_adaptive_ex(kiln_tensor **x) {
    kiln_tensor *i2, *i1;
    kiln_tensor *m = kiln_adaptive_max_pool2d_ex(x[0], 3, 4, &i2);
    kiln_tensor *l = kiln_adaptive_max_pool1d_ex(kiln_reshape(x[0], TU_S(2, 35)), 6, &i1);
    return kiln_add(kiln_sum(kiln_mul(m, kiln_cast(i2, KILN_F64)), 0, NULL, false),
                    kiln_sum(kiln_exp(l), 0, NULL, false));
}
static kiln_tensor *f_interp_3d(kiln_tensor **x) {
    kiln_tensor *v = kiln_reshape(x[0], TU_S(1, 2, 3, 4, 4));
    kiln_tensor *l = kiln_interpolate(v, 3, TU_DIMS(5, 3, 7), KILN_INTERP_LINEAR, false);
    kiln_tensor *a = kiln_interpolate(v, 3, TU_DIMS(2, 6, 3), KILN_INTERP_LINEAR, true);
    kiln_tensor *n = kiln_interpolate(v, 3, TU_DIMS(4, 5, 2), KILN_INTERP_NEAREST, false);
    kiln_tensor *s = kiln_interpolate_scale(v, 3, (const double[]){1.5, 0.8, 1.3},
                                            KILN_INTERP_LINEAR, false, false);
    return kiln_add(kiln_add(kiln_sum(kiln_mul(l, l), 0, NULL, false), kiln_sum(a, 0, NULL, false)),
                    kiln_add(kiln_sum(kiln_exp(n), 0, NULL, false),
                             kiln_sum(kiln_mul(s, s), 0, NULL, false)));
}

static const fd_case conv_cases[] = {
    {"conv3d", 3, {4, 4, 1}, {{2, 4, 4, 3}, {3, 2, 2, 4}, {3}}, GEN_UNIFORM, -1, 1, f_conv3d, 0, 0},
    {"conv2d strided, dilated, grouped", 3, {4, 4, 1}, {{2, 4, 5, 6}, {4, 2, 3, 2}, {4}},
     GEN_UNIFORM, -1, 1, f_conv2d_sdg, 0, 0},
    {"conv2d kernel larger than its output", 2, {4, 4}, {{1, 2, 3, 4}, {2, 2, 4, 3}}, GEN_UNIFORM,
     -1, 1, f_conv2d_big_kernel, 0, 0},
    {"conv_transpose2d groups", 3, {4, 4, 1}, {{1, 2, 3, 3}, {2, 2, 3, 2}, {4}}, GEN_UNIFORM, -1, 1,
     f_conv_t2d, 0, 0},
    {"conv_transpose1d cut", 2, {3, 3}, {{2, 2, 4}, {2, 3, 2}}, GEN_UNIFORM, -1, 1, f_conv_t1d, 0, 0},
    {"conv_transpose3d", 2, {4, 4}, {{2, 2, 2, 3}, {2, 1, 4, 2}}, GEN_UNIFORM, -1, 1, f_conv_t3d, 0,
     0},
    {"max/avg pool2d ex", 1, {4}, {{1, 2, 5, 6}}, GEN_UNIFORM, -2, 2, f_pools_2d, 0, 0},
    {"max/avg pool3d", 1, {4}, {{2, 3, 4, 4}}, GEN_UNIFORM, -2, 2, f_pools_3d, 0, 0},
    {"max/avg pool1d ex", 1, {3}, {{2, 2, 9}}, GEN_UNIFORM, -2, 2, f_pools_1d, 0, 0},
    {"max_unpool2d", 1, {4}, {{1, 2, 4, 5}}, GEN_UNIFORM, -2, 2, f_unpool, 0, 0},
    {"adaptive pools 2d", 1, {4}, {{1, 2, 5, 7}}, GEN_UNIFORM, -2, 2, f_adaptive, 0, 0},
    {"adaptive pools 1d", 1, {3}, {{2, 2, 7}}, GEN_UNIFORM, -2, 2, f_adaptive_1d, 0, 0},
    {"adaptive pools 3d", 1, {4}, {{2, 3, 5, 4}}, GEN_UNIFORM, -2, 2, f_adaptive_3d, 0, 0},
    {"interpolate 2d", 1, {4}, {{1, 2, 4, 5}}, GEN_UNIFORM, -2, 2, f_interp_2d, 0, 0},
    {"interpolate 1d", 1, {3}, {{1, 2, 5}}, GEN_UNIFORM, -2, 2, f_interp_1d, 0, 0},
    {"max_unpool1d/3d", 1, {4}, {{2, 3, 4, 4}}, GEN_UNIFORM, -2, 2, f_unpool_1d_3d, 0, 0},
    {"adaptive max pools ex", 1, {4}, {{1, 2, 5, 7}}, GEN_UNIFORM, -2, 2, f_adaptive_ex, 0, 0},
    {"interpolate 3d", 1, {4}, {{2, 3, 4, 4}}, GEN_UNIFORM, -2, 2, f_interp_3d, 0, 0},
};

GRAD_TEST(conv_extras) { fd_run(ctx, conv_cases, sizeof conv_cases / sizeof conv_cases[0]); }

/* f(x) = sum(tanh(x) * x^2) + sum(x)^2 / 2: its Hessian couples elements. */
static kiln_tensor *hess_f(kiln_tensor *x) {
    kiln_tensor *s = kiln_sum(x, 0, NULL, false);
    return kiln_add(kiln_sum(kiln_mul(kiln_tanh(x), kiln_mul(x, x)), 0, NULL, false),
                    kiln_mul_scalar(kiln_mul(s, s), 0.5));
}

static void grad_at(kiln_ctx *ctx, const double *xv, int64_t n, double *out) {
    kiln_scope_begin(ctx);
    kiln_tensor *x = make(ctx, 1, &n, xv), *g;
    cr_assert(kiln_gradients(hess_f(x), NULL, 1, &x, &g) == KILN_OK);
    TU_READ(g, out, n);
    kiln_scope_end(ctx);
}

GRAD_TEST(hessian_vector_product) {
    enum { N = 5 };
    TU_RNG(r);
    double xv[N], v[N], hv[N], up[N], down[N], xp[N];
    for (int i = 0; i < N; i++) {
        xv[i] = tu_unif(&r, -1.5, 1.5);
        v[i] = tu_unif(&r, -1, 1);
    }
    int64_t n = N;
    kiln_scope_begin(ctx);
    kiln_tensor *x = make(ctx, 1, &n, xv), *vt = make(ctx, 1, &n, v), *g, *h;
    cr_assert(kiln_gradients(hess_f(x), NULL, 1, &x, &g) == KILN_OK);
    /* H v = d(g . v)/dx */
    cr_assert(kiln_gradients(g, vt, 1, &x, &h) == KILN_OK, "%s", kiln_ctx_last_error(ctx));
    TU_READ(h, hv, N);
    kiln_scope_end(ctx);
    const double eps = 1e-5;
    for (int i = 0; i < N; i++)
        xp[i] = xv[i] + eps * v[i];
    grad_at(ctx, xp, N, up);
    for (int i = 0; i < N; i++)
        xp[i] = xv[i] - eps * v[i];
    grad_at(ctx, xp, N, down);
    double err = 0, scale = 0;
    for (int i = 0; i < N; i++) {
        double fd = (up[i] - down[i]) / (2 * eps);
        err = fmax(err, fabs(fd - hv[i]));
        scale = fmax(scale, fabs(fd));
    }
    printf("grad [%s] %-22s worst relative error %.2e\n", tu_exec_name(), "hessian-vector", err / scale);
    cr_assert(err / scale < 1e-6, "[%s] Hessian-vector product off by %.3g", tu_exec_name(),
              err / scale);
}

/* ---- leaves, accumulation, no-grad ------------------------------------------ */

static kiln_tensor *rand_leaf(kiln_ctx *ctx, tu_rng *r, int64_t n, double *v) {
    for (int64_t i = 0; i < n; i++)
        v[i] = tu_unif(r, -2, 2);
    kiln_tensor *t = make(ctx, 1, &n, v);
    cr_assert(kiln_requires_grad(t, true) == KILN_OK);
    cr_assert(kiln_requires_grad_of(t));
    return t;
}

GRAD_TEST(backward_accumulates) {
    TU_RNG(r);
    double wv[4], xv[4], got[4], want[4];
    kiln_tensor *w = rand_leaf(ctx, &r, 4, wv);
    kiln_tensor *x = rand_leaf(ctx, &r, 4, xv);
    cr_assert(kiln_grad(w) == NULL, "a fresh leaf has no gradient");
    /* loss1 = sum(w^2 x), loss2 = sum(sin(w)) */
    kiln_tensor *l1 = kiln_sum(kiln_mul(kiln_mul(w, w), x), 0, NULL, false);
    cr_assert(kiln_backward(l1) == KILN_OK, "%s", kiln_ctx_last_error(ctx));
    for (int i = 0; i < 4; i++)
        want[i] = 2 * wv[i] * xv[i];
    TU_EXPECT(kiln_grad(w), KILN_F64, want, 4);
    TU_EXPECT(kiln_grad(x), KILN_F64, ((double[]){wv[0] * wv[0], wv[1] * wv[1], wv[2] * wv[2], wv[3] * wv[3]}), 4);
    cr_assert(kiln_backward(kiln_sum(kiln_sin(w), 0, NULL, false)) == KILN_OK);
    for (int i = 0; i < 4; i++)
        want[i] += cos(wv[i]);
    TU_EXPECT(kiln_grad(w), KILN_F64, want, 4);
    /* x took nothing from the second loss */
    TU_READ(kiln_grad(x), got, 4);
    for (int i = 0; i < 4; i++)
        cr_assert(fabs(got[i] - wv[i] * wv[i]) < 1e-12);
    kiln_zero_grad(w);
    cr_assert(kiln_grad(w) == NULL, "kiln_zero_grad leaves a gradient");
    cr_assert(kiln_backward(l1) == KILN_OK);
    for (int i = 0; i < 4; i++)
        want[i] = 2 * wv[i] * xv[i];
    TU_EXPECT(kiln_grad(w), KILN_F64, want, 4);
    cr_assert(kiln_requires_grad(x, false) == KILN_OK && !kiln_requires_grad_of(x));
}

GRAD_TEST(shared_zero_leaves_stay_apart) {
    /* Two zero-initialised tensors are one lazy value; as leaves they must not
     * share a gradient. */
    kiln_tensor *a = kiln_zeros(ctx, KILN_F64, TU_S(3));
    kiln_tensor *b = kiln_zeros(ctx, KILN_F64, TU_S(3));
    cr_assert(kiln_requires_grad(a, true) == KILN_OK && kiln_requires_grad(b, true) == KILN_OK);
    kiln_tensor *x = make(ctx, 1, TU_DIMS(3), (double[]){1, 2, 3});
    kiln_tensor *loss = kiln_sum(kiln_add(kiln_mul(a, x), kiln_mul_scalar(b, 5)), 0, NULL, false);
    cr_assert(kiln_backward(loss) == KILN_OK);
    TU_EXPECT_VALS(kiln_grad(a), KILN_F64, 1, 2, 3);
    TU_EXPECT_VALS(kiln_grad(b), KILN_F64, 5, 5, 5);
}

GRAD_TEST(no_grad_and_detach) {
    TU_RNG(r);
    double wv[3], want[3];
    kiln_tensor *w = rand_leaf(ctx, &r, 3, wv);
    /* d/dw sum(w * detach(w)) = detach(w) */
    cr_assert(kiln_backward(kiln_sum(kiln_mul(w, kiln_detach(w)), 0, NULL, false)) == KILN_OK);
    TU_EXPECT(kiln_grad(w), KILN_F64, wv, 3);
    kiln_zero_grad(w);
    /* z made under no_grad is a constant: d/dw sum(z * w) = z = 2w */
    kiln_no_grad_begin(ctx);
    kiln_no_grad_begin(ctx);
    kiln_tensor *z = kiln_mul_scalar(w, 2);
    kiln_no_grad_end(ctx);
    kiln_tensor *z2 = kiln_mul_scalar(w, 3);
    kiln_no_grad_end(ctx);
    kiln_no_grad_end(ctx); /* unbalanced: a no-op */
    kiln_tensor *after = kiln_mul_scalar(w, 4);
    cr_assert(kiln_backward(kiln_sum(kiln_mul(kiln_add(z, z2), w), 0, NULL, false)) == KILN_OK);
    for (int i = 0; i < 3; i++)
        want[i] = 5 * wv[i];
    TU_EXPECT(kiln_grad(w), KILN_F64, want, 3);
    /* a view made under no_grad is cut off, and so is a view of that view
     * (which no_grad no longer detaches a second time) */
    kiln_no_grad_begin(ctx);
    kiln_tensor *v = kiln_reshape(kiln_transpose(kiln_reshape(w, 2, TU_DIMS(1, 3)), 0, 1), 1,
                                  TU_DIMS(3));
    kiln_no_grad_end(ctx);
    kiln_zero_grad(w);
    cr_assert(kiln_backward(kiln_sum(kiln_mul(kiln_mul_scalar(v, 3), w), 0, NULL, false)) ==
              KILN_OK);
    for (int i = 0; i < 3; i++)
        want[i] = 3 * wv[i];
    TU_EXPECT(kiln_grad(w), KILN_F64, want, 3);
    /* outside the scope ops differentiate again */
    kiln_tensor *g;
    cr_assert(kiln_gradients(kiln_sum(after, 0, NULL, false), NULL, 1, &w, &g) == KILN_OK);
    TU_EXPECT_VALS(g, KILN_F64, 4, 4, 4);
    /* a tensor y does not depend on gets zeros */
    kiln_tensor *other = make(ctx, 2, TU_DIMS(1, 2), (double[]){1, 2});
    cr_assert(kiln_gradients(kiln_sum(kiln_detach(w), 0, NULL, false), NULL, 1, &other, &g) ==
              KILN_OK);
    TU_EXPECT_VALS(g, KILN_F64, 0, 0);
    cr_assert(kiln_gradients(kiln_sum(kiln_detach(w), 0, NULL, false), NULL, 1, &w, &g) == KILN_OK);
    TU_EXPECT_VALS(g, KILN_F64, 0, 0, 0);
    /* a 0-d detach keeps its shape and value */
    kiln_tensor *s = kiln_detach(kiln_sum(w, 0, NULL, false));
    TU_ASSERT_SCALAR_SHAPE(s);
    cr_assert(fabs(TU_ITEM(s) - (wv[0] + wv[1] + wv[2])) < 1e-12);
}

GRAD_TEST(errors) {
    kiln_tensor *i = kiln_arange(ctx, KILN_I32, 0, 4, 1);
    cr_assert(kiln_requires_grad(i, true) == KILN_ERR_DTYPE);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "kiln_requires_grad") &&
              strstr(kiln_ctx_last_error(ctx), "i32"), "message: %s", kiln_ctx_last_error(ctx));
    cr_assert(kiln_requires_grad(NULL, true) == KILN_ERR_ARG);
    cr_assert(kiln_backward(NULL) == KILN_ERR_ARG);
    kiln_tensor *bad = kiln_add(kiln_ones(ctx, KILN_F64, TU_S(3)), kiln_ones(ctx, KILN_F64, TU_S(4)));
    cr_assert(kiln_backward(bad) == KILN_ERR_SHAPE);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "kiln_add"), "message: %s", kiln_ctx_last_error(ctx));
    cr_assert(kiln_backward(kiln_sum(i, 0, NULL, false)) == KILN_ERR_DTYPE);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "kiln_backward") &&
              strstr(kiln_ctx_last_error(ctx), "i64"), "message: %s", kiln_ctx_last_error(ctx));
    kiln_tensor *x = make(ctx, 2, TU_DIMS(2, 2), (double[]){1, 2, 3, 4}), *g = NULL;
    kiln_tensor *seed = kiln_ones(ctx, KILN_F64, TU_S(3));
    cr_assert(kiln_gradients(kiln_exp(x), seed, 1, &x, &g) == KILN_ERR_SHAPE && g == NULL);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "[3]") && strstr(kiln_ctx_last_error(ctx), "[2,2]"),
              "message: %s", kiln_ctx_last_error(ctx));
    cr_assert(kiln_gradients(kiln_exp(x), NULL, 1, &i, &g) == KILN_ERR_DTYPE && g == NULL);
    cr_assert(kiln_gradients(bad, NULL, 1, &x, &g) == KILN_ERR_SHAPE);
    cr_assert(kiln_gradients(kiln_exp(x), NULL, 1, &bad, &g) == KILN_ERR_SHAPE);
    cr_assert(kiln_gradients(kiln_exp(x), NULL, 1, NULL, &g) == KILN_ERR_ARG);
    TU_ASSERT_STATUS(kiln_detach(bad), KILN_ERR_SHAPE);
    cr_assert(kiln_detach(NULL) == NULL);
    cr_assert(kiln_grad(NULL) == NULL);
    kiln_zero_grad(NULL);
    kiln_no_grad_begin(NULL);
    kiln_no_grad_end(NULL);
    /* a scalar seed broadcasts */
    cr_assert(kiln_gradients(kiln_exp(x), kiln_scalar(ctx, KILN_F64, 2), 1, &x, &g) == KILN_OK);
    TU_EXPECT(g, KILN_F64, ((double[]){2 * exp(1), 2 * exp(2), 2 * exp(3), 2 * exp(4)}), 4);
}

/* ---- training -------------------------------------------------------------- */

GRAD_TEST(linear_regression) {
    enum { N = 32, D = 3 };
    TU_RNG(r);
    double xv[N * D], yv[N], wtrue[D] = {1.5, -2.0, 0.7}, btrue = 0.3;
    for (int i = 0; i < N; i++) {
        yv[i] = btrue;
        for (int j = 0; j < D; j++) {
            xv[i * D + j] = tu_unif(&r, -1, 1);
            yv[i] += xv[i * D + j] * wtrue[j];
        }
    }
    float xf[N * D], yf[N];
    for (int i = 0; i < N * D; i++)
        xf[i] = (float)xv[i];
    for (int i = 0; i < N; i++)
        yf[i] = (float)yv[i];
    kiln_tensor *x = kiln_from_data(ctx, KILN_F32, 2, TU_DIMS(N, D), xf);
    kiln_tensor *y = kiln_from_data(ctx, KILN_F32, 2, TU_DIMS(N, 1), yf);
    kiln_tensor *w = kiln_zeros(ctx, KILN_F32, TU_S(D, 1));
    kiln_tensor *b = kiln_zeros(ctx, KILN_F32, TU_S(1));
    cr_assert(kiln_requires_grad(w, true) == KILN_OK && kiln_requires_grad(b, true) == KILN_OK);
    double first = 0, last = 0;
    /* Programs built after the first step: compiled, or loaded from disk. */
    int64_t built_after_first = 0, live_at_5 = 0;
    for (int step = 0; step < 60; step++) {
        if (step == 5)
            live_at_5 = kiln_ctx_live_nodes(ctx);
        kiln_scope_begin(ctx);
        kiln_tensor *d = kiln_sub(kiln_add(kiln_matmul(x, w), b), y);
        kiln_tensor *loss = kiln_mean(kiln_mul(d, d), 0, NULL, false);
        cr_assert(kiln_backward(loss) == KILN_OK, "%s", kiln_ctx_last_error(ctx));
        kiln_no_grad_begin(ctx);
        cr_assert(kiln_assign(w, kiln_sub(w, kiln_mul_scalar(kiln_grad(w), 0.3))) == KILN_OK);
        cr_assert(kiln_assign(b, kiln_sub(b, kiln_mul_scalar(kiln_grad(b), 0.3))) == KILN_OK);
        kiln_no_grad_end(ctx);
        kiln_zero_grad(w);
        kiln_zero_grad(b);
        last = TU_ITEM(loss); /* one sync: loss and both updates */
        if (step == 0) {
            first = last;
            built_after_first = kiln_ctx_stats(ctx).compiles + kiln_ctx_stats(ctx).disk_hits;
        }
        kiln_scope_end(ctx);
    }
    printf("grad [%s] linear regression loss %.3g -> %.3g, %lld compiles\n", tu_exec_name(),
           first, last, (long long)kiln_ctx_stats(ctx).compiles);
    cr_assert(last < first / 10, "[%s] loss went from %g to %g", tu_exec_name(), first, last);
    /* the updates were made under no-grad: no step keeps the graph of the
     * steps before it */
    cr_assert(kiln_ctx_live_nodes(ctx) <= live_at_5, "[%s] %lld live nodes after 60 steps, %lld after 5",
              tu_exec_name(), (long long)kiln_ctx_live_nodes(ctx), (long long)live_at_5);
    kiln_stats st = kiln_ctx_stats(ctx);
    cr_assert(st.syncs < 60 || st.graph_hits >= 58, "[%s] only %lld of 60 steps reused their program",
              tu_exec_name(), (long long)st.graph_hits);
    cr_assert(st.compiles + st.disk_hits == built_after_first,
              "[%s] %lld programs built after the first step", tu_exec_name(),
              (long long)(st.compiles + st.disk_hits - built_after_first));
}

/* ---- kinks ------------------------------------------------------------------ */

/* At a kink the gradient takes a documented side, which finite differences
 * (drawn away from kinks) never see: relu'(0) = 0 and abs'(0) = 0, as PyTorch
 * has them; maximum's tie halves the gradient. */
GRAD_TEST(gradients_at_kinks) {
    const double xv[] = {-1.5, 0, -0.0, 2.5, 0};
    const double wv[] = {1, 2, 3, 4, 5};
    const int64_t n = 5;
    kiln_tensor *w = make(ctx, 1, &n, wv);

    kiln_tensor *x = make(ctx, 1, &n, xv);
    kiln_requires_grad(x, true);
    cr_assert_eq(kiln_backward(kiln_sum(kiln_mul(kiln_relu(x), w), 0, NULL, false)), KILN_OK);
    TU_EXPECT_VALS(kiln_grad(x), KILN_F64, 0, 0, 0, 4, 0);

    kiln_tensor *x2 = make(ctx, 1, &n, xv);
    kiln_requires_grad(x2, true);
    cr_assert_eq(kiln_backward(kiln_sum(kiln_mul(kiln_abs(x2), w), 0, NULL, false)), KILN_OK);
    TU_EXPECT_VALS(kiln_grad(x2), KILN_F64, -1, 0, 0, 4, 0);

    kiln_tensor *x3 = make(ctx, 1, &n, xv);
    kiln_tensor *zero = make(ctx, 1, &n, (const double[]){0, 0, 0, 0, 0});
    kiln_requires_grad(x3, true);
    cr_assert_eq(kiln_backward(kiln_sum(kiln_mul(kiln_maximum(x3, zero), w), 0, NULL, false)),
                 KILN_OK);
    TU_EXPECT_VALS(kiln_grad(x3), KILN_F64, 0, 1, 1.5, 4, 2.5);
}

/* pow at base 0, where finite differences cannot go, as PyTorch has it:
 * d(x^y)/dx is 0 where y = 0 (x^0 is 1 everywhere) and y x^(y-1) elsewhere
 * (-inf at 0^-1, inf at 0^0.5); d(x^y)/dy is 0 where x = 0 and y >= 0, and
 * x^y log x = -inf where x = 0 and y < 0. */
GRAD_TEST(pow_at_base_zero) {
    const int64_t n = 5;
    kiln_tensor *x = make(ctx, 1, &n, (const double[]){0, 0, 0, 2, 0});
    kiln_tensor *y = make(ctx, 1, &n, (const double[]){0, -1, 2, 0, 0.5});
    kiln_requires_grad(x, true);
    kiln_requires_grad(y, true);
    cr_assert_eq(kiln_backward(kiln_sum(kiln_pow(x, y), 0, NULL, false)), KILN_OK);
    TU_EXPECT_VALS(kiln_grad(x), KILN_F64, 0, -INFINITY, 0, 0, INFINITY);
    TU_EXPECT_NEAR_VALS(kiln_grad(y), KILN_F64, 0, -INFINITY, 0, log(2.0), 0);
}
