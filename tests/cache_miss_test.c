/* cache_miss_test.c — KILN_DEBUG=1 says why a sync missed the graph cache:
 * a scalar given as a double (a constant in the structure), a shape or a
 * view that differs from an earlier program of the same structure is named,
 * with both values; a structure never seen says so; a new random seed, a
 * bound input, is no miss at all. Each case runs
 * the same step twice with one thing changed, on the CPU (the reference
 * evaluator compiles nothing and keeps no graph cache), with stderr caught
 * in a file, through the C compiler and the LLVM path. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/kiln.h"
#include "tests/capture.h"

static char text[1 << 16];

/* Runs step(ctx, k) for k = 0, 1, 2 with KILN_DEBUG=1 and keeps what kiln
 * printed in text. */
static void run_logged(kiln_device dev, void (*step)(kiln_ctx *, int)) {
    setenv("KILN_DEBUG", "1", 1);
    tu_capture cap;
    tu_capture_begin(&cap);
    kiln_ctx *ctx = kiln_ctx_new(dev);
    cr_assert(ctx, "%s", kiln_last_ctx_error());
    for (int k = 0; k < 3; k++)
        step(ctx, k);
    kiln_ctx_free(ctx);
    tu_capture_end(&cap, text, sizeof text);
}

/* The second sync's explanation. */
static const char *second_miss(void) {
    const char *first = strstr(text, "missed the graph cache");
    cr_assert(first, "no miss said: %s", text);
    const char *second = strstr(first + 1, "missed the graph cache");
    cr_assert(second, "one miss said: %s", text);
    return second;
}

static void sync_of(kiln_tensor *t) {
    float v[64];
    cr_assert_eq(kiln_to_host(t, v, sizeof(float) * (size_t)kiln_numel(t)), KILN_OK, "%s",
                 kiln_error_message(t));
}

static const char *const compilers[] = {"cc", "llvm"};

/* Data, not a constant (constants fold away before any sync). */
static kiln_tensor *data(kiln_ctx *ctx, int ndim, const int64_t *dims) {
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = 0.25f * (float)(i % 7) - 0.5f;
    return kiln_from_data(ctx, KILN_F32, ndim, dims, v);
}

static void scaled(kiln_ctx *ctx, int k) {
    kiln_tensor *x = data(ctx, 1, (const int64_t[]){8});
    /* kiln_mul_scalar would bind the value (no miss): a kiln_scalar is a
     * constant of the structure */
    double v = (const double[]){0.5, 0.25, 0.125}[k];
    sync_of(kiln_mul(kiln_exp(x), kiln_scalar(ctx, KILN_F32, v)));
}

Test(cache_miss, a_constant_given_by_kiln_scalar) {
    for (int d = 0; d < 2; d++) {
        setenv("KILN_CPU_COMPILER", compilers[d], 1);
        run_logged(KILN_CPU, scaled);
        cr_assert(strstr(text, "a structure not seen before"), "%s", text);
        const char *why = second_miss();
        cr_assert(strstr(why, "constant") && strstr(why, "0.25") && strstr(why, "0.5") &&
                      strstr(why, "belongs in a tensor"),
                  "%s", why);
        /* the third is compared with the most recent: the second */
        const char *third = strstr(why + 1, "missed the graph cache");
        cr_assert(third && strstr(third, "sync 2") && strstr(third, "0.125 where it was 0.25"),
                  "%s", why);
    }
}

static void reshaped(kiln_ctx *ctx, int k) {
    kiln_tensor *x = data(ctx, 2, (const int64_t[]){k ? 3 : 4, 5});
    sync_of(kiln_tanh(kiln_add(x, x)));
}

Test(cache_miss, a_shape) {
    for (int d = 0; d < 2; d++) {
        setenv("KILN_CPU_COMPILER", compilers[d], 1);
        run_logged(KILN_CPU, reshaped);
        const char *why = second_miss();
        cr_assert(strstr(why, "shape [3,5]") && strstr(why, "[4,5]"), "%s", why);
    }
}

static void seeded(kiln_ctx *ctx, int k) {
    sync_of(kiln_sigmoid(kiln_rand(ctx, KILN_F32, 1, (const int64_t[]){16}, k ? 8 : 7)));
}

/* A seed is a bound input (kiln.h, kiln_rand): a new one misses nothing. */
Test(cache_miss, a_new_seed_is_a_hit) {
    run_logged(KILN_CPU, seeded);
    const char *first = strstr(text, "missed the graph cache");
    cr_assert(first, "%s", text);
    cr_assert_null(strstr(first + 1, "missed the graph cache"), "%s", text);
    cr_assert(strstr(text, "graph cache hit"), "%s", text);
}

static void sliced(kiln_ctx *ctx, int k) {
    kiln_tensor *x = data(ctx, 1, (const int64_t[]){16});
    sync_of(kiln_exp(kiln_slice(x, 0, k ? 1 : 0, k ? 9 : 8, 1)));
}

Test(cache_miss, a_view) {
    run_logged(KILN_CPU, sliced);
    const char *why = second_miss();
    cr_assert(strstr(why, "parameters of node") && strstr(why, "view"), "%s", why);
}

static void same(kiln_ctx *ctx, int k) {
    (void)k;
    kiln_tensor *x = data(ctx, 1, (const int64_t[]){8});
    sync_of(kiln_exp(x));
}

Test(cache_miss, a_hit_says_nothing) {
    run_logged(KILN_CPU, same);
    const char *first = strstr(text, "missed the graph cache");
    cr_assert(first, "%s", text);
    cr_assert_null(strstr(first + 1, "missed the graph cache"), "%s", text);
    cr_assert(strstr(text, "graph cache hit"), "%s", text);
}
