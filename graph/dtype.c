/* dtype.c — what every dtype is and how a scalar op behaves in it: sizes,
 * names and promotion, the f16/bf16 encodings, rounding, integer wrapping and saturation, and the
 * per-element semantics of every unary and binary op. Constant folding and
 * the reference evaluator both compute through here, so the two can never
 * disagree about a single element. */
#include <math.h>
#include <string.h>

#include "graph/graph.h"

/* Float dtypes as (significand bits including the implicit one, smallest
 * normal exponent, largest finite value). */
typedef struct float_format {
    int prec;
    int emin;
    double max;
} float_format;

static const float_format F16_FORMAT = {11, -14, 65504.0};
static const float_format BF16_FORMAT = {8, -126, 0x1.fep127};

size_t graph_dtype_size(kiln_dtype dt)
{
    switch (dt) {
    case KILN_F32:
    case KILN_I32:
        return 4;
    case KILN_F64:
    case KILN_I64:
        return 8;
    case KILN_F16:
    case KILN_BF16:
        return 2;
    case KILN_U8:
    case KILN_I8:
    case KILN_BOOL:
        return 1;
    }
    return 0;
}

const char *graph_dtype_name(kiln_dtype dt)
{
    static const char *const names[KILN_NUM_DTYPES] = {"f32", "f64", "f16", "bf16",
                                                       "i32", "i64", "u8",  "bool", "i8"};
    return (unsigned)dt < KILN_NUM_DTYPES ? names[dt] : "?";
}

/* A dtype's place in the promotion order; f16 and bf16 share one, and so do
 * u8 and i8 (neither holds the other's values; i32 holds both). */
static int dtype_rank(kiln_dtype dt)
{
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
    return 0;
}

kiln_dtype graph_dtype_promote(kiln_dtype a, kiln_dtype b)
{
    /* neither half type holds the other's values, f32 holds both */
    if ((a == KILN_F16 && b == KILN_BF16) || (a == KILN_BF16 && b == KILN_F16))
        return KILN_F32;
    if ((a == KILN_U8 && b == KILN_I8) || (a == KILN_I8 && b == KILN_U8))
        return KILN_I32; /* kiln has no i16, PyTorch's answer */
    return dtype_rank(a) >= dtype_rank(b) ? a : b;
}

bool graph_dtype_is_float(kiln_dtype dt)
{
    return dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
}

bool graph_dtype_is_signed(kiln_dtype dt)
{
    return dt == KILN_I8 || dt == KILN_I32 || dt == KILN_I64;
}

/* Round half to even of a value below 2^53 in magnitude, by hand so that the
 * result never depends on the caller's floating-point rounding mode. */
static double round_half_even(double x)
{
    double fl = floor(x);
    double frac = x - fl; /* exact, as |x| < 2^53 */
    if (frac > 0.5 || (frac == 0.5 && fmod(fl, 2.0) != 0.0))
        fl += 1.0;
    return fl;
}

/* Rounds v to the nearest value of fmt in one step (the quantum comes from
 * v's own exponent, clamped at the subnormal range), so that no intermediate
 * format can cause double rounding. */
static double round_to_format(double v, float_format fmt)
{
    if (!isfinite(v) || v == 0.0)
        return v;
    int e;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    int q = (e - 1 > fmt.emin ? e - 1 : fmt.emin) - (fmt.prec - 1);
    double r = ldexp(round_half_even(ldexp(v, -q)), q);
    if (fabs(r) > fmt.max)
        return copysign(INFINITY, v);
    return copysign(r, v); /* a negative value that rounds to zero is -0 */
}

double graph_round_f16(double v)
{
    return round_to_format(v, F16_FORMAT);
}

double graph_round_bf16(double v)
{
    return round_to_format(v, BF16_FORMAT);
}

static double round_to_dtype(double v, kiln_dtype dt)
{
    switch (dt) {
    case KILN_F16:
        return graph_round_f16(v);
    case KILN_BF16:
        return graph_round_bf16(v);
    case KILN_F32:
        return (double)(float)v; /* the hardware conversion rounds to nearest even */
    default:
        return v;
    }
}

static int dtype_precision(kiln_dtype dt)
{
    switch (dt) {
    case KILN_F16:
        return F16_FORMAT.prec;
    case KILN_BF16:
        return BF16_FORMAT.prec;
    case KILN_F32:
        return 24;
    default:
        return 53;
    }
}

/* An int64 rounded to prec significant bits in integer arithmetic: going
 * through (double)x first would round twice for |x| > 2^53. */
static double int_to_precision(int64_t x, int prec)
{
    uint64_t m = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
    int len = 0;
    while (len < 64 && (m >> len) != 0)
        len++;
    int shift = len > prec ? len - prec : 0;
    if (shift > 0) {
        uint64_t rem = m & ((UINT64_C(1) << shift) - 1);
        uint64_t half = UINT64_C(1) << (shift - 1);
        m >>= shift;
        if (rem > half || (rem == half && (m & 1)))
            m++;
    }
    double r = ldexp((double)m, shift);
    return x < 0 ? -r : r;
}

/* Two's-complement wrap of a 64-bit pattern to dt's width. */
static int64_t wrap_int(uint64_t u, kiln_dtype dt)
{
    switch (dt) {
    case KILN_I32: {
        uint32_t w = (uint32_t)u;
        return w >= UINT32_C(0x80000000) ? (int64_t)w - INT64_C(0x100000000) : (int64_t)w;
    }
    case KILN_U8:
        return (int64_t)(u & 0xFF);
    case KILN_I8:
        return (int64_t)(u & 0xFF) - ((u & 0x80) ? 256 : 0);
    case KILN_BOOL:
        return u != 0;
    default:
        return u > (uint64_t)INT64_MAX ? -(int64_t)(~u) - 1 : (int64_t)u;
    }
}

/* Truncation toward zero, saturating at dt's range, NaN to 0. The bounds
 * compare after truncation so that, e.g., 255.7 still gives 255 for u8. */
static int64_t float_to_int(double v, kiln_dtype dt)
{
    if (dt == KILN_BOOL)
        return v != 0.0;
    if (isnan(v))
        return 0;
    int64_t lo, hi;
    switch (dt) {
    case KILN_I32:
        lo = INT32_MIN;
        hi = INT32_MAX;
        break;
    case KILN_U8:
        lo = 0;
        hi = 255;
        break;
    case KILN_I8:
        lo = -128;
        hi = 127;
        break;
    default:
        lo = INT64_MIN;
        hi = INT64_MAX;
        break;
    }
    double t = trunc(v);
    /* (double)INT64_MAX is 2^63, so ">=" is what keeps the cast below in range */
    if (t <= (double)lo)
        return lo;
    if (t >= (double)hi)
        return hi;
    return (int64_t)t;
}

graph_scalar graph_scalar_convert(graph_scalar v, bool from_float, kiln_dtype dt)
{
    graph_scalar r;
    if (graph_dtype_is_float(dt)) {
        double d = from_float ? v.f : int_to_precision(v.i, dtype_precision(dt));
        r.f = round_to_dtype(d, dt);
    } else {
        r.i = from_float ? float_to_int(v.f, dt) : wrap_int((uint64_t)v.i, dt);
    }
    return r;
}

graph_scalar graph_scalar_from_double(double v, kiln_dtype dt)
{
    graph_scalar s = {.f = v};
    return graph_scalar_convert(s, true, dt);
}

double graph_scalar_to_double(graph_scalar v, kiln_dtype dt)
{
    return graph_dtype_is_float(dt) ? v.f : (double)v.i;
}

/* ---- half types ---- */

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Encodes a value that f16 holds exactly (or an infinity). */
static uint16_t f16_encode(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (isinf(a))
        return sign | 0x7C00;
    if (a < 0x1p-14)
        return sign | (uint16_t)(a * 0x1p24); /* subnormal (or zero): mant * 2^-24 */
    int e;
    double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    return sign | (uint16_t)((e + 14) << 10) | (uint16_t)((m * 2.0 - 1.0) * 1024.0);
}

static uint16_t f16_from_double(double v)
{
    if (isnan(v))
        return signbit(v) ? 0xFE00 : 0x7E00;
    return f16_encode(graph_round_f16(v));
}

uint16_t graph_f32_to_f16(float f)
{
    if (isnan(f)) {
        /* keep the payload's top bits so that every f16 NaN survives a round trip */
        uint32_t u = float_bits(f);
        uint16_t mant = (uint16_t)((u >> 13) & 0x3FF);
        return (uint16_t)((u >> 16) & 0x8000) | 0x7C00 | (mant ? mant : 0x200);
    }
    return f16_from_double(f);
}

float graph_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    if (exp == 0) {
        float f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    }
    if (exp == 0x1F)
        return bits_float(sign | 0x7F800000 | mant << 13);
    return bits_float(sign | (exp + 112) << 23 | mant << 13);
}

static uint16_t bf16_from_double(double v)
{
    if (isnan(v))
        return signbit(v) ? 0xFFC0 : 0x7FC0;
    /* every bf16 value is a float, so this cast is exact */
    return (uint16_t)(float_bits((float)graph_round_bf16(v)) >> 16);
}

uint16_t graph_f32_to_bf16(float f)
{
    if (isnan(f)) {
        uint16_t h = (uint16_t)(float_bits(f) >> 16);
        return (h & 0x7F) ? h : h | 0x40;
    }
    return bf16_from_double(f);
}

float graph_bf16_to_f32(uint16_t h)
{
    return bits_float((uint32_t)h << 16);
}

/* ---- memory ---- */

graph_scalar graph_scalar_load(const void *data, kiln_dtype dt, int64_t index)
{
    graph_scalar s;
    switch (dt) {
    case KILN_F32:
        s.f = ((const float *)data)[index];
        break;
    case KILN_F64:
        s.f = ((const double *)data)[index];
        break;
    case KILN_F16:
        s.f = graph_f16_to_f32(((const uint16_t *)data)[index]);
        break;
    case KILN_BF16:
        s.f = graph_bf16_to_f32(((const uint16_t *)data)[index]);
        break;
    case KILN_I32:
        s.i = ((const int32_t *)data)[index];
        break;
    case KILN_I64:
        s.i = ((const int64_t *)data)[index];
        break;
    case KILN_U8:
        s.i = ((const uint8_t *)data)[index];
        break;
    case KILN_I8:
        s.i = ((const int8_t *)data)[index];
        break;
    default:
        s.i = ((const uint8_t *)data)[index] != 0;
        break;
    }
    return s;
}

void graph_scalar_store(void *data, kiln_dtype dt, int64_t index, graph_scalar v)
{
    switch (dt) {
    case KILN_F32:
        ((float *)data)[index] = (float)v.f;
        break;
    case KILN_F64:
        ((double *)data)[index] = v.f;
        break;
    case KILN_F16:
        ((uint16_t *)data)[index] = f16_from_double(v.f);
        break;
    case KILN_BF16:
        ((uint16_t *)data)[index] = bf16_from_double(v.f);
        break;
    case KILN_I32:
        ((int32_t *)data)[index] = (int32_t)wrap_int((uint64_t)v.i, KILN_I32);
        break;
    case KILN_I64:
        ((int64_t *)data)[index] = v.i;
        break;
    case KILN_U8:
    case KILN_I8: /* the low 8 bits, which are the wrapped value either way */
        ((uint8_t *)data)[index] = (uint8_t)v.i;
        break;
    default:
        ((uint8_t *)data)[index] = v.i != 0;
        break;
    }
}

/* ---- unary ops ---- */

#define SQRT1_2 0.70710678118654752440

static double sigmoid(double x)
{
    /* exp of a non-positive argument only, so neither branch overflows */
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static double float_unary(graph_op op, double x)
{
    switch (op) {
    case GRAPH_NEG:
        return -x;
    case GRAPH_ABS:
        return fabs(x);
    case GRAPH_EXP:
        return exp(x);
    case GRAPH_LOG:
        return log(x);
    case GRAPH_SQRT:
        return sqrt(x);
    case GRAPH_RSQRT:
        return 1.0 / sqrt(x);
    case GRAPH_SIN:
        return sin(x);
    case GRAPH_COS:
        return cos(x);
    case GRAPH_TANH:
        return tanh(x);
    case GRAPH_SIGMOID:
        return sigmoid(x);
    case GRAPH_RELU:
        return x > 0.0 || isnan(x) ? x : 0.0;
    case GRAPH_GELU: {
        /* erfc(-z) is 1 + erf(z) without the cancellation for negative z.
         * In the tail erfc falls like exp(-z^2), so z's rounding would cost
         * 2 z^2 half-ulps: z is carried as hi + lo and erfc(hi) corrected by
         * its derivative (lower/rules_math.c does the same). */
        double hi = -x * SQRT1_2;
        double lo = fma(-x, SQRT1_2, -hi) + -x * -4.833646656726457e-17;
        lo = lo != lo ? 0.0 : lo; /* x = ±inf */
        double c = erfc(hi) - lo * 1.1283791670955126 * exp(-hi * hi);
        return c == 0.0 ? -0.0 : 0.5 * x * c; /* -inf * 0 would be NaN */
    }
    case GRAPH_SILU: {
        if (x >= 0.0 || isnan(x))
            return x / (1.0 + exp(-x));
        double e = exp(x);
        return e == 0.0 ? -0.0 : x * e / (1.0 + e); /* -inf * 0 would be NaN */
    }
    case GRAPH_RECIP:
        return 1.0 / x;
    case GRAPH_FLOOR:
        return floor(x);
    case GRAPH_CEIL:
        return ceil(x);
    case GRAPH_TRUNC:
        return trunc(x);
    case GRAPH_ROUND:
        return nearbyint(x); /* the default rounding mode: half to even */
    case GRAPH_TAN:
        return tan(x);
    case GRAPH_ASIN:
        return asin(x);
    case GRAPH_ACOS:
        return acos(x);
    case GRAPH_ATAN:
        return atan(x);
    case GRAPH_SINH:
        return sinh(x);
    case GRAPH_COSH:
        return cosh(x);
    case GRAPH_ASINH:
        return asinh(x);
    case GRAPH_ACOSH:
        return acosh(x);
    case GRAPH_ATANH:
        return atanh(x);
    case GRAPH_ERF:
        return erf(x);
    case GRAPH_ERFC:
        return erfc(x);
    case GRAPH_EXPM1:
        return expm1(x);
    case GRAPH_LOG1P:
        return log1p(x);
    default:
        return NAN; /* not a unary op */
    }
}

graph_scalar graph_scalar_unary(graph_op op, kiln_dtype in, kiln_dtype out, graph_scalar a)
{
    if (op == GRAPH_CAST)
        return graph_scalar_convert(a, graph_dtype_is_float(in), out);
    if (op == GRAPH_BITCAST) {
        /* through memory, as the kernels do: a stored f16 is its bits */
        unsigned char bits[8];
        graph_scalar_store(bits, in, 0, a);
        return graph_scalar_load(bits, out, 0);
    }
    if (graph_dtype_is_float(out))
        return graph_scalar_from_double(float_unary(op, graph_scalar_to_double(a, in)), out);
    graph_scalar r;
    uint64_t u = (uint64_t)a.i;
    switch (op) {
    case GRAPH_NEG:
        r.i = wrap_int(0 - u, out);
        break;
    case GRAPH_ABS:
        r.i = wrap_int(a.i < 0 ? 0 - u : u, out); /* INT64_MIN stays INT64_MIN */
        break;
    case GRAPH_RELU:
        r.i = a.i > 0 ? a.i : 0;
        break;
    case GRAPH_FLOOR:
    case GRAPH_CEIL:
    case GRAPH_TRUNC:
    case GRAPH_ROUND:
        r.i = a.i; /* an integer is its own rounding */
        break;
    case GRAPH_BITNOT:
        r.i = out == KILN_BOOL ? !a.i : wrap_int(~u, out);
        break;
    default:
        /* a float op asked for an integer result: compute, then truncate */
        r = graph_scalar_from_double(float_unary(op, (double)a.i), out);
        break;
    }
    return r;
}

/* ---- binary ops ---- */

static bool float_compare(graph_op op, double a, double b)
{
    switch (op) {
    case GRAPH_LT:
        return a < b;
    case GRAPH_LE:
        return a <= b;
    case GRAPH_GT:
        return a > b;
    case GRAPH_GE:
        return a >= b;
    case GRAPH_EQ:
        return a == b;
    default:
        return a != b;
    }
}

static bool int_compare(graph_op op, int64_t a, int64_t b)
{
    switch (op) {
    case GRAPH_LT:
        return a < b;
    case GRAPH_LE:
        return a <= b;
    case GRAPH_GT:
        return a > b;
    case GRAPH_GE:
        return a >= b;
    case GRAPH_EQ:
        return a == b;
    default:
        return a != b;
    }
}

static double float_binary(graph_op op, double a, double b)
{
    switch (op) {
    case GRAPH_ADD:
        return a + b;
    case GRAPH_SUB:
        return a - b;
    case GRAPH_MUL:
        return a * b;
    case GRAPH_DIV:
        return a / b;
    case GRAPH_POW:
        return pow(a, b);
    case GRAPH_MAXIMUM:
        return isnan(a) ? a : isnan(b) ? b : a >= b ? a : b;
    case GRAPH_MINIMUM:
        return isnan(a) ? a : isnan(b) ? b : a <= b ? a : b;
    case GRAPH_ATAN2:
        return atan2(a, b);
    case GRAPH_FMOD:
        return fmod(a, b);
    case GRAPH_MOD: {
        /* fmod is exact; moving it by b into b's sign rounds once (NumPy's and
         * PyTorch's remainder); a zero remainder takes b's sign */
        double r = fmod(a, b);
        if (r != 0 && (r < 0) != (b < 0))
            r += b;
        return r == 0 ? copysign(0.0, b) : r;
    }
    case GRAPH_COPYSIGN:
        return copysign(a, b);
    default:
        return NAN; /* not an arithmetic binary op */
    }
}

/* Floor division as NumPy's //; a zero divisor gives 0 instead of trapping,
 * and INT64_MIN / -1 wraps instead of trapping. */
static uint64_t int_floor_div(int64_t a, int64_t b)
{
    if (b == 0)
        return 0;
    if (b == -1)
        return 0 - (uint64_t)a;
    int64_t q = a / b;
    if (a % b != 0 && (a < 0) != (b < 0))
        q--;
    return (uint64_t)q;
}

/* Exponentiation by squaring in unsigned arithmetic, which wraps (signed
 * overflow would be undefined); the result's low bits are the same. */
static uint64_t int_pow(int64_t base, int64_t e)
{
    if (e < 0) {
        if (base == 1)
            return 1;
        if (base == -1)
            return ((uint64_t)e & 1) ? UINT64_MAX : 1;
        return 0;
    }
    uint64_t r = 1, b = (uint64_t)base;
    for (uint64_t k = (uint64_t)e; k != 0; k >>= 1) {
        if (k & 1)
            r *= b;
        b *= b;
    }
    return r;
}

/* C's remainder with a's sign; % 0 gives 0 and MIN % -1 gives 0, never a trap. */
static int64_t int_fmod(int64_t a, int64_t b)
{
    return b == 0 || b == -1 ? 0 : a % b;
}

static int dtype_bits(kiln_dtype dt)
{
    return dt == KILN_I64 ? 64 : dt == KILN_I32 ? 32 : 8;
}

/* Shifts by a count outside [0, width) are defined: 0, or for a right shift
 * of a negative signed value by width or more, -1 (all sign bits). */
static uint64_t int_shift(graph_op op, int64_t a, int64_t b, kiln_dtype dt)
{
    int w = dtype_bits(dt);
    if (b < 0)
        return 0;
    if (op == GRAPH_SHL)
        return b >= w ? 0 : (uint64_t)a << b;
    if (b >= w)
        return a < 0 ? UINT64_MAX : 0;
    return a < 0 ? ~(~(uint64_t)a >> b) : (uint64_t)a >> b;
}

static uint64_t int_binary(graph_op op, int64_t a, int64_t b, kiln_dtype dt)
{
    switch (op) {
    case GRAPH_FMOD:
        return (uint64_t)int_fmod(a, b);
    case GRAPH_MOD: {
        int64_t r = int_fmod(a, b);
        return (uint64_t)r + (r != 0 && (r < 0) != (b < 0) ? (uint64_t)b : 0);
    }
    case GRAPH_BITAND:
        return (uint64_t)a & (uint64_t)b;
    case GRAPH_BITOR:
        return (uint64_t)a | (uint64_t)b;
    case GRAPH_BITXOR:
        return (uint64_t)a ^ (uint64_t)b;
    case GRAPH_SHL:
    case GRAPH_SHR:
        return int_shift(op, a, b, dt);
    case GRAPH_ADD:
        return (uint64_t)a + (uint64_t)b;
    case GRAPH_SUB:
        return (uint64_t)a - (uint64_t)b;
    case GRAPH_MUL:
        return (uint64_t)a * (uint64_t)b;
    case GRAPH_DIV:
        return int_floor_div(a, b);
    case GRAPH_POW:
        return int_pow(a, b);
    case GRAPH_MAXIMUM:
        return (uint64_t)(a > b ? a : b);
    case GRAPH_MINIMUM:
        return (uint64_t)(a < b ? a : b);
    default:
        return 0; /* not an arithmetic binary op */
    }
}

graph_scalar graph_scalar_binary(graph_op op, kiln_dtype dt, graph_scalar a, graph_scalar b)
{
    graph_scalar r;
    bool fl = graph_dtype_is_float(dt);
    if (graph_op_is_compare(op))
        r.i = fl ? float_compare(op, a.f, b.f) : int_compare(op, a.i, b.i);
    else if (fl)
        r.f = round_to_dtype(float_binary(op, a.f, b.f), dt);
    else
        r.i = wrap_int(int_binary(op, a.i, b.i, dt), dt);
    return r;
}
