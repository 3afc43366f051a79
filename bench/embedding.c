/* embedding.c — a GPT-2 embedding lookup (256 tokens from a [50257, 768] f32
 * table) on the CPU in lazy mode: kiln_embedding (a gather of rows) against
 * the one-hot [256, 50257] matmul it used to be, written here with the same
 * public calls as before. Prints the median of a few timed runs of each,
 * after a first run that compiles, and checks both give the same rows; then
 * the same for the weight's gradient (a backward pass through each: the
 * gather's rule is a scatter-add of the tokens' rows, 256 steps per chunk of
 * columns (GRAPH_SCATTER), where the one-hot form's is a [50257, 256] by
 * [256, 768] matmul, as the gather's own rule was before the scatter kernel). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "api/kiln.h"

enum { V = 50257, D = 768, T = 256, RUNS = 5 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static kiln_tensor *one_hot_matmul(kiln_tensor *idx, kiln_tensor *w) {
    kiln_tensor *cols = kiln_arange(kiln_ctx_of(idx), KILN_I64, 0, (double)V, 1);
    kiln_tensor *hot = kiln_eq(kiln_unsqueeze(kiln_cast(idx, KILN_I64), -1), cols);
    return kiln_matmul(kiln_cast(hot, KILN_F32), w);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median seconds of RUNS lookups (each recorded and realized), after
 * one that compiles; the last result's rows go to out. */
static double time_it(kiln_ctx *ctx, kiln_tensor *idx, kiln_tensor *w, int gather, float *out) {
    double t[RUNS];
    for (int r = -1; r < RUNS; r++) {
        kiln_scope_begin(ctx);
        double t0 = now();
        kiln_tensor *y = gather ? kiln_embedding(idx, w) : one_hot_matmul(idx, w);
        if (kiln_realize(y) != KILN_OK) {
            fprintf(stderr, "%s\n", kiln_ctx_last_error(ctx));
            exit(1);
        }
        if (r >= 0)
            t[r] = now() - t0;
        kiln_to_host(y, out, sizeof(float) * T * D);
        kiln_scope_end(ctx);
    }
    qsort(t, RUNS, sizeof *t, cmp);
    return t[RUNS / 2];
}

/* The median seconds of RUNS backward passes to the weight's gradient
 * [V, D] of sum(lookup(idx, w) * g); its first row sum goes to *check. */
static double time_grad(kiln_ctx *ctx, kiln_tensor *idx, const float *w0, int gather,
                        double *check) {
    double t[RUNS];
    kiln_tensor *w = kiln_from_data(ctx, KILN_F32, 2, (int64_t[]){V, D}, w0);
    kiln_requires_grad(w, true);
    for (int r = -1; r < RUNS; r++) {
        kiln_scope_begin(ctx);
        double t0 = now();
        kiln_tensor *y = gather ? kiln_embedding(idx, w) : one_hot_matmul(idx, w);
        kiln_tensor *loss = kiln_sum(kiln_mul(y, kiln_sin(y)), 0, NULL, false);
        kiln_tensor *gw = kiln_backward(loss) == KILN_OK ? kiln_grad(w) : NULL;
        if (!gw || kiln_realize(gw) != KILN_OK) {
            fprintf(stderr, "%s\n", kiln_ctx_last_error(ctx));
            exit(1);
        }
        if (r >= 0)
            t[r] = now() - t0;
        *check = 0;
        float row[D];
        kiln_to_host(kiln_slice(gw, 0, 0, 1, 1), row, sizeof row);
        for (int d = 0; d < D; d++)
            *check += row[d];
        kiln_zero_grad(w);
        kiln_scope_end(ctx);
    }
    kiln_release(w);
    qsort(t, RUNS, sizeof *t, cmp);
    return t[RUNS / 2];
}

int main(void) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    if (!ctx) {
        fprintf(stderr, "no CPU context: %s\n", kiln_last_ctx_error());
        return 1;
    }
    float *w = malloc(sizeof *w * (size_t)V * D), *a = malloc(sizeof *a * T * D),
          *b = malloc(sizeof *b * T * D);
    int64_t idx[T];
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < (int64_t)V * D; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (float)((double)(s >> 11) * 0x1.0p-53 - 0.5);
    }
    for (int i = 0; i < T; i++)
        idx[i] = (int64_t)((uint64_t)i * 2654435761u % V);
    kiln_tensor *tw = kiln_from_data(ctx, KILN_F32, 2, (int64_t[]){V, D}, w);
    kiln_tensor *ti = kiln_from_data(ctx, KILN_I64, 1, (int64_t[]){T}, idx);
    double tg = time_it(ctx, ti, tw, 1, a);
    double tm = time_it(ctx, ti, tw, 0, b);
    double worst = 0;
    for (int i = 0; i < T * D; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]));
    for (int i = 0; i < T; i++)
        for (int d = 0; d < D; d++)
            if (a[i * D + d] != w[idx[i] * D + d]) {
                fprintf(stderr, "row %d differs from the table\n", i);
                return 1;
            }
    printf("embedding %d tokens of [%d, %d] f32, cpu lazy, median of %d:\n", T, V, D, RUNS);
    printf("  one-hot matmul (before): %10.3f ms\n", tm * 1e3);
    printf("  gather (now):            %10.3f ms\n", tg * 1e3);
    printf("  ratio %.0fx; largest difference between them %g\n", tm / tg, worst);
    double cg, cm;
    double gg = time_grad(ctx, ti, w, 1, &cg), gm = time_grad(ctx, ti, w, 0, &cm);
    printf("weight gradient [%d, %d] through each, median of %d:\n", V, D, RUNS);
    printf("  one-hot matmul (before): %10.3f ms\n", gm * 1e3);
    printf("  scatter-add (now):       %10.3f ms\n", gg * 1e3);
    printf("  ratio %.2fx; first rows' sums %.6g and %.6g\n", gm / gg, cm, cg);
    kiln_ctx_free(ctx);
    free(w);
    free(a);
    free(b);
    return 0;
}
