/* rules_rand.c — kiln_rand and kiln_randn's values as primitives: Philox4x32-10
 * of (index, seed) and graph/philox.c's mapping of its words to elements,
 * step for step, so that every executor gives graph_rand_value's bits
 * (0 ulp: tests/rand_test.c and tests/philox_test.c compare bytes). The
 * 32-bit words live in int64 values below 2^32: a product of two of them is
 * the wrapped 64-bit one, whose high word is a logical shift. A constant seed's
 * key schedule folds into immediates; a bound one (kiln_rand's, a 0-d input)
 * is computed in the kernel. */
#include "lower/rules.h"

#define PHILOX_M0 UINT32_C(0xD2511F53)
#define PHILOX_M1 UINT32_C(0xCD9E8D57)
#define PHILOX_W0 UINT32_C(0x9E3779B9)
#define PHILOX_W1 UINT32_C(0xBB67AE85)
#define TWO_PI 6.28318530717958647692

static int lo32(ir_builder *b, int x) {
    return rules_p2(b, PRIM_AND, KILN_I64, x, rules_i(b, KILN_I64, 0xFFFFFFFF));
}

static int hi32(ir_builder *b, int x) {
    return rules_p2(b, PRIM_SHR, KILN_I64, x, rules_i(b, KILN_I64, 32));
}

/* Philox4x32-10 of the counter idx under the round keys k0[r], k1[r]
 * (instructions). */
static void philox_rounds(ir_builder *b, int idx, const int *k0, const int *k1, int w[4]) {
    int c0 = lo32(b, idx), c1 = hi32(b, idx), c2 = rules_i(b, KILN_I64, 0), c3 = c2;
    for (int round = 0; round < 10; round++) {
        int p0 = rules_p2(b, PRIM_MUL, KILN_I64, c0, rules_i(b, KILN_I64, PHILOX_M0));
        int p1 = rules_p2(b, PRIM_MUL, KILN_I64, c2, rules_i(b, KILN_I64, PHILOX_M1));
        int n0 = rules_p2(b, PRIM_XOR, KILN_I64, rules_p2(b, PRIM_XOR, KILN_I64, hi32(b, p1), c1),
                          k0[round]);
        int n2 = rules_p2(b, PRIM_XOR, KILN_I64, rules_p2(b, PRIM_XOR, KILN_I64, hi32(b, p0), c3),
                          k1[round]);
        c0 = n0;
        c1 = lo32(b, p1);
        c2 = n2;
        c3 = lo32(b, p0);
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
}

/* A constant seed: the key schedule folds into immediates. */
static void philox(ir_builder *b, int idx, uint64_t seed, int w[4]) {
    int k0[10], k1[10];
    uint32_t a = (uint32_t)seed, c = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++, a += PHILOX_W0, c += PHILOX_W1) {
        k0[r] = rules_i(b, KILN_I64, a);
        k1[r] = rules_i(b, KILN_I64, c);
    }
    philox_rounds(b, idx, k0, k1, w);
}

/* A bound seed (an i64 value): round r's key words are the seed's halves
 * plus r times the Weyl constants, wrapped to 32 bits, computed in the
 * kernel (20 adds and masks more per element than a constant seed). */
static void philox_keyed(ir_builder *b, int idx, int seed, int w[4]) {
    int k0[10], k1[10];
    int a = lo32(b, seed), c = hi32(b, seed); /* a logical shift: below 2^32 */
    for (int r = 0; r < 10; r++) {
        k0[r] = r ? lo32(b, rules_p2(b, PRIM_ADD, KILN_I64, a,
                                     rules_i(b, KILN_I64, (int64_t)r * PHILOX_W0)))
                  : a;
        k1[r] = r ? lo32(b, rules_p2(b, PRIM_ADD, KILN_I64, c,
                                     rules_i(b, KILN_I64, (int64_t)r * PHILOX_W1)))
                  : c;
    }
    philox_rounds(b, idx, k0, k1, w);
}

/* (hi << 21 | lo >> 11): 53 bits of two words. */
static int bits53(ir_builder *b, int hi, int lo) {
    return rules_p2(b, PRIM_OR, KILN_I64, rules_p2(b, PRIM_SHL, KILN_I64, hi, rules_i(b, KILN_I64, 21)),
                    rules_p2(b, PRIM_SHR, KILN_I64, lo, rules_i(b, KILN_I64, 11)));
}

/* An integer below 2^53 times 2^e, in f64 (exact). */
static int scaled(ir_builder *b, int x, double scale) {
    return rules_p2(b, PRIM_MUL, KILN_F64, rules_p1(b, PRIM_CAST, KILN_F64, x),
                    rules_f(b, KILN_F64, scale));
}

static int rand_of(ir_builder *b, graph_op op, kiln_dtype dt, const int w[4]);

int rules_rand(ir_builder *b, graph_op op, kiln_dtype dt, int idx, uint64_t seed) {
    int w[4];
    philox(b, idx, seed, w);
    return rand_of(b, op, dt, w);
}

int rules_rand_keyed(ir_builder *b, graph_op op, kiln_dtype dt, int idx, int seed) {
    int w[4];
    philox_keyed(b, idx, seed, w);
    return rand_of(b, op, dt, w);
}

/* graph/philox.c's mapping of the four words to an element of dt. */
static int rand_of(ir_builder *b, graph_op op, kiln_dtype dt, const int w[4]) {
    if (op == GRAPH_RAND) {
        /* as many bits as the significand: exact in dt, never 1 */
        if (dt == KILN_F64)
            return scaled(b, bits53(b, w[0], w[1]), 0x1p-53);
        int sh = dt == KILN_F16 ? 21 : dt == KILN_BF16 ? 24 : 8;
        double scale = dt == KILN_F16 ? 0x1p-11 : dt == KILN_BF16 ? 0x1p-8 : 0x1p-24;
        int v = scaled(b, rules_p2(b, PRIM_SHR, KILN_I64, w[0], rules_i(b, KILN_I64, sh)), scale);
        return rules_cast(b, KILN_F64, graph_dtype_is_float(dt) ? rules_ctype(dt) : dt, v);
    }
    int one = rules_f(b, KILN_F64, 1.0), u1, u2;
    if (dt == KILN_F64) {
        u1 = rules_p2(b, PRIM_MUL, KILN_F64,
                      rules_p2(b, PRIM_ADD, KILN_F64, rules_p1(b, PRIM_CAST, KILN_F64, bits53(b, w[0], w[1])), one),
                      rules_f(b, KILN_F64, 0x1p-53));
        u2 = scaled(b, bits53(b, w[2], w[3]), 0x1p-53);
    } else {
        u1 = rules_p2(b, PRIM_MUL, KILN_F64,
                      rules_p2(b, PRIM_ADD, KILN_F64, rules_p1(b, PRIM_CAST, KILN_F64, w[0]), one),
                      rules_f(b, KILN_F64, 0x1p-32));
        u2 = scaled(b, w[2], 0x1p-32);
    }
    int rad = rules_p1(b, PRIM_SQRT, KILN_F64,
                       rules_p2(b, PRIM_MUL, KILN_F64, rules_f(b, KILN_F64, -2.0),
                                rules_p1(b, PRIM_LOG, KILN_F64, u1)));
    int ang = rules_p2(b, PRIM_MUL, KILN_F64, rules_f(b, KILN_F64, TWO_PI), u2);
    int z = rules_p2(b, PRIM_MUL, KILN_F64, rad, rules_p1(b, PRIM_COS, KILN_F64, ang));
    return rules_cast(b, KILN_F64, dt, z);
}
