/* lazy_vs_eager.c — the same work in lazy mode (fused kernels) and eager
 * mode (one kernel per op) in one process, on the CPU backend. It prints, per
 * workload, the kernels each mode ran per step and the time ratio
 * eager/lazy (above 1: lazy is faster), so the figure does not depend on how
 * fast this shared machine happens to be today. Each mode compiles on its
 * first step; the median of the following steps is compared. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kiln.h"

typedef kiln_tensor *(*workload_fn)(kiln_ctx *ctx, kiln_tensor *const *in);

typedef struct workload {
    const char *name;
    int ninputs;
    int ndim;
    int64_t dims[2];
    workload_fn fn;
} workload;

static kiln_tensor *gelu_chain(kiln_ctx *ctx, kiln_tensor *const *in) {
    (void)ctx;
    return kiln_gelu(kiln_add(kiln_mul(in[0], in[1]), in[2]));
}

static kiln_tensor *softmax_rows(kiln_ctx *ctx, kiln_tensor *const *in) {
    (void)ctx;
    int ax = 1;
    kiln_tensor *m = kiln_max(in[0], 1, &ax, true);
    kiln_tensor *e = kiln_exp(kiln_sub(in[0], m));
    return kiln_div(e, kiln_sum(e, 1, &ax, true));
}

static kiln_tensor *layer_norm_rows(kiln_ctx *ctx, kiln_tensor *const *in) {
    (void)ctx;
    int ax = 1;
    kiln_tensor *c = kiln_sub(in[0], kiln_mean(in[0], 1, &ax, true));
    kiln_tensor *var = kiln_mean(kiln_mul(c, c), 1, &ax, true);
    return kiln_mul(c, kiln_rsqrt(kiln_add_scalar(var, 1e-5)));
}

static kiln_tensor *sum_all(kiln_ctx *ctx, kiln_tensor *const *in) {
    (void)ctx;
    return kiln_sum(in[0], 0, NULL, false);
}

static kiln_tensor *matmul_bias_relu(kiln_ctx *ctx, kiln_tensor *const *in) {
    (void)ctx;
    kiln_tensor *b = kiln_slice(in[2], 0, 0, 1, 1);
    return kiln_relu(kiln_add(kiln_matmul(in[0], in[1]), b));
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds per step and kernels per step of one mode. */
static int run_mode(kiln_ctx *ctx, kiln_mode mode, const workload *w, kiln_tensor *const *in,
                    int steps, double *median, double *kernels) {
    kiln_ctx_set_mode(ctx, mode);
    double *t = malloc(sizeof *t * (size_t)steps);
    int64_t k0 = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1)
            k0 = kiln_ctx_stats(ctx).kernels;
        kiln_scope_begin(ctx);
        double t0 = now();
        kiln_tensor *y = w->fn(ctx, in);
        kiln_status st = kiln_realize(y);
        double t1 = now();
        if (st != KILN_OK) {
            fprintf(stderr, "%s: %s\n", w->name, kiln_error_message(y));
            kiln_scope_end(ctx);
            free(t);
            return 1;
        }
        kiln_scope_end(ctx);
        if (s > 0)
            t[s - 1] = t1 - t0;
    }
    *kernels = (double)(kiln_ctx_stats(ctx).kernels - k0) / steps;
    qsort(t, (size_t)steps, sizeof *t, cmp_double);
    *median = t[steps / 2];
    free(t);
    return 0;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 5;
    if (steps < 1)
        steps = 1;
    const workload ws[] = {
        {"gelu(a*b+c), 16M f32", 3, 1, {1 << 24, 0}, gelu_chain},
        {"softmax rows, 4096x4096 f32", 1, 2, {4096, 4096}, softmax_rows},
        {"layer-norm rows, 4096x4096 f32", 1, 2, {4096, 4096}, layer_norm_rows},
        {"sum, 16M f32", 1, 1, {1 << 24, 0}, sum_all},
        {"relu(a@b + bias), 512x512x512 f32", 3, 2, {512, 512}, matmul_bias_relu},
    };
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    if (!ctx) {
        fprintf(stderr, "kiln_ctx_new: %s\n", kiln_last_ctx_error());
        return 1;
    }
    printf("%-36s %10s %10s %12s %12s\n", "workload", "lazy krn", "eager krn", "lazy ms",
           "eager/lazy");
    int rc = 0;
    for (size_t i = 0; i < sizeof ws / sizeof ws[0] && rc == 0; i++) {
        const workload *w = &ws[i];
        kiln_tensor *in[3];
        for (int j = 0; j < w->ninputs; j++) {
            in[j] = kiln_randn(ctx, KILN_F32, w->ndim, w->dims, 100 + (uint64_t)j);
            rc |= kiln_realize(in[j]) != KILN_OK;
        }
        double tl, te, kl, ke;
        rc = rc || run_mode(ctx, KILN_LAZY, w, in, steps, &tl, &kl) ||
             run_mode(ctx, KILN_EAGER, w, in, steps, &te, &ke);
        if (rc == 0)
            printf("%-36s %10.0f %10.0f %12.2f %12.2f\n", w->name, kl, ke, tl * 1e3, te / tl);
        for (int j = 0; j < w->ninputs; j++)
            kiln_release(in[j]);
    }
    kiln_ctx_free(ctx);
    return rc;
}
