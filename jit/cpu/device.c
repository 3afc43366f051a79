/* device.c — the CPU's two devices: generated C compiled by the system
 * compiler (cc) and the same kernels compiled through LLVM's ORC JIT (llvm),
 * picked by KILN_CPU_COMPILER. They differ only in how a program becomes
 * code; buffers (host memory), launches (one call per kernel with its buffer
 * array and the thread count) and the target are shared. Both live here
 * rather than llvm in a folder of its own because the LLVM path keys its
 * programs by the C renderer's text and shares everything but compile. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cpu/cpu.h"
#include "jit/cpu/llvm.h"
#include "jit/device.h"

typedef void (*kernel_fn)(char **bufs, int nthreads);

typedef struct cpu_device {
    jit_device base;
    cache *cache;
    int nthreads;
} cpu_device;

/* A loaded program: its object (a dlopen handle or an LLVM JIT) and each
 * kernel's entry, looked up once. */
struct jit_code {
    void *handle;
    void (*unload)(void *handle);
    int nkernels;
    kernel_fn fns[];
};

static kiln_status open_cpu(const jit_device_ops *ops, const char *compiler_id,
                            const char *const *flags, const jit_device_config *cfg,
                            jit_device **out, char *msg, size_t cap) {
    cpu_device *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(msg, cap, "kiln: out of memory");
        return KILN_ERR_OOM;
    }
    d->base.ops = ops;
    d->base.target = *jit_cpu_target();
    d->base.key = jit_device_key(&d->base.target, compiler_id, flags);
    d->cache = cfg->cache;
    d->nthreads = cfg->nthreads;
    kiln_status st = jit_host_pool_open(&d->base, msg, cap);
    if (st != KILN_OK) {
        free(d);
        return st;
    }
    *out = &d->base;
    return KILN_OK;
}

static void cpu_set_threads(jit_device *d, int nthreads) {
    ((cpu_device *)d)->nthreads = nthreads;
}

/* Buffers still out return to the pool and are freed there. */
static void cpu_close(jit_device *d) {
    jit_pool_close(d->pool);
    free(d);
}

static kiln_status cpu_render(jit_device *d, const lower_program *p, const lower_plan *plans,
                              char **out, char *msg, size_t cap) {
    (void)d;
    return jit_cpu_render(p, plans, out, msg, cap);
}

/* Resolves every kernel of p through `entry`; the result owns handle. */
static kiln_status resolve(void *handle, void (*unload)(void *), const lower_program *p,
                           kernel_fn (*entry)(void *handle, const lower_program *p, int i),
                           jit_code **out, char *msg, size_t cap) {
    jit_code *c = malloc(sizeof *c + sizeof(kernel_fn) * (size_t)p->nkernels);
    if (!c) {
        unload(handle);
        snprintf(msg, cap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    c->handle = handle;
    c->unload = unload;
    c->nkernels = p->nkernels;
    for (int i = 0; i < p->nkernels; i++) {
        bool code = lower_kind_has_code(p->kernels[i].kind);
        c->fns[i] = code ? entry(handle, p, i) : NULL;
        if (code && !c->fns[i]) {
            snprintf(msg, cap, "kiln: kernel %s is missing from its compiled program",
                     lower_kernel_symbol(&p->kernels[i]));
            unload(handle);
            free(c);
            return KILN_ERR_COMPILE;
        }
    }
    *out = c;
    return KILN_OK;
}

static void cpu_code_free(void *code) {
    jit_code *c = code;
    if (!c)
        return;
    c->unload(c->handle);
    free(c);
}

static kiln_status cpu_launch(jit_device *dev, const jit_code *c, int i, const lower_kernel *k,
                              graph_node *const *nodes, char *msg, size_t cap) {
    int n = k->nouts + k->ninputs;
    char *stackv[33];
    /* after the buffers, the kernel's run-time sizes (lower_sizes_mark) */
    char **bufs = n < 33 ? stackv : malloc(sizeof *bufs * (size_t)(n + 1));
    if (!bufs) {
        snprintf(msg, cap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    for (int b = 0; b < n; b++)
        bufs[b] = nodes[b]->buf->data;
    bufs[n] = (char *)k->size_value;
    c->fns[i](bufs, ((cpu_device *)dev)->nthreads);
    if (bufs != stackv)
        free(bufs);
    return KILN_OK;
}

extern const jit_device_ops jit_cc_device;

/* Both renderers render every graph op in every dtype, except that fused
 * attention is the C renderer's alone, in f32 and f64 (api/ records the
 * softmax of the scores and the two products for the LLVM path instead). */
static bool cpu_supports(const jit_device *d, graph_op op, kiln_dtype dt) {
    if (graph_op_is_attention(op))
        return d->ops == &jit_cc_device && (dt == KILN_F32 || dt == KILN_F64);
    return op >= 0 && op < GRAPH_NUM_OPS && (unsigned)dt < KILN_NUM_DTYPES;
}

/* ---- cc ---- */

static kiln_status cc_open(const jit_device_config *cfg, jit_device **out, char *msg,
                           size_t cap);

/* jit_cpu_load's handles belong to the process (jit/cpu/compile.c). */
static void cc_unload(void *h) { (void)h; }

static kernel_fn cc_entry(void *h, const lower_program *p, int i) {
    return (kernel_fn)(uintptr_t)dlsym(h, lower_kernel_symbol(&p->kernels[i]));
}

static kiln_status cc_compile(jit_device *dev, const lower_program *p, const lower_plan *plans,
                              const char *text, cache_key key, jit_code **out, bool *from_disk,
                              char *msg, size_t cap) {
    (void)plans;
    bool compiled = false;
    void *h = jit_cpu_load(((cpu_device *)dev)->cache, text, key, &compiled, msg, cap);
    if (!h)
        return KILN_ERR_COMPILE;
    *from_disk = !compiled;
    return resolve(h, cc_unload, p, cc_entry, out, msg, cap);
}

const jit_device_ops jit_cc_device = {
    .name = "cc",
    .host_memory = true,
    .kind = KILN_CPU,
    .cpu_compiler = "cc",
    .watched = true,
    .run_time_sizes = true,
    .joint_attention_grads = true,
    .split_operands = true,
    .row_tiles = true,
    .open = cc_open,
    .close = cpu_close,
    .set_threads = cpu_set_threads,
    .alloc = jit_host_alloc,
    .free = jit_host_free,
    .copy_in = jit_host_copy_in,
    .copy_out = jit_host_copy_out,
    .render = cpu_render,
    .compile = cc_compile,
    .code_free = cpu_code_free,
    .launch = cpu_launch,
    .sync = jit_host_sync,
    .supports = cpu_supports,
};

static kiln_status cc_open(const jit_device_config *cfg, jit_device **out, char *msg,
                           size_t cap) {
    return open_cpu(&jit_cc_device, jit_cpu_compiler_id(), jit_cpu_flags(), cfg, out, msg, cap);
}

/* ---- llvm ---- */

static kiln_status llvm_open(const jit_device_config *cfg, jit_device **out, char *msg,
                             size_t cap);

static void llvm_unload(void *h) { jit_llvm_free(h); }

static kernel_fn llvm_entry(void *h, const lower_program *p, int i) {
    (void)p;
    return jit_llvm_kernel(h, i);
}

static kiln_status llvm_compile(jit_device *dev, const lower_program *p, const lower_plan *plans,
                                const char *text, cache_key key, jit_code **out,
                                bool *from_disk, char *msg, size_t cap) {
    (void)dev;
    (void)text;
    (void)key;
    jit_llvm_program *h;
    kiln_status st = jit_llvm_compile(p, plans, &h, msg, cap);
    if (st != KILN_OK)
        return st;
    *from_disk = false;
    return resolve(h, llvm_unload, p, llvm_entry, out, msg, cap);
}

static char *llvm_ir_text(const lower_program *p, const lower_plan *plans, char *msg,
                          size_t cap) {
    return jit_llvm_module_text(p, plans, false, msg, cap);
}

const jit_device_ops jit_llvm_device = {
    .name = "llvm",
    .host_memory = true,
    .kind = KILN_CPU,
    .cpu_compiler = "llvm",
    .watched = true,
    .run_time_sizes = true,
    .open = llvm_open,
    .close = cpu_close,
    .set_threads = cpu_set_threads,
    .alloc = jit_host_alloc,
    .free = jit_host_free,
    .copy_in = jit_host_copy_in,
    .copy_out = jit_host_copy_out,
    .render = cpu_render,
    .compile = llvm_compile,
    .code_free = cpu_code_free,
    .launch = cpu_launch,
    .sync = jit_host_sync,
    .supports = cpu_supports,
    .ir_text = llvm_ir_text,
};

static kiln_status llvm_open(const jit_device_config *cfg, jit_device **out, char *msg,
                             size_t cap) {
    if (!jit_llvm_available(msg, cap))
        return KILN_ERR_DEVICE;
    return open_cpu(&jit_llvm_device, jit_llvm_identity(), NULL, cfg, out, msg, cap);
}
