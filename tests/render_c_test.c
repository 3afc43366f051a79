/* render_c_test.c — what jit/cpu/render_c.c prints for kernels of very
 * different sizes: a tiny kernel of fixed sizes is left scalar (no `omp
 * simd`, no 512-bit target switch: compiling those cost gcc 12% more time
 * for kernels that run in well under a microsecond), a large one keeps its
 * vector loops. Checked on the source, since both compute the same values
 * (the op suites check those). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/graph.h"
#include "jit/cpu/cpu.h"
#include "lower/lower.h"

#include "graph_util.h"


/* The C source of the program computing target (whose reference it takes),
 * malloc'd into *src, planned for vectors of vbytes bytes (64: AVX-512, 32:
 * AVX2), or for this host's where vbytes is 0. The source is text whatever
 * the host: tests that count what a plan decides name the width they count
 * for. */
static void render_for(graph_node *target, int vbytes, char **src) {
    lower_program *p = lower_schedule(1, &target, true);
    cr_assert(p);
    graph_unref(target);
    lower_target t = *jit_cpu_target();
    if (vbytes)
        t.vector_bytes = vbytes;
    lower_plan *plans = lower_plan_program(p, &t);
    cr_assert(plans);
    char msg[256];
    cr_assert_eq(jit_cpu_render(p, plans, src, msg, sizeof msg), KILN_OK, "%s", msg);
    lower_plans_free(plans, p->nkernels);
    lower_program_free(p);
}

static void render(graph_node *target, char **src) { render_for(target, 0, src); }

Test(render_c, tiny_kernels_are_scalar_and_large_ones_vectorised) {
    graph_ctx *g = graph_ctx_new();
    const int64_t small[2] = {3, 7}, big[2] = {300, 40};
    graph_node *a = tu_leaf(g, KILN_F32, 2, small), *b = tu_leaf(g, KILN_F32, 2, big);
    struct {
        graph_node *target;
        bool simd;
        const char *what;
    } cases[] = {
        {graph_unary(GRAPH_EXP, a), false, "exp over 21 elements"},
        {graph_reduce(GRAPH_SUM, a, 2u, KILN_F32), false, "row sums of 3x7"},
        {graph_reduce(GRAPH_RMAX, a, 2u, KILN_F32), false, "row maxima of 3x7"},
        {graph_unary(GRAPH_EXP, b), true, "exp over 12000 elements"},
        {graph_reduce(GRAPH_SUM, b, 2u, KILN_F32), true, "row sums of 300x40"},
        {graph_reduce(GRAPH_RMAX, b, 2u, KILN_F32), true, "row maxima of 300x40"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *src = NULL;
        render(cases[i].target, &src);
        /* after the prelude: the kernel's own text */
        const char *k = strstr(src, JIT_CPU_KERNEL_MARK);
        cr_assert(k, "%s: no kernel in the source", cases[i].what);
        bool simd = strstr(k, "#pragma omp simd") != NULL;
        cr_assert_eq(simd, cases[i].simd, "%s: omp simd %s", cases[i].what,
                     simd ? "present" : "missing");
        if (!cases[i].simd)
            cr_assert(!strstr(k, "prefer-vector-width"), "%s: a target switch", cases[i].what);
        free(src);
    }
    graph_unref(a);
    graph_unref(b);
    graph_ctx_free(g);
}

/* The number a shell command prints about source src: cmd (a format of
 * one %s) run on a temporary file holding it. */
static int shell_count(const char *src, const char *cmd) {
    char path[] = "/tmp/kiln_render_XXXXXX.c";
    int fd = mkstemps(path, 2);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(src, f);
    fclose(f);
    char line[1024];
    snprintf(line, sizeof line, cmd, path);
    FILE *pp = popen(line, "r");
    cr_assert(pp);
    int n = -1;
    cr_assert_eq(fscanf(pp, "%d", &n), 1, "%s printed no number", line);
    pclose(pp);
    unlink(path);
    return n;
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *at = strstr(s, what); at; at = strstr(at + 1, what))
        n++;
    return n;
}

/* A row kernel of several passes prefetches the next row's first-pass loads
 * during its sum pass (plan.c: plan_prefetch), those whose places the row
 * and the element decide: a gather's load, whose place is a loaded value,
 * is not prefetched (nor computed ahead). A one-pass row sum prefetches
 * nothing. */
Test(render_c, row_kernels_prefetch_the_next_rows_plain_loads) {
    graph_ctx *g = graph_ctx_new();
    const int64_t shape[2] = {64, 1000};
    graph_node *a = tu_leaf(g, KILN_F32, 2, shape), *idx = tu_leaf(g, KILN_I32, 2, shape);
    struct {
        graph_node *x;
        int prefetches;
        const char *what;
    } cases[] = {
        {a, 1, "softmax of a leaf"},
        {graph_gather(a, 1, idx), 1, "softmax of a gather: its index only"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        graph_node *x = cases[i].x;
        graph_node *m = graph_reduce(GRAPH_RMAX, x, 2u, KILN_F32), *mx = graph_expand(m, shape);
        graph_node *d = graph_binary(GRAPH_SUB, x, mx), *e = graph_unary(GRAPH_EXP, d);
        graph_node *sr = graph_reduce(GRAPH_SUM, e, 2u, KILN_F32), *s = graph_expand(sr, shape);
        char *src = NULL;
        render(graph_binary(GRAPH_DIV, e, s), &src);
        graph_node *tmp[] = {m, mx, d, e, sr, s};
        for (size_t j = 0; j < sizeof tmp / sizeof *tmp; j++)
            graph_unref(tmp[j]);
        if (x != a)
            graph_unref(x);
        const char *k = strstr(src, JIT_CPU_KERNEL_MARK);
        cr_assert(k);
        cr_assert_eq(count(k, "__builtin_prefetch("), cases[i].prefetches, "%s:\n%s", cases[i].what, k);
        free(src);
    }
    char *src = NULL;
    render(graph_reduce(GRAPH_SUM, a, 2u, KILN_F32), &src);
    cr_assert_eq(count(src, "__builtin_prefetch("), 0, "a row sum prefetched");
    free(src);
    graph_unref(a);
    graph_unref(idx);
    graph_ctx_free(g);
}

/* A matmul whose rows and columns leave partial register tiles gets a
 * micro-kernel for each kind of partial tile (lower_mm_edges), chosen per
 * tile; one whose tiles are all whole gets only the one. With AVX-512's
 * 6 x 4 tiles of 16 lanes, 32 rows are 5 tiles of 6 and one of 2, 196
 * columns 3 panels of 64 and one of a vector. With AVX2's 6 x 2 tiles of 8
 * lanes, 196 columns are 12 panels of 16 and a quarter of one: padded to
 * 13 whole panels, a seventeenth more work, under the tenth that earns the
 * columns an edge kernel; 72 columns, 4 panels and a half, earn it. */
Test(render_c, partial_matmul_tiles_get_their_own_micro_kernels) {
    graph_ctx *g = graph_ctx_new();
    struct {
        int vbytes;
        int64_t n, k, m;
        int kernels;
    } cases[] = {{64, 32, 144, 196, 4}, {64, 36, 144, 256, 1}, {64, 32, 144, 256, 2},
                 {64, 36, 144, 196, 2}, {32, 32, 144, 196, 2}, {32, 36, 144, 192, 1},
                 {32, 32, 144, 72, 4}, {32, 36, 144, 72, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int64_t as[2] = {cases[i].n, cases[i].k}, bs[2] = {cases[i].k, cases[i].m};
        graph_node *a = tu_leaf(g, KILN_F32, 2, as), *b = tu_leaf(g, KILN_F32, 2, bs);
        char *src = NULL;
        render_for(graph_matmul(a, b), cases[i].vbytes, &src);
        const char *k = strstr(src, JIT_CPU_KERNEL_MARK);
        cr_assert(k);
        /* each micro-kernel's definition names it with its parameter list */
        int n = count(k, "_ukr(int64_t kc");
        cr_assert_eq(n, cases[i].kernels, "%lldx%lldx%lld, %d-byte vectors: %d micro-kernels, want %d",
                     (long long)cases[i].n, (long long)cases[i].k, (long long)cases[i].m,
                     cases[i].vbytes, n, cases[i].kernels);
        free(src);
        graph_unref(a);
        graph_unref(b);
    }
    graph_ctx_free(g);
}

/* The matmuls of one program share their micro-kernels and packing routines
 * (named by tile shape and types, each guarded by #ifndef), so that gcc
 * compiles them once per translation unit: two products with 6x4 tiles
 * (AVX-512's) define one micro-kernel between them, and each kernel's text still
 * carries its own guarded copy (a unit may hold either kernel alone). */
Test(render_c, matmuls_of_one_program_share_their_micro_kernels) {
    graph_ctx *g = graph_ctx_new();
    const int64_t as[2] = {96, 128}, bs[2] = {128, 256}, cs[2] = {256, 64};
    graph_node *a = tu_leaf(g, KILN_F32, 2, as), *b = tu_leaf(g, KILN_F32, 2, bs);
    graph_node *c = tu_leaf(g, KILN_F32, 2, cs);
    graph_node *h = graph_unary(GRAPH_RELU, graph_matmul(a, b));
    char *src = NULL;
    render_for(graph_matmul(h, c), 64, &src);
    cr_assert_eq(count(src, JIT_CPU_KERNEL_MARK), 2, "%s", src);
    const char *second = strstr(strstr(src, JIT_CPU_KERNEL_MARK) + 1, JIT_CPU_KERNEL_MARK);
    const char *ukr = "void kh_mm_f32_64_6x4_ukr(int64_t kc";
    cr_assert_eq(count(src, ukr), 2, "%s", src);
    cr_assert_eq(count(second, ukr), 1, "%s", src);
    cr_assert_eq(count(src, "#ifndef kh_mm_f32_64_6x4_ukr_\n"), 2, "%s", src);
    /* as the preprocessor sees the program: one definition */
    int defs = shell_count(src, "cc -E -P %s | grep -c 'void kh_mm_f32_64_6x4_ukr(int64_t kc'");
    cr_assert_eq(defs, 1, "%d definitions after preprocessing", defs);
    free(src);
    graph_unref(a);
    graph_unref(b);
    graph_unref(c);
    graph_ctx_free(g);
}

/* A matmul whose epilogue is the product itself stores its whole tiles
 * straight into the output (lower_mm_stores_direct); one with an epilogue
 * (a relu here) passes every tile through the thread's C block. */
Test(render_c, plain_products_store_whole_tiles_into_the_output) {
    graph_ctx *g = graph_ctx_new();
    const int64_t as[2] = {40, 64}, bs[2] = {64, 100};
    graph_node *a = tu_leaf(g, KILN_F32, 2, as), *b = tu_leaf(g, KILN_F32, 2, bs);
    struct {
        graph_node *target;
        bool direct;
    } cases[] = {{graph_matmul(a, b), true}, {graph_unary(GRAPH_RELU, graph_matmul(a, b)), false}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *src = NULL;
        render(cases[i].target, &src);
        const char *k = strstr(src, JIT_CPU_KERNEL_MARK);
        cr_assert(k);
        cr_assert_eq(strstr(k, "const int dst =") != NULL, cases[i].direct, "case %zu", i);
        free(src);
    }
    graph_unref(a);
    graph_unref(b);
    graph_ctx_free(g);
}

/* Under clang (KILN_CC=clang) a product's functions keep their 512-bit
 * vectors on an AVX-512 host: clang splits the vector types they name into
 * 256-bit halves where its -march=native prefers 256, and the micro-kernel's
 * 24 accumulators then spilled (products 2-3x slower than gcc's). The
 * rendered source compiled by clang, its micro-kernel read back: its FMAs
 * are on zmm registers. Skipped without clang or AVX-512. */
Test(render_c, clang_keeps_the_products_512_bit_vectors) {
    if (jit_cpu_target()->vector_bytes < 64)
        cr_skip_test("no AVX-512 on this host");
    if (system("command -v clang >/dev/null 2>&1") != 0)
        cr_skip_test("no clang on this host");
    graph_ctx *g = graph_ctx_new();
    const int64_t as[2] = {96, 128}, bs[2] = {128, 256};
    graph_node *a = tu_leaf(g, KILN_F32, 2, as), *b = tu_leaf(g, KILN_F32, 2, bs);
    char *src = NULL;
    render(graph_matmul(a, b), &src);
    int fmas = shell_count(src, "clang -O3 -march=native -fopenmp -std=c11 -w -S -o - %s | awk "
                                "'/^kh_mm_f32_64_6x4_ukr:/{p=1} p&&/^\\.Lfunc_end/{exit} p' | "
                                "grep -c 'vfmadd[0-9]*ps.*zmm'");
    cr_assert(fmas >= 24, "%d FMAs on zmm registers in clang's micro-kernel, expected 24 a k step",
              fmas);
    free(src);
    graph_unref(a);
    graph_unref(b);
    graph_ctx_free(g);
}
