/* Tests of kiln_to_dlpack and kiln_from_dlpack: round trips of every dtype
 * and shape, zero-copy where the memory allows it, strided and offset
 * imports by copy, the deleter's exactly-once call on every path, exports
 * outliving their handle and context, and the errors' messages. */
#define _POSIX_C_SOURCE 200809L
#include <dlpack/dlpack.h>

#include "test_util.h"

/* Whether the executor's buffers are host memory, where kiln shares memory
 * with DLPack tensors instead of copying. */
static bool host_device(kiln_ctx *ctx) { return kiln_ctx_device(ctx) != KILN_CUDA; }

/* ---- a DLManagedTensor made by hand, with a deleter that counts ---- */

typedef struct handmade {
    DLManagedTensor m;
    int64_t shape[KILN_MAX_DIMS + 2];
    int64_t strides[KILN_MAX_DIMS + 2];
    void *mem;   /* the data's allocation (data may point into it) */
    int deletes; /* calls of the deleter */
} handmade;

static void handmade_delete(DLManagedTensor *m) {
    handmade *h = m->manager_ctx;
    h->deletes++;
    free(h->mem);
    h->mem = NULL;
    m->dl_tensor.data = NULL;
}

/* A DLPack tensor over nbytes of 64-byte-aligned memory (freed by the
 * deleter; h itself is the caller's), of shape dims and no strides. */
static void handmade_init(handmade *h, DLDataType dt, int ndim, const int64_t *dims,
                          size_t nbytes) {
    memset(h, 0, sizeof *h);
    h->mem = aligned_alloc(64, (nbytes + 63) / 64 * 64 + 64);
    cr_assert_not_null(h->mem);
    for (int d = 0; d < ndim; d++)
        h->shape[d] = dims[d];
    h->m.dl_tensor = (DLTensor){
        .data = h->mem,
        .device = {kDLCPU, 0},
        .ndim = ndim,
        .dtype = dt,
        .shape = h->shape,
        .strides = NULL,
        .byte_offset = 0,
    };
    h->m.manager_ctx = h;
    h->m.deleter = handmade_delete;
}

static DLDataType expected_dl(kiln_dtype dt) {
    switch (dt) {
    case KILN_F32: return (DLDataType){kDLFloat, 32, 1};
    case KILN_F64: return (DLDataType){kDLFloat, 64, 1};
    case KILN_F16: return (DLDataType){kDLFloat, 16, 1};
    case KILN_BF16: return (DLDataType){kDLBfloat, 16, 1};
    case KILN_I32: return (DLDataType){kDLInt, 32, 1};
    case KILN_I64: return (DLDataType){kDLInt, 64, 1};
    case KILN_I8: return (DLDataType){kDLInt, 8, 1};
    case KILN_BOOL: return (DLDataType){6, 8, 1}; /* kDLBool, after DLPack 0.6 */
    default: return (DLDataType){kDLUInt, 8, 1};
    }
}

/* ---- round trips ---- */

TU_TEST(dlpack, roundtrip_every_dtype_and_shape) {
    TU_RNG(r);
    static const struct {
        int ndim;
        int64_t dims[4];
    } shapes[] = {{0, {0}}, {1, {0}}, {3, {3, 0, 2}}, {1, {7}}, {2, {3, 5}}, {4, {2, 1, 3, 4}}};
    int ndt;
    const kiln_dtype *all = tu_all_dtypes(&ndt);
    for (int k = 0; k < ndt; k++) {
        kiln_dtype dt = all[k];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int ndim = shapes[s].ndim;
            const int64_t *dims = shapes[s].dims;
            int64_t n = tu_numel(ndim, dims);
            double v[64];
            double lo = dt == KILN_U8 ? 0 : -500, hi = 500; /* clamped to dt's range */
            kiln_tensor *t = tu_rand_tensor(ctx, &r, dt, ndim, dims, lo, hi, v);
            DLManagedTensor *m = NULL;
            cr_assert_eq(kiln_to_dlpack(t, &m), KILN_OK, "[%s] %s: %s", tu_exec_name(),
                         tu_dt_name(dt), kiln_ctx_last_error(ctx));
            const DLTensor *x = &m->dl_tensor;
            DLDataType want = expected_dl(dt);
            cr_assert(x->dtype.code == want.code && x->dtype.bits == want.bits &&
                          x->dtype.lanes == 1,
                      "[%s] %s exported as code %u bits %u lanes %u", tu_exec_name(),
                      tu_dt_name(dt), x->dtype.code, x->dtype.bits, x->dtype.lanes);
            cr_assert_eq(x->device.device_type, kDLCPU);
            cr_assert_eq(x->ndim, ndim);
            cr_assert_eq(x->byte_offset, 0);
            int64_t stride = 1;
            for (int d = ndim - 1; d >= 0; d--) {
                cr_assert_eq(x->shape[d], dims[d]);
                cr_assert_eq(x->strides[d], stride, "[%s] stride %d", tu_exec_name(), d);
                stride *= dims[d];
            }
            unsigned char packed[64 * 8];
            tu_pack(dt, v, n, packed);
            if (n > 0)
                cr_assert(memcmp(x->data, packed, (size_t)n * tu_dt_size(dt)) == 0,
                          "[%s] %s: exported bytes differ", tu_exec_name(), tu_dt_name(dt));

            kiln_tensor *u = kiln_from_dlpack(ctx, m);
            TU_ASSERT_SHAPE_N(u, ndim, dims);
            kiln_dtype back = dt == KILN_BOOL ? KILN_U8 : dt;
            TU_ASSERT_DTYPE(u, dt);
            TU_EXPECT_EXACT(u, dt, v, n);
            /* The imported tensor computes like any other (bool as u8). */
            kiln_tensor *w = kiln_add(kiln_cast(u, back), kiln_cast(u, back));
            double twice[64];
            for (int64_t i = 0; i < n; i++)
                twice[i] = tu_round(back, 2 * v[i]);
            if (back == KILN_U8)
                for (int64_t i = 0; i < n; i++)
                    twice[i] = (double)(((int64_t)v[i] * 2) & 255);
            if (back == KILN_I8) /* wraps, as u8 does */
                for (int64_t i = 0; i < n; i++)
                    twice[i] = (double)tu_wrap(KILN_I8, (int64_t)v[i] * 2);
            TU_EXPECT_EXACT(w, back, twice, n);
            kiln_release(w);
            kiln_release(u);
            kiln_release(t);
        }
    }
}

TU_TEST(dlpack, export_of_a_lazy_result_and_a_view) {
    TU_RNG(r);
    double a[12], b[12];
    kiln_tensor *x = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 4), -10, 10, a);
    kiln_tensor *y = tu_rand_tensor(ctx, &r, KILN_F64, TU_S(3, 4), -10, 10, b);
    kiln_tensor *s = kiln_transpose(kiln_mul(x, y), 0, 1);
    DLManagedTensor *m = NULL;
    cr_assert_eq(kiln_to_dlpack(s, &m), KILN_OK, "%s", kiln_ctx_last_error(ctx));
    cr_assert_eq(m->dl_tensor.ndim, 2);
    cr_assert_eq(m->dl_tensor.shape[0], 4);
    cr_assert_eq(m->dl_tensor.shape[1], 3);
    const double *d = m->dl_tensor.data;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            cr_assert_eq(d[i * 3 + j], a[j * 4 + i] * b[j * 4 + i], "[%s] element (%d,%d)",
                         tu_exec_name(), i, j);
    m->deleter(m);
}

/* ---- zero-copy ---- */

TU_TEST(dlpack, export_shares_the_buffer_on_host_devices) {
    TU_RNG(r);
    double v[6];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3), -1, 1, v);
    DLManagedTensor *m1 = NULL, *m2 = NULL;
    cr_assert_eq(kiln_to_dlpack(t, &m1), KILN_OK);
    cr_assert_eq(kiln_to_dlpack(t, &m2), KILN_OK);
    void *p = m1->dl_tensor.data;
    if (host_device(ctx))
        cr_assert_eq(p, m2->dl_tensor.data, "[%s] two exports of one tensor differ",
                     tu_exec_name());
    else
        cr_assert_neq(p, m2->dl_tensor.data, "[%s] exports are copies", tu_exec_name());
    m2->deleter(m2);
    /* Imported back, kiln uses the exported memory itself. */
    kiln_tensor *u = kiln_from_dlpack(ctx, m1);
    TU_ASSERT_OK(u);
    DLManagedTensor *m3 = NULL;
    cr_assert_eq(kiln_to_dlpack(u, &m3), KILN_OK);
    if (host_device(ctx))
        cr_assert_eq(m3->dl_tensor.data, p, "[%s] the round trip copied", tu_exec_name());
    /* The export stays valid after both handles go. */
    kiln_release(u);
    kiln_release(t);
    float got[6];
    memcpy(got, m3->dl_tensor.data, sizeof got);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(got[i], (float)v[i], "[%s] element %d after release", tu_exec_name(), i);
    m3->deleter(m3);
}

TU_TEST(dlpack, import_of_aligned_contiguous_memory_is_zero_copy) {
    TU_RNG(r);
    double v[24];
    tu_fill(&r, KILN_I32, v, 24, -1000, 1000);
    handmade h;
    handmade_init(&h, (DLDataType){kDLInt, 32, 1}, 3, TU_DIMS(2, 3, 4), 24 * 4);
    tu_pack(KILN_I32, v, 24, h.mem);
    kiln_tensor *u = kiln_from_dlpack(ctx, &h.m);
    TU_ASSERT_SHAPE(u, 2, 3, 4);
    TU_EXPECT_EXACT(u, KILN_I32, v, 24);
    if (!host_device(ctx)) {
        cr_assert_eq(h.deletes, 1, "[%s] copied, so deleted at once", tu_exec_name());
        kiln_release(u);
        return;
    }
    cr_assert_eq(h.deletes, 0, "[%s] the deleter ran while kiln uses the memory",
                 tu_exec_name());
    /* A write by the producer is seen by kiln: the memory is shared. */
    ((int32_t *)h.mem)[5] = 123456;
    v[5] = 123456;
    TU_EXPECT_EXACT(u, KILN_I32, v, 24);
    /* A node computed from it keeps the memory alive after the handle goes. */
    kiln_tensor *neg = kiln_neg(u);
    kiln_release(u);
    cr_assert_eq(h.deletes, 0, "[%s] deleted while a node still reads it", tu_exec_name());
    double nv[24];
    for (int i = 0; i < 24; i++)
        nv[i] = -v[i];
    TU_EXPECT_EXACT(neg, KILN_I32, nv, 24);
    kiln_release(neg);
    cr_assert_eq(h.deletes, 1, "[%s] deleter calls after the last use", tu_exec_name());
}

TU_TEST(dlpack, size_one_axes_may_have_any_stride) {
    TU_RNG(r);
    double v[5];
    tu_fill(&r, KILN_F64, v, 5, -3, 3);
    handmade h;
    handmade_init(&h, (DLDataType){kDLFloat, 64, 1}, 3, TU_DIMS(1, 5, 1), 5 * 8);
    h.strides[0] = 99;
    h.strides[1] = 1;
    h.strides[2] = -7;
    h.m.dl_tensor.strides = h.strides;
    tu_pack(KILN_F64, v, 5, h.mem);
    kiln_tensor *u = kiln_from_dlpack(ctx, &h.m);
    TU_EXPECT_EXACT(u, KILN_F64, v, 5);
    cr_assert_eq(h.deletes, host_device(ctx) ? 0 : 1, "[%s]", tu_exec_name());
    kiln_release(u);
    cr_assert_eq(h.deletes, 1);
}

/* ---- imports by copy ---- */

/* Imports base's elements as a tensor of shape dims with strides (in
 * elements) from element `first` on, and checks it against the gather. */
static void check_strided(kiln_ctx *ctx, kiln_dtype dt, DLDataType dl, const double *base,
                          int64_t nbase, int ndim, const int64_t *dims, const int64_t *strides,
                          int64_t first) {
    handmade h;
    size_t es = tu_dt_size(dt);
    handmade_init(&h, dl, ndim, dims, (size_t)nbase * es);
    tu_pack(dt, base, nbase, h.mem);
    for (int d = 0; d < ndim; d++)
        h.strides[d] = strides[d];
    h.m.dl_tensor.strides = h.strides;
    h.m.dl_tensor.byte_offset = (uint64_t)first * es;
    int64_t n = tu_numel(ndim, dims);
    double want[256];
    int64_t idx[KILN_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        tu_unravel(i, ndim, dims, idx);
        int64_t off = first;
        for (int d = 0; d < ndim; d++)
            off += idx[d] * strides[d];
        want[i] = base[off];
    }
    kiln_tensor *u = kiln_from_dlpack(ctx, &h.m);
    cr_assert_eq(h.deletes, 1, "[%s] %s: a copy deletes at once (%d calls)", tu_exec_name(),
                 tu_dt_name(dt), h.deletes);
    TU_ASSERT_SHAPE_N(u, ndim, dims);
    TU_EXPECT_EXACT(u, dt, want, n);
    kiln_release(u);
}

TU_TEST(dlpack, strided_and_offset_imports_copy) {
    TU_RNG(r);
    double base[96];
    static const struct {
        kiln_dtype dt;
        DLDataType dl;
    } types[] = {{KILN_F32, {kDLFloat, 32, 1}}, {KILN_I64, {kDLInt, 64, 1}},
                 {KILN_F16, {kDLFloat, 16, 1}}, {KILN_BF16, {kDLBfloat, 16, 1}},
                 {KILN_U8, {kDLUInt, 8, 1}}};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        kiln_dtype dt = types[k].dt;
        tu_fill(&r, dt, base, 96, dt == KILN_U8 ? 0 : -100, 100);
        /* Column-major 3x4. */
        check_strided(ctx, dt, types[k].dl, base, 96, 2, TU_DIMS(3, 4), TU_DIMS(1, 3), 0);
        /* Every other row and column of an 8x10 array, from (1, 2). */
        check_strided(ctx, dt, types[k].dl, base, 96, 2, TU_DIMS(4, 4), TU_DIMS(20, 2), 12);
        /* Reversed along the last axis, broadcast (stride 0) along the first. */
        check_strided(ctx, dt, types[k].dl, base, 96, 3, TU_DIMS(3, 2, 5), TU_DIMS(0, 10, -1),
                      24);
        /* Contiguous but starting one element in: not 64-byte aligned. */
        check_strided(ctx, dt, types[k].dl, base, 96, 2, TU_DIMS(5, 6), TU_DIMS(6, 1), 1);
    }
}

TU_TEST(dlpack, unaligned_import_is_a_copy) {
    TU_RNG(r);
    double v[16];
    tu_fill(&r, KILN_F32, v, 16, -5, 5);
    handmade h;
    handmade_init(&h, (DLDataType){kDLFloat, 32, 1}, 1, TU_DIMS(16), 17 * 4);
    h.m.dl_tensor.data = (char *)h.mem + 4;
    tu_pack(KILN_F32, v, 16, h.m.dl_tensor.data);
    kiln_tensor *u = kiln_from_dlpack(ctx, &h.m);
    cr_assert_eq(h.deletes, 1, "[%s] unaligned memory must be copied", tu_exec_name());
    TU_EXPECT_EXACT(u, KILN_F32, v, 16);
    kiln_release(u);
}

/* ---- lifetimes ---- */

TU_TEST(dlpack, export_outlives_its_context) {
    (void)ctx;
    TU_RNG(r);
    kiln_ctx *c = tu_ctx_like_current();
    cr_assert_not_null(c);
    /* Large enough for the device's pool (which keeps blocks of 64 KiB on). */
    enum { N = 40000 };
    double *v = malloc(N * sizeof *v);
    kiln_tensor *t = tu_rand_tensor(c, &r, KILN_F32, TU_S(N), -1, 1, v);
    double sv[3];
    kiln_tensor *small = tu_rand_tensor(c, &r, KILN_F64, TU_S(3), -1, 1, sv);
    DLManagedTensor *m = NULL, *ms = NULL;
    cr_assert_eq(kiln_to_dlpack(kiln_exp(t), &m), KILN_OK, "%s", kiln_ctx_last_error(c));
    cr_assert_eq(kiln_to_dlpack(small, &ms), KILN_OK);
    kiln_ctx_free(c);
    const float *d = m->dl_tensor.data;
    for (int i = 0; i < N; i++)
        cr_assert(fabs(d[i] - exp((float)v[i])) <= 1e-6 * exp((float)v[i]),
                  "[%s] element %d after kiln_ctx_free", tu_exec_name(), i);
    const double *ds = ms->dl_tensor.data;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(ds[i], sv[i]);
    m->deleter(m);
    ms->deleter(ms);
    free(v);
}

TU_TEST(dlpack, imported_memory_outlives_the_handle_until_the_context_goes) {
    (void)ctx;
    kiln_ctx *c = tu_ctx_like_current();
    handmade h;
    handmade_init(&h, (DLDataType){kDLFloat, 32, 1}, 1, TU_DIMS(4), 16);
    memcpy(h.mem, (const float[]){1.5f, -2.25f, 3.0f, 7.75f}, 16);
    kiln_tensor *u = kiln_from_dlpack(c, &h.m);
    TU_ASSERT_OK(u);
    kiln_ctx_free(c);
    cr_assert_eq(h.deletes, 1, "[%s] kiln_ctx_free lets go of imported memory", tu_exec_name());
}

/* ---- errors: each names its problem and still calls the deleter once ---- */

TU_TEST(dlpack, import_errors_call_the_deleter_once) {
    handmade h;
    DLDataType f32 = {kDLFloat, 32, 1};

    handmade_init(&h, f32, 2, TU_DIMS(2, 2), 16);
    h.m.dl_tensor.device = (DLDevice){kDLCUDA, 0};
    if (kiln_ctx_device(ctx) != KILN_CUDA) {
        TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_DEVICE, "kiln_from_dlpack",
                        "device type 2", "kDLCUDA", "not on a GPU");
        cr_assert_eq(h.deletes, 1);
    } else {
        h.m.dl_tensor.device = (DLDevice){kDLCUDA, 7};
        TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_DEVICE, "kiln_from_dlpack",
                        "on GPU 7", "this context is on GPU 0");
        cr_assert_eq(h.deletes, 1);
    }

    handmade_init(&h, f32, 1, TU_DIMS(2), 8);
    h.m.dl_tensor.device = (DLDevice){kDLVulkan, 0};
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_DEVICE, "device type 7");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, (DLDataType){kDLInt, 16, 1}, 1, TU_DIMS(2), 4);
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_DTYPE, "code 0", "bits 16");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, (DLDataType){kDLUInt, 32, 1}, 1, TU_DIMS(2), 8);
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_DTYPE, "code 1", "bits 32");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, (DLDataType){kDLFloat, 32, 4}, 1, TU_DIMS(2), 32);
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_DTYPE, "code 2", "lanes 4");
    cr_assert_eq(h.deletes, 1);

    /* kDLBool (code 6) comes in as bool, copied, any nonzero byte true; with
     * other than 8 bits it is refused. */
    handmade_init(&h, (DLDataType){6, 8, 1}, 1, TU_DIMS(4), 4);
    memcpy(h.mem, (unsigned char[]){0, 1, 2, 255}, 4);
    kiln_tensor *flags = kiln_from_dlpack(ctx, &h.m);
    cr_assert_eq(h.deletes, 1, "a bool is copied, so deleted at once");
    TU_EXPECT_VALS(flags, KILN_BOOL, 0, 1, 1, 1);
    TU_EXPECT_VALS(kiln_cast(flags, KILN_U8), KILN_U8, 0, 1, 1, 1);
    handmade_init(&h, (DLDataType){6, 1, 1}, 1, TU_DIMS(2), 1);
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_DTYPE, "code 6", "bits 1");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, (DLDataType){kDLComplex, 64, 1}, 1, TU_DIMS(2), 16);
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_DTYPE, "code 5", "bits 64");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, f32, KILN_MAX_DIMS + 1,
                  TU_DIMS(1, 1, 1, 1, 1, 1, 1, 1, 2), 8);
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_SHAPE, "ndim 9");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, f32, 0, NULL, 4);
    h.m.dl_tensor.ndim = -1;
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_SHAPE, "ndim -1");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, f32, 2, TU_DIMS(3, -2), 8);
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_SHAPE, "axis 1", "negative size -2");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, f32, 3, TU_DIMS(INT64_MAX / 4, 4, 4), 8);
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_SHAPE, "more bytes");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, f32, 1, TU_DIMS(3), 12);
    h.m.dl_tensor.shape = NULL;
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_ARG, "shape is NULL");
    cr_assert_eq(h.deletes, 1);

    handmade_init(&h, f32, 1, TU_DIMS(3), 12);
    free(h.mem);
    h.mem = NULL;
    h.m.dl_tensor.data = NULL;
    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, &h.m), KILN_ERR_ARG, "data is NULL", "3 elements");
    cr_assert_eq(h.deletes, 1);

    TU_ASSERT_ERROR(kiln_from_dlpack(ctx, NULL), KILN_ERR_ARG, "NULL");

    /* No context to report in: NULL, but the deleter still runs. */
    handmade_init(&h, f32, 1, TU_DIMS(3), 12);
    cr_assert_null(kiln_from_dlpack(NULL, &h.m));
    cr_assert_eq(h.deletes, 1);

    /* A NULL deleter (DLPack allows one) is not called. */
    float mem[2] = {0.5f, -4.0f};
    DLManagedTensor bare = {
        .dl_tensor = {.data = mem, .device = {kDLCPU, 0}, .ndim = 1, .dtype = f32,
                      .shape = (int64_t[]){2}},
    };
    kiln_tensor *u = kiln_from_dlpack(ctx, &bare);
    TU_EXPECT_EXACT(u, KILN_F32, ((const double[]){0.5, -4.0}), 2);
    kiln_release(u);
}

TU_TEST(dlpack, import_of_pinned_host_memory) {
    handmade h;
    handmade_init(&h, (DLDataType){kDLFloat, 64, 1}, 1, TU_DIMS(3), 24);
    h.m.dl_tensor.device = (DLDevice){kDLCUDAHost, 0};
    memcpy(h.mem, (const double[]){0.125, -9.5, 1e10}, 24);
    kiln_tensor *u = kiln_from_dlpack(ctx, &h.m);
    TU_EXPECT_EXACT(u, KILN_F64, ((const double[]){0.125, -9.5, 1e10}), 3);
    kiln_release(u);
    cr_assert_eq(h.deletes, 1);
}

TU_TEST(dlpack, export_errors) {
    DLManagedTensor *m = (DLManagedTensor *)&m;
    cr_assert_eq(kiln_to_dlpack(NULL, &m), KILN_ERR_ARG);
    cr_assert_null(m);

    kiln_tensor *t = kiln_zeros(ctx, KILN_F32, TU_S(2));
    cr_assert_eq(kiln_to_dlpack(t, NULL), KILN_ERR_ARG);
    cr_assert(strstr(kiln_ctx_last_error(ctx), "kiln_to_dlpack") != NULL, "message \"%s\"",
              kiln_ctx_last_error(ctx));
    cr_assert(strstr(kiln_ctx_last_error(ctx), "out is NULL") != NULL);

    kiln_tensor *bad = kiln_add(t, kiln_zeros(ctx, KILN_F32, TU_S(3)));
    m = (DLManagedTensor *)&m;
    cr_assert_eq(kiln_to_dlpack(bad, &m), KILN_ERR_SHAPE);
    cr_assert_null(m);
    cr_assert(strstr(kiln_error_message(bad), "kiln_add") != NULL);
}
