/* The scalar of kiln_*_scalar is a bound input, except the literals that
 * fold (see kiln.h): a new value each step reuses the compiled program. */
#include <math.h>

#include "test_util.h"

enum { N = 48 };

TU_TEST(bound_scalar, a_new_scalar_each_step_compiles_nothing) {
    TU_RNG(r);
    double xv[N];
    for (int i = 0; i < N; i++)
        xv[i] = tu_unif(&r, 0.5, 2.0);
    kiln_tensor *x = tu_tensor(ctx, KILN_F64, 1, TU_DIMS(N), xv);
    int64_t compiles = 0, hits = 0;
    for (int step = 0; step < 5; step++) {
        double s = 1.7 + 0.1 * step;
        kiln_tensor *y =
            kiln_pow_scalar(kiln_add_scalar(kiln_mul_scalar(x, s), s), s);
        double want[N];
        for (int i = 0; i < N; i++)
            want[i] = pow(xv[i] * s + s, s);
        TU_EXPECT(y, KILN_F64, want, N);
        kiln_stats st = kiln_ctx_stats(ctx);
        if (step == 0) {
            compiles = st.compiles;
            hits = st.graph_hits;
        } else if (tu_cur_exec()->mode == KILN_LAZY && tu_cur_exec()->dev != KILN_REF) {
            cr_assert_eq(st.compiles, compiles, "[%s] step %d compiled again", tu_exec_name(),
                         step);
            cr_assert_eq(st.graph_hits, hits + step, "[%s] step %d missed the graph cache",
                         tu_exec_name(), step);
        }
    }
}

TU_TEST(bound_scalar, literals_still_fold) {
    TU_RNG(r);
    double xv[N];
    for (int i = 0; i < N; i++)
        xv[i] = tu_unif(&r, -2.0, 2.0);
    kiln_tensor *x = tu_tensor(ctx, KILN_F32, 1, TU_DIMS(N), xv);
    int64_t live = kiln_ctx_live_nodes(ctx);
    kiln_tensor *a = kiln_mul_scalar(x, 1), *b = kiln_add_scalar(x, 0),
                *c = kiln_pow_scalar(x, 1), *d = kiln_div_scalar(x, 1);
    /* x itself: no node was added */
    cr_assert_eq(kiln_ctx_live_nodes(ctx), live, "[%s] x*1, x+0, x**1 or x/1 built a node",
                 tu_exec_name());
    TU_EXPECT(a, KILN_F32, xv, N);
    TU_EXPECT(b, KILN_F32, xv, N);
    TU_EXPECT(c, KILN_F32, xv, N);
    TU_EXPECT(d, KILN_F32, xv, N);
    /* a bound scalar adds its leaf and the op */
    kiln_tensor *e = kiln_mul_scalar(x, 1.5);
    cr_assert_gt(kiln_ctx_live_nodes(ctx), live, "[%s]", tu_exec_name());
    double want[N];
    for (int i = 0; i < N; i++)
        want[i] = xv[i] * 1.5;
    TU_EXPECT(e, KILN_F32, want, N);
}

/* d/dx sum((x * s + s) ** s) by central differences in float64. */
static double loss_at(kiln_ctx *ctx, const double *xv, double s) {
    kiln_tensor *x = tu_tensor(ctx, KILN_F64, 1, TU_DIMS(N), xv);
    return TU_ITEM(kiln_sum(kiln_pow_scalar(kiln_add_scalar(kiln_mul_scalar(x, s), s), s), 0,
                            NULL, false));
}

TU_TEST(bound_scalar, gradient_through_a_bound_scalar) {
    TU_RNG(r);
    double xv[N];
    for (int i = 0; i < N; i++)
        xv[i] = tu_unif(&r, 0.5, 2.0);
    for (int step = 0; step < 3; step++) {
        double s = 1.7 + 0.1 * step;
        kiln_tensor *x = tu_tensor(ctx, KILN_F64, 1, TU_DIMS(N), xv);
        cr_assert_eq(kiln_requires_grad(x, true), KILN_OK);
        kiln_tensor *l =
            kiln_sum(kiln_pow_scalar(kiln_add_scalar(kiln_mul_scalar(x, s), s), s), 0, NULL,
                     false);
        cr_assert_eq(kiln_backward(l), KILN_OK);
        double got[N];
        TU_READ(kiln_grad(x), got, N);
        double err = 0, scale = 0;
        for (int i = 0; i < N; i++) {
            double h = 1e-6, up[N], down[N];
            for (int j = 0; j < N; j++)
                up[j] = down[j] = xv[j];
            up[i] += h;
            down[i] -= h;
            double fd = (loss_at(ctx, up, s) - loss_at(ctx, down, s)) / (2 * h);
            err = fmax(err, fabs(fd - got[i]));
            scale = fmax(scale, fabs(fd));
        }
        cr_assert(err <= 1e-6 * (1 + scale), "[%s] step %d: gradient off by %g", tu_exec_name(),
                  step, err);
    }
}
