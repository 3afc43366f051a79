/* conv.c — kiln_conv2d alone, for work on the convolution's lowering: the
 * layer of bench/nn.c (3x3, padding 1, x 8x64x32x32, w 64x64x3x3, a bias),
 * forward, and forward with the gradients of sum(y * r) with respect to x, w
 * and b (r fixed random, so that no gradient is a constant), each timed as
 * the median of its steps after a warm-up, with the kernel launches per
 * step. Two builds of it (before and after a change) run alternately under
 * the same load compare the change.
 *
 * Usage: conv [--steps N] [--fwd | --bwd]. One readable line per mode on
 * stdout: mode, median and min ms, kernels per step. */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"

enum { N = 8, C = 64, HW = 32 };

static kiln_tensor *step(kiln_tensor *const *in, bool backward) {
    kiln_tensor *y = kiln_conv2d(in[0], in[1], in[2], 1, 1, 1, 1, 1, 1, 1);
    if (!backward)
        return y;
    return bench_gradients_joined(kiln_sum(kiln_mul(y, in[3]), 0, NULL, false), 3, in);
}

static int run(kiln_ctx *ctx, kiln_tensor *const *in, bool backward, int steps) {
    double t[256];
    int64_t kernels = 0;
    if (steps > 256)
        steps = 256;
    for (int i = -3; i < steps; i++) {
        kiln_scope_begin(ctx);
        int64_t k0 = kiln_ctx_stats(ctx).kernels;
        double t0 = bench_now();
        kiln_tensor *out = step(in, backward);
        kiln_status st = kiln_realize(out);
        double dt = bench_now() - t0;
        if (st != KILN_OK) {
            fprintf(stderr, "conv: %s\n", kiln_error_message(out));
            kiln_scope_end(ctx);
            return 1;
        }
        kernels = kiln_ctx_stats(ctx).kernels - k0;
        kiln_scope_end(ctx);
        if (i >= 0)
            t[i] = dt * 1e3;
    }
    double med = bench_median(t, steps);
    printf("%s median %.2f ms min %.2f ms kernels %lld\n", backward ? "fwd+bwd" : "fwd", med,
           t[0], (long long)kernels);
    return 0;
}

int main(int argc, char **argv) {
    int steps = 10;
    bool fwd = true, bwd = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            sscanf(argv[++i], "%d", &steps);
        else if (!strcmp(argv[i], "--fwd"))
            bwd = false;
        else if (!strcmp(argv[i], "--bwd"))
            fwd = false;
    }
    if (steps < 1)
        steps = 1;
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    if (!ctx) {
        fprintf(stderr, "kiln_ctx_new: %s\n", kiln_last_ctx_error());
        return 1;
    }
    const int64_t xd[] = {N, C, HW, HW}, wd[] = {C, C, 3, 3}, bd[] = {C};
    kiln_tensor *in[] = {kiln_randn(ctx, KILN_F32, 4, xd, 1),
                         kiln_mul_scalar(kiln_randn(ctx, KILN_F32, 4, wd, 2), 1.0 / 24),
                         kiln_randn(ctx, KILN_F32, 1, bd, 3), kiln_randn(ctx, KILN_F32, 4, xd, 4)};
    for (int i = 0; i < 4; i++)
        if (kiln_realize(in[i]) != KILN_OK) {
            fprintf(stderr, "conv: %s\n", kiln_error_message(in[i]));
            return 1;
        }
    int rc = 0;
    if (fwd)
        rc |= run(ctx, in, false, steps);
    if (bwd)
        rc |= run(ctx, in, true, steps);
    kiln_ctx_free(ctx);
    return rc;
}
