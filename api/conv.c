/* conv.c — the convolution and pooling ops beyond nn.c's: 3-d convolution,
 * transposed convolutions (1-d to 3-d), pooling with PyTorch's options
 * (dilation, ceil_mode, count_include_pad, indices) in 1 to 3 dimensions,
 * max unpooling in 1 to 3 dimensions, adaptive pooling (max with indices)
 * and interpolation in 1 to 3 dimensions, and the convolution that
 * kiln_conv2d shares (api_conv). Each is composed from public ops (pads,
 * strided slices, unfolds, cats, matmuls, wheres, host-built constant
 * matrices), so it fuses with its neighbours and is differentiated by their
 * rules; each checks its arguments first, with messages naming the
 * op and the shapes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

/* As nn.c's bound: larger sizes could overflow the output-size arithmetic. */
#define CONV_MAX_PARAM ((int64_t)1 << 40)

/* "(a, b, c)" of n sizes, in one of four static slots (for messages). */
static const char *tuple_str(int n, const int64_t *v) {
    static char slots[4][96];
    static int next;
    char *s = slots[next++ & 3];
    size_t used = 0;
    s[used++] = '(';
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(s + used, sizeof slots[0] - used, "%s%lld", i ? ", " : "",
                                 (long long)v[i]);
    snprintf(s + used, sizeof slots[0] - used, ")");
    return s;
}

static bool all_in(int n, const int64_t *v, int64_t lo) {
    for (int i = 0; i < n; i++)
        if (v[i] < lo || v[i] > CONV_MAX_PARAM)
            return false;
    return true;
}

/* x padded by lo[d] before and hi[d] after spatial axis first + d; a
 * negative amount cuts that many elements off instead. */
static kiln_tensor *pad_or_cut(kiln_tensor *x, int first, int nsp, const int64_t *lo,
                               const int64_t *hi, double value) {
    int64_t pads[2 * KILN_MAX_DIMS] = {0};
    bool any = false;
    for (int d = 0; d < nsp; d++) {
        pads[2 * (first + d)] = lo[d] > 0 ? lo[d] : 0;
        pads[2 * (first + d) + 1] = hi[d] > 0 ? hi[d] : 0;
        any = any || lo[d] > 0 || hi[d] > 0;
    }
    if (any)
        x = kiln_pad(x, pads, value);
    for (int d = 0; d < nsp; d++)
        if (lo[d] < 0 || hi[d] < 0) {
            int64_t len = kiln_shape(x)[first + d];
            x = kiln_slice(x, first + d, lo[d] < 0 ? -lo[d] : 0, len - (hi[d] < 0 ? -hi[d] : 0),
                           1);
        }
    return x;
}

/* The strided view of a padded tensor that kernel tap `tap` (offsets in
 * elements per spatial axis) reads for every output position. */
static kiln_tensor *tap_view(kiln_tensor *xp, int first, int nsp, const int64_t *off,
                             const int64_t *out, const int64_t *stride) {
    for (int d = 0; d < nsp; d++)
        xp = kiln_slice(xp, first + d, off[d], off[d] + (out[d] - 1) * stride[d] + 1, stride[d]);
    return xp;
}

/* Tap t of a kernel of sizes k as a multi-index, row-major. */
static void tap_index(int64_t t, int nsp, const int64_t *k, int64_t *idx) {
    for (int d = nsp - 1; d >= 0; d--) {
        idx[d] = t % k[d];
        t /= k[d];
    }
}

/* ---- convolution ---- */

/* The im2col tensor of xp [N, C, sp...] (padded) as one view: [N, C, k...,
 * out...], element (n, c, i..., o...) = xp[n, c, i*dil + o*stride ...].
 * Each spatial axis is unfolded into windows of the dilated kernel's span
 * moved by the stride, the window cut to every dil-th element, and the
 * kernel axes moved before the output axes: plain strides over xp, so the
 * copy that the matmul's operand needs reads each element with one load
 * (a cat of one strided slice per tap, as this was, reads ntaps masked
 * loads per element: 119 ms against the matmul's 27 ms on a 3x3 layer of
 * x 8x64x32x32). */
static kiln_tensor *im2col(kiln_tensor *xp, int nsp, const int64_t *k, const int64_t *stride,
                           const int64_t *dil) {
    kiln_tensor *cols = xp;
    for (int d = 0; d < nsp; d++) {
        /* [N, C, o_0..o_d, sp_(d+1)..., i_0..i_d] after this axis */
        cols = kiln_unfold(cols, 2 + d, dil[d] * (k[d] - 1) + 1, stride[d]);
        if (dil[d] > 1)
            cols = kiln_slice(cols, kiln_ndim(cols) - 1, 0, KILN_END, dil[d]);
    }
    int perm[KILN_MAX_DIMS] = {0, 1};
    for (int d = 0; d < nsp; d++) {
        perm[2 + d] = 2 + nsp + d;
        perm[2 + nsp + d] = 2 + d;
    }
    return kiln_permute(cols, perm);
}

/* Cross-correlation of x [N, C, s...] with w [OC, C/groups, k...] over nsp
 * spatial axes, the input padded by lo and hi (negative: cut); the caller
 * has checked that the kernel fits. One im2col view, reshaped to [N, groups,
 * C/groups*ntaps, nout] (materialised: the matmul reads strided operands),
 * and one matmul. */
kiln_tensor *api_conv(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int nsp,
                      const int64_t *stride, const int64_t *lo, const int64_t *hi,
                      const int64_t *dil, int64_t groups) {
    const int64_t *xs = kiln_shape(x), *ws = kiln_shape(w);
    int64_t n = xs[0], c = xs[1], oc = ws[0], ntaps = 1, nout = 1;
    int64_t out[3], k[3];
    for (int d = 0; d < nsp; d++) {
        k[d] = ws[2 + d];
        out[d] = (xs[2 + d] + lo[d] + hi[d] - dil[d] * (k[d] - 1) - 1) / stride[d] + 1;
        ntaps *= k[d];
        nout *= out[d];
    }
    kiln_tensor *xp = pad_or_cut(x, 2, nsp, lo, hi, 0.0);
    /* Row (channel, tap) of the im2col matrix in the weight's own order. */
    kiln_tensor *cols = im2col(xp, nsp, k, stride, dil);
    int64_t cshape[4] = {n, groups, c / groups * ntaps, nout};
    int64_t wshape[3] = {groups, oc / groups, c / groups * ntaps};
    kiln_tensor *m = kiln_matmul(kiln_reshape(w, 3, wshape), kiln_reshape(cols, 4, cshape));
    int64_t yshape[5] = {n, oc};
    for (int d = 0; d < nsp; d++)
        yshape[2 + d] = out[d];
    kiln_tensor *y = kiln_reshape(m, nsp + 2, yshape);
    if (b) {
        int64_t bshape[4] = {oc, 1, 1, 1};
        y = kiln_add(y, kiln_reshape(b, nsp + 1, bshape));
    }
    return y;
}

/* The checks every convolution shares: the tensors, the parameter arrays,
 * the ranks and the bias. */
static kiln_tensor *conv_args(const char *op, int nsp, kiln_tensor *x, kiln_tensor *w,
                              kiln_tensor *b, const int64_t *const *params, int nparams,
                              kiln_ctx **ctxp) {
    const nn_arg args[] = {
        {x, "input", false, false}, {w, "weight", false, false}, {b, "bias", true, false}};
    kiln_tensor *e = api_nn_args(op, 3, args, ctxp);
    if (e || !*ctxp)
        return e;
    for (int i = 0; i < nparams; i++)
        if (!params[i])
            return api_fail(*ctxp, KILN_ERR_ARG,
                            "%s: input %s, weight %s: a stride, padding or dilation array is "
                            "NULL",
                            op, api_shape_str(x->node), api_shape_str(w->node));
    if (x->node->ndim != nsp + 2 || w->node->ndim != nsp + 2)
        return api_fail(*ctxp, KILN_ERR_SHAPE, "%s: input %s and weight %s must both be %d-d", op,
                        api_shape_str(x->node), api_shape_str(w->node), nsp + 2);
    for (int d = 0; d < nsp; d++)
        if (w->node->shape[2 + d] < 1 || w->node->shape[2 + d] > CONV_MAX_PARAM)
            return api_fail(*ctxp, KILN_ERR_SHAPE, "%s: weight %s has an empty kernel", op,
                            api_shape_str(w->node));
    return NULL;
}

kiln_tensor *kiln_conv3d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, const int64_t *stride,
                         const int64_t *pad, const int64_t *dilation, int64_t groups) {
    const char *op = "kiln_conv3d";
    kiln_ctx *ctx;
    const int64_t *params[3] = {stride, pad, dilation};
    kiln_tensor *e = conv_args(op, 3, x, w, b, params, 3, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node, *W = w->node;
    if (!all_in(3, stride, 1) || !all_in(3, dilation, 1) || !all_in(3, pad, 0) || groups < 1)
        return api_fail(ctx, KILN_ERR_ARG,
                        "%s: input %s, weight %s: stride %s, padding %s, dilation %s, groups "
                        "%lld: strides, dilations and groups must be >= 1, paddings >= 0",
                        op, api_shape_str(X), api_shape_str(W), tuple_str(3, stride),
                        tuple_str(3, pad), tuple_str(3, dilation), (long long)groups);
    int64_t c = X->shape[1], oc = W->shape[0];
    if (c % groups || oc % groups || W->shape[1] != c / groups)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "%s: input %s and weight %s do not fit %lld groups: input and output "
                        "channels must be multiples of groups and the weight must be [OC, "
                        "C/groups, KD, KH, KW]",
                        op, api_shape_str(X), api_shape_str(W), (long long)groups);
    for (int d = 0; d < 3; d++)
        if (X->shape[2 + d] + 2 * pad[d] < dilation[d] * (W->shape[2 + d] - 1) + 1)
            return api_fail(ctx, KILN_ERR_SHAPE,
                            "%s: the kernel of weight %s with dilation %s does not fit input %s "
                            "padded by %s",
                            op, api_shape_str(W), tuple_str(3, dilation), api_shape_str(X),
                            tuple_str(3, pad));
    if (b && (b->node->ndim != 1 || b->node->shape[0] != oc))
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: bias %s does not fit weight %s: it must be [%lld]",
                        op, api_shape_str(b->node), api_shape_str(W), (long long)oc);
    kiln_scope_begin(ctx);
    return api_finish(ctx, api_conv(x, w, b, 3, stride, pad, pad, dilation, groups));
}

/* x with stride - 1 zeros between neighbours along axis ax: a new axis
 * padded to the stride, merged in, and the trailing zeros cut. */
static kiln_tensor *zero_insert(kiln_tensor *x, int ax, int64_t stride) {
    if (stride == 1)
        return x;
    int nd = kiln_ndim(x);
    int64_t len = kiln_shape(x)[ax];
    kiln_tensor *u = kiln_unsqueeze(x, ax + 1);
    int64_t pads[2 * KILN_MAX_DIMS] = {0};
    pads[2 * (ax + 1) + 1] = stride - 1;
    u = kiln_pad(u, pads, 0.0);
    int64_t shp[KILN_MAX_DIMS];
    memcpy(shp, kiln_shape(x), sizeof(int64_t) * (size_t)nd);
    shp[ax] = len * stride;
    return kiln_slice(kiln_reshape(u, nd, shp), ax, 0, (len - 1) * stride + 1, 1);
}

static kiln_tensor *conv_transpose(const char *op, int nsp, kiln_tensor *x, kiln_tensor *w,
                                   kiln_tensor *b, const int64_t *stride, const int64_t *pad,
                                   const int64_t *outpad, const int64_t *dil, int64_t groups) {
    kiln_ctx *ctx;
    const int64_t *params[4] = {stride, pad, outpad, dil};
    kiln_tensor *e = conv_args(op, nsp, x, w, b, params, 4, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node, *W = w->node;
    bool ok = all_in(nsp, stride, 1) && all_in(nsp, dil, 1) && all_in(nsp, pad, 0) &&
              all_in(nsp, outpad, 0) && groups >= 1;
    for (int d = 0; ok && d < nsp; d++)
        ok = outpad[d] < stride[d] || outpad[d] < dil[d];
    if (!ok)
        return api_fail(ctx, KILN_ERR_ARG,
                        "%s: input %s, weight %s: stride %s, padding %s, output_padding %s, "
                        "dilation %s, groups %lld: strides, dilations and groups must be >= 1, "
                        "paddings >= 0, and each output padding smaller than its stride or its "
                        "dilation",
                        op, api_shape_str(X), api_shape_str(W), tuple_str(nsp, stride),
                        tuple_str(nsp, pad), tuple_str(nsp, outpad), tuple_str(nsp, dil),
                        (long long)groups);
    int64_t c = X->shape[1], ocg = W->shape[1], oc = ocg * groups;
    if (c % groups || W->shape[0] != c)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "%s: input %s and weight %s do not fit %lld groups: the weight must be "
                        "[C, OC/groups, k...] with C the input's channels, a multiple of groups",
                        op, api_shape_str(X), api_shape_str(W), (long long)groups);
    int64_t lo[3], hi[3];
    for (int d = 0; d < nsp; d++) {
        int64_t k = W->shape[2 + d];
        int64_t o = (X->shape[2 + d] - 1) * stride[d] - 2 * pad[d] + dil[d] * (k - 1) + outpad[d] + 1;
        if (X->shape[2 + d] < 1 || o < 1)
            return api_fail(ctx, KILN_ERR_SHAPE,
                            "%s: input %s, weight %s, stride %s, padding %s, output_padding %s, "
                            "dilation %s: spatial axis %d has output size %lld; it must be >= 1",
                            op, api_shape_str(X), api_shape_str(W), tuple_str(nsp, stride),
                            tuple_str(nsp, pad), tuple_str(nsp, outpad), tuple_str(nsp, dil), d,
                            (long long)o);
        lo[d] = dil[d] * (k - 1) - pad[d];
        hi[d] = lo[d] + outpad[d];
    }
    if (b && (b->node->ndim != 1 || b->node->shape[0] != oc))
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: bias %s does not fit weight %s: it must be [%lld]",
                        op, api_shape_str(b->node), api_shape_str(W), (long long)oc);
    kiln_scope_begin(ctx);
    kiln_tensor *xz = x;
    for (int d = 0; d < nsp; d++)
        xz = zero_insert(xz, 2 + d, stride[d]);
    /* The forward weight [OC, C/groups, k...]: channels swapped within each
     * group, the kernel flipped. */
    int64_t gshape[KILN_MAX_DIMS] = {groups, c / groups, ocg};
    int64_t fshape[KILN_MAX_DIMS] = {oc, c / groups};
    int flip_axes[3];
    for (int d = 0; d < nsp; d++) {
        gshape[3 + d] = fshape[2 + d] = W->shape[2 + d];
        flip_axes[d] = 2 + d;
    }
    kiln_tensor *wf = kiln_transpose(kiln_reshape(w, nsp + 3, gshape), 1, 2);
    wf = kiln_flip(kiln_reshape(wf, nsp + 2, fshape), nsp, flip_axes);
    const int64_t ones[3] = {1, 1, 1};
    return api_finish(ctx, api_conv(xz, wf, b, nsp, ones, lo, hi, dil, groups));
}

kiln_tensor *kiln_conv_transpose1d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int64_t stride,
                                   int64_t pad, int64_t output_padding, int64_t dilation,
                                   int64_t groups) {
    return conv_transpose("kiln_conv_transpose1d", 1, x, w, b, &stride, &pad, &output_padding,
                          &dilation, groups);
}

kiln_tensor *kiln_conv_transpose2d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                                   const int64_t *stride, const int64_t *pad,
                                   const int64_t *output_padding, const int64_t *dilation,
                                   int64_t groups) {
    return conv_transpose("kiln_conv_transpose2d", 2, x, w, b, stride, pad, output_padding,
                          dilation, groups);
}

kiln_tensor *kiln_conv_transpose3d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                                   const int64_t *stride, const int64_t *pad,
                                   const int64_t *output_padding, const int64_t *dilation,
                                   int64_t groups) {
    return conv_transpose("kiln_conv_transpose3d", 3, x, w, b, stride, pad, output_padding,
                          dilation, groups);
}

/* ---- pooling with PyTorch's options ---- */

typedef struct pool_cfg {
    int nsp;
    int64_t k[3], s[3], p[3], d[3];
    bool ceil_mode, include_pad;
} pool_cfg;

/* PyTorch's pooling_output_shape: with ceil_mode the last window may hang
 * over the end, but must start inside the input or its left padding. */
static int64_t pool_out(int64_t len, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
    int64_t num = len + 2 * p - d * (k - 1) - 1;
    if (num < 0)
        return 0;
    int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
    if (ceil_mode && (o - 1) * s >= len + p)
        o--;
    return o;
}

/* A [out] vector of host values along spatial axis d of nsp, shaped to
 * broadcast over the others. */
static kiln_tensor *axis_vector(kiln_ctx *ctx, kiln_dtype dt, int d, int nsp, int64_t out,
                                const void *v) {
    int64_t shp[3] = {1, 1, 1};
    shp[d] = out;
    return kiln_from_data(ctx, dt, nsp, shp, v);
}

static kiln_tensor *pool_nd(const char *op, bool is_max, kiln_tensor *x, const pool_cfg *c,
                            kiln_tensor **indices) {
    if (indices)
        *indices = NULL;
    const nn_arg args[] = {{x, "input", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 1, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node;
    int nsp = c->nsp;
    bool ok = all_in(nsp, c->k, 1) && all_in(nsp, c->s, 1) && all_in(nsp, c->d, 1) &&
              all_in(nsp, c->p, 0);
    for (int d = 0; ok && d < nsp; d++)
        ok = 2 * c->p[d] <= c->k[d];
    if (!ok)
        return api_fail(ctx, KILN_ERR_ARG,
                        "%s: input %s, kernel %s, stride %s, padding %s, dilation %s: kernel "
                        "sizes, strides and dilations must be >= 1 and each padding at most half "
                        "its kernel size",
                        op, api_shape_str(X), tuple_str(nsp, c->k), tuple_str(nsp, c->s),
                        tuple_str(nsp, c->p), tuple_str(nsp, c->d));
    if (X->ndim != nsp + 1 && X->ndim != nsp + 2)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s must be %d-d or %d-d (with a batch axis)",
                        op, api_shape_str(X), nsp + 1, nsp + 2);
    int first = X->ndim - nsp;
    int64_t out[3], lo[3], hi[3], len[3], plane[3];
    for (int d = 0; d < nsp; d++) {
        len[d] = X->shape[first + d];
        out[d] = pool_out(len[d], c->k[d], c->s[d], c->p[d], c->d[d], c->ceil_mode);
        if (out[d] < 1)
            return api_fail(ctx, KILN_ERR_SHAPE,
                            "%s: the window %s with dilation %s does not fit input %s padded by %s",
                            op, tuple_str(nsp, c->k), tuple_str(nsp, c->d), api_shape_str(X),
                            tuple_str(nsp, c->p));
        lo[d] = c->p[d];
        hi[d] = (out[d] - 1) * c->s[d] + c->d[d] * (c->k[d] - 1) + 1 - len[d] - c->p[d];
    }
    plane[nsp - 1] = 1;
    for (int d = nsp - 2; d >= 0; d--)
        plane[d] = plane[d + 1] * len[d + 1];
    int64_t ntaps = 1;
    for (int d = 0; d < nsp; d++)
        ntaps *= c->k[d];
    int64_t maxout = 1;
    for (int d = 0; d < nsp; d++)
        maxout = out[d] > maxout ? out[d] : maxout;
    int64_t nout = 1;
    for (int d = 0; d < nsp; d++)
        nout *= out[d];
    double *host_d = malloc(sizeof(double) * (size_t)maxout);
    int64_t *host_pos = is_max && indices ? malloc(sizeof(int64_t) * (size_t)nout) : NULL;
    if (!host_d || (is_max && indices && !host_pos)) {
        free(host_d);
        free(host_pos);
        return api_fail(ctx, KILN_ERR_OOM, "%s: out of memory for input %s", op, api_shape_str(X));
    }
    kiln_dtype dt = X->dtype;
    kiln_scope_begin(ctx);
    kiln_tensor *xp = pad_or_cut(x, first, nsp, lo, hi, is_max ? -INFINITY : 0.0);
    kiln_tensor *acc = is_max ? kiln_scalar(ctx, dt, -INFINITY) : NULL, *idx = NULL;
    if (is_max && indices) {
        /* PyTorch's index before any element wins: the window's first
         * position inside the input. */
        for (int64_t f = 0; f < nout; f++) {
            int64_t rest = f, flat = 0;
            for (int d = nsp - 1; d >= 0; d--) {
                int64_t start = (rest % out[d]) * c->s[d] - c->p[d];
                while (start < 0)
                    start += c->d[d];
                flat += start * plane[d];
                rest /= out[d];
            }
            host_pos[f] = flat;
        }
        idx = kiln_from_data(ctx, KILN_I64, nsp, out, host_pos);
    }
    for (int64_t t = 0; t < ntaps; t++) {
        int64_t ti[3], off[3];
        tap_index(t, nsp, c->k, ti);
        for (int d = 0; d < nsp; d++)
            off[d] = ti[d] * c->d[d];
        kiln_tensor *v = tap_view(xp, first, nsp, off, out, c->s);
        if (!is_max) {
            acc = acc ? kiln_add(acc, v) : v;
            continue;
        }
        /* Strictly greater, or NaN: the first maximum in window order wins
         * (and takes the gradient), as in PyTorch. */
        kiln_tensor *take = kiln_bitwise_or(kiln_gt(v, acc), kiln_ne(v, v));
        acc = kiln_where(take, v, acc);
        if (idx) {
            /* The tap's positions as a constant leaf: index arithmetic in
             * the graph would cost kernels of its own. */
            for (int64_t f = 0; f < nout; f++) {
                int64_t rest = f, flat = 0;
                for (int d = nsp - 1; d >= 0; d--) {
                    flat += ((rest % out[d]) * c->s[d] + off[d] - c->p[d]) * plane[d];
                    rest /= out[d];
                }
                host_pos[f] = flat;
            }
            idx = kiln_where(take, kiln_from_data(ctx, KILN_I64, nsp, out, host_pos), idx);
        }
    }
    if (!is_max) {
        /* PyTorch's divisor: the window clipped to the padded input (ceil
         * mode can run past it), or to the input itself. */
        kiln_tensor *div = NULL;
        for (int d = 0; d < nsp; d++) {
            for (int64_t o = 0; o < out[d]; o++) {
                int64_t start = o * c->s[d] - c->p[d];
                int64_t end = start + c->k[d] < len[d] + c->p[d] ? start + c->k[d] : len[d] + c->p[d];
                int64_t n = end - start;
                if (!c->include_pad)
                    n = (end < len[d] ? end : len[d]) - (start > 0 ? start : 0);
                host_d[o] = (double)n;
            }
            kiln_tensor *v = axis_vector(ctx, KILN_F64, d, nsp, out[d], host_d);
            div = div ? kiln_mul(div, v) : v;
        }
        acc = kiln_div(acc, kiln_cast(div, dt));
    }
    free(host_d);
    free(host_pos);
    if (idx) {
        int64_t full[KILN_MAX_DIMS];
        memcpy(full, X->shape, sizeof(int64_t) * (size_t)first);
        memcpy(full + first, out, sizeof(int64_t) * (size_t)nsp);
        idx = kiln_expand(idx, X->ndim, full);
        if (kiln_error(acc) == KILN_OK && kiln_error(idx) == KILN_OK) {
            kiln_keep(idx);
            *indices = idx;
        }
    }
    return api_finish(ctx, acc);
}

static pool_cfg cfg_of(int nsp, const int64_t *k, const int64_t *s, const int64_t *p,
                       const int64_t *d, bool ceil_mode, bool include_pad) {
    pool_cfg c = {.nsp = nsp, .ceil_mode = ceil_mode, .include_pad = include_pad};
    for (int i = 0; i < nsp; i++) {
        c.k[i] = k[i];
        c.s[i] = s[i];
        c.p[i] = p[i];
        c.d[i] = d ? d[i] : 1;
    }
    return c;
}

static kiln_tensor *null_params(const char *op, kiln_tensor *x, kiln_tensor **indices) {
    if (indices)
        *indices = NULL;
    if (!x)
        return NULL;
    if (!x->node)
        return api_pass(x);
    return api_fail(x->ctx, KILN_ERR_ARG,
                    "%s: input %s: a kernel, stride, padding or dilation array is NULL", op,
                    api_shape_str(x->node));
}

kiln_tensor *kiln_max_pool1d_ex(kiln_tensor *x, int64_t kernel, int64_t stride, int64_t pad,
                                int64_t dilation, bool ceil_mode, kiln_tensor **indices) {
    pool_cfg c = cfg_of(1, &kernel, &stride, &pad, &dilation, ceil_mode, false);
    return pool_nd("kiln_max_pool1d_ex", true, x, &c, indices);
}

kiln_tensor *kiln_avg_pool1d_ex(kiln_tensor *x, int64_t kernel, int64_t stride, int64_t pad,
                                bool ceil_mode, bool count_include_pad) {
    pool_cfg c = cfg_of(1, &kernel, &stride, &pad, NULL, ceil_mode, count_include_pad);
    return pool_nd("kiln_avg_pool1d_ex", false, x, &c, NULL);
}

#define POOL_ND(name, nsp, is_max)                                                                 \
    const char *op = name;                                                                         \
    if (!kernel || !stride || !pad || (is_max && !dilation))                                        \
        return null_params(op, x, indices);                                                        \
    pool_cfg c = cfg_of(nsp, kernel, stride, pad, dilation, ceil_mode, count_include_pad);          \
    return pool_nd(op, is_max, x, &c, indices)

kiln_tensor *kiln_max_pool2d_ex(kiln_tensor *x, const int64_t *kernel, const int64_t *stride,
                                const int64_t *pad, const int64_t *dilation, bool ceil_mode,
                                kiln_tensor **indices) {
    const bool count_include_pad = false;
    POOL_ND("kiln_max_pool2d_ex", 2, true);
}

kiln_tensor *kiln_max_pool3d(kiln_tensor *x, const int64_t *kernel, const int64_t *stride,
                             const int64_t *pad, const int64_t *dilation, bool ceil_mode,
                             kiln_tensor **indices) {
    const bool count_include_pad = false;
    POOL_ND("kiln_max_pool3d", 3, true);
}

kiln_tensor *kiln_avg_pool2d_ex(kiln_tensor *x, const int64_t *kernel, const int64_t *stride,
                                const int64_t *pad, bool ceil_mode, bool count_include_pad) {
    const int64_t *dilation = NULL;
    kiln_tensor **indices = NULL;
    POOL_ND("kiln_avg_pool2d_ex", 2, false);
}

kiln_tensor *kiln_avg_pool3d(kiln_tensor *x, const int64_t *kernel, const int64_t *stride,
                             const int64_t *pad, bool ceil_mode, bool count_include_pad) {
    const int64_t *dilation = NULL;
    kiln_tensor **indices = NULL;
    POOL_ND("kiln_avg_pool3d", 3, false);
}

/* ---- max unpooling ---- */

/* Unpooling over the last nsp axes to the sizes out: a scatter_add of x
 * into zero planes of prod(out) elements, so that repeated indices add (the
 * same result on every device, where overwriting would depend on the order
 * of the stores) and the gradient in x is a gather. */
static kiln_tensor *unpool_nd(const char *op, int nsp, kiln_tensor *x, kiln_tensor *indices,
                              const int64_t *out) {
    static const char *const forms[] = {"[N, C, L] or [C, L]", "[N, C, H, W] or [C, H, W]",
                                        "[N, C, D, H, W] or [C, D, H, W]"};
    const nn_arg args[] = {{x, "input", false, false}, {indices, "indices", false, true}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 2, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node, *I = indices->node;
    if (!out)
        return api_fail(ctx, KILN_ERR_ARG, "%s: input %s: the output size array is NULL", op,
                        api_shape_str(X));
    if (!api_index_dtype(I->dtype))
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: indices %s are %s; they must be i32, i64 or u8",
                        op, api_shape_str(I), kiln_dtype_name(I->dtype));
    bool same = X->ndim == I->ndim;
    for (int d = 0; same && d < X->ndim; d++)
        same = X->shape[d] == I->shape[d];
    if ((X->ndim != nsp + 1 && X->ndim != nsp + 2) || !same)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s and indices %s must have one shape, %s",
                        op, api_shape_str(X), api_shape_str(I), forms[nsp - 1]);
    int64_t plane = 1;
    for (int d = 0; d < nsp; d++) {
        if (out[d] < 1 || out[d] > CONV_MAX_PARAM || plane > CONV_MAX_PARAM)
            return api_fail(ctx, KILN_ERR_ARG, "%s: input %s: output size %s must be >= 1", op,
                            api_shape_str(X), tuple_str(nsp, out));
        plane *= out[d];
    }
    if ((e = api_check_indices(ctx, op, I, 0, plane, "indices", X, NULL)))
        return e;
    int nd = X->ndim, first = nd - nsp;
    int64_t flat[KILN_MAX_DIMS], dst[KILN_MAX_DIMS], full[KILN_MAX_DIMS];
    memcpy(flat, X->shape, sizeof(int64_t) * (size_t)first);
    memcpy(dst, X->shape, sizeof(int64_t) * (size_t)first);
    memcpy(full, X->shape, sizeof(int64_t) * (size_t)first);
    flat[first] = 1;
    for (int d = 0; d < nsp; d++)
        flat[first] *= X->shape[first + d];
    dst[first] = plane;
    memcpy(full + first, out, sizeof(int64_t) * (size_t)nsp);
    kiln_scope_begin(ctx);
    kiln_tensor *z = kiln_zeros(ctx, X->dtype, first + 1, dst);
    kiln_tensor *y = kiln_scatter_add(z, first, kiln_reshape(indices, first + 1, flat),
                                      kiln_reshape(x, first + 1, flat));
    return api_finish(ctx, kiln_reshape(y, nd, full));
}

kiln_tensor *kiln_max_unpool1d(kiln_tensor *x, kiln_tensor *indices, int64_t out_l) {
    return unpool_nd("kiln_max_unpool1d", 1, x, indices, &out_l);
}

kiln_tensor *kiln_max_unpool2d(kiln_tensor *x, kiln_tensor *indices, int64_t out_h, int64_t out_w) {
    return unpool_nd("kiln_max_unpool2d", 2, x, indices, (const int64_t[]){out_h, out_w});
}

kiln_tensor *kiln_max_unpool3d(kiln_tensor *x, kiln_tensor *indices, const int64_t *out) {
    return unpool_nd("kiln_max_unpool3d", 3, x, indices, out);
}

/* ---- adaptive pooling and interpolation: one axis at a time ---- */

/* t with its axis ax replaced by m [out, in] @ it; an axis before the last
 * two (the depth of a volume) is swapped into the rows' place and back. */
static kiln_tensor *apply_along(kiln_tensor *t, int ax, kiln_tensor *m) {
    int nd = kiln_ndim(t);
    if (ax == nd - 1)
        return kiln_matmul(t, kiln_transpose(m, 0, 1));
    if (ax == nd - 2)
        return kiln_matmul(m, t);
    return kiln_transpose(kiln_matmul(m, kiln_transpose(t, ax, nd - 2)), ax, nd - 2);
}

/* A host-built [out, in] f64 matrix as a tensor of dtype dt (converted here
 * for f32, so that no cast kernel runs); frees m. */
static kiln_tensor *matrix_of(kiln_ctx *ctx, kiln_dtype dt, double *m, int64_t out, int64_t in) {
    const int64_t shp[2] = {out, in};
    kiln_tensor *t;
    float *f = dt == KILN_F32 ? malloc(sizeof(float) * (size_t)(out * in)) : NULL;
    if (f) {
        for (int64_t i = 0; i < out * in; i++)
            f[i] = (float)m[i];
        t = kiln_from_data(ctx, KILN_F32, 2, shp, f);
        free(f);
    } else {
        t = kiln_cast(kiln_from_data(ctx, KILN_F64, 2, shp, m), dt);
    }
    free(m);
    return t;
}

static int64_t win_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
static int64_t win_end(int64_t i, int64_t in, int64_t out) {
    return ((i + 1) * in + out - 1) / out;
}

static kiln_tensor *adaptive(const char *op, bool is_max, int nsp, kiln_tensor *x,
                             const int64_t *sizes) {
    const nn_arg args[] = {{x, "input", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 1, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node;
    if (X->ndim != nsp + 1 && X->ndim != nsp + 2)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s must be %d-d or %d-d (with a batch axis)",
                        op, api_shape_str(X), nsp + 1, nsp + 2);
    int first = X->ndim - nsp;
    for (int d = 0; d < nsp; d++)
        if (X->shape[first + d] < 1 || sizes[d] < 1 || sizes[d] > CONV_MAX_PARAM)
            return api_fail(ctx, KILN_ERR_ARG,
                            "%s: input %s, output size %s: the sizes and the input's spatial "
                            "sizes must be >= 1",
                            op, api_shape_str(X), tuple_str(nsp, sizes));
    kiln_scope_begin(ctx);
    kiln_tensor *y = x;
    for (int d = 0; d < nsp; d++) {
        int ax = first + d;
        int64_t in = X->shape[ax], out = sizes[d];
        if (is_max) {
            /* The maximum over a box is the maximum of the maxima along each
             * of its axes. */
            kiln_tensor **parts = malloc(sizeof *parts * (size_t)out);
            if (!parts) {
                y = api_fail(ctx, KILN_ERR_OOM, "%s: out of memory for input %s", op,
                             api_shape_str(X));
                break;
            }
            int axis[1] = {ax};
            for (int64_t i = 0; i < out; i++)
                parts[i] = kiln_max(kiln_slice(y, ax, win_start(i, in, out), win_end(i, in, out), 1),
                                    1, axis, true);
            y = kiln_cat((int)out, parts, ax);
            free(parts);
            continue;
        }
        double *m = calloc((size_t)(out * in), sizeof(double));
        if (!m) {
            y = api_fail(ctx, KILN_ERR_OOM, "%s: out of memory for input %s", op, api_shape_str(X));
            break;
        }
        for (int64_t i = 0; i < out; i++) {
            int64_t s = win_start(i, in, out), f = win_end(i, in, out);
            for (int64_t j = s; j < f; j++)
                m[i * in + j] = 1.0 / (double)(f - s);
        }
        y = apply_along(y, ax, matrix_of(ctx, X->dtype, m, out, in));
    }
    return api_finish(ctx, y);
}

kiln_tensor *kiln_adaptive_avg_pool1d(kiln_tensor *x, int64_t out_l) {
    return adaptive("kiln_adaptive_avg_pool1d", false, 1, x, &out_l);
}
kiln_tensor *kiln_adaptive_avg_pool2d(kiln_tensor *x, int64_t out_h, int64_t out_w) {
    return adaptive("kiln_adaptive_avg_pool2d", false, 2, x, (const int64_t[]){out_h, out_w});
}
kiln_tensor *kiln_adaptive_avg_pool3d(kiln_tensor *x, int64_t out_d, int64_t out_h, int64_t out_w) {
    return adaptive("kiln_adaptive_avg_pool3d", false, 3, x, (const int64_t[]){out_d, out_h, out_w});
}
kiln_tensor *kiln_adaptive_max_pool3d(kiln_tensor *x, int64_t out_d, int64_t out_h, int64_t out_w) {
    return adaptive("kiln_adaptive_max_pool3d", true, 3, x, (const int64_t[]){out_d, out_h, out_w});
}
kiln_tensor *kiln_adaptive_max_pool1d(kiln_tensor *x, int64_t out_l) {
    return adaptive("kiln_adaptive_max_pool1d", true, 1, x, &out_l);
}
kiln_tensor *kiln_adaptive_max_pool2d(kiln_tensor *x, int64_t out_h, int64_t out_w) {
    return adaptive("kiln_adaptive_max_pool2d", true, 2, x, (const int64_t[]){out_h, out_w});
}

/* Adaptive max pooling with indices over the flattened plane: one
 * index_select of every output's window taps, [..., nout, K] with K the
 * largest window's size (a window's taps past its end along an axis read
 * its last element again, which comes after it in row-major tap order and
 * so never is the first maximum), an argmax over K (the first maximum, or
 * the first NaN), a host table that maps (output, tap) to the flat index,
 * and a gather of x at those indices for the values, so that the gradient
 * is PyTorch's: all of it to the element the index names. */
static kiln_tensor *adaptive_max_idx(const char *op, int nsp, kiln_tensor *x,
                                     const int64_t *sizes, kiln_tensor **indices) {
    if (indices)
        *indices = NULL;
    const nn_arg args[] = {{x, "input", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 1, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node;
    if (X->ndim != nsp + 1 && X->ndim != nsp + 2)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s must be %d-d or %d-d (with a batch axis)",
                        op, api_shape_str(X), nsp + 1, nsp + 2);
    int first = X->ndim - nsp;
    int64_t kmax[2] = {1, 1}, in[2] = {1, 1}, out[2] = {1, 1};
    for (int d = 0; d < nsp; d++) {
        if (X->shape[first + d] < 1 || sizes[d] < 1 || sizes[d] > CONV_MAX_PARAM)
            return api_fail(ctx, KILN_ERR_ARG,
                            "%s: input %s, output size %s: the sizes and the input's spatial "
                            "sizes must be >= 1",
                            op, api_shape_str(X), tuple_str(nsp, sizes));
        in[2 - nsp + d] = X->shape[first + d];
        out[2 - nsp + d] = sizes[d];
    }
    int64_t full[KILN_MAX_DIMS];
    memcpy(full, X->shape, sizeof(int64_t) * (size_t)first);
    memcpy(full + first, sizes, sizeof(int64_t) * (size_t)nsp);
    /* An empty input (a 0 among the leading axes) has an empty result: no
     * table of taps, which for a long axis beside the 0 was as large as the
     * axis (2^28 of them, a 16 GB allocation, found by the fuzzer). */
    bool empty = false;
    for (int d = 0; d < first; d++)
        empty |= X->shape[d] == 0;
    if (empty) {
        kiln_scope_begin(ctx);
        kiln_tensor *y = kiln_zeros(ctx, X->dtype, X->ndim, full);
        if (indices && kiln_error(y) == KILN_OK) {
            kiln_tensor *idx = kiln_zeros(ctx, KILN_I64, X->ndim, full);
            if (kiln_error(idx) == KILN_OK) {
                kiln_keep(idx);
                *indices = idx;
            }
        }
        return api_finish(ctx, y);
    }
    /* The table holds at least one tap per output: past this many outputs
     * it could not be allocated, and the loop below would not end soon. */
    if (out[0] * out[1] > ((int64_t)1 << 32))
        return api_fail(ctx, KILN_ERR_ARG, "%s: input %s, output size %s: too many windows",
                        op, api_shape_str(X), tuple_str(nsp, sizes));
    for (int d = 0; d < 2; d++)
        for (int64_t i = 0; i < out[d]; i++) {
            int64_t w = win_end(i, in[d], out[d]) - win_start(i, in[d], out[d]);
            kmax[d] = w > kmax[d] ? w : kmax[d];
        }
    int64_t K = kmax[0] * kmax[1], nout = out[0] * out[1], plane = in[0] * in[1];
    if (nout > CONV_MAX_PARAM / K)
        return api_fail(ctx, KILN_ERR_ARG, "%s: input %s, output size %s: too many window taps",
                        op, api_shape_str(X), tuple_str(nsp, sizes));
    int64_t *tap = malloc(sizeof(int64_t) * (size_t)(nout * K));
    if (!tap)
        return api_fail(ctx, KILN_ERR_OOM, "%s: out of memory for input %s", op, api_shape_str(X));
    for (int64_t i = 0; i < out[0]; i++)
        for (int64_t j = 0; j < out[1]; j++)
            for (int64_t t = 0; t < K; t++) {
                int64_t r = win_start(i, in[0], out[0]) + t / kmax[1];
                int64_t c = win_start(j, in[1], out[1]) + t % kmax[1];
                int64_t rl = win_end(i, in[0], out[0]) - 1, cl = win_end(j, in[1], out[1]) - 1;
                tap[(i * out[1] + j) * K + t] = (r < rl ? r : rl) * in[1] + (c < cl ? c : cl);
            }
    int64_t lead[KILN_MAX_DIMS];
    memcpy(lead, X->shape, sizeof(int64_t) * (size_t)first);
    kiln_scope_begin(ctx);
    lead[first] = plane;
    kiln_tensor *xf = kiln_reshape(x, first + 1, lead);
    const int64_t ntap = nout * K, tshape[2] = {nout, K};
    kiln_tensor *taps = kiln_from_data(ctx, KILN_I64, 1, &ntap, tap);
    lead[first] = nout;
    lead[first + 1] = K;
    kiln_tensor *win = kiln_reshape(kiln_index_select(xf, first, taps), first + 2, lead);
    const int last[1] = {first + 1};
    kiln_tensor *am = kiln_argmax(win, 1, last, true);
    kiln_tensor *table =
        kiln_expand(kiln_from_data(ctx, KILN_I64, 2, tshape, tap), first + 2, lead);
    free(tap);
    lead[first + 1] = 1;
    lead[first] = nout;
    kiln_tensor *flat = kiln_reshape(kiln_gather(table, first + 1, am), first + 1, lead);
    kiln_tensor *y = kiln_gather(xf, first, flat);
    y = kiln_reshape(y, X->ndim, full);
    if (indices) {
        kiln_tensor *idx = kiln_reshape(flat, X->ndim, full);
        if (kiln_error(y) == KILN_OK && kiln_error(idx) == KILN_OK) {
            kiln_keep(idx);
            *indices = idx;
        }
    }
    return api_finish(ctx, y);
}

kiln_tensor *kiln_adaptive_max_pool1d_ex(kiln_tensor *x, int64_t out_l, kiln_tensor **indices) {
    return adaptive_max_idx("kiln_adaptive_max_pool1d_ex", 1, x, &out_l, indices);
}
kiln_tensor *kiln_adaptive_max_pool2d_ex(kiln_tensor *x, int64_t out_h, int64_t out_w,
                                         kiln_tensor **indices) {
    return adaptive_max_idx("kiln_adaptive_max_pool2d_ex", 2, x, (const int64_t[]){out_h, out_w},
                            indices);
}

/* PyTorch's source coordinate of output position o (area_pixel_compute_
 * source_index): corners mapped onto corners, or pixel centres onto pixel
 * centres (clamped at 0 for linear, not for cubic). */
static double source_coord(int64_t o, int64_t in, int64_t out, double sf, bool align,
                           bool cubic) {
    if (align)
        return out > 1 ? (double)o * (double)(in - 1) / (double)(out - 1) : 0.0;
    double scale = sf > 0 ? 1.0 / sf : (double)in / (double)out;
    double src = ((double)o + 0.5) * scale - 0.5;
    return !cubic && src < 0 ? 0.0 : src;
}

static double cubic1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
static double cubic2(double x, double a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

/* The [out, in] interpolation matrix of one axis (linear or cubic); sf is
 * the axis's given scale factor, or 0 for in/out's. */
static void interp_matrix(double *m, int64_t in, int64_t out, double sf, kiln_interp_mode mode,
                          bool align) {
    for (int64_t o = 0; o < out; o++) {
        double *row = m + o * in;
        if (mode == KILN_INTERP_LINEAR) {
            double src = source_coord(o, in, out, sf, align, false);
            int64_t i0 = (int64_t)src;
            int64_t i1 = i0 < in - 1 ? i0 + 1 : i0;
            double l1 = src - (double)i0;
            row[i0] += 1 - l1;
            row[i1] += l1;
            continue;
        }
        const double a = -0.75;
        double src = source_coord(o, in, out, sf, align, true);
        double f = floor(src), t = src - f;
        double w[4] = {cubic2(t + 1, a), cubic1(t, a), cubic1(1 - t, a), cubic2(2 - t, a)};
        for (int k = 0; k < 4; k++) {
            int64_t i = (int64_t)f - 1 + k;
            i = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
            row[i] += w[k];
        }
    }
}

/* PyTorch's nearest_idx: floor(o * (float)in / out), or o * (float)(1 /
 * sf) with a scale factor, in single precision. */
static int64_t nearest_src(int64_t o, int64_t in, int64_t out, double sf) {
    if (out == in)
        return o;
    if (out == 2 * in)
        return o >> 1;
    float scale = sf > 0 ? (float)(1.0 / sf) : (float)in / (float)out;
    int64_t i = (int64_t)floorf((float)o * scale);
    return i < in - 1 ? i : in - 1;
}

/* Both forms of kiln_interpolate: sf NULL (sizes given) or the scale
 * factors that the source coordinates use (sizes derived from them). */
static kiln_tensor *interp(const char *op, kiln_tensor *x, int ndim_spatial, const int64_t *sizes,
                           const double *sf, kiln_interp_mode mode, bool align_corners) {
    const nn_arg args[] = {{x, "input", false, false}};
    kiln_ctx *ctx;
    kiln_tensor *e = api_nn_args(op, 1, args, &ctx);
    if (e || !ctx)
        return e;
    graph_node *X = x->node;
    if (ndim_spatial < 1 || ndim_spatial > 3 || !sizes)
        return api_fail(ctx, KILN_ERR_ARG,
                        "%s: input %s: %d spatial axes%s; 1, 2 or 3 spatial axes and their %s "
                        "are required",
                        op, api_shape_str(X), ndim_spatial, sizes ? "" : ", NULL array",
                        sf ? "scale factors" : "sizes");
    int nsp = ndim_spatial;
    if (mode != KILN_INTERP_NEAREST && mode != KILN_INTERP_LINEAR && mode != KILN_INTERP_BICUBIC)
        return api_fail(ctx, KILN_ERR_ARG, "%s: input %s: unknown mode %d", op, api_shape_str(X),
                        (int)mode);
    if (mode == KILN_INTERP_BICUBIC && nsp != 2)
        return api_fail(ctx, KILN_ERR_ARG, "%s: input %s: bicubic needs 2 spatial axes, not %d",
                        op, api_shape_str(X), nsp);
    if (mode == KILN_INTERP_NEAREST && align_corners)
        return api_fail(ctx, KILN_ERR_ARG,
                        "%s: input %s: align_corners is only for the linear and bicubic modes",
                        op, api_shape_str(X));
    static const char *const forms[] = {"L", "H, W", "D, H, W"};
    if (X->ndim != nsp + 2)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s must be %d-d ([N, C, %s]) for %d spatial axes",
                        op, api_shape_str(X), nsp + 2, forms[nsp - 1], nsp);
    for (int d = 0; d < nsp; d++)
        if (X->shape[2 + d] < 1 || sizes[d] < 1 || sizes[d] > CONV_MAX_PARAM)
            return api_fail(ctx, KILN_ERR_ARG,
                            "%s: input %s, sizes %s: the sizes and the input's spatial sizes "
                            "must be >= 1",
                            op, api_shape_str(X), tuple_str(nsp, sizes));
    kiln_scope_begin(ctx);
    kiln_tensor *y = x;
    for (int d = 0; d < nsp; d++) {
        int ax = 2 + d;
        int64_t in = X->shape[ax], out = sizes[d];
        double f = sf ? sf[d] : 0;
        if (mode == KILN_INTERP_NEAREST) {
            /* a gather, not a one-hot product: infinities stay exact */
            int64_t *src = malloc(sizeof(int64_t) * (size_t)out);
            if (!src) {
                y = api_fail(ctx, KILN_ERR_OOM, "%s: out of memory for input %s", op,
                             api_shape_str(X));
                break;
            }
            for (int64_t o = 0; o < out; o++)
                src[o] = nearest_src(o, in, out, f);
            y = kiln_index_select(y, ax, kiln_from_data(ctx, KILN_I64, 1, &out, src));
            free(src);
            continue;
        }
        double *m = calloc((size_t)(out * in), sizeof(double));
        if (!m) {
            y = api_fail(ctx, KILN_ERR_OOM, "%s: out of memory for input %s", op, api_shape_str(X));
            break;
        }
        interp_matrix(m, in, out, f, mode, align_corners);
        y = apply_along(y, ax, matrix_of(ctx, X->dtype, m, out, in));
    }
    return api_finish(ctx, y);
}

kiln_tensor *kiln_interpolate(kiln_tensor *x, int ndim_spatial, const int64_t *sizes,
                              kiln_interp_mode mode, bool align_corners) {
    return interp("kiln_interpolate", x, ndim_spatial, sizes, NULL, mode, align_corners);
}

kiln_tensor *kiln_interpolate_scale(kiln_tensor *x, int ndim_spatial, const double *scale_factors,
                                    kiln_interp_mode mode, bool align_corners,
                                    bool recompute_scale_factor) {
    const char *op = "kiln_interpolate_scale";
    if (!x || !x->node || !scale_factors || ndim_spatial < 1 || ndim_spatial > 3 ||
        kiln_ndim(x) != ndim_spatial + 2)
        return interp(op, x, ndim_spatial, scale_factors ? (const int64_t[3]){1, 1, 1} : NULL,
                      scale_factors, mode, align_corners);
    /* PyTorch's output size: floor(in * scale) in double precision */
    int64_t sizes[3];
    for (int d = 0; d < ndim_spatial; d++) {
        double f = scale_factors[d], o = floor((double)kiln_shape(x)[2 + d] * f);
        if (!(f > 0) || !isfinite(f) || !(o >= 1) || o > (double)CONV_MAX_PARAM)
            return api_fail(x->ctx, KILN_ERR_ARG,
                            "%s: input %s: scale factor %g of spatial axis %d must be finite and "
                            "> 0 and give an output size >= 1",
                            op, api_shape_str(x->node), f, d);
        sizes[d] = (int64_t)o;
    }
    return interp(op, x, ndim_spatial, sizes, recompute_scale_factor ? NULL : scale_factors, mode,
                  align_corners);
}
