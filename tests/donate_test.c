/* donate_test.c — buffer donation (jit/donate.c): an update assigned under
 * no-grad, m = 0.9 m + g, computes into the old m's buffer when nothing can
 * read the old m after the sync (kiln_ctx_stats counts it, and the peak
 * memory holds one m, not two), and keeps its own buffer whenever something
 * still can: a lazy op recorded on the old m and read afterwards, a value
 * computed from the old m in the same sync and kept. Values against doubles
 * computed here, on every executor. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "test_util.h"

enum { N = 1 << 18 };

typedef struct moment {
    float *g, *m0, *got;
    double *want; /* m after the steps so far, in float steps */
} moment;

/* Fresh g and m0 (m's start), and the tensors m and g holding them. */
static void moment_init(kiln_ctx *ctx, moment *s, tu_rng *r, kiln_tensor **m, kiln_tensor **g) {
    s->g = malloc(sizeof(float) * N);
    s->m0 = malloc(sizeof(float) * N);
    s->got = malloc(sizeof(float) * N);
    s->want = malloc(sizeof(double) * N);
    cr_assert(s->g && s->m0 && s->got && s->want);
    for (int i = 0; i < N; i++) {
        s->g[i] = (float)tu_unif(r, -2, 2);
        s->m0[i] = (float)tu_unif(r, -2, 2);
        s->want[i] = s->m0[i];
    }
    *m = kiln_from_data(ctx, KILN_F32, TU_S(N), s->m0);
    *g = kiln_from_data(ctx, KILN_F32, TU_S(N), s->g);
}

static void moment_free(moment *s) {
    free(s->g);
    free(s->m0);
    free(s->got);
    free(s->want);
}

/* m = 0.9 m + g under no-grad, as an optimiser records it: in a scope, so
 * that no handle of 0.9 m outlives the update (one would read the old m
 * whenever it was computed, and keep its buffer). */
static void update(kiln_ctx *ctx, kiln_tensor *m, kiln_tensor *g, moment *s) {
    kiln_scope_begin(ctx);
    kiln_no_grad_begin(ctx);
    cr_assert_eq(kiln_assign(m, kiln_add(kiln_mul_scalar(m, 0.9), g)), KILN_OK);
    kiln_no_grad_end(ctx);
    kiln_scope_end(ctx);
    for (int i = 0; i < N; i++)
        s->want[i] = (double)(float)((double)(float)(s->want[i] * (double)0.9f) + s->g[i]);
}

static void expect_m(kiln_tensor *m, moment *s, int step) {
    cr_assert_eq(kiln_to_host(m, s->got, sizeof(float) * N), KILN_OK, "[%s] %s", tu_exec_name(),
                 kiln_error_message(m));
    for (int i = 0; i < N; i += 101)
        cr_assert(fabs(s->got[i] - s->want[i]) <= 1e-6 * fabs(s->want[i]) + 1e-6,
                  "[%s] step %d element %d: %.9g, want %.9g", tu_exec_name(), step, i, s->got[i],
                  s->want[i]);
}

static bool donates(void) { return tu_cur_exec()->dev != KILN_REF && tu_cur_exec()->mode == KILN_LAZY; }

TU_TEST(donate, an_assigned_update_takes_the_old_buffer) {
    TU_RNG(r);
    moment s;
    kiln_tensor *m, *g;
    moment_init(ctx, &s, &r, &m, &g);
    kiln_stats before = kiln_ctx_stats(ctx);
    for (int step = 0; step < 4; step++) {
        update(ctx, m, g, &s);
        expect_m(m, &s, step);
    }
    kiln_stats after = kiln_ctx_stats(ctx);
    if (donates()) {
        cr_assert_eq(after.buffers_donated - before.buffers_donated, 4,
                     "[%s] 4 updates donated %lld buffers", tu_exec_name(),
                     (long long)(after.buffers_donated - before.buffers_donated));
        /* m and g, never a second m */
        cr_assert(after.peak_bytes < 3 * (int64_t)sizeof(float) * N, "[%s] peak %lld bytes",
                  tu_exec_name(), (long long)after.peak_bytes);
    }
    moment_free(&s);
}

/* A lazy op on the old m, recorded before the update and read after it,
 * reads the old values: the old buffer stays its own. */
TU_TEST(donate, a_lazy_reader_of_the_old_value_keeps_it) {
    TU_RNG(r);
    moment s;
    kiln_tensor *m, *g;
    moment_init(ctx, &s, &r, &m, &g);
    update(ctx, m, g, &s);
    expect_m(m, &s, 0);
    double *old = malloc(sizeof(double) * N);
    cr_assert(old);
    for (int i = 0; i < N; i++)
        old[i] = s.want[i];
    kiln_tensor *twice = kiln_mul_scalar(m, 2.0); /* of the old m, not yet computed */
    kiln_stats before = kiln_ctx_stats(ctx);
    update(ctx, m, g, &s);
    expect_m(m, &s, 1);
    cr_assert_eq(kiln_ctx_stats(ctx).buffers_donated, before.buffers_donated,
                 "[%s] donated the buffer a lazy op still reads", tu_exec_name());
    cr_assert_eq(kiln_to_host(twice, s.got, sizeof(float) * N), KILN_OK);
    for (int i = 0; i < N; i += 101)
        cr_assert(fabs(s.got[i] - 2 * old[i]) <= 1e-6 * fabs(old[i]) + 1e-6,
                  "[%s] element %d of 2 m_old: %.9g, want %.9g", tu_exec_name(), i, s.got[i],
                  2 * old[i]);
    /* once that reader is gone, the next update donates again */
    kiln_release(twice);
    update(ctx, m, g, &s);
    expect_m(m, &s, 2);
    if (donates())
        cr_assert_eq(kiln_ctx_stats(ctx).buffers_donated, before.buffers_donated + 1,
                     "[%s] no donation once the reader was released", tu_exec_name());
    free(old);
    moment_free(&s);
}

/* A value computed from the old m in the same sync and kept (its sum) keeps
 * the old m as its source, for a later backward: no donation, and the sum
 * is the old m's. */
TU_TEST(donate, a_kept_value_of_the_same_sync_keeps_it) {
    TU_RNG(r);
    moment s;
    kiln_tensor *m, *g;
    moment_init(ctx, &s, &r, &m, &g);
    double want = 0;
    for (int i = 0; i < N; i++)
        want += s.m0[i];
    kiln_tensor *sum = kiln_sum(m, 0, NULL, false);
    kiln_stats before = kiln_ctx_stats(ctx);
    update(ctx, m, g, &s);
    float got = 0;
    cr_assert_eq(kiln_to_host(sum, &got, sizeof got), KILN_OK);
    cr_assert(fabs(got - want) <= 1e-4 * fabs(want) + 1e-2, "[%s] sum %.9g, want %.9g",
              tu_exec_name(), got, want);
    expect_m(m, &s, 0);
    cr_assert_eq(kiln_ctx_stats(ctx).buffers_donated, before.buffers_donated,
                 "[%s] donated the buffer a kept sum reads", tu_exec_name());
    moment_free(&s);
}
