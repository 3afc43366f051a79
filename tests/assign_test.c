/* Tests of kiln_assign: dst takes src's value lazily, broadcast and
 * converted; pending assignments are realized by any sync point of the
 * context; earlier derived tensors keep the old value; errors leave dst
 * as it was. */
#include "test_util.h"

TU_TEST(assign, then_realize) {
    TU_RNG(r);
    double a[6], b[6];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -5, 5, a);
    kiln_tensor *s = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -5, 5, b);
    cr_assert_eq(kiln_assign(x, s), KILN_OK);
    TU_ASSERT_SHAPE(x, 2, 3);
    TU_ASSERT_DTYPE(x, KILN_F32);
    cr_assert_eq(kiln_realize(x), KILN_OK);
    TU_EXPECT_EXACT(x, KILN_F32, b, 6);
    /* src is not affected */
    TU_EXPECT_EXACT(s, KILN_F32, b, 6);
}

TU_TEST(assign, every_dtype) {
    TU_RNG(r);
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        double a[12], b[12];
        kiln_tensor *x = tu_rand_tensor(ctx, &r, all[k], TU_S(3, 4), -100, 100, a);
        kiln_tensor *s = tu_rand_tensor(ctx, &r, all[k], TU_S(3, 4), -100, 100, b);
        cr_assert_eq(kiln_assign(x, s), KILN_OK);
        TU_EXPECT_EXACT(x, all[k], b, 12);
    }
}

TU_TEST(assign, realized_by_sync) {
    kiln_tensor *x = kiln_zeros(ctx, KILN_F64, TU_S(4));
    kiln_tensor *y = kiln_arange(ctx, KILN_F64, 0, 4, 1);
    cr_assert_eq(kiln_assign(x, kiln_exp(y)), KILN_OK);
    cr_assert_eq(kiln_sync(ctx), KILN_OK);
    TU_EXPECT_NEAR_VALS(x, KILN_F64, 1, exp(1.0), exp(2.0), exp(3.0));
    /* a sync with nothing pending is fine */
    cr_assert_eq(kiln_sync(ctx), KILN_OK);
}

TU_TEST(assign, realized_by_unrelated_realize) {
    kiln_tensor *x = kiln_zeros(ctx, KILN_I32, TU_S(3));
    kiln_tensor *src = kiln_add_scalar(kiln_arange(ctx, KILN_I32, 0, 3, 1), 10);
    cr_assert_eq(kiln_assign(x, src), KILN_OK);
    kiln_tensor *other = kiln_mul_scalar(kiln_ones(ctx, KILN_F32, TU_S(2)), 3);
    cr_assert_eq(kiln_realize(other), KILN_OK);
    /* the sources of the assignment can go now: the value is computed */
    kiln_release(src);
    TU_EXPECT_VALS(x, KILN_I32, 10, 11, 12);
    TU_EXPECT_VALS(other, KILN_F32, 3, 3);

    /* through kiln_to_host and kiln_item of unrelated tensors too */
    kiln_tensor *z = kiln_zeros(ctx, KILN_F32, TU_S(2));
    cr_assert_eq(kiln_assign(z, kiln_full(ctx, KILN_F32, TU_S(2), 7)), KILN_OK);
    float buf[2];
    cr_assert_eq(kiln_to_host(other, buf, sizeof buf), KILN_OK);
    TU_EXPECT_VALS(z, KILN_F32, 7, 7);
    kiln_tensor *w = kiln_zeros(ctx, KILN_F32, TU_S(1));
    cr_assert_eq(kiln_assign(w, kiln_scalar(ctx, KILN_F32, -2)), KILN_OK);
    cr_assert_eq(TU_ITEM(kiln_scalar(ctx, KILN_F32, 1)), 1);
    TU_EXPECT_VALS(w, KILN_F32, -2);
}

TU_TEST(assign, derived_tensors_keep_old_value) {
    kiln_tensor *x = kiln_arange(ctx, KILN_F32, 0, 4, 1);
    kiln_tensor *before = kiln_add_scalar(x, 1);
    kiln_tensor *view = kiln_reshape(x, TU_S(2, 2));
    kiln_tensor *red = kiln_sum(x, 0, NULL, false);
    cr_assert_eq(kiln_assign(x, kiln_full(ctx, KILN_F32, TU_S(4), 10)), KILN_OK);
    kiln_tensor *after = kiln_add_scalar(x, 1);
    TU_EXPECT_VALS(before, KILN_F32, 1, 2, 3, 4);
    TU_EXPECT_VALS(view, KILN_F32, 0, 1, 2, 3);
    TU_EXPECT_VALS(red, KILN_F32, 6);
    TU_EXPECT_VALS(x, KILN_F32, 10, 10, 10, 10);
    TU_EXPECT_VALS(after, KILN_F32, 11, 11, 11, 11);

    /* the same holds when the old value was already realized */
    kiln_tensor *y = kiln_full(ctx, KILN_I64, TU_S(2), 3);
    cr_assert_eq(kiln_realize(y), KILN_OK);
    kiln_tensor *yy = kiln_mul(y, y);
    cr_assert_eq(kiln_realize(yy), KILN_OK);
    cr_assert_eq(kiln_assign(y, kiln_full(ctx, KILN_I64, TU_S(2), 5)), KILN_OK);
    TU_EXPECT_VALS(y, KILN_I64, 5, 5);
    TU_EXPECT_VALS(yy, KILN_I64, 9, 9);
    TU_EXPECT_VALS(kiln_mul(y, y), KILN_I64, 25, 25);
}

TU_TEST(assign, from_itself) {
    kiln_tensor *x = kiln_arange(ctx, KILN_F64, 1, 4, 1);
    cr_assert_eq(kiln_assign(x, kiln_mul_scalar(x, 2)), KILN_OK);
    cr_assert_eq(kiln_assign(x, kiln_mul_scalar(x, 2)), KILN_OK);
    TU_EXPECT_VALS(x, KILN_F64, 4, 8, 12);
    cr_assert_eq(kiln_assign(x, kiln_add(x, kiln_flip(x, 0, NULL))), KILN_OK);
    TU_EXPECT_VALS(x, KILN_F64, 16, 16, 16);
    /* a training-like loop: w -= 0.5 * w, ten times, synced each time */
    kiln_tensor *w = kiln_full(ctx, KILN_F32, TU_S(2, 2), 1024);
    for (int i = 0; i < 10; i++) {
        kiln_scope_begin(ctx);
        cr_assert_eq(kiln_assign(w, kiln_sub(w, kiln_mul_scalar(w, 0.5))), KILN_OK);
        cr_assert_eq(kiln_sync(ctx), KILN_OK);
        kiln_scope_end(ctx);
    }
    TU_EXPECT_VALS(w, KILN_F32, 1, 1, 1, 1);
}

TU_TEST(assign, last_assignment_wins) {
    kiln_tensor *x = kiln_zeros(ctx, KILN_F32, TU_S(2));
    cr_assert_eq(kiln_assign(x, kiln_full(ctx, KILN_F32, TU_S(2), 1)), KILN_OK);
    cr_assert_eq(kiln_assign(x, kiln_full(ctx, KILN_F32, TU_S(2), 2)), KILN_OK);
    cr_assert_eq(kiln_assign(x, kiln_full(ctx, KILN_F32, TU_S(2), 3)), KILN_OK);
    cr_assert_eq(kiln_sync(ctx), KILN_OK);
    TU_EXPECT_VALS(x, KILN_F32, 3, 3);
}

TU_TEST(assign, broadcast_and_cast) {
    kiln_tensor *x = kiln_zeros(ctx, KILN_F32, TU_S(2, 3));
    kiln_tensor *row = tu_tensor(ctx, KILN_I32, TU_S(3), (double[]){1, -2, 3});
    cr_assert_eq(kiln_assign(x, row), KILN_OK);
    TU_ASSERT_SHAPE(x, 2, 3);
    TU_EXPECT_VALS(x, KILN_F32, 1, -2, 3, 1, -2, 3);
    kiln_tensor *col = tu_tensor(ctx, KILN_F64, TU_S(2, 1), (double[]){0.5, 1e40});
    cr_assert_eq(kiln_assign(x, col), KILN_OK);
    TU_EXPECT_VALS(x, KILN_F32, 0.5, 0.5, 0.5, INFINITY, INFINITY, INFINITY);

    /* float to integer truncates and saturates, as kiln_cast */
    kiln_tensor *i = kiln_zeros(ctx, KILN_I32, TU_S(2, 2));
    cr_assert_eq(kiln_assign(i, kiln_scalar(ctx, KILN_F64, -2.7)), KILN_OK);
    TU_ASSERT_DTYPE(i, KILN_I32);
    TU_EXPECT_VALS(i, KILN_I32, -2, -2, -2, -2);
    kiln_tensor *u = kiln_zeros(ctx, KILN_U8, TU_S(4));
    cr_assert_eq(kiln_assign(u, tu_tensor(ctx, KILN_F32, TU_S(4), (double[]){300.5, -1, NAN, 7.9})),
                 KILN_OK);
    TU_EXPECT_VALS(u, KILN_U8, 255, 0, 0, 7);
    kiln_tensor *b = kiln_zeros(ctx, KILN_BOOL, TU_S(3));
    cr_assert_eq(kiln_assign(b, tu_tensor(ctx, KILN_F32, TU_S(3), (double[]){0, -0.5, NAN})),
                 KILN_OK);
    TU_EXPECT_VALS(b, KILN_BOOL, 0, 1, 1);
    kiln_tensor *h = kiln_zeros(ctx, KILN_F16, TU_S(2));
    cr_assert_eq(kiln_assign(h, tu_tensor(ctx, KILN_F32, TU_S(2), (double[]){65520, 0.1})),
                 KILN_OK);
    TU_EXPECT_VALS(h, KILN_F16, INFINITY, tu_round(KILN_F16, 0.1));
    kiln_tensor *w = kiln_zeros(ctx, KILN_I32, TU_S(2));
    const int64_t big[2] = {4294967297ll, -1};
    cr_assert_eq(kiln_assign(w, tu_tensor_i64(ctx, KILN_I64, TU_S(2), big)), KILN_OK);
    TU_EXPECT_VALS(w, KILN_I32, 1, -1);
    /* 0-d and empty */
    kiln_tensor *s = kiln_scalar(ctx, KILN_BF16, 0);
    cr_assert_eq(kiln_assign(s, kiln_scalar(ctx, KILN_I64, 3)), KILN_OK);
    cr_assert_eq(TU_ITEM(s), 3);
    kiln_tensor *e = kiln_zeros(ctx, KILN_F32, TU_S(0, 2));
    cr_assert_eq(kiln_assign(e, kiln_ones(ctx, KILN_F32, TU_S(2))), KILN_OK);
    TU_ASSERT_SHAPE(e, 0, 2);
    cr_assert_eq(kiln_sync(ctx), KILN_OK);
}

TU_TEST(assign, from_a_view) {
    TU_RNG(r);
    double a[12];
    kiln_tensor *src = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 4), -5, 5, a);
    kiln_tensor *x = kiln_zeros(ctx, KILN_F64, TU_S(4, 3));
    cr_assert_eq(kiln_assign(x, kiln_flip(kiln_transpose(src, 0, 1), TU_AXES(0))), KILN_OK);
    double w[12];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            w[i * 3 + j] = a[j * 4 + (3 - i)];
    TU_EXPECT_EXACT(x, KILN_F64, w, 12);
}

TU_TEST(assign, survives_scope_of_src) {
    kiln_tensor *x = kiln_zeros(ctx, KILN_F32, TU_S(3));
    kiln_scope_begin(ctx);
    kiln_tensor *t = kiln_arange(ctx, KILN_F32, 5, 8, 1);
    cr_assert_eq(kiln_assign(x, kiln_mul_scalar(t, 2)), KILN_OK);
    kiln_scope_end(ctx);
    TU_EXPECT_VALS(x, KILN_F32, 10, 12, 14);
}

TU_TEST(assign, errors_leave_dst_unchanged) {
    kiln_tensor *x = kiln_arange(ctx, KILN_F32, 0, 6, 1);
    kiln_tensor *x2 = kiln_reshape(x, TU_S(2, 3));
    /* a src that does not broadcast to dst's shape */
    cr_assert_eq(kiln_assign(x2, kiln_ones(ctx, KILN_F32, TU_S(4))), KILN_ERR_SHAPE);
    cr_assert_eq(kiln_assign(x2, kiln_ones(ctx, KILN_F32, TU_S(3, 3))), KILN_ERR_SHAPE);
    /* nor may it make dst bigger */
    cr_assert_eq(kiln_assign(x2, kiln_ones(ctx, KILN_F32, TU_S(4, 2, 3))), KILN_ERR_SHAPE);
    cr_assert_eq(kiln_assign(x2, kiln_ones(ctx, KILN_F32, TU_S(1, 2, 3))), KILN_ERR_SHAPE);
    TU_ASSERT_OK(x2);
    TU_ASSERT_SHAPE(x2, 2, 3);
    TU_EXPECT_VALS(x2, KILN_F32, 0, 1, 2, 3, 4, 5);
    cr_assert_eq(kiln_sync(ctx), KILN_OK);
    TU_EXPECT_VALS(x2, KILN_F32, 0, 1, 2, 3, 4, 5);
}

TU_TEST(assign, error_src_leaves_dst_unchanged) {
    kiln_tensor *x = kiln_arange(ctx, KILN_F32, 0, 3, 1);
    kiln_tensor *bad = kiln_neg(kiln_ones(ctx, KILN_BOOL, TU_S(3)));
    cr_assert_eq(kiln_assign(x, bad), KILN_ERR_DTYPE);
    cr_assert_eq(kiln_assign(x, NULL), KILN_ERR_ARG);
    TU_ASSERT_OK(x);
    TU_EXPECT_VALS(x, KILN_F32, 0, 1, 2);
    /* an error handle as dst stays an error */
    kiln_tensor *e = kiln_add(x, kiln_ones(ctx, KILN_F32, TU_S(2)));
    cr_assert_neq(kiln_assign(e, x), KILN_OK);
    cr_assert_neq(kiln_error(e), KILN_OK);
    cr_assert_eq(kiln_sync(ctx), KILN_OK);
    TU_EXPECT_VALS(x, KILN_F32, 0, 1, 2);
}

TU_TEST(assign, in_eager_and_lazy_give_the_same) {
    /* switch mode between the assignment and the read */
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2));
    cr_assert_eq(kiln_assign(x, kiln_add_scalar(x, 1)), KILN_OK);
    kiln_ctx_set_mode(ctx, kiln_ctx_mode(ctx) == KILN_LAZY ? KILN_EAGER : KILN_LAZY);
    cr_assert_eq(kiln_assign(x, kiln_mul_scalar(x, 3)), KILN_OK);
    TU_EXPECT_VALS(x, KILN_F32, 6, 6);
}
