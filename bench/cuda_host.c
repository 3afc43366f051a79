/* cuda_host.c — the host's share of a replayed training step on the CUDA
 * device: an MLP of L GELU layers (width W, batch B) with cross-entropy and
 * an AdamW update of every parameter, stepped until its program replays
 * from the graph cache, then timed: recording the step (the op calls,
 * backward and the optimiser's step), and the sync that captures it, finds
 * its program and queues its kernels (as one CUDA graph, or kernel by
 * kernel with KILN_CUDA_GRAPHS=0), and waits. Run on the stand-in driver
 * (tests/fake_cuda.c with FAKE_CUDA_KERNELS=1, whose kernels take no time
 * and compute nothing), what is left is kiln's own host cost per step and
 * per kernel, which a GPU's driver adds its launch costs to; on a GPU the
 * sync also waits for the kernels.
 *
 * Usage: KILN_CUDA_DRIVER=bazel-bin/tests/libfake_cuda.so FAKE_CUDA_KERNELS=1
 *        cuda_host [--layers L] [--steps N]
 * One line per mode: kernels per step, record and sync microseconds (median). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

enum { W = 256, BATCH = 64, CLASSES = 10, MAXL = 64 };

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(const char *graphs, int layers, int steps) {
    setenv("KILN_CUDA_GRAPHS", graphs, 1);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CUDA);
    if (!ctx) {
        fprintf(stderr, "cuda_host: %s\n", kiln_last_ctx_error());
        return 2;
    }
    kiln_tensor *p[2 * MAXL + 2];
    int np = 0;
    for (int l = 0; l <= layers; l++) {
        int64_t out = l == layers ? CLASSES : W;
        p[np] = kiln_mul_scalar(kiln_randn(ctx, KILN_F32, 2, (int64_t[]){W, out}, 10 + l), 0.06);
        p[np + 1] = kiln_zeros(ctx, KILN_F32, 1, (int64_t[]){out});
        for (int j = 0; j < 2; j++) {
            kiln_realize(p[np + j]);
            kiln_requires_grad(p[np + j], true);
        }
        np += 2;
    }
    kiln_optim *o;
    if (kiln_adamw_new(ctx, np, p, 1e-3, 0.9, 0.999, 1e-8, 0.01, &o) != KILN_OK) {
        fprintf(stderr, "cuda_host: %s\n", kiln_ctx_last_error(ctx));
        return 1;
    }
    int64_t labels[BATCH];
    for (int i = 0; i < BATCH; i++)
        labels[i] = (i * 7 + 3) % CLASSES;
    double *rec = malloc(sizeof *rec * (size_t)steps), *syn = malloc(sizeof *syn * (size_t)steps);
    int64_t kernels = 0;
    int rc = 0;
    for (int s = -3; s < steps && rc == 0; s++) { /* three untimed: compile, then replay */
        kiln_scope_begin(ctx);
        double t0 = bench_now();
        kiln_tensor *x = kiln_randn(ctx, KILN_F32, 2, (int64_t[]){BATCH, W}, 99 + (uint64_t)s);
        kiln_tensor *y = kiln_from_data(ctx, KILN_I64, 1, (int64_t[]){BATCH}, labels);
        kiln_optim_zero_grad(o);
        kiln_tensor *h = x;
        for (int l = 0; l < layers; l++)
            h = kiln_gelu(kiln_linear(h, p[2 * l], p[2 * l + 1]));
        kiln_tensor *logits = kiln_add(kiln_matmul(h, p[2 * layers]), p[2 * layers + 1]);
        kiln_tensor *loss = kiln_cross_entropy(logits, y, KILN_REDUCTION_MEAN);
        kiln_backward(loss);
        kiln_optim_step(o);
        double t1 = bench_now();
        int64_t k0 = kiln_ctx_stats(ctx).kernels;
        if (kiln_realize(loss) != KILN_OK) {
            fprintf(stderr, "cuda_host: %s\n", kiln_error_message(loss));
            rc = 1;
        }
        double t2 = bench_now();
        kernels = kiln_ctx_stats(ctx).kernels - k0;
        if (s >= 0)
            rec[s] = (t1 - t0) * 1e6, syn[s] = (t2 - t1) * 1e6;
        kiln_scope_end(ctx);
    }
    /* On the stand-in driver, how the kernels went: launched one by one or
     * in graphs (its counters; absent on a real driver) */
    long direct = -1, graphs_run = -1;
    const char *drv = getenv("KILN_CUDA_DRIVER");
    void *h = drv ? dlopen(drv, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (h) {
        long *a = dlsym(h, "fake_cuda_launches"), *b = dlsym(h, "fake_cuda_graph_launches");
        direct = a ? *a : -1, graphs_run = b ? *b : -1;
        dlclose(h);
    }
    if (rc == 0) {
        qsort(rec, (size_t)steps, sizeof *rec, cmp);
        qsort(syn, (size_t)steps, sizeof *syn, cmp);
        double r = rec[steps / 2], y = syn[steps / 2];
        printf("cuda_host layers=%d graphs=%s kernels=%lld record_us=%.1f sync_us=%.1f "
               "sync_us_per_kernel=%.2f",
               layers, graphs, (long long)kernels, r, y, y / (double)kernels);
        if (direct >= 0)
            printf(" driver_launches=%ld graph_launches=%ld", direct, graphs_run);
        printf("\n");
    }
    free(rec), free(syn);
    kiln_optim_free(o);
    kiln_ctx_free(ctx);
    return rc;
}

int main(int argc, char **argv) {
    int layers = 12, steps = 50;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--layers"))
            layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[++i]);
    }
    if (layers < 1 || layers > MAXL || steps < 1) {
        fprintf(stderr, "usage: cuda_host [--layers 1..%d] [--steps N]\n", MAXL);
        return 2;
    }
    int rc = run("0", layers, steps);
    if (rc == 0)
        rc = run("1", layers, steps);
    return rc;
}
