/* matmul.c — kiln_matmul with NumPy's rules: 1-d operands become a row or a
 * column, batch dimensions broadcast, and the added axes are removed again. */
#include <string.h>

#include "api/api.h"

/* [batch..., n, k] @ [k, m] as one [batch*n, k] @ [k, m] product (a linear
 * layer over [B, T, C] activations): broadcast over the batch instead, the
 * weight's gradient was B products with K = T, stored and then summed over
 * B by a strided reduction; flattened, it is one product with K = B*T, and
 * the forward one large matmul instead of B small ones. (GPT-2's step was
 * 1.5x faster with the reshape written by hand.) */
static graph_node *rows_times_matrix(graph_node *x, graph_node *y) {
    int64_t rows = 1, k = x->shape[x->ndim - 1], shape[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim - 1; d++) {
        rows *= x->shape[d];
        shape[d] = x->shape[d];
    }
    shape[x->ndim - 1] = y->shape[1];
    kiln_dtype dt = graph_dtype_promote(x->dtype, y->dtype);
    graph_node *x2 = graph_reshape(x, 2, (const int64_t[]){rows, k});
    graph_node *xc = x2 ? graph_cast(x2, dt) : NULL, *yc = graph_cast(y, dt);
    graph_node *m = xc && yc ? graph_matmul(xc, yc) : NULL;
    graph_node *r = m ? graph_reshape(m, x->ndim, shape) : NULL;
    graph_node *tmp[4] = {x2, xc, yc, m};
    for (int i = 0; i < 4; i++)
        graph_unref(tmp[i]);
    return r;
}

kiln_tensor *kiln_matmul(kiln_tensor *a, kiln_tensor *b) {
    const char *op = "kiln_matmul";
    kiln_tensor *args[2] = {a, b};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 2, args, &ctx);
    if (e || !a || !b)
        return e;
    graph_node *x = a->node, *y = b->node;
    if (x->ndim == 0 || y->ndim == 0)
        return api_fail(ctx, KILN_ERR_SHAPE, "kiln_matmul: %s @ %s: 0-d operands have no "
                        "matrix product", api_shape_str(x), api_shape_str(y));
    if (x->dtype == KILN_BOOL || y->dtype == KILN_BOOL)
        return api_fail(ctx, KILN_ERR_DTYPE, "kiln_matmul: %s @ %s: bool operands (%s, %s) "
                        "are not supported", api_shape_str(x), api_shape_str(y),
                        kiln_dtype_name(x->dtype), kiln_dtype_name(y->dtype));
    int64_t k1 = x->shape[x->ndim - 1];
    int64_t k2 = y->shape[y->ndim == 1 ? 0 : y->ndim - 2];
    if (k1 != k2)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_matmul: %s @ %s: inner dimensions %lld and %lld differ",
                        api_shape_str(x), api_shape_str(y), (long long)k1, (long long)k2);
    if (x->ndim > 2 && y->ndim == 2) {
        int64_t shape[KILN_MAX_DIMS];
        memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
        shape[x->ndim - 1] = y->shape[1];
        kiln_tensor *big = api_check_shape(op, ctx, x->ndim, shape);
        return big ? big : api_wrap(ctx, rows_times_matrix(x, y), op);
    }
    /* Matrix views: [batch..., n, k] and [batch..., k, m]. */
    int64_t xs[KILN_MAX_DIMS + 1], ys[KILN_MAX_DIMS + 1];
    int xn = x->ndim, yn = y->ndim;
    for (int d = 0; d < xn; d++)
        xs[d + (xn == 1)] = x->shape[d];
    if (xn == 1) {
        xs[0] = 1;
        xn = 2;
    }
    for (int d = 0; d < yn; d++)
        ys[d] = y->shape[d];
    if (yn == 1) {
        ys[1] = 1;
        yn = 2;
    }
    int nb;
    int64_t batch[KILN_MAX_DIMS];
    if (!api_broadcast_shape(xn - 2, xs, yn - 2, ys, &nb, batch))
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_matmul: %s @ %s: batch dimensions do not broadcast",
                        api_shape_str(x), api_shape_str(y));
    if (nb + 2 > KILN_MAX_DIMS)
        return api_fail(ctx, KILN_ERR_SHAPE, "kiln_matmul: %s @ %s: too many dimensions",
                        api_shape_str(x), api_shape_str(y));
    kiln_dtype dt = graph_dtype_promote(x->dtype, y->dtype);
    int64_t xf[KILN_MAX_DIMS], yf[KILN_MAX_DIMS], out[KILN_MAX_DIMS];
    for (int d = 0; d < nb; d++)
        xf[d] = yf[d] = batch[d];
    xf[nb] = xs[xn - 2];
    xf[nb + 1] = xs[xn - 1];
    yf[nb] = ys[yn - 2];
    yf[nb + 1] = ys[yn - 1];
    /* The broadcast operands and the product, before any view multiplies
     * their sizes (huge broadcast views once "succeeded"). */
    for (int d = 0; d < nb; d++)
        out[d] = batch[d];
    out[nb] = xf[nb];
    out[nb + 1] = yf[nb + 1];
    kiln_tensor *big = api_check_shape(op, ctx, nb + 2, xf);
    if (!big)
        big = api_check_shape(op, ctx, nb + 2, yf);
    if (!big)
        big = api_check_shape(op, ctx, nb + 2, out);
    if (big)
        return big;
    graph_node *xr = graph_reshape(x, xn, xs), *yr = graph_reshape(y, yn, ys);
    graph_node *xb = xr ? api_broadcast_to(xr, nb + 2, xf) : NULL;
    graph_node *yb = yr ? api_broadcast_to(yr, nb + 2, yf) : NULL;
    graph_node *xc = xb ? graph_cast(xb, dt) : NULL, *yc = yb ? graph_cast(yb, dt) : NULL;
    graph_node *m = xc && yc ? graph_matmul(xc, yc) : NULL;
    /* Remove the axes that 1-d operands gained. */
    int on = 0;
    for (int d = 0; d < nb; d++)
        out[on++] = batch[d];
    if (x->ndim > 1)
        out[on++] = xf[nb];
    if (y->ndim > 1)
        out[on++] = yf[nb + 1];
    graph_node *r = m ? graph_reshape(m, on, out) : NULL;
    graph_node *tmp[7] = {xr, yr, xb, yb, xc, yc, m};
    for (int i = 0; i < 7; i++)
        graph_unref(tmp[i]);
    return api_wrap(ctx, r, op);
}
