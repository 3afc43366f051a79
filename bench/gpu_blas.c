/* gpu_blas.c — kiln's matmul on a KILN_CUDA context against cuBLAS on the
 * same GPU, in one process: f32 (cublasSgemm in cuBLAS's default math mode,
 * no TF32, as kiln's f32) and bf16 with f32 accumulation (cublasGemmEx),
 * square sizes and the transformer's shapes. Both read the same random
 * inputs; kiln's product is checked against cuBLAS's before it is timed.
 * cuBLAS and the driver are loaded at run time, as kiln loads them, so this
 * builds everywhere and says plainly when there is no GPU.
 *
 * Timings: cuBLAS's by the device's events around each call (the median of
 * the steps); kiln's two ways, as a user sees a step (host clock around
 * kiln_realize, which waits for the result) and by its profiler (the
 * kernel's time by the device's events). The figures are ratios measured in
 * this run: kiln's kernel time over cuBLAS's. kiln hands a plain product to
 * cuBLAS itself; with KILN_CUDA_MATMUL=kernel its generated kernel runs
 * instead (impl "kiln-generated"), which is what this compares then.
 *
 * Usage: gpu_blas [--quick] [--steps N]. One JSON line per measurement on
 * stdout, a readable line on stderr; exit status 1 when a product differs,
 * 2 when there is no GPU or no cuBLAS. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

typedef int cu_result;
typedef unsigned long long cu_ptr;
typedef struct cublas_api {
    cu_result (*mem_alloc)(cu_ptr *, size_t);
    cu_result (*mem_free)(cu_ptr);
    cu_result (*htod)(cu_ptr, const void *, size_t);
    cu_result (*dtoh)(void *, cu_ptr, size_t);
    cu_result (*event_create)(void **, unsigned);
    cu_result (*event_record)(void *, void *);
    cu_result (*event_sync)(void *);
    cu_result (*event_elapsed)(float *, void *, void *);
    cu_result (*event_destroy)(void *);
    int (*create)(void **);
    int (*destroy)(void *);
    int (*sgemm)(void *, int, int, int, int, int, const float *, const float *, int,
                 const float *, int, const float *, float *, int);
    int (*gemm_ex)(void *, int, int, int, int, int, const void *, const void *, int, int,
                   const void *, int, int, const void *, void *, int, int, int, int);
} cublas_api;

enum { OP_N = 0, R_32F = 0, R_16BF = 14, COMPUTE_32F = 68, GEMM_DEFAULT = -1 };

static bool sym(void *h, const char *name, void *slot) {
    void *p = h ? dlsym(h, name) : NULL;
    if (p)
        memcpy(slot, &p, sizeof p);
    return p != NULL;
}

/* The driver (already loaded by kiln's context) and cuBLAS. */
static bool load(cublas_api *a, char *why, size_t cap) {
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                           "/usr/local/cuda/lib64/libcublas.so"};
    void *bl = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !bl; i++)
        bl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!cu || !bl) {
        snprintf(why, cap, "%s could not be loaded: %s", cu ? "cuBLAS" : "the CUDA driver",
                 dlerror());
        return false;
    }
    bool ok = sym(cu, "cuMemAlloc_v2", &a->mem_alloc) && sym(cu, "cuMemFree_v2", &a->mem_free) &&
              sym(cu, "cuMemcpyHtoD_v2", &a->htod) && sym(cu, "cuMemcpyDtoH_v2", &a->dtoh) &&
              sym(cu, "cuEventCreate", &a->event_create) &&
              sym(cu, "cuEventRecord", &a->event_record) &&
              sym(cu, "cuEventSynchronize", &a->event_sync) &&
              sym(cu, "cuEventElapsedTime", &a->event_elapsed) &&
              sym(cu, "cuEventDestroy_v2", &a->event_destroy) &&
              sym(bl, "cublasCreate_v2", &a->create) && sym(bl, "cublasDestroy_v2", &a->destroy) &&
              sym(bl, "cublasSgemm_v2", &a->sgemm) && sym(bl, "cublasGemmEx", &a->gemm_ex);
    if (!ok)
        snprintf(why, cap, "the driver or cuBLAS lacks an entry point");
    return ok;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct shape {
    const char *name;
    int m, k, n;
    bool quick;
} shape;

/* One product: kiln's and cuBLAS's on the same inputs. Returns 0, or 1 when
 * the results differ or a call fails. */
static int product(kiln_ctx *ctx, const cublas_api *a, void *h, const shape *s, bool bf16,
                   const bench_opts *o, uint64_t seed) {
    size_t es = bf16 ? 2 : 4, na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n,
           nc = (size_t)s->m * s->n;
    char *ha = malloc(na * es), *hb = malloc(nb * es), *hc = malloc(nc * es),
         *kc = malloc(nc * es);
    uint64_t r = seed;
    for (size_t i = 0; i < na + nb; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((double)(r >> 11) * 0x1p-53 * 2 - 1);
        char *dst = i < na ? ha + i * es : hb + (i - na) * es;
        if (bf16) {
            uint16_t b = to_bf16(v);
            memcpy(dst, &b, 2);
        } else {
            memcpy(dst, &v, 4);
        }
    }
    kiln_dtype dt = bf16 ? KILN_BF16 : KILN_F32;
    const char *impl_dt = bf16 ? "bf16" : "f32";
    kiln_tensor *ka = kiln_from_data(ctx, dt, 2, (int64_t[]){s->m, s->k}, ha);
    kiln_tensor *kb = kiln_from_data(ctx, dt, 2, (int64_t[]){s->k, s->n}, hb);
    cu_ptr da = 0, db = 0, dc = 0;
    int rc = 0;
    void *e0 = NULL, *e1 = NULL;
    if (a->mem_alloc(&da, na * es) || a->mem_alloc(&db, nb * es) || a->mem_alloc(&dc, nc * es) ||
        a->htod(da, ha, na * es) || a->htod(db, hb, nb * es) || a->event_create(&e0, 0) ||
        a->event_create(&e1, 0)) {
        fprintf(stderr, "%s %s: device memory or events refused\n", s->name, impl_dt);
        rc = 1;
        goto out;
    }
    /* row-major C = A B is column-major C^T = B^T A^T */
    const float one = 1, zero = 0;
    double *t = malloc(sizeof *t * (size_t)(o->steps + 1));
    for (int step = 0; step <= o->steps && rc == 0; step++) {
        a->event_record(e0, NULL);
        int st = bf16 ? a->gemm_ex(h, OP_N, OP_N, s->n, s->m, s->k, &one, (void *)(uintptr_t)db,
                                   R_16BF, s->n, (void *)(uintptr_t)da, R_16BF, s->k, &zero,
                                   (void *)(uintptr_t)dc, R_16BF, s->n, COMPUTE_32F,
                                   GEMM_DEFAULT)
                      : a->sgemm(h, OP_N, OP_N, s->n, s->m, s->k, &one,
                                 (const float *)(uintptr_t)db, s->n,
                                 (const float *)(uintptr_t)da, s->k, &zero,
                                 (float *)(uintptr_t)dc, s->n);
        a->event_record(e1, NULL);
        float ms = 0;
        if (st != 0 || a->event_sync(e1) || a->event_elapsed(&ms, e0, e1)) {
            fprintf(stderr, "%s %s: cuBLAS failed (%d)\n", s->name, impl_dt, st);
            rc = 1;
        }
        if (step > 0)
            t[step - 1] = ms;
    }
    double blas_ms = rc == 0 ? bench_median(t, o->steps) : 0;
    if (rc == 0 && a->dtoh(hc, dc, nc * es))
        rc = 1;
    /* kiln: the first step compiles; the profile covers the timed ones */
    kiln_tensor *c = kiln_matmul(ka, kb);
    if (rc == 0 && kiln_to_host(c, kc, nc * es) != KILN_OK) {
        fprintf(stderr, "%s %s: kiln: %s\n", s->name, impl_dt, kiln_error_message(c));
        rc = 1;
    }
    kiln_release(c);
    double err = 0, ref = 0;
    for (size_t i = 0; rc == 0 && i < nc; i++) {
        float x, y;
        if (bf16) {
            uint16_t p, q;
            memcpy(&p, kc + 2 * i, 2);
            memcpy(&q, hc + 2 * i, 2);
            x = from_bf16(p), y = from_bf16(q);
        } else {
            memcpy(&x, kc + 4 * i, 4);
            memcpy(&y, hc + 4 * i, 4);
        }
        err += ((double)x - y) * ((double)x - y);
        ref += (double)y * y;
    }
    double nmse = ref > 0 ? err / ref : err;
    if (rc == 0 && !(nmse < (bf16 ? 1e-4 : 1e-10))) {
        fprintf(stderr, "%s %s: kiln's product differs from cuBLAS's: nmse %g\n", s->name,
                impl_dt, nmse);
        rc = 1;
    }
    double kiln_ms = 0, kernel_ms = 0;
    if (rc == 0) {
        kiln_profile_begin(ctx);
        for (int step = 0; step < o->steps; step++) {
            double t0 = bench_now();
            c = kiln_matmul(ka, kb);
            kiln_realize(c);
            t[step] = (bench_now() - t0) * 1e3;
            kiln_release(c);
        }
        kiln_profile_end(ctx);
        kiln_ms = bench_median(t, o->steps);
        for (int i = 0; i < kiln_profile_count(ctx); i++) {
            kiln_kernel_profile kp;
            if (kiln_profile_kernel(ctx, i, &kp) == KILN_OK)
                kernel_ms += kp.mean_ms;
        }
    }
    free(t);
    if (rc == 0) {
        double flops = 2.0 * s->m * s->k * s->n;
        printf("{\"suite\":\"gpu\",\"workload\":\"matmul_%s\",\"shape\":\"%s\",\"impl\":"
               "\"cublas\",\"median_ms\":%.5f,\"tflops\":%.2f}\n",
               impl_dt, s->name, blas_ms, flops / blas_ms * 1e-9);
        const char *mm = getenv("KILN_CUDA_MATMUL");
        printf("{\"suite\":\"gpu\",\"workload\":\"matmul_%s\",\"shape\":\"%s\",\"impl\":"
               "\"%s\",\"median_ms\":%.5f,\"kernel_ms\":%.5f,\"tflops\":%.2f,"
               "\"kernel_over_cublas\":%.3f,\"nmse\":%.3g}\n",
               impl_dt, s->name, mm && !strcmp(mm, "kernel") ? "kiln-generated" : "kiln-lazy",
               kiln_ms, kernel_ms, flops / kernel_ms * 1e-9,
               kernel_ms / blas_ms, nmse);
        fprintf(stderr, "matmul %-4s %-16s cuBLAS %8.3f ms (%6.1f TFLOP/s)  kiln kernel %8.3f ms "
                        "(%6.1f TFLOP/s, %.2fx cuBLAS's time), step %8.3f ms\n",
                impl_dt, s->name, blas_ms, flops / blas_ms * 1e-9, kernel_ms,
                flops / kernel_ms * 1e-9, kernel_ms / blas_ms, kiln_ms);
    }
out:
    if (e0)
        a->event_destroy(e0);
    if (e1)
        a->event_destroy(e1);
    if (da)
        a->mem_free(da);
    if (db)
        a->mem_free(db);
    if (dc)
        a->mem_free(dc);
    kiln_release(ka);
    kiln_release(kb);
    free(ha), free(hb), free(hc), free(kc);
    return rc;
}

int main(int argc, char **argv) {
    bench_opts o = bench_parse_opts(argc, argv);
    kiln_ctx *ctx = kiln_ctx_new(KILN_CUDA);
    if (!ctx) {
        fprintf(stderr, "gpu_blas: no GPU: %s\n", kiln_last_ctx_error());
        return 2;
    }
    cublas_api a;
    char why[512];
    void *h = NULL;
    bool loaded = load(&a, why, sizeof why);
    if (!loaded || a.create(&h) != 0) {
        fprintf(stderr, "gpu_blas: %s\n", loaded ? "cuBLAS did not start (cublasCreate)" : why);
        kiln_ctx_free(ctx);
        return 2;
    }
    const shape shapes[] = {
        {"1024", 1024, 1024, 1024, true},   {"2048", 2048, 2048, 2048, true},
        {"4096", 4096, 4096, 4096, true},   {"8192", 8192, 8192, 8192, false},
        {"2048x512@512x2048", 2048, 512, 2048, true},
        {"2048x2048@2048x512", 2048, 2048, 512, false},
    };
    int rc = 0;
    for (int bf = 0; bf < 2; bf++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            if (!o.quick || shapes[i].quick)
                rc |= product(ctx, &a, h, &shapes[i], bf == 1, &o, 77 + i);
    a.destroy(h);
    kiln_ctx_free(ctx);
    return rc;
}
