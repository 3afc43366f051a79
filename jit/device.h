/* device.h — the device interface: what the runtime (jit/backend.c) asks of
 * a device, and nothing more. A device owns its buffers, turns a scheduled
 * program into code it can launch, and describes itself to the planner and
 * the caches. Each implementation lives in its own folder under jit/ and is
 * registered by one line in jit/devices.c; the runtime never asks which one
 * it has.
 *
 * Buffers are graph_buffers whose owner is the jit_device and whose release
 * is its ops->free; their data is the device's handle of the memory, read
 * and written only through copy_in and copy_out (and by its kernels). */
#ifndef KILN_JIT_DEVICE_H
#define KILN_JIT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "api/kiln.h"
#include "cache/cache.h"
#include "jit/pool.h"
#include "graph/graph.h"
#include "lower/lower.h"

typedef struct jit_device jit_device;
typedef struct jit_code jit_code; /* a device's compiled program, opaque to the runtime */

/* What the runtime hands a device when it opens it. */
typedef struct jit_device_config {
    cache *cache;  /* the context's kernel cache (a device may keep files in its disk level) */
    int nthreads;  /* KILN_THREADS, else the online CPUs */
} jit_device_config;

typedef struct jit_device_ops {
    const char *name;         /* "ref", "cc", "llvm", "cuda": in messages */
    kiln_device kind;         /* the kiln_device it serves */
    const char *cpu_compiler; /* the KILN_CPU_COMPILER value that picks it (KILN_CPU only) */
    bool watched; /* its programs are generated code, which debug output, the profiler,
                     KILN_DUMP and the machine's limits describe */
    bool host_memory; /* its buffers' data are host addresses: collectives hand them to
                         dist/ in place (otherwise they are staged through copies) */
    bool run_time_sizes; /* its renderer prints the sizes lower_sizes_mark marked as
                            reads of S and its launch passes each kernel's values:
                            graphs that differ only in sizes can share its programs */
    bool joint_attention_grads; /* its renderer takes an attention backward as one kernel
                                   (lower.h's LOWER_JOINT_ATTENTION_GRADS) */
    bool split_operands; /* its renderer packs split matmul operands (lower.h's
                            LOWER_SPLIT_OPERANDS) */
    bool row_tiles; /* its elementwise kernels may take rows as tiles (lower.h's
                       LOWER_ROW_TILES) */

    /* Opens the device; KILN_ERR_DEVICE (or OOM) with a message when it cannot. */
    kiln_status (*open)(const jit_device_config *cfg, jit_device **out, char *msg, size_t cap);
    void (*close)(jit_device *d);

    /* ---- memory ---- */
    /* A buffer of nbytes, uninitialised (every producer writes all of it). */
    kiln_status (*alloc)(jit_device *d, size_t nbytes, graph_buffer **out, char *msg,
                         size_t cap);
    /* A buffer's release (graph_buffer.release): frees its memory. */
    void (*free)(void *owner, graph_buffer *b);
    kiln_status (*copy_in)(jit_device *d, graph_buffer *dst, size_t offset, const void *src,
                           size_t n, char *msg, size_t cap);
    kiln_status (*copy_out)(jit_device *d, void *dst, const graph_buffer *src, size_t offset,
                            size_t n, char *msg, size_t cap);

    /* ---- programs ---- */
    /* The program's text on this device, in *out (malloc'd): with the
     * device's key it names the compiled code in the kernel cache, KILN_DUMP
     * writes it and KILN_DEBUG=4 prints it. plans[i] is kernel i's plan, made
     * by lower_plan_program for the device's target. KILN_ERR_COMPILE naming
     * what the device cannot print, or KILN_ERR_OOM, with a message. */
    kiln_status (*render)(jit_device *d, const lower_program *p, const lower_plan *plans,
                          char **out, char *msg, size_t cap);
    /* Compiles p, whose text and key are the above; *from_disk says the code
     * was found in the disk cache rather than built. KILN_ERR_COMPILE or
     * KILN_ERR_OOM with a message on failure. */
    kiln_status (*compile)(jit_device *d, const lower_program *p, const lower_plan *plans,
                           const char *text, cache_key key, jit_code **out, bool *from_disk,
                           char *msg, size_t cap);
    void (*code_free)(void *code); /* a jit_code: the kernel cache's destroy */
    /* Runs kernel i (k: its IR, node references dropped) of compiled code.
     * nodes are the kernel's nodes in this capture, its k->nouts outputs then
     * its k->ninputs inputs, every one holding a buffer of this device. */
    kiln_status (*launch)(jit_device *d, const jit_code *c, int i, const lower_kernel *k,
                          graph_node *const *nodes, char *msg, size_t cap);
    /* Waits for every launch and copy to finish. */
    kiln_status (*sync)(jit_device *d, char *msg, size_t cap);
    /* Whether the device computes graph op `op` with result dtype dt. */
    bool (*supports)(const jit_device *d, graph_op op, kiln_dtype dt);
    /* Optional: how many threads kernels use from now on (CPU devices). */
    void (*set_threads)(jit_device *d, int nthreads);
    /* Optional: the program in the compiler's own IR, for KILN_DUMP (malloc'd). */
    char *(*ir_text)(const lower_program *p, const lower_plan *plans, char *msg, size_t cap);

    /* ---- watching (optional) ---- */
    /* For a device whose launch returns before its kernel has run, so that
     * the host's clock says nothing about the kernel: while the device's
     * time_launches is set, each launch is bracketed by the device's own
     * timestamps, and after the sync this gives the n launches timed since
     * the last call, start and end in ms from the first one's start, and
     * forgets them (n = 0 only forgets). KILN_ERR_DEVICE when the device
     * timed another number of launches or cannot read its clock. */
    kiln_status (*launch_times)(jit_device *d, int n, double *start, double *end, char *msg,
                                size_t cap);
    /* The device's own limits for the profiler, in place of the host CPU's:
     * m's name (cpu), threads and triad_elems say what was measured (the
     * key of the stored figure); with measure, gbps, gflops and
     * vector_bits are measured too. */
    kiln_status (*limits)(jit_device *d, bool measure, kiln_machine *m, char *msg, size_t cap);
    /* Optional, with limits: the dense peak in GFLOP/s of the units that compute
     * a product of two dt operands accumulating in f32 (a generated kernel's
     * or a library's), where those are not the f32 FMA lanes of limits'
     * gflops: a GPU's tensor cores for f16 and bf16, and for f32 where TF32 is
     * allowed. 0 where the FMA lanes do it. The profiler rates such a product
     * against it. */
    double (*product_peak)(jit_device *d, kiln_dtype dt);
} jit_device_ops;

/* Every device starts with this (implementations embed it first). */
struct jit_device {
    const jit_device_ops *ops;
    lower_target target; /* what the planner plans for */
    cache_key key;       /* target, compiler identity and flags, kiln's version: every
                            kernel-cache key of this device includes it */
    jit_pool *pool;      /* its caching allocator (jit/pool.h), or NULL */
    bool time_launches;  /* set by the runtime around a profiled run (launch_times) */
    int ordinal;         /* which device of its kind (a GPU's index), 0 for the host's */
};

/* The device serving kind (for KILN_CPU, the one KILN_CPU_COMPILER names,
 * cc when unset), opened. NULL with a message (and *st) when it cannot be. */
jit_device *jit_device_open(kiln_device kind, const jit_device_config *cfg, kiln_status *st,
                            char *msg, size_t cap);
void jit_device_close(jit_device *d);

/* The registered devices (jit/devices.c), for tests and messages. */
int jit_device_count(void);
const jit_device_ops *jit_device_at(int i);

/* ---- host memory, for devices whose buffers are host memory (device_host.c) ---- */

/* d->pool over host memory (2 MiB-aligned and madvise'd for huge pages from
 * 4 MiB on, which makes even a fresh large buffer 512 times fewer faults);
 * alloc takes from it, free (called with the pool, the buffer's release_arg)
 * gives back. */
kiln_status jit_host_pool_open(jit_device *d, char *msg, size_t cap);
kiln_status jit_host_alloc(jit_device *d, size_t nbytes, graph_buffer **out, char *msg,
                           size_t cap);
void jit_host_free(void *owner, graph_buffer *b);
kiln_status jit_host_copy_in(jit_device *d, graph_buffer *dst, size_t offset, const void *src,
                             size_t n, char *msg, size_t cap);
kiln_status jit_host_copy_out(jit_device *d, void *dst, const graph_buffer *src, size_t offset,
                              size_t n, char *msg, size_t cap);
kiln_status jit_host_sync(jit_device *d, char *msg, size_t cap);

/* A device key from its parts: the target's name and vector width, the
 * compiler's identity, its flags (NULL-terminated), kiln's version. */
cache_key jit_device_key(const lower_target *t, const char *compiler_id,
                         const char *const *flags);
/* The key of text that device d builds (a program's source: kind "kiln
 * program"; a kernel's under a tuning: "kiln tune"): kind, d's key, text. */
cache_key jit_text_key(const jit_device *d, const char *kind, const char *text);

#endif /* KILN_JIT_DEVICE_H */
