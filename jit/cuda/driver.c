/* driver.c — the CUDA driver API (libcuda.so.1, or the library that
 * KILN_CUDA_DRIVER names), loaded with dlopen on first use: devices, their
 * primary contexts, streams, events, modules, launches, device and pinned
 * memory, copies. No driver, no device, or a failing call is a status and a
 * message, never a crash; signatures follow cuda.h of CUDA 12 and 13
 * (versioned entry points by their _v2 names). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cuda/cuda.h"

typedef int cu_result; /* CUresult; CUDA_SUCCESS is 0 */
typedef int cu_device;
typedef struct cu_ctx_st *cu_context;
typedef struct cu_mod_st *cu_module;
typedef struct cu_func_st *cu_function;

enum { CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76 };

typedef struct driver_api {
    void *handle;
    cu_result (*init)(unsigned);
    cu_result (*error_string)(cu_result, const char **);
    cu_result (*device_count)(int *);
    cu_result (*device_get)(cu_device *, int);
    cu_result (*device_attr)(int *, int, cu_device);
    cu_result (*device_name)(char *, int, cu_device);
    cu_result (*ctx_retain)(cu_context *, cu_device);
    cu_result (*ctx_release)(cu_device);
    cu_result (*ctx_set)(cu_context);
    cu_result (*ctx_sync)(void);
    cu_result (*module_load)(cu_module *, const void *);
    cu_result (*module_unload)(cu_module);
    cu_result (*module_function)(cu_function *, cu_module, const char *);
    cu_result (*launch)(cu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
    cu_result (*mem_alloc)(jit_cuda_ptr *, size_t);
    cu_result (*mem_free)(jit_cuda_ptr);
    cu_result (*htod)(jit_cuda_ptr, const void *, size_t);
    cu_result (*dtoh)(void *, jit_cuda_ptr, size_t);
    cu_result (*stream_create)(jit_cuda_stream **, unsigned);
    cu_result (*stream_destroy)(jit_cuda_stream *);
    cu_result (*stream_sync)(jit_cuda_stream *);
    cu_result (*htod_async)(jit_cuda_ptr, const void *, size_t, jit_cuda_stream *);
    cu_result (*dtoh_async)(void *, jit_cuda_ptr, size_t, jit_cuda_stream *);
    cu_result (*dtod_async)(jit_cuda_ptr, jit_cuda_ptr, size_t, jit_cuda_stream *);
    cu_result (*host_alloc)(void **, size_t, unsigned);
    cu_result (*host_free)(void *);
    cu_result (*event_create)(jit_cuda_event **, unsigned);
    cu_result (*event_destroy)(jit_cuda_event *);
    cu_result (*event_record)(jit_cuda_event *, jit_cuda_stream *);
    cu_result (*event_sync)(jit_cuda_event *);
    cu_result (*event_elapsed)(float *, jit_cuda_event *, jit_cuda_event *);
    cu_result (*mem_info)(size_t *, size_t *);
    cu_result (*driver_version)(int *);
    /* CUDA graphs (CUDA 12 and later; absent, steps are launched kernel by
     * kernel) */
    bool graphs;
    cu_result (*graph_create)(jit_cuda_graph **, unsigned);
    cu_result (*graph_add_kernel)(jit_cuda_graph_node **, jit_cuda_graph *,
                                  jit_cuda_graph_node *const *, size_t, const void *);
    cu_result (*graph_instantiate)(jit_cuda_graph_exec **, jit_cuda_graph *, unsigned long long);
    cu_result (*graph_exec_set_kernel)(jit_cuda_graph_exec *, jit_cuda_graph_node *,
                                       const void *);
    cu_result (*graph_launch)(jit_cuda_graph_exec *, jit_cuda_stream *);
    cu_result (*graph_exec_destroy)(jit_cuda_graph_exec *);
    cu_result (*graph_destroy)(jit_cuda_graph *);
    char why[512]; /* when handle is NULL */
} driver_api;

static driver_api drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static bool sym(void *h, const char *name, void *slot) {
    void *p = dlsym(h, name);
    if (!p)
        return false;
    memcpy(slot, &p, sizeof p);
    return true;
}

/* KILN_CUDA_DRIVER: the driver library's path, for a driver outside the
 * loader's path and for tests, which load a fake one (tests/fake_cuda.c)
 * that needs no GPU. */
static void load_driver(void) {
    const char *path = getenv("KILN_CUDA_DRIVER");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(drv.why, sizeof drv.why, "no CUDA driver (%s could not be loaded: %s)", path,
                 e ? e : "unknown reason");
        return;
    }
    bool ok = sym(h, "cuInit", &drv.init) && sym(h, "cuGetErrorString", &drv.error_string) &&
              sym(h, "cuDeviceGetCount", &drv.device_count) &&
              sym(h, "cuDeviceGet", &drv.device_get) &&
              sym(h, "cuDeviceGetAttribute", &drv.device_attr) &&
              sym(h, "cuDeviceGetName", &drv.device_name) &&
              sym(h, "cuDevicePrimaryCtxRetain", &drv.ctx_retain) &&
              sym(h, "cuDevicePrimaryCtxRelease_v2", &drv.ctx_release) &&
              sym(h, "cuCtxSetCurrent", &drv.ctx_set) &&
              sym(h, "cuCtxSynchronize", &drv.ctx_sync) &&
              sym(h, "cuModuleLoadData", &drv.module_load) &&
              sym(h, "cuModuleUnload", &drv.module_unload) &&
              sym(h, "cuModuleGetFunction", &drv.module_function) &&
              sym(h, "cuLaunchKernel", &drv.launch) && sym(h, "cuMemAlloc_v2", &drv.mem_alloc) &&
              sym(h, "cuMemFree_v2", &drv.mem_free) && sym(h, "cuMemcpyHtoD_v2", &drv.htod) &&
              sym(h, "cuMemcpyDtoH_v2", &drv.dtoh) &&
              sym(h, "cuStreamCreate", &drv.stream_create) &&
              sym(h, "cuStreamDestroy_v2", &drv.stream_destroy) &&
              sym(h, "cuStreamSynchronize", &drv.stream_sync) &&
              sym(h, "cuMemcpyHtoDAsync_v2", &drv.htod_async) &&
              sym(h, "cuMemcpyDtoHAsync_v2", &drv.dtoh_async) &&
              sym(h, "cuMemcpyDtoDAsync_v2", &drv.dtod_async) &&
              sym(h, "cuMemHostAlloc", &drv.host_alloc) &&
              sym(h, "cuMemFreeHost", &drv.host_free) &&
              sym(h, "cuEventCreate", &drv.event_create) &&
              sym(h, "cuEventDestroy_v2", &drv.event_destroy) &&
              sym(h, "cuEventRecord", &drv.event_record) &&
              sym(h, "cuEventSynchronize", &drv.event_sync) &&
              sym(h, "cuEventElapsedTime", &drv.event_elapsed) &&
              sym(h, "cuMemGetInfo_v2", &drv.mem_info) &&
              sym(h, "cuDriverGetVersion", &drv.driver_version);
    if (!ok) {
        snprintf(drv.why, sizeof drv.why, "the CUDA driver %s is too old (missing entry points)",
                 path);
        dlclose(h);
        return;
    }
    drv.graphs = sym(h, "cuGraphCreate", &drv.graph_create) &&
                 sym(h, "cuGraphAddKernelNode_v2", &drv.graph_add_kernel) &&
                 sym(h, "cuGraphInstantiateWithFlags", &drv.graph_instantiate) &&
                 sym(h, "cuGraphExecKernelNodeSetParams_v2", &drv.graph_exec_set_kernel) &&
                 sym(h, "cuGraphLaunch", &drv.graph_launch) &&
                 sym(h, "cuGraphExecDestroy", &drv.graph_exec_destroy) &&
                 sym(h, "cuGraphDestroy", &drv.graph_destroy);
    cu_result rc = drv.init(0);
    if (rc != 0) {
        const char *s = NULL;
        if (drv.error_string(rc, &s) != 0 || !s)
            s = "unknown error";
        snprintf(drv.why, sizeof drv.why, "the CUDA driver failed to initialise: %s (%d)", s, rc);
        dlclose(h);
        return;
    }
    drv.handle = h;
}

static bool driver(char *msg, size_t cap) {
    pthread_once(&drv_once, load_driver);
    if (drv.handle)
        return true;
    snprintf(msg, cap, "kiln: %s", drv.why);
    return false;
}

/* Writes "kiln: <what>: <driver's message>" and returns KILN_ERR_DEVICE, or
 * KILN_OK when rc is success. */
static kiln_status check(cu_result rc, const char *what, char *msg, size_t cap) {
    if (rc == 0)
        return KILN_OK;
    const char *s = NULL;
    if (drv.error_string(rc, &s) != 0 || !s)
        s = "unknown error";
    snprintf(msg, cap, "kiln: %s: %s (CUDA error %d)", what, s, rc);
    return rc == 2 ? KILN_ERR_OOM : KILN_ERR_DEVICE; /* 2: CUDA_ERROR_OUT_OF_MEMORY */
}

struct jit_cuda_device {
    cu_device dev;
    cu_context ctx;
    int arch;
    char name[256];
};

struct jit_cuda_module {
    jit_cuda_device *d;
    cu_module mod;
};

int jit_cuda_device_count(char *msg, size_t cap) {
    if (!driver(msg, cap))
        return 0;
    int n = 0;
    if (check(drv.device_count(&n), "counting CUDA devices", msg, cap) != KILN_OK)
        return 0;
    if (n == 0)
        snprintf(msg, cap, "kiln: the CUDA driver reports no device");
    return n;
}

jit_cuda_device *jit_cuda_device_open(int ordinal, char *msg, size_t cap) {
    int n = jit_cuda_device_count(msg, cap);
    if (n == 0)
        return NULL;
    if (ordinal < 0 || ordinal >= n) {
        snprintf(msg, cap, "kiln: no CUDA device %d (there are %d)", ordinal, n);
        return NULL;
    }
    jit_cuda_device *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(msg, cap, "kiln: out of memory");
        return NULL;
    }
    int major = 0, minor = 0;
    if (check(drv.device_get(&d->dev, ordinal), "opening a CUDA device", msg, cap) ||
        check(drv.device_attr(&major, CU_ATTR_CC_MAJOR, d->dev), "reading compute capability", msg,
              cap) ||
        check(drv.device_attr(&minor, CU_ATTR_CC_MINOR, d->dev), "reading compute capability", msg,
              cap) ||
        check(drv.device_name(d->name, (int)sizeof d->name - 1, d->dev), "reading the device name",
              msg, cap) ||
        check(drv.ctx_retain(&d->ctx, d->dev), "creating a CUDA context", msg, cap)) {
        free(d);
        return NULL;
    }
    if (check(drv.ctx_set(d->ctx), "making the CUDA context current", msg, cap)) {
        drv.ctx_release(d->dev);
        free(d);
        return NULL;
    }
    d->arch = major * 10 + minor;
    return d;
}

void jit_cuda_device_close(jit_cuda_device *d) {
    if (!d)
        return;
    drv.ctx_set(NULL);
    drv.ctx_release(d->dev);
    free(d);
}

int jit_cuda_device_arch(const jit_cuda_device *d) { return d->arch; }

int jit_cuda_device_attribute(const jit_cuda_device *d, int attr) {
    int v = 0;
    return drv.device_attr(&v, attr, d->dev) == 0 ? v : 0;
}

const char *jit_cuda_device_name(const jit_cuda_device *d) { return d->name; }

jit_cuda_module *jit_cuda_module_load(jit_cuda_device *d, const jit_cuda_binary *bin, char *msg,
                                      size_t cap) {
    jit_cuda_module *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(msg, cap, "kiln: out of memory");
        return NULL;
    }
    m->d = d;
    cu_result rc = -1;
    if (bin->cubin)
        rc = drv.module_load(&m->mod, bin->cubin);
    if (rc != 0 && bin->ptx)
        rc = drv.module_load(&m->mod, bin->ptx);
    if (rc != 0) {
        if (rc < 0)
            snprintf(msg, cap, "kiln: loading a CUDA module: neither a cubin nor PTX was given");
        else
            check(rc, "loading a CUDA module", msg, cap);
        free(m);
        return NULL;
    }
    return m;
}

void jit_cuda_module_unload(jit_cuda_module *m) {
    if (!m)
        return;
    drv.module_unload(m->mod);
    free(m);
}

kiln_status jit_cuda_function(jit_cuda_module *m, const char *name, jit_cuda_fn **f, char *msg,
                              size_t cap) {
    char what[160];
    snprintf(what, sizeof what, "finding kernel %s", name);
    cu_function fn = NULL;
    kiln_status st = check(drv.module_function(&fn, m->mod, name), what, msg, cap);
    *f = (jit_cuda_fn *)fn;
    return st;
}

/* The driver copies the argument values at the call, so bufs need not
 * outlive it. */
kiln_status jit_cuda_launch_async(jit_cuda_fn *f, const char *name, jit_cuda_dims dims, int nbufs,
                                  const jit_cuda_ptr *bufs, jit_cuda_stream *s, char *msg,
                                  size_t cap) {
    if (dims.grid == 0)
        return KILN_OK;
    void *stackv[32];
    void **args = nbufs <= 32 ? stackv : malloc(sizeof *args * (size_t)nbufs);
    if (!args) {
        snprintf(msg, cap, "kiln: out of memory");
        return KILN_ERR_OOM;
    }
    for (int i = 0; i < nbufs; i++)
        args[i] = (void *)&bufs[i];
    cu_result rc = drv.launch((cu_function)f, dims.grid, 1, 1, dims.block, 1, 1, 0, s, args, NULL);
    kiln_status st = KILN_OK;
    if (rc != 0) { /* the message only when there is one: a launch costs less than it */
        char what[160];
        snprintf(what, sizeof what, "launching kernel %s (grid %u, block %u)", name, dims.grid,
                 dims.block);
        st = check(rc, what, msg, cap);
    }
    if (args != stackv)
        free(args);
    return st;
}

kiln_status jit_cuda_launch(jit_cuda_module *m, const char *name, jit_cuda_dims dims, int nbufs,
                            const jit_cuda_ptr *bufs, char *msg, size_t cap) {
    if (dims.grid == 0)
        return KILN_OK;
    jit_cuda_fn *f;
    kiln_status st = jit_cuda_function(m, name, &f, msg, cap);
    if (st == KILN_OK)
        st = jit_cuda_launch_async(f, name, dims, nbufs, bufs, NULL, msg, cap);
    if (st == KILN_OK) {
        char what[160];
        snprintf(what, sizeof what, "running kernel %s", name);
        st = check(drv.ctx_sync(), what, msg, cap);
    }
    return st;
}

kiln_status jit_cuda_alloc(jit_cuda_device *d, size_t bytes, jit_cuda_ptr *p, char *msg,
                           size_t cap) {
    (void)d;
    *p = 0;
    char what[96];
    snprintf(what, sizeof what, "allocating %zu bytes of device memory", bytes);
    return check(drv.mem_alloc(p, bytes ? bytes : 1), what, msg, cap);
}

void jit_cuda_free(jit_cuda_device *d, jit_cuda_ptr p) {
    (void)d;
    if (p)
        drv.mem_free(p);
}

kiln_status jit_cuda_to_device(jit_cuda_device *d, jit_cuda_ptr dst, const void *src, size_t n,
                               char *msg, size_t cap) {
    (void)d;
    return n ? check(drv.htod(dst, src, n), "copying to the device", msg, cap) : KILN_OK;
}

kiln_status jit_cuda_to_host(jit_cuda_device *d, void *dst, jit_cuda_ptr src, size_t n, char *msg,
                             size_t cap) {
    (void)d;
    return n ? check(drv.dtoh(dst, src, n), "copying from the device", msg, cap) : KILN_OK;
}

/* ---- what the runtime (device.c) uses beyond the self-check ---- */

/* Driver calls act on the calling thread's current context, and kiln may be
 * called from any thread: every entry of the device makes its own current. */
kiln_status jit_cuda_make_current(jit_cuda_device *d, char *msg, size_t cap) {
    return check(drv.ctx_set(d->ctx), "making the CUDA context current", msg, cap);
}

size_t jit_cuda_device_memory(jit_cuda_device *d) {
    (void)d;
    size_t free_b = 0, total = 0;
    return drv.mem_info(&free_b, &total) == 0 ? total : 0;
}

int jit_cuda_driver_version(void) {
    int v = 0;
    return drv.handle && drv.driver_version(&v) == 0 ? v : 0;
}

/* Non-blocking (flag 1): the stream does not wait for the legacy default
 * stream, which other libraries in the process may be using. */
kiln_status jit_cuda_stream_new(jit_cuda_stream **s, char *msg, size_t cap) {
    *s = NULL;
    return check(drv.stream_create(s, 1), "creating a CUDA stream", msg, cap);
}

void jit_cuda_stream_free(jit_cuda_stream *s) {
    if (s)
        drv.stream_destroy(s);
}

kiln_status jit_cuda_stream_wait(jit_cuda_stream *s, const char *what, char *msg, size_t cap) {
    return check(drv.stream_sync(s), what, msg, cap);
}

kiln_status jit_cuda_copy_to_device_async(jit_cuda_ptr dst, const void *src, size_t n,
                                          jit_cuda_stream *s, char *msg, size_t cap) {
    char what[96];
    snprintf(what, sizeof what, "copying %zu bytes to the device", n);
    return n ? check(drv.htod_async(dst, src, n, s), what, msg, cap) : KILN_OK;
}

kiln_status jit_cuda_copy_to_host_async(void *dst, jit_cuda_ptr src, size_t n, jit_cuda_stream *s,
                                        char *msg, size_t cap) {
    char what[96];
    snprintf(what, sizeof what, "copying %zu bytes from the device", n);
    return n ? check(drv.dtoh_async(dst, src, n, s), what, msg, cap) : KILN_OK;
}

kiln_status jit_cuda_copy_on_device_async(jit_cuda_ptr dst, jit_cuda_ptr src, size_t n,
                                          jit_cuda_stream *s, char *msg, size_t cap) {
    char what[96];
    snprintf(what, sizeof what, "copying %zu bytes within the device", n);
    return n ? check(drv.dtod_async(dst, src, n, s), what, msg, cap) : KILN_OK;
}

void *jit_cuda_pinned_alloc(size_t n) {
    void *p = NULL;
    return drv.host_alloc(&p, n, 0) == 0 ? p : NULL;
}

void jit_cuda_pinned_free(void *p) {
    if (p)
        drv.host_free(p);
}

kiln_status jit_cuda_event_new(jit_cuda_event **e, char *msg, size_t cap) {
    *e = NULL;
    return check(drv.event_create(e, 0), "creating a CUDA event", msg, cap);
}

void jit_cuda_event_free(jit_cuda_event *e) {
    if (e)
        drv.event_destroy(e);
}

kiln_status jit_cuda_event_record(jit_cuda_event *e, jit_cuda_stream *s, char *msg, size_t cap) {
    return check(drv.event_record(e, s), "recording a CUDA event", msg, cap);
}

kiln_status jit_cuda_event_wait(jit_cuda_event *e, const char *what, char *msg, size_t cap) {
    return check(drv.event_sync(e), what, msg, cap);
}

double jit_cuda_event_ms(jit_cuda_event *from, jit_cuda_event *to) {
    float ms = 0;
    return drv.event_elapsed(&ms, from, to) == 0 ? ms : -1;
}

/* ---- CUDA graphs ---- */

/* CUDA_KERNEL_NODE_PARAMS_v2 of cuda.h (CUDA 12 and 13). */
typedef struct kernel_node_params {
    cu_function func;
    unsigned grid[3], block[3], shared_bytes;
    void **params;
    void **extra;
    void *kern; /* CUkernel, used only when func is NULL */
    void *ctx;  /* CUcontext, ignored when func is set */
} kernel_node_params;

bool jit_cuda_graphs_available(void) { return drv.handle && drv.graphs; }

kiln_status jit_cuda_graph_new(jit_cuda_graph **g, char *msg, size_t cap) {
    *g = NULL;
    return check(drv.graph_create(g, 0), "creating a CUDA graph", msg, cap);
}

void jit_cuda_graph_free(jit_cuda_graph *g, jit_cuda_graph_exec *e) {
    if (e)
        drv.graph_exec_destroy(e);
    if (g)
        drv.graph_destroy(g);
}

/* The node's parameters: the driver copies the argument values, so bufs
 * need not outlive the call. */
static kiln_status kernel_params(jit_cuda_fn *f, jit_cuda_dims dims, int nbufs,
                                 const jit_cuda_ptr *bufs, kernel_node_params *p, void ***args,
                                 void **stackv, char *msg, size_t cap) {
    *args = nbufs <= 32 ? stackv : malloc(sizeof **args * (size_t)nbufs);
    if (!*args) {
        snprintf(msg, cap, "kiln: out of memory");
        return KILN_ERR_OOM;
    }
    for (int i = 0; i < nbufs; i++)
        (*args)[i] = (void *)&bufs[i];
    *p = (kernel_node_params){.func = (cu_function)f, .grid = {dims.grid, 1, 1},
                              .block = {dims.block, 1, 1}, .params = *args};
    return KILN_OK;
}

kiln_status jit_cuda_graph_add_kernel(jit_cuda_graph *g, jit_cuda_graph_node *after,
                                      jit_cuda_fn *f, const char *name, jit_cuda_dims dims,
                                      int nbufs, const jit_cuda_ptr *bufs,
                                      jit_cuda_graph_node **node, char *msg, size_t cap) {
    kernel_node_params p;
    void *stackv[32], **args;
    kiln_status st = kernel_params(f, dims, nbufs, bufs, &p, &args, stackv, msg, cap);
    if (st != KILN_OK)
        return st;
    char what[160];
    snprintf(what, sizeof what, "adding kernel %s to a CUDA graph", name);
    st = check(drv.graph_add_kernel(node, g, after ? &after : NULL, after ? 1 : 0, &p), what, msg,
               cap);
    if (args != stackv)
        free(args);
    return st;
}

kiln_status jit_cuda_graph_instantiate(jit_cuda_graph *g, jit_cuda_graph_exec **e, char *msg,
                                       size_t cap) {
    *e = NULL;
    return check(drv.graph_instantiate(e, g, 0), "instantiating a CUDA graph", msg, cap);
}

kiln_status jit_cuda_graph_set_kernel(jit_cuda_graph_exec *e, jit_cuda_graph_node *node,
                                      jit_cuda_fn *f, const char *name, jit_cuda_dims dims,
                                      int nbufs, const jit_cuda_ptr *bufs, char *msg,
                                      size_t cap) {
    kernel_node_params p;
    void *stackv[32], **args;
    kiln_status st = kernel_params(f, dims, nbufs, bufs, &p, &args, stackv, msg, cap);
    if (st != KILN_OK)
        return st;
    cu_result rc = drv.graph_exec_set_kernel(e, node, &p);
    if (rc != 0) {
        char what[160];
        snprintf(what, sizeof what, "rebinding kernel %s of a CUDA graph", name);
        st = check(rc, what, msg, cap);
    }
    if (args != stackv)
        free(args);
    return st;
}

kiln_status jit_cuda_graph_launch(jit_cuda_graph_exec *e, jit_cuda_stream *s, char *msg,
                                  size_t cap) {
    return check(drv.graph_launch(e, s), "launching a CUDA graph", msg, cap);
}
