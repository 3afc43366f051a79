/* kiln.h — the public C API of kiln, a tensor library that looks eager and
 * runs compiled.
 *
 * Every op below records a node in a lazy graph and returns at once; nothing
 * is computed until a sync point (kiln_realize, kiln_to_host, kiln_item,
 * kiln_sync) needs a value. Shapes follow NumPy: row-major, up to
 * KILN_MAX_DIMS dimensions, sizes as int64_t, broadcasting from the right.
 *
 * Errors never abort, and come back on one of two channels. A function that
 * yields a tensor returns a handle, in an error state when it fails, whose
 * message names the function and the shapes; every op given such a handle
 * passes the first error on. It returns NULL only when it has no context to
 * put an error handle in (every tensor argument NULL). Every other function
 * that can fail returns a kiln_status and gives its results through
 * out-parameters; its message is kiln_ctx_last_error's (or, for a sync
 * point, also the tensor's). kiln_ctx_new, which has no context to report
 * in, returns NULL and says why in kiln_last_ctx_error.
 *
 * Handles belong to their context and stay valid until kiln_release, the end
 * of the scope they were made in (unless kept), or kiln_ctx_free. A context is
 * not thread-safe: use one context per thread. */
#ifndef KILN_H
#define KILN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#define KILN_MAX_DIMS 8
#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0

/* Slice bounds that mean "to the end" in the direction of the step. */
#define KILN_END INT64_MAX
#define KILN_BEGIN_REV INT64_MIN

typedef enum kiln_dtype {
    KILN_F32 = 0,
    KILN_F64,
    KILN_F16,
    KILN_BF16,
    KILN_I32,
    KILN_I64,
    KILN_U8,
    KILN_BOOL,
    KILN_I8, /* signed 8-bit; after bool so that the older dtypes keep their values */
} kiln_dtype;
#define KILN_NUM_DTYPES 9

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_SHAPE = -1,   /* shapes do not fit the op */
    KILN_ERR_DTYPE = -2,   /* a dtype the op does not take */
    KILN_ERR_ARG = -3,     /* any other bad argument: axis, NULL, size, context */
    KILN_ERR_OOM = -4,     /* out of memory, or a size too large to allocate */
    KILN_ERR_COMPILE = -5, /* generated code failed to compile */
    KILN_ERR_DEVICE = -6,  /* the device is missing or failed */
    KILN_ERR_IO = -7,      /* a file could not be read or written */
    KILN_ERR_DIST = -8,    /* a collective failed: the ranks disagree, or one died or stopped */
} kiln_status;

typedef enum kiln_device {
    KILN_DEVICE_DEFAULT = 0, /* KILN_DEVICE from the environment, else KILN_CPU */
    KILN_CPU,
    KILN_CUDA,
    KILN_REF, /* the float64 reference evaluator: slow, obviously correct */
} kiln_device;

typedef enum kiln_mode {
    KILN_LAZY = 0, /* record ops, compile and run at sync points (default) */
    KILN_EAGER,    /* realize every op as soon as it is recorded */
} kiln_mode;

typedef struct kiln_ctx kiln_ctx;
typedef struct kiln_tensor kiln_tensor;

/* ---- Contexts ------------------------------------------------------------ */

/* Makes a context on a device. KILN_DEVICE_DEFAULT reads the environment
 * variable KILN_DEVICE ("cpu", "cuda", "ref"); KILN_EAGER=1 in the environment
 * starts the context in eager mode. Returns NULL when the device is not
 * available; kiln_last_ctx_error() then says why. */
KILN_API kiln_ctx *kiln_ctx_new(kiln_device dev);

/* The reason the last kiln_ctx_new on this thread returned NULL, or "". */
KILN_API const char *kiln_last_ctx_error(void);

/* Frees a context with every handle, node and buffer it owns. NULL is a no-op. */
KILN_API void kiln_ctx_free(kiln_ctx *ctx);

/* Sets lazy (default) or eager mode for ops recorded from now on. KILN_ERR_ARG
 * for a NULL context or another mode (the mode stays; kiln_ctx_last_error
 * says why). */
KILN_API kiln_status kiln_ctx_set_mode(kiln_ctx *ctx, kiln_mode mode);
KILN_API kiln_mode kiln_ctx_mode(const kiln_ctx *ctx);
/* Whether graphs that differ only in sizes share compiled programs (on by
 * default; KILN_DYNAMIC=0 starts contexts with it off). A graph cache miss is
 * lowered and planned for its own sizes; when its kernels come out as those of
 * an earlier graph of the same structure but for some numbers (a batch or a
 * sequence length, and what follows from it: element counts, loop bounds, a
 * matmul's sizes, batch strides, index constants, a mean's 1/n), the program
 * reads those numbers at run time, and every later graph that differs from
 * the first only in them runs that one program. So a size that varies costs
 * two compiles, the first size's program and the shared one, and nothing after,
 * as long as the kernels keep their shape: a size that changes a planning
 * decision (32- against 64-bit indices, a matmul output narrower than a vector,
 * a reduction split across threads, a size of 1 that simplifies away, a size
 * equal to another number of the graph, which makes two immediates one) starts
 * a structure of its own, compiled once for that size and once shared. KILN_DEBUG=1 says
 * which syncs share. Off, each size compiles its own program, whose
 * constants the compiler can fold (see bench/dynamic.c for what that is
 * worth). Both CPU compiler paths share; CUDA does not yet (each size compiles
 * its own program there). KILN_ERR_ARG for a NULL context. */
KILN_API kiln_status kiln_ctx_set_dynamic(kiln_ctx *ctx, bool on);
KILN_API kiln_device kiln_ctx_device(const kiln_ctx *ctx);

/* ---- Dtypes and statuses -------------------------------------------------- */

/* Bytes per element of a dtype (bool, u8 and i8 are 1 byte); 0 for an unknown one. */
KILN_API size_t kiln_dtype_size(kiln_dtype dtype);
/* "f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"; "?" otherwise. */
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);
/* A short English name of a status ("ok", "shape error", …). */
KILN_API const char *kiln_status_string(kiln_status status);

/* ---- Creation --------------------------------------------------------------
 * Creation functions take a shape as (ndim, dims); ndim 0 is a scalar and dims
 * may then be NULL. A dimension of size 0 makes an empty tensor. A negative
 * size, ndim outside [0, KILN_MAX_DIMS] or an element count that overflows
 * gives a handle in an error state (KILN_ERR_SHAPE). */

/* A tensor holding a copy of numel elements of dtype read from data, row-major.
 * data may be NULL only when the tensor is empty. Bool data is read as bytes,
 * nonzero meaning true. */
KILN_API kiln_tensor *kiln_from_data(kiln_ctx *ctx, kiln_dtype dtype, int ndim,
                                     const int64_t *dims, const void *data);

/* A tensor with every element equal to value, converted to dtype: floats
 * round to nearest even, integers truncate toward zero and wrap to their
 * width (u8 -3 is 253, i8 200 is -56), bool is value != 0. Scalar arguments of other ops
 * convert the same way. */
KILN_API kiln_tensor *kiln_full(kiln_ctx *ctx, kiln_dtype dtype, int ndim,
                                const int64_t *dims, double value);
KILN_API kiln_tensor *kiln_zeros(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *dims);
KILN_API kiln_tensor *kiln_ones(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *dims);
/* A 0-d tensor: kiln_full with ndim 0. */
KILN_API kiln_tensor *kiln_scalar(kiln_ctx *ctx, kiln_dtype dtype, double value);

/* The 1-d tensor start, start+step, … up to but excluding stop, as NumPy's
 * arange: ceil((stop-start)/step) elements, none when that is not positive.
 * Each element is start + i*step computed in float64, then converted to dtype.
 * A zero or non-finite step, or non-finite bounds, is KILN_ERR_ARG. */
KILN_API kiln_tensor *kiln_arange(kiln_ctx *ctx, kiln_dtype dtype, double start,
                                  double stop, double step);

/* The n x m identity (ones where row == column), in any dtype (api/layout.c). */
KILN_API kiln_tensor *kiln_eye(kiln_ctx *ctx, kiln_dtype dtype, int64_t n, int64_t m);
/* n evenly spaced points from start to stop, both included, as NumPy's
 * linspace: point i is start + i (stop - start)/(n - 1) computed in float64,
 * the last exactly stop; one point is start, none an empty vector. A negative
 * n or non-finite bounds are KILN_ERR_ARG. */
KILN_API kiln_tensor *kiln_linspace(kiln_ctx *ctx, kiln_dtype dtype, double start, double stop,
                                    int64_t n);

/* Uniform numbers in [0, 1) (kiln_rand) or standard normal numbers
 * (kiln_randn, Box-Muller) from the counter-based Philox4x32-10 generator:
 * element i of the row-major tensor is a function of seed and i only, so the
 * same seed gives the same numbers on every device and in every mode. Float
 * dtypes only (KILN_ERR_DTYPE otherwise). The seed is a bound input of the
 * graph (a 0-d tensor), not part of its structure: a step that draws with a
 * new seed each time (kiln_dropout's) reuses the program compiled for the
 * first. */
KILN_API kiln_tensor *kiln_rand(kiln_ctx *ctx, kiln_dtype dtype, int ndim,
                                const int64_t *dims, uint64_t seed);
KILN_API kiln_tensor *kiln_randn(kiln_ctx *ctx, kiln_dtype dtype, int ndim,
                                 const int64_t *dims, uint64_t seed);

/* ---- Elementwise unary ops -------------------------------------------------
 * Same shape as the input. kiln_neg, kiln_abs and kiln_relu keep the dtype
 * (kiln_neg of bool is KILN_ERR_DTYPE); the others compute in floating point:
 * an integer or bool input gives f32. kiln_gelu is the exact erf form,
 * kiln_recip is 1/x, kiln_rsqrt is 1/sqrt(x). On the compiled devices
 * kiln_exp, kiln_sigmoid, kiln_silu (and softmax and attention, which use
 * e^x) give +0 in f32 where e^x is below 2^-126, not a subnormal. */
KILN_API kiln_tensor *kiln_neg(kiln_tensor *t);
KILN_API kiln_tensor *kiln_abs(kiln_tensor *t);
KILN_API kiln_tensor *kiln_exp(kiln_tensor *t);
KILN_API kiln_tensor *kiln_log(kiln_tensor *t);
KILN_API kiln_tensor *kiln_sqrt(kiln_tensor *t);
KILN_API kiln_tensor *kiln_rsqrt(kiln_tensor *t);
KILN_API kiln_tensor *kiln_sin(kiln_tensor *t);
KILN_API kiln_tensor *kiln_cos(kiln_tensor *t);
KILN_API kiln_tensor *kiln_tanh(kiln_tensor *t);
KILN_API kiln_tensor *kiln_sigmoid(kiln_tensor *t);
KILN_API kiln_tensor *kiln_relu(kiln_tensor *t);
KILN_API kiln_tensor *kiln_gelu(kiln_tensor *t);
KILN_API kiln_tensor *kiln_silu(kiln_tensor *t);
KILN_API kiln_tensor *kiln_recip(kiln_tensor *t);

/* ---- Elementwise binary ops ------------------------------------------------
 * The shapes broadcast as in NumPy (KILN_ERR_SHAPE when they do not). The
 * result dtype is the promotion of the two: bool < u8, i8 < i32 < i64 < f16,
 * bf16 < f32 < f64, with f16 and bf16 together giving f32 and u8 and i8 i32
 * (there is no i16). Integer kiln_div is floor
 * division (as NumPy's //), and gives 0 for a zero divisor; integer results
 * wrap to their width. kiln_maximum and kiln_minimum propagate NaN. kiln_pow
 * of integers to a negative power is 1 for base 1, ±1 for base -1, else 0.
 * Comparisons give bool. */
KILN_API kiln_tensor *kiln_add(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_sub(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_mul(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_div(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_pow(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_maximum(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_minimum(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_lt(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_le(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_gt(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_ge(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_eq(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_ne(kiln_tensor *a, kiln_tensor *b);

/* cond ? a : b elementwise; the three shapes broadcast together. cond of any
 * dtype is read as cond != 0; the result dtype is the promotion of a and b. */
KILN_API kiln_tensor *kiln_where(kiln_tensor *cond, kiln_tensor *a, kiln_tensor *b);

/* Binary ops with a scalar as the second operand. The scalar does not promote
 * within a kind: f16 + 2.5 stays f16, i32 * 3 stays i32; an integer or bool
 * tensor with a non-integral scalar gives f32, and bool with an integral one
 * gives i64 (comparisons always give bool).
 *
 * The scalar's value is a bound input of the compiled program, not part of
 * its structure: a loop that calls kiln_mul_scalar(x, lr) with a new lr each
 * step compiles once. The exceptions are literals, which the graph holds as
 * constants so that they fold: the values 0, 1 and -1 (x + 0, x * 1, x / 1
 * and x ** 1 are x itself), and the exponent of kiln_pow_scalar on an
 * integer computation (integer pow is lowered by squaring over the
 * exponent's bits, which a constant exponent reduces to a few multiplies).
 * So a value that moves into or out of that set (1 to 1.1), or that changes
 * the result dtype above (3 to 2.5 on an integer tensor, 300 to 301 in a
 * comparison with a u8 tensor does not, 255 to 256 does), compiles once
 * more; other values of the same kind reuse the program. */
KILN_API kiln_tensor *kiln_add_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_sub_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_mul_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_div_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_pow_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_maximum_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_minimum_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_lt_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_le_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_gt_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_ge_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_eq_scalar(kiln_tensor *t, double s);
KILN_API kiln_tensor *kiln_ne_scalar(kiln_tensor *t, double s);

/* ---- More elementwise math (api/math.c) -----------------------------------
 * Rounding: kiln_floor, kiln_ceil, kiln_trunc and kiln_round (half to even,
 * as NumPy's and PyTorch's round) keep the dtype and are the identity on
 * integers and bool; NaN, infinities and -0 pass through; their gradient is
 * 0. kiln_sign is -1, 0 or 1 in the input's dtype (NaN stays NaN, -0 stays
 * -0; for bool and u8 it is 0 or 1).
 * Transcendentals compute in floating point (integers and bool give f32),
 * each as the platform's libm has it (below 1 ulp in f32 on glibc, within a
 * few ulp in f64): NaN outside the domain (asin of 2, acosh of 0.5), ±inf at
 * its poles (atanh of ±1). kiln_erfc is 1 - erf without the cancellation
 * for large x; kiln_expm1 and kiln_log1p keep their digits near 0. */
KILN_API kiln_tensor *kiln_floor(kiln_tensor *t);
KILN_API kiln_tensor *kiln_ceil(kiln_tensor *t);
KILN_API kiln_tensor *kiln_trunc(kiln_tensor *t);
KILN_API kiln_tensor *kiln_round(kiln_tensor *t);
KILN_API kiln_tensor *kiln_sign(kiln_tensor *t);
KILN_API kiln_tensor *kiln_tan(kiln_tensor *t);
KILN_API kiln_tensor *kiln_asin(kiln_tensor *t);
KILN_API kiln_tensor *kiln_acos(kiln_tensor *t);
KILN_API kiln_tensor *kiln_atan(kiln_tensor *t);
KILN_API kiln_tensor *kiln_sinh(kiln_tensor *t);
KILN_API kiln_tensor *kiln_cosh(kiln_tensor *t);
KILN_API kiln_tensor *kiln_asinh(kiln_tensor *t);
KILN_API kiln_tensor *kiln_acosh(kiln_tensor *t);
KILN_API kiln_tensor *kiln_atanh(kiln_tensor *t);
KILN_API kiln_tensor *kiln_erf(kiln_tensor *t);
KILN_API kiln_tensor *kiln_erfc(kiln_tensor *t);
KILN_API kiln_tensor *kiln_expm1(kiln_tensor *t);
KILN_API kiln_tensor *kiln_log1p(kiln_tensor *t);

/* Binary, broadcasting and promoting as kiln_add. kiln_atan2(y, x) is the
 * angle of the point (x, y) in [-pi, pi], in floating point (integers give
 * f32). kiln_copysign is |a| with b's sign bit, in floating point.
 * kiln_logaddexp is log(exp(a) + exp(b)) without overflow (max(a, b) +
 * log1p(exp(-|a - b|)); -inf with -inf gives -inf).
 * Remainders and divisions of every number dtype (KILN_ERR_DTYPE for two
 * bools): kiln_fmod is C's fmod and %, a - trunc(a/b) b with a's sign
 * (exact for floats); kiln_mod is Python's %, a - floor(a/b) b with b's sign
 * (NumPy's and PyTorch's remainder; a zero result takes b's sign);
 * kiln_floor_divide is floor(a/b) (for integers the same as kiln_div),
 * kiln_trunc_divide is trunc(a/b) (C's integer /). For integers a zero
 * divisor gives 0 from each of them (no trap), and INT_MIN by -1 wraps. */
KILN_API kiln_tensor *kiln_atan2(kiln_tensor *y, kiln_tensor *x);
KILN_API kiln_tensor *kiln_copysign(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_logaddexp(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_fmod(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_mod(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_floor_divide(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_trunc_divide(kiln_tensor *a, kiln_tensor *b);

/* Bitwise ops of integers and bool (KILN_ERR_DTYPE for floats), on the two's
 * complement bits of the promoted dtype; of bool they are logical not, and,
 * or, xor. Shifts take integers only: a << b and a >> b (arithmetic for i32
 * and i64, logical for u8); a count that is negative gives 0, one of the
 * width or more gives 0, or -1 for a negative value shifted right. */
KILN_API kiln_tensor *kiln_bitwise_not(kiln_tensor *t);
KILN_API kiln_tensor *kiln_bitwise_and(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_bitwise_or(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_bitwise_xor(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_shift_left(kiln_tensor *a, kiln_tensor *b);
KILN_API kiln_tensor *kiln_shift_right(kiln_tensor *a, kiln_tensor *b);

/* Bool: |a - b| <= atol + rtol |b| elementwise, as NumPy's isclose (not
 * symmetric in a and b); infinities are close only to themselves, NaN to
 * nothing unless equal_nan. a and b broadcast and promote; negative or NaN
 * tolerances are KILN_ERR_ARG. */
KILN_API kiln_tensor *kiln_isclose(kiln_tensor *a, kiln_tensor *b, double rtol, double atol,
                                   bool equal_nan);

/* The lower (kiln_tril) or upper (kiln_triu) triangle of the last two axes:
 * elements with column - row <= k (tril) or >= k (triu) kept, the others 0;
 * k = 0 is the main diagonal, k > 0 above it. Fewer than 2 dimensions is
 * KILN_ERR_SHAPE. Differentiable (the gradient is masked the same way). */
KILN_API kiln_tensor *kiln_tril(kiln_tensor *t, int64_t k);
KILN_API kiln_tensor *kiln_triu(kiln_tensor *t, int64_t k);

/* ---- Reductions ------------------------------------------------------------
 * Reduce over naxes axes (negative axes count from the end; NULL axes or
 * naxes 0 with NULL means all axes). keepdim keeps each reduced axis with size
 * 1. kiln_sum of bool or integers gives i64, of floats the same dtype;
 * kiln_mean gives a float (f32 for integer input; accumulates half types in
 * f32) and NaN for an empty reduction; kiln_max and kiln_min keep the dtype,
 * propagate NaN, and refuse an empty reduction (KILN_ERR_SHAPE). kiln_argmax
 * and kiln_argmin give i64 indices of the first extreme element, counted
 * row-major over the reduced axes taken in increasing order (the flat index
 * when all axes are reduced); NaN counts as the extreme. A repeated or out of
 * range axis is KILN_ERR_ARG. Axes along which the input is constant (an
 * expand's broadcast axes, size-1 axes, and what elementwise ops of such
 * inputs keep) are not read element by element: a sum over them is one
 * element times their count (so sum(expand(x, [10^6, 10^6])) costs one
 * multiply and rounds once), a max or min the element itself. */
KILN_API kiln_tensor *kiln_sum(kiln_tensor *t, int naxes, const int *axes, bool keepdim);
KILN_API kiln_tensor *kiln_mean(kiln_tensor *t, int naxes, const int *axes, bool keepdim);
KILN_API kiln_tensor *kiln_max(kiln_tensor *t, int naxes, const int *axes, bool keepdim);
KILN_API kiln_tensor *kiln_min(kiln_tensor *t, int naxes, const int *axes, bool keepdim);
KILN_API kiln_tensor *kiln_argmax(kiln_tensor *t, int naxes, const int *axes, bool keepdim);
KILN_API kiln_tensor *kiln_argmin(kiln_tensor *t, int naxes, const int *axes, bool keepdim);
/* The product over the axes (NULL: all): i64 for integer and bool input
 * (wrapping, as NumPy's), floats in their own dtype (half types multiply in
 * f32); 1 for an empty product. Computed as a pairwise tree, ceil(log2 n)
 * passes; differentiable, zeros in the input included. */
KILN_API kiln_tensor *kiln_prod(kiln_tensor *t, int naxes, const int *axes, bool keepdim);
/* Variance and standard deviation over the axes: sum((x - mean)^2) divided
 * by (count - correction) (1 is Bessel's, PyTorch's default; 0 NumPy's), in
 * the two-pass form; a float result as kiln_mean's. A count not above the
 * correction divides by zero or less (inf or NaN, as NumPy and PyTorch). A
 * non-finite correction is KILN_ERR_ARG. Differentiable. */
KILN_API kiln_tensor *kiln_var(kiln_tensor *t, int naxes, const int *axes, double correction,
                               bool keepdim);
KILN_API kiln_tensor *kiln_std(kiln_tensor *t, int naxes, const int *axes, double correction,
                               bool keepdim);
/* kiln_std and, in *mean (when mean is not NULL), kiln_mean over the same
 * axes, in the std's dtype: PyTorch's std_mean. On failure *mean is NULL. */
KILN_API kiln_tensor *kiln_std_mean(kiln_tensor *t, int naxes, const int *axes,
                                    double correction, bool keepdim, kiln_tensor **mean);

/* Cumulative ops along an axis, of the input's shape: element i combines
 * elements 0..i. kiln_cumsum and kiln_cumprod give i64 for integer and bool
 * input (as NumPy and PyTorch), kiln_cummax and kiln_cummin keep the dtype
 * (and propagate NaN from where it appears on), kiln_logcumsumexp computes
 * log(cumsum(exp(x))) without overflow in a float (f32 for integers). They
 * run as log-depth scans (ceil(log2 n) passes over the tensor). A 0-d input
 * is KILN_ERR_SHAPE, a bad axis KILN_ERR_ARG. Differentiable (cummax and
 * cummin split the gradient of tied elements evenly). */
KILN_API kiln_tensor *kiln_cumsum(kiln_tensor *t, int axis);
KILN_API kiln_tensor *kiln_cumprod(kiln_tensor *t, int axis);
KILN_API kiln_tensor *kiln_cummax(kiln_tensor *t, int axis);
KILN_API kiln_tensor *kiln_cummin(kiln_tensor *t, int axis);
KILN_API kiln_tensor *kiln_logcumsumexp(kiln_tensor *t, int axis);

/* Indexing by an index tensor (i32, i64 or u8) along axis, as PyTorch's:
 * kiln_gather's result has the index's shape, element [.., j, ..] =
 * t[.., index[.., j, ..], ..] (the index may be smaller than t off the axis);
 * kiln_index_select picks whole slices by a vector of indices; kiln_scatter_add
 * returns t plus src's elements added where the index points (src at least
 * the index's shape). Realized indices outside [0, size) are KILN_ERR_ARG;
 * lazily computed ones are not checked (no sync) and select or add nothing.
 * kiln_gather and kiln_index_select cost one load of the index and one of t
 * per result element, fused with elementwise work on the index and on the
 * result (t itself is computed first when it is not data already).
 * kiln_scatter_add is one kernel: t copied, then src's J elements of each
 * row (each position off the axis) added in order where their indices
 * point, J steps per row whatever the axis's size K (rows run in parallel,
 * each owning its places: deterministic, no atomics); elementwise work on
 * t, the index and src fuses into it. The gradient of a gather with respect
 * to t is such a scatter-add. Differentiable in t and src. */
KILN_API kiln_tensor *kiln_gather(kiln_tensor *t, int axis, kiln_tensor *index);
KILN_API kiln_tensor *kiln_index_select(kiln_tensor *t, int axis, kiln_tensor *index);
/* Advanced indexing by an integer tensor on one axis, NumPy's t[..., index,
 * ...]: index (i32, i64 or u8) of any shape replaces the axis, so the result
 * is t.shape[:axis] + index.shape + t.shape[axis+1:] (at most KILN_MAX_DIMS
 * dimensions, KILN_ERR_SHAPE otherwise); negative indices count from the end.
 * Realized indices outside [-size, size) are KILN_ERR_ARG; lazy ones read 0
 * as kiln_gather's. One gather; differentiable in t. */
KILN_API kiln_tensor *kiln_index(kiln_tensor *t, int axis, kiln_tensor *index);
KILN_API kiln_tensor *kiln_scatter_add(kiln_tensor *t, int axis, kiln_tensor *index,
                                       kiln_tensor *src);

/* How kiln_scatter_reduce combines what points at one place. */
typedef enum kiln_scatter_reduction {
    KILN_SCATTER_SUM = 0,
    KILN_SCATTER_PROD,
    KILN_SCATTER_AMAX,
    KILN_SCATTER_AMIN,
    KILN_SCATTER_MEAN,
} kiln_scatter_reduction;

/* t with src's elements written (kiln_scatter) or combined (kiln_scatter_
 * reduce) where the index points along axis, with kiln_scatter_add's shapes,
 * checks and cost (J steps per row, one kernel; the mean two, sums and
 * counts, and a division). Places nothing points
 * at keep t's value. kiln_scatter: where several elements point at one
 * place, the last in the index's row order wins (PyTorch leaves it
 * undefined). kiln_scatter_reduce, as PyTorch's: the sum, product, maximum,
 * minimum or mean of the elements pointing at a place, with t's own value
 * among them when include_self; amax and amin propagate NaN; the mean of
 * integers rounds down. Differentiable in t and src (ties of amax and amin
 * share the gradient evenly, as kiln_max's), the gradients O(J) per row as
 * well: gathers and scatters, never a comparison with the whole axis. */
KILN_API kiln_tensor *kiln_scatter(kiln_tensor *t, int axis, kiln_tensor *index,
                                   kiln_tensor *src);
KILN_API kiln_tensor *kiln_scatter_reduce(kiln_tensor *t, int axis, kiln_tensor *index,
                                          kiln_tensor *src, kiln_scatter_reduction reduce,
                                          bool include_self);

/* Sorting along an axis, stable: equal elements keep their order. NaN sorts
 * last ascending and first descending. kiln_sort gives the values (same
 * dtype; differentiable: the gradient goes back to where each value came
 * from), kiln_argsort their i64 indices, kiln_topk the k largest (or, with
 * largest false, smallest) in order, with their indices in *indices when it
 * is not NULL (k outside [0, size] is KILN_ERR_ARG). A bitonic network of
 * log2(m)(log2(m)+1)/2 passes, m the size rounded up to a power of two. */
KILN_API kiln_tensor *kiln_sort(kiln_tensor *t, int axis, bool descending);
KILN_API kiln_tensor *kiln_argsort(kiln_tensor *t, int axis, bool descending);
KILN_API kiln_tensor *kiln_topk(kiln_tensor *t, int64_t k, int axis, bool largest,
                                kiln_tensor **indices);

/* ---- Einsum, masks and windows (api/einsum.c, api/select.c) --------------- */

/* Einstein summation over n operands, as NumPy's and PyTorch's einsum:
 * "ij,jk->ik" is a matrix product, "bij,bjk->bik" a batched one, "i,j->ij"
 * an outer product, "ii->" a trace, "ii->i" a diagonal, "ij->ji" a
 * transpose, "ij->" a sum. A term has one letter (a-z, A-Z) per axis of its
 * operand; spaces are ignored. A letter repeated within one operand takes
 * the diagonal of those axes (equal sizes required); a letter in several
 * operands pairs their axes, whose sizes must be equal or 1 (broadcast);
 * letters not in the output are summed. Without "->" the output is the
 * letters that appear once, in ASCII order (A-Z before a-z), after the
 * ellipsis. "..." stands for the axes a term does not name, broadcast
 * across operands from the right as NumPy's; an explicit output without
 * "..." sums them (PyTorch's rule). The dtype is the promotion of the
 * operands' (integers wrap to it; bool is KILN_ERR_DTYPE). Composed of
 * diagonals, sums, permutes, reshapes and one kiln_matmul per operand after
 * the first, contracting left to right (so the order of the operands is the
 * order of the work), hence differentiable. Errors name kiln_einsum, the
 * subscripts and the operands' shapes: KILN_ERR_ARG for a character that is
 * not a letter, ',', "..." or "->", a second "...", a term count other than
 * n, an output letter that no input has or that is repeated, NULL
 * subscripts; KILN_ERR_SHAPE for a term whose letters do not match its
 * operand's dimensions, sizes that do not broadcast, or an output or
 * intermediate of more than KILN_MAX_DIMS dimensions. n <= 0 or a NULL
 * operands array gives NULL (no context to report in). */
KILN_API kiln_tensor *kiln_einsum(const char *subscripts, int n, kiln_tensor *const *operands);

/* t with value (converted to t's dtype as kiln_full converts it) where mask
 * is true. mask is bool (KILN_ERR_DTYPE otherwise) and broadcasts to t's
 * shape, which the result keeps (KILN_ERR_SHAPE otherwise). A kiln_where:
 * it fuses, and its gradient is t's where mask is false, 0 elsewhere. */
KILN_API kiln_tensor *kiln_masked_fill(kiln_tensor *t, kiln_tensor *mask, double value);

/* A tensor of the shape whose values are zeros: kiln has no uninitialised
 * memory to hand out, so this is kiln_zeros (a lazy constant that costs
 * nothing until it is read), for code written against PyTorch's empty. */
KILN_API kiln_tensor *kiln_empty(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *dims);

/* Sliding windows, as PyTorch's Tensor.unfold: along axis, windows of size
 * elements every step elements, (n - size) / step + 1 of them (rounded
 * down) in place of the axis's n, with a new last axis of length size:
 * result[..., w, ..., j] = t[..., w * step + j, ...]. One view (strides
 * over t, overlapping when step < size; over a pad or other masked view
 * along the axis, a view of that view), so it fuses with its reader;
 * differentiable (overlapping windows add their gradients). size <= 0, step <= 0 or size above n is
 * KILN_ERR_ARG; a 0-d t or one of KILN_MAX_DIMS dimensions is
 * KILN_ERR_SHAPE. */
KILN_API kiln_tensor *kiln_unfold(kiln_tensor *t, int axis, int64_t size, int64_t step);

/* The ops whose result's size depends on the data. Each is a sync point: it
 * realizes its inputs (and the context's pending assignments) in one sync,
 * copies them to the host, counts there and returns a new tensor holding
 * the answer (as kiln_from_data), so it costs a round trip to the device
 * and ends the lazy graph: the result carries no gradient. Argument errors
 * come before any sync; a failed sync or read comes back as an error
 * handle naming the op (t and mask keep whatever was computed). */
/* The elements of t where mask is true, as a 1-d tensor in row-major order
 * of their broadcast shape (t and mask broadcast together, as PyTorch's),
 * t's dtype; empty when mask holds no true. mask is bool (KILN_ERR_DTYPE
 * otherwise); shapes that do not broadcast are KILN_ERR_SHAPE. */
KILN_API kiln_tensor *kiln_masked_select(kiln_tensor *t, kiln_tensor *mask);
/* The indices of t's nonzero elements (true for bool; NaN counts as
 * nonzero, -0 as zero), as an i64 [count, ndim(t)] tensor, one row per
 * element in row-major order (NumPy's argwhere, PyTorch's nonzero): [0,
 * ndim] when there is none, [1, 0] or [0, 0] for a 0-d t. Any dtype. */
KILN_API kiln_tensor *kiln_nonzero(kiln_tensor *t);

/* ---- Views -----------------------------------------------------------------
 * Movement ops never copy: they make a view (shape, strides, offset, and a
 * mask for padding) over their source. Axes may be negative. */

/* The same elements in a new shape with the same element count; one dimension
 * may be -1 and is then inferred. */
KILN_API kiln_tensor *kiln_reshape(kiln_tensor *t, int ndim, const int64_t *dims);
/* Reorders the axes: result axis i is input axis perm[i]; perm has ndim(t)
 * entries, each axis once. */
KILN_API kiln_tensor *kiln_permute(kiln_tensor *t, const int *perm);
/* Swaps two axes. */
KILN_API kiln_tensor *kiln_transpose(kiln_tensor *t, int axis_a, int axis_b);
/* Broadcasts to a shape, as NumPy's broadcast_to: new axes at the front, size-1
 * axes stretched; -1 keeps an existing size. */
KILN_API kiln_tensor *kiln_expand(kiln_tensor *t, int ndim, const int64_t *dims);
/* Elements start, start+step, … before stop along one axis, with Python's
 * slice rules: negative indices count from the end, bounds clamp, step may be
 * negative but not zero. KILN_END as stop runs to the end in the direction of
 * the step; KILN_BEGIN_REV as stop runs a negative step to the first element. */
KILN_API kiln_tensor *kiln_slice(kiln_tensor *t, int axis, int64_t start, int64_t stop,
                                 int64_t step);
/* Pads every axis: pads holds 2*ndim(t) sizes, (before, after) for axis 0,
 * then axis 1, …; each >= 0. The new elements are value. */
KILN_API kiln_tensor *kiln_pad(kiln_tensor *t, const int64_t *pads, double value);
/* Padding with the tensor's own elements, for every axis as kiln_pad's pads:
 * KILN_PAD_REFLECT mirrors about the edge element (NumPy's "reflect",
 * PyTorch's "reflect": pads at most size - 1), KILN_PAD_REPLICATE repeats the
 * edge element, KILN_PAD_CIRCULAR wraps around (pads at most the size).
 * Views and cats, so it fuses; differentiable. Other sizes are KILN_ERR_ARG. */
typedef enum kiln_padding {
    KILN_PAD_REFLECT = 1,
    KILN_PAD_REPLICATE,
    KILN_PAD_CIRCULAR,
} kiln_padding;
KILN_API kiln_tensor *kiln_pad_mode(kiln_tensor *t, const int64_t *pads, kiln_padding mode);
/* Reverses the order of elements along naxes axes (NULL: all). */
KILN_API kiln_tensor *kiln_flip(kiln_tensor *t, int naxes, const int *axes);
/* Removes the named size-1 axes (NULL: every size-1 axis); naming an axis
 * whose size is not 1 is KILN_ERR_SHAPE. */
KILN_API kiln_tensor *kiln_squeeze(kiln_tensor *t, int naxes, const int *axes);
/* Inserts a size-1 axis so that it becomes axis `axis` of the result
 * (-ndim-1 <= axis <= ndim). */
KILN_API kiln_tensor *kiln_unsqueeze(kiln_tensor *t, int axis);
/* Joins n tensors along an axis; all other sizes must agree. The dtype is the
 * promotion of all of theirs. */
KILN_API kiln_tensor *kiln_cat(int n, kiln_tensor *const *ts, int axis);
/* Joins n tensors of one shape along a new axis (-ndim-1 <= axis <= ndim). */
KILN_API kiln_tensor *kiln_stack(int n, kiln_tensor *const *ts, int axis);
/* Tiles t: reps[d] copies along axis d, with nreps >= ndim(t) counts (extra
 * leading counts add leading axes), as PyTorch's Tensor.repeat and NumPy's
 * tile; nreps below 8. A view per axis, so it fuses; differentiable. */
KILN_API kiln_tensor *kiln_repeat(kiln_tensor *t, int nreps, const int64_t *reps);
/* Each element `repeats` times in a row along axis (NumPy's repeat). */
KILN_API kiln_tensor *kiln_repeat_interleave(kiln_tensor *t, int64_t repeats, int axis);
/* Rotates the elements along axis by shift (negative: the other way): element
 * i of the result is element (i - shift) mod n of t. */
KILN_API kiln_tensor *kiln_roll(kiln_tensor *t, int64_t shift, int axis);
/* The diagonal of axes axis1 and axis2 (offset > 0: above the main one), as a
 * last axis after the remaining ones, as NumPy's diagonal. A view. */
KILN_API kiln_tensor *kiln_diagonal(kiln_tensor *t, int64_t offset, int axis1, int axis2);
/* NumPy's diag: of a matrix, its diagonal k; of a vector v of n, the (n + |k|)
 * square matrix with v on diagonal k and zeros elsewhere. */
KILN_API kiln_tensor *kiln_diag(kiln_tensor *t, int64_t k);

/* ---- Linear algebra ------------------------------------------------------- */

/* Matrix product with NumPy's matmul rules: [..., n, k] @ [..., k, m] ->
 * [..., n, m] with the batch dimensions broadcast; a 1-d operand is a row
 * (left) or column (right) vector whose axis is removed from the result. 0-d
 * operands, different inner sizes, or bool operands are errors. */
KILN_API kiln_tensor *kiln_matmul(kiln_tensor *a, kiln_tensor *b);

/* ---- Other ---------------------------------------------------------------- */

/* Converts to dtype: float to integer truncates toward zero and saturates at
 * the integer's range (NaN gives 0), anything to bool is != 0, integers wrap
 * to a narrower width, and floats round to nearest even. */
KILN_API kiln_tensor *kiln_cast(kiln_tensor *t, kiln_dtype dtype);

/* Reinterprets the bits of each element as dtype, of the same size, as C's
 * memcpy between them: f32 <-> i32, f64 <-> i64, i8 <-> u8, f16 <-> bf16
 * (kiln has no 16-bit integer type), and any dtype to itself (t). bool
 * takes part only as itself, since its other bit patterns are not values.
 * Lazy and elementwise: it fuses with its neighbours, in one kernel with
 * them, and costs one move (the half types, which compute as f32, a few
 * integer ops more). NaN payloads pass through the compiled executors; the
 * float64 reference evaluator and constant folding may quiet a signalling
 * NaN and give an f16 NaN its canonical payload. Another size, bool with
 * another dtype, or an unknown dtype is KILN_ERR_DTYPE, naming both dtypes.
 * Not differentiable: no gradient flows through it (a bitcast between the
 * half types passes a zero gradient). */
KILN_API kiln_tensor *kiln_bitcast(kiln_tensor *t, kiln_dtype dtype);

/* dst takes src's value, lazily: src broadcasts to dst's shape and converts to
 * dst's dtype. From then on the handle dst refers to the new value, and the
 * next sync point of the context realizes it, whatever else that sync asks
 * for. Tensors derived from dst earlier keep the old value. Returns KILN_OK or
 * the error; on error dst is untouched and kiln_ctx_last_error says why. */
KILN_API kiln_status kiln_assign(kiln_tensor *dst, kiln_tensor *src);

/* ---- Queries -------------------------------------------------------------- */

KILN_API int kiln_ndim(const kiln_tensor *t);
/* The sizes of t, valid as long as t is; NULL for a NULL handle. */
KILN_API const int64_t *kiln_shape(const kiln_tensor *t);
KILN_API int64_t kiln_numel(const kiln_tensor *t);
KILN_API kiln_dtype kiln_dtype_of(const kiln_tensor *t);
KILN_API kiln_ctx *kiln_ctx_of(const kiln_tensor *t);

/* ---- Sync points ---------------------------------------------------------- */

/* Computes t and every pending assignment of its context. */
KILN_API kiln_status kiln_realize(kiln_tensor *t);
/* Realizes t and copies it to dst, row-major in t's dtype; nbytes must be
 * exactly numel * kiln_dtype_size (KILN_ERR_ARG otherwise). */
KILN_API kiln_status kiln_to_host(kiln_tensor *t, void *dst, size_t nbytes);
/* Realizes a one-element tensor and puts its value, as a double, in *out.
 * Returns KILN_OK, t's own error, the sync's failure, or KILN_ERR_ARG for a
 * NULL t or out or a tensor of more or fewer elements; on failure *out (if
 * any) is NaN and kiln_error_message(t) says why. */
KILN_API kiln_status kiln_item(kiln_tensor *t, double *out);
/* Realizes every pending assignment of the context. */
KILN_API kiln_status kiln_sync(kiln_ctx *ctx);

/* ---- Errors --------------------------------------------------------------- */

/* KILN_OK, or the status of the error t carries: the first error of the ops
 * that made it, else the failure of its last sync. */
KILN_API kiln_status kiln_error(const kiln_tensor *t);
/* The message of that error ("" when there is none), valid as long as t is. */
KILN_API const char *kiln_error_message(const kiln_tensor *t);

/* The message of the last error recorded in ctx (an op's, a sync's, or a
 * failed kiln_assign's), or "" when there has been none. */
KILN_API const char *kiln_ctx_last_error(const kiln_ctx *ctx);

/* ---- Scopes and ownership ------------------------------------------------- */

/* Opens a scope: every handle made until the matching kiln_scope_end is
 * released then, except those passed to kiln_keep. Scopes nest. */
KILN_API void kiln_scope_begin(kiln_ctx *ctx);
KILN_API void kiln_scope_end(kiln_ctx *ctx);
/* Moves t to the enclosing scope so that the current scope's end does not
 * release it (at the outermost level it lives until released). Returns t. */
KILN_API kiln_tensor *kiln_keep(kiln_tensor *t);
/* Releases a handle now. The graph nodes it needs live while other handles or
 * nodes need them. NULL is a no-op. */
KILN_API void kiln_release(kiln_tensor *t);

/* ---- Exchanging tensors with other libraries (DLPack, api/dlpack.c) -------
 * DLPack's DLManagedTensor is declared by dlpack/dlpack.h (version 0.6 or
 * later), which only a caller of these two functions needs to include. Its
 * dtypes map to kiln's as float 16/32/64, bfloat 16, int 32/64, uint 8 and
 * bool (code 6, kDLBool of DLPack 0.8 on, 8 bits: what NumPy and PyTorch
 * exchange; an incoming bool is always copied, each byte read as != 0). */
struct DLManagedTensor;

/* Realizes t (a sync point) and hands it over as a DLPack tensor in *out,
 * contiguous row-major (strides given), byte_offset 0, zero-copy: *out
 * shares t's buffer, holding a reference of its own on it, so writes through
 * either are seen by the other (and by every tensor sharing that buffer), and
 * the memory stays valid after kiln_release(t) and even after
 * kiln_ctx_free, until the DLPack deleter runs. On a device whose buffers are
 * host memory (KILN_CPU, KILN_REF) it is on kDLCPU; on KILN_CUDA it is
 * kDLCUDA (device_id the GPU's ordinal), the GPU's memory, for a GPU library
 * to read in place (kiln_to_host copies to the host). The caller owns *out and frees it by calling its
 * deleter once, on the context's thread while the context lives (buffers'
 * reference counts are the context's, not atomic), from one thread at a time
 * after. Returns KILN_OK, t's own error, the sync's failure, KILN_ERR_ARG
 * (NULL t or out) or KILN_ERR_OOM; on failure *out (if any) is NULL and
 * kiln_ctx_last_error says why. */
KILN_API kiln_status kiln_to_dlpack(kiln_tensor *t, struct DLManagedTensor **out);

/* A tensor of ctx holding the DLPack tensor m, whose ownership it takes: m's
 * deleter (unless NULL) is called exactly once, on every path, errors
 * included — when the tensor's buffer is released if kiln kept m's memory,
 * else before this returns. The memory is used in place (zero-copy, and
 * writes by m's producer are then seen by kiln) when ctx's buffers are host
 * memory, m is on kDLCPU or kDLCUDAHost, contiguous row-major (strides NULL
 * or those of a row-major array; a size-1 axis's stride is free), and its
 * first element 64-byte aligned, the alignment of kiln's own buffers; any
 * other host tensor is copied, gathered through its strides and byte_offset.
 * A kDLCUDA tensor is used in place by a KILN_CUDA context of the same GPU,
 * when it is contiguous row-major. Errors give an error handle (NULL only
 * when ctx is NULL): KILN_ERR_ARG for a NULL m, NULL data or shape where
 * there are elements or axes, or a strided kDLCUDA tensor; KILN_ERR_DEVICE
 * for a kDLCUDA tensor into any other context, or memory that is neither the
 * host's nor a GPU's (naming the device type); KILN_ERR_DTYPE for a dtype
 * kiln lacks (naming code, bits and lanes); KILN_ERR_SHAPE for ndim outside
 * [0, KILN_MAX_DIMS], a negative size, or a size too large to address. */
KILN_API kiln_tensor *kiln_from_dlpack(kiln_ctx *ctx, struct DLManagedTensor *m);

/* ---- Autograd ------------------------------------------------------------- */

/* Gradients are lazy tensors like any other: kiln_backward adds the nodes that
 * compute them to the graph, so that the forward pass, the backward pass and
 * an optimiser's update compile together at the next sync point. Gradients
 * have their tensor's shape and dtype. Where several elements tie for a max
 * or min (kiln_max, kiln_min, kiln_maximum, kiln_minimum), they share the
 * gradient evenly; kiln_abs and kiln_relu have gradient 0 at 0. Comparisons,
 * argmax/argmin, integer and bool tensors, casts to them, the condition of
 * kiln_where and random numbers carry no gradient. */

/* Marks t, a tensor of a float dtype, as a leaf whose gradient kiln_backward
 * accumulates (on) or no longer accumulates (off; the gradient so far is
 * kept). Marking gives t a buffer of its own, so unless t is already data
 * (kiln_from_data) this is a sync point that realizes t; mark a tensor before
 * using it, as ops recorded earlier read its old value. Returns KILN_OK,
 * t's error, the sync's failure, KILN_ERR_DTYPE for an integer or bool tensor
 * or KILN_ERR_ARG for NULL; the message is kiln_ctx_last_error's. */
KILN_API kiln_status kiln_requires_grad(kiln_tensor *t, bool on);
/* Whether t is marked (false for NULL). */
KILN_API bool kiln_requires_grad_of(const kiln_tensor *t);

/* Differentiates loss (any shape: the seed is ones) with respect to every
 * marked leaf of its context that loss depends on, adding the lazy gradients
 * into each leaf's gradient; several calls accumulate. A leaf is not looked
 * through: what it was computed from gets nothing. Returns KILN_OK, loss's
 * own error when it carries one, KILN_ERR_DTYPE when loss is not a float, or
 * KILN_ERR_OOM; the message is kiln_ctx_last_error's. Nothing is computed. */
KILN_API kiln_status kiln_backward(kiln_tensor *loss);

/* A new handle (owned like any op result, by the current scope) to t's
 * accumulated gradient, or NULL if it has none. */
KILN_API kiln_tensor *kiln_grad(const kiln_tensor *t);

/* Drops t's accumulated gradient. NULL is a no-op. */
KILN_API void kiln_zero_grad(kiln_tensor *t);

/* Functional form: out[i] = d(sum of y * seed)/d xs[i] as new lazy handles
 * (owned by the current scope) with xs[i]'s shape and dtype; seed NULL means
 * ones, else it broadcasts to y's shape and converts to y's dtype. The
 * results are differentiable again (Hessian-vector products), and xs[i] may
 * be any tensor y is computed from (the derivative is the total one, through
 * the other xs too). A tensor that y does not depend on gets zeros. y, seed
 * and the xs must be floats of one context. On failure every out[i] is NULL
 * and the status (y's, seed's or an xs[i]'s own error, KILN_ERR_DTYPE,
 * KILN_ERR_SHAPE naming the seed's and y's shapes, KILN_ERR_ARG) comes back
 * with its message in kiln_ctx_last_error. */
KILN_API kiln_status kiln_gradients(kiln_tensor *y, const kiln_tensor *seed, int n,
                                    kiln_tensor *const *xs, kiln_tensor **out);

/* Ops recorded between these calls give tensors that autograd treats as
 * constants (optimiser updates, running statistics). They nest; an end
 * without a begin is a no-op. */
KILN_API void kiln_no_grad_begin(kiln_ctx *ctx);
KILN_API void kiln_no_grad_end(kiln_ctx *ctx);

/* A tensor with t's value that autograd treats as a constant (NULL for a NULL
 * handle; t's error passes on). */
KILN_API kiln_tensor *kiln_detach(kiln_tensor *t);

/* ---- Neural-network ops ----------------------------------------------------
 * Each is composed from the ops above, so it fuses with its neighbours at a
 * sync point and is differentiated by the same rules. Tensor arguments must
 * be floating point (KILN_ERR_DTYPE otherwise) unless a paragraph says so; a
 * result has the promotion of the float arguments' dtypes. Optional arguments
 * may be NULL where a paragraph says so; any other NULL is KILN_ERR_ARG. A
 * handle in an error state passes its error on. Errors name the op and the
 * shapes. */

/* How a loss reduces its per-element values: their mean (the default of
 * PyTorch), their sum, or not at all. */
typedef enum kiln_reduction {
    KILN_REDUCTION_MEAN = 0,
    KILN_REDUCTION_SUM,
    KILN_REDUCTION_NONE,
} kiln_reduction;

/* x [..., in] @ w^T + b: w is [out, in], b is [out] or NULL; the result is
 * [..., out]. x needs at least one dimension; other shapes are
 * KILN_ERR_SHAPE. */
KILN_API kiln_tensor *kiln_linear(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b);

/* 2-d cross-correlation, as PyTorch's conv2d: x [N, C, H, W], w [OC, C/groups,
 * KH, KW], b [OC] or NULL; the result is [N, OC, OH, OW] with OH = (H +
 * 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1 (rounded down), OW likewise.
 * The input is zero-padded; input channel group g (of C/groups channels)
 * feeds output channels g*OC/groups to (g+1)*OC/groups - 1. Strides, dilations
 * and groups must be >= 1 and paddings >= 0 (KILN_ERR_ARG); C and OC must be
 * multiples of groups and the padded input at least as large as the dilated
 * kernel (KILN_ERR_SHAPE). Computed as one matrix product of w with the
 * im2col matrix [N, groups, C/groups*KH*KW, OH*OW], which is materialised. */
KILN_API kiln_tensor *kiln_conv2d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                                  int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                  int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups);

/* Pooling over the last two axes of x [N, C, H, W] or [C, H, W] with a
 * kernel_h x kernel_w window moved by (stride_h, stride_w) over the input
 * padded by pad_h and pad_w on both sides: OH = (H + 2*pad_h - kernel_h) /
 * stride_h + 1 (rounded down), OW likewise. Kernel sizes and strides must be
 * >= 1 and each padding at most half its kernel size (KILN_ERR_ARG), as in
 * PyTorch. kiln_max_pool2d pads with -inf, so padding never wins a window;
 * the elements that tie for a window's maximum share its gradient (evenly
 * where the windows tile the input, stride = kernel and no padding, as
 * kiln_max's; kiln_max_pool2d_ex gives it to the first, as PyTorch does).
 * kiln_avg_pool2d pads with zeros and always divides by kernel_h*kernel_w,
 * counting the padding (PyTorch's count_include_pad=True). */
KILN_API kiln_tensor *kiln_max_pool2d(kiln_tensor *x, int64_t kernel_h, int64_t kernel_w,
                                      int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                      int64_t pad_w);
KILN_API kiln_tensor *kiln_avg_pool2d(kiln_tensor *x, int64_t kernel_h, int64_t kernel_w,
                                      int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                      int64_t pad_w);
/* The 1-d versions over x [N, C, L] (weight [OC, C/groups, K]): the 2-d ops
 * over a height of 1, with the same rules and padding on both ends; the
 * result is [N, OC or C, OL]. */
KILN_API kiln_tensor *kiln_conv1d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, int64_t stride,
                                  int64_t pad, int64_t dilation, int64_t groups);
KILN_API kiln_tensor *kiln_max_pool1d(kiln_tensor *x, int64_t kernel, int64_t stride,
                                      int64_t pad);
KILN_API kiln_tensor *kiln_avg_pool1d(kiln_tensor *x, int64_t kernel, int64_t stride,
                                      int64_t pad);

/* ---- More convolution and pooling (api/conv.c) -----------------------------
 * Composed like the ops above (pads, strided slices and cats; per
 * convolution one im2col view and one matmul), so they fuse and are
 * differentiable. Parameter arrays
 * hold one entry per spatial axis in order (D, H, W); a NULL array is
 * KILN_ERR_ARG. */

/* 3-d cross-correlation, as PyTorch's conv3d: x [N, C, D, H, W], w [OC,
 * C/groups, KD, KH, KW], b [OC] or NULL; the result is [N, OC, OD, OH, OW]
 * with each size (in + 2*pad - dil*(k-1) - 1) / stride + 1 (rounded down).
 * The rules and errors of kiln_conv2d; the im2col matrix [N, groups,
 * C/groups*KD*KH*KW, OD*OH*OW] is materialised. */
KILN_API kiln_tensor *kiln_conv3d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                                  const int64_t *stride, const int64_t *pad,
                                  const int64_t *dilation, int64_t groups);

/* Transposed convolutions, as PyTorch's conv_transpose1d/2d/3d (the
 * gradient of the convolution with respect to its input): x [N, C, s...], w
 * [C, OC/groups, k...], b [OC] or NULL; the result is [N, OC, o...] with o =
 * (s-1)*stride - 2*pad + dil*(k-1) + output_padding + 1 per axis. Input
 * channel group g feeds output channels g*OC/groups to (g+1)*OC/groups - 1.
 * Strides, dilations and groups must be >= 1, paddings and output paddings
 * >= 0, and each output padding smaller than its stride or its dilation
 * (KILN_ERR_ARG); C must be a multiple of groups and equal w's first size,
 * and every output size >= 1 (KILN_ERR_SHAPE). Computed as the forward
 * convolution, with the kernel flipped and its channels swapped, of the
 * input with stride - 1 zeros between neighbours, padded by dil*(k-1) - pad
 * (plus output_padding after; cut where negative): the zeros are
 * multiplied too, stride^nsp times the work of a scatter. */
KILN_API kiln_tensor *kiln_conv_transpose1d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                                            int64_t stride, int64_t pad, int64_t output_padding,
                                            int64_t dilation, int64_t groups);
KILN_API kiln_tensor *kiln_conv_transpose2d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                                            const int64_t *stride, const int64_t *pad,
                                            const int64_t *output_padding,
                                            const int64_t *dilation, int64_t groups);
KILN_API kiln_tensor *kiln_conv_transpose3d(kiln_tensor *x, kiln_tensor *w, kiln_tensor *b,
                                            const int64_t *stride, const int64_t *pad,
                                            const int64_t *output_padding,
                                            const int64_t *dilation, int64_t groups);

/* Pooling with PyTorch's options over the last 1, 2 or 3 axes of x [N, C,
 * s...] or [C, s...]: windows of kernel elements (spaced by dilation, max
 * only) moved by stride over the input padded by pad on both sides; o =
 * (in + 2*pad - dil*(k-1) - 1) / stride + 1 per axis, rounded down, or with
 * ceil_mode rounded up unless that last window would start past the input
 * and its left padding (in + pad). Kernel sizes, strides and dilations must
 * be >= 1 and each padding at most half its kernel size (KILN_ERR_ARG); a
 * window that does not fit is KILN_ERR_SHAPE.
 * Max pooling keeps the first maximum of each window in row-major window
 * order (NaN wins), which also takes the whole gradient; with indices not
 * NULL, *indices gets the i64 flat index of that element within its input
 * plane (of H*W, or D*H*W, or L elements), PyTorch's return_indices (NULL
 * on failure). A window with no element above -inf reports its first
 * position inside the input.
 * Average pooling divides each window's sum by its size clipped to the
 * padded input (count_include_pad) or to the input alone. */
KILN_API kiln_tensor *kiln_max_pool1d_ex(kiln_tensor *x, int64_t kernel, int64_t stride,
                                         int64_t pad, int64_t dilation, bool ceil_mode,
                                         kiln_tensor **indices);
KILN_API kiln_tensor *kiln_avg_pool1d_ex(kiln_tensor *x, int64_t kernel, int64_t stride,
                                         int64_t pad, bool ceil_mode, bool count_include_pad);
KILN_API kiln_tensor *kiln_max_pool2d_ex(kiln_tensor *x, const int64_t *kernel,
                                         const int64_t *stride, const int64_t *pad,
                                         const int64_t *dilation, bool ceil_mode,
                                         kiln_tensor **indices);
KILN_API kiln_tensor *kiln_avg_pool2d_ex(kiln_tensor *x, const int64_t *kernel,
                                         const int64_t *stride, const int64_t *pad,
                                         bool ceil_mode, bool count_include_pad);
KILN_API kiln_tensor *kiln_max_pool3d(kiln_tensor *x, const int64_t *kernel,
                                      const int64_t *stride, const int64_t *pad,
                                      const int64_t *dilation, bool ceil_mode,
                                      kiln_tensor **indices);
KILN_API kiln_tensor *kiln_avg_pool3d(kiln_tensor *x, const int64_t *kernel,
                                      const int64_t *stride, const int64_t *pad, bool ceil_mode,
                                      bool count_include_pad);

/* The inverses of the max pools with indices, as PyTorch's max_unpool1d/2d/
 * 3d: x [N, C, s...] or [C, s...] (s... being L, or H, W, or D, H, W) and
 * indices (i32, i64 or u8, of x's shape) give [..., out...] zeros with each
 * x element put at its flat index within its plane of out_l, out_h*out_w or
 * out[0]*out[1]*out[2] elements (kiln_max_unpool3d's out holds (D, H, W)),
 * the indices kiln_max_pool1d_ex, kiln_max_pool2d_ex, kiln_max_pool3d and
 * the adaptive max pools return; elements with the same index add up. x of
 * another rank, or indices of another shape, are KILN_ERR_SHAPE; indices of
 * another dtype KILN_ERR_DTYPE; realized indices outside [0, plane) are
 * KILN_ERR_ARG, a size below 1 or a NULL out too. One kiln_scatter_add,
 * one kernel (the zeros fuse into it); differentiable in x (a gather of the
 * gradient at the indices). */
KILN_API kiln_tensor *kiln_max_unpool1d(kiln_tensor *x, kiln_tensor *indices, int64_t out_l);
KILN_API kiln_tensor *kiln_max_unpool2d(kiln_tensor *x, kiln_tensor *indices, int64_t out_h,
                                        int64_t out_w);
KILN_API kiln_tensor *kiln_max_unpool3d(kiln_tensor *x, kiln_tensor *indices, const int64_t *out);

/* Adaptive pooling, as PyTorch's: over x [N, C, L] or [C, L] (1d), [N, C,
 * H, W] or [C, H, W] (2d), or [N, C, D, H, W] or [C, D, H, W] (3d) to the
 * given output sizes, output i of an axis covering input elements
 * floor(i*in/out) to ceil((i+1)*in/out) - 1. Sizes below 1 or an empty
 * spatial axis are KILN_ERR_ARG, another rank KILN_ERR_SHAPE. Average
 * pooling is one matmul per axis with an [out, in] matrix built here; max
 * pooling is one max per output position per axis and a cat. */
KILN_API kiln_tensor *kiln_adaptive_avg_pool1d(kiln_tensor *x, int64_t out_l);
KILN_API kiln_tensor *kiln_adaptive_avg_pool2d(kiln_tensor *x, int64_t out_h, int64_t out_w);
KILN_API kiln_tensor *kiln_adaptive_avg_pool3d(kiln_tensor *x, int64_t out_d, int64_t out_h,
                                               int64_t out_w);
KILN_API kiln_tensor *kiln_adaptive_max_pool1d(kiln_tensor *x, int64_t out_l);
KILN_API kiln_tensor *kiln_adaptive_max_pool2d(kiln_tensor *x, int64_t out_h, int64_t out_w);
KILN_API kiln_tensor *kiln_adaptive_max_pool3d(kiln_tensor *x, int64_t out_d, int64_t out_h,
                                               int64_t out_w);
/* Adaptive max pooling with PyTorch's return_indices: the values of
 * kiln_adaptive_max_pool1d/2d, and, with indices not NULL, *indices gets the
 * i64 flat index within its input plane (of L or H*W elements) of the
 * element each output took (NULL on failure): the first maximum in
 * row-major window order, NaN winning, which also takes the whole gradient.
 * A window with several NaNs reports its first (PyTorch's loop reports its
 * last; the value is NaN either way). The errors of
 * kiln_adaptive_max_pool1d/2d. Computed over the flattened plane as one
 * index_select of every window's taps (padded to the largest window by
 * repeating its last row and column), an argmax over them, a lookup of the
 * flat index and a gather of x there: one kernel for values and indices
 * together when x is realized. */
KILN_API kiln_tensor *kiln_adaptive_max_pool1d_ex(kiln_tensor *x, int64_t out_l,
                                                  kiln_tensor **indices);
KILN_API kiln_tensor *kiln_adaptive_max_pool2d_ex(kiln_tensor *x, int64_t out_h, int64_t out_w,
                                                  kiln_tensor **indices);

/* Resizing of x [N, C, L] (ndim_spatial 1), [N, C, H, W] (2) or [N, C, D,
 * H, W] (3) to sizes (ndim_spatial entries), as PyTorch's interpolate with
 * size given: KILN_INTERP_NEAREST takes input floor(o * in/out) (single
 * precision, as PyTorch); KILN_INTERP_LINEAR (linear, bilinear, trilinear)
 * and KILN_INTERP_BICUBIC (2 spatial axes only; Keys' cubic with A = -0.75)
 * read the source point o*(in-1)/(out-1) with align_corners, else (o +
 * 0.5)*in/out - 0.5 (linear clamps it at 0), the neighbours clamped to the
 * border. Separable: nearest is one kiln_index_select per axis, the others
 * one matmul per axis with an [out, in] weight matrix built here (the depth
 * axis transposed into place for it): a kernel per axis, trilinear three.
 * Another ndim_spatial, bicubic over 1 or 3 axes, align_corners with
 * nearest, an unknown mode, NULL sizes or a size below 1 are KILN_ERR_ARG;
 * x of the wrong rank KILN_ERR_SHAPE.
 *
 * kiln_interpolate_scale is PyTorch's interpolate with scale_factor: each
 * output size is floor(in * scale_factors[d]) (in double precision); with
 * recompute_scale_factor the result is kiln_interpolate's to those sizes;
 * without it (PyTorch's default) the source points use 1/scale_factors[d]
 * in place of in/out: in single precision for nearest, as in/out is there,
 * and ignored with align_corners, which still maps corners onto corners.
 * The factors differ from in/out only when in * factor is not an integer.
 * A NULL array, a factor that is not finite and > 0, or one that gives a
 * size below 1, is KILN_ERR_ARG; otherwise kiln_interpolate's rules. */
typedef enum kiln_interp_mode {
    KILN_INTERP_NEAREST = 0,
    KILN_INTERP_LINEAR,
    KILN_INTERP_BICUBIC,
} kiln_interp_mode;
KILN_API kiln_tensor *kiln_interpolate(kiln_tensor *x, int ndim_spatial, const int64_t *sizes,
                                       kiln_interp_mode mode, bool align_corners);
KILN_API kiln_tensor *kiln_interpolate_scale(kiln_tensor *x, int ndim_spatial,
                                             const double *scale_factors, kiln_interp_mode mode,
                                             bool align_corners, bool recompute_scale_factor);

/* Normalises x over its last n axes (1 <= n <= ndim(x), KILN_ERR_ARG
 * otherwise): (x - mean) / sqrt(var + eps) with the biased variance, then
 * times weight and plus bias, each of shape x.shape[-n:] or NULL. eps must be
 * finite and >= 0 (KILN_ERR_ARG). */
KILN_API kiln_tensor *kiln_layer_norm(kiln_tensor *x, int n, kiln_tensor *weight,
                                      kiln_tensor *bias, double eps);

/* Batch normalisation of x [N, C, ...] per channel (axis 1), as PyTorch's
 * batch_norm. running_mean, running_var, weight and bias are [C]; weight and
 * bias may be NULL. In training it normalises by the batch's mean and biased
 * variance over every axis but 1 and, when running_mean and running_var are
 * not NULL, updates them lazily with kiln_assign: running = (1 - momentum) *
 * running + momentum * batch value, with the unbiased variance for
 * running_var, recorded under kiln_no_grad_begin so that no gradient flows
 * through the running statistics; a batch with one value per channel is
 * KILN_ERR_SHAPE. In eval
 * (training false) it normalises by running_mean and running_var, which are
 * then required. momentum must lie in [0, 1] and eps be finite and >= 0
 * (KILN_ERR_ARG). */
KILN_API kiln_tensor *kiln_batch_norm(kiln_tensor *x, kiln_tensor *running_mean,
                                      kiln_tensor *running_var, kiln_tensor *weight,
                                      kiln_tensor *bias, bool training, double momentum,
                                      double eps);

/* exp(x) / sum(exp(x)) along axis, and its logarithm, computed from x minus
 * its maximum along the axis so that large values do not overflow; softmax
 * multiplies by the reciprocal of each sum (within 1.5 ulp of the quotient
 * of the rounded exp and sum). Same shape as x; an axis out of range is
 * KILN_ERR_ARG. */
KILN_API kiln_tensor *kiln_softmax(kiln_tensor *x, int axis);
KILN_API kiln_tensor *kiln_log_softmax(kiln_tensor *x, int axis);

/* The negative log-likelihood of class targets under logits: for row i,
 * -log_softmax(logits)[i, targets[i]]. logits is [N, C]; targets is [N] of
 * i32 or i64 (KILN_ERR_DTYPE otherwise) holding class indices. The result is
 * 0-d (mean over N, or sum) or [N] (KILN_REDUCTION_NONE). A target outside
 * [0, C) is KILN_ERR_ARG when targets already holds data (bound with
 * kiln_from_data, or computed, as in eager mode); otherwise it cannot be seen
 * when the op is recorded, and that row contributes 0 (its class matches no
 * column), while a mean still divides by N. */
KILN_API kiln_tensor *kiln_cross_entropy(kiln_tensor *logits, kiln_tensor *targets,
                                         kiln_reduction reduction);

/* (a - b)^2 elementwise, reduced by reduction; a and b must have the same
 * shape (KILN_ERR_SHAPE). */
KILN_API kiln_tensor *kiln_mse_loss(kiln_tensor *a, kiln_tensor *b, kiln_reduction reduction);

/* An ignore_index that ignores nothing. */
#define KILN_IGNORE_NONE INT64_MIN

/* Cross-entropy with PyTorch's options (api/loss.c). logits are [N, C] or
 * [N, C, d...] (classes on axis 1), targets [N] or [N, d...] of i32 or i64
 * class indices; weight [C] (or NULL) weighs each class; rows whose target
 * is ignore_index (KILN_IGNORE_NONE: none) contribute 0 and no weight;
 * label_smoothing e in [0, 1] mixes in the uniform distribution: row i's
 * loss is (1 - e) w[t_i] (-log p_i[t_i]) + e / C sum_c w[c] (-log p_i[c]).
 * KILN_REDUCTION_MEAN divides the sum by the sum of the rows' w[t_i] (NaN
 * when every row is ignored, as PyTorch); KILN_REDUCTION_NONE gives the
 * targets' shape. A realized target outside [0, C) that is not ignore_index
 * is KILN_ERR_ARG; a lazy one matches no class and adds 0 (and, with a
 * weight, no weight). Computed from reductions of the logits (log-sum-exp,
 * the target's logit, the weighted row sum): no [rows, C] log-softmax is
 * materialised. kiln_nll_loss takes log-probabilities (say, kiln_log_softmax
 * along axis 1) in place of logits, with the same rules and no smoothing. */
KILN_API kiln_tensor *kiln_cross_entropy_ex(kiln_tensor *logits, kiln_tensor *targets,
                                            kiln_tensor *weight, int64_t ignore_index,
                                            double label_smoothing, kiln_reduction reduction);
KILN_API kiln_tensor *kiln_nll_loss(kiln_tensor *log_probs, kiln_tensor *targets,
                                    kiln_tensor *weight, int64_t ignore_index,
                                    kiln_reduction reduction);

/* Binary cross-entropy of targets y in [0, 1] under logits x (same shape),
 * in PyTorch's stable form (1 - y) x + (1 + (pw - 1) y) log(1 + exp(-x)),
 * times weight; weight and pos_weight (pw, the positive class's weight,
 * typically [C] over the last axis) may be NULL and must broadcast to x's
 * shape (KILN_ERR_SHAPE). Exact for large |x| (no log of 0). */
KILN_API kiln_tensor *kiln_binary_cross_entropy_with_logits(kiln_tensor *logits,
                                                            kiln_tensor *targets,
                                                            kiln_tensor *weight,
                                                            kiln_tensor *pos_weight,
                                                            kiln_reduction reduction);

/* KL divergence of target from input, PyTorch's kl_div: input holds
 * log-probabilities; pointwise t log t - t x with 0 log 0 = 0 (a negative
 * target gives NaN), or exp(t) (t - x) with log_target. Same shapes.
 * KILN_REDUCTION_MEAN averages over every element (PyTorch's "mean"); for
 * its "batchmean", divide the KILN_REDUCTION_SUM by the batch size. */
KILN_API kiln_tensor *kiln_kl_div(kiln_tensor *input, kiln_tensor *target, bool log_target,
                                  kiln_reduction reduction);

/* Huber: 0.5 d^2 where |d| < delta, else delta (|d| - delta / 2), d = a - b
 * (delta finite and > 0). Smooth L1: 0.5 d^2 / beta where |d| < beta, else
 * |d| - beta / 2 (beta finite and >= 0; 0 is the L1 loss). Same shapes
 * (KILN_ERR_SHAPE), bad parameters KILN_ERR_ARG. */
KILN_API kiln_tensor *kiln_huber_loss(kiln_tensor *a, kiln_tensor *b, double delta,
                                      kiln_reduction reduction);
KILN_API kiln_tensor *kiln_smooth_l1_loss(kiln_tensor *a, kiln_tensor *b, double beta,
                                          kiln_reduction reduction);

/* The tanh approximation of GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 * x^3))). kiln_gelu is the exact erf form. */
KILN_API kiln_tensor *kiln_gelu_tanh(kiln_tensor *x);

/* Hard swish, x * min(max(x + 3, 0), 6) / 6 (MobileNetV3; PyTorch's
 * hardswish). Its gradient is that of the composition: 0 below -3, 1 above
 * 3, (2x + 3) / 6 between. */
KILN_API kiln_tensor *kiln_hardswish(kiln_tensor *x);

/* In training, zeroes each element of x with probability p and scales the
 * others by 1/(1-p); the mask is kiln_rand(seed) >= p over x's shape (f32
 * draws), so a seed gives the same mask on every device and in every mode.
 * Out of training, or with p 0, the result is x. p outside [0, 1) is
 * KILN_ERR_ARG. */
KILN_API kiln_tensor *kiln_dropout(kiln_tensor *x, double p, uint64_t seed, bool training);

/* Rows of weight [V, D] picked by indices (i32, i64 or u8, any shape; other
 * dtypes are KILN_ERR_DTYPE): the result is indices.shape + [D] in weight's
 * dtype. A gather of rows (kiln_gather): one load per result element,
 * whatever V is. Its gradient with respect to weight is a scatter-add of
 * the rows (kiln_scatter_add's kernel: numel(indices) * D steps after
 * zeroing the [V, D] result, never a [..., V] one-hot tensor or matmul).
 * An index outside [0, V) is KILN_ERR_ARG when indices already holds data;
 * otherwise it gives a row of zeros. */
KILN_API kiln_tensor *kiln_embedding(kiln_tensor *indices, kiln_tensor *weight);

/* softmax(q @ k^T * scale) @ v over the last two axes: q [..., L, D], k [...,
 * S, D], v [..., S, Dv] with batch axes that broadcast; the result is [...,
 * L, Dv]. scale 0 means 1/sqrt(D); it must be finite (KILN_ERR_ARG). causal
 * masks key j for query i when j > i (the top-left aligned lower triangle of
 * PyTorch's is_causal), with -inf before the softmax. Grouped-query heads:
 * when k and v have Hkv > 1 heads on axis -3 and q has a multiple Hq of them,
 * each kv head serves Hq / Hkv consecutive query heads (PyTorch's
 * enable_gqa); they are repeated, not copied per element.
 * In f32 and f64 on KILN_CPU (through cc), KILN_CUDA and KILN_REF this is one
 * fused kernel that never stores the [L, S] scores (online softmax), and its
 * gradient two more that recompute them from q, k and each row's stored
 * log-sum-exp (FlashAttention's scheme); elsewhere, and with
 * KILN_FUSED_ATTENTION=0, it is recorded as the scores, their softmax and
 * two products. The fused backward is not differentiated again: a second
 * derivative through it is KILN_ERR_ARG naming it (kiln_attention with a
 * mask records the decomposed form, which is). */
KILN_API kiln_tensor *kiln_scaled_dot_product_attention(kiln_tensor *q, kiln_tensor *k,
                                                        kiln_tensor *v, bool causal,
                                                        double scale);
/* The same with a mask (NULL: none) broadcasting to the scores [..., L, S]:
 * bool keeps the scores where true and puts -inf where false (PyTorch's
 * boolean attn_mask); q's float dtype is added to the scores. A query whose
 * keys are all masked gets NaN, as in PyTorch. Other dtypes are
 * KILN_ERR_DTYPE, other shapes KILN_ERR_SHAPE. */
KILN_API kiln_tensor *kiln_attention(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v,
                                     kiln_tensor *mask, bool causal, double scale);

/* ---- Optimisers and checkpoints -------------------------------------------- */

/* Checkpoints are safetensors files, which other frameworks read and write:
 * an 8-byte little-endian header length, a JSON header mapping each name to
 * {"dtype", "shape", "data_offsets"} (dtypes F32 F64 F16 BF16 I32 I64 U8
 * BOOL), then the tensors' raw little-endian data, each after the other
 * (kiln writes the widest dtypes first, so that each is aligned). On
 * failure these functions return the status and kiln_ctx_last_error of the
 * tensors' context (or ctx) says why: a file that cannot be read or written,
 * is truncated, or whose header is malformed, names an unknown dtype, or has
 * offsets that overlap, leave holes, fall outside the data or do not match
 * the shape and dtype is KILN_ERR_IO with the path and what is wrong. */

/* Writes n tensors under n distinct, non-empty names (not "__metadata__",
 * which the format reserves; KILN_ERR_ARG otherwise) to path. A sync point:
 * the tensors, which must share one context, are realized first. The file is
 * written under a temporary name and renamed, so path holds either the old
 * file or the whole new one. */
KILN_API kiln_status kiln_save(const char *path, int n, const char *const *names,
                               kiln_tensor *const *tensors);

/* Loads every tensor of a file, in the header's order: *n of them, with
 * malloc'd arrays *names (each name malloc'd: free with kiln_free_names) and
 * *tensors (new handles in ctx, holding realized data; free the array with
 * free). On failure *n is 0 and both arrays are NULL. A "__metadata__" entry
 * is checked (an object of strings) and skipped. */
KILN_API kiln_status kiln_load(kiln_ctx *ctx, const char *path, int *n, char ***names,
                               kiln_tensor ***tensors);

/* Loads the named tensors of a file into existing tensors of one context,
 * lazily, as kiln_assign does. Each must be in the file with the
 * destination's dtype (KILN_ERR_DTYPE otherwise) and shape (KILN_ERR_SHAPE);
 * the message names the tensor and the expected and found dtype and shape.
 * Nothing is assigned unless every tensor can be. */
KILN_API kiln_status kiln_load_into(const char *path, int n, const char *const *names,
                                    kiln_tensor *const *tensors);

/* Frees the names kiln_load returned. NULL is a no-op. */
KILN_API void kiln_free_names(int n, char **names);

/* An optimiser updates a fixed list of parameters (float tensors of one
 * context, each at most once) from their gradients (kiln_grad), with
 * PyTorch's equations. A step records the updates with kiln_assign inside a
 * no-grad scope and computes nothing: the next sync point runs them with the
 * forward and backward passes, fused into their kernels. The learning rate
 * and Adam's bias corrections enter each step as fresh 0-d inputs rather
 * than constants, so every step has the same graph structure and replays the
 * program the first one compiled even as the learning rate changes. The
 * optimiser keeps the parameters' handles, which must stay alive (not
 * released, nor ended with a scope) until it is freed; its own state lives
 * until kiln_optim_free, which must come before kiln_ctx_free. State and
 * arithmetic are f64 for f64 parameters and f32 for the others (half types
 * included). A parameter with no gradient at a step is left alone, state and
 * step count included. The constructors put the new optimiser in *out and
 * return KILN_OK; on failure *out is NULL, kiln_ctx_last_error says why, and
 * the status is KILN_ERR_ARG for bad arguments (a NULL ctx or out;
 * non-finite or negative lr, momentum, weight_decay or eps; betas outside
 * [0, 1); Nesterov without momentum; a parameter that is NULL, of another
 * context, or listed twice), a parameter's own error when it carries one,
 * KILN_ERR_DTYPE for a parameter that is not a float, KILN_ERR_OOM. */
typedef struct kiln_optim kiln_optim;

/* SGD with momentum (dampening 0) and weight decay added to the gradient:
 * g += wd*p; buf = momentum*buf + g (buf = g at the first step); g = buf, or
 * g + momentum*buf with Nesterov; p -= lr*g. */
KILN_API kiln_status kiln_sgd_new(kiln_ctx *ctx, int n, kiln_tensor *const *params, double lr,
                                  double momentum, double weight_decay, bool nesterov,
                                  kiln_optim **out);
/* Adam with bias correction and weight decay added to the gradient (L2):
 * g += wd*p; m = beta1*m + (1-beta1)*g; v = beta2*v + (1-beta2)*g^2; p -=
 * lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps), t counting from 1. */
KILN_API kiln_status kiln_adam_new(kiln_ctx *ctx, int n, kiln_tensor *const *params, double lr,
                                   double beta1, double beta2, double eps, double weight_decay,
                                   kiln_optim **out);
/* AdamW: Adam with decoupled weight decay, p *= 1 - lr*wd before the update
 * and nothing added to the gradient. */
KILN_API kiln_status kiln_adamw_new(kiln_ctx *ctx, int n, kiln_tensor *const *params, double lr,
                                    double beta1, double beta2, double eps, double weight_decay,
                                    kiln_optim **out);
/* Records one update of every parameter that has a gradient. Lazy: a sync
 * point computes it. Returns KILN_OK, or the error of a gradient (then no
 * parameter changes) with kiln_ctx_last_error saying which; KILN_ERR_ARG for
 * NULL. */
KILN_API kiln_status kiln_optim_step(kiln_optim *o);
/* kiln_zero_grad of every parameter. */
KILN_API void kiln_optim_zero_grad(kiln_optim *o);
/* The learning rate of the next steps. KILN_ERR_ARG for a NULL optimiser or
 * a non-finite or negative lr (the old one stays, and kiln_ctx_last_error
 * says so). */
KILN_API kiln_status kiln_optim_set_lr(kiln_optim *o, double lr);
/* The learning rate, in *lr; KILN_ERR_ARG for a NULL o or lr. */
KILN_API kiln_status kiln_optim_lr(const kiln_optim *o, double *lr);
/* Frees the optimiser and its state; the parameters stay. NULL is a no-op. */
KILN_API void kiln_optim_free(kiln_optim *o);

/* Learning-rate schedules: the rate at step t (0-based; a negative t counts
 * as 0), to pass to kiln_optim_set_lr before each step. Pure arithmetic, so
 * that they compose; the NaN of a bad period is refused by kiln_optim_set_lr
 * with a status. */
/* base * gamma^floor(t / step_size); NaN when step_size < 1. */
KILN_API double kiln_lr_step(double base, int64_t t, int64_t step_size, double gamma);
/* Cosine annealing from base at t = 0 to min_lr at t = total: min_lr +
 * (base - min_lr) * (1 + cos(pi * t / total)) / 2, and min_lr after total;
 * NaN when total < 1. */
KILN_API double kiln_lr_cosine(double base, int64_t t, int64_t total, double min_lr);
/* Linear warmup: base * (t + 1) / warmup for t < warmup, then base. base may
 * be another schedule's value at t, so that
 * kiln_lr_warmup_linear(kiln_lr_cosine(lr, t, total, 0), t, warmup) ramps up
 * to the cosine curve and then follows it. */
KILN_API double kiln_lr_warmup_linear(double base, int64_t t, int64_t warmup);

/* Loss scaling for f16 training, as PyTorch's GradScaler: the loss is
 * multiplied by a scale before kiln_backward so that small gradients do not
 * flush to zero in f16, and the step divides it out again. A scaled step is
 * recorded like any other and fuses with the backward pass; where any
 * gradient came out infinite or NaN it changes no parameter and no
 * optimiser state (a select in the update, not a sync), and the scaler
 * learns so when it next needs to, normally after the step's sync already
 * ran: then that step's count is taken back (Adam's bias correction is as
 * if it never happened), the scale is multiplied by backoff_factor, and
 * after growth_interval finite steps in a row by growth_factor. PyTorch's
 * defaults are 65536, 2, 0.5 and 2000. The optimisers it steps must outlive
 * it; free it before its context. Every function returns KILN_ERR_ARG for a
 * NULL scaler; the constructor's arguments must be: init_scale finite and >
 * 0, growth_factor finite and > 1, backoff_factor in (0, 1), growth_interval
 * >= 1 (KILN_ERR_ARG naming them otherwise). */
typedef struct kiln_grad_scaler kiln_grad_scaler;
KILN_API kiln_status kiln_grad_scaler_new(kiln_ctx *ctx, double init_scale, double growth_factor,
                                          double backoff_factor, int64_t growth_interval,
                                          kiln_grad_scaler **out);
KILN_API void kiln_grad_scaler_free(kiln_grad_scaler *s);
/* loss times the current scale, in f32 for a half loss (lazy). */
KILN_API kiln_tensor *kiln_grad_scaler_scale(kiln_grad_scaler *s, kiln_tensor *loss);
/* kiln_optim_step of o on the gradients divided by the scale, applied only
 * if all of them are finite. */
KILN_API kiln_status kiln_grad_scaler_step(kiln_grad_scaler *s, kiln_optim *o);
/* The scale the next kiln_grad_scaler_scale multiplies by, and the number
 * of steps skipped so far (each reads the last step's verdict: a sync if it
 * has not run yet). */
KILN_API kiln_status kiln_grad_scaler_get_scale(kiln_grad_scaler *s, double *scale);
KILN_API kiln_status kiln_grad_scaler_skipped(kiln_grad_scaler *s, int64_t *skipped);

/* ---- Profiling ------------------------------------------------------------ *
 * What ran, what each kernel fused, how long it took and how far it is from
 * the machine's limits. Every setting has an environment variable, read when
 * a context is made:
 *   KILN_DEBUG=N     the debug level on stderr (kiln_ctx_set_debug):
 *                    1  one line per sync: nodes captured, kernels, graph
 *                       cache hit or miss, build (or lookup) and run ms;
 *                       and before a miss, why: the first constant, shape,
 *                       dtype or view that differs from the most recent
 *                       program of the same structure (of the last 8), or
 *                       "a structure not seen before";
 *                    2  also one line per kernel launch: its name, grid
 *                       (program instances x tile; a row kernel's rows x
 *                       row length; a matmul's n x k x m and batch), time,
 *                       GFLOP/s, GB/s and % of the binding limit;
 *                    3  also, per compiled program, each kernel's fused graph
 *                       ops and its kernel IR;
 *                    4  also the generated source.
 *   KILN_TUNE=1      CPU matmul kernels have their blocking chosen by timing
 *                    variants on their real shapes the first time a program
 *                    holds them, the choice kept in the disk cache (a line
 *                    per kernel tuned at KILN_DEBUG >= 1; kiln_stats counts).
 *   KILN_PROFILE=f   profiles the context's whole life and writes a Chrome
 *                    trace to f when it is freed (kiln_profile_write_trace).
 *   KILN_DUMP=dir    writes each program's generated source (<key>.c, and
 *                    <key>.ll with KILN_CPU_COMPILER=llvm) and kernel IR
 *                    (<key>.ir) into dir when it is built, named by the cache
 *                    key of its code.
 * Kernel names say what they compute and over what: softmax's row kernel is
 * div_r4096x4096_k0 (its last op, r: a reduction kernel, e: elementwise, the
 * shape, its place in the program), a matmul with a bias and ReLU epilogue
 * matmul_add_relu_512x512x512_k0.
 *
 * Counting. A kernel's FLOPs per launch come from its IR: every arithmetic,
 * comparison or transcendental op (exp, tanh, ... count 1 each) and every
 * reduction step counts 1 per element it runs on; casts, selects and random
 * numbers count 0; a matmul adds 2*n*k*m per batch. Its bytes are each output
 * once plus, for each input, the elements its loads touch, at most the whole
 * input: an input read through a broadcast counts once, as if caches held
 * the repeats. The machine's limits are a STREAM-like triad's bandwidth and
 * an f32 FMA loop's peak, measured once per CPU model and thread count on
 * kiln's threads with kiln's compiler flags (about a second, the first time),
 * and kept in the cache directory (KILN_CACHE_DIR). A kernel's % of the
 * limit is the larger of GB/s over the bandwidth and GFLOP/s over the peak:
 * its time on the roofline over its measured time; the larger term is the
 * limit that binds ("memory" or "compute").
 *
 * Profiling costs nothing while off: kernels are timed only at debug level 2
 * and above or between kiln_profile_begin and kiln_profile_end. A KILN_REF
 * context compiles nothing: its level stays 0 and its profile is empty.
 * Functions that fail leave the reason in kiln_ctx_last_error. */

/* The debug level (0 off, 1-4 as above; a negative one is 0). */
KILN_API void kiln_ctx_set_debug(kiln_ctx *ctx, int level);
KILN_API int kiln_ctx_debug(const kiln_ctx *ctx);

/* This machine's limits as kiln measured them (see Counting above). On a
 * KILN_CUDA context they are the GPU's: cpu holds its name, threads its
 * multiprocessors, gbps the bandwidth of a device-to-device copy timed by
 * the device's events (bytes read plus written), gflops its f32 peak from
 * its properties (FMA lanes x clock x 2), triad_elems the copy's floats, and
 * kernels are timed by events on the device, not by the host's clock. */
typedef struct kiln_machine {
    char cpu[128];       /* "model name" of /proc/cpuinfo */
    int threads;         /* threads measured on: the context's (KILN_THREADS) */
    double gbps;         /* memory bandwidth: a[i] = b[i] + s*c[i], 12 bytes per element */
    double gflops;       /* f32 peak: 2 flops per FMA lane */
    int64_t triad_elems; /* elements per triad array, well beyond the last-level cache */
    int vector_bits;     /* width of the vectors the FMA loop ran on */
    double load;         /* the 1-minute load average when it was measured */
    int64_t measured_at; /* when (seconds since the epoch) */
} kiln_machine;
/* Measures the first time on a machine, then reads the cache (per CPU model
 * and thread count). A stored figure is measured again when it is over 30
 * days old, or when it was taken under load (a load average above half the
 * threads) and the machine is quiet now; the store keeps the best figure
 * seen, since a busy machine only ever measures low. KILN_ERR_DEVICE for a
 * KILN_REF context, KILN_ERR_COMPILE when the measuring code does not
 * compile, KILN_ERR_OOM without memory for the triad. */
KILN_API kiln_status kiln_machine_info(kiln_ctx *ctx, kiln_machine *m);
/* Measures now, whatever is stored, and returns this measurement (for a
 * benchmark that rates its figures against the limits of the same run); the
 * store keeps the better of it and what it held. */
KILN_API kiln_status kiln_machine_measure(kiln_ctx *ctx, kiln_machine *m);
/* The two figures of kiln_machine_info; either pointer may be NULL. */
KILN_API kiln_status kiln_machine_limits(kiln_ctx *ctx, double *gbps, double *gflops);

/* Starts a fresh profile (the previous one is dropped) that records every
 * kernel launch and sync until kiln_profile_end. Under KILN_PROFILE they
 * restart and stop the profile whose trace kiln_ctx_free writes. */
KILN_API kiln_status kiln_profile_begin(kiln_ctx *ctx);
KILN_API kiln_status kiln_profile_end(kiln_ctx *ctx);

/* One kernel's line of the profile. A kernel is one generated function: the
 * same code reached by several syncs or programs is one line. Strings live
 * until the next kiln_profile_begin or kiln_ctx_free. */
typedef struct kiln_kernel_profile {
    const char *name;
    const char *fused; /* graph ops computed in it, in order, counted: "sub exp max sum div" */
    const char *grid;  /* as at debug level 2 */
    const char *code;  /* its program's code: "compiled", "disk" (cache) or "memory" */
    const char *bound; /* "memory" or "compute"; "" when the limits are unknown */
    int64_t launches;
    int64_t graph_hits; /* launches by syncs whose graph was compiled before */
    double total_ms, mean_ms, min_ms, max_ms;
    double flops, bytes;  /* per launch */
    double gflops, gbps;  /* at the mean time */
    double pct_of_limit;  /* % of the binding limit at the mean time */
    double build_ms;      /* scheduling, generating and compiling (or loading) its program */
} kiln_kernel_profile;

/* Kernels in the last profile, in order of first launch. */
KILN_API int kiln_profile_count(const kiln_ctx *ctx);
/* Kernel i (0 <= i < kiln_profile_count, KILN_ERR_ARG otherwise). Measures
 * the machine's limits if needed; when they cannot be had, the figures come
 * without pct_of_limit and the status says why. */
KILN_API kiln_status kiln_profile_kernel(kiln_ctx *ctx, int i, kiln_kernel_profile *out);
/* The profile as a table, one line per kernel. */
KILN_API kiln_status kiln_profile_print(kiln_ctx *ctx, FILE *f);
/* The profile as JSON: {"machine": {cpu, threads, gbps, gflops} or null,
 * "kernels": [{name, fused, grid, launches, graph_hits, total_ms, mean_ms,
 * min_ms, max_ms, flops, bytes, gflops, gbps, build_ms, code, pct_of_limit,
 * bound}]}. KILN_ERR_IO, naming the path, when it cannot be written. */
KILN_API kiln_status kiln_profile_write_json(kiln_ctx *ctx, const char *path);
/* The profile as a Chrome trace (chrome://tracing, ui.perfetto.dev): a
 * complete event ("ph":"X", times in µs since kiln_profile_begin) per sync,
 * enclosing one for its build or lookup and one per kernel launch, whose args
 * hold the kernel's fused ops, grid, FLOPs, bytes, GFLOP/s, GB/s and % of the
 * limit. Launches beyond about a million are left out of the trace (but not
 * the profile). KILN_ERR_IO, naming the path, when it cannot be written. */
KILN_API kiln_status kiln_profile_write_trace(kiln_ctx *ctx, const char *path);

/* ---- Distributed: collectives between processes ------------------------ */

/* A program started by `mpirun -np N prog` runs N processes, the ranks of
 * one job. Each joins it with kiln_dist_init; collectives are then ops like
 * any other: lazy nodes, captured, compiled and replayed with the step, and
 * differentiable (the gradient of an all-reduce's sum is the all-reduce of
 * the gradient, of an all-gather a reduce-scatter, and so on). Every rank
 * must record the same collectives in the same order, on tensors of the same
 * dtype and shape: a rank that differs gets, on every rank, KILN_ERR_DIST at
 * the sync point, naming the ranks and what each has. No sync waits forever:
 * after KILN_DIST_TIMEOUT seconds (default 300) without an answer from every
 * rank (one died or stopped taking part) it fails with KILN_ERR_DIST, and the
 * context's collectives fail at once from then on. Note that mpirun itself
 * ends the whole job when a rank exits abnormally, unless started with
 * --enable-recovery. */
typedef enum kiln_dist_backend {
    KILN_DIST_MPI = 1,  /* MPI between CPU processes (Open MPI, loaded at run time) */
    KILN_DIST_NCCL = 2, /* NCCL between GPUs, bootstrapped over MPI: a KILN_CUDA context */
} kiln_dist_backend;

typedef enum kiln_reduce_op {
    KILN_REDUCE_SUM,
    KILN_REDUCE_MEAN, /* the sum divided by the world size: floating-point dtypes only */
    KILN_REDUCE_MAX,
    KILN_REDUCE_MIN,
} kiln_reduce_op;

/* Joins the job mpirun started. MPI is initialised unless the program did
 * that itself (then kiln leaves it initialised at the end); kiln_ctx_free
 * leaves the job (and a process cannot join again after its last context
 * left: MPI starts once). Unless KILN_THREADS is set, the context's CPU
 * threads become its share of the cores among the job's ranks on this
 * machine. KILN_ERR_DIST when MPI is not installed or the backend
 * cannot start, KILN_ERR_DEVICE for NCCL without a GPU context, KILN_ERR_ARG
 * for a context that has joined already or an unknown backend. */
KILN_API kiln_status kiln_dist_init(kiln_ctx *ctx, kiln_dist_backend backend);
/* This process's rank in [0, world size): -1 before kiln_dist_init. */
KILN_API int kiln_dist_rank(kiln_ctx *ctx);
/* The number of ranks: 1 before kiln_dist_init. */
KILN_API int kiln_dist_world_size(kiln_ctx *ctx);

/* Collectives over every rank of the job. Before kiln_dist_init they are
 * KILN_ERR_ARG. Every dtype; any shape and any view. */
/* Every rank gets the reduction over the ranks, elementwise. Sums of integers
 * wrap; bool's sum and max are "or", its min "and". */
KILN_API kiln_tensor *kiln_all_reduce(kiln_tensor *t, kiln_reduce_op op);
/* Every rank gets the ranks' tensors joined along axis, in rank order. */
KILN_API kiln_tensor *kiln_all_gather(kiln_tensor *t, int axis);
/* The reduction over the ranks, cut along axis into world-size equal pieces:
 * rank r gets piece r. The axis's size must be a multiple of the world size
 * (KILN_ERR_SHAPE otherwise). */
KILN_API kiln_tensor *kiln_reduce_scatter(kiln_tensor *t, kiln_reduce_op op, int axis);
/* Every rank gets root's tensor (KILN_ERR_ARG for a root outside the world). */
KILN_API kiln_tensor *kiln_broadcast(kiln_tensor *t, int root);

/* Data-parallel training: replaces the gradient of each of the n parameters
 * (those that have one) by its mean over the ranks, all in one sync's worth
 * of lazy collectives. Call it after kiln_backward and before the optimiser's
 * step: every rank then takes the same step. NULL entries are skipped. */
KILN_API kiln_status kiln_dist_average_gradients(int n, kiln_tensor *const *params);

/* ---- Debugging ------------------------------------------------------------ */

/* Writes the graph that t depends on as Graphviz DOT to path. */
KILN_API kiln_status kiln_dump_dot(const kiln_tensor *t, const char *path);
/* What a context's compiler has done so far. */
typedef struct kiln_stats {
    int64_t syncs;       /* compiled programs run */
    int64_t kernels;     /* kernel launches */
    int64_t compiles;    /* programs compiled from source */
    int64_t graph_hits;  /* syncs that reused the compiled program of an earlier
                            sync with the same graph structure (no scheduling,
                            no code generation: buffers are bound and run) */
    int64_t memory_hits; /* programs found already compiled in this process */
    int64_t size_shared; /* graph cache misses whose program reads some of its sizes at
                            run time (kiln_ctx_set_dynamic): compiled once for graphs
                            that differ only in them */
    int64_t disk_hits;   /* programs loaded from the disk cache (KILN_CACHE_DIR) */
    int64_t buffer_reuses; /* buffers of 64 KiB or more served by memory a released
                              tensor gave back (no fresh pages, no page faults) */
    int64_t buffer_allocations; /* ... and those that took fresh memory */
    int64_t pooled_bytes;  /* bytes kept for reuse now (KILN_POOL_MAX_BYTES bounds it) */
    int64_t collectives;   /* collective ops run since kiln_dist_init */
    int64_t collective_messages; /* the messages they travelled in: consecutive all-reduces
                                    share one (a data-parallel step's gradients, usually) */
    int64_t live_bytes;   /* the device's buffer memory held by tensors now (size classes;
                             the pooled bytes above not counted) */
    int64_t peak_bytes;   /* the most live_bytes has been since the context opened */
    int64_t memory_retries; /* allocations the device refused until the pooled bytes were
                               given back (then asked once more: out of memory only if
                               that failed too) */
    int64_t buffers_donated; /* outputs computed into the buffer of a tensor that nothing
                                could read after their sync (an optimiser's old moments,
                                replaced by kiln_assign): no allocation of their own */
    int64_t tuned;     /* kernels whose plan KILN_TUNE=1 chose by timing its variants */
    int64_t tune_hits; /* kernels that took a choice KILN_TUNE=1 made before (or made for
                          the same kernel elsewhere in their program) without timing */
} kiln_stats;
/* The counters of ctx (all zero for KILN_REF, which compiles nothing, except
 * the collectives'). */
KILN_API kiln_stats kiln_ctx_stats(const kiln_ctx *ctx);

/* Number of live graph nodes in the context (for leak checks and tests). */
KILN_API int64_t kiln_ctx_live_nodes(const kiln_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
