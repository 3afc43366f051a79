/* nn.c — the neural-network ops (linear, convolution, pooling, normalisation,
 * softmax, losses, dropout, embedding, attention), each composed from the
 * public primitive ops so that it fuses with its neighbours and is
 * differentiated by their rules. Each op checks its arguments and writes its
 * own messages first, then records its primitives inside a scope that frees
 * every intermediate handle and keeps only the result. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

/* Larger sizes, strides or paddings than this could overflow the output-size
 * arithmetic; no tensor that fits in memory needs them. */
#define NN_MAX_PARAM ((int64_t)1 << 40)

kiln_tensor *api_nn_args(const char *op, int n, const nn_arg *a, kiln_ctx **ctxp) {
    kiln_ctx *ctx = NULL;
    for (int i = 0; i < n && !ctx; i++)
        if (a[i].t)
            ctx = a[i].t->ctx;
    *ctxp = ctx;
    if (!ctx)
        return NULL;
    kiln_tensor *given[8];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (a[i].t)
            given[m++] = a[i].t;
        else if (!a[i].optional)
            return api_fail(ctx, KILN_ERR_ARG, "%s: %s is NULL", op, a[i].name);
    }
    kiln_tensor *e = api_check(op, m, given, &ctx);
    if (e)
        return e;
    for (int i = 0; i < n; i++)
        if (a[i].t && !a[i].any_dtype && !graph_dtype_is_float(a[i].t->node->dtype))
            return api_fail(
                ctx, KILN_ERR_DTYPE, "%s: %s of shape %s is %s; a floating-point dtype is required",
                op, a[i].name, api_shape_str(a[i].t->node), kiln_dtype_name(a[i].t->node->dtype));
    return NULL;
}

/* Index tensors that already hold data are checked here, where the user can
 * be told; pending ones cannot be read without a sync. */
kiln_tensor *api_check_indices(kiln_ctx *ctx, const char *op, const graph_node *idx, int64_t lo,
                               int64_t limit, const char *what, const graph_node *other,
                               const int64_t *ignore) {
    if (!idx->buf)
        return NULL;
    int64_t n = graph_numel(idx);
    size_t nbytes = (size_t)n * kiln_dtype_size(idx->dtype);
    char msg[256];
    void *data = malloc(nbytes ? nbytes : 1);
    kiln_status st = data ? api_read(idx, 0, data, nbytes, msg, sizeof msg) : KILN_ERR_OOM;
    if (st != KILN_OK) {
        free(data);
        return api_fail(ctx, st, "%s: cannot read %s: %s", op, what, data ? msg : "out of memory");
    }
    kiln_tensor *bad = NULL;
    for (int64_t i = 0; i < n && !bad; i++) {
        int64_t v = graph_scalar_load(data, idx->dtype, i).i;
        if ((v < lo || v >= limit) && !(ignore && v == *ignore))
            bad = api_fail(ctx, KILN_ERR_ARG,
                           "%s: %s %s holds %lld at flat position %lld, outside [%lld, %lld) "
                           "(%s)",
                           op, what, api_shape_str(idx), (long long)v, (long long)i,
                           (long long)lo, (long long)limit, api_shape_str(other));
    }
    free(data);
    return bad;
}

bool api_index_dtype(kiln_dtype dt) { return dt == KILN_I32 || dt == KILN_I64 || dt == KILN_U8; }

/* A 1-d [C] tensor seen as [C, 1, ..., 1] with `trailing` ones, so that it
 * broadcasts along axis 1 of a tensor with trailing + 2 dimensions. */
static kiln_tensor *per_channel(kiln_tensor *t, int trailing) {
    int64_t shp[KILN_MAX_DIMS];
    shp[0] = kiln_shape(t)[0];
    for (int d = 1; d <= trailing; d++)
        shp[d] = 1;
    return kiln_reshape(t, trailing + 1, shp);
}

/* ---- linear ---- */

kiln_tensor *kiln_linear(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b) {
    const char *op = "kiln_linear";
    const nn_arg args[] = {
        {x, "input", false, false}, {w, "weight", false, false}, {b, "bias", true, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 3, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node, *W = w->node;
    if (X->ndim < 1 || W->ndim != 2 || W->shape[1] != X->shape[X->ndim - 1])
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_linear: input %s and weight %s do not fit: the weight must be "
                        "[out, in] with in the input's last size",
                        api_shape_str(X), api_shape_str(W));
    if (b && (b->node->ndim != 1 || b->node->shape[0] != W->shape[0]))
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_linear: bias %s does not fit weight %s: it must be [%lld]",
                        api_shape_str(b->node), api_shape_str(W), (long long)W->shape[0]);
    kiln_scope_begin(ctx);
    kiln_tensor *y = kiln_matmul(x, kiln_transpose(w, 0, 1));
    if (b)
        y = kiln_add(y, b);
    return api_finish(ctx, y);
}

/* ---- convolution and pooling ---- */

/* The strided tap of a padded [..., Hp, Wp] tensor that kernel offset (i, j)
 * reads for every output position: [..., oh, ow]. */
static kiln_tensor *tap(kiln_tensor *xp, int64_t i, int64_t j, int64_t oh, int64_t ow, int64_t sh,
                        int64_t sw) {
    int nd = kiln_ndim(xp);
    kiln_tensor *r = kiln_slice(xp, nd - 2, i, i + (oh - 1) * sh + 1, sh);
    return kiln_slice(r, nd - 1, j, j + (ow - 1) * sw + 1, sw);
}

/* x padded by (ph, pw) on both sides of its last two axes. */
static kiln_tensor *pad_hw(kiln_tensor *x, int64_t ph, int64_t pw, double value) {
    if (ph == 0 && pw == 0)
        return x;
    int nd = kiln_ndim(x);
    int64_t pads[2 * KILN_MAX_DIMS] = {0};
    pads[2 * (nd - 2)] = pads[2 * (nd - 2) + 1] = ph;
    pads[2 * (nd - 1)] = pads[2 * (nd - 1) + 1] = pw;
    return kiln_pad(x, pads, value);
}

kiln_tensor *kiln_conv2d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int64_t stride_h,
                         int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dil_h,
                         int64_t dil_w, int64_t groups) {
    const char *op = "kiln_conv2d";
    const nn_arg args[] = {
        {x, "input", false, false}, {w, "weight", false, false}, {b, "bias", true, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 3, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node, *W = w->node;
    if (stride_h < 1 || stride_w < 1 || dil_h < 1 || dil_w < 1 || groups < 1 || pad_h < 0 ||
        pad_w < 0 || stride_h > NN_MAX_PARAM || stride_w > NN_MAX_PARAM || dil_h > NN_MAX_PARAM ||
        dil_w > NN_MAX_PARAM || pad_h > NN_MAX_PARAM || pad_w > NN_MAX_PARAM)
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_conv2d: input %s, weight %s: stride (%lld, %lld), padding (%lld, "
                        "%lld), dilation (%lld, %lld), groups %lld: strides, dilations and "
                        "groups must be >= 1, paddings >= 0",
                        api_shape_str(X), api_shape_str(W), (long long)stride_h,
                        (long long)stride_w, (long long)pad_h, (long long)pad_w, (long long)dil_h,
                        (long long)dil_w, (long long)groups);
    if (X->ndim != 4 || W->ndim != 4)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_conv2d: input %s and weight %s must be [N, C, H, W] and [OC, "
                        "C/groups, KH, KW]",
                        api_shape_str(X), api_shape_str(W));
    int64_t c = X->shape[1], h = X->shape[2], wd = X->shape[3];
    int64_t oc = W->shape[0], kh = W->shape[2], kw = W->shape[3];
    if (c % groups || oc % groups || W->shape[1] != c / groups)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_conv2d: input %s and weight %s do not fit %lld groups: input and "
                        "output channels must be multiples of groups and the weight must have "
                        "%lld input channels",
                        api_shape_str(X), api_shape_str(W), (long long)groups,
                        c % groups ? 0LL : (long long)(c / groups));
    int64_t span_h = dil_h * (kh - 1) + 1, span_w = dil_w * (kw - 1) + 1;
    if (kh < 1 || kw < 1 || kh > NN_MAX_PARAM || kw > NN_MAX_PARAM || h + 2 * pad_h < span_h ||
        wd + 2 * pad_w < span_w)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_conv2d: the %lldx%lld kernel of weight %s with dilation (%lld, "
                        "%lld) does not fit input %s padded by (%lld, %lld)",
                        (long long)kh, (long long)kw, api_shape_str(W), (long long)dil_h,
                        (long long)dil_w, api_shape_str(X), (long long)pad_h, (long long)pad_w);
    if (b && (b->node->ndim != 1 || b->node->shape[0] != oc))
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_conv2d: bias %s does not fit weight %s: it must be [%lld]",
                        api_shape_str(b->node), api_shape_str(W), (long long)oc);
    kiln_scope_begin(ctx);
    const int64_t stride[2] = {stride_h, stride_w}, pad[2] = {pad_h, pad_w}, dil[2] = {dil_h, dil_w};
    return api_finish(ctx, api_conv(x, w, b, 2, stride, pad, pad, dil, groups));
}

/* Windows that tile the input (stride = kernel, no padding): the input,
 * cut to whole windows, is viewed as [..., oh, kh, ow, kw] and reduced over
 * each window's two axes. One reduction kernel forward, and the max's backward
 * is one compare against the broadcast maximum per element (ties share the
 * gradient evenly, as kiln_max's); the chain of kh*kw taps below costs a
 * where per tap in the backward: in the CNN benchmark's two 2x2 pools, 9.6 of
 * a 27 ms training step. */
static kiln_tensor *tiled_pool(kiln_tensor *x, bool is_max, int64_t kh, int64_t kw, int64_t oh,
                               int64_t ow) {
    int nd = kiln_ndim(x);
    const int64_t *shape = kiln_shape(x);
    if (shape[nd - 2] != oh * kh)
        x = kiln_slice(x, nd - 2, 0, oh * kh, 1);
    if (shape[nd - 1] != ow * kw)
        x = kiln_slice(x, nd - 1, 0, ow * kw, 1);
    int64_t win[KILN_MAX_DIMS + 2], pooled[KILN_MAX_DIMS];
    for (int d = 0; d < nd - 2; d++)
        win[d] = pooled[d] = shape[d];
    win[nd - 2] = oh;
    win[nd - 1] = kh;
    win[nd] = ow;
    win[nd + 1] = kw;
    pooled[nd - 2] = oh;
    pooled[nd - 1] = ow;
    const int axes[2] = {nd - 1, nd + 1};
    kiln_tensor *v = kiln_reshape(x, nd + 2, win);
    kiln_tensor *r = is_max ? kiln_max(v, 2, axes, false)
                            : api_div_literal(kiln_sum(v, 2, axes, false), (double)(kh * kw));
    return kiln_reshape(r, nd, pooled);
}

static kiln_tensor *pool2d(const char *op, bool is_max, kiln_tensor *x, int64_t kh, int64_t kw,
                           int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
    const nn_arg args[] = {{x, "input", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 1, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node;
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0 || kh > NN_MAX_PARAM ||
        kw > NN_MAX_PARAM || sh > NN_MAX_PARAM || sw > NN_MAX_PARAM || 2 * ph > kh || 2 * pw > kw)
        return api_fail(ctx, KILN_ERR_ARG,
                        "%s: input %s, kernel (%lld, %lld), stride (%lld, %lld), padding (%lld, "
                        "%lld): kernel sizes and strides must be >= 1 and each padding at most "
                        "half its kernel size",
                        op, api_shape_str(X), (long long)kh, (long long)kw, (long long)sh,
                        (long long)sw, (long long)ph, (long long)pw);
    if (X->ndim != 3 && X->ndim != 4)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s must be [N, C, H, W] or [C, H, W]", op,
                        api_shape_str(X));
    int64_t h = X->shape[X->ndim - 2], wd = X->shape[X->ndim - 1];
    if (h + 2 * ph < kh || wd + 2 * pw < kw)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "%s: the %lldx%lld window does not fit input %s padded by (%lld, %lld)", op,
                        (long long)kh, (long long)kw, api_shape_str(X), (long long)ph,
                        (long long)pw);
    int64_t oh = (h + 2 * ph - kh) / sh + 1, ow = (wd + 2 * pw - kw) / sw + 1;
    kiln_scope_begin(ctx);
    if (sh == kh && sw == kw && ph == 0 && pw == 0 && kh * kw > 1)
        return api_finish(ctx, tiled_pool(x, is_max, kh, kw, oh, ow));
    kiln_tensor *xp = pad_hw(x, ph, pw, is_max ? -INFINITY : 0.0);
    kiln_tensor *acc = NULL;
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
            kiln_tensor *t = tap(xp, i, j, oh, ow, sh, sw);
            acc = !acc ? t : is_max ? kiln_maximum(acc, t) : kiln_add(acc, t);
        }
    if (!is_max)
        acc = api_div_literal(acc, (double)(kh * kw));
    return api_finish(ctx, acc);
}

kiln_tensor *kiln_max_pool2d(kiln_tensor *x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                             int64_t stride_w, int64_t pad_h, int64_t pad_w) {
    return pool2d("kiln_max_pool2d", true, x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
}

kiln_tensor *kiln_avg_pool2d(kiln_tensor *x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                             int64_t stride_w, int64_t pad_h, int64_t pad_w) {
    return pool2d("kiln_avg_pool2d", false, x, kernel_h, kernel_w, stride_h, stride_w, pad_h,
                  pad_w);
}

/* ---- normalisation ---- */

static bool valid_eps(double eps) { return isfinite(eps) && eps >= 0; }

/* (x - mean) / sqrt(var + eps) over the given axes, biased variance; the
 * mean and variance (kept dims) go to *mean and *var when asked for. */
static kiln_tensor *normalise(kiln_tensor *x, int naxes, const int *axes, double eps,
                              kiln_tensor **mean, kiln_tensor **var) {
    kiln_tensor *mu = kiln_mean(x, naxes, axes, true);
    kiln_tensor *xc = kiln_sub(x, mu);
    kiln_tensor *v = kiln_mean(kiln_mul(xc, xc), naxes, axes, true);
    if (mean)
        *mean = mu;
    if (var)
        *var = v;
    return kiln_mul(xc, kiln_rsqrt(api_add_literal(v, eps)));
}

kiln_tensor *kiln_layer_norm(kiln_tensor *x, int n, kiln_tensor *weight, kiln_tensor *bias,
                             double eps) {
    const char *op = "kiln_layer_norm";
    const nn_arg args[] = {
        {x, "input", false, false}, {weight, "weight", true, false}, {bias, "bias", true, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 3, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node;
    if (n < 1 || n > X->ndim || !valid_eps(eps))
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_layer_norm: input %s, %d normalised axes, eps %g: the axes must "
                        "be 1 to ndim and eps finite and >= 0",
                        api_shape_str(X), n, eps);
    kiln_tensor *affine[2] = {weight, bias};
    const char *names[2] = {"weight", "bias"};
    for (int a = 0; a < 2; a++) {
        if (!affine[a])
            continue;
        graph_node *p = affine[a]->node;
        bool ok = p->ndim == n;
        for (int d = 0; ok && d < n; d++)
            ok = p->shape[d] == X->shape[X->ndim - n + d];
        if (!ok)
            return api_fail(ctx, KILN_ERR_SHAPE,
                            "kiln_layer_norm: %s %s does not match the last %d axes of input %s",
                            names[a], api_shape_str(p), n, api_shape_str(X));
    }
    int axes[KILN_MAX_DIMS];
    for (int d = 0; d < n; d++)
        axes[d] = X->ndim - n + d;
    kiln_scope_begin(ctx);
    kiln_tensor *y = normalise(x, n, axes, eps, NULL, NULL);
    if (weight)
        y = kiln_mul(y, weight);
    if (bias)
        y = kiln_add(y, bias);
    return api_finish(ctx, y);
}

/* running = (1 - momentum) * running + momentum * batch, recorded lazily. */
static kiln_status update_running(kiln_tensor *running, kiln_tensor *batch, double momentum) {
    kiln_tensor *v =
        kiln_add(api_mul_literal(running, 1.0 - momentum),
                 api_mul_literal(kiln_reshape(batch, 1, kiln_shape(running)), momentum));
    return kiln_error(v) != KILN_OK ? kiln_error(v) : kiln_assign(running, v);
}

kiln_tensor *kiln_batch_norm(kiln_tensor *x, kiln_tensor *running_mean, kiln_tensor *running_var,
                             kiln_tensor *weight, kiln_tensor *bias, bool training, double momentum,
                             double eps) {
    const char *op = "kiln_batch_norm";
    const nn_arg args[] = {{x, "input", false, false},
                           {running_mean, "running_mean", training, false},
                           {running_var, "running_var", training, false},
                           {weight, "weight", true, false},
                           {bias, "bias", true, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 5, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node;
    if (!valid_eps(eps) || !(momentum >= 0 && momentum <= 1))
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_batch_norm: input %s, momentum %g, eps %g: momentum must lie in "
                        "[0, 1] and eps be finite and >= 0",
                        api_shape_str(X), momentum, eps);
    if (X->ndim < 2)
        return api_fail(ctx, KILN_ERR_SHAPE, "kiln_batch_norm: input %s must be [N, C, ...]",
                        api_shape_str(X));
    int64_t c = X->shape[1];
    kiln_tensor *params[4] = {running_mean, running_var, weight, bias};
    for (int i = 0; i < 4; i++) {
        if (!params[i])
            continue;
        graph_node *p = params[i]->node;
        if (p->ndim != 1 || p->shape[0] != c)
            return api_fail(ctx, KILN_ERR_SHAPE,
                            "kiln_batch_norm: %s %s does not fit input %s: it must be [%lld]",
                            args[i + 1].name, api_shape_str(p), api_shape_str(X), (long long)c);
    }
    if (training && running_mean && !running_var)
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_batch_norm: input %s: running_var is NULL but running_mean is not",
                        api_shape_str(X));
    if (training && running_var && !running_mean)
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_batch_norm: input %s: running_mean is NULL but running_var is not",
                        api_shape_str(X));
    int64_t count = c ? graph_numel(X) / c : 0;
    if (training && count <= 1)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_batch_norm: input %s has %lld value(s) per channel; training "
                        "needs more than one",
                        api_shape_str(X), (long long)count);
    int axes[KILN_MAX_DIMS], naxes = 0;
    for (int d = 0; d < X->ndim; d++)
        if (d != 1)
            axes[naxes++] = d;
    kiln_scope_begin(ctx);
    kiln_tensor *y;
    if (training) {
        kiln_tensor *mean, *var;
        y = normalise(x, naxes, axes, eps, &mean, &var);
        if (running_mean) {
            /* The running statistics are state, not a function of the
             * parameters that a loss could be differentiated through. */
            kiln_no_grad_begin(ctx);
            kiln_status st = update_running(running_mean, mean, momentum);
            if (st == KILN_OK)
                st = update_running(running_var,
                                    api_mul_literal(var, (double)count / (double)(count - 1)),
                                    momentum);
            kiln_no_grad_end(ctx);
            if (st != KILN_OK)
                y = api_fail(ctx, st,
                             "kiln_batch_norm: updating the running statistics of "
                             "input %s failed: %s",
                             api_shape_str(X), kiln_ctx_last_error(ctx));
        }
    } else {
        kiln_tensor *mean = per_channel(running_mean, X->ndim - 2);
        kiln_tensor *var = per_channel(running_var, X->ndim - 2);
        y = kiln_mul(kiln_sub(x, mean), kiln_rsqrt(api_add_literal(var, eps)));
    }
    if (weight)
        y = kiln_mul(y, per_channel(weight, X->ndim - 2));
    if (bias)
        y = kiln_add(y, per_channel(bias, X->ndim - 2));
    return api_finish(ctx, y);
}

/* ---- softmax and losses ---- */

/* softmax or log-softmax of x along axis ax (already normalised). The row
 * max is subtracted only to keep exp in range: softmax does not change with
 * it, so it is detached. Differentiated through, its exactly-zero gradient
 * came back as the rounding error of a whole row's sum routed to the max
 * element: 1.1e-7 in d sum(softmax(x))/dx over 45x65 rows, 2e-9 without. */
static kiln_tensor *softmax_of(kiln_tensor *x, int ax, bool log) {
    kiln_tensor *z = kiln_sub(x, kiln_detach(kiln_max(x, 1, &ax, true)));
    kiln_tensor *ez = kiln_exp(z);
    kiln_tensor *s = kiln_sum(ez, 1, &ax, true);
    /* times the row's reciprocal (one division a row), as PyTorch's: within
     * 1.5 ulp of e^z / s where the division was correctly rounded, and a
     * division an element was the slowest arithmetic of the row kernel (a
     * 512-bit division issues every 10 cycles): 4096x4096 rows, 2 threads,
     * 9.0 -> 7.4 ms */
    return log ? kiln_sub(z, kiln_log(s)) : kiln_mul(ez, kiln_recip(s));
}

static kiln_tensor *softmax_op(const char *op, kiln_tensor *x, int axis, bool log) {
    const nn_arg args[] = {{x, "input", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 1, args, &ctx);
    if (e || !ctx)
        return e;
    int ax;
    if ((e = api_one_axis(op, ctx, x->node, axis, &ax)))
        return e;
    /* An empty axis has no maximum to subtract, and nothing to normalise. */
    if (x->node->shape[ax] == 0)
        return api_wrap(ctx, graph_ref(x->node), op);
    kiln_scope_begin(ctx);
    return api_finish(ctx, softmax_of(x, ax, log));
}

kiln_tensor *kiln_softmax(kiln_tensor *x, int axis) {
    return softmax_op("kiln_softmax", x, axis, false);
}

kiln_tensor *kiln_log_softmax(kiln_tensor *x, int axis) {
    return softmax_op("kiln_log_softmax", x, axis, true);
}

bool api_valid_reduction(kiln_reduction r) {
    return r == KILN_REDUCTION_MEAN || r == KILN_REDUCTION_SUM || r == KILN_REDUCTION_NONE;
}

kiln_tensor *api_reduce_loss(kiln_tensor *t, kiln_reduction r) {
    if (r == KILN_REDUCTION_MEAN)
        return kiln_mean(t, 0, NULL, false);
    if (r == KILN_REDUCTION_SUM)
        return kiln_sum(t, 0, NULL, false);
    return t;
}

/* The bool one-hot [..., n] of integer indices [...]: true where the index
 * equals the column. Compared in i64, so that u8 indices meet every column. */
kiln_tensor *api_one_hot(kiln_tensor *idx, int64_t n) {
    kiln_tensor *cols = kiln_arange(kiln_ctx_of(idx), KILN_I64, 0, (double)n, 1);
    return kiln_eq(kiln_unsqueeze(kiln_cast(idx, KILN_I64), -1), cols);
}

kiln_tensor *kiln_cross_entropy(kiln_tensor *logits, kiln_tensor *targets,
                                kiln_reduction reduction) {
    const char *op = "kiln_cross_entropy";
    const nn_arg args[] = {{logits, "logits", false, false}, {targets, "targets", false, true}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 2, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *L = logits->node, *T = targets->node;
    if (T->dtype != KILN_I32 && T->dtype != KILN_I64)
        return api_fail(ctx, KILN_ERR_DTYPE,
                        "kiln_cross_entropy: targets %s are %s; class indices must be i32 or i64",
                        api_shape_str(T), kiln_dtype_name(T->dtype));
    if (!api_valid_reduction(reduction))
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_cross_entropy: logits %s, targets %s: unknown reduction %d",
                        api_shape_str(L), api_shape_str(T), (int)reduction);
    if (L->ndim != 2 || T->ndim != 1 || T->shape[0] != L->shape[0] || L->shape[1] == 0)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_cross_entropy: logits %s and targets %s must be [N, C] and [N] "
                        "with C >= 1",
                        api_shape_str(L), api_shape_str(T));
    if ((e = api_check_indices(ctx, op, T, 0, L->shape[1], "targets", L, NULL)))
        return e;
    kiln_scope_begin(ctx);
    /* -log_softmax at the target is logsumexp(row) - row[target]: both are
     * reductions of the logits themselves, so no [N, C] intermediate is
     * materialised. where, not a product with the mask: a -inf logit in a
     * column that is not the target must not turn the row into NaN. */
    int one = 1;
    kiln_tensor *m = kiln_detach(kiln_max(logits, 1, &one, true)); /* as in softmax_of */
    kiln_tensor *lse =
        kiln_add(kiln_log(kiln_sum(kiln_exp(kiln_sub(logits, m)), 1, &one, true)), m);
    kiln_tensor *hit = api_one_hot(targets, L->shape[1]);
    kiln_tensor *picked =
        kiln_sum(kiln_where(hit, logits, kiln_scalar(ctx, L->dtype, 0)), 1, &one, false);
    kiln_tensor *loss = kiln_sub(kiln_reshape(lse, 1, T->shape), picked);
    /* A target out of range matched no column; its row contributes 0. */
    kiln_tensor *zero = kiln_scalar(ctx, kiln_dtype_of(loss), 0);
    loss = kiln_where(api_ge_literal(targets, 0),
                      kiln_where(api_lt_literal(targets, (double)L->shape[1]), loss, zero), zero);
    return api_finish(ctx, api_reduce_loss(loss, reduction));
}

/* ---- activations, dropout, embedding ---- */

kiln_tensor *kiln_gelu_tanh(kiln_tensor *x) {
    const nn_arg args[] = {{x, "input", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args("kiln_gelu_tanh", 1, args, &ctx);
    if (e || !ctx)
        return e;
    kiln_scope_begin(ctx);
    const double sqrt_2_over_pi = 0.79788456080286535588;
    kiln_tensor *cube = kiln_mul(kiln_mul(x, x), x);
    kiln_tensor *inner =
        api_mul_literal(kiln_add(x, api_mul_literal(cube, 0.044715)), sqrt_2_over_pi);
    kiln_tensor *y = kiln_mul(api_mul_literal(x, 0.5), api_add_literal(kiln_tanh(inner), 1.0));
    return api_finish(ctx, y);
}

/* A composition of ops that already lower to primitives: its reference
 * value, gradient and kernel all follow, and it fuses with its neighbours. */
kiln_tensor *kiln_hardswish(kiln_tensor *x) {
    const nn_arg args[] = {{x, "input", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args("kiln_hardswish", 1, args, &ctx);
    if (e || !ctx)
        return e;
    kiln_scope_begin(ctx);
    kiln_tensor *gate = api_minimum_literal(api_maximum_literal(api_add_literal(x, 3), 0), 6);
    return api_finish(ctx, api_div_literal(kiln_mul(x, gate), 6));
}

kiln_tensor *kiln_dropout(kiln_tensor *x, double p, uint64_t seed, bool training) {
    const char *op = "kiln_dropout";
    const nn_arg args[] = {{x, "input", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 1, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node;
    if (!(p >= 0 && p < 1))
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_dropout: input %s: probability %g is outside [0, 1)",
                        api_shape_str(X), p);
    if (!training || p == 0)
        return api_wrap(ctx, graph_ref(X), op);
    kiln_scope_begin(ctx);
    kiln_tensor *keep = api_ge_literal(kiln_rand(ctx, KILN_F32, X->ndim, X->shape, seed), p);
    kiln_tensor *y =
        kiln_where(keep, api_mul_literal(x, 1.0 / (1.0 - p)), kiln_scalar(ctx, X->dtype, 0));
    return api_finish(ctx, y);
}

kiln_tensor *kiln_embedding(kiln_tensor *indices, kiln_tensor *weight) {
    const char *op = "kiln_embedding";
    const nn_arg args[] = {{indices, "indices", false, true}, {weight, "weight", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 2, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *I = indices->node, *W = weight->node;
    if (!api_index_dtype(I->dtype))
        return api_fail(ctx, KILN_ERR_DTYPE,
                        "kiln_embedding: indices %s are %s; they must be i32, i64 or u8",
                        api_shape_str(I), kiln_dtype_name(I->dtype));
    if (W->ndim != 2 || I->ndim + 1 > KILN_MAX_DIMS)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_embedding: indices %s and weight %s: the weight must be [V, D] "
                        "and the indices have at most %d dimensions",
                        api_shape_str(I), api_shape_str(W), KILN_MAX_DIMS - 1);
    if ((e = api_check_indices(ctx, op, I, 0, W->shape[0], "indices", W, NULL)))
        return e;
    /* a gather of rows: the flat indices [T, 1], broadcast over D */
    int64_t T = graph_numel(I), D = W->shape[1], out[KILN_MAX_DIMS];
    memcpy(out, I->shape, sizeof(int64_t) * (size_t)I->ndim);
    out[I->ndim] = D;
    kiln_scope_begin(ctx);
    const int64_t line[2] = {T, 1}, rows[2] = {T, D};
    kiln_tensor *idx = kiln_expand(kiln_reshape(indices, 2, line), 2, rows);
    kiln_tensor *r = kiln_gather(weight, 0, idx);
    return api_finish(ctx, kiln_reshape(r, I->ndim + 1, out));
}

/* ---- attention ---- */

/* Whether attention over q, k and v is one fused kernel: without a mask (a
 * causal one is the kernel's own), over non-empty sizes, where the device
 * computes GRAPH_ATTENTION in their dtype; KILN_FUSED_ATTENTION=0 records
 * the scores, their softmax and the two products instead (the comparison
 * bench/nn.c makes). */
static bool fused_attention(kiln_ctx *ctx, const graph_node *Q, const graph_node *K,
                            const graph_node *V, bool masked) {
    const char *env = getenv("KILN_FUSED_ATTENTION");
    if (masked || (env && !strcmp(env, "0")) || Q->dtype != K->dtype || Q->dtype != V->dtype)
        return false;
    for (int x = 0; x < 2; x++) {
        const graph_node *n = x ? K : Q;
        if (n->shape[n->ndim - 2] == 0 || n->shape[n->ndim - 1] == 0)
            return false;
    }
    return V->shape[V->ndim - 1] > 0 && jit_backend_supports(ctx->rt, GRAPH_ATTENTION, Q->dtype);
}

/* softmax(q @ k^T * scale + mask) @ v; mask (or NULL) bool (false: -inf)
 * or of q's dtype (added), broadcasting to the scores; k and v with fewer
 * heads (axis -3) than q are repeated to q's (grouped-query attention). */
static kiln_tensor *attention(const char *op, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v,
                              kiln_tensor *mask, bool causal, double scale) {
    const nn_arg args[] = {{q, "query", false, false},
                           {k, "key", false, false},
                           {v, "value", false, false},
                           {mask, "mask", true, true}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 4, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *Q = q->node, *K = k->node, *V = v->node;
    if (!isfinite(scale))
        return api_fail(ctx, KILN_ERR_ARG,
                        "%s: query %s, key %s, value %s: scale %g is not "
                        "finite",
                        op, api_shape_str(Q), api_shape_str(K), api_shape_str(V), scale);
    /* Grouped-query heads: kv heads dividing q's are each shared by a
     * group of consecutive query heads, as PyTorch's enable_gqa. */
    int64_t groups = 1;
    if (Q->ndim >= 3 && K->ndim >= 3 && V->ndim >= 3) {
        int64_t hq = Q->shape[Q->ndim - 3], hk = K->shape[K->ndim - 3];
        if (hk > 1 && hk != hq && hq % hk == 0 && V->shape[V->ndim - 3] == hk)
            groups = hq / hk;
    }
    int n1, nb;
    int64_t b1[KILN_MAX_DIMS], bshape[KILN_MAX_DIMS], kb[KILN_MAX_DIMS], vb[KILN_MAX_DIMS];
    for (int d = 0; d < K->ndim - 2; d++)
        kb[d] = K->shape[d] * (d == K->ndim - 3 ? groups : 1);
    for (int d = 0; d < V->ndim - 2; d++)
        vb[d] = V->shape[d] * (d == V->ndim - 3 ? groups : 1);
    bool ok = Q->ndim >= 2 && K->ndim >= 2 && V->ndim >= 2 &&
              Q->shape[Q->ndim - 1] == K->shape[K->ndim - 1] &&
              K->shape[K->ndim - 2] == V->shape[V->ndim - 2] &&
              api_broadcast_shape(Q->ndim - 2, Q->shape, K->ndim - 2, kb, &n1, b1) &&
              api_broadcast_shape(n1, b1, V->ndim - 2, vb, &nb, bshape);
    if (!ok)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "%s: query %s, key %s and value %s must be [..., L, D], [..., S, D] and "
                        "[..., S, Dv] with batch axes that broadcast (or key and value heads "
                        "dividing the query's)",
                        op, api_shape_str(Q), api_shape_str(K), api_shape_str(V));
    int64_t l = Q->shape[Q->ndim - 2], d = Q->shape[Q->ndim - 1], s = K->shape[K->ndim - 2];
    if (mask) {
        graph_node *M = mask->node;
        int64_t sshape[KILN_MAX_DIMS + 2];
        memcpy(sshape, bshape, sizeof(int64_t) * (size_t)nb);
        sshape[nb] = l;
        sshape[nb + 1] = s;
        if (!api_broadcasts_to(M->ndim, M->shape, nb + 2, sshape))
            return api_fail(ctx, KILN_ERR_SHAPE,
                            "%s: mask %s does not broadcast to the scores [..., L, S] of query "
                            "%s and key %s",
                            op, api_shape_str(M), api_shape_str(Q), api_shape_str(K));
        if (M->dtype != KILN_BOOL && M->dtype != Q->dtype)
            return api_fail(ctx, KILN_ERR_DTYPE,
                            "%s: mask %s is %s; it must be bool or the query's %s", op,
                            api_shape_str(M), kiln_dtype_name(M->dtype),
                            kiln_dtype_name(Q->dtype));
    }
    if (scale == 0)
        scale = d ? 1.0 / sqrt((double)d) : 1.0;
    kiln_scope_begin(ctx);
    if (groups > 1) {
        k = kiln_repeat_interleave(k, groups, -3);
        v = kiln_repeat_interleave(v, groups, -3);
    }
    if (fused_attention(ctx, Q, K, V, mask != NULL)) {
        /* One kernel that never stores the scores (GRAPH_ATTENTION): the
         * sources broadcast to one batch shape, its output's last column
         * (the rows' log-sum-exp, for the backward) cut off. */
        int64_t dims[3][KILN_MAX_DIMS];
        const int64_t rows[3] = {l, s, s}, cols[3] = {d, d, V->shape[V->ndim - 1]};
        kiln_tensor *in[3] = {q, k, v};
        graph_node *srcs[3];
        for (int x = 0; x < 3; x++) {
            memcpy(dims[x], bshape, sizeof(int64_t) * (size_t)nb);
            dims[x][nb] = rows[x];
            dims[x][nb + 1] = cols[x];
            in[x] = kiln_expand(in[x], nb + 2, dims[x]);
            srcs[x] = in[x]->node;
        }
        kiln_tensor *packed = NULL;
        for (int x = 0; x < 3 && !packed; x++)
            if (kiln_error(in[x]) != KILN_OK)
                packed = in[x];
        if (!packed)
            packed = api_wrap(ctx, graph_attention(GRAPH_ATTENTION, 3, srcs, scale, causal), op);
        return api_finish(ctx, kiln_slice(packed, nb + 1, 0, cols[2], 1));
    }
    kiln_tensor *scores = api_mul_literal(kiln_matmul(q, kiln_transpose(k, -1, -2)), scale);
    kiln_tensor *ninf = kiln_scalar(ctx, kiln_dtype_of(scores), -INFINITY);
    if (causal) {
        int64_t col[2] = {l, 1};
        kiln_tensor *i = kiln_reshape(kiln_arange(ctx, KILN_I64, 0, (double)l, 1), 2, col);
        kiln_tensor *j = kiln_arange(ctx, KILN_I64, 0, (double)s, 1);
        scores = kiln_where(kiln_gt(j, i), ninf, scores);
    }
    if (mask)
        scores = mask->node->dtype == KILN_BOOL ? kiln_where(mask, scores, ninf)
                                                : kiln_add(scores, mask);
    kiln_tensor *attn = s ? softmax_of(scores, kiln_ndim(scores) - 1, false) : scores;
    return api_finish(ctx, kiln_matmul(attn, v));
}

kiln_tensor *kiln_scaled_dot_product_attention(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v,
                                               bool causal, double scale) {
    return attention("kiln_scaled_dot_product_attention", q, k, v, NULL, causal, scale);
}

kiln_tensor *kiln_attention(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *mask,
                            bool causal, double scale) {
    return attention("kiln_attention", q, k, v, mask, causal, scale);
}
