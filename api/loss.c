/* loss.c — the losses with PyTorch's options: cross-entropy with class
 * weights, an ignored index and label smoothing, over [N, C, d...] as well
 * as [N, C]; the negative log-likelihood of log-probabilities; binary
 * cross-entropy on logits with a positive-class weight; KL divergence; MSE,
 * Huber and smooth L1; and std_mean. Each is a composition of public ops
 * (so it fuses and is differentiated like them); the class losses never
 * materialise a [rows, classes] intermediate beyond what log-softmax's own
 * reductions read. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "api/api.h"

/* ---- class losses ---- */

/* x [N, C, d...] as rows [M, C] with the class axis last (M = N * d...), and
 * its targets [N, d...] as [M]: a permuted view and a reshape. */
static kiln_tensor *class_rows(kiln_tensor *x) {
    int nd = kiln_ndim(x);
    if (nd == 2)
        return x;
    int perm[KILN_MAX_DIMS];
    perm[0] = 0;
    for (int d = 2; d < nd; d++)
        perm[d - 1] = d;
    perm[nd - 1] = 1;
    int64_t c = kiln_shape(x)[1], rows[2] = {kiln_numel(x) / (c ? c : 1), c};
    return kiln_reshape(kiln_permute(x, perm), 2, rows);
}

/* Checks input [N, C, d...] against targets [N, d...] (i32 or i64), weight
 * [C] (or NULL) and the reduction; NULL when they fit. */
static kiln_tensor *check_class_args(const char *op, kiln_ctx *ctx, kiln_tensor *input,
                                     kiln_tensor *targets, kiln_tensor *weight,
                                     const int64_t *ignore, kiln_reduction reduction) {
    graph_node *X = input->node, *T = targets->node;
    if (T->dtype != KILN_I32 && T->dtype != KILN_I64)
        return api_fail(ctx, KILN_ERR_DTYPE,
                        "%s: targets %s are %s; class indices must be i32 or i64", op,
                        api_shape_str(T), kiln_dtype_name(T->dtype));
    if (!api_valid_reduction(reduction))
        return api_fail(ctx, KILN_ERR_ARG, "%s: input %s, targets %s: unknown reduction %d", op,
                        api_shape_str(X), api_shape_str(T), (int)reduction);
    bool ok = X->ndim >= 2 && T->ndim == X->ndim - 1 && X->shape[1] >= 1 &&
              T->shape[0] == X->shape[0];
    for (int d = 2; ok && d < X->ndim; d++)
        ok = T->shape[d - 1] == X->shape[d];
    if (!ok)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "%s: input %s and targets %s must be [N, C, d...] and [N, d...] with "
                        "C >= 1",
                        op, api_shape_str(X), api_shape_str(T));
    if (weight && (weight->node->ndim != 1 || weight->node->shape[0] != X->shape[1]))
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: weight %s must be [C] = [%lld] for input %s",
                        op, api_shape_str(weight->node), (long long)X->shape[1],
                        api_shape_str(X));
    return api_check_indices(ctx, op, T, 0, X->shape[1], "targets", X, ignore);
}

/* The reduction of a class loss from its per-row parts (each [M]): nll the
 * negative log-probability of the target (0 where no class matched),
 * smooth (or NULL) the weighted sum of every class's, w the row's weight
 * (0 for an ignored row). loss = (1 - eps) nll w + eps / C smooth; the mean
 * divides by the sum of w, as PyTorch does (so it is NaN when every row is
 * ignored). */
static kiln_tensor *class_loss(kiln_tensor *nll, kiln_tensor *smooth, kiln_tensor *w,
                               kiln_tensor *keep, double eps, int64_t c,
                               kiln_reduction reduction, kiln_tensor *targets) {
    kiln_ctx *ctx = kiln_ctx_of(nll);
    kiln_tensor *zero = kiln_scalar(ctx, kiln_dtype_of(nll), 0);
    kiln_tensor *loss = kiln_mul(nll, w);
    if (smooth && eps > 0)
        loss = kiln_add(api_mul_literal(loss, 1 - eps), api_mul_literal(smooth, eps / (double)c));
    /* where, not a product: an ignored row's parts may be inf (a -inf
     * logit), and inf * 0 would be NaN */
    if (keep)
        loss = kiln_where(keep, loss, zero);
    if (reduction == KILN_REDUCTION_MEAN)
        return kiln_div(kiln_sum(loss, 0, NULL, false), kiln_sum(w, 0, NULL, false));
    if (reduction == KILN_REDUCTION_SUM)
        return kiln_sum(loss, 0, NULL, false);
    return kiln_reshape(loss, kiln_ndim(targets), kiln_shape(targets));
}

/* Row weights [M]: weight[target] (0 where no class matched) or 1, times
 * keep (0 for ignored rows). hit is the one-hot [M, C]. */
static kiln_tensor *row_weights(kiln_tensor *hit, kiln_tensor *weight, kiln_tensor *keep,
                                kiln_dtype dt, int64_t m) {
    kiln_ctx *ctx = kiln_ctx_of(hit);
    kiln_tensor *zero = kiln_scalar(ctx, dt, 0);
    int one = 1;
    kiln_tensor *w = weight ? kiln_sum(kiln_where(hit, kiln_cast(weight, dt), zero), 1, &one, false)
                            : kiln_full(ctx, dt, 1, &m, 1);
    return keep ? kiln_where(keep, w, zero) : w;
}

/* A class loss's rows, set up inside the scope the loss records in. */
typedef struct class_rows_of {
    kiln_ctx *ctx;
    kiln_tensor *x;    /* input rows [M, C] */
    kiln_tensor *hit;  /* the targets' one-hot [M, C] */
    kiln_tensor *keep; /* rows not ignored [M], or NULL */
    kiln_tensor *w;    /* row weights [M] (0 where ignored) */
    kiln_tensor *zero; /* 0 in the rows' dtype */
    int64_t m, c;
    kiln_dtype dt;
} class_rows_of;

/* Checks a class loss's arguments and, when they fit, opens its scope and
 * fills r; otherwise returns the handle to return (NULL with r->ctx NULL
 * when every argument is NULL). */
static kiln_tensor *class_begin(const char *op, const char *what, kiln_tensor *input,
                                kiln_tensor *targets, kiln_tensor *weight, int64_t ignore_index,
                                kiln_reduction reduction, class_rows_of *r) {
    const nn_arg args[] = {{input, what, false, false},
                           {targets, "targets", false, true},
                           {weight, "weight", true, false}};
    kiln_tensor *e = api_nn_args(op, 3, args, &r->ctx);
    if (e || !r->ctx)
        return e;
    bool ignoring = ignore_index != KILN_IGNORE_NONE;
    if ((e = check_class_args(op, r->ctx, input, targets, weight,
                              ignoring ? &ignore_index : NULL, reduction)))
        return e;
    r->c = input->node->shape[1];
    kiln_scope_begin(r->ctx);
    r->x = class_rows(input);
    r->m = kiln_shape(r->x)[0];
    r->dt = kiln_dtype_of(r->x);
    kiln_tensor *t = kiln_reshape(kiln_cast(targets, KILN_I64), 1, &r->m);
    r->hit = api_one_hot(t, r->c);
    r->keep = ignoring ? api_ne_literal(t, (double)ignore_index) : NULL;
    r->w = row_weights(r->hit, weight, r->keep, r->dt, r->m);
    r->zero = kiln_scalar(r->ctx, r->dt, 0);
    return NULL;
}

kiln_tensor *kiln_cross_entropy_ex(kiln_tensor *logits, kiln_tensor *targets,
                                   kiln_tensor *weight, int64_t ignore_index,
                                   double label_smoothing, kiln_reduction reduction) {
    const char *op = "kiln_cross_entropy_ex";
    if (logits && targets && !(label_smoothing >= 0 && label_smoothing <= 1) &&
        !kiln_error(logits) && !kiln_error(targets))
        return api_fail(kiln_ctx_of(logits), KILN_ERR_ARG,
                        "%s: logits %s: label_smoothing %g is outside [0, 1]", op,
                        api_shape_str(logits->node), label_smoothing);
    class_rows_of r;
    kiln_tensor *e =
        class_begin(op, "logits", logits, targets, weight, ignore_index, reduction, &r);
    if (e || !r.ctx)
        return e;
    kiln_tensor *x = r.x;
    int one = 1;
    /* -log_softmax(x)[i, j] = lse_i - x_ij: every part below is a reduction
     * of the logits themselves (as kiln_cross_entropy) */
    kiln_tensor *mx = kiln_detach(kiln_max(x, 1, &one, true));
    kiln_tensor *lse = kiln_add(kiln_log(kiln_sum(kiln_exp(kiln_sub(x, mx)), 1, &one, true)), mx);
    kiln_tensor *picked = kiln_sum(kiln_where(r.hit, x, r.zero), 1, &one, false);
    kiln_tensor *lse_row = kiln_reshape(lse, 1, &r.m);
    /* a target matching no class (lazily out of range) contributes 0 */
    kiln_tensor *any = api_gt_literal(kiln_sum(kiln_cast(r.hit, KILN_I32), 1, &one, false), 0);
    kiln_tensor *nll = kiln_where(any, kiln_sub(lse_row, picked), r.zero);
    kiln_tensor *smooth = NULL;
    if (label_smoothing > 0) {
        /* sum over classes of w_c (lse_i - x_ic) = lse_i W - sum_c w_c x_ic */
        kiln_tensor *wc = weight ? kiln_cast(weight, r.dt) : NULL;
        kiln_tensor *wsum =
            wc ? kiln_sum(wc, 0, NULL, false) : kiln_scalar(r.ctx, r.dt, (double)r.c);
        kiln_tensor *wx = kiln_sum(wc ? kiln_mul(x, wc) : x, 1, &one, false);
        smooth = kiln_sub(kiln_mul(lse_row, wsum), wx);
    }
    return api_finish(r.ctx, class_loss(nll, smooth, r.w, r.keep, label_smoothing, r.c,
                                        reduction, targets));
}

kiln_tensor *kiln_nll_loss(kiln_tensor *log_probs, kiln_tensor *targets, kiln_tensor *weight,
                           int64_t ignore_index, kiln_reduction reduction) {
    class_rows_of r;
    kiln_tensor *e =
        class_begin("kiln_nll_loss", "input", log_probs, targets, weight, ignore_index, reduction,
                    &r);
    if (e || !r.ctx)
        return e;
    int one = 1;
    kiln_tensor *nll = kiln_neg(kiln_sum(kiln_where(r.hit, r.x, r.zero), 1, &one, false));
    return api_finish(r.ctx, class_loss(nll, NULL, r.w, r.keep, 0, r.c, reduction, targets));
}

/* ---- elementwise losses ---- */

static bool same_shape(const graph_node *a, const graph_node *b) {
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return true;
}

/* Checks a pair of same-shaped float tensors and the reduction. */
static kiln_tensor *check_pair(const char *op, kiln_tensor *a, kiln_tensor *b,
                               kiln_reduction reduction, kiln_ctx **ctx) {
    const nn_arg args[] = {{a, "input", false, false}, {b, "target", false, false}};
    kiln_tensor *e = api_nn_args(op, 2, args, ctx);
    if (e || !*ctx)
        return e;
    if (!api_valid_reduction(reduction))
        return api_fail(*ctx, KILN_ERR_ARG, "%s: %s and %s: unknown reduction %d", op,
                        api_shape_str(a->node), api_shape_str(b->node), (int)reduction);
    if (!same_shape(a->node, b->node))
        return api_fail(*ctx, KILN_ERR_SHAPE, "%s: shapes %s and %s differ", op,
                        api_shape_str(a->node), api_shape_str(b->node));
    return NULL;
}

kiln_tensor *kiln_mse_loss(kiln_tensor *a, kiln_tensor *b, kiln_reduction reduction) {
    kiln_ctx *ctx;
    kiln_tensor *e = check_pair("kiln_mse_loss", a, b, reduction, &ctx);
    if (e || !ctx)
        return e;
    kiln_scope_begin(ctx);
    kiln_tensor *d = kiln_sub(a, b);
    return api_finish(ctx, api_reduce_loss(kiln_mul(d, d), reduction));
}

/* softplus(z) = log(1 + exp(z)), without overflow: max(z, 0) + log1p(exp(-|z|)). */
static kiln_tensor *softplus(kiln_tensor *z) {
    kiln_tensor *zero = kiln_scalar(kiln_ctx_of(z), kiln_dtype_of(z), 0);
    return kiln_add(kiln_maximum(z, zero), kiln_log1p(kiln_exp(kiln_neg(kiln_abs(z)))));
}

kiln_tensor *kiln_binary_cross_entropy_with_logits(kiln_tensor *logits, kiln_tensor *targets,
                                                   kiln_tensor *weight, kiln_tensor *pos_weight,
                                                   kiln_reduction reduction) {
    const char *op = "kiln_binary_cross_entropy_with_logits";
    kiln_ctx *ctx;
    kiln_tensor *e = check_pair(op, logits, targets, reduction, &ctx);
    if (e || !ctx)
        return e;
    const nn_arg extra[] = {{logits, "logits", false, false},
                            {weight, "weight", true, false},
                            {pos_weight, "pos_weight", true, false}};
    if ((e = api_nn_args(op, 3, extra, &ctx)))
        return e;
    kiln_tensor *w[2] = {weight, pos_weight};
    const char *names[2] = {"weight", "pos_weight"};
    for (int i = 0; i < 2; i++)
        if (w[i] && !api_broadcasts_to(w[i]->node->ndim, w[i]->node->shape, logits->node->ndim,
                                      logits->node->shape))
            return api_fail(ctx, KILN_ERR_SHAPE, "%s: %s %s does not broadcast to logits %s", op,
                            names[i], api_shape_str(w[i]->node), api_shape_str(logits->node));
    kiln_scope_begin(ctx);
    /* PyTorch's stable form: (1 - y) x + (1 + (pw - 1) y) softplus(-x) */
    kiln_tensor *x = logits, *y = targets;
    kiln_tensor *sp = softplus(kiln_neg(x));
    kiln_tensor *lw = pos_weight ? api_add_literal(kiln_mul(api_sub_literal(pos_weight, 1), y), 1)
                                 : NULL;
    kiln_tensor *loss = kiln_add(kiln_mul(kiln_sub(kiln_scalar(ctx, kiln_dtype_of(y), 1), y), x),
                                 lw ? kiln_mul(lw, sp) : sp);
    if (weight)
        loss = kiln_mul(loss, weight);
    return api_finish(ctx, api_reduce_loss(loss, reduction));
}

kiln_tensor *kiln_kl_div(kiln_tensor *input, kiln_tensor *target, bool log_target,
                         kiln_reduction reduction) {
    const char *op = "kiln_kl_div";
    kiln_ctx *ctx;
    kiln_tensor *e = check_pair(op, input, target, reduction, &ctx);
    if (e || !ctx)
        return e;
    kiln_scope_begin(ctx);
    kiln_tensor *t = target, *loss;
    if (log_target) {
        loss = kiln_mul(kiln_exp(t), kiln_sub(t, input));
    } else {
        /* t log t - t x, with 0 log 0 = 0 (PyTorch's xlogy); a negative
         * target gives NaN, as there */
        kiln_tensor *zero = kiln_scalar(ctx, kiln_dtype_of(t), 0);
        kiln_tensor *tlogt = kiln_where(api_eq_literal(t, 0), zero, kiln_mul(t, kiln_log(t)));
        loss = kiln_sub(tlogt, kiln_mul(t, input));
    }
    return api_finish(ctx, api_reduce_loss(loss, reduction));
}

/* Quadratic below `at`, linear above: 0.5 d^2 / scale inside, (|d| - at / 2)
 * times slope outside (Huber: scale 1, slope delta; smooth L1: scale beta,
 * slope 1). */
static kiln_tensor *piecewise(kiln_tensor *a, kiln_tensor *b, double at, double scale,
                              double slope) {
    kiln_tensor *d = kiln_sub(a, b), *ad = kiln_abs(d);
    kiln_tensor *quad = api_mul_literal(kiln_mul(d, d), 0.5 / scale);
    kiln_tensor *lin = api_mul_literal(api_sub_literal(ad, 0.5 * at), slope);
    return kiln_where(api_lt_literal(ad, at), quad, lin);
}

kiln_tensor *kiln_huber_loss(kiln_tensor *a, kiln_tensor *b, double delta,
                             kiln_reduction reduction) {
    const char *op = "kiln_huber_loss";
    kiln_ctx *ctx;
    kiln_tensor *e = check_pair(op, a, b, reduction, &ctx);
    if (e || !ctx)
        return e;
    if (!(delta > 0 && isfinite(delta)))
        return api_fail(ctx, KILN_ERR_ARG, "%s: %s: delta %g must be finite and > 0", op,
                        api_shape_str(a->node), delta);
    kiln_scope_begin(ctx);
    return api_finish(ctx, api_reduce_loss(piecewise(a, b, delta, 1, delta), reduction));
}

kiln_tensor *kiln_smooth_l1_loss(kiln_tensor *a, kiln_tensor *b, double beta,
                                 kiln_reduction reduction) {
    const char *op = "kiln_smooth_l1_loss";
    kiln_ctx *ctx;
    kiln_tensor *e = check_pair(op, a, b, reduction, &ctx);
    if (e || !ctx)
        return e;
    if (!(beta >= 0 && isfinite(beta)))
        return api_fail(ctx, KILN_ERR_ARG, "%s: %s: beta %g must be finite and >= 0", op,
                        api_shape_str(a->node), beta);
    kiln_scope_begin(ctx);
    kiln_tensor *l = beta == 0 ? kiln_abs(kiln_sub(a, b)) : piecewise(a, b, beta, beta, 1);
    return api_finish(ctx, api_reduce_loss(l, reduction));
}

/* ---- std_mean ---- */

kiln_tensor *kiln_std_mean(kiln_tensor *t, int naxes, const int *axes, double correction,
                           bool keepdim, kiln_tensor **mean) {
    if (mean)
        *mean = NULL;
    kiln_tensor *s = kiln_std(t, naxes, axes, correction, keepdim);
    if (!s || kiln_error(s) != KILN_OK || !mean)
        return s;
    kiln_tensor *m = kiln_mean(t, naxes, axes, keepdim);
    if (m && kiln_error(m) == KILN_OK && kiln_dtype_of(m) != kiln_dtype_of(s)) {
        kiln_tensor *c = kiln_cast(m, kiln_dtype_of(s));
        kiln_release(m);
        m = c;
    }
    *mean = m;
    return s;
}
