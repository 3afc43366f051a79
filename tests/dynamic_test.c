/* dynamic_test.c — graphs that differ only in sizes share one compiled
 * program (kiln_ctx_set_dynamic, lower/sizes.c): a training step run at
 * several batch sizes and an attention forward over a growing sequence
 * compile at most two programs per sync (per matmul register-tile width)
 * after their first size, and every result equals the reference evaluator's; a program that reads its sizes at
 * run time gives the same bits as the one compiled for its size; switched
 * off, every size compiles its own. Each case runs on the C compiler path
 * and on the LLVM path, with a disk cache of its own, so what it counts is
 * what it built. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/kiln.h"
#include "jit/cpu/cpu.h"
#include "tests/capture.h"

static char case_cache[64];

static void fresh_cache(const char *compiler) {
    snprintf(case_cache, sizeof case_cache, "/tmp/kiln-dynamic-XXXXXX");
    cr_assert(mkdtemp(case_cache));
    setenv("KILN_CACHE_DIR", case_cache, 1);
    setenv("KILN_CPU_COMPILER", compiler, 1);
}

static void drop_cache(void) {
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", case_cache);
    cr_assert_eq(system(cmd), 0);
    unsetenv("KILN_CACHE_DIR");
    unsetenv("KILN_CPU_COMPILER");
}

/* Runs body on the C compiler path, then on the LLVM path where LLVM is
 * there. */
static const char *cur_compiler = "cc";

static void on_each_compiler(void (*body)(const char *compiler)) {
    static const char *const compilers[] = {"cc", "llvm"};
    for (int c = 0; c < 2; c++) {
        setenv("KILN_CPU_COMPILER", compilers[c], 1);
        kiln_ctx *probe = kiln_ctx_new(KILN_CPU);
        unsetenv("KILN_CPU_COMPILER");
        if (!probe) {
            cr_log_warn("%s: %s", compilers[c], kiln_last_ctx_error());
            continue;
        }
        kiln_ctx_free(probe);
        cur_compiler = compilers[c];
        body(compilers[c]);
    }
}

/* A CPU context on compiler and a reference one, with a disk cache of their
 * own; close_pair frees both and the cache. */
static void open_pair(const char *compiler, kiln_ctx **ctx, kiln_ctx **ref) {
    fresh_cache(compiler);
    *ctx = kiln_ctx_new(KILN_CPU);
    *ref = kiln_ctx_new(KILN_REF);
    cr_assert(*ctx && *ref, "%s", kiln_last_ctx_error());
}

static void close_pair(kiln_ctx *ctx, kiln_ctx *ref) {
    kiln_ctx_free(ctx);
    kiln_ctx_free(ref);
    drop_cache();
}

/* Programs this context has built or loaded, not found in its memory. */
static int64_t built(const kiln_ctx *ctx) {
    kiln_stats s = kiln_ctx_stats(ctx);
    return s.compiles + s.disk_hits;
}

static float *values(int64_t n, uint64_t salt) {
    float *v = malloc(sizeof *v * (size_t)n);
    cr_assert(v);
    uint64_t x = 0x9e3779b97f4a7c15ull ^ salt;
    for (int64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(x >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
    return v;
}

/* One training step of a two-layer classifier on B rows (the rows depend on
 * B, the weights do not): the mean loss into *loss and both weight
 * gradients into g ([D*H] then [H*C]). Two syncs: the loss, then the
 * gradients. */
enum { D = 12, H = 20, C = 7 };

static void mlp_step(kiln_ctx *ctx, int64_t B, double *loss, float *g) {
    kiln_scope_begin(ctx);
    float *x = values(B * D, (uint64_t)B), *w1 = values(D * H, 1), *w2 = values(H * C, 2);
    float *b1 = values(H, 3);
    int32_t *y = malloc(sizeof *y * (size_t)B);
    for (int64_t i = 0; i < B; i++)
        y[i] = (int32_t)((i * 5 + B) % C);
    kiln_tensor *X = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){B, D}, x);
    kiln_tensor *Y = kiln_from_data(ctx, KILN_I32, 1, (const int64_t[]){B}, y);
    kiln_tensor *W1 = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){D, H}, w1);
    kiln_tensor *W2 = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){H, C}, w2);
    kiln_tensor *B1 = kiln_from_data(ctx, KILN_F32, 1, (const int64_t[]){H}, b1);
    kiln_requires_grad(W1, true);
    kiln_requires_grad(W2, true);
    kiln_tensor *h = kiln_gelu(kiln_add(kiln_matmul(X, W1), B1));
    kiln_tensor *l = kiln_cross_entropy(kiln_matmul(h, W2), Y, KILN_REDUCTION_MEAN);
    cr_assert_eq(kiln_backward(l), KILN_OK, "%s", kiln_error_message(l));
    cr_assert_eq(kiln_item(l, loss), KILN_OK, "%s", kiln_error_message(l));
    cr_assert_eq(kiln_to_host(kiln_grad(W1), g, sizeof(float) * D * H), KILN_OK);
    cr_assert_eq(kiln_to_host(kiln_grad(W2), g + D * H, sizeof(float) * H * C), KILN_OK);
    free(x);
    free(w1);
    free(w2);
    free(b1);
    free(y);
    kiln_scope_end(ctx);
}

static void close_to(const float *a, const float *b, int64_t n, double tol, const char *what,
                     int64_t size) {
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs((double)a[i] - (double)b[i]) <= tol * (1 + fabs((double)b[i])),
                  "%s (%s) at size %lld, element %lld: %.9g against the reference's %.9g", what,
                  cur_compiler, (long long)size, (long long)i, (double)a[i], (double)b[i]);
}

static void mlp_checked(kiln_ctx *ctx, kiln_ctx *ref, int64_t B) {
    float g[D * H + H * C], r[D * H + H * C];
    double l, lr;
    mlp_step(ctx, B, &l, g);
    mlp_step(ref, B, &lr, r);
    cr_assert(fabs(l - lr) <= 1e-5 * (1 + fabs(lr)), "loss at batch %lld: %.9g against %.9g",
              (long long)B, l, lr);
    close_to(g, r, D * H + H * C, 1e-4, "gradient", B);
}

/* Batches of every size: the second size builds the shared programs, and no
 * size after it builds anything. */
static void batch_sizes_share_one_program_after_the_second_on(const char *compiler);
Test(dynamic, batch_sizes_share_one_program_after_the_second) {
    on_each_compiler(batch_sizes_share_one_program_after_the_second_on);
}
static void batch_sizes_share_one_program_after_the_second_on(const char *compiler) {
    kiln_ctx *ctx, *ref;
    open_pair(compiler, &ctx, &ref);
    /* Sizes that equal none of the step's other numbers: a batch of 7 rows
     * against 7 classes makes two immediates one, which is another program
     * (see a_size_that_changes_the_kernels_gets_its_own_program). */
    const int64_t sizes[] = {23, 37, 41, 29, 53, 31, 23, 37, 43};
    int64_t after_second = 0, syncs = 0;
    for (int i = 0; i < 9; i++) {
        mlp_checked(ctx, ref, sizes[i]);
        if (i == 0)
            syncs = kiln_ctx_stats(ctx).syncs;
        if (i == 1)
            after_second = built(ctx);
    }
    kiln_stats s = kiln_ctx_stats(ctx);
    cr_assert_eq(built(ctx), after_second,
                 "sizes after the second built %lld programs (the first two: %lld)",
                 (long long)(built(ctx) - after_second), (long long)after_second);
    cr_assert_leq(after_second, 2 * syncs, "the first two sizes built %lld programs",
                  (long long)after_second);
    /* the second size's syncs and those of each of the five new sizes after it */
    cr_assert_eq(s.size_shared, 6 * syncs, "%lld graph misses shared a program (%lld syncs a step)",
                 (long long)s.size_shared, (long long)syncs);
    close_pair(ctx, ref);
}

/* A size of 1 simplifies broadcasts away, and a size equal to another number
 * of the step (7 rows, 7 classes) makes two immediates one: each is a program
 * of its own, and right, and the shared one still serves the sizes after. */
static void a_size_that_changes_the_kernels_gets_its_own_program_on(const char *compiler);
Test(dynamic, a_size_that_changes_the_kernels_gets_its_own_program) {
    on_each_compiler(a_size_that_changes_the_kernels_gets_its_own_program_on);
}
static void a_size_that_changes_the_kernels_gets_its_own_program_on(const char *compiler) {
    kiln_ctx *ctx, *ref;
    open_pair(compiler, &ctx, &ref);
    mlp_checked(ctx, ref, 9);
    mlp_checked(ctx, ref, 11);
    int64_t before = built(ctx);
    mlp_checked(ctx, ref, 1);
    cr_assert_gt(built(ctx), before, "a batch of one built nothing");
    before = built(ctx);
    mlp_checked(ctx, ref, 7);
    cr_assert_gt(built(ctx), before, "a batch of 7 with 7 classes built nothing");
    int64_t after = built(ctx);
    mlp_checked(ctx, ref, 17);
    cr_assert_eq(built(ctx), after, "batch 17 did not reuse the shared program");
    close_pair(ctx, ref);
}

/* The shared program reads its sizes (a mean's 1/B among them, as the bits
 * of a double) where the specialised one has literals: the same bits. */
static void a_shared_program_gives_the_specialised_bits_on(const char *compiler);
Test(dynamic, a_shared_program_gives_the_specialised_bits) {
    on_each_compiler(a_shared_program_gives_the_specialised_bits_on);
}
static void a_shared_program_gives_the_specialised_bits_on(const char *compiler) {
    fresh_cache(compiler);
    kiln_ctx *shared = kiln_ctx_new(KILN_CPU), *own = kiln_ctx_new(KILN_CPU);
    cr_assert(shared && own, "%s", kiln_last_ctx_error());
    cr_assert_eq(kiln_ctx_set_dynamic(own, false), KILN_OK);
    float g[D * H + H * C], r[D * H + H * C];
    double l, lr;
    mlp_step(shared, 6, &l, g);
    mlp_step(shared, 10, &l, g);
    mlp_step(shared, 23, &l, g);
    cr_assert_gt(kiln_ctx_stats(shared).size_shared, 0);
    mlp_step(own, 23, &lr, r);
    cr_assert_eq(kiln_ctx_stats(own).size_shared, 0);
    cr_assert(l == lr, "loss %.17g against %.17g", l, lr);
    cr_assert(!memcmp(g, r, sizeof g), "the gradients differ in their bits");
    kiln_ctx_free(shared);
    kiln_ctx_free(own);
    drop_cache();
}

/* kiln_ctx_set_dynamic(false): a program per size, each right. */
static void each_size_builds(const char *compiler, bool off) {
    kiln_ctx *ctx, *ref;
    open_pair(compiler, &ctx, &ref);
    if (off)
        cr_assert_eq(kiln_ctx_set_dynamic(ctx, false), KILN_OK);
    int64_t last = 0;
    const int64_t sizes[] = {7, 13, 19};
    for (int i = 0; i < 3; i++) {
        mlp_checked(ctx, ref, sizes[i]);
        cr_assert_gt(built(ctx), last, "%s: batch %lld built nothing", compiler,
                     (long long)sizes[i]);
        last = built(ctx);
    }
    cr_assert_eq(kiln_ctx_stats(ctx).size_shared, 0);
    close_pair(ctx, ref);
}

static void switched_off_on(const char *compiler) { each_size_builds(compiler, true); }
Test(dynamic, switched_off_each_size_builds_its_own) {
    on_each_compiler(switched_off_on);
}

/* How many register tiles the CPU's matmul plan gives an output m columns
 * wide over m in [lo, hi]: an output narrower than the tile's vectors takes
 * fewer of them (lower/plan.c), a program of its own, so a sequence length
 * that is a matmul's width builds its programs once per width. With 32-byte
 * vectors (8 floats, a tile of 2) every length from 9 on is one width; with
 * 64-byte ones (16 floats, a tile of 4) lengths up to 64 are four. */
static int64_t tile_widths(int64_t lo, int64_t hi) {
    int vb = jit_cpu_target()->vector_bytes;
    vb = vb < 16 ? 16 : vb;
    int64_t lanes = vb / 4, nv = vb >= 64 ? 4 : 2, widths = 0, last = -1;
    for (int64_t m = lo; m <= hi; m++) {
        int64_t w = (m + lanes - 1) / lanes < nv ? (m + lanes - 1) / lanes : nv;
        widths += w != last;
        last = w;
    }
    return widths;
}

/* Causal self-attention over a sequence that grows a token at a time, as a
 * generation loop runs it: x [T, E] through three projections and a causal
 * softmax. */
enum { E = 16 };

static void attention(kiln_ctx *ctx, int64_t T, float *out) {
    kiln_scope_begin(ctx);
    float *x = values(T * E, 100), *w = values(3 * E * E, 101);
    kiln_tensor *X = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){T, E}, x);
    kiln_tensor *W = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){E, 3 * E}, w);
    kiln_tensor *qkv = kiln_matmul(X, W);
    kiln_tensor *q = kiln_slice(qkv, 1, 0, E, 1), *k = kiln_slice(qkv, 1, E, 2 * E, 1);
    kiln_tensor *v = kiln_slice(qkv, 1, 2 * E, 3 * E, 1);
    kiln_tensor *y = kiln_scaled_dot_product_attention(q, k, v, true, 1.0 / sqrt((double)E));
    cr_assert_eq(kiln_to_host(y, out, sizeof(float) * (size_t)(T * E)), KILN_OK, "%s",
                 kiln_error_message(y));
    free(x);
    free(w);
    kiln_scope_end(ctx);
}

static void a_growing_sequence_builds_two_programs_per_tile_width_on(const char *compiler);
Test(dynamic, a_growing_sequence_builds_two_programs_per_tile_width) {
    on_each_compiler(a_growing_sequence_builds_two_programs_per_tile_width_on);
}
static void a_growing_sequence_builds_two_programs_per_tile_width_on(const char *compiler) {
    kiln_ctx *ctx, *ref;
    open_pair(compiler, &ctx, &ref);
    float *a = malloc(sizeof(float) * 72 * E), *r = malloc(sizeof(float) * 72 * E);
    cr_assert(a && r);
    for (int64_t T = 9; T <= 72; T++) {
        attention(ctx, T, a);
        attention(ref, T, r);
        close_to(a, r, T * E, 1e-4, "attention", T);
    }
    cr_assert_leq(built(ctx), 2 * tile_widths(9, 72), "64 lengths built %lld programs",
                  (long long)built(ctx));
    free(a);
    free(r);
    close_pair(ctx, ref);
}

/* KILN_DEBUG=1 says which syncs share a program and how many numbers they
 * read at run time. */
Test(dynamic, the_debug_line_says_a_program_is_shared) {
    fresh_cache("cc");
    setenv("KILN_DEBUG", "1", 1);
    tu_capture cap;
    tu_capture_begin(&cap);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    float *a = malloc(sizeof(float) * 40 * E);
    cr_assert(ctx && a);
    /* lengths of one register-tile width on every vector size */
    attention(ctx, 33, a);
    attention(ctx, 34, a);
    attention(ctx, 40, a);
    kiln_ctx_free(ctx);
    static char text[1 << 16];
    tu_capture_end(&cap, text, sizeof text);
    unsetenv("KILN_DEBUG");
    free(a);
    drop_cache();
    const char *second = strstr(text, "sync 2:"), *third = strstr(text, "sync 3:");
    cr_assert(second && third, "%s", text);
    cr_assert(strstr(second, "numbers read at run time, so graphs that differ only in them "
                             "share this program (code from compiled)"),
              "%s", text);
    cr_assert(strstr(third, "share this program (code from memory)"), "%s", text);
    cr_assert(!strstr(text, "sync 1: ") || !strstr(strstr(text, "sync 1: "), "read at run time") ||
                  strstr(strstr(text, "sync 1: "), "read at run time") > second,
              "the first size's program reads no size at run time: %s", text);
}

/* A one-layer causal transformer generating 64 tokens one at a time: the
 * tokens so far (their number grows by one a step) through an embedding, a
 * pre-norm attention block and MLP, and the head at the last position. The
 * next token is the reference evaluator's argmax, fed to both, so that the
 * two never part over a near tie; the logits agree at every step. The prompt
 * has 12 tokens; the sequence is the scores' matmul's width, so each
 * register-tile width it passes through builds its two programs
 * (tile_widths: one width with 8-float vectors, four with 16-float ones). */
enum { VOCAB = 40, W = 24 };

static void next_logits(kiln_ctx *ctx, const int32_t *tokens, int64_t T, float *logits) {
    kiln_scope_begin(ctx);
    float *emb = values(VOCAB * W, 200), *pos = values(80 * W, 201), *wqkv = values(W * 3 * W, 202);
    float *wo = values(W * W, 203), *w1 = values(W * 2 * W, 204), *w2 = values(2 * W * W, 205);
    kiln_tensor *tok = kiln_from_data(ctx, KILN_I32, 1, (const int64_t[]){T}, tokens);
    kiln_tensor *E_ = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){VOCAB, W}, emb);
    kiln_tensor *P = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){80, W}, pos);
    kiln_tensor *Wqkv = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){W, 3 * W}, wqkv);
    kiln_tensor *Wo = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){W, W}, wo);
    kiln_tensor *W1 = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){W, 2 * W}, w1);
    kiln_tensor *W2 = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){2 * W, W}, w2);
    kiln_tensor *x = kiln_add(kiln_embedding(tok, E_), kiln_slice(P, 0, 0, T, 1));
    kiln_tensor *h = kiln_layer_norm(x, 1, NULL, NULL, 1e-5);
    kiln_tensor *qkv = kiln_matmul(h, Wqkv);
    kiln_tensor *a = kiln_scaled_dot_product_attention(
        kiln_slice(qkv, 1, 0, W, 1), kiln_slice(qkv, 1, W, 2 * W, 1),
        kiln_slice(qkv, 1, 2 * W, 3 * W, 1), true, 1.0 / sqrt((double)W));
    x = kiln_add(x, kiln_matmul(a, Wo));
    h = kiln_gelu(kiln_matmul(kiln_layer_norm(x, 1, NULL, NULL, 1e-5), W1));
    x = kiln_add(x, kiln_matmul(h, W2));
    /* the tied head at the last position */
    kiln_tensor *last = kiln_slice(x, 0, T - 1, T, 1);
    kiln_tensor *out = kiln_matmul(last, kiln_transpose(E_, 0, 1));
    cr_assert_eq(kiln_to_host(out, logits, sizeof(float) * VOCAB), KILN_OK, "%s",
                 kiln_error_message(out));
    free(emb);
    free(pos);
    free(wqkv);
    free(wo);
    free(w1);
    free(w2);
    kiln_scope_end(ctx);
}

static void a_generation_loop_builds_two_programs_per_tile_width_on(const char *compiler);
Test(dynamic, a_generation_loop_builds_two_programs_per_tile_width) {
    on_each_compiler(a_generation_loop_builds_two_programs_per_tile_width_on);
}
static void a_generation_loop_builds_two_programs_per_tile_width_on(const char *compiler) {
    kiln_ctx *ctx, *ref;
    open_pair(compiler, &ctx, &ref);
    int32_t tokens[80] = {3, 17, 5, 29, 11, 2, 38, 21, 9, 33, 14, 26};
    int64_t T = 12;
    for (int step = 0; step < 64; step++, T++) {
        float a[VOCAB], r[VOCAB];
        next_logits(ctx, tokens, T, a);
        next_logits(ref, tokens, T, r);
        close_to(a, r, VOCAB, 1e-4, "logits", T);
        int best = 0;
        for (int v = 1; v < VOCAB; v++)
            best = r[v] > r[best] ? v : best;
        tokens[T] = best;
    }
    cr_assert_leq(built(ctx), 2 * tile_widths(12, 12 + 63), "64 tokens built %lld programs",
                  (long long)built(ctx));
    close_pair(ctx, ref);
}

/* A batched matmul whose middle batch size varies, against a broadcast
 * operand (batch stride 0), its output transposed into its consumer: the
 * operands' offsets over the batch are sizes read at run time. */
static void batched(kiln_ctx *ctx, int64_t n, float *out) {
    kiln_scope_begin(ctx);
    float *x = values(2 * n * 3 * 5 * 4, 300 + (uint64_t)n), *y = values(2 * 3 * 4 * 6, 301);
    kiln_tensor *X = kiln_from_data(ctx, KILN_F32, 5, (const int64_t[]){2, n, 3, 5, 4}, x);
    kiln_tensor *Y = kiln_from_data(ctx, KILN_F32, 5, (const int64_t[]){2, 1, 3, 4, 6}, y);
    kiln_tensor *z = kiln_exp(kiln_mul_scalar(kiln_transpose(kiln_matmul(X, Y), 1, 3), 0.5));
    cr_assert_eq(kiln_to_host(z, out, sizeof(float) * (size_t)(2 * n * 3 * 5 * 6)), KILN_OK, "%s",
                 kiln_error_message(z));
    free(x);
    free(y);
    kiln_scope_end(ctx);
}

static void a_batch_dimension_of_a_matmul_varies_on(const char *compiler);
Test(dynamic, a_batch_dimension_of_a_matmul_varies) {
    on_each_compiler(a_batch_dimension_of_a_matmul_varies_on);
}
static void a_batch_dimension_of_a_matmul_varies_on(const char *compiler) {
    kiln_ctx *ctx, *ref;
    open_pair(compiler, &ctx, &ref);
    size_t most = sizeof(float) * 2 * 13 * 3 * 5 * 6;
    float *a = malloc(most), *r = malloc(most);
    cr_assert(a && r);
    /* not 10: 3 x 10 rows is 5 x 6, and the two index constants become one
     * (a structure of its own, as a_size_that_changes_the_kernels_... shows) */
    const int64_t sizes[] = {9, 11, 13, 7, 12};
    int64_t after_second = 0;
    for (int i = 0; i < 5; i++) {
        batched(ctx, sizes[i], a);
        batched(ref, sizes[i], r);
        close_to(a, r, 2 * sizes[i] * 3 * 5 * 6, 1e-5, "batched matmul", sizes[i]);
        if (i == 1)
            after_second = built(ctx);
    }
    cr_assert_eq(built(ctx), after_second, "batch sizes after the second built %lld programs",
                 (long long)(built(ctx) - after_second));
    cr_assert_gt(kiln_ctx_stats(ctx).size_shared, 0);
    free(a);
    free(r);
    close_pair(ctx, ref);
}
