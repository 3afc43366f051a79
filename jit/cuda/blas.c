/* blas.c — cuBLAS, loaded at run time (KILN_CUBLAS, else libcublas from
 * $KILN_CUDA_PATH/lib64, /usr/local/cuda/lib64 or the library path), for
 * the matmul kernels that are a plain product: no epilogue, operands that
 * cuBLAS can read in place (one unit stride each, one stride per batch),
 * f32, f64, f16 or bf16 with f32 accumulation. Those go to
 * cublasGemmStridedBatchedEx on the device's stream; a kernel with fused
 * work keeps its generated code. A missing or failing cuBLAS is not an
 * error: the generated kernels run instead. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cuda/cuda.h"

enum {
    OP_N = 0,
    OP_T = 1,
    R_32F = 0,
    R_64F = 1,
    R_16F = 2,
    R_16BF = 14,
    COMPUTE_32F = 68,
    COMPUTE_64F = 70,
    COMPUTE_32F_FAST_TF32 = 77,
    GEMM_DEFAULT = -1,
};

typedef struct blas_api {
    void *handle;
    int (*create)(void **);
    int (*destroy)(void *);
    int (*set_stream)(void *, jit_cuda_stream *);
    int (*gemm)(void *, int, int, int, int, int, const void *, const void *, int, int,
                long long, const void *, int, int, long long, const void *, void *, int, int,
                long long, int, int, int);
    char why[512];
} blas_api;

static blas_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static bool sym(void *h, const char *name, void *slot) {
    void *p = dlsym(h, name);
    if (p)
        memcpy(slot, &p, sizeof p);
    return p != NULL;
}

static void *open_in(const char *dir) {
    static const char *const names[] = {"libcublas.so", "libcublas.so.13", "libcublas.so.12"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s%s%s", dir ? dir : "", dir ? "/" : "", names[i]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    return NULL;
}

static void load_api(void) {
    const char *path = getenv("KILN_CUBLAS");
    void *h = NULL;
    if (path && *path) {
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    } else {
        const char *root = getenv("KILN_CUDA_PATH");
        char dir[4096];
        if (root && *root && (size_t)snprintf(dir, sizeof dir, "%s/lib64", root) < sizeof dir)
            h = open_in(dir);
        if (!h)
            h = open_in("/usr/local/cuda/lib64");
        if (!h)
            h = open_in(NULL);
    }
    if (!h) {
        snprintf(api.why, sizeof api.why, "cuBLAS not found (%s)",
                 path && *path ? path : "libcublas.so in $KILN_CUDA_PATH/lib64, "
                                        "/usr/local/cuda/lib64 or the library path");
        return;
    }
    if (!(sym(h, "cublasCreate_v2", &api.create) && sym(h, "cublasDestroy_v2", &api.destroy) &&
          sym(h, "cublasSetStream_v2", &api.set_stream) &&
          sym(h, "cublasGemmStridedBatchedEx", &api.gemm))) {
        snprintf(api.why, sizeof api.why, "cuBLAS lacks cublasGemmStridedBatchedEx");
        dlclose(h);
        return;
    }
    api.handle = h;
}

struct jit_cuda_blas {
    void *h; /* cublasHandle_t */
};

jit_cuda_blas *jit_cuda_blas_open(jit_cuda_stream *s, char *msg, size_t cap) {
    pthread_once(&api_once, load_api);
    if (!api.handle) {
        snprintf(msg, cap, "%s", api.why);
        return NULL;
    }
    jit_cuda_blas *b = calloc(1, sizeof *b);
    int rc = b ? api.create(&b->h) : -1;
    if (rc != 0 || api.set_stream(b->h, s) != 0) {
        snprintf(msg, cap, "cuBLAS did not start (cublasCreate: status %d)", rc);
        if (b && rc == 0)
            api.destroy(b->h);
        free(b);
        return NULL;
    }
    return b;
}

void jit_cuda_blas_close(jit_cuda_blas *b) {
    if (!b)
        return;
    api.destroy(b->h);
    free(b);
}

/* ---- which kernels are a plain product ---- */

static int blas_type(kiln_dtype dt) {
    switch (dt) {
    case KILN_F32: return R_32F;
    case KILN_F64: return R_64F;
    case KILN_F16: return R_16F;
    case KILN_BF16: return R_16BF;
    default: return -1;
    }
}

/* The one stride of an operand over the batch, when its batch axes
 * flatten into one (each stride the next one's times its size, or all 0:
 * a broadcast operand). */
static bool batch_stride(const lower_kernel *k, const lower_operand *o, long long *stride) {
    *stride = k->nbatch ? o->batch_strides[k->nbatch - 1] : 0;
    for (int d = k->nbatch - 2; d >= 0; d--) {
        int64_t want = o->batch_strides[d + 1] * k->batch[d + 1];
        if (o->batch_strides[d] != want && !(k->batch[d] == 1))
            return false;
    }
    return *stride >= 0;
}

/* An operand of rows x cols (row-major view, strides rs and cs) as cuBLAS
 * reads its transpose in column-major order: op N with ld = rs when the
 * columns are contiguous, op T with ld = cs when the rows are. A single row
 * or column reads the same whatever its stride says. */
static bool layout(const lower_operand *o, int64_t rows, int64_t cols, int *op, long long *ld) {
    int64_t rs = rows == 1 ? cols : o->row_stride, cs = cols == 1 ? 1 : o->col_stride;
    if (cs == 1 && rs >= cols && rs > 0) {
        *op = OP_N, *ld = rs;
        return true;
    }
    rs = rows == 1 ? 1 : o->row_stride, cs = cols == 1 ? rows : o->col_stride;
    if (rs == 1 && cs >= rows && cs > 0) {
        *op = OP_T, *ld = cs;
        return true;
    }
    return false;
}

bool jit_cuda_gemm_of(const lower_kernel *k, const graph_node *const *nodes, jit_cuda_gemm *g) {
    if (k->kind != LOWER_MATMUL || k->nouts != 1 || k->numel <= 0 || k->nsizes)
        return false;
    /* no epilogue: what is stored is the dot product, converted at most */
    const lower_ins *r = &k->ins[k->result];
    if (r->op == UOP_PRIM && r->prim == PRIM_CAST)
        r = &k->ins[r->a];
    if (r->op != UOP_ACC)
        return false;
    const graph_node *out = nodes[0], *a = nodes[k->a.buf], *b = nodes[k->b.buf];
    kiln_dtype dt = out->dtype;
    if (a->dtype != dt || b->dtype != dt || blas_type(dt) < 0)
        return false;
    if (k->n > INT_MAX || k->m > INT_MAX || k->k > INT_MAX || k->k == 0)
        return false;
    int64_t batch = 1;
    for (int d = 0; d < k->nbatch; d++)
        batch *= k->batch[d];
    if (batch > INT_MAX || graph_numel(out) != batch * k->n * k->m)
        return false;
    long long sa, sb;
    int opa, opb;
    long long lda, ldb;
    /* row-major C = A B is column-major C^T = B^T A^T: cuBLAS's first operand
     * is B (m x k as it reads it), its second A */
    if (!batch_stride(k, &k->a, &sa) || !batch_stride(k, &k->b, &sb) ||
        !layout(&k->b, k->k, k->m, &opb, &ldb) || !layout(&k->a, k->n, k->k, &opa, &lda))
        return false;
    *g = (jit_cuda_gemm){.dtype = dt, .op_first = opb, .op_second = opa, .m = (int)k->m,
                         .n = (int)k->n, .k = (int)k->k, .ld_first = ldb, .ld_second = lda,
                         .ld_out = k->m, .stride_first = sb, .stride_second = sa,
                         .stride_out = (long long)k->n * k->m, .batch = (int)batch,
                         .first_offset = k->b.offset, .second_offset = k->a.offset};
    return g->ld_first <= INT_MAX && g->ld_second <= INT_MAX;
}

kiln_status jit_cuda_blas_gemm(jit_cuda_blas *b, const jit_cuda_gemm *g, bool tf32,
                               jit_cuda_ptr first, jit_cuda_ptr second, jit_cuda_ptr out,
                               char *msg, size_t cap) {
    int t = blas_type(g->dtype);
    size_t es = g->dtype == KILN_F64 ? 8 : g->dtype == KILN_F32 ? 4 : 2;
    const float one = 1, zero = 0;
    const double one64 = 1, zero64 = 0;
    bool f64 = g->dtype == KILN_F64;
    int compute = f64 ? COMPUTE_64F
                      : g->dtype == KILN_F32 && tf32 ? COMPUTE_32F_FAST_TF32 : COMPUTE_32F;
    int rc = api.gemm(b->h, g->op_first, g->op_second, g->m, g->n, g->k,
                      f64 ? (const void *)&one64 : (const void *)&one,
                      (const void *)(uintptr_t)(first + (jit_cuda_ptr)g->first_offset * es), t,
                      (int)g->ld_first, g->stride_first,
                      (const void *)(uintptr_t)(second + (jit_cuda_ptr)g->second_offset * es), t,
                      (int)g->ld_second, g->stride_second,
                      f64 ? (const void *)&zero64 : (const void *)&zero, (void *)(uintptr_t)out,
                      t, (int)g->ld_out, g->stride_out, g->batch, compute, GEMM_DEFAULT);
    if (rc != 0) {
        snprintf(msg, cap, "kiln: cublasGemmStridedBatchedEx (%dx%dx%d, batch %d) failed with "
                           "status %d", g->n, g->k, g->m, g->batch, rc);
        return KILN_ERR_DEVICE;
    }
    return KILN_OK;
}
