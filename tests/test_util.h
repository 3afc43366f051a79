/* test_util.h — helpers shared by kiln's tests.
 *
 * - TU_TEST(suite, name) defines a Criterion test whose body runs once per
 *   executor (device and mode) that kiln_ctx_new accepts, so that a new
 *   executor is tested by every test as soon as it exists.
 * - A deterministic PRNG seeded from the test's name gives each test its own
 *   inputs, the same on every executor and every run.
 * - Values travel as double (or int64_t for exact integers) arrays; packing to
 *   and from a dtype, f16 and bf16 bit conversion included, is done here and
 *   not by kiln, so the tests do not trust the code they check.
 * - Floats compare by NMSE (sum (a-b)^2 / sum a^2) against per-dtype
 *   thresholds, after rounding the expected values to the result dtype;
 *   NaN and infinities must match exactly. Integers and bool compare exactly. */
#ifndef KILN_TESTS_TEST_UTIL_H
#define KILN_TESTS_TEST_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/kiln.h"

/* ---- executors ------------------------------------------------------------ */

typedef struct tu_exec {
    kiln_device dev;
    kiln_mode mode;
    const char *name;
} tu_exec;

/* Every executor a test body runs on; those whose kiln_ctx_new returns NULL
 * are skipped. */
static inline const tu_exec *tu_exec_list(int *n) {
    static const tu_exec list[] = {
        {KILN_REF, KILN_LAZY, "ref/lazy"},   {KILN_REF, KILN_EAGER, "ref/eager"},
        {KILN_CPU, KILN_LAZY, "cpu/lazy"},   {KILN_CPU, KILN_EAGER, "cpu/eager"},
        {KILN_CUDA, KILN_LAZY, "cuda/lazy"}, {KILN_CUDA, KILN_EAGER, "cuda/eager"},
    };
    *n = (int)(sizeof list / sizeof list[0]);
    return list;
}

static inline const tu_exec **tu_cur_exec_slot(void) {
    static const tu_exec *cur;
    return &cur;
}

/* The executor the running body was given ("-" outside a TU_TEST body). */
static inline const char *tu_exec_name(void) {
    const tu_exec *e = *tu_cur_exec_slot();
    return e ? e->name : "-";
}

static inline const tu_exec *tu_cur_exec(void) { return *tu_cur_exec_slot(); }

/* A fresh context on the running body's device and mode (for tests that need
 * a second one); NULL outside a body or when unavailable. */
static inline kiln_ctx *tu_ctx_like_current(void) {
    const tu_exec *e = tu_cur_exec();
    if (!e)
        return NULL;
    kiln_ctx *c = kiln_ctx_new(e->dev);
    if (c)
        kiln_ctx_set_mode(c, e->mode);
    return c;
}

/* KILN_TEST_DEVICES (a comma-separated list of ref, cpu and cuda; all
 * when unset) limits the executors every body runs on: a GPU machine's
 * check runs the suites on ref and cuda alone. */
static inline bool tu_exec_wanted(const tu_exec *e) {
    const char *want = getenv("KILN_TEST_DEVICES");
    if (!want || !*want)
        return true;
    const char *dev = e->dev == KILN_REF ? "ref" : e->dev == KILN_CPU ? "cpu" : "cuda";
    size_t n = strlen(dev);
    for (const char *p = want; (p = strstr(p, dev)); p += n)
        if ((p == want || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return true;
    return false;
}

/* A test body's executors that need a GPU, skipped where there is none,
 * are reported by name on stderr (the test's log), one line per test, which
 * the test command counts and lists. */
static inline void tu_report_gpu_skips(const char *test, const char *names, const char *why) {
    if (names[0])
        fprintf(stderr, "kiln-test: skipped without a GPU: %s on %s (%.160s)\n", test, names,
                why);
}

static inline void tu_run_all(void (*body)(kiln_ctx *), const char *test) {
    int n;
    const tu_exec *ex = tu_exec_list(&n);
    int ran = 0;
    char skipped[64] = "", why[256] = "";
    for (int i = 0; i < n; i++) {
        if (!tu_exec_wanted(&ex[i]))
            continue;
        kiln_ctx *ctx = kiln_ctx_new(ex[i].dev);
        if (!ctx && ex[i].dev == KILN_CUDA) {
            size_t at = strlen(skipped);
            snprintf(skipped + at, sizeof skipped - at, "%s%s", at ? ", " : "", ex[i].name);
            snprintf(why, sizeof why, "%s", kiln_last_ctx_error());
        }
        if (!ctx)
            continue;
        kiln_ctx_set_mode(ctx, ex[i].mode);
        cr_assert(kiln_ctx_mode(ctx) == ex[i].mode,
                  "[%s] %s: kiln_ctx_mode does not report the mode set", ex[i].name, test);
        *tu_cur_exec_slot() = &ex[i];
        body(ctx);
        kiln_ctx_free(ctx);
        ran++;
    }
    *tu_cur_exec_slot() = NULL;
    tu_report_gpu_skips(test, skipped, why);
    cr_assert(ran > 0, "%s: no executor is available", test);
}

/* Defines a test whose body `{ ... }` follows and gets `kiln_ctx *ctx`. */
#define TU_TEST(suite, name)                                                                       \
    static void tu_body_##suite##_##name(kiln_ctx *ctx);                                           \
    Test(suite, name) { tu_run_all(tu_body_##suite##_##name, #suite "/" #name); }                  \
    static void tu_body_##suite##_##name(kiln_ctx *ctx)

/* ---- shapes and literals -------------------------------------------------- */

/* Expands to `ndim, dims` for the creation and view functions:
 * kiln_zeros(ctx, KILN_F32, TU_S(2, 3)). */
#define TU_S(...)                                                                                  \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) { __VA_ARGS__ }
/* Expands to `naxes, axes` for the reductions and flip/squeeze. */
#define TU_AXES(...)                                                                               \
    (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (const int[]) { __VA_ARGS__ }
#define TU_DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define TU_NVALS(...) ((int64_t)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)))

static inline int64_t tu_numel(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    return n;
}

/* ---- deterministic PRNG (splitmix64) -------------------------------------- */

typedef struct tu_rng {
    uint64_t s;
} tu_rng;

static inline uint64_t tu_next(tu_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline tu_rng tu_rng_from(const char *name, uint64_t salt) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    tu_rng r = {h ^ (salt * 0x9E3779B97F4A7C15ull)};
    tu_next(&r);
    return r;
}

/* A generator seeded from the enclosing function's name and the line. */
#define TU_RNG(r) tu_rng r = tu_rng_from(__func__, (uint64_t)__LINE__)

/* Uniform in [0, 1). */
static inline double tu_u01(tu_rng *r) { return (double)(tu_next(r) >> 11) * 0x1.0p-53; }
static inline double tu_unif(tu_rng *r, double lo, double hi) { return lo + (hi - lo) * tu_u01(r); }
/* Uniform integer in [lo, hi]. */
static inline int64_t tu_int(tu_rng *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1;
    if (span == 0)
        return (int64_t)tu_next(r);
    return (int64_t)((uint64_t)lo + tu_next(r) % span);
}

/* ---- dtypes --------------------------------------------------------------- */

static inline const kiln_dtype *tu_all_dtypes(int *n) {
    static const kiln_dtype all[KILN_NUM_DTYPES] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16,
                                                    KILN_I32, KILN_I64, KILN_U8,  KILN_BOOL,
                                                    KILN_I8};
    *n = KILN_NUM_DTYPES;
    return all;
}

static inline const kiln_dtype *tu_float_dtypes(int *n) {
    static const kiln_dtype fl[4] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    *n = 4;
    return fl;
}

static inline const char *tu_dt_name(kiln_dtype dt) {
    switch (dt) {
    case KILN_F32:
        return "f32";
    case KILN_F64:
        return "f64";
    case KILN_F16:
        return "f16";
    case KILN_BF16:
        return "bf16";
    case KILN_I32:
        return "i32";
    case KILN_I64:
        return "i64";
    case KILN_U8:
        return "u8";
    case KILN_BOOL:
        return "bool";
    case KILN_I8:
        return "i8";
    }
    return "?";
}

static inline size_t tu_dt_size(kiln_dtype dt) {
    switch (dt) {
    case KILN_F64:
    case KILN_I64:
        return 8;
    case KILN_F32:
    case KILN_I32:
        return 4;
    case KILN_F16:
    case KILN_BF16:
        return 2;
    case KILN_U8:
    case KILN_BOOL:
    case KILN_I8:
        return 1;
    }
    return 0;
}

static inline bool tu_is_float(kiln_dtype dt) {
    return dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
}
static inline bool tu_is_half(kiln_dtype dt) { return dt == KILN_F16 || dt == KILN_BF16; }

/* The promotion order of the header: bool < u8, i8 < i32 < i64 < f16, bf16 <
 * f32 < f64, with f16 and bf16 together giving f32 and u8 with i8 i32. */
static inline int tu_rank(kiln_dtype dt) {
    switch (dt) {
    case KILN_BOOL:
        return 0;
    case KILN_U8:
    case KILN_I8:
        return 1;
    case KILN_I32:
        return 2;
    case KILN_I64:
        return 3;
    case KILN_F16:
    case KILN_BF16:
        return 4;
    case KILN_F32:
        return 5;
    case KILN_F64:
        return 6;
    }
    return -1;
}

static inline kiln_dtype tu_promote(kiln_dtype a, kiln_dtype b) {
    if (a == b)
        return a;
    if (tu_is_half(a) && tu_is_half(b))
        return KILN_F32;
    if (tu_rank(a) == 1 && tu_rank(b) == 1)
        return KILN_I32; /* u8 with i8 */
    return tu_rank(a) >= tu_rank(b) ? a : b;
}

/* ---- half types, converted here independently of kiln --------------------- */

/* Rounds x to nearest even in a binary format with `p` fraction bits and
 * exponents in [emin, emax] (subnormals included); overflow gives inf. */
static inline double tu_round_fmt(double x, int p, int emin, int emax) {
    if (isnan(x) || isinf(x) || x == 0)
        return x;
    double a = fabs(x);
    int ex;
    frexp(a, &ex);
    int e = ex - 1;
    if (e < emin)
        e = emin;
    double q = ldexp(1.0, e - p);
    double r = nearbyint(a / q) * q;
    double maxv = ldexp(2.0 - ldexp(1.0, -p), emax);
    if (r > maxv)
        r = INFINITY;
    return copysign(r, x);
}

static inline uint16_t tu_encode_fmt(double x, int p, int emin, int emax) {
    int ebits = 15 - p;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    uint16_t allones = (uint16_t)(((1u << ebits) - 1) << p);
    if (isnan(x))
        return (uint16_t)(allones | (1u << (p - 1)));
    double r = tu_round_fmt(x, p, emin, emax);
    if (isinf(r))
        return sign | allones;
    double a = fabs(r);
    if (a == 0)
        return sign;
    int ex;
    frexp(a, &ex);
    int e = ex - 1;
    if (e < emin)
        return sign | (uint16_t)(a / ldexp(1.0, emin - p));
    uint16_t m = (uint16_t)((a / ldexp(1.0, e) - 1.0) * ldexp(1.0, p));
    return sign | (uint16_t)((uint16_t)(e + emax) << p) | m;
}

static inline double tu_decode_fmt(uint16_t h, int p, int emin, int emax) {
    int ebits = 15 - p;
    int e = (h >> p) & ((1 << ebits) - 1);
    int m = h & ((1 << p) - 1);
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == (1 << ebits) - 1)
        return m ? NAN : s * INFINITY;
    if (e == 0)
        return s * ldexp((double)m, emin - p);
    return s * ldexp((double)(m + (1 << p)), e - emax - p);
}

static inline uint16_t tu_f16_bits(double x) { return tu_encode_fmt(x, 10, -14, 15); }
static inline double tu_f16_value(uint16_t h) { return tu_decode_fmt(h, 10, -14, 15); }
static inline uint16_t tu_bf16_bits(double x) { return tu_encode_fmt(x, 7, -126, 127); }
static inline double tu_bf16_value(uint16_t h) { return tu_decode_fmt(h, 7, -126, 127); }

/* ---- scalar semantics used by expected values ----------------------------- */

/* Wraps an integer to dt's width (bool: != 0). */
static inline int64_t tu_wrap(kiln_dtype dt, int64_t v) {
    switch (dt) {
    case KILN_I32:
        return (int64_t)(int32_t)(uint32_t)(uint64_t)v;
    case KILN_U8:
        return (int64_t)((uint64_t)v & 0xFF);
    case KILN_I8:
        return (int64_t)(int8_t)(uint8_t)(uint64_t)v;
    case KILN_BOOL:
        return v != 0;
    default:
        return v;
    }
}

static inline double tu_int_min(kiln_dtype dt) {
    return dt == KILN_I32   ? -2147483648.0
           : dt == KILN_I64 ? -9223372036854775808.0
           : dt == KILN_I8  ? -128.0
                            : 0.0;
}
static inline double tu_int_max_plus1(kiln_dtype dt) {
    return dt == KILN_I32   ? 2147483648.0
           : dt == KILN_I64 ? 9223372036854775808.0
           : dt == KILN_I8  ? 128.0
                            : 256.0;
}

/* A float value converted to an integer dtype as kiln_cast does: truncation
 * toward zero, saturation, NaN gives 0; bool is != 0. */
static inline int64_t tu_float_to_int(double v, kiln_dtype dt) {
    if (dt == KILN_BOOL)
        return v != 0;
    if (isnan(v))
        return 0;
    double t = trunc(v);
    if (t < tu_int_min(dt)) {
        return dt == KILN_I32 ? INT32_MIN : dt == KILN_I64 ? INT64_MIN : dt == KILN_I8 ? -128 : 0;
    }
    if (t >= tu_int_max_plus1(dt)) {
        return dt == KILN_I32 ? INT32_MAX : dt == KILN_I64 ? INT64_MAX : dt == KILN_I8 ? 127 : 255;
    }
    return (int64_t)t;
}

/* A double rounded to what float dtype dt holds. */
static inline double tu_round_float(kiln_dtype dt, double v) {
    switch (dt) {
    case KILN_F32:
        return (double)(float)v;
    case KILN_F16:
        return tu_round_fmt(v, 10, -14, 15);
    case KILN_BF16:
        return tu_round_fmt(v, 7, -126, 127);
    default:
        return v;
    }
}

/* A double converted to dt as the cast rules say (floats round, integers
 * truncate and saturate). */
static inline double tu_round(kiln_dtype dt, double v) {
    if (tu_is_float(dt))
        return tu_round_float(dt, v);
    return (double)tu_float_to_int(v, dt);
}

/* ---- packing -------------------------------------------------------------- */

static inline void tu_pack(kiln_dtype dt, const double *v, int64_t n, void *out) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case KILN_F32:
            ((float *)out)[i] = (float)v[i];
            break;
        case KILN_F64:
            ((double *)out)[i] = v[i];
            break;
        case KILN_F16:
            ((uint16_t *)out)[i] = tu_f16_bits(v[i]);
            break;
        case KILN_BF16:
            ((uint16_t *)out)[i] = tu_bf16_bits(v[i]);
            break;
        case KILN_I32:
            ((int32_t *)out)[i] = (int32_t)tu_float_to_int(v[i], dt);
            break;
        case KILN_I64:
            ((int64_t *)out)[i] = tu_float_to_int(v[i], dt);
            break;
        case KILN_U8:
            ((uint8_t *)out)[i] = (uint8_t)tu_float_to_int(v[i], dt);
            break;
        case KILN_I8:
            ((int8_t *)out)[i] = (int8_t)tu_float_to_int(v[i], dt);
            break;
        case KILN_BOOL:
            ((uint8_t *)out)[i] = v[i] != 0;
            break;
        }
    }
}

static inline void tu_pack_i64(kiln_dtype dt, const int64_t *v, int64_t n, void *out) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case KILN_I32:
            ((int32_t *)out)[i] = (int32_t)tu_wrap(dt, v[i]);
            break;
        case KILN_I64:
            ((int64_t *)out)[i] = v[i];
            break;
        case KILN_U8:
            ((uint8_t *)out)[i] = (uint8_t)tu_wrap(dt, v[i]);
            break;
        case KILN_I8:
            ((int8_t *)out)[i] = (int8_t)tu_wrap(dt, v[i]);
            break;
        case KILN_BOOL:
            ((uint8_t *)out)[i] = v[i] != 0;
            break;
        default: {
            double d = (double)v[i];
            tu_pack(dt, &d, 1, (char *)out + (size_t)i * tu_dt_size(dt));
        }
        }
    }
}

static inline void tu_unpack(kiln_dtype dt, const void *in, int64_t n, double *out) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case KILN_F32:
            out[i] = ((const float *)in)[i];
            break;
        case KILN_F64:
            out[i] = ((const double *)in)[i];
            break;
        case KILN_F16:
            out[i] = tu_f16_value(((const uint16_t *)in)[i]);
            break;
        case KILN_BF16:
            out[i] = tu_bf16_value(((const uint16_t *)in)[i]);
            break;
        case KILN_I32:
            out[i] = ((const int32_t *)in)[i];
            break;
        case KILN_I64:
            out[i] = (double)((const int64_t *)in)[i];
            break;
        case KILN_U8:
            out[i] = ((const uint8_t *)in)[i];
            break;
        case KILN_BOOL:
            out[i] = ((const uint8_t *)in)[i];
            break;
        case KILN_I8:
            out[i] = ((const int8_t *)in)[i];
            break;
        }
    }
}

static inline void tu_unpack_i64(kiln_dtype dt, const void *in, int64_t n, int64_t *out) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case KILN_I32:
            out[i] = ((const int32_t *)in)[i];
            break;
        case KILN_I64:
            out[i] = ((const int64_t *)in)[i];
            break;
        case KILN_U8:
        case KILN_BOOL:
            out[i] = ((const uint8_t *)in)[i];
            break;
        case KILN_I8:
            out[i] = ((const int8_t *)in)[i];
            break;
        default: {
            double d = 0;
            tu_unpack(dt, (const char *)in + (size_t)i * tu_dt_size(dt), 1, &d);
            out[i] = (int64_t)d;
        }
        }
    }
}

/* ---- making tensors ------------------------------------------------------- */

/* A tensor of dt holding v (each value converted as by tu_pack). */
static inline kiln_tensor *tu_tensor(kiln_ctx *ctx, kiln_dtype dt, int ndim, const int64_t *dims,
                                     const double *v) {
    int64_t n = tu_numel(ndim, dims);
    void *buf = malloc((size_t)(n > 0 ? n : 1) * tu_dt_size(dt));
    tu_pack(dt, v, n, buf);
    kiln_tensor *t = kiln_from_data(ctx, dt, ndim, dims, buf);
    free(buf);
    return t;
}

static inline kiln_tensor *tu_tensor_i64(kiln_ctx *ctx, kiln_dtype dt, int ndim,
                                         const int64_t *dims, const int64_t *v) {
    int64_t n = tu_numel(ndim, dims);
    void *buf = malloc((size_t)(n > 0 ? n : 1) * tu_dt_size(dt));
    tu_pack_i64(dt, v, n, buf);
    kiln_tensor *t = kiln_from_data(ctx, dt, ndim, dims, buf);
    free(buf);
    return t;
}

/* Fills v with n random values that dt holds exactly: floats uniform in
 * [lo, hi] then rounded, integers uniform in [ceil(lo), floor(hi)] clamped to
 * dt's range, bool 0/1 with both present when n >= 2. */
static inline void tu_fill(tu_rng *r, kiln_dtype dt, double *v, int64_t n, double lo, double hi) {
    if (dt == KILN_BOOL) {
        for (int64_t i = 0; i < n; i++)
            v[i] = (double)(tu_next(r) & 1);
        if (n >= 2) {
            int64_t a = tu_int(r, 0, n - 1);
            int64_t b = (a + 1 + tu_int(r, 0, n - 2)) % n;
            v[a] = 0;
            v[b] = 1;
        }
        return;
    }
    if (tu_is_float(dt)) {
        for (int64_t i = 0; i < n; i++)
            v[i] = tu_round_float(dt, tu_unif(r, lo, hi));
        return;
    }
    double l = ceil(lo), h = floor(hi);
    if (l < tu_int_min(dt))
        l = tu_int_min(dt);
    if (h > tu_int_max_plus1(dt) - 1)
        h = tu_int_max_plus1(dt) - 1;
    for (int64_t i = 0; i < n; i++)
        v[i] = (double)tu_int(r, (int64_t)l, (int64_t)h);
}

/* A random tensor; its values go to v (which must hold numel entries). */
static inline kiln_tensor *tu_rand_tensor(kiln_ctx *ctx, tu_rng *r, kiln_dtype dt, int ndim,
                                          const int64_t *dims, double lo, double hi, double *v) {
    tu_fill(r, dt, v, tu_numel(ndim, dims), lo, hi);
    return tu_tensor(ctx, dt, ndim, dims, v);
}

/* ---- assertions ----------------------------------------------------------- */

static inline void tu_fmt_shape(char *out, size_t cap, int ndim, const int64_t *dims) {
    size_t k = 0;
    k += (size_t)snprintf(out + k, cap - k, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (k < cap)
        snprintf(out + k, cap - k, "]");
}

static inline void tu_assert_ok_at(const kiln_tensor *t, const char *file, int line) {
    cr_assert(t != NULL, "[%s] %s:%d: op returned NULL", tu_exec_name(), file, line);
    cr_assert(kiln_error(t) == KILN_OK, "[%s] %s:%d: unexpected error %d: %s", tu_exec_name(), file,
              line, (int)kiln_error(t), kiln_error_message(t));
}
#define TU_ASSERT_OK(t) tu_assert_ok_at((t), __FILE__, __LINE__)

static inline void tu_assert_shape_at(const kiln_tensor *t, int ndim, const int64_t *dims,
                                      const char *file, int line) {
    tu_assert_ok_at(t, file, line);
    char want[256], got[256];
    tu_fmt_shape(want, sizeof want, ndim, dims);
    const int64_t *s = kiln_shape(t);
    int nd = kiln_ndim(t);
    cr_assert(nd >= 0 && nd <= KILN_MAX_DIMS && (nd == 0 || s != NULL), "[%s] %s:%d: bad ndim %d",
              tu_exec_name(), file, line, nd);
    tu_fmt_shape(got, sizeof got, nd, s);
    bool same = nd == ndim;
    for (int i = 0; same && i < nd; i++)
        same = s[i] == dims[i];
    cr_assert(same, "[%s] %s:%d: shape %s, expected %s", tu_exec_name(), file, line, got, want);
    cr_assert(kiln_numel(t) == tu_numel(ndim, dims), "[%s] %s:%d: numel %lld, expected %lld",
              tu_exec_name(), file, line, (long long)kiln_numel(t),
              (long long)tu_numel(ndim, dims));
}
/* TU_ASSERT_SHAPE(t, 2, 3) checks an OK handle of shape [2,3]. */
#define TU_ASSERT_SHAPE(t, ...) tu_assert_shape_at((t), TU_S(__VA_ARGS__), __FILE__, __LINE__)
#define TU_ASSERT_SCALAR_SHAPE(t) tu_assert_shape_at((t), 0, NULL, __FILE__, __LINE__)
#define TU_ASSERT_SHAPE_N(t, ndim, dims) tu_assert_shape_at((t), (ndim), (dims), __FILE__, __LINE__)

static inline void tu_assert_dtype_at(const kiln_tensor *t, kiln_dtype dt, const char *file,
                                      int line) {
    tu_assert_ok_at(t, file, line);
    cr_assert(kiln_dtype_of(t) == dt, "[%s] %s:%d: dtype %s, expected %s", tu_exec_name(), file,
              line, tu_dt_name(kiln_dtype_of(t)), tu_dt_name(dt));
}
#define TU_ASSERT_DTYPE(t, dt) tu_assert_dtype_at((t), (dt), __FILE__, __LINE__)

/* An error handle with status st whose message contains each of the
 * NULL-terminated needles. */
static inline void tu_assert_error_at(const kiln_tensor *t, kiln_status st,
                                      const char *const *needles, const char *file, int line) {
    cr_assert(t != NULL, "[%s] %s:%d: op returned NULL instead of an error handle", tu_exec_name(),
              file, line);
    kiln_status got = kiln_error(t);
    const char *msg = kiln_error_message(t);
    cr_assert(got == st, "[%s] %s:%d: status %d (%s), expected %d; message: \"%s\"", tu_exec_name(),
              file, line, (int)got, got == KILN_OK ? "ok" : "error", (int)st, msg ? msg : "(null)");
    cr_assert(msg != NULL && msg[0] != '\0', "[%s] %s:%d: empty error message", tu_exec_name(),
              file, line);
    for (const char *const *p = needles; p && *p; p++)
        cr_assert(strstr(msg, *p) != NULL, "[%s] %s:%d: message \"%s\" does not contain \"%s\"",
                  tu_exec_name(), file, line, msg, *p);
}
/* TU_ASSERT_ERROR(t, KILN_ERR_SHAPE, "kiln_add", "[3]") */
#define TU_ASSERT_ERROR(t, st, ...)                                                                \
    tu_assert_error_at((t), (st), (const char *const[]){__VA_ARGS__, NULL}, __FILE__, __LINE__)

/* An error handle with status st and a non-empty message. */
#define TU_ASSERT_STATUS(t, st) tu_assert_error_at((t), (st), NULL, __FILE__, __LINE__)

/* An error handle whose status is one of two. */
static inline void tu_assert_error2_at(const kiln_tensor *t, kiln_status a, kiln_status b,
                                       const char *file, int line) {
    cr_assert(t != NULL, "[%s] %s:%d: op returned NULL", tu_exec_name(), file, line);
    kiln_status got = kiln_error(t);
    cr_assert(got == a || got == b, "[%s] %s:%d: status %d, expected %d or %d; message \"%s\"",
              tu_exec_name(), file, line, (int)got, (int)a, (int)b, kiln_error_message(t));
    const char *msg = kiln_error_message(t);
    cr_assert(msg != NULL && msg[0] != '\0', "[%s] %s:%d: empty error message", tu_exec_name(),
              file, line);
}
#define TU_ASSERT_ERROR2(t, a, b) tu_assert_error2_at((t), (a), (b), __FILE__, __LINE__)

/* ---- reading tensors ------------------------------------------------------ */

/* Reads the n elements of t (asserting success) as doubles. */
static inline void tu_read_at(kiln_tensor *t, double *out, int64_t n, const char *file, int line) {
    tu_assert_ok_at(t, file, line);
    cr_assert(kiln_numel(t) == n, "[%s] %s:%d: numel %lld, expected %lld", tu_exec_name(), file,
              line, (long long)kiln_numel(t), (long long)n);
    kiln_dtype dt = kiln_dtype_of(t);
    size_t nbytes = (size_t)n * tu_dt_size(dt);
    void *raw = malloc(nbytes ? nbytes : 1);
    kiln_status st = kiln_to_host(t, raw, nbytes);
    cr_assert(st == KILN_OK, "[%s] %s:%d: kiln_to_host: status %d: %s", tu_exec_name(), file, line,
              (int)st, kiln_error_message(t));
    tu_unpack(dt, raw, n, out);
    free(raw);
}
#define TU_READ(t, out, n) tu_read_at((t), (out), (n), __FILE__, __LINE__)

static inline void tu_read_i64_at(kiln_tensor *t, int64_t *out, int64_t n, const char *file,
                                  int line) {
    tu_assert_ok_at(t, file, line);
    cr_assert(kiln_numel(t) == n, "[%s] %s:%d: numel %lld, expected %lld", tu_exec_name(), file,
              line, (long long)kiln_numel(t), (long long)n);
    kiln_dtype dt = kiln_dtype_of(t);
    size_t nbytes = (size_t)n * tu_dt_size(dt);
    void *raw = malloc(nbytes ? nbytes : 1);
    kiln_status st = kiln_to_host(t, raw, nbytes);
    cr_assert(st == KILN_OK, "[%s] %s:%d: kiln_to_host: status %d: %s", tu_exec_name(), file, line,
              (int)st, kiln_error_message(t));
    tu_unpack_i64(dt, raw, n, out);
    free(raw);
}
#define TU_READ_I64(t, out, n) tu_read_i64_at((t), (out), (n), __FILE__, __LINE__)

/* ---- comparison ----------------------------------------------------------- */

/* NMSE thresholds: a few roundings of the dtype, with room for sums. */
static inline double tu_tol(kiln_dtype dt) {
    switch (dt) {
    case KILN_F64:
        return 1e-24;
    case KILN_F32:
        return 1e-12;
    case KILN_F16:
        return 1e-6;
    case KILN_BF16:
        return 1e-4;
    default:
        return 0;
    }
}

/* sum (a-b)^2 / sum a^2 over the finite entries of ref; 0 when both sums are
 * 0, inf when only the reference is all zero. */
static inline double tu_nmse(const double *ref, const double *got, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]))
            continue;
        double d = ref[i] - got[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (num == 0)
        return 0;
    if (den == 0)
        return INFINITY;
    return num / den;
}

static inline bool tu_same_value(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* Compares got with exp (already rounded to dt where dt is a float): exact for
 * integers and bool or when `exact`; otherwise NaN/inf exact and the rest by
 * NMSE. */
static inline void tu_compare_tol_at(const double *got, const double *exp, int64_t n, kiln_dtype dt,
                                     bool exact, double tol, const char *file, int line) {
    int64_t worst = -1;
    double wdiff = -1;
    for (int64_t i = 0; i < n; i++) {
        bool special = !isfinite(exp[i]) || !isfinite(got[i]);
        if (exact || !tu_is_float(dt) || special) {
            cr_assert(tu_same_value(got[i], exp[i]),
                      "[%s] %s:%d: %s element %lld is %.17g, expected %.17g", tu_exec_name(), file,
                      line, tu_dt_name(dt), (long long)i, got[i], exp[i]);
        } else {
            double d = fabs(got[i] - exp[i]);
            if (d > wdiff) {
                wdiff = d;
                worst = i;
            }
        }
    }
    if (worst < 0)
        return;
    double e = tu_nmse(exp, got, n);
    cr_assert(e <= tol,
              "[%s] %s:%d: %s NMSE %.3g > %.3g; worst element %lld is %.17g, expected %.17g",
              tu_exec_name(), file, line, tu_dt_name(dt), e, tol, (long long)worst, got[worst],
              exp[worst]);
}

static inline void tu_compare_at(const double *got, const double *exp, int64_t n, kiln_dtype dt,
                                 bool exact, const char *file, int line) {
    tu_compare_tol_at(got, exp, n, dt, exact, tu_tol(dt), file, line);
}

/* Checks t's dtype, numel and values against expected values (given in double
 * and rounded here to dt), with an NMSE threshold tol for floats. */
static inline void tu_expect_tol_at(kiln_tensor *t, kiln_dtype dt, const double *exp, int64_t n,
                                    bool exact, double tol, const char *file, int line) {
    tu_assert_dtype_at(t, dt, file, line);
    double *got = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    double *want = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    for (int64_t i = 0; i < n; i++)
        want[i] = tu_round(dt, exp[i]);
    tu_read_at(t, got, n, file, line);
    tu_compare_tol_at(got, want, n, dt, exact, tol, file, line);
    free(got);
    free(want);
}

static inline void tu_expect_at(kiln_tensor *t, kiln_dtype dt, const double *exp, int64_t n,
                                bool exact, const char *file, int line) {
    tu_expect_tol_at(t, dt, exp, n, exact, tu_tol(dt), file, line);
}
#define TU_EXPECT(t, dt, exp, n) tu_expect_at((t), (dt), (exp), (n), false, __FILE__, __LINE__)
/* With an explicit NMSE threshold, for results whose rounding error grows
 * with their size (long reductions). */
#define TU_EXPECT_TOL(t, dt, exp, n, tol)                                                          \
    tu_expect_tol_at((t), (dt), (exp), (n), false, (tol), __FILE__, __LINE__)
#define TU_EXPECT_EXACT(t, dt, exp, n) tu_expect_at((t), (dt), (exp), (n), true, __FILE__, __LINE__)
#define TU_EXPECT_VALS(t, dt, ...)                                                                 \
    tu_expect_at((t), (dt), ((const double[]){__VA_ARGS__}), TU_NVALS(__VA_ARGS__), true,          \
                 __FILE__, __LINE__)

/* As TU_EXPECT_VALS, but finite values compare by NMSE (for results of
 * transcendental functions, which need not be correctly rounded). */
#define TU_EXPECT_NEAR_VALS(t, dt, ...)                                                            \
    tu_expect_at((t), (dt), ((const double[]){__VA_ARGS__}), TU_NVALS(__VA_ARGS__), false,         \
                 __FILE__, __LINE__)

static inline void tu_expect_i64_at(kiln_tensor *t, kiln_dtype dt, const int64_t *exp, int64_t n,
                                    const char *file, int line) {
    tu_assert_dtype_at(t, dt, file, line);
    int64_t *got = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    tu_read_i64_at(t, got, n, file, line);
    for (int64_t i = 0; i < n; i++)
        cr_assert(got[i] == exp[i], "[%s] %s:%d: %s element %lld is %lld, expected %lld",
                  tu_exec_name(), file, line, tu_dt_name(dt), (long long)i, (long long)got[i],
                  (long long)exp[i]);
    free(got);
}
#define TU_EXPECT_I64(t, dt, exp, n) tu_expect_i64_at((t), (dt), (exp), (n), __FILE__, __LINE__)

/* Reads a one-element tensor with kiln_item. */
static inline double tu_item_at(kiln_tensor *t, const char *file, int line) {
    tu_assert_ok_at(t, file, line);
    double v;
    kiln_status st = kiln_item(t, &v);
    cr_assert(st == KILN_OK && kiln_error(t) == KILN_OK, "[%s] %s:%d: kiln_item failed: %s",
              tu_exec_name(), file, line, kiln_error_message(t));
    return v;
}
#define TU_ITEM(t) tu_item_at((t), __FILE__, __LINE__)

/* ---- row-major index helpers for expected values -------------------------- */

/* The multi-index of flat index i in a row-major shape. */
static inline void tu_unravel(int64_t i, int ndim, const int64_t *dims, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = dims[d] ? i % dims[d] : 0;
        i = dims[d] ? i / dims[d] : 0;
    }
}

static inline int64_t tu_ravel(int ndim, const int64_t *dims, const int64_t *idx) {
    int64_t f = 0;
    for (int d = 0; d < ndim; d++)
        f = f * dims[d] + idx[d];
    return f;
}

/* NumPy broadcasting of two shapes into out; false when they do not fit. */
static inline bool tu_broadcast(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                                int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1)
            return false;
        out[i] = da == 1 ? db : da;
    }
    *nout = n;
    return true;
}

/* The flat index into a source of shape (ns, s) that broadcasts to the
 * multi-index idx of an ndim result. */
static inline int64_t tu_bcast_src_index(int ndim, const int64_t *idx, int ns, const int64_t *s) {
    int64_t f = 0;
    for (int d = 0; d < ns; d++) {
        int64_t i = idx[ndim - ns + d];
        f = f * s[d] + (s[d] == 1 ? 0 : i);
    }
    return f;
}

#endif /* KILN_TESTS_TEST_UTIL_H */
