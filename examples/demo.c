/* demo.c — a tour of kiln's public API as a user sees it: the forward pass of
 * a small MLP on random data, a softmax built from primitives, reductions and
 * views, each result checked against the same computation done in plain C.
 *
 * The kiln_* calls that build the network only record nodes of a lazy graph;
 * nothing is computed until kiln_to_host or kiln_item asks for a value. */
#include <kiln.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { BATCH = 4, IN = 8, HIDDEN = 16, OUT = 5 };

static int failures;

static void check_that(const char *what, bool ok, const char *detail)
{
    printf("  %-40s %-14s %s\n", what, detail, ok ? "ok" : "FAILED");
    if (!ok)
        failures++;
}

static void check(const char *what, double error, double tolerance)
{
    char detail[32];
    snprintf(detail, sizeof detail, "error %.1e", error);
    check_that(what, error <= tolerance, detail); /* false for NaN */
}

/* Reads a float tensor of n elements back into doubles. */
static void fetch(kiln_tensor *t, double *dst, size_t n)
{
    float *buf = malloc(n * sizeof *buf);
    kiln_status status = buf ? kiln_to_host(t, buf, n * sizeof *buf) : KILN_ERR_OOM;
    if (status != KILN_OK) {
        fprintf(stderr, "demo: reading a result failed: %s: %s\n",
                kiln_status_string(status), t ? kiln_error_message(t) : "");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = buf[i];
    free(buf);
}

static double max_abs_diff(const double *a, const double *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (isnan(d))
            return INFINITY;
        if (d > worst)
            worst = d;
    }
    return worst;
}

static double gelu_ref(double x) { return 0.5 * x * (1 + erf(x / sqrt(2))); }
static double relu_ref(double x) { return x > 0 ? x : 0; }

/* y[n×m] = act(x[n×k] · w[k×m] + b[m]) in float64. */
static void dense_ref(const double *x, const double *w, const double *b, double *y, int n,
                      int k, int m, double (*act)(double))
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double acc = b[j];
            for (int l = 0; l < k; l++)
                acc += x[i * k + l] * w[l * m + j];
            y[i * m + j] = act ? act(acc) : acc;
        }
}

static const char *device_name(kiln_device dev)
{
    switch (dev) {
    case KILN_CPU: return "cpu";
    case KILN_CUDA: return "cuda";
    case KILN_REF: return "ref";
    default: return "?";
    }
}

int main(void)
{
    kiln_ctx *ctx = kiln_ctx_new(KILN_DEVICE_DEFAULT);
    if (!ctx) {
        fprintf(stderr, "demo: no context: %s\n", kiln_last_ctx_error());
        return 1;
    }
    printf("kiln %d.%d.%d demo on device %s: an MLP %d -> %d -> %d -> %d, batch %d\n",
           KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH,
           device_name(kiln_ctx_device(ctx)), IN, HIDDEN, HIDDEN, OUT, BATCH);

    /* Parameters from the Philox generator: the same seed gives the same
     * numbers on every device. Weights are scaled by 1/sqrt(fan-in) so that
     * activations stay near unit size. */
    const int64_t x_dims[] = {BATCH, IN};
    const int64_t w1_dims[] = {IN, HIDDEN}, w2_dims[] = {HIDDEN, HIDDEN}, w3_dims[] = {HIDDEN, OUT};
    const int64_t b1_dims[] = {HIDDEN}, b2_dims[] = {HIDDEN}, b3_dims[] = {OUT};
    kiln_tensor *x = kiln_randn(ctx, KILN_F32, 2, x_dims, 1);
    kiln_tensor *w1 = kiln_mul_scalar(kiln_randn(ctx, KILN_F32, 2, w1_dims, 2), 1 / sqrt(IN));
    kiln_tensor *w2 = kiln_mul_scalar(kiln_randn(ctx, KILN_F32, 2, w2_dims, 3), 1 / sqrt(HIDDEN));
    kiln_tensor *w3 = kiln_mul_scalar(kiln_randn(ctx, KILN_F32, 2, w3_dims, 4), 1 / sqrt(HIDDEN));
    kiln_tensor *b1 = kiln_mul_scalar(kiln_rand(ctx, KILN_F32, 1, b1_dims, 5), 0.1);
    kiln_tensor *b2 = kiln_mul_scalar(kiln_rand(ctx, KILN_F32, 1, b2_dims, 6), 0.1);
    kiln_tensor *b3 = kiln_zeros(ctx, KILN_F32, 1, b3_dims);

    /* The intermediate handles of the forward pass live in a scope and go
     * when it ends; the results are kept. Each bias [m] broadcasts over the
     * batch of the [n, m] product. */
    kiln_scope_begin(ctx);
    kiln_tensor *h1 = kiln_gelu(kiln_add(kiln_matmul(x, w1), b1));
    kiln_tensor *h2 = kiln_relu(kiln_add(kiln_matmul(h1, w2), b2));
    kiln_tensor *logits = kiln_keep(kiln_add(kiln_matmul(h2, w3), b3));

    /* Softmax over the classes from primitives; subtracting each row's
     * maximum keeps exp from overflowing. */
    const int classes[] = {1};
    kiln_tensor *e = kiln_exp(kiln_sub(logits, kiln_max(logits, 1, classes, true)));
    kiln_tensor *probs = kiln_keep(kiln_div(e, kiln_sum(e, 1, classes, true)));
    kiln_scope_end(ctx);

    /* Sync point: the graph behind probs is computed here. */
    double p[BATCH * OUT];
    fetch(probs, p, BATCH * OUT);

    /* The same network in plain C, from the parameters kiln generated. */
    double xs[BATCH * IN], w1s[IN * HIDDEN], w2s[HIDDEN * HIDDEN], w3s[HIDDEN * OUT];
    double b1s[HIDDEN], b2s[HIDDEN], b3s[OUT];
    fetch(x, xs, BATCH * IN);
    fetch(w1, w1s, IN * HIDDEN);
    fetch(w2, w2s, HIDDEN * HIDDEN);
    fetch(w3, w3s, HIDDEN * OUT);
    fetch(b1, b1s, HIDDEN);
    fetch(b2, b2s, HIDDEN);
    fetch(b3, b3s, OUT);
    double h1r[BATCH * HIDDEN], h2r[BATCH * HIDDEN], lr[BATCH * OUT], pr[BATCH * OUT];
    dense_ref(xs, w1s, b1s, h1r, BATCH, IN, HIDDEN, gelu_ref);
    dense_ref(h1r, w2s, b2s, h2r, BATCH, HIDDEN, HIDDEN, relu_ref);
    dense_ref(h2r, w3s, b3s, lr, BATCH, HIDDEN, OUT, NULL);
    for (int i = 0; i < BATCH; i++) {
        double top = lr[i * OUT], total = 0;
        for (int j = 1; j < OUT; j++)
            top = fmax(top, lr[i * OUT + j]);
        for (int j = 0; j < OUT; j++)
            total += pr[i * OUT + j] = exp(lr[i * OUT + j] - top);
        for (int j = 0; j < OUT; j++)
            pr[i * OUT + j] /= total;
    }

    /* Reductions: the predicted class of each row, and sums and means that
     * a softmax fixes in advance. */
    int64_t pick[BATCH];
    kiln_tensor *argmax = kiln_argmax(probs, 1, classes, false);
    if (kiln_to_host(argmax, pick, sizeof pick) != KILN_OK) {
        fprintf(stderr, "demo: argmax failed: %s\n", kiln_error_message(argmax));
        return 1;
    }
    double row_sums[BATCH], ones[BATCH];
    for (int i = 0; i < BATCH; i++)
        ones[i] = 1;
    fetch(kiln_sum(probs, 1, classes, false), row_sums, BATCH);
    double mean;
    kiln_tensor *mean_t = kiln_mean(probs, 0, NULL, false);
    if (kiln_item(mean_t, &mean) != KILN_OK) {
        fprintf(stderr, "demo: the mean failed: %s\n", kiln_error_message(mean_t));
        return 1;
    }

    printf("class probabilities:\n");
    for (int i = 0; i < BATCH; i++) {
        printf("  row %d:", i);
        for (int j = 0; j < OUT; j++)
            printf(" %.4f", p[i * OUT + j]);
        printf("  -> class %lld\n", (long long)pick[i]);
    }

    /* Views: no copies, only index arithmetic over probs and logits. */
    double pt[OUT * BATCH], ptr[OUT * BATCH];
    fetch(kiln_transpose(probs, 0, 1), pt, OUT * BATCH);
    for (int i = 0; i < BATCH; i++)
        for (int j = 0; j < OUT; j++)
            ptr[j * BATCH + i] = pr[i * OUT + j];

    enum { EVEN = (OUT + 1) / 2 };
    double le[BATCH * EVEN], ler[BATCH * EVEN];
    fetch(kiln_slice(logits, 1, 0, KILN_END, 2), le, BATCH * EVEN);
    for (int i = 0; i < BATCH; i++)
        for (int j = 0; j < EVEN; j++)
            ler[i * EVEN + j] = lr[i * OUT + 2 * j];

    /* Rows 1..3 followed by row 0: the batch rotated by one. */
    kiln_tensor *parts[] = {kiln_slice(probs, 0, 1, KILN_END, 1), kiln_slice(probs, 0, 0, 1, 1)};
    double rot[BATCH * OUT], rotr[BATCH * OUT];
    fetch(kiln_cat(2, parts, 0), rot, BATCH * OUT);
    for (int i = 0; i < BATCH; i++)
        for (int j = 0; j < OUT; j++)
            rotr[i * OUT + j] = pr[((i + 1) % BATCH) * OUT + j];

    printf("checks against plain C in float64:\n");
    check("softmax(mlp(x))", max_abs_diff(p, pr, BATCH * OUT), 1e-4);
    double pick_gap = 0;
    for (int i = 0; i < BATCH; i++) {
        double best = pr[i * OUT];
        for (int j = 1; j < OUT; j++)
            best = fmax(best, pr[i * OUT + j]);
        bool in_range = pick[i] >= 0 && pick[i] < OUT;
        /* A near tie may go either way in float32. */
        pick_gap = fmax(pick_gap, in_range ? best - pr[i * OUT + pick[i]] : INFINITY);
    }
    check("argmax over the classes", pick_gap, 1e-6);
    check("each row sums to 1", max_abs_diff(row_sums, ones, BATCH), 1e-5);
    check("mean of all probabilities is 1/classes", fabs(mean - 1.0 / OUT), 1e-6);
    check("transpose(probs)", max_abs_diff(pt, ptr, OUT * BATCH), 1e-4);
    check("logits[:, ::2]", max_abs_diff(le, ler, BATCH * EVEN), 1e-4);
    check("cat(probs[1:], probs[:1])", max_abs_diff(rot, rotr, BATCH * OUT), 1e-4);

    /* A bad op does not abort: it gives a handle that carries the error. */
    kiln_tensor *bad = kiln_matmul(x, x);
    printf("x @ x with x [%d, %d]: %s: %s\n", BATCH, IN, kiln_status_string(kiln_error(bad)),
           kiln_error_message(bad));
    check_that("x @ x is a shape error", kiln_error(bad) == KILN_ERR_SHAPE, "");

    kiln_ctx_free(ctx);
    printf("%s\n", failures ? "demo: some checks FAILED" : "demo: all checks passed");
    return failures ? 1 : 0;
}
