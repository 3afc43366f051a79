/* nn.c — kiln's neural-network workloads, lazy against eager in one process
 * (as bench/ops.c): a 3x3 convolution, an MLP training step (forward,
 * backward and an SGD update of every parameter), and a pre-norm transformer
 * block (d=512, 8 heads, sequence 256, batch 8) forward, and forward with
 * backward, and the block's attention alone (forward, and with its backward). A workload that trains returns its updated parameters (or its
 * gradients) joined into one tensor, which is what lazy and eager compare.
 *
 * Usage: nn [--quick | --full] [--steps N] [--device cpu|cuda]; JSON lines on stdout as ops.c's,
 * rated in GFLOP/s (the matmul and attention arithmetic) against the
 * machine's FMA peak. */
#include <stdio.h>

#include "bench/bench.h"

enum { BATCH = 8, SEQ = 256, DIM = 512, HEADS = 8, HDIM = DIM / HEADS, FF = 4 * DIM };
enum { CONV_N = 8, CONV_C = 64, CONV_HW = 32 };

static kiln_tensor *conv3x3(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_conv2d(in[0], in[1], in[2], 1, 1, 1, 1, 1, 1, 1);
}

/* [B, S, D] -> [B, H, S, D/H] */
static kiln_tensor *split_heads(kiln_tensor *t) {
    const int64_t d[] = {BATCH, SEQ, HEADS, HDIM};
    const int perm[] = {0, 2, 1, 3};
    return kiln_permute(kiln_reshape(t, 4, d), perm);
}

/* x + attn(ln1(x)), then + mlp(ln2(.)), with the inputs
 * x, ln1 w/b, Wqkv, bqkv, Wo, bo, ln2 w/b, W1, b1, W2, b2. */
static kiln_tensor *transformer_block(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    kiln_tensor *x = in[0];
    kiln_tensor *h = kiln_layer_norm(x, 1, in[1], in[2], 1e-5);
    kiln_tensor *qkv = kiln_linear(h, in[3], in[4]);
    kiln_tensor *q = split_heads(kiln_slice(qkv, 2, 0, DIM, 1));
    kiln_tensor *k = split_heads(kiln_slice(qkv, 2, DIM, 2 * DIM, 1));
    kiln_tensor *v = split_heads(kiln_slice(qkv, 2, 2 * DIM, 3 * DIM, 1));
    kiln_tensor *a = kiln_scaled_dot_product_attention(q, k, v, false, 0);
    const int perm[] = {0, 2, 1, 3};
    const int64_t merged[] = {BATCH, SEQ, DIM};
    a = kiln_reshape(kiln_permute(a, perm), 3, merged);
    kiln_tensor *x2 = kiln_add(x, kiln_linear(a, in[5], in[6]));
    kiln_tensor *h2 = kiln_layer_norm(x2, 1, in[7], in[8], 1e-5);
    kiln_tensor *m = kiln_linear(kiln_gelu(kiln_linear(h2, in[9], in[10])), in[11], in[12]);
    return kiln_add(x2, m);
}

/* The gradients of the block's output (summed) with respect to x and every
 * parameter, flattened and joined. */
static kiln_tensor *transformer_block_grad(kiln_tensor *const *in, const void *arg) {
    return bench_gradients_joined(transformer_block(in, arg), 13, in);
}

/* softmax(q k^T / 8) v over [B, H, S, E] heads: kiln_scaled_dot_product_attention,
 * one fused kernel where the device has it (KILN_FUSED_ATTENTION=0: the
 * scores, their softmax and the two products). */
static kiln_tensor *attention_fwd(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_scaled_dot_product_attention(in[0], in[1], in[2], false, 0);
}

/* The gradients of sum(attention(q, k, v) * w) with respect to q, k and v,
 * flattened and joined. */
static kiln_tensor *attention_fwd_bwd(kiln_tensor *const *in, const void *arg) {
    return bench_gradients_joined(
        kiln_sum(kiln_mul(attention_fwd(in, arg), in[3]), 0, NULL, false), 3, in);
}

enum { MLP_B = 128, MLP_IN = 784, MLP_H1 = 256, MLP_H2 = 128, MLP_OUT = 10 };

/* One SGD step of a 784-256-128-10 ReLU MLP under cross-entropy: inputs x,
 * targets, then W1, b1, W2, b2, W3, b3; returns the updated parameters. */
static kiln_tensor *mlp_train_step(kiln_tensor *const *in, const void *arg) {
    (void)arg;
    kiln_tensor *h = kiln_relu(kiln_linear(in[0], in[2], in[3]));
    h = kiln_relu(kiln_linear(h, in[4], in[5]));
    kiln_tensor *loss =
        kiln_cross_entropy(kiln_linear(h, in[6], in[7]), in[1], KILN_REDUCTION_MEAN);
    kiln_tensor *g[6], *p[6];
    if (kiln_gradients(loss, NULL, 6, in + 2, g) != KILN_OK)
        return loss;
    for (int i = 0; i < 6; i++) {
        const int64_t n = kiln_numel(g[i]);
        p[i] = kiln_reshape(kiln_sub(in[2 + i], kiln_mul_scalar(g[i], 0.05)), 1, &n);
    }
    return kiln_cat(6, p, 0);
}

/* randn * scale, realized: weights scaled as an initialiser would, so that
 * activations stay of order one through the block. */
static kiln_tensor *input(kiln_ctx *ctx, int ndim, const int64_t *dims, uint64_t seed,
                          double scale, int *failed) {
    kiln_tensor *t = kiln_mul_scalar(kiln_randn(ctx, KILN_F32, ndim, dims, seed), scale);
    if (kiln_realize(t) != KILN_OK && !*failed) {
        bench_emit_error("nn", "input", "", "kiln-lazy", kiln_error_message(t));
        *failed = 1;
    }
    return t;
}

int main(int argc, char **argv) {
    bench_opts o = bench_parse_opts(argc, argv);
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
    int rc = 0, failed = 0;

    kiln_scope_begin(ctx);
    const int64_t xd[] = {CONV_N, CONV_C, CONV_HW, CONV_HW}, wd[] = {CONV_C, CONV_C, 3, 3},
                  bd[] = {CONV_C};
    kiln_tensor *conv_in[] = {input(ctx, 4, xd, 1, 1.0, &failed),
                              input(ctx, 4, wd, 2, 1.0 / 24, &failed),
                              input(ctx, 1, bd, 3, 1.0, &failed)};
    bench_workload conv = {
        .name = "conv2d_3x3",
        .shape = "8x64x32x32,64x64x3x3",
        .suite = "nn",
        .ninputs = 3,
        .inputs = conv_in,
        .build = conv3x3,
        .flops = 2.0 * CONV_N * CONV_C * CONV_HW * CONV_HW * CONV_C * 9,
    };
    rc |= failed || bench_lazy_eager(ctx, &conv, &o, &m, 1e-4);
    kiln_scope_end(ctx);

    failed = 0;
    kiln_scope_begin(ctx);
    const int64_t x3[] = {BATCH, SEQ, DIM}, d1[] = {DIM}, qkvw[] = {3 * DIM, DIM},
                  qkvb[] = {3 * DIM}, ow[] = {DIM, DIM}, w1[] = {FF, DIM}, b1[] = {FF},
                  w2[] = {DIM, FF};
    const double ws = 1.0 / 22.6, ws2 = 1.0 / 45.3; /* 1/sqrt(fan_in) */
    kiln_tensor *tb_in[] = {
        input(ctx, 3, x3, 10, 1.0, &failed),   input(ctx, 1, d1, 11, 0.1, &failed),
        input(ctx, 1, d1, 12, 0.1, &failed),   input(ctx, 2, qkvw, 13, ws, &failed),
        input(ctx, 1, qkvb, 14, 0.1, &failed), input(ctx, 2, ow, 15, ws, &failed),
        input(ctx, 1, d1, 16, 0.1, &failed),   input(ctx, 1, d1, 17, 0.1, &failed),
        input(ctx, 1, d1, 18, 0.1, &failed),   input(ctx, 2, w1, 19, ws, &failed),
        input(ctx, 1, b1, 20, 0.1, &failed),   input(ctx, 2, w2, 21, ws2, &failed),
        input(ctx, 1, d1, 22, 0.1, &failed),
    };
    double tokens = (double)BATCH * SEQ;
    bench_workload block = {
        .name = "transformer_block_fwd",
        .shape = "b8,s256,d512,h8",
        .suite = "nn",
        .ninputs = 13,
        .inputs = tb_in,
        .build = transformer_block,
        .flops = 2.0 * tokens * DIM * (3 * DIM + DIM + 2 * FF) +
                 2.0 * 2.0 * BATCH * HEADS * SEQ * SEQ * HDIM,
    };
    rc |= failed || bench_lazy_eager(ctx, &block, &o, &m, 1e-3);
    bench_workload block_grad = block;
    block_grad.name = "transformer_block_fwd_bwd";
    block_grad.build = transformer_block_grad;
    block_grad.flops = 3 * block.flops; /* the backward pass is twice the forward */
    rc |= failed || bench_lazy_eager(ctx, &block_grad, &o, &m, 1e-3);
    kiln_scope_end(ctx);

    failed = 0;
    kiln_scope_begin(ctx);
    const int64_t hd[] = {BATCH, HEADS, SEQ, HDIM};
    kiln_tensor *att_in[] = {input(ctx, 4, hd, 40, 1.0, &failed), input(ctx, 4, hd, 41, 1.0, &failed),
                             input(ctx, 4, hd, 42, 1.0, &failed), input(ctx, 4, hd, 43, 1.0, &failed)};
    bench_workload att = {
        .name = "attention_fwd",
        .shape = "b8,s256,d512,h8",
        .suite = "nn",
        .ninputs = 3,
        .inputs = att_in,
        .build = attention_fwd,
        .flops = 2.0 * 2.0 * BATCH * HEADS * SEQ * SEQ * HDIM,
    };
    rc |= failed || bench_lazy_eager(ctx, &att, &o, &m, 1e-4);
    bench_workload att_grad = att;
    att_grad.name = "attention_fwd_bwd";
    att_grad.ninputs = 4;
    att_grad.build = attention_fwd_bwd;
    att_grad.flops = 3 * att.flops; /* the backward's four products at twice the forward */
    rc |= failed || bench_lazy_eager(ctx, &att_grad, &o, &m, 1e-4);
    kiln_scope_end(ctx);

    failed = 0;
    kiln_scope_begin(ctx);
    const int64_t mx[] = {MLP_B, MLP_IN}, mw1[] = {MLP_H1, MLP_IN}, mb1[] = {MLP_H1},
                  mw2[] = {MLP_H2, MLP_H1}, mb2[] = {MLP_H2}, mw3[] = {MLP_OUT, MLP_H2},
                  mb3[] = {MLP_OUT}, mt[] = {MLP_B};
    int64_t labels[MLP_B];
    for (int i = 0; i < MLP_B; i++)
        labels[i] = (i * 7 + 3) % MLP_OUT;
    kiln_tensor *mlp_in[] = {
        input(ctx, 2, mx, 30, 1.0, &failed),
        kiln_from_data(ctx, KILN_I64, 1, mt, labels),
        input(ctx, 2, mw1, 31, 1.0 / 28, &failed),
        input(ctx, 1, mb1, 32, 0.01, &failed),
        input(ctx, 2, mw2, 33, 1.0 / 16, &failed),
        input(ctx, 1, mb2, 34, 0.01, &failed),
        input(ctx, 2, mw3, 35, 1.0 / 11.3, &failed),
        input(ctx, 1, mb3, 36, 0.01, &failed),
    };
    double mlp_macs = (double)MLP_B * (MLP_IN * MLP_H1 + MLP_H1 * MLP_H2 + MLP_H2 * MLP_OUT);
    bench_workload mlp = {
        .name = "mlp_train_step",
        .shape = "b128,784-256-128-10",
        .suite = "nn",
        .ninputs = 8,
        .inputs = mlp_in,
        .build = mlp_train_step,
        .flops = 3 * 2 * mlp_macs, /* forward, and backward at twice its cost */
    };
    rc |= failed || bench_lazy_eager(ctx, &mlp, &o, &m, 1e-4);
    kiln_scope_end(ctx);
    kiln_ctx_free(ctx);
    return rc;
}
