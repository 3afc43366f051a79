/* ops_index_test.c — kiln_gather, kiln_index_select, kiln_scatter_add and
 * kiln_pad_mode on every executor, against values computed here; the gather
 * kernel (GRAPH_GATHER): every index dtype and axis, fused with elementwise
 * work (kernels counted on cpu/lazy), lazily computed indices out of range
 * reading 0, and large tables (embedding rows, long axes); the scatter
 * kernel (GRAPH_SCATTER): every combination with duplicates and NaN, lazy
 * indices out of range writing nothing, and an embedding gradient over a
 * vocabulary too large for a comparison with every row. */
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

/* The element of x [n0, n1, n2] that a gather along ax picks for result
 * element (i, j, k) of an index shaped `is`, or 0 out of range. */
static double gather_ref(const double *x, const int64_t *xs, const int64_t *idx,
                         const int64_t *is, int ax, int64_t i, int64_t j, int64_t k) {
    int64_t c[3] = {i, j, k};
    int64_t v = idx[(i * is[1] + j) * is[2] + k];
    if (v < 0 || v >= xs[ax])
        return 0;
    c[ax] = v;
    return x[(c[0] * xs[1] + c[1]) * xs[2] + c[2]];
}

TU_TEST(index, gather_every_axis_and_index_dtype) {
    TU_RNG(r);
    const int64_t xs[3] = {4, 9, 3}, is[3] = {3, 6, 2};
    static double x[4 * 9 * 3], want[3 * 6 * 2];
    int64_t idx[3 * 6 * 2];
    const kiln_dtype data[3] = {KILN_F64, KILN_F32, KILN_I32};
    const kiln_dtype dts[3] = {KILN_I32, KILN_I64, KILN_U8};
    for (int dk = 0; dk < 3; dk++) {
        kiln_tensor *t = tu_rand_tensor(ctx, &r, data[dk], 3, xs, -50, 50, x);
        for (int ax = 0; ax < 3; ax++)
            for (int k = 0; k < 3; k++) {
                for (int e = 0; e < 36; e++)
                    idx[e] = tu_int(&r, 0, xs[ax] - 1);
                for (int64_t a = 0; a < is[0]; a++)
                    for (int64_t b = 0; b < is[1]; b++)
                        for (int64_t c = 0; c < is[2]; c++)
                            want[(a * is[1] + b) * is[2] + c] = gather_ref(x, xs, idx, is, ax, a, b, c);
                /* the index may be longer than the axis */
                kiln_tensor *i = tu_tensor_i64(ctx, dts[k], 3, is, idx);
                kiln_tensor *g = kiln_gather(t, ax, i);
                TU_ASSERT_SHAPE(g, 3, 6, 2);
                TU_EXPECT_EXACT(g, data[dk], want, 36);
            }
    }
}

/* kiln_ctx_stats' kernels for realizing t (cpu/lazy is the executor whose
 * count the scheduler decides; -1 on the others). */
static int64_t kernels_of(kiln_ctx *ctx, kiln_tensor *t) {
    int64_t before = kiln_ctx_stats(ctx).kernels;
    cr_assert_eq(kiln_realize(t), KILN_OK, "[%s] %s", tu_exec_name(), kiln_ctx_last_error(ctx));
    return strcmp(tu_exec_name(), "cpu/lazy") ? -1 : kiln_ctx_stats(ctx).kernels - before;
}

TU_TEST(index, gather_fuses_and_lazy_indices_out_of_range_read_zero) {
    TU_RNG(r);
    enum { R = 5, K = 40, J = 12 };
    static double x[R * K], want[R * J], want2[R * J];
    int64_t raw[R * J];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(R, K), -2, 2, x);
    for (int e = 0; e < R * J; e++)
        raw[e] = tu_int(&r, 0, 20);
    raw[0] = 3;  /* 3 * 3 - 10 = -1 */
    raw[1] = 17; /* 41 */
    raw[2] = 16; /* 38 */
    /* the index is computed lazily (no check), some of it outside [0, K) */
    kiln_tensor *ri = tu_tensor_i64(ctx, KILN_I32, TU_S(R, J), raw);
    kiln_tensor *idx = kiln_sub_scalar(kiln_mul_scalar(ri, 3), 10);
    cr_assert_eq(kiln_dtype_of(idx), KILN_I32);
    if (kiln_ctx_mode(ctx) == KILN_EAGER) {
        /* eager mode computed the index already: it is checked */
        TU_ASSERT_ERROR(kiln_gather(t, 1, idx), KILN_ERR_ARG, "kiln_gather", "-1");
        return;
    }
    int outside = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < J; j++) {
            int64_t v = raw[i * J + j] * 3 - 10;
            bool in = v >= 0 && v < K;
            outside += !in;
            double g = in ? (double)(float)x[i * K + v] : 0;
            want[i * J + j] = tanh(g) * 2 + 1;
            want2[i * J + j] = in ? exp((double)(float)x[i * K + v]) : 0;
        }
    cr_assert(outside >= 2);
    /* work on the index before, on the result after: one kernel */
    kiln_tensor *y = kiln_add_scalar(kiln_mul_scalar(kiln_tanh(kiln_gather(t, 1, idx)), 2), 1);
    int64_t n = kernels_of(ctx, y);
    cr_assert(n < 0 || n == 1, "gather with work before and after ran as %lld kernels",
              (long long)n);
    TU_EXPECT(y, KILN_F32, want, R * J);
    /* work on the data before: it is computed first (its own kernel) */
    kiln_tensor *z = kiln_gather(kiln_exp(t), 1, idx);
    n = kernels_of(ctx, z);
    cr_assert(n < 0 || n == 2, "gather of exp ran as %lld kernels", (long long)n);
    TU_EXPECT(z, KILN_F32, want2, R * J);
    /* a gather of a broadcast constant: out-of-range elements are still 0 */
    kiln_tensor *c = kiln_gather(kiln_full(ctx, KILN_F32, TU_S(R, K), 2.5), 1, idx);
    for (int e = 0; e < R * J; e++) {
        int64_t v = raw[e] * 3 - 10;
        want2[e] = v >= 0 && v < K ? 2.5 : 0;
    }
    TU_EXPECT_EXACT(c, KILN_F32, want2, R * J);
}

TU_TEST(index, index_select_and_embedding_of_large_tables) {
    TU_RNG(r);
    enum { V = 3000, D = 16, T = 20 };
    static double w[V * D], want[T * D];
    int64_t idx[T];
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(V, D), -1, 1, w);
    for (int i = 0; i < T; i++)
        idx[i] = tu_int(&r, 0, V - 1);
    idx[0] = 0;
    idx[1] = V - 1;
    idx[2] = idx[3];
    for (int i = 0; i < T; i++)
        for (int d = 0; d < D; d++)
            want[i * D + d] = w[idx[i] * D + d];
    kiln_tensor *e = kiln_embedding(tu_tensor_i64(ctx, KILN_I64, TU_S(4, 5), idx), tw);
    TU_ASSERT_SHAPE(e, 4, 5, D);
    TU_EXPECT_EXACT(e, KILN_F32, want, T * D);
    /* index_select of columns of the transposed table: the same rows */
    kiln_tensor *cols = kiln_index_select(kiln_transpose(tw, 0, 1), 1,
                                          tu_tensor_i64(ctx, KILN_I32, TU_S(T), idx));
    TU_EXPECT_EXACT(kiln_transpose(cols, 0, 1), KILN_F32, want, T * D);
    /* lazily computed indices: those outside [0, V) give rows of zeros */
    kiln_tensor *shifted = kiln_add_scalar(tu_tensor_i64(ctx, KILN_I64, TU_S(T), idx), -1);
    for (int i = 0; i < T; i++)
        for (int d = 0; d < D; d++)
            want[i * D + d] = idx[i] >= 1 ? w[(idx[i] - 1) * D + d] : 0;
    if (kiln_ctx_mode(ctx) == KILN_EAGER) /* computed already, so checked */
        TU_ASSERT_ERROR(kiln_embedding(shifted, tw), KILN_ERR_ARG, "kiln_embedding", "-1");
    else
        TU_EXPECT_EXACT(kiln_embedding(shifted, tw), KILN_F32, want, T * D);
    /* u8 indices into more than 256 rows (every u8 value is in range) */
    int64_t small[6] = {255, 0, 7, 255, 128, 1};
    for (int i = 0; i < 6; i++)
        for (int d = 0; d < D; d++)
            want[i * D + d] = w[small[i] * D + d];
    TU_EXPECT_EXACT(kiln_embedding(tu_tensor_i64(ctx, KILN_U8, TU_S(6), small), tw), KILN_F32,
                    want, 6 * D);
    /* realized indices out of range are errors, for index_select too */
    TU_ASSERT_ERROR(kiln_index_select(tw, 0, tu_tensor_i64(ctx, KILN_I64, TU_S(2), (int64_t[]){1, V})),
                    KILN_ERR_ARG, "kiln_index_select", "3000");
    TU_ASSERT_ERROR(kiln_embedding(tu_tensor_i64(ctx, KILN_I32, TU_S(1), (int64_t[]){-1}), tw),
                    KILN_ERR_ARG, "kiln_embedding");
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

/* kiln_scatter and kiln_scatter_reduce against a loop that applies the
 * index element by element (PyTorch's definition), along either axis of a
 * [4, 5] target with a [3, 3] index (repeats and untouched places), with and
 * without the target's own values; NaN for amax; integer means round down. */
static double combine(int reduce, double acc, double v) {
    switch (reduce) {
    case KILN_SCATTER_SUM:
    case KILN_SCATTER_MEAN: return acc + v;
    case KILN_SCATTER_PROD: return acc * v;
    case KILN_SCATTER_AMAX: return isnan(acc) || isnan(v) ? NAN : fmax(acc, v);
    default: return isnan(acc) || isnan(v) ? NAN : fmin(acc, v);
    }
}

static void ref_scatter(const double *t, const double *idx, const double *src, int axis,
                        int reduce, bool self, bool integer, double *out) {
    double acc[20];
    int n[20] = {0};
    for (int i = 0; i < 20; i++)
        acc[i] = t[i], out[i] = t[i];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            int r = axis == 0 ? (int)idx[i * 3 + j] : i, c = axis == 0 ? j : (int)idx[i * 3 + j];
            int at = r * 5 + c;
            double v = src[i * 4 + j]; /* src is [3, 4]: cut to the index's [3, 3] */
            if (reduce < 0) {
                out[at] = v;
                continue;
            }
            acc[at] = n[at] == 0 && !self ? v : combine(reduce, acc[at], v);
            n[at]++;
        }
    if (reduce < 0)
        return;
    for (int i = 0; i < 20; i++) {
        if (!n[i])
            continue;
        if (reduce == KILN_SCATTER_MEAN) {
            double cnt = n[i] + (self ? 1 : 0);
            acc[i] = integer ? floor(acc[i] / cnt) : acc[i] / cnt;
        }
        out[i] = acc[i];
    }
}

TU_TEST(index, scatter_and_scatter_reduce) {
    TU_RNG(r);
    double t[20], src[12], want[20];
    const double idx0[9] = {3, 0, 3, 1, 0, 3, 3, 2, 0}; /* along axis 0: rows of [4, 5] */
    const double idx1[9] = {4, 4, 0, 2, 1, 2, 0, 0, 0}; /* along axis 1: columns */
    kiln_tensor *it0 = tu_tensor(ctx, KILN_I64, TU_S(3, 3), idx0);
    kiln_tensor *it1 = tu_tensor(ctx, KILN_I32, TU_S(3, 3), idx1);
    for (int integer = 0; integer < 2; integer++) {
        kiln_dtype dt = integer ? KILN_I32 : KILN_F64;
        kiln_tensor *tt = tu_rand_tensor(ctx, &r, dt, TU_S(4, 5), -4, 4, t);
        kiln_tensor *ts = tu_rand_tensor(ctx, &r, dt, TU_S(3, 4), -4, 4, src);
        if (!integer) {
            src[5] = NAN; /* [1, 1]: reaches row 0 along axis 0, column 1 along axis 1 */
            ts = tu_tensor(ctx, dt, TU_S(3, 4), src);
        }
        for (int axis = 0; axis < 2; axis++) {
            const double *idx = axis ? idx1 : idx0;
            kiln_tensor *it = axis ? it1 : it0;
            ref_scatter(t, idx, src, axis, -1, false, integer, want);
            TU_EXPECT_EXACT(kiln_scatter(tt, axis, it, ts), dt, want, 20);
            for (int red = KILN_SCATTER_SUM; red <= KILN_SCATTER_MEAN; red++)
                for (int self = 0; self < 2; self++) {
                    ref_scatter(t, idx, src, axis, red, self, integer, want);
                    kiln_tensor *got = kiln_scatter_reduce(tt, axis, it, ts,
                                                           (kiln_scatter_reduction)red, self);
                    if (integer || red == KILN_SCATTER_AMAX || red == KILN_SCATTER_AMIN)
                        TU_EXPECT_EXACT(got, dt, want, 20);
                    else
                        TU_EXPECT(got, dt, want, 20);
                }
        }
    }
    kiln_tensor *f = kiln_zeros(ctx, KILN_F32, TU_S(4, 5));
    TU_ASSERT_ERROR(kiln_scatter_reduce(f, 0, it0, kiln_zeros(ctx, KILN_F32, TU_S(2, 2)),
                                        KILN_SCATTER_SUM, true),
                    KILN_ERR_SHAPE, "kiln_scatter_reduce", "[2,2]", "[3,3]");
    TU_ASSERT_ERROR(kiln_scatter_reduce(f, 0, it0, kiln_zeros(ctx, KILN_F32, TU_S(3, 3)),
                                        (kiln_scatter_reduction)7, true),
                    KILN_ERR_ARG, "reduction 7");
    TU_ASSERT_ERROR(kiln_scatter(f, 1, tu_tensor(ctx, KILN_I64, TU_S(1, 1), (double[]){5}),
                                 kiln_zeros(ctx, KILN_F32, TU_S(1, 1))),
                    KILN_ERR_ARG, "kiln_scatter", "5");
}

/* kiln_index: NumPy's t[:, index] with an index of any shape (a matrix, a
 * 0-d one that removes the axis), negative entries from the end, against
 * loops here; out-of-range realized entries are errors on either side. */
TU_TEST(index, advanced_indexing_on_any_axis) {
    TU_RNG(r);
    double x[3 * 4 * 2], want[3 * 6 * 2];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 4, 2), -5, 5, x);
    const double idx[6] = {1, -1, 0, 3, -4, 2};
    kiln_tensor *ti = tu_tensor(ctx, KILN_I64, TU_S(3, 2), idx);
    for (int a = 0; a < 3; a++)
        for (int j = 0; j < 6; j++)
            for (int c = 0; c < 2; c++) {
                int k = (int)idx[j] < 0 ? (int)idx[j] + 4 : (int)idx[j];
                want[(a * 6 + j) * 2 + c] = x[(a * 4 + k) * 2 + c];
            }
    kiln_tensor *y = kiln_index(t, 1, ti);
    TU_ASSERT_SHAPE(y, 3, 3, 2, 2);
    TU_EXPECT_EXACT(y, KILN_F64, want, 36);
    /* a 0-d index removes the axis: t[2] */
    kiln_tensor *row = kiln_index(t, 0, tu_tensor(ctx, KILN_U8, 0, NULL, (double[]){2}));
    TU_ASSERT_SHAPE(row, 4, 2);
    TU_EXPECT_EXACT(row, KILN_F64, x + 16, 8);
    /* the last axis, by a computed (lazy) index */
    kiln_tensor *last = kiln_index(t, -1, kiln_sub_scalar(tu_tensor(ctx, KILN_I32, TU_S(2), (double[]){1, 0}), 1));
    double w2[24];
    for (int i = 0; i < 12; i++) {
        w2[i * 2] = x[i * 2 + 0];     /* 0 */
        w2[i * 2 + 1] = x[i * 2 + 1]; /* -1: the last */
    }
    TU_EXPECT_EXACT(last, KILN_F64, w2, 24);
    TU_ASSERT_ERROR(kiln_index(t, 1, tu_tensor(ctx, KILN_I64, TU_S(2), (double[]){0, 4})),
                    KILN_ERR_ARG, "kiln_index", "4", "[-4, 4)");
    TU_ASSERT_ERROR(kiln_index(t, 1, tu_tensor(ctx, KILN_I64, TU_S(1), (double[]){-5})),
                    KILN_ERR_ARG, "-5");
    TU_ASSERT_ERROR(kiln_index(t, 1, kiln_zeros(ctx, KILN_F32, TU_S(2))), KILN_ERR_DTYPE,
                    "kiln_index", "f32");
    TU_ASSERT_ERROR(kiln_index(t, 3, ti), KILN_ERR_ARG, "kiln_index");
}

/* ---- the scatter kernel (GRAPH_SCATTER) ---- */

/* The scatter computed here, over t as [outer, K, inner] and the index and
 * source as [outer, J, ni] (ni <= inner: a smaller index off the axis):
 * reduce -1 assigns (the last wins), else a kiln_scatter_reduction.
 * NaN propagates through amax and amin, as kiln's maximum does. */
static void scatter_ref(const double *t, int64_t outer, int64_t K, int64_t inner,
                        const int64_t *idx, const double *src, int64_t J, int64_t ni, int reduce,
                        bool self, double *out) {
    int64_t n = outer * K * inner;
    int *count = calloc((size_t)n, sizeof *count);
    cr_assert(count);
    memcpy(out, t, sizeof *out * (size_t)n);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < J; j++)
            for (int64_t c = 0; c < ni; c++) {
                int64_t k = idx[(o * J + j) * ni + c];
                if (k < 0 || k >= K)
                    continue;
                int64_t at = (o * K + k) * inner + c;
                double v = src[(o * J + j) * ni + c], *d = &out[at];
                bool first = !self && count[at] == 0;
                count[at]++;
                if (reduce < 0 || first)
                    *d = v;
                else if (reduce == KILN_SCATTER_SUM || reduce == KILN_SCATTER_MEAN)
                    *d += v;
                else if (reduce == KILN_SCATTER_PROD)
                    *d *= v;
                else if (isnan(*d) || isnan(v))
                    *d = NAN;
                else
                    *d = reduce == KILN_SCATTER_AMAX ? fmax(*d, v) : fmin(*d, v);
            }
    if (reduce == KILN_SCATTER_MEAN)
        for (int64_t i = 0; i < n; i++)
            out[i] /= count[i] + self > 0 ? count[i] + self : 1;
    free(count);
}

/* Every combination with and without include_self, along the middle axis of
 * a 3-d tensor, with many duplicates (8 source elements over 5 places), a
 * NaN among the sources, and an index narrower than t after the axis. */
TU_TEST(index, scatter_every_reduction_with_duplicates) {
    TU_RNG(r);
    enum { O = 2, K = 5, IN = 3, J = 8, NI = 2 };
    double t[O * K * IN], src[O * J * IN], want[O * K * IN];
    int64_t idx[O * J * NI];
    double sd[O * J * NI];
    kiln_tensor *tt = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(O, K, IN), -2, 2, t);
    kiln_tensor *ts = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(O, J, IN), -2, 2, src);
    for (int i = 0; i < O * J * NI; i++)
        idx[i] = tu_int(&r, 0, 2); /* places 3 and 4 are never reached */
    idx[0] = idx[NI] = idx[2 * NI] = 1; /* three elements at one place */
    kiln_tensor *ti = tu_tensor_i64(ctx, KILN_I64, TU_S(O, J, NI), idx);
    /* the source as the index sees it: cut to NI after the axis */
    for (int i = 0; i < O * J; i++)
        for (int c = 0; c < NI; c++)
            sd[i * NI + c] = src[i * IN + c];
    for (int red = -1; red <= KILN_SCATTER_MEAN; red++)
        for (int self = 0; self < 2; self++) {
            scatter_ref(t, O, K, IN, idx, sd, J, NI, red, self, want);
            kiln_tensor *y = red < 0 ? kiln_scatter(tt, 1, ti, ts)
                                     : kiln_scatter_reduce(tt, 1, ti, ts, red, self);
            TU_EXPECT(y, KILN_F64, want, O * K * IN);
        }
    /* NaN: amax and amin propagate it to its place, whatever comes after */
    double nsrc[O * J * IN];
    memcpy(nsrc, src, sizeof nsrc);
    nsrc[IN] = NAN; /* o 0, j 1, c 0 */
    for (int i = 0; i < O * J; i++)
        for (int c = 0; c < NI; c++)
            sd[i * NI + c] = nsrc[i * IN + c];
    kiln_tensor *tn = tu_tensor(ctx, KILN_F32, TU_S(O, J, IN), nsrc);
    kiln_tensor *t32 = kiln_cast(tt, KILN_F32);
    for (int red = KILN_SCATTER_AMAX; red <= KILN_SCATTER_AMIN; red++)
        for (int self = 0; self < 2; self++) {
            scatter_ref(t, O, K, IN, idx, sd, J, NI, red, self, want);
            for (int i = 0; i < O * K * IN; i++)
                want[i] = (double)(float)want[i];
            TU_EXPECT(kiln_scatter_reduce(t32, 1, ti, tn, red, self), KILN_F32, want, O * K * IN);
        }
}

/* Integer dtypes: exact sums, products and extremes, a mean that rounds
 * down, u8 indices; along the last axis (rows of one position). */
TU_TEST(index, scatter_integers_along_the_last_axis) {
    TU_RNG(r);
    enum { R = 3, K = 6, J = 10 };
    double t[R * K], src[R * J], want[R * K];
    int64_t idx[R * J];
    for (int i = 0; i < R * K; i++)
        t[i] = (double)tu_int(&r, -9, 9);
    for (int i = 0; i < R * J; i++) {
        src[i] = (double)tu_int(&r, -9, 9);
        idx[i] = tu_int(&r, 0, K - 1);
    }
    kiln_tensor *tt = tu_tensor(ctx, KILN_I32, TU_S(R, K), t);
    kiln_tensor *ts = tu_tensor(ctx, KILN_I32, TU_S(R, J), src);
    kiln_tensor *ti = tu_tensor_i64(ctx, KILN_U8, TU_S(R, J), idx);
    for (int red = -1; red <= KILN_SCATTER_MEAN; red++)
        for (int self = 0; self < 2; self++) {
            if (red == KILN_SCATTER_PROD)
                continue; /* ten factors of up to 9 overflow i32 */
            scatter_ref(t, R, K, 1, idx, src, J, 1, red, self, want);
            if (red == KILN_SCATTER_MEAN) { /* floor, from the sums */
                double sum[R * K];
                scatter_ref(t, R, K, 1, idx, src, J, 1, KILN_SCATTER_SUM, self, sum);
                for (int i = 0; i < R * K; i++)
                    want[i] = want[i] == t[i] && sum[i] == t[i] ? t[i] : floor(want[i]);
            }
            kiln_tensor *y = red < 0 ? kiln_scatter(tt, 1, ti, ts)
                                     : kiln_scatter_reduce(tt, -1, ti, ts, red, self);
            TU_EXPECT_EXACT(y, KILN_I32, want, R * K);
        }
}

/* Lazily computed indices are not checked: those outside [0, K), below and
 * above, write nothing, for every combination. */
TU_TEST(index, scatter_lazy_indices_out_of_range_write_nothing) {
    TU_RNG(r);
    enum { R = 2, K = 4, J = 7 };
    double t[R * K], src[R * J], want[R * K];
    int64_t idx[R * J], moved[R * J];
    kiln_tensor *tt = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(R, K), -2, 2, t);
    kiln_tensor *ts = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(R, J), -2, 2, src);
    for (int i = 0; i < R * J; i++) {
        idx[i] = tu_int(&r, -2, K + 2);
        moved[i] = idx[i] + 3;
    }
    idx[0] = -1;
    moved[0] = 2;
    idx[1] = K;
    moved[1] = K + 3;
    /* computed in the graph: moved - 3 */
    kiln_tensor *ti = kiln_add_scalar(tu_tensor_i64(ctx, KILN_I64, TU_S(R, J), moved), -3);
    for (int red = -1; red <= KILN_SCATTER_MEAN; red++) {
        kiln_tensor *y = red < 0 ? kiln_scatter(tt, 1, ti, ts)
                                 : kiln_scatter_reduce(tt, 1, ti, ts, red, false);
        if (kiln_ctx_mode(ctx) == KILN_EAGER) { /* computed already, so checked */
            TU_ASSERT_ERROR(y, KILN_ERR_ARG, red < 0 ? "kiln_scatter" : "kiln_scatter_reduce");
            continue;
        }
        scatter_ref(t, R, K, 1, idx, src, J, 1, red, false, want);
        for (int i = 0; i < R * K; i++)
            want[i] = (double)(float)want[i];
        TU_EXPECT(y, KILN_F32, want, R * K);
    }
    if (kiln_ctx_mode(ctx) != KILN_EAGER) {
        scatter_ref(t, R, K, 1, idx, src, J, 1, KILN_SCATTER_SUM, true, want);
        TU_EXPECT(kiln_scatter_add(tt, 1, ti, ts), KILN_F32, want, R * K);
    }
}

/* An embedding's table gradient over a large vocabulary: a scatter-add of
 * the tokens' rows, J steps per row of the table's columns. Comparing every
 * token with every row (what it was) would be 256 x 50000 x 64 steps, too
 * slow for the reference evaluator to finish here; one kernel on cpu/lazy. */
TU_TEST(index, embedding_gradient_of_a_large_vocabulary) {
    TU_RNG(r);
    enum { V = 50000, D = 64, T = 256 };
    static double w[V * D], g[T * D], want[V * D];
    int64_t tok[T];
    for (int i = 0; i < T; i++)
        tok[i] = tu_int(&r, 0, V - 1);
    tok[1] = tok[0]; /* a repeated token: its rows add */
    tok[2] = V - 1;
    kiln_tensor *tw = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(V, D), -1, 1, w);
    kiln_tensor *tg = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(T, D), -1, 1, g);
    kiln_requires_grad(tw, true);
    kiln_tensor *loss = kiln_sum(kiln_mul(kiln_embedding(tu_tensor_i64(ctx, KILN_I32, TU_S(T), tok), tw), tg),
                                 0, NULL, false);
    cr_assert_eq(kiln_backward(loss), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    memset(want, 0, sizeof want);
    for (int i = 0; i < T; i++)
        for (int d = 0; d < D; d++)
            want[tok[i] * D + d] += (double)(float)g[i * D + d];
    kiln_tensor *gw = kiln_grad(tw);
    int64_t n = kernels_of(ctx, gw);
    cr_assert(n < 0 || n == 1, "the embedding gradient ran as %lld kernels", (long long)n);
    TU_EXPECT(gw, KILN_F32, want, V * D);
}
