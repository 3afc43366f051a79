/* Tests of the reductions (kiln_sum, mean, max, min, argmax, argmin): axis
 * handling, keepdim, dtype rules, empty and 0-d inputs, NaN, and the index
 * rule of argmax/argmin over several axes. */
#include "test_util.h"

typedef enum rop { R_SUM, R_MEAN, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN, NROPS } rop;

static const struct {
    const char *name;
    kiln_tensor *(*fn)(kiln_tensor *, int, const int *, bool);
} rops[NROPS] = {
    {"sum", kiln_sum}, {"mean", kiln_mean},     {"max", kiln_max},
    {"min", kiln_min}, {"argmax", kiln_argmax}, {"argmin", kiln_argmin},
};

static kiln_dtype result_dtype(rop o, kiln_dtype dt) {
    switch (o) {
    case R_SUM:
        return tu_is_float(dt) ? dt : KILN_I64;
    case R_MEAN:
        return tu_is_float(dt) ? dt : KILN_F32;
    case R_MAX:
    case R_MIN:
        return dt;
    default:
        return KILN_I64;
    }
}

/* Whether v beats the best so far for o (NaN beats everything, first wins). */
static bool better(rop o, double v, double best) {
    if (isnan(best))
        return false;
    if (isnan(v))
        return true;
    return (o == R_MAX || o == R_ARGMAX) ? v > best : v < best;
}

/* The reduction of in (shape ndim/dims) over the axes in mask, by loops. The
 * output has the kept axes in order; argmax/argmin count row-major over the
 * reduced axes in increasing order. */
static int64_t ref_reduce(rop o, const double *in, int ndim, const int64_t *dims, uint32_t mask,
                          double *out) {
    int64_t odims[KILN_MAX_DIMS], rdims[KILN_MAX_DIMS];
    int no = 0, nr = 0;
    for (int d = 0; d < ndim; d++) {
        if (mask & (1u << d))
            rdims[nr++] = dims[d];
        else
            odims[no++] = dims[d];
    }
    int64_t nout = tu_numel(no, odims), nred = tu_numel(nr, rdims);
    int64_t oi[KILN_MAX_DIMS], ri[KILN_MAX_DIMS], full[KILN_MAX_DIMS];
    for (int64_t i = 0; i < nout; i++) {
        tu_unravel(i, no, odims, oi);
        long double acc = 0;
        double best = 0;
        int64_t besti = -1;
        for (int64_t j = 0; j < nred; j++) {
            tu_unravel(j, nr, rdims, ri);
            for (int d = 0, a = 0, b = 0; d < ndim; d++)
                full[d] = (mask & (1u << d)) ? ri[b++] : oi[a++];
            double v = in[tu_ravel(ndim, dims, full)];
            acc += v;
            if (besti < 0 || better(o, v, best)) {
                best = v;
                besti = j;
            }
        }
        switch (o) {
        case R_SUM:
            out[i] = (double)acc;
            break;
        case R_MEAN:
            out[i] = nred ? (double)(acc / nred) : NAN;
            break;
        case R_MAX:
        case R_MIN:
            out[i] = best;
            break;
        default:
            out[i] = (double)besti;
        }
    }
    return nout;
}

static uint32_t axes_mask(int ndim, int naxes, const int *axes) {
    if (!axes)
        return ndim >= 32 ? ~0u : (1u << ndim) - 1;
    uint32_t m = 0;
    for (int i = 0; i < naxes; i++)
        m |= 1u << (axes[i] < 0 ? axes[i] + ndim : axes[i]);
    return m;
}

/* The shape a reduction gives. */
static int out_shape(int ndim, const int64_t *dims, uint32_t mask, bool keepdim, int64_t *out) {
    int n = 0;
    for (int d = 0; d < ndim; d++) {
        if (!(mask & (1u << d)))
            out[n++] = dims[d];
        else if (keepdim)
            out[n++] = 1;
    }
    return n;
}

static void check_reduce(kiln_ctx *ctx, rop o, kiln_tensor *x, const double *in, kiln_dtype dt,
                         int ndim, const int64_t *dims, int naxes, const int *axes, bool keepdim) {
    kiln_tensor *y = rops[o].fn(x, naxes, axes, keepdim);
    uint32_t mask = axes_mask(ndim, naxes, axes);
    int64_t od[KILN_MAX_DIMS];
    int nod = out_shape(ndim, dims, mask, keepdim, od);
    TU_ASSERT_SHAPE_N(y, nod, od);
    kiln_dtype rdt = result_dtype(o, dt);
    cr_assert(kiln_dtype_of(y) == rdt, "[%s] kiln_%s of %s gave %s, expected %s", tu_exec_name(),
              rops[o].name, tu_dt_name(dt), tu_dt_name(kiln_dtype_of(y)), tu_dt_name(rdt));
    int64_t nout = tu_numel(nod, od);
    double *want = malloc((size_t)(nout + 1) * sizeof(double));
    ref_reduce(o, in, ndim, dims, mask, want);
    /* A sum of L terms accumulates about L roundings: the threshold grows
     * with L past 100 terms (still far below what a lost term would cost). */
    int64_t nred = tu_numel(ndim, dims) / (nout ? nout : 1);
    double tol = tu_tol(rdt) * (nred > 100 ? (double)nred / 100 : 1);
    TU_EXPECT_TOL(y, rdt, want, nout, tol);
    free(want);
    (void)ctx;
}

TU_TEST(reduce, axes_and_keepdim_every_op) {
    TU_RNG(r);
    const int64_t dims[3] = {3, 4, 5};
    struct {
        int n;
        int axes[3];
        bool null;
    } sets[] = {
        {0, {0}, true},        {1, {0}, false},     {1, {1}, false},      {1, {2}, false},
        {2, {0, 2}, false},    {1, {-1}, false},    {2, {-3, -1}, false}, {2, {1, 0}, false},
        {3, {2, 0, 1}, false}, {2, {-2, 2}, false},
    };
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        double in[60];
        kiln_tensor *x = tu_rand_tensor(ctx, &r, fl[k], 3, dims, -4, 4, in);
        for (int o = 0; o < NROPS; o++)
            for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++)
                for (int keep = 0; keep < 2; keep++)
                    check_reduce(ctx, (rop)o, x, in, fl[k], 3, dims, sets[s].n,
                                 sets[s].null ? NULL : sets[s].axes, keep);
    }
}

/* Sums and means down columns, large enough for chunks of partial sums
 * (lower/plan.c's columns: 256 outputs a chunk, here with a partial last
 * chunk and with two reduced axes), every dtype against loops in long double. */
TU_TEST(reduce, column_sums_in_chunks) {
    TU_RNG(r);
    const int64_t flat[2] = {301, 600}, cube[3] = {3, 170, 37};
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    double *in = malloc(sizeof(double) * 301 * 600);
    cr_assert(in);
    for (int k = 0; k < n; k++) {
        if (all[k] == KILN_BOOL)
            continue;
        kiln_tensor *x = tu_rand_tensor(ctx, &r, all[k], 2, flat, -4, 4, in);
        check_reduce(ctx, R_SUM, x, in, all[k], 2, flat, 1, (int[]){0}, false);
        check_reduce(ctx, R_MEAN, x, in, all[k], 2, flat, 1, (int[]){0}, true);
        kiln_tensor *c = tu_rand_tensor(ctx, &r, all[k], 3, cube, -4, 4, in);
        check_reduce(ctx, R_SUM, c, in, all[k], 3, cube, 2, (int[]){0, 1}, false);
    }
    free(in);
}

/* A sum over the trailing axes and an axis apart from them (a convolution
 * bias's gradient, [N, C, H, W] over N, H and W) is a sum of rows and then
 * of their sums (graph/build.c: split_sum); means too, every float dtype,
 * keepdim or not, against the reference. Rows of 72 (split) and of 12 (one
 * sum). */
TU_TEST(reduce, trailing_and_leading_axes) {
    TU_RNG(r);
    const int64_t big[4] = {5, 3, 9, 8}, small[4] = {7, 2, 3, 4};
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    double in[5 * 3 * 9 * 8];
    for (int k = 0; k < nf; k++)
        for (int keep = 0; keep < 2; keep++) {
            kiln_tensor *x = tu_rand_tensor(ctx, &r, fl[k], 4, big, -4, 4, in);
            check_reduce(ctx, R_SUM, x, in, fl[k], 4, big, 3, (int[]){0, 2, 3}, keep);
            check_reduce(ctx, R_MEAN, x, in, fl[k], 4, big, 3, (int[]){0, 2, 3}, keep);
            check_reduce(ctx, R_SUM, x, in, fl[k], 4, big, 2, (int[]){0, 3}, keep);
            kiln_tensor *y = tu_rand_tensor(ctx, &r, fl[k], 4, small, -4, 4, in);
            check_reduce(ctx, R_SUM, y, in, fl[k], 4, small, 3, (int[]){0, 2, 3}, keep);
        }
}

/* Reductions over small windows of a fixed few elements (lower/plan.c
 * takes them down columns: the outputs in chunks of about 1024, the
 * window's elements rows taken into each chunk, walked in rows of the
 * output's innermost axis where that is 8 or more): 2x3 pools' windows of
 * [2, 3, 10, 2, 9, 3] (540 outputs, one chunk of rows of 9), of [2, 3, 20,
 * 2, 13, 3] (1560 outputs, rows of 13: two chunks, the last partial) and
 * of [2, 3, 50, 2, 5, 3] (1500 outputs walked flat: rows of 5 are too
 * short), every op and float dtype, with NaN and infinities planted in
 * some windows and not at their start. */
TU_TEST(reduce, small_windows_down_columns) {
    TU_RNG(r);
    const int64_t shapes[3][6] = {{2, 3, 10, 2, 9, 3}, {2, 3, 20, 2, 13, 3}, {2, 3, 50, 2, 5, 3}};
    const int axes[2] = {3, 5};
    enum { N = 2 * 3 * 20 * 2 * 13 * 3 };
    static double in[N];
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int s = 0; s < 3; s++) {
        const int64_t *dims = shapes[s];
        for (int k = 0; k < nf; k++) {
            tu_rand_tensor(ctx, &r, fl[k], 6, dims, -4, 4, in);
            in[7] = NAN;
            in[200] = INFINITY;
            in[1001] = -INFINITY;
            in[2999] = NAN;
            kiln_tensor *x = kiln_from_data(ctx, KILN_F64, 6, dims, in);
            if (fl[k] != KILN_F64)
                x = kiln_cast(x, fl[k]);
            for (int o = 0; o < NROPS; o++)
                check_reduce(ctx, (rop)o, x, in, fl[k], 6, dims, 2, axes, false);
        }
        /* integers: no NaN, extremes from INT64 bounds */
        kiln_tensor *xi = tu_rand_tensor(ctx, &r, KILN_I32, 6, dims, -50, 50, in);
        for (int o = 0; o < NROPS; o++)
            check_reduce(ctx, (rop)o, xi, in, KILN_I32, 6, dims, 2, axes, true);
    }
}

TU_TEST(reduce, null_axes) {
    /* naxes 0 with NULL axes means all axes */
    double in[6];
    TU_RNG(r);
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(2, 3), -1, 1, in);
    double s = 0;
    for (int i = 0; i < 6; i++)
        s += in[i];
    kiln_tensor *a = kiln_sum(x, 0, NULL, false);
    TU_ASSERT_SCALAR_SHAPE(a);
    TU_EXPECT(a, KILN_F64, &s, 1);
    kiln_tensor *b = kiln_sum(x, 0, NULL, true);
    TU_ASSERT_SHAPE(b, 1, 1);
    TU_EXPECT(b, KILN_F64, &s, 1);
}

TU_TEST(reduce, integer_and_bool_inputs) {
    TU_RNG(r);
    const kiln_dtype ints[] = {KILN_I32, KILN_I64, KILN_U8, KILN_BOOL};
    const int64_t dims[3] = {2, 5, 3};
    for (int k = 0; k < 4; k++) {
        double in[30];
        kiln_tensor *x = tu_rand_tensor(ctx, &r, ints[k], 3, dims, -20, 20, in);
        for (int o = 0; o < NROPS; o++) {
            check_reduce(ctx, (rop)o, x, in, ints[k], 3, dims, 0, NULL, false);
            check_reduce(ctx, (rop)o, x, in, ints[k], 3, dims, TU_AXES(1), false);
            check_reduce(ctx, (rop)o, x, in, ints[k], 3, dims, TU_AXES(0, 2), true);
        }
    }
}

TU_TEST(reduce, integer_sum_does_not_wrap) {
    /* i32 sums beyond 2^31 and u8 sums beyond 255 are exact in i64 */
    double big[4] = {2147483647.0, 2147483647.0, 2147483647.0, -5};
    kiln_tensor *a = tu_tensor(ctx, KILN_I32, TU_S(4), big);
    int64_t want = 3ll * 2147483647 - 5;
    TU_EXPECT_I64(kiln_sum(a, 0, NULL, false), KILN_I64, &want, 1);
    kiln_tensor *u = kiln_full(ctx, KILN_U8, TU_S(1000), 255);
    int64_t wu = 255000;
    TU_EXPECT_I64(kiln_sum(u, 0, NULL, false), KILN_I64, &wu, 1);
    kiln_tensor *b = kiln_ones(ctx, KILN_BOOL, TU_S(300));
    int64_t wb = 300;
    TU_EXPECT_I64(kiln_sum(b, 0, NULL, false), KILN_I64, &wb, 1);
    const int64_t l[] = {INT64_MAX - 10, 5, 3};
    int64_t wl = INT64_MAX - 2;
    TU_EXPECT_I64(kiln_sum(tu_tensor_i64(ctx, KILN_I64, TU_S(3), l), 0, NULL, false), KILN_I64, &wl,
                  1);
    /* i64 sums wrap like any other integer result */
    const int64_t w[] = {INT64_MAX, 2};
    int64_t ww = INT64_MIN + 1;
    TU_EXPECT_I64(kiln_sum(tu_tensor_i64(ctx, KILN_I64, TU_S(2), w), 0, NULL, false), KILN_I64, &ww,
                  1);
    /* max and min of i64 beyond 2^53 are exact */
    const int64_t m[] = {(1ll << 53) + 1, (1ll << 53), (1ll << 53) + 3, (1ll << 53) + 2};
    int64_t mx = (1ll << 53) + 3, mn = 1ll << 53, amx = 2;
    kiln_tensor *tm = tu_tensor_i64(ctx, KILN_I64, TU_S(4), m);
    TU_EXPECT_I64(kiln_max(tm, 0, NULL, false), KILN_I64, &mx, 1);
    TU_EXPECT_I64(kiln_min(tm, 0, NULL, false), KILN_I64, &mn, 1);
    TU_EXPECT_I64(kiln_argmax(tm, 0, NULL, false), KILN_I64, &amx, 1);
}

TU_TEST(reduce, dtype_rules) {
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        kiln_dtype dt = all[k];
        kiln_tensor *x = kiln_ones(ctx, dt, TU_S(2, 3));
        TU_ASSERT_DTYPE(kiln_sum(x, 0, NULL, false), tu_is_float(dt) ? dt : KILN_I64);
        TU_ASSERT_DTYPE(kiln_mean(x, 0, NULL, false), tu_is_float(dt) ? dt : KILN_F32);
        TU_ASSERT_DTYPE(kiln_max(x, 0, NULL, false), dt);
        TU_ASSERT_DTYPE(kiln_min(x, 0, NULL, false), dt);
        TU_ASSERT_DTYPE(kiln_argmax(x, 0, NULL, false), KILN_I64);
        TU_ASSERT_DTYPE(kiln_argmin(x, 0, NULL, false), KILN_I64);
        TU_EXPECT_VALS(kiln_sum(x, TU_AXES(1), false), tu_is_float(dt) ? dt : KILN_I64, 3, 3);
        TU_EXPECT_VALS(kiln_mean(x, TU_AXES(0), false), tu_is_float(dt) ? dt : KILN_F32, 1, 1, 1);
    }
}

TU_TEST(reduce, half_accumulation) {
    /* 4096 ones: a half-precision accumulator sticks at 2048 (f16) or 256
     * (bf16); mean accumulates in f32 and sum must match the float64
     * reference within the dtype's tolerance. */
    const kiln_dtype halves[] = {KILN_F16, KILN_BF16};
    for (int k = 0; k < 2; k++) {
        kiln_tensor *x = kiln_ones(ctx, halves[k], TU_S(4096));
        TU_EXPECT_VALS(kiln_mean(x, 0, NULL, false), halves[k], 1);
        double s = 4096;
        TU_EXPECT(kiln_sum(x, 0, NULL, false), halves[k], &s, 1);
        kiln_tensor *y = kiln_ones(ctx, halves[k], TU_S(3, 2048));
        TU_EXPECT_VALS(kiln_mean(y, TU_AXES(1), false), halves[k], 1, 1, 1);
    }
    /* f16 values near 100: their sum (about 4e5) overflows f16, their mean
     * does not; an f16 accumulator would give inf */
    TU_RNG(r);
    double big[4096], m = 0;
    kiln_tensor *h = tu_rand_tensor(ctx, &r, KILN_F16, TU_S(4096), 90, 110, big);
    for (int k = 0; k < 4096; k++)
        m += big[k] / 4096;
    TU_EXPECT(kiln_mean(h, 0, NULL, false), KILN_F16, &m, 1);
    /* mean of integers is computed in floating point */
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(2, 2), (double[]){1, 2, 4, 7});
    TU_EXPECT_VALS(kiln_mean(i, TU_AXES(1), false), KILN_F32, 1.5, 5.5);
    kiln_tensor *b = tu_tensor(ctx, KILN_BOOL, TU_S(4), (double[]){1, 0, 1, 1});
    TU_EXPECT_VALS(kiln_mean(b, 0, NULL, false), KILN_F32, 0.75);
    kiln_tensor *u = tu_tensor(ctx, KILN_U8, TU_S(2), (double[]){255, 254});
    TU_EXPECT_VALS(kiln_mean(u, 0, NULL, false), KILN_F32, 254.5);
}

TU_TEST(reduce, large) {
    TU_RNG(r);
    enum { N = 100000 };
    double *in = malloc(N * sizeof(double));
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(N), -1, 1, in);
    check_reduce(ctx, R_SUM, x, in, KILN_F32, 1, TU_DIMS(N), 0, NULL, false);
    check_reduce(ctx, R_MEAN, x, in, KILN_F32, 1, TU_DIMS(N), 0, NULL, false);
    check_reduce(ctx, R_MAX, x, in, KILN_F32, 1, TU_DIMS(N), 0, NULL, false);
    check_reduce(ctx, R_ARGMIN, x, in, KILN_F32, 1, TU_DIMS(N), 0, NULL, false);
    kiln_tensor *y = kiln_reshape(x, TU_S(250, 400));
    const int64_t d2[2] = {250, 400};
    check_reduce(ctx, R_SUM, y, in, KILN_F32, 2, d2, TU_AXES(1), false);
    check_reduce(ctx, R_SUM, y, in, KILN_F32, 2, d2, TU_AXES(0), true);
    check_reduce(ctx, R_ARGMAX, y, in, KILN_F32, 2, d2, TU_AXES(0), false);
    free(in);
}

TU_TEST(reduce, empty) {
    kiln_tensor *e = kiln_zeros(ctx, KILN_F32, TU_S(0, 3));
    kiln_tensor *s = kiln_sum(e, 0, NULL, false);
    TU_ASSERT_SCALAR_SHAPE(s);
    TU_EXPECT_VALS(s, KILN_F32, 0);
    kiln_tensor *s0 = kiln_sum(e, TU_AXES(0), false);
    TU_ASSERT_SHAPE(s0, 3);
    TU_EXPECT_VALS(s0, KILN_F32, 0, 0, 0);
    kiln_tensor *s1 = kiln_sum(e, TU_AXES(1), true);
    TU_ASSERT_SHAPE(s1, 0, 1);
    cr_assert_eq(kiln_realize(s1), KILN_OK);
    TU_EXPECT_VALS(kiln_sum(kiln_zeros(ctx, KILN_I32, TU_S(0)), 0, NULL, false), KILN_I64, 0);
    TU_EXPECT_VALS(kiln_mean(e, 0, NULL, false), KILN_F32, NAN);
    TU_EXPECT_VALS(kiln_mean(e, TU_AXES(0), false), KILN_F32, NAN, NAN, NAN);
    TU_EXPECT_VALS(kiln_mean(kiln_zeros(ctx, KILN_I64, TU_S(0)), 0, NULL, false), KILN_F32, NAN);

    /* max/min refuse an empty reduction, but reducing a non-empty axis of an
     * empty tensor is fine */
    TU_ASSERT_ERROR(kiln_max(e, TU_AXES(0), false), KILN_ERR_SHAPE, "kiln_max");
    TU_ASSERT_ERROR(kiln_min(e, 0, NULL, false), KILN_ERR_SHAPE, "kiln_min");
    TU_ASSERT_ERROR(kiln_max(kiln_zeros(ctx, KILN_I32, TU_S(0)), 0, NULL, true), KILN_ERR_SHAPE,
                    "kiln_max");
    kiln_tensor *m1 = kiln_max(e, TU_AXES(1), false);
    TU_ASSERT_SHAPE(m1, 0);
    cr_assert_eq(kiln_realize(m1), KILN_OK);
    kiln_tensor *a1 = kiln_argmin(e, TU_AXES(-1), true);
    TU_ASSERT_SHAPE(a1, 0, 1);
    cr_assert_eq(kiln_realize(a1), KILN_OK);

    /* argmax of nothing has no answer either */
    kiln_tensor *am = kiln_argmax(e, TU_AXES(0), false);
    cr_assert(am != NULL);
    kiln_status st = kiln_error(am);
    if (st == KILN_OK)
        st = kiln_realize(am);
    cr_assert(st != KILN_OK, "[%s] argmax over an empty axis succeeded", tu_exec_name());
}

TU_TEST(reduce, zero_dim) {
    kiln_tensor *s = kiln_scalar(ctx, KILN_F32, 2.5);
    for (int o = 0; o < NROPS; o++) {
        kiln_tensor *y = rops[o].fn(s, 0, NULL, false);
        TU_ASSERT_SCALAR_SHAPE(y);
        double want = o >= R_ARGMAX ? 0 : 2.5;
        cr_assert_eq(TU_ITEM(y), want, "[%s] kiln_%s of a 0-d tensor", tu_exec_name(),
                     rops[o].name);
        kiln_tensor *k = rops[o].fn(s, 0, NULL, true);
        TU_ASSERT_SCALAR_SHAPE(k);
    }
    kiln_tensor *i = kiln_scalar(ctx, KILN_I32, 7);
    TU_EXPECT_VALS(kiln_mean(i, 0, NULL, false), KILN_F32, 7);
    TU_EXPECT_VALS(kiln_sum(i, 0, NULL, false), KILN_I64, 7);
    TU_ASSERT_ERROR(kiln_sum(s, TU_AXES(0), false), KILN_ERR_ARG, "kiln_sum");
    TU_ASSERT_ERROR(kiln_max(s, TU_AXES(-1), false), KILN_ERR_ARG, "kiln_max");
}

TU_TEST(reduce, nan_propagates) {
    int nf;
    const kiln_dtype *fl = tu_float_dtypes(&nf);
    for (int k = 0; k < nf; k++) {
        kiln_dtype dt = fl[k];
        /* rows: NaN in the middle, NaN first, none, NaN and inf */
        kiln_tensor *x =
            tu_tensor(ctx, dt, TU_S(4, 3),
                      (double[]){1, NAN, 3, NAN, 5, -1, 2, 8, -4, -INFINITY, NAN, INFINITY});
        TU_EXPECT_VALS(kiln_max(x, TU_AXES(1), false), dt, NAN, NAN, 8, NAN);
        TU_EXPECT_VALS(kiln_min(x, TU_AXES(1), false), dt, NAN, NAN, -4, NAN);
        TU_EXPECT_VALS(kiln_sum(x, TU_AXES(1), false), dt, NAN, NAN, 6, NAN);
        TU_EXPECT_VALS(kiln_mean(x, TU_AXES(1), false), dt, NAN, NAN, 2, NAN);
        TU_EXPECT_VALS(kiln_argmax(x, TU_AXES(1), false), KILN_I64, 1, 0, 1, 1);
        TU_EXPECT_VALS(kiln_argmin(x, TU_AXES(1), false), KILN_I64, 1, 0, 2, 1);
        TU_EXPECT_VALS(kiln_max(x, TU_AXES(0), false), dt, NAN, NAN, INFINITY);
        TU_EXPECT_VALS(kiln_argmax(x, 0, NULL, false), KILN_I64, 1);
        kiln_tensor *inf = tu_tensor(ctx, dt, TU_S(3), (double[]){-INFINITY, INFINITY, 0});
        TU_EXPECT_VALS(kiln_max(inf, 0, NULL, false), dt, INFINITY);
        TU_EXPECT_VALS(kiln_min(inf, 0, NULL, false), dt, -INFINITY);
        TU_EXPECT_VALS(kiln_sum(inf, 0, NULL, false), dt, NAN);
        TU_EXPECT_VALS(kiln_argmin(inf, 0, NULL, false), KILN_I64, 0);
        /* -inf is a real maximum when everything is -inf */
        kiln_tensor *ninf = kiln_full(ctx, dt, TU_S(3), -INFINITY);
        TU_EXPECT_VALS(kiln_max(ninf, 0, NULL, false), dt, -INFINITY);
        TU_EXPECT_VALS(kiln_argmax(ninf, 0, NULL, false), KILN_I64, 0);
    }
}

TU_TEST(reduce, argmax_multi_axis_index_rule) {
    TU_RNG(r);
    const int64_t dims[4] = {2, 3, 4, 5};
    double in[120];
    /* few distinct values so that ties are common: the first one wins */
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_I32, 4, dims, 0, 3, in);
    const int sets[][4] = {{2, 2, 0}, {2, 0, 2}, {2, -1, 1}, {3, 3, 1, 0}, {2, -4, -2}, {1, 3}};
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        for (int keep = 0; keep < 2; keep++) {
            check_reduce(ctx, R_ARGMAX, x, in, KILN_I32, 4, dims, sets[s][0], sets[s] + 1, keep);
            check_reduce(ctx, R_ARGMIN, x, in, KILN_I32, 4, dims, sets[s][0], sets[s] + 1, keep);
        }
    }
    check_reduce(ctx, R_ARGMAX, x, in, KILN_I32, 4, dims, 0, NULL, false);
    check_reduce(ctx, R_ARGMIN, x, in, KILN_I32, 4, dims, 0, NULL, true);

    /* hand-worked: [2,3] with axes {1, 0}: row-major over (0, 1) */
    kiln_tensor *h = tu_tensor(ctx, KILN_F32, TU_S(2, 3), (double[]){1, 9, 2, 9, 0, 0});
    TU_EXPECT_VALS(kiln_argmax(h, TU_AXES(1, 0), false), KILN_I64, 1);
    TU_EXPECT_VALS(kiln_argmin(h, TU_AXES(1, 0), false), KILN_I64, 4);
    /* [2,2,2] over axes {0, 2}: index = i0 * 2 + i2 for each i1 */
    kiln_tensor *g = tu_tensor(ctx, KILN_F64, TU_S(2, 2, 2), (double[]){0, 1, 5, 2, 7, 3, 4, 6});
    kiln_tensor *ga = kiln_argmax(g, TU_AXES(2, 0), true);
    TU_ASSERT_SHAPE(ga, 1, 2, 1);
    TU_EXPECT_VALS(ga, KILN_I64, 2, 3);
    /* bool: the first true */
    kiln_tensor *b = tu_tensor(ctx, KILN_BOOL, TU_S(5), (double[]){0, 0, 1, 1, 0});
    TU_EXPECT_VALS(kiln_argmax(b, 0, NULL, false), KILN_I64, 2);
    TU_EXPECT_VALS(kiln_argmin(b, 0, NULL, false), KILN_I64, 0);
}

TU_TEST(reduce, bad_axes) {
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2, 3, 4));
    for (int o = 0; o < NROPS; o++) {
        char name[32];
        snprintf(name, sizeof name, "kiln_%s", rops[o].name);
        TU_ASSERT_ERROR(rops[o].fn(x, TU_AXES(0, 0), false), KILN_ERR_ARG, name);
        TU_ASSERT_ERROR(rops[o].fn(x, TU_AXES(0, -3), false), KILN_ERR_ARG, name);
        TU_ASSERT_ERROR(rops[o].fn(x, TU_AXES(3), false), KILN_ERR_ARG, name);
        TU_ASSERT_ERROR(rops[o].fn(x, TU_AXES(-4), true), KILN_ERR_ARG, name);
        TU_ASSERT_ERROR(rops[o].fn(x, TU_AXES(1, 2, 100), false), KILN_ERR_ARG, name);
    }
}

TU_TEST(reduce, views_and_fusion) {
    TU_RNG(r);
    double in[6 * 8];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(6, 8), -3, 3, in);

    /* sum over axis 0 of the transpose = sum over axis 1 */
    kiln_tensor *t = kiln_sum(kiln_transpose(x, 0, 1), TU_AXES(0), false);
    double w[8];
    for (int i = 0; i < 6; i++) {
        w[i] = 0;
        for (int j = 0; j < 8; j++)
            w[i] += in[i * 8 + j];
    }
    TU_EXPECT(t, KILN_F64, w, 6);

    /* a reduction of a broadcast: expand [8] to [5,8] then sum axis 0 */
    kiln_tensor *row = kiln_reshape(kiln_slice(x, 0, 2, 3, 1), TU_S(8));
    kiln_tensor *e = kiln_sum(kiln_expand(row, TU_S(5, 8)), TU_AXES(0), false);
    for (int j = 0; j < 8; j++)
        w[j] = 5 * in[2 * 8 + j];
    TU_EXPECT(e, KILN_F64, w, 8);

    /* sliced with a negative step, then max over the sliced axis */
    kiln_tensor *m = kiln_max(kiln_slice(x, 1, -2, 0, -3), TU_AXES(1), false);
    for (int i = 0; i < 6; i++)
        w[i] = fmax(in[i * 8 + 6], in[i * 8 + 3]);
    TU_EXPECT_EXACT(m, KILN_F64, w, 6);

    /* softmax along rows: elementwise before and after a reduction */
    kiln_tensor *mx = kiln_max(x, TU_AXES(1), true);
    kiln_tensor *ex = kiln_exp(kiln_sub(x, mx));
    kiln_tensor *sm = kiln_div(ex, kiln_sum(ex, TU_AXES(-1), true));
    TU_ASSERT_SHAPE(sm, 6, 8);
    double want[48];
    for (int i = 0; i < 6; i++) {
        double mxv = -INFINITY, s = 0;
        for (int j = 0; j < 8; j++)
            mxv = fmax(mxv, in[i * 8 + j]);
        for (int j = 0; j < 8; j++)
            s += exp(in[i * 8 + j] - mxv);
        for (int j = 0; j < 8; j++)
            want[i * 8 + j] = exp(in[i * 8 + j] - mxv) / s;
    }
    TU_EXPECT(sm, KILN_F64, want, 48);

    /* mean of squares then sqrt (an RMS norm), in f32 */
    double inf32[6 * 8];
    kiln_tensor *xf = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(6, 8), -3, 3, inf32);
    kiln_tensor *rms = kiln_sqrt(kiln_mean(kiln_mul(xf, xf), TU_AXES(1), false));
    for (int i = 0; i < 6; i++) {
        double s = 0;
        for (int j = 0; j < 8; j++)
            s += inf32[i * 8 + j] * inf32[i * 8 + j];
        w[i] = sqrt(s / 8);
    }
    TU_EXPECT(rms, KILN_F32, w, 6);
}

TU_TEST(reduce, layer_norm_chain) {
    TU_RNG(r);
    enum { R = 37, C = 129 };
    double *in = malloc(R * C * sizeof(double)), *want = malloc(R * C * sizeof(double));
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(R, C), -3, 3, in);
    /* (x - mean) / sqrt(var + eps): a reduction, a broadcast back, another
     * reduction of the result, and elementwise work after both */
    kiln_tensor *mu = kiln_mean(x, TU_AXES(-1), true);
    kiln_tensor *xc = kiln_sub(x, mu);
    kiln_tensor *var = kiln_mean(kiln_mul(xc, xc), TU_AXES(1), true);
    kiln_tensor *y = kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, 1e-5)));
    TU_ASSERT_SHAPE(y, R, C);
    for (int i = 0; i < R; i++) {
        double m = 0, v = 0;
        for (int j = 0; j < C; j++)
            m += in[i * C + j];
        m /= C;
        for (int j = 0; j < C; j++)
            v += (in[i * C + j] - m) * (in[i * C + j] - m);
        v /= C;
        for (int j = 0; j < C; j++)
            want[i * C + j] = (in[i * C + j] - m) / sqrt(v + 1e-5);
    }
    TU_EXPECT(y, KILN_F32, want, R * C);
    /* and each row of the result has a mean square near one */
    double s[R];
    TU_READ(kiln_mean(kiln_mul(y, y), TU_AXES(1), false), s, R);
    for (int i = 0; i < R; i++)
        cr_assert(fabs(s[i] - 1) < 1e-3, "[%s] row %d variance %g", tu_exec_name(), i, s[i]);
    free(in);
    free(want);
}

TU_TEST(reduce, eight_dims) {
    TU_RNG(r);
    const int64_t dims[8] = {2, 1, 3, 2, 1, 2, 3, 2};
    double in[144];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F64, 8, dims, -2, 2, in);
    check_reduce(ctx, R_SUM, x, in, KILN_F64, 8, dims, TU_AXES(0, 3, 7), false);
    check_reduce(ctx, R_MAX, x, in, KILN_F64, 8, dims, TU_AXES(-1, -8, 2), true);
    check_reduce(ctx, R_ARGMIN, x, in, KILN_F64, 8, dims, TU_AXES(6, 2, 5), false);
    check_reduce(ctx, R_MEAN, x, in, KILN_F64, 8, dims, 0, NULL, true);
}

TU_TEST(reduce, outer_axes_of_large_views) {
    TU_RNG(r);
    enum { A = 33, B = 65, C = 17 };
    double *in = malloc(A * B * C * sizeof(double));
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(A, B, C), -1, 1, in);
    const int64_t d3[3] = {A, B, C};
    check_reduce(ctx, R_SUM, x, in, KILN_F32, 3, d3, TU_AXES(0), false);
    check_reduce(ctx, R_MAX, x, in, KILN_F32, 3, d3, TU_AXES(1), false);
    check_reduce(ctx, R_ARGMAX, x, in, KILN_F32, 3, d3, TU_AXES(0, 2), true);
    /* the same through a permuted view: the reduced axis is now the last */
    kiln_tensor *p = kiln_permute(x, (const int[]){2, 0, 1});
    double *pin = malloc(A * B * C * sizeof(double));
    for (int k = 0; k < C; k++)
        for (int i = 0; i < A; i++)
            for (int j = 0; j < B; j++)
                pin[(k * A + i) * B + j] = in[(i * B + j) * C + k];
    const int64_t pd[3] = {C, A, B};
    check_reduce(ctx, R_SUM, p, pin, KILN_F32, 3, pd, TU_AXES(2), false);
    check_reduce(ctx, R_MIN, p, pin, KILN_F32, 3, pd, TU_AXES(0, 1), false);
    free(in);
    free(pin);
}

TU_TEST(reduce, large_ties_and_late_nan) {
    TU_RNG(r);
    enum { N = 200003 };
    double *in = malloc(N * sizeof(double)), *fin = malloc(N * sizeof(double));
    /* few distinct values: the first of many equal extremes must win, across
     * however the work is split */
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_I32, TU_S(N), 0, 3, in);
    check_reduce(ctx, R_ARGMAX, x, in, KILN_I32, 1, TU_DIMS(N), 0, NULL, false);
    check_reduce(ctx, R_ARGMIN, x, in, KILN_I32, 1, TU_DIMS(N), 0, NULL, false);
    check_reduce(ctx, R_SUM, x, in, KILN_I32, 1, TU_DIMS(N), 0, NULL, false);
    /* many rows: the reduced axis is the outer one */
    kiln_tensor *w = kiln_reshape(kiln_slice(x, 0, 0, 200000, 1), TU_S(50000, 4));
    const int64_t dw[2] = {50000, 4};
    check_reduce(ctx, R_ARGMAX, w, in, KILN_I32, 2, dw, TU_AXES(0), false);
    check_reduce(ctx, R_SUM, w, in, KILN_I32, 2, dw, TU_AXES(0), false);
    check_reduce(ctx, R_MIN, w, in, KILN_I32, 2, dw, TU_AXES(0), true);

    /* a NaN near the end, and one near the start, of a long f32 row */
    tu_fill(&r, KILN_F32, fin, N, -1, 1);
    fin[N - 2] = NAN;
    kiln_tensor *y = tu_tensor(ctx, KILN_F32, TU_S(N), fin);
    TU_EXPECT_VALS(kiln_max(y, 0, NULL, false), KILN_F32, NAN);
    TU_EXPECT_VALS(kiln_min(y, 0, NULL, false), KILN_F32, NAN);
    TU_EXPECT_VALS(kiln_argmax(y, 0, NULL, false), KILN_I64, N - 2);
    TU_EXPECT_VALS(kiln_argmin(y, 0, NULL, false), KILN_I64, N - 2);
    TU_EXPECT_VALS(kiln_sum(y, 0, NULL, false), KILN_F32, NAN);
    fin[7] = NAN;
    kiln_tensor *z = tu_tensor(ctx, KILN_F32, TU_S(N), fin);
    TU_EXPECT_VALS(kiln_argmax(z, 0, NULL, false), KILN_I64, 7);
    TU_EXPECT_VALS(kiln_argmin(kiln_reshape(z, TU_S(N, 1)), TU_AXES(0), false), KILN_I64, 7);
    free(in);
    free(fin);
}

/* Reductions over broadcast axes read one element per row of them
 * (graph/build.c reduce_constant_axes): a sum over 10^12 broadcast elements
 * once ran for minutes; it is now the element times the count, on every
 * executor, the float64 oracle included. Mixed axes (some broadcast, some
 * not), elementwise work between the broadcast and the reduction, a padded
 * broadcast (not constant along its padded axis) and size-1 axes. */
TU_TEST(reduce, broadcast_axes_cost_nothing) {
    TU_RNG(r);
    double xv[3];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 1), -2, 2, xv);
    const int64_t big[2] = {3, 1000000};
    kiln_tensor *e = kiln_expand(x, 2, big); /* [3, 10^6] */
    kiln_tensor *huge = kiln_expand(kiln_reshape(x, 3, TU_DIMS(3, 1, 1)), 3,
                                    TU_DIMS(3, 1000000, 1000000)); /* 3 x 10^12 */
    double s[3], m = -INFINITY, total = 0;
    for (int i = 0; i < 3; i++) {
        s[i] = xv[i] * 1e12;
        m = fmax(m, xv[i]);
        total += xv[i] * 1e6;
    }
    TU_EXPECT(kiln_sum(huge, TU_AXES(1, 2), false), KILN_F64, s, 3);
    TU_EXPECT(kiln_mean(huge, TU_AXES(1, 2), false), KILN_F64, xv, 3);
    TU_EXPECT_EXACT(kiln_max(huge, TU_AXES(1, 2), false), KILN_F64, xv, 3);
    TU_EXPECT_EXACT(kiln_argmin(huge, TU_AXES(1, 2), false), KILN_I64, ((double[]){0, 0, 0}), 3);
    /* axis 0 is not broadcast: reduced for real, axis 1 by the count */
    TU_EXPECT_NEAR_VALS(kiln_sum(e, 0, NULL, false), KILN_F64, total);
    TU_EXPECT_VALS(kiln_max(e, 0, NULL, false), KILN_F64, m);
    /* exp(2x) is as constant along the broadcast as x is */
    double ex[3];
    for (int i = 0; i < 3; i++)
        ex[i] = exp(2 * xv[i]) * 1e6;
    /* (eager computes each op: the sum then adds 10^6 terms for real) */
    TU_EXPECT_TOL(kiln_sum(kiln_exp(kiln_mul_scalar(e, 2)), TU_AXES(1), false), KILN_F64, ex, 3,
                  1e-20);
    /* padding makes the axis vary: [x, x, 0] per row, reduced for real */
    kiln_tensor *p = kiln_pad(kiln_expand(x, 2, TU_DIMS(3, 2)), TU_DIMS(0, 0, 0, 1), 0);
    double ps[3], pm[3];
    for (int i = 0; i < 3; i++) {
        ps[i] = 2 * xv[i];
        pm[i] = fmin(xv[i], 0);
    }
    TU_EXPECT(kiln_sum(p, TU_AXES(1), false), KILN_F64, ps, 3);
    TU_EXPECT_EXACT(kiln_min(p, TU_AXES(1), false), KILN_F64, pm, 3);
    /* argmax over a broadcast axis and a real one: the real rule applies */
    kiln_tensor *v = kiln_expand(kiln_reshape(x, 2, TU_DIMS(1, 3)), 2, TU_DIMS(4, 3));
    int best = xv[0] >= xv[1] && xv[0] >= xv[2] ? 0 : xv[1] >= xv[2] ? 1 : 2;
    TU_EXPECT_VALS(kiln_argmax(v, 0, NULL, false), KILN_I64, best);
    /* integers: the count multiplies exactly */
    kiln_tensor *ints = kiln_expand(tu_tensor(ctx, KILN_I32, TU_S(1), (double[]){-7}), 1,
                                    TU_DIMS(3000000000));
    TU_EXPECT_VALS(kiln_sum(ints, 0, NULL, false), KILN_I64, -21000000000.0);
}
