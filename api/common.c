/* common.c — argument checking shared by the ops: axes, shapes, dtype
 * broadcasting, the public dtype facts, and the names used in messages. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"

/* The public faces of graph/'s dtype facts, which the layers below api/ use
 * directly. */
size_t kiln_dtype_size(kiln_dtype dt) { return graph_dtype_size(dt); }

const char *kiln_dtype_name(kiln_dtype dt) { return graph_dtype_name(dt); }

const char *kiln_status_string(kiln_status st) {
    switch (st) {
    case KILN_OK:
        return "ok";
    case KILN_ERR_SHAPE:
        return "shape error";
    case KILN_ERR_DTYPE:
        return "dtype error";
    case KILN_ERR_ARG:
        return "invalid argument";
    case KILN_ERR_OOM:
        return "out of memory";
    case KILN_ERR_COMPILE:
        return "compile error";
    case KILN_ERR_DEVICE:
        return "device error";
    case KILN_ERR_DIST:
        return "collective error";
    case KILN_ERR_IO:
        return "i/o error";
    }
    return "unknown status";
}

const char *api_shape_str(const graph_node *n) {
    static _Thread_local char slots[4][KILN_MAX_DIMS * 21 + 3];
    static _Thread_local int next;
    char *s = slots[next];
    next = (next + 1) % 4;
    graph_format_shape(s, sizeof slots[0], n->ndim, n->shape);
    return s;
}

bool api_axis(int axis, int ndim, int *out) {
    if (axis < -ndim || axis >= ndim)
        return false;
    *out = axis < 0 ? axis + ndim : axis;
    return true;
}

kiln_tensor *api_one_axis(const char *op, kiln_ctx *ctx, const graph_node *t, int axis,
                          int *out) {
    if (!api_axis(axis, t->ndim, out))
        return api_fail(ctx, KILN_ERR_ARG, "%s: axis %d is out of range for shape %s", op, axis,
                        api_shape_str(t));
    return NULL;
}

kiln_tensor *api_axes(const char *op, kiln_ctx *ctx, const graph_node *t, int naxes,
                      const int *axes, uint32_t *mask) {
    if (!axes) {
        if (naxes != 0)
            return api_fail(ctx, KILN_ERR_ARG, "%s: %d axes given but the axis list is NULL",
                            op, naxes);
        *mask = t->ndim ? (uint32_t)((1u << t->ndim) - 1) : 0;
        return NULL;
    }
    if (naxes < 0 || naxes > t->ndim)
        return api_fail(ctx, KILN_ERR_ARG, "%s: %d axes for a tensor of shape %s", op, naxes,
                        api_shape_str(t));
    *mask = 0;
    for (int i = 0; i < naxes; i++) {
        int a = 0;
        kiln_tensor *e = api_one_axis(op, ctx, t, axes[i], &a);
        if (e)
            return e;
        if (*mask & (1u << a))
            return api_fail(ctx, KILN_ERR_ARG, "%s: axis %d is repeated (shape %s)", op,
                            axes[i], api_shape_str(t));
        *mask |= 1u << a;
    }
    return NULL;
}

kiln_tensor *api_check_shape(const char *op, kiln_ctx *ctx, int ndim, const int64_t *dims) {
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: %d dimensions (0 to %d allowed)", op, ndim,
                        KILN_MAX_DIMS);
    if (ndim > 0 && !dims)
        return api_fail(ctx, KILN_ERR_ARG, "%s: dims is NULL for %d dimensions", op, ndim);
    /* The sizes other than 0 must multiply within bounds too: an empty
     * [0, 2^60, 2^60] has no elements, but its row-major strides overflow
     * wherever they are computed (found by the api_sequence fuzzer). */
    int64_t n = 1;
    bool overflow = false, empty = false;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0)
            return api_fail(ctx, KILN_ERR_SHAPE, "%s: dimension %d has negative size %lld", op,
                            d, (long long)dims[d]);
        if (dims[d] == 0)
            empty = true;
        else if (n > INT64_MAX / 16 / dims[d])
            overflow = true;
        else
            n *= dims[d];
    }
    if (overflow) {
        char shape[KILN_MAX_DIMS * 21 + 3];
        graph_format_shape(shape, sizeof shape, ndim, dims);
        return api_fail(ctx, KILN_ERR_SHAPE,
                        empty ? "%s: shape %s has too many elements along its non-empty axes "
                                "to be indexed"
                              : "%s: shape %s has too many elements",
                        op, shape);
    }
    return NULL;
}

graph_scalar api_scalar(double v, kiln_dtype dt) {
    if (graph_dtype_is_float(dt) || dt == KILN_BOOL || isnan(v))
        return graph_scalar_from_double(v, dt);
    graph_scalar i = graph_scalar_from_double(v, KILN_I64);
    return graph_scalar_convert(i, false, dt);
}

bool api_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                         int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i < na ? a[na - 1 - i] : 1;
        int64_t y = i < nb ? b[nb - 1 - i] : 1;
        if (x != y && x != 1 && y != 1)
            return false;
        out[n - 1 - i] = x == 1 ? y : x;
    }
    *nout = n;
    return true;
}

bool api_broadcasts_to(int n, const int64_t *s, int nt, const int64_t *t) {
    int nb;
    int64_t out[KILN_MAX_DIMS];
    return n <= KILN_MAX_DIMS && nt <= KILN_MAX_DIMS && api_broadcast_shape(n, s, nt, t, &nb, out) &&
           nb == nt && !memcmp(out, t, sizeof(int64_t) * (size_t)nt);
}

graph_node *api_broadcast_to(graph_node *n, int ndim, const int64_t *dims) {
    if (n->ndim == ndim && !memcmp(n->shape, dims, sizeof(int64_t) * (size_t)ndim))
        return graph_ref(n);
    /* A scalar constant (every kiln_*_scalar's operand) becomes its
     * broadcast view in one step, the node reshape-then-expand reaches. */
    if (n->op == GRAPH_CONST && !n->buf)
        return graph_full(n->g, n->dtype, ndim, dims, n->p.value);
    return graph_broadcast(n, ndim, dims);
}
