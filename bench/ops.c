/* ops.c — kiln's op workloads, lazy (fused kernels) against eager (one
 * kernel per op) in one process on the CPU backend: elementwise chains,
 * row softmax and layer-norm, a full sum and sums down columns, square and
 * skinny matmuls, and a matmul with a bias and activation epilogue. Each graph is built by one
 * function that both modes run; the outputs of the two are compared.
 *
 * Usage: ops [--quick | --full] [--steps N] [--device cpu|cuda]. One JSON line per measurement
 * on stdout (the machine's measured limits first), a readable line on
 * stderr. A workload that fails is reported ("error") and the others still
 * run; the exit status is then 1. Memory-bound workloads report GB/s over the least traffic the work
 * needs (each input read once, the output written once) against the
 * machine's triad bandwidth; matmuls report GFLOP/s (2mnk) against its FMA
 * peak. */
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench.h"

static kiln_tensor *gelu_chain(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_gelu(kiln_add(kiln_mul(in[0], in[1]), in[2]));
}

/* Eleven elementwise ops with tanh and sigmoid among them: memory traffic
 * says lazy (one kernel, 16 bytes an element) should be about 7x eager (each
 * op's inputs and output through memory). */
static kiln_tensor *chain11(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    kiln_tensor *t = kiln_tanh(kiln_add(kiln_mul(in[0], in[1]), in[2]));
    kiln_tensor *s = kiln_sigmoid(kiln_sub(kiln_mul(t, in[0]), in[1]));
    kiln_tensor *u = kiln_relu(kiln_add(kiln_mul(s, in[2]), t));
    return kiln_add(kiln_mul_scalar(u, 0.5), in[0]);
}

/* Sums down the columns (a bias gradient's shape of reduction). */
static kiln_tensor *column_sums(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    int ax = 0;
    return kiln_sum(in[0], 1, &ax, false);
}

/* The library's softmax, as the peers' (torch.softmax; NumPy's written out):
 * the row max, e^(x - max) and its sum, times the sum's reciprocal. */
static kiln_tensor *softmax_rows(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_softmax(in[0], 1);
}

/* The same over logits spread as N(0, 30^2) (the inputs scaled in the
 * kernel): most e^(x - max) lie below 2^-126, where subnormal arithmetic
 * took a microcode assist per lane (47.7 ms against 5.6 before e^x
 * flushed them: lower/rules_math.c). Its rate should match softmax_rows'. */
static kiln_tensor *softmax_wide_rows(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_softmax(kiln_mul_scalar(in[0], 30.0), 1);
}

static kiln_tensor *layer_norm_rows(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    int ax = 1;
    kiln_tensor *c = kiln_sub(in[0], kiln_mean(in[0], 1, &ax, true));
    kiln_tensor *var = kiln_mean(kiln_mul(c, c), 1, &ax, true);
    return kiln_mul(c, kiln_rsqrt(kiln_add_scalar(var, 1e-5)));
}

static kiln_tensor *sum_all(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_sum(in[0], 0, NULL, false);
}

static kiln_tensor *matmul(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_matmul(in[0], in[1]);
}

static kiln_tensor *matmul_bias_relu(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_relu(kiln_add(kiln_matmul(in[0], in[1]), in[2]));
}

typedef struct spec {
    const char *name;
    const char *shape;
    bench_build_fn build;
    int ninputs;
    int ndim[3];
    int64_t dims[3][2];
    double bytes, flops, tol;
    bool full_only;
} spec;

#define M16 (INT64_C(1) << 24)
#define M64 (INT64_C(1) << 26)
#define SQ(n) (double)(n) * (double)(n)
#define MM(m, k, n) 2.0 * (double)(m) * (double)(k) * (double)(n)
#define SQUARE_MM(s, n, full)                                                                    \
    {"matmul", s, matmul, 2, {2, 2}, {{n, n}, {n, n}}, 0, MM(n, n, n), 1e-5, full}

int main(int argc, char **argv) {
    bench_opts o = bench_parse_opts(argc, argv);
    const spec specs[] = {
        {"gelu_chain", "16M", gelu_chain, 3, {1, 1, 1}, {{M16}, {M16}, {M16}}, 16.0 * M16, 0,
         1e-5, false},
        {"chain11", "16M", chain11, 3, {1, 1, 1}, {{M16}, {M16}, {M16}}, 16.0 * M16, 0, 1e-5,
         false},
        {"softmax_rows", "4096x4096", softmax_rows, 1, {2}, {{4096, 4096}}, 8 * SQ(4096), 0, 1e-5,
         false},
        {"softmax_wide_rows", "4096x4096", softmax_wide_rows, 1, {2}, {{4096, 4096}},
         8 * SQ(4096), 0, 1e-5, false},
        {"layer_norm_rows", "4096x4096", layer_norm_rows, 1, {2}, {{4096, 4096}}, 8 * SQ(4096), 0,
         1e-4, false},
        {"sum_all", "64M", sum_all, 1, {1}, {{M64}}, 4.0 * M64, 0, 1e-5, false},
        {"column_sums", "4096x4096", column_sums, 1, {2}, {{4096, 4096}}, 4 * SQ(4096) + 4 * 4096.0,
         0, 1e-5, false},
        SQUARE_MM("256", 256, false),
        SQUARE_MM("512", 512, false),
        SQUARE_MM("1024", 1024, false),
        SQUARE_MM("2048", 2048, false),
        SQUARE_MM("4096", 4096, true),
        {"matmul", "4096x512@512x64", matmul, 2, {2, 2}, {{4096, 512}, {512, 64}}, 0,
         MM(4096, 512, 64), 1e-5, false},
        {"matmul", "64x4096@4096x4096", matmul, 2, {2, 2}, {{64, 4096}, {4096, 4096}}, 0,
         MM(64, 4096, 4096), 1e-5, false},
        {"matmul_bias_relu", "512", matmul_bias_relu, 3, {2, 2, 1}, {{512, 512}, {512, 512}, {512}},
         0, MM(512, 512, 512), 1e-5, false},
    };
    kiln_ctx *ctx = kiln_ctx_new(o.device);
    if (!ctx) {
        fprintf(stderr, "kiln_ctx_new: %s\n", kiln_last_ctx_error());
        return 1;
    }
    kiln_machine m;
    if (kiln_machine_measure(ctx, &m) != KILN_OK) { /* this run's limits */
        fprintf(stderr, "machine: %s\n", kiln_ctx_last_error(ctx));
        kiln_ctx_free(ctx);
        return 1;
    }
    bench_emit_machine(&m);
    int rc = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        const spec *s = &specs[i];
        if (s->full_only && !o.full)
            continue;
        kiln_tensor *in[3];
        int failed = 0;
        for (int j = 0; j < s->ninputs; j++) {
            in[j] = kiln_randn(ctx, KILN_F32, s->ndim[j], s->dims[j], 100 + (uint64_t)j);
            if (kiln_realize(in[j]) != KILN_OK && !failed) {
                bench_emit_error("ops", s->name, s->shape, "kiln-lazy",
                                 kiln_error_message(in[j]));
                failed = 1;
            }
        }
        bench_workload w = {
            .name = s->name,
            .shape = s->shape,
            .suite = "ops",
            .ninputs = s->ninputs,
            .inputs = in,
            .build = s->build,
            .bytes = s->bytes,
            .flops = s->flops,
        };
        if (!failed)
            failed = bench_lazy_eager(ctx, &w, &o, &m, s->tol);
        for (int j = 0; j < s->ninputs; j++)
            kiln_release(in[j]);
        rc |= failed;
    }
    kiln_ctx_free(ctx);
    return rc;
}
