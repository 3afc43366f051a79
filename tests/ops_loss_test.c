/* ops_loss_test.c — the losses of api/loss.c and masked, grouped-query
 * attention on every executor, against plain loops in double over random
 * inputs: cross-entropy with class weights, an ignored index and label
 * smoothing (rows and [N, C, d] maps), NLL, binary cross-entropy on logits
 * with weights and a positive-class weight (large logits included), KL
 * divergence (zero targets, log targets), Huber and smooth L1 on both sides
 * of their thresholds, std_mean; and each one's errors. */
#include "test_util.h"

enum { N = 7, C = 5, IGN = -100 };

static double logsumexp(const double *x, int n, int stride) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < n; j++)
        m = fmax(m, x[j * stride]);
    for (int j = 0; j < n; j++)
        s += exp(x[j * stride] - m);
    return m + log(s);
}

/* Per-row cross-entropy parts of rows [m] over classes [c] with class stride
 * cs and row offsets off[i]: loss[i] and the row's weight w[i]. */
static void ref_ce(const double *x, const int64_t *t, int m, int c, const int *off, int cs,
                   const double *weight, double eps, double *loss, double *w) {
    for (int i = 0; i < m; i++) {
        const double *row = x + off[i];
        if (t[i] == IGN) {
            loss[i] = w[i] = 0;
            continue;
        }
        double lse = logsumexp(row, c, cs), smooth = 0;
        for (int j = 0; j < c; j++)
            smooth += (weight ? weight[j] : 1) * (lse - row[j * cs]);
        w[i] = weight ? weight[t[i]] : 1;
        loss[i] = (1 - eps) * w[i] * (lse - row[t[i] * cs]) + eps / c * smooth;
    }
}

static void sums(const double *loss, const double *w, int m, double *sum, double *mean) {
    double s = 0, ws = 0;
    for (int i = 0; i < m; i++) {
        s += loss[i];
        ws += w[i];
    }
    *sum = s;
    *mean = s / ws;
}

TU_TEST(loss, cross_entropy_weights_ignore_smoothing) {
    TU_RNG(r);
    double x[N * C], weight[C], loss[N], w[N], sum, mean;
    int64_t t[N];
    double td[N];
    int off[N];
    kiln_tensor *logits = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(N, C), -4, 4, x);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(C), 0.2, 2, weight);
    for (int i = 0; i < N; i++) {
        t[i] = i % 3 == 1 ? IGN : tu_int(&r, 0, C - 1);
        td[i] = (double)t[i];
        off[i] = i * C;
    }
    kiln_tensor *tt = tu_tensor(ctx, KILN_I64, TU_S(N), td);
    const double eps[] = {0, 0.15};
    for (int e = 0; e < 2; e++)
        for (int weighted = 0; weighted < 2; weighted++) {
            kiln_tensor *wt = weighted ? tw : NULL;
            ref_ce(x, t, N, C, off, 1, weighted ? weight : NULL, eps[e], loss, w);
            sums(loss, w, N, &sum, &mean);
            TU_EXPECT(kiln_cross_entropy_ex(logits, tt, wt, IGN, eps[e], KILN_REDUCTION_NONE),
                      KILN_F64, loss, N);
            TU_EXPECT_NEAR_VALS(
                kiln_cross_entropy_ex(logits, tt, wt, IGN, eps[e], KILN_REDUCTION_SUM), KILN_F64,
                sum);
            TU_EXPECT_NEAR_VALS(
                kiln_cross_entropy_ex(logits, tt, wt, IGN, eps[e], KILN_REDUCTION_MEAN), KILN_F64,
                mean);
        }
    /* nothing ignored, no weight, no smoothing: kiln_cross_entropy */
    double all[N];
    for (int i = 0; i < N; i++)
        all[i] = (double)tu_int(&r, 0, C - 1);
    kiln_tensor *ta = tu_tensor(ctx, KILN_I32, TU_S(N), all);
    double want[N];
    TU_READ(kiln_cross_entropy(logits, ta, KILN_REDUCTION_NONE), want, N);
    TU_EXPECT(kiln_cross_entropy_ex(logits, ta, NULL, KILN_IGNORE_NONE, 0, KILN_REDUCTION_NONE),
              KILN_F64, want, N);
    /* every row ignored: the mean is 0/0, as PyTorch's */
    double ign[N];
    for (int i = 0; i < N; i++)
        ign[i] = IGN;
    double nan = TU_ITEM(kiln_cross_entropy_ex(logits, tu_tensor(ctx, KILN_I64, TU_S(N), ign),
                                                NULL, IGN, 0, KILN_REDUCTION_MEAN));
    cr_assert(isnan(nan), "[%s] all ignored: %g", tu_exec_name(), nan);
}

TU_TEST(loss, cross_entropy_over_maps) {
    TU_RNG(r);
    enum { B = 2, K = 3, D = 4 };
    double x[B * K * D], weight[K], loss[B * D], w[B * D], td[B * D], sum, mean;
    int64_t t[B * D];
    int off[B * D];
    kiln_tensor *logits = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(B, K, D), -3, 3, x);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(K), 0.5, 1.5, weight);
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++) {
            int i = b * D + d;
            t[i] = (b + d) % 4 == 3 ? IGN : tu_int(&r, 0, K - 1);
            td[i] = (double)t[i];
            off[i] = b * K * D + d;
        }
    kiln_tensor *tt = tu_tensor(ctx, KILN_I64, TU_S(B, D), td);
    ref_ce(x, t, B * D, K, off, D, weight, 0.1, loss, w);
    sums(loss, w, B * D, &sum, &mean);
    kiln_tensor *none = kiln_cross_entropy_ex(logits, tt, tw, IGN, 0.1, KILN_REDUCTION_NONE);
    TU_ASSERT_SHAPE(none, B, D);
    TU_EXPECT(none, KILN_F32, loss, B * D);
    TU_EXPECT_NEAR_VALS(kiln_cross_entropy_ex(logits, tt, tw, IGN, 0.1, KILN_REDUCTION_MEAN),
                        KILN_F32, mean);
    /* NLL of log-probabilities computed here: the smoothing-free parts */
    double lp[B * K * D];
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++) {
            double lse = logsumexp(x + b * K * D + d, K, D);
            for (int k = 0; k < K; k++)
                lp[(b * K + k) * D + d] = x[(b * K + k) * D + d] - lse;
        }
    kiln_tensor *tlp = tu_tensor(ctx, KILN_F32, TU_S(B, K, D), lp);
    ref_ce(x, t, B * D, K, off, D, weight, 0, loss, w);
    sums(loss, w, B * D, &sum, &mean);
    TU_EXPECT(kiln_nll_loss(tlp, tt, tw, IGN, KILN_REDUCTION_NONE), KILN_F32, loss, B * D);
    TU_EXPECT_NEAR_VALS(kiln_nll_loss(tlp, tt, tw, IGN, KILN_REDUCTION_MEAN), KILN_F32, mean);
    double plain = 0; /* unweighted: each kept row's loss over its weight */
    for (int i = 0; i < B * D; i++)
        plain += loss[i] / (w[i] ? w[i] : 1);
    TU_EXPECT_NEAR_VALS(kiln_nll_loss(tlp, tt, NULL, IGN, KILN_REDUCTION_SUM), KILN_F32, plain);
}

TU_TEST(loss, binary_cross_entropy_with_logits) {
    TU_RNG(r);
    enum { R = 4, K = 3 };
    double x[R * K], y[R * K], w[K], pw[K], want[R * K];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(R, K), -6, 6, x);
    /* large logits: log(sigmoid) would be log 0 without the stable form */
    x[0] = 60, x[4] = -75;
    tx = tu_tensor(ctx, KILN_F64, TU_S(R, K), x);
    kiln_tensor *ty = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(R, K), 0, 1, y);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(K), 0.5, 2, w);
    kiln_tensor *tpw = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(K), 0.5, 3, pw);
    for (int opt = 0; opt < 2; opt++) {
        double s = 0;
        for (int i = 0; i < R * K; i++) {
            int k = i % K;
            double xv = x[i], yv = y[i];
            /* -[pw y log s(x) + (1 - y) log(1 - s(x))], log s(x) = -log1p(exp(-x)) */
            double lsig = xv >= 0 ? -log1p(exp(-xv)) : xv - log1p(exp(xv));
            double l1sig = lsig - xv;
            double p = opt ? pw[k] : 1;
            want[i] = -(p * yv * lsig + (1 - yv) * l1sig) * (opt ? w[k] : 1);
            s += want[i];
        }
        kiln_tensor *wt = opt ? tw : NULL, *pwt = opt ? tpw : NULL;
        TU_EXPECT(kiln_binary_cross_entropy_with_logits(tx, ty, wt, pwt, KILN_REDUCTION_NONE),
                  KILN_F64, want, R * K);
        TU_EXPECT_NEAR_VALS(
            kiln_binary_cross_entropy_with_logits(tx, ty, wt, pwt, KILN_REDUCTION_MEAN), KILN_F64,
            s / (R * K));
    }
    TU_ASSERT_ERROR(kiln_binary_cross_entropy_with_logits(tx, ty, NULL,
                                                          kiln_ones(ctx, KILN_F64, TU_S(2)),
                                                          KILN_REDUCTION_SUM),
                    KILN_ERR_SHAPE, "pos_weight", "[2]");
}

TU_TEST(loss, kl_div_huber_smooth_l1) {
    TU_RNG(r);
    enum { M = 12 };
    double in[M], t[M], want[M], a[M], b[M];
    kiln_tensor *ti = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 4), -3, 0, in);
    tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 4), 0, 1, t);
    t[2] = t[7] = 0; /* 0 log 0 = 0 */
    kiln_tensor *tt = tu_tensor(ctx, KILN_F64, TU_S(3, 4), t);
    double s = 0;
    for (int i = 0; i < M; i++)
        s += (want[i] = (t[i] > 0 ? t[i] * log(t[i]) : 0) - t[i] * in[i]);
    TU_EXPECT(kiln_kl_div(ti, tt, false, KILN_REDUCTION_NONE), KILN_F64, want, M);
    TU_EXPECT_NEAR_VALS(kiln_kl_div(ti, tt, false, KILN_REDUCTION_SUM), KILN_F64, s);
    for (int i = 0; i < M; i++)
        want[i] = exp(in[i]) * (in[i] - in[(i + 5) % M]);
    double rolled[M];
    for (int i = 0; i < M; i++)
        rolled[i] = in[(i + 5) % M];
    kiln_tensor *tr = tu_tensor(ctx, KILN_F64, TU_S(3, 4), rolled);
    TU_EXPECT(kiln_kl_div(tr, ti, true, KILN_REDUCTION_NONE), KILN_F64, want, M);

    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(M), -3, 3, a);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(M), -3, 3, b);
    const double th[] = {0.5, 1.7};
    for (int k = 0; k < 2; k++) {
        double dl = th[k], hs = 0;
        double hub[M], sl1[M];
        for (int i = 0; i < M; i++) {
            double d = a[i] - b[i], ad = fabs(d);
            hub[i] = ad < dl ? 0.5 * d * d : dl * (ad - 0.5 * dl);
            sl1[i] = ad < dl ? 0.5 * d * d / dl : ad - 0.5 * dl;
            hs += hub[i];
        }
        TU_EXPECT(kiln_huber_loss(ta, tb, dl, KILN_REDUCTION_NONE), KILN_F32, hub, M);
        TU_EXPECT_NEAR_VALS(kiln_huber_loss(ta, tb, dl, KILN_REDUCTION_MEAN), KILN_F32, hs / M);
        TU_EXPECT(kiln_smooth_l1_loss(ta, tb, dl, KILN_REDUCTION_NONE), KILN_F32, sl1, M);
    }
    double l1[M];
    for (int i = 0; i < M; i++)
        l1[i] = fabs(a[i] - b[i]);
    TU_EXPECT(kiln_smooth_l1_loss(ta, tb, 0, KILN_REDUCTION_NONE), KILN_F32, l1, M);
    TU_ASSERT_ERROR(kiln_huber_loss(ta, tb, 0, KILN_REDUCTION_SUM), KILN_ERR_ARG,
                    "kiln_huber_loss", "delta");
    TU_ASSERT_ERROR(kiln_smooth_l1_loss(ta, tb, -1, KILN_REDUCTION_SUM), KILN_ERR_ARG, "beta");
    TU_ASSERT_ERROR(kiln_kl_div(ta, ti, false, KILN_REDUCTION_SUM), KILN_ERR_SHAPE,
                    "kiln_kl_div", "[12]", "[3,4]");
}

TU_TEST(loss, std_mean) {
    TU_RNG(r);
    double x[4 * 6], sd[4], mu[4];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4, 6), -5, 5, x);
    for (int i = 0; i < 4; i++) {
        double m = 0, v = 0;
        for (int j = 0; j < 6; j++)
            m += x[i * 6 + j] / 6;
        for (int j = 0; j < 6; j++)
            v += (x[i * 6 + j] - m) * (x[i * 6 + j] - m);
        mu[i] = m;
        sd[i] = sqrt(v / 5);
    }
    kiln_tensor *mean;
    TU_EXPECT(kiln_std_mean(t, TU_AXES(1), 1, false, &mean), KILN_F32, sd, 4);
    TU_EXPECT(mean, KILN_F32, mu, 4);
    /* integers: both f32 */
    kiln_tensor *im;
    kiln_tensor *is = kiln_std_mean(kiln_cast(t, KILN_I32), 0, NULL, 0, true, &im);
    TU_ASSERT_DTYPE(is, KILN_F32);
    TU_ASSERT_DTYPE(im, KILN_F32);
    TU_ASSERT_SHAPE(im, 1, 1);
    kiln_tensor *none = (kiln_tensor *)1;
    TU_ASSERT_ERROR(kiln_std_mean(t, TU_AXES(2), 1, false, &none), KILN_ERR_ARG, "axis");
    cr_assert_null(none);
}

TU_TEST(loss, class_loss_errors) {
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(4, 3));
    kiln_tensor *t = tu_tensor(ctx, KILN_I64, TU_S(4), (double[]){0, 2, -100, 1});
    kiln_tensor *bad = tu_tensor(ctx, KILN_I64, TU_S(4), (double[]){0, 3, 1, 1});
    /* -100 is fine when ignored, an error otherwise */
    cr_assert_eq(kiln_error(kiln_cross_entropy_ex(x, t, NULL, -100, 0, KILN_REDUCTION_MEAN)),
                 KILN_OK);
    TU_ASSERT_ERROR(kiln_cross_entropy_ex(x, t, NULL, KILN_IGNORE_NONE, 0, KILN_REDUCTION_MEAN),
                    KILN_ERR_ARG, "kiln_cross_entropy_ex", "-100");
    TU_ASSERT_ERROR(kiln_nll_loss(x, bad, NULL, -100, KILN_REDUCTION_MEAN), KILN_ERR_ARG,
                    "kiln_nll_loss", "3");
    TU_ASSERT_ERROR(kiln_cross_entropy_ex(x, t, NULL, -100, 1.5, KILN_REDUCTION_MEAN),
                    KILN_ERR_ARG, "label_smoothing");
    TU_ASSERT_ERROR(kiln_cross_entropy_ex(x, t, kiln_ones(ctx, KILN_F32, TU_S(4)), -100, 0,
                                          KILN_REDUCTION_MEAN),
                    KILN_ERR_SHAPE, "weight", "[4]");
    TU_ASSERT_ERROR(kiln_cross_entropy_ex(x, kiln_zeros(ctx, KILN_I64, TU_S(3)), NULL, -100, 0,
                                          KILN_REDUCTION_MEAN),
                    KILN_ERR_SHAPE, "[4,3]", "[3]");
    TU_ASSERT_ERROR(kiln_nll_loss(x, kiln_zeros(ctx, KILN_F32, TU_S(4)), NULL, -100,
                                  KILN_REDUCTION_MEAN),
                    KILN_ERR_DTYPE, "targets");
    TU_ASSERT_ERROR(kiln_cross_entropy_ex(x, t, NULL, -100, 0, (kiln_reduction)9), KILN_ERR_ARG,
                    "reduction");
}

/* ---- attention with masks and grouped-query heads ---- */

/* One head's attention: q [l, d], k [s, d], v [s, dv]; mask (or NULL) [l, s]
 * as keep flags (bool) or additions. */
static void ref_attention(const double *q, const double *k, const double *v, int l, int s, int d,
                          int dv, const double *mask, bool additive, double scale, double *y) {
    double p[16];
    for (int i = 0; i < l; i++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < s; j++) {
            double a = 0;
            for (int e = 0; e < d; e++)
                a += q[i * d + e] * k[j * d + e];
            a *= scale;
            if (mask)
                a = additive ? a + mask[i * s + j] : mask[i * s + j] ? a : -INFINITY;
            p[j] = a;
            m = fmax(m, a);
        }
        for (int j = 0; j < s; j++)
            sum += (p[j] = exp(p[j] - m));
        for (int e = 0; e < dv; e++) {
            double a = 0;
            for (int j = 0; j < s; j++)
                a += p[j] / sum * v[j * dv + e];
            y[i * dv + e] = a;
        }
    }
}

TU_TEST(loss, attention_masks_and_grouped_heads) {
    TU_RNG(r);
    enum { HQ = 4, HK = 2, L = 3, S = 5, D = 4, DV = 2 };
    double q[HQ * L * D], k[HK * S * D], v[HK * S * DV], y[HQ * L * DV];
    double keep[L * S], add[L * S];
    kiln_tensor *tq = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, HQ, L, D), -1, 1, q);
    kiln_tensor *tk = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, HK, S, D), -1, 1, k);
    kiln_tensor *tv = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, HK, S, DV), -1, 1, v);
    for (int i = 0; i < L * S; i++) {
        keep[i] = i % S == 0 || tu_int(&r, 0, 2) > 0; /* a key kept in every row */
        add[i] = tu_unif(&r, -2, 1);
    }
    kiln_tensor *mk = tu_tensor(ctx, KILN_BOOL, TU_S(L, S), keep);
    kiln_tensor *ma = tu_tensor(ctx, KILN_F32, TU_S(1, 1, L, S), add);
    for (int kind = 0; kind < 3; kind++) {
        const double *mask = kind == 0 ? NULL : kind == 1 ? keep : add;
        /* query head h reads kv head h / (HQ / HK) */
        for (int h = 0; h < HQ; h++) {
            int g = h / (HQ / HK);
            ref_attention(q + h * L * D, k + g * S * D, v + g * S * DV, L, S, D, DV, mask,
                          kind == 2, 0.6, y + h * L * DV);
        }
        kiln_tensor *out = kiln_attention(tq, tk, tv, kind == 0 ? NULL : kind == 1 ? mk : ma,
                                          false, 0.6);
        TU_ASSERT_SHAPE(out, 1, HQ, L, DV);
        TU_EXPECT(out, KILN_F32, y, HQ * L * DV);
        /* without a mask, kiln_scaled_dot_product_attention takes the same heads */
        if (kind == 0)
            TU_EXPECT(kiln_scaled_dot_product_attention(tq, tk, tv, false, 0.6), KILN_F32, y,
                      HQ * L * DV);
    }
    TU_ASSERT_ERROR(kiln_attention(tq, tk, tv, kiln_ones(ctx, KILN_BOOL, TU_S(L, S + 1)), false,
                                   0),
                    KILN_ERR_SHAPE, "kiln_attention", "mask", "[3,6]");
    TU_ASSERT_ERROR(kiln_attention(tq, tk, tv, kiln_ones(ctx, KILN_I32, TU_S(L, S)), false, 0),
                    KILN_ERR_DTYPE, "mask", "i32");
    /* 3 query heads cannot share 2 kv heads */
    kiln_tensor *q3 = kiln_ones(ctx, KILN_F32, TU_S(1, 3, L, D));
    TU_ASSERT_ERROR(kiln_attention(q3, tk, tv, NULL, false, 0), KILN_ERR_SHAPE, "[1,3,3,4]");
}
