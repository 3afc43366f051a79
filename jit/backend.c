/* backend.c — the runtime. A sync point's captured graph is looked up by its
 * structural signature; on a miss it is scheduled, rendered, and its compiled
 * program found in the kernel cache or built, and the result is kept under
 * the signature, so a later capture of the same structure (the next training
 * step) only binds buffers and launches. Kernel outputs that nobody asked for
 * live from their kernel to their last reader and their memory goes back to a
 * pool that later kernels (and later syncs) draw from. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "jit/cpu/cpu.h"
#include "jit/cpu/llvm.h"
#include "jit/cuda/cuda.h"
#include "jit/jit.h"
#include "jit/profile.h"

typedef void (*kernel_fn)(char **bufs, int nthreads);

/* Freed intermediates, kept for reuse by size. Training steps allocate the
 * same sizes over and over; reusing them skips the allocator and the page
 * faults of fresh memory. */
#define POOL_MAX_BUFFERS 64
#define POOL_MAX_BYTES ((size_t)1 << 30)

typedef struct pool {
    int n;
    size_t bytes;
    graph_buffer *bufs[POOL_MAX_BUFFERS]; /* oldest first */
} pool;

struct jit_backend {
    kiln_device dev;
    cache *cache;
    int nthreads;
    jit_watch watch; /* debug output, profile, KILN_DUMP, the machine's limits */
    bool check_cuda; /* KILN_CHECK_CUDA=1: every program must also compile for CUDA */
    bool llvm;       /* KILN_CPU_COMPILER=llvm: LLVM through ORC instead of cc */
    jit_counters counters;
    pool pool;
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
    jit_watch_init(&j->watch, j->cache, j->nthreads);
    const char *cc = getenv("KILN_CHECK_CUDA");
    j->check_cuda = cc && !strcmp(cc, "1");
    const char *cpu_cc = getenv("KILN_CPU_COMPILER");
    j->llvm = cpu_cc && !strcmp(cpu_cc, "llvm");
    bool bad_cc = cpu_cc && *cpu_cc && !j->llvm && strcmp(cpu_cc, "cc");
    if (bad_cc)
        snprintf(msg, cap, "kiln: KILN_CPU_COMPILER is '%s'; it must be cc or llvm", cpu_cc);
    if (bad_cc || (j->llvm && !jit_llvm_available(msg, cap))) {
        jit_backend_free(j);
        return NULL;
    }
    return j;
}

void jit_backend_free(jit_backend *j) {
    if (!j)
        return;
    for (int i = 0; i < j->pool.n; i++)
        graph_buffer_unref(j->pool.bufs[i]);
    jit_watch_fini(&j->watch);
    cache_close(j->cache);
    free(j);
}

static graph_buffer *pool_take(jit_backend *j, size_t nbytes) {
    pool *p = &j->pool;
    for (int i = p->n - 1; i >= 0; i--) {
        graph_buffer *b = p->bufs[i];
        if (b->nbytes != nbytes)
            continue;
        memmove(&p->bufs[i], &p->bufs[i + 1], sizeof *p->bufs * (size_t)(p->n - i - 1));
        p->n--;
        p->bytes -= nbytes;
        return b;
    }
    return graph_buffer_new(nbytes);
}

/* Drops the backend's reference to an intermediate's buffer; when it was the
 * last one, the memory goes to the pool, evicting the oldest beyond its bounds. */
static void pool_give(jit_backend *j, graph_buffer *b) {
    pool *p = &j->pool;
    if (!b)
        return;
    if (b->refs != 1 || b->nbytes > POOL_MAX_BYTES) {
        graph_buffer_unref(b);
        return;
    }
    while (p->n > 0 && (p->n == POOL_MAX_BUFFERS || p->bytes + b->nbytes > POOL_MAX_BYTES)) {
        p->bytes -= p->bufs[0]->nbytes;
        graph_buffer_unref(p->bufs[0]);
        memmove(&p->bufs[0], &p->bufs[1], sizeof *p->bufs * (size_t)--p->n);
    }
    p->bufs[p->n++] = b;
    p->bytes += b->nbytes;
}

jit_counters jit_get_counters(const jit_backend *j) { return j->counters; }

jit_watch *jit_backend_watch(jit_backend *j) { return &j->watch; }

static kiln_status oom(char *msg, size_t cap, const graph_node *x, size_t bytes) {
    char shape[KILN_MAX_DIMS * 21 + 3];
    graph_format_shape(shape, sizeof shape, x->ndim, x->shape);
    snprintf(msg, cap, "kiln_realize: out of memory allocating %zu bytes for a %s tensor of shape %s",
             bytes, kiln_dtype_name(x->dtype), shape);
    return KILN_ERR_OOM;
}

/* A compiled program: its object and each kernel's entry, looked up once. */
typedef struct loaded {
    void *handle; /* a dlopen handle, or a jit_llvm_program */
    bool llvm;
    int nkernels;
    kernel_fn fns[];
} loaded;

static void unload(void *v) {
    loaded *l = v;
    if (l->llvm)
        jit_llvm_free(l->handle);
    else
        dlclose(l->handle);
    free(l);
}

/* Resolves every kernel of p in handle h (which the result then owns). */
static loaded *resolve(void *h, bool llvm, const lower_program *p, char *msg, size_t cap) {
    loaded *l = malloc(sizeof *l + sizeof(kernel_fn) * (size_t)p->nkernels);
    if (!l) {
        if (llvm)
            jit_llvm_free(h);
        else
            dlclose(h);
        snprintf(msg, cap, "kiln_realize: out of memory");
        return NULL;
    }
    l->handle = h;
    l->llvm = llvm;
    l->nkernels = p->nkernels;
    for (int i = 0; i < p->nkernels; i++) {
        if (p->kernels[i].kind == LOWER_ALIAS) {
            l->fns[i] = NULL;
            continue;
        }
        l->fns[i] = llvm ? jit_llvm_kernel(h, i) : (kernel_fn)(uintptr_t)dlsym(h, p->kernels[i].name);
        if (!l->fns[i]) {
            snprintf(msg, cap, "kiln: kernel %s is missing from its compiled program",
                     p->kernels[i].name);
            unload(l);
            return NULL;
        }
    }
    return l;
}

/* The loaded program for src: from memory, else the disk cache, else built. */
static const loaded *find_program(jit_backend *j, const lower_program *p, const char *src,
                                  cache_key key, char *msg, size_t cap) {
    loaded *l = cache_mem_get(j->cache, key);
    if (l) {
        j->counters.memory_hits++;
        return l;
    }
    bool compiled = true;
    void *h = j->llvm ? (void *)jit_llvm_compile(p, msg, cap)
                      : jit_cpu_load(j->cache, src, key, &compiled, msg, cap);
    if (!h || !(l = resolve(h, j->llvm, p, msg, cap)))
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

/* A compiled program for one graph structure: its kernels (whose node
 * pointers are dropped: nodes are named by their index in the capture), the
 * loaded code, and the memory plan. */
typedef struct bound_kernel {
    int64_t *outs, *inputs; /* capture indices */
    int nrelease;
    int64_t *release;       /* intermediates whose last reader this kernel is */
} bound_kernel;

typedef struct compiled {
    unsigned char *sig;
    size_t siglen;
    lower_program *prog;
    bound_kernel *bound;
    const loaded *code; /* owned by the kernel cache */
    jit_prog_facts facts;
} compiled;

static void compiled_free(void *v) {
    compiled *c = v;
    if (!c)
        return;
    for (int i = 0; c->bound && i < c->prog->nkernels; i++) {
        free(c->bound[i].outs);
        free(c->bound[i].inputs);
        free(c->bound[i].release);
    }
    free(c->bound);
    free(c->facts.cost);
    lower_program_free(c->prog);
    free(c->sig);
    free(c);
}

static int64_t index_of(const graph_node *n) { return (int64_t)(intptr_t)n->scratch - 1; }

/* Names each kernel's nodes by capture index, drops the program's node
 * references, and plans memory: an output no target is released after the
 * last kernel that reads it. */
static bool bind(compiled *c, const graph_capture *cap) {
    lower_program *p = c->prog;
    int64_t total = cap->npending + cap->nleaves;
    int *last = malloc(sizeof *last * (size_t)(total ? total : 1));
    c->bound = calloc((size_t)p->nkernels, sizeof *c->bound);
    bool ok = last && c->bound;
    for (int64_t i = 0; i < total; i++)
        cap->nodes[i]->scratch = (void *)(intptr_t)(i + 1);
    for (int64_t i = 0; ok && i < total; i++)
        last[i] = -1;
    for (int i = 0; ok && i < p->nkernels; i++) {
        lower_kernel *k = &p->kernels[i];
        bound_kernel *bk = &c->bound[i];
        bk->outs = malloc(sizeof *bk->outs * (size_t)k->nouts);
        bk->inputs = malloc(sizeof *bk->inputs * (size_t)(k->ninputs ? k->ninputs : 1));
        bk->release = malloc(sizeof *bk->release * (size_t)(k->ninputs + k->nouts));
        if (!(ok = bk->outs && bk->inputs && bk->release))
            break;
        for (int o = 0; o < k->nouts; o++)
            last[bk->outs[o] = index_of(k->outs[o])] = i;
        for (int in = 0; in < k->ninputs; in++)
            last[bk->inputs[in] = index_of(k->inputs[in])] = i;
    }
    for (int r = 0; ok && r < cap->ntargets; r++)
        last[cap->targets[r]] = -1;
    for (int i = 0; ok && i < p->nkernels; i++) {
        lower_kernel *k = &p->kernels[i];
        for (int o = 0; o < k->nouts; o++) {
            int64_t x = c->bound[i].outs[o];
            if (last[x] >= 0) {
                bound_kernel *at = &c->bound[last[x]];
                at->release[at->nrelease++] = x;
            }
        }
    }
    for (int64_t i = 0; i < total; i++)
        cap->nodes[i]->scratch = NULL;
    for (int i = 0; ok && i < p->nkernels; i++) {
        lower_kernel *k = &p->kernels[i];
        for (int o = 0; o < k->nouts; o++) {
            graph_unref(k->outs[o]);
            k->outs[o] = NULL;
        }
        k->out = NULL;
        for (int in = 0; in < k->ninputs; in++) {
            graph_unref(k->inputs[in]);
            k->inputs[in] = NULL;
        }
    }
    free(last);
    return ok;
}

/* Schedules, renders and loads a capture's program. */
static compiled *build(jit_backend *j, const graph_capture *cap, bool fuse, kiln_status *st,
                       char *msg, size_t mcap) {
    *st = KILN_ERR_OOM;
    compiled *c = calloc(1, sizeof *c);
    if (!c || !(c->sig = malloc(cap->siglen ? cap->siglen : 1))) {
        free(c);
        snprintf(msg, mcap, "kiln_realize: out of memory");
        return NULL;
    }
    memcpy(c->sig, cap->sig, cap->siglen);
    c->siglen = cap->siglen;
    graph_node **targets = malloc(sizeof *targets * (size_t)cap->ntargets);
    if (targets) {
        for (int r = 0; r < cap->ntargets; r++)
            targets[r] = cap->nodes[cap->targets[r]];
        c->prog = lower_schedule(cap->ntargets, targets, fuse);
    }
    free(targets);
    if (!c->prog) {
        compiled_free(c);
        snprintf(msg, mcap, "kiln_realize: out of memory while scheduling");
        return NULL;
    }
    lower_program *p = c->prog;
    if (j->watch.debug >= 3)
        for (int i = 0; i < p->nkernels; i++)
            lower_print_kernel(stderr, &p->kernels[i]);
    if (!(c->facts.cost = jit_prog_costs(p))) {
        compiled_free(c);
        snprintf(msg, mcap, "kiln_realize: out of memory");
        return NULL;
    }
    if (j->check_cuda && p->nkernels > 0 && jit_cuda_check_program(p, msg, mcap) != KILN_OK) {
        compiled_free(c);
        *st = KILN_ERR_COMPILE;
        return NULL;
    }
    if (p->nkernels > 0) {
        char *src = jit_cpu_render(p, msg, mcap);
        if (!src) {
            compiled_free(c);
            *st = strstr(msg, "out of memory") ? KILN_ERR_OOM : KILN_ERR_COMPILE;
            return NULL;
        }
        if (j->watch.debug >= 4)
            fprintf(stderr, "kiln: generated source\n%s\n", src);
        c->facts.key = j->llvm ? jit_llvm_key(src) : jit_cpu_key(src);
        jit_counters before = j->counters;
        jit_watch_dump(&j->watch, &c->facts, p, src, j->llvm);
        c->code = find_program(j, p, src, c->facts.key, msg, mcap);
        c->facts.origin = j->counters.compiles > before.compiles    ? "compiled"
                          : j->counters.disk_hits > before.disk_hits ? "disk"
                                                                     : "memory";
        free(src);
        if (!c->code) {
            compiled_free(c);
            *st = strstr(msg, "out of memory") ? KILN_ERR_OOM : KILN_ERR_COMPILE;
            return NULL;
        }
    }
    if (!bind(c, cap)) {
        compiled_free(c);
        snprintf(msg, mcap, "kiln_realize: out of memory");
        return NULL;
    }
    *st = KILN_OK;
    return c;
}

static kiln_status run(jit_backend *j, const compiled *c, const graph_capture *cap, bool hit,
                       char *msg, size_t mcap) {
    const lower_program *p = c->prog;
    graph_node *const *nodes = cap->nodes;
    int maxbufs = 1;
    for (int i = 0; i < p->nkernels; i++)
        if (p->kernels[i].nouts + p->kernels[i].ninputs > maxbufs)
            maxbufs = p->kernels[i].nouts + p->kernels[i].ninputs;
    char *stackv[32];
    char **bufs = maxbufs <= 32 ? stackv : malloc(sizeof *bufs * (size_t)maxbufs);
    kiln_status st = bufs ? KILN_OK : KILN_ERR_OOM;
    if (!bufs)
        snprintf(msg, mcap, "kiln_realize: out of memory");
    int done = 0;
    for (; st == KILN_OK && done < p->nkernels; done++) {
        const lower_kernel *k = &p->kernels[done];
        const bound_kernel *bk = &c->bound[done];
        if (k->kind == LOWER_ALIAS) {
            nodes[bk->outs[0]]->buf = graph_buffer_ref(nodes[bk->inputs[0]]->buf);
        } else {
            for (int o = 0; o < k->nouts && st == KILN_OK; o++) {
                graph_node *x = nodes[bk->outs[o]];
                size_t bytes = (size_t)graph_numel(x) * kiln_dtype_size(x->dtype);
                if (!(x->buf = pool_take(j, bytes)))
                    st = oom(msg, mcap, x, bytes);
                else
                    bufs[o] = x->buf->data;
            }
            if (st != KILN_OK)
                break;
            for (int i = 0; i < k->ninputs; i++)
                bufs[k->nouts + i] = nodes[bk->inputs[i]]->buf->data;
            if (k->numel > 0) {
                bool timed = jit_watch_timing(&j->watch);
                double t0 = timed ? jit_now_ms() : 0;
                c->code->fns[done](bufs, j->nthreads);
                j->counters.kernels++;
                if (timed)
                    jit_watch_launch(&j->watch, &c->facts, k, done, hit, t0, jit_now_ms());
            }
        }
        for (int r = 0; r < bk->nrelease; r++) {
            graph_node *x = nodes[bk->release[r]];
            pool_give(j, x->buf);
            x->buf = NULL;
        }
    }
    if (bufs != stackv)
        free(bufs);
    /* A half-run program leaves nothing behind: its outputs so far go. */
    for (int i = 0; st != KILN_OK && i < p->nkernels; i++)
        for (int o = 0; o < p->kernels[i].nouts; o++) {
            graph_node *x = nodes[c->bound[i].outs[o]];
            pool_give(j, x->buf);
            x->buf = NULL;
        }
    return st;
}

static cache_key graph_key(const graph_capture *cap, bool fuse) {
    cache_key_builder b;
    cache_key_begin(&b);
    cache_key_add_str(&b, "kiln captured graph");
    cache_key_add_u64(&b, fuse);
    cache_key_add(&b, cap->sig, cap->siglen);
    return cache_key_end(&b);
}

kiln_status jit_realize(jit_backend *j, int n, graph_node *const *nodes, bool fuse, char *msg,
                        size_t mcap) {
    graph_capture cap;
    if (graph_capture_new(n, nodes, &cap) != KILN_OK) {
        snprintf(msg, mcap, "kiln_realize: out of memory while capturing the graph");
        return KILN_ERR_OOM;
    }
    if (cap.npending == 0) {
        graph_capture_free(&cap);
        return KILN_OK;
    }
    double t0 = jit_now_ms();
    cache_key key = graph_key(&cap, fuse);
    compiled *c = cache_mem_get(j->cache, key);
    bool hit = c && c->siglen == cap.siglen && !memcmp(c->sig, cap.sig, cap.siglen);
    kiln_status st = KILN_OK;
    if (hit) {
        j->counters.graph_hits++;
    } else {
        compiled *built = build(j, &cap, fuse, &st, msg, mcap);
        /* A colliding key keeps its first program; this one runs once. */
        c = built && !c ? cache_mem_put(j->cache, key, built, compiled_free) : built;
        if (built && !c) {
            st = KILN_ERR_OOM;
            snprintf(msg, mcap, "kiln_realize: out of memory");
        }
    }
    double t1 = jit_now_ms();
    if (c) {
        if (!hit)
            c->facts.build_ms = t1 - t0;
        j->counters.syncs++;
        st = run(j, c, &cap, hit, msg, mcap);
        double t2 = jit_now_ms();
        jit_watch_sync(&j->watch, t0, t1, t2, hit, c->prog->nkernels, cap.npending);
        if (j->watch.debug >= 1)
            fprintf(stderr,
                    "kiln: sync %lld: %lld nodes captured, %d kernels, graph cache %s, "
                    "%s %.3f ms, run %.3f ms\n",
                    (long long)j->counters.syncs, (long long)cap.npending, c->prog->nkernels,
                    hit ? "hit" : "miss", hit ? "lookup" : "compile", t1 - t0, t2 - t1);
        if (!hit && c != cache_mem_get(j->cache, key))
            compiled_free(c);
    }
    graph_capture_free(&cap);
    return st;
}
