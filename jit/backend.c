/* backend.c — the runtime, the same for every device. A sync point's
 * captured graph is looked up by its structural signature in the (bounded)
 * whole-graph cache; on a miss it is scheduled, rendered by the device, and
 * its compiled program found in the kernel cache or compiled by the device,
 * and the result is kept under the signature, so a later capture of the same
 * structure (the next training step) only binds buffers and launches. Kernel
 * outputs that nobody asked for live from their kernel to their last reader
 * and their memory goes back to the device's pool (jit/pool.h), which later
 * kernels, later syncs and the next step's outputs draw from. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "jit/collective.h"
#include "jit/cuda/cuda.h"
#include "jit/device.h"
#include "jit/donate.h"
#include "jit/graph_cache.h"
#include "jit/jit.h"
#include "jit/profile.h"
#include "jit/tune.h"
#include "jit/why.h"

/* A family: the programs of graphs that differ only in sizes, named by the
 * program's text with every run-time-size candidate read at run time (see
 * lower.h). It keeps the first program's candidate values and which have
 * differed in a later one: those are what the next program of the family
 * reads at run time, so every graph whose other numbers match the first's
 * shares one compiled program. */
enum { FAMILIES = 16 };

typedef struct family {
    cache_key key;
    int64_t n;      /* candidates (0: the slot is free) */
    int64_t *base;  /* their values in the family's first program */
    bool *varies;   /* those that differed from it in a later program */
    int64_t used;   /* the build that last used it, to replace the least recent */
} family;

struct jit_backend {
    jit_device *dev;
    cache *cache;    /* kernel cache: compiled programs by device and text */
    jit_graph_cache *graphs; /* compiled programs by captured structure */
    int nthreads;
    jit_watch watch; /* debug output, profile, KILN_DUMP, the machine's limits */
    bool check_cuda; /* KILN_CHECK_CUDA=1: every program must also compile for CUDA */
    kiln_stats stats;
    jit_why *why; /* recent misses, to say why the next one missed (KILN_DEBUG >= 1) */
    bool share_sizes; /* kiln_ctx_set_dynamic, KILN_DYNAMIC */
    bool tune;        /* KILN_TUNE=1: plans lower offers variants of are chosen by timing */
    family families[FAMILIES];
    int64_t builds;
};

static void compiled_free(void *v);

static int64_t graph_cache_max(void) {
    const char *v = getenv("KILN_GRAPH_CACHE_MAX");
    return v && atoll(v) > 0 ? atoll(v) : JIT_GRAPH_CACHE_DEFAULT_MAX;
}

jit_backend *jit_backend_new(kiln_device kind, kiln_status *st, char *msg, size_t cap) {
    *st = KILN_ERR_OOM;
    jit_backend *j = calloc(1, sizeof *j);
    char why[256] = "";
    if (j && !(j->cache = cache_open(NULL, 0, why, sizeof why))) {
        /* Said once per process at KILN_DEBUG >= 1: a disk cache that is off
         * (a bad KILN_CACHE_MAX_BYTES, an untrusted directory) used to make
         * every process compile everything again, silently. */
        static _Atomic int said;
        const char *dbg = getenv("KILN_DEBUG");
        if (dbg && atoi(dbg) >= 1 && !said++)
            fprintf(stderr, "kiln: the disk cache is off (%s); compiled code is kept in memory only\n",
                    why[0] ? why : "no reason given");
        j->cache = cache_open_memory_only();
    }
    if (j && j->cache)
        j->graphs = jit_graph_cache_new(graph_cache_max(), compiled_free);
    if (!j || !j->graphs) {
        if (j)
            cache_close(j->cache);
        free(j);
        snprintf(msg, cap, "kiln: out of memory");
        return NULL;
    }
    /* KILN_THREADS, at most 4 per online CPU: more never helps, and an
     * absurd count (100000) made OpenMP fail to create its threads and
     * crash. Anything that is not a positive number means the default. */
    const char *t = getenv("KILN_THREADS");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), want = cpus;
    if (t && *t) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end == '\0' && v > 0)
            want = v;
    }
    if (cpus < 1)
        cpus = 1;
    j->nthreads = (int)(want < 1 ? 1 : want > 4 * cpus ? 4 * cpus : want);
    jit_device_config cfg = {.cache = j->cache, .nthreads = j->nthreads};
    if (!(j->dev = jit_device_open(kind, &cfg, st, msg, cap))) {
        jit_graph_cache_free(j->graphs);
        cache_close(j->cache);
        free(j);
        return NULL;
    }
    /* A device that runs no generated code has nothing to debug, profile,
     * dump or measure: its watch stays off whatever the environment says. */
    if (j->dev->ops->watched) {
        jit_watch_init(&j->watch, j->cache, j->nthreads);
    } else {
        memset(&j->watch, 0, sizeof j->watch);
        j->watch.cache = j->cache;
        j->watch.nthreads = j->nthreads;
    }
    j->watch.dev = j->dev;
    const char *cc = getenv("KILN_CHECK_CUDA");
    j->check_cuda = cc && !strcmp(cc, "1");
    const char *dyn = getenv("KILN_DYNAMIC");
    j->share_sizes = !(dyn && !strcmp(dyn, "0"));
    j->tune = jit_tune_wanted();
    *st = KILN_OK;
    return j;
}

void jit_backend_free(jit_backend *j) {
    if (!j)
        return;
    jit_watch_fini(&j->watch);
    jit_graph_cache_free(j->graphs);
    jit_why_free(j->why);
    for (int f = 0; f < FAMILIES; f++) {
        free(j->families[f].base);
        free(j->families[f].varies);
    }
    cache_close(j->cache);
    jit_device_close(j->dev);
    free(j);
}

bool jit_backend_watched(const jit_backend *j) { return j->dev->ops->watched; }

void jit_backend_share_cores(jit_backend *j, int local_ranks) {
    const char *t = getenv("KILN_THREADS");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if ((t && *t) || local_ranks <= 1 || cpus < 1 || !j->dev->ops->set_threads)
        return;
    j->nthreads = cpus / local_ranks > 1 ? (int)(cpus / local_ranks) : 1;
    j->watch.nthreads = j->nthreads;
    j->dev->ops->set_threads(j->dev, j->nthreads);
}

void jit_backend_set_dynamic(jit_backend *j, bool on) { j->share_sizes = on; }

int64_t jit_graph_cache_size(const jit_backend *j) { return jit_graph_cache_count(j->graphs); }

kiln_status jit_buffer_new(jit_backend *j, size_t nbytes, const void *src, graph_buffer **out,
                           char *msg, size_t cap) {
    jit_device *d = j->dev;
    kiln_status st = d->ops->alloc(d, nbytes, out, msg, cap);
    if (st != KILN_OK)
        return st;
    void *zeros = NULL;
    if (!src && nbytes && !(src = zeros = calloc(1, nbytes))) {
        graph_buffer_unref(*out);
        *out = NULL;
        snprintf(msg, cap, "kiln: out of memory");
        return KILN_ERR_OOM;
    }
    st = nbytes ? d->ops->copy_in(d, *out, 0, src, nbytes, msg, cap) : KILN_OK;
    free(zeros);
    if (st != KILN_OK) {
        graph_buffer_unref(*out);
        *out = NULL;
    }
    return st;
}

kiln_status jit_buffer_read(const graph_buffer *b, size_t offset, void *dst, size_t n, char *msg,
                            size_t cap) {
    jit_device *d = b->owner;
    if (!d) {
        memcpy(dst, (const char *)b->data + offset, n);
        return KILN_OK;
    }
    return d->ops->copy_out(d, dst, b, offset, n, msg, cap);
}

bool jit_buffer_is_host(const graph_buffer *b) {
    const jit_device *d = b->owner;
    return !d || d->ops->host_memory;
}

bool jit_backend_host_memory(const jit_backend *j) { return j->dev->ops->host_memory; }

bool jit_buffer_device(const graph_buffer *b, kiln_device *kind, int *ordinal) {
    const jit_device *d = b->owner;
    if (!d)
        return false;
    *kind = d->ops->kind;
    *ordinal = d->ordinal;
    return true;
}

bool jit_backend_supports(const jit_backend *j, graph_op op, kiln_dtype dt) {
    return j->dev->ops->supports(j->dev, op, dt);
}

kiln_device jit_backend_device(const jit_backend *j, int *ordinal) {
    *ordinal = j->dev->ordinal;
    return j->dev->ops->kind;
}

graph_buffer *jit_backend_adopt(jit_backend *j, void *data, size_t nbytes,
                                void (*release)(void *, graph_buffer *), void *arg) {
    graph_buffer *b = graph_buffer_adopt(data, nbytes, j->dev, release);
    if (b)
        b->release_arg = arg;
    return b;
}

/* A buffer for a kernel output, from the device (whose pool hands back the
 * memory of released intermediates and outputs of the same size class). */
static graph_buffer *buffer_new(jit_backend *j, size_t nbytes) {
    graph_buffer *b = NULL;
    char msg[256];
    return j->dev->ops->alloc(j->dev, nbytes, &b, msg, sizeof msg) == KILN_OK ? b : NULL;
}

kiln_stats jit_stats(const jit_backend *j) {
    kiln_stats s = j->stats;
    if (j->dev && j->dev->pool) {
        jit_pool_stats p = jit_pool_get_stats(j->dev->pool);
        s.buffer_reuses = p.reuses;
        s.buffer_allocations = p.allocations;
        s.pooled_bytes = p.held_bytes;
        s.live_bytes = p.live_bytes;
        s.peak_bytes = p.peak_bytes;
        s.memory_retries = p.retries;
    }
    return s;
}

jit_watch *jit_backend_watch(jit_backend *j) { return &j->watch; }

static kiln_status oom(char *msg, size_t cap, const graph_node *x, size_t bytes) {
    char shape[KILN_MAX_DIMS * 21 + 3];
    graph_format_shape(shape, sizeof shape, x->ndim, x->shape);
    snprintf(msg, cap, "kiln_realize: out of memory allocating %zu bytes for a %s tensor of shape %s",
             bytes, graph_dtype_name(x->dtype), shape);
    return KILN_ERR_OOM;
}

/* The device's code for p: from memory, else compiled by the device (which
 * may find it in the disk cache). *origin says which. */
static kiln_status find_program(jit_backend *j, const lower_program *p,
                                const lower_plan *plans, const char *text, cache_key key,
                                const jit_code **out, const char **origin, char *msg,
                                size_t cap) {
    jit_device *d = j->dev;
    if ((*out = cache_mem_get(j->cache, key))) {
        j->stats.memory_hits++;
        *origin = "memory";
        return KILN_OK;
    }
    jit_code *code = NULL;
    bool from_disk = false;
    kiln_status st = d->ops->compile(d, p, plans, text, key, &code, &from_disk, msg, cap);
    if (st != KILN_OK)
        return st;
    if (from_disk)
        j->stats.disk_hits++;
    else
        j->stats.compiles++;
    *origin = from_disk ? "disk" : "compiled";
    if (!(*out = cache_mem_put(j->cache, key, code, d->ops->code_free))) {
        snprintf(msg, cap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    return KILN_OK;
}

/* A compiled program for one graph structure: its kernels (whose node
 * pointers are dropped: nodes are named by their index in the capture), the
 * loaded code, and the memory plan. */
typedef struct bound_kernel {
    int64_t *outs, *inputs; /* capture indices */
    int nrelease;
    int64_t *release;       /* intermediates whose last reader this kernel is */
    int *donor;             /* per output: its candidate in compiled.dn (-1: none);
                               NULL where no output has one */
} bound_kernel;

typedef struct compiled {
    unsigned char *sig;
    size_t siglen;
    lower_program *prog;
    lower_plan *plans; /* per kernel, for the context's device */
    bound_kernel *bound;
    const jit_code *code; /* owned by the kernel cache */
    int64_t sized;        /* numbers its code reads at run time (share_sizes) */
    jit_prog_facts facts;
    jit_collectives coll; /* the kernels dist/ runs */
    jit_donations dn;     /* outputs that may take a dying leaf's buffer (jit/donate.c) */
} compiled;

static void compiled_free(void *v) {
    compiled *c = v;
    if (!c)
        return;
    for (int i = 0; c->bound && i < c->prog->nkernels; i++) {
        free(c->bound[i].outs);
        free(c->bound[i].inputs);
        free(c->bound[i].release);
        free(c->bound[i].donor);
    }
    free(c->bound);
    free(c->facts.cost);
    jit_collectives_free(&c->coll);
    jit_donations_free(&c->dn);
    if (c->prog)
        lower_plans_free(c->plans, c->prog->nkernels);
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
    if (ok) {
        int64_t **outs = malloc(sizeof *outs * (size_t)(p->nkernels ? p->nkernels : 1));
        int64_t **ins = malloc(sizeof *ins * (size_t)(p->nkernels ? p->nkernels : 1));
        for (int i = 0; outs && ins && i < p->nkernels; i++) {
            outs[i] = c->bound[i].outs;
            ins[i] = c->bound[i].inputs;
        }
        ok = outs && ins && jit_donations_plan(&c->dn, p, cap, outs, ins, last);
        free(outs);
        free(ins);
        for (int d = 0; ok && d < c->dn.n; d++) {
            bound_kernel *bk = &c->bound[c->dn.d[d].kernel];
            int nouts = p->kernels[c->dn.d[d].kernel].nouts;
            if (!bk->donor && (ok = (bk->donor = malloc(sizeof *bk->donor * (size_t)nouts)) != NULL))
                for (int o = 0; o < nouts; o++)
                    bk->donor[o] = -1;
            if (ok)
                bk->donor[c->dn.d[d].out] = d;
        }
    }
    for (int i = 0; ok && i < p->nkernels; i++) {
        lower_kernel *k = &p->kernels[i];
        for (int o = 0; o < k->nouts && !k->region; o++) { /* a cat's regions: once */
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

/* Whether the device computes every pending node of the capture; if not, a
 * message naming the op and dtype. */
static bool supported(const jit_device *d, const graph_capture *cap, char *msg, size_t mcap) {
    for (int64_t i = 0; i < cap->npending; i++) {
        const graph_node *x = cap->nodes[i];
        if (!d->ops->supports(d, x->op, x->dtype)) {
            snprintf(msg, mcap, "kiln_realize: the %s device cannot compute %s with result %s",
                     d->ops->name, graph_op_name(x->op), graph_dtype_name(x->dtype));
            return false;
        }
    }
    return true;
}

/* Finds p's family and marks the numbers that have varied in it as run-time
 * sizes (*nsized of them); the first program of a family reads none. Every
 * failure here (out of memory, a text the device cannot print with every
 * candidate read at run time) only leaves p specialised. */
static void share_sizes(jit_backend *j, lower_program *p, lower_plan *plans, int64_t *nsized) {
    jit_device *d = j->dev;
    *nsized = 0;
    int64_t n = lower_sizes_values(p, plans, NULL);
    int64_t *vals = n ? malloc(sizeof *vals * (size_t)n) : NULL;
    if (!vals || !lower_sizes_mark(p, plans, NULL)) {
        free(vals);
        return;
    }
    lower_sizes_values(p, plans, vals);
    char *text = NULL, why[256];
    kiln_status st = d->ops->render(d, p, plans, &text, why, sizeof why);
    lower_sizes_clear(p);
    if (st != KILN_OK) {
        free(vals);
        return;
    }
    cache_key key = jit_text_key(d, "kiln program", text);
    free(text);
    family *f = NULL, *slot = &j->families[0];
    for (int i = 0; i < FAMILIES && !f; i++) {
        family *g = &j->families[i];
        if (g->n == n && !memcmp(&g->key, &key, sizeof key))
            f = g;
        else if (g->used < slot->used)
            slot = g;
    }
    j->builds++;
    if (!f) {
        free(slot->base);
        free(slot->varies);
        *slot = (family){.key = key, .n = n, .base = vals, .used = j->builds,
                         .varies = calloc((size_t)n, sizeof(bool))};
        if (!slot->varies) {
            free(vals);
            *slot = (family){0};
        }
        return;
    }
    f->used = j->builds;
    for (int64_t i = 0; i < n; i++)
        f->varies[i] = f->varies[i] || vals[i] != f->base[i];
    free(vals);
    lower_sizes_widen(p, plans, f->varies);
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++)
        count += f->varies[i];
    if (count && lower_sizes_mark(p, plans, f->varies))
        *nsized = count;
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
        /* KILN_CHECK_CUDA compiles this program for CUDA too, whose renderer
         * takes the two attention gradients as two kernels and reads no split
         * operand */
        bool joint = j->dev->ops->joint_attention_grads && !j->check_cuda;
        bool split = j->dev->ops->split_operands && !j->check_cuda;
        bool rows = j->dev->ops->row_tiles && !j->check_cuda;
        unsigned flags = (fuse ? LOWER_FUSE : 0u) | (joint ? LOWER_JOINT_ATTENTION_GRADS : 0u) |
                         (split ? LOWER_SPLIT_OPERANDS : 0u) | (rows ? LOWER_ROW_TILES : 0u);
        *st = lower_schedule_program(cap->ntargets, targets, flags, &c->prog, msg, mcap);
    } else {
        snprintf(msg, mcap, "kiln_realize: out of memory while scheduling");
    }
    free(targets);
    if (!c->prog) {
        compiled_free(c);
        return NULL;
    }
    *st = KILN_ERR_OOM; /* what the failures below report, unless they say otherwise */
    lower_program *p = c->prog;
    if (!(c->plans = lower_plan_program(p, &j->dev->target))) {
        compiled_free(c);
        snprintf(msg, mcap, "kiln_realize: out of memory while planning");
        return NULL;
    }
    if (j->watch.debug >= 3)
        for (int i = 0; i < p->nkernels; i++) {
            lower_print_kernel(stderr, &p->kernels[i]);
            lower_print_plan(stderr, &p->kernels[i], &c->plans[i]);
        }
    if (!(c->facts.cost = jit_prog_costs(p)) || !jit_collectives_plan(p, &c->coll)) {
        compiled_free(c);
        snprintf(msg, mcap, "kiln_realize: out of memory");
        return NULL;
    }
    if (!supported(j->dev, cap, msg, mcap)) {
        compiled_free(c);
        *st = KILN_ERR_DEVICE;
        return NULL;
    }
    if (j->check_cuda && p->nkernels > 0 && jit_cuda_check_program(p, msg, mcap) != KILN_OK) {
        compiled_free(c);
        *st = KILN_ERR_COMPILE;
        return NULL;
    }
    bool code = false;
    for (int i = 0; i < p->nkernels; i++)
        code = code || lower_kind_has_code(p->kernels[i].kind);
    if (code) {
        jit_device *d = j->dev;
        char *text = NULL;
        if (j->tune)
            jit_tune_program(d, j->cache, j->watch.debug, p, c->plans, &j->stats.tuned,
                             &j->stats.tune_hits);
        if (j->share_sizes && d->ops->run_time_sizes) {
            share_sizes(j, p, c->plans, &c->sized);
            j->stats.size_shared += c->sized > 0;
        }
        *st = d->ops->render(d, p, c->plans, &text, msg, mcap);
        if (*st != KILN_OK && c->sized) {
            /* what reads sizes at run time must never cost the program: literals */
            lower_sizes_clear(p);
            c->sized = 0;
            j->stats.size_shared--;
            *st = d->ops->render(d, p, c->plans, &text, msg, mcap);
        }
        if (*st != KILN_OK) {
            compiled_free(c);
            return NULL;
        }
        if (j->watch.debug >= 4)
            fprintf(stderr, "kiln: generated source\n%s\n", text);
        c->facts.key = jit_text_key(d, "kiln program", text);
        jit_watch_dump(&j->watch, &c->facts, p, c->plans, text, d->ops->ir_text);
        *st = find_program(j, p, c->plans, text, c->facts.key, &c->code, &c->facts.origin, msg,
                           mcap);
        free(text);
        if (*st != KILN_OK) {
            compiled_free(c);
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

/* A run's collectives that wait for their results to be needed: a kernel
 * that reads one, the release of a buffer one reads, or the run's end. Held
 * back so, consecutive collectives (a backward pass's gradient all-reduces)
 * go to dist/ together, which buckets the small ones into one message. */
typedef struct held_collectives {
    dist_world *world;
    int n;
    int *kernels;
    graph_node **ins, **outs;
} held_collectives;

/* Whether one of the nodes xs[0..nx) is a held collective's result (reads:
 * a kernel about to read them) or its source (a buffer about to go). */
static bool held_touch(const held_collectives *h, graph_node *const *nodes, int nx,
                       const int64_t *xs, bool reads) {
    for (int i = 0; i < h->n; i++)
        for (int x = 0; x < nx; x++)
            if (nodes[xs[x]] == (reads ? h->outs[i] : h->ins[i]))
                return true;
    return false;
}

static void release_after(const bound_kernel *bk, graph_node *const *nodes) {
    for (int r = 0; r < bk->nrelease; r++) {
        graph_node *x = nodes[bk->release[r]];
        graph_buffer_unref(x->buf);
        x->buf = NULL;
    }
}

static kiln_status flush_held(jit_backend *j, const compiled *c, held_collectives *h, bool hit,
                              graph_node *const *nodes, char *msg, size_t mcap) {
    if (!h->n)
        return KILN_OK;
    bool timed = jit_watch_timing(&j->watch);
    double t0 = timed ? jit_now_ms() : 0;
    kiln_status st = jit_collectives_run(&c->coll, h->world, j->dev, h->n, h->kernels, h->ins,
                                         h->outs, msg, mcap);
    double share = timed ? (jit_now_ms() - t0) / h->n : 0;
    for (int i = 0; i < h->n; i++) {
        int k = h->kernels[i];
        if (timed)
            jit_watch_launch(&j->watch, &c->facts, &c->prog->kernels[k], k, hit, t0 + i * share,
                             t0 + (i + 1) * share);
        release_after(&c->bound[k], nodes);
    }
    h->n = 0;
    return st;
}

/* Starts a run's collectives: every rank agrees on them before any runs. */
static kiln_status hold_start(const compiled *c, const graph_capture *cap, held_collectives *h,
                              char *msg, size_t mcap) {
    memset(h, 0, sizeof *h);
    if (!c->coll.n)
        return KILN_OK;
    const graph_comm *comm = graph_ctx_comm(cap->nodes[0]->g);
    if (!comm) {
        snprintf(msg, mcap, "%s: the context has not joined a job (kiln_dist_init)", c->coll.what);
        return KILN_ERR_ARG;
    }
    h->world = comm->world;
    size_t n = (size_t)c->coll.n;
    h->kernels = malloc(sizeof *h->kernels * n);
    h->ins = malloc(sizeof *h->ins * n);
    h->outs = malloc(sizeof *h->outs * n);
    if (!h->kernels || !h->ins || !h->outs) {
        snprintf(msg, mcap, "kiln_realize: out of memory");
        return KILN_ERR_OOM;
    }
    return dist_agree(h->world, c->coll.n, c->coll.descs, c->coll.what, msg, mcap);
}

/* Whether collective kernel i may compute in its source's buffer: an
 * all-reduce or broadcast (a result of the source's size) whose source
 * nothing reads after it, in memory no other node shares. A backward
 * pass's gradient all-reduces are so: each then costs no buffer and no copy
 * of its own. */
static bool consumes_input(const compiled *c, int i, graph_node *const *nodes) {
    const lower_kernel *k = &c->prog->kernels[i];
    const bound_kernel *bk = &c->bound[i];
    if (k->kind != LOWER_COLLECTIVE || c->coll.of_kernel[i] < 0)
        return false;
    const dist_desc *d = &c->coll.descs[c->coll.of_kernel[i]];
    if (d->op != DIST_ALL_REDUCE && d->op != DIST_BROADCAST)
        return false;
    const graph_buffer *b = nodes[bk->inputs[0]]->buf;
    if (!b || b->refs != 1)
        return false;
    for (int r = 0; r < bk->nrelease; r++)
        if (bk->release[r] == bk->inputs[0])
            return true;
    return false;
}

static void hold_end(held_collectives *h) {
    free(h->kernels);
    free(h->ins);
    free(h->outs);
}

/* The launches of a run that the device times (jit_device_ops.launch_times). */
typedef struct timed_run {
    bool on;
    int n, *kernels; /* the kernel of each timed launch, in order */
    double t0;       /* host time of the first launch: where the device's times start */
} timed_run;

/* After the sync: the device's times of the run's launches into the watch
 * (a device that cannot give them loses them from the profile, which
 * KILN_DEBUG says; the run itself has succeeded). */
static void device_times(jit_backend *j, const compiled *c, bool hit, timed_run *tr, bool ok) {
    jit_device *d = j->dev;
    d->time_launches = false;
    double *t = ok && tr->n ? malloc(sizeof *t * 2 * (size_t)tr->n) : NULL;
    char msg[256];
    kiln_status st = d->ops->launch_times(d, t ? tr->n : 0, t, t ? t + tr->n : NULL, msg,
                                          sizeof msg);
    if (t && st == KILN_OK)
        for (int i = 0; i < tr->n; i++) {
            int k = tr->kernels[i];
            jit_watch_launch(&j->watch, &c->facts, &c->prog->kernels[k], k, hit, tr->t0 + t[i],
                             tr->t0 + t[tr->n + i]);
        }
    else if (t && j->watch.debug >= 1)
        fprintf(stderr, "kiln: %s\n", msg);
    free(t);
    free(tr->kernels);
}

static kiln_status run(jit_backend *j, const compiled *c, const graph_capture *cap, bool hit,
                       const bool *forgets, char *msg, size_t mcap) {
    const lower_program *p = c->prog;
    jit_device *d = j->dev;
    graph_node *const *nodes = cap->nodes;
    int maxnodes = 1;
    for (int i = 0; i < p->nkernels; i++)
        if (p->kernels[i].nouts + p->kernels[i].ninputs > maxnodes)
            maxnodes = p->kernels[i].nouts + p->kernels[i].ninputs;
    graph_node *stackv[32];
    graph_node **kn = maxnodes <= 32 ? stackv : malloc(sizeof *kn * (size_t)maxnodes);
    kiln_status st = kn ? KILN_OK : KILN_ERR_OOM;
    if (!kn)
        snprintf(msg, mcap, "kiln_realize: out of memory");
    held_collectives held;
    if (st == KILN_OK)
        st = hold_start(c, cap, &held, msg, mcap);
    else
        memset(&held, 0, sizeof held);
    /* A device whose launches return before the kernel ran times them
     * itself; its figures are read after the sync. */
    timed_run tr = {.on = jit_watch_timing(&j->watch) && d->ops->launch_times};
    if (tr.on && st == KILN_OK && !(tr.kernels = malloc(sizeof *tr.kernels * (size_t)p->nkernels)))
        tr.on = false; /* the profile loses this run; the run goes on */
    d->time_launches = tr.on;
    tr.t0 = tr.on ? jit_now_ms() : 0;
    /* Outputs that take the buffer of a leaf that dies with the run; none
     * when the picking runs out of memory (each then allocates). */
    bool *pick = c->dn.n && st == KILN_OK ? malloc(sizeof *pick * (size_t)c->dn.n) : NULL;
    if (pick && !jit_donations_pick(&c->dn, cap, forgets, pick)) {
        free(pick);
        pick = NULL;
    }
    int donated = 0;
    for (int done = 0; st == KILN_OK && done < p->nkernels; done++) {
        const lower_kernel *k = &p->kernels[done];
        const bound_kernel *bk = &c->bound[done];
        if (held.n && held_touch(&held, nodes, k->ninputs, bk->inputs, true))
            st = flush_held(j, c, &held, hit, nodes, msg, mcap);
        if (st != KILN_OK)
            break;
        if (k->kind == LOWER_ALIAS) {
            nodes[bk->outs[0]]->buf = graph_buffer_ref(nodes[bk->inputs[0]]->buf);
        } else if (consumes_input(c, done, nodes)) {
            nodes[bk->outs[0]]->buf = graph_buffer_ref(nodes[bk->inputs[0]]->buf);
            held.kernels[held.n] = done;
            held.ins[held.n] = nodes[bk->inputs[0]];
            held.outs[held.n++] = nodes[bk->outs[0]];
            continue; /* as below */
        } else {
            /* a cat's later regions store into the buffer its first allocated */
            for (int o = 0; o < k->nouts && st == KILN_OK; o++) {
                graph_node *x = kn[o] = nodes[bk->outs[o]];
                size_t bytes = (size_t)graph_numel(x) * graph_dtype_size(x->dtype);
                int dd = pick && bk->donor ? bk->donor[o] : -1;
                if (dd >= 0 && pick[dd]) {
                    x->buf = graph_buffer_ref(nodes[c->dn.d[dd].leaf]->buf);
                    donated++;
                } else if (!k->region && !(x->buf = buffer_new(j, bytes))) {
                    st = oom(msg, mcap, x, bytes);
                }
            }
            if (st != KILN_OK)
                break;
            if (k->kind == LOWER_COLLECTIVE) {
                held.kernels[held.n] = done;
                held.ins[held.n] = nodes[bk->inputs[0]];
                held.outs[held.n++] = nodes[bk->outs[0]];
                continue; /* its buffers are released when it has run */
            }
            for (int i = 0; i < k->ninputs; i++)
                kn[k->nouts + i] = nodes[bk->inputs[i]];
            if (k->numel > 0) {
                bool timed = jit_watch_timing(&j->watch) && !tr.on;
                double t0 = timed ? jit_now_ms() : 0;
                st = d->ops->launch(d, c->code, done, k, kn, msg, mcap);
                j->stats.kernels++;
                if (timed)
                    jit_watch_launch(&j->watch, &c->facts, k, done, hit, t0, jit_now_ms());
                if (tr.on && st == KILN_OK && lower_kind_has_code(k->kind))
                    tr.kernels[tr.n++] = done;
            }
        }
        if (st == KILN_OK && held.n && held_touch(&held, nodes, bk->nrelease, bk->release, false))
            st = flush_held(j, c, &held, hit, nodes, msg, mcap);
        release_after(bk, nodes);
    }
    if (st == KILN_OK)
        st = flush_held(j, c, &held, hit, nodes, msg, mcap);
    hold_end(&held);
    if (kn != stackv)
        free(kn);
    if (st == KILN_OK)
        st = d->ops->sync(d, msg, mcap);
    if (tr.on)
        device_times(j, c, hit, &tr, st == KILN_OK);
    free(pick);
    j->stats.buffers_donated += donated;
    /* A half-run program leaves nothing behind: its outputs so far go.
     * Unless a leaf's buffer was donated: the leaf's old value is gone, and
     * the outputs computed so far are what a second attempt starts from
     * (every kernel that read the leaf has run: its last reader donated). */
    for (int i = 0; st != KILN_OK && !donated && i < p->nkernels; i++)
        for (int o = 0; o < p->kernels[i].nouts; o++) {
            graph_node *x = nodes[c->bound[i].outs[o]];
            graph_buffer_unref(x->buf);
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

/* For the debug line: a program that reads sizes at run time says so. */
static const char *sized_note(const compiled *c, bool hit, char *buf, size_t len) {
    if (hit || !c->sized)
        return "";
    snprintf(buf, len, "; %lld numbers read at run time, so graphs that differ only in them "
             "share this program (code from %s)", (long long)c->sized,
             c->facts.origin ? c->facts.origin : "nowhere");
    return buf;
}

kiln_status jit_realize(jit_backend *j, int n, graph_node *const *nodes, const bool *forgets,
                        bool fuse, char *msg, size_t mcap) {
    char note[200];
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
    compiled *c = jit_graph_cache_get(j->graphs, key);
    bool hit = c && c->siglen == cap.siglen && !memcmp(c->sig, cap.sig, cap.siglen);
    bool kept = hit;
    kiln_status st = KILN_OK;
    if (hit) {
        j->stats.graph_hits++;
    } else {
        if (j->watch.debug >= 1) {
            char why[512];
            jit_why_miss(&j->why, &cap, j->stats.syncs + 1, why, sizeof why);
            fprintf(stderr, "kiln: sync %lld missed the graph cache: %s\n",
                    (long long)j->stats.syncs + 1, why);
        }
        compiled *built = build(j, &cap, fuse, &st, msg, mcap);
        /* A colliding key keeps its first program; this one runs once. */
        kept = built && !c && jit_graph_cache_put(j->graphs, key, built);
        c = built;
    }
    double t1 = jit_now_ms();
    if (c) {
        if (!hit)
            c->facts.build_ms = t1 - t0;
        j->stats.syncs++;
        /* which capture nodes drop their sources after the run */
        bool *fg = NULL;
        for (int r = 0; forgets && c->dn.n && r < n; r++)
            if (forgets[r] && (fg || (fg = calloc((size_t)cap.npending + (size_t)cap.nleaves,
                                                   sizeof *fg))))
                fg[cap.targets[r]] = true;
        st = run(j, c, &cap, hit, fg, msg, mcap);
        free(fg);
        double t2 = jit_now_ms();
        jit_watch_sync(&j->watch, t0, t1, t2, hit, c->prog->nkernels, cap.npending);
        if (j->watch.debug >= 1)
            fprintf(stderr,
                    "kiln: sync %lld: %lld nodes captured, %d kernels, graph cache %s, "
                    "%s %.3f ms, run %.3f ms%s\n",
                    (long long)j->stats.syncs, (long long)cap.npending, c->prog->nkernels,
                    hit ? "hit" : "miss", hit ? "lookup" : "compile", t1 - t0, t2 - t1,
                    sized_note(c, hit, note, sizeof note));
        if (!kept)
            compiled_free(c);
    }
    graph_capture_free(&cap);
    return st;
}
