/* create.c — tensors from data, constants, ranges and random numbers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

bool api_valid_dtype(kiln_dtype dt) { return (unsigned)dt < KILN_NUM_DTYPES; }

kiln_tensor *api_finish(kiln_ctx *ctx, kiln_tensor *r) {
    kiln_keep(r);
    kiln_scope_end(ctx);
    return r;
}

#define CHECK_CREATE(op, ctx, dt, ndim, dims)                                                \
    do {                                                                                     \
        if (!(ctx))                                                                          \
            return NULL;                                                                     \
        if (!api_valid_dtype(dt))                                                                \
            return api_fail(ctx, KILN_ERR_DTYPE, "%s: unknown dtype %d", op, (int)(dt));    \
        kiln_tensor *bad_ = api_check_shape(op, ctx, ndim, dims);                            \
        if (bad_)                                                                            \
            return bad_;                                                                     \
    } while (0)

kiln_tensor *kiln_from_data(kiln_ctx *ctx, kiln_dtype dt, int ndim, const int64_t *dims,
                            const void *data) {
    CHECK_CREATE("kiln_from_data", ctx, dt, ndim, dims);
    int64_t n = graph_shape_numel(ndim, dims);
    size_t nbytes = (size_t)n * kiln_dtype_size(dt);
    if (n > 0 && !data)
        return api_fail(ctx, KILN_ERR_ARG, "kiln_from_data: data is NULL for %lld elements",
                        (long long)n);
    /* bool is stored as 0 or 1: any other byte is made 1 on the way in. */
    unsigned char *bools = NULL;
    if (dt == KILN_BOOL && n > 0) {
        if (!(bools = malloc(nbytes)))
            return api_fail(ctx, KILN_ERR_OOM,
                            "kiln_from_data: out of memory allocating %zu bytes", nbytes);
        for (int64_t i = 0; i < n; i++)
            bools[i] = ((const unsigned char *)data)[i] != 0;
        data = bools;
    }
    kiln_status st;
    char msg[512];
    graph_node *node = api_data_node(ctx, "kiln_from_data", dt, ndim, dims, data, &st, msg,
                                     sizeof msg);
    free(bools);
    if (!node)
        return api_fail(ctx, st, "%s", msg);
    return api_wrap(ctx, node, "kiln_from_data");
}

static kiln_tensor *full_named(const char *op, kiln_ctx *ctx, kiln_dtype dt, int ndim,
                               const int64_t *dims, double value) {
    CHECK_CREATE(op, ctx, dt, ndim, dims);
    return api_wrap(ctx, graph_full(ctx->g, dt, ndim, dims, api_scalar(value, dt)), op);
}

kiln_tensor *kiln_full(kiln_ctx *ctx, kiln_dtype dt, int ndim, const int64_t *dims,
                       double value) {
    return full_named("kiln_full", ctx, dt, ndim, dims, value);
}

kiln_tensor *kiln_zeros(kiln_ctx *ctx, kiln_dtype dt, int ndim, const int64_t *dims) {
    return full_named("kiln_zeros", ctx, dt, ndim, dims, 0.0);
}

kiln_tensor *kiln_ones(kiln_ctx *ctx, kiln_dtype dt, int ndim, const int64_t *dims) {
    return full_named("kiln_ones", ctx, dt, ndim, dims, 1.0);
}

kiln_tensor *kiln_scalar(kiln_ctx *ctx, kiln_dtype dt, double value) {
    return full_named("kiln_scalar", ctx, dt, 0, NULL, value);
}

kiln_tensor *kiln_arange(kiln_ctx *ctx, kiln_dtype dt, double start, double stop,
                         double step) {
    if (!ctx)
        return NULL;
    if (!api_valid_dtype(dt))
        return api_fail(ctx, KILN_ERR_DTYPE, "kiln_arange: unknown dtype %d", (int)dt);
    if (!isfinite(start) || !isfinite(stop) || !isfinite(step) || step == 0)
        return api_fail(ctx, KILN_ERR_ARG,
                        "kiln_arange: start %g, stop %g, step %g: bounds and step must be "
                        "finite and the step nonzero",
                        start, stop, step);
    double count = ceil((stop - start) / step);
    if (count < 0)
        count = 0;
    if (count > 1e15)
        return api_fail(ctx, KILN_ERR_SHAPE, "kiln_arange: %g elements are too many", count);
    int64_t n = (int64_t)count;
    return api_wrap(ctx, graph_arange(ctx->g, dt, n, start, step), "kiln_arange");
}

static kiln_tensor *random_tensor(const char *op, graph_op gop, kiln_ctx *ctx, kiln_dtype dt,
                                  int ndim, const int64_t *dims, uint64_t seed) {
    CHECK_CREATE(op, ctx, dt, ndim, dims);
    if (!graph_dtype_is_float(dt))
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: dtype %s is not a floating-point type", op,
                        kiln_dtype_name(dt));
    /* The seed is a bound 0-d input, not a constant of the structure: a
     * new seed each step (dropout's) reuses the compiled program. */
    kiln_status st;
    char msg[256];
    int64_t key = (int64_t)seed;
    graph_node *k = api_data_node(ctx, op, KILN_I64, 0, NULL, &key, &st, msg, sizeof msg);
    if (!k)
        return api_fail(ctx, st, "%s", msg);
    graph_node *r = graph_rand_keyed(k, gop, dt, ndim, dims);
    graph_unref(k);
    return api_wrap(ctx, r, op);
}

kiln_tensor *kiln_rand(kiln_ctx *ctx, kiln_dtype dt, int ndim, const int64_t *dims,
                       uint64_t seed) {
    return random_tensor("kiln_rand", GRAPH_RAND, ctx, dt, ndim, dims, seed);
}

kiln_tensor *kiln_randn(kiln_ctx *ctx, kiln_dtype dt, int ndim, const int64_t *dims,
                        uint64_t seed) {
    return random_tensor("kiln_randn", GRAPH_RANDN, ctx, dt, ndim, dims, seed);
}
