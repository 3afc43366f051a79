/* compile_cost.c — what compile-on-sync costs, per graph and mode:
 *   cold       the first step with an empty kernel cache (a fresh
 *              KILN_CACHE_DIR in a temporary directory): every kernel is
 *              generated and compiled by the system C compiler;
 *   warm_disk  the first step of a NEW process on the cache the cold step
 *              filled: kernels are loaded from disk (this program re-executes
 *              itself with --child for it);
 *   repeat     a later step in the same process: kernels are found in memory
 *              and only scheduling, lookup and running remain.
 * The graphs are small so that the compiler, not the arithmetic, is measured.
 * Usage: compile_cost [--quick | --full] [--steps N]; JSON lines on stdout. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench.h"

extern char **environ;

typedef struct graph_spec {
    const char *name;
    const char *shape;
    kiln_tensor *(*build)(kiln_ctx *ctx);
} graph_spec;

static kiln_tensor *layer_norm_graph(kiln_ctx *ctx) {
    const int64_t dims[] = {256, 256};
    int ax = 1;
    kiln_tensor *x = kiln_randn(ctx, KILN_F32, 2, dims, 1);
    kiln_tensor *c = kiln_sub(x, kiln_mean(x, 1, &ax, true));
    kiln_tensor *var = kiln_mean(kiln_mul(c, c), 1, &ax, true);
    return kiln_mul(c, kiln_rsqrt(kiln_add_scalar(var, 1e-5)));
}

/* softmax(gelu(x @ w1 + b1) @ w2 + b2): an MLP block with a classifier head,
 * several kernels in either mode. */
static kiln_tensor *mlp_graph(kiln_ctx *ctx) {
    const int64_t xd[] = {64, 256}, w1d[] = {256, 512}, b1d[] = {512}, w2d[] = {512, 128},
                  b2d[] = {128};
    int ax = 1;
    kiln_tensor *x = kiln_randn(ctx, KILN_F32, 2, xd, 1);
    kiln_tensor *w1 = kiln_randn(ctx, KILN_F32, 2, w1d, 2);
    kiln_tensor *b1 = kiln_randn(ctx, KILN_F32, 1, b1d, 3);
    kiln_tensor *w2 = kiln_randn(ctx, KILN_F32, 2, w2d, 4);
    kiln_tensor *b2 = kiln_randn(ctx, KILN_F32, 1, b2d, 5);
    kiln_tensor *h = kiln_gelu(kiln_add(kiln_matmul(x, w1), b1));
    kiln_tensor *y = kiln_add(kiln_matmul(h, w2), b2);
    kiln_tensor *e = kiln_exp(kiln_sub(y, kiln_max(y, 1, &ax, true)));
    return kiln_div(e, kiln_sum(e, 1, &ax, true));
}

/* One SGD step of bench/nn.c's 784-256-128-10 ReLU MLP under cross-entropy
 * (batch 128): forward, the six gradients and the updated parameters joined
 * into one result, the step's one sync. */
static kiln_tensor *mlp_train_graph(kiln_ctx *ctx) {
    const int64_t dims[7][2] = {{128, 784}, {256, 784}, {256}, {128, 256}, {128}, {10, 128}, {10}};
    const int nd[7] = {2, 2, 1, 2, 1, 2, 1};
    kiln_tensor *in[7];
    for (int i = 0; i < 7; i++)
        in[i] = kiln_mul_scalar(kiln_randn(ctx, KILN_F32, nd[i], dims[i], 10 + (uint64_t)i), 0.05);
    int64_t labels[128];
    const int64_t nl = 128;
    for (int i = 0; i < 128; i++)
        labels[i] = (i * 7 + 3) % 10;
    kiln_tensor *t = kiln_from_data(ctx, KILN_I64, 1, &nl, labels);
    kiln_tensor *h = kiln_relu(kiln_linear(in[0], in[1], in[2]));
    h = kiln_relu(kiln_linear(h, in[3], in[4]));
    kiln_tensor *loss = kiln_cross_entropy(kiln_linear(h, in[5], in[6]), t, KILN_REDUCTION_MEAN);
    kiln_tensor *g[6], *p[6];
    if (kiln_gradients(loss, NULL, 6, in + 1, g) != KILN_OK)
        return loss;
    for (int i = 0; i < 6; i++) {
        const int64_t n = kiln_numel(g[i]);
        p[i] = kiln_reshape(kiln_sub(in[1 + i], kiln_mul_scalar(g[i], 0.05)), 1, &n);
    }
    return kiln_cat(6, p, 0);
}

static const graph_spec graphs[] = {
    {"layer_norm_rows", "256x256", layer_norm_graph},
    {"mlp_softmax", "64x256x512x128", mlp_graph},
    {"mlp_train_step", "b128,784-256-128-10", mlp_train_graph},
};
#define NGRAPHS (int)(sizeof graphs / sizeof graphs[0])

static const char *mode_name(kiln_mode m) { return m == KILN_LAZY ? "kiln-lazy" : "kiln-eager"; }

static const char *mode_name(kiln_mode m);

/* One step of graph g on ctx: its time, and the counters it moved. */
static int one_step(kiln_ctx *ctx, const graph_spec *g, double *secs, kiln_stats *delta) {
    kiln_stats s0 = kiln_ctx_stats(ctx);
    kiln_scope_begin(ctx);
    double t0 = bench_now();
    kiln_tensor *y = g->build(ctx);
    kiln_status st = kiln_realize(y);
    *secs = bench_now() - t0;
    if (st != KILN_OK)
        bench_emit_error("compile", g->name, g->shape, mode_name(kiln_ctx_mode(ctx)),
                         kiln_error_message(y));
    kiln_scope_end(ctx);
    kiln_stats s1 = kiln_ctx_stats(ctx);
    delta->kernels = s1.kernels - s0.kernels;
    delta->compiles = s1.compiles - s0.compiles;
    delta->memory_hits = s1.memory_hits - s0.memory_hits;
    delta->disk_hits = s1.disk_hits - s0.disk_hits;
    return st != KILN_OK;
}

static void emit(const graph_spec *g, kiln_mode mode, const char *metric, double *t, int n,
                 const kiln_stats *d) {
    double min = t[0];
    for (int i = 1; i < n; i++)
        if (t[i] < min)
            min = t[i];
    bench_record r = {
        .suite = "compile",
        .workload = g->name,
        .shape = g->shape,
        .impl = mode_name(mode),
        .metric = metric,
        .median_ms = bench_median(t, n) * 1e3,
        .min_ms = min * 1e3,
        .steps = n,
        .kernels = (double)d->kernels,
        .compiles = (double)d->compiles,
        .memory_hits = (double)d->memory_hits,
        .disk_hits = (double)d->disk_hits,
    };
    bench_emit(&r);
}

/* The child: one first step on the cache in KILN_CACHE_DIR, printed. */
static int child(int gi, kiln_mode mode) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    if (!ctx) {
        fprintf(stderr, "kiln_ctx_new: %s\n", kiln_last_ctx_error());
        return 1;
    }
    kiln_ctx_set_mode(ctx, mode);
    double t;
    kiln_stats d;
    int rc = one_step(ctx, &graphs[gi], &t, &d);
    if (rc == 0)
        emit(&graphs[gi], mode, "warm_disk", &t, 1, &d);
    kiln_ctx_free(ctx);
    return rc;
}

static int spawn_child(const char *self, int gi, kiln_mode mode) {
    char gs[16], ms[16];
    snprintf(gs, sizeof gs, "%d", gi);
    snprintf(ms, sizeof ms, "%d", (int)mode);
    char *argv[] = {(char *)self, "--child", gs, ms, NULL};
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    if (posix_spawn(&pid, self, NULL, NULL, argv, environ) != 0)
        return 1;
    int status;
    if (waitpid(pid, &status, 0) < 0)
        return 1;
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Cold steps (each in a fresh cache directory, a fresh context), then warm
 * steps in child processes on the last of those directories, then repeated
 * steps in the last context. */
static int measure(const char *self, int gi, kiln_mode mode, const bench_opts *o) {
    const graph_spec *g = &graphs[gi];
    int reps = o->quick ? 1 : 3;
    double *t = calloc((size_t)(reps + o->steps), sizeof(double));
    kiln_stats d = {0}, dr = {0};
    char dir[] = "/tmp/kiln-bench-cache-XXXXXX";
    kiln_ctx *ctx = NULL;
    bool have_dir = false;
    int rc = !t;
    for (int r = 0; r < reps && rc == 0; r++) {
        if (have_dir)
            nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        strcpy(dir + strlen(dir) - 6, "XXXXXX");
        have_dir = mkdtemp(dir) != NULL;
        if (!have_dir) {
            rc = 1;
            break;
        }
        setenv("KILN_CACHE_DIR", dir, 1);
        kiln_ctx_free(ctx);
        ctx = kiln_ctx_new(KILN_CPU);
        if (!ctx) {
            fprintf(stderr, "kiln_ctx_new: %s\n", kiln_last_ctx_error());
            rc = 1;
            break;
        }
        kiln_ctx_set_mode(ctx, mode);
        rc = one_step(ctx, g, &t[r], &d);
    }
    if (rc == 0)
        emit(g, mode, "cold", t, reps, &d);
    for (int r = 0; r < reps + 2 && rc == 0; r++)
        rc = spawn_child(self, gi, mode);
    for (int s = 0; s < o->steps && rc == 0; s++)
        rc = one_step(ctx, g, &t[s], &dr);
    if (rc == 0)
        emit(g, mode, "repeat", t, o->steps, &dr);
    kiln_ctx_free(ctx);
    if (have_dir)
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(t);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child") == 0) {
        int gi = atoi(argv[2]);
        if (gi < 0 || gi >= NGRAPHS)
            return 2;
        return child(gi, atoi(argv[3]) == KILN_EAGER ? KILN_EAGER : KILN_LAZY);
    }
    bench_opts o = bench_parse_opts(argc, argv);
    /* /proc/self/exe, not argv[0]: the child must be this very binary
     * whatever the working directory or PATH. */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "compile_cost: cannot find its own executable\n");
        return 1;
    }
    self[n] = '\0';
    int rc = 0;
    for (int gi = 0; gi < NGRAPHS; gi++)
        for (int m = 0; m < 2; m++)
            rc |= measure(self, gi, m == 0 ? KILN_LAZY : KILN_EAGER, &o);
    return rc;
}
