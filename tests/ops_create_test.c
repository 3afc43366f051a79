/* Tests of tensor creation (kiln_from_data, kiln_full, kiln_zeros, kiln_ones,
 * kiln_scalar, kiln_arange), the queries, and the dtype and status tables. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

Test(create, dtype_table) {
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(kiln_dtype_size(all[i]), tu_dt_size(all[i]), "size of %s", tu_dt_name(all[i]));
        cr_assert_str_eq(kiln_dtype_name(all[i]), tu_dt_name(all[i]));
    }
    cr_assert_eq(kiln_dtype_size((kiln_dtype)99), 0);
    cr_assert_str_eq(kiln_dtype_name((kiln_dtype)99), "?");
    cr_assert_eq(kiln_dtype_size((kiln_dtype)-1), 0);
}

Test(create, status_strings) {
    cr_assert_str_eq(kiln_status_string(KILN_OK), "ok");
    const kiln_status all[] = {KILN_ERR_SHAPE,   KILN_ERR_DTYPE,  KILN_ERR_ARG, KILN_ERR_OOM,
                               KILN_ERR_COMPILE, KILN_ERR_DEVICE, KILN_ERR_IO};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const char *s = kiln_status_string(all[i]);
        cr_assert(s != NULL && s[0] != '\0', "status %d has no string", (int)all[i]);
        cr_assert(strcmp(s, "ok") != 0, "status %d reads as ok", (int)all[i]);
        for (size_t j = 0; j < i; j++)
            cr_assert(strcmp(s, kiln_status_string(all[j])) != 0, "statuses %d and %d share \"%s\"",
                      (int)all[i], (int)all[j], s);
    }
    const char *unknown = kiln_status_string((kiln_status)-99);
    cr_assert(unknown != NULL);
}

Test(create, version_macros) {
    cr_assert_eq(KILN_VERSION_MAJOR, 0);
    cr_assert(KILN_MAX_DIMS == 8);
}

Test(create, default_device_from_environment) {
    cr_assert_eq(setenv("KILN_DEVICE", "ref", 1), 0);
    cr_assert_eq(setenv("KILN_EAGER", "1", 1), 0);
    kiln_ctx *c = kiln_ctx_new(KILN_DEVICE_DEFAULT);
    cr_assert_not_null(c, "KILN_DEVICE=ref: %s", kiln_last_ctx_error());
    cr_assert_eq(kiln_ctx_device(c), KILN_REF);
    cr_assert_eq(kiln_ctx_mode(c), KILN_EAGER);
    kiln_ctx_set_mode(c, KILN_LAZY);
    cr_assert_eq(kiln_ctx_mode(c), KILN_LAZY);
    kiln_ctx_free(c);

    cr_assert_eq(unsetenv("KILN_EAGER"), 0);
    cr_assert_eq(setenv("KILN_DEVICE", "cpu", 1), 0);
    c = kiln_ctx_new(KILN_DEVICE_DEFAULT);
    if (c) {
        cr_assert_eq(kiln_ctx_device(c), KILN_CPU);
        cr_assert_eq(kiln_ctx_mode(c), KILN_LAZY);
    }
    kiln_ctx_free(c);

    cr_assert_eq(unsetenv("KILN_DEVICE"), 0);
    c = kiln_ctx_new(KILN_DEVICE_DEFAULT);
    if (c)
        cr_assert_eq(kiln_ctx_device(c), KILN_CPU);
    kiln_ctx_free(c);

    cr_assert_eq(setenv("KILN_DEVICE", "no-such-device", 1), 0);
    cr_assert_null(kiln_ctx_new(KILN_DEVICE_DEFAULT));
    cr_assert(strlen(kiln_last_ctx_error()) > 0);
}

TU_TEST(create, context_queries) {
    cr_assert(kiln_ctx_device(ctx) == tu_cur_exec()->dev, "[%s] kiln_ctx_device", tu_exec_name());
    cr_assert(kiln_ctx_mode(ctx) == tu_cur_exec()->mode, "[%s] kiln_ctx_mode", tu_exec_name());
    kiln_tensor *t = kiln_zeros(ctx, KILN_I32, TU_S(2, 3, 4));
    TU_ASSERT_SHAPE(t, 2, 3, 4);
    cr_assert(kiln_ndim(t) == 3);
    cr_assert(kiln_numel(t) == 24);
    cr_assert(kiln_dtype_of(t) == KILN_I32);
    cr_assert(kiln_ctx_of(t) == ctx, "[%s] kiln_ctx_of", tu_exec_name());
}

TU_TEST(create, from_data_roundtrip_every_dtype) {
    TU_RNG(r);
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        kiln_dtype dt = all[k];
        double v[3 * 5];
        double lo = dt == KILN_U8 ? 0 : -1000, hi = 1000;
        kiln_tensor *t = tu_rand_tensor(ctx, &r, dt, TU_S(3, 5), lo, hi, v);
        TU_ASSERT_SHAPE(t, 3, 5);
        TU_EXPECT_EXACT(t, dt, v, 15);
        /* The bytes come back exactly as they went in. */
        unsigned char in[15 * 8], out[15 * 8];
        tu_pack(dt, v, 15, in);
        cr_assert_eq(kiln_to_host(t, out, 15 * tu_dt_size(dt)), KILN_OK);
        cr_assert(memcmp(in, out, 15 * tu_dt_size(dt)) == 0, "[%s] %s bytes differ", tu_exec_name(),
                  tu_dt_name(dt));
    }
}

TU_TEST(create, from_data_i64_extremes) {
    const int64_t v[] = {INT64_MIN, INT64_MAX, (1ll << 53) + 1, -(1ll << 53) - 3, 0, -1};
    kiln_tensor *t = tu_tensor_i64(ctx, KILN_I64, TU_S(6), v);
    TU_EXPECT_I64(t, KILN_I64, v, 6);
}

TU_TEST(create, from_data_f32_special_values) {
    float v[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-45f, 3.4028235e38f, -1.17549435e-38f};
    kiln_tensor *t = kiln_from_data(ctx, KILN_F32, TU_S(7), v);
    float out[7];
    cr_assert_eq(kiln_to_host(t, out, sizeof out), KILN_OK);
    cr_assert(memcmp(v, out, sizeof v) == 0 ||
                  (isnan(out[0]) && memcmp(v + 1, out + 1, 6 * 4) == 0),
              "[%s] special f32 values changed", tu_exec_name());
    cr_assert(signbit(out[3]), "[%s] -0.0 lost its sign", tu_exec_name());
}

TU_TEST(create, from_data_bool_reads_bytes_as_nonzero) {
    const uint8_t in[6] = {0, 7, 1, 255, 0, 2};
    kiln_tensor *t = kiln_from_data(ctx, KILN_BOOL, TU_S(2, 3), in);
    TU_ASSERT_SHAPE(t, 2, 3);
    uint8_t out[6];
    cr_assert_eq(kiln_to_host(t, out, 6), KILN_OK);
    const uint8_t want[6] = {0, 1, 1, 1, 0, 1};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(out[i], want[i], "[%s] bool byte %d is %d, expected %d", tu_exec_name(), i,
                     out[i], want[i]);
    /* Arithmetic sees true as 1, whatever byte made it. */
    TU_EXPECT_VALS(kiln_sum(t, 0, NULL, false), KILN_I64, 4);
}

TU_TEST(create, from_data_copies) {
    float v[4] = {1, 2, 3, 4};
    kiln_tensor *t = kiln_from_data(ctx, KILN_F32, TU_S(4), v);
    v[0] = 100;
    v[3] = -7;
    TU_EXPECT_VALS(t, KILN_F32, 1, 2, 3, 4);
}

TU_TEST(create, from_data_scalar_and_empty) {
    double x = 2.5;
    kiln_tensor *s = kiln_from_data(ctx, KILN_F64, 0, NULL, &x);
    TU_ASSERT_SCALAR_SHAPE(s);
    cr_assert_eq(kiln_numel(s), 1);
    cr_assert_eq(TU_ITEM(s), 2.5);

    kiln_tensor *e = kiln_from_data(ctx, KILN_F32, TU_S(0, 3), NULL);
    TU_ASSERT_SHAPE(e, 0, 3);
    cr_assert_eq(kiln_numel(e), 0);
    float dummy = 42;
    cr_assert_eq(kiln_to_host(e, &dummy, 0), KILN_OK);
    cr_assert_eq(dummy, 42);

    kiln_tensor *e2 = kiln_from_data(ctx, KILN_I64, TU_S(4, 0, 2), NULL);
    TU_ASSERT_SHAPE(e2, 4, 0, 2);
    cr_assert_eq(kiln_realize(e2), KILN_OK);
}

TU_TEST(create, from_data_large) {
    TU_RNG(r);
    enum { N = 100003 };
    double *v = malloc(N * sizeof(double));
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(N), -1, 1, v);
    TU_EXPECT_EXACT(t, KILN_F32, v, N);
    free(v);
}

TU_TEST(create, full_every_dtype) {
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        kiln_dtype dt = all[k];
        kiln_tensor *t = kiln_full(ctx, dt, TU_S(2, 3), 2.75);
        TU_ASSERT_SHAPE(t, 2, 3);
        double want = tu_is_float(dt) ? 2.75 : dt == KILN_BOOL ? 1 : 2;
        double w[6] = {want, want, want, want, want, want};
        TU_EXPECT_EXACT(t, dt, w, 6);

        kiln_tensor *z = kiln_full(ctx, dt, TU_S(3), 0.0);
        TU_EXPECT_VALS(z, dt, 0, 0, 0);
    }
}

TU_TEST(create, full_conversions) {
    /* integers truncate toward zero */
    TU_EXPECT_VALS(kiln_full(ctx, KILN_I32, TU_S(2), -2.75), KILN_I32, -2, -2);
    TU_EXPECT_VALS(kiln_full(ctx, KILN_I64, TU_S(1), -0.5), KILN_I64, 0);
    TU_EXPECT_VALS(kiln_full(ctx, KILN_U8, TU_S(2), 200.9), KILN_U8, 200, 200);
    /* bool is value != 0 */
    TU_EXPECT_VALS(kiln_full(ctx, KILN_BOOL, TU_S(2), -0.5), KILN_BOOL, 1, 1);
    TU_EXPECT_VALS(kiln_full(ctx, KILN_BOOL, TU_S(1), -0.0), KILN_BOOL, 0);
    /* floats round to the dtype */
    double tenth = 0.1;
    TU_EXPECT_EXACT(kiln_full(ctx, KILN_F16, TU_S(1), 0.1), KILN_F16, &tenth, 1);
    TU_EXPECT_EXACT(kiln_full(ctx, KILN_BF16, TU_S(1), 0.1), KILN_BF16, &tenth, 1);
    TU_EXPECT_EXACT(kiln_full(ctx, KILN_F32, TU_S(1), 0.1), KILN_F32, &tenth, 1);
    TU_EXPECT_EXACT(kiln_full(ctx, KILN_F64, TU_S(1), 0.1), KILN_F64, &tenth, 1);
    TU_EXPECT_VALS(kiln_full(ctx, KILN_F16, TU_S(1), 70000.0), KILN_F16, INFINITY);
    TU_EXPECT_VALS(kiln_full(ctx, KILN_F32, TU_S(2), NAN), KILN_F32, NAN, NAN);
    TU_EXPECT_VALS(kiln_full(ctx, KILN_F64, TU_S(1), -INFINITY), KILN_F64, -INFINITY);
    /* large integers are exact in i64 */
    int64_t big = (1ll << 52) + 1;
    TU_EXPECT_I64(kiln_full(ctx, KILN_I64, TU_S(1), (double)big), KILN_I64, &big, 1);
}

TU_TEST(create, zeros_ones_every_dtype) {
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        kiln_dtype dt = all[k];
        kiln_tensor *z = kiln_zeros(ctx, dt, TU_S(2, 1, 3));
        kiln_tensor *o = kiln_ones(ctx, dt, TU_S(2, 1, 3));
        TU_ASSERT_SHAPE(z, 2, 1, 3);
        TU_ASSERT_SHAPE(o, 2, 1, 3);
        double zs[6] = {0}, os[6] = {1, 1, 1, 1, 1, 1};
        TU_EXPECT_EXACT(z, dt, zs, 6);
        TU_EXPECT_EXACT(o, dt, os, 6);

        kiln_tensor *z0 = kiln_zeros(ctx, dt, 0, NULL);
        TU_ASSERT_SCALAR_SHAPE(z0);
        cr_assert_eq(TU_ITEM(z0), 0.0);
        kiln_tensor *o0 = kiln_ones(ctx, dt, 0, NULL);
        cr_assert_eq(TU_ITEM(o0), 1.0);

        kiln_tensor *e = kiln_ones(ctx, dt, TU_S(3, 0));
        TU_ASSERT_SHAPE(e, 3, 0);
        cr_assert_eq(kiln_realize(e), KILN_OK);
    }
}

TU_TEST(create, zeros_have_positive_sign) {
    double v[2];
    TU_READ(kiln_zeros(ctx, KILN_F64, TU_S(2)), v, 2);
    cr_assert(!signbit(v[0]) && !signbit(v[1]), "[%s] zeros are -0.0", tu_exec_name());
}

TU_TEST(create, scalar) {
    int n;
    const kiln_dtype *all = tu_all_dtypes(&n);
    for (int k = 0; k < n; k++) {
        kiln_tensor *s = kiln_scalar(ctx, all[k], 3.0);
        TU_ASSERT_SCALAR_SHAPE(s);
        TU_ASSERT_DTYPE(s, all[k]);
        double want = all[k] == KILN_BOOL ? 1.0 : 3.0;
        cr_assert_eq(TU_ITEM(s), want, "[%s] %s scalar", tu_exec_name(), tu_dt_name(all[k]));
    }
    cr_assert_eq(TU_ITEM(kiln_scalar(ctx, KILN_F32, -1.5)), -1.5);
    cr_assert(isnan(TU_ITEM(kiln_scalar(ctx, KILN_F64, NAN))));
    cr_assert_eq(TU_ITEM(kiln_scalar(ctx, KILN_I32, -7.9)), -7.0);
}

TU_TEST(create, arange_basic) {
    kiln_tensor *a = kiln_arange(ctx, KILN_I32, 0, 5, 1);
    TU_ASSERT_SHAPE(a, 5);
    TU_EXPECT_VALS(a, KILN_I32, 0, 1, 2, 3, 4);

    kiln_tensor *b = kiln_arange(ctx, KILN_I64, 10, 0, -3);
    TU_ASSERT_SHAPE(b, 4);
    TU_EXPECT_VALS(b, KILN_I64, 10, 7, 4, 1);

    kiln_tensor *c = kiln_arange(ctx, KILN_F64, 1, 0, -0.25);
    TU_EXPECT_VALS(c, KILN_F64, 1, 0.75, 0.5, 0.25);

    kiln_tensor *d = kiln_arange(ctx, KILN_U8, 250, 256, 1);
    TU_EXPECT_VALS(d, KILN_U8, 250, 251, 252, 253, 254, 255);

    kiln_tensor *e = kiln_arange(ctx, KILN_F16, -1, 1, 0.5);
    TU_EXPECT_VALS(e, KILN_F16, -1, -0.5, 0, 0.5);

    kiln_tensor *f = kiln_arange(ctx, KILN_BF16, 0, 3, 1);
    TU_EXPECT_VALS(f, KILN_BF16, 0, 1, 2);

    kiln_tensor *g = kiln_arange(ctx, KILN_BOOL, 0, 3, 1);
    TU_EXPECT_VALS(g, KILN_BOOL, 0, 1, 1);
}

TU_TEST(create, arange_float_steps) {
    /* ceil((1 - 0) / 0.1) = 10 elements, each i * 0.1 computed in float64. */
    kiln_tensor *a = kiln_arange(ctx, KILN_F32, 0, 1, 0.1);
    TU_ASSERT_SHAPE(a, 10);
    double w[10];
    for (int i = 0; i < 10; i++)
        w[i] = 0 + i * 0.1;
    TU_EXPECT_EXACT(a, KILN_F32, w, 10);

    /* ceil(2.5 / 1) = 3 */
    kiln_tensor *b = kiln_arange(ctx, KILN_F64, 0.5, 3, 1);
    TU_EXPECT_VALS(b, KILN_F64, 0.5, 1.5, 2.5);

    /* Integer dtypes convert each float64 element by truncation. */
    kiln_tensor *c = kiln_arange(ctx, KILN_I32, -2.5, 2, 1);
    TU_ASSERT_SHAPE(c, 5);
    TU_EXPECT_VALS(c, KILN_I32, -2, -1, 0, 0, 1);

    enum { N = 1000 };
    kiln_tensor *d = kiln_arange(ctx, KILN_F64, 3, 3 + N * 0.37, 0.37);
    double big[N + 1];
    int64_t nd = kiln_numel(d);
    /* (N * 0.37) / 0.37 may land just above or at N in float64 */
    int64_t want_n = (int64_t)ceil(((3 + N * 0.37) - 3) / 0.37);
    cr_assert_eq(nd, want_n, "[%s] arange length %lld, expected %lld", tu_exec_name(),
                 (long long)nd, (long long)want_n);
    for (int64_t i = 0; i < want_n; i++)
        big[i] = 3 + (double)i * 0.37;
    TU_EXPECT_EXACT(d, KILN_F64, big, want_n);
}

TU_TEST(create, arange_empty) {
    kiln_tensor *a = kiln_arange(ctx, KILN_F32, 0, 0, 1);
    TU_ASSERT_SHAPE(a, 0);
    kiln_tensor *b = kiln_arange(ctx, KILN_I64, 5, 0, 1);
    TU_ASSERT_SHAPE(b, 0);
    kiln_tensor *c = kiln_arange(ctx, KILN_F64, 0, 5, -1);
    TU_ASSERT_SHAPE(c, 0);
    cr_assert_eq(kiln_realize(c), KILN_OK);
}

TU_TEST(create, created_tensors_compute) {
    /* Leaves made by full and arange feed ops like any other tensor. */
    kiln_tensor *a = kiln_arange(ctx, KILN_F32, 0, 6, 1);
    kiln_tensor *b = kiln_full(ctx, KILN_F32, TU_S(6), 0.5);
    kiln_tensor *c = kiln_mul(kiln_add(a, b), kiln_ones(ctx, KILN_F32, TU_S(2, 6)));
    TU_ASSERT_SHAPE(c, 2, 6);
    TU_EXPECT_VALS(c, KILN_F32, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5);
}

/* ---- eye, linspace, tril, triu (api/layout.c) ---- */

TU_TEST(create, eye) {
    TU_EXPECT_VALS(kiln_eye(ctx, KILN_F32, 2, 3), KILN_F32, 1, 0, 0, 0, 1, 0);
    TU_EXPECT_VALS(kiln_eye(ctx, KILN_I64, 3, 2), KILN_I64, 1, 0, 0, 1, 0, 0);
    TU_EXPECT_VALS(kiln_eye(ctx, KILN_BOOL, 2, 2), KILN_BOOL, 1, 0, 0, 1);
    TU_ASSERT_SHAPE(kiln_eye(ctx, KILN_F32, 0, 4), 0, 4);
    TU_ASSERT_STATUS(kiln_eye(ctx, KILN_F32, -1, 4), KILN_ERR_SHAPE);
}

TU_TEST(create, linspace) {
    TU_EXPECT_VALS(kiln_linspace(ctx, KILN_F64, 0, 1, 5), KILN_F64, 0, 0.25, 0.5, 0.75, 1);
    TU_EXPECT_VALS(kiln_linspace(ctx, KILN_F32, 2, -2, 3), KILN_F32, 2, 0, -2);
    TU_EXPECT_VALS(kiln_linspace(ctx, KILN_F64, 3, 9, 1), KILN_F64, 3);
    TU_ASSERT_SHAPE(kiln_linspace(ctx, KILN_F64, 3, 9, 0), 0);
    /* the last point is stop exactly, where start + (n-1) step is not */
    double v[7];
    TU_READ(kiln_linspace(ctx, KILN_F64, 0.1, 0.7, 7), v, 7);
    cr_assert(v[6] == 0.7, "[%s] linspace ends at %.17g, not 0.7", tu_exec_name(), v[6]);
    for (int i = 0; i < 6; i++)
        cr_assert(v[i] == 0.1 + i * ((0.7 - 0.1) / 6), "[%s] point %d is %.17g", tu_exec_name(),
                  i, v[i]);
    TU_ASSERT_STATUS(kiln_linspace(ctx, KILN_F32, 0, INFINITY, 3), KILN_ERR_ARG);
    TU_ASSERT_STATUS(kiln_linspace(ctx, KILN_F32, 0, 1, -2), KILN_ERR_ARG);
}

TU_TEST(create, tril_triu) {
    TU_RNG(r);
    double x[2 * 3 * 4], lo[2 * 3 * 4], up[2 * 3 * 4];
    kiln_tensor *t = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3, 4), -5, 5, x);
    const int64_t ks[] = {0, 1, -1, 5, -5};
    for (int q = 0; q < 5; q++) {
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 4; j++) {
                    int at = b * 12 + i * 4 + j;
                    lo[at] = j - i <= ks[q] ? x[at] : 0;
                    up[at] = j - i >= ks[q] ? x[at] : 0;
                }
        TU_EXPECT(kiln_tril(t, ks[q]), KILN_F32, lo, 24);
        TU_EXPECT(kiln_triu(t, ks[q]), KILN_F32, up, 24);
    }
    kiln_tensor *i = tu_tensor(ctx, KILN_I32, TU_S(2, 2), (double[]){1, 2, 3, 4});
    TU_EXPECT_VALS(kiln_triu(i, 0), KILN_I32, 1, 2, 0, 4);
    TU_ASSERT_SHAPE(kiln_tril(kiln_zeros(ctx, KILN_F32, TU_S(0, 3)), 0), 0, 3);
    /* of an empty matrix, a handle of its own: releasing it leaves the input
     * (it was the input itself, freed with it: ASan saw the use after free) */
    kiln_tensor *empty = kiln_zeros(ctx, KILN_F32, TU_S(3, 0));
    kiln_tensor *te = kiln_triu(empty, 1);
    cr_assert_neq(te, empty, "[%s] kiln_triu of an empty matrix returned its input", tu_exec_name());
    kiln_release(te);
    TU_ASSERT_SHAPE(kiln_tril(empty, 0), 3, 0);
    TU_ASSERT_ERROR(kiln_tril(kiln_zeros(ctx, KILN_F32, TU_S(3)), 0), KILN_ERR_SHAPE, "kiln_tril");
    /* the gradient is masked the same way */
    if (tu_cur_exec()->mode == KILN_LAZY) {
        kiln_tensor *w = tu_rand_tensor(ctx, &r, KILN_F32, TU_S(2, 3, 4), -5, 5, x);
        kiln_requires_grad(w, true);
        cr_assert_eq(kiln_backward(kiln_sum(kiln_tril(w, 0), 0, NULL, false)), KILN_OK);
        for (int k = 0; k < 24; k++)
            lo[k] = (k % 4) - ((k / 4) % 3) <= 0 ? 1 : 0;
        TU_EXPECT(kiln_grad(w), KILN_F32, lo, 24);
    }
}

/* Two aranges of one length and start that differ only in their step are
 * different programs: the step is part of the graph's signature (with it
 * dropped, the second sync reused the first's compiled program and its
 * step). Eager mode compiles the arange itself; lazy mode a fused kernel. */
TU_TEST(create, arange_step_is_part_of_the_program) {
    TU_EXPECT_VALS(kiln_mul_scalar(kiln_arange(ctx, KILN_F32, 1, 6, 1), 3), KILN_F32, 3, 6, 9,
                   12, 15);
    TU_EXPECT_VALS(kiln_mul_scalar(kiln_arange(ctx, KILN_F32, 1, 11, 2), 3), KILN_F32, 3, 9, 15,
                   21, 27);
    TU_EXPECT_VALS(kiln_mul_scalar(kiln_arange(ctx, KILN_F32, 1, 3.5, 0.5), 3), KILN_F32, 3, 4.5,
                   6, 7.5, 9);
}
