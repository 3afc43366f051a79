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

/* Many rows, each summed by one thread (no split): the same data as rows of
 * 4096 keeps every row within 2 float ulps, so these sums of values of
 * either sign stay in double (lower_plan.fsum adds in float only values
 * never below zero); the data defeats float32 partial sums of 256. */
enum { ROWS = 256, COLS = 4096 };

TU_TEST(sum_accuracy, signed_rows_stay_in_double) {
    double *x = malloc((size_t)N * sizeof *x), got[ROWS];
    fill(x, 3, 0x1p20, 64, 0.01, 0.02);
    int lost = 0;
    for (int r = 0; r < ROWS; r++)
        lost += rel(sum_f32(x + (int64_t)r * COLS, COLS, COLS / 256), sum_ld(x + (int64_t)r * COLS, COLS)) > 1e-3;
    cr_assert(lost == ROWS, "float32 partial sums of 256 are right on %d rows", ROWS - lost);
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, 2, TU_DIMS(ROWS, COLS), x);
    tu_read_at(kiln_sum(t, TU_AXES(1), false), got, ROWS, __FILE__, __LINE__);
    for (int r = 0; r < ROWS; r++) {
        long double want = sum_ld(x + (int64_t)r * COLS, COLS);
        cr_assert(rel(got[r], want) <= 2.4e-7, "[%s] row %d: %.9g, want %.9Lg", tu_exec_name(), r,
                  got[r], want);
    }
    free(x);
}

/* Rows of e^x (never below zero), which do add in float chunks: within
 * 2e-6 of each row's exact sum of the same e^x values (32 float additions
 * a lane at most, each within half an ulp of a partial sum no larger than
 * the row's). */
TU_TEST(sum_accuracy, positive_rows_in_float_chunks) {
    double *x = malloc((size_t)N * sizeof *x), e[COLS], got[ROWS];
    tu_rng r0 = tu_rng_from(__func__, 4);
    for (int64_t i = 0; i < (int64_t)ROWS * COLS; i++)
        x[i] = (double)(float)tu_unif(&r0, -6, 6);
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, 2, TU_DIMS(ROWS, COLS), x);
    /* the sum first, e^x fused into it (e^x read first would be a buffer) */
    tu_read_at(kiln_sum(kiln_exp(t), TU_AXES(1), false), got, ROWS, __FILE__, __LINE__);
    double *ev = malloc((size_t)ROWS * COLS * sizeof *ev);
    tu_read_at(kiln_exp(t), ev, (int64_t)ROWS * COLS, __FILE__, __LINE__);
    for (int r = 0; r < ROWS; r++) {
        for (int c = 0; c < COLS; c++)
            e[c] = ev[(int64_t)r * COLS + c];
        long double want = sum_ld(e, COLS);
        cr_assert(rel(got[r], want) <= 2e-6, "[%s] row %d: %.9g, want %.9Lg (rel %.3g)",
                  tu_exec_name(), r, got[r], want, rel(got[r], want));
    }
    free(ev);
    free(x);
}
