/* tune_test.c — KILN_TUNE=1 (jit/tune.c): on both CPU paths, products of
 * every shape family (partial tiles, batches, a transposed A, f64, f16,
 * integers, a convolution's split operand) and fused attention forward and
 * backward have their blocking chosen by timing; every variant timed agreed with the heuristics' plan (the tuner
 * says so on stderr where one did not, and never picks it); the results
 * match the reference evaluator; and a second context on the same cache
 * takes every stored choice without timing anything. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "test_util.h"

typedef struct tcase {
    kiln_dtype dt;
    int64_t nb, n, k, m;
    bool ta;   /* A given as its transpose */
    bool conv; /* x [nb, k, n, n] (k channels) with m 3x3 filters, padding 1, bias */
    int att;   /* 1: scaled dot-product attention of q, k, v [nb, m, n, k] (m heads);
                  2: the gradients of sum(attention * w) with respect to q, k and v */
} tcase;

static const tcase cases[] = {
    {KILN_F32, 1, 301, 530, 275, false, false, 0}, /* partial tiles both ways, k blocks */
    {KILN_F32, 3, 97, 144, 196, false, false, 0},  /* a batch sharing B */
    {KILN_F64, 1, 130, 700, 77, false, false, 0},
    {KILN_F32, 1, 200, 300, 260, true, false, 0},  /* A packed from its transpose */
    {KILN_F32, 2, 64, 1100, 40, false, false, 0},  /* narrow: the taller register tile */
    {KILN_I32, 1, 100, 300, 200, false, false, 0}, /* exact sums */
    {KILN_F16, 1, 128, 256, 160, false, false, 0},
    {KILN_F32, 4, 28, 16, 32, false, true, 0},     /* im2col read in place */
    {KILN_F32, 2, 128, 64, 4, false, false, 1}, /* fused attention (products on LLVM) */
    {KILN_F32, 2, 128, 64, 4, false, false, 2}, /* and its backward */
};
enum { NCASES = sizeof cases / sizeof cases[0] };

/* The case's result on ctx, its inputs drawn from a generator seeded by
 * the case: tanh(A B + bias) for floats, A B + bias for integers, the
 * convolution plus bias. */
static kiln_tensor *compute(kiln_ctx *ctx, int i) {
    const tcase *c = &cases[i];
    tu_rng r = tu_rng_from("tune", (uint64_t)i);
    bool fl = tu_is_float(c->dt);
    double lo = fl ? -1 : -3, hi = fl ? 1 : 3;
    kiln_tensor *a, *b, *bias, *y;
    int64_t na = c->conv ? c->nb * c->k * c->n * c->n : c->nb * c->n * c->k;
    int64_t nbv = c->conv ? c->m * c->k * 9 : c->k * c->m;
    double *va = malloc(sizeof *va * (size_t)na), *vb = malloc(sizeof *vb * (size_t)nbv);
    double *vc = malloc(sizeof *vc * (size_t)c->m);
    if (c->att) {
        kiln_tensor *qkv[3], *g[3];
        double *v = malloc(sizeof *v * (size_t)(c->nb * c->m * c->n * c->k));
        for (int j = 0; j < 3; j++)
            qkv[j] = tu_rand_tensor(ctx, &r, c->dt, TU_S(c->nb, c->m, c->n, c->k), lo, hi, v);
        y = kiln_scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], false, 0);
        if (c->att == 2) {
            kiln_tensor *w = tu_rand_tensor(ctx, &r, c->dt, TU_S(c->nb, c->m, c->n, c->k), lo, hi, v);
            cr_assert_eq(kiln_gradients(kiln_sum(kiln_mul(y, w), 0, NULL, false), NULL, 3, qkv, g),
                         KILN_OK);
            int64_t len = c->nb * c->m * c->n * c->k;
            for (int j = 0; j < 3; j++)
                g[j] = kiln_reshape(g[j], 1, &len);
            y = kiln_cat(3, g, 0);
        }
        free(v);
        free(va);
        free(vb);
        free(vc);
        TU_ASSERT_OK(y);
        return y;
    }
    if (c->conv) {
        a = tu_rand_tensor(ctx, &r, c->dt, TU_S(c->nb, c->k, c->n, c->n), lo, hi, va);
        b = tu_rand_tensor(ctx, &r, c->dt, TU_S(c->m, c->k, 3, 3), lo, hi, vb);
        bias = tu_rand_tensor(ctx, &r, c->dt, TU_S(c->m), lo, hi, vc);
        y = kiln_conv2d(a, b, bias, 1, 1, 1, 1, 1, 1, 1);
    } else {
        if (c->ta)
            a = kiln_transpose(tu_rand_tensor(ctx, &r, c->dt, TU_S(c->nb, c->k, c->n), lo, hi, va),
                               1, 2);
        else
            a = tu_rand_tensor(ctx, &r, c->dt, TU_S(c->nb, c->n, c->k), lo, hi, va);
        b = tu_rand_tensor(ctx, &r, c->dt, TU_S(c->k, c->m), lo, hi, vb);
        bias = tu_rand_tensor(ctx, &r, c->dt, TU_S(c->m), lo, hi, vc);
        y = kiln_add(kiln_matmul(a, b), bias);
        if (fl)
            y = kiln_tanh(y);
    }
    free(va);
    free(vb);
    free(vc);
    TU_ASSERT_OK(y);
    return y;
}

static int64_t numel(const kiln_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < kiln_ndim(t); d++)
        n *= kiln_shape(t)[d];
    return n;
}

/* Every case on a KILN_CPU context (the compiler path the environment
 * names) against want[i] from the reference evaluator; the context's
 * counters afterwards, and what kiln said on stderr. */
static kiln_stats run_cases(double **want, char *said, size_t cap) {
    tu_capture cp;
    tu_capture_begin(&cp);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    cr_assert(ctx, "%s", kiln_last_ctx_error());
    for (int i = 0; i < NCASES; i++) {
        kiln_tensor *y = compute(ctx, i);
        int64_t k = cases[i].conv ? cases[i].k * 9 : cases[i].att ? cases[i].n : cases[i].k;
        TU_EXPECT_TOL(y, cases[i].dt, want[i], numel(y), tu_tol(cases[i].dt) * (double)k / 100);
    }
    kiln_stats s = kiln_ctx_stats(ctx);
    kiln_ctx_free(ctx);
    tu_capture_end(&cp, said, cap);
    return s;
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

Test(tune, every_variant_agrees_and_choices_are_kept) {
    char dir[] = "/tmp/kiln-tune-XXXXXX";
    cr_assert(mkdtemp(dir));
    setenv("KILN_CACHE_DIR", dir, 1);
    setenv("KILN_TUNE", "1", 1);
    setenv("KILN_DEBUG", "1", 1);
    double *want[NCASES];
    kiln_ctx *ref = kiln_ctx_new(KILN_REF);
    for (int i = 0; i < NCASES; i++) {
        kiln_tensor *y = compute(ref, i);
        want[i] = malloc(sizeof **want * (size_t)numel(y));
        TU_READ(y, want[i], numel(y));
    }
    kiln_ctx_free(ref);
    static char said[1 << 20];
    const char *paths[] = {"cc", "llvm"};
    for (int p = 0; p < 2; p++) {
        setenv("KILN_CPU_COMPILER", paths[p], 1);
        /* first: every product and attention timed (some cases hold
         * several: the backward's) */
        kiln_stats s = run_cases(want, said, sizeof said);
        cr_assert_eq(count(said, "other results"), 0, "%s: a variant disagreed:\n%s", paths[p],
                     said);
        cr_assert(s.tuned >= NCASES, "%s: %lld kernels tuned, fewer than the %d cases:\n%s",
                  paths[p], (long long)s.tuned, NCASES, said);
        cr_assert_eq(count(said, "kiln: tuned "), s.tuned, "%s", said);
        cr_assert(p == 1 || strstr(said, "kiln: tuned attention_"), "%s", said);
        /* then: every choice found, nothing timed (a choice made in this
         * process counts as found when another program holds the kernel) */
        int64_t first = s.tuned + s.tune_hits;
        s = run_cases(want, said, sizeof said);
        cr_assert(s.tuned == 0 && s.tune_hits == first, "%s: %lld tuned, %lld stored:\n%s",
                  paths[p], (long long)s.tuned, (long long)s.tune_hits, said);
        cr_assert_eq(count(said, "kiln: tuned "), 0);
    }
    unsetenv("KILN_CPU_COMPILER");
    unsetenv("KILN_TUNE");
    unsetenv("KILN_DEBUG");
    /* without KILN_TUNE nothing is looked up or timed */
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    kiln_realize(compute(ctx, 0));
    kiln_stats s = kiln_ctx_stats(ctx);
    cr_assert(s.tuned == 0 && s.tune_hits == 0);
    kiln_ctx_free(ctx);
    for (int i = 0; i < NCASES; i++)
        free(want[i]);
    char rm[64];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_assert_eq(system(rm), 0);
}
