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
 * bytes, so that a profile timed by events has known figures. The device
 * has 132 multiprocessors at 1.98 GHz. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* Every allocation carries its size in front of it, so frees give it back. */
static void *take(size_t n) {
    if (fake_cuda_in_use + n > capacity()) {
        fake_cuda_failed_allocs++;
        return NULL;
    }
    size_t *p = malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    fake_cuda_in_use += n;
    return (char *)p + 16;
}

static void give(void *q) {
    if (!q)
        return;
    size_t *p = (size_t *)((char *)q - 16);
    fake_cuda_in_use -= p[0];
    free(p);
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
CUresult cuDeviceGetCount(int *n) { return *n = 1, OK; }
CUresult cuDeviceGet(int *d, int ordinal) { return ordinal == 0 ? (*d = 0, OK) : ERR_INVALID_DEVICE; }

static double env_or(const char *name, double dflt) {
    const char *e = getenv(name);
    return e && *e ? strtod(e, NULL) : dflt;
}

static int kernels_run(void) { return env_or("FAKE_CUDA_KERNELS", 0) == 1; }

/* The device's clock in ms: what events read. */
static double device_ms;

CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    if (dev != 0)
        return ERR_INVALID_DEVICE;
    switch (attr) {
    case 75: *v = 9; break;         /* compute capability 9.0 */
    case 76: *v = 0; break;
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

static int the_context;
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { return dev == 0 ? (*ctx = &the_context, OK) : ERR_INVALID_DEVICE; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return dev == 0 ? OK : ERR_INVALID_DEVICE; }
CUresult cuCtxSetCurrent(void *ctx) { return ctx == &the_context || !ctx ? OK : ERR_INVALID_VALUE; }
CUresult cuCtxSynchronize(void) { return OK; }

long fake_cuda_launches;

/* A loaded module owns the names of the functions looked up in it. */
typedef struct fake_module {
    int nfns;
    char *fns[256];
} fake_module;

CUresult cuModuleLoadData(void **mod, const void *image) {
    (void)image;
    fake_cuda_module_loads++;
    *mod = kernels_run() ? calloc(1, sizeof(fake_module)) : NULL;
    return *mod ? OK : ERR_NO_BINARY;
}
CUresult cuModuleUnload(void *mod) {
    fake_module *m = mod;
    if (!m)
        return ERR_INVALID_VALUE;
    for (int i = 0; i < m->nfns; i++)
        free(m->fns[i]);
    free(m);
    return OK;
}
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
    fake_module *m = mod;
    *fn = NULL;
    if (!m || m->nfns == 256 || !(m->fns[m->nfns] = strdup(name)))
        return ERR_INVALID_VALUE;
    *fn = m->fns[m->nfns++];
    return OK;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, void *stream, void **args, void **extra) {
    (void)shmem, (void)stream, (void)extra;
    if (!f || !args || !gx || !gy || !gz || !bx || !by || !bz)
        return ERR_INVALID_VALUE;
    fake_cuda_launches++;
    device_ms += env_or("FAKE_CUDA_KERNEL_US", 250) * 1e-3;
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
