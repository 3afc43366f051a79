/* dlpack.c — kiln_to_dlpack and kiln_from_dlpack: tensors exchanged with
 * other libraries as DLPack (0.6) DLManagedTensors, sharing host memory where
 * the layout allows and copying where it does not.
 *
 * Why an export may outlive its context: it holds a reference on the node's
 * graph_buffer, not on the node or the context. A host device's buffer is
 * given back to its device's pool (jit/pool.h), which is reference-counted
 * per block handed out and outlives the device, freeing blocks returned after
 * the device closed; a buffer of no device is free()d. Neither release
 * touches the context, so the deleter is safe after kiln_ctx_free. */
#include <stdlib.h>
#include <string.h>

#include <dlpack/dlpack.h>

#include "api/api.h"

/* The alignment of kiln's own host buffers (graph_buffer_new, the devices'
 * pools), which graph.h promises every host buffer has. Generated kernels
 * today assume only an element's alignment, but memory kiln adopts keeps
 * the promise, so less aligned memory is copied, as are exports' copies. */
enum { ALIGN = 64 };

/* What an export allocates: the DLManagedTensor with its shape and strides,
 * and either the shared buffer or a host copy. */
typedef struct exported {
    DLManagedTensor m;
    int64_t shape[KILN_MAX_DIMS];
    int64_t strides[KILN_MAX_DIMS];
    graph_buffer *buf; /* zero-copy: the reference the export holds */
    void *copy;        /* otherwise: the host copy */
} exported;

static void export_delete(DLManagedTensor *m) {
    exported *e = m->manager_ctx;
    graph_buffer_unref(e->buf);
    free(e->copy);
    free(e);
}

/* DLPack 0.6 (Debian's header) has no bool; 0.8 on has kDLBool = 6 with 8
 * bits, which NumPy (1.25 on) and PyTorch use, so kiln's bool goes out as
 * that, 0 or 1 per byte. */
enum { DL_BOOL = 6 };

static DLDataType dl_dtype(kiln_dtype dt) {
    switch (dt) {
    case KILN_F32: return (DLDataType){kDLFloat, 32, 1};
    case KILN_F64: return (DLDataType){kDLFloat, 64, 1};
    case KILN_F16: return (DLDataType){kDLFloat, 16, 1};
    case KILN_BF16: return (DLDataType){kDLBfloat, 16, 1};
    case KILN_I32: return (DLDataType){kDLInt, 32, 1};
    case KILN_I64: return (DLDataType){kDLInt, 64, 1};
    case KILN_U8: return (DLDataType){kDLUInt, 8, 1};
    case KILN_BOOL: return (DLDataType){DL_BOOL, 8, 1};
    case KILN_I8: return (DLDataType){kDLInt, 8, 1};
    }
    return (DLDataType){kDLUInt, 8, 1};
}

static kiln_status export_fail(kiln_ctx *ctx, kiln_status st, const char *msg) {
    snprintf(ctx->last_error, sizeof ctx->last_error, "kiln_to_dlpack: %s", msg);
    return st;
}

kiln_status kiln_to_dlpack(kiln_tensor *t, DLManagedTensor **out) {
    if (out)
        *out = NULL;
    if (!t)
        return KILN_ERR_ARG;
    if (!t->node)
        return t->err;
    if (!out)
        return export_fail(t->ctx, KILN_ERR_ARG, "out is NULL");
    kiln_status st = kiln_realize(t);
    if (st != KILN_OK)
        return st;
    const graph_node *n = t->node;
    size_t nbytes = (size_t)graph_numel(n) * kiln_dtype_size(n->dtype);
    exported *e = calloc(1, sizeof *e);
    if (!e)
        return export_fail(t->ctx, KILN_ERR_OOM, "out of memory");
    void *data;
    DLDevice dev = {kDLCPU, 0};
    kiln_device kind;
    int ordinal;
    if (jit_buffer_is_host(n->buf)) {
        e->buf = graph_buffer_ref(n->buf);
        data = n->buf->data;
    } else if (jit_buffer_device(n->buf, &kind, &ordinal) && kind == KILN_CUDA) {
        /* GPU memory goes as it is, for a GPU library to read in place */
        e->buf = graph_buffer_ref(n->buf);
        data = n->buf->data;
        dev = (DLDevice){kDLCUDA, ordinal};
    } else {
        /* Rounded up, as aligned_alloc wants a multiple of the alignment. */
        size_t rounded = (nbytes + ALIGN - 1) & ~(size_t)(ALIGN - 1);
        char msg[256];
        if (!(e->copy = aligned_alloc(ALIGN, rounded ? rounded : ALIGN))) {
            free(e);
            return export_fail(t->ctx, KILN_ERR_OOM, "out of memory copying to the host");
        }
        if (nbytes && (st = api_read(n, 0, e->copy, nbytes, msg, sizeof msg)) != KILN_OK) {
            free(e->copy);
            free(e);
            return export_fail(t->ctx, st, msg);
        }
        data = e->copy;
    }
    int64_t stride = 1;
    for (int d = n->ndim - 1; d >= 0; d--) {
        e->shape[d] = n->shape[d];
        e->strides[d] = stride;
        stride *= n->shape[d];
    }
    e->m.dl_tensor = (DLTensor){
        .data = data,
        .device = dev,
        .ndim = n->ndim,
        .dtype = dl_dtype(n->dtype),
        .shape = e->shape,
        .strides = e->strides,
        .byte_offset = 0,
    };
    e->m.manager_ctx = e;
    e->m.deleter = export_delete;
    *out = &e->m;
    return KILN_OK;
}

/* ---- import ---- */

static const char *device_name(DLDeviceType t) {
    switch (t) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    case kDLMetal: return "kDLMetal";
    case kDLVPI: return "kDLVPI";
    case kDLROCM: return "kDLROCM";
    case kDLROCMHost: return "kDLROCMHost";
    case kDLExtDev: return "kDLExtDev";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    }
    return "unknown";
}

/* kiln's dtype for a DLPack one; false when kiln has none. */
static bool kiln_dtype_for(DLDataType t, kiln_dtype *dt) {
    if (t.lanes != 1)
        return false;
    switch (t.code) {
    case kDLFloat:
        *dt = t.bits == 32 ? KILN_F32 : t.bits == 64 ? KILN_F64 : KILN_F16;
        return t.bits == 16 || t.bits == 32 || t.bits == 64;
    case kDLBfloat: *dt = KILN_BF16; return t.bits == 16;
    case kDLInt:
        *dt = t.bits == 8 ? KILN_I8 : t.bits == 32 ? KILN_I32 : KILN_I64;
        return t.bits == 8 || t.bits == 32 || t.bits == 64;
    case kDLUInt: *dt = KILN_U8; return t.bits == 8;
    case DL_BOOL: *dt = KILN_BOOL; return t.bits == 8;
    }
    return false;
}

static void dl_release(void *m, graph_buffer *b) {
    (void)b;
    DLManagedTensor *dm = m;
    if (dm->deleter)
        dm->deleter(dm);
}

static void dl_delete(DLManagedTensor *m) {
    if (m->deleter)
        m->deleter(m);
}

/* An error handle after m's deleter has run: whatever the failure, kiln
 * owns m from the call on. */
static kiln_tensor *import_fail(kiln_ctx *ctx, DLManagedTensor *m, kiln_status st,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static kiln_tensor *import_fail(kiln_ctx *ctx, DLManagedTensor *m, kiln_status st,
                                const char *fmt, ...) {
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    dl_delete(m);
    return api_fail(ctx, st, "kiln_from_dlpack: %s", buf);
}

/* Whether strides (in elements) are those of a row-major array of shape. */
static bool row_major(int ndim, const int64_t *shape, const int64_t *strides) {
    if (!strides)
        return true;
    int64_t want = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && strides[d] != want)
            return false;
        want *= shape[d];
    }
    return true;
}

/* Copies the n elements of esize bytes at base (strides in elements) into
 * dst, row-major. */
static void gather(char *dst, const char *base, size_t esize, int ndim, const int64_t *shape,
                   const int64_t *strides, int64_t n) {
    int64_t idx[KILN_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < ndim; d++)
            off += idx[d] * strides[d];
        memcpy(dst + (size_t)i * esize, base + off * (int64_t)esize, esize);
        for (int d = ndim - 1; d >= 0 && ++idx[d] == shape[d]; d--)
            idx[d] = 0;
    }
}

kiln_tensor *kiln_from_dlpack(kiln_ctx *ctx, DLManagedTensor *m) {
    if (!ctx) {
        if (m)
            dl_delete(m);
        return NULL;
    }
    if (!m)
        return api_fail(ctx, KILN_ERR_ARG, "kiln_from_dlpack: the DLManagedTensor is NULL");
    const DLTensor *t = &m->dl_tensor;
    int ordinal;
    bool on_gpu = jit_backend_device(ctx->rt, &ordinal) == KILN_CUDA;
    bool device_memory = t->device.device_type == kDLCUDA;
    if (device_memory && !on_gpu)
        return import_fail(ctx, m, KILN_ERR_DEVICE,
                           "device type 2 (kDLCUDA): GPU %d's memory goes only into a "
                           "KILN_CUDA context, and this context is not on a GPU",
                           t->device.device_id);
    if (device_memory && t->device.device_id != ordinal)
        return import_fail(ctx, m, KILN_ERR_DEVICE,
                           "device type 2 (kDLCUDA) on GPU %d, and this context is on GPU %d",
                           t->device.device_id, ordinal);
    if (!device_memory && t->device.device_type != kDLCPU &&
        t->device.device_type != kDLCUDAHost)
        return import_fail(ctx, m, KILN_ERR_DEVICE,
                           "device type %d (%s) is neither host memory nor a GPU's; kiln imports "
                           "kDLCPU, kDLCUDAHost and (into a KILN_CUDA context) kDLCUDA tensors",
                           (int)t->device.device_type, device_name(t->device.device_type));
    kiln_dtype dt;
    if (!kiln_dtype_for(t->dtype, &dt))
        return import_fail(ctx, m, KILN_ERR_DTYPE,
                           "dtype code %u bits %u lanes %u has no kiln dtype (kiln takes float "
                           "16/32/64, bfloat 16, int 32/64, uint 8 and bool 8, one lane)",
                           (unsigned)t->dtype.code, (unsigned)t->dtype.bits,
                           (unsigned)t->dtype.lanes);
    if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS)
        return import_fail(ctx, m, KILN_ERR_SHAPE, "ndim %d is outside [0, %d]", t->ndim,
                           KILN_MAX_DIMS);
    if (t->ndim > 0 && !t->shape)
        return import_fail(ctx, m, KILN_ERR_ARG, "shape is NULL for ndim %d", t->ndim);
    int ndim = t->ndim;
    int64_t shape[KILN_MAX_DIMS];
    size_t esize = kiln_dtype_size(dt);
    bool empty = false;
    for (int d = 0; d < ndim; d++) {
        shape[d] = t->shape[d];
        if (shape[d] < 0)
            return import_fail(ctx, m, KILN_ERR_SHAPE, "axis %d has negative size %lld", d,
                               (long long)shape[d]);
        empty |= shape[d] == 0;
    }
    int64_t n = empty ? 0 : 1;
    for (int d = 0; !empty && d < ndim; d++) {
        if (n > INT64_MAX / (int64_t)esize / shape[d])
            return import_fail(ctx, m, KILN_ERR_SHAPE,
                               "%d axes of %s hold more bytes than kiln can address", ndim,
                               kiln_dtype_name(dt));
        n *= shape[d];
    }
    if (n > 0 && !t->data)
        return import_fail(ctx, m, KILN_ERR_ARG, "data is NULL for %lld elements",
                           (long long)n);
    size_t nbytes = (size_t)n * esize;
    const char *first = n > 0 ? (const char *)t->data + t->byte_offset : NULL;
    bool contiguous = n == 0 || row_major(ndim, shape, t->strides);

    /* GPU memory is used in place, whatever its alignment (kernels assume an
     * element's); read in place, a strided one would need a gather on the
     * device, which kiln does not do for an import. */
    if (device_memory) {
        if (!contiguous)
            return import_fail(ctx, m, KILN_ERR_ARG,
                               "a strided kDLCUDA tensor: kiln takes GPU tensors contiguous "
                               "(row-major strides)");
        graph_buffer *b = jit_backend_adopt(ctx->rt, (void *)first, nbytes, dl_release, m);
        if (!b)
            return import_fail(ctx, m, KILN_ERR_OOM, "out of memory");
        graph_node *node = graph_buffer_node(ctx->g, dt, ndim, shape, b);
        graph_buffer_unref(b);
        if (!node)
            return api_fail(ctx, KILN_ERR_OOM, "kiln_from_dlpack: out of memory");
        return api_wrap(ctx, node, "kiln_from_dlpack");
    }
    /* A bool's bytes may be anything but 0 and 1 (a producer's business);
     * kiln's bools are 0 or 1, so they are copied and normalised. */
    if (n > 0 && contiguous && dt != KILN_BOOL && jit_backend_host_memory(ctx->rt) &&
        (uintptr_t)first % ALIGN == 0) {
        graph_buffer *b = graph_buffer_adopt((void *)first, nbytes, NULL, dl_release);
        if (!b)
            return import_fail(ctx, m, KILN_ERR_OOM, "out of memory");
        b->release_arg = m;
        graph_node *node = graph_buffer_node(ctx->g, dt, ndim, shape, b);
        graph_buffer_unref(b); /* without a node, this runs the deleter */
        if (!node)
            return api_fail(ctx, KILN_ERR_OOM, "kiln_from_dlpack: out of memory");
        return api_wrap(ctx, node, "kiln_from_dlpack");
    }

    char *packed = NULL;
    if (!contiguous || (dt == KILN_BOOL && n > 0)) {
        if (!(packed = malloc(nbytes)))
            return import_fail(ctx, m, KILN_ERR_OOM,
                               "out of memory gathering %zu bytes of a strided tensor", nbytes);
        if (contiguous)
            memcpy(packed, first, nbytes);
        else
            gather(packed, first, esize, ndim, shape, t->strides, n);
        for (size_t i = 0; dt == KILN_BOOL && i < nbytes; i++)
            packed[i] = packed[i] != 0;
    }
    kiln_status st;
    char msg[512];
    graph_node *node = api_data_node(ctx, "kiln_from_dlpack", dt, ndim, shape,
                                     packed ? packed : first, &st, msg, sizeof msg);
    free(packed);
    dl_delete(m);
    if (!node)
        return api_fail(ctx, st, "%s", msg);
    return api_wrap(ctx, node, "kiln_from_dlpack");
}
