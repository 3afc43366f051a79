/* philox.c — the Philox4x32-10 counter-based generator (Random123) and the
 * mapping from its output words to the elements of kiln_rand and kiln_randn.
 * Every executor must reproduce graph_rand_value bit for bit, so the mapping
 * is spelled out here exactly:
 *   counter {index lo, index hi, 0, 0}, key {seed lo, seed hi}, words w0..w3;
 *   rand:  f32 (w0 >> 8) * 2^-24, f16 (w0 >> 21) * 2^-11, bf16 (w0 >> 24) * 2^-8,
 *          f64 ((w0 << 21) | (w1 >> 11)) * 2^-53 — as many bits as the dtype's
 *          significand, so that the value is exact and never rounds up to 1;
 *   randn: Box-Muller on u1 in (0, 1] and u2 in [0, 1), in double,
 *          sqrt(-2 ln u1) * cos(2 pi u2), then rounded to the dtype; u1 is
 *          (w0 + 1) * 2^-32 and u2 is w2 * 2^-32, except for f64, where
 *          u1 = (((w0 << 21) | (w1 >> 11)) + 1) * 2^-53 and
 *          u2 = ((w2 << 21) | (w3 >> 11)) * 2^-53 reach further into the tails. */
#include <math.h>

#include "graph/graph.h"

#define PHILOX_M0 UINT32_C(0xD2511F53)
#define PHILOX_M1 UINT32_C(0xCD9E8D57)
#define PHILOX_W0 UINT32_C(0x9E3779B9)
#define PHILOX_W1 UINT32_C(0xBB67AE85)

#define TWO_PI 6.28318530717958647692

void graph_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

static uint64_t bits53(uint32_t hi, uint32_t lo)
{
    return (uint64_t)hi << 21 | lo >> 11;
}

double graph_rand_value(graph_op op, kiln_dtype dt, uint64_t seed, uint64_t index)
{
    const uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    graph_philox4x32_10(ctr, key, w);

    if (op == GRAPH_RAND) {
        switch (dt) {
        case KILN_F64:
            return ldexp((double)bits53(w[0], w[1]), -53);
        case KILN_F16:
            return ldexp((double)(w[0] >> 21), -11);
        case KILN_BF16:
            return ldexp((double)(w[0] >> 24), -8);
        default:
            return ldexp((double)(w[0] >> 8), -24);
        }
    }

    double u1, u2;
    if (dt == KILN_F64) {
        u1 = ldexp((double)bits53(w[0], w[1]) + 1.0, -53);
        u2 = ldexp((double)bits53(w[2], w[3]), -53);
    } else {
        u1 = ldexp((double)w[0] + 1.0, -32);
        u2 = ldexp((double)w[2], -32);
    }
    double z = sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
    return graph_scalar_to_double(graph_scalar_from_double(z, dt), dt);
}
