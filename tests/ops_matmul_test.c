/* Tests of kiln_matmul with NumPy's rules: vector operands, batch
 * broadcasting, integer exactness and wrapping, empty sizes, dtype promotion,
 * and operands that are views. */
#include "test_util.h"

/* NumPy matmul of a (na dims) and b (nb dims) by loops; the result's shape
 * goes to (*no, od). Integer dtypes (ct) wrap to their width. */
static void ref_matmul(kiln_dtype ct, const double *a, int na, const int64_t *sa, const double *b,
                       int nb, const int64_t *sb, double *out, int *no, int64_t *od) {
    int64_t A[KILN_MAX_DIMS + 1], B[KILN_MAX_DIMS + 1];
    int ma = na, mb = nb;
    memcpy(A, sa, (size_t)na * sizeof(int64_t));
    memcpy(B, sb, (size_t)nb * sizeof(int64_t));
    if (na == 1) { /* row vector */
        A[0] = 1;
        A[1] = sa[0];
        ma = 2;
    }
    if (nb == 1) { /* column vector */
        B[0] = sb[0];
        B[1] = 1;
        mb = 2;
    }
    int64_t n = A[ma - 2], k = A[ma - 1], m = B[mb - 1];
    int nbat = 0;
    int64_t bat[KILN_MAX_DIMS];
    cr_assert(tu_broadcast(ma - 2, A, mb - 2, B, &nbat, bat), "test batch shapes do not broadcast");
    int64_t nb_total = tu_numel(nbat, bat), idx[KILN_MAX_DIMS];
    for (int64_t bi = 0; bi < nb_total; bi++) {
        tu_unravel(bi, nbat, bat, idx);
        int64_t ao = tu_bcast_src_index(nbat, idx, ma - 2, A) * n * k;
        int64_t bo = tu_bcast_src_index(nbat, idx, mb - 2, B) * k * m;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++) {
                long double s = 0;
                int64_t si = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = a[ao + i * k + p], y = b[bo + p * m + j];
                    if (tu_is_float(ct))
                        s += (long double)tu_round(ct, x) * tu_round(ct, y);
                    else
                        si = (int64_t)((uint64_t)si + (uint64_t)(int64_t)x * (uint64_t)(int64_t)y);
                }
                out[(bi * n + i) * m + j] = tu_is_float(ct) ? (double)s : (double)tu_wrap(ct, si);
            }
    }
    *no = 0;
    for (int d = 0; d < nbat; d++)
        od[(*no)++] = bat[d];
    if (na != 1)
        od[(*no)++] = n;
    if (nb != 1)
        od[(*no)++] = m;
}

static void check_matmul(kiln_ctx *ctx, tu_rng *r, kiln_dtype da, int na, const int64_t *sa,
                         kiln_dtype db, int nb, const int64_t *sb, double lo, double hi) {
    int64_t nA = tu_numel(na, sa), nB = tu_numel(nb, sb);
    double *va = malloc((size_t)(nA + 1) * sizeof(double));
    double *vb = malloc((size_t)(nB + 1) * sizeof(double));
    kiln_tensor *a = tu_rand_tensor(ctx, r, da, na, sa, lo, hi, va);
    kiln_tensor *b = tu_rand_tensor(ctx, r, db, nb, sb, lo, hi, vb);
    kiln_dtype ct = tu_promote(da, db);
    int no = 0;
    int64_t od[KILN_MAX_DIMS];
    /* the largest result here is 2*5*64*80 */
    double *want = malloc(200000 * sizeof(double));
    ref_matmul(ct, va, na, sa, vb, nb, sb, want, &no, od);
    kiln_tensor *c = kiln_matmul(a, b);
    TU_ASSERT_SHAPE_N(c, no, od);
    int64_t k = sa[na - 1];
    double tol = tu_tol(ct) * (k > 100 ? (double)k / 100 : 1);
    TU_EXPECT_TOL(c, ct, want, tu_numel(no, od), tol);
    free(va);
    free(vb);
    free(want);
}

TU_TEST(matmul, vector_operands) {
    TU_RNG(r);
    check_matmul(ctx, &r, KILN_F32, TU_S(5), KILN_F32, TU_S(5), -2, 2);
    check_matmul(ctx, &r, KILN_F64, TU_S(4), KILN_F64, TU_S(4, 3), -2, 2);
    check_matmul(ctx, &r, KILN_F64, TU_S(3, 4), KILN_F64, TU_S(4), -2, 2);
    check_matmul(ctx, &r, KILN_F32, TU_S(4), KILN_F32, TU_S(2, 4, 3), -2, 2);
    check_matmul(ctx, &r, KILN_F32, TU_S(2, 3, 4), KILN_F32, TU_S(4), -2, 2);
    check_matmul(ctx, &r, KILN_F32, TU_S(1), KILN_F32, TU_S(1), -2, 2);

    kiln_tensor *dot =
        kiln_matmul(kiln_arange(ctx, KILN_F32, 1, 4, 1), kiln_arange(ctx, KILN_F32, 4, 7, 1));
    TU_ASSERT_SCALAR_SHAPE(dot);
    cr_assert_eq(TU_ITEM(dot), 1 * 4 + 2 * 5 + 3 * 6);
    /* [2] @ [2,3] and [3,2] @ [2] by hand */
    kiln_tensor *v = tu_tensor(ctx, KILN_F64, TU_S(2), (double[]){1, -1});
    kiln_tensor *m = tu_tensor(ctx, KILN_F64, TU_S(2, 3), (double[]){1, 2, 3, 10, 20, 30});
    kiln_tensor *vm = kiln_matmul(v, m);
    TU_ASSERT_SHAPE(vm, 3);
    TU_EXPECT_VALS(vm, KILN_F64, -9, -18, -27);
    kiln_tensor *mv = kiln_matmul(kiln_transpose(m, 0, 1), v);
    TU_ASSERT_SHAPE(mv, 3);
    TU_EXPECT_VALS(mv, KILN_F64, -9, -18, -27);
}

TU_TEST(matmul, two_d_every_float_dtype) {
    TU_RNG(r);
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        check_matmul(ctx, &r, fl[k], TU_S(7, 5), fl[k], TU_S(5, 9), -2, 2);
        check_matmul(ctx, &r, fl[k], TU_S(1, 16), fl[k], TU_S(16, 1), -2, 2);
    }
    check_matmul(ctx, &r, KILN_F32, TU_S(64, 48), KILN_F32, TU_S(48, 80), -1, 1);
    check_matmul(ctx, &r, KILN_F64, TU_S(33, 129), KILN_F64, TU_S(129, 17), -1, 1);
    check_matmul(ctx, &r, KILN_F16, TU_S(8, 32), KILN_F16, TU_S(32, 8), -1, 1);
    check_matmul(ctx, &r, KILN_BF16, TU_S(8, 32), KILN_BF16, TU_S(32, 8), -1, 1);
}

TU_TEST(matmul, batched_broadcasting) {
    TU_RNG(r);
    check_matmul(ctx, &r, KILN_F32, TU_S(2, 1, 3, 4), KILN_F32, TU_S(5, 4, 2), -2, 2);
    check_matmul(ctx, &r, KILN_F64, TU_S(3, 2, 4), KILN_F64, TU_S(3, 4, 5), -2, 2);
    check_matmul(ctx, &r, KILN_F64, TU_S(1, 2, 4), KILN_F64, TU_S(3, 4, 5), -2, 2);
    check_matmul(ctx, &r, KILN_F32, TU_S(2, 3), KILN_F32, TU_S(4, 2, 3, 5), -2, 2);
    check_matmul(ctx, &r, KILN_F32, TU_S(2, 1, 2, 3), KILN_F32, TU_S(1, 4, 3, 2), -2, 2);
    kiln_tensor *c = kiln_matmul(kiln_ones(ctx, KILN_F32, TU_S(2, 1, 3, 4)),
                                 kiln_ones(ctx, KILN_F32, TU_S(5, 4, 2)));
    TU_ASSERT_SHAPE(c, 2, 5, 3, 2);
}

TU_TEST(matmul, integer_exact) {
    TU_RNG(r);
    check_matmul(ctx, &r, KILN_I32, TU_S(6, 7), KILN_I32, TU_S(7, 5), -100, 100);
    check_matmul(ctx, &r, KILN_I64, TU_S(4, 9), KILN_I64, TU_S(9, 3), -1000000, 1000000);
    check_matmul(ctx, &r, KILN_I32, TU_S(2, 3, 4), KILN_I64, TU_S(4, 2), -1000, 1000);
    /* products beyond 2^31 wrap in i32, and u8 wraps modulo 256 */
    check_matmul(ctx, &r, KILN_I32, TU_S(3, 4), KILN_I32, TU_S(4, 3), -100000, 100000);
    check_matmul(ctx, &r, KILN_U8, TU_S(5, 6), KILN_U8, TU_S(6, 4), 0, 255);
    check_matmul(ctx, &r, KILN_U8, TU_S(3, 6), KILN_I32, TU_S(6, 2), 0, 255);
    /* hand-worked */
    kiln_tensor *a = tu_tensor(ctx, KILN_I32, TU_S(2, 2), (double[]){1, 2, 3, 4});
    kiln_tensor *b = tu_tensor(ctx, KILN_I32, TU_S(2, 2), (double[]){5, 6, 7, 8});
    TU_EXPECT_VALS(kiln_matmul(a, b), KILN_I32, 19, 22, 43, 50);
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(1, 2), (double[]){200, 100});
    kiln_tensor *w = tu_tensor(ctx, KILN_U8, TU_S(2, 1), (double[]){2, 3});
    TU_EXPECT_VALS(kiln_matmul(u, w), KILN_U8, (400 + 300) % 256);
    /* i64 beyond 2^53 */
    const int64_t x[2] = {1ll << 40, 3}, y[2] = {1ll << 20, (1ll << 50) + 1};
    kiln_tensor *tx = tu_tensor_i64(ctx, KILN_I64, TU_S(2), x);
    kiln_tensor *ty = tu_tensor_i64(ctx, KILN_I64, TU_S(2), y);
    int64_t want = (1ll << 60) + 3 * ((1ll << 50) + 1);
    TU_EXPECT_I64(kiln_matmul(tx, ty), KILN_I64, &want, 1);
}

TU_TEST(matmul, mixed_dtypes) {
    TU_RNG(r);
    check_matmul(ctx, &r, KILN_F32, TU_S(3, 4), KILN_F64, TU_S(4, 2), -2, 2);
    check_matmul(ctx, &r, KILN_F16, TU_S(3, 4), KILN_BF16, TU_S(4, 2), -2, 2);
    check_matmul(ctx, &r, KILN_I32, TU_S(3, 4), KILN_F32, TU_S(4, 2), -5, 5);
    check_matmul(ctx, &r, KILN_U8, TU_S(3, 4), KILN_F16, TU_S(4, 2), 0, 5);
    check_matmul(ctx, &r, KILN_I64, TU_S(3, 4), KILN_BF16, TU_S(4, 2), -5, 5);
}

TU_TEST(matmul, empty) {
    /* k = 0 gives zeros */
    kiln_tensor *a = kiln_zeros(ctx, KILN_F32, TU_S(3, 0));
    kiln_tensor *b = kiln_zeros(ctx, KILN_F32, TU_S(0, 4));
    kiln_tensor *c = kiln_matmul(a, b);
    TU_ASSERT_SHAPE(c, 3, 4);
    double z[12] = {0};
    TU_EXPECT_EXACT(c, KILN_F32, z, 12);
    kiln_tensor *ai = kiln_zeros(ctx, KILN_I32, TU_S(2, 3, 0));
    kiln_tensor *bi = kiln_zeros(ctx, KILN_I32, TU_S(0, 5));
    kiln_tensor *ci = kiln_matmul(ai, bi);
    TU_ASSERT_SHAPE(ci, 2, 3, 5);
    double zi[30] = {0};
    TU_EXPECT_EXACT(ci, KILN_I32, zi, 30);
    kiln_tensor *d =
        kiln_matmul(kiln_zeros(ctx, KILN_F64, TU_S(0)), kiln_zeros(ctx, KILN_F64, TU_S(0)));
    TU_ASSERT_SCALAR_SHAPE(d);
    cr_assert_eq(TU_ITEM(d), 0);
    /* n = 0 and m = 0, and an empty batch */
    TU_ASSERT_SHAPE(
        kiln_matmul(kiln_ones(ctx, KILN_F32, TU_S(0, 4)), kiln_ones(ctx, KILN_F32, TU_S(4, 5))), 0,
        5);
    TU_ASSERT_SHAPE(
        kiln_matmul(kiln_ones(ctx, KILN_F32, TU_S(2, 4)), kiln_ones(ctx, KILN_F32, TU_S(4, 0))), 2,
        0);
    kiln_tensor *eb =
        kiln_matmul(kiln_ones(ctx, KILN_F32, TU_S(0, 2, 4)), kiln_ones(ctx, KILN_F32, TU_S(4, 3)));
    TU_ASSERT_SHAPE(eb, 0, 2, 3);
    cr_assert_eq(kiln_realize(eb), KILN_OK);
    /* k = 0 of ones is still zeros (nothing is summed) */
    kiln_tensor *o =
        kiln_matmul(kiln_ones(ctx, KILN_F64, TU_S(2, 0)), kiln_ones(ctx, KILN_F64, TU_S(0, 2)));
    TU_EXPECT_VALS(o, KILN_F64, 0, 0, 0, 0);
}

TU_TEST(matmul, non_contiguous_operands) {
    TU_RNG(r);
    double a[5 * 4], b[6 * 5];
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(5, 4), -2, 2, a);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(6, 5), -2, 2, b);
    /* a^T [4,5] @ b^T [5,6] */
    kiln_tensor *c = kiln_matmul(kiln_transpose(ta, 0, 1), kiln_transpose(tb, 0, 1));
    TU_ASSERT_SHAPE(c, 4, 6);
    double want[24];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++) {
            double s = 0;
            for (int p = 0; p < 5; p++)
                s += a[p * 4 + i] * b[j * 5 + p];
            want[i * 6 + j] = s;
        }
    TU_EXPECT(c, KILN_F64, want, 24);

    /* strided and reversed rows: a[::-2] [3,4] @ a[1:5]^T... as [4,3] from b */
    kiln_tensor *as = kiln_slice(ta, 0, KILN_END, KILN_BEGIN_REV, -2);         /* rows 4, 2, 0 */
    kiln_tensor *bs = kiln_slice(kiln_transpose(tb, 0, 1), 0, 1, KILN_END, 1); /* [4,6] */
    kiln_tensor *d = kiln_matmul(as, bs);
    TU_ASSERT_SHAPE(d, 3, 6);
    double wd[18];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 6; j++) {
            double s = 0;
            for (int p = 0; p < 4; p++)
                s += a[(4 - 2 * i) * 4 + p] * b[j * 5 + 1 + p];
            wd[i * 6 + j] = s;
        }
    TU_EXPECT(d, KILN_F64, wd, 18);

    /* an expanded (stride 0) batch operand and a flipped one */
    kiln_tensor *ae = kiln_expand(kiln_unsqueeze(ta, 0), TU_S(3, 5, 4));
    kiln_tensor *bf =
        kiln_flip(kiln_reshape(kiln_arange(ctx, KILN_F64, 0, 24, 1), TU_S(3, 4, 2)), TU_AXES(0, 2));
    kiln_tensor *e = kiln_matmul(ae, bf);
    TU_ASSERT_SHAPE(e, 3, 5, 2);
    double we[30];
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 2; j++) {
                double s = 0;
                for (int p = 0; p < 4; p++)
                    s += a[i * 4 + p] * (double)((2 - q) * 8 + p * 2 + (1 - j));
                we[(q * 5 + i) * 2 + j] = s;
            }
    TU_EXPECT(e, KILN_F64, we, 30);

    /* a padded operand */
    const int64_t pads[4] = {1, 0, 0, 1};
    kiln_tensor *ap = kiln_pad(ta, pads, 1);                    /* [6,5] */
    kiln_tensor *f = kiln_matmul(ap, kiln_transpose(tb, 0, 1)); /* [6,5] @ [5,6] */
    TU_ASSERT_SHAPE(f, 6, 6);
    double wf[36];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            double s = 0;
            for (int p = 0; p < 5; p++) {
                double x = (i == 0 || p == 4) ? 1 : a[(i - 1) * 4 + p];
                s += x * b[j * 5 + p];
            }
            wf[i * 6 + j] = s;
        }
    TU_EXPECT(f, KILN_F64, wf, 36);
}

TU_TEST(matmul, epilogue) {
    TU_RNG(r);
    double x[4 * 8], w[8 * 3], bias[3];
    kiln_tensor *tx = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(4, 8), -1, 1, x);
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(8, 3), -1, 1, w);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3), -1, 1, bias);
    kiln_tensor *y = kiln_relu(kiln_add(kiln_matmul(tx, tw), tb));
    double want[12];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            double s = bias[j];
            for (int p = 0; p < 8; p++)
                s += x[i * 8 + p] * w[p * 3 + j];
            want[i * 3 + j] = s > 0 ? s : 0;
        }
    TU_EXPECT(y, KILN_F32, want, 12);
    /* a matmul feeding a matmul, and a reduction of one */
    kiln_tensor *z = kiln_matmul(kiln_matmul(tx, tw), kiln_transpose(tw, 0, 1));
    TU_ASSERT_SHAPE(z, 4, 8);
    double xw[12], wz[32];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            xw[i * 3 + j] = 0;
            for (int p = 0; p < 8; p++)
                xw[i * 3 + j] += x[i * 8 + p] * w[p * 3 + j];
        }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) {
            wz[i * 8 + j] = 0;
            for (int p = 0; p < 3; p++)
                wz[i * 8 + j] += xw[i * 3 + p] * w[j * 3 + p];
        }
    TU_EXPECT(z, KILN_F32, wz, 32);
    double s = 0;
    for (int i = 0; i < 12; i++)
        s += xw[i];
    TU_EXPECT(kiln_sum(kiln_matmul(tx, tw), 0, NULL, false), KILN_F32, &s, 1);
}

TU_TEST(matmul, errors) {
    kiln_tensor *a = kiln_ones(ctx, KILN_F32, TU_S(3, 4));
    kiln_tensor *b = kiln_ones(ctx, KILN_F32, TU_S(5, 6));
    TU_ASSERT_ERROR(kiln_matmul(a, b), KILN_ERR_SHAPE, "kiln_matmul", "[3,4]", "[5,6]");
    TU_ASSERT_ERROR(kiln_matmul(kiln_ones(ctx, KILN_F32, TU_S(2, 3, 4)),
                                kiln_ones(ctx, KILN_F32, TU_S(3, 4, 5))),
                    KILN_ERR_SHAPE, "kiln_matmul", "[2,3,4]", "[3,4,5]");
    TU_ASSERT_ERROR(
        kiln_matmul(kiln_ones(ctx, KILN_F32, TU_S(3)), kiln_ones(ctx, KILN_F32, TU_S(4))),
        KILN_ERR_SHAPE, "kiln_matmul", "[3]", "[4]");
    TU_ASSERT_ERROR(
        kiln_matmul(kiln_ones(ctx, KILN_F32, TU_S(4)), kiln_ones(ctx, KILN_F32, TU_S(3, 4))),
        KILN_ERR_SHAPE, "kiln_matmul");
    kiln_tensor *s = kiln_scalar(ctx, KILN_F32, 2);
    TU_ASSERT_ERROR2(kiln_matmul(s, a), KILN_ERR_SHAPE, KILN_ERR_ARG);
    TU_ASSERT_ERROR2(kiln_matmul(a, s), KILN_ERR_SHAPE, KILN_ERR_ARG);
    kiln_tensor *bb = kiln_ones(ctx, KILN_BOOL, TU_S(4, 2));
    TU_ASSERT_ERROR(kiln_matmul(a, bb), KILN_ERR_DTYPE, "kiln_matmul");
    TU_ASSERT_ERROR(
        kiln_matmul(kiln_ones(ctx, KILN_BOOL, TU_S(2, 3)), kiln_ones(ctx, KILN_BOOL, TU_S(3, 2))),
        KILN_ERR_DTYPE, "kiln_matmul");
}

/* A zero-padded view as an operand: the scheduler computes the padded
 * values into a buffer of their own first (strides cannot express the
 * mask), on either side and on both. */
TU_TEST(matmul, zero_padded_operands) {
    TU_RNG(r);
    double a[9 * 9], b[16 * 16], ap[16 * 16] = {0}, want[16 * 16];
    int64_t sp[2] = {16, 16};
    kiln_tensor *ta = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(9, 9), -2, 2, a);
    kiln_tensor *tb = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(16, 16), -2, 2, b);
    /* 2 rows before and 5 after, 4 columns before and 3 after */
    const int64_t pads[4] = {2, 5, 4, 3};
    for (int i = 0; i < 9; i++)
        for (int j = 0; j < 9; j++)
            ap[(i + 2) * 16 + j + 4] = a[i * 9 + j];
    kiln_tensor *p = kiln_pad(ta, pads, 0);
    int no;
    int64_t od[KILN_MAX_DIMS];
    ref_matmul(KILN_F32, ap, 2, sp, b, 2, sp, want, &no, od);
    TU_EXPECT(kiln_matmul(p, tb), KILN_F32, want, 256);
    ref_matmul(KILN_F32, b, 2, sp, ap, 2, sp, want, &no, od);
    TU_EXPECT(kiln_matmul(tb, p), KILN_F32, want, 256);
    ref_matmul(KILN_F32, ap, 2, sp, ap, 2, sp, want, &no, od);
    kiln_tensor *pp = kiln_matmul(p, p);
    TU_ASSERT_SHAPE(pp, 16, 16);
    TU_EXPECT(pp, KILN_F32, want, 256);
}
