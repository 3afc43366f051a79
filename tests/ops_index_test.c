/* ops_index_test.c — kiln_gather, kiln_index_select, kiln_scatter_add and
 * kiln_pad_mode on every executor, against values computed here. */
#include "test_util.h"

TU_TEST(index, gather) {
    TU_RNG(r);
    /* t [3, 5]; index [2, 4] along axis 1 (the index has fewer rows) */
    double x[15], want[8], idx[8];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(3, 5), -5, 5, x);
    for (int i = 0; i < 8; i++)
        idx[i] = (double)tu_int(&r, 0, 4);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            want[i * 4 + j] = x[i * 5 + (int)idx[i * 4 + j]];
    kiln_tensor *it = tu_tensor(ctx, KILN_I64, TU_S(2, 4), idx);
    TU_EXPECT(kiln_gather(t, 1, it), KILN_F32, want, 8);
    /* along axis 0, i32 indices, an integer dtype */
    kiln_tensor *ti = tu_tensor(ctx, KILN_I32, TU_S(3, 2), (double[]){1, -2, 3, -4, 5, -6});
    kiln_tensor *i0 = tu_tensor(ctx, KILN_I32, TU_S(2, 2), (double[]){2, 0, 1, 2});
    TU_EXPECT_VALS(kiln_gather(ti, 0, i0), KILN_I32, 5, -2, 3, -6);
    /* NaN elsewhere in the row does not leak into a picked value */
    kiln_tensor *tn = tu_tensor(ctx, KILN_F32, TU_S(3), (double[]){NAN, 7, INFINITY});
    TU_EXPECT_VALS(kiln_gather(tn, 0, tu_tensor(ctx, KILN_U8, TU_S(2), (double[]){1, 2})), KILN_F32,
                   7, INFINITY);
    /* a realized index out of range, a bad dtype, a shape too large */
    TU_ASSERT_ERROR(kiln_gather(t, 1, tu_tensor(ctx, KILN_I64, TU_S(1, 1), (double[]){5})),
                    KILN_ERR_ARG, "kiln_gather");
    TU_ASSERT_ERROR(kiln_gather(t, 1, kiln_zeros(ctx, KILN_F32, TU_S(1, 1))), KILN_ERR_DTYPE,
                    "kiln_gather");
    TU_ASSERT_ERROR(kiln_gather(t, 1, kiln_zeros(ctx, KILN_I64, TU_S(4, 1))), KILN_ERR_SHAPE,
                    "kiln_gather");
}

TU_TEST(index, index_select_and_scatter_add) {
    TU_RNG(r);
    double x[12];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 4), -5, 5, x);
    /* rows 2, 0, 2 */
    double sel[12];
    const int rows[3] = {2, 0, 2};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            sel[i * 4 + j] = x[rows[i] * 4 + j];
    kiln_tensor *v = tu_tensor(ctx, KILN_I64, TU_S(3), (double[]){2, 0, 2});
    TU_EXPECT(kiln_index_select(t, 0, v), KILN_F64, sel, 12);
    TU_ASSERT_ERROR(kiln_index_select(t, 0, kiln_zeros(ctx, KILN_I64, TU_S(1, 1))), KILN_ERR_SHAPE,
                    "kiln_index_select");
    /* scatter_add along axis 1 with repeated indices: they accumulate */
    double s[6], want[12];
    kiln_tensor *src = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 3), -5, 5, s);
    const int id[6] = {3, 3, 0, 1, 1, 1};
    memcpy(want, x, sizeof want);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            want[i * 4 + id[i * 3 + j]] += s[i * 3 + j];
    kiln_tensor *it = tu_tensor(ctx, KILN_I32, TU_S(2, 3), (double[]){3, 3, 0, 1, 1, 1});
    TU_EXPECT(kiln_scatter_add(t, 1, it, src), KILN_F64, want, 12);
    TU_ASSERT_ERROR(kiln_scatter_add(t, 1, it, kiln_zeros(ctx, KILN_F64, TU_S(2, 2))),
                    KILN_ERR_SHAPE, "kiln_scatter_add");
}

TU_TEST(index, pad_modes) {
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, TU_S(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    const int64_t p1[] = {0, 0, 2, 1};
    TU_EXPECT_VALS(kiln_pad_mode(t, p1, KILN_PAD_REFLECT), KILN_F32, 3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5);
    TU_EXPECT_VALS(kiln_pad_mode(t, p1, KILN_PAD_REPLICATE), KILN_F32, 1, 1, 1, 2, 3, 3, 4, 4, 4, 5, 6, 6);
    TU_EXPECT_VALS(kiln_pad_mode(t, p1, KILN_PAD_CIRCULAR), KILN_F32, 2, 3, 1, 2, 3, 1, 5, 6, 4, 5, 6, 4);
    /* both axes at once */
    const int64_t p2[] = {1, 0, 0, 1};
    TU_EXPECT_VALS(kiln_pad_mode(t, p2, KILN_PAD_REFLECT), KILN_F32, 4, 5, 6, 5, 1, 2, 3, 2, 4, 5, 6, 5);
    TU_ASSERT_SHAPE(kiln_pad_mode(t, p2, KILN_PAD_CIRCULAR), 3, 4);
    const int64_t bad[] = {0, 0, 3, 0};
    TU_ASSERT_ERROR(kiln_pad_mode(t, bad, KILN_PAD_REFLECT), KILN_ERR_ARG, "kiln_pad_mode");
    TU_ASSERT_ERROR(kiln_pad_mode(t, p1, (kiln_padding)9), KILN_ERR_ARG, "kiln_pad_mode");
}
