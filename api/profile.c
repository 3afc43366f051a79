/* profile.c — the public face of debug output, the profiler and the
 * machine's limits (kiln.h's Profiling section). A KILN_REF context compiles
 * nothing: its debug level stays 0, its profile is empty, and it has no
 * machine limits to measure. */
#include <stdio.h>
#include <string.h>

#include "api/api.h"

static kiln_status fail(kiln_ctx *ctx, kiln_status st, const char *msg) {
    snprintf(ctx->last_error, sizeof ctx->last_error, "%s", msg);
    return st;
}

void kiln_ctx_set_debug(kiln_ctx *ctx, int level) {
    if (ctx && ctx->jit)
        jit_set_debug(ctx->jit, level < 0 ? 0 : level);
}

int kiln_ctx_debug(const kiln_ctx *ctx) { return ctx && ctx->jit ? jit_debug(ctx->jit) : 0; }

/* kiln_machine_info and kiln_machine_measure: the same checks, then the
 * stored figure or a fresh measurement. */
static kiln_status machine(kiln_ctx *ctx, kiln_machine *m, const char *op, bool fresh) {
    char msg[512];
    if (!ctx || !m) {
        snprintf(msg, sizeof msg, "%s: NULL result", op);
        return ctx ? fail(ctx, KILN_ERR_ARG, msg) : KILN_ERR_ARG;
    }
    memset(m, 0, sizeof *m);
    if (!ctx->jit) {
        snprintf(msg, sizeof msg, "%s: a KILN_REF context runs no kernels to measure against", op);
        return fail(ctx, KILN_ERR_DEVICE, msg);
    }
    kiln_status st = fresh ? jit_machine_remeasure(ctx->jit, m, msg, sizeof msg)
                           : jit_machine_limits(ctx->jit, m, msg, sizeof msg);
    return st == KILN_OK ? KILN_OK : fail(ctx, st, msg);
}

kiln_status kiln_machine_info(kiln_ctx *ctx, kiln_machine *m) {
    return machine(ctx, m, "kiln_machine_info", false);
}

kiln_status kiln_machine_measure(kiln_ctx *ctx, kiln_machine *m) {
    return machine(ctx, m, "kiln_machine_measure", true);
}

kiln_status kiln_machine_limits(kiln_ctx *ctx, double *gbps, double *gflops) {
    kiln_machine m;
    kiln_status st = kiln_machine_info(ctx, &m);
    if (gbps)
        *gbps = m.gbps;
    if (gflops)
        *gflops = m.gflops;
    return st;
}

kiln_status kiln_profile_begin(kiln_ctx *ctx) {
    if (!ctx)
        return KILN_ERR_ARG;
    char msg[256];
    if (ctx->jit && jit_profile_begin(ctx->jit, msg, sizeof msg) != KILN_OK)
        return fail(ctx, KILN_ERR_OOM, msg);
    return KILN_OK;
}

kiln_status kiln_profile_end(kiln_ctx *ctx) {
    if (!ctx)
        return KILN_ERR_ARG;
    if (ctx->jit)
        jit_profile_end(ctx->jit);
    return KILN_OK;
}

int kiln_profile_count(const kiln_ctx *ctx) {
    return ctx && ctx->jit ? jit_profile_count(ctx->jit) : 0;
}

kiln_status kiln_profile_kernel(kiln_ctx *ctx, int i, kiln_kernel_profile *out) {
    if (!ctx || !out)
        return ctx ? fail(ctx, KILN_ERR_ARG, "kiln_profile_kernel: NULL result") : KILN_ERR_ARG;
    memset(out, 0, sizeof *out);
    char msg[512];
    if (!ctx->jit) {
        snprintf(msg, sizeof msg, "kiln_profile_kernel: no kernel %d in a profile of 0", i);
        return fail(ctx, KILN_ERR_ARG, msg);
    }
    kiln_status st = jit_profile_kernel(ctx->jit, i, out, msg, sizeof msg);
    return st == KILN_OK ? KILN_OK : fail(ctx, st, msg);
}

kiln_status kiln_profile_print(kiln_ctx *ctx, FILE *f) {
    if (!ctx || !f)
        return ctx ? fail(ctx, KILN_ERR_ARG, "kiln_profile_print: NULL file") : KILN_ERR_ARG;
    char msg[512];
    kiln_status st = jit_profile_print(ctx->jit, f, msg, sizeof msg);
    return st == KILN_OK ? KILN_OK : fail(ctx, st, "kiln_profile_print: cannot write the table");
}

kiln_status kiln_profile_write_json(kiln_ctx *ctx, const char *path) {
    if (!ctx)
        return KILN_ERR_ARG;
    char msg[512];
    kiln_status st = jit_profile_write_json(ctx->jit, path, msg, sizeof msg);
    return st == KILN_OK ? KILN_OK : fail(ctx, st, msg);
}

kiln_status kiln_profile_write_trace(kiln_ctx *ctx, const char *path) {
    if (!ctx)
        return KILN_ERR_ARG;
    char msg[512];
    kiln_status st = jit_profile_write_trace(ctx->jit, path, msg, sizeof msg);
    return st == KILN_OK ? KILN_OK : fail(ctx, st, msg);
}
