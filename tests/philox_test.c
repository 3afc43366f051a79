/* philox_test.c — graph/philox.c: Philox4x32-10 against the Random123
 * known-answer vectors, the exact mapping from Philox words to kiln_rand and
 * kiln_randn elements, and the statistics of the resulting numbers. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "graph/graph.h"

static void check_kat(const uint32_t ctr[4], const uint32_t key[2], const uint32_t want[4])
{
    uint32_t out[4];
    graph_philox4x32_10(ctr, key, out);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], want[i], "word %d: 0x%08x, want 0x%08x", i, out[i], want[i]);
}

/* Random123's kat_vectors for philox4x32 with 10 rounds. */
Test(philox, known_answer_zeros)
{
    const uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0, 0};
    const uint32_t want[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    check_kat(ctr, key, want);
}

Test(philox, known_answer_ones)
{
    const uint32_t ctr[4] = {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff};
    const uint32_t key[2] = {0xffffffff, 0xffffffff};
    const uint32_t want[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
    check_kat(ctr, key, want);
}

Test(philox, known_answer_pi_digits)
{
    const uint32_t ctr[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
    const uint32_t key[2] = {0xa4093822, 0x299f31d0};
    const uint32_t want[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
    check_kat(ctr, key, want);
}

static void words(uint64_t seed, uint64_t index, uint32_t w[4])
{
    const uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    graph_philox4x32_10(ctr, key, w);
}

/* The mapping every executor has to reproduce, written out independently. */
Test(philox, rand_uses_the_documented_bits)
{
    const uint64_t seeds[] = {0, 1, 0x123456789abcdef0ULL, UINT64_MAX};
    const uint64_t indices[] = {0, 1, 77, 0xffffffffULL, 0x100000005ULL, UINT64_MAX};
    for (size_t s = 0; s < 4; s++) {
        for (size_t k = 0; k < 6; k++) {
            uint64_t seed = seeds[s], idx = indices[k];
            uint32_t w[4];
            words(seed, idx, w);
            cr_assert_eq(graph_rand_value(GRAPH_RAND, KILN_F32, seed, idx),
                         (double)(w[0] >> 8) / 16777216.0);
            cr_assert_eq(graph_rand_value(GRAPH_RAND, KILN_F16, seed, idx),
                         (double)(w[0] >> 21) / 2048.0);
            cr_assert_eq(graph_rand_value(GRAPH_RAND, KILN_BF16, seed, idx),
                         (double)(w[0] >> 24) / 256.0);
            uint64_t m53 = (uint64_t)w[0] << 21 | w[1] >> 11;
            cr_assert_eq(graph_rand_value(GRAPH_RAND, KILN_F64, seed, idx), ldexp((double)m53, -53));

            double u1 = ((double)w[0] + 1.0) / 4294967296.0, u2 = (double)w[2] / 4294967296.0;
            double z = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
            cr_assert_eq(graph_rand_value(GRAPH_RANDN, KILN_F32, seed, idx), (double)(float)z);
            cr_assert_eq(graph_rand_value(GRAPH_RANDN, KILN_F16, seed, idx), graph_round_f16(z));
            cr_assert_eq(graph_rand_value(GRAPH_RANDN, KILN_BF16, seed, idx), graph_round_bf16(z));
            double v1 = ldexp((double)m53 + 1.0, -53);
            double v2 = ldexp((double)((uint64_t)w[2] << 21 | w[3] >> 11), -53);
            double z64 = sqrt(-2.0 * log(v1)) * cos(2.0 * 3.14159265358979323846 * v2);
            cr_assert_eq(graph_rand_value(GRAPH_RANDN, KILN_F64, seed, idx), z64);
        }
    }
}

Test(philox, deterministic_and_seed_dependent)
{
    int same_seed_differs = 0, other_seed_differs = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        double a = graph_rand_value(GRAPH_RAND, KILN_F32, 42, i);
        cr_assert_eq(a, graph_rand_value(GRAPH_RAND, KILN_F32, 42, i));
        cr_assert_eq(graph_rand_value(GRAPH_RANDN, KILN_F64, 42, i),
                     graph_rand_value(GRAPH_RANDN, KILN_F64, 42, i));
        same_seed_differs += a != graph_rand_value(GRAPH_RAND, KILN_F32, 42, i + 1);
        other_seed_differs += a != graph_rand_value(GRAPH_RAND, KILN_F32, 43, i);
    }
    cr_assert_gt(same_seed_differs, 990);
    cr_assert_gt(other_seed_differs, 990);
    /* the high half of the seed and of the index matter too */
    cr_assert_neq(graph_rand_value(GRAPH_RAND, KILN_F64, 1, 5),
                  graph_rand_value(GRAPH_RAND, KILN_F64, 1 | 1ULL << 40, 5));
    cr_assert_neq(graph_rand_value(GRAPH_RAND, KILN_F64, 1, 5),
                  graph_rand_value(GRAPH_RAND, KILN_F64, 1, 5 | 1ULL << 40));
}

#define SAMPLES 100000

static void moments(graph_op op, kiln_dtype dt, uint64_t seed, double *mean, double *var,
                    double *lo, double *hi)
{
    double sum = 0.0, sq = 0.0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (uint64_t i = 0; i < SAMPLES; i++) {
        double v = graph_rand_value(op, dt, seed, i);
        cr_assert(isfinite(v));
        sum += v;
        sq += v * v;
        *lo = fmin(*lo, v);
        *hi = fmax(*hi, v);
    }
    *mean = sum / SAMPLES;
    *var = sq / SAMPLES - *mean * *mean;
}

Test(philox, rand_is_uniform_in_unit_interval)
{
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int d = 0; d < 4; d++) {
        double mean, var, lo, hi;
        moments(GRAPH_RAND, dts[d], 1234, &mean, &var, &lo, &hi);
        /* standard errors: 0.0009 for the mean, 0.0003 for the variance;
         * bf16's 8-bit grid lowers the mean by half a step (2^-9) */
        cr_assert_float_eq(mean, 0.5, 0.006, "dtype %d mean %g", d, mean);
        cr_assert_float_eq(var, 1.0 / 12.0, 0.003, "dtype %d variance %g", d, var);
        cr_assert_geq(lo, 0.0);
        cr_assert_lt(hi, 1.0);
        cr_assert_lt(lo, 0.01);
        cr_assert_gt(hi, 0.99);
    }
}

Test(philox, rand_values_lie_on_the_dtype_grid)
{
    for (uint64_t i = 0; i < 10000; i++) {
        double h = graph_rand_value(GRAPH_RAND, KILN_F16, 9, i);
        cr_assert_eq(h * 2048.0, floor(h * 2048.0));
        cr_assert_eq(graph_round_f16(h), h);
        double b = graph_rand_value(GRAPH_RAND, KILN_BF16, 9, i);
        cr_assert_eq(b * 256.0, floor(b * 256.0));
        cr_assert_eq(graph_round_bf16(b), b);
        double f = graph_rand_value(GRAPH_RAND, KILN_F32, 9, i);
        cr_assert_eq((double)(float)f, f);
    }
}

Test(philox, randn_is_standard_normal)
{
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int d = 0; d < 4; d++) {
        double mean, var, lo, hi;
        moments(GRAPH_RANDN, dts[d], 99, &mean, &var, &lo, &hi);
        /* standard errors: 0.0032 for the mean, 0.0045 for the variance */
        cr_assert_float_eq(mean, 0.0, 0.02, "dtype %d mean %g", d, mean);
        cr_assert_float_eq(var, 1.0, 0.03, "dtype %d variance %g", d, var);
        cr_assert_lt(lo, -3.5);
        cr_assert_gt(hi, 3.5);
    }
    /* about 68.3% within one standard deviation */
    int inside = 0;
    for (uint64_t i = 0; i < SAMPLES; i++)
        inside += fabs(graph_rand_value(GRAPH_RANDN, KILN_F32, 5, i)) < 1.0;
    cr_assert_float_eq((double)inside / SAMPLES, 0.6827, 0.006);
}

Test(philox, randn_values_are_rounded_to_the_dtype)
{
    for (uint64_t i = 0; i < 10000; i++) {
        double h = graph_rand_value(GRAPH_RANDN, KILN_F16, 3, i);
        cr_assert_eq(graph_round_f16(h), h);
        double b = graph_rand_value(GRAPH_RANDN, KILN_BF16, 3, i);
        cr_assert_eq(graph_round_bf16(b), b);
        double f = graph_rand_value(GRAPH_RANDN, KILN_F32, 3, i);
        cr_assert_eq((double)(float)f, f);
    }
}
