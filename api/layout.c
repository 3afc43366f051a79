/* layout.c — creation and layout ops composed from ranges, comparisons,
 * where, views and cats: kiln_eye, kiln_linspace, kiln_tril, kiln_triu,
 * kiln_diag and kiln_diagonal; kiln_stack, kiln_repeat,
 * kiln_repeat_interleave, kiln_roll and kiln_pad_mode. Each fuses with
 * whatever reads it; none materialises an index tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

kiln_tensor *kiln_eye(kiln_ctx *ctx, kiln_dtype dt, int64_t n, int64_t m) {
    if (!ctx)
        return NULL;
    if (!api_valid_dtype(dt))
        return api_fail(ctx, KILN_ERR_DTYPE, "kiln_eye: unknown dtype %d", (int)dt);
    const int64_t dims[2] = {n, m};
    kiln_tensor *bad = api_check_shape("kiln_eye", ctx, 2, dims);
    if (bad)
        return bad;
    kiln_scope_begin(ctx);
    kiln_tensor *rows = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)n, 1), 1);
    kiln_tensor *cols = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)m, 1), 0);
    kiln_tensor *r = kiln_cast(kiln_eq(rows, cols), dt);
    /* an empty side gives arange's empty vector: the shape still says [n, m] */
    if (n == 0 || m == 0)
        r = kiln_zeros(ctx, dt, 2, dims);
    return api_finish(ctx, r);
}

kiln_tensor *kiln_linspace(kiln_ctx *ctx, kiln_dtype dt, double start, double stop, int64_t n) {
    if (!ctx)
        return NULL;
    if (!api_valid_dtype(dt))
        return api_fail(ctx, KILN_ERR_DTYPE, "kiln_linspace: unknown dtype %d", (int)dt);
    if (n < 0 || !isfinite(start) || !isfinite(stop))
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_linspace: %lld points from %g to %g: the count must be >= 0 and "
                        "the bounds finite",
                        (long long)n, start, stop);
    kiln_tensor *bad = api_check_shape("kiln_linspace", ctx, 1, &n);
    if (bad)
        return bad;
    if (n <= 1)
        return n == 0 ? kiln_zeros(ctx, dt, 1, &n) : kiln_full(ctx, dt, 1, &n, start);
    /* start + i step in f64, and the last point exactly stop, as NumPy's */
    double step = (stop - start) / (double)(n - 1);
    kiln_scope_begin(ctx);
    const int64_t one = 1;
    kiln_tensor *parts[2] = {
        api_wrap(ctx, graph_arange(ctx->g, dt, n - 1, start, step), "kiln_linspace"),
        kiln_full(ctx, dt, 1, &one, stop)};
    return api_finish(ctx, kiln_cat(2, parts, 0));
}

/* Keeps the elements of the last two axes with col - row <= k (lower) or
 * >= k (upper), zero elsewhere. */
static kiln_tensor *triangle(const char *op, kiln_tensor *t, int64_t k, bool lower) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int nd = t->node->ndim;
    if (nd < 2)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s needs at least 2 dimensions", op,
                        api_shape_str(t->node));
    int64_t n = t->node->shape[nd - 2], m = t->node->shape[nd - 1];
    kiln_scope_begin(ctx);
    kiln_tensor *rows = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)n, 1), 1);
    kiln_tensor *cols = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)m, 1), 0);
    kiln_tensor *d = kiln_sub(cols, rows);
    kiln_tensor *keep = lower ? api_le_literal(d, (double)k) : api_ge_literal(d, (double)k);
    /* An empty matrix is its own triangle, but in a handle of its own: the
     * caller may release the result and keep t (found by tests/fuzz). */
    kiln_tensor *r = n == 0 || m == 0
                         ? api_wrap(ctx, graph_ref(t->node), op)
                         : kiln_where(keep, t, kiln_scalar(ctx, kiln_dtype_of(t), 0));
    return api_finish(ctx, r);
}

kiln_tensor *kiln_tril(kiln_tensor *t, int64_t k) { return triangle("kiln_tril", t, k, true); }
kiln_tensor *kiln_triu(kiln_tensor *t, int64_t k) { return triangle("kiln_triu", t, k, false); }

/* ---- helpers of the compositions over one axis (api.h) ---- */

kiln_tensor *api_axis_last(kiln_tensor *t, int ax, const int64_t *sizes) {
    int nd = kiln_ndim(t), perm[KILN_MAX_DIMS], k = 0;
    for (int d = 0; d < nd; d++)
        if (d != ax) {
            if (sizes && sizes[d] != kiln_shape(t)[d])
                t = kiln_slice(t, d, 0, sizes[d], 1);
            perm[k++] = d;
        }
    perm[nd - 1] = ax;
    return kiln_permute(t, perm);
}

kiln_tensor *api_axis_back(kiln_tensor *t, int ax) {
    int nd = kiln_ndim(t), perm[KILN_MAX_DIMS];
    for (int d = 0, k = 0; d < nd; d++)
        perm[d] = d == ax ? nd - 1 : k++;
    return kiln_permute(t, perm);
}

/* ---- joining, repeating and rolling: views, expands and cats ---- */

kiln_tensor *kiln_stack(int n, kiln_tensor *const *ts, int axis) {
    const char *op = "kiln_stack";
    if (n <= 0 || !ts)
        return NULL;
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, n, ts, &ctx);
    /* api_check passes every-NULL arguments as usable (there is no context to
     * hold an error), and ts[0] is then NULL: found by tests/fuzz. */
    if (e || !ts[0])
        return e;
    int nd = ts[0]->node->ndim, ax;
    if (!api_axis(axis, nd + 1, &ax))
        return api_fail(ctx, KILN_ERR_ARG, "%s: axis %d is out of range for %d-d inputs", op,
                        axis, nd);
    for (int i = 1; i < n; i++) {
        const graph_node *a = ts[0]->node, *b = ts[i]->node;
        if (b->ndim != nd || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)nd))
            return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %d is %s, input 0 %s: stacked "
                            "tensors have one shape", op, i, api_shape_str(b), api_shape_str(a));
    }
    if (nd + 1 > KILN_MAX_DIMS)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: stacking %d-d inputs makes more than %d dims",
                        op, nd, KILN_MAX_DIMS);
    kiln_scope_begin(ctx);
    kiln_tensor *parts[64], **p = n <= 64 ? parts : malloc(sizeof *p * (size_t)n);
    if (!p) {
        kiln_scope_end(ctx);
        return api_fail(ctx, KILN_ERR_OOM, "%s: out of memory", op);
    }
    for (int i = 0; i < n; i++)
        p[i] = kiln_unsqueeze(ts[i], ax);
    kiln_tensor *r = kiln_cat(n, p, ax);
    if (p != parts)
        free(p);
    return api_finish(ctx, r);
}

kiln_tensor *kiln_repeat(kiln_tensor *t, int nreps, const int64_t *reps) {
    const char *op = "kiln_repeat";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int nd = t->node->ndim;
    if (nreps < nd || nreps > KILN_MAX_DIMS || (nreps && !reps))
        return api_fail(ctx, KILN_ERR_ARG, "%s: %d repeat counts for input %s (at least one per "
                        "axis, at most %d)", op, nreps, api_shape_str(t->node), KILN_MAX_DIMS);
    if (nreps == KILN_MAX_DIMS)
        return api_fail(ctx, KILN_ERR_ARG, "%s: %d repeat counts leave no room for the axis "
                        "each repeat adds (at most %d)", op, nreps, KILN_MAX_DIMS - 1);
    int64_t shape[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
    for (int d = 0; d < nreps; d++) {
        if (reps[d] < 0)
            return api_fail(ctx, KILN_ERR_ARG, "%s: repeat count %lld of axis %d is negative",
                            op, (long long)reps[d], d);
        shape[d] = d < nreps - nd ? 1 : t->node->shape[d - (nreps - nd)];
        if (shape[d] && reps[d] > INT64_MAX / shape[d])
            return api_fail(ctx, KILN_ERR_OOM, "%s: %s repeated has too many elements", op,
                            api_shape_str(t->node));
        out[d] = shape[d] * reps[d];
    }
    kiln_tensor *bad = api_check_shape(op, ctx, nreps, out);
    if (bad)
        return bad;
    /* One axis at a time: [.., s, ..] -> [.., 1, s, ..] expanded to r, joined. */
    kiln_scope_begin(ctx);
    kiln_tensor *x = kiln_reshape(t, nreps, shape);
    int64_t cur[KILN_MAX_DIMS];
    memcpy(cur, shape, sizeof(int64_t) * (size_t)nreps);
    for (int d = 0; d < nreps; d++) {
        if (reps[d] == 1)
            continue;
        int64_t wide[KILN_MAX_DIMS];
        x = kiln_unsqueeze(x, d);
        for (int k = 0, j = 0; k <= nreps; k++)
            wide[k] = k == d ? reps[d] : cur[j++];
        x = kiln_expand(x, nreps + 1, wide);
        cur[d] *= reps[d];
        x = kiln_reshape(x, nreps, cur);
    }
    return api_finish(ctx, x);
}

kiln_tensor *kiln_repeat_interleave(kiln_tensor *t, int64_t repeats, int axis) {
    const char *op = "kiln_repeat_interleave";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int nd = t->node->ndim, ax;
    if ((e = api_one_axis(op, ctx, t->node, axis, &ax)))
        return e;
    if (repeats < 0)
        return api_fail(ctx, KILN_ERR_ARG, "%s: repeats %lld is negative", op,
                        (long long)repeats);
    int64_t out[KILN_MAX_DIMS], wide[KILN_MAX_DIMS];
    memcpy(out, t->node->shape, sizeof(int64_t) * (size_t)nd);
    if (out[ax] && repeats > INT64_MAX / out[ax])
        return api_fail(ctx, KILN_ERR_OOM, "%s: too many elements", op);
    out[ax] *= repeats;
    kiln_tensor *bad = api_check_shape(op, ctx, nd, out);
    if (bad)
        return bad;
    if (nd + 1 > KILN_MAX_DIMS)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s has no room for a repeat axis", op,
                        api_shape_str(t->node));
    kiln_scope_begin(ctx);
    for (int k = 0, j = 0; k <= nd; k++)
        wide[k] = k == ax + 1 ? repeats : t->node->shape[j++];
    kiln_tensor *x = kiln_expand(kiln_unsqueeze(t, ax + 1), nd + 1, wide);
    return api_finish(ctx, kiln_reshape(x, nd, out));
}

kiln_tensor *kiln_roll(kiln_tensor *t, int64_t shift, int axis) {
    const char *op = "kiln_roll";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int ax;
    if ((e = api_one_axis(op, ctx, t->node, axis, &ax)))
        return e;
    int64_t n = t->node->shape[ax];
    int64_t s = n ? ((shift % n) + n) % n : 0;
    if (s == 0)
        return api_wrap(ctx, graph_ref(t->node), op);
    /* element i of the result is element (i - s) mod n: the last s first */
    kiln_scope_begin(ctx);
    kiln_tensor *parts[2] = {kiln_slice(t, ax, n - s, n, 1), kiln_slice(t, ax, 0, n - s, 1)};
    return api_finish(ctx, kiln_cat(2, parts, ax));
}

kiln_tensor *kiln_diagonal(kiln_tensor *t, int64_t offset, int axis1, int axis2) {
    const char *op = "kiln_diagonal";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int nd = t->node->ndim, a1, a2;
    if (nd < 2 || !api_axis(axis1, nd, &a1) || !api_axis(axis2, nd, &a2) || a1 == a2)
        return api_fail(ctx, KILN_ERR_ARG, "%s: axes %d and %d are not two axes of input %s",
                        op, axis1, axis2, api_shape_str(t->node));
    int64_t n = t->node->shape[a1], m = t->node->shape[a2];
    int64_t len = offset >= 0 ? (m - offset < n ? m - offset : n) : (n + offset < m ? n + offset : m);
    if (len < 0)
        len = 0;
    /* the two axes last, flattened: the diagonal is every (m + 1)-th element */
    int perm[KILN_MAX_DIMS], k = 0;
    int64_t flat[KILN_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        if (d != a1 && d != a2) {
            flat[k] = t->node->shape[d];
            perm[k++] = d;
        }
    perm[k] = a1;
    perm[k + 1] = a2;
    flat[k] = n * m;
    kiln_scope_begin(ctx);
    kiln_tensor *x = kiln_reshape(kiln_permute(t, perm), k + 1, flat);
    int64_t start = offset >= 0 ? offset : -offset * m;
    kiln_tensor *r = len == 0 ? kiln_slice(x, k, 0, 0, 1)
                              : kiln_slice(x, k, start, start + (len - 1) * (m + 1) + 1, m + 1);
    return api_finish(ctx, r);
}

kiln_tensor *kiln_diag(kiln_tensor *t, int64_t k) {
    const char *op = "kiln_diag";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int nd = t->node->ndim;
    if (nd == 2)
        return kiln_diagonal(t, k, 0, 1);
    if (nd != 1)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s is neither a vector nor a matrix", op,
                        api_shape_str(t->node));
    /* A vector of n on diagonal k of an (n + |k|)-square matrix. */
    int64_t n = t->node->shape[0], side = n + (k < 0 ? -k : k);
    kiln_scope_begin(ctx);
    kiln_tensor *rows = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)side, 1), 1);
    kiln_tensor *cols = kiln_unsqueeze(kiln_arange(ctx, KILN_I64, 0, (double)side, 1), 0);
    kiln_tensor *on = api_eq_literal(kiln_sub(cols, rows), (double)k);
    /* row i holds v[i] (k >= 0) or v[i + k]: v padded to the side, per row */
    int64_t pads[2] = {k < 0 ? -k : 0, k < 0 ? 0 : k};
    kiln_tensor *v = kiln_unsqueeze(kiln_pad(t, pads, 0), 1);
    const int64_t dims[2] = {side, side};
    kiln_tensor *r = side == 0 ? kiln_zeros(ctx, kiln_dtype_of(t), 2, dims)
                               : kiln_where(on, kiln_expand(v, 2, dims),
                                            kiln_scalar(ctx, kiln_dtype_of(t), 0));
    return api_finish(ctx, r);
}

/* ---- padding that repeats the tensor's own elements ---- */

/* One axis of t padded by before and after elements in mode m. */
static kiln_tensor *pad_axis(kiln_tensor *t, int ax, int64_t before, int64_t after,
                             kiln_padding m) {
    int64_t n = kiln_shape(t)[ax];
    kiln_tensor *parts[3];
    int k = 0;
    int64_t side[2] = {before, after};
    for (int s = 0; s < 2; s++) {
        int64_t p = side[s];
        kiln_tensor *piece = NULL;
        if (p == 0) {
            if (s == 0)
                parts[k++] = t;
            continue;
        }
        if (m == KILN_PAD_REFLECT) /* the edge element is not repeated */
            piece = s == 0 ? kiln_flip(kiln_slice(t, ax, 1, p + 1, 1), 1, &ax)
                           : kiln_flip(kiln_slice(t, ax, n - 1 - p, n - 1, 1), 1, &ax);
        else if (m == KILN_PAD_CIRCULAR)
            piece = s == 0 ? kiln_slice(t, ax, n - p, n, 1) : kiln_slice(t, ax, 0, p, 1);
        else {
            int64_t shape[KILN_MAX_DIMS];
            memcpy(shape, kiln_shape(t), sizeof(int64_t) * (size_t)kiln_ndim(t));
            shape[ax] = p;
            piece = kiln_expand(kiln_slice(t, ax, s == 0 ? 0 : n - 1, s == 0 ? 1 : n, 1),
                                kiln_ndim(t), shape);
        }
        if (s == 0) {
            parts[k++] = piece;
            parts[k++] = t;
        } else {
            parts[k++] = piece;
        }
    }
    return k == 1 ? parts[0] : kiln_cat(k, parts, ax);
}

kiln_tensor *kiln_pad_mode(kiln_tensor *t, const int64_t *pads, kiln_padding mode) {
    const char *op = "kiln_pad_mode";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    if (mode != KILN_PAD_REFLECT && mode != KILN_PAD_REPLICATE && mode != KILN_PAD_CIRCULAR)
        return api_fail(ctx, KILN_ERR_ARG, "%s: mode %d is not a kiln_padding", op, (int)mode);
    int nd = t->node->ndim;
    if (nd && !pads)
        return api_fail(ctx, KILN_ERR_ARG, "%s: NULL pads", op);
    static const char *const names[] = {"", "reflect", "replicate", "circular"};
    for (int d = 0; d < nd; d++) {
        int64_t n = t->node->shape[d], b = pads[2 * d], a = pads[2 * d + 1];
        /* reflect needs a neighbour to mirror; circular wraps at most once */
        int64_t most = mode == KILN_PAD_REFLECT ? n - 1 : mode == KILN_PAD_CIRCULAR ? n : INT64_MAX;
        if (b < 0 || a < 0 || b > most || a > most || (mode == KILN_PAD_REPLICATE && n == 0 && (a || b)))
            return api_fail(ctx, KILN_ERR_ARG,
                            "%s: %s padding of (%lld, %lld) on axis %d of input %s: each must be "
                            "in [0, %s]",
                            op, names[mode], (long long)b, (long long)a, d,
                            api_shape_str(t->node),
                            mode == KILN_PAD_REFLECT ? "size - 1" : mode == KILN_PAD_CIRCULAR ? "size" : "any, for a non-empty axis");
    }
    kiln_scope_begin(ctx);
    kiln_tensor *x = t;
    for (int d = 0; d < nd; d++)
        if (pads[2 * d] || pads[2 * d + 1])
            x = pad_axis(x, d, pads[2 * d], pads[2 * d + 1], mode);
    return api_finish(ctx, x);
}
