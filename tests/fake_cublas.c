/* fake_cublas.c — a stand-in for cuBLAS (loaded through KILN_CUBLAS by
 * tests/cuda_device_test.c) over the fake driver's memory, which is host
 * memory: cublasGemmStridedBatchedEx computes its product on the host, in
 * double, so that a matmul kiln hands to cuBLAS on the fake device has
 * values a test can check against the reference evaluator. f32, f64, f16 and
 * bf16; ops N and T; alpha 1, beta 0 as kiln passes them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

long fake_cublas_calls;

/* A product takes FAKE_CUBLAS_US (default 0) microseconds on the fake
 * driver's clock, which events read (fake_cuda.c). */
static void take_time(void) {
    const char *us = getenv("FAKE_CUBLAS_US"), *drv = getenv("KILN_CUDA_DRIVER");
    void *h = us && drv ? dlopen(drv, RTLD_NOW | RTLD_NOLOAD) : NULL;
    void (*advance)(double) = h ? (void (*)(double))(uintptr_t)dlsym(h, "fake_cuda_advance") : NULL;
    if (advance)
        advance(strtod(us, NULL) * 1e-3);
    if (h)
        dlclose(h);
}

int cublasCreate_v2(void **h) {
    *h = malloc(1);
    return *h ? 0 : 1;
}
int cublasDestroy_v2(void *h) {
    free(h);
    return 0;
}
int cublasSetStream_v2(void *h, void *s) { return h && s ? 0 : 7; }

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return h & 0x8000 ? -v : v;
}

static uint16_t double_to_half(double d) {
    float f = (float)d;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    float a = fabsf(f);
    if (isnan(a))
        return (uint16_t)(sign | 0x7e00);
    if (a >= 65520.0f)
        return (uint16_t)(sign | 0x7c00);
    if (a < 6.103515625e-05f) /* subnormal: a multiple of 2^-24, rounded to even */
        return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
    int e;
    float m = frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    uint32_t q = (uint32_t)nearbyintf(m * 2048.0f); /* 11 bits */
    if (q == 2048)
        q = 1024, e++;
    return (uint16_t)(sign | ((uint32_t)(e + 14) << 10) | (q - 1024));
}

static double load(const void *p, int type, size_t i) {
    switch (type) {
    case 0: return ((const float *)p)[i];
    case 1: return ((const double *)p)[i];
    case 2: return half_to_double(((const uint16_t *)p)[i]);
    case 14: {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    }
    return NAN;
}

static void store(void *p, int type, size_t i, double v) {
    switch (type) {
    case 0: ((float *)p)[i] = (float)v; break;
    case 1: ((double *)p)[i] = v; break;
    case 2: ((uint16_t *)p)[i] = double_to_half(v); break;
    case 14: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)p)[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
        break;
    }
    }
}

/* Column-major: C (m x n) = op(A) (m x k) op(B) (k x n), per batch. */
int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                               const void *A, int at, int lda, long long sa, const void *B,
                               int bt, int ldb, long long sb, const void *beta, void *C, int ct,
                               int ldc, long long sc, int batch, int compute, int algo) {
    (void)alpha, (void)beta, (void)compute, (void)algo;
    if (!h || m < 0 || n < 0 || k < 0 || batch < 0 || (ta != 0 && ta != 1) ||
        (tb != 0 && tb != 1) || ldc < m || lda < (ta ? k : m) || ldb < (tb ? n : k))
        return 7; /* CUBLAS_STATUS_INVALID_VALUE */
    fake_cublas_calls++;
    take_time();
    for (int p = 0; p < batch; p++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double acc = 0;
                for (int q = 0; q < k; q++) {
                    size_t ai = ta ? (size_t)i * lda + q : (size_t)q * lda + i;
                    size_t bi = tb ? (size_t)q * ldb + j : (size_t)j * ldb + q;
                    acc += load(A, at, (size_t)(p * sa) + ai) * load(B, bt, (size_t)(p * sb) + bi);
                }
                store(C, ct, (size_t)(p * sc) + (size_t)j * ldc + i, acc);
            }
    return 0;
}

/* ---- cuBLASLt (the same library serves KILN_CUBLASLT) ---- */

long fake_cublaslt_calls;

typedef struct lt_desc {
    int compute, scale;
    int32_t ta, tb;
    uint32_t epilogue;
    const void *bias;
} lt_desc;

typedef struct lt_layout {
    int type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
} lt_layout;

int cublasLtCreate(void **h) { return cublasCreate_v2(h); }
int cublasLtDestroy(void *h) { return cublasDestroy_v2(h); }
int cublasLtMatmulDescCreate(void **d, int compute, int scale) {
    lt_desc *x = calloc(1, sizeof *x);
    if (!x)
        return 3;
    x->compute = compute, x->scale = scale, x->epilogue = 1;
    *d = x;
    return 0;
}
int cublasLtMatmulDescDestroy(void *d) {
    free(d);
    return 0;
}
int cublasLtMatmulDescSetAttribute(void *d, int attr, const void *buf, size_t n) {
    lt_desc *x = d;
    switch (attr) {
    case 3: if (n != 4) return 7; memcpy(&x->ta, buf, 4); return 0;
    case 4: if (n != 4) return 7; memcpy(&x->tb, buf, 4); return 0;
    case 7: if (n != 4) return 7; memcpy(&x->epilogue, buf, 4); return 0;
    case 8: if (n != sizeof(void *)) return 7; memcpy(&x->bias, buf, n); return 0;
    }
    return 7;
}
int cublasLtMatrixLayoutCreate(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
    lt_layout *x = calloc(1, sizeof *x);
    if (!x)
        return 3;
    *x = (lt_layout){type, rows, cols, ld, 1, 0};
    *l = x;
    return (int64_t)rows > ld ? 7 : 0;
}
int cublasLtMatrixLayoutDestroy(void *l) {
    free(l);
    return 0;
}
int cublasLtMatrixLayoutSetAttribute(void *l, int attr, const void *buf, size_t n) {
    lt_layout *x = l;
    if (attr == 5 && n == 4)
        return memcpy(&x->batch, buf, 4), 0;
    if (attr == 6 && n == 8)
        return memcpy(&x->stride, buf, 8), 0;
    return 7;
}

/* D = op(A) op(B) + beta C (+ bias along D's rows), column-major, per batch:
 * epilogue 1 (default) or 4 (bias) only. */
int cublasLtMatmul(void *h, void *desc, const void *alpha, const void *A, void *la,
                   const void *B, void *lb, const void *beta, const void *C, void *lc, void *D,
                   void *ld, const void *algo, void *ws, size_t wsn, void *stream) {
    (void)algo, (void)ws, (void)wsn;
    lt_desc *x = desc;
    lt_layout *a = la, *b = lb, *c = lc, *d = ld;
    if (!h || !x || !alpha || !beta || !stream || (x->epilogue != 1 && x->epilogue != 4) ||
        (x->epilogue == 4 && !x->bias))
        return 7;
    uint64_t m = x->ta ? a->cols : a->rows, k = x->ta ? a->rows : a->cols;
    uint64_t n = x->tb ? b->rows : b->cols;
    if ((x->tb ? b->cols : b->rows) != k || d->rows != m || d->cols != n || c->rows != m ||
        c->cols != n || a->batch != d->batch || b->batch != d->batch)
        return 7;
    double bv = x->scale == 1 ? *(const double *)beta : *(const float *)beta;
    fake_cublaslt_calls++;
    take_time();
    for (int p = 0; p < d->batch; p++)
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                double acc = 0;
                for (uint64_t q = 0; q < k; q++) {
                    size_t ai = x->ta ? i * (size_t)a->ld + q : q * (size_t)a->ld + i;
                    size_t bi = x->tb ? q * (size_t)b->ld + j : j * (size_t)b->ld + q;
                    acc += load(A, a->type, (size_t)(p * a->stride) + ai) *
                           load(B, b->type, (size_t)(p * b->stride) + bi);
                }
                if (bv != 0)
                    acc += bv * load(C, c->type, (size_t)(p * c->stride) + j * (size_t)c->ld + i);
                if (x->epilogue == 4)
                    acc += load(x->bias, d->type, i);
                store(D, d->type, (size_t)(p * d->stride) + j * (size_t)d->ld + i, acc);
            }
    return 0;
}
