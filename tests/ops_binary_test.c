/* Tests of the elementwise binary ops, their scalar forms and kiln_where:
 * NumPy broadcasting, dtype promotion of every pair, integer floor division
 * and wrapping, pow's integer rules, NaN in maximum/minimum and comparisons. */
#include "test_util.h"

typedef enum bop {
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_POW,
    OP_MAX,
    OP_MIN,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_EQ,
    OP_NE,
    NOPS
} bop;

static const struct {
    const char *name;
    kiln_tensor *(*fn)(kiln_tensor *, kiln_tensor *);
    kiln_tensor *(*sfn)(kiln_tensor *, double);
} bops[NOPS] = {
    {"add", kiln_add, kiln_add_scalar},
    {"sub", kiln_sub, kiln_sub_scalar},
    {"mul", kiln_mul, kiln_mul_scalar},
    {"div", kiln_div, kiln_div_scalar},
    {"pow", kiln_pow, kiln_pow_scalar},
    {"maximum", kiln_maximum, kiln_maximum_scalar},
    {"minimum", kiln_minimum, kiln_minimum_scalar},
    {"lt", kiln_lt, kiln_lt_scalar},
    {"le", kiln_le, kiln_le_scalar},
    {"gt", kiln_gt, kiln_gt_scalar},
    {"ge", kiln_ge, kiln_ge_scalar},
    {"eq", kiln_eq, kiln_eq_scalar},
    {"ne", kiln_ne, kiln_ne_scalar},
};

static bool is_cmp(bop o) { return o >= OP_LT; }

static double ref_float(bop o, double a, double b) {
    switch (o) {
    case OP_ADD:
        return a + b;
    case OP_SUB:
        return a - b;
    case OP_MUL:
        return a * b;
    case OP_DIV:
        return a / b;
    case OP_POW:
        return pow(a, b);
    case OP_MAX:
        return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b);
    case OP_MIN:
        return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b);
    case OP_LT:
        return a < b;
    case OP_LE:
        return a <= b;
    case OP_GT:
        return a > b;
    case OP_GE:
        return a >= b;
    case OP_EQ:
        return a == b;
    case OP_NE:
        return a != b;
    default:
        return NAN;
    }
}

static int64_t ref_floordiv(int64_t a, int64_t b, kiln_dtype dt) {
    if (b == 0)
        return 0;
    if (b == -1)
        return tu_wrap(dt, (int64_t)(0 - (uint64_t)a));
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0)))
        q--;
    return tu_wrap(dt, q);
}

static int64_t ref_ipow(int64_t b, int64_t e, kiln_dtype dt) {
    if (e < 0) {
        if (b == 1)
            return 1;
        if (b == -1)
            return (e & 1) ? -1 : 1;
        return 0;
    }
    uint64_t r = 1, x = (uint64_t)b;
    while (e) {
        if (e & 1)
            r *= x;
        x *= x;
        e >>= 1;
    }
    return tu_wrap(dt, (int64_t)r);
}

/* o on integers of dtype dt, wrapping to its width. */
static int64_t ref_int(bop o, int64_t a, int64_t b, kiln_dtype dt) {
    switch (o) {
    case OP_ADD:
        return tu_wrap(dt, (int64_t)((uint64_t)a + (uint64_t)b));
    case OP_SUB:
        return tu_wrap(dt, (int64_t)((uint64_t)a - (uint64_t)b));
    case OP_MUL:
        return tu_wrap(dt, (int64_t)((uint64_t)a * (uint64_t)b));
    case OP_DIV:
        return ref_floordiv(a, b, dt);
    case OP_POW:
        return ref_ipow(a, b, dt);
    case OP_MAX:
        return a > b ? a : b;
    case OP_MIN:
        return a < b ? a : b;
    case OP_LT:
        return a < b;
    case OP_LE:
        return a <= b;
    case OP_GT:
        return a > b;
    case OP_GE:
        return a >= b;
    case OP_EQ:
        return a == b;
    case OP_NE:
        return a != b;
    default:
        return 0;
    }
}

/* The value of o on a and b (read in their own dtypes) computed in dtype ct. */
static double ref_value(bop o, kiln_dtype ct, double a, double b) {
    if (tu_is_float(ct))
        return ref_float(o, tu_round(ct, a), tu_round(ct, b));
    return (double)ref_int(o, (int64_t)a, (int64_t)b, ct);
}

/* Checks o on random inputs of the given dtypes, shapes and ranges against
 * the loop above, broadcasting as NumPy. */
static void check_binary(kiln_ctx *ctx, tu_rng *r, bop o, kiln_dtype da, int na, const int64_t *sa,
                         double alo, double ahi, kiln_dtype db, int nb, const int64_t *sb,
                         double blo, double bhi) {
    int64_t nA = tu_numel(na, sa), nB = tu_numel(nb, sb);
    double *va = malloc((size_t)(nA + 1) * sizeof(double));
    double *vb = malloc((size_t)(nB + 1) * sizeof(double));
    kiln_tensor *a = tu_rand_tensor(ctx, r, da, na, sa, alo, ahi, va);
    kiln_tensor *b = tu_rand_tensor(ctx, r, db, nb, sb, blo, bhi, vb);
    int no = 0;
    int64_t so[KILN_MAX_DIMS];
    cr_assert(tu_broadcast(na, sa, nb, sb, &no, so), "test shapes do not broadcast");
    kiln_tensor *c = bops[o].fn(a, b);
    TU_ASSERT_SHAPE_N(c, no, so);
    kiln_dtype ct = tu_promote(da, db);
    kiln_dtype out = is_cmp(o) ? KILN_BOOL : ct;
    cr_assert(kiln_dtype_of(c) == out, "[%s] kiln_%s(%s, %s) gave %s, expected %s", tu_exec_name(),
              bops[o].name, tu_dt_name(da), tu_dt_name(db), tu_dt_name(kiln_dtype_of(c)),
              tu_dt_name(out));
    int64_t n = tu_numel(no, so);
    double *want = malloc((size_t)(n + 1) * sizeof(double));
    int64_t idx[KILN_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        tu_unravel(i, no, so, idx);
        want[i] = ref_value(o, ct, va[tu_bcast_src_index(no, idx, na, sa)],
                            vb[tu_bcast_src_index(no, idx, nb, sb)]);
    }
    TU_EXPECT(c, out, want, n);
    free(va);
    free(vb);
    free(want);
}

TU_TEST(binary, broadcast_edge_cases) {
    TU_RNG(r);
    struct {
        int na;
        int64_t a[4];
        int nb;
        int64_t b[4];
    } cases[] = {
        {2, {3, 1}, 2, {1, 4}},          {0, {0}, 2, {2, 3}},       {2, {2, 3}, 0, {0}},
        {2, {0, 3}, 2, {1, 3}},          {2, {2, 0}, 0, {0}},       {3, {2, 3, 4}, 1, {4}},
        {3, {5, 1, 3}, 2, {4, 1}},       {1, {1}, 0, {0}},          {1, {0}, 1, {1}},
        {4, {2, 1, 3, 1}, 3, {4, 1, 5}}, {2, {1, 1}, 3, {3, 1, 2}}, {0, {0}, 0, {0}},
        {3, {1, 0, 1}, 2, {1, 5}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        check_binary(ctx, &r, OP_ADD, KILN_F32, cases[k].na, cases[k].a, -5, 5, KILN_F32,
                     cases[k].nb, cases[k].b, -5, 5);
        check_binary(ctx, &r, OP_MUL, KILN_F32, cases[k].nb, cases[k].b, -5, 5, KILN_F32,
                     cases[k].na, cases[k].a, -5, 5);
    }
}

TU_TEST(binary, broadcast_mismatch_is_shape_error) {
    kiln_tensor *a = kiln_zeros(ctx, KILN_F32, TU_S(3));
    kiln_tensor *b = kiln_zeros(ctx, KILN_F32, TU_S(4));
    TU_ASSERT_ERROR(kiln_add(a, b), KILN_ERR_SHAPE, "kiln_add", "[3]", "[4]");
    kiln_tensor *c = kiln_zeros(ctx, KILN_F32, TU_S(2, 0));
    kiln_tensor *d = kiln_zeros(ctx, KILN_F32, TU_S(3, 1));
    TU_ASSERT_ERROR(kiln_mul(c, d), KILN_ERR_SHAPE, "kiln_mul", "[2,0]", "[3,1]");
    kiln_tensor *e = kiln_zeros(ctx, KILN_F32, TU_S(0));
    kiln_tensor *f = kiln_zeros(ctx, KILN_F32, TU_S(2));
    TU_ASSERT_ERROR(kiln_sub(e, f), KILN_ERR_SHAPE, "kiln_sub", "[0]", "[2]");
}

TU_TEST(binary, float_ops_every_float_dtype) {
    TU_RNG(r);
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        for (int o = 0; o < NOPS; o++) {
            double alo = -4, ahi = 4, blo = -4, bhi = 4;
            if (o == OP_POW)
                alo = 0.1, ahi = 3, blo = -2, bhi = 2;
            if (is_cmp((bop)o))
                alo = -2, ahi = 2, blo = -2, bhi = 2;
            check_binary(ctx, &r, (bop)o, fl[k], TU_S(4, 1, 5), alo, ahi, fl[k], TU_S(3, 1), blo,
                         bhi);
        }
    }
}

TU_TEST(binary, integer_ops) {
    TU_RNG(r);
    const kiln_dtype ints[] = {KILN_I32, KILN_I64, KILN_U8};
    for (int k = 0; k < 3; k++) {
        kiln_dtype dt = ints[k];
        for (int o = 0; o < NOPS; o++) {
            double alo = -2147483648.0, ahi = 2147483647.0, blo = alo, bhi = ahi;
            if (o == OP_DIV)
                alo = -50, ahi = 50, blo = -6, bhi = 6;
            if (o == OP_POW)
                alo = -4, ahi = 4, blo = -3, bhi = 20;
            if (is_cmp((bop)o))
                alo = -3, ahi = 3, blo = -3, bhi = 3;
            if (dt == KILN_U8) {
                if (alo < 0)
                    alo = 0;
                if (blo < 0)
                    blo = 0;
                if (o == OP_POW)
                    ahi = 7, bhi = 9;
                if (is_cmp((bop)o))
                    ahi = 4, bhi = 4;
            }
            check_binary(ctx, &r, (bop)o, dt, TU_S(6, 7), alo, ahi, dt, TU_S(7), blo, bhi);
        }
    }
}

TU_TEST(binary, promotion_every_pair) {
    TU_RNG(r);
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    int rot = 0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            kiln_dtype da = all[i], db = all[j];
            bool both_bool = da == KILN_BOOL && db == KILN_BOOL;
            /* the dtype of every op (nothing to compute) */
            kiln_tensor *a = kiln_ones(ctx, da, TU_S(2, 3));
            kiln_tensor *b = kiln_ones(ctx, db, TU_S(3));
            for (int o = 0; o < NOPS; o++) {
                if (both_bool && !is_cmp((bop)o) && o != OP_MAX && o != OP_MIN)
                    continue;
                kiln_tensor *c = bops[o].fn(a, b);
                kiln_dtype want = is_cmp((bop)o) ? KILN_BOOL : tu_promote(da, db);
                TU_ASSERT_SHAPE(c, 2, 3);
                cr_assert(kiln_dtype_of(c) == want, "[%s] kiln_%s(%s, %s) gave %s, expected %s",
                          tu_exec_name(), bops[o].name, tu_dt_name(da), tu_dt_name(db),
                          tu_dt_name(kiln_dtype_of(c)), tu_dt_name(want));
            }
            kiln_tensor *w = kiln_where(kiln_ones(ctx, KILN_BOOL, TU_S(1)), a, b);
            TU_ASSERT_DTYPE(w, tu_promote(da, db));
            /* values: add and lt for every pair, and one more op in turn (NumPy
             * leaves arithmetic on two bools either undefined or logical; only
             * the ops with one meaning are checked there) */
            bop more = (bop)(OP_SUB + rot++ % (NOPS - OP_SUB));
            if (more == OP_LT)
                more = OP_DIV;
            bop checked[3] = {both_bool ? OP_MAX : OP_ADD, OP_LT, more};
            for (int k = 0; k < 3; k++) {
                bop o = checked[k];
                if (both_bool && (o == OP_SUB || o == OP_MUL || o == OP_DIV || o == OP_POW))
                    o = OP_MIN;
                double blo = o == OP_DIV ? 1 : 0;
                double ahi = o == OP_POW ? 3 : 5, bhi = o == OP_POW ? 3 : 5;
                check_binary(ctx, &r, o, da, TU_S(2, 3), 0, ahi, db, TU_S(3), blo, bhi);
            }
        }
    }
}

TU_TEST(binary, mixed_promotion_values) {
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(2), (double[]){250, 3});
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(2), (double[]){10, -5});
    /* computed in the promoted dtype: no u8 wrap */
    TU_EXPECT_VALS(kiln_add(u, i), KILN_I32, 260, -2);
    TU_EXPECT_VALS(kiln_sub(i, u), KILN_I32, -240, -8);
    kiln_tensor *u2 = tu_tensor(ctx, KILN_U8, TU_S(2), (double[]){10, 5});
    TU_EXPECT_VALS(kiln_add(u, u2), KILN_U8, 4, 8);
    TU_EXPECT_VALS(kiln_sub(u2, u), KILN_U8, 16, 2);
    TU_EXPECT_VALS(kiln_mul(u, u2), KILN_U8, (250 * 10) % 256, 15);
    kiln_tensor *b = tu_tensor(ctx, KILN_BOOL, TU_S(2), (double[]){1, 0});
    TU_EXPECT_VALS(kiln_add(b, u), KILN_U8, 251, 3);
    kiln_tensor *u255 = tu_tensor(ctx, KILN_U8, TU_S(2), (double[]){255, 255});
    TU_EXPECT_VALS(kiln_add(u255, b), KILN_U8, 0, 255);
    TU_EXPECT_VALS(kiln_mul(b, i), KILN_I32, 10, 0);

    /* f16 + bf16 -> f32, each read in its own precision */
    kiln_tensor *h = tu_tensor(ctx, KILN_F16, TU_S(1), (double[]){0.1});
    kiln_tensor *bf = tu_tensor(ctx, KILN_BF16, TU_S(1), (double[]){0.1});
    double want = tu_round(KILN_F16, 0.1) + tu_round(KILN_BF16, 0.1);
    TU_EXPECT(kiln_add(h, bf), KILN_F32, &want, 1);

    /* an integer with a half type gives the half type */
    kiln_tensor *big = tu_tensor(ctx, KILN_I64, TU_S(2), (double[]){70000, 3});
    kiln_tensor *hz = tu_tensor(ctx, KILN_F16, TU_S(2), (double[]){0, 0.5});
    TU_EXPECT_VALS(kiln_add(big, hz), KILN_F16, INFINITY, 3.5);
    TU_EXPECT_VALS(kiln_add(i, bf), KILN_BF16, tu_round(KILN_BF16, 10 + tu_round(KILN_BF16, 0.1)),
                   tu_round(KILN_BF16, -5 + tu_round(KILN_BF16, 0.1)));

    /* i64 with f64 keeps large values as f64 does */
    const int64_t iv[] = {(1ll << 53) + 1};
    kiln_tensor *l = tu_tensor_i64(ctx, KILN_I64, TU_S(1), iv);
    kiln_tensor *d = tu_tensor(ctx, KILN_F64, TU_S(1), (double[]){0});
    TU_EXPECT_VALS(kiln_add(l, d), KILN_F64, 9007199254740992.0);
    /* i32 with f32 */
    kiln_tensor *i24 = tu_tensor(ctx, KILN_I32, TU_S(1), (double[]){16777217});
    kiln_tensor *f0 = tu_tensor(ctx, KILN_F32, TU_S(1), (double[]){0});
    TU_EXPECT_VALS(kiln_add(i24, f0), KILN_F32, 16777216);
}

TU_TEST(binary, i64_wrapping) {
    const int64_t a[] = {INT64_MAX, INT64_MIN, (1ll << 32) + 1, INT64_MIN, 7, -7};
    const int64_t b[] = {1, 1, (1ll << 32) + 1, -1, INT64_MIN, 2};
    kiln_tensor *ta = tu_tensor_i64(ctx, KILN_I64, TU_S(6), a);
    kiln_tensor *tb = tu_tensor_i64(ctx, KILN_I64, TU_S(6), b);
    int64_t w[6];
    for (bop o = OP_ADD; o <= OP_MIN; o++) {
        for (int i = 0; i < 6; i++)
            w[i] = ref_int(o, a[i], b[i], KILN_I64);
        if (o == OP_POW)
            continue; /* exponents here are too large to mean anything */
        TU_EXPECT_I64(bops[o].fn(ta, tb), KILN_I64, w, 6);
    }
    const int64_t add[] = {INT64_MIN, INT64_MIN + 1, (1ll << 33) + 2, INT64_MAX, INT64_MIN + 7, -5};
    TU_EXPECT_I64(kiln_add(ta, tb), KILN_I64, add, 6);
    /* INT64_MIN // -1 wraps to INT64_MIN; 7 // INT64_MIN is -1; -7 // 2 is -4 */
    const int64_t dv[] = {INT64_MAX, INT64_MIN, 1, INT64_MIN, -1, -4};
    TU_EXPECT_I64(kiln_div(ta, tb), KILN_I64, dv, 6);
}

TU_TEST(binary, integer_floor_division) {
    const kiln_dtype ints[] = {KILN_I32, KILN_I64};
    for (int k = 0; k < 2; k++) {
        kiln_tensor *a =
            tu_tensor(ctx, ints[k], TU_S(9), (double[]){7, -7, 7, -7, 0, 5, -5, 6, -6});
        kiln_tensor *b = tu_tensor(ctx, ints[k], TU_S(9), (double[]){2, 2, -2, -2, 3, 0, 0, 3, -3});
        TU_EXPECT_VALS(kiln_div(a, b), ints[k], 3, -4, -4, 3, 0, 0, 0, 2, 2);
    }
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(4), (double[]){200, 5, 255, 0});
    kiln_tensor *v = tu_tensor(ctx, KILN_U8, TU_S(4), (double[]){7, 0, 255, 0});
    TU_EXPECT_VALS(kiln_div(u, v), KILN_U8, 28, 0, 1, 0);
    /* INT32_MIN // -1 wraps */
    kiln_tensor *m = tu_tensor(ctx, KILN_I32, TU_S(2), (double[]){-2147483648.0, -2147483648.0});
    kiln_tensor *n1 = tu_tensor(ctx, KILN_I32, TU_S(2), (double[]){-1, 2});
    TU_EXPECT_VALS(kiln_div(m, n1), KILN_I32, -2147483648.0, -1073741824.0);
    /* division by a broadcast zero */
    kiln_tensor *z = kiln_zeros(ctx, KILN_I32, 0, NULL);
    TU_EXPECT_VALS(kiln_div(kiln_arange(ctx, KILN_I32, -2, 3, 1), z), KILN_I32, 0, 0, 0, 0, 0);
    /* bool / integer promotes and floors */
    kiln_tensor *bt = tu_tensor(ctx, KILN_BOOL, TU_S(3), (double[]){1, 1, 0});
    kiln_tensor *iv = tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){-2, 0, 5});
    TU_EXPECT_VALS(kiln_div(bt, iv), KILN_I32, -1, 0, 0);
}

TU_TEST(binary, float_division_by_zero) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        kiln_tensor *a = tu_tensor(ctx, fl[k], TU_S(4), (double[]){1, -1, 0, 2});
        kiln_tensor *b = tu_tensor(ctx, fl[k], TU_S(4), (double[]){0, 0, 0, -0.0});
        TU_EXPECT_VALS(kiln_div(a, b), fl[k], INFINITY, -INFINITY, NAN, -INFINITY);
    }
    /* an integer tensor divided by a non-integral scalar is true division in f32 */
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){5, -5, 0});
    TU_EXPECT_VALS(kiln_div_scalar(i, 2.5), KILN_F32, 2, -2, 0);
}

TU_TEST(binary, pow_rules) {
    const kiln_dtype ints[] = {KILN_I32, KILN_I64};
    for (int k = 0; k < 2; k++) {
        kiln_dtype dt = ints[k];
        kiln_tensor *b = tu_tensor(ctx, dt, TU_S(10), (double[]){1, -1, -1, 2, 0, 0, 3, -2, 5, -3});
        kiln_tensor *e =
            tu_tensor(ctx, dt, TU_S(10), (double[]){-5, -3, -2, -1, -1, 0, 4, 3, 0, 1});
        TU_EXPECT_VALS(kiln_pow(b, e), dt, 1, -1, 1, 0, 0, 1, 81, -8, 1, -3);
    }
    /* wrapping: 3^20 in i32, 2^62 and 3^40 in i64 */
    TU_EXPECT_VALS(kiln_pow(kiln_scalar(ctx, KILN_I32, 3), kiln_scalar(ctx, KILN_I32, 20)),
                   KILN_I32, (double)(int32_t)(uint32_t)3486784401u);
    int64_t p62 = 1ll << 62;
    TU_EXPECT_I64(kiln_pow(kiln_scalar(ctx, KILN_I64, 2), kiln_scalar(ctx, KILN_I64, 62)), KILN_I64,
                  &p62, 1);
    int64_t p3_40 = ref_ipow(3, 40, KILN_I64);
    TU_EXPECT_I64(kiln_pow(kiln_scalar(ctx, KILN_I64, 3), kiln_scalar(ctx, KILN_I64, 40)), KILN_I64,
                  &p3_40, 1);
    kiln_tensor *ub = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){2, 3, 0});
    kiln_tensor *ue = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){8, 5, 0});
    TU_EXPECT_VALS(kiln_pow(ub, ue), KILN_U8, 0, 243, 1);

    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        kiln_dtype dt = fl[k];
        kiln_tensor *b = tu_tensor(ctx, dt, TU_S(7), (double[]){0, 2, -8, 4, NAN, 1, -2});
        kiln_tensor *e = tu_tensor(ctx, dt, TU_S(7), (double[]){0, -1, 1.0 / 3, 0.5, 0, NAN, 3});
        TU_EXPECT_NEAR_VALS(kiln_pow(b, e), dt, 1, 0.5, NAN, 2, 1, 1, -8);
    }
}

TU_TEST(binary, maximum_minimum_nan) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        kiln_dtype dt = fl[k];
        kiln_tensor *a = tu_tensor(ctx, dt, TU_S(5), (double[]){NAN, 1, NAN, -INFINITY, 3});
        kiln_tensor *b = tu_tensor(ctx, dt, TU_S(5), (double[]){1, NAN, NAN, 2, INFINITY});
        TU_EXPECT_VALS(kiln_maximum(a, b), dt, NAN, NAN, NAN, 2, INFINITY);
        TU_EXPECT_VALS(kiln_minimum(a, b), dt, NAN, NAN, NAN, -INFINITY, 3);
        TU_EXPECT_VALS(kiln_maximum(b, a), dt, NAN, NAN, NAN, 2, INFINITY);
        TU_EXPECT_VALS(kiln_minimum(b, a), dt, NAN, NAN, NAN, -INFINITY, 3);
        TU_EXPECT_VALS(kiln_maximum_scalar(a, 2), dt, NAN, 2, NAN, 2, 3);
        TU_EXPECT_VALS(kiln_minimum_scalar(a, 2), dt, NAN, 1, NAN, -INFINITY, 2);
        TU_EXPECT_VALS(kiln_maximum_scalar(b, NAN), dt, NAN, NAN, NAN, NAN, NAN);
    }
}

TU_TEST(binary, comparisons_nan_and_zero) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        kiln_dtype dt = fl[k];
        kiln_tensor *a = tu_tensor(ctx, dt, TU_S(5), (double[]){NAN, 1, NAN, -0.0, INFINITY});
        kiln_tensor *b = tu_tensor(ctx, dt, TU_S(5), (double[]){1, NAN, NAN, 0.0, INFINITY});
        TU_EXPECT_VALS(kiln_lt(a, b), KILN_BOOL, 0, 0, 0, 0, 0);
        TU_EXPECT_VALS(kiln_le(a, b), KILN_BOOL, 0, 0, 0, 1, 1);
        TU_EXPECT_VALS(kiln_gt(a, b), KILN_BOOL, 0, 0, 0, 0, 0);
        TU_EXPECT_VALS(kiln_ge(a, b), KILN_BOOL, 0, 0, 0, 1, 1);
        TU_EXPECT_VALS(kiln_eq(a, b), KILN_BOOL, 0, 0, 0, 1, 1);
        TU_EXPECT_VALS(kiln_ne(a, b), KILN_BOOL, 1, 1, 1, 0, 0);
        TU_EXPECT_VALS(kiln_eq_scalar(a, NAN), KILN_BOOL, 0, 0, 0, 0, 0);
        TU_EXPECT_VALS(kiln_ne_scalar(a, NAN), KILN_BOOL, 1, 1, 1, 1, 1);
        TU_EXPECT_VALS(kiln_eq_scalar(a, 0), KILN_BOOL, 0, 0, 0, 1, 0);
    }
    /* bool compares as 0 and 1 */
    kiln_tensor *p = tu_tensor(ctx, KILN_BOOL, TU_S(4), (double[]){0, 0, 1, 1});
    kiln_tensor *q = tu_tensor(ctx, KILN_BOOL, TU_S(4), (double[]){0, 1, 0, 1});
    TU_EXPECT_VALS(kiln_lt(p, q), KILN_BOOL, 0, 1, 0, 0);
    TU_EXPECT_VALS(kiln_ge(p, q), KILN_BOOL, 1, 0, 1, 1);
    TU_EXPECT_VALS(kiln_maximum(p, q), KILN_BOOL, 0, 1, 1, 1);
    TU_EXPECT_VALS(kiln_minimum(p, q), KILN_BOOL, 0, 0, 0, 1);
    /* u8 against i32 compares values, not bytes */
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(2), (double[]){200, 0});
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(2), (double[]){-56, -1});
    TU_EXPECT_VALS(kiln_gt(u, i), KILN_BOOL, 1, 1);
    TU_EXPECT_VALS(kiln_eq(u, i), KILN_BOOL, 0, 0);
    /* i64 beyond 2^53 compares exactly */
    const int64_t x[] = {(1ll << 53) + 1, INT64_MAX};
    const int64_t y[] = {(1ll << 53), INT64_MAX - 1};
    kiln_tensor *tx = tu_tensor_i64(ctx, KILN_I64, TU_S(2), x);
    kiln_tensor *ty = tu_tensor_i64(ctx, KILN_I64, TU_S(2), y);
    TU_EXPECT_VALS(kiln_gt(tx, ty), KILN_BOOL, 1, 1);
    TU_EXPECT_VALS(kiln_eq(tx, ty), KILN_BOOL, 0, 0);
}

/* The dtype a scalar op gives, per the header's scalar rule. */
static kiln_dtype scalar_result(bop o, kiln_dtype dt, double s) {
    if (is_cmp(o))
        return KILN_BOOL;
    if (tu_is_float(dt))
        return dt;
    if (s != trunc(s))
        return KILN_F32;
    return dt == KILN_BOOL ? KILN_I64 : dt;
}

TU_TEST(binary, scalar_forms_every_dtype) {
    TU_RNG(r);
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    const double scalars[] = {2, 2.5, -3, 0};
    for (int k = 0; k < n; k++) {
        kiln_dtype dt = all[k];
        double v[12];
        double lo = dt == KILN_U8 ? 0 : -5, hi = dt == KILN_U8 ? 10 : 5;
        kiln_tensor *x = tu_rand_tensor(ctx, &r, dt, TU_S(3, 4), lo, hi, v);
        for (size_t si = 0; si < sizeof scalars / sizeof scalars[0]; si++) {
            double s = scalars[si];
            for (int o = 0; o < NOPS; o++) {
                /* A negative scalar has no u8 value (NumPy refuses it); the
                 * wrapping of u8 arithmetic with one is tested on its own. */
                if (dt == KILN_U8 && s < 0)
                    continue;
                kiln_tensor *y = bops[o].sfn(x, s);
                TU_ASSERT_SHAPE(y, 3, 4);
                kiln_dtype out = scalar_result((bop)o, dt, s);
                cr_assert(kiln_dtype_of(y) == out,
                          "[%s] kiln_%s_scalar(%s, %g) gave %s, expected %s", tu_exec_name(),
                          bops[o].name, tu_dt_name(dt), s, tu_dt_name(kiln_dtype_of(y)),
                          tu_dt_name(out));
                /* values for every op with 2.5 and -3 (2 for u8), and for the
                 * ops where 0 is special */
                bool check = s == 2.5 || s == -3 || (dt == KILN_U8 && s == 2) ||
                             (s == 0 && (o == OP_DIV || o == OP_POW || o == OP_ADD));
                if (!check)
                    continue;
                /* comparisons compute in the dtype the arithmetic ops would */
                kiln_dtype ct = is_cmp((bop)o) ? scalar_result(OP_ADD, dt, s) : out;
                double w[12];
                for (int i = 0; i < 12; i++) {
                    if (tu_is_float(ct))
                        w[i] = ref_float((bop)o, tu_round(ct, v[i]), s);
                    else
                        w[i] = (double)ref_int((bop)o, (int64_t)v[i], tu_wrap(ct, (int64_t)s), ct);
                }
                TU_EXPECT(y, out, w, 12);
            }
        }
    }
}

TU_TEST(binary, scalar_examples) {
    kiln_tensor *h = tu_tensor(ctx, KILN_F16, TU_S(2), (double[]){1, -0.5});
    TU_EXPECT_VALS(kiln_add_scalar(h, 2.5), KILN_F16, 3.5, 2);
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(4), (double[]){7, -7, 1, 0});
    TU_EXPECT_VALS(kiln_mul_scalar(i, 3), KILN_I32, 21, -21, 3, 0);
    TU_EXPECT_VALS(kiln_div_scalar(i, 2), KILN_I32, 3, -4, 0, 0);
    TU_EXPECT_VALS(kiln_div_scalar(i, -2), KILN_I32, -4, 3, -1, 0);
    TU_EXPECT_VALS(kiln_div_scalar(i, 0), KILN_I32, 0, 0, 0, 0);
    TU_EXPECT_VALS(kiln_mul_scalar(i, 0.5), KILN_F32, 3.5, -3.5, 0.5, 0);
    TU_EXPECT_VALS(kiln_lt_scalar(i, 0.5), KILN_BOOL, 0, 1, 0, 1);
    TU_EXPECT_VALS(kiln_ge_scalar(i, 1), KILN_BOOL, 1, 0, 1, 0);
    kiln_tensor *p = tu_tensor(ctx, KILN_I32, TU_S(5), (double[]){1, -1, -1, 2, 0});
    TU_EXPECT_VALS(kiln_pow_scalar(p, -1), KILN_I32, 1, -1, -1, 0, 0);
    TU_EXPECT_VALS(kiln_pow_scalar(p, -2), KILN_I32, 1, 1, 1, 0, 0);
    TU_EXPECT_VALS(kiln_pow_scalar(p, 3), KILN_I32, 1, -1, -1, 8, 0);
    TU_EXPECT_VALS(kiln_pow_scalar(p, 0), KILN_I32, 1, 1, 1, 1, 1);
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(2), (double[]){250, 7});
    TU_EXPECT_VALS(kiln_add_scalar(u, 10), KILN_U8, 4, 17);
    TU_EXPECT_VALS(kiln_sub_scalar(u, 10), KILN_U8, 240, 253);
    TU_EXPECT_VALS(kiln_mul_scalar(u, 2), KILN_U8, 244, 14);
    kiln_tensor *b = tu_tensor(ctx, KILN_BOOL, TU_S(2), (double[]){0, 1});
    TU_EXPECT_VALS(kiln_add_scalar(b, 1), KILN_I64, 1, 2);
    TU_EXPECT_VALS(kiln_mul_scalar(b, 0.5), KILN_F32, 0, 0.5);
    TU_EXPECT_VALS(kiln_gt_scalar(b, 0.5), KILN_BOOL, 0, 1);
    TU_EXPECT_VALS(kiln_eq_scalar(b, 1), KILN_BOOL, 0, 1);
    TU_EXPECT_VALS(kiln_maximum_scalar(b, 3), KILN_I64, 3, 3);
    const int64_t big[] = {1ll << 40, -(1ll << 40)};
    kiln_tensor *l = tu_tensor_i64(ctx, KILN_I64, TU_S(2), big);
    const int64_t want[] = {(1ll << 40) + (1ll << 41), -(1ll << 40) + (1ll << 41)};
    TU_EXPECT_I64(kiln_add_scalar(l, (double)(1ll << 41)), KILN_I64, want, 2);
    kiln_tensor *f = tu_tensor(ctx, KILN_F32, TU_S(3), (double[]){4, -8, 0});
    TU_EXPECT_NEAR_VALS(kiln_pow_scalar(f, 0.5), KILN_F32, 2, NAN, 0);
    TU_EXPECT_NEAR_VALS(kiln_pow_scalar(f, 2), KILN_F32, 16, 64, 0);
    TU_EXPECT_VALS(kiln_div_scalar(f, 0), KILN_F32, INFINITY, -INFINITY, NAN);
    TU_EXPECT_VALS(kiln_sub_scalar(f, 1), KILN_F32, 3, -9, -1);
}

TU_TEST(binary, u8_negative_scalar_wraps) {
    /* u8 stays u8 with an integral scalar, and integer results wrap: x + (-3)
     * is x - 3 modulo 256, as the same op with a u8 tensor of 253 would be. */
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){0, 5, 255});
    TU_EXPECT_VALS(kiln_add_scalar(u, -3), KILN_U8, 253, 2, 252);
    TU_EXPECT_VALS(kiln_sub_scalar(u, -3), KILN_U8, 3, 8, 2);
    TU_EXPECT_VALS(kiln_mul_scalar(u, -1), KILN_U8, 0, 251, 1);
}

TU_TEST(binary, where) {
    TU_RNG(r);
    /* three-way broadcasting: cond [3,1], a [1,4], b [] */
    double c[3] = {1, 0, 1}, a[4], b0;
    kiln_tensor *tc = tu_tensor(ctx, KILN_BOOL, TU_S(3, 1), c);
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(1, 4), -5, 5, a);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, 0, NULL, -5, 5, &b0);
    kiln_tensor *w = kiln_where(tc, ta, tb);
    TU_ASSERT_SHAPE(w, 3, 4);
    double want[12];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            want[i * 4 + j] = c[i] ? a[j] : b0;
    TU_EXPECT_EXACT(w, KILN_F32, want, 12);

    /* cond of any dtype is read as != 0 (NaN is true, -0.0 false) */
    kiln_tensor *cf = tu_tensor(ctx, KILN_F32, TU_S(5), (double[]){0.5, -0.0, NAN, 0, -2});
    kiln_tensor *ones = kiln_ones(ctx, KILN_I32, TU_S(5));
    kiln_tensor *zeros = kiln_zeros(ctx, KILN_I32, TU_S(5));
    TU_EXPECT_VALS(kiln_where(cf, ones, zeros), KILN_I32, 1, 0, 1, 0, 1);
    kiln_tensor *ci = tu_tensor(ctx, KILN_I32, TU_S(5), (double[]){2, 0, -1, 0, 256});
    TU_EXPECT_VALS(kiln_where(ci, ones, zeros), KILN_I32, 1, 0, 1, 0, 1);
    kiln_tensor *cu = tu_tensor(ctx, KILN_U8, TU_S(5), (double[]){0, 255, 0, 1, 0});
    TU_EXPECT_VALS(kiln_where(cu, ones, zeros), KILN_I32, 0, 1, 0, 1, 0);

    /* the result dtype is the promotion of a and b, not of cond */
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(2), (double[]){200, 100});
    kiln_tensor *h = tu_tensor(ctx, KILN_F16, TU_S(2), (double[]){-0.5, 1.5});
    kiln_tensor *cd = tu_tensor(ctx, KILN_F64, TU_S(2), (double[]){1, 0});
    TU_EXPECT_VALS(kiln_where(cd, u, h), KILN_F16, 200, 1.5);
    TU_EXPECT_VALS(kiln_where(cd, h, u), KILN_F16, -0.5, 100);

    /* every dtype through where, with a random condition */
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        double cv[20], av[20], bv[20], wv[20];
        kiln_tensor *cc = tu_rand_tensor(ctx, &r, KILN_BOOL, TU_S(4, 5), 0, 1, cv);
        kiln_tensor *aa = tu_rand_tensor(ctx, &r, all[k], TU_S(4, 5), -50, 50, av);
        kiln_tensor *bb = tu_rand_tensor(ctx, &r, all[k], TU_S(4, 5), -50, 50, bv);
        for (int i = 0; i < 20; i++)
            wv[i] = cv[i] ? av[i] : bv[i];
        TU_EXPECT_EXACT(kiln_where(cc, aa, bb), all[k], wv, 20);
    }

    TU_ASSERT_ERROR(
        kiln_where(kiln_ones(ctx, KILN_BOOL, TU_S(3)), ta, kiln_zeros(ctx, KILN_F32, TU_S(2))),
        KILN_ERR_SHAPE, "kiln_where");
}

TU_TEST(binary, non_contiguous_operands) {
    TU_RNG(r);
    double a[4 * 6], b[6 * 4];
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(4, 6), -3, 3, a);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(6, 4), -3, 3, b);
    /* a^T [6,4] * b[::-1, :] */
    kiln_tensor *c = kiln_mul(kiln_transpose(ta, 0, 1), kiln_flip(tb, TU_AXES(0)));
    TU_ASSERT_SHAPE(c, 6, 4);
    double want[24];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++)
            want[i * 4 + j] = a[j * 6 + i] * b[(5 - i) * 4 + j];
    TU_EXPECT(c, KILN_F64, want, 24);

    /* strided slices of the same tensor, and x op x */
    kiln_tensor *even = kiln_slice(ta, 1, 0, KILN_END, 2);
    kiln_tensor *odd = kiln_slice(ta, 1, 1, KILN_END, 2);
    kiln_tensor *d = kiln_sub(even, odd);
    TU_ASSERT_SHAPE(d, 4, 3);
    double wd[12];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            wd[i * 3 + j] = a[i * 6 + 2 * j] - a[i * 6 + 2 * j + 1];
    TU_EXPECT(d, KILN_F64, wd, 12);
    double zeros[24] = {0};
    TU_EXPECT_EXACT(kiln_sub(ta, ta), KILN_F64, zeros, 24);
    double twice[24];
    for (int i = 0; i < 24; i++)
        twice[i] = 2 * a[i];
    TU_EXPECT_EXACT(kiln_add(ta, ta), KILN_F64, twice, 24);
}

TU_TEST(binary, zero_dim_operands) {
    kiln_tensor *a = kiln_scalar(ctx, KILN_F32, 1.5);
    kiln_tensor *b = kiln_scalar(ctx, KILN_F32, -4);
    kiln_tensor *c = kiln_mul(a, b);
    TU_ASSERT_SCALAR_SHAPE(c);
    cr_assert_eq(TU_ITEM(c), -6);
    kiln_tensor *d = kiln_lt(a, b);
    TU_ASSERT_SCALAR_SHAPE(d);
    TU_ASSERT_DTYPE(d, KILN_BOOL);
    cr_assert_eq(TU_ITEM(d), 0);
}

TU_TEST(binary, large_and_odd_sizes) {
    TU_RNG(r);
    enum { R = 257, C = 300 };
    double *a = malloc(R * C * sizeof(double)), *b = malloc(C * R * sizeof(double));
    double *w = malloc(R * C * sizeof(double));
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(R, C), -4, 4, a);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(C, R), -4, 4, b);
    /* a + b^T: one operand read across its rows */
    kiln_tensor *c = kiln_add(ta, kiln_transpose(tb, 0, 1));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            w[i * C + j] = a[i * C + j] + b[j * R + i];
    TU_EXPECT(c, KILN_F32, w, R * C);
    /* a broadcast column times a broadcast row, then a comparison with a */
    kiln_tensor *col = kiln_slice(ta, 1, 7, 8, 1);         /* [R,1] */
    kiln_tensor *row = kiln_slice(ta, 0, -1, KILN_END, 1); /* [1,C] */
    kiln_tensor *d = kiln_gt(kiln_mul(col, row), ta);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            w[i * C + j] = (double)(float)(a[i * C + 7] * a[(R - 1) * C + j]) > a[i * C + j];
    TU_EXPECT(d, KILN_BOOL, w, R * C);
    /* odd 1-d lengths around typical vector and tile widths */
    const int64_t lens[] = {1, 3, 7, 15, 17, 31, 33, 63, 65, 127, 129, 1023, 1025, 4097};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        int64_t n = lens[k];
        kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(n), -1, 1, a);
        kiln_tensor *y = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(n), -1, 1, b);
        for (int64_t i = 0; i < n; i++)
            w[i] = a[i] * b[i] - a[i];
        TU_EXPECT(kiln_sub(kiln_mul(x, y), x), KILN_F64, w, n);
    }
    free(a);
    free(b);
    free(w);
}

TU_TEST(binary, shared_subexpressions) {
    TU_RNG(r);
    double a[24];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(4, 6), -2, 2, a);
    /* a diamond: s feeds two branches that meet again */
    kiln_tensor *s = kiln_exp(x);
    kiln_tensor *p = kiln_mul(s, s);
    kiln_tensor *q = kiln_add_scalar(s, 1);
    kiln_tensor *y = kiln_div(p, q);
    double w[24], wp[24], wq[24];
    for (int i = 0; i < 24; i++) {
        double e = exp(a[i]);
        wp[i] = e * e;
        wq[i] = e + 1;
        w[i] = wp[i] / wq[i];
    }
    TU_EXPECT(y, KILN_F64, w, 24);
    /* the branches read afterwards, in either order, after y was realized */
    TU_EXPECT(q, KILN_F64, wq, 24);
    TU_EXPECT(p, KILN_F64, wp, 24);
    /* a realized tensor feeding new work */
    kiln_tensor *z = kiln_sub(y, p);
    for (int i = 0; i < 24; i++)
        w[i] = w[i] - wp[i];
    TU_EXPECT(z, KILN_F64, w, 24);
    /* switching mode in the middle of a graph */
    kiln_ctx_set_mode(ctx, kiln_ctx_mode(ctx) == KILN_LAZY ? KILN_EAGER : KILN_LAZY);
    kiln_tensor *u = kiln_mul_scalar(kiln_add(z, p), 2);
    for (int i = 0; i < 24; i++)
        w[i] = 2 * (w[i] + wp[i]);
    TU_EXPECT(u, KILN_F64, w, 24);
}

TU_TEST(binary, eight_dims) {
    TU_RNG(r);
    const int64_t da[8] = {2, 1, 3, 1, 2, 1, 2, 3}, db[8] = {1, 2, 1, 2, 1, 2, 2, 1};
    check_binary(ctx, &r, OP_ADD, KILN_F32, 8, da, -3, 3, KILN_F32, 8, db, -3, 3);
    check_binary(ctx, &r, OP_MUL, KILN_I32, 8, da, -3, 3, KILN_I64, 3, db + 5, -3, 3);
}

TU_TEST(binary, chained_ops_round_and_wrap_at_each_step) {
    /* each op's result is of its own dtype, however the ops are fused */
    kiln_tensor *a = tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){2147483647.0, -2147483648.0, 5});
    kiln_tensor *b = tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){1, -1, 1});
    TU_EXPECT_VALS(kiln_div_scalar(kiln_add(a, b), 2), KILN_I32, -1073741824.0, 1073741823.0, 3);
    TU_EXPECT_VALS(kiln_gt_scalar(kiln_add(a, b), 0), KILN_BOOL, 0, 1, 1);
    TU_EXPECT_VALS(kiln_cast(kiln_add(a, b), KILN_F64), KILN_F64, -2147483648.0, 2147483647.0, 6);
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){200, 250, 3});
    kiln_tensor *v = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){100, 10, 4});
    TU_EXPECT_VALS(kiln_div_scalar(kiln_add(u, v), 2), KILN_U8, 22, 2, 3);
    TU_EXPECT_VALS(kiln_gt_scalar(kiln_add(u, v), 100), KILN_BOOL, 0, 0, 0);
    TU_EXPECT_VALS(kiln_maximum(kiln_mul(u, v), kiln_sub(v, u)), KILN_U8, 156, 196, 12);
    TU_EXPECT_VALS(kiln_sum(kiln_add(u, v), 0, NULL, false), KILN_I64, 44 + 4 + 7);
    /* f16: 60000 + 60000 is inf in f16 before the subtraction */
    kiln_tensor *h = tu_tensor(ctx, KILN_F16, TU_S(2), (double[]){60000, 1000});
    TU_EXPECT_VALS(kiln_sub(kiln_add(h, h), h), KILN_F16, INFINITY, 1000);
    /* and 1 + 2^-11 is 1 in f16 (and bf16 at 2^-8) before subtracting 1 */
    kiln_tensor *one = kiln_ones(ctx, KILN_F16, TU_S(1));
    TU_EXPECT_VALS(kiln_sub_scalar(kiln_add_scalar(one, 0x1p-11), 1), KILN_F16, 0);
    kiln_tensor *bone = kiln_ones(ctx, KILN_BF16, TU_S(1));
    TU_EXPECT_VALS(kiln_sub_scalar(kiln_add_scalar(bone, 0x1p-8), 1), KILN_BF16, 0);
    /* f32 likewise at 2^-24 */
    kiln_tensor *fone = kiln_ones(ctx, KILN_F32, TU_S(1));
    TU_EXPECT_VALS(kiln_sub_scalar(kiln_add_scalar(fone, 0x1p-24), 1), KILN_F32, 0);
    /* a sum of f16 values whose elements overflow f16 after a multiply */
    kiln_tensor *m = kiln_full(ctx, KILN_F16, TU_S(4), 300);
    TU_EXPECT_VALS(kiln_sum(kiln_mul(m, m), 0, NULL, false), KILN_F16, INFINITY);
}

TU_TEST(binary, padded_views_in_reductions) {
    kiln_tensor *x = tu_tensor(ctx, KILN_F32, TU_S(2, 2), (double[]){1, 2, 3, 4});
    const int64_t p[4] = {1, 0, 0, 1};
    /* [[100, 100, 100], [1, 2, 100], [3, 4, 100]] */
    kiln_tensor *big = kiln_pad(x, p, 100);
    TU_EXPECT_VALS(kiln_max(big, 0, NULL, false), KILN_F32, 100);
    TU_EXPECT_VALS(kiln_argmax(big, 0, NULL, false), KILN_I64, 0);
    TU_EXPECT_VALS(kiln_argmin(big, 0, NULL, false), KILN_I64, 3);
    TU_EXPECT_VALS(kiln_sum(big, TU_AXES(1), false), KILN_F32, 300, 103, 107);
    TU_EXPECT_VALS(kiln_min(kiln_pad(x, p, -INFINITY), TU_AXES(0), false), KILN_F32, -INFINITY,
                   -INFINITY, -INFINITY);
    kiln_tensor *nanpad = kiln_pad(x, p, NAN);
    TU_EXPECT_VALS(kiln_max(nanpad, TU_AXES(1), false), KILN_F32, NAN, NAN, NAN);
    TU_EXPECT_VALS(kiln_max(kiln_slice(nanpad, 1, 0, 2, 1), TU_AXES(0), false), KILN_F32, NAN, NAN);
    TU_EXPECT_VALS(
        kiln_max(kiln_slice(kiln_slice(nanpad, 1, 0, 2, 1), 0, 1, 3, 1), TU_AXES(0), false),
        KILN_F32, 3, 4);
    /* an i32 pad with a negative value, then an elementwise op */
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(2), (double[]){5, 6});
    const int64_t q[2] = {2, 1};
    TU_EXPECT_VALS(kiln_mul(kiln_pad(i, q, -3), kiln_pad(i, q, 2)), KILN_I32, -6, -6, 25, 36, -6);
}

TU_TEST(binary, same_structure_different_values) {
    /* Graphs that differ only in data, constants, view offsets, pad values,
     * arange bounds or seeds must not share results, however compiled code
     * is reused between them. */
    TU_RNG(r);
    for (int it = 0; it < 6; it++) {
        double v[12], w[12];
        kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3, 4), -2, 2, v);
        kiln_tensor *y = kiln_mul_scalar(kiln_add_scalar(x, (double)it), 0.5 + it);
        for (int i = 0; i < 12; i++) w[i] = (v[i] + it) * (0.5 + it);
        TU_EXPECT(y, KILN_F32, w, 12);
        /* a slice at a different offset each time */
        kiln_tensor *s = kiln_slice(x, 1, it % 4, it % 4 + 1, 1);
        for (int i = 0; i < 3; i++) w[i] = v[i * 4 + it % 4];
        TU_EXPECT_EXACT(kiln_neg(kiln_neg(kiln_add_scalar(s, 0))), KILN_F32, w, 3);
        double w2[3];
        for (int i = 0; i < 3; i++) w2[i] = fabs((double)((float)((float)w[i] + 1.0f) - 1.0f));
        TU_EXPECT_EXACT(kiln_abs(kiln_sub_scalar(kiln_add_scalar(s, 1), 1)), KILN_F32, w2, 3);
        /* a pad value */
        const int64_t p[2] = {1, 1};
        kiln_tensor *pd = kiln_mul_scalar(kiln_pad(kiln_ones(ctx, KILN_F32, TU_S(1)), p, it), 2);
        TU_EXPECT_VALS(pd, KILN_F32, 2.0 * it, 2, 2.0 * it);
        /* arange bounds */
        kiln_tensor *a = kiln_add_scalar(kiln_arange(ctx, KILN_F64, it, it + 3, 1), 0.25);
        TU_EXPECT_VALS(a, KILN_F64, it + 0.25, it + 1.25, it + 2.25);
        /* seeds */
        double r1[4], r2[4];
        TU_READ(kiln_mul_scalar(kiln_rand(ctx, KILN_F64, TU_S(4), (uint64_t)it), 2), r1, 4);
        TU_READ(kiln_rand(ctx, KILN_F64, TU_S(4), (uint64_t)it), r2, 4);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(r1[i], 2 * r2[i], "[%s] seed %d element %d", tu_exec_name(), it, i);
    }
}

TU_TEST(binary, many_inputs_and_deep_chains) {
    TU_RNG(r);
    enum { K = 40, N = 10 };
    double v[K][N], w[N] = {0};
    kiln_tensor *acc = NULL;
    for (int k = 0; k < K; k++) {
        kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(N), -1, 1, v[k]);
        acc = acc ? kiln_add(acc, kiln_mul_scalar(t, k + 1)) : t;
        for (int i = 0; i < N; i++) w[i] += v[k][i] * (k ? k + 1 : 1);
    }
    TU_EXPECT(acc, KILN_F64, w, N);
    /* 300 ops in a row */
    kiln_tensor *x = tu_tensor(ctx, KILN_F64, TU_S(N), v[0]);
    kiln_tensor *y = x;
    for (int i = 0; i < 100; i++) y = kiln_mul_scalar(kiln_add_scalar(kiln_sin(y), 0.5), 0.9);
    for (int i = 0; i < N; i++) {
        double t = v[0][i];
        for (int k = 0; k < 100; k++) t = (sin(t) + 0.5) * 0.9;
        w[i] = t;
    }
    TU_EXPECT(y, KILN_F64, w, N);
}
