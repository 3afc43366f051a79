/* attention_test.c — fused attention (GRAPH_ATTENTION and its backward
 * kernels, which kiln_scaled_dot_product_attention records where a device
 * computes them) on every executor: outputs and gradients against float64
 * loops written here from the definition (scores, softmax, products), over
 * sizes that cross the kernels' tiles (64 queries by 64 keys on the CPU),
 * causal masks with fewer or more queries than keys, odd widths, sources
 * that are strided views of one projection, broadcast batches and grouped
 * heads; the same graph recorded decomposed (KILN_FUSED_ATTENTION=0) agrees;
 * one kernel forward, three with the backward (two with 16 matrices or
 * more on the C path, where dq and dkv are one kernel); the gradient of a
 * fused qkv projection, which that kernel stores straight into its thirds
 * where nothing else reads dq, dk and dv; NaN stays in its row;
 * differentiating the backward again is an error that names it. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>

#include "test_util.h"

/* out[b, i, :] = softmax_j(scale q_i.k_j, masked j > i when causal) v_j, and
 * the gradients of sum(out * w), all in f64 from the definition. q [nb, l,
 * d], k [nb, s, d], v [nb, s, dv], w [nb, l, dv]; any of the gradients may be
 * NULL. */
static void ref_attention(const double *q, const double *k, const double *v, const double *w,
                          int64_t nb, int64_t l, int64_t s, int64_t d, int64_t dv, bool causal,
                          double scale, double *out, double *dq, double *dk, double *dv_) {
    double *p = malloc(sizeof *p * (size_t)s), *dp = malloc(sizeof *dp * (size_t)s);
    if (dq)
        memset(dq, 0, sizeof *dq * (size_t)(nb * l * d));
    if (dk)
        memset(dk, 0, sizeof *dk * (size_t)(nb * s * d));
    if (dv_)
        memset(dv_, 0, sizeof *dv_ * (size_t)(nb * s * dv));
    for (int64_t b = 0; b < nb; b++)
        for (int64_t i = 0; i < l; i++) {
            const double *qi = q + (b * l + i) * d, *wi = w ? w + (b * l + i) * dv : NULL;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < s; j++) {
                double dot = 0;
                for (int64_t c = 0; c < d; c++)
                    dot += qi[c] * k[(b * s + j) * d + c];
                p[j] = causal && j > i ? -INFINITY : dot * scale;
                mx = fmax(mx, p[j]);
            }
            for (int64_t j = 0; j < s; j++)
                sum += p[j] == -INFINITY ? 0 : exp(p[j] - mx);
            for (int64_t j = 0; j < s; j++)
                p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - mx) / sum;
            double *oi = out + (b * l + i) * dv;
            for (int64_t c = 0; c < dv; c++) {
                oi[c] = 0;
                for (int64_t j = 0; j < s; j++)
                    oi[c] += p[j] * v[(b * s + j) * dv + c];
            }
            if (!wi)
                continue;
            /* dP = w v^T; dS = P (dP - sum_j P dP) */
            double pdp = 0;
            for (int64_t j = 0; j < s; j++) {
                dp[j] = 0;
                for (int64_t c = 0; c < dv; c++)
                    dp[j] += wi[c] * v[(b * s + j) * dv + c];
                pdp += p[j] * dp[j];
            }
            for (int64_t j = 0; j < s; j++) {
                double ds = p[j] * (dp[j] - pdp) * scale;
                for (int64_t c = 0; c < d; c++) {
                    if (dq)
                        dq[(b * l + i) * d + c] += ds * k[(b * s + j) * d + c];
                    if (dk)
                        dk[(b * s + j) * d + c] += ds * qi[c];
                }
                for (int64_t c = 0; dv_ && c < dv; c++)
                    dv_[(b * s + j) * dv + c] += p[j] * wi[c];
            }
        }
    free(p);
    free(dp);
}

typedef struct att_case {
    int64_t nb, l, s, d, dv;
    bool causal;
    double scale; /* 0: 1 / sqrt(d) */
} att_case;

/* Forward and all three gradients of one case against ref_attention, to
 * NMSE tol (0: the dtype's). */
static void check_case_tol(kiln_ctx *ctx, tu_rng *r, kiln_dtype dt, att_case c, double tol) {
    kiln_scope_begin(ctx);
    int64_t nq = c.nb * c.l * c.d, nk = c.nb * c.s * c.d, nv = c.nb * c.s * c.dv,
            no = c.nb * c.l * c.dv;
    double *q = malloc(sizeof(double) * (size_t)nq), *k = malloc(sizeof(double) * (size_t)nk),
           *v = malloc(sizeof(double) * (size_t)nv), *w = malloc(sizeof(double) * (size_t)no);
    double *out = malloc(sizeof(double) * (size_t)no), *dq = malloc(sizeof(double) * (size_t)nq),
           *dk = malloc(sizeof(double) * (size_t)nk), *dv = malloc(sizeof(double) * (size_t)nv);
    kiln_tensor *tq = tu_rand_tensor(ctx, r, dt, TU_S(c.nb, c.l, c.d), -1.5, 1.5, q);
    kiln_tensor *tk = tu_rand_tensor(ctx, r, dt, TU_S(c.nb, c.s, c.d), -1.5, 1.5, k);
    kiln_tensor *tv = tu_rand_tensor(ctx, r, dt, TU_S(c.nb, c.s, c.dv), -1, 1, v);
    kiln_tensor *tw = tu_rand_tensor(ctx, r, dt, TU_S(c.nb, c.l, c.dv), -1, 1, w);
    double scale = c.scale ? c.scale : 1 / sqrt((double)c.d);
    ref_attention(q, k, v, w, c.nb, c.l, c.s, c.d, c.dv, c.causal, scale, out, dq, dk, dv);
    kiln_tensor *o = kiln_scaled_dot_product_attention(tq, tk, tv, c.causal, c.scale);
    TU_ASSERT_SHAPE(o, c.nb, c.l, c.dv);
    if (!tol)
        tol = tu_tol(dt);
    TU_EXPECT_TOL(o, dt, out, no, tol);
    kiln_tensor *xs[3] = {tq, tk, tv}, *g[3];
    kiln_tensor *loss = kiln_sum(kiln_mul(o, tw), 0, NULL, false);
    cr_assert_eq(kiln_gradients(loss, NULL, 3, xs, g), KILN_OK, "[%s] %s", tu_exec_name(),
                 kiln_ctx_last_error(ctx));
    /* dq and dk carry ds = p (dp - delta), a difference of two sums of
     * similar size, and the fused kernels take p as e^(s - lse) from the
     * forward's f32 lse: f32's rounding shows in their NMSE up to a few
     * 1e-11 on small cases (seen: 2.4e-11 in dk of a 5 x 7 case, 1.7e-12 in
     * dq, with the seeds of other line numbers; the f64 runs hold 1e-24), so
     * f32 gradients get 1e-10 */
    double gtol = dt == KILN_F32 && tol < 1e-10 ? 1e-10 : tol;
    TU_EXPECT_TOL(g[0], dt, dq, nq, gtol);
    TU_EXPECT_TOL(g[1], dt, dk, nk, gtol);
    TU_EXPECT_TOL(g[2], dt, dv, nv, gtol);
    free(q), free(k), free(v), free(w), free(out), free(dq), free(dk), free(dv);
    kiln_scope_end(ctx);
}

static void check_case(kiln_ctx *ctx, tu_rng *r, kiln_dtype dt, att_case c) {
    check_case_tol(ctx, r, dt, c, 0);
}

static const att_case cases[] = {
    {1, 1, 2, 1, 1, false, 0},     {2, 5, 7, 4, 3, false, 0},  {2, 6, 6, 4, 3, true, 0.7},
    {1, 70, 130, 9, 17, false, 0}, {1, 130, 70, 5, 3, true, 0}, {3, 65, 65, 16, 16, true, 0},
    {1, 3, 200, 2, 33, false, 2.5}, {2, 64, 128, 64, 64, true, 0},
};

TU_TEST(attention, forward_and_gradients_f32) {
    TU_RNG(r);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(ctx, &r, KILN_F32, cases[i]);
}

TU_TEST(attention, forward_and_gradients_f64) {
    TU_RNG(r);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += 2)
        check_case(ctx, &r, KILN_F64, cases[i]);
}

/* 16 matrices: on the C path dq and dkv are one kernel (one task per
 * matrix, dq summed over key blocks of 128, the last one partial). Outputs
 * averaging 150-200 values of either sign are small beside their terms, so
 * f32's rounding weighs more in the NMSE: a wider bound for f32, the
 * dtype's for f64. */
TU_TEST(attention, sixteen_matrices) {
    TU_RNG(r);
    const att_case c[2] = {{16, 70, 150, 24, 20, false, 0}, {16, 130, 200, 16, 8, true, 0}};
    for (int i = 0; i < 2; i++) {
        check_case_tol(ctx, &r, KILN_F32, c[i], 1e-9);
        check_case(ctx, &r, KILN_F64, c[i]);
    }
}

/* Wide heads: the widths are padded to whole vectors in scratch that holds
 * rows of 200. */
TU_TEST(attention, wide_heads) {
    TU_RNG(r);
    check_case(ctx, &r, KILN_F32, (att_case){1, 40, 90, 200, 130, true, 0});
}

/* Large scores: the softmax subtracts the running max, so scale 40 with
 * scores of several hundred stays finite (a naive exp overflows). Nearly
 * one-hot rows make the gradients cancel (ds = p (dp - delta) with p ~ 1),
 * so f32 gets a wider bound. */
TU_TEST(attention, large_scores_stay_finite) {
    TU_RNG(r);
    check_case(ctx, &r, KILN_F64, (att_case){1, 20, 80, 8, 4, false, 40});
    check_case_tol(ctx, &r, KILN_F32, (att_case){2, 9, 70, 8, 4, true, 12}, 1e-10);
}

/* q, k and v as the heads of one projection [B, T, 3 * H * E], sliced and
 * permuted to [B, H, T, E] (strided views, no copies), against the loops
 * over the same values laid out contiguously; and against the decomposed
 * form of the same graph. */
TU_TEST(attention, strided_heads_of_one_projection) {
    TU_RNG(r);
    enum { B = 2, T = 70, H = 3, E = 8, W = 3 * H * E };
    static double x[B * T * W], q[B * H * T * E], k[B * H * T * E], v[B * H * T * E],
        w[B * H * T * E], out[B * H * T * E], dq[B * H * T * E];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(B, T, W), -1, 1, x);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(B, H, T, E), -1, 1, w);
    cr_assert_eq(kiln_requires_grad(tx, true), KILN_OK);
    double *dst[3] = {q, k, v};
    for (int part = 0; part < 3; part++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < T; t++)
                    for (int e = 0; e < E; e++)
                        dst[part][((b * H + h) * T + t) * E + e] =
                            x[(b * T + t) * W + part * H * E + h * E + e];
    ref_attention(q, k, v, w, B * H, T, T, E, E, true, 0.3, out, dq, NULL, NULL);
    kiln_tensor *heads[3];
    const int perm[] = {0, 2, 1, 3};
    for (int part = 0; part < 3; part++)
        heads[part] = kiln_permute(
            kiln_reshape(kiln_slice(tx, 2, part * H * E, (part + 1) * H * E, 1), 4,
                         TU_DIMS(B, T, H, E)),
            perm);
    kiln_tensor *o = kiln_scaled_dot_product_attention(heads[0], heads[1], heads[2], true, 0.3);
    TU_EXPECT(o, KILN_F32, out, B * H * T * E);
    /* the gradient of the projection, through the three views: q's part
     * against the loops */
    kiln_tensor *g;
    cr_assert_eq(kiln_gradients(kiln_sum(kiln_mul(o, tw), 0, NULL, false), NULL, 1, &tx, &g),
                 KILN_OK, "%s", kiln_ctx_last_error(ctx));
    static double gx[B * T * W], gq[B * H * T * E];
    TU_READ(g, gx, B * T * W);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int e = 0; e < E; e++)
                    gq[((b * H + h) * T + t) * E + e] = gx[(b * T + t) * W + h * E + e];
    tu_compare_tol_at(gq, dq, B * H * T * E, KILN_F32, false, tu_tol(KILN_F32), __FILE__, __LINE__);
    /* the decomposed form agrees */
    setenv("KILN_FUSED_ATTENTION", "0", 1);
    kiln_tensor *od = kiln_scaled_dot_product_attention(heads[0], heads[1], heads[2], true, 0.3);
    unsetenv("KILN_FUSED_ATTENTION");
    TU_EXPECT(od, KILN_F32, out, B * H * T * E);
}

/* The gradient of one fused qkv projection [B, T, 3 H E] whose three parts
 * (in the order `order` gives: order[0] is q's third) are the heads of a
 * 16-matrix attention: on the C path the joint backward stores dq, dk and
 * dv straight into the gradient's thirds (lower/stores.c), and no kernel
 * only copies. `heads_cat`: q, k and v are leaves of their own, and their
 * gradients are joined by the caller's cat along the heads' axis (a region
 * starting T E elements apart each head), or (`padded`) each gradient
 * padded by two zero rows first, which no store of dq, dk or dv writes; `vit`: the heads are taken as
 * qkv.reshape(B, T, 3, H, E).permute(2, 0, 3, 1, 4)[p], the same values
 * through other views; `unbind`: the projection is [B, T, 3, H E] (the same
 * places) and each part a slice of one along its third axis (qkv.unbind(2)),
 * whose gradient joins into a cat through a reshape; `out_proj`: the loss is |y|^2 / 2 of the
 * out-projection y = o.permute(0, 2, 1, 3).reshape(B, T, H E) @ Wp, whose
 * operand the forward kernel stores beside its own output (no copy either).
 * The cat stays a copy where k's heads are also
 * read by another term (`k_also`: the loss adds sum(k * w2)), so that dk is
 * not only the cat's, and where the heads are read in pairs (`pairs`: head
 * h is the projection's (h % (H/2)) * 2 + h / (H/2)), which no stride on
 * dq's head axis places. Every part against the loops. */
typedef struct qkv_case {
    int order[3];
    bool causal, heads_cat, k_also, pairs, vit, out_proj, unbind, padded;
} qkv_case;

static void qkv_gradient_case(kiln_ctx *ctx, qkv_case c) {
    TU_RNG(r);
    enum { B = 2, T = 70, H = 8, E = 8, C = H * E, W = 3 * C, N = B * H * T * E };
    enum { TP = T + 2, NG = B * 3 * H * TP * E }; /* the padded cat's size, the largest */
    static double x[B * T * W], w[N], w2[N], out[N], parts[3][N], grads[3][N], gx[NG], got[N];
    kiln_scope_begin(ctx);
    kiln_tensor *tx = c.unbind ? tu_rand_tensor(ctx, &r, KILN_F32, TU_S(B, T, 3, C), -1, 1, x)
                               : tu_rand_tensor(ctx, &r, KILN_F32, TU_S(B, T, W), -1, 1, x);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(B, H, T, E), -1, 1, w);
    kiln_tensor *tw2 = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(B, H, T, E), -1, 1, w2);
    cr_assert_eq(kiln_requires_grad(tx, true), KILN_OK);
    /* where element (b, h, t, e) of each part's heads is in the projection */
    static int64_t at[3][N];
    for (int part = 0; part < 3; part++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < T; t++)
                    for (int e = 0; e < E; e++) {
                        int64_t f = (c.pairs ? h % (H / 2) * 2 + h / (H / 2) : h) * E + e;
                        int64_t i = ((b * H + h) * T + t) * E + e;
                        at[part][i] = c.heads_cat
                                          ? ((b * 3 * H + part * H + h) * T + t) * E + e
                                          : (b * T + t) * W + c.order[part] * C + f;
                        parts[part][i] = x[at[part][i]];
                        if (c.padded) /* the same element of the padded gradients' cat */
                            at[part][i] = ((b * 3 * H + part * H + h) * TP + t) * E + e;
                    }
    enum { P = 5 };
    static double wp[C * P], y[B * T * P];
    kiln_tensor *twp = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(C, P), -1, 1, wp);
    if (c.out_proj) { /* o's gradient: y Wp^T, heads split again */
        ref_attention(parts[0], parts[1], parts[2], NULL, B * H, T, T, E, E, c.causal, 0.4, out,
                      NULL, NULL, NULL);
        memset(y, 0, sizeof y);
        for (int i = 0; i < N; i++) {
            int e = i % E, t = i / E % T, h = i / (E * T) % H, b = i / (E * T * H);
            for (int q = 0; q < P; q++)
                y[(b * T + t) * P + q] += out[i] * wp[(h * E + e) * P + q];
        }
        for (int i = 0; i < N; i++) {
            int e = i % E, t = i / E % T, h = i / (E * T) % H, b = i / (E * T * H);
            w[i] = 0;
            for (int q = 0; q < P; q++)
                w[i] += y[(b * T + t) * P + q] * wp[(h * E + e) * P + q];
        }
    }
    ref_attention(parts[0], parts[1], parts[2], w, B * H, T, T, E, E, c.causal, 0.4, out, grads[0],
                  grads[1], grads[2]);
    if (c.k_also)
        for (int i = 0; i < N; i++)
            grads[1][i] += w2[i];
    kiln_tensor *heads[3];
    const int perm[] = {0, 2, 1, 3}, swap_pairs[] = {0, 1, 3, 2, 4}, vit_perm[] = {2, 0, 3, 1, 4};
    for (int part = 0; part < 3; part++) {
        int p = c.order[part];
        kiln_tensor *third = c.unbind ? kiln_slice(tx, 2, p, p + 1, 1)
                                      : kiln_slice(tx, 2, p * C, (p + 1) * C, 1);
        if (c.pairs)
            third = kiln_permute(kiln_reshape(third, 5, TU_DIMS(B, T, H / 2, 2, E)), swap_pairs);
        heads[part] = kiln_permute(kiln_reshape(third, 4, TU_DIMS(B, T, H, E)), perm);
        if (c.vit) /* qkv.reshape(B, T, 3, H, E).permute(2, 0, 3, 1, 4)[p] */
            heads[part] = kiln_reshape(
                kiln_slice(kiln_permute(kiln_reshape(tx, 5, TU_DIMS(B, T, 3, H, E)), vit_perm), 0,
                           p, p + 1, 1),
                4, TU_DIMS(B, H, T, E));
        if (c.heads_cat) { /* the same values, a leaf of its own */
            heads[part] = tu_tensor(ctx, KILN_F32, TU_S(B, H, T, E), parts[part]);
            cr_assert_eq(kiln_requires_grad(heads[part], true), KILN_OK);
        }
    }
    kiln_tensor *o = kiln_scaled_dot_product_attention(heads[0], heads[1], heads[2], c.causal, 0.4);
    kiln_tensor *loss = kiln_sum(kiln_mul(o, tw), 0, NULL, false);
    if (c.out_proj) {
        kiln_tensor *yt = kiln_matmul(kiln_reshape(kiln_permute(o, perm), 3, TU_DIMS(B, T, C)), twp);
        loss = kiln_mul_scalar(kiln_sum(kiln_mul(yt, yt), 0, NULL, false), 0.5);
    }
    if (c.k_also)
        loss = kiln_add(loss, kiln_sum(kiln_mul(heads[1], tw2), 0, NULL, false));
    kiln_tensor *g, *gh[3];
    cr_assert_eq(c.heads_cat ? kiln_gradients(loss, NULL, 3, heads, gh)
                             : kiln_gradients(loss, NULL, 1, &tx, &g),
                 KILN_OK, "%s", kiln_ctx_last_error(ctx));
    for (int part = 0; c.padded && part < 3; part++)
        gh[part] = kiln_pad(gh[part], (const int64_t[]){0, 0, 0, 0, 0, 2, 0, 0}, 0);
    if (c.heads_cat)
        g = kiln_cat(3, gh, 1);
    const tu_exec *ex = tu_cur_exec();
    const char *cc = getenv("KILN_CPU_COMPILER"), *check = getenv("KILN_CHECK_CUDA");
    bool c_path = ex->dev == KILN_CPU && ex->mode == KILN_LAZY && (!cc || !strcmp(cc, "cc")) &&
                  !(check && !strcmp(check, "1"));
    cr_assert_eq(kiln_profile_begin(ctx), KILN_OK);
    TU_READ(g, gx, c.padded ? NG : B * T * W);
    int copies = 0, into = 0, beside = 0;
    for (int i = 0; i < kiln_profile_count(ctx); i++) {
        kiln_kernel_profile p;
        cr_assert_eq(kiln_profile_kernel(ctx, i, &p), KILN_OK);
        /* a copy: nothing but cats and views ("cat view×2") */
        bool copy = true;
        for (const char *t = p.fused; *t; t += strcspn(t, " "), t += *t == ' ')
            copy = copy && (!strncmp(t, "cat", 3) || !strncmp(t, "view", 4));
        into += strstr(p.fused, "attention_dkv") && strstr(p.fused, "cat");
        beside += !strcmp(p.fused, "attention view");
        copies += copy;
    }
    cr_assert_eq(kiln_profile_end(ctx), KILN_OK);
    bool stored = !c.k_also && !c.pairs && !c.padded;
    if (c_path) {
        cr_assert_eq(into, stored, "[%s] %d kernels store into the cat", tu_exec_name(), into);
        cr_assert(!stored || copies == 0, "[%s] %d kernels only copy", tu_exec_name(), copies);
        cr_assert_eq(beside, c.out_proj, "[%s] %d forward kernels store o twice", tu_exec_name(),
                     beside);
    }
    for (int part = 0; part < 3; part++) {
        for (int i = 0; i < N; i++)
            got[i] = gx[at[part][i]];
        tu_compare_tol_at(got, grads[part], N, KILN_F32, false, 1e-10, __FILE__, __LINE__);
    }
    kiln_scope_end(ctx);
}

TU_TEST(attention, qkv_gradient_stored_into_its_thirds) {
    qkv_gradient_case(ctx, (qkv_case){{0, 1, 2}, .causal = true});
    qkv_gradient_case(ctx, (qkv_case){{2, 0, 1}, .causal = false});
    qkv_gradient_case(ctx, (qkv_case){{1, 2, 0}, .causal = true, .heads_cat = true});
    qkv_gradient_case(ctx, (qkv_case){{0, 1, 2}, .causal = true, .heads_cat = true, .padded = true});
    qkv_gradient_case(ctx, (qkv_case){{1, 2, 0}, .causal = true, .vit = true});
    qkv_gradient_case(ctx, (qkv_case){{2, 1, 0}, .causal = false, .unbind = true});
    qkv_gradient_case(ctx, (qkv_case){{0, 1, 2}, .causal = true, .out_proj = true});
    qkv_gradient_case(ctx, (qkv_case){{1, 2, 0}, .causal = true, .k_also = true});
    qkv_gradient_case(ctx, (qkv_case){{0, 1, 2}, .causal = false, .pairs = true});
}

/* Batch axes that broadcast (one key set for two query sets) and grouped
 * heads (4 query heads over 2 key/value heads). */
TU_TEST(attention, broadcast_and_grouped_heads) {
    TU_RNG(r);
    static double q[2 * 4 * 9 * 5], k[2 * 9 * 5], v[2 * 9 * 3], y[2 * 4 * 9 * 3];
    kiln_tensor *tq = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 4, 9, 5), -1, 1, q);
    kiln_tensor *tk = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, 2, 9, 5), -1, 1, k);
    kiln_tensor *tv = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, 2, 9, 3), -1, 1, v);
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 4; h++)
            ref_attention(q + (b * 4 + h) * 45, k + h / 2 * 45, v + h / 2 * 27, NULL, 1, 9, 9, 5, 3,
                          true, 1 / sqrt(5.0), y + (b * 4 + h) * 27, NULL, NULL, NULL);
    kiln_tensor *o = kiln_scaled_dot_product_attention(tq, tk, tv, true, 0);
    TU_ASSERT_SHAPE(o, 2, 4, 9, 3);
    TU_EXPECT(o, KILN_F32, y, 2 * 4 * 9 * 3);
}

/* A NaN in one query row makes that row NaN and no other. */
TU_TEST(attention, nan_stays_in_its_row) {
    TU_RNG(r);
    static double q[1 * 70 * 4], k[1 * 80 * 4], v[1 * 80 * 2], out[70 * 2], got[70 * 2];
    tu_fill(&r, KILN_F32, q, 70 * 4, -1, 1);
    q[33 * 4 + 1] = NAN;
    kiln_tensor *tq = tu_tensor(ctx, KILN_F32, 3, TU_DIMS(1, 70, 4), q);
    kiln_tensor *tk = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, 80, 4), -1, 1, k);
    kiln_tensor *tv = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, 80, 2), -1, 1, v);
    ref_attention(q, k, v, NULL, 1, 70, 80, 4, 2, false, 0.5, out, NULL, NULL, NULL);
    TU_READ(kiln_scaled_dot_product_attention(tq, tk, tv, false, 0.5), got, 70 * 2);
    for (int i = 0; i < 70; i++)
        for (int c = 0; c < 2; c++) {
            if (i == 33)
                cr_assert(isnan(got[i * 2 + c]), "[%s] row 33 col %d: %g, want NaN",
                          tu_exec_name(), c, got[i * 2 + c]);
            else
                cr_assert(fabs(got[i * 2 + c] - out[i * 2 + c]) < 1e-5,
                          "[%s] row %d col %d: %g, want %g", tu_exec_name(), i, c,
                          got[i * 2 + c], out[i * 2 + c]);
        }
}

static int64_t kernels_for(kiln_ctx *ctx, kiln_tensor *t) {
    int64_t before = kiln_ctx_stats(ctx).kernels;
    cr_assert_eq(kiln_realize(t), KILN_OK, "%s", kiln_error_message(t));
    return kiln_ctx_stats(ctx).kernels - before;
}

/* On the C path the forward is one kernel, which also stores the output
 * requested, a view of its own (lower/stores.c; the decomposed form takes
 * several);
 * with the backward, dq and dkv (and delta's row sums) beside the
 * forward. */
Test(attention, kernel_counts) {
    const char *cc = getenv("KILN_CPU_COMPILER");
    if (cc && strcmp(cc, "cc"))
        return; /* the LLVM path records the decomposed form */
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    cr_assert_not_null(ctx);
    kiln_tensor *q = kiln_randn(ctx, KILN_F32, TU_S(2, 3, 100, 16), 1);
    kiln_tensor *k = kiln_randn(ctx, KILN_F32, TU_S(2, 3, 90, 16), 2);
    kiln_tensor *v = kiln_randn(ctx, KILN_F32, TU_S(2, 3, 90, 8), 3);
    cr_assert_eq(kiln_realize(q), KILN_OK);
    cr_assert_eq(kiln_realize(k), KILN_OK);
    cr_assert_eq(kiln_realize(v), KILN_OK);
    /* KILN_CHECK_CUDA=1 compiles every program for CUDA as well, whose
     * renderer takes each attention kernel's outputs row-major and the
     * backward as two kernels: the scheduler then keeps them apart */
    const char *check = getenv("KILN_CHECK_CUDA");
    bool joint = !(check && !strcmp(check, "1"));
    cr_assert_eq(kernels_for(ctx, kiln_scaled_dot_product_attention(q, k, v, true, 0)),
                 joint ? 1 : 2);
    setenv("KILN_FUSED_ATTENTION", "0", 1);
    cr_assert_geq(kernels_for(ctx, kiln_scaled_dot_product_attention(q, k, v, true, 0)), 3);
    unsetenv("KILN_FUSED_ATTENTION");
    kiln_tensor *xs[3] = {q, k, v}, *g[3], *flat[3];
    kiln_tensor *o = kiln_scaled_dot_product_attention(q, k, v, false, 0);
    cr_assert_eq(kiln_gradients(kiln_sum(kiln_mul(o, o), 0, NULL, false), NULL, 3, xs, g), KILN_OK);
    for (int i = 0; i < 3; i++) {
        int64_t n = kiln_numel(g[i]);
        flat[i] = kiln_reshape(g[i], 1, &n);
    }
    int64_t n = kernels_for(ctx, kiln_cat(3, flat, 0));
    /* attention, go = o + o, delta's row sums, dq, dkv, the cat's three
     * regions */
    cr_assert_leq(n, 8, "%lld kernels", (long long)n);
    /* With 16 matrices dq and dkv are one kernel that computes each tile's
     * probabilities once for both. */
    kiln_tensor *q16 = kiln_randn(ctx, KILN_F32, TU_S(4, 4, 100, 16), 4);
    kiln_tensor *k16 = kiln_randn(ctx, KILN_F32, TU_S(4, 4, 90, 16), 5);
    kiln_tensor *v16 = kiln_randn(ctx, KILN_F32, TU_S(4, 4, 90, 8), 6);
    kiln_tensor *x16[3] = {q16, k16, v16}, *g16[3];
    kiln_tensor *o16 = kiln_scaled_dot_product_attention(q16, k16, v16, true, 0);
    cr_assert_eq(kiln_gradients(kiln_sum(kiln_mul(o16, o16), 0, NULL, false), NULL, 3, x16, g16),
                 KILN_OK);
    for (int i = 0; i < 3; i++) { /* realized together, in one program */
        int64_t len = kiln_numel(g16[i]);
        g16[i] = kiln_reshape(g16[i], 1, &len);
    }
    cr_assert_eq(kiln_profile_begin(ctx), KILN_OK);
    kernels_for(ctx, kiln_cat(3, g16, 0));
    int backward = 0;
    for (int i = 0; i < kiln_profile_count(ctx); i++) {
        kiln_kernel_profile p;
        cr_assert_eq(kiln_profile_kernel(ctx, i, &p), KILN_OK);
        if (strstr(p.fused, "attention_d")) {
            backward++;
            cr_assert(!joint || (strstr(p.fused, "attention_dkv") && strstr(p.fused, "attention_dq")),
                      "%s: %s", p.name, p.fused);
        }
    }
    cr_assert_eq(kiln_profile_end(ctx), KILN_OK);
    cr_assert_eq(backward, joint ? 1 : 2, "%d backward kernels", backward);
    kiln_ctx_free(ctx);
}

/* The backward kernels are not differentiated again: a second derivative
 * through them is an error naming the op (the reference evaluator always
 * records the fused form). */
TU_TEST(attention, second_derivative_is_an_error) {
    kiln_tensor *q = kiln_randn(ctx, KILN_F64, TU_S(1, 4, 3), 1);
    kiln_tensor *k = kiln_randn(ctx, KILN_F64, TU_S(1, 5, 3), 2);
    kiln_tensor *v = kiln_randn(ctx, KILN_F64, TU_S(1, 5, 2), 3);
    kiln_tensor *g;
    kiln_tensor *o = kiln_scaled_dot_product_attention(q, k, v, false, 0);
    cr_assert_eq(kiln_gradients(kiln_sum(kiln_mul(o, o), 0, NULL, false), NULL, 1, &q, &g), KILN_OK);
    kiln_tensor *gg;
    kiln_status st = kiln_gradients(kiln_sum(kiln_mul(g, g), 0, NULL, false), NULL, 1, &q, &gg);
    if (tu_cur_exec()->dev == KILN_REF)
        cr_assert_neq(st, KILN_OK);
    if (st != KILN_OK) {
        cr_assert_eq(st, KILN_ERR_ARG);
        cr_assert(strstr(kiln_ctx_last_error(ctx), "attention_dq") &&
                      strstr(kiln_ctx_last_error(ctx), "kiln_scaled_dot_product_attention"),
                  "%s", kiln_ctx_last_error(ctx));
    }
}
