/* Tests of kiln_cast on every pair of dtypes with values that sit on the
 * edges: NaN, infinities, signed zero, ties, f16 overflow, subnormals,
 * saturation of float to integer, and wrapping of integer to integer; and of
 * kiln_bitcast on every pair of equal size, compared bit for bit with
 * memcpy (every 16-bit pattern between f16 and bf16), fused with integer
 * ops, without a gradient, and its errors. */
#include "test_util.h"

static const double float_values[] = {
    NAN, INFINITY, -INFINITY, -0.5, 2.5, 300, -1, 65520, 0, -0.0, 3.5, -2.5, 0.5, 1.5, 1e10, -1e10,
    255.9, 256, 127.5, -128.7, 2147483647.0, 2147483648.0, -2147483649.0, 3e9, -3e9, 1e19, -1e19,
    9223372036854775808.0, -9223372036854775808.0, 0.1, 65504, 65519, 65519.99, 1.00390625,
    1.01171875, 1e-8, 6e-8, 2.98023223876953125e-8, 3e-8, 1e-5, 1e-40, 1e39, -1e39, 0.99999,
    -0.99999, 1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 + 0x1p-30, 16777217, 4294967301.0, -255.5,
    254.5, 0x1p-126, 0x1p-133, 3.4028235677973366e38,
};
#define NFLOAT (int64_t)(sizeof float_values / sizeof float_values[0])

static const int64_t int_values[] = {
    0, 1, -1, 2, 127, 128, 255, 256, 300, -129, 65520, 70000, 2147483647, 2147483648ll,
    -2147483649ll, (1ll << 53) + 1, INT64_MAX, INT64_MIN, 16777217, -300, 65504, 65505,
    4294967297ll, -128, -256, 44, 1ll << 62, -(1ll << 31),
};
#define NINT (int64_t)(sizeof int_values / sizeof int_values[0])

/* The values of int_values that dt holds. */
static int64_t int_values_for(kiln_dtype dt, int64_t *out) {
    int64_t n = 0;
    for (int64_t i = 0; i < NINT; i++)
        if (tu_wrap(dt, int_values[i]) == int_values[i])
            out[n++] = int_values[i];
    return n;
}

TU_TEST(cast, every_pair_from_floats) {
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    double src[NFLOAT], want[NFLOAT];
    int64_t want_i[NFLOAT];
    for (int s = 0; s < nf; s++) {
        kiln_dtype st = fl[s];
        for (int64_t i = 0; i < NFLOAT; i++)
            src[i] = tu_round(st, float_values[i]);
        kiln_tensor *x = tu_tensor(ctx, st, TU_S(NFLOAT), src);
        for (int d = 0; d < n; d++) {
            kiln_dtype dt = all[d];
            kiln_tensor *y = kiln_cast(x, dt);
            TU_ASSERT_SHAPE(y, NFLOAT);
            if (tu_is_float(dt)) {
                for (int64_t i = 0; i < NFLOAT; i++)
                    want[i] = tu_round_float(dt, src[i]);
                TU_EXPECT_EXACT(y, dt, want, NFLOAT);
                double got[NFLOAT];
                TU_READ(y, got, NFLOAT);
                for (int64_t i = 0; i < NFLOAT; i++)
                    cr_assert(isnan(want[i]) || signbit(got[i]) == signbit(want[i]),
                              "[%s] cast %s -> %s of %g lost the sign: %g", tu_exec_name(),
                              tu_dt_name(st), tu_dt_name(dt), src[i], got[i]);
            } else {
                for (int64_t i = 0; i < NFLOAT; i++)
                    want_i[i] = tu_float_to_int(src[i], dt);
                TU_EXPECT_I64(y, dt, want_i, NFLOAT);
            }
        }
    }
}

TU_TEST(cast, every_pair_from_integers) {
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    const kiln_dtype ints[] = {KILN_I32, KILN_I64, KILN_U8, KILN_BOOL};
    int64_t src[NINT], want_i[NINT];
    double want[NINT];
    for (int s = 0; s < 4; s++) {
        kiln_dtype st = ints[s];
        int64_t m = int_values_for(st, src);
        kiln_tensor *x = tu_tensor_i64(ctx, st, TU_S(m), src);
        for (int d = 0; d < n; d++) {
            kiln_dtype dt = all[d];
            kiln_tensor *y = kiln_cast(x, dt);
            TU_ASSERT_SHAPE(y, m);
            if (tu_is_float(dt)) {
                for (int64_t i = 0; i < m; i++)
                    want[i] =
                        dt == KILN_F32 ? (double)(float)src[i] : tu_round_float(dt, (double)src[i]);
                TU_EXPECT_EXACT(y, dt, want, m);
            } else {
                for (int64_t i = 0; i < m; i++)
                    want_i[i] = tu_wrap(dt, src[i]);
                TU_EXPECT_I64(y, dt, want_i, m);
            }
        }
    }
}

TU_TEST(cast, hand_examples) {
    kiln_tensor *f = tu_tensor(ctx, KILN_F32, TU_S(8),
                               (double[]){NAN, INFINITY, -0.5, 2.5, 300, -1, 65520, -1e10});
    TU_EXPECT_VALS(kiln_cast(f, KILN_U8), KILN_U8, 0, 255, 0, 2, 255, 0, 255, 0);
    TU_EXPECT_VALS(kiln_cast(f, KILN_I32), KILN_I32, 0, 2147483647.0, 0, 2, 300, -1, 65520,
                   -2147483648.0);
    TU_EXPECT_VALS(kiln_cast(f, KILN_BOOL), KILN_BOOL, 1, 1, 1, 1, 1, 1, 1, 1);
    TU_EXPECT_VALS(kiln_cast(f, KILN_F16), KILN_F16, NAN, INFINITY, -0.5, 2.5, 300, -1, INFINITY,
                   -INFINITY);
    TU_EXPECT_VALS(kiln_cast(f, KILN_BF16), KILN_BF16, NAN, INFINITY, -0.5, 2.5, 300, -1, 65536,
                   -9999220736.0);
    const int64_t sat[8] = {0, INT64_MAX, 0, 2, 300, -1, 65520, -10000000000ll};
    TU_EXPECT_I64(kiln_cast(f, KILN_I64), KILN_I64, sat, 8);

    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(5), (double[]){-1, 300, 256, 255, -129});
    TU_EXPECT_VALS(kiln_cast(i, KILN_U8), KILN_U8, 255, 44, 0, 255, 127);
    TU_EXPECT_VALS(kiln_cast(i, KILN_BOOL), KILN_BOOL, 1, 1, 1, 1, 1);
    const int64_t wide[3] = {4294967297ll, -2147483649ll, 1ll << 40};
    TU_EXPECT_VALS(kiln_cast(tu_tensor_i64(ctx, KILN_I64, TU_S(3), wide), KILN_I32), KILN_I32, 1,
                   2147483647.0, 0);

    /* ties go to even */
    kiln_tensor *t =
        tu_tensor(ctx, KILN_F32, TU_S(4), (double[]){1.00390625, 1.01171875, 2049, 2051});
    TU_EXPECT_VALS(kiln_cast(t, KILN_BF16), KILN_BF16, 1, 1.015625, 2048, 2048);
    TU_EXPECT_VALS(kiln_cast(t, KILN_F16), KILN_F16, 1.00390625, 1.01171875, 2048, 2052);
    /* f16 boundaries */
    kiln_tensor *h =
        tu_tensor(ctx, KILN_F64, TU_S(5), (double[]){65519, 65520, 65504, 0x1p-25, 3e-8});
    TU_EXPECT_VALS(kiln_cast(h, KILN_F16), KILN_F16, 65504, INFINITY, 65504, 0, 0x1p-24);
}

/* i8 by hand: floats saturate, integers wrap, arithmetic wraps at 8 bits
 * and promotes with u8 to i32, floor division and shifts are signed. */
TU_TEST(cast, i8_by_hand) {
    kiln_tensor *f = tu_tensor(ctx, KILN_F32, TU_S(7), (double[]){NAN, INFINITY, -0.5, 127.9, 128,
                                                                  -128.7, -1e10});
    TU_EXPECT_VALS(kiln_cast(f, KILN_I8), KILN_I8, 0, 127, 0, 127, 127, -128, -128);
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(5), (double[]){-1, 200, 256, 127, -129});
    kiln_tensor *b = kiln_cast(i, KILN_I8);
    TU_EXPECT_VALS(b, KILN_I8, -1, -56, 0, 127, 127);
    TU_EXPECT_VALS(kiln_cast(b, KILN_U8), KILN_U8, 255, 200, 0, 127, 127);
    TU_EXPECT_VALS(kiln_cast(b, KILN_F32), KILN_F32, -1, -56, 0, 127, 127);
    TU_EXPECT_VALS(kiln_full(ctx, KILN_I8, 1, TU_DIMS(2), 200), KILN_I8, -56, -56);

    kiln_tensor *x = tu_tensor(ctx, KILN_I8, TU_S(6), (double[]){100, -100, -7, 7, -128, 5});
    kiln_tensor *y = tu_tensor(ctx, KILN_I8, TU_S(6), (double[]){100, -100, 2, -2, -1, 0});
    TU_EXPECT_VALS(kiln_add(x, y), KILN_I8, -56, 56, -5, 5, 127, 5);
    TU_EXPECT_VALS(kiln_mul(x, y), KILN_I8, 16, 16, -14, -14, -128, 0);
    TU_EXPECT_VALS(kiln_div(x, y), KILN_I8, 1, 1, -4, -4, -128, 0);
    TU_EXPECT_VALS(kiln_mod(x, y), KILN_I8, 0, 0, 1, -1, 0, 0);
    TU_EXPECT_VALS(kiln_neg(x), KILN_I8, -100, 100, 7, -7, -128, -5);
    TU_EXPECT_VALS(kiln_abs(x), KILN_I8, 100, 100, 7, 7, -128, 5);
    TU_EXPECT_VALS(kiln_shift_right(x, kiln_full(ctx, KILN_I8, 0, NULL, 1)), KILN_I8, 50, -50, -4, 3, -64,
                   2);
    TU_EXPECT_VALS(kiln_lt(x, y), KILN_BOOL, 0, 0, 1, 0, 1, 0);
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(6), (double[]){200, 0, 1, 2, 255, 3});
    kiln_tensor *s = kiln_add(x, u);
    TU_EXPECT_VALS(s, KILN_I32, 300, -100, -6, 9, 127, 8);
    TU_EXPECT_VALS(kiln_sum(x, 0, NULL, false), KILN_I64, -123); /* sums of integers are i64 */
}

TU_TEST(cast, no_double_rounding) {
    /* Rounding f64 to a half type through f32 first gives the wrong answer
     * for these: each lies just above a half-type tie. */
    kiln_tensor *x =
        tu_tensor(ctx, KILN_F64, TU_S(3),
                  (double[]){1.0 + 0x1p-11 + 0x1p-40, 65519.999, 1.0 + 0x1p-8 + 0x1p-30});
    TU_EXPECT_VALS(kiln_cast(kiln_slice(x, 0, 0, 2, 1), KILN_F16), KILN_F16, 1.0 + 0x1p-10, 65504);
    TU_EXPECT_VALS(kiln_cast(kiln_slice(x, 0, 2, 3, 1), KILN_BF16), KILN_BF16, 1.0 + 0x1p-7);
}

TU_TEST(cast, same_dtype_and_chains) {
    TU_RNG(r);
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        double v[12];
        kiln_tensor *x = tu_rand_tensor(ctx, &r, all[k], TU_S(3, 4), -100, 100, v);
        TU_EXPECT_EXACT(kiln_cast(x, all[k]), all[k], v, 12);
    }
    /* f32 -> f16 -> f32 rounds to f16 */
    double v[32], w[32];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(32), -3, 3, v);
    for (int i = 0; i < 32; i++)
        w[i] = tu_round(KILN_F16, v[i]);
    TU_EXPECT_EXACT(kiln_cast(kiln_cast(x, KILN_F16), KILN_F32), KILN_F32, w, 32);
    for (int i = 0; i < 32; i++)
        w[i] = tu_round(KILN_BF16, v[i]);
    TU_EXPECT_EXACT(kiln_cast(kiln_cast(x, KILN_BF16), KILN_F64), KILN_F64, w, 32);
    /* and through an integer truncates */
    for (int i = 0; i < 32; i++)
        w[i] = trunc(v[i]);
    TU_EXPECT_EXACT(kiln_cast(kiln_cast(x, KILN_I32), KILN_F32), KILN_F32, w, 32);
    /* bool of a cast: 0.3 is nonzero in f32 but 0 as an integer */
    kiln_tensor *b = tu_tensor(ctx, KILN_F32, TU_S(2), (double[]){0.3, -1.7});
    TU_EXPECT_VALS(kiln_cast(b, KILN_BOOL), KILN_BOOL, 1, 1);
    TU_EXPECT_VALS(kiln_cast(kiln_cast(b, KILN_I64), KILN_BOOL), KILN_BOOL, 0, 1);
}

TU_TEST(cast, views_and_compute) {
    TU_RNG(r);
    double v[4 * 5];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(4, 5), -300, 300, v);
    kiln_tensor *y = kiln_cast(kiln_transpose(x, 0, 1), KILN_U8);
    TU_ASSERT_SHAPE(y, 5, 4);
    int64_t w[20];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            w[i * 4 + j] = tu_float_to_int(v[j * 5 + i], KILN_U8);
    TU_EXPECT_I64(y, KILN_U8, w, 20);
    /* integer arithmetic after a cast wraps in the new dtype */
    kiln_tensor *z = kiln_add_scalar(y, 200);
    for (int i = 0; i < 20; i++)
        w[i] = (w[i] + 200) & 255;
    TU_EXPECT_I64(z, KILN_U8, w, 20);
    /* empty and 0-d */
    TU_ASSERT_SHAPE(kiln_cast(kiln_zeros(ctx, KILN_F32, TU_S(0, 2)), KILN_I64), 0, 2);
    kiln_tensor *s = kiln_cast(kiln_scalar(ctx, KILN_F64, -7.9), KILN_I32);
    TU_ASSERT_SCALAR_SHAPE(s);
    cr_assert_eq(TU_ITEM(s), -7);
}

TU_TEST(cast, bad_dtype) {
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2));
    TU_ASSERT_ERROR2(kiln_cast(x, (kiln_dtype)99), KILN_ERR_DTYPE, KILN_ERR_ARG);
    TU_ASSERT_ERROR2(kiln_cast(x, (kiln_dtype)-1), KILN_ERR_DTYPE, KILN_ERR_ARG);
}

/* ---- kiln_bitcast: the bits of each element, read as another dtype ---- */

/* Realizes t and compares its bytes with exp's. */
#define EXPECT_BYTES(t, exp, nbytes)                                                               \
    do {                                                                                           \
        unsigned char got_[4096];                                                                  \
        cr_assert_leq((size_t)(nbytes), sizeof got_);                                              \
        cr_assert_eq(kiln_to_host((t), got_, (size_t)(nbytes)), KILN_OK, "%s",                     \
                     kiln_error_message(t));                                                       \
        for (size_t i_ = 0; i_ < (size_t)(nbytes); i_++)                                           \
            cr_assert_eq(got_[i_], ((const unsigned char *)(exp))[i_],                            \
                         "line %d: byte %zu is %#x, expected %#x", __LINE__, i_, got_[i_],         \
                         ((const unsigned char *)(exp))[i_]);                                      \
    } while (0)

/* A random 32-bit pattern as f32 bits; a NaN is made quiet, since a
 * signalling one may be quieted on the way through double (the reference
 * evaluator) and so compares by its bits on no executor. */
static uint32_t quiet32(uint32_t u) {
    return ((u >> 23) & 255) == 255 && (u & 0x7fffff) ? u | 0x400000 : u;
}
static uint64_t quiet64(uint64_t u) {
    return ((u >> 52) & 2047) == 2047 && (u & 0xfffffffffffffull) ? u | (1ull << 51) : u;
}

TU_TEST(bitcast, f32_i32_both_ways) {
    TU_RNG(r);
    enum { N = 256 };
    uint32_t bits[N];
    float f[N];
    for (int i = 0; i < N; i++)
        bits[i] = quiet32((uint32_t)tu_next(&r));
    /* the edges among them: zeros, infinities, a NaN, subnormals, one */
    const uint32_t edges[] = {0, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 1,
                              0x807fffffu, 0x3f800000u};
    memcpy(bits, edges, sizeof edges);
    memcpy(f, bits, sizeof f);
    kiln_tensor *ti = kiln_from_data(ctx, KILN_I32, TU_S(16, 16), bits);
    kiln_tensor *tf = kiln_from_data(ctx, KILN_F32, TU_S(16, 16), f);
    kiln_tensor *a = kiln_bitcast(ti, KILN_F32);
    cr_assert_eq(kiln_dtype_of(a), KILN_F32);
    TU_ASSERT_SHAPE(a, 16, 16);
    EXPECT_BYTES(a, f, sizeof f);
    EXPECT_BYTES(kiln_bitcast(tf, KILN_I32), bits, sizeof bits);
    /* through a view, and back: the identity */
    kiln_tensor *t = kiln_bitcast(kiln_bitcast(kiln_transpose(tf, 0, 1), KILN_I32), KILN_F32);
    float ft[N];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            ft[i * 16 + j] = f[j * 16 + i];
    EXPECT_BYTES(t, ft, sizeof ft);
}

TU_TEST(bitcast, f64_i64_and_bytes) {
    TU_RNG(r);
    enum { N = 128 };
    uint64_t bits[N];
    double d[N];
    for (int i = 0; i < N; i++)
        bits[i] = quiet64(tu_next(&r));
    bits[0] = 0x8000000000000000ull;
    bits[1] = 0x7ff0000000000000ull;
    bits[2] = 1; /* the smallest subnormal */
    bits[3] = 0x3ff0000000000000ull;
    memcpy(d, bits, sizeof d);
    EXPECT_BYTES(kiln_bitcast(kiln_from_data(ctx, KILN_I64, TU_S(N), bits), KILN_F64), d, sizeof d);
    EXPECT_BYTES(kiln_bitcast(kiln_from_data(ctx, KILN_F64, TU_S(N), d), KILN_I64), bits,
                 sizeof bits);
    /* every byte: u8 <-> i8 */
    uint8_t u[256];
    for (int i = 0; i < 256; i++)
        u[i] = (uint8_t)i;
    kiln_tensor *tu = kiln_from_data(ctx, KILN_U8, TU_S(256), u);
    kiln_tensor *ti = kiln_bitcast(tu, KILN_I8);
    cr_assert_eq(kiln_dtype_of(ti), KILN_I8);
    EXPECT_BYTES(ti, u, sizeof u);
    EXPECT_BYTES(kiln_bitcast(ti, KILN_U8), u, sizeof u);
    int64_t w[4] = {-1, -128, 127, 0};
    TU_EXPECT_I64(kiln_slice(kiln_bitcast(tu, KILN_I8), 0, 252, 256, 1), KILN_I8,
                  ((const int64_t[]){-4, -3, -2, -1}), 4);
    TU_EXPECT_I64(kiln_bitcast(tu_tensor_i64(ctx, KILN_U8, TU_S(4), (const int64_t[]){255, 128,
                                                                                       127, 0}),
                               KILN_I8),
                  KILN_I8, w, 4);
}

TU_TEST(bitcast, f16_bf16_every_pattern) {
    /* every 16-bit pattern that is a number as both f16 and bf16 (NaN
     * payloads are not kept by the reference evaluator) */
    static uint16_t h[65536];
    int64_t n = 0;
    for (uint32_t p = 0; p < 65536; p++) {
        bool nan16 = ((p >> 10) & 31) == 31 && (p & 1023);
        bool nanb = ((p >> 7) & 255) == 255 && (p & 127);
        if (!nan16 && !nanb)
            h[n++] = (uint16_t)p;
    }
    for (int64_t at = 0; at < n; at += 2048) {
        int64_t len = n - at < 2048 ? n - at : 2048;
        kiln_tensor *f = kiln_from_data(ctx, KILN_F16, TU_S(len), h + at);
        kiln_tensor *b = kiln_from_data(ctx, KILN_BF16, TU_S(len), h + at);
        kiln_tensor *fb = kiln_bitcast(f, KILN_BF16), *bf = kiln_bitcast(b, KILN_F16);
        cr_assert_eq(kiln_dtype_of(fb), KILN_BF16);
        EXPECT_BYTES(fb, h + at, (size_t)len * 2);
        EXPECT_BYTES(bf, h + at, (size_t)len * 2);
        kiln_release(f);
        kiln_release(b);
        kiln_release(fb);
        kiln_release(bf);
    }
    /* by hand: 1.0 in f16 is 0x3c00, which as bf16 is 0.0078125 (2^-7) */
    kiln_tensor *one = kiln_cast(kiln_full(ctx, KILN_F32, TU_S(3), 1.0), KILN_F16);
    TU_EXPECT_VALS(kiln_bitcast(one, KILN_BF16), KILN_BF16, 0x1p-7, 0x1p-7, 0x1p-7);
}

TU_TEST(bitcast, fuses_with_arithmetic) {
    TU_RNG(r);
    double v[6 * 7];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(6, 7), -1000, 1000, v);
    /* clearing the sign bit is abs; the exponent field is floor(log2|x|) + 127 */
    kiln_tensor *bits = kiln_bitcast(kiln_mul_scalar(x, 2), KILN_I32);
    kiln_tensor *a = kiln_bitcast(kiln_bitwise_and(bits, kiln_scalar(ctx, KILN_I32, 0x7fffffff)),
                                  KILN_F32);
    kiln_tensor *e = kiln_bitwise_and(kiln_shift_right(bits, kiln_scalar(ctx, KILN_I32, 23)),
                                      kiln_scalar(ctx, KILN_I32, 255));
    double av[42];
    int64_t ev[42];
    for (int i = 0; i < 42; i++) {
        av[i] = fabs(2 * v[i]);
        ev[i] = v[i] == 0 ? 0 : (int64_t)floor(log2(fabs(2 * v[i]))) + 127;
    }
    TU_EXPECT(a, KILN_F32, av, 42);
    TU_EXPECT_I64(e, KILN_I32, ev, 42);
    /* a constant folds: 1.0f is 0x3f800000; the same dtype is t itself */
    kiln_tensor *c = kiln_bitcast(kiln_full(ctx, KILN_F32, TU_S(2), 1.0), KILN_I32);
    TU_EXPECT_I64(c, KILN_I32, ((const int64_t[]){0x3f800000, 0x3f800000}), 2);
    TU_EXPECT(kiln_bitcast(x, KILN_F32), KILN_F32, v, 42);
    /* 0-d and empty */
    kiln_tensor *s = kiln_bitcast(kiln_scalar(ctx, KILN_I64, 0x4000000000000000ll), KILN_F64);
    TU_ASSERT_SCALAR_SHAPE(s);
    cr_assert_eq(TU_ITEM(s), 2.0);
    TU_ASSERT_SHAPE(kiln_bitcast(kiln_zeros(ctx, KILN_F32, TU_S(0, 3)), KILN_I32), 0, 3);
}

TU_TEST(bitcast, not_differentiable) {
    TU_RNG(r);
    double v[5];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(5), -2, 2, v);
    /* x * (x's bits through i64 and back): the product rule's second term
     * has no path, so the gradient is the bitcast value, x */
    kiln_tensor *y = kiln_sum(kiln_mul(x, kiln_bitcast(kiln_bitcast(x, KILN_I64), KILN_F64)), 0,
                              NULL, false);
    kiln_tensor *g;
    cr_assert_eq(kiln_gradients(y, NULL, 1, &x, &g), KILN_OK);
    TU_EXPECT(g, KILN_F64, v, 5);
    /* between the half types: a zero gradient */
    kiln_tensor *h = kiln_cast(x, KILN_F16);
    kiln_tensor *z = kiln_sum(kiln_cast(kiln_bitcast(h, KILN_BF16), KILN_F64), 0, NULL, false);
    kiln_tensor *gh;
    cr_assert_eq(kiln_gradients(z, NULL, 1, &h, &gh), KILN_OK);
    TU_EXPECT_VALS(gh, KILN_F16, 0, 0, 0, 0, 0);
}

TU_TEST(bitcast, errors_name_the_op_and_dtypes) {
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2, 3));
    TU_ASSERT_ERROR(kiln_bitcast(x, KILN_I64), KILN_ERR_DTYPE, "kiln_bitcast");
    TU_ASSERT_ERROR(kiln_bitcast(x, KILN_F64), KILN_ERR_DTYPE, "f32 (4 bytes) and f64 (8 bytes)");
    TU_ASSERT_ERROR(kiln_bitcast(x, KILN_F16), KILN_ERR_DTYPE, "[2,3]");
    TU_ASSERT_ERROR(kiln_bitcast(kiln_ones(ctx, KILN_BOOL, TU_S(2)), KILN_U8), KILN_ERR_DTYPE,
                    "bool");
    TU_ASSERT_ERROR(kiln_bitcast(kiln_ones(ctx, KILN_I8, TU_S(2)), KILN_BOOL), KILN_ERR_DTYPE,
                    "i8");
    TU_ASSERT_ERROR(kiln_bitcast(x, (kiln_dtype)99), KILN_ERR_DTYPE, "unknown dtype 99");
    TU_ASSERT_OK(kiln_bitcast(kiln_ones(ctx, KILN_BOOL, TU_S(2)), KILN_BOOL));
    /* errors pass on; NULL gives NULL */
    TU_ASSERT_ERROR(kiln_bitcast(kiln_bitcast(x, KILN_U8), KILN_I8), KILN_ERR_DTYPE,
                    "kiln_bitcast");
    cr_assert_null(kiln_bitcast(NULL, KILN_I32));
}

Test(bitcast, one_kernel_with_its_neighbours) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    cr_assert_not_null(ctx);
    kiln_tensor *x = kiln_randn(ctx, KILN_F32, TU_S(64, 64), 7);
    cr_assert_eq(kiln_realize(x), KILN_OK);
    kiln_tensor *bits = kiln_bitcast(kiln_add_scalar(x, 1), KILN_I32);
    kiln_tensor *y = kiln_bitcast(kiln_bitwise_xor(bits, kiln_scalar(ctx, KILN_I32, 1)), KILN_F32);
    int64_t before = kiln_ctx_stats(ctx).kernels;
    cr_assert_eq(kiln_realize(kiln_mul(y, y)), KILN_OK);
    cr_assert_eq(kiln_ctx_stats(ctx).kernels - before, 1);
    kiln_ctx_free(ctx);
}
