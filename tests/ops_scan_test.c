/* ops_scan_test.c — cumulative ops (cumsum, cumprod, cummax, cummin,
 * logcumsumexp), variance and standard deviation, and the layout ops stack,
 * repeat, repeat_interleave, roll, diagonal and diag, on every executor,
 * against values computed here in double. */
#include "test_util.h"

/* The scan along axis 1 of a [rows, n] array, in double. */
static void scan_ref(int kind, const double *x, int rows, int n, double *out) {
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int j = 0; j < n; j++) {
            double v = x[r * n + j];
            if (j == 0)
                acc = v;
            else if (kind == 0)
                acc += v;
            else if (kind == 1)
                acc *= v;
            else if (kind == 2)
                acc = v > acc || isnan(v) ? v : acc;
            else if (kind == 3)
                acc = v < acc || isnan(v) ? v : acc;
            else
                acc = fmax(acc, v) + log1p(exp(-fabs(acc - v)));
            out[r * n + j] = acc;
        }
    }
}

TU_TEST(scan, every_kind_and_length) {
    TU_RNG(r);
    /* lengths around the passes' powers of two */
    const int lens[] = {1, 2, 3, 7, 8, 9, 33};
    for (size_t q = 0; q < sizeof lens / sizeof *lens; q++) {
        int n = lens[q];
        double x[3 * 33], want[3 * 33];
        kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, n), 0.5, 1.5, x);
        for (int i = 0; i < 3 * n; i++)
            x[i] *= (tu_next(&r) & 1) ? 1 : -1;
        t = tu_tensor(ctx, KILN_F64, TU_S(3, n), x);
        kiln_tensor *(*fns[5])(kiln_tensor *, int) = {kiln_cumsum, kiln_cumprod, kiln_cummax,
                                                      kiln_cummin, kiln_logcumsumexp};
        for (int k = 0; k < 5; k++) {
            scan_ref(k, x, 3, n, want);
            TU_EXPECT(fns[k](t, 1), KILN_F64, want, 3 * n);
        }
    }
}

TU_TEST(scan, axes_dtypes_and_errors) {
    TU_RNG(r);
    /* axis 0 of a [5, 2]: the transpose of the rows' scan */
    double x[10], xt[10], want[10], wt[10];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(5, 2), -3, 3, x);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 2; j++)
            xt[j * 5 + i] = x[i * 2 + j];
    scan_ref(0, xt, 2, 5, wt);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 2; j++)
            want[i * 2 + j] = wt[j * 5 + i];
    TU_EXPECT(kiln_cumsum(t, 0), KILN_F32, want, 10);
    TU_EXPECT(kiln_cumsum(t, -2), KILN_F32, want, 10);
    /* integers: sums and products in i64 (no wrap at i32), max keeps i32 */
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(4), (double[]){2000000000, 2000000000, -5, 3});
    TU_ASSERT_DTYPE(kiln_cumsum(i, 0), KILN_I64);
    TU_EXPECT_I64(kiln_cumsum(i, 0), KILN_I64, ((int64_t[]){2000000000, 4000000000, 3999999995, 3999999998}), 4);
    TU_EXPECT_I64(kiln_cumprod(kiln_slice(i, 0, 2, 4, 1), 0), KILN_I64, ((int64_t[]){-5, -15}), 2);
    TU_ASSERT_DTYPE(kiln_cummax(i, 0), KILN_I32);
    TU_EXPECT_VALS(kiln_cummin(i, 0), KILN_I32, 2000000000, 2000000000, -5, -5);
    kiln_tensor *b = tu_tensor(ctx, KILN_BOOL, TU_S(4), (double[]){0, 1, 0, 1});
    TU_EXPECT_VALS(kiln_cummax(b, 0), KILN_BOOL, 0, 1, 1, 1);
    TU_EXPECT_I64(kiln_cumsum(b, 0), KILN_I64, ((int64_t[]){0, 1, 1, 2}), 4);
    /* NaN propagates from where it appears; infinities pass through */
    kiln_tensor *f = tu_tensor(ctx, KILN_F32, TU_S(4), (double[]){1, NAN, 3, 0});
    TU_EXPECT_VALS(kiln_cummax(f, 0), KILN_F32, 1, NAN, NAN, NAN);
    kiln_tensor *g = tu_tensor(ctx, KILN_F32, TU_S(3), (double[]){-INFINITY, 0, -INFINITY});
    TU_EXPECT_NEAR_VALS(kiln_logcumsumexp(g, 0), KILN_F32, -INFINITY, 0, 0);
    TU_ASSERT_SHAPE(kiln_cumsum(kiln_zeros(ctx, KILN_F32, TU_S(2, 0)), 1), 2, 0);
    TU_ASSERT_ERROR(kiln_cumsum(kiln_scalar(ctx, KILN_F32, 1), 0), KILN_ERR_SHAPE, "kiln_cumsum");
    TU_ASSERT_ERROR(kiln_cumprod(t, 2), KILN_ERR_ARG, "kiln_cumprod");
}

TU_TEST(scan, var_std) {
    TU_RNG(r);
    double x[4 * 6];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(4, 6), -4, 4, x);
    double v1[4], s0[6];
    for (int i = 0; i < 4; i++) {
        double m = 0, q = 0;
        for (int j = 0; j < 6; j++)
            m += x[i * 6 + j] / 6;
        for (int j = 0; j < 6; j++)
            q += (x[i * 6 + j] - m) * (x[i * 6 + j] - m);
        v1[i] = q / 5;
    }
    for (int j = 0; j < 6; j++) {
        double m = 0, q = 0;
        for (int i = 0; i < 4; i++)
            m += x[i * 6 + j] / 4;
        for (int i = 0; i < 4; i++)
            q += (x[i * 6 + j] - m) * (x[i * 6 + j] - m);
        s0[j] = sqrt(q / 4);
    }
    TU_EXPECT(kiln_var(t, TU_AXES(1), 1, false), KILN_F64, v1, 4);
    TU_EXPECT(kiln_std(t, TU_AXES(0), 0, false), KILN_F64, s0, 6);
    TU_ASSERT_SHAPE(kiln_var(t, TU_AXES(1), 1, true), 4, 1);
    /* integers compute in f32; a half type keeps its dtype */
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(4), (double[]){1, 2, 3, 4});
    TU_ASSERT_DTYPE(kiln_var(i, 0, NULL, 1, false), KILN_F32);
    TU_EXPECT_VALS(kiln_var(i, 0, NULL, 1, false), KILN_F32, 5.0 / 3);
    TU_ASSERT_DTYPE(kiln_std(kiln_cast(t, KILN_BF16), 0, NULL, 1, false), KILN_BF16);
    /* one element with Bessel's correction: 0 / 0 */
    TU_EXPECT_VALS(kiln_var(kiln_slice(i, 0, 0, 1, 1), 0, NULL, 1, false), KILN_F32, NAN);
    TU_ASSERT_ERROR(kiln_var(t, 0, NULL, INFINITY, false), KILN_ERR_ARG, "kiln_var");
}

TU_TEST(layout, stack_repeat_roll) {
    TU_RNG(r);
    double a[6], b[6], want[12];
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -5, 5, a);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -5, 5, b);
    kiln_tensor *ab[2] = {ta, tb};
    /* axis 1: [2, 2, 3], row i holds a[i], b[i] */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            want[i * 6 + j] = a[i * 3 + j];
            want[i * 6 + 3 + j] = b[i * 3 + j];
        }
    TU_ASSERT_SHAPE(kiln_stack(2, ab, 1), 2, 2, 3);
    TU_EXPECT(kiln_stack(2, ab, 1), KILN_F32, want, 12);
    TU_ASSERT_SHAPE(kiln_stack(2, ab, -1), 2, 3, 2);
    kiln_tensor *bad[2] = {ta, kiln_transpose(tb, 0, 1)};
    TU_ASSERT_ERROR(kiln_stack(2, bad, 0), KILN_ERR_SHAPE, "kiln_stack");
    /* repeat [2, 3] by (2, 1, 2): [2, 2, 6] */
    double rep[24];
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 6; j++)
                rep[(p * 2 + i) * 6 + j] = a[i * 3 + j % 3];
    TU_EXPECT(kiln_repeat(ta, 3, TU_DIMS(2, 1, 2)), KILN_F32, rep, 24);
    TU_ASSERT_SHAPE(kiln_repeat(ta, 2, TU_DIMS(0, 2)), 0, 6);
    TU_ASSERT_ERROR(kiln_repeat(ta, 1, TU_DIMS(2)), KILN_ERR_ARG, "kiln_repeat");
    /* repeat_interleave along 1 by 2: a00 a00 a01 a01 ... */
    double ri[12];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 6; j++)
            ri[i * 6 + j] = a[i * 3 + j / 2];
    TU_EXPECT(kiln_repeat_interleave(ta, 2, 1), KILN_F32, ri, 12);
    /* roll by 1, by -4 (= 2 of 3), by 0 */
    double ro[6], rn[6];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            ro[i * 3 + j] = a[i * 3 + (j + 2) % 3];
            rn[i * 3 + j] = a[i * 3 + (j + 1) % 3];
        }
    TU_EXPECT(kiln_roll(ta, 1, 1), KILN_F32, ro, 6);
    TU_EXPECT(kiln_roll(ta, -4, -1), KILN_F32, rn, 6);
    TU_EXPECT(kiln_roll(ta, 3, 1), KILN_F32, a, 6);
    TU_ASSERT_ERROR(kiln_roll(ta, 1, 2), KILN_ERR_ARG, "kiln_roll");
}

TU_TEST(layout, diagonal_diag) {
    TU_RNG(r);
    double x[2 * 3 * 4];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 3, 4), -5, 5, x);
    /* axes 1, 2, offsets 1 and -1: [2, 3] and [2, 2] */
    double d1[6], dm[4];
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < 3; i++)
            d1[b * 3 + i] = x[b * 12 + i * 4 + i + 1];
        for (int i = 0; i < 2; i++)
            dm[b * 2 + i] = x[b * 12 + (i + 1) * 4 + i];
    }
    TU_EXPECT(kiln_diagonal(t, 1, 1, 2), KILN_F64, d1, 6);
    TU_EXPECT(kiln_diagonal(t, -1, 1, 2), KILN_F64, dm, 4);
    /* axes 0 and 2: [3, 2], element (j, i) = x[i, j, i] */
    double d02[6];
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 2; i++)
            d02[j * 2 + i] = x[i * 12 + j * 4 + i];
    TU_EXPECT(kiln_diagonal(t, 0, 0, 2), KILN_F64, d02, 6);
    TU_ASSERT_SHAPE(kiln_diagonal(t, 9, 1, 2), 2, 0);
    TU_ASSERT_ERROR(kiln_diagonal(t, 0, 1, 1), KILN_ERR_ARG, "kiln_diagonal");
    /* diag of a vector: k = 1 puts it above the main diagonal of a 4x4 */
    kiln_tensor *v = tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){7, -8, 9});
    TU_EXPECT_VALS(kiln_diag(v, 1), KILN_I32, 0, 7, 0, 0, 0, 0, -8, 0, 0, 0, 0, 9, 0, 0, 0, 0);
    TU_EXPECT_VALS(kiln_diag(v, -1), KILN_I32, 0, 0, 0, 0, 7, 0, 0, 0, 0, -8, 0, 0, 0, 0, 9, 0);
    TU_EXPECT_VALS(kiln_diag(kiln_diag(v, 0), 0), KILN_I32, 7, -8, 9);
    TU_ASSERT_ERROR(kiln_diag(t, 0), KILN_ERR_SHAPE, "kiln_diag");
}

TU_TEST(scan, prod) {
    TU_RNG(r);
    /* [3, 5, 4] over axes 0 and 2 (an odd count along the way), and all */
    double x[60], want[5], all = 1;
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 5, 4), 0.5, 1.5, x);
    for (int j = 0; j < 5; j++) {
        want[j] = 1;
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 4; k++)
                want[j] *= x[(i * 5 + j) * 4 + k];
    }
    for (int i = 0; i < 60; i++)
        all *= x[i];
    TU_EXPECT(kiln_prod(t, TU_AXES(0, 2), false), KILN_F64, want, 5);
    TU_ASSERT_SHAPE(kiln_prod(t, TU_AXES(0, 2), true), 1, 5, 1);
    TU_EXPECT_NEAR_VALS(kiln_prod(t, 0, NULL, false), KILN_F64, all); /* pairwise, not in order */
    /* integers in i64, wrapping: 2^40 * 2^40 is 0 modulo 2^64 */
    kiln_tensor *i = tu_tensor(ctx, KILN_I64, TU_S(2, 3), (double[]){1099511627776.0, -3, 7, 1099511627776.0, 5, -2});
    TU_EXPECT_I64(kiln_prod(i, TU_AXES(0), false), KILN_I64, ((int64_t[]){0, -15, -14}), 3);
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(3), (double[]){200, 2, 3});
    TU_ASSERT_DTYPE(kiln_prod(u, 0, NULL, false), KILN_I64);
    TU_EXPECT_I64(kiln_prod(u, 0, NULL, false), KILN_I64, ((int64_t[]){1200}), 1);
    /* the empty product is 1; a zero makes 0 */
    TU_EXPECT_VALS(kiln_prod(kiln_zeros(ctx, KILN_F32, TU_S(2, 0)), TU_AXES(1), false), KILN_F32, 1, 1);
    TU_EXPECT_VALS(kiln_prod(tu_tensor(ctx, KILN_F32, TU_S(3), (double[]){4, 0, -2}), 0, NULL, false),
                   KILN_F32, 0);
    TU_ASSERT_ERROR(kiln_prod(t, TU_AXES(3), false), KILN_ERR_ARG, "kiln_prod");
    /* the gradient with a zero in the input: the product of the others */
    if (tu_cur_exec()->mode == KILN_LAZY) {
        kiln_tensor *z = tu_tensor(ctx, KILN_F64, TU_S(4), (double[]){3, 0, -2, 5});
        kiln_requires_grad(z, true);
        cr_assert_eq(kiln_backward(kiln_prod(z, 0, NULL, false)), KILN_OK);
        TU_EXPECT_VALS(kiln_grad(z), KILN_F64, 0, -30, 0, 0);
    }
}

/* Scans chained inside a reduction: each pass of a scan reads the one
 * before at two indices, and the reduction's kernel computes the whole
 * chain, so its index arithmetic is a deep shared DAG. Asking whether an
 * index depended on the lane walked that DAG as a tree: five cumprods
 * under a mean took 45 s on the reference executor (the fuzzer's 10 s per
 * input ran out at four), and these six would not finish. */
TU_TEST(scan, chained_inside_a_reduction) {
    TU_RNG(r);
    double x[64], cur[64], want[4] = {0};
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(4, 4, 4), 0.5, 1.5, x);
    memcpy(cur, x, sizeof x);
    for (int s = 0; s < 6; s++) {
        scan_ref(1, cur, 16, 4, cur);
        t = kiln_cumprod(t, -1);
    }
    for (int i = 0; i < 64; i++)
        want[i / 16] += cur[i];
    TU_EXPECT(kiln_sum(t, TU_AXES(1, 2), false), KILN_F64, want, 4);
}
