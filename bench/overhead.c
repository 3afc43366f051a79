/* overhead.c — what kiln costs beside its kernels, the figures the CPU
 * issue's goals name, one readable line each:
 *   record       recording an op: a chain of n elementwise ops on a
 *                4-element tensor, never synced, per op: n = 1000 (a
 *                training step's graph, best of 1000 chains) and n = 100000
 *                (best of 10; its nodes and the interning table no longer fit
 *                in cache);
 *   hit          a graph-cache hit: a realized chain of n elementwise ops
 *                (one fused kernel on 16 elements) synced again, n = 100 and
 *                1000, kiln_realize alone (median of 50), and the line
 *                through the two: fixed cost and cost per op; each op is
 *                three graph nodes (the op, its scalar as a bound 0-d input,
 *                and that input's broadcast view), so also per node;
 *   small        1000 small independent kernels at one sync, cold (an empty
 *                kernel cache in a temporary directory): the sums of 1000
 *                tensors of different shapes joined by one cat, so that each
 *                is a kernel of its own, the sync's time per kernel;
 *   fresh        a fused op into a 64 MB output (y = 2x + 1 over 16M floats),
 *                each step's output released, in a context that keeps no
 *                released buffer (KILN_POOL_MAX_BYTES=0: fresh memory each
 *                step) against one that reuses it, median of 16 steps each,
 *                alternating.
 * Usage: overhead. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int fail(kiln_tensor *t, const char *what) {
    fprintf(stderr, "overhead: %s: %s\n", what, t ? kiln_error_message(t) : "NULL");
    return 1;
}

/* The best seconds per op of recording a chain of n ops, of reps chains. */
static double record_secs(kiln_ctx *ctx, int n, int reps) {
    const int64_t four = 4;
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        kiln_scope_begin(ctx);
        kiln_tensor *t = kiln_randn(ctx, KILN_F32, 1, &four, 1);
        double t0 = bench_now();
        for (int i = 0; i < n; i++)
            t = kiln_add_scalar(t, 1.0);
        double dt = bench_now() - t0;
        kiln_scope_end(ctx);
        if (dt < best)
            best = dt;
    }
    return best / n;
}

static int record(kiln_ctx *ctx) {
    /* best of many: this machine's host code runs in slow phases seconds
     * long (the same chain 190 or 340 ns an op), which a best of 100 chains
     * (20 ms) could sit inside entirely */
    double small = record_secs(ctx, 1000, 1000), big = record_secs(ctx, 100000, 10);
    printf("record: %.0f ns per op in a chain of 1000 ops (best of 1000), %.0f ns per op in a "
           "chain of 100000 (best of 10)\n",
           small * 1e9, big * 1e9);
    return 0;
}

/* The median seconds of kiln_realize on a graph-cache hit of an n-op chain. */
static int hit_secs(kiln_ctx *ctx, int n, double *secs) {
    enum { STEPS = 50 };
    const int64_t sixteen = 16;
    kiln_tensor *x = kiln_randn(ctx, KILN_F32, 1, &sixteen, 2);
    if (kiln_realize(x) != KILN_OK)
        return fail(x, "input");
    double t[STEPS];
    for (int s = -2; s < STEPS; s++) {
        kiln_scope_begin(ctx);
        kiln_tensor *y = x;
        for (int i = 0; i < n; i++)
            y = i % 2 ? kiln_mul_scalar(y, 0.999) : kiln_add_scalar(y, 0.001);
        double t0 = bench_now();
        kiln_status st = kiln_realize(y);
        double dt = bench_now() - t0;
        if (st != KILN_OK) {
            fail(y, "chain");
            kiln_scope_end(ctx);
            return 1;
        }
        kiln_scope_end(ctx);
        if (s >= 0)
            t[s] = dt;
    }
    kiln_release(x);
    *secs = bench_median(t, STEPS);
    return 0;
}

static int hit(kiln_ctx *ctx) {
    double a, b;
    if (hit_secs(ctx, 100, &a) || hit_secs(ctx, 1000, &b))
        return 1;
    double per = (b - a) / 900, fixed = a - 100 * per;
    printf("hit: 100 ops %.1f us, 1000 ops %.1f us: %.1f us + %.0f ns per op, %.0f ns per graph "
           "node (3 per op; median of 50 syncs, kiln_realize alone)\n",
           a * 1e6, b * 1e6, fixed * 1e6, per * 1e9, per / 3 * 1e9);
    return 0;
}

static int small_kernels(void) {
    enum { K = 1000 };
    char dir[] = "/tmp/kiln-overhead-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("overhead: mkdtemp");
        return 1;
    }
    setenv("KILN_CACHE_DIR", dir, 1);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    int rc = 1;
    if (ctx) {
        kiln_tensor **sums = malloc(sizeof *sums * K);
        for (int i = 0; i < K && sums; i++) {
            const int64_t d[2] = {i / 10 + 2, i % 10 + 3};
            kiln_tensor *x = kiln_randn(ctx, KILN_F32, 2, d, 100 + (uint64_t)i);
            const int64_t one = 1;
            sums[i] = kiln_reshape(kiln_sum(x, 0, NULL, false), 1, &one);
        }
        kiln_tensor *all = sums ? kiln_cat(K, sums, 0) : NULL;
        kiln_stats s0 = kiln_ctx_stats(ctx);
        double t0 = bench_now();
        kiln_status st = all ? kiln_realize(all) : KILN_ERR_OOM;
        double dt = bench_now() - t0;
        kiln_stats s1 = kiln_ctx_stats(ctx);
        if (st == KILN_OK) {
            long long kernels = (long long)(s1.kernels - s0.kernels);
            printf("small: %d small independent reductions at one sync, cold: %.0f ms, %lld "
                   "kernels, %.2f ms per kernel\n",
                   K, dt * 1e3, kernels, dt * 1e3 / (double)(kernels ? kernels : 1));
            rc = 0;
        } else {
            fail(all, "small kernels");
        }
        free(sums);
        kiln_ctx_free(ctx);
    }
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    unsetenv("KILN_CACHE_DIR");
    return rc;
}

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* One step of y = 2x + 1 over x's 16M floats on ctx, its output released
 * after: seconds, and the page faults it took added to *faults. */
static int fused_step(kiln_ctx *ctx, kiln_tensor *x, double *secs, long *faults) {
    kiln_scope_begin(ctx);
    long f0 = minor_faults();
    double t0 = bench_now();
    kiln_tensor *y = kiln_add_scalar(kiln_mul_scalar(x, 2.0), 1.0);
    kiln_status st = kiln_realize(y);
    *secs = bench_now() - t0;
    *faults += minor_faults() - f0;
    if (st != KILN_OK)
        fail(y, "64 MB output");
    kiln_scope_end(ctx);
    return st != KILN_OK;
}

static int fresh_outputs(void) {
    enum { STEPS = 16 };
    const int64_t n = (int64_t)1 << 24;
    /* a context that keeps no released buffer: every output is fresh memory */
    setenv("KILN_POOL_MAX_BYTES", "0", 1);
    kiln_ctx *fresh = kiln_ctx_new(KILN_CPU);
    unsetenv("KILN_POOL_MAX_BYTES");
    kiln_ctx *reused = kiln_ctx_new(KILN_CPU);
    int rc = 1;
    if (fresh && reused) {
        kiln_tensor *xf = kiln_randn(fresh, KILN_F32, 1, &n, 3);
        kiln_tensor *xr = kiln_randn(reused, KILN_F32, 1, &n, 3);
        double tf[STEPS], tr[STEPS], dt;
        long ff = 0, fr = 0, skip = 0;
        rc = kiln_realize(xf) != KILN_OK || kiln_realize(xr) != KILN_OK;
        for (int s = -2; s < STEPS && !rc; s++) {
            rc |= fused_step(fresh, xf, &dt, s >= 0 ? &ff : &skip);
            if (s >= 0)
                tf[s] = dt;
            rc |= fused_step(reused, xr, &dt, s >= 0 ? &fr : &skip);
            if (s >= 0)
                tr[s] = dt;
        }
        if (!rc) {
            double f = bench_median(tf, STEPS), r = bench_median(tr, STEPS);
            printf("fresh: 2x + 1 into a 64 MB output: fresh memory %.2f ms, a reused buffer "
                   "%.2f ms, fresh/reused %.2f (median of %d steps each, alternating); page "
                   "faults per step %ld fresh, %ld reused (16384 would be a 4 KiB page each)\n",
                   f * 1e3, r * 1e3, f / r, STEPS, ff / STEPS, fr / STEPS);
        }
    }
    kiln_ctx_free(fresh);
    kiln_ctx_free(reused);
    return rc;
}

int main(void) {
    int rc = small_kernels();
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    if (!ctx) {
        fprintf(stderr, "kiln_ctx_new: %s\n", kiln_last_ctx_error());
        return 1;
    }
    rc |= record(ctx);
    rc |= hit(ctx);
    kiln_ctx_free(ctx);
    return rc | fresh_outputs();
}
