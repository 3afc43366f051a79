/* grad.c — the public face of autograd: leaves that require gradients, their
 * accumulated gradients, kiln_backward and kiln_gradients, no-grad scopes and
 * detach. The rewrite itself is autograd/'s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "autograd/autograd.h"

static kiln_status fail(kiln_ctx *ctx, kiln_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records an error of a call that returns a status (as kiln_assign does). */
static kiln_status fail(kiln_ctx *ctx, kiln_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
    va_end(ap);
    return st;
}

/* The status of a handle argument that cannot be used, with its message in
 * the context; KILN_OK when it can. */
static kiln_status unusable(const char *op, const kiln_tensor *t, const char *what) {
    if (t->node)
        return KILN_OK;
    return fail(t->ctx, t->err, "%s: %s carries an error: %s", op, what, t->msg ? t->msg : "");
}

static kiln_status need_float(const char *op, const kiln_tensor *t, const char *what) {
    if (graph_dtype_is_float(t->node->dtype))
        return KILN_OK;
    return fail(t->ctx, KILN_ERR_DTYPE, "%s: %s has dtype %s (shape %s); gradients need a float",
                op, what, kiln_dtype_name(t->node->dtype), api_shape_str(t->node));
}

kiln_status kiln_requires_grad(kiln_tensor *t, bool on) {
    const char *op = "kiln_requires_grad";
    kiln_status st;
    if (!t)
        return KILN_ERR_ARG;
    if ((st = unusable(op, t, "the tensor")) != KILN_OK)
        return st;
    if (!on) {
        t->requires_grad = false;
        return KILN_OK;
    }
    if ((st = need_float(op, t, "the tensor")) != KILN_OK)
        return st;
    /* A leaf needs a node of its own: equal lazy values are one node (a zero
     * bias of two layers), and a buffer node is never shared. */
    if (t->node->op != GRAPH_BUFFER) {
        if ((st = api_realize(t->ctx, 1, &t->node, t)) != KILN_OK)
            return fail(t->ctx, st, "%s: %s", op, t->msg ? t->msg : "");
        graph_node *leaf = graph_buffer_node(t->ctx->g, t->node->dtype, t->node->ndim,
                                             t->node->shape, t->node->buf);
        if (!leaf)
            return fail(t->ctx, KILN_ERR_OOM, "%s: out of memory", op);
        graph_unref(t->node);
        t->node = leaf;
    }
    t->requires_grad = true;
    return KILN_OK;
}

bool kiln_requires_grad_of(const kiln_tensor *t) { return t && t->requires_grad; }

kiln_tensor *kiln_grad(const kiln_tensor *t) {
    if (!t || !t->grad)
        return NULL;
    return api_wrap(t->ctx, graph_ref(t->grad), "kiln_grad");
}

void kiln_zero_grad(kiln_tensor *t) {
    if (!t)
        return;
    graph_unref(t->grad);
    t->grad = NULL;
}

kiln_status kiln_backward(kiln_tensor *loss) {
    const char *op = "kiln_backward";
    kiln_status st;
    if (!loss)
        return KILN_ERR_ARG;
    kiln_ctx *ctx = loss->ctx;
    if ((st = unusable(op, loss, "the loss")) != KILN_OK)
        return st;
    if ((st = need_float(op, loss, "the loss")) != KILN_OK)
        return st;
    int n = 0;
    for (kiln_tensor *t = ctx->handles; t; t = t->next)
        n += t->requires_grad && t->node;
    graph_node **xs = malloc(sizeof *xs * (size_t)(n ? n : 1));
    graph_node **grads = malloc(sizeof *grads * (size_t)(n ? n : 1));
    graph_node *seed = graph_full(ctx->g, loss->node->dtype, loss->node->ndim,
                                  loss->node->shape, graph_scalar_from_double(1, loss->node->dtype));
    if (!xs || !grads || !seed) {
        free(xs);
        free(grads);
        graph_unref(seed);
        return fail(ctx, KILN_ERR_OOM, "%s: out of memory", op);
    }
    int k = 0;
    for (kiln_tensor *t = ctx->handles; t; t = t->next)
        if (t->requires_grad && t->node)
            xs[k++] = t->node;
    char msg[512] = "";
    st = autograd_gradients(loss->node, seed, n, xs, true, grads, msg, sizeof msg);
    graph_unref(seed);
    if (st != KILN_OK) {
        free(xs);
        free(grads);
        return fail(ctx, st, "%s", msg);
    }
    /* A failed add leaves that leaf's gradient as it was and reports it. */
    k = 0;
    for (kiln_tensor *t = ctx->handles; t; t = t->next) {
        if (!t->requires_grad || !t->node)
            continue;
        graph_node *g = grads[k++];
        if (!g)
            continue;
        graph_node *sum = t->grad ? graph_binary(GRAPH_ADD, t->grad, g) : graph_ref(g);
        graph_unref(g);
        if (!sum) {
            st = fail(ctx, KILN_ERR_OOM, "%s: out of memory", op);
            continue;
        }
        graph_unref(t->grad);
        t->grad = sum;
    }
    free(xs);
    free(grads);
    return st;
}

kiln_status kiln_gradients(kiln_tensor *y, const kiln_tensor *seed, int n,
                           kiln_tensor *const *xs, kiln_tensor **out) {
    const char *op = "kiln_gradients";
    kiln_status st;
    if (!y)
        return KILN_ERR_ARG;
    kiln_ctx *ctx = y->ctx;
    if (n < 0 || (n > 0 && (!xs || !out)))
        return fail(ctx, KILN_ERR_ARG, "%s: %d tensors with xs %s and out %s", op, n,
                    xs ? "given" : "NULL", out ? "given" : "NULL");
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    if ((st = unusable(op, y, "y")) != KILN_OK || (st = need_float(op, y, "y")) != KILN_OK)
        return st;
    for (int i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "xs[%d]", i);
        if (!xs[i])
            return fail(ctx, KILN_ERR_ARG, "%s: %s is NULL", op, what);
        if (xs[i]->ctx != ctx)
            return fail(ctx, KILN_ERR_ARG, "%s: %s belongs to a different context", op, what);
        if ((st = unusable(op, xs[i], what)) != KILN_OK ||
            (st = need_float(op, xs[i], what)) != KILN_OK)
            return st;
    }
    graph_node *yn = y->node, *s;
    if (seed) {
        if (seed->ctx != ctx)
            return fail(ctx, KILN_ERR_ARG, "%s: the seed belongs to a different context", op);
        if ((st = unusable(op, seed, "the seed")) != KILN_OK)
            return st;
        graph_node *sn = seed->node;
        if (!api_broadcasts_to(sn->ndim, sn->shape, yn->ndim, yn->shape))
            return fail(ctx, KILN_ERR_SHAPE, "%s: the seed of shape %s does not fit y of shape %s",
                        op, api_shape_str(sn), api_shape_str(yn));
        graph_node *b = api_broadcast_to(sn, yn->ndim, yn->shape);
        s = b ? graph_cast(b, yn->dtype) : NULL;
        graph_unref(b);
    } else {
        s = graph_full(ctx->g, yn->dtype, yn->ndim, yn->shape,
                       graph_scalar_from_double(1, yn->dtype));
    }
    graph_node **xn = malloc(sizeof *xn * (size_t)(n ? n : 1));
    graph_node **gn = malloc(sizeof *gn * (size_t)(n ? n : 1));
    if (!s || !xn || !gn) {
        graph_unref(s);
        free(xn);
        free(gn);
        return fail(ctx, KILN_ERR_OOM, "%s: out of memory", op);
    }
    for (int i = 0; i < n; i++)
        xn[i] = xs[i]->node;
    char msg[512] = "";
    st = autograd_gradients(yn, s, n, xn, false, gn, msg, sizeof msg);
    graph_unref(s);
    if (st != KILN_OK) {
        free(xn);
        free(gn);
        return fail(ctx, st, "%s", msg);
    }
    for (int i = 0; i < n; i++) {
        graph_node *g = gn[i] ? gn[i]
                              : graph_full(ctx->g, xn[i]->dtype, xn[i]->ndim, xn[i]->shape,
                                           graph_scalar_from_double(0, xn[i]->dtype));
        out[i] = api_wrap(ctx, g, op);
    }
    free(xn);
    free(gn);
    for (int i = 0; i < n; i++) {
        if (out[i] && out[i]->node)
            continue;
        char why[512];
        snprintf(why, sizeof why, "%s", out[i] && out[i]->msg ? out[i]->msg : "out of memory");
        st = out[i] ? out[i]->err : KILN_ERR_OOM;
        for (int j = 0; j < n; j++) {
            kiln_release(out[j]);
            out[j] = NULL;
        }
        return fail(ctx, st, "%s: %s", op, why);
    }
    return KILN_OK;
}

void kiln_no_grad_begin(kiln_ctx *ctx) {
    if (ctx)
        ctx->no_grad++;
}

void kiln_no_grad_end(kiln_ctx *ctx) {
    if (ctx && ctx->no_grad > 0)
        ctx->no_grad--;
}

kiln_tensor *kiln_detach(kiln_tensor *t) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check("kiln_detach", 1, &t, &ctx);
    if (e || !t)
        return e;
    return api_wrap(ctx, autograd_detach(t->node), "kiln_detach");
}
