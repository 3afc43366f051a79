/* sort.c — kiln_sort, kiln_argsort and kiln_topk along one axis, as a bitonic
 * sorting network composed of views, comparisons and where. The axis is
 * padded to a power of two m with elements that sort last (by their index);
 * each of the
 * log2(m)(log2(m)+1)/2 stages compares every element with its partner half a
 * block away and swaps the pair where the block's direction says so. The
 * network sorts any total order, and it sorts (value, original index): so
 * the sort is stable, and the indices come with it. NaN sorts last (NumPy's
 * order) ascending and first descending (PyTorch's, where NaN is the
 * largest). Each stage reads the one before twice, so it is its own kernel:
 * m log^2 m work, against n log n for a merge sort in one kernel, the price
 * of a composition that every executor, autograd (values move through where)
 * and fusion already handle. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "api/api.h"

/* Whether a sorts strictly before b as a key (ties not decided here). */
static kiln_tensor *key_before(kiln_tensor *a, kiln_tensor *b, bool descending, bool fl) {
    kiln_tensor *r = descending ? kiln_gt(a, b) : kiln_lt(a, b);
    if (!fl)
        return r;
    /* NaN: after everything ascending, before everything descending */
    kiln_tensor *na = kiln_ne(a, a), *nb = kiln_ne(b, b);
    kiln_tensor *nan_order = descending ? kiln_bitwise_and(na, kiln_bitwise_not(nb))
                                        : kiln_bitwise_and(kiln_bitwise_not(na), nb);
    return kiln_bitwise_or(r, nan_order);
}

static kiln_tensor *key_equal(kiln_tensor *a, kiln_tensor *b, bool fl) {
    kiln_tensor *r = kiln_eq(a, b);
    return fl ? kiln_bitwise_or(r, kiln_bitwise_and(kiln_ne(a, a), kiln_ne(b, b))) : r;
}

/* Sorts t along axis into *values and *indices (either may be NULL).
 * Returns NULL when both were made, else the error handle. */
static kiln_tensor *sort_network(const char *op, kiln_tensor *t, int axis, bool descending,
                                 kiln_tensor **values, kiln_tensor **indices) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e)
        return e;
    int nd = t->node->ndim, ax;
    if (nd == 0)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: a 0-d tensor has no axis %d to sort", op, axis);
    if ((e = api_one_axis(op, ctx, t->node, axis, &ax)))
        return e;
    if (nd + 2 > KILN_MAX_DIMS)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s: sorting needs two spare dimensions",
                        op, api_shape_str(t->node));
    kiln_dtype dt = t->node->dtype;
    int64_t n = t->node->shape[ax];
    kiln_scope_begin(ctx);
    kiln_dtype kdt = dt == KILN_BOOL ? KILN_U8 : dt;
    bool fl = graph_dtype_is_float(kdt);
    kiln_tensor *x = kiln_cast(api_axis_last(t, ax, NULL), kdt); /* [..., n] */
    int64_t lead[KILN_MAX_DIMS];
    memcpy(lead, kiln_shape(x), sizeof(int64_t) * (size_t)nd);
    /* Nothing to order in an empty tensor: no network, which for an empty
     * tensor with a long axis (2^43 beside a 0) would be ~950 stages of
     * nodes for the scheduler to cut, seconds of work for no element. */
    bool empty = graph_numel(t->node) == 0;
    int64_t m = empty ? n : 1;
    while (m < n)
        m *= 2;
    if (m > n) {
        int64_t pads[2 * KILN_MAX_DIMS] = {0};
        pads[2 * (nd - 1) + 1] = m - n;
        x = kiln_pad(x, pads, 0); /* padding sorts last by its index, whatever it holds */
    }
    int64_t full[KILN_MAX_DIMS];
    memcpy(full, lead, sizeof(int64_t) * (size_t)nd);
    full[nd - 1] = m;
    kiln_tensor *idx = empty ? kiln_zeros(ctx, KILN_I64, nd, full)
                             : kiln_expand(kiln_arange(ctx, KILN_I64, 0, (double)m, 1), nd, full);
    for (int64_t blk = 2; !empty && blk <= m; blk *= 2)
        for (int64_t j = blk / 2; j >= 1; j /= 2) {
            /* [..., m] as [..., m / 2j, 2, j]: pairs (lo, hi) j apart */
            int64_t split[KILN_MAX_DIMS];
            memcpy(split, lead, sizeof(int64_t) * (size_t)(nd - 1));
            split[nd - 1] = m / (2 * j);
            split[nd] = 2;
            split[nd + 1] = j;
            kiln_tensor *xs = kiln_reshape(x, nd + 2, split), *is = kiln_reshape(idx, nd + 2, split);
            kiln_tensor *lo = kiln_slice(xs, nd, 0, 1, 1), *hi = kiln_slice(xs, nd, 1, 2, 1);
            kiln_tensor *li = kiln_slice(is, nd, 0, 1, 1), *hj = kiln_slice(is, nd, 1, 2, 1);
            /* block b runs up when bit blk of its first position b * 2j is clear */
            kiln_tensor *b = kiln_arange(ctx, KILN_I64, 0, (double)(m / (2 * j)), 1);
            kiln_tensor *up = api_eq_literal(
                kiln_bitwise_and(api_mul_literal(b, (double)(2 * j)),
                                 kiln_scalar(ctx, KILN_I64, (double)blk)),
                0);
            up = kiln_reshape(up, 3, (const int64_t[]){m / (2 * j), 1, 1});
            /* hi before lo: a real element before padding (index n on), then
             * by key, then by index; out of order in a block going up */
            kiln_tensor *ph = api_ge_literal(hj, (double)n), *pl = api_ge_literal(li, (double)n);
            kiln_tensor *by_key =
                kiln_bitwise_or(key_before(hi, lo, descending, fl),
                                kiln_bitwise_and(key_equal(hi, lo, fl), kiln_lt(hj, li)));
            kiln_tensor *hi_first =
                kiln_bitwise_or(kiln_bitwise_and(kiln_bitwise_not(ph), pl),
                                kiln_bitwise_and(kiln_eq(ph, pl), by_key));
            kiln_tensor *swap = kiln_where(up, hi_first, kiln_bitwise_not(hi_first));
            kiln_tensor *vparts[2] = {kiln_where(swap, hi, lo), kiln_where(swap, lo, hi)};
            kiln_tensor *iparts[2] = {kiln_where(swap, hj, li), kiln_where(swap, li, hj)};
            x = kiln_reshape(kiln_cat(2, vparts, nd), nd, full);
            idx = kiln_reshape(kiln_cat(2, iparts, nd), nd, full);
        }
    if (m > n) {
        x = kiln_slice(x, nd - 1, 0, n, 1);
        idx = kiln_slice(idx, nd - 1, 0, n, 1);
    }
    x = kiln_cast(api_axis_back(x, ax), dt);
    idx = api_axis_back(idx, ax);
    kiln_tensor *keep[2] = {x, idx};
    for (int i = 0; i < 2; i++)
        kiln_keep(keep[i]);
    kiln_scope_end(ctx);
    if (values)
        *values = x;
    else
        kiln_release(x);
    if (indices)
        *indices = idx;
    else
        kiln_release(idx);
    return NULL;
}

kiln_tensor *kiln_sort(kiln_tensor *t, int axis, bool descending) {
    if (!t)
        return NULL;
    kiln_tensor *v = NULL, *e = sort_network("kiln_sort", t, axis, descending, &v, NULL);
    return e ? e : v;
}

kiln_tensor *kiln_argsort(kiln_tensor *t, int axis, bool descending) {
    if (!t)
        return NULL;
    kiln_tensor *i = NULL, *e = sort_network("kiln_argsort", t, axis, descending, NULL, &i);
    return e ? e : i;
}

kiln_tensor *kiln_topk(kiln_tensor *t, int64_t k, int axis, bool largest, kiln_tensor **indices) {
    const char *op = "kiln_topk";
    if (indices)
        *indices = NULL;
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int ax;
    if ((e = api_one_axis(op, ctx, t->node, axis, &ax)))
        return e;
    if (k < 0 || k > t->node->shape[ax])
        return api_fail(ctx, KILN_ERR_ARG, "%s: k = %lld of an axis of %lld (input %s)", op,
                        (long long)k, (long long)t->node->shape[ax], api_shape_str(t->node));
    kiln_tensor *v = NULL, *i = NULL;
    if ((e = sort_network(op, t, ax, largest, &v, indices ? &i : NULL)))
        return e;
    kiln_tensor *r = kiln_slice(v, ax, 0, k, 1);
    kiln_release(v);
    if (indices) {
        *indices = kiln_slice(i, ax, 0, k, 1);
        kiln_release(i);
    }
    return r;
}
