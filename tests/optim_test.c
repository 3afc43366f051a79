/* Tests of the optimisers and learning-rate schedules: parameters after a few
 * steps of a least-squares problem against a plain-C float64 implementation
 * of PyTorch's update equations (gradients computed by hand), on every
 * executor; the compiled-program cache replaying the whole training step
 * while the learning rate changes; argument errors; schedule values. */
#include "test_util.h"

/* ---- the problem: mean((x @ w + b - y)^2) -------------------------------- */

enum { PN = 8, PK = 5, PM = 3 };

typedef struct problem {
    double x[PN * PK], y[PN * PM], w[PK * PM], b[PM];
} problem;

static void problem_init(problem *pb, tu_rng *r) {
    for (int i = 0; i < PN * PK; i++)
        pb->x[i] = tu_unif(r, -1, 1);
    for (int i = 0; i < PN * PM; i++)
        pb->y[i] = tu_unif(r, -1, 1);
    for (int i = 0; i < PK * PM; i++)
        pb->w[i] = tu_unif(r, -1, 1);
    for (int i = 0; i < PM; i++)
        pb->b[i] = tu_unif(r, -1, 1);
}

/* The gradients of the loss at (w, b), by hand. */
static void problem_grad(const problem *pb, const double *w, const double *b, double *gw,
                         double *gb) {
    memset(gw, 0, sizeof(double) * PK * PM);
    memset(gb, 0, sizeof(double) * PM);
    for (int i = 0; i < PN; i++)
        for (int j = 0; j < PM; j++) {
            double pred = b[j];
            for (int k = 0; k < PK; k++)
                pred += pb->x[i * PK + k] * w[k * PM + j];
            double d = 2 * (pred - pb->y[i * PM + j]) / (PN * PM);
            gb[j] += d;
            for (int k = 0; k < PK; k++)
                gw[k * PM + j] += pb->x[i * PK + k] * d;
        }
}

/* ---- the reference optimisers (PyTorch's torch.optim equations) ---------- */

typedef enum ref_kind { REF_SGD, REF_ADAM, REF_ADAMW } ref_kind;

typedef struct ref_opt {
    ref_kind kind;
    double lr, momentum, wd, b1, b2, eps;
    bool nesterov;
    int64_t t;
    double m[PN * PM + PK * PM + PM], v[PN * PM + PK * PM + PM];
} ref_opt;

/* One step over the n values of p (the state at offset off). */
static void ref_update(ref_opt *o, double *p, const double *grad, int n, int off) {
    for (int i = 0; i < n; i++) {
        double g = grad[i], *m = &o->m[off + i], *v = &o->v[off + i];
        if (o->kind == REF_SGD) {
            if (o->wd != 0)
                g += o->wd * p[i];
            if (o->momentum != 0) {
                *m = o->t == 1 ? g : o->momentum * *m + g;
                g = o->nesterov ? g + o->momentum * *m : *m;
            }
            p[i] -= o->lr * g;
            continue;
        }
        if (o->kind == REF_ADAMW)
            p[i] *= 1 - o->lr * o->wd;
        else if (o->wd != 0)
            g += o->wd * p[i];
        *m += (g - *m) * (1 - o->b1);
        *v = *v * o->b2 + (1 - o->b2) * g * g;
        double bc1 = 1 - pow(o->b1, (double)o->t), bc2 = 1 - pow(o->b2, (double)o->t);
        double denom = sqrt(*v) / sqrt(bc2) + o->eps;
        p[i] -= o->lr / bc1 * *m / denom;
    }
}

/* ---- kiln's side --------------------------------------------------------- */

typedef struct model {
    kiln_tensor *x, *y, *w, *b;
} model;

static model model_new(kiln_ctx *ctx, const problem *pb, kiln_dtype dt) {
    model md;
    md.x = tu_tensor(ctx, dt, TU_S(PN, PK), pb->x);
    md.y = tu_tensor(ctx, dt, TU_S(PN, PM), pb->y);
    md.w = tu_tensor(ctx, dt, TU_S(PK, PM), pb->w);
    md.b = tu_tensor(ctx, dt, TU_S(PM), pb->b);
    kiln_requires_grad(md.w, true);
    kiln_requires_grad(md.b, true);
    return md;
}

/* Forward, backward and the optimiser's step, with extra (or NULL) added
 * to the prediction, the loss scaled by gs when it is not NULL; the loss is
 * returned unsynced. */
static kiln_tensor *train_step_scaled(kiln_optim *o, kiln_grad_scaler *gs, const model *md,
                                      kiln_tensor *extra) {
    kiln_optim_zero_grad(o);
    kiln_tensor *pred = kiln_add(kiln_matmul(md->x, md->w), md->b);
    kiln_tensor *d = kiln_sub(extra ? kiln_add(pred, extra) : pred, md->y);
    kiln_tensor *loss = kiln_mean(kiln_mul(d, d), 0, NULL, false);
    kiln_tensor *scaled = gs ? kiln_grad_scaler_scale(gs, loss) : loss;
    cr_assert_eq(kiln_backward(scaled), KILN_OK, "[%s] %s", tu_exec_name(),
                 kiln_error_message(scaled));
    cr_assert_eq(gs ? kiln_grad_scaler_step(gs, o) : kiln_optim_step(o), KILN_OK, "[%s] %s",
                 tu_exec_name(), kiln_ctx_last_error(kiln_ctx_of(md->w)));
    return loss;
}

static kiln_tensor *train_step(kiln_optim *o, const model *md, kiln_tensor *extra) {
    return train_step_scaled(o, NULL, md, extra);
}

typedef struct optim_case {
    const char *name;
    ref_kind kind;
    double lr, momentum, wd, b1, b2, eps;
    bool nesterov;
} optim_case;

static const optim_case cases[] = {
    {"sgd", REF_SGD, 0.1, 0, 0, 0, 0, 0, false},
    {"sgd momentum wd", REF_SGD, 0.05, 0.9, 0.01, 0, 0, 0, false},
    {"sgd nesterov", REF_SGD, 0.05, 0.8, 0.02, 0, 0, 0, true},
    {"adam", REF_ADAM, 0.01, 0, 0, 0.9, 0.999, 1e-8, false},
    {"adam wd", REF_ADAM, 0.02, 0, 0.05, 0.8, 0.99, 1e-6, false},
    {"adamw", REF_ADAMW, 0.03, 0, 0.1, 0.9, 0.95, 1e-8, false},
};

static kiln_optim *make_optim(kiln_ctx *ctx, const optim_case *c, kiln_tensor **params) {
    kiln_optim *o = NULL;
    kiln_status st = KILN_ERR_ARG;
    switch (c->kind) {
    case REF_SGD:
        st = kiln_sgd_new(ctx, 2, params, c->lr, c->momentum, c->wd, c->nesterov, &o);
        break;
    case REF_ADAM:
        st = kiln_adam_new(ctx, 2, params, c->lr, c->b1, c->b2, c->eps, c->wd, &o);
        break;
    case REF_ADAMW:
        st = kiln_adamw_new(ctx, 2, params, c->lr, c->b1, c->b2, c->eps, c->wd, &o);
        break;
    }
    cr_assert_eq(st, KILN_OK, "%s: %s", c->name, kiln_ctx_last_error(ctx));
    return o;
}

static void expect_close(const char *what, const optim_case *c, const double *got,
                         const double *want, int n, double rel) {
    for (int i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= rel * fmax(fabs(want[i]), 0.1),
                  "[%s] %s, %s[%d]: %.9g, expected %.9g", tu_exec_name(), c->name, what, i,
                  got[i], want[i]);
}

/* Three steps of each optimiser against the reference, in f64 (tight) and
 * f32 (to 1e-5 relative); with `scaled`, through a gradient scaler whose
 * scale (1024, growing to 2048 after two steps) must change nothing, as a
 * power of two scales every gradient exactly. */
static void check_case(kiln_ctx *ctx, const optim_case *c, kiln_dtype dt, tu_rng *r,
                       bool scaled) {
    problem pb;
    problem_init(&pb, r);
    kiln_scope_begin(ctx);
    model md = model_new(ctx, &pb, dt);
    kiln_tensor *params[] = {md.w, md.b};
    kiln_optim *o = make_optim(ctx, c, params);
    cr_assert(o != NULL, "%s: %s", c->name, kiln_ctx_last_error(ctx));
    ref_opt ro = {.kind = c->kind, .lr = c->lr, .momentum = c->momentum, .wd = c->wd,
                  .b1 = c->b1, .b2 = c->b2, .eps = c->eps, .nesterov = c->nesterov};
    kiln_grad_scaler *gs = NULL;
    if (scaled)
        cr_assert_eq(kiln_grad_scaler_new(ctx, 1024, 2, 0.5, 2, &gs), KILN_OK, "%s",
                     kiln_ctx_last_error(ctx));
    double w[PK * PM], b[PM], gw[PK * PM], gb[PM];
    for (int i = 0; i < PK * PM; i++)
        w[i] = tu_round(dt, pb.w[i]);
    for (int i = 0; i < PM; i++)
        b[i] = tu_round(dt, pb.b[i]);
    for (int s = 0; s < 3; s++) {
        kiln_scope_begin(ctx);
        train_step_scaled(o, gs, &md, NULL);
        /* a sync per step, as a training loop has: steps 2 and 3 replay */
        cr_assert_eq(kiln_sync(ctx), KILN_OK, "%s", kiln_ctx_last_error(ctx));
        kiln_scope_end(ctx);
        problem_grad(&pb, w, b, gw, gb);
        ro.t++;
        ref_update(&ro, w, gw, PK * PM, 0);
        ref_update(&ro, b, gb, PM, PK * PM);
    }
    double got[PK * PM];
    double rel = dt == KILN_F64 ? 1e-10 : 1e-5;
    TU_READ(md.w, got, PK * PM);
    expect_close("w", c, got, w, PK * PM, rel);
    TU_READ(md.b, got, PM);
    expect_close("b", c, got, b, PM, rel);
    if (gs) {
        double scale;
        int64_t skipped;
        cr_assert_eq(kiln_grad_scaler_get_scale(gs, &scale), KILN_OK, "%s",
                     kiln_ctx_last_error(ctx));
        cr_assert_eq(kiln_grad_scaler_skipped(gs, &skipped), KILN_OK);
        cr_assert(scale == 2048 && skipped == 0, "[%s] %s: scale %g after three finite steps "
                  "(expected 2048), %lld skipped", tu_exec_name(), c->name, scale,
                  (long long)skipped);
    }
    kiln_grad_scaler_free(gs);
    kiln_optim_free(o);
    kiln_scope_end(ctx);
}

TU_TEST(optim, three_steps_against_reference) {
    TU_RNG(r);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        check_case(ctx, &cases[k], KILN_F64, &r, false);
        check_case(ctx, &cases[k], KILN_F32, &r, false);
    }
}

TU_TEST(optim, grad_scaler_changes_nothing_when_finite) {
    TU_RNG(r);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        check_case(ctx, &cases[k], KILN_F64, &r, true);
        check_case(ctx, &cases[k], KILN_F32, &r, true);
    }
}

/* f16 training with loss scaling: loss = sum(w * c) over f16 w and c (|c|
 * in [100, 300]), Adam, the scale starting at 65536. The gradient of w is
 * f16(scale * c) (the scale itself is infinite in f16 at 65536), so the
 * first steps overflow: each must change nothing, halve the scale and not
 * count as a step, until the scale fits (2^7 or 2^8); from then on every
 * step is Adam's on the true gradient c, with its bias correction counted
 * from the first step that happened. A scaler that counted skipped steps
 * moves w by about half as much on the first real step (1 - 0.9^t with t
 * near 10, not 1) and fails here; one that let a skipped step through
 * writes infinities. In lazy mode the whole step is one sync: the verdict
 * is read from the buffer the step's own sync wrote. */
TU_TEST(optim, grad_scaler_skips_overflowing_steps) {
    TU_RNG(r);
    enum { N = 6, STEPS = 14 };
    double w0[N], c[N];
    kiln_tensor *w = tu_rand_tensor(ctx, &r, KILN_F16, TU_S(N), -1, 1, w0);
    for (int i = 0; i < N; i++)
        c[i] = tu_round(KILN_F16, (i % 2 ? -1 : 1) * tu_unif(&r, 100, 300));
    kiln_tensor *ct = tu_tensor(ctx, KILN_F16, TU_S(N), c);
    cr_assert_eq(kiln_requires_grad(w, true), KILN_OK);
    kiln_optim *o;
    cr_assert_eq(kiln_adam_new(ctx, 1, &w, 0.01, 0.9, 0.999, 1e-8, 0, &o), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    kiln_grad_scaler *gs;
    cr_assert_eq(kiln_grad_scaler_new(ctx, 65536, 2, 0.5, 1000, &gs), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    /* the reference: Adam in f64 on the steps that happen, w rounded to f16 */
    double want[N], m[N] = {0}, v[N] = {0}, scale = 65536;
    memcpy(want, w0, sizeof want);
    int64_t t = 0, skips = 0;
    bool lazy = kiln_ctx_mode(ctx) == KILN_LAZY && kiln_ctx_device(ctx) != KILN_REF;
    for (int step = 0; step < STEPS; step++) {
        kiln_stats before = kiln_ctx_stats(ctx);
        kiln_scope_begin(ctx);
        kiln_optim_zero_grad(o);
        kiln_tensor *loss = kiln_sum(kiln_mul(w, ct), 0, NULL, false);
        kiln_tensor *scaled = kiln_grad_scaler_scale(gs, loss);
        TU_ASSERT_DTYPE(scaled, KILN_F32);
        cr_assert_eq(kiln_backward(scaled), KILN_OK, "[%s] %s", tu_exec_name(),
                     kiln_error_message(scaled));
        cr_assert_eq(kiln_grad_scaler_step(gs, o), KILN_OK, "[%s] %s", tu_exec_name(),
                     kiln_ctx_last_error(ctx));
        double l;
        cr_assert_eq(kiln_item(loss, &l), KILN_OK, "%s", kiln_error_message(loss));
        kiln_scope_end(ctx);
        if (lazy && step > 0)
            cr_assert_eq(kiln_ctx_stats(ctx).syncs - before.syncs, 1,
                         "[%s] step %d took %lld syncs", tu_exec_name(), step,
                         (long long)(kiln_ctx_stats(ctx).syncs - before.syncs));
        bool overflow = false;
        for (int i = 0; i < N; i++)
            overflow |= isinf(tu_round(KILN_F16, tu_round(KILN_F16, scale) * c[i]));
        if (overflow) {
            scale /= 2;
            skips++;
            continue;
        }
        t++;
        for (int i = 0; i < N; i++) {
            m[i] = 0.9 * m[i] + 0.1 * c[i];
            v[i] = 0.999 * v[i] + 0.001 * c[i] * c[i];
            double denom = sqrt(v[i]) / sqrt(1 - pow(0.999, (double)t)) + 1e-8;
            want[i] = tu_round(KILN_F16, want[i] - 0.01 / (1 - pow(0.9, (double)t)) * m[i] / denom);
        }
    }
    cr_assert(skips >= 8 && t >= 4, "the case should skip 8 or 9 steps, then step: %lld, %lld",
              (long long)skips, (long long)t);
    double got_scale;
    int64_t got_skips;
    cr_assert_eq(kiln_grad_scaler_get_scale(gs, &got_scale), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_grad_scaler_skipped(gs, &got_skips), KILN_OK);
    cr_assert(got_scale == scale && got_skips == skips,
              "[%s] scale %g after %lld skipped steps, expected %g after %lld", tu_exec_name(),
              got_scale, (long long)got_skips, scale, (long long)skips);
    double got[N];
    TU_READ(w, got, N);
    for (int i = 0; i < N; i++)
        cr_assert(fabs(got[i] - want[i]) <= 1e-3 * fmax(fabs(want[i]), 0.25),
                  "[%s] w[%d]: %.6g, expected %.6g (from %.6g, %lld steps after %lld skipped)",
                  tu_exec_name(), i, got[i], want[i], w0[i], (long long)t, (long long)skips);
    kiln_grad_scaler_free(gs);
    kiln_optim_free(o);
}

Test(optim, grad_scaler_bad_arguments) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    kiln_grad_scaler *gs = (kiln_grad_scaler *)&gs;
    const double bad[][3] = {{0, 2, 0.5}, {INFINITY, 2, 0.5}, {65536, 1, 0.5}, {65536, 2, 1},
                             {65536, 2, 0}, {NAN, 2, 0.5}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        gs = (kiln_grad_scaler *)&gs;
        cr_assert_eq(kiln_grad_scaler_new(ctx, bad[k][0], bad[k][1], bad[k][2], 10, &gs),
                     KILN_ERR_ARG, "case %zu", k);
        cr_assert_null(gs);
        cr_assert(strstr(kiln_ctx_last_error(ctx), "kiln_grad_scaler_new: init_scale"), "%s",
                  kiln_ctx_last_error(ctx));
    }
    cr_assert_eq(kiln_grad_scaler_new(ctx, 1024, 2, 0.5, 0, &gs), KILN_ERR_ARG);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "growth_interval 0"), "%s",
              kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_grad_scaler_new(ctx, 1024, 2, 0.5, 10, NULL), KILN_ERR_ARG);
    cr_assert_eq(kiln_grad_scaler_new(NULL, 1024, 2, 0.5, 10, &gs), KILN_ERR_ARG);
    cr_assert_eq(kiln_grad_scaler_new(ctx, 1024, 2, 0.5, 10, &gs), KILN_OK);
    cr_assert_eq(kiln_grad_scaler_step(gs, NULL), KILN_ERR_ARG);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "kiln_grad_scaler_step: the optimiser is NULL"),
              "%s", kiln_ctx_last_error(ctx));
    kiln_tensor *il = kiln_scalar(ctx, KILN_I32, 3);
    kiln_tensor *sl = kiln_grad_scaler_scale(gs, il);
    cr_assert_eq(kiln_error(sl), KILN_ERR_DTYPE);
    cr_assert(strstr(kiln_error_message(sl), "kiln_grad_scaler_scale: the loss is i32"), "%s",
              kiln_error_message(sl));
    cr_assert_null(kiln_grad_scaler_scale(NULL, il));
    double scale;
    cr_assert_eq(kiln_grad_scaler_get_scale(gs, NULL), KILN_ERR_ARG);
    cr_assert_eq(kiln_grad_scaler_get_scale(NULL, &scale), KILN_ERR_ARG);
    cr_assert_eq(kiln_grad_scaler_get_scale(gs, &scale), KILN_OK);
    cr_assert_float_eq(scale, 1024, 0);
    kiln_grad_scaler_free(gs);
    kiln_grad_scaler_free(NULL);
    kiln_ctx_free(ctx);
}

/* A parameter without a gradient is left alone, state and all. */
TU_TEST(optim, parameter_without_gradient) {
    TU_RNG(r);
    double a[4], z[4];
    kiln_tensor *p = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4), -1, 1, a);
    kiln_tensor *unused = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4), -1, 1, z);
    kiln_requires_grad(p, true);
    kiln_requires_grad(unused, true);
    kiln_tensor *params[] = {p, unused};
    kiln_optim *o;
    cr_assert_eq(kiln_adamw_new(ctx, 2, params, 0.1, 0.9, 0.999, 1e-8, 0.1, &o), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_backward(kiln_sum(kiln_mul(p, p), 0, NULL, false)), KILN_OK);
    cr_assert_eq(kiln_optim_step(o), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    TU_EXPECT_EXACT(unused, KILN_F32, z, 4);
    /* Adam's first step moves each element by lr*(1 + tiny) toward zero,
     * after the decay */
    double got[4];
    TU_READ(p, got, 4);
    for (int i = 0; i < 4; i++) {
        double want = a[i] * (1 - 0.1 * 0.1) - 0.1 * (a[i] > 0 ? 1 : -1);
        cr_assert(fabs(got[i] - want) < 1e-5, "[%s] p[%d]: %g, expected %g", tu_exec_name(), i,
                  got[i], want);
    }
    kiln_optim_free(o);
}

/* Half-precision parameters keep their dtype; the update is computed in f32
 * and rounded once. The optimiser's state outlives the scope it was made
 * in. */
TU_TEST(optim, half_parameters) {
    TU_RNG(r);
    const kiln_dtype dts[] = {KILN_F16, KILN_BF16};
    for (int k = 0; k < 2; k++) {
        double a[6];
        kiln_scope_begin(ctx);
        kiln_tensor *p = kiln_keep(tu_rand_tensor(ctx, &r, dts[k], TU_S(2, 3), -4, 4, a));
        cr_assert_eq(kiln_requires_grad(p, true), KILN_OK);
        kiln_optim *o;
        cr_assert_eq(kiln_sgd_new(ctx, 1, &p, 0.125, 0.5, 0, false, &o), KILN_OK, "%s",
                     kiln_ctx_last_error(ctx));
        kiln_scope_end(ctx);
        /* loss = sum(p^2): the gradient 2p is exact in any float dtype */
        for (int s = 0; s < 2; s++) {
            kiln_optim_zero_grad(o);
            cr_assert_eq(kiln_backward(kiln_sum(kiln_mul(p, p), 0, NULL, false)), KILN_OK);
            cr_assert_eq(kiln_optim_step(o), KILN_OK, "%s", kiln_ctx_last_error(ctx));
            cr_assert_eq(kiln_sync(ctx), KILN_OK, "%s", kiln_ctx_last_error(ctx));
        }
        TU_ASSERT_DTYPE(p, dts[k]);
        /* step 1: buf = 2p0, p1 = p0 - lr buf; step 2: buf = 0.5 buf + 2p1 */
        double want[6];
        for (int i = 0; i < 6; i++) {
            double buf = 2 * a[i];
            double p1 = tu_round(dts[k], a[i] - 0.125 * buf);
            buf = 0.5 * buf + 2 * p1;
            want[i] = tu_round(dts[k], p1 - 0.125 * buf);
        }
        TU_EXPECT_EXACT(p, dts[k], want, 6);
        kiln_optim_free(o);
    }
}

/* ---- the update's kernels ------------------------------------------------ */

/* mean((x @ w + b + s - y)^2) with a third parameter s [PN, PM], so that the
 * three gradients come from three kinds of kernel in the step's own sync:
 * w's from a matmul (x^T @ d), b's from a column sum of d, s's elementwise
 * (d itself): train_step with s as its extra term. The values of w, b and s
 * after three steps of case c from pb and s0. */
static void three_param_run(kiln_ctx *ctx, const optim_case *c, const problem *pb,
                            const double *s0, double *out, int64_t *kernels) {
    kiln_scope_begin(ctx);
    model md = model_new(ctx, pb, KILN_F32);
    kiln_tensor *s = tu_tensor(ctx, KILN_F32, TU_S(PN, PM), s0);
    kiln_requires_grad(s, true);
    kiln_tensor *params[] = {md.w, md.b, s};
    kiln_optim *o = NULL;
    kiln_status st = c->kind == REF_ADAM
                         ? kiln_adam_new(ctx, 3, params, c->lr, c->b1, c->b2, c->eps, c->wd, &o)
                         : kiln_adamw_new(ctx, 3, params, c->lr, c->b1, c->b2, c->eps, c->wd, &o);
    cr_assert_eq(st, KILN_OK, "%s: %s", c->name, kiln_ctx_last_error(ctx));
    for (int step = 0; step < 3; step++) {
        kiln_scope_begin(ctx);
        train_step(o, &md, s);
        int64_t before = kiln_ctx_stats(ctx).kernels;
        cr_assert_eq(kiln_sync(ctx), KILN_OK, "%s", kiln_ctx_last_error(ctx));
        kernels[step] = kiln_ctx_stats(ctx).kernels - before;
        kiln_scope_end(ctx);
    }
    TU_READ(md.w, out, PK * PM);
    TU_READ(md.b, out + PK * PM, PM);
    TU_READ(s, out + PK * PM + PM, PN * PM);
    kiln_optim_free(o);
    kiln_scope_end(ctx);
}

TU_TEST(optim, adam_update_is_one_kernel_per_parameter) {
    TU_RNG(r);
    enum { NV = PK * PM + PM + PN * PM };
    const optim_case *cs[] = {&cases[4], &cases[5]}; /* adam with weight decay, adamw */
    for (int k = 0; k < 2; k++) {
        const optim_case *c = cs[k];
        problem pb;
        problem_init(&pb, &r);
        double s0[PN * PM], got[NV], want[NV];
        for (int i = 0; i < PN * PM; i++)
            s0[i] = tu_round(KILN_F32, tu_unif(&r, -1, 1));
        int64_t kernels[3], ref_kernels[3];
        three_param_run(ctx, c, &pb, s0, got, kernels);
        kiln_ctx *ref = kiln_ctx_new(KILN_REF);
        three_param_run(ref, c, &pb, s0, want, ref_kernels);
        kiln_ctx_free(ref);
        double e = tu_nmse(want, got, NV);
        cr_assert(e < tu_tol(KILN_F32), "[%s] %s: nmse %g against the reference evaluator",
                  tu_exec_name(), c->name, e);
        /* Six kernels a step: three for the forward and backward passes (the
         * forward matmul with d's gradient as its epilogue; w's gradient, the
         * matmul x^T d, with Adam's weight decay g + wd w as its epilogue
         * (AdamW decays p in the update instead); b's column sum of d) and
         * one update per parameter, which stores
         * the new m, v and p (s's gradient, Adam's g + wd s read by both
         * moments, is computed there and stored nowhere). The update is
         * recorded under no-grad, every node of it a one-source cat: before
         * the scheduler saw those as elementwise, each parameter's m, v and
         * p were three kernels, p reading m and v back, and the Adam case
         * ran 14 kernels a step. */
        if (kiln_ctx_mode(ctx) == KILN_LAZY && kiln_ctx_device(ctx) != KILN_REF)
            for (int step = 0; step < 3; step++)
                cr_assert_eq(kernels[step], 6,
                             "[%s] %s: step %d ran %lld kernels", tu_exec_name(), c->name, step,
                             (long long)kernels[step]);
    }
}

/* ---- the compiled-program cache ------------------------------------------ */

/* Five training steps with a learning rate that changes every step: after
 * the second, nothing compiles again and every step replays. */
static void replay_check(const optim_case *c) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    if (!ctx)
        cr_skip_test("no CPU compiler: %s", kiln_last_ctx_error());
    tu_rng r = tu_rng_from(c->name, 7);
    problem pb;
    problem_init(&pb, &r);
    model md = model_new(ctx, &pb, KILN_F32);
    kiln_tensor *params[] = {md.w, md.b};
    kiln_optim *o = make_optim(ctx, c, params);
    cr_assert(o != NULL, "%s", kiln_ctx_last_error(ctx));
    kiln_stats after2 = {0};
    double first = 0, last = 0;
    for (int s = 0; s < 5; s++) {
        cr_assert_eq(kiln_optim_set_lr(o, kiln_lr_cosine(c->lr, s, 5, c->lr / 10)), KILN_OK);
        double lr;
        cr_assert_eq(kiln_optim_lr(o, &lr), KILN_OK);
        cr_assert_float_eq(lr, kiln_lr_cosine(c->lr, s, 5, c->lr / 10), 0);
        kiln_scope_begin(ctx);
        double loss;
        kiln_tensor *l = train_step(o, &md, NULL);
        cr_assert_eq(kiln_item(l, &loss), KILN_OK, "%s step %d: %s", c->name, s,
                     kiln_error_message(l));
        kiln_scope_end(ctx);
        cr_assert(isfinite(loss), "%s step %d: %s", c->name, s, kiln_ctx_last_error(ctx));
        if (s == 0)
            first = loss;
        last = loss;
        if (s == 1)
            after2 = kiln_ctx_stats(ctx);
    }
    kiln_stats end = kiln_ctx_stats(ctx);
    cr_assert_eq(end.compiles, after2.compiles, "%s: %lld programs compiled after step 2",
                 c->name, (long long)(end.compiles - after2.compiles));
    cr_assert_eq(end.graph_hits - after2.graph_hits, 3,
                 "%s: steps 3 to 5 made %lld syncs but only %lld replayed a cached program",
                 c->name, (long long)(end.syncs - after2.syncs),
                 (long long)(end.graph_hits - after2.graph_hits));
    cr_assert(last < first, "%s: the loss went from %g to %g", c->name, first, last);
    kiln_optim_free(o);
    kiln_ctx_free(ctx);
}

Test(optim, sgd_momentum_replays) { replay_check(&cases[1]); }
Test(optim, adamw_replays) { replay_check(&cases[5]); }

/* ---- errors --------------------------------------------------------------- */

Test(optim, bad_arguments) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_REF);
    const int64_t d[] = {3};
    kiln_tensor *p = kiln_zeros(ctx, KILN_F32, 1, d);
    kiln_tensor *ip = kiln_zeros(ctx, KILN_I32, 1, d);
    kiln_tensor *pp[] = {p, p};
    kiln_tensor *bad = kiln_add(p, kiln_zeros(ctx, KILN_F32, 1, (const int64_t[]){2}));
    kiln_optim *o = (kiln_optim *)&o; /* a failure must overwrite it */
#define REFUSED(st, call, text)                                                                  \
    do {                                                                                         \
        o = (kiln_optim *)&o;                                                                    \
        cr_assert_eq(call, st, "%s", kiln_ctx_last_error(ctx));                                  \
        cr_assert_null(o);                                                                       \
        cr_assert(strstr(kiln_ctx_last_error(ctx), text), "%s", kiln_ctx_last_error(ctx));       \
    } while (0)
    REFUSED(KILN_ERR_ARG, kiln_sgd_new(ctx, 1, &p, -0.1, 0, 0, false, &o), "lr -0.1");
    REFUSED(KILN_ERR_ARG, kiln_sgd_new(ctx, 1, &p, 0.1, 0, 0, true, &o), "Nesterov");
    REFUSED(KILN_ERR_ARG, kiln_adam_new(ctx, 1, &p, 0.1, 1.0, 0.999, 1e-8, 0, &o), "beta1 1");
    REFUSED(KILN_ERR_DTYPE, kiln_adamw_new(ctx, 1, &ip, 0.1, 0.9, 0.999, 1e-8, 0, &o), "i32");
    REFUSED(KILN_ERR_ARG, kiln_sgd_new(ctx, 2, pp, 0.1, 0, 0, false, &o), "same tensor");
    REFUSED(KILN_ERR_SHAPE, kiln_adam_new(ctx, 1, &bad, 0.1, 0.9, 0.999, 1e-8, 0, &o),
            "parameter 0 is in an error state");
    REFUSED(KILN_ERR_ARG, kiln_sgd_new(ctx, -1, &p, 0.1, 0, 0, false, &o), "kiln_sgd_new");
#undef REFUSED
    cr_assert_eq(kiln_adamw_new(ctx, 1, &p, 0.1, 0.9, 0.999, 1e-8, 0, NULL), KILN_ERR_ARG);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "kiln_adamw_new: NULL result"), "%s",
              kiln_ctx_last_error(ctx));
    o = (kiln_optim *)&o;
    cr_assert_eq(kiln_sgd_new(NULL, 1, &p, 0.1, 0, 0, false, &o), KILN_ERR_ARG);
    cr_assert_null(o);
    cr_assert_eq(kiln_optim_step(NULL), KILN_ERR_ARG);

    cr_assert_eq(kiln_sgd_new(ctx, 1, &p, 0.1, 0, 0, false, &o), KILN_OK);
    cr_assert_not_null(o);
    double lr = 0;
    cr_assert_eq(kiln_optim_set_lr(o, NAN), KILN_ERR_ARG);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "kiln_optim_set_lr"), "%s", kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_optim_set_lr(o, -1), KILN_ERR_ARG);
    cr_assert_eq(kiln_optim_lr(o, &lr), KILN_OK);
    cr_assert_eq(lr, 0.1);
    cr_assert_eq(kiln_optim_set_lr(o, 0.25), KILN_OK);
    cr_assert_eq(kiln_optim_lr(o, &lr), KILN_OK);
    cr_assert_eq(lr, 0.25);
    cr_assert_eq(kiln_optim_lr(o, NULL), KILN_ERR_ARG);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "kiln_optim_lr"), "%s", kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_optim_lr(NULL, &lr), KILN_ERR_ARG);
    cr_assert_eq(kiln_optim_set_lr(NULL, 0.1), KILN_ERR_ARG);
    kiln_optim_free(o);
    kiln_optim_free(NULL);
    kiln_ctx_free(ctx);
}

/* ---- schedules ------------------------------------------------------------ */

Test(optim, lr_step) {
    const double want[] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025};
    for (int t = 0; t < 7; t++)
        cr_assert_float_eq(kiln_lr_step(0.1, t, 3, 0.5), want[t], 1e-15, "t=%d", t);
    cr_assert_float_eq(kiln_lr_step(2, 100, 10, 0.9), 2 * pow(0.9, 10), 1e-14);
    cr_assert(isnan(kiln_lr_step(0.1, 5, 0, 0.5)));
}

Test(optim, lr_cosine) {
    cr_assert_float_eq(kiln_lr_cosine(1.0, 0, 10, 0.1), 1.0, 1e-15);
    cr_assert_float_eq(kiln_lr_cosine(1.0, 5, 10, 0.1), 0.55, 1e-15);
    /* t = total/4: min + (base - min) (1 + cos(pi/4)) / 2 */
    cr_assert_float_eq(kiln_lr_cosine(0.3, 3, 12, 0.0), 0.3 * (1 + sqrt(0.5)) / 2, 1e-15);
    cr_assert_float_eq(kiln_lr_cosine(1.0, 10, 10, 0.1), 0.1, 1e-15);
    cr_assert_float_eq(kiln_lr_cosine(1.0, 50, 10, 0.1), 0.1, 1e-15);
    cr_assert(isnan(kiln_lr_cosine(1.0, 1, 0, 0.1)));
}

Test(optim, lr_warmup_linear) {
    const double want[] = {0.125, 0.25, 0.375, 0.5, 0.5, 0.5};
    for (int t = 0; t < 6; t++)
        cr_assert_float_eq(kiln_lr_warmup_linear(0.5, t, 4), want[t], 1e-15, "t=%d", t);
    cr_assert_float_eq(kiln_lr_warmup_linear(0.5, 0, 0), 0.5, 0);
    /* warmup over a cosine decay: the ramp reaches the cosine curve */
    double at2 = kiln_lr_warmup_linear(kiln_lr_cosine(1.0, 2, 20, 0), 2, 4);
    cr_assert_float_eq(at2, 0.75 * (1 + cos(acos(-1.0) * 0.1)) / 2, 1e-15);
    cr_assert_float_eq(kiln_lr_warmup_linear(kiln_lr_cosine(1.0, 10, 20, 0), 10, 4), 0.5,
                       1e-15);
}
