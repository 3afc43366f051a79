/* fusion_test.c — what the scheduler fuses: kernel counts for the shapes of
 * work the design names (an elementwise chain, softmax and layer-norm over
 * rows, a repeated step), and a differential check of random graphs mixing
 * elementwise ops, views and reductions broadcast back over their rows, run
 * lazily (fused), eagerly (one kernel per op) and on the reference evaluator. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/kiln.h"

static uint64_t lcg_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static double lcg_uniform(uint64_t *s) { return (double)lcg_next(s) * 0x1p-53; }

/* Fresh inputs in [-2, 2). */
static float *random_data(int64_t n, uint64_t seed) {
    float *d = malloc(sizeof *d * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        d[i] = (float)(4 * lcg_uniform(&seed) - 2);
    return d;
}

static double *read_f64(kiln_tensor *t) {
    int64_t n = kiln_numel(t);
    kiln_tensor *c = kiln_cast(t, KILN_F64);
    double *out = malloc(sizeof *out * (size_t)(n ? n : 1));
    cr_assert_eq(kiln_to_host(c, out, sizeof *out * (size_t)n), KILN_OK, "%s",
                 kiln_error_message(c));
    return out;
}

/* sum (a-b)^2 / sum a^2, 0 when both are zero. */
static double nmse(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += a[i] * a[i];
    }
    return den == 0 ? num : num / den;
}

static int64_t kernels_for(kiln_ctx *ctx, kiln_tensor *t) {
    int64_t before = kiln_ctx_stats(ctx).kernels;
    cr_assert_eq(kiln_realize(t), KILN_OK, "%s", kiln_error_message(t));
    return kiln_ctx_stats(ctx).kernels - before;
}

static kiln_tensor *softmax_rows(kiln_tensor *x) {
    int ax = -1;
    kiln_tensor *e = kiln_exp(kiln_sub(x, kiln_max(x, 1, &ax, true)));
    return kiln_div(e, kiln_sum(e, 1, &ax, true));
}

static kiln_tensor *layer_norm_rows(kiln_tensor *x) {
    int ax = -1;
    kiln_tensor *c = kiln_sub(x, kiln_mean(x, 1, &ax, true));
    kiln_tensor *var = kiln_mean(kiln_mul(c, c), 1, &ax, true);
    return kiln_mul(c, kiln_rsqrt(kiln_add_scalar(var, 1e-5)));
}

/* Runs f on the same data in a lazy CPU context and on the reference
 * evaluator; checks the values agree and returns the kernels the CPU ran. */
static int64_t check_against_ref(kiln_tensor *(*f)(kiln_tensor *), int ndim,
                                 const int64_t *dims, uint64_t seed) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= dims[d];
    float *data = random_data(n, seed);
    kiln_ctx *cpu = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *y = f(kiln_from_data(cpu, KILN_F32, ndim, dims, data));
    kiln_tensor *yr = f(kiln_from_data(ref, KILN_F32, ndim, dims, data));
    int64_t k = kernels_for(cpu, y);
    double *a = read_f64(yr), *b = read_f64(y);
    double e = nmse(a, b, kiln_numel(y));
    cr_assert(e < 1e-12, "nmse %g against the reference evaluator", e);
    free(a);
    free(b);
    free(data);
    kiln_ctx_free(cpu);
    kiln_ctx_free(ref);
    return k;
}

Test(fusion, elementwise_chain_is_one_kernel) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    const int64_t dims[2] = {33, 70};
    float *data = random_data(33 * 70, 1);
    kiln_tensor *x = kiln_from_data(ctx, KILN_F32, 2, dims, data);
    kiln_tensor *y = x;
    /* ten ops, with a broadcast operand and a view in the middle */
    const int64_t bdims[1] = {70};
    kiln_tensor *bias = kiln_from_data(ctx, KILN_F32, 1, bdims, data);
    y = kiln_tanh(kiln_add(kiln_mul_scalar(y, 0.5), bias));
    y = kiln_sigmoid(kiln_sub(kiln_exp(kiln_neg(y)), x));
    y = kiln_transpose(kiln_transpose(y, 0, 1), 0, 1);
    y = kiln_gelu(kiln_maximum(kiln_abs(y), kiln_mul(x, x)));
    cr_assert_eq(kernels_for(ctx, y), 1);
    free(data);
    kiln_ctx_free(ctx);
}

Test(fusion, softmax_over_rows_is_one_kernel) {
    const int64_t dims[2] = {37, 129};
    cr_assert_eq(check_against_ref(softmax_rows, 2, dims, 2), 1);
}

Test(fusion, layer_norm_over_rows_is_one_kernel) {
    const int64_t dims[2] = {19, 300};
    cr_assert_eq(check_against_ref(layer_norm_rows, 2, dims, 3), 1);
}

/* relu(x @ w + bias), checked against the reference evaluator. */
static kiln_tensor *linear_relu(kiln_ctx *ctx, int64_t n, int64_t k, int64_t m, uint64_t seed) {
    const int64_t xd[2] = {n, k}, wd[2] = {k, m}, bd[1] = {m};
    float *x = random_data(n * k, seed), *w = random_data(k * m, seed + 1),
          *b = random_data(m, seed + 2);
    kiln_tensor *y = kiln_relu(kiln_add(kiln_matmul(kiln_from_data(ctx, KILN_F32, 2, xd, x),
                                                    kiln_from_data(ctx, KILN_F32, 2, wd, w)),
                                        kiln_from_data(ctx, KILN_F32, 1, bd, b)));
    free(x);
    free(w);
    free(b);
    return y;
}

static void expect_like_ref(kiln_tensor *got, kiln_tensor *want) {
    double *g = read_f64(got), *w = read_f64(want);
    int64_t n = kiln_numel(want);
    cr_assert(nmse(w, g, n) < 1e-10, "nmse %g", nmse(w, g, n));
    free(g);
    free(w);
}

Test(fusion, matmul_bias_relu_is_one_kernel) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *y = linear_relu(ctx, 37, 19, 70, 5);
    cr_assert_eq(kernels_for(ctx, y), 1);
    expect_like_ref(y, linear_relu(ref, 37, 19, 70, 5));
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

Test(fusion, gelu_mlp_layer_is_two_kernels) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *out[2];
    kiln_ctx *cs[2] = {ctx, ref};
    for (int c = 0; c < 2; c++) {
        const int64_t xd[2] = {24, 32}, w1d[2] = {32, 64}, w2d[2] = {64, 32}, bd[1] = {64};
        float *x = random_data(24 * 32, 1), *w1 = random_data(32 * 64, 2),
              *w2 = random_data(64 * 32, 3), *b1 = random_data(64, 4), *b2 = random_data(32, 5);
        kiln_tensor *h = kiln_gelu(kiln_add(
            kiln_matmul(kiln_from_data(cs[c], KILN_F32, 2, xd, x),
                        kiln_from_data(cs[c], KILN_F32, 2, w1d, w1)),
            kiln_from_data(cs[c], KILN_F32, 1, bd, b1)));
        const int64_t b2d[1] = {32};
        out[c] = kiln_add(kiln_matmul(h, kiln_from_data(cs[c], KILN_F32, 2, w2d, w2)),
                          kiln_from_data(cs[c], KILN_F32, 1, b2d, b2));
        free(x);
        free(w1);
        free(w2);
        free(b1);
        free(b2);
    }
    cr_assert_eq(kernels_for(ctx, out[0]), 2);
    expect_like_ref(out[0], out[1]);
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

/* The gradients of sum(linear(x, w)^2) with respect to w [out, in] (read
 * transposed by kiln_linear) and, as the other side of the rule, of
 * sum((u^T @ v)^2) with respect to u: realized with the forward product
 * already in memory, each is two kernels, the square's derivative 2y (a
 * matmul's operand is in memory) and one matmul storing in the parameter's
 * layout; before, a third copied a product made in the transposed layout
 * into it. */
static void transposed_operand_grads(kiln_ctx *ctx, kiln_tensor **gw, kiln_tensor **gu,
                                     kiln_tensor **fwd) {
    const int64_t xd[2] = {13, 21}, wd[2] = {17, 21}, ud[2] = {21, 13}, vd[2] = {21, 9};
    float *x = random_data(13 * 21, 31), *w = random_data(17 * 21, 32),
          *u = random_data(21 * 13, 33), *v = random_data(21 * 9, 34);
    kiln_tensor *X = kiln_from_data(ctx, KILN_F32, 2, xd, x),
                *W = kiln_from_data(ctx, KILN_F32, 2, wd, w),
                *U = kiln_from_data(ctx, KILN_F32, 2, ud, u),
                *V = kiln_from_data(ctx, KILN_F32, 2, vd, v);
    free(x);
    free(w);
    free(u);
    free(v);
    kiln_tensor *y = kiln_linear(X, W, NULL), *z = kiln_matmul(kiln_transpose(U, 0, 1), V);
    fwd[0] = y;
    fwd[1] = z;
    kiln_tensor *ly = kiln_sum(kiln_mul(y, y), 0, NULL, false);
    kiln_tensor *lz = kiln_sum(kiln_mul(z, z), 0, NULL, false);
    cr_assert_eq(kiln_gradients(ly, NULL, 1, &W, gw), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_gradients(lz, NULL, 1, &U, gu), KILN_OK, "%s", kiln_ctx_last_error(ctx));
}

Test(fusion, a_transposed_operand_gets_its_gradient_without_a_copy) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *gw, *gu, *rw, *ru, *fwd[2], *rfwd[2];
    transposed_operand_grads(ctx, &gw, &gu, fwd);
    transposed_operand_grads(ref, &rw, &ru, rfwd);
    cr_assert_eq(kernels_for(ctx, fwd[0]), 1);
    cr_assert_eq(kernels_for(ctx, fwd[1]), 1);
    int64_t kw = kernels_for(ctx, gw), ku = kernels_for(ctx, gu);
    cr_assert_eq(kw, 2, "dW: %lld kernels", (long long)kw);
    cr_assert_eq(ku, 2, "dU: %lld kernels", (long long)ku);
    expect_like_ref(gw, rw);
    expect_like_ref(gu, ru);
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

/* A row statistic broadcast over its rows and read by two kernels (a
 * matmul's operand and a column sum), as a layer-norm's is by its forward
 * and backward passes: the statistic is stored once, [rows, 1], and each
 * kernel reads it through the broadcast; nothing stores the [rows, cols]
 * broadcast itself (in GPT-2's step it was a copy-only kernel, or the
 * statistic computed at the broadcast's size). */
static kiln_tensor *broadcast_read_twice(kiln_ctx *ctx) {
    const int64_t xd[2] = {24, 40}, wd[2] = {40, 8};
    float *x = random_data(24 * 40, 41), *w = random_data(40 * 8, 42);
    kiln_tensor *X = kiln_from_data(ctx, KILN_F32, 2, xd, x),
                *W = kiln_from_data(ctx, KILN_F32, 2, wd, w);
    free(x);
    free(w);
    int ax = 1, ax0 = 0;
    kiln_tensor *cx = kiln_sub(X, kiln_mean(X, 1, &ax, true));
    kiln_tensor *r = kiln_rsqrt(kiln_add_scalar(kiln_mean(kiln_mul(cx, cx), 1, &ax, true), 1e-5));
    X = cx;
    kiln_tensor *a = kiln_matmul(kiln_mul(X, r), W);
    kiln_tensor *c = kiln_sum(kiln_mul(kiln_exp(X), r), 1, &ax0, false);
    const int64_t na = 24 * 8, nc = 40;
    kiln_tensor *parts[2] = {kiln_reshape(a, 1, &na), kiln_reshape(c, 1, &nc)};
    return kiln_cat(2, parts, 0);
}

Test(fusion, a_broadcast_read_by_two_kernels_is_not_copied) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *y = broadcast_read_twice(ctx);
    cr_assert_eq(kiln_profile_begin(ctx), KILN_OK);
    int64_t k = kernels_for(ctx, y);
    cr_assert_eq(kiln_profile_end(ctx), KILN_OK);
    /* the mean, the centring, the variance, the statistic, the operand, the
     * matmul, the column sum, the cat */
    cr_assert_eq(k, 8, "%lld kernels", (long long)k);
    /* The statistic's kernel stores its 24 values, not their broadcast over
     * 24x40 (which it did, computing rsqrt 960 times). */
    bool found = false;
    for (int i = 0; i < kiln_profile_count(ctx); i++) {
        kiln_kernel_profile p;
        cr_assert_eq(kiln_profile_kernel(ctx, i, &p), KILN_OK);
        if (!strstr(p.fused, "rsqrt"))
            continue;
        found = true;
        cr_assert(p.bytes < 24 * 40 * 4, "%s (%s) moves %g bytes", p.name, p.fused, p.bytes);
    }
    cr_assert(found, "no kernel computes the rsqrt");
    expect_like_ref(y, broadcast_read_twice(ref));
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

/* A value made from two stored tensors of its size, spread over windows of
 * 4 (an upsampling: each element read 4 times), then scaled by a third.
 * With reads = 1, the value reads one stored tensor only. */
static kiln_tensor *spread_over_windows(kiln_ctx *ctx, int reads) {
    const int64_t d[3] = {16, 12, 10}, up[5] = {16, 12, 2, 10, 2}, s5[5] = {16, 12, 1, 10, 1};
    const int64_t full[4] = {16, 24, 20};
    float *a = random_data(16 * 12 * 10, 61), *b = random_data(16 * 12 * 10, 62),
          *c = random_data(16 * 24 * 20, 63);
    kiln_tensor *A = kiln_from_data(ctx, KILN_F32, 3, d, a), *B = kiln_from_data(ctx, KILN_F32, 3, d, b);
    kiln_tensor *C = kiln_from_data(ctx, KILN_F32, 3, full, c);
    free(a);
    free(b);
    free(c);
    kiln_tensor *x = reads == 2 ? kiln_add(kiln_mul(A, B), kiln_tanh(A)) : kiln_tanh(kiln_mul(A, A));
    kiln_tensor *v = kiln_expand(kiln_reshape(x, 5, s5), 5, up);
    return kiln_mul(kiln_reshape(v, 3, full), C);
}

Test(fusion, a_value_read_repeatedly_through_a_broadcast_is_stored) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    /* stored at its own size (one kernel), then spread (another): computed
     * in the spreading kernel it would read A and B 4 times each */
    kiln_tensor *y = spread_over_windows(ctx, 2);
    cr_assert_eq(kernels_for(ctx, y), 2);
    expect_like_ref(y, spread_over_windows(ref, 2));
    /* reading one stored tensor, it is recomputed: one kernel */
    y = spread_over_windows(ctx, 1);
    cr_assert_eq(kernels_for(ctx, y), 1);
    expect_like_ref(y, spread_over_windows(ref, 1));
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

/* A cat of three elementwise chains over leaves of their own (one of them a
 * transposed view), joined along axis ax of [4, 9s, 40]. */
static kiln_tensor *cat_of_chains(kiln_ctx *ctx, int64_t s, int ax) {
    int64_t da[3] = {4, 3 * s, 40}, db[3] = {4, s, 40}, dc[3] = {4, 40, 5 * s};
    if (ax == 2) { /* the pieces' sizes move to the joined axis */
        da[1] = db[1] = 9 * s, dc[1] = 3 * s;
        da[2] = 3 * s, db[2] = s, dc[2] = 9 * s;
    }
    int64_t na = da[0] * da[1] * da[2], nb = db[0] * db[1] * db[2], nc = dc[0] * dc[1] * dc[2];
    float *a = random_data(na, 51), *b = random_data(nb, 52), *c = random_data(nc, 53);
    kiln_tensor *A = kiln_from_data(ctx, KILN_F32, 3, da, a),
                *B = kiln_from_data(ctx, KILN_F32, 3, db, b),
                *C = kiln_from_data(ctx, KILN_F32, 3, dc, c);
    free(a);
    free(b);
    free(c);
    kiln_tensor *parts[3] = {kiln_tanh(kiln_mul(A, A)), kiln_exp(kiln_neg(B)),
                             kiln_add_scalar(kiln_transpose(C, 1, 2), 0.5)};
    return kiln_cat(3, parts, ax);
}

/* A materialised cat is one kernel per source, each source's chain fused
 * into it and stored in its region (no select chain reading every source at
 * every element); along the leading and the last axis, lazily and eagerly,
 * agreeing with the reference evaluator. A small cat stays one kernel. */
Test(fusion, a_cat_is_one_kernel_per_source) {
    for (int ax = 1; ax <= 2; ax++) {
        kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *eager = kiln_ctx_new(KILN_CPU),
                 *ref = kiln_ctx_new(KILN_REF);
        kiln_ctx_set_mode(eager, KILN_EAGER);
        kiln_tensor *want = cat_of_chains(ref, 8, ax);
        kiln_tensor *y = cat_of_chains(ctx, 8, ax);
        cr_assert_eq(kiln_profile_begin(ctx), KILN_OK);
        cr_assert_eq(kernels_for(ctx, y), 3, "axis %d", ax);
        double bytes = 0;
        for (int i = 0; i < kiln_profile_count(ctx); i++) {
            kiln_kernel_profile p;
            cr_assert_eq(kiln_profile_kernel(ctx, i, &p), KILN_OK);
            bytes += p.bytes;
        }
        cr_assert_eq(kiln_profile_end(ctx), KILN_OK);
        /* each element read once and written once: its region, not the whole */
        double need = 2.0 * 4 * (double)kiln_numel(y);
        cr_assert(bytes <= need * 1.01, "axis %d: %g bytes moved, %g needed", ax, bytes, need);
        expect_like_ref(y, want);
        expect_like_ref(cat_of_chains(eager, 8, ax), want);
        kiln_tensor *small = cat_of_chains(ctx, 1, ax);
        cr_assert_eq(kernels_for(ctx, small), 1, "axis %d", ax);
        expect_like_ref(small, cat_of_chains(ref, 1, ax));
        /* a source of size 0 first: its region runs nothing, and the
         * buffer is still the first region's to allocate */
        kiln_tensor *parts[2][3];
        kiln_ctx *both[2] = {ctx, ref};
        for (int c = 0; c < 2; c++) {
            kiln_tensor *full = cat_of_chains(both[c], 8, ax);
            int64_t ed[3] = {kiln_shape(full)[0], kiln_shape(full)[1], kiln_shape(full)[2]};
            ed[ax] = 0;
            int64_t half = kiln_shape(full)[ax] / 2;
            parts[c][0] = kiln_zeros(both[c], KILN_F32, 3, ed);
            parts[c][1] = kiln_exp(kiln_slice(full, ax, 0, half, 1));
            parts[c][2] = kiln_neg(kiln_slice(full, ax, half, kiln_shape(full)[ax], 1));
        }
        kiln_tensor *with_empty = kiln_cat(3, parts[0], ax);
        cr_assert_leq(kernels_for(ctx, with_empty), 6, "axis %d", ax);
        expect_like_ref(with_empty, kiln_cat(3, parts[1], ax));
        kiln_ctx_free(ctx);
        kiln_ctx_free(eager);
        kiln_ctx_free(ref);
    }
}

/* Many small sources: a select over every source at every element would be
 * one function too long for the compiler (1000 scalars took gcc 100 s), so
 * past 64 sources even a small cat is one kernel per source; 64 stay one. */
static kiln_tensor *cat_of_scalars(kiln_ctx *ctx, int n) {
    kiln_tensor *parts[100];
    for (int i = 0; i < n; i++) {
        const int64_t one = 1, d = i % 3 + 2;
        float v[4] = {(float)i, 0.5f, -1.0f * (float)i, 2.0f};
        parts[i] = kiln_reshape(kiln_sum(kiln_from_data(ctx, KILN_F32, 1, &d, v), 0, NULL, false),
                                1, &one);
    }
    return kiln_cat(n, parts, 0);
}

Test(fusion, a_cat_of_many_small_sources_is_regions) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *many = cat_of_scalars(ctx, 100), *few = cat_of_scalars(ctx, 64);
    cr_assert_eq(kernels_for(ctx, many), 200, "100 sums and 100 regions");
    cr_assert_eq(kernels_for(ctx, few), 65, "64 sums and one select chain");
    expect_like_ref(many, cat_of_scalars(ref, 100));
    expect_like_ref(few, cat_of_scalars(ref, 64));
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

static kiln_tensor *matmul_read_twice(kiln_ctx *ctx) {
    const int64_t xd[2] = {8, 9}, wd[2] = {9, 10};
    float *x = random_data(8 * 9, 7), *w = random_data(9 * 10, 8);
    kiln_tensor *mm = kiln_matmul(kiln_from_data(ctx, KILN_F32, 2, xd, x),
                                  kiln_from_data(ctx, KILN_F32, 2, wd, w));
    free(x);
    free(w);
    return kiln_add(kiln_relu(mm), kiln_transpose(kiln_exp(kiln_transpose(mm, 0, 1)), 0, 1));
}

Test(fusion, a_matmul_read_twice_is_its_own_kernel) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *y = matmul_read_twice(ctx);
    cr_assert_eq(kernels_for(ctx, y), 2);
    expect_like_ref(y, matmul_read_twice(ref));
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

/* An Adam-like update as three assignments: m and v are new values, and p's
 * reads them back. Returns p's, m's and v's values. Under no-grad, as an
 * optimiser records it, every op's result is a one-source cat (a detach),
 * which must fuse as the identity it is. */
static void adam_like(kiln_ctx *ctx, double *out, bool no_grad) {
    const int64_t d[2] = {33, 65};
    const int64_t n = 33 * 65;
    float *pd = random_data(n, 21), *md = random_data(n, 22), *vd = random_data(n, 23),
          *gd = random_data(n, 24);
    for (int64_t i = 0; i < n; i++)
        vd[i] = fabsf(vd[i]);
    kiln_tensor *p = kiln_from_data(ctx, KILN_F32, 2, d, pd), *m = kiln_from_data(ctx, KILN_F32, 2, d, md),
                *v = kiln_from_data(ctx, KILN_F32, 2, d, vd), *g = kiln_from_data(ctx, KILN_F32, 2, d, gd);
    if (no_grad)
        kiln_no_grad_begin(ctx);
    kiln_assign(m, kiln_add(kiln_mul_scalar(m, 0.9), kiln_mul_scalar(g, 0.1)));
    kiln_assign(v, kiln_add(kiln_mul_scalar(v, 0.99), kiln_mul_scalar(kiln_mul(g, g), 0.01)));
    kiln_assign(p, kiln_sub(p, kiln_mul_scalar(kiln_div(m, kiln_add_scalar(kiln_sqrt(v), 1e-8)), 1e-3)));
    if (no_grad)
        kiln_no_grad_end(ctx);
    int64_t before = kiln_ctx_stats(ctx).kernels;
    cr_assert_eq(kiln_sync(ctx), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    if (kiln_ctx_device(ctx) == KILN_CPU)
        cr_assert_eq(kiln_ctx_stats(ctx).kernels - before, 1, "the update ran as %lld kernels",
                     (long long)(kiln_ctx_stats(ctx).kernels - before));
    kiln_tensor *ts[3] = {p, m, v};
    for (int t = 0; t < 3; t++) {
        double *x = read_f64(ts[t]);
        memcpy(out + t * n, x, sizeof *x * (size_t)n);
        free(x);
    }
    free(pd);
    free(md);
    free(vd);
    free(gd);
}

Test(fusion, siblings_that_read_the_same_inputs_are_one_kernel) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    const int64_t n = 33 * 65;
    double *got = malloc(sizeof *got * 3 * n), *want = malloc(sizeof *want * 3 * n);
    for (int no_grad = 0; no_grad < 2; no_grad++) {
        adam_like(ctx, got, no_grad);
        adam_like(ref, want, no_grad);
        cr_assert(nmse(want, got, 3 * n) < 1e-12, "no_grad %d: nmse %g", no_grad,
                  nmse(want, got, 3 * n));
    }
    free(got);
    free(want);
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

/* Adam's two moments over a gradient that is the transpose of a matmul's
 * output (a linear layer's weight gradient), as three assignments. Returns
 * the new m, v and p and the kernels the sync ran. */
static int64_t moments_of_transposed(kiln_ctx *ctx, double *out) {
    const int64_t ad[2] = {16, 24}, bd[2] = {16, 40}, d[2] = {40, 24};
    const int64_t n = 40 * 24;
    float *a = random_data(16 * 24, 31), *b = random_data(16 * 40, 32), *md = random_data(n, 33),
          *vd = random_data(n, 34), *pd = random_data(n, 35);
    for (int64_t i = 0; i < n; i++)
        vd[i] = fabsf(vd[i]);
    kiln_tensor *m = kiln_from_data(ctx, KILN_F32, 2, d, md), *v = kiln_from_data(ctx, KILN_F32, 2, d, vd),
                *p = kiln_from_data(ctx, KILN_F32, 2, d, pd);
    kiln_tensor *g = kiln_transpose(kiln_matmul(kiln_transpose(kiln_from_data(ctx, KILN_F32, 2, ad, a), 0, 1),
                                                kiln_from_data(ctx, KILN_F32, 2, bd, b)),
                                    0, 1);
    kiln_assign(m, kiln_add(kiln_mul_scalar(m, 0.9), kiln_mul_scalar(g, 0.1)));
    kiln_assign(v, kiln_add(kiln_mul_scalar(v, 0.99), kiln_mul_scalar(kiln_mul(g, g), 0.01)));
    kiln_assign(p, kiln_sub(p, kiln_mul_scalar(kiln_div(m, kiln_add_scalar(kiln_sqrt(v), 1e-8)), 1e-3)));
    int64_t before = kiln_ctx_stats(ctx).kernels;
    cr_assert_eq(kiln_sync(ctx), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    int64_t kernels = kiln_ctx_stats(ctx).kernels - before;
    kiln_tensor *ts[3] = {p, m, v};
    for (int t = 0; t < 3; t++) {
        double *x = read_f64(ts[t]);
        memcpy(out + t * n, x, sizeof *x * (size_t)n);
        free(x);
    }
    free(a);
    free(b);
    free(md);
    free(vd);
    free(pd);
    return kernels;
}

/* The matmul, and one kernel that reads its output transposed in place:
 * the transpose, read by both moments, is copied by no kernel of its own. */
Test(fusion, a_view_read_by_one_group_is_not_copied) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    const int64_t n = 40 * 24;
    double *got = malloc(sizeof *got * 3 * n), *want = malloc(sizeof *want * 3 * n);
    cr_assert_eq(moments_of_transposed(ctx, got), 2);
    moments_of_transposed(ref, want);
    cr_assert(nmse(want, got, 3 * n) < 1e-12, "nmse %g", nmse(want, got, 3 * n));
    free(got);
    free(want);
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

/* The variance of each column from two means: both reductions and the
 * elementwise ops over their results. */
static kiln_tensor *column_variance(kiln_tensor *x) {
    int ax = 0;
    kiln_tensor *m = kiln_mean(x, 1, &ax, false);
    return kiln_sqrt(kiln_add_scalar(kiln_sub(kiln_mean(kiln_mul(x, x), 1, &ax, false), kiln_mul(m, m)), 1e-3));
}

static kiln_tensor *mean_of_all(kiln_tensor *x) { return kiln_mean(kiln_exp(x), 0, NULL, false); }

Test(fusion, ops_over_a_reductions_result_join_its_kernel) {
    const int64_t dims[2] = {37, 23};
    cr_assert_eq(check_against_ref(column_variance, 2, dims, 31), 1);
    cr_assert_eq(check_against_ref(mean_of_all, 2, dims, 32), 1);
}

Test(fusion, eager_mode_runs_one_kernel_per_op) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    kiln_ctx_set_mode(ctx, KILN_EAGER);
    const int64_t dims[2] = {8, 16};
    float *data = random_data(8 * 16, 4);
    int64_t before = kiln_ctx_stats(ctx).kernels;
    kiln_tensor *x = kiln_from_data(ctx, KILN_F32, 2, dims, data);
    kiln_tensor *y = softmax_rows(x); /* max, sub, exp, sum, div */
    cr_assert_eq(kiln_realize(y), KILN_OK);
    cr_assert_eq(kiln_ctx_stats(ctx).kernels - before, 5);
    free(data);
    kiln_ctx_free(ctx);
}

Test(fusion, a_second_identical_step_compiles_nothing) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    const int64_t dims[2] = {16, 40};
    for (int step = 0; step < 3; step++) {
        float *data = random_data(16 * 40, 10 + (uint64_t)step);
        kiln_scope_begin(ctx);
        kiln_tensor *y = layer_norm_rows(kiln_from_data(ctx, KILN_F32, 2, dims, data));
        kiln_stats before = kiln_ctx_stats(ctx);
        cr_assert_eq(kiln_realize(y), KILN_OK);
        kiln_stats after = kiln_ctx_stats(ctx);
        if (step > 0) {
            cr_assert_eq(after.compiles, before.compiles, "step %d compiled", step);
            cr_assert_eq(after.disk_hits, before.disk_hits, "step %d loaded", step);
            /* the same structure: the compiled program is reused as a whole,
             * without even looking up its kernels */
            cr_assert_eq(after.graph_hits, before.graph_hits + 1);
            cr_assert_eq(after.memory_hits, before.memory_hits);
        }
        kiln_scope_end(ctx);
        free(data);
    }
    kiln_ctx_free(ctx);
}

/* Realizes y = x * c + x2 (x2 either x again or a second input) in ctx and
 * returns its first element; the compiled-program cache must tell these
 * structures apart. */
static double affine(kiln_ctx *ctx, const float *a, const float *b, double c, bool twice) {
    const int64_t dims[1] = {64};
    kiln_scope_begin(ctx);
    kiln_tensor *x = kiln_from_data(ctx, KILN_F32, 1, dims, a);
    kiln_tensor *x2 = twice ? x : kiln_from_data(ctx, KILN_F32, 1, dims, b);
    kiln_tensor *y = kiln_add(kiln_mul_scalar(x, c), x2);
    double v = 0;
    float out[64];
    cr_assert_eq(kiln_to_host(y, out, sizeof out), KILN_OK, "%s", kiln_error_message(y));
    for (int i = 0; i < 64; i++) {
        double want = a[i] * (float)c + (twice ? a[i] : b[i]);
        cr_assert_float_eq(out[i], want, 1e-5 * (1 + fabs(want)));
        v += out[i];
    }
    kiln_scope_end(ctx);
    return v;
}

Test(fusion, the_program_cache_keys_on_structure_not_data) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    float *a = random_data(64, 1), *b = random_data(64, 2), *c = random_data(64, 3);
    affine(ctx, a, b, 3.0, false);
    kiln_stats s0 = kiln_ctx_stats(ctx);
    /* new data, same structure: a hit */
    affine(ctx, c, a, 3.0, false);
    kiln_stats s1 = kiln_ctx_stats(ctx);
    cr_assert_eq(s1.graph_hits, s0.graph_hits + 1);
    /* a different scalar is a bound input, not structure: a hit too */
    affine(ctx, a, b, 5.0, false);
    kiln_stats s2 = kiln_ctx_stats(ctx);
    cr_assert_eq(s2.graph_hits, s1.graph_hits + 1);
    /* one input read twice instead of two inputs, or a scalar that folds
     * (x * 1 is x): other structures, which must not reuse the program */
    affine(ctx, a, b, 3.0, true);
    affine(ctx, a, b, 1.0, false);
    kiln_stats s3 = kiln_ctx_stats(ctx);
    cr_assert_eq(s3.graph_hits, s2.graph_hits);
    cr_assert_eq(s3.syncs, s2.syncs + 2);
    free(a);
    free(b);
    free(c);
    kiln_ctx_free(ctx);
}

static kiln_tensor *transposed_row_max(kiln_tensor *x) {
    /* the reduction comes back through a transpose: its rows are columns of
     * the consumer, so it cannot live in the consumer's row loop */
    int ax = 1;
    return kiln_add(x, kiln_transpose(kiln_max(x, 1, &ax, true), 0, 1));
}

static kiln_tensor *sum_of_sums(kiln_tensor *x) {
    int a1 = 1, a0 = 0;
    return kiln_mul(x, kiln_sum(kiln_sum(x, 1, &a1, true), 1, &a0, true));
}

static kiln_tensor *reduce_of_row_values(kiln_tensor *x) {
    /* a reduction whose input holds another reduction of the same rows */
    int ax = 1;
    kiln_tensor *c = kiln_sub(x, kiln_max(x, 1, &ax, true));
    return kiln_sum(kiln_exp(c), 1, &ax, false);
}

Test(fusion, reductions_that_do_not_fit_a_row_are_materialised) {
    const int64_t sq[2] = {23, 23};
    cr_assert_geq(check_against_ref(transposed_row_max, 2, sq, 5), 2);
    const int64_t r[2] = {9, 31};
    cr_assert_geq(check_against_ref(sum_of_sums, 2, r, 6), 2);
    cr_assert_eq(check_against_ref(reduce_of_row_values, 2, r, 7), 1);
}

/* ---- random graphs ---- */

typedef struct gen {
    uint64_t s;
    kiln_tensor *x; /* [3, 5, 7] */
    kiln_tensor *w; /* [7, 7] */
    bool lossy;     /* rounds through a narrow dtype: a last-bit difference upstream
                       may round differently, so the comparison is looser */
} gen;

static int pick(gen *g, int n) { return (int)(lcg_next(&g->s) % (uint64_t)n); }

/* A random expression over x of x's shape: elementwise ops, reductions read
 * back over their rows, broadcasts, views that compose and views that must be
 * copied, matmuls, and round trips through other dtypes. */
static kiln_tensor *random_expr(gen *g, kiln_tensor *t, int depth) {
    if (depth == 0)
        return pick(g, 3) ? g->x : t;
    kiln_tensor *u = random_expr(g, t, depth - 1);
    int ax = pick(g, 3), axes2[2] = {pick(g, 2), 2};
    switch (pick(g, 16)) {
    case 0:
        return kiln_tanh(u);
    case 1:
        return kiln_mul(u, random_expr(g, t, depth - 1));
    case 2:
        return kiln_sub(u, kiln_max(u, 1, &ax, true));
    case 3:
        return kiln_div(u, kiln_add_scalar(kiln_abs(kiln_sum(u, 1, &ax, true)), 1));
    case 4:
        return kiln_add(u, kiln_mean(kiln_mul(u, u), 2, axes2, true));
    case 5:
        return kiln_flip(u, 1, &ax);
    case 6:
        return kiln_exp(kiln_minimum_scalar(u, 3));
    case 7:
        return kiln_where(kiln_gt(u, g->x), u, kiln_neg(u));
    case 8:
        return kiln_add(u, kiln_cast(kiln_argmax(u, 1, &ax, true), KILN_F32));
    case 9: /* a matmul, with whatever follows as its epilogue */
        return kiln_mul_scalar(kiln_matmul(u, g->w), 0.25);
    case 10: /* a broadcast row */
        return kiln_add(u, kiln_slice(random_expr(g, t, depth - 1), 0, 1, 2, 1));
    case 11: { /* a transposed reshape: not a view of its source, so a copy */
        const int64_t d[3] = {3, 5, 7};
        return kiln_add(u, kiln_reshape(kiln_transpose(u, 1, 2), 3, d));
    }
    case 12: { /* a strided slice, padded back */
        const int64_t pads[6] = {0, 0, 0, 0, 1, 2};
        return kiln_pad(kiln_slice(u, 2, 0, 7, 2), pads, 0.5);
    }
    case 13:
        g->lossy = true;
        return kiln_cast(kiln_cast(u, pick(g, 2) ? KILN_F16 : KILN_BF16), KILN_F32);
    case 14:
        return kiln_cast(kiln_sqrt(kiln_add_scalar(kiln_cast(kiln_abs(u), KILN_F64), 1)),
                         KILN_F32);
    default:
        g->lossy = true;
        return kiln_add(u, kiln_cast(kiln_cast(kiln_mul_scalar(u, 3), KILN_I32), KILN_F32));
    }
}

/* Two outputs that share the graph below them: one maybe reduced, one of
 * x's shape. */
static void build(kiln_ctx *ctx, uint64_t seed, const float *x, const float *w, kiln_tensor **y,
                  kiln_tensor **z, bool *lossy) {
    const int64_t xd[3] = {3, 5, 7}, wd[2] = {7, 7};
    gen g = {.s = seed};
    g.x = kiln_from_data(ctx, KILN_F32, 3, xd, x);
    g.w = kiln_from_data(ctx, KILN_F32, 2, wd, w);
    kiln_tensor *shared = random_expr(&g, g.x, 2);
    *y = random_expr(&g, shared, 3);
    int ax = pick(&g, 3);
    if (pick(&g, 2))
        *y = kiln_sum(*y, 1, &ax, false);
    *z = random_expr(&g, shared, 2);
    *lossy = g.lossy;
}

static double *realize_pair(kiln_ctx *ctx, kiln_tensor *y, kiln_tensor *z, int i) {
    /* both outputs of one sync: assigned, so that one program computes them */
    kiln_tensor *dy = kiln_zeros(ctx, KILN_F32, kiln_ndim(y), kiln_shape(y));
    kiln_tensor *dz = kiln_zeros(ctx, KILN_F32, kiln_ndim(z), kiln_shape(z));
    cr_assert_eq(kiln_assign(dy, y), KILN_OK, "graph %d: %s", i, kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_assign(dz, z), KILN_OK, "graph %d: %s", i, kiln_ctx_last_error(ctx));
    cr_assert_eq(kiln_sync(ctx), KILN_OK, "graph %d: %s", i, kiln_ctx_last_error(ctx));
    int64_t ny = kiln_numel(y), nz = kiln_numel(z);
    double *out = malloc(sizeof *out * (size_t)(ny + nz));
    double *a = read_f64(dy), *b = read_f64(dz);
    memcpy(out, a, sizeof *a * (size_t)ny);
    memcpy(out + ny, b, sizeof *b * (size_t)nz);
    free(a);
    free(b);
    return out;
}

Test(fusion, random_graphs_agree_lazy_eager_and_reference, .timeout = 1200) {
    const char *env = getenv("KILN_FUZZ_GRAPHS");
    int graphs = env && atoi(env) > 0 ? atoi(env) : 60;
    const char *first = getenv("KILN_FUZZ_SEED");
    uint64_t base = first ? strtoull(first, NULL, 10) : 1000;
    /* KILN_FUZZ_DEVICE=cuda: the lazy and eager contexts on the GPU */
    const char *on = getenv("KILN_FUZZ_DEVICE");
    kiln_device dev = on && !strcmp(on, "cuda") ? KILN_CUDA : KILN_CPU;
    kiln_ctx *probe = kiln_ctx_new(dev);
    if (!probe)
        cr_skip_test("KILN_FUZZ_DEVICE=%s: %s", on ? on : "cpu", kiln_last_ctx_error());
    kiln_ctx_free(probe);
    for (int i = 0; i < graphs; i++) {
        uint64_t seed = base + (uint64_t)i;
        float *x = random_data(3 * 5 * 7, seed), *w = random_data(7 * 7, seed + 7777);
        kiln_ctx *cs[3] = {kiln_ctx_new(KILN_REF), kiln_ctx_new(dev), kiln_ctx_new(dev)};
        kiln_ctx_set_mode(cs[2], KILN_EAGER);
        double *out[3];
        int64_t n = 0;
        bool lossy = false;
        for (int c = 0; c < 3; c++) {
            kiln_tensor *y, *z;
            build(cs[c], seed, x, w, &y, &z, &lossy);
            n = kiln_numel(y) + kiln_numel(z);
            out[c] = realize_pair(cs[c], y, z, i);
        }
        double tol = lossy ? 1e-5 : 1e-10;
        for (int c = 1; c < 3; c++)
            cr_assert(nmse(out[0], out[c], n) < tol,
                      "graph %d (KILN_FUZZ_SEED=%llu KILN_FUZZ_GRAPHS=1): %s nmse %g", i,
                      (unsigned long long)seed, c == 1 ? "lazy" : "eager",
                      nmse(out[0], out[c], n));
        for (int c = 0; c < 3; c++) {
            free(out[c]);
            kiln_ctx_free(cs[c]);
        }
        free(x);
        free(w);
    }
}

/* Cross-entropy's loss and its gradient over [48, 1000] logits. */
static void cross_entropy_step(kiln_ctx *ctx, kiln_tensor **loss, kiln_tensor **grad) {
    const int64_t dims[2] = {48, 1000}, rows = 48;
    float *x = random_data(48 * 1000, 91);
    int64_t t[48];
    uint64_t seed = 92;
    for (int i = 0; i < 48; i++)
        t[i] = (int64_t)(lcg_next(&seed) % 1000);
    kiln_tensor *logits = kiln_from_data(ctx, KILN_F32, 2, dims, x);
    kiln_tensor *targets = kiln_from_data(ctx, KILN_I64, 1, &rows, t);
    free(x);
    *loss = kiln_cross_entropy(logits, targets, KILN_REDUCTION_MEAN);
    cr_assert_eq(kiln_gradients(*loss, NULL, 1, &logits, grad), KILN_OK, "%s",
                 kiln_ctx_last_error(ctx));
}

/* Values that a few cheap ops make from what is stored are recomputed by
 * each kernel that reads them, never stored: cross-entropy's one-hot
 * targets (eq of an arange and the targets, read by the forward's pick, its
 * out-of-range test and the gradient) and its detached row max (an
 * identity over the max, read by the exp and the log-sum-exp) were kernels
 * of their own, a [48, 1000] store and a copy. */
Test(fusion, a_cheap_shared_value_is_recomputed_not_stored) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *loss, *grad, *rloss, *rgrad;
    cross_entropy_step(ctx, &loss, &grad);
    cross_entropy_step(ref, &rloss, &rgrad);
    cr_assert_eq(kiln_profile_begin(ctx), KILN_OK);
    /* the loss and its gradient at one sync, as a training step has them */
    kernels_for(ctx, kiln_add(loss, kiln_sum(kiln_mul(grad, grad), 0, NULL, false)));
    cr_assert_eq(kiln_profile_end(ctx), KILN_OK);
    for (int i = 0; i < kiln_profile_count(ctx); i++) {
        kiln_kernel_profile p;
        cr_assert_eq(kiln_profile_kernel(ctx, i, &p), KILN_OK);
        bool copy = strcmp(p.fused, "cat") == 0;
        bool one_hot = strstr(p.fused, "eq") && !strstr(p.fused, "sum") && !strstr(p.fused, "mul");
        cr_assert(!copy && !one_hot, "kernel %s computes only %s", p.name, p.fused);
    }
    expect_like_ref(loss, rloss);
    expect_like_ref(grad, rgrad);
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

/* relu(conv2d(x, w, b)) under no-grad with w and b trained (marked): */
static kiln_tensor *eval_conv(kiln_ctx *ctx) {
    const int64_t xd[4] = {2, 3, 6, 6}, wd[4] = {4, 3, 3, 3}, bd = 4;
    float *x = random_data(2 * 3 * 6 * 6, 61), *w = random_data(4 * 3 * 3 * 3, 62),
          *b = random_data(4, 63);
    kiln_tensor *X = kiln_from_data(ctx, KILN_F32, 4, xd, x),
                *W = kiln_from_data(ctx, KILN_F32, 4, wd, w), *B = kiln_from_data(ctx, KILN_F32, 1, &bd, b);
    free(x);
    free(w);
    free(b);
    cr_assert_eq(kiln_requires_grad(W, true), KILN_OK);
    cr_assert_eq(kiln_requires_grad(B, true), KILN_OK);
    kiln_no_grad_begin(ctx);
    kiln_tensor *y = kiln_relu(kiln_conv2d(X, W, B, 1, 1, 1, 1, 1, 1, 1));
    kiln_no_grad_end(ctx);
    return y;
}

/* Evaluation detaches the trained weights (an identity each); the matmul
 * reads the weight through its identity and reshape where it lies, where
 * it was copied by a kernel of its own first (the im2col, here through a
 * pad into rows of 6, is still copied). */
Test(fusion, a_no_grad_conv_reads_its_weights_in_place) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *y = eval_conv(ctx);
    cr_assert_eq(kiln_profile_begin(ctx), KILN_OK);
    kernels_for(ctx, y);
    cr_assert_eq(kiln_profile_end(ctx), KILN_OK);
    for (int i = 0; i < kiln_profile_count(ctx); i++) {
        kiln_kernel_profile p;
        cr_assert_eq(kiln_profile_kernel(ctx, i, &p), KILN_OK);
        cr_assert(strcmp(p.fused, "cat") != 0, "kernel %s copies the weights", p.name);
    }
    expect_like_ref(y, eval_conv(ref));
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
}

/* q, k and v sliced from one [4, 8, 96] projection (in the order given) and
 * split into 4 heads of 8 ([4, 4, 8, 8]); the gradient of sum(q * k * v)
 * with respect to the projection. `unbind`: the projection is [4, 8, 3,
 * 32] and each part a slice of one along its third axis. */
static kiln_tensor *split_heads_grad(kiln_ctx *ctx, const int *order, bool unbind) {
    const int64_t xd[] = {4, 8, 96}, xu[] = {4, 8, 3, 32}, hs[] = {4, 8, 4, 8};
    const int perm[] = {0, 2, 1, 3};
    float *xv = random_data(4 * 8 * 96, 31);
    kiln_tensor *x = unbind ? kiln_from_data(ctx, KILN_F32, 4, xu, xv)
                            : kiln_from_data(ctx, KILN_F32, 3, xd, xv),
                *p[3], *g = NULL;
    free(xv);
    for (int i = 0; i < 3; i++) {
        int j = order[i];
        kiln_tensor *part = unbind ? kiln_slice(x, 2, j, j + 1, 1)
                                   : kiln_slice(x, 2, 32 * j, 32 * j + 32, 1);
        p[j] = kiln_permute(kiln_reshape(part, 4, hs), perm);
    }
    kiln_tensor *y = kiln_sum(kiln_mul(kiln_mul(p[order[0]], p[order[1]]), p[order[2]]), 0, NULL,
                              false);
    cr_assert_eq(kiln_gradients(y, NULL, 1, &x, &g), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    return g;
}

Test(fusion, the_gradient_of_split_heads_is_a_cat_not_a_sum_of_pads) {
    /* every order of taking the slices, so that their gradients reach the
     * projection's sum in every order (two of them not side by side first);
     * then the same from a [4, 8, 3, 32] projection, whose slices' gradients
     * are masked views seen through a reshape */
    static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                     {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int c = 0; c < 12; c++) {
        int o = c % 6;
        bool unbind = c >= 6;
        kiln_ctx *ctx = kiln_ctx_new(KILN_CPU), *ref = kiln_ctx_new(KILN_REF);
        kiln_tensor *g = split_heads_grad(ctx, orders[o], unbind);
        cr_assert_eq(kiln_profile_begin(ctx), KILN_OK);
        kernels_for(ctx, g);
        cr_assert_eq(kiln_profile_end(ctx), KILN_OK);
        /* Each slice's gradient is zero outside its third of the features:
         * a kernel adding the three computed every third at every element. */
        bool cat = false;
        for (int i = 0; i < kiln_profile_count(ctx); i++) {
            kiln_kernel_profile p;
            cr_assert_eq(kiln_profile_kernel(ctx, i, &p), KILN_OK);
            cr_assert(!strstr(p.fused, "add"), "case %d: %s (%s) adds", c, p.name, p.fused);
            cat = cat || strstr(p.fused, "cat");
        }
        cr_assert(cat, "case %d: no kernel joins the three gradients", c);
        expect_like_ref(g, split_heads_grad(ref, orders[o], unbind));
        kiln_ctx_free(ctx);
        kiln_ctx_free(ref);
    }
}
