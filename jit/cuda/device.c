/* device.c — the CUDA device: kiln's device interface over the driver API
 * (driver.c, loaded at run time) and NVRTC (nvrtc.c). A kiln context opens
 * the device KILN_CUDA_DEVICE names (an ordinal, default 0), takes a
 * reference to its primary context (the one cuBLAS and the CUDA runtime use,
 * so later libraries share its memory) and creates a stream of its own.
 * Every launch and copy is queued on that one stream, which is what makes
 * the caching allocator safe: a block released while a kernel that reads it
 * is still queued can be handed to the next kernel at once, because that
 * kernel runs after it. The host waits only in sync and in copy_out (whose
 * caller reads the data).
 *
 * Programs are compiled by NVRTC to a cubin for the device's exact
 * architecture; the cubin and the PTX (the fallback when the driver refuses
 * the cubin) are kept in the kernel cache's disk level under a key of the
 * text, the architecture, NVRTC's version and its flags. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cuda/cuda.h"
#include "jit/device.h"

enum {
    /* Copies from 1 MiB go through pinned staging: a copy from pageable
     * memory is staged by the driver anyway, in smaller pieces and without
     * overlapping the host's memcpy with the transfer. */
    STAGE_FROM = 1 << 20,
    STAGE_HALF = 4 << 20, /* each half of the double buffer */
};

/* The raw device allocator under the pool. It outlives the device while
 * blocks are out (kiln_ctx frees the runtime before the graph's last
 * buffers), and keeps the primary context retained until the last one is
 * freed: a block freed after the context went could have been an address
 * of someone else's allocation in a new one. */
typedef struct cuda_mem {
    pthread_mutex_t lock;
    jit_cuda_device *dev;
    int64_t blocks; /* device allocations not yet freed */
    bool closed;    /* the device has closed */
    char why[256];  /* the driver's last refusal */
    struct cuda_device *owner; /* while open: its held launches go before any free */
} cuda_mem;

/* A launch held back until the stream's next other operation (a copy, a
 * wait, a free): a run's launches are held together, so that a replayed
 * step can go to the device as one CUDA graph. Its arguments are
 * held_args[at, at + nbufs). */
typedef struct held_launch {
    int kernel;
    int nbufs, at;
} held_launch;

typedef struct cuda_device {
    jit_device base;
    cache *cache;
    cuda_mem *mem;
    jit_cuda_device *dev;
    jit_cuda_stream *stream;
    int arch;
    int ordinal;
    pthread_mutex_t copy_lock; /* the staging buffer */
    char *stage;               /* 2 * STAGE_HALF pinned bytes, made on first use */
    bool no_stage;             /* the driver refused pinned memory: copy from pageable */
    jit_cuda_event *stage_done[2];
    bool stage_pending[2];
    const char *last_kernel; /* named in errors found at sync (a program's name outlives it) */
    char compiler_id[96];
    /* Profiled launches: launch i between events 2i and 2i + 1 (made on
     * first use and reused by every later profiled run). */
    jit_cuda_event **ev;
    int nev, ntimed;
    /* Held launches, all of one program's code (KILN_CUDA_GRAPHS, on by
     * default where the driver has graphs). */
    bool graphs;
    jit_code *held_code;
    held_launch *held;
    int nheld, capheld;
    jit_cuda_ptr *held_args;
    int nargs, capargs;
    /* cuBLAS for plain products (KILN_CUDA_MATMUL=kernel: never), opened on
     * first use; KILN_ALLOW_TF32=1 lets f32 products use TF32 */
    bool use_blas, blas_tried, tf32;
    int forced_choice; /* KILN_CUDA_MATMUL=blas: CHOICE_BLAS; otherwise measured */
    jit_cuda_blas *blas;
    jit_cuda_event *choice_ev[3];
    int64_t choices_measured;
} cuda_device;

typedef struct cuda_kernel {
    jit_cuda_fn *fn; /* NULL for kernels without code */
    jit_cuda_dims dims;
    char *name;
    bool blas; /* cuBLAS can compute it (jit_cuda_gemm_of); the generated code stays */
    jit_cuda_gemm gemm;
    int choice;       /* CHOICE_*: which of the two runs it, measured once */
    cache_key choice_key; /* where the measured choice is kept on disk */
} cuda_kernel;

/* A product cuBLAS can compute runs through cuBLAS or its generated kernel,
 * whichever its first launch measured faster (each run twice, the second
 * timed: cuBLAS's first call of a shape plans it); the choice is kept in
 * the disk cache under the program's key and the kernel, so a later process
 * measures nothing. KILN_CUDA_MATMUL=blas or kernel decides without
 * measuring. */
enum { CHOICE_UNKNOWN, CHOICE_BLAS, CHOICE_KERNEL };
static const char choice_kind[] = "cuda_gemm_choice";

/* A segment's launches as one CUDA graph: built from a sequence of launches
 * seen twice in a row (a graph-cache hit replays the same kernels in the
 * same order), launched whole from then on, each node's arguments rebound
 * where a run's buffers differ from the last one's. */
typedef struct cuda_graph {
    int n;             /* launches */
    held_launch *seq;  /* what each node launches, and its arguments' place in args */
    jit_cuda_ptr *args; /* the arguments every node is bound to now */
    int nargs;
    jit_cuda_graph *g;
    jit_cuda_graph_exec *exec;
    jit_cuda_graph_node **nodes;
} cuda_graph;

/* A run of held launches goes to the device whole at the stream's next other
 * operation: a run's launches are one segment, or several where something
 * else comes between them (a cuBLAS product, a staged collective). Each
 * segment, known by its first kernel, has its own graph. */
typedef struct cuda_segment {
    cuda_graph *graph; /* NULL until its launches repeat */
    held_launch *seen; /* the last launches it went as one by one */
    int nseen;
} cuda_segment;

struct jit_code {
    cuda_device *d;
    jit_cuda_module *mod;
    cuda_segment *segs;  /* by first kernel, made at the first flush */
    bool no_graph;       /* the driver refused to build one: launched kernel by kernel */
    int nkernels;
    cuda_kernel k[];
};

static kiln_status flush(cuda_device *d, char *msg, size_t cap);
static void recall_choice(cuda_device *d, cache_key key, int i, cuda_kernel *ck);

/* driver.c's messages start "kiln: "; ours name the API call instead. */
static void reword(char *msg, size_t cap, const char *op) {
    if (strncmp(msg, "kiln: ", 6) != 0)
        return;
    char tail[1024];
    snprintf(tail, sizeof tail, "%s", msg + 6);
    snprintf(msg, cap, "%s: CUDA: %s", op, tail);
}

static kiln_status current(cuda_device *d, const char *op, char *msg, size_t cap) {
    kiln_status st = jit_cuda_make_current(d->dev, msg, cap);
    if (st != KILN_OK)
        reword(msg, cap, op);
    return st;
}

/* Current, and every held launch queued: what a copy, a wait or a
 * measurement on the stream must come after. */
static kiln_status ready(cuda_device *d, const char *op, char *msg, size_t cap) {
    kiln_status st = current(d, op, msg, cap);
    return st == KILN_OK ? flush(d, msg, cap) : st;
}

static jit_cuda_ptr ptr_of(const graph_buffer *b) { return (jit_cuda_ptr)(uintptr_t)b->data; }

/* ---- memory ---- */

/* Below the pool's smallest class a request would go to cuMemAlloc every
 * time; a 64 KiB block wastes memory on scalars, but cuMemAlloc costs far
 * more than the waste (it synchronises the device). */
static size_t pooled_size(size_t n) { return n < JIT_POOL_MIN ? JIT_POOL_MIN : n; }

static void mem_destroy(cuda_mem *m) {
    jit_cuda_device_close(m->dev);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static void *raw_alloc(void *user, size_t n) {
    cuda_mem *m = user;
    char why[256];
    jit_cuda_ptr p = 0;
    kiln_status st = jit_cuda_make_current(m->dev, why, sizeof why);
    if (st == KILN_OK)
        st = jit_cuda_alloc(m->dev, n, &p, why, sizeof why);
    pthread_mutex_lock(&m->lock);
    if (st == KILN_OK)
        m->blocks++;
    else
        snprintf(m->why, sizeof m->why, "%s", strncmp(why, "kiln: ", 6) ? why : why + 6);
    pthread_mutex_unlock(&m->lock);
    return st == KILN_OK ? (void *)(uintptr_t)p : NULL;
}

static void raw_free(void *user, void *mem, size_t n) {
    (void)n;
    cuda_mem *m = user;
    char why[256];
    /* A held launch may still read the block: it goes first (a failure
     * there is the sync's to report, as the launch's own would be). */
    if (m->owner)
        flush(m->owner, why, sizeof why);
    if (jit_cuda_make_current(m->dev, why, sizeof why) == KILN_OK)
        jit_cuda_free(m->dev, (jit_cuda_ptr)(uintptr_t)mem);
    pthread_mutex_lock(&m->lock);
    bool done = --m->blocks == 0 && m->closed;
    pthread_mutex_unlock(&m->lock);
    if (done)
        mem_destroy(m);
}

static void cuda_free(void *owner, graph_buffer *b) {
    jit_pool_put(owner, b->data, pooled_size(b->nbytes));
}

static kiln_status cuda_alloc(jit_device *dev, size_t nbytes, graph_buffer **out, char *msg,
                              size_t cap) {
    cuda_device *d = (cuda_device *)dev;
    int64_t held = jit_pool_get_stats(dev->pool).held_bytes;
    void *mem = jit_pool_get(dev->pool, pooled_size(nbytes));
    if (!mem) {
        pthread_mutex_lock(&d->mem->lock);
        snprintf(msg, cap,
                 "kiln_realize: out of CUDA device memory allocating %zu bytes on device %d (%lld "
                 "cached bytes were freed and the allocation retried): %s",
                 nbytes, d->ordinal, (long long)held, d->mem->why);
        pthread_mutex_unlock(&d->mem->lock);
        return KILN_ERR_OOM;
    }
    graph_buffer *b = graph_buffer_adopt(mem, nbytes, dev, cuda_free);
    if (!b) {
        jit_pool_put(dev->pool, mem, pooled_size(nbytes));
        snprintf(msg, cap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    b->release_arg = dev->pool; /* the buffer may outlive d; the pool waits for it */
    *out = b;
    return KILN_OK;
}

/* The staging buffer and its events, made on first use; false (and
 * no_stage from then on) when the driver refuses them, which only makes
 * large copies slower. Called with copy_lock held. */
static bool staging(cuda_device *d) {
    if (d->stage)
        return true;
    if (d->no_stage)
        return false;
    char why[256];
    d->stage = jit_cuda_pinned_alloc(2 * (size_t)STAGE_HALF);
    for (int h = 0; h < 2 && d->stage; h++)
        if (jit_cuda_event_new(&d->stage_done[h], why, sizeof why) != KILN_OK) {
            jit_cuda_event_free(d->stage_done[0]);
            d->stage_done[0] = NULL;
            jit_cuda_pinned_free(d->stage);
            d->stage = NULL;
        }
    d->no_stage = !d->stage;
    return d->stage != NULL;
}

/* Waits until half h of the staging buffer is free again. */
static kiln_status stage_wait(cuda_device *d, int h, char *msg, size_t cap) {
    if (!d->stage_pending[h])
        return KILN_OK;
    d->stage_pending[h] = false;
    return jit_cuda_event_wait(d->stage_done[h], "waiting for a staged copy", msg, cap);
}

static kiln_status stage_record(cuda_device *d, int h, char *msg, size_t cap) {
    kiln_status st = jit_cuda_event_record(d->stage_done[h], d->stream, msg, cap);
    d->stage_pending[h] = st == KILN_OK;
    return st;
}

/* Host to device, queued: the source may be reused on return (a pageable
 * one is read by the driver before the call returns, a staged one has been
 * copied into the staging buffer). */
static kiln_status cuda_copy_in(jit_device *dev, graph_buffer *dst, size_t offset,
                                const void *src, size_t n, char *msg, size_t cap) {
    cuda_device *d = (cuda_device *)dev;
    kiln_status st = ready(d, "kiln_from_data", msg, cap);
    if (st != KILN_OK || n == 0)
        return st;
    jit_cuda_ptr to = ptr_of(dst) + offset;
    pthread_mutex_lock(&d->copy_lock);
    if (n < STAGE_FROM || !staging(d)) {
        st = jit_cuda_copy_to_device_async(to, src, n, d->stream, msg, cap);
    } else {
        for (size_t at = 0, i = 0; st == KILN_OK && at < n; at += STAGE_HALF, i++) {
            int h = (int)(i & 1);
            size_t c = n - at < STAGE_HALF ? n - at : STAGE_HALF;
            char *half = d->stage + (size_t)h * STAGE_HALF;
            if ((st = stage_wait(d, h, msg, cap)) != KILN_OK)
                break;
            memcpy(half, (const char *)src + at, c);
            st = jit_cuda_copy_to_device_async(to + at, half, c, d->stream, msg, cap);
            if (st == KILN_OK)
                st = stage_record(d, h, msg, cap);
        }
    }
    pthread_mutex_unlock(&d->copy_lock);
    if (st != KILN_OK)
        reword(msg, cap, "kiln_from_data");
    return st;
}

/* Device to host: returns with the data in dst, after every kernel queued
 * before it (the stream's order). Large copies overlap the transfer of one
 * half of the staging buffer with the host's copy out of the other. */
static kiln_status cuda_copy_out(jit_device *dev, void *dst, const graph_buffer *src,
                                 size_t offset, size_t n, char *msg, size_t cap) {
    cuda_device *d = (cuda_device *)dev;
    kiln_status st = ready(d, "kiln_to_host", msg, cap);
    if (st != KILN_OK || n == 0)
        return st;
    jit_cuda_ptr from = ptr_of(src) + offset;
    pthread_mutex_lock(&d->copy_lock);
    if (n < STAGE_FROM || !staging(d)) {
        st = jit_cuda_copy_to_host_async(dst, from, n, d->stream, msg, cap);
        if (st == KILN_OK)
            st = jit_cuda_stream_wait(d->stream, "waiting for a copy from the device", msg, cap);
    } else {
        size_t nchunks = (n + STAGE_HALF - 1) / STAGE_HALF;
        for (size_t i = 0; st == KILN_OK && i <= nchunks; i++) {
            if (i < nchunks) { /* queue chunk i */
                int h = (int)(i & 1);
                size_t at = i * STAGE_HALF, c = n - at < STAGE_HALF ? n - at : STAGE_HALF;
                st = stage_wait(d, h, msg, cap);
                if (st == KILN_OK)
                    st = jit_cuda_copy_to_host_async(d->stage + (size_t)h * STAGE_HALF,
                                                     from + at, c, d->stream, msg, cap);
                if (st == KILN_OK)
                    st = stage_record(d, h, msg, cap);
            }
            if (st == KILN_OK && i > 0) { /* take chunk i - 1 */
                int h = (int)((i - 1) & 1);
                size_t at = (i - 1) * STAGE_HALF, c = n - at < STAGE_HALF ? n - at : STAGE_HALF;
                st = stage_wait(d, h, msg, cap);
                if (st == KILN_OK)
                    memcpy((char *)dst + at, d->stage + (size_t)h * STAGE_HALF, c);
            }
        }
    }
    pthread_mutex_unlock(&d->copy_lock);
    if (st != KILN_OK)
        reword(msg, cap, "kiln_to_host");
    return st;
}

/* ---- programs ---- */

static kiln_status cuda_render(jit_device *d, const lower_program *p, const lower_plan *plans,
                               char **out, char *msg, size_t cap) {
    (void)d;
    return jit_cuda_render(p, plans, out, msg, cap);
}

/* A disk entry: magic, the cubin's size, the PTX's size (its NUL
 * included), the cubin, the PTX. */
static const char blob_magic[8] = "kilncu1";
static const char blob_kind[] = "cuda_module";

static void put_blob(cuda_device *d, cache_key key, const jit_cuda_binary *bin) {
    uint64_t sizes[2] = {bin->cubin_size, bin->ptx_size + 1};
    size_t n = sizeof blob_magic + sizeof sizes + sizes[0] + sizes[1];
    char *blob = malloc(n);
    if (!blob)
        return; /* the disk level is an optimisation */
    memcpy(blob, blob_magic, sizeof blob_magic);
    memcpy(blob + sizeof blob_magic, sizes, sizeof sizes);
    char *at = blob + sizeof blob_magic + sizeof sizes;
    if (sizes[0])
        memcpy(at, bin->cubin, sizes[0]);
    memcpy(at + sizes[0], bin->ptx, sizes[1]);
    cache_disk_put(d->cache, key, blob_kind, blob, n);
    free(blob);
}

/* A cached binary, or false (a miss, or an entry that does not parse). */
static bool get_blob(cuda_device *d, cache_key key, jit_cuda_binary *bin) {
    void *data;
    size_t n;
    memset(bin, 0, sizeof *bin);
    if (!d->cache || cache_disk_get(d->cache, key, blob_kind, &data, &n) != 0)
        return false;
    uint64_t sizes[2];
    const char *c = data;
    bool ok = n >= sizeof blob_magic + sizeof sizes && !memcmp(c, blob_magic, sizeof blob_magic);
    if (ok) {
        memcpy(sizes, c + sizeof blob_magic, sizeof sizes);
        size_t body = n - sizeof blob_magic - sizeof sizes;
        ok = sizes[1] >= 1 && sizes[0] <= body && sizes[1] == body - sizes[0];
    }
    const char *at = c + sizeof blob_magic + sizeof sizes;
    ok = ok && at[sizes[0] + sizes[1] - 1] == '\0';
    if (ok) {
        bin->cubin = sizes[0] ? malloc(sizes[0]) : NULL;
        bin->ptx = malloc(sizes[1]);
        bin->log = calloc(1, 1);
        ok = bin->ptx && bin->log && (!sizes[0] || bin->cubin);
        if (ok) {
            if (sizes[0])
                memcpy(bin->cubin, at, sizes[0]);
            memcpy(bin->ptx, at + sizes[0], sizes[1]);
            bin->cubin_size = sizes[0];
            bin->ptx_size = sizes[1] - 1;
        } else {
            jit_cuda_binary_free(bin);
        }
    }
    free(data);
    return ok;
}

/* "kernels a, b, c" of p, for messages about the whole program. */
static void kernel_names(const lower_program *p, char *out, size_t cap) {
    size_t at = (size_t)snprintf(out, cap, "kernel%s", p->nkernels == 1 ? "" : "s");
    for (int i = 0; i < p->nkernels && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s %s", i ? "," : "", p->kernels[i].name);
}

static void graph_free(cuda_graph *gr);

static void cuda_code_free(void *code) {
    jit_code *c = code;
    if (!c)
        return;
    char why[256];
    if (c->d->held_code == c)
        flush(c->d, why, sizeof why); /* its launches must go before its module */
    /* The kernel cache closes before the device (jit_backend_free). */
    if (jit_cuda_make_current(c->d->dev, why, sizeof why) == KILN_OK) {
        for (int i = 0; c->segs && i < c->nkernels; i++)
            graph_free(c->segs[i].graph);
        jit_cuda_module_unload(c->mod);
    }
    for (int i = 0; i < c->nkernels; i++)
        free(c->k[i].name);
    for (int i = 0; c->segs && i < c->nkernels; i++)
        free(c->segs[i].seen);
    free(c->segs);
    free(c);
}

static kiln_status cuda_compile(jit_device *dev, const lower_program *p, const lower_plan *plans,
                                const char *text, cache_key key, jit_code **out, bool *from_disk,
                                char *msg, size_t cap) {
    cuda_device *d = (cuda_device *)dev;
    jit_cuda_binary bin;
    *from_disk = get_blob(d, key, &bin);
    if (!*from_disk) {
        kiln_status st = jit_cuda_compile(text, d->arch, true, &bin, msg, cap);
        if (st != KILN_OK) {
            reword(msg, cap, "kiln_realize");
            return st;
        }
        put_blob(d, key, &bin);
    }
    kiln_status st = current(d, "kiln_realize", msg, cap);
    jit_cuda_module *m = st == KILN_OK ? jit_cuda_module_load(d->dev, &bin, msg, cap) : NULL;
    jit_cuda_binary_free(&bin);
    if (!m) {
        if (st == KILN_OK) {
            char why[512], names[512];
            snprintf(why, sizeof why, "%s", strncmp(msg, "kiln: ", 6) ? msg : msg + 6);
            kernel_names(p, names, sizeof names);
            snprintf(msg, cap, "kiln_realize: CUDA: the program of %s: %s", names, why);
        }
        return KILN_ERR_DEVICE;
    }
    jit_code *c = calloc(1, sizeof *c + sizeof(cuda_kernel) * (size_t)p->nkernels);
    if (!c) {
        jit_cuda_module_unload(m);
        snprintf(msg, cap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    c->d = d;
    c->mod = m;
    c->nkernels = p->nkernels;
    for (int i = 0; i < p->nkernels; i++) {
        if (!lower_kind_has_code(p->kernels[i].kind))
            continue;
        c->k[i].dims = jit_cuda_launch_dims(&plans[i]);
        if (!(c->k[i].name = strdup(p->kernels[i].name))) {
            snprintf(msg, cap, "kiln_realize: out of memory");
            cuda_code_free(c);
            return KILN_ERR_OOM;
        }
        if (d->use_blas && p->kernels[i].kind == LOWER_MATMUL) {
            const lower_kernel *k = &p->kernels[i];
            const graph_node *nodes[1 + 16];
            if (k->nouts == 1 && k->ninputs <= 16) {
                nodes[0] = k->outs[0];
                for (int j = 0; j < k->ninputs; j++)
                    nodes[1 + j] = k->inputs[j];
                c->k[i].blas = jit_cuda_gemm_of(k, nodes, &c->k[i].gemm);
            }
            if (c->k[i].blas)
                recall_choice(d, key, i, &c->k[i]);
        }
        if ((st = jit_cuda_function(m, p->kernels[i].name, &c->k[i].fn, msg, cap)) != KILN_OK) {
            reword(msg, cap, "kiln_realize");
            cuda_code_free(c);
            return KILN_ERR_COMPILE;
        }
    }
    *out = c;
    return KILN_OK;
}

/* ---- held launches and CUDA graphs ---- */

static void graph_free(cuda_graph *gr) {
    if (!gr)
        return;
    jit_cuda_graph_free(gr->g, gr->exec);
    free(gr->seq);
    free(gr->args);
    free(gr->nodes);
    free(gr);
}

static bool same_launches(const held_launch *a, int na, const held_launch *b, int nb) {
    if (na != nb)
        return false;
    for (int i = 0; i < na; i++)
        if (a[i].kernel != b[i].kernel || a[i].nbufs != b[i].nbufs)
            return false;
    return true;
}

/* The held launches, kernel by kernel. */
static kiln_status launch_held(cuda_device *d, const jit_code *c, char *msg, size_t cap) {
    kiln_status st = KILN_OK;
    for (int i = 0; i < d->nheld && st == KILN_OK; i++) {
        const held_launch *h = &d->held[i];
        const cuda_kernel *k = &c->k[h->kernel];
        st = jit_cuda_launch_async(k->fn, k->name, k->dims, h->nbufs, d->held_args + h->at,
                                   d->stream, msg, cap);
    }
    return st;
}

/* The graph of the held launches (a chain, in the stream's order), bound
 * to their arguments; sg->graph on success. */
static kiln_status graph_build(cuda_device *d, const jit_code *c, cuda_segment *sg, char *msg,
                               size_t cap) {
    cuda_graph *gr = calloc(1, sizeof *gr);
    if (gr) {
        gr->seq = malloc(sizeof *gr->seq * (size_t)d->nheld);
        gr->args = malloc(sizeof *gr->args * (size_t)(d->nargs ? d->nargs : 1));
        gr->nodes = calloc((size_t)d->nheld, sizeof *gr->nodes);
    }
    if (!gr || !gr->seq || !gr->args || !gr->nodes) {
        graph_free(gr);
        snprintf(msg, cap, "kiln: out of memory");
        return KILN_ERR_OOM;
    }
    gr->n = d->nheld;
    gr->nargs = d->nargs;
    memcpy(gr->seq, d->held, sizeof *gr->seq * (size_t)gr->n);
    memcpy(gr->args, d->held_args, sizeof *gr->args * (size_t)gr->nargs);
    kiln_status st = jit_cuda_graph_new(&gr->g, msg, cap);
    for (int i = 0; i < gr->n && st == KILN_OK; i++) {
        const held_launch *h = &gr->seq[i];
        const cuda_kernel *k = &c->k[h->kernel];
        st = jit_cuda_graph_add_kernel(gr->g, i ? gr->nodes[i - 1] : NULL, k->fn, k->name,
                                       k->dims, h->nbufs, gr->args + h->at, &gr->nodes[i], msg,
                                       cap);
    }
    if (st == KILN_OK)
        st = jit_cuda_graph_instantiate(gr->g, &gr->exec, msg, cap);
    if (st != KILN_OK) {
        graph_free(gr);
        return st;
    }
    sg->graph = gr;
    return KILN_OK;
}

/* Launches the graph for the held launches: each node whose arguments
 * differ from what it is bound to is rebound first (a replayed step's
 * buffers are mostly the last step's, which the pool hands back in the
 * same order). */
static kiln_status graph_replay(cuda_device *d, cuda_graph *gr, const jit_code *c, char *msg,
                                size_t cap) {
    for (int i = 0; i < gr->n; i++) {
        const held_launch *h = &d->held[i];
        jit_cuda_ptr *now = d->held_args + h->at, *bound = gr->args + h->at;
        size_t bytes = sizeof *now * (size_t)h->nbufs;
        if (!memcmp(now, bound, bytes))
            continue;
        const cuda_kernel *k = &c->k[h->kernel];
        kiln_status st = jit_cuda_graph_set_kernel(gr->exec, gr->nodes[i], k->fn, k->name,
                                                   k->dims, h->nbufs, now, msg, cap);
        if (st != KILN_OK)
            return st;
        memcpy(bound, now, bytes);
    }
    return jit_cuda_graph_launch(gr->exec, d->stream, msg, cap);
}

/* Sends the held launches to the device: as the code's graph when they are
 * the launches it was built from, else kernel by kernel (building the graph
 * when the same launches come a second time in a row). A graph the driver
 * refuses is dropped for good and the launches go one by one: graphs only
 * save host time. */
static kiln_status flush(cuda_device *d, char *msg, size_t cap) {
    if (!d->nheld)
        return KILN_OK;
    jit_code *c = d->held_code;
    char why[512];
    bool done = false;
    kiln_status st = KILN_OK;
    if (!c->segs)
        c->segs = calloc((size_t)c->nkernels, sizeof *c->segs); /* none: no graphs */
    cuda_segment *sg = c->segs ? &c->segs[d->held[0].kernel] : NULL;
    if (sg && !sg->graph && !c->no_graph && d->nheld >= 2 &&
        same_launches(sg->seen, sg->nseen, d->held, d->nheld) &&
        graph_build(d, c, sg, why, sizeof why) != KILN_OK)
        c->no_graph = true;
    if (sg && sg->graph && same_launches(sg->graph->seq, sg->graph->n, d->held, d->nheld)) {
        done = graph_replay(d, sg->graph, c, why, sizeof why) == KILN_OK;
        if (!done) {
            graph_free(sg->graph);
            sg->graph = NULL;
            c->no_graph = true;
        }
    }
    if (!done) {
        st = launch_held(d, c, msg, cap);
        held_launch *seen = sg ? realloc(sg->seen, sizeof *seen * (size_t)d->nheld) : NULL;
        if (seen) {
            memcpy(seen, d->held, sizeof *seen * (size_t)d->nheld);
            sg->seen = seen;
        }
        if (sg)
            sg->nseen = seen ? d->nheld : 0;
    }
    d->nheld = d->nargs = 0;
    d->held_code = NULL;
    if (st != KILN_OK)
        reword(msg, cap, "kiln_realize");
    return st;
}

/* Holds launch i of c with its arguments. */
static kiln_status hold(cuda_device *d, jit_code *c, int i, int nbufs, const jit_cuda_ptr *bufs,
                        char *msg, size_t cap) {
    kiln_status st = d->held_code && d->held_code != c ? flush(d, msg, cap) : KILN_OK;
    if (st != KILN_OK)
        return st;
    if (d->nheld == d->capheld) {
        int n = d->capheld ? 2 * d->capheld : 64;
        held_launch *h = realloc(d->held, sizeof *h * (size_t)n);
        if (!h)
            goto oom;
        d->held = h;
        d->capheld = n;
    }
    if (d->nargs + nbufs > d->capargs) {
        int n = 2 * (d->nargs + nbufs) + 256;
        jit_cuda_ptr *a = realloc(d->held_args, sizeof *a * (size_t)n);
        if (!a)
            goto oom;
        d->held_args = a;
        d->capargs = n;
    }
    memcpy(d->held_args + d->nargs, bufs, sizeof *bufs * (size_t)nbufs);
    d->held[d->nheld++] = (held_launch){i, nbufs, d->nargs};
    d->nargs += nbufs;
    d->held_code = c;
    return KILN_OK;
oom:
    snprintf(msg, cap, "kiln_realize: out of memory");
    return KILN_ERR_OOM;
}

/* ---- timing ---- */

/* Events for one more timed launch. */
static kiln_status timing_events(cuda_device *d, char *msg, size_t cap) {
    int need = 2 * d->ntimed + 2;
    if (need <= d->nev)
        return KILN_OK;
    int want = need < 64 ? 64 : 2 * need;
    jit_cuda_event **ev = realloc(d->ev, sizeof *ev * (size_t)want);
    if (!ev) {
        snprintf(msg, cap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    d->ev = ev;
    for (; d->nev < want; d->nev++) {
        kiln_status st = jit_cuda_event_new(&d->ev[d->nev], msg, cap);
        if (st != KILN_OK) {
            reword(msg, cap, "kiln_realize");
            return st;
        }
    }
    return KILN_OK;
}

static kiln_status cuda_launch_times(jit_device *dev, int n, double *start, double *end,
                                     char *msg, size_t cap) {
    cuda_device *d = (cuda_device *)dev;
    int timed = d->ntimed;
    d->ntimed = 0;
    if (n == 0)
        return KILN_OK;
    if (n != timed) {
        snprintf(msg, cap, "kiln_profile: CUDA: %d launches were timed, not %d", timed, n);
        return KILN_ERR_DEVICE;
    }
    for (int i = 0; i < n; i++) {
        start[i] = jit_cuda_event_ms(d->ev[0], d->ev[2 * i]);
        end[i] = jit_cuda_event_ms(d->ev[0], d->ev[2 * i + 1]);
        if (start[i] < 0 || end[i] < start[i]) {
            snprintf(msg, cap, "kiln_profile: CUDA: the events of launch %d cannot be read", i);
            return KILN_ERR_DEVICE;
        }
    }
    return KILN_OK;
}

/* FP32 lanes per multiprocessor: 64 on compute capability 6.0 and 7.x-8.0,
 * 128 on 6.1-6.2 and from 8.6 on (Ampere's consumer parts, Ada, Hopper,
 * Blackwell). */
static int fp32_lanes(int arch) {
    if (arch == 61 || arch == 62)
        return 128;
    return arch >= 86 ? 128 : 64;
}

/* Dense f16 and bf16 multiply-adds per clock per multiprocessor on the
 * tensor cores, with f32 accumulators (kiln's mma.sync and cuBLAS's
 * products), from NVIDIA's whitepapers and datasheets, each checked
 * against a part's peak (SMs x rate x 2 flops x boost clock):
 * - sm_80 (A100): 4 tensor cores of 256 each, 1024: 108 SMs at 1.41 GHz
 *   make its 312 TFLOPS;
 * - sm_86, sm_89 (GA10x, AD10x): 512, half of A100's per SM:
 *   the RTX A6000's 84 SMs at 1.80 GHz make its 154.8 TFLOPS, the RTX 6000
 *   Ada's 142 at 2.505 GHz its 364.2 (GeForce parts run f32 accumulation
 *   at half that, so their share reads at most 50%);
 * - sm_90 (H100): 2048, twice A100's per SM and clock: 132 SMs at 1.83
 *   GHz make the SXM part's 989.4 TFLOPS.
 * TF32 runs at half these (A100 156, H100 494.7 TFLOPS). Other
 * architectures have no figure here yet, and their products are rated
 * against the f32 peak (kiln plans no mma below sm_80). */
static int mma_f16_per_sm(int arch) {
    switch (arch) {
    case 80: return 1024;
    case 86:
    case 89: return 512;
    case 90: return 2048;
    default: return 0;
    }
}

/* The tensor cores' peak for products of two dt operands: f16 and bf16
 * always, f32 through TF32 where KILN_ALLOW_TF32 lets products use it
 * (the plan's mm.mma and cuBLAS's compute type follow the same rule). */
static double cuda_product_peak(jit_device *dev, kiln_dtype dt) {
    cuda_device *d = (cuda_device *)dev;
    double rate = dev->target.mma ? mma_f16_per_sm(d->arch) : 0;
    if (dt == KILN_F32)
        rate = d->tf32 ? rate / 2 : 0;
    else if (dt != KILN_F16 && dt != KILN_BF16)
        rate = 0;
    int sms = jit_cuda_device_attribute(d->dev, JIT_CUDA_ATTR_SMS);
    double khz = jit_cuda_device_attribute(d->dev, JIT_CUDA_ATTR_CLOCK_KHZ);
    return sms > 0 && khz > 0 ? 2.0 * rate * sms * khz * 1e3 * 1e-9 : 0;
}

enum { COPY_REPS = 5, COPY_MAX = 256 << 20 };

/* The device's limits: the f32 peak from its properties (2 flops per FMA
 * lane per clock), the bandwidth of a device-to-device copy measured with
 * events (best of COPY_REPS, each byte read and written: 2 n bytes per copy
 * of n), on 1/8 of the device's memory up to 256 MiB, well past its L2. */
static kiln_status cuda_limits(jit_device *dev, bool measure, kiln_machine *m, char *msg,
                               size_t cap) {
    cuda_device *d = (cuda_device *)dev;
    kiln_status st = ready(d, "kiln_machine_info", msg, cap);
    if (st != KILN_OK)
        return st;
    snprintf(m->cpu, sizeof m->cpu, "%s", jit_cuda_device_name(d->dev));
    int sms = jit_cuda_device_attribute(d->dev, JIT_CUDA_ATTR_SMS);
    double khz = jit_cuda_device_attribute(d->dev, JIT_CUDA_ATTR_CLOCK_KHZ);
    size_t bytes = jit_cuda_device_memory(d->dev) / 8;
    if (bytes > COPY_MAX || bytes == 0)
        bytes = COPY_MAX;
    bytes &= ~(size_t)4095;
    m->threads = sms;
    m->triad_elems = (int64_t)(bytes / sizeof(float));
    m->vector_bits = 32 * 32; /* a warp of f32 lanes */
    if (!measure)
        return KILN_OK;
    if (sms <= 0 || khz <= 0) {
        snprintf(msg, cap, "kiln_machine_info: CUDA: device %d (%s) does not report its "
                           "multiprocessors and clock", d->ordinal, m->cpu);
        return KILN_ERR_DEVICE;
    }
    m->gflops = 2.0 * fp32_lanes(d->arch) * sms * khz * 1e3 * 1e-9;
    jit_cuda_ptr a = 0, b = 0;
    jit_cuda_event *e[2] = {NULL, NULL};
    st = jit_cuda_alloc(d->dev, bytes, &a, msg, cap);
    if (st == KILN_OK)
        st = jit_cuda_alloc(d->dev, bytes, &b, msg, cap);
    for (int i = 0; i < 2 && st == KILN_OK; i++)
        st = jit_cuda_event_new(&e[i], msg, cap);
    double best = -1;
    /* one copy first, untimed: the first touch of fresh memory maps it */
    for (int r = 0; r <= COPY_REPS && st == KILN_OK; r++) {
        st = jit_cuda_event_record(e[0], d->stream, msg, cap);
        if (st == KILN_OK)
            st = jit_cuda_copy_on_device_async(b, a, bytes, d->stream, msg, cap);
        if (st == KILN_OK)
            st = jit_cuda_event_record(e[1], d->stream, msg, cap);
        if (st == KILN_OK)
            st = jit_cuda_event_wait(e[1], "timing a device copy", msg, cap);
        double ms = st == KILN_OK ? jit_cuda_event_ms(e[0], e[1]) : -1;
        if (r > 0 && ms > 0 && (best < 0 || ms < best))
            best = ms;
    }
    for (int i = 0; i < 2; i++)
        jit_cuda_event_free(e[i]);
    if (b)
        jit_cuda_free(d->dev, b);
    if (a)
        jit_cuda_free(d->dev, a);
    if (st != KILN_OK) {
        reword(msg, cap, "kiln_machine_info");
        return st;
    }
    if (best <= 0) {
        snprintf(msg, cap, "kiln_machine_info: CUDA: device %d (%s): the copy's events read no "
                           "time", d->ordinal, m->cpu);
        return KILN_ERR_DEVICE;
    }
    m->gbps = 2.0 * (double)bytes / (best * 1e-3) * 1e-9;
    return KILN_OK;
}

/* ---- cuBLAS ---- */

/* The kept choice of kernel i of the program under key, if any. */
static void recall_choice(cuda_device *d, cache_key key, int i, cuda_kernel *ck) {
    cache_key_builder b;
    cache_key_begin(&b);
    cache_key_add_str(&b, choice_kind);
    cache_key_add(&b, &key, sizeof key);
    cache_key_add_u64(&b, (uint64_t)i);
    cache_key_add_u64(&b, (uint64_t)d->tf32);
    ck->choice_key = cache_key_end(&b);
    ck->choice = d->forced_choice;
    void *data;
    size_t n;
    if (ck->choice == CHOICE_UNKNOWN && d->cache &&
        cache_disk_get(d->cache, ck->choice_key, choice_kind, &data, &n) == 0) {
        if (n == 1 && (*(char *)data == 'b' || *(char *)data == 'k'))
            ck->choice = *(char *)data == 'b' ? CHOICE_BLAS : CHOICE_KERNEL;
        free(data);
    }
}

/* Whether cuBLAS is there, opening it on first use (a failure is said once
 * at KILN_DEBUG >= 1 and the generated kernels run from then on). */
static bool blas_ready(cuda_device *d) {
    if (d->blas || d->blas_tried)
        return d->blas != NULL;
    d->blas_tried = true;
    char why[512];
    d->blas = jit_cuda_blas_open(d->stream, why, sizeof why);
    const char *dbg = getenv("KILN_DEBUG");
    if (!d->blas && dbg && atoi(dbg) >= 1)
        fprintf(stderr, "kiln: CUDA: %s; matmuls run as generated kernels\n", why);
    return d->blas != NULL;
}

/* The first launch of a product neither kept nor forced: the generated
 * kernel and cuBLAS each run twice (every run writes the same output), the
 * second of each timed by events, and the faster is kept. */
static kiln_status measure_choice(cuda_device *d, cuda_kernel *ck, const lower_kernel *k,
                                  const jit_cuda_ptr *bufs, int nbufs, char *msg, size_t cap) {
    kiln_status st = flush(d, msg, cap);
    for (int e = 0; e < 3 && st == KILN_OK; e++)
        if (!d->choice_ev[e])
            st = jit_cuda_event_new(&d->choice_ev[e], msg, cap);
    jit_cuda_ptr extra = ck->gemm.epilogue_buf >= 0 ? bufs[ck->gemm.epilogue_buf] : 0;
    for (int rep = 0; rep < 2 && st == KILN_OK; rep++) {
        if (rep == 1)
            st = jit_cuda_event_record(d->choice_ev[0], d->stream, msg, cap);
        if (st == KILN_OK)
            st = jit_cuda_launch_async(ck->fn, k->name, ck->dims, nbufs, bufs, d->stream, msg,
                                       cap);
        if (st == KILN_OK && rep == 1)
            st = jit_cuda_event_record(d->choice_ev[1], d->stream, msg, cap);
        if (st == KILN_OK)
            st = jit_cuda_blas_gemm(d->blas, &ck->gemm, d->tf32, bufs[k->b.buf], bufs[k->a.buf],
                                    bufs[0], extra, msg, cap);
        if (st == KILN_OK && rep == 1)
            st = jit_cuda_event_record(d->choice_ev[2], d->stream, msg, cap);
    }
    if (st == KILN_OK)
        st = jit_cuda_event_wait(d->choice_ev[2], "timing a product both ways", msg, cap);
    if (st != KILN_OK) {
        reword(msg, cap, "kiln_realize");
        return st;
    }
    double kernel_ms = jit_cuda_event_ms(d->choice_ev[0], d->choice_ev[1]);
    double blas_ms = jit_cuda_event_ms(d->choice_ev[1], d->choice_ev[2]);
    ck->choice = kernel_ms >= 0 && blas_ms >= 0 && kernel_ms < blas_ms ? CHOICE_KERNEL
                                                                        : CHOICE_BLAS;
    d->choices_measured++;
    d->last_kernel = k->name;
    const char c = ck->choice == CHOICE_BLAS ? 'b' : 'k';
    if (d->cache)
        cache_disk_put(d->cache, ck->choice_key, choice_kind, &c, 1);
    const char *dbg = getenv("KILN_DEBUG");
    if (dbg && atoi(dbg) >= 1)
        fprintf(stderr, "kiln: CUDA: %s: cuBLAS %.3f ms, generated kernel %.3f ms: %s from now on\n",
                k->name, blas_ms, kernel_ms, c == 'b' ? "cuBLAS" : "the generated kernel");
    return KILN_OK;
}

/* A plain product through cuBLAS, after the held launches (the stream's
 * order), timed like a kernel when the profile asks. */
static kiln_status blas_launch(cuda_device *d, const cuda_kernel *ck, const lower_kernel *k,
                               const jit_cuda_ptr *bufs, char *msg, size_t cap) {
    kiln_status st = flush(d, msg, cap);
    bool timed = d->base.time_launches;
    if (st == KILN_OK && timed && (st = timing_events(d, msg, cap)) == KILN_OK)
        st = jit_cuda_event_record(d->ev[2 * d->ntimed], d->stream, msg, cap);
    if (st == KILN_OK)
        st = jit_cuda_blas_gemm(d->blas, &ck->gemm, d->tf32, bufs[k->b.buf], bufs[k->a.buf],
                                bufs[0], ck->gemm.epilogue_buf >= 0 ? bufs[ck->gemm.epilogue_buf] : 0,
                                msg, cap);
    if (st != KILN_OK) {
        reword(msg, cap, "kiln_realize");
        return st;
    }
    d->last_kernel = k->name;
    if (timed && (st = jit_cuda_event_record(d->ev[2 * d->ntimed + 1], d->stream, msg, cap)) ==
                     KILN_OK)
        d->ntimed++;
    return st;
}

static kiln_status cuda_launch(jit_device *dev, const jit_code *c, int i, const lower_kernel *k,
                               graph_node *const *nodes, char *msg, size_t cap) {
    cuda_device *d = (cuda_device *)dev;
    kiln_status st = current(d, "kiln_realize", msg, cap);
    if (st != KILN_OK)
        return st;
    int n = k->nouts + k->ninputs;
    jit_cuda_ptr stackv[32];
    jit_cuda_ptr *bufs = n <= 32 ? stackv : malloc(sizeof *bufs * (size_t)n);
    if (!bufs) {
        snprintf(msg, cap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    for (int b = 0; b < n && st == KILN_OK; b++) {
        /* A host buffer handed to a kernel would be an illegal address. */
        if (nodes[b]->buf->owner != dev) {
            snprintf(msg, cap, "kiln_realize: CUDA: kernel %s: buffer %d is not device memory "
                               "of this context", k->name, b);
            st = KILN_ERR_DEVICE;
        }
        bufs[b] = ptr_of(nodes[b]->buf);
    }
    cuda_kernel *ck = (cuda_kernel *)&c->k[i];
    if (st == KILN_OK && ck->blas && ck->choice != CHOICE_KERNEL && blas_ready(d) &&
        (ck->gemm.epilogue == JIT_GEMM_PLAIN || jit_cuda_blas_epilogues(d->blas))) {
        /* a profiled run times what runs, and measures nothing */
        if (ck->choice == CHOICE_UNKNOWN && !dev->time_launches && ck->fn)
            st = measure_choice(d, ck, k, bufs, n, msg, cap);
        else
            st = blas_launch(d, ck, k, bufs, msg, cap);
        if (bufs != stackv)
            free(bufs);
        return st;
    }
    bool timed = st == KILN_OK && dev->time_launches && c->k[i].fn;
    if (st == KILN_OK && !timed && d->graphs && c->k[i].fn && c->k[i].dims.grid) {
        st = hold(d, (jit_code *)c, i, n, bufs, msg, cap);
        if (st == KILN_OK)
            d->last_kernel = k->name;
        if (bufs != stackv)
            free(bufs);
        return st;
    }
    if (st == KILN_OK)
        st = flush(d, msg, cap); /* a timed launch goes after the held ones */
    if (timed && (st = timing_events(d, msg, cap)) == KILN_OK)
        st = jit_cuda_event_record(d->ev[2 * d->ntimed], d->stream, msg, cap);
    if (st == KILN_OK) {
        st = jit_cuda_launch_async(c->k[i].fn, k->name, c->k[i].dims, n, bufs, d->stream, msg,
                                   cap);
        if (st != KILN_OK)
            reword(msg, cap, "kiln_realize");
        else
            d->last_kernel = c->k[i].fn ? k->name : d->last_kernel;
    }
    if (st == KILN_OK && timed &&
        (st = jit_cuda_event_record(d->ev[2 * d->ntimed + 1], d->stream, msg, cap)) == KILN_OK)
        d->ntimed++;
    if (bufs != stackv)
        free(bufs);
    return st;
}

/* A kernel's own failure (a bad address, a trap) surfaces here, after the
 * fact: the message names the last kernel queued, where the search starts. */
static kiln_status cuda_sync(jit_device *dev, char *msg, size_t cap) {
    cuda_device *d = (cuda_device *)dev;
    kiln_status st = ready(d, "kiln_sync", msg, cap);
    if (st != KILN_OK)
        return st;
    char what[192];
    snprintf(what, sizeof what, "running the queued kernels (the last one queued: %s)",
             d->last_kernel ? d->last_kernel : "none");
    st = jit_cuda_stream_wait(d->stream, what, msg, cap);
    if (st != KILN_OK)
        reword(msg, cap, "kiln_realize");
    return st;
}

/* The renderer prints every graph op in every dtype through jit/cstyle, as
 * the CPU's does; a primitive it has no form for is refused at render time
 * with the op's name. */
static bool cuda_supports(const jit_device *d, graph_op op, kiln_dtype dt) {
    (void)d;
    if (graph_op_is_attention(op)) /* halves computed in f32 (render_attention.c) */
        return graph_dtype_is_float(dt);
    return op >= 0 && op < GRAPH_NUM_OPS && (unsigned)dt < KILN_NUM_DTYPES;
}

/* ---- opening and closing ---- */

/* KILN_CUDA_DEVICE: a device ordinal; anything else is an error rather
 * than device 0, which would run on a GPU the user did not ask for. */
static bool ordinal_of(int *ordinal, char *msg, size_t cap) {
    const char *e = getenv("KILN_CUDA_DEVICE");
    *ordinal = 0;
    if (!e || !*e)
        return true;
    char *end;
    long v = strtol(e, &end, 10);
    if (*end != '\0' || v < 0 || v > 1024) {
        snprintf(msg, cap, "kiln_ctx_new: KILN_CUDA: KILN_CUDA_DEVICE is '%s'; it must be a "
                           "device ordinal (0, 1, ...)", e);
        return false;
    }
    *ordinal = (int)v;
    return true;
}

/* Whether NVRTC can compile for sm_<arch>; when it cannot say (an NVRTC
 * older than 11.2), the first compile will. */
static bool arch_supported(int arch, char *list, size_t cap) {
    int archs[128];
    int n = jit_cuda_nvrtc_archs(archs, 128);
    list[0] = 0;
    if (n == 0)
        return true;
    size_t at = 0;
    bool found = false;
    for (int i = 0; i < n; i++) {
        found |= archs[i] == arch;
        if (at < cap)
            at += (size_t)snprintf(list + at, cap - at, "%ssm_%d", i ? " " : "", archs[i]);
    }
    return found;
}

static void cuda_close(jit_device *dev) {
    cuda_device *d = (cuda_device *)dev;
    char why[256];
    if (jit_cuda_make_current(d->dev, why, sizeof why) == KILN_OK) {
        flush(d, why, sizeof why);
        jit_cuda_stream_wait(d->stream, "closing", why, sizeof why);
        for (int h = 0; h < 2; h++)
            jit_cuda_event_free(d->stage_done[h]);
        for (int i = 0; i < d->nev; i++)
            jit_cuda_event_free(d->ev[i]);
        jit_cuda_blas_close(d->blas);
        for (int e = 0; e < 3; e++)
            jit_cuda_event_free(d->choice_ev[e]);
        jit_cuda_pinned_free(d->stage);
        jit_cuda_stream_free(d->stream);
    }
    cuda_mem *m = d->mem;
    pthread_mutex_lock(&m->lock);
    m->owner = NULL;
    pthread_mutex_unlock(&m->lock);
    jit_pool_close(dev->pool);
    pthread_mutex_lock(&m->lock);
    m->closed = true;
    bool done = m->blocks == 0;
    pthread_mutex_unlock(&m->lock);
    if (done)
        mem_destroy(m);
    pthread_mutex_destroy(&d->copy_lock);
    free(d->ev);
    free(d->held);
    free(d->held_args);
    free(d);
}

/* The pool's budget: KILN_POOL_MAX_BYTES, else half the device's memory (a
 * quarter of host memory, the host pool's default, says nothing about a
 * GPU's). An allocation that fails empties the pool and is tried again, so
 * a large budget costs no failure. */
static size_t pool_budget(jit_cuda_device *dev) {
    const char *e = getenv("KILN_POOL_MAX_BYTES");
    if (e && *e)
        return 0;
    size_t total = jit_cuda_device_memory(dev);
    return total ? total / 2 : (size_t)1 << 30;
}

static kiln_status cuda_open(const jit_device_config *cfg, jit_device **out, char *msg,
                             size_t cap);

const jit_device_ops jit_cuda_device_ops = {
    .name = "cuda",
    .kind = KILN_CUDA,
    .watched = true,
    .host_memory = false,
    .open = cuda_open,
    .close = cuda_close,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_in = cuda_copy_in,
    .copy_out = cuda_copy_out,
    .render = cuda_render,
    .compile = cuda_compile,
    .code_free = cuda_code_free,
    .launch = cuda_launch,
    .sync = cuda_sync,
    .supports = cuda_supports,
    .launch_times = cuda_launch_times,
    .limits = cuda_limits,
    .product_peak = cuda_product_peak,
};

static kiln_status cuda_open(const jit_device_config *cfg, jit_device **out, char *msg,
                             size_t cap) {
    *out = NULL;
    int ordinal;
    if (!ordinal_of(&ordinal, msg, cap))
        return KILN_ERR_DEVICE;
    char why[512] = "";
    jit_cuda_device *dev = jit_cuda_device_open(ordinal, why, sizeof why);
    if (!dev) {
        snprintf(msg, cap, "kiln_ctx_new: KILN_CUDA: no CUDA device is usable (%s)",
                 strncmp(why, "kiln: ", 6) ? why : why + 6);
        return KILN_ERR_DEVICE;
    }
    int arch = jit_cuda_device_arch(dev);
    const char *nvrtc = jit_cuda_nvrtc_version();
    char list[512];
    if (!nvrtc || !jit_cuda_nvrtc_available(why, sizeof why)) {
        snprintf(msg, cap, "kiln_ctx_new: KILN_CUDA: device %d (%s) has no compiler: %s", ordinal,
                 jit_cuda_device_name(dev), strncmp(why, "kiln: ", 6) ? why : why + 6);
        jit_cuda_device_close(dev);
        return KILN_ERR_DEVICE;
    }
    if (!arch_supported(arch, list, sizeof list)) {
        snprintf(msg, cap, "kiln_ctx_new: KILN_CUDA: device %d (%s) is sm_%d, an architecture "
                           "%s cannot compile for (it knows %s)",
                 ordinal, jit_cuda_device_name(dev), arch, nvrtc, list);
        jit_cuda_device_close(dev);
        return KILN_ERR_DEVICE;
    }
    cuda_device *d = calloc(1, sizeof *d);
    cuda_mem *m = calloc(1, sizeof *m);
    if (!d || !m || pthread_mutex_init(&m->lock, NULL) != 0) {
        free(d);
        free(m);
        jit_cuda_device_close(dev);
        snprintf(msg, cap, "kiln_ctx_new: out of memory");
        return KILN_ERR_OOM;
    }
    m->dev = dev;
    m->owner = d;
    d->dev = dev;
    d->mem = m;
    const char *graphs = getenv("KILN_CUDA_GRAPHS");
    d->graphs = jit_cuda_graphs_available() && !(graphs && !strcmp(graphs, "0"));
    const char *mm = getenv("KILN_CUDA_MATMUL"), *tf32 = getenv("KILN_ALLOW_TF32");
    d->use_blas = !(mm && !strcmp(mm, "kernel"));
    d->forced_choice = mm && !strcmp(mm, "blas") ? CHOICE_BLAS : CHOICE_UNKNOWN;
    d->tf32 = tf32 && !strcmp(tf32, "1");
    d->arch = arch;
    d->ordinal = ordinal;
    d->cache = cfg->cache;
    pthread_mutex_init(&d->copy_lock, NULL);
    d->base.ops = &jit_cuda_device_ops;
    d->base.ordinal = ordinal;
    d->base.target = *jit_cuda_target();
    d->base.target.mma = arch >= 80; /* mma.sync m16n8k16 in f16 and bf16, m16n8k8 in TF32 */
    d->base.target.tf32 = d->tf32;
    snprintf(d->compiler_id, sizeof d->compiler_id, "%s sm_%d", nvrtc, arch);
    d->base.key = jit_device_key(&d->base.target, d->compiler_id, jit_cuda_nvrtc_flags());
    kiln_status st = jit_cuda_stream_new(&d->stream, msg, cap);
    if (st == KILN_OK) {
        d->base.pool = jit_pool_new((jit_pool_raw){raw_alloc, raw_free, m, false},
                                    pool_budget(dev));
        if (!d->base.pool) {
            snprintf(msg, cap, "kiln: out of memory opening the CUDA device");
            st = KILN_ERR_OOM;
        }
    }
    if (st != KILN_OK) {
        reword(msg, cap, "kiln_ctx_new");
        jit_cuda_stream_free(d->stream);
        pthread_mutex_destroy(&d->copy_lock);
        free(d);
        mem_destroy(m);
        return st;
    }
    *out = &d->base;
    return KILN_OK;
}
