/* fake_cuda.c — a stand-in for the CUDA driver (libcuda.so.1) with no GPU
 * behind it, so that CI can test the CUDA device's host side: discovery,
 * contexts and streams, the caching allocator, copies and their staging,
 * out-of-memory handling and how failures are reported. Loaded through
 * KILN_CUDA_DRIVER by tests/cuda_device_test.c only.
 *
 * It reports one device of compute capability 9.0 with FAKE_CUDA_MEM bytes
 * (default 64 MiB); device memory is host memory from malloc, copies are
 * memcpy and run at once (so every stream is always idle). Module loads
 * fail with CUDA_ERROR_NO_BINARY_FOR_GPU: kernels cannot run here, and the
 * test checks that this is an error that names what failed and leaves the
 * context usable. Counters of calls are exported for the test to read.
 *
 * With FAKE_CUDA_KERNELS=1 modules load and launches succeed without
 * computing anything (the outputs keep whatever the memory held), for tests
 * of what the host does around kernels: the device's clock, which events
 * read, advances FAKE_CUDA_KERNEL_US (default 250) microseconds per launch
 * and 2n / FAKE_CUDA_GBPS (default 2000) ns per device-to-device copy of n
 * bytes, so that a profile timed by events has known figures; with
 * FAKE_CUDA_LOG=1 every kernel that runs is logged with its arguments
 * (fake_cuda_log), and CUDA graphs
 * (chains of kernel nodes, rebindable) run their nodes the same way; the
 * last kernel's grid and block are kept (fake_cuda_last_grid, _block), and
 * the text of the last module loaded (fake_cuda_module_text). The
 * device has 132 multiprocessors at 1.98 GHz.
 *
 * FAKE_CUDA_DEVICES=n reports n such devices (0: a driver without a GPU),
 * FAKE_CUDA_CC=xy compute capability x.y instead of 9.0, so that the
 * refusals of a machine kiln cannot use are tested too. */
#define _GNU_SOURCE /* strdup, MAP_ANONYMOUS, MAP_NORESERVE */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
enum {
    OK = 0,
    ERR_INVALID_VALUE = 1,
    ERR_OUT_OF_MEMORY = 2,
    ERR_INVALID_DEVICE = 101,
    ERR_NO_BINARY = 209,
};

/* Read by the test through dlsym on the same handle kiln loaded. */
long fake_cuda_allocs, fake_cuda_frees, fake_cuda_failed_allocs, fake_cuda_module_loads;
size_t fake_cuda_in_use;

static size_t capacity(void) {
    const char *e = getenv("FAKE_CUDA_MEM");
    return e && *e ? (size_t)strtoull(e, NULL, 10) : (size_t)64 << 20;
}

/* Device memory is one arena of capacity() bytes, allocated first fit, so
 * that the same sequence of allocations gets the same addresses (offsets)
 * in every context: kernels' arguments are logged as offsets, and two runs
 * of a program, one through graphs and one without, compare equal. */
typedef struct block {
    size_t at, n;
} block;
static char *arena;
static block *blocks; /* in use, by address */
static int nblocks, capblocks;

static void *take(size_t n) {
    n = (n + 255) & ~(size_t)255;
    if (!arena) {
        arena = mmap(NULL, capacity(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (arena == MAP_FAILED) {
            arena = NULL;
            return NULL;
        }
    }
    size_t at = 0;
    int i = 0;
    for (; i < nblocks && blocks[i].at < at + n; i++)
        at = blocks[i].at + blocks[i].n;
    if (at + n > capacity() || n == 0) {
        fake_cuda_failed_allocs++;
        return NULL;
    }
    if (nblocks == capblocks) {
        int c = capblocks ? 2 * capblocks : 64;
        block *b = realloc(blocks, sizeof *b * (size_t)c);
        if (!b)
            return NULL;
        blocks = b;
        capblocks = c;
    }
    memmove(blocks + i + 1, blocks + i, sizeof *blocks * (size_t)(nblocks - i));
    blocks[i] = (block){at, n};
    nblocks++;
    fake_cuda_in_use += n;
    return arena + at;
}

static void give(void *q) {
    for (int i = 0; q && i < nblocks; i++)
        if (arena + blocks[i].at == (char *)q) {
            fake_cuda_in_use -= blocks[i].n;
            memmove(blocks + i, blocks + i + 1, sizeof *blocks * (size_t)(nblocks - i - 1));
            nblocks--;
            return;
        }
}

/* Every kernel that runs (launched, or a node of a launched graph), a line
 * "name arg arg ...", each argument as its offset in the arena (or "host"). */
char *fake_cuda_log;
size_t fake_cuda_log_len;
static size_t log_cap;

void fake_cuda_log_reset(void) {
    fake_cuda_log_len = 0;
    if (fake_cuda_log)
        fake_cuda_log[0] = 0;
}

static void log_text(const char *t) {
    size_t n = strlen(t);
    if (fake_cuda_log_len + n + 1 > log_cap) {
        size_t c = 2 * (fake_cuda_log_len + n + 1) + 4096;
        char *l = realloc(fake_cuda_log, c);
        if (!l)
            return;
        fake_cuda_log = l;
        log_cap = c;
    }
    memcpy(fake_cuda_log + fake_cuda_log_len, t, n + 1);
    fake_cuda_log_len += n;
}

CUresult cuInit(unsigned flags) { return flags == 0 ? OK : ERR_INVALID_VALUE; }

CUresult cuGetErrorString(CUresult r, const char **s) {
    switch (r) {
    case OK: *s = "no error"; return OK;
    case ERR_INVALID_VALUE: *s = "invalid argument"; return OK;
    case ERR_OUT_OF_MEMORY: *s = "out of memory"; return OK;
    case ERR_INVALID_DEVICE: *s = "invalid device ordinal"; return OK;
    case ERR_NO_BINARY: *s = "no kernel image is available for execution on the device"; return OK;
    }
    *s = NULL;
    return ERR_INVALID_VALUE;
}

CUresult cuDriverGetVersion(int *v) { return *v = 13000, OK; }
static double env_or(const char *name, double dflt) {
    const char *e = getenv(name);
    return e && *e ? strtod(e, NULL) : dflt;
}

/* FAKE_CUDA_DEVICES (default 1) devices, all alike: 0 is a machine whose
 * driver loads but finds no GPU. */
static int device_count(void) { return (int)env_or("FAKE_CUDA_DEVICES", 1); }

CUresult cuDeviceGetCount(int *n) { return *n = device_count(), OK; }
CUresult cuDeviceGet(int *d, int ordinal) {
    return ordinal >= 0 && ordinal < device_count() ? (*d = 0, OK) : ERR_INVALID_DEVICE;
}

static int kernels_run(void) { return env_or("FAKE_CUDA_KERNELS", 0) == 1; }

/* The device's clock in ms: what events read. */
static double device_ms;

/* For the fake cuBLAS: its products take time on the same clock. */
void fake_cuda_advance(double ms) { device_ms += ms; }

CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    if (dev != 0)
        return ERR_INVALID_DEVICE;
    /* FAKE_CUDA_CC (default 90): the compute capability as major * 10 + minor */
    int cc = (int)env_or("FAKE_CUDA_CC", 90);
    switch (attr) {
    case 75: *v = cc / 10; break;   /* compute capability, major */
    case 76: *v = cc % 10; break;   /* minor */
    case 16: *v = 132; break;       /* multiprocessors */
    case 13: *v = 1980000; break;   /* clock, kHz */
    default: *v = 1;
    }
    return OK;
}

CUresult cuDeviceGetName(char *name, int len, int dev) {
    if (dev != 0 || len < 1)
        return ERR_INVALID_VALUE;
    strncpy(name, "kiln fake device", (size_t)len - 1);
    name[len - 1] = 0;
    return OK;
}

/* Retains of the primary context not yet released: 0 once every context is
 * closed, whichever way its opening ended. */
long fake_cuda_ctx_retained;
static int the_context;
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    if (dev != 0)
        return ERR_INVALID_DEVICE;
    fake_cuda_ctx_retained++;
    *ctx = &the_context;
    return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
    if (dev != 0)
        return ERR_INVALID_DEVICE;
    fake_cuda_ctx_retained--;
    return OK;
}
CUresult cuCtxSetCurrent(void *ctx) { return ctx == &the_context || !ctx ? OK : ERR_INVALID_VALUE; }
CUresult cuCtxSynchronize(void) { return OK; }

long fake_cuda_launches, fake_cuda_graph_launches;

/* A function knows its parameter count from the module's PTX (kernels'
 * parameters are all pointers here), so that launches can log them. */
typedef struct fake_fn {
    char *name;
    int nparams;
} fake_fn;

typedef struct fake_module {
    char *ptx;
    int nfns;
    fake_fn fns[256];
} fake_module;

static fake_module *last_module;

/* The PTX of the module loaded last, while it is loaded ("" otherwise). */
const char *fake_cuda_module_text(void) { return last_module ? last_module->ptx : ""; }

/* In FAKE_CUDA_KERNELS mode a cubin (an ELF image) is refused, as a driver
 * too old for it would, so that kiln loads the PTX, whose text says each
 * kernel's parameters. */
CUresult cuModuleLoadData(void **mod, const void *image) {
    fake_cuda_module_loads++;
    *mod = NULL;
    if (!kernels_run() || !memcmp(image, "\x7f" "ELF", 4))
        return ERR_NO_BINARY;
    fake_module *m = calloc(1, sizeof *m);
    if (!m || !(m->ptx = strdup(image))) {
        free(m);
        return ERR_OUT_OF_MEMORY;
    }
    *mod = m;
    last_module = m;
    return OK;
}
CUresult cuModuleUnload(void *mod) {
    fake_module *m = mod;
    if (!m)
        return ERR_INVALID_VALUE;
    if (m == last_module)
        last_module = NULL;
    for (int i = 0; i < m->nfns; i++)
        free(m->fns[i].name);
    free(m->ptx);
    free(m);
    return OK;
}
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
    fake_module *m = mod;
    *fn = NULL;
    if (!m || m->nfns == 256)
        return ERR_INVALID_VALUE;
    char entry[300];
    snprintf(entry, sizeof entry, ".entry %s(", name);
    const char *at = strstr(m->ptx, entry), *end = at ? strchr(at, ')') : NULL;
    if (!end)
        return ERR_INVALID_VALUE; /* CUDA_ERROR_NOT_FOUND, near enough */
    int n = 0;
    for (const char *p = strstr(at, ".param"); p && p < end; p = strstr(p + 1, ".param"))
        n++;
    fake_fn *f = &m->fns[m->nfns];
    if (!(f->name = strdup(name)))
        return ERR_OUT_OF_MEMORY;
    f->nparams = n;
    m->nfns++;
    *fn = f;
    return OK;
}

long fake_cuda_last_grid, fake_cuda_last_block;

static void log_kernel(const fake_fn *f, unsigned grid, unsigned block, int nargs,
                       const unsigned long long *args) {
    fake_cuda_last_grid = grid;
    fake_cuda_last_block = block;
    static double us = -1;
    if (us < 0)
        us = env_or("FAKE_CUDA_KERNEL_US", 250);
    device_ms += us * 1e-3;
    static int on = -1; /* FAKE_CUDA_LOG=1: the log costs more than kiln's launch */
    if (on < 0)
        on = env_or("FAKE_CUDA_LOG", 0) == 1;
    if (!on)
        return;
    char line[2048];
    size_t at = (size_t)snprintf(line, sizeof line, "%s", f->name);
    for (int i = 0; i < nargs && at < sizeof line; i++) {
        char *p = (char *)(uintptr_t)args[i];
        if (arena && p >= arena && p < arena + capacity())
            at += (size_t)snprintf(line + at, sizeof line - at, " %zx", (size_t)(p - arena));
        else
            at += (size_t)snprintf(line + at, sizeof line - at, " host");
    }
    if (at < sizeof line - 1)
        line[at++] = '\n', line[at] = 0;
    log_text(line);
}

/* The argument values, as the driver copies them at the call. */
static int copy_args(const fake_fn *f, void **params, unsigned long long *out) {
    if (f->nparams > 64)
        return -1;
    for (int i = 0; i < f->nparams; i++)
        memcpy(&out[i], params[i], sizeof out[i]);
    return f->nparams;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, void *stream, void **args, void **extra) {
    (void)shmem, (void)stream, (void)extra;
    unsigned long long a[64];
    if (!f || !args || !gx || !gy || !gz || !bx || !by || !bz || copy_args(f, args, a) < 0)
        return ERR_INVALID_VALUE;
    fake_cuda_launches++;
    log_kernel(f, gx, bx, ((fake_fn *)f)->nparams, a);
    return OK;
}

/* ---- graphs: a chain of kernel nodes ---- */

typedef struct kernel_node_params { /* CUDA_KERNEL_NODE_PARAMS_v2 */
    void *func;
    unsigned grid[3], block[3], shared_bytes;
    void **params;
    void **extra;
    void *kern;
    void *ctx;
} kernel_node_params;

typedef struct fake_node {
    fake_fn *fn;
    unsigned grid, block;
    unsigned long long args[64];
} fake_node;

typedef struct fake_graph {
    int n;
    fake_node *nodes[4096];
} fake_graph;

typedef struct fake_exec {
    fake_graph *from;
    int n;
    fake_node nodes[];
} fake_exec;

static int set_node(fake_node *n, const kernel_node_params *p) {
    if (!p->func || !p->params || !p->grid[0] || !p->block[0])
        return -1;
    n->fn = p->func;
    n->grid = p->grid[0];
    n->block = p->block[0];
    return copy_args(n->fn, p->params, n->args);
}

CUresult cuGraphCreate(void **g, unsigned flags) {
    *g = flags ? NULL : calloc(1, sizeof(fake_graph));
    return *g ? OK : ERR_INVALID_VALUE;
}
CUresult cuGraphDestroy(void *g) {
    fake_graph *fg = g;
    if (!fg)
        return ERR_INVALID_VALUE;
    for (int i = 0; i < fg->n; i++)
        free(fg->nodes[i]);
    free(fg);
    return OK;
}
/* kiln builds a chain: each node after the last one added. */
CUresult cuGraphAddKernelNode_v2(void **node, void *g, void *const *deps, size_t ndeps,
                                 const kernel_node_params *p) {
    fake_graph *fg = g;
    if (!fg || fg->n == 4096 || ndeps != (fg->n ? 1u : 0u) ||
        (ndeps && deps[0] != fg->nodes[fg->n - 1]))
        return ERR_INVALID_VALUE;
    fake_node *n = calloc(1, sizeof *n);
    if (!n || set_node(n, p) < 0) {
        free(n);
        return ERR_INVALID_VALUE;
    }
    fg->nodes[fg->n++] = n;
    *node = n;
    return OK;
}
CUresult cuGraphInstantiateWithFlags(void **e, void *g, unsigned long long flags) {
    fake_graph *fg = g;
    *e = NULL;
    if (!fg || flags)
        return ERR_INVALID_VALUE;
    fake_exec *x = malloc(sizeof *x + sizeof(fake_node) * (size_t)fg->n);
    if (!x)
        return ERR_OUT_OF_MEMORY;
    x->from = fg;
    x->n = fg->n;
    for (int i = 0; i < fg->n; i++)
        x->nodes[i] = *fg->nodes[i];
    *e = x;
    return OK;
}
CUresult cuGraphExecKernelNodeSetParams_v2(void *e, void *node, const kernel_node_params *p) {
    fake_exec *x = e;
    for (int i = 0; x && i < x->n; i++)
        if (x->from->nodes[i] == node)
            return set_node(&x->nodes[i], p) < 0 ? ERR_INVALID_VALUE : OK;
    return ERR_INVALID_VALUE;
}
CUresult cuGraphLaunch(void *e, void *stream) {
    fake_exec *x = e;
    if (!x || !stream)
        return ERR_INVALID_VALUE;
    fake_cuda_graph_launches++;
    for (int i = 0; i < x->n; i++)
        log_kernel(x->nodes[i].fn, x->nodes[i].grid, x->nodes[i].block, x->nodes[i].fn->nparams,
                   x->nodes[i].args);
    return OK;
}
CUresult cuGraphExecDestroy(void *e) {
    if (!e)
        return ERR_INVALID_VALUE;
    free(e);
    return OK;
}

CUresult cuMemAlloc_v2(unsigned long long *p, size_t n) {
    void *q = take(n);
    if (!q)
        return ERR_OUT_OF_MEMORY;
    fake_cuda_allocs++;
    *p = (unsigned long long)(uintptr_t)q;
    return OK;
}
CUresult cuMemFree_v2(unsigned long long p) {
    fake_cuda_frees++;
    give((void *)(uintptr_t)p);
    return OK;
}
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    *total = capacity();
    *free_b = *total - fake_cuda_in_use;
    return OK;
}

CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n) {
    memcpy((void *)(uintptr_t)dst, src, n);
    return OK;
}
CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n) {
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return OK;
}
CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *s) {
    (void)s;
    return cuMemcpyHtoD_v2(dst, src, n);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t n, void *s) {
    (void)s;
    return cuMemcpyDtoH_v2(dst, src, n);
}
CUresult cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, void *s) {
    (void)s;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    device_ms += 2.0 * (double)n / env_or("FAKE_CUDA_GBPS", 2000) * 1e-6;
    return OK;
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    *p = malloc(n ? n : 1);
    return *p ? OK : ERR_OUT_OF_MEMORY;
}
CUresult cuMemFreeHost(void *p) {
    free(p);
    return OK;
}

/* Streams and events are tokens: every operation above has finished when it
 * returns. */
CUresult cuStreamCreate(void **s, unsigned flags) {
    (void)flags;
    *s = malloc(1);
    return *s ? OK : ERR_OUT_OF_MEMORY;
}
CUresult cuStreamDestroy_v2(void *s) {
    free(s);
    return OK;
}
CUresult cuStreamSynchronize(void *s) { return s ? OK : ERR_INVALID_VALUE; }
/* An event holds the device's clock when it was recorded. */
CUresult cuEventCreate(void **e, unsigned flags) {
    (void)flags;
    *e = calloc(1, sizeof(double));
    return *e ? OK : ERR_OUT_OF_MEMORY;
}
CUresult cuEventDestroy_v2(void *e) {
    free(e);
    return OK;
}
CUresult cuEventRecord(void *e, void *s) {
    if (!e || !s)
        return ERR_INVALID_VALUE;
    *(double *)e = device_ms;
    return OK;
}
CUresult cuEventSynchronize(void *e) { return e ? OK : ERR_INVALID_VALUE; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
    if (!a || !b)
        return ERR_INVALID_VALUE;
    *ms = (float)(*(double *)b - *(double *)a);
    return OK;
}
