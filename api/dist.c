/* dist.c — the public face of dist/: joining the job mpirun started, the
 * collectives as lazy ops (checked here, run by dist/ at sync points), and
 * data-parallel gradient averaging. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "dist/dist.h"

/* The reference evaluator's way into the world (graph_comm.run): one
 * collective at a time, agreed on first like any program's. */
static kiln_status comm_run(void *world, const graph_node *n, const void *src, void *dst,
                            char *msg, size_t cap) {
    dist_desc d;
    dist_desc_of(n, &d);
    char what[40];
    snprintf(what, sizeof what, "kiln_%s", graph_op_name(n->op));
    kiln_status st = dist_agree(world, 1, &d, what, msg, cap);
    return st == KILN_OK ? dist_run(world, 1, &d, &src, &dst, what, msg, cap) : st;
}

kiln_status kiln_dist_init(kiln_ctx *ctx, kiln_dist_backend backend) {
    if (!ctx)
        return KILN_ERR_ARG;
    if (backend != KILN_DIST_MPI && backend != KILN_DIST_NCCL) {
        snprintf(ctx->last_error, sizeof ctx->last_error,
                 "kiln_dist_init: backend %d is neither KILN_DIST_MPI nor KILN_DIST_NCCL",
                 (int)backend);
        return KILN_ERR_ARG;
    }
    if (ctx->world) {
        snprintf(ctx->last_error, sizeof ctx->last_error,
                 "kiln_dist_init: the context has joined the job already (rank %d of %d)",
                 dist_rank(ctx->world), dist_size(ctx->world));
        return KILN_ERR_ARG;
    }
    dist_world *w = NULL;
    kiln_status st = dist_world_new(backend, ctx->device == KILN_CUDA, &w, ctx->last_error,
                                    sizeof ctx->last_error);
    if (st != KILN_OK)
        return st;
    ctx->world = w;
    graph_comm c = {.world = w, .rank = dist_rank(w), .size = dist_size(w), .run = comm_run};
    graph_ctx_set_comm(ctx->g, &c);
    /* The ranks on this machine, as the MPI launcher says (Open MPI, MPICH). */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!local)
        local = getenv("MPI_LOCALNRANKS");
    if (local && atoi(local) > 1)
        jit_backend_share_cores(ctx->rt, atoi(local));
    return KILN_OK;
}

int kiln_dist_rank(kiln_ctx *ctx) { return ctx && ctx->world ? dist_rank(ctx->world) : -1; }

int kiln_dist_world_size(kiln_ctx *ctx) { return ctx && ctx->world ? dist_size(ctx->world) : 1; }

static const char *reduce_name(kiln_reduce_op op) {
    switch (op) {
    case KILN_REDUCE_SUM: return "KILN_REDUCE_SUM";
    case KILN_REDUCE_MEAN: return "KILN_REDUCE_MEAN";
    case KILN_REDUCE_MAX: return "KILN_REDUCE_MAX";
    case KILN_REDUCE_MIN: return "KILN_REDUCE_MIN";
    }
    return NULL;
}

/* The checks every collective shares; NULL when t may take part, else the
 * error handle to return. */
static kiln_tensor *check(const char *op, kiln_tensor *t, kiln_ctx **ctx) {
    kiln_tensor *bad = api_check(op, 1, &t, ctx);
    if (bad || !t)
        return bad;
    if (!(*ctx)->world)
        return api_fail(*ctx, KILN_ERR_ARG,
                        "%s: the context has not joined a job: call kiln_dist_init first", op);
    return NULL;
}

static kiln_tensor *check_reduce(const char *op, kiln_ctx *ctx, const graph_node *n,
                                 kiln_reduce_op r) {
    if (!reduce_name(r))
        return api_fail(ctx, KILN_ERR_ARG, "%s: reduce op %d is not a kiln_reduce_op", op, (int)r);
    if (r == KILN_REDUCE_MEAN && !graph_dtype_is_float(n->dtype))
        return api_fail(ctx, KILN_ERR_DTYPE,
                        "%s: KILN_REDUCE_MEAN of %s %s: a mean of integers is no integer "
                        "(cast to a float first, or sum)",
                        op, kiln_dtype_name(n->dtype), api_shape_str(n));
    return NULL;
}

static kiln_tensor *axis_of(const char *op, kiln_ctx *ctx, const graph_node *n, int axis,
                            int *out) {
    if (n->ndim == 0)
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: a 0-d tensor has no axis %d to join along", op,
                        axis);
    return api_one_axis(op, ctx, n, axis, out);
}

static kiln_tensor *record(kiln_ctx *ctx, const char *op, graph_op gop, kiln_tensor *t,
                           int reduce, int axis, int root) {
    graph_node *n = graph_collective(gop, t->node, reduce, axis, root, dist_size(ctx->world));
    return api_wrap(ctx, n, op);
}

kiln_tensor *kiln_all_reduce(kiln_tensor *t, kiln_reduce_op op) {
    const char *name = "kiln_all_reduce";
    kiln_ctx *ctx;
    kiln_tensor *bad = check(name, t, &ctx);
    if (bad || !t)
        return bad;
    if ((bad = check_reduce(name, ctx, t->node, op)))
        return bad;
    return record(ctx, name, GRAPH_ALL_REDUCE, t, op, 0, 0);
}

kiln_tensor *kiln_all_gather(kiln_tensor *t, int axis) {
    const char *name = "kiln_all_gather";
    kiln_ctx *ctx;
    kiln_tensor *bad = check(name, t, &ctx);
    int ax;
    if (bad || !t)
        return bad;
    if ((bad = axis_of(name, ctx, t->node, axis, &ax)))
        return bad;
    int64_t size = dist_size(ctx->world);
    if (t->node->shape[ax] > INT64_MAX / size ||
        graph_numel(t->node) > INT64_MAX / size)
        return api_fail(ctx, KILN_ERR_OOM, "%s: %s joined over %lld ranks has too many elements",
                        name, api_shape_str(t->node), (long long)size);
    return record(ctx, name, GRAPH_ALL_GATHER, t, 0, ax, 0);
}

kiln_tensor *kiln_reduce_scatter(kiln_tensor *t, kiln_reduce_op op, int axis) {
    const char *name = "kiln_reduce_scatter";
    kiln_ctx *ctx;
    kiln_tensor *bad = check(name, t, &ctx);
    int ax;
    if (bad || !t)
        return bad;
    if ((bad = check_reduce(name, ctx, t->node, op)) ||
        (bad = axis_of(name, ctx, t->node, axis, &ax)))
        return bad;
    int size = dist_size(ctx->world);
    if (t->node->shape[ax] % size)
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "%s: axis %d of shape %s does not split into %d equal pieces, one per "
                        "rank",
                        name, axis, api_shape_str(t->node), size);
    return record(ctx, name, GRAPH_REDUCE_SCATTER, t, op, ax, 0);
}

kiln_tensor *kiln_broadcast(kiln_tensor *t, int root) {
    const char *name = "kiln_broadcast";
    kiln_ctx *ctx;
    kiln_tensor *bad = check(name, t, &ctx);
    if (bad || !t)
        return bad;
    int size = dist_size(ctx->world);
    if (root < 0 || root >= size)
        return api_fail(ctx, KILN_ERR_ARG, "%s: root %d is not a rank of a job of %d", name,
                        root, size);
    return record(ctx, name, GRAPH_BROADCAST, t, 0, 0, root);
}

kiln_status kiln_dist_average_gradients(int n, kiln_tensor *const *params) {
    const char *op = "kiln_dist_average_gradients";
    if (n < 0 || (n > 0 && !params))
        return KILN_ERR_ARG;
    kiln_ctx *ctx = NULL;
    for (int i = 0; i < n; i++) {
        kiln_tensor *p = params[i];
        if (!p)
            continue;
        if (ctx && p->ctx != ctx) {
            snprintf(ctx->last_error, sizeof ctx->last_error,
                     "%s: parameter %d belongs to another context", op, i);
            return KILN_ERR_ARG;
        }
        ctx = p->ctx;
    }
    if (!ctx)
        return KILN_OK;
    if (!ctx->world) {
        snprintf(ctx->last_error, sizeof ctx->last_error,
                 "%s: the context has not joined a job: call kiln_dist_init first", op);
        return KILN_ERR_ARG;
    }
    /* Every new gradient is made before any is replaced: a failure leaves
     * every parameter's gradient as it was. */
    graph_node **mean = calloc((size_t)(n ? n : 1), sizeof *mean);
    bool ok = mean != NULL;
    for (int i = 0; ok && i < n; i++)
        if (params[i] && params[i]->grad)
            ok = (mean[i] = graph_collective(GRAPH_ALL_REDUCE, params[i]->grad, KILN_REDUCE_MEAN,
                                             0, 0, dist_size(ctx->world))) != NULL;
    for (int i = 0; mean && i < n; i++) {
        if (!mean[i])
            continue;
        if (ok) {
            graph_unref(params[i]->grad);
            params[i]->grad = mean[i];
        } else {
            graph_unref(mean[i]);
        }
    }
    free(mean);
    if (!ok) {
        snprintf(ctx->last_error, sizeof ctx->last_error, "%s: out of memory", op);
        return KILN_ERR_OOM;
    }
    if (ctx->mode == KILN_EAGER) {
        for (int i = 0; i < n; i++)
            if (params[i] && params[i]->grad) {
                kiln_status st = api_realize(ctx, 1, &params[i]->grad, NULL);
                if (st != KILN_OK)
                    return st;
            }
    }
    return KILN_OK;
}
