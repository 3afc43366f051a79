/* threads_test.c — what kiln promises for threads (kiln.h: a context is not
 * thread-safe; use one per thread) and keeps: threads, each with a context
 * of its own, build, compile and run the same programs at once, on one disk
 * cache or none (memory only, where the process shares each compiled object
 * between contexts), and every result equals the one a loop here computes.
 * The compiled path's shared state (the caches, the process's table of
 * loaded objects, the machine limits, LLVM's one-time set-up) is what is
 * under test; the ASan build runs it too. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/kiln.h"

enum { THREADS = 4, ROUNDS = 3, N = 64, M = 24 };

typedef struct worker {
    int id;
    kiln_device dev;
    int failures;
    char why[512];
} worker;

static void fail(worker *w, const char *what, const char *msg) {
    if (!w->failures++)
        snprintf(w->why, sizeof w->why, "thread %d: %s: %s", w->id, what, msg ? msg : "");
}

/* y = tanh(x @ a + 1) summed over rows, for x [N, M] and a [M, M] from the
 * thread's seed: the same program for every thread, other data. */
static void *run(void *arg) {
    worker *w = arg;
    kiln_ctx *ctx = kiln_ctx_new(w->dev);
    if (!ctx) {
        fail(w, "kiln_ctx_new", kiln_last_ctx_error());
        return NULL;
    }
    for (int round = 0; round < ROUNDS && !w->failures; round++) {
        static __thread float x[N * M], a[M * M];
        unsigned s = 2463534242u + 977u * (unsigned)w->id + 131u * (unsigned)round;
        for (int i = 0; i < N * M; i++)
            x[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
        for (int i = 0; i < M * M; i++)
            a[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
        kiln_tensor *tx = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){N, M}, x);
        kiln_tensor *ta = kiln_from_data(ctx, KILN_F32, 2, (const int64_t[]){M, M}, a);
        kiln_tensor *y = kiln_sum(kiln_tanh(kiln_add_scalar(kiln_matmul(tx, ta), 1)), 1,
                                  (const int[]){0}, false);
        float got[M];
        if (kiln_to_host(y, got, sizeof got) != KILN_OK) {
            fail(w, "kiln_to_host", kiln_ctx_last_error(ctx));
            break;
        }
        for (int j = 0; j < M; j++) {
            double want = 0;
            for (int i = 0; i < N; i++) {
                double d = 0;
                for (int k = 0; k < M; k++)
                    d += (double)x[i * M + k] * a[k * M + j];
                want += tanh(d + 1);
            }
            if (fabs(got[j] - want) > 1e-4 * (1 + fabs(want))) {
                char msg[96];
                snprintf(msg, sizeof msg, "round %d column %d: %.7g, expected %.7g", round, j,
                         got[j], want);
                fail(w, "wrong value", msg);
                break;
            }
        }
        kiln_release(tx);
        kiln_release(ta);
        kiln_release(y);
    }
    kiln_ctx_free(ctx);
    return NULL;
}

static void run_threads(kiln_device dev) {
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.id = i, .dev = dev};
        cr_assert_eq(pthread_create(&t[i], NULL, run, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(w[i].failures, 0, "%s", w[i].why);
}

/* A fresh cache directory of the test's own. */
static void fresh_cache(void) {
    static char dir[256];
    const char *tmp = getenv("TEST_TMPDIR");
    snprintf(dir, sizeof dir, "%s/kiln-threads-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    cr_assert(mkdtemp(dir));
    setenv("KILN_CACHE_DIR", dir, 1);
}

Test(threads, one_context_each_on_one_disk_cache) {
    fresh_cache();
    run_threads(KILN_CPU);
}

Test(threads, one_context_each_memory_only) {
    fresh_cache();
    setenv("KILN_CACHE_MAX_BYTES", "none", 1); /* not a number: the disk level is off */
    run_threads(KILN_CPU);
}

Test(threads, one_context_each_llvm) {
    fresh_cache();
    setenv("KILN_CPU_COMPILER", "llvm", 1);
    run_threads(KILN_CPU);
}

Test(threads, one_context_each_reference) {
    run_threads(KILN_REF);
}
