/* gpt2.c — a GPT-2 training step written with kiln.h, as a user would write
 * it, timed and profiled: token and position embeddings, L pre-norm blocks
 * (causal attention with H heads, a 4C GELU MLP), a final layer norm, the
 * language-model head tied to the token embedding, mean cross-entropy over
 * B*T next tokens, the backward pass and an AdamW update of every parameter;
 * the step's loss is its one sync point.
 *
 * Sizes: --small (L4 C256 H4, vocabulary 50257, B4 T64) and --full (GPT-2
 * 124M: L12 C768 H12, B4 T64); neither flag runs both. For each it prints:
 *   - parameters, and the step's kernels (launches per step);
 *   - the cold first step (empty disk cache: schedule, generate, compile,
 *     run), the first step of a new process over the now warm disk cache,
 *     and the median warm step (graph-cache hits);
 *   - the share of the warm step's kernel time by kernel kind (matmul,
 *     reduction, elementwise, copy: a kernel whose fused ops are only
 *     movements, scatter), with the copy-only kernels counted per layer;
 *   - peak resident memory of the warm steps against parameters + gradients + AdamW's two
 *     moments (16 bytes per parameter) + the activations the backward pass
 *     keeps (estimated below from the shapes, f32).
 * A line "gpt2 <size> ..." per figure on stdout; the new process's first
 * step is this program run again with --first-step over the same cache.
 *
 * Usage: gpt2 [--small | --full] [--steps N] [--kernels] [--first-step SIZE] */
#define _GNU_SOURCE
#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/kiln.h"
#include "bench/bench.h"

typedef struct gpt_cfg {
    const char *name;
    int64_t layers, dim, heads, vocab, batch, seq;
} gpt_cfg;

static const gpt_cfg SMALL = {"small", 4, 256, 4, 50257, 4, 64};
static const gpt_cfg FULL = {"full", 12, 768, 12, 50257, 4, 64};

enum { PER_LAYER = 12, MAX_PARAMS = 4 + 12 * PER_LAYER };

typedef struct gpt {
    gpt_cfg c;
    int n;
    kiln_tensor *p[MAX_PARAMS]; /* wte, wpe, then per layer ln1 w b, qkv w b, proj w b,
                                   ln2 w b, fc w b, out w b; then lnf w b */
} gpt;

static void die(kiln_ctx *ctx, const char *what) {
    fprintf(stderr, "gpt2: %s: %s\n", what, ctx ? kiln_ctx_last_error(ctx) : kiln_last_ctx_error());
    exit(1);
}

#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* GPT-2's initialisation: N(0, 0.02) weights (the residual projections
 * scaled by 1/sqrt(2L)), zero biases, unit layer-norm gains. */
static void param(kiln_ctx *ctx, gpt *m, int ndim, const int64_t *dims, double std, double fill) {
    kiln_tensor *p = std > 0 ? kiln_mul_scalar(kiln_randn(ctx, KILN_F32, ndim, dims,
                                                          7000 + (uint64_t)m->n), std)
                             : kiln_full(ctx, KILN_F32, ndim, dims, fill);
    if (kiln_realize(p) != KILN_OK || kiln_requires_grad(p, true) != KILN_OK)
        die(ctx, "initialising the parameters");
    m->p[m->n++] = p;
}

static void gpt_init(kiln_ctx *ctx, gpt *m, gpt_cfg c) {
    memset(m, 0, sizeof *m);
    m->c = c;
    int64_t C = c.dim;
    double proj = 0.02 / sqrt(2.0 * (double)c.layers);
    param(ctx, m, DIMS(c.vocab, C), 0.02, 0);
    param(ctx, m, DIMS(c.seq, C), 0.01, 0);
    for (int64_t l = 0; l < c.layers; l++) {
        param(ctx, m, DIMS(C), 0, 1);
        param(ctx, m, DIMS(C), 0, 0);
        param(ctx, m, DIMS(3 * C, C), 0.02, 0);
        param(ctx, m, DIMS(3 * C), 0, 0);
        param(ctx, m, DIMS(C, C), proj, 0);
        param(ctx, m, DIMS(C), 0, 0);
        param(ctx, m, DIMS(C), 0, 1);
        param(ctx, m, DIMS(C), 0, 0);
        param(ctx, m, DIMS(4 * C, C), 0.02, 0);
        param(ctx, m, DIMS(4 * C), 0, 0);
        param(ctx, m, DIMS(C, 4 * C), proj, 0);
        param(ctx, m, DIMS(C), 0, 0);
    }
    param(ctx, m, DIMS(C), 0, 1);
    param(ctx, m, DIMS(C), 0, 0);
}

/* [B, T, C] -> [B, H, T, C/H] */
static kiln_tensor *heads(const gpt_cfg *c, kiln_tensor *t) {
    static const int perm[] = {0, 2, 1, 3};
    return kiln_permute(kiln_reshape(t, DIMS(c->batch, c->seq, c->heads, c->dim / c->heads)), perm);
}

/* The mean next-token loss of tokens idx [B, T] predicting targets [B*T]. */
static kiln_tensor *gpt_loss(gpt *m, kiln_tensor *idx, kiln_tensor *pos, kiln_tensor *targets) {
    const gpt_cfg *c = &m->c;
    int64_t C = c->dim;
    kiln_tensor **p = m->p;
    kiln_tensor *x = kiln_add(kiln_embedding(idx, p[0]), kiln_embedding(pos, p[1]));
    for (int64_t l = 0; l < c->layers; l++) {
        kiln_tensor **q = p + 2 + l * PER_LAYER;
        kiln_tensor *h = kiln_layer_norm(x, 1, q[0], q[1], 1e-5);
        kiln_tensor *qkv = kiln_linear(h, q[2], q[3]);
        kiln_tensor *a = kiln_scaled_dot_product_attention(
            heads(c, kiln_slice(qkv, 2, 0, C, 1)), heads(c, kiln_slice(qkv, 2, C, 2 * C, 1)),
            heads(c, kiln_slice(qkv, 2, 2 * C, 3 * C, 1)), true, 0);
        static const int perm[] = {0, 2, 1, 3};
        a = kiln_reshape(kiln_permute(a, perm), DIMS(c->batch, c->seq, C));
        x = kiln_add(x, kiln_linear(a, q[4], q[5]));
        h = kiln_layer_norm(x, 1, q[6], q[7], 1e-5);
        x = kiln_add(x, kiln_linear(kiln_gelu_tanh(kiln_linear(h, q[8], q[9])), q[10], q[11]));
    }
    kiln_tensor **f = p + 2 + c->layers * PER_LAYER;
    x = kiln_layer_norm(x, 1, f[0], f[1], 1e-5);
    kiln_tensor *logits = kiln_linear(x, p[0], NULL); /* tied head: [B, T, V] */
    return kiln_cross_entropy(kiln_reshape(logits, DIMS(c->batch * c->seq, c->vocab)), targets,
                              KILN_REDUCTION_MEAN);
}

typedef struct batch {
    int32_t *idx, *pos, *targets;
} batch;

/* Random tokens (a fixed stream): the step's cost does not depend on them. */
static batch make_batch(const gpt_cfg *c) {
    size_t n = (size_t)(c->batch * c->seq);
    batch b = {malloc(n * 4), malloc(n * 4), malloc(n * 4)};
    if (!b.idx || !b.pos || !b.targets) {
        fprintf(stderr, "gpt2: out of memory\n");
        exit(1);
    }
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        b.idx[i] = (int32_t)((s >> 33) % (uint64_t)c->vocab);
        b.pos[i] = (int32_t)(i % (size_t)c->seq);
    }
    for (size_t i = 0; i < n; i++) /* the next token; the last one predicts the first */
        b.targets[i] = b.idx[(i + 1) % n];
    return b;
}

/* One training step; returns its loss (the sync point). */
static double step(kiln_ctx *ctx, gpt *m, kiln_optim *o, const batch *b) {
    const gpt_cfg *c = &m->c;
    kiln_scope_begin(ctx);
    kiln_tensor *idx = kiln_from_data(ctx, KILN_I32, DIMS(c->batch, c->seq), b->idx);
    kiln_tensor *pos = kiln_from_data(ctx, KILN_I32, DIMS(c->batch, c->seq), b->pos);
    kiln_tensor *tg = kiln_from_data(ctx, KILN_I32, DIMS(c->batch * c->seq), b->targets);
    double l;
    const char *what;
    if (bench_train_step(gpt_loss(m, idx, pos, tg), o, &l, &what) != KILN_OK)
        die(ctx, what);
    kiln_scope_end(ctx);
    return l;
}

static int64_t params_of(const gpt *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n; i++)
        n += kiln_numel(m->p[i]);
    return n;
}

/* The f32 values the backward pass needs per layer, as PyTorch keeps them:
 * the block's input, both norms' outputs and row statistics, qkv, the
 * attention's probabilities [B, H, T, T] and output, the MLP's hidden layer
 * before and after GELU; then the final norm and the logits with their
 * softmax ([B*T, V] twice). An estimate from the shapes, not a measurement. */
static double activation_bytes(const gpt_cfg *c) {
    double bt = (double)(c->batch * c->seq), C = (double)c->dim;
    double layer = bt * (C + 2 * C + 4 + 3 * C + C) + (double)(c->batch * c->heads) *
                   (double)(c->seq * c->seq) + bt * (4 * C * 2);
    return 4 * ((double)c->layers * layer + bt * C + 2 * bt * (double)c->vocab);
}

typedef enum kind { K_MATMUL, K_REDUCE, K_ELEMENTWISE, K_COPY, K_SCATTER, K_NUM } kind;
static const char *const kind_name[K_NUM] = {"matmul", "reduction", "elementwise", "copy-only",
                                             "scatter"};

static bool has_op(const char *fused, const char *op) {
    size_t n = strlen(op);
    for (const char *s = fused; (s = strstr(s, op)); s += n)
        if ((s == fused || s[-1] == ' ') && (s[n] == 0 || s[n] == ' ' || s[n] == '\xc3'))
            return true; /* "\xc3": the x of a repeat count ("add×2") */
    return false;
}

/* A kernel's kind from the graph ops fused into it. */
static kind kind_of(const char *fused) {
    if (has_op(fused, "matmul"))
        return K_MATMUL;
    if (has_op(fused, "scatter"))
        return K_SCATTER;
    static const char *const reductions[] = {"sum", "max", "min", "argmax", "argmin"};
    for (size_t i = 0; i < sizeof reductions / sizeof *reductions; i++)
        if (has_op(fused, reductions[i]))
            return K_REDUCE;
    /* Only movements (views, cats, casts of nothing): a copy. */
    char buf[160];
    snprintf(buf, sizeof buf, "%s", fused);
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " "))
        if (strncmp(t, "view", 4) && strncmp(t, "cat", 3) && strncmp(t, "copy", 4))
            return K_ELEMENTWISE;
    return K_COPY;
}

/* The peak resident bytes since the last reset (VmHWM), or since the start
 * (getrusage) where /proc says nothing. */
static double peak_resident(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = atof(line + 6);
    if (f)
        fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = (double)ru.ru_maxrss;
    }
    return kb * 1024;
}

/* The first step of a process over the warm disk cache: this program run
 * again with --first-step, its one line (seconds, peak resident bytes) read
 * back. */
static double first_step_in_new_process(const char *self, const gpt_cfg *c, double *peak) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' --first-step %s", self, c->name);
    FILE *f = popen(cmd, "r");
    double s = NAN;
    *peak = NAN;
    if (!f || fscanf(f, "%lf %lf", &s, peak) != 2)
        s = NAN;
    if (f)
        pclose(f);
    return s;
}

static bool list_kernels; /* --kernels: every kernel of the profiled step on stderr */

static void run(const char *self, gpt_cfg c, int steps, bool first_only) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    if (!ctx)
        die(NULL, "kiln_ctx_new");
    gpt m;
    gpt_init(ctx, &m, c);
    kiln_optim *o;
    if (kiln_adamw_new(ctx, m.n, m.p, 3e-4, 0.9, 0.95, 1e-8, 0.1, &o) != KILN_OK)
        die(ctx, "kiln_adamw_new");
    batch b = make_batch(&c);
    double t0 = bench_now();
    double l0 = step(ctx, &m, o, &b);
    double first = bench_now() - t0;
    if (first_only) {
        printf("%.6f %.0f\n", first, peak_resident());
    } else {
        double *t = calloc((size_t)steps, sizeof *t), l = l0;
        /* Linux: "5" resets the peak resident size, so that the peak below is
         * the warm steps' (the cold one also holds the compiler's work, which
         * malloc_trim gives back first). */
        malloc_trim(0);
        FILE *cr = fopen("/proc/self/clear_refs", "w");
        if (cr) {
            fputs("5", cr);
            fclose(cr);
        }
        kiln_stats s0 = kiln_ctx_stats(ctx);
        for (int i = 0; i < steps; i++) {
            if (i == steps - 1 && kiln_profile_begin(ctx) != KILN_OK)
                die(ctx, "kiln_profile_begin");
            double a = bench_now();
            l = step(ctx, &m, o, &b);
            t[i] = bench_now() - a;
        }
        kiln_profile_end(ctx);
        kiln_stats s1 = kiln_ctx_stats(ctx);
        for (int i = 1; i < steps; i++) /* insertion sort: a handful of steps */
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
                double x = t[j];
                t[j] = t[j - 1];
                t[j - 1] = x;
            }
        double warm = t[steps / 2];
        double ms_kind[K_NUM] = {0}, total = 0;
        int n_kind[K_NUM] = {0};
        for (int i = 0, n = kiln_profile_count(ctx); i < n; i++) {
            kiln_kernel_profile k;
            if (kiln_profile_kernel(ctx, i, &k) != KILN_OK)
                continue;
            kind kd = kind_of(k.fused);
            if (list_kernels)
                fprintf(stderr, "%-11s %3lld x %8.3f ms  %-40s %s\n", kind_name[kd],
                        (long long)k.launches, k.mean_ms, k.name, k.fused);
            ms_kind[kd] += k.total_ms;
            n_kind[kd] += (int)k.launches;
            total += k.total_ms;
        }
        double peak = peak_resident();
        double peak_new;
        double warm_disk = first_step_in_new_process(self, &c, &peak_new);
        int64_t P = params_of(&m);
        double state = 16.0 * (double)P, act = activation_bytes(&c);
        printf("gpt2 %s: L%lld C%lld H%lld V%lld B%lld T%lld, %.1fM parameters\n", c.name,
               (long long)c.layers, (long long)c.dim, (long long)c.heads, (long long)c.vocab,
               (long long)c.batch, (long long)c.seq, (double)P / 1e6);
        printf("gpt2 %s: loss %.4f after the first step, %.4f after %d more (random tokens: "
               "ln V = %.4f)\n", c.name, l0, l, steps, log((double)c.vocab));
        printf("gpt2 %s: kernels per step %.0f; programs compiled after the first step %lld\n",
               c.name, (double)(s1.kernels - s0.kernels) / steps,
               (long long)(s1.compiles - s0.compiles));
        printf("gpt2 %s: first step cold %.2f s, new process warm disk %.2f s, warm step "
               "median %.1f ms (of %d); cold/warm %.0fx\n", c.name, first, warm_disk,
               1e3 * warm, steps, first / warm);
        for (int k = 0; k < K_NUM; k++)
            printf("gpt2 %s: %-11s %4d kernels %6.1f%% of kernel time\n", c.name,
                   kind_name[k], n_kind[k], total > 0 ? 100 * ms_kind[k] / total : 0.0);
        printf("gpt2 %s: copy-only kernels per layer %.1f\n", c.name,
               (double)n_kind[K_COPY] / (double)c.layers);
        printf("gpt2 %s: peak resident: %.0f MB in the first step of a new process (warm "
               "disk), %.0f MB in warm steps after a cold one; parameters+gradients+moments "
               "%.0f MB, activations ~%.0f MB; peak/(their sum) %.2f\n", c.name,
               peak_new / 1e6, peak / 1e6, state / 1e6, act / 1e6, peak_new / (state + act));
        free(t);
    }
    free(b.idx);
    free(b.pos);
    free(b.targets);
    kiln_optim_free(o);
    kiln_ctx_free(ctx);
}

int main(int argc, char **argv) {
    bool small = false, full = false;
    int steps = 5;
    const char *first = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small"))
            small = true;
        else if (!strcmp(argv[i], "--full"))
            full = true;
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kernels"))
            list_kernels = true;
        else if (!strcmp(argv[i], "--first-step") && i + 1 < argc)
            first = argv[++i];
        else {
            fprintf(stderr, "usage: gpt2 [--small | --full] [--steps N] [--kernels]\n");
            return 2;
        }
    }
    if (steps < 1)
        steps = 1;
    if (first) {
        run(argv[0], strcmp(first, "full") ? SMALL : FULL, 1, true);
        return 0;
    }
    /* A fresh disk cache, so that the first step is cold; the new process
     * inherits it warm. */
    char dir[] = "/tmp/kiln-gpt2-XXXXXX";
    if (!getenv("KILN_GPT2_KEEP_CACHE")) {
        if (!mkdtemp(dir)) {
            perror("gpt2: mkdtemp");
            return 1;
        }
        setenv("KILN_CACHE_DIR", dir, 1);
    }
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return 1;
    self[len] = 0;
    printf("load average at start: ");
    FILE *la = fopen("/proc/loadavg", "r");
    char line[128] = "?";
    if (la && fgets(line, sizeof line, la))
        line[strcspn(line, "\n")] = 0;
    if (la)
        fclose(la);
    printf("%s\n", line);
    if (small || !full)
        run(self, SMALL, steps, false);
    if (full || !small)
        run(self, FULL, steps, false);
    if (!getenv("KILN_GPT2_KEEP_CACHE")) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "gpt2: could not remove %s\n", dir);
    }
    return 0;
}
