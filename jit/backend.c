/* backend.c — the runtime: schedule a captured graph, render it, find or
 * build its compiled program, then launch each kernel on buffers bound to the
 * graph's nodes. Intermediates that nobody asked for are freed when the
 * program ends. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "jit/cpu/cpu.h"
#include "jit/jit.h"

typedef void (*kernel_fn)(char **bufs, int nthreads);

struct jit_backend {
    kiln_device dev;
    cache *cache;
    int nthreads;
    int debug; /* KILN_DEBUG */
    jit_counters counters;
};

jit_backend *jit_backend_new(kiln_device dev, char *msg, size_t cap) {
    if (dev != KILN_CPU) {
        snprintf(msg, cap, "kiln: no compiler backend for this device");
        return NULL;
    }
    jit_backend *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(msg, cap, "kiln: out of memory");
        return NULL;
    }
    j->dev = dev;
    char why[256];
    j->cache = cache_open(NULL, 0, why, sizeof why);
    if (!j->cache)
        j->cache = cache_open_memory_only();
    if (!j->cache) {
        free(j);
        snprintf(msg, cap, "kiln: out of memory");
        return NULL;
    }
    const char *t = getenv("KILN_THREADS");
    j->nthreads = t && atoi(t) > 0 ? atoi(t) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (j->nthreads < 1)
        j->nthreads = 1;
    const char *dbg = getenv("KILN_DEBUG");
    j->debug = dbg ? atoi(dbg) : 0;
    return j;
}

void jit_backend_free(jit_backend *j) {
    if (!j)
        return;
    cache_close(j->cache);
    free(j);
}

jit_counters jit_get_counters(const jit_backend *j) { return j->counters; }

static bool requested(graph_node *x, int n, graph_node *const *nodes) {
    for (int i = 0; i < n; i++)
        if (nodes[i] == x)
            return true;
    return false;
}

static kiln_status oom(char *msg, size_t cap, const graph_node *x, size_t bytes) {
    char shape[KILN_MAX_DIMS * 21 + 3];
    graph_format_shape(shape, sizeof shape, x->ndim, x->shape);
    snprintf(msg, cap, "kiln_realize: out of memory allocating %zu bytes for a %s tensor of shape %s",
             bytes, kiln_dtype_name(x->dtype), shape);
    return KILN_ERR_OOM;
}

/* A compiled program: its object and each kernel's entry, looked up once. */
typedef struct loaded {
    void *handle;
    int nkernels;
    kernel_fn fns[];
} loaded;

static void unload(void *v) {
    loaded *l = v;
    dlclose(l->handle);
    free(l);
}

/* Resolves every kernel of p in handle h (which the result then owns). */
static loaded *resolve(void *h, const lower_program *p, char *msg, size_t cap) {
    loaded *l = malloc(sizeof *l + sizeof(kernel_fn) * (size_t)p->nkernels);
    if (!l) {
        dlclose(h);
        snprintf(msg, cap, "kiln_realize: out of memory");
        return NULL;
    }
    l->handle = h;
    l->nkernels = p->nkernels;
    for (int i = 0; i < p->nkernels; i++) {
        if (p->kernels[i].kind == LOWER_ALIAS) {
            l->fns[i] = NULL;
            continue;
        }
        l->fns[i] = (kernel_fn)(uintptr_t)dlsym(h, p->kernels[i].name);
        if (!l->fns[i]) {
            snprintf(msg, cap, "kiln: kernel %s is missing from its compiled program",
                     p->kernels[i].name);
            unload(l);
            return NULL;
        }
    }
    return l;
}

static kiln_status run_program(jit_backend *j, lower_program *p, const loaded *l, int n,
                               graph_node *const *nodes, char *msg, size_t cap) {
    int maxin = 0;
    for (int i = 0; i < p->nkernels; i++)
        if (p->kernels[i].ninputs > maxin)
            maxin = p->kernels[i].ninputs;
    char **bufs = malloc(sizeof *bufs * (size_t)(maxin + 1));
    kiln_status st = bufs ? KILN_OK : KILN_ERR_OOM;
    if (!bufs)
        snprintf(msg, cap, "kiln_realize: out of memory");
    int done = 0;
    for (; st == KILN_OK && done < p->nkernels; done++) {
        lower_kernel *k = &p->kernels[done];
        if (k->kind == LOWER_ALIAS) {
            k->out->buf = graph_buffer_ref(k->inputs[0]->buf);
            continue;
        }
        size_t bytes = (size_t)graph_numel(k->out) * kiln_dtype_size(k->out->dtype);
        graph_buffer *buf = graph_buffer_new(bytes);
        if (!buf) {
            st = oom(msg, cap, k->out, bytes);
            break;
        }
        bufs[0] = buf->data;
        for (int i = 0; i < k->ninputs; i++)
            bufs[i + 1] = k->inputs[i]->buf->data;
        if (k->numel > 0) {
            l->fns[done](bufs, j->nthreads);
            j->counters.kernels++;
        }
        k->out->buf = buf;
    }
    free(bufs);
    /* Intermediates go; on failure, so do outputs of a half-run program. */
    for (int i = 0; i < done; i++) {
        graph_node *x = p->kernels[i].out;
        if (st != KILN_OK || !requested(x, n, nodes)) {
            graph_buffer_unref(x->buf);
            x->buf = NULL;
        }
    }
    return st;
}

/* The loaded program for src: from memory, else the disk cache, else built. */
static const loaded *find_program(jit_backend *j, const lower_program *p, const char *src,
                                  char *msg, size_t cap) {
    cache_key key = jit_cpu_key(src);
    loaded *l = cache_mem_get(j->cache, key);
    if (l) {
        j->counters.memory_hits++;
        return l;
    }
    bool compiled;
    void *h = jit_cpu_load(j->cache, src, key, &compiled, msg, cap);
    if (!h || !(l = resolve(h, p, msg, cap)))
        return NULL;
    if (compiled)
        j->counters.compiles++;
    else
        j->counters.disk_hits++;
    const loaded *kept = cache_mem_put(j->cache, key, l, unload);
    if (!kept)
        snprintf(msg, cap, "kiln_realize: out of memory");
    return kept;
}

kiln_status jit_realize(jit_backend *j, int n, graph_node *const *nodes, bool fuse, char *msg,
                        size_t cap) {
    lower_program *p = lower_schedule(n, nodes, fuse);
    if (!p) {
        snprintf(msg, cap, "kiln_realize: out of memory while scheduling");
        return KILN_ERR_OOM;
    }
    if (p->nkernels == 0) {
        lower_program_free(p);
        return KILN_OK;
    }
    char *src = jit_cpu_render(p);
    if (!src) {
        lower_program_free(p);
        snprintf(msg, cap, "kiln_realize: out of memory while generating code");
        return KILN_ERR_OOM;
    }
    if (j->debug >= 3)
        for (int i = 0; i < p->nkernels; i++)
            lower_print_kernel(stderr, &p->kernels[i]);
    if (j->debug >= 4)
        fprintf(stderr, "kiln: generated source\n%s\n", src);
    const loaded *l = find_program(j, p, src, msg, cap);
    free(src);
    kiln_status st = l ? KILN_OK : KILN_ERR_COMPILE;
    if (l) {
        j->counters.syncs++;
        st = run_program(j, p, l, n, nodes, msg, cap);
    }
    lower_program_free(p);
    return st;
}
