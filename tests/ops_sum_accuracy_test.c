/* ops_sum_accuracy_test.c — float sums over 2^20 elements, where a float32
 * accumulator is visibly wrong and kiln's double accumulation is not: each
 * result is checked against a long-double sum, and each data set is first
 * shown to defeat a float32 accumulator, so that the test keeps its teeth. */
#include "test_util.h"

#define N ((int64_t)1 << 20)

static long double sum_ld(const double *x, int64_t n) {
    long double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    return s;
}

/* The float32 accumulators a broken kernel might use: one running sum, and
 * partial running sums over `parts` equal chunks combined in order. */
static float sum_f32(const double *x, int64_t n, int64_t parts) {
    float total = 0;
    for (int64_t p = 0; p < parts; p++) {
        volatile float s = 0;
        for (int64_t i = p * (n / parts); i < (p + 1) * (n / parts); i++)
            s += (float)x[i];
        total += s;
    }
    return total;
}

static double rel(double got, long double want) {
    return (double)fabsl(((long double)got - want) / want);
}

/* The data defeats every float32 accumulator tried (by more than 1e-4
 * relative), and kiln's f32 sum and mean are within 2 float ulps. */
static void check_sum(kiln_ctx *ctx, const double *x) {
    long double want = sum_ld(x, N);
    const int64_t parts[] = {1, 16, 256, 4096};
    for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++)
        cr_assert(rel(sum_f32(x, N, parts[p]), want) > 1e-4,
                  "float32 in %lld parts is right: the data lost its point", (long long)parts[p]);
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, 1, TU_DIMS(N), x);
    double got = TU_ITEM(kiln_sum(t, 0, NULL, false));
    cr_assert(rel(got, want) <= 2.4e-7, "[%s] sum %.9g, want %.9Lg (rel %.3g)", tu_exec_name(),
              got, want, rel(got, want));
    double mean = TU_ITEM(kiln_mean(t, 0, NULL, false));
    cr_assert(rel(mean, want / N) <= 2.4e-7, "[%s] mean %.9g, want %.9Lg", tu_exec_name(), mean,
              want / N);
    /* the same sum as the one row of a [1, N] tensor and as two rows */
    kiln_tensor *rows = kiln_reshape(t, TU_S(2, N / 2));
    kiln_tensor *s2 = kiln_sum(rows, TU_AXES(1), false);
    double two[2];
    tu_read_at(s2, two, 2, __FILE__, __LINE__);
    for (int h = 0; h < 2; h++) {
        long double w = sum_ld(x + h * (N / 2), N / 2);
        cr_assert(rel(two[h], w) <= 2.4e-7, "[%s] row %d: %.9g, want %.9Lg", tu_exec_name(), h,
                  two[h], w);
    }
}

/* Small values between a large one and its negation: while a float running
 * sum holds the large value, each small addend is below half its ulp and is
 * lost, so about half the small mass goes missing; in double nothing is. */
static void fill(double *x, uint64_t salt, double large, int64_t period, double lo, double hi) {
    tu_rng r = tu_rng_from(__func__, salt);
    for (int64_t i = 0; i < N; i++)
        x[i] = (double)(float)tu_unif(&r, lo, hi);
    for (int64_t i = 0; i < N; i += period) {
        x[i] = large;
        x[i + period / 2] = -large;
    }
}

TU_TEST(sum_accuracy, small_addends_beside_cancelling_large_ones) {
    double *x = malloc((size_t)N * sizeof *x);
    fill(x, 1, 0x1p20, 64, 0.01, 0.02);
    check_sum(ctx, x);
    fill(x, 2, 0x1p24, 1024, 0.1, 0.9);
    check_sum(ctx, x);
    free(x);
}
