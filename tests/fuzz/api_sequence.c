/* api_sequence.c — fuzzes kiln.h as a whole: each input is decoded into up to
 * MAX_CALLS calls (creation with small shapes and every dtype, unary, binary
 * and scalar ops, reductions, scans, sorts, views, cat and stack, matmul,
 * casts and bitcasts, max pooling with indices, unpooling, adaptive max
 * pooling, interpolation by sizes and by scale factors, assignments,
 * syncs) on two reference-evaluator contexts, with valid and invalid
 * arguments alike: bad dtypes, ndims,
 * axes, NULL handles, handles of the other context, and sizes whose element
 * counts overflow. Every call must return a handle (NULL only when every
 * tensor argument was NULL) that is either in a clean error state, with a
 * message, or consistent: a shape within KILN_MAX_DIMS whose product is its
 * numel. Every sync of a valid tensor must succeed, and the views that undo
 * each other (flip twice, transpose twice, reshape and back) must read the
 * same bytes.
 *
 * Only KILN_REF contexts: a compiling executor would spawn a compiler per
 * input. Results of more than MAX_ELEMS elements are released unsynced, so
 * every value an input computes stays small and each input runs in
 * milliseconds; for the same reason both contexts are lazy (an eager one
 * would compute an expand to 2^40 elements on the spot). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kiln.h"
#include "tests/fuzz/fuzz.h"

enum { SLOTS = 8, MAX_CALLS = 40, MAX_ELEMS = 4096, MAX_MATMUL_WORK = 1 << 18 };

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static uint8_t byte(input *in) {
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static int sbyte(input *in, int lo, int hi) { return lo + byte(in) % (hi - lo + 1); }

/* A size: mostly 0..5, sometimes -1 or a power of two up to 2^62 (whose
 * products overflow), sometimes INT64_MAX / k. */
static int64_t dim(input *in) {
    uint8_t b = byte(in);
    if (b >= 0xf8)
        return INT64_MAX / (b - 0xf6);
    if (b >= 0xe8)
        return (int64_t)1 << (16 + (b - 0xe8) * 3);
    if (b == 0xe7)
        return -1;
    return b % 6;
}

static kiln_dtype dtype(input *in) {
    /* the eight older dtypes keep their bytes (so the corpus keeps its
     * meaning), 15 became i8 when it was added, 16 is no dtype at all */
    uint8_t b = byte(in) % 17;
    if (b == 15)
        return KILN_I8;
    return b < 16 ? (kiln_dtype)(b % 8) : (kiln_dtype)(KILN_NUM_DTYPES + 3);
}

static double scalar(input *in) {
    static const double v[] = {0, 1, -1, 0.5, 2, 3, -2.5, 1e30, -1e-30, 255, 65504, NAN};
    uint8_t b = byte(in) % 14;
    return b < 12 ? v[b] : b == 12 ? INFINITY : -INFINITY;
}

static int axis(input *in) { return sbyte(in, -4, 4); }

typedef struct state {
    kiln_ctx *ctx[2];
    kiln_tensor *t[SLOTS];
} state;

/* FUZZ_TRACE=1 prints each call's slots, kind and result: what reproducing
 * a found input as a plain test needs. */
static bool trace;

static kiln_tensor *pick(state *s, input *in) {
    int k = byte(in) % SLOTS;
    if (trace)
        fprintf(stderr, " t%d", k);
    return s->t[k];
}

static void trace_result(const char *what, const kiln_tensor *r, int slot) {
    if (!trace)
        return;
    fprintf(stderr, " %s -> ", what);
    if (!r) {
        fprintf(stderr, "NULL\n");
        return;
    }
    if (kiln_error(r) != KILN_OK) {
        fprintf(stderr, "error: %s\n", kiln_error_message(r));
        return;
    }
    fprintf(stderr, "%s[", kiln_dtype_name(kiln_dtype_of(r)));
    for (int d = 0; d < kiln_ndim(r); d++)
        fprintf(stderr, "%s%lld", d ? "," : "", (long long)kiln_shape(r)[d]);
    fprintf(stderr, "] in t%d\n", slot);
}

static void fail(const char *what, const kiln_tensor *t) {
    fprintf(stderr, "api_sequence: %s (%s)\n", what, t ? kiln_error_message(t) : "NULL");
    abort();
}

/* The product of the sizes, or -1 when it passes MAX_ELEMS (or a size is
 * negative). */
static int64_t small_numel(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0 || (dims[d] && n > MAX_ELEMS / dims[d]))
            return dims[d] == 0 ? 0 : -1;
        n *= dims[d];
    }
    return n;
}

/* A result must be a handle (NULL only if `none` says every tensor argument
 * was NULL), in a clean error state or with a consistent shape. */
static void check(const kiln_tensor *r, bool none) {
    if (!r) {
        if (!none)
            fail("NULL returned for non-NULL arguments", r);
        return;
    }
    kiln_status st = kiln_error(r);
    if (st > 0 || st < KILN_ERR_DIST)
        fail("a status outside kiln_status", r);
    if (st != KILN_OK) {
        if (!kiln_error_message(r) || !kiln_error_message(r)[0])
            fail("an error without a message", r);
        return;
    }
    int nd = kiln_ndim(r);
    const int64_t *sh = kiln_shape(r);
    if (nd < 0 || nd > KILN_MAX_DIMS || (nd > 0 && !sh))
        fail("an ndim outside [0, KILN_MAX_DIMS]", r);
    uint64_t n = 1;
    bool wrapped = false;
    for (int d = 0; d < nd; d++) {
        if (sh[d] < 0)
            fail("a negative size", r);
        if (sh[d] && n > (uint64_t)INT64_MAX / (uint64_t)sh[d])
            wrapped = true;
        n *= (uint64_t)sh[d];
    }
    if (wrapped && n != 0)
        fail("a shape whose element count overflows", r);
    if (kiln_numel(r) != (int64_t)n)
        fail("numel is not the product of the shape", r);
    if ((unsigned)kiln_dtype_of(r) >= KILN_NUM_DTYPES)
        fail("an unknown dtype", r);
}

/* Keeps r in a slot if it is small enough to compute; otherwise releases it. */
static void store(state *s, input *in, kiln_tensor *r, bool none) {
    check(r, none);
    int k = byte(in) % SLOTS;
    trace_result("", r, k);
    if (r && kiln_error(r) == KILN_OK && kiln_numel(r) > MAX_ELEMS) {
        kiln_release(r);
        return;
    }
    if (r) {
        kiln_release(s->t[k]);
        s->t[k] = r;
    }
}

static size_t nbytes_of(const kiln_tensor *t) {
    return (size_t)kiln_numel(t) * kiln_dtype_size(kiln_dtype_of(t));
}

/* t's bytes, malloc'd; NULL when t is in an error state, which a sync must
 * then report. A valid tensor must sync. */
static void *read_back(kiln_tensor *t) {
    size_t n = nbytes_of(t);
    void *buf = malloc(n ? n : 1);
    if (!buf)
        abort();
    bool valid = kiln_error(t) == KILN_OK;
    kiln_status st = kiln_to_host(t, buf, n);
    if (valid && st != KILN_OK)
        fail("a valid tensor does not sync", t);
    if (st != KILN_OK) {
        if (!kiln_error_message(t)[0])
            fail("a failed sync without a message", t);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Equal bytes, except that any NaN equals any NaN: the reference evaluator
 * computes in f64, which need not keep a NaN's payload; half-precision NaNs
 * are not told apart from other values here, so those dtypes are skipped. */
static bool same_values(kiln_dtype dt, const void *a, const void *b, size_t n) {
    if (dt == KILN_F16 || dt == KILN_BF16)
        return true;
    if (dt == KILN_F32) {
        const float *x = a, *y = b;
        for (size_t i = 0; i < n / sizeof *x; i++)
            if (memcmp(&x[i], &y[i], sizeof *x) && !(isnan(x[i]) && isnan(y[i])))
                return false;
        return true;
    }
    if (dt == KILN_F64) {
        const double *x = a, *y = b;
        for (size_t i = 0; i < n / sizeof *x; i++)
            if (memcmp(&x[i], &y[i], sizeof *x) && !(isnan(x[i]) && isnan(y[i])))
                return false;
        return true;
    }
    return memcmp(a, b, n) == 0;
}

/* Syncs t and checks that views which undo each other read the same values. */
static void sync_check(kiln_tensor *t, input *in) {
    if (!t)
        return;
    size_t n = nbytes_of(t);
    char wrong[8];
    if (kiln_error(t) == KILN_OK && kiln_to_host(t, wrong, n + 1) != KILN_ERR_ARG)
        fail("kiln_to_host took the wrong byte count", t);
    void *want = read_back(t);
    if (!want)
        return;
    int nd = kiln_ndim(t);
    kiln_tensor *same;
    switch (byte(in) % 3) {
    case 0:
        same = kiln_flip(kiln_flip(t, 0, NULL), 0, NULL);
        break;
    case 1:
        same = nd >= 2 ? kiln_transpose(kiln_transpose(t, 0, -1), -1, 0)
                     : kiln_flip(kiln_flip(t, 0, NULL), 0, NULL);
        break;
    default: {
        const int64_t flat[] = {kiln_numel(t)};
        same = kiln_reshape(kiln_reshape(t, 1, flat), nd, kiln_shape(t));
    }
    }
    void *got = read_back(same);
    if (!got || !same_values(kiln_dtype_of(t), want, got, n)) {
        fprintf(stderr, "api_sequence: a %s tensor of %d dims, %lld elements:\n",
                kiln_dtype_name(kiln_dtype_of(t)), nd, (long long)kiln_numel(t));
        fail("views that undo each other change the data", t);
    }
    free(got);
    free(want);
}

static kiln_tensor *create(state *s, input *in) {
    kiln_ctx *ctx = s->ctx[byte(in) & 1];
    kiln_dtype dt = dtype(in);
    int ndim = sbyte(in, 0, 6);
    ndim = ndim == 5 ? -1 : ndim == 6 ? KILN_MAX_DIMS + 1 : ndim;
    int64_t dims[KILN_MAX_DIMS + 1];
    for (int d = 0; d < KILN_MAX_DIMS + 1; d++)
        dims[d] = d < ndim ? dim(in) : 1;
    switch (byte(in) % 8) {
    case 0:
    case 1: {
        /* NULL data unless the shape is small: then the tensor must be empty
         * or the call an error. */
        int64_t n = ndim >= 0 && ndim <= KILN_MAX_DIMS ? small_numel(ndim, dims) : -1;
        size_t size = kiln_dtype_size(dt);
        unsigned char *data = n > 0 && size ? malloc((size_t)n * size) : NULL;
        uint32_t x = 2463534242u ^ byte(in);
        for (size_t i = 0; data && i < (size_t)n * size; i++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            data[i] = (unsigned char)x;
        }
        kiln_tensor *r = kiln_from_data(ctx, dt, ndim, dims, data);
        free(data);
        return r;
    }
    case 2:
        return kiln_full(ctx, dt, ndim, dims, scalar(in));
    case 3:
        return kiln_arange(ctx, dt, sbyte(in, -8, 8), sbyte(in, -8, 40), scalar(in));
    case 4:
        return kiln_eye(ctx, dt, dim(in), dim(in));
    case 5:
        return kiln_linspace(ctx, dt, scalar(in), scalar(in), dim(in));
    case 6:
        return kiln_rand(ctx, dt, ndim, dims, byte(in));
    default:
        return kiln_randn(ctx, dt, ndim, dims, byte(in));
    }
}

typedef kiln_tensor *(*unary_fn)(kiln_tensor *);
static const unary_fn unary[] = {
    kiln_neg,   kiln_abs,   kiln_exp,   kiln_log,   kiln_sqrt,  kiln_rsqrt,       kiln_sin,
    kiln_cos,   kiln_tanh,  kiln_sigmoid, kiln_relu, kiln_gelu, kiln_silu,        kiln_recip,
    kiln_floor, kiln_ceil,  kiln_trunc, kiln_round, kiln_sign,  kiln_tan,         kiln_asin,
    kiln_acos,  kiln_atan,  kiln_sinh,  kiln_cosh,  kiln_asinh, kiln_acosh,       kiln_atanh,
    kiln_erf,   kiln_erfc,  kiln_expm1, kiln_log1p, kiln_bitwise_not, kiln_hardswish,
    kiln_gelu_tanh, kiln_detach,
};

typedef kiln_tensor *(*binary_fn)(kiln_tensor *, kiln_tensor *);
static const binary_fn binary[] = {
    kiln_add,     kiln_sub,      kiln_mul,        kiln_div,          kiln_pow,
    kiln_maximum, kiln_minimum,  kiln_lt,         kiln_le,           kiln_gt,
    kiln_ge,      kiln_eq,       kiln_ne,         kiln_atan2,        kiln_copysign,
    kiln_logaddexp, kiln_fmod,   kiln_mod,        kiln_floor_divide, kiln_trunc_divide,
    kiln_bitwise_and, kiln_bitwise_or, kiln_bitwise_xor, kiln_shift_left, kiln_shift_right,
};

typedef kiln_tensor *(*scalar_fn)(kiln_tensor *, double);
static const scalar_fn with_scalar[] = {
    kiln_add_scalar, kiln_sub_scalar, kiln_mul_scalar, kiln_div_scalar,     kiln_pow_scalar,
    kiln_maximum_scalar, kiln_minimum_scalar, kiln_lt_scalar, kiln_le_scalar, kiln_gt_scalar,
    kiln_ge_scalar,  kiln_eq_scalar,  kiln_ne_scalar,
};

typedef kiln_tensor *(*reduce_fn)(kiln_tensor *, int, const int *, bool);
static const reduce_fn reduce[] = {kiln_sum, kiln_mean, kiln_max, kiln_min,
                                   kiln_argmax, kiln_argmin, kiln_prod};

typedef kiln_tensor *(*scan_fn)(kiln_tensor *, int);
static const scan_fn scan[] = {kiln_cumsum, kiln_cumprod, kiln_cummax, kiln_cummin,
                               kiln_logcumsumexp, kiln_softmax, kiln_log_softmax};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* An axis list: NULL (all axes) or up to 3 axes, some out of range. */
static const int *axes(input *in, int *naxes, int buf[KILN_MAX_DIMS]) {
    *naxes = sbyte(in, -1, 3);
    for (int i = 0; i < KILN_MAX_DIMS; i++)
        buf[i] = axis(in);
    if (*naxes < 0) {
        *naxes = 0;
        return NULL;
    }
    return buf;
}

/* matmul's cost on the reference evaluator, if its operands are small. */
static bool matmul_cheap(const kiln_tensor *a, const kiln_tensor *b) {
    if (!a || !b || kiln_error(a) || kiln_error(b))
        return true;
    int64_t k = kiln_ndim(b) ? kiln_shape(b)[kiln_ndim(b) - 1] : 1;
    return kiln_numel(a) * (k ? k : 1) <= MAX_MATMUL_WORK &&
           kiln_numel(b) * kiln_numel(a) <= (int64_t)MAX_MATMUL_WORK * 16;
}

/* The pooling and resizing ops build host tables as large as their input's
 * planes (an expand's 2^40 elements would be a real allocation): only
 * small inputs. */
static bool host_tables_small(const kiln_tensor *a) {
    return !a || kiln_error(a) || kiln_numel(a) <= MAX_ELEMS;
}

/* Output sizes for the pooling and resizing ops: small (their host-built
 * tables and matrices grow with them), sometimes 0 or -1. */
static int64_t out_size(input *in) { return sbyte(in, -1, 7); }

/* The max unpools (with b as the indices), the adaptive max pools with
 * indices, and the max pools whose indices feed an unpool. */
static kiln_tensor *pool_op(kiln_tensor *a, kiln_tensor *b, input *in) {
    int64_t o[3] = {out_size(in), out_size(in), out_size(in)};
    kiln_tensor *idx = NULL, *r;
    switch (byte(in) % 6) {
    case 0:
        return kiln_max_unpool1d(a, b, o[0]);
    case 1:
        return kiln_max_unpool3d(a, b, byte(in) % 8 ? o : NULL);
    case 2:
        r = kiln_adaptive_max_pool1d_ex(a, o[0], byte(in) & 1 ? &idx : NULL);
        break;
    case 3:
        r = kiln_adaptive_max_pool2d_ex(a, o[0], o[1], byte(in) & 1 ? &idx : NULL);
        break;
    default: {
        /* pool with indices, then unpool to the input's size */
        bool three = byte(in) & 1;
        const int64_t k[3] = {sbyte(in, 1, 2), sbyte(in, 1, 2), sbyte(in, 1, 2)};
        const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
        kiln_tensor *p = three ? kiln_max_pool3d(a, k, k, zero, one, false, &idx)
                               : kiln_max_pool1d_ex(a, k[0], k[0], 0, 1, false, &idx);
        int nd = kiln_ndim(a);
        const int64_t *sh = kiln_shape(a);
        r = p && idx && sh && nd >= 3
                ? (three ? kiln_max_unpool3d(p, idx, sh + nd - 3)
                         : kiln_max_unpool1d(p, idx, sh[nd - 1]))
                : NULL;
        if (!r)
            r = p;
        else
            kiln_release(p);
    }
    }
    /* On failure *indices stays NULL; on success it is a tensor of r's shape. */
    check(idx, true);
    kiln_release(idx);
    return r;
}

static kiln_tensor *interp_op(kiln_tensor *a, input *in) {
    static const kiln_interp_mode modes[] = {KILN_INTERP_NEAREST, KILN_INTERP_LINEAR,
                                             KILN_INTERP_BICUBIC, (kiln_interp_mode)7};
    int nsp = sbyte(in, 0, 4);
    kiln_interp_mode mode = modes[byte(in) % 4];
    bool align = byte(in) & 1;
    if (byte(in) & 1) {
        const int64_t sizes[4] = {out_size(in), out_size(in), out_size(in), out_size(in)};
        return kiln_interpolate(a, nsp, byte(in) % 8 ? sizes : NULL, mode, align);
    }
    static const double factors[] = {0.5, 1, 1.5, 2, 2.5, 0.3, 0, -1, NAN, INFINITY, 1e300};
    double sf[4];
    for (int d = 0; d < 4; d++)
        sf[d] = factors[byte(in) % 11];
    return kiln_interpolate_scale(a, nsp, byte(in) % 8 ? sf : NULL, mode, align, byte(in) & 1);
}

static void step(state *s, input *in) {
    kiln_tensor *a = pick(s, in), *b = pick(s, in), *c = pick(s, in), *r = NULL;
    int64_t dims[KILN_MAX_DIMS * 2];
    int ax[KILN_MAX_DIMS], n;
    bool none = !a;
    int kind = byte(in) % 24;
    if (trace)
        fprintf(stderr, " call %d", kind);
    switch (kind) {
    case 0:
    case 1:
        r = create(s, in), none = false;
        break;
    case 2:
        r = unary[byte(in) % COUNT(unary)](a);
        break;
    case 3:
        r = binary[byte(in) % COUNT(binary)](a, b), none = !a && !b;
        break;
    case 4:
        r = with_scalar[byte(in) % COUNT(with_scalar)](a, scalar(in));
        break;
    case 5: {
        int which = byte(in) % (COUNT(reduce) + 2);
        const int *list = axes(in, &n, ax);
        bool keep = byte(in) & 1;
        if (which < COUNT(reduce))
            r = reduce[which](a, n, list, keep);
        else
            r = (which == COUNT(reduce) ? kiln_var : kiln_std)(a, n, list, byte(in) % 3, keep);
        break;
    }
    case 6:
        r = scan[byte(in) % COUNT(scan)](a, axis(in));
        break;
    case 7:
        n = sbyte(in, 0, 5);
        for (int d = 0; d < KILN_MAX_DIMS; d++)
            dims[d] = byte(in) % 4 == 0 ? dim(in) : sbyte(in, -1, 8);
        r = kiln_reshape(a, n, dims);
        break;
    case 8:
        for (int d = 0; d < KILN_MAX_DIMS; d++)
            ax[d] = byte(in) % 8 == 0 ? axis(in) : (d + sbyte(in, 0, 3)) % (kiln_ndim(a) ? kiln_ndim(a) : 1);
        r = kiln_permute(a, ax);
        break;
    case 9: {
        static const int64_t ends[] = {KILN_END, KILN_BEGIN_REV, INT64_MAX - 1, INT64_MIN + 1};
        uint8_t e = byte(in);
        int64_t start = sbyte(in, -6, 6), stop = e < 4 ? ends[e] : sbyte(in, -6, 6);
        int64_t st = byte(in) % 16 == 0 ? (byte(in) & 1 ? INT64_MIN : INT64_MAX) : sbyte(in, -3, 3);
        r = kiln_slice(a, axis(in), start, stop, st);
        break;
    }
    case 10:
        for (int d = 0; d < KILN_MAX_DIMS * 2; d++)
            dims[d] = byte(in) % 8 == 0 ? dim(in) : sbyte(in, 0, 2);
        r = kiln_pad(a, dims, scalar(in));
        break;
    case 11: {
        const int *list = axes(in, &n, ax);
        r = kiln_flip(a, n, list);
        break;
    }
    case 12:
        n = sbyte(in, 0, 6);
        for (int d = 0; d < KILN_MAX_DIMS; d++)
            dims[d] = byte(in) % 4 == 0 ? dim(in) : sbyte(in, -1, 4);
        r = kiln_expand(a, n, dims);
        break;
    case 13: {
        kiln_tensor *ts[] = {a, b, c};
        n = sbyte(in, 0, 3);
        r = (byte(in) & 1 ? kiln_cat : kiln_stack)(n, ts, axis(in));
        none = n == 0 || (!a && (n < 2 || !b) && (n < 3 || !c));
        break;
    }
    case 14:
        if (!matmul_cheap(a, b))
            return;
        r = kiln_matmul(a, b), none = !a && !b;
        break;
    case 15: {
        kiln_dtype dt = dtype(in);
        r = byte(in) % 4 ? kiln_cast(a, dt) : kiln_bitcast(a, dt);
        break;
    }
    case 16:
        if (trace)
            fprintf(stderr, " sync\n");
        sync_check(a, in);
        return;
    case 17:
        switch (byte(in) % 4) {
        case 0:
            r = kiln_transpose(a, axis(in), axis(in));
            break;
        case 1: {
            const int *list = axes(in, &n, ax);
            r = kiln_squeeze(a, n, list);
            break;
        }
        case 2:
            r = kiln_unsqueeze(a, axis(in));
            break;
        default:
            r = kiln_diagonal(a, sbyte(in, -3, 3), axis(in), axis(in));
        }
        break;
    case 18:
        r = kiln_where(a, b, c), none = !a && !b && !c;
        break;
    case 19:
        switch (byte(in) % 3) {
        case 0:
            r = kiln_sort(a, axis(in), byte(in) & 1);
            break;
        case 1:
            r = kiln_argsort(a, axis(in), byte(in) & 1);
            break;
        default: {
            kiln_tensor *idx = NULL;
            r = kiln_topk(a, sbyte(in, -1, 5), axis(in), byte(in) & 1, byte(in) & 1 ? &idx : NULL);
            /* On failure *indices may stay NULL. */
            check(idx, true);
            kiln_release(idx);
        }
        }
        break;
    case 20:
        switch (byte(in) % 7) {
        case 0:
            n = sbyte(in, 0, 4);
            for (int d = 0; d < KILN_MAX_DIMS; d++)
                dims[d] = byte(in) % 8 == 0 ? dim(in) : sbyte(in, 0, 3);
            r = kiln_repeat(a, n, dims);
            break;
        case 1:
            r = kiln_repeat_interleave(a, byte(in) % 8 == 0 ? dim(in) : sbyte(in, -1, 3), axis(in));
            break;
        case 2:
            r = kiln_roll(a, byte(in) % 8 == 0 ? dim(in) : sbyte(in, -5, 5), axis(in));
            break;
        case 3:
            r = (byte(in) & 1 ? kiln_tril : kiln_triu)(a, sbyte(in, -3, 3));
            break;
        case 4:
            r = kiln_diag(a, sbyte(in, -3, 3));
            break;
        case 5:
            if (!host_tables_small(a))
                return;
            r = pool_op(a, b, in);
            break;
        default:
            if (!host_tables_small(a))
                return;
            r = interp_op(a, in);
        }
        break;
    case 21: {
        kiln_status st = kiln_assign(a, b);
        if (st > 0 || st < KILN_ERR_DIST)
            fail("kiln_assign returned no kiln_status", a);
        return;
    }
    case 22:
        r = kiln_isclose(a, b, scalar(in), scalar(in), byte(in) & 1), none = !a && !b;
        break;
    default: {
        int k = byte(in) % SLOTS;
        kiln_release(s->t[k]);
        s->t[k] = NULL;
        return;
    }
    }
    store(s, in, r, none);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    trace = getenv("FUZZ_TRACE") && getenv("FUZZ_TRACE")[0] == '1';
    /* The reference evaluator compiles nothing, but a context may still look
     * at its cache directory: a private one keeps the user's out of it. */
    setenv("KILN_CACHE_DIR", fuzz_tmpdir("api"), 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input in = {data, size};
    state s = {{kiln_ctx_new(KILN_REF), kiln_ctx_new(KILN_REF)}, {NULL}};
    if (!s.ctx[0] || !s.ctx[1]) {
        fprintf(stderr, "no reference context: %s\n", kiln_last_ctx_error());
        abort();
    }
    for (int i = 0; i < MAX_CALLS && in.n; i++)
        step(&s, &in);
    /* Whatever the calls left pending must sync, or fail cleanly. */
    for (int k = 0; k < SLOTS; k++) {
        if (trace && s.t[k])
            fprintf(stderr, " sync t%d at the end\n", k);
        sync_check(s.t[k], &in);
    }
    kiln_ctx_free(s.ctx[0]);
    kiln_ctx_free(s.ctx[1]);
    return 0;
}
