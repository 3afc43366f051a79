/* nn1d.c — 1-d convolution and pooling over [N, C, L] inputs: the 2-d ops
 * over a height of 1 (the same kernels, fusion and gradients), with their
 * own names in messages. */
#include <stdio.h>

#include "api/api.h"

/* r, made by a 2-d op, as op's result: its errors renamed, its [N, C, 1, L]
 * shape back to [N, C, L]. */
static kiln_tensor *as_1d(kiln_ctx *ctx, const char *op, kiln_tensor *r) {
    if (kiln_error(r) != KILN_OK) {
        kiln_keep(r);
        kiln_scope_end(ctx);
        kiln_tensor *e = api_fail(ctx, kiln_error(r), "%s (as a 2-d op of height 1): %s", op,
                                  kiln_error_message(r));
        kiln_release(r);
        return e;
    }
    const int64_t *s = kiln_shape(r);
    return api_finish(ctx, kiln_reshape(r, 3, (const int64_t[]){s[0], s[1], s[3]}));
}

static kiln_tensor *check_3d(const char *op, kiln_ctx *ctx, const kiln_tensor *x,
                             const char *what) {
    if (x->node->ndim != 3)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: %s %s is not 3-d ([N, C, L])", op, what,
                        api_shape_str(x->node));
    return NULL;
}

static kiln_tensor *height1(kiln_tensor *x) {
    const int64_t *s = kiln_shape(x);
    return kiln_reshape(x, 4, (const int64_t[]){s[0], s[1], 1, s[2]});
}

kiln_tensor *kiln_conv1d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int64_t stride,
                         int64_t pad, int64_t dilation, int64_t groups) {
    const char *op = "kiln_conv1d";
    kiln_tensor *args[2] = {x, w};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 2, args, &ctx);
    if (e || !x || !w)
        return e;
    if ((e = check_3d(op, ctx, x, "input")) || (e = check_3d(op, ctx, w, "weight")))
        return e;
    if (b && !b->node)
        return api_pass(b);
    kiln_scope_begin(ctx);
    kiln_tensor *r = kiln_conv2d(height1(x), height1(w), b, 1, stride, 0, pad, 1, dilation, groups);
    return as_1d(ctx, op, r);
}

static kiln_tensor *pool1d(const char *op, bool max, kiln_tensor *x, int64_t kernel,
                           int64_t stride, int64_t pad) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &x, &ctx);
    if (e || !x)
        return e;
    if ((e = check_3d(op, ctx, x, "input")))
        return e;
    kiln_scope_begin(ctx);
    kiln_tensor *h = height1(x);
    kiln_tensor *r = max ? kiln_max_pool2d(h, 1, kernel, 1, stride, 0, pad)
                         : kiln_avg_pool2d(h, 1, kernel, 1, stride, 0, pad);
    return as_1d(ctx, op, r);
}

kiln_tensor *kiln_max_pool1d(kiln_tensor *x, int64_t kernel, int64_t stride, int64_t pad) {
    return pool1d("kiln_max_pool1d", true, x, kernel, stride, pad);
}

kiln_tensor *kiln_avg_pool1d(kiln_tensor *x, int64_t kernel, int64_t stride, int64_t pad) {
    return pool1d("kiln_avg_pool1d", false, x, kernel, stride, pad);
}
