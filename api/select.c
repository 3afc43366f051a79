/* select.c — selecting by masks and windows: kiln_masked_fill (a where),
 * kiln_empty (zeros: kiln hands out no uninitialised memory), kiln_unfold
 * (sliding windows: one view, graph_unfold), and the two ops
 * whose result's size depends on the data, kiln_masked_select and
 * kiln_nonzero: sync points that read their inputs back, count on the host
 * and return a new tensor made from the host's copy. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

kiln_tensor *kiln_masked_fill(kiln_tensor *t, kiln_tensor *mask, double value) {
    const char *op = "kiln_masked_fill";
    kiln_tensor *args[2] = {t, mask};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 2, args, &ctx);
    if (e || !t || !mask)
        return e;
    const graph_node *x = t->node, *m = mask->node;
    if (m->dtype != KILN_BOOL)
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: mask %s is %s; it must be bool", op,
                        api_shape_str(m), kiln_dtype_name(m->dtype));
    if (!api_broadcasts_to(m->ndim, m->shape, x->ndim, x->shape))
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: mask %s does not broadcast to input %s", op,
                        api_shape_str(m), api_shape_str(x));
    kiln_scope_begin(ctx);
    kiln_tensor *r = kiln_where(mask, kiln_scalar(ctx, x->dtype, value), t);
    return api_finish(ctx, r);
}

kiln_tensor *kiln_empty(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *dims) {
    if (!ctx)
        return NULL;
    if (!api_valid_dtype(dtype))
        return api_fail(ctx, KILN_ERR_DTYPE, "kiln_empty: unknown dtype %d", (int)dtype);
    kiln_tensor *bad = api_check_shape("kiln_empty", ctx, ndim, dims);
    return bad ? bad : kiln_zeros(ctx, dtype, ndim, dims);
}

kiln_tensor *kiln_unfold(kiln_tensor *t, int axis, int64_t size, int64_t step) {
    const char *op = "kiln_unfold";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    int nd = t->node->ndim, ax;
    if (nd == 0)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: a 0-d tensor has no axis %d to unfold", op,
                        axis);
    if ((e = api_one_axis(op, ctx, t->node, axis, &ax)))
        return e;
    int64_t n = t->node->shape[ax];
    if (size <= 0 || step <= 0 || size > n)
        return api_fail(ctx, KILN_ERR_ARG,
                        "%s: windows of %lld every %lld along axis %d of input %s: the size must "
                        "be in [1, %lld] and the step at least 1",
                        op, (long long)size, (long long)step, axis, api_shape_str(t->node),
                        (long long)n);
    if (nd + 1 > KILN_MAX_DIMS)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s has no room for a window axis", op,
                        api_shape_str(t->node));
    /* One view: the windows' start and their elements both stride along
     * the axis (graph_unfold). */
    return api_wrap(ctx, graph_unfold(t->node, ax, size, step), op);
}

/* ---- data-dependent sizes: sync points ---- */

/* Realizes the n nodes in one sync and copies each to a malloc'd host
 * buffer (NULL for an empty one). NULL on success, else an error for op. */
static kiln_tensor *read_back(kiln_ctx *ctx, const char *op, int n, graph_node *const *nodes,
                              void **host) {
    for (int i = 0; i < n; i++)
        host[i] = NULL;
    kiln_scope_begin(ctx);
    /* the sync's message lands on a handle of ours, not on the caller's */
    kiln_tensor *who = api_wrap(ctx, graph_ref(nodes[0]), op);
    kiln_status st = kiln_error(who);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kiln_error_message(who));
    if (st == KILN_OK && (st = api_realize(ctx, n, nodes, who)) != KILN_OK)
        snprintf(msg, sizeof msg, "%s", kiln_error_message(who));
    kiln_scope_end(ctx);
    for (int i = 0; i < n && st == KILN_OK; i++) {
        size_t nbytes = (size_t)graph_numel(nodes[i]) * kiln_dtype_size(nodes[i]->dtype);
        if (!nbytes)
            continue;
        if (!(host[i] = malloc(nbytes))) {
            st = KILN_ERR_OOM;
            snprintf(msg, sizeof msg, "out of memory for %zu bytes", nbytes);
        } else {
            st = api_read(nodes[i], 0, host[i], nbytes, msg, sizeof msg);
        }
    }
    if (st == KILN_OK)
        return NULL;
    for (int i = 0; i < n; i++) {
        free(host[i]);
        host[i] = NULL;
    }
    return api_fail(ctx, st, "%s: reading %s back: %s", op, api_shape_str(nodes[0]), msg);
}

/* Row-major strides of a source of shape (ns, s) read through a broadcast to
 * (nd, dims): 0 along the axes it stretches or lacks. */
static void broadcast_strides(int nd, int ns, const int64_t *s, int64_t *strides) {
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int k = d - (nd - ns);
        if (k < 0 || s[k] == 1) {
            strides[d] = 0;
        } else {
            strides[d] = st;
            st *= s[k];
        }
    }
}

kiln_tensor *kiln_masked_select(kiln_tensor *t, kiln_tensor *mask) {
    const char *op = "kiln_masked_select";
    kiln_tensor *args[2] = {t, mask};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 2, args, &ctx);
    if (e || !t || !mask)
        return e;
    graph_node *x = t->node, *m = mask->node;
    if (m->dtype != KILN_BOOL)
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: mask %s is %s; it must be bool", op,
                        api_shape_str(m), kiln_dtype_name(m->dtype));
    int nd;
    int64_t shape[KILN_MAX_DIMS];
    if (!api_broadcast_shape(x->ndim, x->shape, m->ndim, m->shape, &nd, shape))
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: input %s and mask %s do not broadcast", op,
                        api_shape_str(x), api_shape_str(m));
    if ((e = api_check_shape(op, ctx, nd, shape)))
        return e;
    void *host[2];
    graph_node *nodes[2] = {x, m};
    if ((e = read_back(ctx, op, 2, nodes, host)))
        return e;
    int64_t total = graph_shape_numel(nd, shape), count = 0;
    size_t es = kiln_dtype_size(x->dtype);
    const unsigned char *mv = host[1];
    const char *xv = host[0];
    char *out = total ? malloc((size_t)total * es) : NULL;
    if (total && !out) {
        free(host[0]);
        free(host[1]);
        return api_fail(ctx, KILN_ERR_OOM, "%s: out of memory", op);
    }
    /* the broadcast shape row-major, with a running index into each source */
    int64_t xs[KILN_MAX_DIMS], ms[KILN_MAX_DIMS], idx[KILN_MAX_DIMS] = {0}, xi = 0, mi = 0;
    broadcast_strides(nd, x->ndim, x->shape, xs);
    broadcast_strides(nd, m->ndim, m->shape, ms);
    for (int64_t i = 0; i < total; i++) {
        if (mv[mi])
            memcpy(out + (size_t)count++ * es, xv + (size_t)xi * es, es);
        for (int d = nd - 1; d >= 0; d--) {
            xi += xs[d];
            mi += ms[d];
            if (++idx[d] < shape[d])
                break;
            xi -= xs[d] * shape[d];
            mi -= ms[d] * shape[d];
            idx[d] = 0;
        }
    }
    free(host[0]);
    free(host[1]);
    kiln_tensor *r = kiln_from_data(ctx, x->dtype, 1, &count, out);
    free(out);
    return r;
}

kiln_tensor *kiln_nonzero(kiln_tensor *t) {
    const char *op = "kiln_nonzero";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    graph_node *x = t->node;
    void *host;
    if ((e = read_back(ctx, op, 1, &x, &host)))
        return e;
    int nd = x->ndim;
    int64_t total = graph_numel(x), count = 0;
    bool fl = graph_dtype_is_float(x->dtype);
    for (int64_t i = 0; i < total; i++) {
        graph_scalar v = graph_scalar_load(host, x->dtype, i);
        count += fl ? v.f != 0 : v.i != 0;
    }
    int64_t *out = count && nd ? malloc(sizeof(int64_t) * (size_t)(count * nd)) : NULL;
    if (count && nd && !out) {
        free(host);
        return api_fail(ctx, KILN_ERR_OOM, "%s: out of memory for %lld indices of input %s", op,
                        (long long)count, api_shape_str(x));
    }
    int64_t idx[KILN_MAX_DIMS] = {0}, k = 0;
    for (int64_t i = 0; i < total && out; i++) {
        graph_scalar v = graph_scalar_load(host, x->dtype, i);
        if (fl ? v.f != 0 : v.i != 0) {
            memcpy(out + k * nd, idx, sizeof(int64_t) * (size_t)nd);
            k++;
        }
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < x->shape[d])
                break;
            idx[d] = 0;
        }
    }
    free(host);
    int64_t dims[2] = {count, nd};
    kiln_tensor *r = kiln_from_data(ctx, KILN_I64, 2, dims, out);
    free(out);
    return r;
}
