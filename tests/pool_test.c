/* pool_test.c — the caching allocator (jit/pool.h) on its own: size classes,
 * reuse of a released block, the byte budget, the retry after a failed raw
 * allocation, blocks that outlive the pool's device; and through kiln.h: a
 * replayed step whose previous outputs were released takes its outputs from
 * the pool (kiln_ctx_stats says so) and still computes the right values, on
 * every executor, against values computed here in double. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "jit/pool.h"
#include "test_util.h"

/* A raw allocator that counts, and fails on demand. */
typedef struct counting {
    int allocs, frees, fail_next;
    size_t live_bytes;
} counting;

static void *count_alloc(void *u, size_t n) {
    counting *c = u;
    if (c->fail_next > 0) {
        c->fail_next--;
        return NULL;
    }
    c->allocs++;
    c->live_bytes += n;
    return malloc(n);
}

static void count_free(void *u, void *mem, size_t n) {
    counting *c = u;
    c->frees++;
    c->live_bytes -= n;
    free(mem);
}

static jit_pool *counting_pool(counting *c, size_t budget) {
    jit_pool *p = jit_pool_new((jit_pool_raw){count_alloc, count_free, c, true}, budget);
    cr_assert_not_null(p);
    return p;
}

Test(pool, size_classes) {
    cr_assert_eq(jit_pool_class(100), 100, "small requests are not rounded");
    cr_assert_eq(jit_pool_class(JIT_POOL_MIN), JIT_POOL_MIN);
    for (size_t n = JIT_POOL_MIN; n < ((size_t)1 << 34); n = n * 3 / 2 + 17) {
        size_t c = jit_pool_class(n);
        cr_assert(c >= n && c <= n + n / 8, "class %zu of %zu wastes more than 1/8", c, n);
        cr_assert_eq(jit_pool_class(c), c, "a class is its own class (%zu)", c);
    }
    cr_assert_eq(jit_pool_class(3 << 20), 3 << 20);
    cr_assert_eq(jit_pool_class((3 << 20) + 1), (3 << 20) + (256 << 10));
}

Test(pool, released_blocks_are_reused_by_class) {
    counting c = {0};
    jit_pool *p = counting_pool(&c, 64 << 20);
    void *a = jit_pool_get(p, 1 << 20);
    cr_assert_not_null(a);
    jit_pool_put(p, a, 1 << 20);
    jit_pool_stats s = jit_pool_get_stats(p);
    cr_assert_eq(s.held_bytes, 1 << 20);
    /* a request of the same class (1 MiB - 1000 rounds up to 1 MiB) reuses it */
    void *b = jit_pool_get(p, (1 << 20) - 1000);
    cr_assert_eq(b, a, "a block of the same class was not reused");
    /* a different class does not */
    void *d = jit_pool_get(p, 2 << 20);
    cr_assert_neq(d, a);
    s = jit_pool_get_stats(p);
    cr_assert_eq(s.reuses, 1);
    cr_assert_eq(s.allocations, 2);
    cr_assert_eq(s.held_bytes, 0);
    cr_assert_eq(c.allocs, 2);
    /* bytes out now (class sizes), and the most there were */
    cr_assert_eq(s.live_bytes, 3 << 20);
    cr_assert_eq(s.peak_bytes, 3 << 20);
    jit_pool_put(p, b, (1 << 20) - 1000);
    jit_pool_put(p, d, 2 << 20);
    s = jit_pool_get_stats(p);
    cr_assert_eq(s.live_bytes, 0);
    cr_assert_eq(s.peak_bytes, 3 << 20);
    cr_assert_eq(s.retries, 0);
    jit_pool_close(p);
    cr_assert_eq(c.frees, 2, "closing freed %d of 2 kept blocks", c.frees);
    cr_assert_eq(c.live_bytes, 0);
}

Test(pool, budget_bounds_what_is_kept) {
    counting c = {0};
    jit_pool *p = counting_pool(&c, 3 << 20);
    void *a = jit_pool_get(p, 2 << 20), *b = jit_pool_get(p, 2 << 20);
    jit_pool_put(p, a, 2 << 20);
    jit_pool_put(p, b, 2 << 20); /* 4 MiB would exceed 3: freed at once */
    cr_assert_eq(jit_pool_get_stats(p).held_bytes, 2 << 20);
    cr_assert_eq(c.frees, 1);
    void *s = jit_pool_get(p, 1000); /* small blocks are never kept */
    jit_pool_put(p, s, 1000);
    cr_assert_eq(c.frees, 2);
    jit_pool_close(p);
    cr_assert_eq(c.live_bytes, 0);
}

Test(pool, failed_allocation_trims_and_retries_once) {
    counting c = {0};
    jit_pool *p = counting_pool(&c, 64 << 20);
    void *a = jit_pool_get(p, 4 << 20);
    jit_pool_put(p, a, 4 << 20);
    c.fail_next = 1; /* the first raw attempt fails: the kept 4 MiB go, then it succeeds */
    void *b = jit_pool_get(p, 8 << 20);
    cr_assert_not_null(b);
    cr_assert_eq(jit_pool_get_stats(p).held_bytes, 0);
    cr_assert_eq(c.frees, 1);
    cr_assert_eq(jit_pool_get_stats(p).retries, 1);
    c.fail_next = 2; /* both attempts fail: NULL, nothing leaked */
    cr_assert_null(jit_pool_get(p, 16 << 20));
    jit_pool_stats s = jit_pool_get_stats(p);
    cr_assert_eq(s.retries, 2);
    cr_assert_eq(s.live_bytes, 8 << 20, "a failed request counts no bytes");
    jit_pool_put(p, b, 8 << 20);
    jit_pool_close(p);
    cr_assert_eq(c.live_bytes, 0);
}

Test(pool, blocks_outlive_the_device) {
    counting c = {0};
    jit_pool *p = counting_pool(&c, 64 << 20);
    void *a = jit_pool_get(p, 1 << 20), *k = jit_pool_get(p, 1 << 20);
    jit_pool_put(p, k, 1 << 20);
    jit_pool_close(p); /* the kept block goes; a is still out */
    cr_assert_eq(c.frees, 1);
    jit_pool_put(p, a, 1 << 20); /* freed, and the pool with it (ASan would see a leak) */
    cr_assert_eq(c.frees, 2);
    cr_assert_eq(c.live_bytes, 0);
}

/* The same step three times, each step's output released before the next:
 * from the second on, the output's 4 MiB come back from the pool. */
TU_TEST(pool, replayed_step_reuses_released_outputs) {
    enum { N = 1 << 20 };
    TU_RNG(r);
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N),
          *out = malloc(sizeof(float) * N);
    cr_assert(x && y && out);
    for (int i = 0; i < N; i++) {
        x[i] = (float)tu_unif(&r, -3, 3);
        y[i] = (float)tu_unif(&r, -3, 3);
    }
    kiln_tensor *a = kiln_from_data(ctx, KILN_F32, TU_S(N), x),
                *b = kiln_from_data(ctx, KILN_F32, TU_S(N), y);
    kiln_stats before = kiln_ctx_stats(ctx);
    for (int step = 0; step < 3; step++) {
        kiln_scope_begin(ctx);
        kiln_tensor *t = kiln_tanh(kiln_add(kiln_mul(a, b), a));
        cr_assert_eq(kiln_to_host(t, out, sizeof(float) * N), KILN_OK, "[%s] %s", tu_exec_name(),
                     kiln_error_message(t));
        for (int i = 0; i < N; i += 997) {
            double want = tanh((double)(float)((double)(float)((double)x[i] * y[i]) + x[i]));
            cr_assert(fabs(out[i] - want) <= 4e-7 * fabs(want) + 1e-30,
                      "[%s] step %d element %d: %.9g, want %.9g", tu_exec_name(), step, i, out[i],
                      want);
        }
        kiln_scope_end(ctx);
    }
    kiln_stats after = kiln_ctx_stats(ctx);
    if (tu_cur_exec()->dev == KILN_REF) { /* its counters stay 0 (kiln.h) */
        free(x);
        free(y);
        free(out);
        return;
    }
    cr_assert(after.buffer_reuses - before.buffer_reuses >= 2, "[%s] 3 steps reused %lld buffers",
              tu_exec_name(), (long long)(after.buffer_reuses - before.buffer_reuses));
    cr_assert(after.pooled_bytes >= (int64_t)sizeof(float) * N, "[%s] the last output was not kept",
              tu_exec_name());
    /* a and b are held, the released outputs are not; at the peak a step's
     * output (in eager mode its three ops' results) was out beside them,
     * never two steps' */
    cr_assert(after.live_bytes >= 2 * (int64_t)sizeof(float) * N &&
                  after.live_bytes < 3 * (int64_t)sizeof(float) * N,
              "[%s] live_bytes %lld", tu_exec_name(), (long long)after.live_bytes);
    cr_assert(after.peak_bytes >= after.live_bytes + (int64_t)sizeof(float) * N &&
                  after.peak_bytes <= 5 * (int64_t)sizeof(float) * N,
              "[%s] peak_bytes %lld", tu_exec_name(), (long long)after.peak_bytes);
    cr_assert_eq(after.memory_retries, 0);
    free(x);
    free(y);
    free(out);
}
