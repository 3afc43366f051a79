/* driver.c — the CUDA driver API (libcuda.so.1), loaded with dlopen on first
 * use: devices, their primary contexts, modules, launches, device memory and
 * copies. No driver, no device, or a failing call is a status and a message,
 * never a crash; signatures follow cuda.h of CUDA 12 and 13 (versioned
 * entry points by their _v2 names). */
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
    char why[256]; /* when handle is NULL */
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

static void load_driver(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(drv.why, sizeof drv.why, "no CUDA driver (libcuda.so.1 could not be loaded)");
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
              sym(h, "cuMemcpyDtoH_v2", &drv.dtoh);
    if (!ok) {
        snprintf(drv.why, sizeof drv.why, "the CUDA driver is too old (missing entry points)");
        dlclose(h);
        return;
    }
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

kiln_status jit_cuda_launch(jit_cuda_module *m, const char *name, jit_cuda_dims dims, int nbufs,
                            const jit_cuda_ptr *bufs, char *msg, size_t cap) {
    if (dims.grid == 0)
        return KILN_OK;
    cu_function f;
    char what[160];
    snprintf(what, sizeof what, "finding kernel %s", name);
    kiln_status st = check(drv.module_function(&f, m->mod, name), what, msg, cap);
    if (st != KILN_OK)
        return st;
    void **args = malloc(sizeof *args * (size_t)(nbufs ? nbufs : 1));
    if (!args) {
        snprintf(msg, cap, "kiln: out of memory");
        return KILN_ERR_OOM;
    }
    for (int i = 0; i < nbufs; i++)
        args[i] = (void *)&bufs[i];
    snprintf(what, sizeof what, "launching kernel %s", name);
    st = check(drv.launch(f, dims.grid, 1, 1, dims.block, 1, 1, 0, NULL, args, NULL), what, msg,
               cap);
    free(args);
    if (st == KILN_OK) {
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
