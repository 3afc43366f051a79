/* transformer_test.c — a pre-norm transformer block (attention with a causal
 * mask, a GELU MLP, residuals, layer norms) forward and backward: lazy mode
 * against the reference evaluator, and the number of kernels each takes lazily
 * and eagerly, so that a fusion regression shows. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/kiln.h"

enum { B = 2, S = 16, D = 32, H = 4, DH = D / H, F = 4 * D, NW = 12 };

static kiln_tensor *param(kiln_ctx *ctx, int ndim, const int64_t *dims, uint64_t seed,
                          double scale) {
    kiln_tensor *t = kiln_mul_scalar(kiln_randn(ctx, KILN_F64, ndim, dims, seed), scale);
    cr_assert_eq(kiln_realize(t), KILN_OK);
    return t;
}

/* Splits [B, S, D] into heads [B, H, S, DH]. */
static kiln_tensor *heads(kiln_tensor *t) {
    const int64_t d[4] = {B, S, H, DH};
    return kiln_transpose(kiln_reshape(t, 4, d), 1, 2);
}

/* The block's parameters w[0..NW). */
static void make_params(kiln_ctx *ctx, kiln_tensor **w) {
    const int64_t dd[2] = {D, D}, d1[1] = {D}, fd[2] = {F, D}, df[2] = {D, F}, f1[1] = {F};
    const int64_t qkv[2] = {3 * D, D}, q1[1] = {3 * D};
    double s = 1 / sqrt((double)D);
    w[0] = param(ctx, 2, qkv, 11, s);
    w[1] = param(ctx, 1, q1, 12, 0.1);
    w[2] = param(ctx, 2, dd, 13, s);
    w[3] = param(ctx, 1, d1, 14, 0.1);
    w[4] = param(ctx, 2, fd, 15, s);
    w[5] = param(ctx, 1, f1, 16, 0.1);
    w[6] = param(ctx, 2, df, 17, 1 / sqrt((double)F));
    w[7] = param(ctx, 1, d1, 18, 0.1);
    w[8] = kiln_add_scalar(param(ctx, 1, d1, 19, 0.1), 1);
    w[9] = param(ctx, 1, d1, 20, 0.1);
    w[10] = kiln_add_scalar(param(ctx, 1, d1, 21, 0.1), 1);
    w[11] = param(ctx, 1, d1, 22, 0.1);
    for (int i = 0; i < NW; i++)
        cr_assert_eq(kiln_realize(w[i]), KILN_OK);
}

static kiln_tensor *block(kiln_tensor *x, kiln_tensor **w) {
    kiln_tensor *h = kiln_layer_norm(x, 1, w[8], w[9], 1e-5);
    kiln_tensor *p = kiln_linear(h, w[0], w[1]);
    kiln_tensor *q = heads(kiln_slice(p, 2, 0, D, 1)), *k = heads(kiln_slice(p, 2, D, 2 * D, 1)),
                *v = heads(kiln_slice(p, 2, 2 * D, 3 * D, 1));
    const int64_t bsd[3] = {B, S, D};
    kiln_tensor *a = kiln_reshape(
        kiln_transpose(kiln_scaled_dot_product_attention(q, k, v, true, 0), 1, 2), 3, bsd);
    kiln_tensor *x1 = kiln_add(x, kiln_linear(a, w[2], w[3]));
    kiln_tensor *h2 = kiln_layer_norm(x1, 1, w[10], w[11], 1e-5);
    return kiln_add(x1, kiln_linear(kiln_gelu(kiln_linear(h2, w[4], w[5])), w[6], w[7]));
}

/* Runs the block on ctx: its forward output, then the gradients of a
 * weighted sum of it with respect to x and every parameter, into out; returns
 * the kernels run for each. The forward's intermediates are not kept, so the
 * backward pass recomputes what it needs of them (in its own kernels). */
static void run(kiln_ctx *ctx, double *out, int64_t *kf, int64_t *kb, int64_t *n) {
    const int64_t bsd[3] = {B, S, D};
    kiln_tensor *x = param(ctx, 3, bsd, 1, 1), *w[NW];
    make_params(ctx, w);
    int64_t k0 = kiln_ctx_stats(ctx).kernels; /* eager mode runs ops as they are made */
    kiln_tensor *y = block(x, w);
    cr_assert_eq(kiln_realize(y), KILN_OK, "%s", kiln_error_message(y));
    *kf = kiln_ctx_stats(ctx).kernels - k0;
    kiln_tensor *seed = param(ctx, 3, bsd, 2, 1);
    kiln_tensor *xs[NW + 1], *g[NW + 1];
    xs[0] = x;
    for (int i = 0; i < NW; i++)
        xs[i + 1] = w[i];
    cr_assert_eq(kiln_gradients(y, seed, NW + 1, xs, g), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    /* every gradient in one sync: assigned, then synced */
    kiln_tensor *dst[NW + 1];
    for (int i = 0; i <= NW; i++) {
        dst[i] = kiln_zeros(ctx, KILN_F64, kiln_ndim(g[i]), kiln_shape(g[i]));
        cr_assert_eq(kiln_realize(dst[i]), KILN_OK);
    }
    int64_t k1 = kiln_ctx_stats(ctx).kernels;
    for (int i = 0; i <= NW; i++)
        cr_assert_eq(kiln_assign(dst[i], g[i]), KILN_OK);
    cr_assert_eq(kiln_sync(ctx), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    *kb = kiln_ctx_stats(ctx).kernels - k1;
    int64_t at = 0;
    cr_assert_eq(kiln_to_host(y, out, sizeof(double) * B * S * D), KILN_OK);
    at += B * S * D;
    for (int i = 0; i <= NW; i++) {
        cr_assert_eq(kiln_to_host(dst[i], out + at, sizeof(double) * (size_t)kiln_numel(dst[i])),
                     KILN_OK);
        at += kiln_numel(dst[i]);
    }
    *n = at;
}

Test(transformer, block_forward_and_backward) {
    enum { MAXN = 200000 };
    double *want = malloc(sizeof *want * MAXN), *got = malloc(sizeof *got * MAXN);
    kiln_ctx *ref = kiln_ctx_new(KILN_REF), *lazy = kiln_ctx_new(KILN_CPU),
             *eager = kiln_ctx_new(KILN_CPU);
    kiln_ctx_set_mode(eager, KILN_EAGER);
    int64_t kf, kb, n, n2, ef, eb;
    run(ref, want, &kf, &kb, &n);
    run(lazy, got, &kf, &kb, &n2);
    cr_assert_eq(n, n2);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (want[i] - got[i]) * (want[i] - got[i]);
        den += want[i] * want[i];
    }
    cr_assert(num <= 1e-20 * den, "lazy differs from the reference: nmse %g", num / den);
    run(eager, got, &ef, &eb, &n2);
    printf("transformer block (d=%d, %d heads, seq %d, batch %d): forward %lld kernels lazy, "
           "%lld eager; backward %lld lazy, %lld eager\n",
           D, H, S, B, (long long)kf, (long long)ef, (long long)kb, (long long)eb);
    /* what the scheduler achieves today, so that a regression shows */
    cr_assert_leq(kf, 10);
    cr_assert_leq(kb, 50);
    cr_assert_lt(kf * 3, ef);
    cr_assert_lt(kb * 3, eb);
    free(want);
    free(got);
    kiln_ctx_free(ref);
    kiln_ctx_free(lazy);
    kiln_ctx_free(eager);
}
