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
 * context usable. Counters of calls are exported for the test to read. */
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

CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    if (dev != 0)
        return ERR_INVALID_DEVICE;
    *v = attr == 75 ? 9 : attr == 76 ? 0 : 1; /* compute capability 9.0; anything else 1 */
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

CUresult cuModuleLoadData(void **mod, const void *image) {
    (void)image;
    fake_cuda_module_loads++;
    *mod = NULL;
    return ERR_NO_BINARY;
}
CUresult cuModuleUnload(void *mod) { return mod ? OK : ERR_INVALID_VALUE; }
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
    (void)mod, (void)name;
    *fn = NULL;
    return ERR_INVALID_VALUE;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, void *stream, void **args, void **extra) {
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem;
    (void)stream, (void)args, (void)extra;
    return ERR_INVALID_VALUE;
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
CUresult cuEventCreate(void **e, unsigned flags) {
    (void)flags;
    *e = malloc(1);
    return *e ? OK : ERR_OUT_OF_MEMORY;
}
CUresult cuEventDestroy_v2(void *e) {
    free(e);
    return OK;
}
CUresult cuEventRecord(void *e, void *s) { return e && s ? OK : ERR_INVALID_VALUE; }
CUresult cuEventSynchronize(void *e) { return e ? OK : ERR_INVALID_VALUE; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
    (void)a, (void)b;
    *ms = 0;
    return OK;
}
