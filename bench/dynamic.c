/* dynamic.c — a program shared by graphs that differ only in sizes
 * (kiln_ctx_set_dynamic) against one compiled for the size it runs at.
 *
 * Two workloads, each at one size in two contexts of one process: "shared"
 * first runs two other sizes, so that the size measured runs the program
 * that reads its sizes at run time; "specialised" has sharing off and runs a
 * program with every size a literal. Steps alternate between the two, so the
 * machine's drift hits both alike. Printed: the first step at a new size
 * (shared: lowering only; specialised: a compile, with a disk cache of its
 * own so nothing is found there), the median warm step, and their ratios.
 *   mlp:       784 -> 256 -> 10 classifier, forward and backward, batch 120
 *              (shared after batches 100 and 112)
 *   attention: causal self-attention, x [T, 64] through one [64, 192]
 *              projection, T = 200 (shared after T = 150 and 151)
 *   matmul:    a square 1024 matmul, compute-bound (shared after 512, 768):
 *              its cache blocks are read at run time there
 * Both CPU compiler paths, C then LLVM. Usage: dynamic [--quick] [--steps N]
 * (bench.h's options; 9 alternating steps by default). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"

static double now_ms(void) { return bench_now() * 1e3; }

static float *values(int64_t n, unsigned salt) {
    float *v = malloc(sizeof *v * (size_t)n);
    if (!v)
        exit(1);
    for (int64_t i = 0; i < n; i++)
        v[i] = sinf((float)(i * 7 + salt) * 0.013f);
    return v;
}

static int check(kiln_status st, const char *what) {
    if (st != KILN_OK) {
        fprintf(stderr, "dynamic: %s failed (%s)\n", what, kiln_status_string(st));
        exit(1);
    }
    return 0;
}

/* One step of a workload at size n; its result read back. */
typedef void (*step_fn)(kiln_ctx *ctx, int64_t n);

static void mlp(kiln_ctx *ctx, int64_t B) {
    kiln_scope_begin(ctx);
    float *x = values(B * 784, 1), *w1 = values(784 * 256, 2), *w2 = values(256 * 10, 3);
    int32_t *y = malloc(sizeof *y * (size_t)B);
    for (int64_t i = 0; i < B; i++)
        y[i] = (int32_t)(i % 10);
    kiln_tensor *X = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){B, 784}, x);
    kiln_tensor *Y = kiln_from_data(ctx, KILN_I32, 1, (const int64_t[]){B}, y);
    kiln_tensor *W1 = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){784, 256}, w1);
    kiln_tensor *W2 = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){256, 10}, w2);
    kiln_requires_grad(W1, true);
    kiln_requires_grad(W2, true);
    kiln_tensor *h = kiln_relu(kiln_matmul(X, kiln_mul_scalar(W1, 0.05)));
    kiln_tensor *l = kiln_cross_entropy(kiln_matmul(h, W2), Y, KILN_REDUCTION_MEAN);
    check(kiln_backward(l), "backward");
    /* one sync for the loss and both gradients */
    kiln_tensor *all = kiln_add(l, kiln_add(kiln_sum(kiln_grad(W1), 0, NULL, false),
                                            kiln_sum(kiln_grad(W2), 0, NULL, false)));
    check(kiln_realize(all), "the mlp step");
    free(x);
    free(w1);
    free(w2);
    free(y);
    kiln_scope_end(ctx);
}

static void attention(kiln_ctx *ctx, int64_t T) {
    kiln_scope_begin(ctx);
    float *x = values(T * 64, 4), *w = values(64 * 192, 5);
    kiln_tensor *X = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){T, 64}, x);
    kiln_tensor *W = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){64, 192}, w);
    kiln_tensor *qkv = kiln_matmul(X, W);
    kiln_tensor *y = kiln_scaled_dot_product_attention(
        kiln_slice(qkv, 1, 0, 64, 1), kiln_slice(qkv, 1, 64, 128, 1),
        kiln_slice(qkv, 1, 128, 192, 1), true, 0.125);
    check(kiln_realize(y), "the attention step");
    free(x);
    free(w);
    kiln_scope_end(ctx);
}

static void square(kiln_ctx *ctx, int64_t n) {
    kiln_scope_begin(ctx);
    float *x = values(n * n, 6), *w = values(n * n, 7);
    kiln_tensor *X = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){n, n}, x);
    kiln_tensor *W = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){n, n}, w);
    check(kiln_realize(kiln_matmul(X, W)), "the matmul");
    free(x);
    free(w);
    kiln_scope_end(ctx);
}

static void run(const char *name, step_fn f, int64_t warm1, int64_t warm2, int64_t n, int steps) {
    char shared_dir[] = "/tmp/kiln-bench-dynamic-XXXXXX", own_dir[] = "/tmp/kiln-bench-dynamic-XXXXXX";
    if (!mkdtemp(shared_dir) || !mkdtemp(own_dir))
        exit(1);
    setenv("KILN_CACHE_DIR", shared_dir, 1);
    kiln_ctx *shared = kiln_ctx_new(KILN_CPU);
    setenv("KILN_CACHE_DIR", own_dir, 1);
    kiln_ctx *own = kiln_ctx_new(KILN_CPU);
    if (!shared || !own) {
        fprintf(stderr, "dynamic: %s\n", kiln_last_ctx_error());
        exit(1);
    }
    kiln_ctx_set_dynamic(own, false);
    f(shared, warm1);
    f(shared, warm2);
    double t0 = now_ms();
    f(shared, n);
    double first_shared = now_ms() - t0;
    t0 = now_ms();
    f(own, n);
    double first_own = now_ms() - t0;
    kiln_stats s = kiln_ctx_stats(shared);
    double *ts = malloc(sizeof *ts * (size_t)steps), *to = malloc(sizeof *to * (size_t)steps);
    for (int i = 0; i < steps; i++) {
        t0 = now_ms();
        f(shared, n);
        double t1 = now_ms();
        f(own, n);
        ts[i] = t1 - t0;
        to[i] = now_ms() - t1;
    }
    double ms = bench_median(ts, steps), mo = bench_median(to, steps);
    printf("%-10s size %-4lld first step: shared %8.1f ms, specialised %8.1f ms (%.3fx); "
           "warm step: shared %7.3f ms, specialised %7.3f ms, shared/specialised %.3f "
           "(%lld misses shared, %lld compiles)\n",
           name, (long long)n, first_shared, first_own, first_own / first_shared, ms, mo, ms / mo,
           (long long)s.size_shared, (long long)s.compiles);
    free(ts);
    free(to);
    kiln_ctx_free(shared);
    kiln_ctx_free(own);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", shared_dir, own_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "dynamic: could not remove the scratch caches\n");
    unsetenv("KILN_CACHE_DIR");
}

int main(int argc, char **argv) {
    int steps = bench_parse_opts(argc, argv).steps;
    double load[3] = {0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = -1;
        fclose(la);
    }
    printf("load average %.2f %.2f %.2f, %d steps each\n", load[0], load[1], load[2], steps);
    static const char *const compilers[] = {"cc", "llvm"};
    for (int c = 0; c < 2; c++) {
        setenv("KILN_CPU_COMPILER", compilers[c], 1);
        kiln_ctx *probe = kiln_ctx_new(KILN_CPU);
        if (!probe) {
            printf("%s: not available (%s)\n", compilers[c], kiln_last_ctx_error());
            continue;
        }
        kiln_ctx_free(probe);
        printf("%s compiler path:\n", compilers[c]);
        run("mlp", mlp, 100, 112, 120, steps);
        run("attention", attention, 150, 151, 200, steps);
        run("matmul", square, 512, 768, 1024, steps);
    }
    return 0;
}
