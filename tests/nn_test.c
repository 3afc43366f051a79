/* nn_test.c — the neural-network ops of kiln.h against plain-C float64
 * implementations written here with naive loops, on every executor; their
 * error messages; and the number of kernels a few of them compile to. */
#include <stdio.h>

#include "graph/graph.h"
#include <float.h>

#include "test_util.h"

#define NN_MAXN 8192

/* ---- float64 references ---- */

static void ref_linear(const double *x, int64_t rows, int64_t in, const double *w, int64_t out,
                       const double *b, double *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0;
            for (int64_t i = 0; i < in; i++)
                s += x[r * in + i] * w[o * in + i];
            y[r * out + o] = s;
        }
}

typedef struct conv_cfg {
    int64_t n, c, h, w, oc, kh, kw, sh, sw, ph, pw, dh, dw, groups;
} conv_cfg;

static int64_t conv_oh(const conv_cfg *k) {
    return (k->h + 2 * k->ph - k->dh * (k->kh - 1) - 1) / k->sh + 1;
}
static int64_t conv_ow(const conv_cfg *k) {
    return (k->w + 2 * k->pw - k->dw * (k->kw - 1) - 1) / k->sw + 1;
}

static void ref_conv(const conv_cfg *k, const double *x, const double *w, const double *b,
                     double *y) {
    int64_t oh = conv_oh(k), ow = conv_ow(k), cg = k->c / k->groups, og = k->oc / k->groups;
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t o = 0; o < k->oc; o++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double s = b ? b[o] : 0;
                    int64_t g = o / og;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t p = 0; p < k->kh; p++)
                            for (int64_t q = 0; q < k->kw; q++) {
                                int64_t hi = i * k->sh - k->ph + p * k->dh;
                                int64_t wi = j * k->sw - k->pw + q * k->dw;
                                if (hi < 0 || hi >= k->h || wi < 0 || wi >= k->w)
                                    continue;
                                int64_t ci = g * cg + c;
                                s += x[((n * k->c + ci) * k->h + hi) * k->w + wi] *
                                     w[((o * cg + c) * k->kh + p) * k->kw + q];
                            }
                    y[((n * k->oc + o) * oh + i) * ow + j] = s;
                }
}

/* Pooling over [planes, h, w]. */
static void ref_pool(bool is_max, const double *x, int64_t planes, int64_t h, int64_t w, int64_t kh,
                     int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, double *y) {
    int64_t oh = (h + 2 * ph - kh) / sh + 1, ow = (w + 2 * pw - kw) / sw + 1;
    for (int64_t c = 0; c < planes; c++)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                double acc = is_max ? -INFINITY : 0;
                for (int64_t p = 0; p < kh; p++)
                    for (int64_t q = 0; q < kw; q++) {
                        int64_t hi = i * sh - ph + p, wi = j * sw - pw + q;
                        if (hi < 0 || hi >= h || wi < 0 || wi >= w)
                            continue;
                        double v = x[(c * h + hi) * w + wi];
                        acc = is_max ? fmax(acc, v) : acc + v;
                    }
                y[(c * oh + i) * ow + j] = is_max ? acc : acc / (double)(kh * kw);
            }
}

/* Normalises rows of length len. */
static void ref_layer_norm(const double *x, int64_t rows, int64_t len, const double *w,
                           const double *b, double eps, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * len;
        double m = 0, v = 0;
        for (int64_t i = 0; i < len; i++)
            m += xr[i];
        m /= (double)len;
        for (int64_t i = 0; i < len; i++)
            v += (xr[i] - m) * (xr[i] - m);
        v /= (double)len;
        for (int64_t i = 0; i < len; i++)
            y[r * len + i] = (xr[i] - m) / sqrt(v + eps) * (w ? w[i] : 1) + (b ? b[i] : 0);
    }
}

/* Softmax (or its log) along the middle axis of [outer, len, inner]. */
static void ref_softmax(const double *x, int64_t outer, int64_t len, int64_t inner, bool log_,
                        double *y) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double m = -INFINITY, s = 0;
            for (int64_t i = 0; i < len; i++)
                m = fmax(m, x[(o * len + i) * inner + in]);
            for (int64_t i = 0; i < len; i++)
                s += exp(x[(o * len + i) * inner + in] - m);
            for (int64_t i = 0; i < len; i++) {
                double z = x[(o * len + i) * inner + in] - m;
                y[(o * len + i) * inner + in] = log_ ? z - log(s) : exp(z) / s;
            }
        }
}

static double ref_cross_entropy(const double *l, const int64_t *t, int64_t n, int64_t c, bool mean,
                                double *rows) {
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; j++)
            m = fmax(m, l[i * c + j]);
        for (int64_t j = 0; j < c; j++)
            s += exp(l[i * c + j] - m);
        double v = (t[i] >= 0 && t[i] < c) ? -(l[i * c + t[i]] - m - log(s)) : 0;
        if (rows)
            rows[i] = v;
        total += v;
    }
    return mean ? total / (double)n : total;
}

static double gelu_tanh_ref(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

/* Attention over `batch` independent [l, d] x [s, d] x [s, dv] problems. */
static void ref_sdpa(const double *q, const double *k, const double *v, int64_t batch, int64_t l,
                     int64_t s, int64_t d, int64_t dv, bool causal, double scale, double *y) {
    double *p = malloc(sizeof(double) * (size_t)s);
    for (int64_t bt = 0; bt < batch; bt++)
        for (int64_t i = 0; i < l; i++) {
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < s; j++) {
                double a = 0;
                for (int64_t e = 0; e < d; e++)
                    a += q[(bt * l + i) * d + e] * k[(bt * s + j) * d + e];
                p[j] = (causal && j > i) ? -INFINITY : a * scale;
                m = fmax(m, p[j]);
            }
            for (int64_t j = 0; j < s; j++)
                sum += (p[j] = exp(p[j] - m));
            for (int64_t e = 0; e < dv; e++) {
                double a = 0;
                for (int64_t j = 0; j < s; j++)
                    a += p[j] / sum * v[(bt * s + j) * dv + e];
                y[(bt * l + i) * dv + e] = a;
            }
        }
    free(p);
}

/* ---- linear ---- */

TU_TEST(nn, linear) {
    TU_RNG(r);
    static double x[3 * 4 * 5], w[6 * 5], b[6], y[3 * 4 * 6];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3, 4, 5), -2, 2, x);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(6, 5), -1, 1, w);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(6), -1, 1, b);
    kiln_tensor *out = kiln_linear(tx, tw, tb);
    TU_ASSERT_SHAPE(out, 3, 4, 6);
    ref_linear(x, 12, 5, w, 6, b, y);
    TU_EXPECT(out, KILN_F32, y, 72);
    ref_linear(x, 12, 5, w, 6, NULL, y);
    TU_EXPECT(kiln_linear(tx, tw, NULL), KILN_F32, y, 72);
    /* A 1-d input gives a 1-d output. */
    kiln_tensor *row = kiln_linear(kiln_reshape(kiln_slice(tx, 0, 0, 1, 1), 1, TU_DIMS(20)),
                                   kiln_ones(ctx, KILN_F32, TU_S(2, 20)), NULL);
    double rs = 0;
    for (int i = 0; i < 20; i++)
        rs += x[i];
    TU_ASSERT_SHAPE(row, 2);
    TU_EXPECT(row, KILN_F32, ((const double[]){rs, rs}), 2);
}

/* ---- conv2d ---- */

static void check_conv(kiln_ctx *ctx, tu_rng *r, const conv_cfg *k, bool bias) {
    int64_t nx = k->n * k->c * k->h * k->w, nw = k->oc * (k->c / k->groups) * k->kh * k->kw;
    int64_t oh = conv_oh(k), ow = conv_ow(k), ny = k->n * k->oc * oh * ow;
    double *x = malloc(sizeof(double) * (size_t)nx), *w = malloc(sizeof(double) * (size_t)nw);
    double *b = malloc(sizeof(double) * (size_t)k->oc), *y = malloc(sizeof(double) * (size_t)ny);
    kiln_tensor *tx = tu_rand_tensor(ctx, r, KILN_F32, TU_S(k->n, k->c, k->h, k->w), -1, 1, x);
    kiln_tensor *tw =
        tu_rand_tensor(ctx, r, KILN_F32, TU_S(k->oc, k->c / k->groups, k->kh, k->kw), -1, 1, w);
    kiln_tensor *tb = tu_rand_tensor(ctx, r, KILN_F32, TU_S(k->oc), -1, 1, b);
    kiln_tensor *out =
        kiln_conv2d(tx, tw, bias ? tb : NULL, k->sh, k->sw, k->ph, k->pw, k->dh, k->dw, k->groups);
    TU_ASSERT_SHAPE(out, k->n, k->oc, oh, ow);
    ref_conv(k, x, w, bias ? b : NULL, y);
    TU_EXPECT(out, KILN_F32, y, ny);
    free(x);
    free(w);
    free(b);
    free(y);
}

TU_TEST(nn, conv2d) {
    TU_RNG(r);
    /* plain 3x3 with padding and bias */
    check_conv(ctx, &r, &(conv_cfg){2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1}, true);
    /* stride 2, asymmetric kernel and padding, no bias */
    check_conv(ctx, &r, &(conv_cfg){2, 3, 9, 8, 5, 3, 2, 2, 2, 1, 0, 1, 1, 1}, false);
    /* dilation 2 */
    check_conv(ctx, &r, &(conv_cfg){1, 2, 9, 9, 3, 3, 3, 1, 1, 2, 2, 2, 2, 1}, true);
    /* groups 2 with stride 2 */
    check_conv(ctx, &r, &(conv_cfg){2, 4, 8, 8, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2}, true);
    /* 1x1 */
    check_conv(ctx, &r, &(conv_cfg){2, 5, 4, 3, 7, 1, 1, 1, 1, 0, 0, 1, 1, 1}, true);
}

/* ---- pooling ---- */

static void check_pool(kiln_ctx *ctx, tu_rng *r, bool is_max, int64_t n, int64_t c, int64_t h,
                       int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                       int64_t pw) {
    int64_t oh = (h + 2 * ph - kh) / sh + 1, ow = (w + 2 * pw - kw) / sw + 1;
    static double x[NN_MAXN], y[NN_MAXN];
    kiln_tensor *tx = tu_rand_tensor(ctx, r, KILN_F32, TU_S(n, c, h, w), -3, 1, x);
    kiln_tensor *out = is_max ? kiln_max_pool2d(tx, kh, kw, sh, sw, ph, pw)
                              : kiln_avg_pool2d(tx, kh, kw, sh, sw, ph, pw);
    TU_ASSERT_SHAPE(out, n, c, oh, ow);
    ref_pool(is_max, x, n * c, h, w, kh, kw, sh, sw, ph, pw, y);
    TU_EXPECT(out, KILN_F32, y, n * c * oh * ow);
}

TU_TEST(nn, max_pool2d) {
    TU_RNG(r);
    /* All-negative inputs: a zero from the padding would win if the padding
     * were not -inf. */
    check_pool(ctx, &r, true, 2, 3, 7, 8, 3, 3, 2, 2, 1, 1);
    check_pool(ctx, &r, true, 1, 2, 6, 6, 2, 2, 2, 2, 0, 0);
    check_pool(ctx, &r, true, 1, 2, 5, 7, 3, 2, 1, 2, 1, 1);
    /* Windows that tile the input (one window reduction): cut to whole
     * windows (7x9 -> 6x9 by 2x3) and not cut. */
    check_pool(ctx, &r, true, 2, 3, 7, 9, 2, 3, 2, 3, 0, 0);
    check_pool(ctx, &r, true, 1, 1, 8, 8, 4, 1, 4, 1, 0, 0);
}

/* Tied maxima in tiled windows (a ReLU's zeros) share the gradient evenly, as
 * kiln_max's do: a window of four zeros gives each a quarter. */
TU_TEST(nn, max_pool2d_ties) {
    static const double xv[16] = {0, 0, 1, 3,  0, 0, 3, -2, /* */
                                  5, 5, 0, 0,  5, -1, 0, 0};
    static const double gv[4] = {4, 8, 12, 16};
    static const double want[16] = {1, 1, 0, 4, 1, 1, 4, 0, 4, 4, 4, 4, 4, 0, 4, 4};
    kiln_tensor *x = kiln_from_data(ctx, KILN_F64, TU_S(1, 1, 4, 4), xv);
    kiln_tensor *g = kiln_from_data(ctx, KILN_F64, TU_S(1, 1, 2, 2), gv), *dx;
    TU_ASSERT_OK(x);
    cr_assert_eq(kiln_gradients(kiln_max_pool2d(x, 2, 2, 2, 2, 0, 0), g, 1, &x, &dx), KILN_OK,
                 "%s", kiln_ctx_last_error(ctx));
    TU_EXPECT(dx, KILN_F64, want, 16);
}

TU_TEST(nn, avg_pool2d) {
    TU_RNG(r);
    check_pool(ctx, &r, false, 2, 3, 7, 8, 3, 3, 2, 2, 1, 1);
    check_pool(ctx, &r, false, 1, 2, 5, 7, 3, 2, 1, 2, 1, 1);
    check_pool(ctx, &r, false, 2, 3, 7, 9, 2, 3, 2, 3, 0, 0);
    /* 3-d input */
    static double x[2 * 4 * 4], y[2 * 2 * 2];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 4, 4), -1, 1, x);
    ref_pool(false, x, 2, 4, 4, 2, 2, 2, 2, 0, 0, y);
    TU_EXPECT(kiln_avg_pool2d(tx, 2, 2, 2, 2, 0, 0), KILN_F32, y, 8);
}

/* ---- normalisation ---- */

TU_TEST(nn, layer_norm) {
    TU_RNG(r);
    static double x[4 * 3 * 10], w[3 * 10], b[3 * 10], y[4 * 3 * 10];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4, 3, 10), -2, 3, x);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3, 10), 0.5, 1.5, w);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3, 10), -1, 1, b);
    /* last two axes, affine */
    ref_layer_norm(x, 4, 30, w, b, 1e-5, y);
    TU_EXPECT(kiln_layer_norm(tx, 2, tw, tb, 1e-5), KILN_F32, y, 120);
    /* last axis, no affine, a large eps that matters */
    ref_layer_norm(x, 12, 10, NULL, NULL, 0.5, y);
    TU_EXPECT(kiln_layer_norm(tx, 1, NULL, NULL, 0.5), KILN_F32, y, 120);
}

static void ref_batch_norm(const double *x, int64_t n, int64_t c, int64_t sp, const double *mean,
                           const double *var, const double *w, const double *b, double eps,
                           double *y) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t s = 0; s < sp; s++) {
                int64_t f = (i * c + ch) * sp + s;
                y[f] = (x[f] - mean[ch]) / sqrt(var[ch] + eps) * (w ? w[ch] : 1) + (b ? b[ch] : 0);
            }
}

TU_TEST(nn, batch_norm) {
    TU_RNG(r);
    enum { N = 3, C = 4, SP = 5 * 2 };
    static double x[N * C * SP], rm[C], rv[C], w[C], b[C], y[N * C * SP];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(N, C, 5, 2), -2, 3, x);
    kiln_tensor *trm = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(C), -1, 1, rm);
    kiln_tensor *trv = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(C), 0.5, 2, rv);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(C), 0.5, 1.5, w);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(C), -1, 1, b);

    /* eval: the running statistics */
    ref_batch_norm(x, N, C, SP, rm, rv, w, b, 1e-5, y);
    TU_EXPECT(kiln_batch_norm(tx, trm, trv, tw, tb, false, 0.1, 1e-5), KILN_F32, y, N * C * SP);

    /* training: batch statistics, and the running ones move toward them */
    double mean[C] = {0}, var[C] = {0}, erm[C], erv[C];
    for (int64_t ch = 0; ch < C; ch++) {
        for (int64_t i = 0; i < N; i++)
            for (int64_t s = 0; s < SP; s++)
                mean[ch] += x[(i * C + ch) * SP + s];
        mean[ch] /= N * SP;
        for (int64_t i = 0; i < N; i++)
            for (int64_t s = 0; s < SP; s++) {
                double d = x[(i * C + ch) * SP + s] - mean[ch];
                var[ch] += d * d;
            }
        var[ch] /= N * SP;
        erm[ch] = 0.7 * rm[ch] + 0.3 * mean[ch];
        erv[ch] = 0.7 * rv[ch] + 0.3 * var[ch] * (N * SP) / (N * SP - 1);
    }
    ref_batch_norm(x, N, C, SP, mean, var, w, b, 1e-3, y);
    kiln_tensor *out = kiln_batch_norm(tx, trm, trv, tw, tb, true, 0.3, 1e-3);
    TU_EXPECT(out, KILN_F32, y, N * C * SP);
    TU_EXPECT(trm, KILN_F32, erm, C);
    TU_EXPECT(trv, KILN_F32, erv, C);

    /* training without running statistics or affine parameters, on [N, C] */
    kiln_tensor *flat =
        kiln_reshape(kiln_permute(tx, (const int[]){0, 2, 3, 1}), 2, TU_DIMS(N * SP, C));
    static double xf[N * SP * C], yf[N * SP * C];
    for (int64_t i = 0; i < N; i++)
        for (int64_t s = 0; s < SP; s++)
            for (int64_t ch = 0; ch < C; ch++)
                xf[(i * SP + s) * C + ch] = x[(i * C + ch) * SP + s];
    ref_batch_norm(xf, N * SP, C, 1, mean, var, NULL, NULL, 1e-5, yf);
    TU_EXPECT(kiln_batch_norm(flat, NULL, NULL, NULL, NULL, true, 0.1, 1e-5), KILN_F32, yf,
              N * C * SP);
}

/* ---- softmax ---- */

TU_TEST(nn, softmax) {
    TU_RNG(r);
    static double x[3 * 7 * 4], y[3 * 7 * 4];
    /* Large values: without subtracting the maximum, exp would overflow. */
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3, 7, 4), 80, 100, x);
    ref_softmax(x, 3, 7, 4, false, y);
    TU_EXPECT(kiln_softmax(tx, 1), KILN_F32, y, 84);
    ref_softmax(x, 3, 7, 4, true, y);
    TU_EXPECT(kiln_log_softmax(tx, -2), KILN_F32, y, 84);
    ref_softmax(x, 21, 4, 1, false, y);
    TU_EXPECT(kiln_softmax(tx, -1), KILN_F32, y, 84);
    ref_softmax(x, 21, 4, 1, true, y);
    TU_EXPECT(kiln_log_softmax(tx, 2), KILN_F32, y, 84);
    /* an empty axis gives an empty result */
    TU_ASSERT_SHAPE(kiln_softmax(kiln_zeros(ctx, KILN_F32, TU_S(2, 0)), 1), 2, 0);
}

/* sum(softmax(x)) is 1 for every x, so its gradient is 0: what is left is
 * rounding error, y (1 - sum y) per element, a few eps times the element's
 * own y, as in PyTorch (below 1e-8 over 45x65 rows). Differentiating through
 * the subtracted row max routed a whole row's rounding error to its max
 * element: 1.0e-7 there, about 10 eps times its y. */
TU_TEST(nn, softmax_gradient_cancels) {
    TU_RNG(r);
    static double x[45 * 65], y[45 * 65];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(45, 65), -3, 3, x);
    kiln_requires_grad(tx, true);
    cr_assert_eq(kiln_backward(kiln_sum(kiln_softmax(tx, 1), 0, NULL, false)), KILN_OK);
    ref_softmax(x, 45, 65, 1, false, y);
    float g[45 * 65];
    cr_assert_eq(kiln_to_host(kiln_grad(tx), g, sizeof g), KILN_OK);
    double worst = 0, worst_abs = 0;
    for (int i = 0; i < 45 * 65; i++) {
        worst = fmax(worst, fabs(g[i]) / (y[i] * FLT_EPSILON));
        worst_abs = fmax(worst_abs, fabs(g[i]));
    }
    cr_assert(worst <= 4 && worst_abs < 1e-8,
              "[%s] d sum(softmax(x))/dx reaches %g (%g eps times the element's softmax)",
              tu_exec_name(), worst_abs, worst);
}

/* ---- losses ---- */

TU_TEST(nn, cross_entropy) {
    TU_RNG(r);
    enum { N = 6, C = 5 };
    static double l[N * C], rows[N];
    int64_t t[N];
    for (int i = 0; i < N; i++)
        t[i] = tu_int(&r, 0, C - 1);
    kiln_tensor *tl = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(N, C), -4, 4, l);
    kiln_dtype tdts[2] = {KILN_I64, KILN_I32};
    for (int k = 0; k < 2; k++) {
        kiln_tensor *tt = tu_tensor_i64(ctx, tdts[k], TU_S(N), t);
        double mean = ref_cross_entropy(l, t, N, C, true, rows);
        double sum = ref_cross_entropy(l, t, N, C, false, NULL);
        kiln_tensor *m = kiln_cross_entropy(tl, tt, KILN_REDUCTION_MEAN);
        TU_ASSERT_SCALAR_SHAPE(m);
        TU_EXPECT(m, KILN_F32, &mean, 1);
        TU_EXPECT(kiln_cross_entropy(tl, tt, KILN_REDUCTION_SUM), KILN_F32, &sum, 1);
        TU_EXPECT(kiln_cross_entropy(tl, tt, KILN_REDUCTION_NONE), KILN_F32, rows, N);
    }
    /* Bound targets out of range are reported when the op is recorded. */
    int64_t bad[N];
    memcpy(bad, t, sizeof bad);
    bad[2] = C;
    TU_ASSERT_ERROR(
        kiln_cross_entropy(tl, tu_tensor_i64(ctx, KILN_I64, TU_S(N), bad), KILN_REDUCTION_MEAN),
        KILN_ERR_ARG, "kiln_cross_entropy", "[6,5]", "5");
    /* Computed ones cannot be seen lazily: the row contributes 0, the mean
     * still divides by N. Eager mode has computed them, and reports them. */
    bad[2] = -1;
    int64_t shifted[N];
    for (int i = 0; i < N; i++)
        shifted[i] = bad[i] + 1;
    kiln_tensor *tt = kiln_sub_scalar(tu_tensor_i64(ctx, KILN_I64, TU_S(N), shifted), 1);
    kiln_tensor *m = kiln_cross_entropy(tl, tt, KILN_REDUCTION_MEAN);
    if (kiln_ctx_mode(ctx) == KILN_EAGER) {
        TU_ASSERT_ERROR(m, KILN_ERR_ARG, "kiln_cross_entropy", "-1");
    } else {
        double want = ref_cross_entropy(l, bad, N, C, true, NULL);
        TU_EXPECT(m, KILN_F32, &want, 1);
    }
}

TU_TEST(nn, mse_loss) {
    TU_RNG(r);
    static double a[4 * 9], b[4 * 9], sq[4 * 9];
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4, 9), -2, 2, a);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4, 9), -2, 2, b);
    double sum = 0;
    for (int i = 0; i < 36; i++)
        sum += (sq[i] = (a[i] - b[i]) * (a[i] - b[i]));
    double mean = sum / 36;
    TU_EXPECT(kiln_mse_loss(ta, tb, KILN_REDUCTION_MEAN), KILN_F32, &mean, 1);
    TU_EXPECT(kiln_mse_loss(ta, tb, KILN_REDUCTION_SUM), KILN_F32, &sum, 1);
    TU_EXPECT(kiln_mse_loss(ta, tb, KILN_REDUCTION_NONE), KILN_F32, sq, 36);
}

/* ---- activations, dropout, embedding ---- */

TU_TEST(nn, gelu_tanh) {
    TU_RNG(r);
    static double x[50], y[50];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(5, 10), -5, 5, x);
    for (int i = 0; i < 50; i++)
        y[i] = gelu_tanh_ref(x[i]);
    TU_EXPECT(kiln_gelu_tanh(tx), KILN_F64, y, 50);
}

static double hardswish_ref(double x) { return x * fmin(fmax(x + 3, 0), 6) / 6; }

TU_TEST(nn, hardswish) {
    TU_RNG(r);
    static double x[60], y[60];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(6, 10), -6, 6, x);
    for (int i = 0; i < 60; i++)
        y[i] = hardswish_ref(x[i]);
    TU_EXPECT(kiln_hardswish(tx), KILN_F64, y, 60);
    float xf[60];
    for (int i = 0; i < 60; i++)
        y[i] = hardswish_ref(xf[i] = (float)x[i]);
    TU_EXPECT_TOL(kiln_hardswish(kiln_cast(tx, KILN_F32)), KILN_F32, y, 60, 1e-12);
    TU_ASSERT_ERROR(kiln_hardswish(kiln_cast(tx, KILN_I32)), KILN_ERR_DTYPE, "kiln_hardswish",
                    "[6,10]");
}

TU_TEST(nn, dropout) {
    TU_RNG(r);
    enum { R = 64, C = 64 };
    const double p = 0.3;
    static double x[R * C], y[R * C], got[R * C];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(R, C), 0.5, 2, x);
    /* The mask is kiln_rand's f32 draws with that seed, whatever the executor. */
    int64_t kept = 0;
    for (int64_t i = 0; i < R * C; i++) {
        bool keep = graph_rand_value(GRAPH_RAND, KILN_F32, 42, (uint64_t)i) >= (float)p;
        y[i] = keep ? x[i] / (1 - p) : 0;
        kept += keep;
    }
    kiln_tensor *d = kiln_dropout(tx, p, 42, true);
    TU_EXPECT(d, KILN_F32, y, R * C);
    double ratio = (double)kept / (R * C);
    cr_assert(fabs(ratio - (1 - p)) < 0.03, "[%s] keep ratio %g for p %g", tu_exec_name(), ratio,
              p);
    /* another seed, another mask */
    TU_READ(kiln_dropout(tx, p, 43, true), got, R * C);
    int64_t differ = 0;
    for (int64_t i = 0; i < R * C; i++)
        differ += (got[i] == 0) != (y[i] == 0);
    cr_assert(differ > R * C / 10, "[%s] seeds 42 and 43 differ in %lld places", tu_exec_name(),
              (long long)differ);
    /* out of training, or p 0: the input */
    TU_EXPECT(kiln_dropout(tx, p, 42, false), KILN_F32, x, R * C);
    TU_EXPECT(kiln_dropout(tx, 0, 42, true), KILN_F32, x, R * C);
}

TU_TEST(nn, embedding) {
    TU_RNG(r);
    enum { V = 7, D = 5 };
    static double w[V * D], y[2 * 3 * D];
    int64_t idx[6];
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(V, D), -1, 1, w);
    for (int i = 0; i < 6; i++)
        idx[i] = tu_int(&r, 0, V - 1);
    idx[5] = idx[0];
    for (int i = 0; i < 6; i++)
        for (int d = 0; d < D; d++)
            y[i * D + d] = w[idx[i] * D + d];
    kiln_dtype dts[3] = {KILN_I64, KILN_I32, KILN_U8};
    for (int k = 0; k < 3; k++) {
        kiln_tensor *e = kiln_embedding(tu_tensor_i64(ctx, dts[k], TU_S(2, 3), idx), tw);
        TU_ASSERT_SHAPE(e, 2, 3, D);
        TU_EXPECT_EXACT(e, KILN_F32, y, 6 * D);
    }
    kiln_tensor *s = kiln_embedding(kiln_scalar(ctx, KILN_I32, (double)idx[1]), tw);
    TU_ASSERT_SHAPE(s, D);
    TU_EXPECT_EXACT(s, KILN_F32, y + D, D);
    idx[3] = V;
    TU_ASSERT_ERROR(kiln_embedding(tu_tensor_i64(ctx, KILN_I64, TU_S(6), idx), tw), KILN_ERR_ARG,
                    "kiln_embedding", "[7,5]", "7");
}

/* ---- attention ---- */

static void check_sdpa(kiln_ctx *ctx, tu_rng *r, int64_t b, int64_t l, int64_t s, int64_t d,
                       int64_t dv, bool causal, double scale) {
    static double q[NN_MAXN], k[NN_MAXN], v[NN_MAXN], y[NN_MAXN];
    kiln_tensor *tq = tu_rand_tensor(ctx, r, KILN_F32, TU_S(b, l, d), -2, 2, q);
    kiln_tensor *tk = tu_rand_tensor(ctx, r, KILN_F32, TU_S(b, s, d), -2, 2, k);
    kiln_tensor *tv = tu_rand_tensor(ctx, r, KILN_F32, TU_S(b, s, dv), -2, 2, v);
    kiln_tensor *out = kiln_scaled_dot_product_attention(tq, tk, tv, causal, scale);
    TU_ASSERT_SHAPE(out, b, l, dv);
    ref_sdpa(q, k, v, b, l, s, d, dv, causal, scale ? scale : 1 / sqrt((double)d), y);
    TU_EXPECT(out, KILN_F32, y, b * l * dv);
}

TU_TEST(nn, scaled_dot_product_attention) {
    TU_RNG(r);
    check_sdpa(ctx, &r, 2, 5, 7, 4, 3, false, 0);
    check_sdpa(ctx, &r, 2, 6, 6, 4, 3, true, 0);
    check_sdpa(ctx, &r, 1, 4, 6, 3, 2, true, 0.7);
    /* batch axes broadcast: one key/value set for two query sets */
    static double q[2 * 3 * 4], k[5 * 4], v[5 * 2], y[2 * 3 * 2];
    kiln_tensor *tq = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3, 4), -1, 1, q);
    kiln_tensor *tk = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, 5, 4), -1, 1, k);
    kiln_tensor *tv = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(5, 2), -1, 1, v);
    for (int bt = 0; bt < 2; bt++)
        ref_sdpa(q + bt * 12, k, v, 1, 3, 5, 4, 2, false, 0.5, y + bt * 6);
    TU_EXPECT(kiln_scaled_dot_product_attention(tq, tk, tv, false, 0.5), KILN_F32, y, 12);
}

/* ---- errors ---- */

TU_TEST(nn, errors) {
    kiln_tensor *x4 = kiln_ones(ctx, KILN_F32, TU_S(2, 3, 8, 8));
    kiln_tensor *w4 = kiln_ones(ctx, KILN_F32, TU_S(4, 3, 3, 3));
    kiln_tensor *m = kiln_ones(ctx, KILN_F32, TU_S(4, 5));
    kiln_tensor *i32 = kiln_zeros(ctx, KILN_I32, TU_S(4));

    TU_ASSERT_ERROR(kiln_linear(m, kiln_ones(ctx, KILN_F32, TU_S(3, 4)), NULL), KILN_ERR_SHAPE,
                    "kiln_linear", "[4,5]", "[3,4]");
    TU_ASSERT_ERROR(kiln_linear(m, kiln_ones(ctx, KILN_F32, TU_S(3, 5)), i32), KILN_ERR_DTYPE,
                    "kiln_linear", "bias");
    TU_ASSERT_ERROR(
        kiln_linear(m, kiln_ones(ctx, KILN_F32, TU_S(3, 5)), kiln_ones(ctx, KILN_F32, TU_S(4))),
        KILN_ERR_SHAPE, "kiln_linear", "[4]", "[3,5]");
    TU_ASSERT_ERROR(kiln_linear(m, NULL, NULL), KILN_ERR_ARG, "kiln_linear", "weight");

    TU_ASSERT_ERROR(kiln_conv2d(x4, w4, NULL, 0, 1, 0, 0, 1, 1, 1), KILN_ERR_ARG, "kiln_conv2d",
                    "[2,3,8,8]", "[4,3,3,3]");
    TU_ASSERT_ERROR(kiln_conv2d(x4, w4, NULL, 1, 1, 0, 0, 1, 1, 2), KILN_ERR_SHAPE, "kiln_conv2d",
                    "[2,3,8,8]", "groups");
    TU_ASSERT_ERROR(
        kiln_conv2d(x4, kiln_ones(ctx, KILN_F32, TU_S(4, 3, 9, 3)), NULL, 1, 1, 0, 0, 1, 1, 1),
        KILN_ERR_SHAPE, "kiln_conv2d", "[4,3,9,3]");
    TU_ASSERT_ERROR(kiln_conv2d(x4, w4, NULL, 1, 1, 0, 0, 4, 4, 1), KILN_ERR_SHAPE, "kiln_conv2d",
                    "dilation");
    TU_ASSERT_ERROR(kiln_conv2d(m, w4, NULL, 1, 1, 0, 0, 1, 1, 1), KILN_ERR_SHAPE, "kiln_conv2d",
                    "[4,5]");
    TU_ASSERT_ERROR(kiln_conv2d(x4, w4, kiln_ones(ctx, KILN_F32, TU_S(3)), 1, 1, 0, 0, 1, 1, 1),
                    KILN_ERR_SHAPE, "kiln_conv2d", "bias", "[3]");

    TU_ASSERT_ERROR(kiln_max_pool2d(x4, 3, 3, 1, 1, 2, 0), KILN_ERR_ARG, "kiln_max_pool2d",
                    "[2,3,8,8]");
    TU_ASSERT_ERROR(kiln_avg_pool2d(x4, 2, 2, 0, 1, 0, 0), KILN_ERR_ARG, "kiln_avg_pool2d");
    TU_ASSERT_ERROR(kiln_avg_pool2d(m, 2, 2, 1, 1, 0, 0), KILN_ERR_SHAPE, "kiln_avg_pool2d",
                    "[4,5]");
    TU_ASSERT_ERROR(kiln_max_pool2d(x4, 9, 2, 1, 1, 0, 0), KILN_ERR_SHAPE, "kiln_max_pool2d");

    TU_ASSERT_ERROR(kiln_layer_norm(m, 3, NULL, NULL, 1e-5), KILN_ERR_ARG, "kiln_layer_norm",
                    "[4,5]");
    TU_ASSERT_ERROR(kiln_layer_norm(m, 1, kiln_ones(ctx, KILN_F32, TU_S(4)), NULL, 1e-5),
                    KILN_ERR_SHAPE, "kiln_layer_norm", "weight", "[4]");
    TU_ASSERT_ERROR(kiln_layer_norm(m, 1, NULL, NULL, -1), KILN_ERR_ARG, "kiln_layer_norm", "eps");

    kiln_tensor *c4 = kiln_ones(ctx, KILN_F32, TU_S(4)), *c3 = kiln_ones(ctx, KILN_F32, TU_S(3));
    TU_ASSERT_ERROR(kiln_batch_norm(x4, NULL, NULL, NULL, NULL, false, 0.1, 1e-5), KILN_ERR_ARG,
                    "kiln_batch_norm", "running_mean");
    TU_ASSERT_ERROR(kiln_batch_norm(x4, c4, c3, NULL, NULL, false, 0.1, 1e-5), KILN_ERR_SHAPE,
                    "kiln_batch_norm", "running_mean", "[4]", "[2,3,8,8]");
    TU_ASSERT_ERROR(kiln_batch_norm(x4, c3, c3, NULL, NULL, true, 1.5, 1e-5), KILN_ERR_ARG,
                    "kiln_batch_norm", "momentum");
    TU_ASSERT_ERROR(
        kiln_batch_norm(kiln_ones(ctx, KILN_F32, TU_S(1, 3)), c3, c3, NULL, NULL, true, 0.1, 1e-5),
        KILN_ERR_SHAPE, "kiln_batch_norm", "[1,3]");

    TU_ASSERT_ERROR(kiln_softmax(m, 2), KILN_ERR_ARG, "kiln_softmax", "[4,5]");
    TU_ASSERT_ERROR(kiln_log_softmax(i32, 0), KILN_ERR_DTYPE, "kiln_log_softmax", "i32");

    TU_ASSERT_ERROR(kiln_cross_entropy(m, kiln_zeros(ctx, KILN_F32, TU_S(4)), KILN_REDUCTION_MEAN),
                    KILN_ERR_DTYPE, "kiln_cross_entropy", "f32");
    TU_ASSERT_ERROR(kiln_cross_entropy(m, kiln_zeros(ctx, KILN_I64, TU_S(5)), KILN_REDUCTION_SUM),
                    KILN_ERR_SHAPE, "kiln_cross_entropy", "[4,5]", "[5]");
    TU_ASSERT_ERROR(kiln_cross_entropy(m, i32, (kiln_reduction)7), KILN_ERR_ARG,
                    "kiln_cross_entropy", "reduction");
    TU_ASSERT_ERROR(kiln_mse_loss(m, c4, KILN_REDUCTION_MEAN), KILN_ERR_SHAPE, "kiln_mse_loss",
                    "[4,5]", "[4]");

    TU_ASSERT_ERROR(kiln_dropout(m, 1.0, 1, true), KILN_ERR_ARG, "kiln_dropout", "[4,5]");
    TU_ASSERT_ERROR(kiln_dropout(m, -0.1, 1, false), KILN_ERR_ARG, "kiln_dropout");
    TU_ASSERT_ERROR(kiln_dropout(m, NAN, 1, true), KILN_ERR_ARG, "kiln_dropout");
    TU_ASSERT_ERROR(kiln_gelu_tanh(i32), KILN_ERR_DTYPE, "kiln_gelu_tanh", "[4]");

    TU_ASSERT_ERROR(kiln_embedding(m, m), KILN_ERR_DTYPE, "kiln_embedding", "f32");
    TU_ASSERT_ERROR(kiln_embedding(i32, c4), KILN_ERR_SHAPE, "kiln_embedding", "[4]");

    kiln_tensor *q = kiln_ones(ctx, KILN_F32, TU_S(2, 3, 4));
    TU_ASSERT_ERROR(kiln_scaled_dot_product_attention(q, kiln_ones(ctx, KILN_F32, TU_S(2, 5, 3)),
                                                      kiln_ones(ctx, KILN_F32, TU_S(2, 5, 3)),
                                                      false, 0),
                    KILN_ERR_SHAPE, "kiln_scaled_dot_product_attention", "[2,3,4]", "[2,5,3]");
    TU_ASSERT_ERROR(kiln_scaled_dot_product_attention(q, q, q, true, INFINITY), KILN_ERR_ARG,
                    "kiln_scaled_dot_product_attention", "scale");

    /* an error handle passes its error on */
    kiln_tensor *bad = kiln_reshape(m, TU_S(7));
    TU_ASSERT_ERROR(kiln_softmax(bad, 0), KILN_ERR_SHAPE, "kiln_reshape");
    TU_ASSERT_ERROR(kiln_conv2d(x4, w4, bad, 1, 1, 0, 0, 1, 1, 1), KILN_ERR_SHAPE, "kiln_reshape");
    TU_ASSERT_ERROR(kiln_cross_entropy(m, bad, KILN_REDUCTION_MEAN), KILN_ERR_SHAPE,
                    "kiln_reshape");
    cr_assert_null(kiln_softmax(NULL, 0));
    cr_assert_null(kiln_linear(NULL, NULL, NULL));
}

/* ---- kernel counts ---- */

/* The kernels that computing t runs, its inputs realized beforehand. */
static int64_t kernels_for(kiln_ctx *ctx, kiln_tensor *t) {
    int64_t before = kiln_ctx_stats(ctx).kernels;
    cr_assert_eq(kiln_realize(t), KILN_OK, "%s", kiln_error_message(t));
    return kiln_ctx_stats(ctx).kernels - before;
}

Test(nn_kernels, lazy_counts) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    cr_assert_not_null(ctx);
    kiln_tensor *x = kiln_randn(ctx, KILN_F32, TU_S(16, 40), 1);
    kiln_tensor *img = kiln_randn(ctx, KILN_F32, TU_S(2, 3, 10, 10), 4);
    kiln_tensor *q = kiln_randn(ctx, KILN_F32, TU_S(2, 8, 16), 7);
    kiln_tensor *g = kiln_randn(ctx, KILN_F32, TU_S(40), 2),
                *b = kiln_randn(ctx, KILN_F32, TU_S(40), 3);
    kiln_tensor *w = kiln_randn(ctx, KILN_F32, TU_S(8, 3, 3, 3), 5);
    kiln_tensor *wb = kiln_randn(ctx, KILN_F32, TU_S(8), 6);
    kiln_tensor *t = kiln_zeros(ctx, KILN_I64, TU_S(16));
    kiln_tensor *inputs[] = {x, img, q, g, b, w, wb, t};
    for (int i = 0; i < 8; i++)
        cr_assert_eq(kiln_realize(inputs[i]), KILN_OK);
    int64_t softmax = kernels_for(ctx, kiln_softmax(x, 1));
    int64_t layer_norm = kernels_for(ctx, kiln_layer_norm(x, 1, g, b, 1e-5));
    int64_t ce = kernels_for(ctx, kiln_cross_entropy(x, t, KILN_REDUCTION_MEAN));
    int64_t conv = kernels_for(ctx, kiln_conv2d(img, w, wb, 1, 1, 1, 1, 1, 1, 1));
    int64_t sdpa = kernels_for(ctx, kiln_scaled_dot_product_attention(q, q, q, true, 0));
    fprintf(stderr,
            "nn kernels (lazy): softmax %lld, layer_norm %lld, cross_entropy %lld, conv2d %lld, "
            "sdpa %lld\n",
            (long long)softmax, (long long)layer_norm, (long long)ce, (long long)conv,
            (long long)sdpa);
    cr_assert_eq(softmax, 1);
    cr_assert_eq(layer_norm, 1);
    /* Upper bounds at what the scheduler does today, so that a regression
     * shows: cross_entropy is max, sum of exp, the target's logit, and the
     * mean's sum and division; conv2d the im2col gather and the matmul with
     * the bias as its epilogue; attention two matmuls and the softmax row
     * kernel between them. */
    cr_assert_leq(ce, 5);
    cr_assert_leq(conv, 2);
    cr_assert_leq(sdpa, 3);
    kiln_ctx_free(ctx);
}

/* ---- gradients: kiln_gradients against central differences of the
 * float64 references above ---- */

#define GC_MAXIN 4

/* A reference as a function of its float inputs: in[k] holds input k. */
typedef void (*gc_ref)(double *const *in, const void *cfg, double *out);

typedef struct gc_input {
    kiln_tensor *t;
    double *v;
    int64_t n;
} gc_input;

/* Checks d(sum(y * seed))/d input against central differences of f, with a
 * random seed; reports the worst relative error. */
static void grad_check(kiln_ctx *ctx, tu_rng *r, const char *name, kiln_tensor *y, int nin,
                       const gc_input *in, gc_ref f, const void *cfg) {
    TU_ASSERT_OK(y);
    int64_t ny = kiln_numel(y);
    double *seed = malloc(sizeof(double) * (size_t)ny), *out = malloc(sizeof(double) * (size_t)ny);
    kiln_tensor *ts = tu_rand_tensor(ctx, r, KILN_F64, kiln_ndim(y), kiln_shape(y), -1, 1, seed);
    kiln_tensor *xs[GC_MAXIN], *g[GC_MAXIN];
    double *vals[GC_MAXIN];
    for (int k = 0; k < nin; k++) {
        xs[k] = in[k].t;
        vals[k] = in[k].v;
    }
    kiln_status st = kiln_gradients(y, ts, nin, xs, g);
    cr_assert_eq(st, KILN_OK, "[%s] %s: kiln_gradients: %s", tu_exec_name(), name,
                 kiln_ctx_last_error(ctx));
    const double h = 1e-5;
    double worst = 0;
    for (int k = 0; k < nin; k++) {
        double *got = malloc(sizeof(double) * (size_t)in[k].n);
        TU_READ(g[k], got, in[k].n);
        for (int64_t i = 0; i < in[k].n; i++) {
            double keep = vals[k][i], fp = 0, fm = 0;
            vals[k][i] = keep + h;
            f(vals, cfg, out);
            for (int64_t j = 0; j < ny; j++)
                fp += out[j] * seed[j];
            vals[k][i] = keep - h;
            f(vals, cfg, out);
            for (int64_t j = 0; j < ny; j++)
                fm += out[j] * seed[j];
            vals[k][i] = keep;
            double fd = (fp - fm) / (2 * h);
            double err = fabs(got[i] - fd) / fmax(fmax(fabs(fd), fabs(got[i])), 1e-3);
            cr_assert(err < 1e-6,
                      "[%s] %s: input %d element %lld: gradient %.10g, finite "
                      "difference %.10g",
                      tu_exec_name(), name, k, (long long)i, got[i], fd);
            worst = fmax(worst, err);
        }
        free(got);
    }
    if (tu_cur_exec()->dev == KILN_CPU && tu_cur_exec()->mode == KILN_LAZY)
        fprintf(stderr, "nn gradient check %-22s worst relative error %.2e\n", name, worst);
    free(seed);
    free(out);
}

/* Inputs of size n, uniform in [lo, hi], f64. */
#define GC_IN(var, n, lo, hi, ...)                                                                 \
    static double var##_v[n];                                                                      \
    gc_input var = {tu_rand_tensor(ctx, &r, KILN_F64, TU_S(__VA_ARGS__), lo, hi, var##_v),         \
                    var##_v, n}

static void gc_linear(double *const *in, const void *cfg, double *out) {
    (void)cfg;
    ref_linear(in[0], 3, 4, in[1], 5, in[2], out);
}

static void gc_conv(double *const *in, const void *cfg, double *out) {
    ref_conv(cfg, in[0], in[1], in[2], out);
}

typedef struct pool_cfg {
    bool is_max;
    int64_t planes, h, w, kh, kw, sh, sw, ph, pw;
} pool_cfg;

static void gc_pool(double *const *in, const void *cfg, double *out) {
    const pool_cfg *p = cfg;
    ref_pool(p->is_max, in[0], p->planes, p->h, p->w, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw,
             out);
}

static void gc_layer_norm(double *const *in, const void *cfg, double *out) {
    (void)cfg;
    ref_layer_norm(in[0], 3, 6, in[1], in[2], 1e-5, out);
}

/* Training batch norm of [2, 3, 4] with batch statistics. */
static void gc_batch_norm(double *const *in, const void *cfg, double *out) {
    (void)cfg;
    double mean[3] = {0}, var[3] = {0};
    for (int c = 0; c < 3; c++) {
        for (int n = 0; n < 2; n++)
            for (int s = 0; s < 4; s++)
                mean[c] += in[0][(n * 3 + c) * 4 + s] / 8;
        for (int n = 0; n < 2; n++)
            for (int s = 0; s < 4; s++)
                var[c] += pow(in[0][(n * 3 + c) * 4 + s] - mean[c], 2) / 8;
    }
    ref_batch_norm(in[0], 2, 3, 4, mean, var, in[1], in[2], 1e-5, out);
}

static void gc_softmax(double *const *in, const void *cfg, double *out) {
    ref_softmax(in[0], 3, 5, 2, *(const bool *)cfg, out);
}

static void gc_cross_entropy(double *const *in, const void *cfg, double *out) {
    out[0] = ref_cross_entropy(in[0], cfg, 4, 5, true, NULL);
}

static void gc_mse(double *const *in, const void *cfg, double *out) {
    (void)cfg;
    for (int i = 0; i < 12; i++)
        out[i] = (in[0][i] - in[1][i]) * (in[0][i] - in[1][i]);
}

static void gc_gelu_tanh(double *const *in, const void *cfg, double *out) {
    (void)cfg;
    for (int i = 0; i < 12; i++)
        out[i] = gelu_tanh_ref(in[0][i]);
}

static void gc_hardswish(double *const *in, const void *cfg, double *out) {
    (void)cfg;
    for (int i = 0; i < 12; i++)
        out[i] = hardswish_ref(in[0][i]);
}

static void gc_dropout(double *const *in, const void *cfg, double *out) {
    (void)cfg;
    for (int i = 0; i < 40; i++)
        out[i] =
            graph_rand_value(GRAPH_RAND, KILN_F32, 9, (uint64_t)i) >= 0.25f ? in[0][i] / 0.75 : 0;
}

static void gc_embedding(double *const *in, const void *cfg, double *out) {
    const int64_t *idx = cfg;
    for (int i = 0; i < 5; i++)
        for (int d = 0; d < 3; d++)
            out[i * 3 + d] = in[0][idx[i] * 3 + d];
}

static void gc_sdpa(double *const *in, const void *cfg, double *out) {
    ref_sdpa(in[0], in[1], in[2], 2, 3, 4, 2, 3, *(const bool *)cfg, 1 / sqrt(2.0), out);
}

TU_TEST(nn_grad, finite_differences) {
    TU_RNG(r);
    {
        GC_IN(x, 12, -1, 1, 3, 4);
        GC_IN(w, 20, -1, 1, 5, 4);
        GC_IN(b, 5, -1, 1, 5);
        grad_check(ctx, &r, "linear", kiln_linear(x.t, w.t, b.t), 3, (gc_input[]){x, w, b},
                   gc_linear, NULL);
    }
    {
        static const conv_cfg k = {2, 4, 5, 5, 2, 3, 3, 2, 1, 1, 1, 1, 2, 2};
        GC_IN(x, 200, -1, 1, 2, 4, 5, 5);
        GC_IN(w, 36, -1, 1, 2, 2, 3, 3);
        GC_IN(b, 2, -1, 1, 2);
        grad_check(ctx, &r, "conv2d", kiln_conv2d(x.t, w.t, b.t, 2, 1, 1, 1, 1, 2, 2), 3,
                   (gc_input[]){x, w, b}, gc_conv, &k);
    }
    {
        GC_IN(x, 72, -1, 1, 2, 6, 6);
        static const pool_cfg mp = {true, 2, 6, 6, 3, 3, 2, 2, 1, 1};
        static const pool_cfg ap = {false, 2, 6, 6, 3, 3, 2, 2, 1, 1};
        grad_check(ctx, &r, "max_pool2d", kiln_max_pool2d(x.t, 3, 3, 2, 2, 1, 1), 1, &x, gc_pool,
                   &mp);
        grad_check(ctx, &r, "avg_pool2d", kiln_avg_pool2d(x.t, 3, 3, 2, 2, 1, 1), 1, &x, gc_pool,
                   &ap);
    }
    {
        /* tiled windows, the last row and column cut off */
        GC_IN(x, 2 * 7 * 5, -1, 1, 2, 7, 5);
        static const pool_cfg mp = {true, 2, 7, 5, 2, 2, 2, 2, 0, 0};
        static const pool_cfg ap = {false, 2, 7, 5, 3, 2, 3, 2, 0, 0};
        grad_check(ctx, &r, "max_pool2d tiled", kiln_max_pool2d(x.t, 2, 2, 2, 2, 0, 0), 1, &x,
                   gc_pool, &mp);
        grad_check(ctx, &r, "avg_pool2d tiled", kiln_avg_pool2d(x.t, 3, 2, 3, 2, 0, 0), 1, &x,
                   gc_pool, &ap);
    }
    {
        GC_IN(x, 18, -2, 2, 3, 6);
        GC_IN(w, 6, 0.5, 1.5, 6);
        GC_IN(b, 6, -1, 1, 6);
        grad_check(ctx, &r, "layer_norm", kiln_layer_norm(x.t, 1, w.t, b.t, 1e-5), 3,
                   (gc_input[]){x, w, b}, gc_layer_norm, NULL);
    }
    {
        GC_IN(x, 24, -2, 2, 2, 3, 4);
        GC_IN(w, 3, 0.5, 1.5, 3);
        GC_IN(b, 3, -1, 1, 3);
        kiln_tensor *rm = kiln_zeros(ctx, KILN_F64, TU_S(3)),
                    *rv = kiln_ones(ctx, KILN_F64, TU_S(3));
        grad_check(ctx, &r, "batch_norm", kiln_batch_norm(x.t, rm, rv, w.t, b.t, true, 0.1, 1e-5),
                   3, (gc_input[]){x, w, b}, gc_batch_norm, NULL);
        /* The running statistics are state: nothing flows back from them. */
        kiln_tensor *gx;
        cr_assert_eq(kiln_gradients(rm, NULL, 1, &x.t, &gx), KILN_OK, "%s",
                     kiln_ctx_last_error(ctx));
        static const double zeros[24];
        TU_EXPECT_EXACT(gx, KILN_F64, zeros, 24);
    }
    {
        GC_IN(x, 30, -3, 3, 3, 5, 2);
        static const bool no = false, yes = true;
        grad_check(ctx, &r, "softmax", kiln_softmax(x.t, 1), 1, &x, gc_softmax, &no);
        grad_check(ctx, &r, "log_softmax", kiln_log_softmax(x.t, 1), 1, &x, gc_softmax, &yes);
    }
    {
        GC_IN(x, 20, -3, 3, 4, 5);
        static const int64_t t[4] = {3, 0, 4, 3};
        grad_check(
            ctx, &r, "cross_entropy",
            kiln_cross_entropy(x.t, tu_tensor_i64(ctx, KILN_I64, TU_S(4), t), KILN_REDUCTION_MEAN),
            1, &x, gc_cross_entropy, t);
    }
    {
        GC_IN(a, 12, -2, 2, 3, 4);
        GC_IN(b, 12, -2, 2, 3, 4);
        grad_check(ctx, &r, "mse_loss", kiln_mse_loss(a.t, b.t, KILN_REDUCTION_NONE), 2,
                   (gc_input[]){a, b}, gc_mse, NULL);
        grad_check(ctx, &r, "gelu_tanh", kiln_gelu_tanh(a.t), 1, &a, gc_gelu_tanh, NULL);
    }
    {
        GC_IN(a, 12, -5, 5, 3, 4);
        grad_check(ctx, &r, "hardswish", kiln_hardswish(a.t), 1, &a, gc_hardswish, NULL);
    }
    {
        GC_IN(x, 40, -2, 2, 5, 8);
        grad_check(ctx, &r, "dropout", kiln_dropout(x.t, 0.25, 9, true), 1, &x, gc_dropout, NULL);
    }
    {
        GC_IN(w, 12, -2, 2, 4, 3);
        static const int64_t idx[5] = {1, 3, 1, 0, 2};
        grad_check(ctx, &r, "embedding",
                   kiln_embedding(tu_tensor_i64(ctx, KILN_I32, TU_S(5), idx), w.t), 1, &w,
                   gc_embedding, idx);
    }
    {
        GC_IN(q, 12, -1, 1, 2, 3, 2);
        GC_IN(k, 16, -1, 1, 2, 4, 2);
        GC_IN(v, 24, -1, 1, 2, 4, 3);
        static const bool no = false, yes = true;
        grad_check(ctx, &r, "sdpa", kiln_scaled_dot_product_attention(q.t, k.t, v.t, false, 0), 3,
                   (gc_input[]){q, k, v}, gc_sdpa, &no);
        grad_check(ctx, &r, "sdpa causal",
                   kiln_scaled_dot_product_attention(q.t, k.t, v.t, true, 0), 3,
                   (gc_input[]){q, k, v}, gc_sdpa, &yes);
    }
}

/* conv1d, max_pool1d and avg_pool1d against direct loops. */
TU_TEST(nn, conv1d_and_pool1d) {
    TU_RNG(r);
    enum { N = 2, C = 4, L = 9, OC = 6, K = 3, G = 2 };
    double x[N * C * L], w[OC * (C / G) * K], b[OC];
    kiln_tensor *xt = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(N, C, L), -2, 2, x);
    kiln_tensor *wt = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(OC, C / G, K), -1, 1, w);
    kiln_tensor *bt = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(OC), -1, 1, b);
    /* stride 2, padding 2, dilation 2: OL = (9 + 4 - 5) / 2 + 1 = 5 */
    const int stride = 2, pad = 2, dil = 2, OL = (L + 2 * pad - dil * (K - 1) - 1) / stride + 1;
    double want[N * OC * 5];
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++)
            for (int l = 0; l < OL; l++) {
                double s = b[o];
                int g = o / (OC / G);
                for (int c = 0; c < C / G; c++)
                    for (int k = 0; k < K; k++) {
                        int at = l * stride - pad + k * dil;
                        if (at >= 0 && at < L)
                            s += w[(o * (C / G) + c) * K + k] * x[(n * C + g * (C / G) + c) * L + at];
                    }
                want[(n * OC + o) * OL + l] = s;
            }
    kiln_tensor *y = kiln_conv1d(xt, wt, bt, stride, pad, dil, G);
    TU_ASSERT_SHAPE(y, N, OC, OL);
    TU_EXPECT(y, KILN_F64, want, N * OC * OL);
    /* pools: kernel 3, stride 2, padding 1: OL = (9 + 2 - 3) / 2 + 1 = 5 */
    double mx[N * C * 5], av[N * C * 5];
    for (int i = 0; i < N * C; i++)
        for (int l = 0; l < 5; l++) {
            double m = -INFINITY, s = 0;
            for (int k = 0; k < 3; k++) {
                int at = l * 2 - 1 + k;
                if (at >= 0 && at < L) {
                    m = fmax(m, x[i * L + at]);
                    s += x[i * L + at];
                }
            }
            mx[i * 5 + l] = m;
            av[i * 5 + l] = s / 3;
        }
    TU_EXPECT(kiln_max_pool1d(xt, 3, 2, 1), KILN_F64, mx, N * C * 5);
    TU_EXPECT(kiln_avg_pool1d(xt, 3, 2, 1), KILN_F64, av, N * C * 5);
    /* errors name the 1-d op */
    TU_ASSERT_ERROR(kiln_conv1d(kiln_ones(ctx, KILN_F64, TU_S(2, 4)), wt, NULL, 1, 0, 1, 1),
                    KILN_ERR_SHAPE, "kiln_conv1d");
    TU_ASSERT_ERROR(kiln_conv1d(xt, wt, NULL, 0, 0, 1, G), KILN_ERR_ARG, "kiln_conv1d");
    TU_ASSERT_ERROR(kiln_max_pool1d(xt, 3, 2, 2), KILN_ERR_ARG, "kiln_max_pool1d");
}
