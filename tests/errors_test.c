/* Tests of kiln's error paths: every kind of bad argument gives an error
 * handle with the right status and a message naming the op and the shapes;
 * errors pass on through later ops unchanged; sync points report them; NULL
 * arguments, mixed contexts and impossible allocations never crash. */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

#include "test_util.h"

/* An allocation that cannot succeed must come back as NULL for kiln to
 * report KILN_ERR_OOM; under AddressSanitizer it would otherwise stop the
 * process at the request itself. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

/* ---- creation ---- */

TU_TEST(errors, creation_shapes) {
    TU_ASSERT_ERROR(kiln_zeros(ctx, KILN_F32, TU_S(2, -3)), KILN_ERR_SHAPE, "-3");
    TU_ASSERT_ERROR(kiln_ones(ctx, KILN_I32, TU_S(-1)), KILN_ERR_SHAPE, "-1");
    TU_ASSERT_ERROR(kiln_full(ctx, KILN_F64, TU_S(4, -2), 1.0), KILN_ERR_SHAPE, "kiln_full");
    float data[4] = {0};
    TU_ASSERT_ERROR(kiln_from_data(ctx, KILN_F32, TU_S(-4), data), KILN_ERR_SHAPE,
                    "kiln_from_data");
    TU_ASSERT_ERROR(kiln_rand(ctx, KILN_F32, TU_S(3, -1), 1), KILN_ERR_SHAPE, "kiln_rand");
    TU_ASSERT_ERROR(kiln_randn(ctx, KILN_F32, TU_S(-3), 1), KILN_ERR_SHAPE, "kiln_randn");

    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    TU_ASSERT_STATUS(kiln_zeros(ctx, KILN_F32, 9, nine), KILN_ERR_SHAPE);
    TU_ASSERT_STATUS(kiln_zeros(ctx, KILN_F32, -1, nine), KILN_ERR_SHAPE);
    TU_ASSERT_ERROR(kiln_from_data(ctx, KILN_F32, 9, nine, data), KILN_ERR_SHAPE, "kiln_from_data");
    TU_ASSERT_ERROR(kiln_full(ctx, KILN_F32, -2, nine, 0), KILN_ERR_SHAPE, "kiln_full");
    /* eight dims are fine */
    TU_ASSERT_SHAPE(kiln_zeros(ctx, KILN_F32, 8, nine), 1, 1, 1, 1, 1, 1, 1, 1);

    /* element counts that overflow int64 */
    TU_ASSERT_STATUS(kiln_zeros(ctx, KILN_F32, TU_S(1ll << 40, 1ll << 40)), KILN_ERR_SHAPE);
    TU_ASSERT_ERROR(kiln_full(ctx, KILN_U8, TU_S(1ll << 32, 1ll << 32, 2), 1), KILN_ERR_SHAPE,
                    "kiln_full");
    TU_ASSERT_STATUS(kiln_zeros(ctx, KILN_F32, TU_S(INT64_MAX, 2)), KILN_ERR_SHAPE);
    TU_ASSERT_ERROR(kiln_from_data(ctx, KILN_U8, TU_S(1ll << 62, 4), data), KILN_ERR_SHAPE,
                    "kiln_from_data");
    /* ... unless a zero makes the tensor empty: NumPy accepts that */
    kiln_tensor *e = kiln_zeros(ctx, KILN_F32, TU_S(0, 1ll << 40, 1ll << 40));
    if (kiln_error(e) == KILN_OK)
        cr_assert_eq(kiln_numel(e), 0);
}

TU_TEST(errors, creation_messages_name_the_op) {
    /* the op the user called, not the one it is built on */
    TU_ASSERT_ERROR(kiln_zeros(ctx, KILN_F32, TU_S(2, -3)), KILN_ERR_SHAPE, "kiln_zeros", "-3");
    TU_ASSERT_ERROR(kiln_ones(ctx, KILN_I32, TU_S(-1)), KILN_ERR_SHAPE, "kiln_ones");
    TU_ASSERT_ERROR(kiln_zeros(ctx, KILN_F32, 9, (const int64_t[9]){1, 1, 1, 1, 1, 1, 1, 1, 1}),
                    KILN_ERR_SHAPE, "kiln_zeros");
    TU_ASSERT_ERROR(kiln_zeros(ctx, KILN_F32, TU_S(1ll << 40, 1ll << 40)), KILN_ERR_SHAPE,
                    "kiln_zeros");
}

TU_TEST(errors, creation_arguments) {
    TU_ASSERT_ERROR(kiln_from_data(ctx, KILN_F32, TU_S(3), NULL), KILN_ERR_ARG, "kiln_from_data");
    TU_ASSERT_ERROR(kiln_arange(ctx, KILN_F32, 0, 10, 0), KILN_ERR_ARG, "kiln_arange");
    TU_ASSERT_ERROR(kiln_arange(ctx, KILN_F32, 0, 10, NAN), KILN_ERR_ARG, "kiln_arange");
    TU_ASSERT_ERROR(kiln_arange(ctx, KILN_F32, 0, 10, INFINITY), KILN_ERR_ARG, "kiln_arange");
    TU_ASSERT_ERROR(kiln_arange(ctx, KILN_F32, 0, INFINITY, 1), KILN_ERR_ARG, "kiln_arange");
    TU_ASSERT_ERROR(kiln_arange(ctx, KILN_F32, NAN, 1, 1), KILN_ERR_ARG, "kiln_arange");
    TU_ASSERT_ERROR(kiln_arange(ctx, KILN_F64, -INFINITY, 0, 1), KILN_ERR_ARG, "kiln_arange");
    const kiln_dtype nonfloat[] = {KILN_I32, KILN_I64, KILN_U8, KILN_BOOL};
    for (int i = 0; i < 4; i++) {
        TU_ASSERT_ERROR(kiln_rand(ctx, nonfloat[i], TU_S(2), 1), KILN_ERR_DTYPE, "kiln_rand");
        TU_ASSERT_ERROR(kiln_randn(ctx, nonfloat[i], TU_S(2), 1), KILN_ERR_DTYPE, "kiln_randn");
    }
    TU_ASSERT_ERROR2(kiln_zeros(ctx, (kiln_dtype)42, TU_S(2)), KILN_ERR_DTYPE, KILN_ERR_ARG);
    TU_ASSERT_ERROR2(kiln_from_data(ctx, (kiln_dtype)-5, TU_S(1), (float[1]){0}), KILN_ERR_DTYPE,
                     KILN_ERR_ARG);
}

/* A NULL where a pointer is needed is KILN_ERR_ARG ("any other bad argument:
 * axis, NULL, size, context"). */
TU_TEST(errors, null_pointers_are_arg_errors) {
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2, 3));
    TU_ASSERT_ERROR(kiln_from_data(ctx, KILN_F32, 2, NULL, (float[4]){0}), KILN_ERR_ARG,
                    "kiln_from_data");
    TU_ASSERT_STATUS(kiln_zeros(ctx, KILN_F32, 2, NULL), KILN_ERR_ARG);
    TU_ASSERT_ERROR(kiln_full(ctx, KILN_F32, 2, NULL, 1), KILN_ERR_ARG, "kiln_full");
    TU_ASSERT_ERROR(kiln_rand(ctx, KILN_F32, 2, NULL, 1), KILN_ERR_ARG, "kiln_rand");
    TU_ASSERT_ERROR(kiln_pad(x, NULL, 0), KILN_ERR_ARG, "kiln_pad");
}

/* Ops on tensors that are all NULL have no context for an error and return
 * NULL; kiln_stack dereferenced the first (tests/fuzz/crashers/api_sequence/
 * stack_of_null_tensors). */
TU_TEST(errors, all_null_tensors_give_null) {
    kiln_tensor *none[3] = {NULL, NULL, NULL};
    cr_assert_null(kiln_stack(3, none, 0));
    cr_assert_null(kiln_cat(3, none, 0));
    cr_assert_null(kiln_add(NULL, NULL));
    cr_assert_null(kiln_where(NULL, NULL, NULL));
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2));
    kiln_tensor *first_null[2] = {NULL, x};
    TU_ASSERT_ERROR(kiln_stack(2, first_null, 0), KILN_ERR_ARG, "kiln_stack");
}

/* ---- each op's errors name the op and its shapes ---- */

TU_TEST(errors, unary_dtype) {
    kiln_tensor *b = kiln_ones(ctx, KILN_BOOL, TU_S(2, 2));
    TU_ASSERT_ERROR(kiln_neg(b), KILN_ERR_DTYPE, "kiln_neg", "[2,2]");
}

TU_TEST(errors, binary_shapes_every_op) {
    kiln_tensor *a = kiln_ones(ctx, KILN_F32, TU_S(2, 3));
    kiln_tensor *b = kiln_ones(ctx, KILN_F32, TU_S(4));
    struct {
        const char *name;
        kiln_tensor *(*fn)(kiln_tensor *, kiln_tensor *);
    } ops[] = {
        {"kiln_add", kiln_add},         {"kiln_sub", kiln_sub}, {"kiln_mul", kiln_mul},
        {"kiln_div", kiln_div},         {"kiln_pow", kiln_pow}, {"kiln_maximum", kiln_maximum},
        {"kiln_minimum", kiln_minimum}, {"kiln_lt", kiln_lt},   {"kiln_le", kiln_le},
        {"kiln_gt", kiln_gt},           {"kiln_ge", kiln_ge},   {"kiln_eq", kiln_eq},
        {"kiln_ne", kiln_ne},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        TU_ASSERT_ERROR(ops[i].fn(a, b), KILN_ERR_SHAPE, ops[i].name, "[2,3]", "[4]");
    kiln_tensor *c = kiln_ones(ctx, KILN_BOOL, TU_S(5, 1, 1));
    TU_ASSERT_ERROR(kiln_where(c, a, b), KILN_ERR_SHAPE, "kiln_where");
    TU_ASSERT_ERROR(kiln_where(kiln_ones(ctx, KILN_BOOL, TU_S(4)), a, a), KILN_ERR_SHAPE,
                    "kiln_where", "[4]", "[2,3]");
}

TU_TEST(errors, matmul_message) {
    kiln_tensor *a = kiln_ones(ctx, KILN_F32, TU_S(3, 4));
    kiln_tensor *b = kiln_ones(ctx, KILN_F32, TU_S(5, 6));
    TU_ASSERT_ERROR(kiln_matmul(a, b), KILN_ERR_SHAPE, "kiln_matmul", "[3,4]", "[5,6]");
}

TU_TEST(errors, reductions) {
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2, 3));
    TU_ASSERT_ERROR(kiln_sum(x, TU_AXES(2), false), KILN_ERR_ARG, "kiln_sum", "[2,3]");
    TU_ASSERT_ERROR(kiln_mean(x, TU_AXES(-3), false), KILN_ERR_ARG, "kiln_mean", "[2,3]");
    TU_ASSERT_ERROR(kiln_argmin(x, TU_AXES(1, -1), false), KILN_ERR_ARG, "kiln_argmin", "[2,3]");
    kiln_tensor *e = kiln_ones(ctx, KILN_F32, TU_S(0, 3));
    TU_ASSERT_ERROR(kiln_max(e, TU_AXES(0), false), KILN_ERR_SHAPE, "kiln_max", "[0,3]");
    TU_ASSERT_ERROR(kiln_min(e, 0, NULL, true), KILN_ERR_SHAPE, "kiln_min", "[0,3]");
}

TU_TEST(errors, views) {
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2, 3));
    TU_ASSERT_ERROR(kiln_reshape(x, TU_S(4, 2)), KILN_ERR_SHAPE, "kiln_reshape", "[2,3]");
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 6, 1};
    TU_ASSERT_ERROR2(kiln_reshape(x, 9, nine), KILN_ERR_SHAPE, KILN_ERR_ARG);
    TU_ASSERT_ERROR(kiln_permute(x, (const int[]){1, 1}), KILN_ERR_ARG, "kiln_permute");
    TU_ASSERT_ERROR(kiln_transpose(x, 0, 2), KILN_ERR_ARG, "kiln_transpose");
    TU_ASSERT_ERROR(kiln_expand(x, TU_S(2, 4)), KILN_ERR_SHAPE, "kiln_expand", "[2,3]");
    TU_ASSERT_ERROR2(kiln_expand(x, 9, nine), KILN_ERR_SHAPE, KILN_ERR_ARG);
    TU_ASSERT_ERROR(kiln_slice(x, 1, 0, 2, 0), KILN_ERR_ARG, "kiln_slice");
    TU_ASSERT_ERROR(kiln_slice(x, 2, 0, 2, 1), KILN_ERR_ARG, "kiln_slice");
    TU_ASSERT_ERROR2(kiln_pad(x, (const int64_t[]){0, 0, -1, 0}, 0), KILN_ERR_ARG, KILN_ERR_SHAPE);
    TU_ASSERT_ERROR(kiln_flip(x, TU_AXES(2)), KILN_ERR_ARG, "kiln_flip");
    TU_ASSERT_ERROR(kiln_squeeze(x, TU_AXES(0)), KILN_ERR_SHAPE, "kiln_squeeze", "[2,3]");
    TU_ASSERT_ERROR(kiln_unsqueeze(x, 3), KILN_ERR_ARG, "kiln_unsqueeze");
    kiln_tensor *eight = kiln_ones(ctx, KILN_F32, 8, (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 1});
    TU_ASSERT_ERROR2(kiln_unsqueeze(eight, 0), KILN_ERR_SHAPE, KILN_ERR_ARG);
    kiln_tensor *parts[2] = {x, kiln_ones(ctx, KILN_F32, TU_S(3, 3))};
    TU_ASSERT_ERROR(kiln_cat(2, parts, 1), KILN_ERR_SHAPE, "kiln_cat", "[2,3]", "[3,3]");
    kiln_tensor *with_null[2] = {x, NULL};
    TU_ASSERT_ERROR(kiln_cat(2, with_null, 0), KILN_ERR_ARG, "kiln_cat");
}

/* Views, broadcasts, cat and matmul whose element counts overflow are
 * refused with the op and a shape named, never recorded with a wrapped count
 * (reshape once crashed, expand reported 0 elements, cat a negative size). */
TU_TEST(errors, element_count_overflow) {
    const int64_t big = INT64_C(1) << 32, huge = INT64_MAX / 16; /* the most kiln takes */
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2, 3));
    /* 2 * 3 * 2^63 / ... wraps to 6 in 64 bits */
    TU_ASSERT_ERROR(kiln_reshape(x, TU_S(2, 3, INT64_C(1) << 62, 4)), KILN_ERR_SHAPE,
                    "kiln_reshape", "too many elements");
    TU_ASSERT_ERROR(kiln_reshape(x, TU_S(-1, INT64_C(1) << 62, 4)), KILN_ERR_SHAPE, "kiln_reshape");
    kiln_tensor *one = kiln_ones(ctx, KILN_F32, TU_S(1, 1));
    TU_ASSERT_ERROR(kiln_expand(one, TU_S(big, big)), KILN_ERR_SHAPE, "kiln_expand",
                    "too many elements");
    kiln_tensor *col = kiln_expand(kiln_ones(ctx, KILN_F32, TU_S(1)), TU_S(huge));
    cr_assert_eq(kiln_error(col), KILN_OK, "[%s] a [2^59 - 1] view is fine: %s", tu_exec_name(),
                 kiln_error_message(col));
    kiln_tensor *parts[17];
    for (int i = 0; i < 17; i++)
        parts[i] = col;
    TU_ASSERT_ERROR(kiln_cat(2, parts, 0), KILN_ERR_SHAPE, "kiln_cat", "too many elements");
    TU_ASSERT_ERROR(kiln_cat(17, parts, 0), KILN_ERR_SHAPE, "kiln_cat", "too many elements");
    kiln_tensor *tall = kiln_expand(one, TU_S(big, 1)), *wide = kiln_expand(one, TU_S(1, big));
    TU_ASSERT_ERROR(kiln_add(tall, wide), KILN_ERR_SHAPE, "kiln_add", "too many elements");
    TU_ASSERT_ERROR(kiln_where(kiln_gt(tall, tall), tall, wide), KILN_ERR_SHAPE, "kiln_where");
    TU_ASSERT_ERROR(kiln_matmul(tall, wide), KILN_ERR_SHAPE, "kiln_matmul", "too many elements");
    kiln_tensor *batch = kiln_expand(kiln_ones(ctx, KILN_F32, TU_S(1, 1, 1)), TU_S(big, big, 1));
    TU_ASSERT_ERROR2(kiln_matmul(batch, one), KILN_ERR_SHAPE, KILN_ERR_SHAPE);
    /* an empty shape whose other sizes overflow cannot be indexed either: its
     * strides overflowed in graph/ (found by the api_sequence fuzzer) */
    TU_ASSERT_ERROR(kiln_zeros(ctx, KILN_F32, TU_S(0, INT64_C(1) << 60, INT64_C(1) << 60)),
                    KILN_ERR_SHAPE, "kiln_zeros", "non-empty axes");
    kiln_tensor *none = kiln_zeros(ctx, KILN_F32, TU_S(0, 1, 1));
    TU_ASSERT_ERROR(kiln_expand(none, TU_S(0, INT64_C(1) << 60, INT64_C(1) << 60)), KILN_ERR_SHAPE,
                    "kiln_expand");
    TU_ASSERT_SHAPE(kiln_expand(none, TU_S(0, big, 16)), 0, big, 16);
    /* nothing computed before is lost */
    float v[6];
    cr_assert_eq(kiln_to_host(x, v, sizeof v), KILN_OK, "[%s] %s", tu_exec_name(), kiln_error_message(x));
    cr_assert_eq(v[5], 1.0f);
}

/* KILN_THREADS past any sense is capped (it once crashed inside OpenMP), and
 * a value that is not a positive number means the default. */
Test(errors, absurd_thread_counts) {
    const char *vals[] = {"100000", "-3", "lots", "0"};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        setenv("KILN_THREADS", vals[i], 1);
        kiln_ctx *ctx = kiln_ctx_new(KILN_CPU);
        cr_assert_not_null(ctx, "KILN_THREADS=%s: %s", vals[i], kiln_last_ctx_error());
        kiln_tensor *a = kiln_randn(ctx, KILN_F32, TU_S(1 << 16), 7);
        double s = 0;
        cr_assert_eq(kiln_item(kiln_sum(kiln_mul(a, a), 0, NULL, false), &s), KILN_OK,
                     "KILN_THREADS=%s: %s", vals[i], kiln_ctx_last_error(ctx));
        cr_assert(s > 60000 && s < 71000, "KILN_THREADS=%s: sum of squares %g", vals[i], s);
        kiln_ctx_free(ctx);
    }
    unsetenv("KILN_THREADS");
}

TU_TEST(errors, cast_and_matmul_dtypes) {
    kiln_tensor *b = kiln_ones(ctx, KILN_BOOL, TU_S(2, 2));
    TU_ASSERT_ERROR(kiln_matmul(b, b), KILN_ERR_DTYPE, "kiln_matmul");
    TU_ASSERT_ERROR2(kiln_cast(b, (kiln_dtype)KILN_NUM_DTYPES), KILN_ERR_DTYPE, KILN_ERR_ARG);
}

/* ---- errors travel ---- */

TU_TEST(errors, first_error_passes_on) {
    kiln_tensor *a = kiln_ones(ctx, KILN_F32, TU_S(3, 4));
    kiln_tensor *b = kiln_ones(ctx, KILN_F32, TU_S(5, 6));
    kiln_tensor *e1 = kiln_matmul(a, b);
    TU_ASSERT_ERROR(e1, KILN_ERR_SHAPE, "kiln_matmul", "[3,4]", "[5,6]");
    const char *m1 = kiln_error_message(e1);
    kiln_tensor *e2 = kiln_neg(kiln_ones(ctx, KILN_BOOL, TU_S(2)));
    TU_ASSERT_ERROR(e2, KILN_ERR_DTYPE, "kiln_neg");

    /* every kind of op hands e1's error on, with e1's message */
    kiln_tensor *later[] = {
        kiln_exp(e1),
        kiln_add(e1, e2),
        kiln_add(e1, a),
        kiln_mul(a, e1),
        kiln_add_scalar(e1, 1),
        kiln_where(e1, a, a),
        kiln_where(kiln_ones(ctx, KILN_BOOL, TU_S(3, 4)), e1, a),
        kiln_sum(e1, 0, NULL, false),
        kiln_argmax(e1, TU_AXES(5), false), /* would be its own error */
        kiln_reshape(e1, TU_S(7)),          /* likewise */
        kiln_transpose(e1, 0, 1),
        kiln_slice(e1, 0, 0, 1, 0),                          /* likewise */
        kiln_matmul(e1, kiln_ones(ctx, KILN_BOOL, TU_S(2))), /* likewise */
        kiln_cast(e1, KILN_I32),
        kiln_cat(2, (kiln_tensor *[]){e1, a}, 0),
        kiln_cat(2, (kiln_tensor *[]){a, e1}, 0),
        kiln_pad(e1, (const int64_t[]){1, 1, 1, 1}, 0),
        kiln_neg(kiln_exp(kiln_sum(e1, 0, NULL, false))),
    };
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++) {
        cr_assert(later[i] != NULL, "[%s] op %zu on an error handle returned NULL", tu_exec_name(),
                  i);
        cr_assert(kiln_error(later[i]) == KILN_ERR_SHAPE, "[%s] op %zu: status %d, expected %d",
                  tu_exec_name(), i, (int)kiln_error(later[i]), (int)KILN_ERR_SHAPE);
        cr_assert_str_eq(kiln_error_message(later[i]), m1,
                         "[%s] op %zu: message \"%s\", expected \"%s\"", tu_exec_name(), i,
                         kiln_error_message(later[i]), m1);
    }
    /* the dtype error travels too */
    kiln_tensor *d = kiln_mul_scalar(kiln_abs(e2), 2);
    TU_ASSERT_ERROR(d, KILN_ERR_DTYPE, "kiln_neg");
    cr_assert_str_eq(kiln_error_message(d), kiln_error_message(e2));
}

TU_TEST(errors, assign_of_an_error_leaves_dst) {
    kiln_tensor *e1 =
        kiln_matmul(kiln_ones(ctx, KILN_F32, TU_S(3, 4)), kiln_ones(ctx, KILN_F32, TU_S(5, 6)));
    kiln_tensor *dst = kiln_full(ctx, KILN_F32, TU_S(3, 4), 2);
    cr_assert_eq(kiln_assign(dst, e1), KILN_ERR_SHAPE);
    TU_ASSERT_OK(dst);
    double w[12] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
    TU_EXPECT_EXACT(dst, KILN_F32, w, 12);
}

TU_TEST(errors, sync_points_report) {
    kiln_tensor *e = kiln_add(kiln_ones(ctx, KILN_F32, TU_S(2)), kiln_ones(ctx, KILN_F32, TU_S(3)));
    cr_assert_eq(kiln_realize(e), KILN_ERR_SHAPE);
    float buf[6] = {0};
    cr_assert_eq(kiln_to_host(e, buf, 0), KILN_ERR_SHAPE);
    cr_assert_eq(kiln_to_host(e, buf, sizeof buf), KILN_ERR_SHAPE);
    double v = 0;
    cr_assert_eq(kiln_item(e, &v), KILN_ERR_SHAPE);
    cr_assert(isnan(v));
    cr_assert_eq(kiln_error(e), KILN_ERR_SHAPE);
    /* the context is still usable and a sync with an error handle around is fine */
    cr_assert_eq(kiln_sync(ctx), KILN_OK);
    kiln_tensor *ok = kiln_add_scalar(kiln_ones(ctx, KILN_F32, TU_S(2)), 1);
    TU_EXPECT_VALS(ok, KILN_F32, 2, 2);
    cr_assert_eq(kiln_realize(ok), KILN_OK);
}

TU_TEST(errors, to_host_wrong_nbytes) {
    kiln_tensor *t = kiln_arange(ctx, KILN_F32, 0, 6, 1);
    float buf[8];
    cr_assert_eq(kiln_to_host(t, buf, 5 * sizeof(float)), KILN_ERR_ARG);
    cr_assert_eq(kiln_to_host(t, buf, 7 * sizeof(float)), KILN_ERR_ARG);
    cr_assert_eq(kiln_to_host(t, buf, 6 * sizeof(float) - 1), KILN_ERR_ARG);
    cr_assert_eq(kiln_to_host(t, buf, 0), KILN_ERR_ARG);
    cr_assert_eq(kiln_to_host(t, NULL, 6 * sizeof(float)), KILN_ERR_ARG);
    /* a right call still works */
    cr_assert_eq(kiln_to_host(t, buf, 6 * sizeof(float)), KILN_OK);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(buf[i], (float)i);
    /* and so does computing with t */
    TU_EXPECT_VALS(kiln_mul_scalar(t, 2), KILN_F32, 0, 2, 4, 6, 8, 10);
    /* to_host on an empty tensor takes 0 bytes only */
    kiln_tensor *e = kiln_zeros(ctx, KILN_I64, TU_S(0));
    cr_assert_eq(kiln_to_host(e, buf, 8), KILN_ERR_ARG);
    cr_assert_eq(kiln_to_host(e, buf, 0), KILN_OK);
}

TU_TEST(errors, item_of_non_scalar) {
    kiln_tensor *t = kiln_ones(ctx, KILN_F32, TU_S(2, 3));
    double v = 0;
    cr_assert_eq(kiln_item(t, &v), KILN_ERR_ARG, "[%s] kiln_item of [2,3]", tu_exec_name());
    cr_assert(isnan(v), "[%s] kiln_item of [2,3] gave %g, not NaN", tu_exec_name(), v);
    cr_assert_neq(kiln_error(t), KILN_OK);
    cr_assert(strstr(kiln_error_message(t), "kiln_item") && strstr(kiln_error_message(t), "[2,3]"),
              "%s", kiln_error_message(t));
    kiln_tensor *e = kiln_zeros(ctx, KILN_F32, TU_S(0));
    v = 0;
    cr_assert_eq(kiln_item(e, &v), KILN_ERR_ARG);
    cr_assert(isnan(v));
    cr_assert_neq(kiln_error(e), KILN_OK);
    /* one element in any shape and dtype is fine */
    kiln_tensor *one = kiln_full(ctx, KILN_I32, TU_S(1, 1, 1), 5);
    cr_assert_eq(kiln_item(one, &v), KILN_OK);
    cr_assert_eq(v, 5);
    cr_assert_eq(kiln_error(one), KILN_OK);
    cr_assert_eq(kiln_item(kiln_scalar(ctx, KILN_U8, 200), &v), KILN_OK);
    cr_assert_eq(v, 200);
    cr_assert_eq(kiln_item(kiln_scalar(ctx, KILN_F64, -0.1), &v), KILN_OK);
    cr_assert_eq(v, -0.1);
    cr_assert_eq(kiln_item(kiln_scalar(ctx, KILN_BF16, 3.5), &v), KILN_OK);
    cr_assert_eq(v, 3.5);
    /* a NULL result is refused with a message, and t stays usable */
    kiln_tensor *s = kiln_scalar(ctx, KILN_I64, -7);
    cr_assert_eq(kiln_item(s, NULL), KILN_ERR_ARG);
    cr_assert(strstr(kiln_error_message(s), "kiln_item"), "%s", kiln_error_message(s));
    cr_assert_eq(kiln_item(s, &v), KILN_OK);
    cr_assert_eq(v, -7);
}

TU_TEST(errors, null_arguments_never_crash) {
    kiln_tensor *x = kiln_ones(ctx, KILN_F32, TU_S(2));
    /* no context at all: NULL */
    cr_assert_null(kiln_neg(NULL));
    cr_assert_null(kiln_add(NULL, NULL));
    cr_assert_null(kiln_where(NULL, NULL, NULL));
    cr_assert_null(kiln_add_scalar(NULL, 1));
    cr_assert_null(kiln_sum(NULL, 0, NULL, false));
    cr_assert_null(kiln_reshape(NULL, TU_S(2)));
    cr_assert_null(kiln_matmul(NULL, NULL));
    cr_assert_null(kiln_cast(NULL, KILN_F32));
    cr_assert_null(kiln_cat(0, NULL, 0));
    cr_assert_null(kiln_cat(2, (kiln_tensor *[]){NULL, NULL}, 0));
    cr_assert_null(kiln_cat(2, NULL, 0));
    cr_assert_null(kiln_zeros(NULL, KILN_F32, TU_S(2)));
    cr_assert_null(kiln_from_data(NULL, KILN_F32, TU_S(1), (float[1]){0}));
    cr_assert_null(kiln_arange(NULL, KILN_F32, 0, 1, 1));
    cr_assert_null(kiln_rand(NULL, KILN_F32, TU_S(1), 0));
    cr_assert_null(kiln_scalar(NULL, KILN_F32, 1));
    /* one NULL among real tensors: an error handle */
    TU_ASSERT_ERROR(kiln_add(x, NULL), KILN_ERR_ARG, "kiln_add");
    TU_ASSERT_ERROR(kiln_add(NULL, x), KILN_ERR_ARG, "kiln_add");
    TU_ASSERT_ERROR(kiln_where(NULL, x, x), KILN_ERR_ARG, "kiln_where");
    TU_ASSERT_ERROR(kiln_where(x, NULL, x), KILN_ERR_ARG, "kiln_where");
    TU_ASSERT_ERROR(kiln_matmul(x, NULL), KILN_ERR_ARG, "kiln_matmul");
    /* sync points, queries, ownership */
    cr_assert_eq(kiln_realize(NULL), KILN_ERR_ARG);
    float buf[2];
    cr_assert_eq(kiln_to_host(NULL, buf, sizeof buf), KILN_ERR_ARG);
    double v = 0;
    cr_assert_eq(kiln_item(NULL, &v), KILN_ERR_ARG);
    cr_assert(isnan(v));
    cr_assert_eq(kiln_sync(NULL), KILN_ERR_ARG);
    cr_assert_neq(kiln_error(NULL), KILN_OK);
    cr_assert_not_null(kiln_error_message(NULL));
    cr_assert_null(kiln_shape(NULL));
    (void)kiln_ndim(NULL);
    (void)kiln_numel(NULL);
    (void)kiln_dtype_of(NULL);
    cr_assert_null(kiln_ctx_of(NULL));
    cr_assert_null(kiln_keep(NULL));
    kiln_release(NULL);
    kiln_scope_begin(NULL);
    kiln_scope_end(NULL);
    kiln_ctx_set_mode(NULL, KILN_EAGER);
    (void)kiln_ctx_mode(NULL);
    (void)kiln_ctx_device(NULL);
    (void)kiln_ctx_live_nodes(NULL);
    kiln_ctx_free(NULL);
    cr_assert_neq(kiln_assign(NULL, x), KILN_OK);
    cr_assert_neq(kiln_assign(x, NULL), KILN_OK);
    cr_assert_neq(kiln_assign(NULL, NULL), KILN_OK);
    cr_assert_neq(kiln_dump_dot(NULL, "/dev/null"), KILN_OK);
    cr_assert_neq(kiln_dump_dot(x, NULL), KILN_OK);
    /* x is untouched by all of that */
    TU_EXPECT_VALS(x, KILN_F32, 1, 1);
}

TU_TEST(errors, mixing_contexts) {
    kiln_ctx *other = tu_ctx_like_current();
    cr_assert_not_null(other);
    kiln_tensor *a = kiln_ones(ctx, KILN_F32, TU_S(2));
    kiln_tensor *b = kiln_ones(other, KILN_F32, TU_S(2));
    TU_ASSERT_ERROR(kiln_add(a, b), KILN_ERR_ARG, "kiln_add");
    TU_ASSERT_ERROR(kiln_add(b, a), KILN_ERR_ARG, "kiln_add");
    TU_ASSERT_ERROR(kiln_matmul(a, b), KILN_ERR_ARG, "kiln_matmul");
    TU_ASSERT_ERROR(kiln_where(a, a, b), KILN_ERR_ARG, "kiln_where");
    TU_ASSERT_ERROR(kiln_cat(2, (kiln_tensor *[]){a, b}, 0), KILN_ERR_ARG, "kiln_cat");
    TU_EXPECT_VALS(a, KILN_F32, 1, 1);
    TU_EXPECT_VALS(b, KILN_F32, 1, 1);
    kiln_ctx_free(other);
    /* ctx is unaffected by the other's end */
    TU_EXPECT_VALS(kiln_add(a, a), KILN_F32, 2, 2);
}

TU_TEST(errors, assign_across_contexts_leaves_dst) {
    kiln_ctx *other = tu_ctx_like_current();
    cr_assert_not_null(other);
    kiln_tensor *a = kiln_ones(ctx, KILN_F32, TU_S(2));
    kiln_tensor *b = kiln_zeros(other, KILN_F32, TU_S(2));
    cr_assert_eq(kiln_assign(a, b), KILN_ERR_ARG);
    cr_assert_eq(kiln_assign(b, a), KILN_ERR_ARG);
    TU_EXPECT_VALS(a, KILN_F32, 1, 1);
    TU_EXPECT_VALS(b, KILN_F32, 0, 0);
    kiln_ctx_free(other);
}

TU_TEST(errors, enormous_allocation) {
    kiln_tensor *before = kiln_add_scalar(kiln_arange(ctx, KILN_F32, 0, 4, 1), 1);
    TU_EXPECT_VALS(before, KILN_F32, 1, 2, 3, 4);

    kiln_tensor *big = kiln_zeros(ctx, KILN_F32, TU_S(1ll << 40, 1ll << 20));
    cr_assert_not_null(big);
    kiln_status st = kiln_error(big);
    if (st == KILN_OK) {
        /* lazily fine; computing it must fail cleanly */
        kiln_tensor *y = kiln_add_scalar(big, 1);
        st = kiln_error(y);
        if (st == KILN_OK) {
            st = kiln_realize(y);
            cr_assert_eq(st, KILN_ERR_OOM, "[%s] realize of 2^62 bytes gave %d: %s", tu_exec_name(),
                         (int)st, kiln_error_message(y));
            cr_assert_eq(kiln_error(y), KILN_ERR_OOM);
            cr_assert(strlen(kiln_error_message(y)) > 0);
        } else {
            cr_assert(st == KILN_ERR_OOM || st == KILN_ERR_SHAPE, "[%s] status %d", tu_exec_name(),
                      (int)st);
        }
    } else {
        cr_assert(st == KILN_ERR_OOM || st == KILN_ERR_SHAPE, "[%s] status %d", tu_exec_name(),
                  (int)st);
    }
    /* what was computed before is still there, and new work still runs */
    TU_EXPECT_VALS(before, KILN_F32, 1, 2, 3, 4);
    TU_EXPECT_VALS(kiln_mul_scalar(before, 2), KILN_F32, 2, 4, 6, 8);
    cr_assert_eq(kiln_sync(ctx), KILN_OK);
}

TU_TEST(errors, bad_context_device) {
    cr_assert_null(kiln_ctx_new((kiln_device)42));
    cr_assert(strlen(kiln_last_ctx_error()) > 0);
    /* a later success clears it */
    kiln_ctx *c = kiln_ctx_new(KILN_REF);
    if (c)
        cr_assert_str_eq(kiln_last_ctx_error(), "");
    kiln_ctx_free(c);
    (void)ctx;
}

TU_TEST(errors, dump_dot) {
    kiln_tensor *x = kiln_exp(kiln_ones(ctx, KILN_F32, TU_S(2)));
    cr_assert_eq(kiln_dump_dot(x, "/nonexistent-dir/sub/graph.dot"), KILN_ERR_IO);
    char path[] = "/tmp/kiln_errors_test_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(kiln_dump_dot(x, path), KILN_OK);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char text[4096] = {0};
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    remove(path);
    cr_assert(n > 0 && strstr(text, "digraph"), "[%s] DOT file has no digraph", tu_exec_name());
    TU_EXPECT_NEAR_VALS(x, KILN_F32, exp(1.0), exp(1.0));
}
