/* profile.c — watching programs run: the per-launch debug lines (KILN_DEBUG
 * 2), the profiler (kernels aggregated by their code, with FLOPs and bytes
 * counted from the IR once per compiled program, against the machine's
 * measured limits) and its reports — a table, JSON, a Chrome trace — and
 * KILN_DUMP's files.
 *
 * A kernel's share of the machine is the larger of its achieved bandwidth
 * over the triad's and its achieved GFLOP/s over its compute peak: its time
 * at the roofline is max(bytes/bandwidth, flops/peak), and that over its
 * measured time is the same number. The limit with the larger term binds.
 * The peak is the FMA lanes', except for a product the device runs on
 * other units (a GPU's tensor cores: jit_device_ops.product_peak), which is
 * rated against theirs. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "jit/device.h"
#include "jit/profile.h"

/* Launches kept for the trace; later ones are still aggregated. */
#define PROF_MAX_EVENTS ((int64_t)1 << 20)

typedef struct prof_kernel {
    cache_key key; /* the program's code, and */
    int index;     /* the kernel's place in it */
    char name[96], fused[160], grid[64];
    const char *origin;
    double flops, bytes, compile_ms;
    double peak; /* GFLOP/s of the units its products run on; 0: the machine's gflops */
    int64_t launches, graph_hits;
    double total_ms, min_ms, max_ms;
} prof_kernel;

typedef struct prof_event {
    int kernel; /* -1: a sync */
    bool hit;
    int nkernels;
    int64_t nodes;
    double t0, t1, t2; /* ms since the profile began; t1 ends a sync's build */
} prof_event;

struct jit_prof {
    double begin_ms;
    prof_kernel *kernels;
    int nkernels, capkernels;
    int *table; /* open addressing over kernels, -1 empty, a power of two */
    int tcap;
    prof_event *events;
    int64_t nevents, capevents, dropped;
};

double jit_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void prof_free(jit_prof *p) {
    if (!p)
        return;
    free(p->kernels);
    free(p->table);
    free(p->events);
    free(p);
}

static jit_prof *prof_new(void) {
    jit_prof *p = calloc(1, sizeof *p);
    if (p)
        p->begin_ms = jit_now_ms();
    return p;
}

static kiln_status write_trace(jit_watch *w, const char *path, char *msg, size_t cap);

/* ---- the watch ---- */

static char *env_dup(const char *name) {
    const char *v = getenv(name);
    return v && *v ? strdup(v) : NULL;
}

void jit_watch_init(jit_watch *w, cache *c, int nthreads) {
    memset(w, 0, sizeof *w);
    w->cache = c;
    w->nthreads = nthreads;
    const char *dbg = getenv("KILN_DEBUG");
    w->debug = dbg ? atoi(dbg) : 0; /* 0 to 4, as kiln_ctx_set_debug clamps it */
    w->debug = w->debug < 0 ? 0 : w->debug > 4 ? 4 : w->debug;
    w->trace_path = env_dup("KILN_PROFILE");
    w->dump_dir = env_dup("KILN_DUMP");
    if (w->trace_path && (w->prof = prof_new()))
        w->recording = true;
}

void jit_watch_fini(jit_watch *w) {
    if (w->trace_path && w->prof) {
        char msg[512];
        if (write_trace(w, w->trace_path, msg, sizeof msg) != KILN_OK)
            fprintf(stderr, "kiln: KILN_PROFILE: %s\n", msg);
    }
    prof_free(w->prof);
    free(w->trace_path);
    free(w->dump_dir);
}

/* ---- what a kernel costs ---- */

static double node_bytes(const graph_node *n) {
    return (double)graph_numel(n) * (double)graph_dtype_size(n->dtype);
}

static jit_kernel_cost kernel_cost(const lower_kernel *k) {
    jit_kernel_cost c = {0, 0, -1};
    if (!lower_kind_has_code(k->kind))
        return c;
    c.product_dtype = lower_mm_tensor_dtype(k);
    /* a scatter's inner instructions run in its copy pass or its scatter
     * passes: counted over the longer */
    double outer = (double)k->numel,
           inner = outer * (double)(k->snumel > k->rnumel ? k->snumel : k->rnumel);
    for (int i = 0; i < k->nins; i++) {
        const lower_ins *x = &k->ins[i];
        if ((x->op == UOP_PRIM && x->prim != PRIM_CAST && x->prim != PRIM_BITCAST) ||
            (x->op == UOP_ALU && x->gop != GRAPH_CAST && x->gop != GRAPH_BITCAST) ||
            x->op == UOP_REDUCE)
            c.flops += x->inner || x->op == UOP_REDUCE ? inner : outer;
    }
    if (k->kind == LOWER_MATMUL) {
        double batch = 1;
        for (int d = 0; d < k->nbatch; d++)
            batch *= (double)k->batch[d];
        c.flops += 2.0 * (double)k->n * (double)k->k * (double)k->m * batch;
    }
    if (k->kind == LOWER_ATTENTION) {
        /* the products a kernel computes, each 2 l s width flops per
         * batch matrix (half under a causal mask): the forward's q k^T and
         * p v, dq's two score products and ds k, dkv's two, p^T go and
         * ds^T q (and with dq joined to it, ds k as well) */
        const lower_attention *a = &k->att;
        double batch = 1;
        for (int d = 0; d < k->nbatch; d++)
            batch *= (double)k->batch[d];
        double widths = a->op == GRAPH_ATTENTION      ? (double)(a->d + a->dv)
                        : a->op == GRAPH_ATTENTION_DQ ? (double)(2 * a->d + a->dv)
                        : lower_joint_attention(k)    ? (double)(3 * a->d + 2 * a->dv)
                                                      : (double)(2 * a->d + 2 * a->dv);
        c.flops = 2.0 * batch * (double)a->l * (double)a->s * widths * (a->causal ? 0.5 : 1);
    }
    for (int o = 0; o < k->nouts; o++) /* a cat's region kernel writes its region alone */
        c.bytes += k->kind == LOWER_ELEMENTWISE
                       ? (double)k->numel * (double)graph_dtype_size(k->outs[o]->dtype)
                       : node_bytes(k->outs[o]);
    for (int in = 0; in < k->ninputs; in++) {
        int slot = k->nouts + in;
        double whole = (double)graph_numel(k->inputs[in]), touched = 0;
        if ((k->kind == LOWER_MATMUL && (k->a.buf == slot || k->b.buf == slot)) ||
            k->kind == LOWER_ATTENTION)
            touched = whole;
        for (int i = 0; i < k->nins; i++) {
            const lower_ins *x = &k->ins[i];
            double e = x->inner ? inner : outer;
            if (x->op == UOP_LOAD && x->buf == slot && e > touched)
                touched = e;
        }
        c.bytes += (touched < whole ? touched : whole) *
                   (double)graph_dtype_size(k->inputs[in]->dtype);
    }
    return c;
}

jit_kernel_cost *jit_prog_costs(const lower_program *p) {
    jit_kernel_cost *c = malloc(sizeof *c * (size_t)(p->nkernels ? p->nkernels : 1));
    for (int i = 0; c && i < p->nkernels; i++)
        c[i] = kernel_cost(&p->kernels[i]);
    return c;
}

static void kernel_grid(const lower_kernel *k, char *dst, size_t cap) {
    if (k->kind == LOWER_MATMUL) {
        double batch = 1;
        for (int d = 0; d < k->nbatch; d++)
            batch *= (double)k->batch[d];
        int len = snprintf(dst, cap, "%lldx%lldx%lld", (long long)k->n, (long long)k->k,
                           (long long)k->m);
        if (batch != 1 && len > 0 && (size_t)len < cap)
            snprintf(dst + len, cap - (size_t)len, " batch %.0f", batch);
    } else if (k->kind == LOWER_ATTENTION) {
        snprintf(dst, cap, "%lldx%lld d%lld", (long long)k->att.l, (long long)k->att.s,
                 (long long)k->att.d);
    } else if (k->kind == LOWER_REDUCE) {
        snprintf(dst, cap, "%lld rows x %lld", (long long)k->numel, (long long)k->rnumel);
    } else if (k->kind == LOWER_SCATTER) {
        snprintf(dst, cap, "%lld rows x %lld places, %lld sources", (long long)k->numel,
                 (long long)k->rnumel, (long long)k->snumel);
    } else if (!lower_kind_has_code(k->kind)) {
        snprintf(dst, cap, "none");
    } else {
        long long tile = k->tile > 0 ? k->tile : 1;
        snprintf(dst, cap, "%lldx%lld", ((long long)k->numel + tile - 1) / tile, tile);
    }
}

/* ---- the machine's share ---- */

typedef struct share {
    double gflops, gbps, pct;
    const char *bound;
} share;

/* peak: the kernel's compute peak, 0 for the machine's. */
static share share_of(double flops, double bytes, double ms, const kiln_machine *m,
                      double peak) {
    share s = {0, 0, 0, ""};
    if (ms <= 0)
        return s;
    s.gflops = flops / ms * 1e-6;
    s.gbps = bytes / ms * 1e-6;
    if (m) {
        double top = peak > 0 ? peak : m->gflops;
        double bw = s.gbps / m->gbps, fl = s.gflops / top;
        s.pct = 100.0 * (bw > fl ? bw : fl);
        s.bound = bytes / m->gbps >= flops / top ? "memory" : "compute";
    }
    return s;
}

/* The compute peak of a kernel costing c: that of the units the device
 * runs its product on, where they are not the FMA lanes; else 0. */
static double peak_of(const jit_watch *w, const jit_kernel_cost *c) {
    jit_device *d = w->dev;
    if (!c || c->product_dtype < 0 || !d || !d->ops->limits || !d->ops->product_peak)
        return 0;
    return d->ops->product_peak(d, (kiln_dtype)c->product_dtype);
}

/* ---- hooks ---- */

static prof_kernel *find_kernel(const jit_watch *w, const jit_prog_facts *f,
                                const lower_kernel *k, int index) {
    jit_prof *p = w->prof;
    uint64_t h = (f->key.lo ^ (f->key.hi * 0x9E3779B97F4A7C15ull)) + (uint64_t)index * 0xBF58476D1CE4E5B9ull;
    for (size_t at = p->tcap ? h & (size_t)(p->tcap - 1) : 0; p->tcap && p->table[at] >= 0;
         at = (at + 1) & (size_t)(p->tcap - 1)) {
        prof_kernel *e = &p->kernels[p->table[at]];
        if (e->index == index && e->key.hi == f->key.hi && e->key.lo == f->key.lo)
            return e;
    }
    if ((p->nkernels + 1) * 2 > p->tcap) {
        int cap = p->tcap ? p->tcap * 2 : 64;
        int *t = malloc(sizeof *t * (size_t)cap);
        if (!t)
            return NULL;
        memset(t, 0xff, sizeof *t * (size_t)cap);
        for (int i = 0; i < p->nkernels; i++) {
            prof_kernel *e = &p->kernels[i];
            uint64_t eh = (e->key.lo ^ (e->key.hi * 0x9E3779B97F4A7C15ull)) +
                          (uint64_t)e->index * 0xBF58476D1CE4E5B9ull;
            size_t at = eh & (size_t)(cap - 1);
            while (t[at] >= 0)
                at = (at + 1) & (size_t)(cap - 1);
            t[at] = i;
        }
        free(p->table);
        p->table = t;
        p->tcap = cap;
    }
    if (p->nkernels == p->capkernels) {
        int cap = p->capkernels ? p->capkernels * 2 : 32;
        prof_kernel *ks = realloc(p->kernels, sizeof *ks * (size_t)cap);
        if (!ks)
            return NULL;
        p->kernels = ks;
        p->capkernels = cap;
    }
    prof_kernel *e = &p->kernels[p->nkernels];
    *e = (prof_kernel){.key = f->key, .index = index, .origin = f->origin,
                       .compile_ms = f->build_ms,
                       .peak = peak_of(w, f->cost ? &f->cost[index] : NULL)};
    snprintf(e->name, sizeof e->name, "%s", k->name);
    snprintf(e->fused, sizeof e->fused, "%s", k->fused);
    kernel_grid(k, e->grid, sizeof e->grid);
    if (f->cost) {
        e->flops = f->cost[index].flops;
        e->bytes = f->cost[index].bytes;
    }
    size_t at = h & (size_t)(p->tcap - 1);
    while (p->table[at] >= 0)
        at = (at + 1) & (size_t)(p->tcap - 1);
    p->table[at] = p->nkernels;
    return &p->kernels[p->nkernels++];
}

/* Adds an event to the trace; past the bound it is counted and dropped. */
static void add_event(jit_prof *p, prof_event ev) {
    if (p->nevents == p->capevents) {
        int64_t cap = p->capevents ? p->capevents * 2 : 1024;
        prof_event *e = cap <= PROF_MAX_EVENTS ? realloc(p->events, sizeof *e * (size_t)cap) : NULL;
        if (!e) {
            p->dropped++;
            return;
        }
        p->events = e;
        p->capevents = cap;
    }
    p->events[p->nevents++] = ev;
}

void jit_watch_launch(jit_watch *w, const jit_prog_facts *f, const lower_kernel *k, int i,
                      bool graph_hit, double t0, double t1) {
    double ms = t1 - t0;
    if (w->debug >= 2) {
        char grid[64], msg[256];
        kernel_grid(k, grid, sizeof grid);
        kiln_machine m;
        bool have = jit_machine_get(w, &m, msg, sizeof msg) == KILN_OK;
        jit_kernel_cost c = f->cost ? f->cost[i] : (jit_kernel_cost){0, 0, -1};
        share s = share_of(c.flops, c.bytes, ms, have ? &m : NULL, peak_of(w, &c));
        fprintf(stderr, "kiln:   %-40s %-20s %10.3f ms %9.2f GFLOP/s %8.2f GB/s %5.1f%% of %s\n",
                k->name, grid, ms, s.gflops, s.gbps, s.pct, have ? s.bound : "(limits unknown)");
    }
    jit_prof *p = w->prof;
    if (!p || !w->recording)
        return;
    prof_kernel *e = find_kernel(w, f, k, i);
    if (!e)
        return;
    if (e->launches == 0 || ms < e->min_ms)
        e->min_ms = ms;
    if (ms > e->max_ms)
        e->max_ms = ms;
    e->launches++;
    e->graph_hits += graph_hit;
    e->total_ms += ms;
    add_event(p, (prof_event){.kernel = (int)(e - p->kernels), .hit = graph_hit,
                              .t0 = t0 - p->begin_ms, .t1 = t1 - p->begin_ms});
}

void jit_watch_sync(jit_watch *w, double t0, double t1, double t2, bool graph_hit,
                    int nkernels, int64_t nodes) {
    jit_prof *p = w->prof;
    if (!p || !w->recording)
        return;
    add_event(p, (prof_event){.kernel = -1, .hit = graph_hit, .nkernels = nkernels,
                              .nodes = nodes, .t0 = t0 - p->begin_ms, .t1 = t1 - p->begin_ms,
                              .t2 = t2 - p->begin_ms});
}

/* ---- KILN_DUMP ---- */

static bool write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

void jit_watch_dump(jit_watch *w, const jit_prog_facts *f, const lower_program *p,
                    const lower_plan *plans, const char *src,
                    char *(*ir_text)(const lower_program *p, const lower_plan *plans, char *msg,
                                     size_t cap)) {
    if (!w->dump_dir)
        return;
    char hex[33], path[4096];
    cache_key_hex(f->key, hex);
    if (mkdir(w->dump_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "kiln: KILN_DUMP: cannot create %s: %s\n", w->dump_dir, strerror(errno));
        return;
    }
    bool ok = true;
    snprintf(path, sizeof path, "%s/%s.c", w->dump_dir, hex);
    ok = write_text(path, src);
    snprintf(path, sizeof path, "%s/%s.ir", w->dump_dir, hex);
    FILE *ir = ok ? fopen(path, "w") : NULL;
    if (ir) {
        for (int i = 0; i < p->nkernels; i++) {
            lower_print_kernel(ir, &p->kernels[i]);
            lower_print_plan(ir, &p->kernels[i], &plans[i]);
        }
        ok = fclose(ir) == 0;
    } else {
        ok = false;
    }
    if (ok && ir_text) {
        char msg[256];
        char *text = ir_text(p, plans, msg, sizeof msg);
        snprintf(path, sizeof path, "%s/%s.ll", w->dump_dir, hex);
        ok = text && write_text(path, text);
        free(text);
    }
    if (!ok)
        fprintf(stderr, "kiln: KILN_DUMP: cannot write %s\n", path);
}

/* ---- reports ---- */

static jit_watch *watch_of(jit_backend *j) { return j ? jit_backend_watch(j) : NULL; }

void jit_set_debug(jit_backend *j, int level) { jit_backend_watch(j)->debug = level; }
int jit_debug(const jit_backend *j) { return jit_backend_watch((jit_backend *)j)->debug; }

kiln_status jit_machine_limits(jit_backend *j, kiln_machine *m, char *msg, size_t cap) {
    return jit_machine_get(jit_backend_watch(j), m, msg, cap);
}

kiln_status jit_machine_remeasure(jit_backend *j, kiln_machine *m, char *msg, size_t cap) {
    return jit_machine_measure(jit_backend_watch(j), m, msg, cap);
}

kiln_status jit_profile_begin(jit_backend *j, char *msg, size_t cap) {
    jit_watch *w = jit_backend_watch(j);
    jit_prof *p = prof_new();
    if (!p) {
        snprintf(msg, cap, "kiln_profile_begin: out of memory");
        return KILN_ERR_OOM;
    }
    prof_free(w->prof);
    w->prof = p;
    w->recording = true;
    return KILN_OK;
}

void jit_profile_end(jit_backend *j) { jit_backend_watch(j)->recording = false; }

int jit_profile_count(jit_backend *j) {
    jit_prof *p = jit_backend_watch(j)->prof;
    return p ? p->nkernels : 0;
}

static kiln_status limits(jit_watch *w, kiln_machine *m, char *msg, size_t cap) {
    return w ? jit_machine_get(w, m, msg, cap) : KILN_ERR_ARG;
}

static kiln_kernel_profile report_of(const prof_kernel *e, const kiln_machine *m) {
    double mean = e->launches ? e->total_ms / (double)e->launches : 0;
    share s = share_of(e->flops, e->bytes, mean, m, e->peak);
    return (kiln_kernel_profile){
        .name = e->name, .fused = e->fused, .grid = e->grid, .code = e->origin,
        .bound = s.bound, .launches = e->launches, .graph_hits = e->graph_hits,
        .total_ms = e->total_ms, .mean_ms = mean, .min_ms = e->min_ms, .max_ms = e->max_ms,
        .flops = e->flops, .bytes = e->bytes, .gflops = s.gflops, .gbps = s.gbps,
        .pct_of_limit = s.pct, .build_ms = e->compile_ms};
}

kiln_status jit_profile_kernel(jit_backend *j, int i, kiln_kernel_profile *r, char *msg,
                               size_t cap) {
    jit_watch *w = jit_backend_watch(j);
    if (!w->prof || i < 0 || i >= w->prof->nkernels) {
        snprintf(msg, cap, "kiln_profile_kernel: no kernel %d in a profile of %d", i,
                 w->prof ? w->prof->nkernels : 0);
        return KILN_ERR_ARG;
    }
    kiln_machine m;
    kiln_status st = jit_machine_get(w, &m, msg, cap);
    *r = report_of(&w->prof->kernels[i], st == KILN_OK ? &m : NULL);
    return st;
}

kiln_status jit_profile_print(jit_backend *j, FILE *f, char *msg, size_t cap) {
    jit_watch *w = watch_of(j);
    jit_prof *p = w ? w->prof : NULL;
    kiln_machine m;
    bool have = p && p->nkernels && limits(w, &m, msg, cap) == KILN_OK;
    fprintf(f, "kiln profile: %d kernels", p ? p->nkernels : 0);
    if (have)
        fprintf(f, "; machine: %s, %d threads, %.1f GB/s, %.1f GFLOP/s", m.cpu, m.threads, m.gbps,
                m.gflops);
    fprintf(f, "\n%-44s %8s %11s %10s %10s %10s %9s %8s %7s %10s  %-9s %s\n", "kernel",
            "launches", "total ms", "mean ms", "MFLOP", "MB", "GFLOP/s", "GB/s", "limit%",
            "build ms", "code", "fuses");
    for (int i = 0; p && i < p->nkernels; i++) {
        const prof_kernel *e = &p->kernels[i];
        kiln_kernel_profile r = report_of(e, have ? &m : NULL);
        char pct[16] = "-";
        if (have)
            snprintf(pct, sizeof pct, "%.1f%c", r.pct_of_limit, r.bound[0]);
        fprintf(f, "%-44s %8lld %11.3f %10.4f %10.3f %10.3f %9.2f %8.2f %7s %10.1f  %-9s %s\n",
                e->name, (long long)e->launches, e->total_ms, r.mean_ms, e->flops * 1e-6,
                e->bytes * 1e-6, r.gflops, r.gbps, pct, e->compile_ms, e->origin, e->fused);
    }
    if (have)
        fprintf(f, "limit%%: share of the binding limit (m: memory bandwidth, c: compute peak, "
                   "a product's on tensor cores theirs)\n");
    return ferror(f) ? KILN_ERR_IO : KILN_OK;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* The kernel's figures as JSON members, without braces. */
static void json_kernel(FILE *f, const prof_kernel *e, const kiln_machine *m) {
    kiln_kernel_profile r = report_of(e, m);
    fprintf(f, "\"name\":");
    json_str(f, e->name);
    fprintf(f, ",\"fused\":");
    json_str(f, e->fused);
    fprintf(f, ",\"grid\":");
    json_str(f, e->grid);
    fprintf(f, ",\"launches\":%lld,\"graph_hits\":%lld,\"total_ms\":%.6f,\"mean_ms\":%.6f,"
               "\"min_ms\":%.6f,\"max_ms\":%.6f,\"flops\":%.17g,\"bytes\":%.17g,\"gflops\":%.6g,"
               "\"gbps\":%.6g,\"build_ms\":%.6f,\"code\":\"%s\"",
            (long long)e->launches, (long long)e->graph_hits, e->total_ms, r.mean_ms, e->min_ms,
            e->max_ms, e->flops, e->bytes, r.gflops, r.gbps, e->compile_ms, e->origin);
    if (m)
        fprintf(f, ",\"pct_of_limit\":%.6g,\"bound\":\"%s\"", r.pct_of_limit, r.bound);
}

static FILE *open_out(const char *path, const char *who, char *msg, size_t cap) {
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f)
        snprintf(msg, cap, "%s: cannot write %s: %s", who, path ? path : "(null)",
                 path ? strerror(errno) : "no path");
    return f;
}

static kiln_status close_out(FILE *f, const char *path, const char *who, char *msg, size_t cap) {
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        snprintf(msg, cap, "%s: cannot write %s", who, path);
        return KILN_ERR_IO;
    }
    return KILN_OK;
}

kiln_status jit_profile_write_json(jit_backend *j, const char *path, char *msg, size_t cap) {
    jit_watch *w = watch_of(j);
    jit_prof *p = w ? w->prof : NULL;
    FILE *f = open_out(path, "kiln_profile_write_json", msg, cap);
    if (!f)
        return KILN_ERR_IO;
    kiln_machine m;
    char why[256];
    bool have = p && p->nkernels && limits(w, &m, why, sizeof why) == KILN_OK;
    fprintf(f, "{\"machine\":");
    if (have) {
        fprintf(f, "{\"cpu\":");
        json_str(f, m.cpu);
        fprintf(f, ",\"threads\":%d,\"gbps\":%.6g,\"gflops\":%.6g}", m.threads, m.gbps, m.gflops);
    } else {
        fprintf(f, "null");
    }
    fprintf(f, ",\"kernels\":[");
    for (int i = 0; p && i < p->nkernels; i++) {
        fprintf(f, "%s\n{", i ? "," : "");
        json_kernel(f, &p->kernels[i], have ? &m : NULL);
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
    return close_out(f, path, "kiln_profile_write_json", msg, cap);
}

/* Chrome's trace event format: complete events ("ph":"X") with times in µs,
 * syncs enclosing their build and their kernels on one thread. */
static kiln_status write_trace(jit_watch *w, const char *path, char *msg, size_t cap) {
    jit_prof *p = w ? w->prof : NULL;
    FILE *f = open_out(path, "kiln_profile_write_trace", msg, cap);
    if (!f)
        return KILN_ERR_IO;
    kiln_machine m;
    char why[256];
    bool have = p && p->nkernels && limits(w, &m, why, sizeof why) == KILN_OK;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
               "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,"
               "\"args\":{\"name\":\"kiln\"}},\n"
               "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,"
               "\"args\":{\"name\":\"syncs and kernels\"}}");
    for (int64_t i = 0; p && i < p->nevents; i++) {
        const prof_event *ev = &p->events[i];
        if (ev->kernel < 0) {
            fprintf(f, ",\n{\"name\":\"sync\",\"cat\":\"sync\",\"ph\":\"X\",\"pid\":1,"
                       "\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"graph_cache\":\"%s\","
                       "\"kernels\":%d,\"nodes\":%lld}}",
                    ev->t0 * 1e3, (ev->t2 - ev->t0) * 1e3, ev->hit ? "hit" : "miss", ev->nkernels,
                    (long long)ev->nodes);
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"build\",\"ph\":\"X\",\"pid\":1,"
                       "\"tid\":1,\"ts\":%.3f,\"dur\":%.3f}",
                    ev->hit ? "lookup" : "compile", ev->t0 * 1e3, (ev->t1 - ev->t0) * 1e3);
            continue;
        }
        const prof_kernel *e = &p->kernels[ev->kernel];
        fprintf(f, ",\n{\"name\":");
        json_str(f, e->name);
        fprintf(f, ",\"cat\":\"kernel\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,"
                   "\"dur\":%.3f,\"args\":{",
                ev->t0 * 1e3, (ev->t1 - ev->t0) * 1e3);
        share s = share_of(e->flops, e->bytes, ev->t1 - ev->t0, have ? &m : NULL, e->peak);
        fprintf(f, "\"fused\":");
        json_str(f, e->fused);
        fprintf(f, ",\"grid\":");
        json_str(f, e->grid);
        fprintf(f, ",\"flops\":%.17g,\"bytes\":%.17g,\"gflops\":%.6g,\"gbps\":%.6g",
                e->flops, e->bytes, s.gflops, s.gbps);
        if (have)
            fprintf(f, ",\"pct_of_limit\":%.6g,\"bound\":\"%s\"", s.pct, s.bound);
        fprintf(f, "}}");
    }
    fprintf(f, "\n]");
    if (p && p->dropped)
        fprintf(f, ",\"otherData\":{\"dropped_events\":%lld}", (long long)p->dropped);
    fprintf(f, "}\n");
    return close_out(f, path, "kiln_profile_write_trace", msg, cap);
}

kiln_status jit_profile_write_trace(jit_backend *j, const char *path, char *msg, size_t cap) {
    return write_trace(watch_of(j), path, msg, cap);
}
