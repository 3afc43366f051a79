/* blas.c — cuBLAS and cuBLASLt, loaded at run time (KILN_CUBLAS and
 * KILN_CUBLASLT, else libcublas and libcublasLt from $KILN_CUDA_PATH/lib64,
 * /usr/local/cuda/lib64 or the library path), for the matmul kernels whose
 * work they do entirely: a product whose operands cuBLAS can read in place
 * (one unit stride each, one stride per batch), f32, f64, f16 or bf16 with
 * f32 accumulation, stored as it is (cublasGemmStridedBatchedEx) or with a
 * bias along its columns or a tensor of its shape added (kiln_linear's and
 * a residual's epilogues: cublasLtMatmul with the bias epilogue, or with
 * beta = 1 over a C of its own). Everything else keeps its generated
 * kernel, an activation after the product included (epilogue_of says
 * why). A missing or failing library is not an error: the generated
 * kernels run instead. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
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
    /* cuBLASLt, for the epilogues (NULL lt: they keep their kernels) */
    void *lt;
    int (*lt_create)(void **);
    int (*lt_destroy)(void *);
    int (*desc_create)(void **, int, int);
    int (*desc_destroy)(void *);
    int (*desc_set)(void *, int, const void *, size_t);
    int (*layout_create)(void **, int, uint64_t, uint64_t, int64_t);
    int (*layout_destroy)(void *);
    int (*layout_set)(void *, int, const void *, size_t);
    int (*matmul)(void *, void *, const void *, const void *, void *, const void *, void *,
                  const void *, const void *, void *, void *, void *, const void *, void *,
                  size_t, jit_cuda_stream *);
} blas_api;

enum { /* cublasLt.h */
    LT_DESC_TRANSA = 3,
    LT_DESC_TRANSB = 4,
    LT_DESC_EPILOGUE = 7,
    LT_DESC_BIAS_POINTER = 8,
    LT_EPILOGUE_DEFAULT = 1,
    LT_EPILOGUE_BIAS = 4,
    LT_LAYOUT_BATCH_COUNT = 5,
    LT_LAYOUT_BATCH_STRIDE = 6,
};

static blas_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static bool sym(void *h, const char *name, void *slot) {
    void *p = dlsym(h, name);
    if (p)
        memcpy(slot, &p, sizeof p);
    return p != NULL;
}

static void *open_in(const char *dir, const char *lib) {
    static const char *const suffixes[] = {".so", ".so.13", ".so.12"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s%s%s%s", dir ? dir : "", dir ? "/" : "", lib,
                 suffixes[i]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    return NULL;
}

/* The library `env` names, else lib in the CUDA paths. */
static void *open_lib(const char *env, const char *lib) {
    const char *path = getenv(env);
    if (path && *path)
        return dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *root = getenv("KILN_CUDA_PATH");
    char dir[4096];
    void *h = NULL;
    if (root && *root && (size_t)snprintf(dir, sizeof dir, "%s/lib64", root) < sizeof dir)
        h = open_in(dir, lib);
    if (!h)
        h = open_in("/usr/local/cuda/lib64", lib);
    return h ? h : open_in(NULL, lib);
}

static void load_lt(void) {
    void *h = open_lib("KILN_CUBLASLT", "libcublasLt");
    if (h && sym(h, "cublasLtCreate", &api.lt_create) &&
        sym(h, "cublasLtDestroy", &api.lt_destroy) &&
        sym(h, "cublasLtMatmulDescCreate", &api.desc_create) &&
        sym(h, "cublasLtMatmulDescDestroy", &api.desc_destroy) &&
        sym(h, "cublasLtMatmulDescSetAttribute", &api.desc_set) &&
        sym(h, "cublasLtMatrixLayoutCreate", &api.layout_create) &&
        sym(h, "cublasLtMatrixLayoutDestroy", &api.layout_destroy) &&
        sym(h, "cublasLtMatrixLayoutSetAttribute", &api.layout_set) &&
        sym(h, "cublasLtMatmul", &api.matmul))
        api.lt = h;
    else if (h)
        dlclose(h);
}

static void load_api(void) {
    const char *path = getenv("KILN_CUBLAS");
    void *h = open_lib("KILN_CUBLAS", "libcublas");
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
    load_lt();
}

struct jit_cuda_blas {
    void *h;  /* cublasHandle_t */
    void *lt; /* cublasLtHandle_t, or NULL */
    jit_cuda_stream *stream;
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
    b->stream = s;
    if (api.lt && api.lt_create(&b->lt) != 0)
        b->lt = NULL;
    return b;
}

void jit_cuda_blas_close(jit_cuda_blas *b) {
    if (!b)
        return;
    if (b->lt)
        api.lt_destroy(b->lt);
    api.destroy(b->h);
    free(b);
}

bool jit_cuda_blas_epilogues(const jit_cuda_blas *b) { return b && b->lt; }

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

static const lower_ins *uncast(const lower_kernel *k, const lower_ins *x) {
    return x->op == UOP_PRIM && x->prim == PRIM_CAST ? &k->ins[x->a] : x;
}

/* What the kernel stores besides the dot product: nothing, or acc + a load
 * (of the output's dtype, unmasked) at the output element (a residual: C
 * with beta = 1) or at its column (a bias: the bias epilogue).
 *
 * cuBLASLt's activation epilogues are not used, since neither computes what
 * kiln's op does:
 * - RELU and RELU_BIAS are documented as max(x, 0) and nothing is said of a
 *   NaN, while kiln's relu keeps a NaN (and makes -0 +0: lower/rules_math.c,
 *   graph/dtype.c's x > 0 || isnan(x)). The max of C and of PTX (fmaxf,
 *   max.f32) gives 0 for max(NaN, 0), CUTLASS's ReLu keeps the NaN; which
 *   cuBLASLt's kernels do is unstated and may differ between the kernels its
 *   heuristic picks per shape, architecture and version, so no check made
 *   once could vouch for every call. A product gone NaN (a NaN or an
 *   infinity in an operand, an overflow) would come out 0 through a max
 *   that drops NaN, hiding the fault the reference shows.
 * - GELU is the tanh form (its documentation says only GELU(x)), so
 *   kiln_gelu (erf's) is not it. kiln_gelu_tanh is a composition of ops,
 *   which the scheduler leaves out of the product's kernel (the product
 *   alone goes to cuBLAS, the GELU is a kernel of its own); and cuBLASLt
 *   states no error for its GELU, so no bound could be set against the
 *   tests' NMSE of 1e-12 for f32 (relative errors near 1e-6):
 *   tanh.approx.f32 alone, which CUTLASS's GELU_taylor uses, is off by
 *   about 2^-11 relatively, an NMSE of the order of 1e-7. */
static bool epilogue_of(const lower_kernel *k, const graph_node *const *nodes, kiln_dtype dt,
                        int *epi, int *buf) {
    const lower_ins *r = uncast(k, &k->ins[k->result]);
    *epi = JIT_GEMM_PLAIN, *buf = -1;
    if (r->op == UOP_ACC)
        return true;
    /* a half product is rounded to its dtype before anything is added to it
     * (as the reference rounds each op), which an epilogue would not do */
    if (r->op != UOP_PRIM || r->prim != PRIM_ADD || (dt != KILN_F32 && dt != KILN_F64))
        return false;
    const lower_ins *x = uncast(k, &k->ins[r->a]), *y = uncast(k, &k->ins[r->b]);
    if (y->op == UOP_ACC) {
        const lower_ins *t = x;
        x = y, y = t;
    }
    if (x->op != UOP_ACC || y->op != UOP_LOAD || y->b >= 0 || nodes[y->buf]->dtype != dt)
        return false;
    const lower_ins *at = &k->ins[y->a];
    int64_t n = graph_numel(nodes[y->buf]);
    if (at->op == UOP_GIDX && n == k->numel)
        *epi = JIT_GEMM_RESIDUAL;
    else if (at->op == UOP_IMOD && k->ins[at->a].op == UOP_GIDX && k->ins[at->b].op == UOP_IMM &&
             k->ins[at->b].imm.i == k->m && n == k->m)
        *epi = JIT_GEMM_BIAS;
    else
        return false;
    *buf = y->buf;
    return true;
}

bool jit_cuda_gemm_of(const lower_kernel *k, const graph_node *const *nodes, jit_cuda_gemm *g) {
    if (k->kind != LOWER_MATMUL || k->nouts != 1 || k->numel <= 0 || k->nsizes)
        return false;
    int epi, epi_buf;
    if (!epilogue_of(k, nodes, nodes[0]->dtype, &epi, &epi_buf))
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
                         .first_offset = k->b.offset, .second_offset = k->a.offset,
                         .epilogue = epi, .epilogue_buf = epi_buf};
    return g->ld_first <= INT_MAX && g->ld_second <= INT_MAX;
}

/* The epilogues through cublasLtMatmul: descriptors made per call (a few
 * microseconds of host time beside a product worth handing to cuBLAS),
 * the algorithm left to cuBLASLt's heuristic, no workspace. */
static kiln_status lt_gemm(jit_cuda_blas *b, const jit_cuda_gemm *g, int compute, int t,
                           const void *one, const void *zero, const void *first,
                           const void *second, const void *extra, void *out, char *msg,
                           size_t cap) {
    void *desc = NULL, *la = NULL, *lb = NULL, *lc = NULL;
    int scale = g->dtype == KILN_F64 ? R_64F : R_32F;
    int rc = api.desc_create(&desc, compute, scale);
    int32_t ta = g->op_first, tb = g->op_second, batch = g->batch;
    uint32_t epi = g->epilogue == JIT_GEMM_BIAS ? LT_EPILOGUE_BIAS : LT_EPILOGUE_DEFAULT;
    if (rc == 0)
        rc = api.desc_set(desc, LT_DESC_TRANSA, &ta, sizeof ta) ||
             api.desc_set(desc, LT_DESC_TRANSB, &tb, sizeof tb) ||
             api.desc_set(desc, LT_DESC_EPILOGUE, &epi, sizeof epi);
    if (rc == 0 && g->epilogue == JIT_GEMM_BIAS)
        rc = api.desc_set(desc, LT_DESC_BIAS_POINTER, &extra, sizeof extra);
    /* each operand as stored: op(first) is m x k, op(second) k x n */
    uint64_t ar = ta ? (uint64_t)g->k : (uint64_t)g->m, ac = ta ? (uint64_t)g->m : (uint64_t)g->k;
    uint64_t br = tb ? (uint64_t)g->n : (uint64_t)g->k, bc = tb ? (uint64_t)g->k : (uint64_t)g->n;
    if (rc == 0)
        rc = api.layout_create(&la, t, ar, ac, g->ld_first) ||
             api.layout_create(&lb, t, br, bc, g->ld_second) ||
             api.layout_create(&lc, t, (uint64_t)g->m, (uint64_t)g->n, g->ld_out);
    int64_t strides[3] = {g->stride_first, g->stride_second, g->stride_out};
    void *layouts[3] = {la, lb, lc};
    for (int i = 0; i < 3 && rc == 0 && batch > 1; i++)
        rc = api.layout_set(layouts[i], LT_LAYOUT_BATCH_COUNT, &batch, sizeof batch) ||
             api.layout_set(layouts[i], LT_LAYOUT_BATCH_STRIDE, &strides[i], sizeof strides[i]);
    /* residual: D = A B + C with C the added tensor; bias: beta = 0 over D */
    bool residual = g->epilogue == JIT_GEMM_RESIDUAL;
    if (rc == 0)
        rc = api.matmul(b->lt, desc, one, first, la, second, lb, residual ? one : zero,
                        residual ? extra : out, lc, out, lc, NULL, NULL, 0, b->stream);
    for (int i = 0; i < 3; i++)
        if (layouts[i])
            api.layout_destroy(layouts[i]);
    if (desc)
        api.desc_destroy(desc);
    if (rc != 0) {
        snprintf(msg, cap, "kiln: cublasLtMatmul (%dx%dx%d, batch %d, %s) failed with status %d",
                 g->n, g->k, g->m, g->batch, residual ? "a residual" : "a bias", rc);
        return KILN_ERR_DEVICE;
    }
    return KILN_OK;
}

kiln_status jit_cuda_blas_gemm(jit_cuda_blas *b, const jit_cuda_gemm *g, bool tf32,
                               jit_cuda_ptr first, jit_cuda_ptr second, jit_cuda_ptr out,
                               jit_cuda_ptr extra, char *msg, size_t cap) {
    int t = blas_type(g->dtype);
    size_t es = g->dtype == KILN_F64 ? 8 : g->dtype == KILN_F32 ? 4 : 2;
    const float one = 1, zero = 0;
    const double one64 = 1, zero64 = 0;
    bool f64 = g->dtype == KILN_F64;
    int compute = f64 ? COMPUTE_64F
                      : g->dtype == KILN_F32 && tf32 ? COMPUTE_32F_FAST_TF32 : COMPUTE_32F;
    if (g->epilogue != JIT_GEMM_PLAIN) {
        if (!b->lt) {
            snprintf(msg, cap, "kiln: cuBLASLt is not loaded: an epilogue cannot go to cuBLAS");
            return KILN_ERR_DEVICE;
        }
        return lt_gemm(b, g, compute, t, f64 ? (const void *)&one64 : (const void *)&one,
                       f64 ? (const void *)&zero64 : (const void *)&zero,
                       (const void *)(uintptr_t)(first + (jit_cuda_ptr)g->first_offset * es),
                       (const void *)(uintptr_t)(second + (jit_cuda_ptr)g->second_offset * es),
                       (const void *)(uintptr_t)extra, (void *)(uintptr_t)out, msg, cap);
    }
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
