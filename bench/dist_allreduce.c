/* dist_allreduce.c — kiln's all-reduce against Open MPI's own, between the
 * ranks of `mpirun -np N dist_allreduce`, and data-parallel training steps.
 *
 * For each size from 4 KB to 256 MB (f32) it times, in the same run and
 * alternately: MPI_Allreduce in place (what Open MPI gives a C program),
 * kiln_all_reduce of a tensor realized at a sync point (capture, graph-cache
 * hit, the ranks' agreement on the collective, the copy into the result's
 * buffer, the reduction), and memcpy of the same bytes (this machine's copy
 * rate, the ceiling of a shared-memory reduction). Bus bandwidth is
 * NCCL-tests' convention: bytes / time * 2 (N - 1) / N, the bytes each rank
 * moves. Printed per size: both bus bandwidths, kiln / MPI, and MPI's against
 * memcpy's. Then an MLP training step (784-256-128-10, a global batch of 256)
 * on one rank's shard, gradients averaged: steps per second, which a run at 1
 * rank and one at 2 compare. Medians of several repetitions; rank 0 prints. */
#define _POSIX_C_SOURCE 200809L
#include <kiln.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static void die(kiln_ctx *ctx, const char *what) {
    fprintf(stderr, "dist_allreduce: %s: %s\n", what, kiln_ctx_last_error(ctx));
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* One data-parallel MLP step on this rank's shard; returns the loss. */
static double mlp_step(kiln_ctx *ctx, kiln_tensor **p, kiln_optim *o, int local, const float *x,
                       const int32_t *y) {
    kiln_scope_begin(ctx);
    kiln_tensor *xt = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){local, 784}, x);
    kiln_tensor *yt = kiln_from_data(ctx, KILN_I32, 1, (const int64_t[]){local}, y);
    kiln_tensor *h = kiln_relu(kiln_linear(xt, p[0], p[1]));
    h = kiln_relu(kiln_linear(h, p[2], p[3]));
    kiln_tensor *loss = kiln_cross_entropy(kiln_linear(h, p[4], p[5]), yt, KILN_REDUCTION_MEAN);
    if (kiln_backward(loss) != KILN_OK || kiln_dist_average_gradients(6, p) != KILN_OK ||
        kiln_optim_step(o) != KILN_OK)
        die(ctx, "the training step");
    kiln_optim_zero_grad(o);
    double l;
    if (kiln_item(kiln_all_reduce(loss, KILN_REDUCE_MEAN), &l) != KILN_OK)
        die(ctx, "reading the loss");
    kiln_scope_end(ctx);
    return l;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    if (!ctx) {
        fprintf(stderr, "dist_allreduce: %s\n", kiln_last_ctx_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (kiln_dist_init(ctx, KILN_DIST_MPI) != KILN_OK)
        die(ctx, "kiln_dist_init");
    double factor = ranks > 1 ? 2.0 * (ranks - 1) / ranks : 1.0;
    if (rank == 0)
        printf("all-reduce of f32 over %d ranks: bus bandwidth GB/s (median)\n"
               "%10s %10s %10s %10s %10s %12s\n",
               ranks, "bytes", "MPI", "kiln", "memcpy", "kiln/MPI", "MPI/memcpy");
    for (size_t bytes = 4096; bytes <= ((size_t)256 << 20); bytes *= 4) {
        size_t n = bytes / sizeof(float);
        float *a = malloc(bytes), *b = malloc(bytes);
        if (!a || !b)
            die(ctx, "out of memory");
        for (size_t i = 0; i < n; i++)
            a[i] = (float)((i + (size_t)rank) % 7);
        memcpy(b, a, bytes);
        kiln_tensor *x = kiln_from_data(ctx, KILN_F32, 1, (const int64_t[]){(int64_t)n}, a);
        int reps = bytes <= (1 << 20) ? 41 : bytes <= (16 << 20) ? 11 : 5;
        double tm[41], tk[41], tc[41];
        for (int r = -1; r < reps; r++) { /* r = -1 warms up (and compiles) */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = now();
            MPI_Allreduce(MPI_IN_PLACE, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double t1 = now();
            MPI_Barrier(MPI_COMM_WORLD);
            double t2 = now();
            kiln_tensor *y = kiln_all_reduce(x, KILN_REDUCE_SUM);
            if (kiln_realize(y) != KILN_OK)
                die(ctx, "kiln_all_reduce");
            double t3 = now();
            kiln_release(y);
            double t4 = now();
            memcpy(b, a, bytes);
            double t5 = now();
            if (r >= 0) {
                tm[r] = t1 - t0;
                tk[r] = t3 - t2;
                tc[r] = t5 - t4;
            }
        }
        /* The slowest rank's time is the collective's. */
        double m = median(tm, reps), k = median(tk, reps), c = median(tc, reps);
        double local[3] = {m, k, c}, worst[3];
        MPI_Allreduce(local, worst, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double bm = bytes * factor / worst[0] / 1e9, bk = bytes * factor / worst[1] / 1e9;
        double bc = bytes / worst[2] / 1e9;
        if (rank == 0)
            printf("%10zu %10.2f %10.2f %10.2f %10.2f %12.2f\n", bytes, bm, bk, bc, bk / bm,
                   bm / bc);
        kiln_release(x);
        free(a);
        free(b);
    }

    /* Data-parallel steps: a global batch of 256, this rank's share. */
    enum { GLOBAL = 256 };
    int local = GLOBAL / ranks;
    const int64_t shapes[6][2] = {{256, 784}, {256, 1}, {128, 256}, {128, 1}, {10, 128}, {10, 1}};
    kiln_tensor *p[6];
    for (int i = 0; i < 6; i++) {
        int nd = shapes[i][1] == 1 ? 1 : 2;
        kiln_tensor *u = kiln_rand(ctx, KILN_F32, nd, shapes[i], 7 + (uint64_t)i);
        p[i] = kiln_add_scalar(kiln_mul_scalar(u, 0.1), -0.05);
        if (kiln_requires_grad(p[i], true) != KILN_OK)
            die(ctx, "parameters");
    }
    kiln_optim *o;
    if (kiln_adamw_new(ctx, 6, p, 1e-3, 0.9, 0.999, 1e-8, 0.01, &o) != KILN_OK)
        die(ctx, "kiln_adamw_new");
    float *x = malloc(sizeof *x * (size_t)local * 784);
    int32_t *y = malloc(sizeof *y * (size_t)local);
    for (int i = 0; i < local * 784; i++)
        x[i] = (float)sin(0.001 * i + rank);
    for (int i = 0; i < local; i++)
        y[i] = (i + rank) % 10;
    for (int w = 0; w < 3; w++)
        mlp_step(ctx, p, o, local, x, y);
    enum { STEPS = 30 };
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int s = 0; s < STEPS; s++)
        mlp_step(ctx, p, o, local, x, y);
    double secs = now() - t0;
    if (rank == 0)
        printf("data-parallel MLP step, global batch %d over %d rank%s: %.1f steps/s "
               "(%.0f images/s)\n",
               GLOBAL, ranks, ranks == 1 ? "" : "s", STEPS / secs, STEPS * GLOBAL / secs);
    kiln_optim_free(o);
    free(x);
    free(y);
    kiln_ctx_free(ctx);
    MPI_Finalize();
    return 0;
}
