/* cuda.h — what jit/'s files share about the CUDA target: the renderer of
 * kernel IR to CUDA C, NVRTC and the driver API (both loaded at run time, so
 * kiln builds and runs where CUDA is absent), and the compile check that CI
 * runs on every program the scheduler makes.
 *
 * The generated code's contract, which a launcher must follow:
 * - One translation unit per program, with no host code and no includes.
 *   Every kernel that is not LOWER_ALIAS is `extern "C" __global__` and named
 *   k->name.
 * - Parameters: one pointer per buffer of the kernel's buffer array, in its
 *   order (k->nouts outputs, then k->ninputs inputs), each pointing at the
 *   node's data in its storage type (f16 and bf16 as 16-bit patterns, bool as
 *   one byte). Outputs never alias inputs. No other parameters: sizes are
 *   compiled in.
 * - A reduction split across blocks (lower_plan.row_blocks) keeps its
 *   partials and per-row counts in `__device__` arrays of the module, zeroed
 *   when the module loads and left zeroed by each launch: launches of one
 *   loaded module must not run concurrently (one stream), and one that was
 *   stopped halfway leaves the module unusable (as any fault leaves the
 *   context).
 * - Launch with jit_cuda_launch_dims' grid and block and no dynamic shared
 *   memory. Every kernel loops over its work (grid-stride), so a smaller
 *   grid is correct too; the block size is fixed per kernel and must be
 *   exactly the one given. A kernel with k->numel == 0 need not run. */
#ifndef KILN_JIT_CUDA_H
#define KILN_JIT_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "api/kiln.h"
#include "lower/lower.h"

/* ---- rendering ---------------------------------------------------------- */

/* What the planner is told about a CUDA device. */
const lower_target *jit_cuda_target(void);

/* The CUDA C translation unit of a program planned for jit_cuda_target(), in
 * *out (malloc'd); KILN_ERR_COMPILE naming what this target cannot print, or
 * KILN_ERR_OOM, with a message. */
kiln_status jit_cuda_render(const lower_program *p, const lower_plan *plans, char **out,
                            char *msg, size_t cap);

/* Inside the renderer: jit/cstyle's spellings for CUDA (render_cuda.c), and
 * a LOWER_ATTENTION kernel (render_attention.c), printed in two parts: its
 * e^x as a __device__ function <symbol>_exp before the kernel's signature,
 * then the kernel's body after it. A kernel they cannot print fails b with
 * the reason. */
struct cstyle_buf;
struct cstyle_target;
const struct cstyle_target *jit_cuda_cstyle_target(void);
void jit_cuda_render_attention_exp(struct cstyle_buf *b, const lower_kernel *k,
                                   const lower_plan *plan);
void jit_cuda_render_attention(struct cstyle_buf *b, const lower_kernel *k,
                               const lower_plan *plan);

/* How to launch a kernel of a rendered program, from its plan. */
typedef struct jit_cuda_dims {
    unsigned grid, block;
} jit_cuda_dims;
jit_cuda_dims jit_cuda_launch_dims(const lower_plan *plan);

/* ---- NVRTC --------------------------------------------------------------- */

/* The compiled forms of one translation unit (each malloc'd; free with
 * jit_cuda_binary_free). */
typedef struct jit_cuda_binary {
    char *ptx;    /* NUL-terminated */
    size_t ptx_size;
    void *cubin;  /* NULL unless asked for */
    size_t cubin_size;
    char *log;    /* NUL-terminated, possibly empty */
} jit_cuda_binary;

void jit_cuda_binary_free(jit_cuda_binary *b);

/* Whether NVRTC can be loaded ($KILN_CUDA_PATH/lib64, /usr/local/cuda/lib64,
 * then the plain sonames); if not, msg says why. */
bool jit_cuda_nvrtc_available(char *msg, size_t cap);

/* "nvrtc <major>.<minor>", or NULL when NVRTC is not available. */
const char *jit_cuda_nvrtc_version(void);

/* The flags every compile passes besides the architecture (NULL-terminated):
 * part of every key of compiled code. */
const char *const *jit_cuda_nvrtc_flags(void);

/* Compiles src for architecture arch (as 90 for sm_90; 0 means 90): PTX for
 * compute_<arch>, and with want_cubin a cubin for sm_<arch>. Any error, and
 * any warning in the log, is a failure: KILN_ERR_COMPILE with the log in msg
 * (KILN_ERR_DEVICE when NVRTC is missing). out may be NULL when only the
 * verdict is wanted. */
kiln_status jit_cuda_compile(const char *src, int arch, bool want_cubin, jit_cuda_binary *out,
                             char *msg, size_t cap);

/* Renders p and compiles it for sm_90. Sources already compiled successfully
 * in this process (by a hash of the source) are not compiled again. Thread
 * safe. */
kiln_status jit_cuda_check_program(const lower_program *p, char *msg, size_t cap);

/* ---- the driver API ------------------------------------------------------ */

typedef struct jit_cuda_device jit_cuda_device;
typedef struct jit_cuda_module jit_cuda_module;
typedef unsigned long long jit_cuda_ptr; /* a device address (CUdeviceptr) */
typedef struct jit_cuda_stream jit_cuda_stream; /* a CUstream */
typedef struct jit_cuda_event jit_cuda_event;   /* a CUevent */
typedef struct jit_cuda_fn jit_cuda_fn;         /* a CUfunction */

/* The driver is libcuda.so.1, or the library KILN_CUDA_DRIVER names.
 *
 * Opens device ordinal (its primary context, made current on this thread).
 * NULL with a message when there is no driver, no device, or it fails:
 * never a crash. */
jit_cuda_device *jit_cuda_device_open(int ordinal, char *msg, size_t cap);
void jit_cuda_device_close(jit_cuda_device *d);
/* The number of devices (0 when there is no driver), with the reason in msg
 * when 0. */
int jit_cuda_device_count(char *msg, size_t cap);
/* Compute capability as major * 10 + minor, e.g. 90. */
int jit_cuda_device_arch(const jit_cuda_device *d);
/* A device attribute (a CUdevice_attribute number), 0 when the driver
 * cannot say. */
enum {
    JIT_CUDA_ATTR_CLOCK_KHZ = 13, /* the SMs' peak clock */
    JIT_CUDA_ATTR_SMS = 16,       /* multiprocessors */
};
int jit_cuda_device_attribute(const jit_cuda_device *d, int attr);
const char *jit_cuda_device_name(const jit_cuda_device *d);

/* Loads a module from a cubin, falling back to the PTX when the cubin is
 * absent or the driver refuses it. */
jit_cuda_module *jit_cuda_module_load(jit_cuda_device *d, const jit_cuda_binary *bin, char *msg,
                                      size_t cap);
void jit_cuda_module_unload(jit_cuda_module *m);

/* Launches kernel `name` of m with one pointer argument per buffer and waits
 * for it to finish. */
kiln_status jit_cuda_launch(jit_cuda_module *m, const char *name, jit_cuda_dims dims, int nbufs,
                            const jit_cuda_ptr *bufs, char *msg, size_t cap);

/* Kernel `name` of m, looked up once per program. */
kiln_status jit_cuda_function(jit_cuda_module *m, const char *name, jit_cuda_fn **f, char *msg,
                              size_t cap);
/* Queues a launch of f on stream s (NULL: the legacy default stream) and
 * returns; errors of the launch itself are reported here, those of the
 * running kernel at the next wait. */
kiln_status jit_cuda_launch_async(jit_cuda_fn *f, const char *name, jit_cuda_dims dims, int nbufs,
                                  const jit_cuda_ptr *bufs, jit_cuda_stream *s, char *msg,
                                  size_t cap);

kiln_status jit_cuda_alloc(jit_cuda_device *d, size_t bytes, jit_cuda_ptr *p, char *msg,
                           size_t cap);
void jit_cuda_free(jit_cuda_device *d, jit_cuda_ptr p);
kiln_status jit_cuda_to_device(jit_cuda_device *d, jit_cuda_ptr dst, const void *src, size_t n,
                               char *msg, size_t cap);
kiln_status jit_cuda_to_host(jit_cuda_device *d, void *dst, jit_cuda_ptr src, size_t n, char *msg,
                             size_t cap);

/* Makes d's context current on the calling thread. */
kiln_status jit_cuda_make_current(jit_cuda_device *d, char *msg, size_t cap);
/* The device's memory in bytes (0 when unknown); its context must be current. */
size_t jit_cuda_device_memory(jit_cuda_device *d);
/* cuDriverGetVersion's number (12040 for 12.4), 0 before the driver loads. */
int jit_cuda_driver_version(void);

/* Streams, copies queued on them (a copy from pageable host memory returns
 * once the source has been read; one to pageable memory once it is done),
 * pinned host memory, events. Each needs a current context. */
kiln_status jit_cuda_stream_new(jit_cuda_stream **s, char *msg, size_t cap);
void jit_cuda_stream_free(jit_cuda_stream *s);
/* Waits for everything queued on s; `what` names it in the message. */
kiln_status jit_cuda_stream_wait(jit_cuda_stream *s, const char *what, char *msg, size_t cap);
kiln_status jit_cuda_copy_to_device_async(jit_cuda_ptr dst, const void *src, size_t n,
                                          jit_cuda_stream *s, char *msg, size_t cap);
kiln_status jit_cuda_copy_to_host_async(void *dst, jit_cuda_ptr src, size_t n, jit_cuda_stream *s,
                                        char *msg, size_t cap);
kiln_status jit_cuda_copy_on_device_async(jit_cuda_ptr dst, jit_cuda_ptr src, size_t n,
                                          jit_cuda_stream *s, char *msg, size_t cap);
void *jit_cuda_pinned_alloc(size_t n); /* NULL when refused */
void jit_cuda_pinned_free(void *p);
kiln_status jit_cuda_event_new(jit_cuda_event **e, char *msg, size_t cap);
void jit_cuda_event_free(jit_cuda_event *e);
kiln_status jit_cuda_event_record(jit_cuda_event *e, jit_cuda_stream *s, char *msg, size_t cap);
kiln_status jit_cuda_event_wait(jit_cuda_event *e, const char *what, char *msg, size_t cap);
/* Milliseconds between two completed events, -1 when unknown. */
double jit_cuda_event_ms(jit_cuda_event *from, jit_cuda_event *to);

/* CUDA graphs: a sequence of kernels instantiated once and launched as one
 * (cuGraphLaunch), whose nodes' arguments can be rebound without building
 * it again. Absent from drivers before CUDA 12. */
typedef struct jit_cuda_graph jit_cuda_graph;           /* a CUgraph */
typedef struct jit_cuda_graph_exec jit_cuda_graph_exec; /* a CUgraphExec */
typedef struct jit_cuda_graph_node jit_cuda_graph_node; /* a CUgraphNode */
bool jit_cuda_graphs_available(void);
kiln_status jit_cuda_graph_new(jit_cuda_graph **g, char *msg, size_t cap);
void jit_cuda_graph_free(jit_cuda_graph *g, jit_cuda_graph_exec *e); /* either may be NULL */
/* A kernel node after node `after` (NULL: the first), one pointer argument
 * per buffer, as jit_cuda_launch_async takes them. */
kiln_status jit_cuda_graph_add_kernel(jit_cuda_graph *g, jit_cuda_graph_node *after,
                                      jit_cuda_fn *f, const char *name, jit_cuda_dims dims,
                                      int nbufs, const jit_cuda_ptr *bufs,
                                      jit_cuda_graph_node **node, char *msg, size_t cap);
kiln_status jit_cuda_graph_instantiate(jit_cuda_graph *g, jit_cuda_graph_exec **e, char *msg,
                                       size_t cap);
/* Rebinds node's arguments in the instantiated graph. */
kiln_status jit_cuda_graph_set_kernel(jit_cuda_graph_exec *e, jit_cuda_graph_node *node,
                                      jit_cuda_fn *f, const char *name, jit_cuda_dims dims,
                                      int nbufs, const jit_cuda_ptr *bufs, char *msg,
                                      size_t cap);
kiln_status jit_cuda_graph_launch(jit_cuda_graph_exec *e, jit_cuda_stream *s, char *msg,
                                  size_t cap);

/* ---- cuBLAS ----------------------------------------------------------------- */

/* A matmul kernel as one cublasGemmStridedBatchedEx: the operands in the
 * order cuBLAS takes them (row-major C = A B is column-major C^T = B^T A^T,
 * so `first` is B and `second` A), their ops (0: N, 1: T), leading
 * dimensions, batch strides and offsets in elements. */
typedef struct jit_cuda_gemm {
    kiln_dtype dtype;
    int op_first, op_second;
    int m, n, k; /* cuBLAS's m, n, k: the kernel's m (columns), n (rows), k */
    long long ld_first, ld_second, ld_out;
    long long stride_first, stride_second, stride_out;
    int batch;
    int64_t first_offset, second_offset;
    int epilogue;     /* JIT_GEMM_*: what is added to the product (cuBLASLt) */
    int epilogue_buf; /* the kernel's buffer holding it, or -1 */
} jit_cuda_gemm;

enum {
    JIT_GEMM_PLAIN,    /* stored as it is */
    JIT_GEMM_BIAS,     /* plus a vector along the output's columns (kiln_linear's bias) */
    JIT_GEMM_RESIDUAL, /* plus a tensor of the output's shape */
};

typedef struct jit_cuda_blas jit_cuda_blas;
/* cuBLAS on stream s; NULL with the reason in msg when it cannot be had. */
jit_cuda_blas *jit_cuda_blas_open(jit_cuda_stream *s, char *msg, size_t cap);
void jit_cuda_blas_close(jit_cuda_blas *b);
/* Whether kernel k (its nodes: outputs, then inputs) is a product cuBLAS
 * computes entirely: f32/f64/f16/bf16 operands of the output's dtype read
 * in place (a unit stride each, one stride over the batch), sizes within
 * int, nothing fused but an added bias or residual; *g says how. */
bool jit_cuda_gemm_of(const lower_kernel *k, const graph_node *const *nodes, jit_cuda_gemm *g);
/* Whether b can take epilogues (cuBLASLt loaded). */
bool jit_cuda_blas_epilogues(const jit_cuda_blas *b);
/* Queues the product (extra: the epilogue's bias or residual); tf32 lets
 * f32 products use TF32 tensor cores. */
kiln_status jit_cuda_blas_gemm(jit_cuda_blas *b, const jit_cuda_gemm *g, bool tf32,
                               jit_cuda_ptr first, jit_cuda_ptr second, jit_cuda_ptr out,
                               jit_cuda_ptr extra, char *msg, size_t cap);

/* The architectures NVRTC can compile for (as 90), at most cap of them; 0
 * when NVRTC is missing or cannot say. */
int jit_cuda_nvrtc_archs(int *archs, int cap);

#endif /* KILN_JIT_CUDA_H */
