/* Tests of the movement ops (reshape, permute, transpose, expand, slice, pad,
 * flip, squeeze, unsqueeze) and kiln_cat, alone and composed into views of
 * views, against host arrays moved by plain index arithmetic. */
#include "test_util.h"

/* A host tensor: row-major doubles. */
typedef struct ht {
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    double *v;
} ht;

static ht ht_make(int ndim, const int64_t *dims) {
    ht h = {ndim, {0}, NULL};
    for (int d = 0; d < ndim; d++)
        h.dims[d] = dims[d];
    int64_t n = tu_numel(ndim, dims);
    h.v = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    return h;
}

static int64_t ht_numel(const ht *h) { return tu_numel(h->ndim, h->dims); }

static ht ht_from(int ndim, const int64_t *dims, const double *v) {
    ht h = ht_make(ndim, dims);
    memcpy(h.v, v, (size_t)ht_numel(&h) * sizeof(double));
    return h;
}

static void ht_free(ht *h) {
    free(h->v);
    h->v = NULL;
}

/* Replaces *h with r. */
static void ht_set(ht *h, ht r) {
    ht_free(h);
    *h = r;
}

static ht ht_reshape(const ht *a, int ndim, const int64_t *dims) {
    int64_t d[KILN_MAX_DIMS] = {0}, known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        d[i] = dims[i];
        if (d[i] == -1)
            infer = i;
        else
            known *= d[i];
    }
    if (infer >= 0)
        d[infer] = ht_numel(a) / known;
    return ht_from(ndim, d, a->v);
}

static ht ht_permute(const ht *a, const int *perm) {
    int64_t d[KILN_MAX_DIMS] = {0}, oi[KILN_MAX_DIMS], si[KILN_MAX_DIMS];
    int p[KILN_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) {
        p[i] = perm[i] < 0 ? perm[i] + a->ndim : perm[i];
        d[i] = a->dims[p[i]];
    }
    ht r = ht_make(a->ndim, d);
    for (int64_t i = 0; i < ht_numel(&r); i++) {
        tu_unravel(i, r.ndim, r.dims, oi);
        for (int k = 0; k < a->ndim; k++)
            si[p[k]] = oi[k];
        r.v[i] = a->v[tu_ravel(a->ndim, a->dims, si)];
    }
    return r;
}

static ht ht_transpose(const ht *a, int x, int y) {
    int perm[KILN_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++)
        perm[i] = i;
    if (x < 0)
        x += a->ndim;
    if (y < 0)
        y += a->ndim;
    perm[x] = y;
    perm[y] = x;
    return ht_permute(a, perm);
}

static ht ht_expand(const ht *a, int ndim, const int64_t *dims) {
    int64_t d[KILN_MAX_DIMS] = {0}, oi[KILN_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        int ai = i - (ndim - a->ndim);
        d[i] = dims[i] == -1 ? a->dims[ai] : dims[i];
    }
    ht r = ht_make(ndim, d);
    for (int64_t i = 0; i < ht_numel(&r); i++) {
        tu_unravel(i, ndim, d, oi);
        r.v[i] = a->v[tu_bcast_src_index(ndim, oi, a->ndim, a->dims)];
    }
    return r;
}

/* Python's slice.indices plus the header's KILN_END: the first index and
 * the length. */
static int64_t py_slice(int64_t n, int64_t start, int64_t stop, int64_t step, int64_t *first) {
    int64_t len;
    if (step > 0) {
        if (start < 0)
            start = start + n < 0 ? 0 : start + n;
        if (start > n)
            start = n;
        if (stop < 0)
            stop = stop + n < 0 ? 0 : stop + n;
        if (stop > n)
            stop = n;
        len = stop > start ? (stop - start - 1) / step + 1 : 0;
    } else {
        if (start < 0)
            start = start + n < 0 ? -1 : start + n;
        if (start >= n)
            start = n - 1;
        if (stop == KILN_END)
            stop = -1;
        else if (stop < 0)
            stop = stop + n < 0 ? -1 : stop + n;
        else if (stop >= n)
            stop = n - 1;
        len = start > stop ? (start - stop - 1) / (-step) + 1 : 0;
    }
    *first = start;
    return len;
}

static ht ht_slice(const ht *a, int axis, int64_t start, int64_t stop, int64_t step) {
    if (axis < 0)
        axis += a->ndim;
    int64_t first, len = py_slice(a->dims[axis], start, stop, step, &first);
    int64_t d[KILN_MAX_DIMS] = {0}, oi[KILN_MAX_DIMS];
    memcpy(d, a->dims, sizeof d);
    d[axis] = len;
    ht r = ht_make(a->ndim, d);
    for (int64_t i = 0; i < ht_numel(&r); i++) {
        tu_unravel(i, r.ndim, d, oi);
        oi[axis] = first + oi[axis] * step;
        r.v[i] = a->v[tu_ravel(a->ndim, a->dims, oi)];
    }
    return r;
}

static ht ht_pad(const ht *a, const int64_t *pads, double value) {
    int64_t d[KILN_MAX_DIMS] = {0}, oi[KILN_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++)
        d[i] = a->dims[i] + pads[2 * i] + pads[2 * i + 1];
    ht r = ht_make(a->ndim, d);
    for (int64_t i = 0; i < ht_numel(&r); i++) {
        tu_unravel(i, r.ndim, d, oi);
        bool inside = true;
        for (int k = 0; k < a->ndim; k++) {
            oi[k] -= pads[2 * k];
            inside = inside && oi[k] >= 0 && oi[k] < a->dims[k];
        }
        r.v[i] = inside ? a->v[tu_ravel(a->ndim, a->dims, oi)] : value;
    }
    return r;
}

static ht ht_flip(const ht *a, uint32_t mask) {
    int64_t oi[KILN_MAX_DIMS];
    ht r = ht_make(a->ndim, a->dims);
    for (int64_t i = 0; i < ht_numel(&r); i++) {
        tu_unravel(i, r.ndim, r.dims, oi);
        for (int k = 0; k < a->ndim; k++)
            if (mask & (1u << k))
                oi[k] = a->dims[k] - 1 - oi[k];
        r.v[i] = a->v[tu_ravel(a->ndim, a->dims, oi)];
    }
    return r;
}

static ht ht_cat(int n, const ht *hs, int axis) {
    int64_t d[KILN_MAX_DIMS] = {0}, oi[KILN_MAX_DIMS];
    memcpy(d, hs[0].dims, sizeof d);
    int nd = hs[0].ndim;
    if (axis < 0)
        axis += nd;
    d[axis] = 0;
    for (int i = 0; i < n; i++)
        d[axis] += hs[i].dims[axis];
    ht r = ht_make(nd, d);
    for (int64_t i = 0; i < ht_numel(&r); i++) {
        tu_unravel(i, nd, d, oi);
        int k = 0;
        while (oi[axis] >= hs[k].dims[axis])
            oi[axis] -= hs[k++].dims[axis];
        r.v[i] = hs[k].v[tu_ravel(nd, hs[k].dims, oi)];
    }
    return r;
}

/* t must hold exactly h's shape and values (in dtype dt). */
#define EXPECT_HT(t, dt, h)                                                                        \
    do {                                                                                           \
        TU_ASSERT_SHAPE_N((t), (h).ndim, (h).dims);                                                \
        TU_EXPECT_EXACT((t), (dt), (h).v, ht_numel(&(h)));                                         \
    } while (0)

static ht ht_random(tu_rng *r, kiln_dtype dt, int ndim, const int64_t *dims) {
    ht h = ht_make(ndim, dims);
    tu_fill(r, dt, h.v, ht_numel(&h), -100, 100);
    return h;
}

TU_TEST(view, reshape) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_F32, 3, TU_DIMS(2, 3, 4));
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, 3, a.dims, a.v);
    const struct {
        int n;
        int64_t d[4];
        int64_t want[4];
    } cases[] = {
        {2, {4, 6}, {4, 6}},
        {2, {-1, 4}, {6, 4}},
        {3, {2, -1, 2}, {2, 6, 2}},
        {1, {24}, {24}},
        {1, {-1}, {24}},
        {4, {1, 24, 1, 1}, {1, 24, 1, 1}},
        {4, {2, 2, 3, -1}, {2, 2, 3, 2}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kiln_tensor *y = kiln_reshape(t, cases[k].n, cases[k].d);
        TU_ASSERT_SHAPE_N(y, cases[k].n, cases[k].want);
        TU_EXPECT_EXACT(y, KILN_F32, a.v, 24);
    }
    /* one element to 0-d and back */
    kiln_tensor *one = kiln_reshape(kiln_slice(kiln_reshape(t, TU_S(-1)), 0, 5, 6, 1), 0, NULL);
    TU_ASSERT_SCALAR_SHAPE(one);
    cr_assert_eq(TU_ITEM(one), a.v[5]);
    kiln_tensor *back = kiln_reshape(one, TU_S(1, 1));
    TU_ASSERT_SHAPE(back, 1, 1);
    /* empty */
    kiln_tensor *e = kiln_reshape(kiln_zeros(ctx, KILN_F32, TU_S(0, 3)), TU_S(3, 0, 5));
    TU_ASSERT_SHAPE(e, 3, 0, 5);
    /* errors */
    TU_ASSERT_ERROR(kiln_reshape(t, TU_S(5, 5)), KILN_ERR_SHAPE, "kiln_reshape", "[2,3,4]");
    TU_ASSERT_ERROR(kiln_reshape(t, TU_S(-1, 5)), KILN_ERR_SHAPE, "kiln_reshape");
    TU_ASSERT_ERROR2(kiln_reshape(t, TU_S(-1, -1)), KILN_ERR_SHAPE, KILN_ERR_ARG);
    TU_ASSERT_ERROR2(kiln_reshape(t, TU_S(-2, -12)), KILN_ERR_SHAPE, KILN_ERR_ARG);
    ht_free(&a);
}

TU_TEST(view, permute_and_transpose) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_F64, 3, TU_DIMS(2, 3, 4));
    kiln_tensor *t = tu_tensor(ctx, KILN_F64, 3, a.dims, a.v);
    const int perms[][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},  {1, 2, 0},
                            {2, 0, 1}, {2, 1, 0}, {-1, 0, 1}, {-2, -1, -3}};
    for (size_t k = 0; k < sizeof perms / sizeof perms[0]; k++) {
        ht w = ht_permute(&a, perms[k]);
        EXPECT_HT(kiln_permute(t, perms[k]), KILN_F64, w);
        ht_free(&w);
    }
    const int pairs[][2] = {{0, 1}, {0, 2}, {1, 2}, {2, 0}, {-1, 0}, {1, 1}, {-3, -2}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        ht w = ht_transpose(&a, pairs[k][0], pairs[k][1]);
        EXPECT_HT(kiln_transpose(t, pairs[k][0], pairs[k][1]), KILN_F64, w);
        ht_free(&w);
    }
    TU_ASSERT_ERROR(kiln_permute(t, (const int[]){0, 0, 1}), KILN_ERR_ARG, "kiln_permute");
    TU_ASSERT_ERROR(kiln_permute(t, (const int[]){0, 1, 3}), KILN_ERR_ARG, "kiln_permute");
    TU_ASSERT_ERROR(kiln_transpose(t, 0, 3), KILN_ERR_ARG, "kiln_transpose");
    TU_ASSERT_ERROR(kiln_transpose(t, -4, 0), KILN_ERR_ARG, "kiln_transpose");
    /* 0-d: the empty permutation */
    kiln_tensor *s = kiln_scalar(ctx, KILN_F32, 3);
    kiln_tensor *ps = kiln_permute(s, NULL);
    if (kiln_error(ps) == KILN_OK)
        cr_assert_eq(TU_ITEM(ps), 3);
    ht_free(&a);
}

TU_TEST(view, expand) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_I32, 2, TU_DIMS(3, 1));
    kiln_tensor *t = tu_tensor(ctx, KILN_I32, 2, a.dims, a.v);
    ht w = ht_expand(&a, 3, TU_DIMS(2, 3, 4));
    EXPECT_HT(kiln_expand(t, TU_S(2, 3, 4)), KILN_I32, w);
    ht_free(&w);
    w = ht_expand(&a, 2, TU_DIMS(-1, 5));
    EXPECT_HT(kiln_expand(t, TU_S(-1, 5)), KILN_I32, w);
    ht_free(&w);
    w = ht_expand(&a, 2, TU_DIMS(3, 1));
    EXPECT_HT(kiln_expand(t, TU_S(3, 1)), KILN_I32, w);
    ht_free(&w);
    w = ht_expand(&a, 3, TU_DIMS(0, 3, 2));
    EXPECT_HT(kiln_expand(t, TU_S(0, 3, 2)), KILN_I32, w);
    ht_free(&w);

    kiln_tensor *s = kiln_scalar(ctx, KILN_U8, 7);
    kiln_tensor *e = kiln_expand(s, TU_S(2, 2));
    TU_ASSERT_SHAPE(e, 2, 2);
    TU_EXPECT_VALS(e, KILN_U8, 7, 7, 7, 7);
    kiln_tensor *one = kiln_ones(ctx, KILN_F32, TU_S(1));
    TU_ASSERT_SHAPE(kiln_expand(one, TU_S(0)), 0);

    TU_ASSERT_ERROR(kiln_expand(t, TU_S(4, 1)), KILN_ERR_SHAPE, "kiln_expand", "[3,1]");
    TU_ASSERT_ERROR(kiln_expand(t, TU_S(3)), KILN_ERR_SHAPE, "kiln_expand");
    TU_ASSERT_ERROR(kiln_expand(t, TU_S(2, 6, 1)), KILN_ERR_SHAPE, "kiln_expand");
    ht_free(&a);
}

TU_TEST(view, slice_python_rules) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_F32, 3, TU_DIMS(3, 10, 2));
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, 3, a.dims, a.v);
    const int64_t cases[][3] = {
        {0, KILN_END, 1},
        {1, 4, 2},
        {-3, KILN_END, 1},
        {-100, 100, 1},
        {5, 2, 1},
        {KILN_END, KILN_END, 1},
        {-1, KILN_BEGIN_REV, -1},
        {KILN_END, KILN_BEGIN_REV, -2},
        {4, 1, -1},
        {-2, -100, -3},
        {2, KILN_END, -1},
        {0, 0, 1},
        {100, KILN_END, 1},
        {3, 3, -1},
        {-100, KILN_END, -1},
        {0, KILN_END, 3},
        {9, 0, -4},
        {1, -1, 1},
        {0, KILN_END, INT64_MAX},
        {KILN_END, KILN_BEGIN_REV, -INT64_MAX},
        {KILN_BEGIN_REV, KILN_END, 2},
        {-11, -10, 1},
        {10, 9, -1},
        {8, KILN_BEGIN_REV, 1},
        {3, -8, 1},
        {-7, 2, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (int axis = -1; axis <= 1; axis += 2) {
            ht w = ht_slice(&a, axis, cases[k][0], cases[k][1], cases[k][2]);
            kiln_tensor *y = kiln_slice(t, axis, cases[k][0], cases[k][1], cases[k][2]);
            cr_assert(y && kiln_error(y) == KILN_OK, "[%s] slice case %zu: %s", tu_exec_name(), k,
                      kiln_error_message(y));
            EXPECT_HT(y, KILN_F32, w);
            ht_free(&w);
        }
    }
    /* axis 0 (size 3) with steps past the end */
    ht w = ht_slice(&a, 0, 2, KILN_END, -5);
    EXPECT_HT(kiln_slice(t, 0, 2, KILN_END, -5), KILN_F32, w);
    ht_free(&w);

    TU_ASSERT_ERROR(kiln_slice(t, 1, 0, 5, 0), KILN_ERR_ARG, "kiln_slice");
    TU_ASSERT_ERROR(kiln_slice(t, 3, 0, 5, 1), KILN_ERR_ARG, "kiln_slice");
    TU_ASSERT_ERROR(kiln_slice(t, -4, 0, 5, 1), KILN_ERR_ARG, "kiln_slice");
    ht_free(&a);
}

TU_TEST(view, pad) {
    TU_RNG(r);
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        kiln_dtype dt = all[k];
        ht a = ht_random(&r, dt, 2, TU_DIMS(2, 3));
        kiln_tensor *t = tu_tensor(ctx, dt, 2, a.dims, a.v);
        const int64_t pads[4] = {1, 2, 0, 1};
        double value = tu_is_float(dt) ? 7.5 : dt == KILN_BOOL ? 1 : 7;
        ht w = ht_pad(&a, pads, value);
        EXPECT_HT(kiln_pad(t, pads, value), dt, w);
        ht_free(&w);
        /* the pad value converts as kiln_full does */
        ht w2 = ht_pad(&a, pads, tu_round(dt, -2.75));
        if (dt != KILN_U8)
            EXPECT_HT(kiln_pad(t, pads, -2.75), dt, w2);
        ht_free(&w2);
        ht_free(&a);
    }
    kiln_tensor *f = kiln_arange(ctx, KILN_F64, 0, 3, 1);
    const int64_t p1[2] = {2, 1};
    TU_EXPECT_VALS(kiln_pad(f, p1, NAN), KILN_F64, NAN, NAN, 0, 1, 2, NAN);
    TU_EXPECT_VALS(kiln_pad(f, p1, -INFINITY), KILN_F64, -INFINITY, -INFINITY, 0, 1, 2, -INFINITY);
    const int64_t p0[2] = {0, 0};
    TU_EXPECT_VALS(kiln_pad(f, p0, 9), KILN_F64, 0, 1, 2);
    /* padding an empty tensor gives only the value */
    kiln_tensor *e = kiln_zeros(ctx, KILN_F32, TU_S(0, 2));
    const int64_t pe[4] = {1, 1, 1, 1};
    kiln_tensor *pe_t = kiln_pad(e, pe, 3);
    TU_ASSERT_SHAPE(pe_t, 2, 4);
    TU_EXPECT_VALS(pe_t, KILN_F32, 3, 3, 3, 3, 3, 3, 3, 3);
    /* 0-d: nothing to pad */
    kiln_tensor *s = kiln_pad(kiln_scalar(ctx, KILN_F32, 4), p0, 1);
    TU_ASSERT_SCALAR_SHAPE(s);
    cr_assert_eq(TU_ITEM(s), 4);

    const int64_t bad[2] = {-1, 0};
    TU_ASSERT_ERROR2(kiln_pad(f, bad, 0), KILN_ERR_ARG, KILN_ERR_SHAPE);
    TU_ASSERT_ERROR(kiln_pad(f, NULL, 0), KILN_ERR_ARG, "kiln_pad");
}

TU_TEST(view, flip) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_BF16, 3, TU_DIMS(2, 3, 4));
    kiln_tensor *t = tu_tensor(ctx, KILN_BF16, 3, a.dims, a.v);
    const struct {
        int n;
        int axes[3];
        uint32_t mask;
    } cases[] = {{1, {0}, 1},     {1, {1}, 2},       {1, {-1}, 4},
                 {2, {0, -1}, 5}, {3, {2, 1, 0}, 7}, {0, {0}, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ht w = ht_flip(&a, cases[k].mask);
        EXPECT_HT(kiln_flip(t, cases[k].n, cases[k].axes), KILN_BF16, w);
        ht_free(&w);
    }
    ht w = ht_flip(&a, 7);
    EXPECT_HT(kiln_flip(t, 0, NULL), KILN_BF16, w);
    ht_free(&w);
    /* flipping twice is the identity */
    EXPECT_HT(kiln_flip(kiln_flip(t, TU_AXES(1)), TU_AXES(1)), KILN_BF16, a);
    TU_ASSERT_ERROR(kiln_flip(t, TU_AXES(3)), KILN_ERR_ARG, "kiln_flip");
    ht_free(&a);
}

TU_TEST(view, squeeze_unsqueeze) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_I64, 4, TU_DIMS(1, 3, 1, 2));
    kiln_tensor *t = tu_tensor(ctx, KILN_I64, 4, a.dims, a.v);
    kiln_tensor *s = kiln_squeeze(t, 0, NULL);
    TU_ASSERT_SHAPE(s, 3, 2);
    TU_EXPECT_EXACT(s, KILN_I64, a.v, 6);
    TU_ASSERT_SHAPE(kiln_squeeze(t, TU_AXES(0)), 3, 1, 2);
    TU_ASSERT_SHAPE(kiln_squeeze(t, TU_AXES(-2)), 1, 3, 2);
    TU_ASSERT_SHAPE(kiln_squeeze(t, TU_AXES(2, 0)), 3, 2);
    TU_ASSERT_ERROR(kiln_squeeze(t, TU_AXES(1)), KILN_ERR_SHAPE, "kiln_squeeze");
    TU_ASSERT_ERROR(kiln_squeeze(t, TU_AXES(4)), KILN_ERR_ARG, "kiln_squeeze");
    TU_ASSERT_SHAPE(kiln_squeeze(s, 0, NULL), 3, 2);
    kiln_tensor *ones = kiln_ones(ctx, KILN_F32, TU_S(1, 1));
    TU_ASSERT_SCALAR_SHAPE(kiln_squeeze(ones, 0, NULL));

    TU_ASSERT_SHAPE(kiln_unsqueeze(s, 0), 1, 3, 2);
    TU_ASSERT_SHAPE(kiln_unsqueeze(s, 1), 3, 1, 2);
    TU_ASSERT_SHAPE(kiln_unsqueeze(s, 2), 3, 2, 1);
    TU_ASSERT_SHAPE(kiln_unsqueeze(s, -1), 3, 2, 1);
    TU_ASSERT_SHAPE(kiln_unsqueeze(s, -3), 1, 3, 2);
    TU_EXPECT_EXACT(kiln_unsqueeze(s, -2), KILN_I64, a.v, 6);
    TU_ASSERT_ERROR(kiln_unsqueeze(s, 3), KILN_ERR_ARG, "kiln_unsqueeze");
    TU_ASSERT_ERROR(kiln_unsqueeze(s, -4), KILN_ERR_ARG, "kiln_unsqueeze");
    kiln_tensor *sc = kiln_unsqueeze(kiln_scalar(ctx, KILN_F32, 2), 0);
    TU_ASSERT_SHAPE(sc, 1);
    TU_EXPECT_VALS(sc, KILN_F32, 2);
    ht_free(&a);
}

TU_TEST(view, cat) {
    TU_RNG(r);
    ht p[3] = {ht_random(&r, KILN_F32, 2, TU_DIMS(2, 3)), ht_random(&r, KILN_F32, 2, TU_DIMS(2, 1)),
               ht_random(&r, KILN_F32, 2, TU_DIMS(2, 4))};
    kiln_tensor *t[3];
    for (int i = 0; i < 3; i++)
        t[i] = tu_tensor(ctx, KILN_F32, 2, p[i].dims, p[i].v);
    ht w = ht_cat(3, p, 1);
    EXPECT_HT(kiln_cat(3, t, 1), KILN_F32, w);
    EXPECT_HT(kiln_cat(3, t, -1), KILN_F32, w);
    ht_free(&w);
    /* along axis 0 after transposing each piece */
    kiln_tensor *tt[3];
    ht pt[3];
    for (int i = 0; i < 3; i++) {
        tt[i] = kiln_transpose(t[i], 0, 1);
        pt[i] = ht_transpose(&p[i], 0, 1);
    }
    w = ht_cat(3, pt, 0);
    EXPECT_HT(kiln_cat(3, tt, 0), KILN_F32, w);
    ht_free(&w);
    /* one piece, and a piece of size 0 */
    EXPECT_HT(kiln_cat(1, t, 0), KILN_F32, p[0]);
    kiln_tensor *with_empty[2] = {kiln_zeros(ctx, KILN_F32, TU_S(2, 0)), t[0]};
    EXPECT_HT(kiln_cat(2, with_empty, 1), KILN_F32, p[0]);
    for (int i = 0; i < 3; i++) {
        ht_free(&p[i]);
        ht_free(&pt[i]);
    }
    /* the dtype is the promotion of all */
    kiln_tensor *mix[3] = {tu_tensor(ctx, KILN_I32, TU_S(2), (double[]){-1, 300}),
                           tu_tensor(ctx, KILN_F16, TU_S(1), (double[]){0.5}),
                           tu_tensor(ctx, KILN_U8, TU_S(2), (double[]){255, 0})};
    TU_EXPECT_VALS(kiln_cat(3, mix, 0), KILN_F16, -1, 300, 0.5, 255, 0);
    kiln_tensor *mix2[2] = {tu_tensor(ctx, KILN_BOOL, TU_S(2), (double[]){1, 0}),
                            tu_tensor(ctx, KILN_U8, TU_S(1), (double[]){200})};
    TU_EXPECT_VALS(kiln_cat(2, mix2, 0), KILN_U8, 1, 0, 200);
    kiln_tensor *mix3[2] = {tu_tensor(ctx, KILN_F16, TU_S(1), (double[]){0.1}),
                            tu_tensor(ctx, KILN_BF16, TU_S(1), (double[]){0.1})};
    TU_EXPECT_VALS(kiln_cat(2, mix3, 0), KILN_F32, tu_round(KILN_F16, 0.1),
                   tu_round(KILN_BF16, 0.1));
    /* i64 beyond 2^53 */
    const int64_t big[2] = {(1ll << 60) + 1, -(1ll << 60) - 3};
    kiln_tensor *bt[2] = {tu_tensor_i64(ctx, KILN_I64, TU_S(1), big),
                          tu_tensor_i64(ctx, KILN_I64, TU_S(1), big + 1)};
    TU_EXPECT_I64(kiln_cat(2, bt, 0), KILN_I64, big, 2);

    /* errors */
    kiln_tensor *bad[2] = {kiln_zeros(ctx, KILN_F32, TU_S(2, 3)),
                           kiln_zeros(ctx, KILN_F32, TU_S(3, 3))};
    TU_ASSERT_ERROR(kiln_cat(2, bad, 1), KILN_ERR_SHAPE, "kiln_cat", "[2,3]", "[3,3]");
    TU_ASSERT_ERROR(kiln_cat(2, bad, 2), KILN_ERR_ARG, "kiln_cat");
    kiln_tensor *rank[2] = {kiln_zeros(ctx, KILN_F32, TU_S(2, 3)),
                            kiln_zeros(ctx, KILN_F32, TU_S(3))};
    TU_ASSERT_ERROR(kiln_cat(2, rank, 0), KILN_ERR_SHAPE, "kiln_cat");
    kiln_tensor *scal[2] = {kiln_scalar(ctx, KILN_F32, 1), kiln_scalar(ctx, KILN_F32, 2)};
    TU_ASSERT_ERROR2(kiln_cat(2, scal, 0), KILN_ERR_ARG, KILN_ERR_SHAPE);
}

/* ---- views of views ---- */

TU_TEST(view, reshape_after_transpose_after_slice) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_F32, 2, TU_DIMS(4, 6));
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, 2, a.dims, a.v);
    ht s = ht_slice(&a, 0, 1, KILN_END, 2);    /* [2,6] rows 1, 3 */
    ht tr = ht_transpose(&s, 0, 1);            /* [6,2] */
    ht re = ht_reshape(&tr, 2, TU_DIMS(3, 4)); /* [3,4] */
    kiln_tensor *y =
        kiln_reshape(kiln_transpose(kiln_slice(t, 0, 1, KILN_END, 2), 0, 1), TU_S(3, 4));
    EXPECT_HT(y, KILN_F32, re);
    /* hand check of one element: y[1][2] is flat 6 of the [6,2] transpose,
     * i.e. transpose[3][0] = slice[0][3] = a[1][3] */
    double v[12];
    TU_READ(y, v, 12);
    cr_assert_eq(v[6], a.v[1 * 6 + 3]);
    ht_free(&s);
    ht_free(&tr);
    ht_free(&re);
    ht_free(&a);
}

TU_TEST(view, pad_after_flip_after_expand) {
    double x[3] = {1.5, -2, 4};
    kiln_tensor *t = tu_tensor(ctx, KILN_F64, TU_S(3), x);
    const int64_t pads[4] = {1, 0, 2, 1};
    kiln_tensor *y = kiln_pad(kiln_flip(kiln_expand(t, TU_S(2, 3)), TU_AXES(1)), pads, -1);
    TU_ASSERT_SHAPE(y, 3, 6);
    /* row 0 is padding; rows 1-2 are [-1, -1, 4, -2, 1.5, -1] */
    TU_EXPECT_VALS(y, KILN_F64, -1, -1, -1, -1, -1, -1, -1, -1, 4, -2, 1.5, -1, -1, -1, 4, -2, 1.5,
                   -1);
}

TU_TEST(view, deep_chains) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_F64, 3, TU_DIMS(4, 5, 6));
    kiln_tensor *t = tu_tensor(ctx, KILN_F64, 3, a.dims, a.v);

    /* slice with a negative step, permute, slice again, flatten, expand */
    ht h = ht_slice(&a, 2, -1, KILN_BEGIN_REV, -2);     /* [4,5,3] */
    ht_set(&h, ht_permute(&h, (const int[]){2, 0, 1})); /* [3,4,5] */
    ht_set(&h, ht_slice(&h, 2, 1, 4, 1));               /* [3,4,3] */
    ht_set(&h, ht_reshape(&h, 1, TU_DIMS(-1)));         /* [36] */
    ht_set(&h, ht_expand(&h, 2, TU_DIMS(2, 36)));       /* [2,36] */
    kiln_tensor *y = kiln_slice(t, 2, -1, KILN_BEGIN_REV, -2);
    y = kiln_permute(y, (const int[]){2, 0, 1});
    y = kiln_slice(y, 2, 1, 4, 1);
    y = kiln_reshape(y, TU_S(-1));
    y = kiln_expand(y, TU_S(2, 36));
    EXPECT_HT(y, KILN_F64, h);
    ht_free(&h);

    /* pad, slice into the padding, flip, reshape, transpose */
    const int64_t pads[6] = {0, 1, 2, 0, 1, 1};
    h = ht_pad(&a, pads, 0.25);           /* [5,7,8] */
    ht_set(&h, ht_slice(&h, 1, 0, 3, 1)); /* [5,3,8] mostly padding */
    ht_set(&h, ht_flip(&h, 1 | 4));
    ht_set(&h, ht_reshape(&h, 2, TU_DIMS(15, 8)));
    ht_set(&h, ht_transpose(&h, 0, 1)); /* [8,15] */
    y = kiln_pad(t, pads, 0.25);
    y = kiln_slice(y, 1, 0, 3, 1);
    y = kiln_flip(y, TU_AXES(0, 2));
    y = kiln_reshape(y, TU_S(15, 8));
    y = kiln_transpose(y, 0, 1);
    EXPECT_HT(y, KILN_F64, h);
    /* and compute on it */
    for (int64_t i = 0; i < ht_numel(&h); i++)
        h.v[i] = h.v[i] * 2 + 1;
    EXPECT_HT(kiln_add_scalar(kiln_mul_scalar(y, 2), 1), KILN_F64, h);
    ht_free(&h);

    /* unsqueeze, expand a size-1 axis, transpose, reshape across it */
    h = ht_reshape(&a, 4, TU_DIMS(4, 1, 5, 6));
    ht_set(&h, ht_expand(&h, 4, TU_DIMS(4, 2, 5, 6)));
    ht_set(&h, ht_transpose(&h, 1, 3)); /* [4,6,5,2] */
    ht_set(&h, ht_reshape(&h, 3, TU_DIMS(24, 5, 2)));
    ht_set(&h, ht_slice(&h, 0, 3, 20, 5)); /* [4,5,2] */
    y = kiln_unsqueeze(t, 1);
    y = kiln_expand(y, TU_S(4, 2, 5, 6));
    y = kiln_transpose(y, 1, 3);
    y = kiln_reshape(y, TU_S(24, 5, 2));
    y = kiln_slice(y, 0, 3, 20, 5);
    EXPECT_HT(y, KILN_F64, h);
    ht_free(&h);
    ht_free(&a);
}

/* Applies one random movement op to both h and *t. */
static void random_view_step(tu_rng *r, kiln_dtype dt, ht *h, kiln_tensor **t, char *log,
                             size_t cap) {
    size_t len = strlen(log);
    int nd = h->ndim;
    int64_t n = ht_numel(h);
    for (;;) {
        int op = (int)tu_int(r, 0, 8);
        if (op == 0 && nd >= 2) { /* permute */
            int perm[KILN_MAX_DIMS];
            for (int i = 0; i < nd; i++)
                perm[i] = i;
            for (int i = nd - 1; i > 0; i--) {
                int j = (int)tu_int(r, 0, i), x = perm[i];
                perm[i] = perm[j];
                perm[j] = x;
            }
            ht_set(h, ht_permute(h, perm));
            *t = kiln_permute(*t, perm);
            snprintf(log + len, cap - len, " permute");
            return;
        }
        if (op == 1 && nd >= 1) { /* slice */
            int axis = (int)tu_int(r, 0, nd - 1);
            int64_t sz = h->dims[axis];
            int64_t step = tu_int(r, 1, 3) * (tu_int(r, 0, 1) ? 1 : -1);
            int64_t start = tu_int(r, -sz - 2, sz + 2), stop = tu_int(r, -sz - 2, sz + 2);
            if (tu_int(r, 0, 3) == 0)
                stop = step > 0 ? KILN_END : KILN_BEGIN_REV;
            ht_set(h, ht_slice(h, axis, start, stop, step));
            *t = kiln_slice(*t, axis, start, stop, step);
            snprintf(log + len, cap - len, " slice(%d,%lld,%lld,%lld)", axis, (long long)start,
                     (long long)stop, (long long)step);
            return;
        }
        if (op == 2 && nd >= 1) { /* flip */
            int axes[KILN_MAX_DIMS], na = 0;
            uint32_t mask = 0;
            for (int i = 0; i < nd; i++)
                if (tu_int(r, 0, 1)) {
                    axes[na++] = i;
                    mask |= 1u << i;
                }
            if (!na)
                continue;
            ht_set(h, ht_flip(h, mask));
            *t = kiln_flip(*t, na, axes);
            snprintf(log + len, cap - len, " flip");
            return;
        }
        if (op == 3 && n * 8 < 3000) { /* pad */
            int64_t pads[2 * KILN_MAX_DIMS];
            for (int i = 0; i < 2 * nd; i++)
                pads[i] = tu_int(r, 0, 2);
            /* u8 has no negative values to pad with */
            double value = (double)tu_int(r, dt == KILN_U8 ? 0 : -9, 9) + 0.5;
            ht_set(h, ht_pad(h, pads, value));
            *t = kiln_pad(*t, pads, value);
            snprintf(log + len, cap - len, " pad(%g)", value);
            return;
        }
        if (op == 4 && nd < KILN_MAX_DIMS && n * 3 < 3000) { /* unsqueeze + expand */
            int axis = (int)tu_int(r, 0, nd);
            int64_t d[KILN_MAX_DIMS] = {0};
            for (int i = 0, k = 0; i <= nd; i++)
                d[i] = i == axis ? 1 : h->dims[k++];
            ht_set(h, ht_reshape(h, nd + 1, d));
            *t = kiln_unsqueeze(*t, axis);
            d[axis] = tu_int(r, 1, 3);
            ht_set(h, ht_expand(h, nd + 1, d));
            *t = kiln_expand(*t, nd + 1, d);
            snprintf(log + len, cap - len, " expand(%d,%lld)", axis, (long long)d[axis]);
            return;
        }
        if (op == 5 && nd >= 2) { /* merge two neighbours */
            int axis = (int)tu_int(r, 0, nd - 2);
            int64_t d[KILN_MAX_DIMS] = {0};
            for (int i = 0, k = 0; i < nd; i++) {
                if (i == axis + 1)
                    continue;
                d[k++] = i == axis ? h->dims[i] * h->dims[i + 1] : h->dims[i];
            }
            ht_set(h, ht_reshape(h, nd - 1, d));
            *t = kiln_reshape(*t, nd - 1, d);
            snprintf(log + len, cap - len, " merge(%d)", axis);
            return;
        }
        if (op == 6 && nd >= 1 && nd < KILN_MAX_DIMS) { /* split a dimension */
            int axis = (int)tu_int(r, 0, nd - 1);
            int64_t sz = h->dims[axis], f = sz % 2 == 0 ? 2 : sz % 3 == 0 ? 3 : 1;
            if (f == 1 || sz == 0)
                continue;
            int64_t d[KILN_MAX_DIMS] = {0};
            for (int i = 0, k = 0; i < nd; i++) {
                if (i == axis) {
                    d[k++] = sz / f;
                    d[k++] = f;
                } else {
                    d[k++] = h->dims[i];
                }
            }
            ht_set(h, ht_reshape(h, nd + 1, d));
            *t = kiln_reshape(*t, nd + 1, d);
            snprintf(log + len, cap - len, " split(%d)", axis);
            return;
        }
        if (op == 7 && nd >= 1) { /* squeeze every size-1 axis */
            int64_t d[KILN_MAX_DIMS] = {0};
            int k = 0;
            for (int i = 0; i < nd; i++)
                if (h->dims[i] != 1)
                    d[k++] = h->dims[i];
            ht_set(h, ht_reshape(h, k, d));
            *t = kiln_squeeze(*t, 0, NULL);
            snprintf(log + len, cap - len, " squeeze");
            return;
        }
        if (op == 8 && nd >= 2) { /* transpose */
            int a = (int)tu_int(r, 0, nd - 1), b = (int)tu_int(r, 0, nd - 1);
            ht_set(h, ht_transpose(h, a, b));
            *t = kiln_transpose(*t, a, b);
            snprintf(log + len, cap - len, " transpose(%d,%d)", a, b);
            return;
        }
    }
}

TU_TEST(view, random_chains) {
    TU_RNG(r);
    int ndt;
    const kiln_dtype *all = tu_all_dtypes(&ndt);
    for (int chain = 0; chain < 40; chain++) {
        kiln_dtype dt = all[chain % ndt];
        int nd = (int)tu_int(&r, 1, 4);
        int64_t dims[4];
        for (int i = 0; i < nd; i++)
            dims[i] = tu_int(&r, 1, 5);
        ht h = ht_random(&r, dt, nd, dims);
        kiln_tensor *t = tu_tensor(ctx, dt, nd, dims, h.v);
        char log[2048] = "";
        int steps = (int)tu_int(&r, 3, 7);
        for (int s = 0; s < steps; s++)
            random_view_step(&r, dt, &h, &t, log, sizeof log);
        cr_assert(t && kiln_error(t) == KILN_OK, "[%s] chain %d (%s):%s: %s", tu_exec_name(), chain,
                  tu_dt_name(dt), log, kiln_error_message(t));
        int64_t n = ht_numel(&h);
        double *got = malloc((size_t)(n + 1) * sizeof(double));
        TU_ASSERT_SHAPE_N(t, h.ndim, h.dims);
        for (int64_t i = 0; i < n; i++)
            h.v[i] = tu_round(dt, h.v[i]);
        TU_READ(t, got, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert(tu_same_value(got[i], h.v[i]),
                      "[%s] chain %d (%s):%s: element %lld is %g, expected %g", tu_exec_name(),
                      chain, tu_dt_name(dt), log, (long long)i, got[i], h.v[i]);
        /* a reduction over the view agrees too */
        if (dt == KILN_F32 || dt == KILN_F64 || dt == KILN_I32 || dt == KILN_I64) {
            double s = 0, scale = 1;
            for (int64_t i = 0; i < n; i++) {
                s += h.v[i];
                scale += fabs(h.v[i]);
            }
            double gs;
            TU_READ(kiln_sum(t, 0, NULL, false), &gs, 1);
            double tol = dt == KILN_F64 ? 1e-12 : dt == KILN_F32 ? 1e-5 : 0;
            cr_assert(fabs(gs - s) <= tol * scale,
                      "[%s] chain %d (%s):%s: sum %.17g, expected %.17g", tu_exec_name(), chain,
                      tu_dt_name(dt), log, gs, s);
        }
        free(got);
        ht_free(&h);
    }
}

TU_TEST(view, i64_values_survive_views_exactly) {
    /* values 2^60 + i cannot pass through a double: a view that converted
     * would lose the low bits */
    enum { N = 3 * 4 * 5 };
    int64_t v[N];
    double idx[N];
    for (int i = 0; i < N; i++) {
        v[i] = (1ll << 60) + i;
        idx[i] = i;
    }
    kiln_tensor *t = tu_tensor_i64(ctx, KILN_I64, TU_S(3, 4, 5), v);
    ht h = ht_from(3, TU_DIMS(3, 4, 5), idx);
    const int64_t pads[6] = {1, 0, 0, 0, 0, 2};
    ht_set(&h, ht_permute(&h, (const int[]){2, 0, 1}));
    ht_set(&h, ht_slice(&h, 1, KILN_END, KILN_BEGIN_REV, -2));
    ht_set(&h, ht_pad(&h, pads, -1));
    kiln_tensor *y = kiln_permute(t, (const int[]){2, 0, 1});
    y = kiln_slice(y, 1, KILN_END, KILN_BEGIN_REV, -2);
    y = kiln_pad(y, pads, -1);
    int64_t n = ht_numel(&h);
    int64_t want[128];
    for (int64_t i = 0; i < n; i++)
        want[i] = h.v[i] < 0 ? -1 : (1ll << 60) + (int64_t)h.v[i];
    TU_ASSERT_SHAPE_N(y, h.ndim, h.dims);
    TU_EXPECT_I64(y, KILN_I64, want, n);
    ht_free(&h);
}

TU_TEST(view, views_keep_dtype) {
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        kiln_tensor *t = kiln_ones(ctx, all[k], TU_S(2, 3));
        TU_ASSERT_DTYPE(kiln_reshape(t, TU_S(3, 2)), all[k]);
        TU_ASSERT_DTYPE(kiln_transpose(t, 0, 1), all[k]);
        TU_ASSERT_DTYPE(kiln_expand(t, TU_S(4, 2, 3)), all[k]);
        TU_ASSERT_DTYPE(kiln_slice(t, 1, 0, 2, 1), all[k]);
        TU_ASSERT_DTYPE(kiln_flip(t, 0, NULL), all[k]);
        TU_ASSERT_DTYPE(kiln_unsqueeze(t, 0), all[k]);
        TU_ASSERT_DTYPE(kiln_squeeze(t, 0, NULL), all[k]);
    }
}

TU_TEST(view, eight_dims) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_I32, 8, TU_DIMS(2, 1, 3, 1, 2, 2, 1, 3));
    kiln_tensor *t = tu_tensor(ctx, KILN_I32, 8, a.dims, a.v);
    const int perm[8] = {7, 0, 6, 1, 5, 2, 4, 3};
    ht h = ht_permute(&a, perm);
    kiln_tensor *y = kiln_permute(t, perm);
    EXPECT_HT(y, KILN_I32, h);
    ht_set(&h, ht_flip(&h, 0xA5));
    y = kiln_flip(y, TU_AXES(0, 2, 5, 7));
    EXPECT_HT(y, KILN_I32, h);
    ht_set(&h, ht_slice(&h, 0, KILN_END, KILN_BEGIN_REV, -2));
    y = kiln_slice(y, 0, KILN_END, KILN_BEGIN_REV, -2);
    EXPECT_HT(y, KILN_I32, h);
    ht_set(&h, ht_expand(&h, 8, TU_DIMS(-1, 2, -1, 4, -1, -1, -1, -1)));
    y = kiln_expand(y, TU_S(-1, 2, -1, 4, -1, -1, -1, -1));
    EXPECT_HT(y, KILN_I32, h);
    ht_free(&h);
    ht_free(&a);
}

/* A negative step that starts inside the padding: the padded view's mask must
 * be mirrored exactly (an off-by-one there shifts the pad value by one element,
 * and the reference shares graph/view.c, so the expected values are written
 * out here by hand). Each slice gets a fresh padded tensor: reading one would
 * realize it, and the slice would then be of a plain buffer. */
static kiln_tensor *pad_vec(kiln_ctx *ctx, kiln_dtype dt, int64_t before, int64_t after,
                            double value) {
    kiln_tensor *a = tu_tensor(ctx, dt, 1, TU_DIMS(5), (const double[]){3, -1, 4, 1.5, -5});
    return kiln_pad(a, (const int64_t[]){before, after}, value);
}

/* [[0.5, -2, 3], [7, -4.25, 6]] padded by one row before and two columns after */
static kiln_tensor *pad_mat(kiln_ctx *ctx, kiln_dtype dt, double value) {
    kiln_tensor *m =
        tu_tensor(ctx, dt, 2, TU_DIMS(2, 3), (const double[]){0.5, -2, 3, 7, -4.25, 6});
    return kiln_pad(m, (const int64_t[]){1, 0, 0, 2}, value);
}

TU_TEST(view, negative_step_from_padding) {
    const kiln_dtype dts[] = {KILN_F32, KILN_F64};
    const double fills[] = {9, 0};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
            kiln_dtype dt = dts[k];
            double v = fills[f];
            /* p = [3, -1, 4, 1.5, -5, v, v] */
            TU_EXPECT_VALS(pad_vec(ctx, dt, 0, 2, v), dt, 3, -1, 4, 1.5, -5, v, v);
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 0, 2, v), 0, -1, KILN_BEGIN_REV, -1), dt,
                           v, v, -5, 1.5, 4, -1, 3);
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 0, 2, v), 0, 6, KILN_BEGIN_REV, -2), dt, v,
                           -5, 4, 3);
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 0, 2, v), 0, 5, KILN_BEGIN_REV, -2), dt, v,
                           1.5, -1);
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 0, 2, v), 0, 6, 2, -1), dt, v, v, -5, 1.5);
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 0, 2, v), 0, 5, 3, -1), dt, v, -5);
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 0, 2, v), 0, 6, 4, -1), dt, v, v);
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 0, 2, v), 0, 6, KILN_BEGIN_REV, -3), dt, v,
                           1.5, 3);
            kiln_tensor *r = kiln_slice(pad_vec(ctx, dt, 0, 2, v), 0, -1, KILN_BEGIN_REV, -1);
            TU_EXPECT_VALS(kiln_slice(r, 0, 1, KILN_END, 2), dt, v, 1.5, -1);
            TU_EXPECT_VALS(
                kiln_sum(kiln_slice(pad_vec(ctx, dt, 0, 2, v), 0, 6, KILN_BEGIN_REV, -2), 0, NULL,
                         false),
                dt, v + 2);

            /* q = [v, v, 3, -1, 4, 1.5, -5, v, v] */
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 2, 2, v), 0, 8, KILN_BEGIN_REV, -2), dt, v,
                           -5, 4, 3, v);
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 2, 2, v), 0, 7, KILN_BEGIN_REV, -3), dt, v,
                           4, v);
            TU_EXPECT_VALS(kiln_slice(pad_vec(ctx, dt, 2, 2, v), 0, 1, KILN_BEGIN_REV, -1), dt, v,
                           v);

            /* P = [[v,   v,     v, v, v],
             *      [0.5, -2,    3, v, v],
             *      [7,   -4.25, 6, v, v]] */
            TU_ASSERT_SHAPE(pad_mat(ctx, dt, v), 3, 5);
            TU_EXPECT_VALS(kiln_slice(pad_mat(ctx, dt, v), 1, -1, KILN_BEGIN_REV, -1), dt, v, v,
                           v, v, v, v, v, 3, -2, 0.5, v, v, 6, -4.25, 7);
            TU_EXPECT_VALS(kiln_slice(pad_mat(ctx, dt, v), 1, 4, KILN_BEGIN_REV, -2), dt, v, v, v,
                           v, 3, 0.5, v, 6, 7);
            TU_EXPECT_VALS(kiln_slice(pad_mat(ctx, dt, v), 1, 3, KILN_BEGIN_REV, -2), dt, v, v, v,
                           -2, v, -4.25);
            kiln_tensor *c2 = kiln_slice(pad_mat(ctx, dt, v), 1, 4, KILN_BEGIN_REV, -2);
            TU_EXPECT_VALS(kiln_slice(c2, 0, -1, KILN_BEGIN_REV, -2), dt, v, 6, 7, v, v, v);
            TU_EXPECT_VALS(kiln_slice(kiln_slice(pad_mat(ctx, dt, v), 0, 2, 0, -1), 1, 4, 1, -1),
                           dt, v, v, 6, v, v, 3);
            /* the padded row reached by a negative step on axis 0 */
            kiln_tensor *rows = kiln_slice(pad_mat(ctx, dt, v), 0, 2, KILN_BEGIN_REV, -2);
            TU_EXPECT_VALS(kiln_slice(rows, 1, 2, KILN_BEGIN_REV, -1), dt, 6, -4.25, 7, v, v, v);
            kiln_tensor *rows1 = kiln_slice(pad_mat(ctx, dt, v), 0, 1, KILN_BEGIN_REV, -1);
            TU_EXPECT_VALS(kiln_slice(rows1, 1, 4, KILN_BEGIN_REV, -1), dt, v, v, 3, -2, 0.5, v,
                           v, v, v, v);
        }
    }
}

/* Two padded views of one source that differ only in where their mask ends
 * (or starts) are different nodes and different programs: read together (one
 * kernel, in lazy mode) or one after the other, each keeps its own padding. */
TU_TEST(view, views_differing_only_in_mask_end) {
    kiln_tensor *a = tu_tensor(ctx, KILN_F32, 1, TU_DIMS(6), (const double[]){1, -2, 3, 4, 5, 6});
    kiln_tensor *p3 = kiln_pad(kiln_slice(a, 0, 0, 3, 1), (const int64_t[]){0, 2}, 0);
    kiln_tensor *p4 = kiln_pad(kiln_slice(a, 0, 0, 4, 1), (const int64_t[]){0, 1}, 0);
    TU_EXPECT_VALS(kiln_sub(p4, kiln_mul(p3, p3)), KILN_F32, 0, -6, -6, 4, 0);
    kiln_tensor *q1 = kiln_pad(kiln_slice(a, 0, 1, 4, 1), (const int64_t[]){1, 0}, 0);
    kiln_tensor *q2 = kiln_pad(kiln_slice(a, 0, 2, 4, 1), (const int64_t[]){2, 0}, 0);
    TU_EXPECT_VALS(kiln_add(q1, kiln_mul(q2, q2)), KILN_F32, 0, -2, 12, 20);
    /* and one after the other: the compiled program of the first must not
     * serve the second */
    TU_EXPECT_VALS(kiln_mul_scalar(kiln_pad(kiln_slice(a, 0, 0, 3, 1), (const int64_t[]){0, 2}, 0),
                                   2),
                   KILN_F32, 2, -4, 6, 0, 0);
    TU_EXPECT_VALS(kiln_mul_scalar(kiln_pad(kiln_slice(a, 0, 0, 4, 1), (const int64_t[]){0, 1}, 0),
                                   2),
                   KILN_F32, 2, -4, 6, 8, 0);
}

/* Views of padded views against ht, which shares nothing with graph/view.c
 * (the reference evaluator does, so comparing with it cannot catch a wrong
 * mask): positive-step slices whose mask ends between two steps, flips,
 * a transpose of a tensor padded differently on each axis, reshapes that
 * merge a padded outer axis with a full inner one, and chains of them. */
TU_TEST(view, views_of_padded_views) {
    TU_RNG(r);
    ht a = ht_random(&r, KILN_F32, 2, TU_DIMS(3, 4));
    kiln_tensor *t = tu_tensor(ctx, KILN_F32, 2, a.dims, a.v);
    const int64_t both[4] = {2, 1, 1, 3}, rows[4] = {2, 1, 0, 0};
    const int64_t *pads[2] = {both, rows};
    for (int q = 0; q < 2; q++) {
        ht p = ht_pad(&a, pads[q], 0);
        kiln_tensor *tp = kiln_pad(t, pads[q], 0);
        for (int axis = 0; axis < 2; axis++)
            for (int64_t step = 2; step <= 3; step++)
                for (int64_t start = 0; start < 3; start++) {
                    ht s = ht_slice(&p, axis, start, p.dims[axis], step);
                    EXPECT_HT(kiln_slice(tp, axis, start, KILN_END, step), KILN_F32, s);
                    ht_free(&s);
                }
        for (uint32_t mask = 1; mask <= 3; mask++) {
            ht f = ht_flip(&p, mask);
            int axes[2], n = 0;
            for (int d = 0; d < 2; d++)
                if (mask & (1u << d))
                    axes[n++] = d;
            kiln_tensor *tf = kiln_flip(tp, n, axes);
            EXPECT_HT(tf, KILN_F32, f);
            /* a slice of the flip */
            ht fs = ht_slice(&f, 1, 1, f.dims[1], 2);
            EXPECT_HT(kiln_slice(tf, 1, 1, KILN_END, 2), KILN_F32, fs);
            ht_free(&fs);
            ht_free(&f);
        }
        ht tr = ht_transpose(&p, 0, 1);
        kiln_tensor *ttr = kiln_transpose(tp, 0, 1);
        EXPECT_HT(ttr, KILN_F32, tr);
        int64_t flat = ht_numel(&p);
        ht flat_p = ht_reshape(&p, 1, &flat);
        EXPECT_HT(kiln_reshape(tp, 1, &flat), KILN_F32, flat_p);
        const int64_t split[3] = {2, 3, p.dims[1]};
        ht sp = ht_reshape(&p, 3, split);
        EXPECT_HT(kiln_reshape(tp, 3, split), KILN_F32, sp);
        ht trf = ht_reshape(&tr, 1, &flat);
        EXPECT_HT(kiln_reshape(ttr, 1, &flat), KILN_F32, trf);
        ht_free(&trf);
        ht_free(&sp);
        ht_free(&flat_p);
        ht_free(&tr);
        ht_free(&p);
    }
    ht_free(&a);
}
