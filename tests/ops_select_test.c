/* ops_select_test.c — kiln_masked_fill, kiln_empty, kiln_unfold,
 * kiln_masked_select and kiln_nonzero on every executor, against loops over
 * doubles done here: random inputs, masks that broadcast either way, empty
 * results, 0-d tensors, lazily computed inputs of the sync points, and the
 * errors. */
#include "test_util.h"

/* The flat index into a row-major source of shape (ns, s) read at the
 * multi-index idx of an nd-dimensional broadcast result. */
static int64_t src_at(int nd, const int64_t *idx, int ns, const int64_t *s) {
    return tu_bcast_src_index(nd, idx, ns, s);
}

TU_TEST(select, masked_fill) {
    TU_RNG(r);
    double x[12], m[12], want[12];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3, 4), -5, 5, x);
    const int64_t mshapes[3][2] = {{3, 4}, {1, 4}, {3, 1}};
    const int mnd[3] = {2, 1, 2};
    for (int c = 0; c < 3; c++) {
        const int64_t *ms = mnd[c] == 1 ? &mshapes[c][1] : mshapes[c];
        kiln_tensor *mask = tu_rand_tensor(ctx, &r, KILN_BOOL, mnd[c], ms, 0, 1, m);
        for (int i = 0; i < 12; i++) {
            int64_t idx[2];
            tu_unravel(i, 2, TU_DIMS(3, 4), idx);
            want[i] = m[src_at(2, idx, mnd[c], ms)] ? 2.5 : x[i];
        }
        TU_EXPECT(kiln_masked_fill(t, mask, 2.5), KILN_F32, want, 12);
    }
    /* the value converts to t's dtype: u8 -3 is 253, i32 truncates */
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){7, 8, 9});
    kiln_tensor *mk = tu_tensor(ctx, KILN_BOOL, TU_S(3), (double[]){1, 0, 1});
    TU_EXPECT_VALS(kiln_masked_fill(u, mk, -3), KILN_U8, 253, 8, 253);
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){-4, 5, 6});
    TU_EXPECT_VALS(kiln_masked_fill(i, mk, -7.9), KILN_I32, -7, 5, -7);
    /* 0-d, and a masked NaN */
    kiln_tensor *s = kiln_scalar(ctx, KILN_F64, NAN);
    TU_EXPECT_VALS(kiln_masked_fill(s, kiln_scalar(ctx, KILN_BOOL, 1), -1), KILN_F64, -1);
    TU_EXPECT_VALS(kiln_masked_fill(s, kiln_scalar(ctx, KILN_BOOL, 0), -1), KILN_F64, NAN);
    /* errors */
    TU_ASSERT_ERROR(kiln_masked_fill(t, kiln_ones(ctx, KILN_U8, TU_S(4)), 0), KILN_ERR_DTYPE,
                    "kiln_masked_fill", "u8");
    TU_ASSERT_ERROR(kiln_masked_fill(t, kiln_ones(ctx, KILN_BOOL, TU_S(5)), 0), KILN_ERR_SHAPE,
                    "kiln_masked_fill", "[5]", "[3,4]");
    TU_ASSERT_ERROR(kiln_masked_fill(t, kiln_ones(ctx, KILN_BOOL, TU_S(2, 3, 4)), 0),
                    KILN_ERR_SHAPE, "kiln_masked_fill", "[2,3,4]");
    TU_ASSERT_ERROR(kiln_masked_fill(t, NULL, 0), KILN_ERR_ARG, "kiln_masked_fill");
}

TU_TEST(select, empty_is_zeros) {
    int n;
    const kiln_dtype *dts = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        kiln_tensor *e = kiln_empty(ctx, dts[k], TU_S(2, 3));
        TU_ASSERT_SHAPE(e, 2, 3);
        TU_EXPECT_VALS(e, dts[k], 0, 0, 0, 0, 0, 0);
    }
    TU_ASSERT_SCALAR_SHAPE(kiln_empty(ctx, KILN_F32, 0, NULL));
    TU_ASSERT_SHAPE(kiln_empty(ctx, KILN_F32, TU_S(0, 4)), 0, 4);
    TU_ASSERT_ERROR(kiln_empty(ctx, KILN_F32, TU_S(2, -1)), KILN_ERR_SHAPE, "kiln_empty");
    TU_ASSERT_ERROR(kiln_empty(ctx, (kiln_dtype)42, TU_S(2)), KILN_ERR_DTYPE, "kiln_empty");
    cr_assert(kiln_empty(NULL, KILN_F32, TU_S(2)) == NULL);
}

/* t [A, n, C] unfolded along axis 1: [A, nw, C, size]. */
static void check_unfold(kiln_ctx *ctx, tu_rng *r, kiln_dtype dt, int64_t A, int64_t n, int64_t C,
                         int64_t size, int64_t step) {
    double x[4 * 16 * 3], want[4 * 16 * 3 * 16];
    kiln_tensor *t = tu_rand_tensor(ctx, r, dt, TU_S(A, n, C), -50, 50, x);
    int64_t nw = (n - size) / step + 1;
    for (int64_t a = 0; a < A; a++)
        for (int64_t w = 0; w < nw; w++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t j = 0; j < size; j++)
                    want[((a * nw + w) * C + c) * size + j] = x[(a * n + w * step + j) * C + c];
    kiln_tensor *u = kiln_unfold(t, 1, size, step);
    TU_ASSERT_SHAPE(u, A, nw, C, size);
    TU_EXPECT_EXACT(u, dt, want, A * nw * C * size);
    /* the same through axis -2 */
    TU_EXPECT_EXACT(kiln_unfold(t, -2, size, step), dt, want, A * nw * C * size);
}

TU_TEST(select, unfold) {
    TU_RNG(r);
    const int64_t cases[][2] = {{3, 2}, {3, 1}, {2, 4}, {10, 1}, {1, 1}, {4, 4}, {5, 3}, {7, 2}, {10, 7}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        check_unfold(ctx, &r, KILN_F32, 2, 10, 3, cases[c][0], cases[c][1]);
    check_unfold(ctx, &r, KILN_I32, 1, 9, 2, 4, 3);
    /* the last axis, PyTorch's common case: [3, 8] -> [3, 3, 4] */
    double x[24], want[36];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 8), -1, 1, x);
    for (int i = 0; i < 3; i++)
        for (int w = 0; w < 3; w++)
            for (int j = 0; j < 4; j++)
                want[(i * 3 + w) * 4 + j] = x[i * 8 + w * 2 + j];
    TU_EXPECT_EXACT(kiln_unfold(t, -1, 4, 2), KILN_F64, want, 36);
    /* one window, whatever the step */
    double first[12];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            first[i * 4 + j] = x[i * 8 + j];
    kiln_tensor *one = kiln_unfold(t, 1, 4, INT64_MAX);
    TU_ASSERT_SHAPE(one, 3, 1, 4);
    TU_EXPECT_EXACT(one, KILN_F64, first, 12);
    /* the first axis of a vector */
    kiln_tensor *v = tu_tensor(ctx, KILN_I64, TU_S(5), (double[]){1, 2, 3, 4, 5});
    TU_EXPECT_VALS(kiln_unfold(v, 0, 2, 2), KILN_I64, 1, 2, 3, 4);
    TU_ASSERT_SHAPE(kiln_unfold(kiln_zeros(ctx, KILN_F32, TU_S(0, 5)), 1, 5, 1), 0, 1, 5);
    /* errors */
    TU_ASSERT_ERROR(kiln_unfold(t, 1, 0, 1), KILN_ERR_ARG, "kiln_unfold", "[3,8]");
    TU_ASSERT_ERROR(kiln_unfold(t, 1, 2, 0), KILN_ERR_ARG, "kiln_unfold");
    TU_ASSERT_ERROR(kiln_unfold(t, 1, 9, 1), KILN_ERR_ARG, "kiln_unfold", "9");
    TU_ASSERT_ERROR(kiln_unfold(t, 2, 2, 1), KILN_ERR_ARG, "kiln_unfold", "axis 2");
    TU_ASSERT_ERROR(kiln_unfold(kiln_scalar(ctx, KILN_F32, 1), 0, 1, 1), KILN_ERR_SHAPE,
                    "kiln_unfold");
    TU_ASSERT_ERROR(kiln_unfold(kiln_zeros(ctx, KILN_F32, TU_S(1, 1, 1, 1, 1, 1, 1, 2)), 7, 1, 1),
                    KILN_ERR_SHAPE, "kiln_unfold");
}

/* masked_select of t (nt, ts) by mask (nm, ms), both broadcast. */
static void check_masked_select(kiln_ctx *ctx, tu_rng *r, kiln_dtype dt, int nt,
                                const int64_t *ts, int nm, const int64_t *ms) {
    double x[64], m[64], want[64];
    kiln_tensor *t = tu_rand_tensor(ctx, r, dt, nt, ts, -9, 9, x);
    kiln_tensor *mask = tu_rand_tensor(ctx, r, KILN_BOOL, nm, ms, 0, 1, m);
    int nd = 0;
    int64_t shape[KILN_MAX_DIMS], idx[KILN_MAX_DIMS];
    cr_assert(tu_broadcast(nt, ts, nm, ms, &nd, shape));
    int64_t count = 0;
    for (int64_t i = 0; i < tu_numel(nd, shape); i++) {
        tu_unravel(i, nd, shape, idx);
        if (m[src_at(nd, idx, nm, ms)])
            want[count++] = x[src_at(nd, idx, nt, ts)];
    }
    kiln_tensor *got = kiln_masked_select(t, mask);
    TU_ASSERT_SHAPE(got, count);
    TU_EXPECT_EXACT(got, dt, want, count);
}

TU_TEST(select, masked_select) {
    TU_RNG(r);
    check_masked_select(ctx, &r, KILN_F32, TU_S(3, 4), TU_S(3, 4));
    check_masked_select(ctx, &r, KILN_F64, TU_S(3, 4), TU_S(4));
    check_masked_select(ctx, &r, KILN_I32, TU_S(4), TU_S(3, 4)); /* t broadcasts */
    check_masked_select(ctx, &r, KILN_I64, TU_S(2, 1, 4), TU_S(3, 1));
    check_masked_select(ctx, &r, KILN_BOOL, TU_S(2, 5), TU_S(2, 5));
    check_masked_select(ctx, &r, KILN_BF16, TU_S(6), TU_S(6));
    /* nothing selected, an empty input, 0-d */
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, TU_S(2, 2), (double[]){1, 2, 3, 4});
    kiln_tensor *none = kiln_masked_select(t, kiln_zeros(ctx, KILN_BOOL, TU_S(2, 2)));
    TU_ASSERT_SHAPE(none, 0);
    TU_ASSERT_DTYPE(none, KILN_F32);
    TU_ASSERT_SHAPE(kiln_masked_select(kiln_zeros(ctx, KILN_F32, TU_S(0, 3)),
                                       kiln_ones(ctx, KILN_BOOL, TU_S(3))), 0);
    kiln_tensor *s = kiln_scalar(ctx, KILN_F64, -2.5);
    TU_EXPECT_VALS(kiln_masked_select(s, kiln_scalar(ctx, KILN_BOOL, 1)), KILN_F64, -2.5);
    TU_ASSERT_SHAPE(kiln_masked_select(s, kiln_scalar(ctx, KILN_BOOL, 0)), 0);
    TU_EXPECT_VALS(kiln_masked_select(s, tu_tensor(ctx, KILN_BOOL, TU_S(3), (double[]){1, 0, 1})),
                   KILN_F64, -2.5, -2.5);
    /* lazily computed inputs are realized by the op (one sync) */
    double x[10];
    kiln_tensor *xt = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(10), -1, 1, x);
    double want[10];
    int64_t c = 0;
    for (int i = 0; i < 10; i++)
        if (x[i] > 0)
            want[c++] = exp(x[i]);
    kiln_tensor *sel = kiln_masked_select(kiln_exp(xt), kiln_gt_scalar(xt, 0));
    TU_ASSERT_SHAPE(sel, c);
    TU_EXPECT(sel, KILN_F64, want, c);
    /* a transposed view: its own row-major order */
    double xs[6];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -1, 1, xs);
    kiln_tensor *mt = tu_tensor(ctx, KILN_BOOL, TU_S(3, 2), (double[]){1, 1, 0, 1, 1, 0});
    TU_EXPECT_VALS(kiln_masked_select(kiln_transpose(tx, 0, 1), mt), KILN_F32, xs[0], xs[3],
                   xs[4], xs[2]);
    TU_EXPECT_VALS(kiln_nonzero(kiln_transpose(mt, 0, 1)), KILN_I64, 0, 0, 0, 2, 1, 0, 1, 1);
    /* argument errors come before any sync */
    kiln_stats before = kiln_ctx_stats(ctx);
    kiln_tensor *lazy = kiln_exp(xt);
    TU_ASSERT_ERROR(kiln_masked_select(lazy, kiln_ones(ctx, KILN_U8, TU_S(10))), KILN_ERR_DTYPE,
                    "kiln_masked_select", "u8");
    TU_ASSERT_ERROR(kiln_masked_select(lazy, kiln_ones(ctx, KILN_BOOL, TU_S(3))), KILN_ERR_SHAPE,
                    "kiln_masked_select", "[10]", "[3]");
    TU_ASSERT_ERROR(kiln_masked_select(lazy, NULL), KILN_ERR_ARG, "kiln_masked_select");
    TU_ASSERT_ERROR(kiln_masked_select(kiln_add(t, xt), kiln_ones(ctx, KILN_BOOL, TU_S(3))),
                    KILN_ERR_SHAPE, "kiln_add");
    cr_assert(kiln_ctx_stats(ctx).syncs == before.syncs, "[%s] an argument error synced",
              tu_exec_name());
    cr_assert(kiln_error(lazy) == KILN_OK);
}

TU_TEST(select, nonzero) {
    TU_RNG(r);
    /* values in {-1, 0, 1}: many zeros */
    double x[2 * 3 * 4];
    for (int i = 0; i < 24; i++)
        x[i] = (double)tu_int(&r, -1, 1);
    x[5] = 0;
    x[6] = 2;
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, TU_S(2, 3, 4), x);
    int64_t want[24 * 3], idx[3], count = 0;
    for (int i = 0; i < 24; i++)
        if (x[i] != 0) {
            tu_unravel(i, 3, TU_DIMS(2, 3, 4), idx);
            memcpy(&want[count++ * 3], idx, sizeof idx);
        }
    kiln_tensor *nz = kiln_nonzero(t);
    TU_ASSERT_SHAPE(nz, count, 3);
    TU_EXPECT_I64(nz, KILN_I64, want, count * 3);
    /* NaN is nonzero, -0 is zero; bool and integers */
    kiln_tensor *f = tu_tensor(ctx, KILN_F64, TU_S(5), (double[]){0, NAN, -0.0, 3, -INFINITY});
    TU_EXPECT_VALS(kiln_nonzero(f), KILN_I64, 1, 3, 4);
    kiln_tensor *b = tu_tensor(ctx, KILN_BOOL, TU_S(2, 2), (double[]){0, 1, 1, 0});
    TU_EXPECT_VALS(kiln_nonzero(b), KILN_I64, 0, 1, 1, 0);
    kiln_tensor *i = tu_tensor(ctx, KILN_U8, TU_S(4), (double[]){0, 255, 0, 1});
    TU_EXPECT_VALS(kiln_nonzero(i), KILN_I64, 1, 3);
    /* a computed input; none at all; 0-d */
    TU_EXPECT_VALS(kiln_nonzero(kiln_sub_scalar(i, 1)), KILN_I64, 0, 1, 2);
    TU_ASSERT_SHAPE(kiln_nonzero(kiln_zeros(ctx, KILN_I32, TU_S(3, 2))), 0, 2);
    TU_ASSERT_SHAPE(kiln_nonzero(kiln_zeros(ctx, KILN_I32, TU_S(0, 2))), 0, 2);
    TU_ASSERT_SHAPE(kiln_nonzero(kiln_scalar(ctx, KILN_F32, 4)), 1, 0);
    TU_ASSERT_SHAPE(kiln_nonzero(kiln_scalar(ctx, KILN_F32, 0)), 0, 0);
    TU_ASSERT_DTYPE(kiln_nonzero(kiln_scalar(ctx, KILN_F32, 0)), KILN_I64);
    TU_ASSERT_ERROR(kiln_nonzero(kiln_add(t, f)), KILN_ERR_SHAPE, "kiln_add");
    cr_assert(kiln_nonzero(NULL) == NULL);
}
