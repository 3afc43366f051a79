/* rules_rand.c — kiln_rand and kiln_randn's values as primitives: Philox4x32-10
 * of (index, seed) and graph/philox.c's mapping of its words to elements,
 * step for step, so that every executor gives graph_rand_value's bits
 * (0 ulp: tests/rand_test.c and tests/philox_test.c compare bytes). The
 * 32-bit words live in int64 values below 2^32: a product of two of them is
 * the wrapped 64-bit one, whose high word is a logical shift. The key is the
 * kernel's constant seed, so its schedule folds into immediates. */
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

static void philox(ir_builder *b, int idx, uint64_t seed, int w[4]) {
    int c0 = lo32(b, idx), c1 = hi32(b, idx), c2 = rules_i(b, KILN_I64, 0), c3 = c2;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        int p0 = rules_p2(b, PRIM_MUL, KILN_I64, c0, rules_i(b, KILN_I64, PHILOX_M0));
        int p1 = rules_p2(b, PRIM_MUL, KILN_I64, c2, rules_i(b, KILN_I64, PHILOX_M1));
        int n0 = rules_p2(b, PRIM_XOR, KILN_I64, rules_p2(b, PRIM_XOR, KILN_I64, hi32(b, p1), c1),
                          rules_i(b, KILN_I64, k0));
        int n2 = rules_p2(b, PRIM_XOR, KILN_I64, rules_p2(b, PRIM_XOR, KILN_I64, hi32(b, p0), c3),
                          rules_i(b, KILN_I64, k1));
        c0 = n0;
        c1 = lo32(b, p1);
        c2 = n2;
        c3 = lo32(b, p0);
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
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

int rules_rand(ir_builder *b, graph_op op, kiln_dtype dt, int idx, uint64_t seed) {
    int w[4];
    philox(b, idx, seed, w);
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
