/* Tests of kiln_rand and kiln_randn: the same seed gives the same numbers on
 * every executor and in every mode, element i depends only on the seed and
 * i, kiln_rand lies in [0, 1) in every float dtype, and the moments are
 * those of the uniform and standard normal distributions. */
#include "test_util.h"

enum { NREF = 1000 };

/* The numbers of the first executor that ran, per (op, dtype), compared
 * byte for byte with every later executor's. */
static unsigned char first_bytes[2][4][NREF * 8];
static bool have_first[2][4];

static void compare_with_first(kiln_ctx *ctx, int op, int k, kiln_dtype dt, uint64_t seed) {
    kiln_tensor *t =
        op ? kiln_randn(ctx, dt, TU_S(NREF), seed) : kiln_rand(ctx, dt, TU_S(NREF), seed);
    TU_ASSERT_SHAPE(t, NREF);
    TU_ASSERT_DTYPE(t, dt);
    unsigned char buf[NREF * 8];
    size_t nb = NREF * tu_dt_size(dt);
    cr_assert_eq(kiln_to_host(t, buf, nb), KILN_OK);
    if (!have_first[op][k]) {
        memcpy(first_bytes[op][k], buf, nb);
        have_first[op][k] = true;
        return;
    }
    for (size_t i = 0; i < nb; i += tu_dt_size(dt))
        cr_assert(memcmp(buf + i, first_bytes[op][k] + i, tu_dt_size(dt)) == 0,
                  "[%s] %s %s element %zu differs from the first executor's", tu_exec_name(),
                  op ? "randn" : "rand", tu_dt_name(dt), i / tu_dt_size(dt));
}

TU_TEST(rand, same_seed_same_numbers_everywhere) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int op = 0; op < 2; op++)
        for (int k = 0; k < nf; k++)
            compare_with_first(ctx, op, k, fl[k], 0x5eed + (uint64_t)k);
}

TU_TEST(rand, repeatable_and_seed_dependent) {
    kiln_tensor *a = kiln_rand(ctx, KILN_F64, TU_S(64), 7);
    kiln_tensor *b = kiln_rand(ctx, KILN_F64, TU_S(64), 7);
    kiln_tensor *c = kiln_rand(ctx, KILN_F64, TU_S(64), 8);
    /* seeds that differ only in the high 32 bits */
    kiln_tensor *d = kiln_rand(ctx, KILN_F64, TU_S(64), 7 + (1ull << 32));
    kiln_tensor *e = kiln_rand(ctx, KILN_F64, TU_S(64), UINT64_MAX);
    kiln_tensor *f = kiln_rand(ctx, KILN_F64, TU_S(64), 0);
    double va[64], vb[64], vc[64], vd[64], ve[64], vf[64];
    TU_READ(a, va, 64);
    TU_READ(b, vb, 64);
    TU_READ(c, vc, 64);
    TU_READ(d, vd, 64);
    TU_READ(e, ve, 64);
    TU_READ(f, vf, 64);
    int same_c = 0, same_d = 0, same_ef = 0, distinct = 0;
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(va[i], vb[i]);
        same_c += va[i] == vc[i];
        same_d += va[i] == vd[i];
        same_ef += ve[i] == vf[i];
        distinct += i > 0 && va[i] != va[i - 1];
    }
    cr_assert(same_c < 4 && same_d < 4 && same_ef < 4,
              "[%s] different seeds give the same numbers (%d, %d, %d of 64)", tu_exec_name(),
              same_c, same_d, same_ef);
    cr_assert(distinct > 60, "[%s] rand repeats itself", tu_exec_name());
}

TU_TEST(rand, element_depends_only_on_seed_and_index) {
    const uint64_t seed = 0xfeedface12345ull;
    for (int op = 0; op < 2; op++) {
        kiln_tensor *(*fn)(kiln_ctx *, kiln_dtype, int, const int64_t *, uint64_t) =
            op ? kiln_randn : kiln_rand;
        double flat[60], shaped[60], other[60], tiny[3], s0;
        TU_READ(fn(ctx, KILN_F32, TU_S(60), seed), flat, 60);
        TU_READ(fn(ctx, KILN_F32, TU_S(3, 4, 5), seed), shaped, 60);
        TU_READ(fn(ctx, KILN_F32, TU_S(2, 30), seed), other, 60);
        TU_READ(fn(ctx, KILN_F32, TU_S(3), seed), tiny, 3);
        TU_READ(fn(ctx, KILN_F32, 0, NULL, seed), &s0, 1);
        for (int i = 0; i < 60; i++) {
            cr_assert_eq(shaped[i], flat[i], "[%s] %s [3,4,5] element %d", tu_exec_name(),
                         op ? "randn" : "rand", i);
            cr_assert_eq(other[i], flat[i], "[%s] %s [2,30] element %d", tu_exec_name(),
                         op ? "randn" : "rand", i);
        }
        for (int i = 0; i < 3; i++)
            cr_assert_eq(tiny[i], flat[i]);
        cr_assert_eq(s0, flat[0], "[%s] 0-d %s is not element 0", tu_exec_name(),
                     op ? "randn" : "rand");
        /* the first 60 of a longer tensor, read through a view */
        kiln_tensor *big = fn(ctx, KILN_F32, TU_S(1000), seed);
        double pre[60];
        TU_READ(kiln_slice(big, 0, 0, 60, 1), pre, 60);
        for (int i = 0; i < 60; i++)
            cr_assert_eq(pre[i], flat[i]);
        /* and element i of a reversed view is element 999 - i */
        double all[1000], rev[1000];
        TU_READ(big, all, 1000);
        TU_READ(kiln_flip(big, 0, NULL), rev, 1000);
        for (int i = 0; i < 1000; i++)
            cr_assert_eq(rev[i], all[999 - i]);
    }
}

TU_TEST(rand, uniform_in_unit_interval_every_float_dtype) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    enum { N = 1 << 17 };
    double *v = malloc(N * sizeof(double));
    for (int k = 0; k < nf; k++) {
        kiln_tensor *t = kiln_rand(ctx, fl[k], TU_S(N), 1234 + (uint64_t)k);
        TU_READ(t, v, N);
        double sum = 0, sq = 0, lo = 1, hi = 0;
        int bins[10] = {0};
        for (int i = 0; i < N; i++) {
            cr_assert(v[i] >= 0 && v[i] < 1, "[%s] %s rand element %d is %.17g, outside [0, 1)",
                      tu_exec_name(), tu_dt_name(fl[k]), i, v[i]);
            sum += v[i];
            sq += v[i] * v[i];
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
            bins[(int)(v[i] * 10)]++;
        }
        double mean = sum / N, var = sq / N - mean * mean;
        cr_assert(fabs(mean - 0.5) < 0.005, "[%s] %s rand mean %g", tu_exec_name(),
                  tu_dt_name(fl[k]), mean);
        cr_assert(fabs(var - 1.0 / 12) < 0.003, "[%s] %s rand variance %g", tu_exec_name(),
                  tu_dt_name(fl[k]), var);
        cr_assert(lo < 0.001 && hi > 0.99, "[%s] %s rand range [%g, %g]", tu_exec_name(),
                  tu_dt_name(fl[k]), lo, hi);
        for (int b = 0; b < 10; b++)
            cr_assert(fabs(bins[b] - N / 10.0) < 0.01 * N, "[%s] %s rand bin %d holds %d of %d",
                      tu_exec_name(), tu_dt_name(fl[k]), b, bins[b], N);
    }
    free(v);
}

TU_TEST(rand, normal_moments) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    enum { N = 1 << 17 };
    double *v = malloc(N * sizeof(double));
    for (int k = 0; k < nf; k++) {
        kiln_tensor *t = kiln_randn(ctx, fl[k], TU_S(N), 99 + (uint64_t)k);
        TU_READ(t, v, N);
        double m1 = 0, m2 = 0, m3 = 0, m4 = 0;
        int within1 = 0, within2 = 0;
        for (int i = 0; i < N; i++) {
            cr_assert(isfinite(v[i]), "[%s] %s randn element %d is %g", tu_exec_name(),
                      tu_dt_name(fl[k]), i, v[i]);
            m1 += v[i];
        }
        m1 /= N;
        for (int i = 0; i < N; i++) {
            double d = v[i] - m1;
            m2 += d * d;
            m3 += d * d * d;
            m4 += d * d * d * d;
            within1 += fabs(v[i]) < 1;
            within2 += fabs(v[i]) < 2;
        }
        m2 /= N;
        m3 /= N;
        m4 /= N;
        double skew = m3 / pow(m2, 1.5), kurt = m4 / (m2 * m2);
        /* standard errors at N = 2^17: mean 0.003, variance 0.004, skew 0.007, kurtosis 0.014 */
        cr_assert(fabs(m1) < 0.015, "[%s] %s randn mean %g", tu_exec_name(), tu_dt_name(fl[k]), m1);
        cr_assert(fabs(m2 - 1) < 0.03, "[%s] %s randn variance %g", tu_exec_name(),
                  tu_dt_name(fl[k]), m2);
        cr_assert(fabs(skew) < 0.05, "[%s] %s randn skewness %g", tu_exec_name(), tu_dt_name(fl[k]),
                  skew);
        cr_assert(fabs(kurt - 3) < 0.1, "[%s] %s randn kurtosis %g", tu_exec_name(),
                  tu_dt_name(fl[k]), kurt);
        cr_assert(fabs((double)within1 / N - 0.6827) < 0.01, "[%s] %s randn P(|x|<1) = %g",
                  tu_exec_name(), tu_dt_name(fl[k]), (double)within1 / N);
        cr_assert(fabs((double)within2 / N - 0.9545) < 0.005, "[%s] %s randn P(|x|<2) = %g",
                  tu_exec_name(), tu_dt_name(fl[k]), (double)within2 / N);
    }
    free(v);
}

TU_TEST(rand, neighbours_are_independent) {
    /* lag-1 correlation of both generators, and of randn's Box-Muller pairs */
    enum { N = 1 << 16 };
    double *v = malloc(N * sizeof(double));
    for (int op = 0; op < 2; op++) {
        kiln_tensor *t =
            op ? kiln_randn(ctx, KILN_F64, TU_S(N), 5) : kiln_rand(ctx, KILN_F64, TU_S(N), 5);
        TU_READ(t, v, N);
        double m = 0;
        for (int i = 0; i < N; i++)
            m += v[i];
        m /= N;
        for (int lag = 1; lag <= 4; lag++) {
            double c = 0, s = 0;
            for (int i = 0; i + lag < N; i++)
                c += (v[i] - m) * (v[i + lag] - m);
            for (int i = 0; i < N; i++)
                s += (v[i] - m) * (v[i] - m);
            cr_assert(fabs(c / s) < 0.02, "[%s] %s lag-%d correlation %g", tu_exec_name(),
                      op ? "randn" : "rand", lag, c / s);
        }
    }
    free(v);
}

TU_TEST(rand, used_in_computation) {
    /* a rand fused into a kernel gives the same numbers as rand alone */
    kiln_tensor *r = kiln_rand(ctx, KILN_F64, TU_S(8, 16), 42);
    kiln_tensor *y =
        kiln_add_scalar(kiln_mul_scalar(kiln_rand(ctx, KILN_F64, TU_S(8, 16), 42), 2), 1);
    kiln_tensor *s = kiln_sum(kiln_randn(ctx, KILN_F32, TU_S(8, 16), 43), TU_AXES(1), false);
    double vr[128], vy[128], vn[128], vs[8];
    TU_READ(r, vr, 128);
    TU_READ(y, vy, 128);
    for (int i = 0; i < 128; i++)
        cr_assert_eq(vy[i], vr[i] * 2 + 1);
    TU_READ(kiln_randn(ctx, KILN_F32, TU_S(8, 16), 43), vn, 128);
    for (int i = 0; i < 8; i++) {
        vs[i] = 0;
        for (int j = 0; j < 16; j++)
            vs[i] += vn[i * 16 + j];
    }
    TU_EXPECT(s, KILN_F32, vs, 8);
    /* empty */
    kiln_tensor *e = kiln_rand(ctx, KILN_F32, TU_S(0, 4), 1);
    TU_ASSERT_SHAPE(e, 0, 4);
    cr_assert_eq(kiln_realize(e), KILN_OK);
}

/* Seeds are bound inputs, not structure: a step that draws with a new seed
 * each time (dropout's mask, a noise term) compiles once, and its numbers
 * still equal the reference evaluator's byte for byte, seeds past 2^63
 * included (their high word is negative as an i64). */
TU_TEST(rand, a_new_seed_each_step_compiles_nothing) {
    float x[64];
    for (int i = 0; i < 64; i++)
        x[i] = 0.1f * (float)i - 3;
    kiln_tensor *tx = kiln_from_data(ctx, KILN_F32, 1, TU_DIMS(64), x);
    int64_t hits_after_first = 0;
    for (int step = 0; step < 4; step++) {
        uint64_t s1 = 1000 + (uint64_t)step, s2 = UINT64_MAX - 77 * (uint64_t)step;
        kiln_tensor *y = kiln_add(kiln_dropout(tx, 0.5, s1, true),
                                  kiln_randn(ctx, KILN_F32, TU_S(64), s2));
        float got[64], want[64];
        cr_assert_eq(kiln_to_host(y, got, sizeof got), KILN_OK, "%s", kiln_error_message(y));
        kiln_release(y);
        kiln_ctx *ref = kiln_ctx_new(KILN_REF);
        kiln_tensor *rx = kiln_from_data(ref, KILN_F32, 1, TU_DIMS(64), x);
        kiln_tensor *ry = kiln_add(kiln_dropout(rx, 0.5, s1, true),
                                   kiln_randn(ref, KILN_F32, TU_S(64), s2));
        cr_assert_eq(kiln_to_host(ry, want, sizeof want), KILN_OK);
        kiln_ctx_free(ref);
        cr_assert(memcmp(got, want, sizeof got) == 0, "[%s] step %d differs from the reference",
                  tu_exec_name(), step);
        /* every step after the first reuses the first's program (a disk hit
         * would not show in compiles: count the graph cache's hits) */
        kiln_stats st = kiln_ctx_stats(ctx);
        if (step == 0)
            hits_after_first = st.graph_hits;
        else if (tu_cur_exec()->mode == KILN_LAZY && tu_cur_exec()->dev == KILN_CPU)
            cr_assert_eq(st.graph_hits, hits_after_first + step,
                         "[%s] step %d built a program again for its new seeds", tu_exec_name(),
                         step);
    }
}
