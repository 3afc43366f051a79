/* device_test.c — the device interface itself: every registered device opens
 * (or, for one that cannot run here, refuses with KILN_ERR_DEVICE and a
 * message), allocates buffers it owns, copies random data in and out
 * unchanged, answers supports(); contexts pick their device as documented;
 * and the whole-graph cache stays within its bound while still hitting. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "jit/device.h"
#include "jit/jit.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Opens the registered device ops, or NULL (with the reason logged) where it
 * cannot run on this machine: cuda everywhere today, llvm without libLLVM. */
static jit_device *open_ops(const jit_device_ops *o, cache *c) {
    jit_device_config cfg = {.cache = c, .nthreads = 2};
    jit_device *d = NULL;
    char msg[512] = "";
    kiln_status st = o->open(&cfg, &d, msg, sizeof msg);
    if (st != KILN_OK) {
        cr_assert_eq(st, KILN_ERR_DEVICE, "%s: %s", o->name, msg);
        cr_assert(strlen(msg) > 0, "%s refused without saying why", o->name);
        cr_assert_null(d);
        cr_log_info("%s is not available here: %s", o->name, msg);
        return NULL;
    }
    cr_assert_not_null(d);
    cr_assert_eq(d->ops, o);
    return d;
}

Test(device, registry) {
    int n = jit_device_count();
    cr_assert_geq(n, 4);
    const char *want[] = {"ref", "cc", "llvm", "cuda"};
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        bool found = false;
        for (int i = 0; i < n; i++)
            found |= !strcmp(jit_device_at(i)->name, want[w]);
        cr_assert(found, "no device named %s is registered", want[w]);
    }
    cr_assert_null(jit_device_at(n));
}

Test(device, open_alloc_copy_round_trip) {
    cache *c = cache_open_memory_only();
    cr_assert_not_null(c);
    int opened = 0;
    cache_key keys[16];
    for (int i = 0; i < jit_device_count(); i++) {
        const jit_device_ops *o = jit_device_at(i);
        jit_device *d = open_ops(o, c);
        if (!d) {
            cr_assert(strcmp(o->name, "cc") && strcmp(o->name, "ref"),
                      "the %s device must open everywhere", o->name);
            continue;
        }
        cr_assert_not_null(d->target.name);
        for (int k = 0; k < opened; k++)
            cr_assert(keys[k].hi != d->key.hi || keys[k].lo != d->key.lo,
                      "%s shares a cache key with another device", o->name);
        keys[opened++] = d->key;
        static const size_t sizes[] = {0, 1, 7, 64, 1000, 65537};
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t nb = sizes[s];
            unsigned char *in = malloc(nb + 1), *out = malloc(nb + 1);
            for (size_t b = 0; b < nb; b++)
                in[b] = (unsigned char)next_u64();
            graph_buffer *buf = NULL;
            char msg[256];
            cr_assert_eq(o->alloc(d, nb, &buf, msg, sizeof msg), KILN_OK, "%s", msg);
            cr_assert_eq(buf->owner, d, "%s: the buffer does not name its device", o->name);
            cr_assert_eq(buf->release, o->free);
            cr_assert_eq(buf->nbytes, nb);
            cr_assert_eq(o->copy_in(d, buf, 0, in, nb, msg, sizeof msg), KILN_OK, "%s", msg);
            memset(out, 0xa5, nb + 1);
            cr_assert_eq(o->copy_out(d, out, buf, 0, nb, msg, sizeof msg), KILN_OK, "%s", msg);
            cr_assert_eq(o->sync(d, msg, sizeof msg), KILN_OK, "%s", msg);
            cr_assert(nb == 0 || !memcmp(in, out, nb), "%s: %zu bytes changed on the way",
                      o->name, nb);
            cr_assert_eq(out[nb], 0xa5, "%s: copy_out wrote past its end", o->name);
            if (nb > 3) {
                /* A part of it, at an offset, through the runtime's reader. */
                cr_assert_eq(jit_buffer_read(buf, 3, out, nb - 3, msg, sizeof msg), KILN_OK);
                cr_assert(!memcmp(in + 3, out, nb - 3));
            }
            graph_buffer_unref(buf);
            free(in);
            free(out);
        }
        cr_assert(o->supports(d, GRAPH_ADD, KILN_F32));
        cr_assert(o->supports(d, GRAPH_MATMUL, KILN_BF16));
        cr_assert(!o->supports(d, GRAPH_NUM_OPS, KILN_F32));
        cr_assert(!o->supports(d, GRAPH_EXP, KILN_NUM_DTYPES));
        cr_assert_not_null(o->render);
        cr_assert_not_null(o->compile);
        cr_assert_not_null(o->launch);
        o->close(d);
    }
    cr_assert_geq(opened, 2, "neither cc nor ref opened");
    cache_close(c);
}

/* Without a usable GPU (no driver, no device, or no NVRTC) a KILN_CUDA
 * context is refused with a message saying which; with one, it opens. */
Test(device, cuda_context_refused_with_a_message) {
    kiln_ctx *ctx = kiln_ctx_new(KILN_CUDA);
    if (ctx) {
        kiln_ctx_free(ctx);
        cr_skip_test("a CUDA device is here: nothing to refuse");
    }
    const char *msg = kiln_last_ctx_error();
    cr_assert(strstr(msg, "KILN_CUDA") && (strstr(msg, "no CUDA") || strstr(msg, "compiler")),
              "%s", msg);
    kiln_status st;
    char why[512];
    cr_assert_null(jit_backend_new(KILN_CUDA, &st, why, sizeof why));
    cr_assert_eq(st, KILN_ERR_DEVICE);
}

Test(device, cpu_compiler_picks_the_device) {
    setenv("KILN_CPU_COMPILER", "gcc", 1);
    cr_assert_null(kiln_ctx_new(KILN_CPU));
    cr_assert(strstr(kiln_last_ctx_error(), "it must be cc or llvm"), "%s",
              kiln_last_ctx_error());
    setenv("KILN_CPU_COMPILER", "cc", 1);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
    unsetenv("KILN_CPU_COMPILER");
    cr_assert_not_null(ctx, "%s", kiln_last_ctx_error());
    int64_t dims[1] = {5};
    float v[5] = {1, -2, 3.5f, 0.25f, -7};
    kiln_tensor *t = kiln_from_data(ctx, KILN_F32, 1, dims, v);
    const graph_buffer *b = t->node->buf;
    cr_assert_not_null(b->owner);
    cr_assert_str_eq(((const jit_device *)b->owner)->ops->name, "cc");
    kiln_ctx_free(ctx);

    kiln_ctx *ref = kiln_ctx_new(KILN_REF);
    kiln_tensor *r = kiln_exp(kiln_from_data(ref, KILN_F32, 1, dims, v));
    float out[5];
    cr_assert_eq(kiln_to_host(r, out, sizeof out), KILN_OK);
    cr_assert_str_eq(((const jit_device *)r->node->buf->owner)->ops->name, "ref");
    for (int i = 0; i < 5; i++)
        cr_assert_float_eq(out[i], (float)exp(v[i]), 1e-6 * exp(v[i]));
    kiln_ctx_free(ref);
}

/* One distinct graph structure per i: a length and a chain that depend on i. */
static void run_structure(kiln_ctx *ctx, int i, const float *x) {
    int64_t dims[1] = {i + 2};
    kiln_tensor *t = kiln_from_data(ctx, KILN_F32, 1, dims, x);
    kiln_tensor *y = kiln_add_scalar(kiln_mul_scalar(kiln_tanh(t), 0.5 + i), (double)i);
    float out[64];
    cr_assert_eq(kiln_to_host(y, out, sizeof(float) * (size_t)(i + 2)), KILN_OK, "%s",
                 kiln_error_message(y));
    for (int e = 0; e < i + 2; e++) {
        double want = tanh((double)x[e]) * (0.5 + i) + i;
        cr_assert(fabs(out[e] - want) <= 1e-5 * (1 + fabs(want)), "structure %d [%d]: %g, not %g",
                  i, e, out[e], want);
    }
    kiln_release(y);
    kiln_release(t);
}

static void graph_cache_bounded(kiln_device dev) {
    setenv("KILN_GRAPH_CACHE_MAX", "4", 1);
    kiln_ctx *ctx = kiln_ctx_new(dev);
    unsetenv("KILN_GRAPH_CACHE_MAX");
    cr_assert_not_null(ctx, "%s", kiln_last_ctx_error());
    float x[64];
    for (int e = 0; e < 64; e++)
        x[e] = (float)((int64_t)(next_u64() % 2001) - 1000) / 250.0f;
    for (int i = 0; i < 20; i++) {
        run_structure(ctx, i, x);
        cr_assert_leq(jit_graph_cache_size(ctx->rt), 4, "%lld graphs kept after %d structures",
                      (long long)jit_graph_cache_size(ctx->rt), i + 1);
    }
    cr_assert_eq(jit_graph_cache_size(ctx->rt), 4);
    if (ctx->jit) {
        kiln_stats s0 = kiln_ctx_stats(ctx);
        cr_assert_eq(s0.graph_hits, 0);
        run_structure(ctx, 19, x); /* recent: still there */
        kiln_stats s1 = kiln_ctx_stats(ctx);
        cr_assert_eq(s1.graph_hits, 1, "a recent structure missed the graph cache");
        run_structure(ctx, 0, x); /* long evicted: built again, its code from memory */
        kiln_stats s2 = kiln_ctx_stats(ctx);
        cr_assert_eq(s2.graph_hits, 1, "an evicted structure hit the graph cache");
        cr_assert_eq(s2.memory_hits, s1.memory_hits + 1);
        cr_assert_eq(s2.compiles, s1.compiles);
        run_structure(ctx, 0, x);
        cr_assert_eq(kiln_ctx_stats(ctx).graph_hits, 2);
    }
    cr_assert_eq(jit_graph_cache_size(ctx->rt), 4);
    kiln_ctx_free(ctx);
}

Test(device, graph_cache_bounded_cpu) { graph_cache_bounded(KILN_CPU); }
Test(device, graph_cache_bounded_ref) { graph_cache_bounded(KILN_REF); }
