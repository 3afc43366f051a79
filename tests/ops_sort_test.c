/* ops_sort_test.c — kiln_sort, kiln_argsort and kiln_topk on every executor:
 * against a stable insertion sort done here (with ties and NaN), along the
 * last axis and an inner one, ascending and descending, for floats,
 * integers and bool. */
#include "test_util.h"

/* Whether a sorts strictly before b (NaN last ascending, first descending). */
static bool before(double a, double b, bool desc) {
    if (isnan(a) || isnan(b))
        return desc ? isnan(a) && !isnan(b) : !isnan(a) && isnan(b);
    return desc ? a > b : a < b;
}

/* A stable sort of the rows of a [rows, n] array: values and indices. */
static void ref_sort(const double *x, int rows, int n, bool desc, double *v, double *idx) {
    for (int r = 0; r < rows; r++) {
        int order[64];
        for (int i = 0; i < n; i++) {
            int j = i;
            while (j > 0 && before(x[r * n + i], x[r * n + order[j - 1]], desc)) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
        for (int i = 0; i < n; i++) {
            v[r * n + i] = x[r * n + order[i]];
            idx[r * n + i] = order[i];
        }
    }
}

TU_TEST(sort, rows_with_ties_and_nan) {
    TU_RNG(r);
    const int lens[] = {1, 5, 8, 13};
    for (size_t q = 0; q < sizeof lens / sizeof *lens; q++) {
        int n = lens[q];
        double x[3 * 13], v[3 * 13], idx[3 * 13];
        /* few distinct values, so that ties are common; a NaN or two */
        for (int i = 0; i < 3 * n; i++)
            x[i] = (double)tu_int(&r, -3, 3) * 0.5;
        if (n > 2) {
            x[1] = NAN;
            x[2 * n - 1] = NAN;
        }
        kiln_tensor *t = tu_tensor(ctx, KILN_F32, TU_S(3, n), x);
        for (int desc = 0; desc < 2; desc++) {
            ref_sort(x, 3, n, desc, v, idx);
            TU_EXPECT_EXACT(kiln_sort(t, 1, desc), KILN_F32, v, 3 * n);
            TU_EXPECT_EXACT(kiln_argsort(t, -1, desc), KILN_I64, idx, 3 * n);
        }
    }
}

TU_TEST(sort, inner_axis_integers_bool) {
    TU_RNG(r);
    /* axis 0 of [6, 2]: sort the columns */
    double x[12], xt[12], v[12], idx[12], want_v[12], want_i[12];
    for (int i = 0; i < 12; i++)
        x[i] = (double)tu_int(&r, -1000, 1000);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 2; j++)
            xt[j * 6 + i] = x[i * 2 + j];
    ref_sort(xt, 2, 6, false, v, idx);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 2; j++) {
            want_v[i * 2 + j] = v[j * 6 + i];
            want_i[i * 2 + j] = idx[j * 6 + i];
        }
    kiln_tensor *t = tu_tensor(ctx, KILN_I32, TU_S(6, 2), x);
    TU_EXPECT_EXACT(kiln_sort(t, 0, false), KILN_I32, want_v, 12);
    TU_EXPECT_EXACT(kiln_argsort(t, 0, false), KILN_I64, want_i, 12);
    /* i64 beyond 2^53, where doubles would tie */
    kiln_tensor *big = tu_tensor_i64(ctx, KILN_I64, TU_S(3),
                                     (int64_t[]){INT64_MAX, INT64_MAX - 1, INT64_MIN});
    TU_EXPECT_I64(kiln_sort(big, 0, false), KILN_I64, ((int64_t[]){INT64_MIN, INT64_MAX - 1, INT64_MAX}), 3);
    /* bool: false first, stable */
    kiln_tensor *b = tu_tensor(ctx, KILN_BOOL, TU_S(5), (double[]){1, 0, 1, 0, 0});
    TU_EXPECT_VALS(kiln_sort(b, 0, false), KILN_BOOL, 0, 0, 0, 1, 1);
    TU_EXPECT_VALS(kiln_argsort(b, 0, true), KILN_I64, 0, 2, 1, 3, 4);
    TU_ASSERT_ERROR(kiln_sort(kiln_scalar(ctx, KILN_F32, 1), 0, false), KILN_ERR_SHAPE, "kiln_sort");
    TU_ASSERT_ERROR(kiln_argsort(t, 2, false), KILN_ERR_ARG, "kiln_argsort");
    TU_ASSERT_SHAPE(kiln_sort(kiln_zeros(ctx, KILN_F32, TU_S(2, 0)), 1, false), 2, 0);
}

TU_TEST(sort, topk) {
    TU_RNG(r);
    double x[4 * 9], v[4 * 9], idx[4 * 9], wv[4 * 3], wi[4 * 3];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(4, 9), -5, 5, x);
    for (int largest = 0; largest < 2; largest++) {
        ref_sort(x, 4, 9, largest, v, idx);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 3; j++) {
                wv[i * 3 + j] = v[i * 9 + j];
                wi[i * 3 + j] = idx[i * 9 + j];
            }
        kiln_tensor *ind;
        TU_EXPECT_EXACT(kiln_topk(t, 3, 1, largest, &ind), KILN_F64, wv, 12);
        TU_EXPECT_EXACT(ind, KILN_I64, wi, 12);
    }
    TU_ASSERT_SHAPE(kiln_topk(t, 0, 1, true, NULL), 4, 0);
    TU_ASSERT_ERROR(kiln_topk(t, 10, 1, true, NULL), KILN_ERR_ARG, "kiln_topk");
    /* the gradient of the values goes back to where each came from */
    if (tu_cur_exec()->mode == KILN_LAZY) {
        kiln_tensor *w = tu_tensor(ctx, KILN_F64, TU_S(5), (double[]){3, -1, 4, 1, 5});
        kiln_requires_grad(w, true);
        kiln_tensor *s = kiln_sort(w, 0, false); /* -1 1 3 4 5 */
        kiln_tensor *weights = tu_tensor(ctx, KILN_F64, TU_S(5), (double[]){10, 20, 30, 40, 50});
        cr_assert_eq(kiln_backward(kiln_sum(kiln_mul(s, weights), 0, NULL, false)), KILN_OK);
        TU_EXPECT_VALS(kiln_grad(w), KILN_F64, 30, 10, 40, 20, 50);
    }
}

/* A sorting network read by a row kernel after it: a reduction over an axis
 * of size 1 (or over no axes) makes a row kernel, in which shared nodes are
 * recomputed per pass; each stage reads the one before at two indices, so
 * without emission's repeat limit (lower/emit.c EMIT_REPEAT_LIMIT) the three
 * networks below lower to 2^18 copies of the first stage (found by the
 * api_sequence fuzzer: tests/fuzz/crashers/api_sequence/). Ranks twice: the
 * ranks of ranks are the ranks. */
TU_TEST(sort, networks_through_a_row_kernel) {
    TU_RNG(r);
    double x[8], v[8], idx[8], rank[8];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(8), -5, 5, x);
    ref_sort(x, 1, 8, false, v, idx);
    for (int i = 0; i < 8; i++)
        rank[(int)idx[i]] = i;
    kiln_tensor *ranks = kiln_argsort(kiln_argsort(t, 0, false), 0, false);
    kiln_tensor *rows = kiln_sum(kiln_reshape(ranks, 2, (int64_t[]){8, 1}), 1, (int[]){1}, false);
    TU_EXPECT_EXACT(rows, KILN_I64, rank, 8);
    TU_EXPECT_EXACT(kiln_argsort(kiln_argsort(rows, 0, false), 0, false), KILN_I64, rank, 8);
    kiln_tensor *none = kiln_sum(ranks, 0, (int[]){0}, true); /* no axes: the identity */
    TU_EXPECT_EXACT(kiln_argsort(kiln_argsort(none, 0, false), 0, false), KILN_I64, rank, 8);
}

/* An empty tensor with a long axis (2^43 beside a 0): nothing to order, so
 * no network — which would be ~950 stages for the scheduler to cut, seconds
 * per sort (found by the api_sequence fuzzer, timing out on five chained
 * sorts: tests/fuzz/crashers/api_sequence/). The results keep the shape;
 * the indices are i64; a chain of them realizes at once. */
TU_TEST(sort, empty_tensor_with_a_long_axis) {
    const int64_t big = (int64_t)1 << 43;
    kiln_tensor *z = kiln_zeros(ctx, KILN_F32, 3, TU_DIMS(big, 1, 0));
    kiln_tensor *s = z, *ind = NULL;
    for (int i = 0; i < 5; i++)
        s = kiln_sort(s, 0, i & 1);
    TU_ASSERT_SHAPE(s, big, 1, 0);
    TU_ASSERT_SHAPE(kiln_argsort(z, 0, false), big, 1, 0);
    cr_assert_eq(kiln_dtype_of(kiln_argsort(z, 0, false)), KILN_I64);
    TU_ASSERT_SHAPE(kiln_topk(z, 3, 0, true, &ind), 3, 1, 0);
    TU_ASSERT_SHAPE(ind, 3, 1, 0);
    cr_assert_eq(kiln_realize(s), KILN_OK, "[%s] %s", tu_exec_name(), kiln_error_message(s));
    cr_assert_eq(kiln_realize(ind), KILN_OK, "[%s] %s", tu_exec_name(), kiln_error_message(ind));
}
