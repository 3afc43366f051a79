/* ctx.c — contexts, handles, scopes, error handles and queries. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "autograd/autograd.h"

static _Thread_local char ctx_error[256];

const char *kiln_last_ctx_error(void) { return ctx_error; }

static bool env_true(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0;
}

kiln_ctx *kiln_ctx_new(kiln_device dev) {
    ctx_error[0] = 0;
    if (dev == KILN_DEVICE_DEFAULT) {
        const char *e = getenv("KILN_DEVICE");
        dev = KILN_CPU;
        if (e && *e) {
            if (!strcasecmp(e, "cpu"))
                dev = KILN_CPU;
            else if (!strcasecmp(e, "cuda"))
                dev = KILN_CUDA;
            else if (!strcasecmp(e, "ref"))
                dev = KILN_REF;
            else {
                snprintf(ctx_error, sizeof ctx_error,
                         "kiln_ctx_new: KILN_DEVICE=%s is not one of cpu, cuda, ref", e);
                return NULL;
            }
        }
    }
    if (dev != KILN_CPU && dev != KILN_REF && dev != KILN_CUDA) {
        snprintf(ctx_error, sizeof ctx_error, "kiln_ctx_new: unknown device %d", (int)dev);
        return NULL;
    }
    kiln_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx || !(ctx->g = graph_ctx_new())) {
        free(ctx);
        snprintf(ctx_error, sizeof ctx_error, "kiln_ctx_new: out of memory");
        return NULL;
    }
    ctx->device = dev;
    kiln_status st;
    if (!(ctx->rt = jit_backend_new(dev, &st, ctx_error, sizeof ctx_error))) {
        graph_ctx_free(ctx->g);
        free(ctx);
        return NULL;
    }
    ctx->jit = jit_backend_watched(ctx->rt) ? ctx->rt : NULL;
    ctx->mode = env_true("KILN_EAGER") ? KILN_EAGER : KILN_LAZY;
    return ctx;
}

static void handle_free(kiln_tensor *t) {
    kiln_ctx *ctx = t->ctx;
    if (t->prev)
        t->prev->next = t->next;
    else
        ctx->handles = t->next;
    if (t->next)
        t->next->prev = t->prev;
    graph_unref(t->node);
    graph_unref(t->grad);
    free(t->msg);
    free(t);
}

void kiln_ctx_free(kiln_ctx *ctx) {
    if (!ctx)
        return;
    while (ctx->handles)
        handle_free(ctx->handles);
    for (int i = 0; i < ctx->npending; i++)
        graph_unref(ctx->pending[i]);
    free(ctx->pending);
    jit_backend_free(ctx->rt);
    graph_ctx_free(ctx->g);
    dist_world_free(ctx->world);
    free(ctx);
}

kiln_status kiln_ctx_set_mode(kiln_ctx *ctx, kiln_mode mode) {
    if (!ctx)
        return KILN_ERR_ARG;
    if (mode != KILN_LAZY && mode != KILN_EAGER) {
        snprintf(ctx->last_error, sizeof ctx->last_error,
                 "kiln_ctx_set_mode: mode %d is neither KILN_LAZY nor KILN_EAGER", (int)mode);
        return KILN_ERR_ARG;
    }
    ctx->mode = mode;
    return KILN_OK;
}

kiln_status kiln_ctx_set_dynamic(kiln_ctx *ctx, bool on) {
    if (!ctx)
        return KILN_ERR_ARG;
    if (ctx->rt)
        jit_backend_set_dynamic(ctx->rt, on);
    return KILN_OK;
}

kiln_mode kiln_ctx_mode(const kiln_ctx *ctx) { return ctx ? ctx->mode : KILN_LAZY; }
kiln_device kiln_ctx_device(const kiln_ctx *ctx) { return ctx ? ctx->device : KILN_CPU; }
int64_t kiln_ctx_live_nodes(const kiln_ctx *ctx) { return ctx ? graph_ctx_live_nodes(ctx->g) : 0; }

/* ---- handles ---- */

static kiln_tensor *handle_new(kiln_ctx *ctx) {
    kiln_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ctx = ctx;
    t->depth = ctx->depth;
    t->next = ctx->handles;
    if (ctx->handles)
        ctx->handles->prev = t;
    ctx->handles = t;
    return t;
}

static void note_error(kiln_ctx *ctx, const char *msg) {
    snprintf(ctx->last_error, sizeof ctx->last_error, "%s", msg);
}

static void set_error(kiln_tensor *t, kiln_status st, const char *msg) {
    note_error(t->ctx, msg);
    free(t->msg);
    t->err = st;
    t->msg = strdup(msg);
}

static kiln_tensor *error_handle(kiln_ctx *ctx, kiln_status st, const char *msg) {
    kiln_tensor *t = handle_new(ctx);
    if (t)
        set_error(t, st, msg);
    return t;
}

kiln_tensor *api_fail(kiln_ctx *ctx, kiln_status st, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return error_handle(ctx, st, buf);
}

kiln_tensor *api_pass(const kiln_tensor *t) {
    return error_handle(t->ctx, t->err, t->msg ? t->msg : "");
}

kiln_tensor *api_wrap(kiln_ctx *ctx, graph_node *node, const char *op) {
    if (node && ctx->no_grad > 0) {
        /* A view's source is detached rather than the view itself (the same
         * value), so that later movements still compose with it into one
         * view: detached, each view of a chain was copied out (conv2d's
         * im2col in evaluation). */
        graph_node *d;
        if (node->op == GRAPH_VIEW) {
            graph_node *src = autograd_detach(node->src[0]);
            d = !src ? NULL : src == node->src[0] ? graph_ref(node) : graph_view_over(node, src);
            graph_unref(src);
        } else {
            d = autograd_detach(node);
        }
        graph_unref(node);
        node = d;
    }
    if (!node)
        return api_fail(ctx, KILN_ERR_OOM, "%s: out of memory while recording the op", op);
    /* Every op's result passes here: a shape whose element count overflows
     * (a broadcast, a cat or a matmul of huge views) is refused, not
     * recorded with a wrapped count. */
    kiln_tensor *bad = api_check_shape(op, ctx, node->ndim, node->shape);
    if (bad) {
        graph_unref(node);
        return bad;
    }
    kiln_tensor *t = handle_new(ctx);
    if (!t) {
        graph_unref(node);
        return NULL;
    }
    t->node = node;
    if (ctx->mode == KILN_EAGER && !node->buf && graph_op_computes(node->op)) {
        if (api_realize(ctx, 1, &node, t) != KILN_OK) {
            graph_unref(t->node);
            t->node = NULL;
        }
    }
    return t;
}

kiln_tensor *api_check(const char *op, int n, kiln_tensor *const *ts, kiln_ctx **ctxp) {
    kiln_ctx *ctx = NULL;
    for (int i = 0; i < n; i++)
        if (ts[i]) {
            ctx = ts[i]->ctx;
            break;
        }
    if (!ctx)
        return NULL;
    *ctxp = ctx;
    for (int i = 0; i < n; i++) {
        if (!ts[i])
            return api_fail(ctx, KILN_ERR_ARG, "%s: argument %d is NULL", op, i + 1);
        if (!ts[i]->node)
            return api_pass(ts[i]);
    }
    for (int i = 0; i < n; i++)
        if (ts[i]->ctx != ctx)
            return api_fail(ctx, KILN_ERR_ARG,
                            "%s: argument %d belongs to a different context", op, i + 1);
    return NULL;
}

/* ---- scopes ---- */

void kiln_scope_begin(kiln_ctx *ctx) {
    if (ctx)
        ctx->depth++;
}

void kiln_scope_end(kiln_ctx *ctx) {
    if (!ctx || ctx->depth == 0)
        return;
    kiln_tensor *t = ctx->handles;
    while (t) {
        kiln_tensor *next = t->next;
        if (t->depth >= ctx->depth)
            handle_free(t);
        t = next;
    }
    ctx->depth--;
}

kiln_tensor *kiln_keep(kiln_tensor *t) {
    if (t && t->depth > 0)
        t->depth--;
    return t;
}

void kiln_release(kiln_tensor *t) {
    if (t)
        handle_free(t);
}

/* ---- queries ---- */

static const int64_t no_dims[KILN_MAX_DIMS];

int kiln_ndim(const kiln_tensor *t) { return t && t->node ? t->node->ndim : 0; }

const int64_t *kiln_shape(const kiln_tensor *t) {
    if (!t)
        return NULL;
    return t->node ? t->node->shape : no_dims;
}

int64_t kiln_numel(const kiln_tensor *t) { return t && t->node ? graph_numel(t->node) : 0; }

kiln_dtype kiln_dtype_of(const kiln_tensor *t) { return t && t->node ? t->node->dtype : KILN_F32; }

kiln_ctx *kiln_ctx_of(const kiln_tensor *t) { return t ? t->ctx : NULL; }

kiln_status kiln_error(const kiln_tensor *t) { return t ? t->err : KILN_ERR_ARG; }

const char *kiln_error_message(const kiln_tensor *t) {
    if (!t)
        return "kiln_error_message: NULL tensor";
    return t->msg ? t->msg : "";
}

/* ---- data: in and out through the device ---- */

graph_node *api_data_node(kiln_ctx *ctx, const char *op, kiln_dtype dt, int ndim,
                          const int64_t *dims, const void *data, kiln_status *st, char *msg,
                          size_t msgcap) {
    size_t nbytes = (size_t)graph_shape_numel(ndim, dims) * kiln_dtype_size(dt);
    graph_buffer *buf = NULL;
    char why[256];
    if ((*st = jit_buffer_new(ctx->rt, nbytes, data, &buf, why, sizeof why)) != KILN_OK) {
        snprintf(msg, msgcap, "%s: %s", op, why);
        return NULL;
    }
    graph_node *node = graph_buffer_node(ctx->g, dt, ndim, dims, buf);
    graph_buffer_unref(buf);
    if (!node) {
        *st = KILN_ERR_OOM;
        snprintf(msg, msgcap, "%s: out of memory", op);
    }
    return node;
}

kiln_status api_read(const graph_node *n, size_t offset, void *dst, size_t nbytes, char *msg,
                     size_t msgcap) {
    return jit_buffer_read(n->buf, offset, dst, nbytes, msg, msgcap);
}

/* ---- sync points ---- */

kiln_status api_realize(kiln_ctx *ctx, int n, graph_node *const *nodes, kiln_tensor *who) {
    int total = n + ctx->npending;
    graph_node *stackv[16];
    bool forgetv[16];
    graph_node **all = total <= 16 ? stackv : malloc(sizeof *all * (size_t)total);
    bool *forgets = total <= 16 ? forgetv : malloc(sizeof *forgets * (size_t)total);
    if (!all || !forgets) {
        if (all != stackv)
            free(all);
        if (forgets != forgetv)
            free(forgets);
        if (who)
            set_error(who, KILN_ERR_OOM, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!nodes[i]->buf) {
            forgets[m] = false;
            all[m++] = nodes[i];
        }
    /* what the loop below drops the history of: the runtime may then give
     * a leaf read only by them (an optimiser's old moment) to an output */
    for (int i = 0; i < ctx->npending; i++)
        if (!ctx->pending[i]->buf) {
            forgets[m] = autograd_is_detached(ctx->pending[i]);
            all[m++] = ctx->pending[i];
        }
    char msg[512] = "";
    kiln_status st = KILN_OK;
    if (m)
        st = jit_realize(ctx->rt, m, all, forgets, ctx->mode == KILN_LAZY, msg, sizeof msg);
    if (all != stackv)
        free(all);
    if (forgets != forgetv)
        free(forgets);
    if (st != KILN_OK) {
        if (who)
            set_error(who, st, msg);
        return st;
    }
    /* Assigned values that autograd treats as constants (updates made under
     * no-grad) need no history: keeping it would keep every earlier step. */
    for (int i = 0; i < ctx->npending; i++) {
        if (autograd_is_detached(ctx->pending[i]))
            graph_forget_sources(ctx->pending[i]);
        graph_unref(ctx->pending[i]);
    }
    ctx->npending = 0;
    if (who && who->node) {
        free(who->msg);
        who->msg = NULL;
        who->err = KILN_OK;
    }
    return KILN_OK;
}

kiln_status kiln_realize(kiln_tensor *t) {
    if (!t)
        return KILN_ERR_ARG;
    if (!t->node)
        return t->err;
    return api_realize(t->ctx, 1, &t->node, t);
}

kiln_status kiln_sync(kiln_ctx *ctx) {
    if (!ctx)
        return KILN_ERR_ARG;
    return api_realize(ctx, 0, NULL, NULL);
}

kiln_status kiln_to_host(kiln_tensor *t, void *dst, size_t nbytes) {
    if (!t)
        return KILN_ERR_ARG;
    if (!t->node)
        return t->err;
    size_t want = (size_t)graph_numel(t->node) * kiln_dtype_size(t->node->dtype);
    if (nbytes != want) {
        char buf[256];
        snprintf(buf, sizeof buf,
                 "kiln_to_host: a %s tensor of shape %s holds %zu bytes, not %zu",
                 kiln_dtype_name(t->node->dtype), api_shape_str(t->node), want, nbytes);
        set_error(t, KILN_ERR_ARG, buf);
        return KILN_ERR_ARG;
    }
    if (want && !dst) {
        set_error(t, KILN_ERR_ARG, "kiln_to_host: destination is NULL");
        return KILN_ERR_ARG;
    }
    kiln_status st = kiln_realize(t);
    if (st != KILN_OK || !want)
        return st;
    char msg[256];
    if ((st = api_read(t->node, 0, dst, want, msg, sizeof msg)) != KILN_OK)
        set_error(t, st, msg);
    return st;
}

kiln_status kiln_item(kiln_tensor *t, double *out) {
    if (out)
        *out = NAN;
    if (!t)
        return KILN_ERR_ARG;
    if (!t->node)
        return t->err;
    if (!out) {
        set_error(t, KILN_ERR_ARG, "kiln_item: NULL result");
        return KILN_ERR_ARG;
    }
    if (graph_numel(t->node) != 1) {
        char buf[256];
        snprintf(buf, sizeof buf, "kiln_item: tensor of shape %s has %lld elements, not 1",
                 api_shape_str(t->node), (long long)graph_numel(t->node));
        set_error(t, KILN_ERR_ARG, buf);
        return KILN_ERR_ARG;
    }
    kiln_dtype dt = t->node->dtype;
    uint64_t v; /* as wide and as aligned as the widest dtype */
    kiln_status st = kiln_to_host(t, &v, graph_dtype_size(dt));
    if (st != KILN_OK)
        return st;
    *out = graph_scalar_to_double(graph_scalar_load(&v, dt, 0), dt);
    return KILN_OK;
}

kiln_status kiln_assign(kiln_tensor *dst, kiln_tensor *src) {
    kiln_tensor *args[2] = {dst, src};
    kiln_ctx *ctx;
    if (!dst || !src)
        return KILN_ERR_ARG;
    if (!dst->node)
        return dst->err;
    kiln_tensor *e = api_check("kiln_assign", 2, args, &ctx);
    if (e) {
        kiln_status st = e->err;
        kiln_release(e);
        return st;
    }
    graph_node *d = dst->node, *s = src->node;
    if (!api_broadcasts_to(s->ndim, s->shape, d->ndim, d->shape)) {
        char buf[256];
        snprintf(buf, sizeof buf, "kiln_assign: source of shape %s does not broadcast to %s",
                 api_shape_str(s), api_shape_str(d));
        note_error(ctx, buf);
        return KILN_ERR_SHAPE;
    }
    if (ctx->npending == ctx->cappending) {
        int cap = ctx->cappending ? ctx->cappending * 2 : 16;
        graph_node **p = realloc(ctx->pending, sizeof *p * (size_t)cap);
        if (!p)
            return KILN_ERR_OOM;
        ctx->pending = p;
        ctx->cappending = cap;
    }
    graph_node *b = api_broadcast_to(s, d->ndim, d->shape);
    graph_node *v = b ? graph_cast(b, d->dtype) : NULL;
    graph_unref(b);
    if (!v)
        return KILN_ERR_OOM;
    ctx->pending[ctx->npending++] = graph_ref(v);
    graph_unref(dst->node);
    dst->node = v;
    if (ctx->mode == KILN_EAGER)
        return api_realize(ctx, 0, NULL, dst);
    return KILN_OK;
}

const char *kiln_ctx_last_error(const kiln_ctx *ctx) {
    return ctx ? ctx->last_error : "kiln_ctx_last_error: NULL context";
}

kiln_stats kiln_ctx_stats(const kiln_ctx *ctx) {
    kiln_stats s = {0};
    if (ctx && ctx->jit)
        s = jit_stats(ctx->jit);
    if (ctx && ctx->world) {
        dist_counts d = dist_get_counts(ctx->world);
        s.collectives = d.collectives;
        s.collective_messages = d.messages;
    }
    return s;
}

kiln_status kiln_dump_dot(const kiln_tensor *t, const char *path) {
    if (!t || !path)
        return KILN_ERR_ARG;
    if (!t->node)
        return t->err;
    FILE *f = fopen(path, "w");
    if (!f)
        return KILN_ERR_IO;
    graph_dump_dot(f, 1, &t->node);
    return fclose(f) == 0 ? KILN_OK : KILN_ERR_IO;
}
