/* elementwise.c — unary, binary, scalar, comparison, where and cast ops: dtype
 * promotion and broadcasting, then one graph node each. */
#include <math.h>
#include <string.h>

#include "api/api.h"

/* ---- unary ---- */

static kiln_tensor *unary(const char *op, graph_op gop, kiln_tensor *t, bool float_only) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    graph_node *a = t->node;
    if (gop == GRAPH_NEG && a->dtype == KILN_BOOL)
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: cannot negate a bool tensor of shape %s", op,
                        api_shape_str(a));
    graph_node *in = (float_only && !graph_dtype_is_float(a->dtype)) ? graph_cast(a, KILN_F32)
                                                                      : graph_ref(a);
    graph_node *r = in ? graph_unary(gop, in) : NULL;
    graph_unref(in);
    return api_wrap(ctx, r, op);
}

kiln_tensor *kiln_neg(kiln_tensor *t) { return unary("kiln_neg", GRAPH_NEG, t, false); }
kiln_tensor *kiln_abs(kiln_tensor *t) { return unary("kiln_abs", GRAPH_ABS, t, false); }
kiln_tensor *kiln_relu(kiln_tensor *t) { return unary("kiln_relu", GRAPH_RELU, t, false); }
kiln_tensor *kiln_exp(kiln_tensor *t) { return unary("kiln_exp", GRAPH_EXP, t, true); }
kiln_tensor *kiln_log(kiln_tensor *t) { return unary("kiln_log", GRAPH_LOG, t, true); }
kiln_tensor *kiln_sqrt(kiln_tensor *t) { return unary("kiln_sqrt", GRAPH_SQRT, t, true); }
kiln_tensor *kiln_rsqrt(kiln_tensor *t) { return unary("kiln_rsqrt", GRAPH_RSQRT, t, true); }
kiln_tensor *kiln_sin(kiln_tensor *t) { return unary("kiln_sin", GRAPH_SIN, t, true); }
kiln_tensor *kiln_cos(kiln_tensor *t) { return unary("kiln_cos", GRAPH_COS, t, true); }
kiln_tensor *kiln_tanh(kiln_tensor *t) { return unary("kiln_tanh", GRAPH_TANH, t, true); }
kiln_tensor *kiln_sigmoid(kiln_tensor *t) { return unary("kiln_sigmoid", GRAPH_SIGMOID, t, true); }
kiln_tensor *kiln_gelu(kiln_tensor *t) { return unary("kiln_gelu", GRAPH_GELU, t, true); }
kiln_tensor *kiln_silu(kiln_tensor *t) { return unary("kiln_silu", GRAPH_SILU, t, true); }
kiln_tensor *kiln_recip(kiln_tensor *t) { return unary("kiln_recip", GRAPH_RECIP, t, true); }

kiln_tensor *kiln_cast(kiln_tensor *t, kiln_dtype dt) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check("kiln_cast", 1, &t, &ctx);
    if (e || !t)
        return e;
    if ((unsigned)dt >= KILN_NUM_DTYPES)
        return api_fail(ctx, KILN_ERR_DTYPE, "kiln_cast: unknown dtype %d", (int)dt);
    return api_wrap(ctx, graph_cast(t->node, dt), "kiln_cast");
}

kiln_tensor *kiln_bitcast(kiln_tensor *t, kiln_dtype dt) {
    const char *op = "kiln_bitcast";
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    graph_node *a = t->node;
    if ((unsigned)dt >= KILN_NUM_DTYPES)
        return api_fail(ctx, KILN_ERR_DTYPE, "kiln_bitcast: input %s %s: unknown dtype %d",
                        kiln_dtype_name(a->dtype), api_shape_str(a), (int)dt);
    if (dt != a->dtype && (graph_dtype_size(dt) != graph_dtype_size(a->dtype) ||
                           dt == KILN_BOOL || a->dtype == KILN_BOOL))
        return api_fail(ctx, KILN_ERR_DTYPE,
                        "kiln_bitcast: input %s %s: %s (%zu bytes) and %s (%zu bytes) %s",
                        kiln_dtype_name(a->dtype), api_shape_str(a), kiln_dtype_name(a->dtype),
                        graph_dtype_size(a->dtype), kiln_dtype_name(dt), graph_dtype_size(dt),
                        graph_dtype_size(dt) != graph_dtype_size(a->dtype)
                            ? "differ in size"
                            : "cannot share bits: bool's other patterns are not values");
    return api_wrap(ctx, graph_bitcast(a, dt), op);
}

/* ---- binary ---- */

/* a and b broadcast to one shape and converted to dt; the graph op on them. */
static kiln_tensor *combine(kiln_ctx *ctx, const char *op, graph_op gop, graph_node *a,
                            graph_node *b, kiln_dtype dt) {
    int nd;
    int64_t shp[KILN_MAX_DIMS];
    if (!api_broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &nd, shp))
        return api_fail(ctx, KILN_ERR_SHAPE, "%s: shapes %s and %s do not broadcast", op,
                        api_shape_str(a), api_shape_str(b));
    kiln_tensor *big = api_check_shape(op, ctx, nd, shp); /* [2^32, 1] + [1, 2^32] */
    if (big)
        return big;
    if (dt == KILN_BOOL && (gop == GRAPH_SUB || gop == GRAPH_DIV || gop == GRAPH_POW))
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: not defined for bool tensors (%s and %s)", op,
                        api_shape_str(a), api_shape_str(b));
    graph_node *ba = api_broadcast_to(a, nd, shp), *bb = api_broadcast_to(b, nd, shp);
    graph_node *ca = ba ? graph_cast(ba, dt) : NULL, *cb = bb ? graph_cast(bb, dt) : NULL;
    graph_node *r = ca && cb ? graph_binary(gop, ca, cb) : NULL;
    graph_unref(ba);
    graph_unref(bb);
    graph_unref(ca);
    graph_unref(cb);
    return api_wrap(ctx, r, op);
}

static const char *const class_names[] = {
    [API_ANY] = "any dtype",
    [API_FLOAT] = "a floating-point dtype",
    [API_BITS] = "an integer or bool dtype",
    [API_INTEGER] = "an integer dtype",
    [API_NUMBER] = "a number dtype (not bool)",
};

static bool in_class(kiln_dtype dt, api_dtypes c) {
    switch (c) {
    case API_BITS:
        return !graph_dtype_is_float(dt);
    case API_INTEGER:
        return !graph_dtype_is_float(dt) && dt != KILN_BOOL;
    case API_NUMBER:
        return dt != KILN_BOOL;
    default:
        return true;
    }
}

kiln_tensor *api_binary(const char *op, graph_op gop, kiln_tensor *a, kiln_tensor *b,
                        api_dtypes c) {
    kiln_tensor *args[2] = {a, b};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 2, args, &ctx);
    if (e || !a || !b)
        return e;
    kiln_dtype dt = graph_dtype_promote(a->node->dtype, b->node->dtype);
    if (c == API_FLOAT && !graph_dtype_is_float(dt))
        dt = KILN_F32;
    if (!in_class(dt, c))
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: %s and %s (%s and %s) need %s", op,
                        api_shape_str(a->node), api_shape_str(b->node),
                        kiln_dtype_name(a->node->dtype), kiln_dtype_name(b->node->dtype),
                        class_names[c]);
    return combine(ctx, op, gop, a->node, b->node, dt);
}

kiln_tensor *api_unary(const char *op, graph_op gop, kiln_tensor *t, api_dtypes c) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    if (c != API_FLOAT && !in_class(t->node->dtype, c))
        return api_fail(ctx, KILN_ERR_DTYPE, "%s: %s of shape %s; it needs %s", op,
                        kiln_dtype_name(t->node->dtype), api_shape_str(t->node), class_names[c]);
    return unary(op, gop, t, c == API_FLOAT);
}

static kiln_tensor *binary(const char *op, graph_op gop, kiln_tensor *a, kiln_tensor *b) {
    return api_binary(op, gop, a, b, API_ANY);
}

kiln_tensor *kiln_add(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_add", GRAPH_ADD, a, b); }
kiln_tensor *kiln_sub(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_sub", GRAPH_SUB, a, b); }
kiln_tensor *kiln_mul(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_mul", GRAPH_MUL, a, b); }
kiln_tensor *kiln_div(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_div", GRAPH_DIV, a, b); }
kiln_tensor *kiln_pow(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_pow", GRAPH_POW, a, b); }
kiln_tensor *kiln_maximum(kiln_tensor *a, kiln_tensor *b) {
    return binary("kiln_maximum", GRAPH_MAXIMUM, a, b);
}
kiln_tensor *kiln_minimum(kiln_tensor *a, kiln_tensor *b) {
    return binary("kiln_minimum", GRAPH_MINIMUM, a, b);
}
kiln_tensor *kiln_lt(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_lt", GRAPH_LT, a, b); }
kiln_tensor *kiln_le(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_le", GRAPH_LE, a, b); }
kiln_tensor *kiln_gt(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_gt", GRAPH_GT, a, b); }
kiln_tensor *kiln_ge(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_ge", GRAPH_GE, a, b); }
kiln_tensor *kiln_eq(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_eq", GRAPH_EQ, a, b); }
kiln_tensor *kiln_ne(kiln_tensor *a, kiln_tensor *b) { return binary("kiln_ne", GRAPH_NE, a, b); }

/* ---- scalar forms ---- */

static bool fits(double s, kiln_dtype dt) {
    switch (dt) {
    case KILN_BOOL:
        return s == 0 || s == 1;
    case KILN_U8:
        return s >= 0 && s <= 255;
    case KILN_I8:
        return s >= -128 && s <= 127;
    case KILN_I32:
        return s >= -2147483648.0 && s <= 2147483647.0;
    default:
        return s >= -9223372036854775808.0 && s < 9223372036854775808.0;
    }
}

/* The dtype a tensor of dtype t and a scalar s compute in (see kiln.h). A
 * comparison picks a dtype that holds s exactly, so that u8 < 300 is true. */
static kiln_dtype scalar_dtype(kiln_dtype t, double s, bool compare) {
    if (graph_dtype_is_float(t))
        return t;
    bool integral = isfinite(s) && s == floor(s);
    if (compare) {
        if (integral && fits(s, t))
            return t;
        return integral && fits(s, KILN_I64) ? KILN_I64 : KILN_F64;
    }
    if (!integral)
        return KILN_F32;
    return t == KILN_BOOL ? KILN_I64 : t;
}

/* Whether s enters the graph as a constant of its structure rather than a
 * bound 0-d input (see kiln.h): the values graph_binary folds on (x + 0,
 * x * 1, x / 1, x ** 1, and 0, 1, -1 as operands of the constant folds
 * autograd's rules rely on), and an integer pow's exponent, which
 * lower/rules_int.c's int_pow unrolls over its bits and a constant folds
 * to the few multiplies it needs. */
static bool scalar_is_literal(graph_op gop, kiln_dtype dt, double s) {
    if (s == 0 || s == 1 || s == -1)
        return true;
    return gop == GRAPH_POW && !graph_dtype_is_float(dt);
}

static kiln_tensor *with_scalar(const char *op, graph_op gop, kiln_tensor *t, double s,
                                bool literal) {
    kiln_ctx *ctx;
    kiln_tensor *e = api_check(op, 1, &t, &ctx);
    if (e || !t)
        return e;
    kiln_dtype dt = scalar_dtype(t->node->dtype, s, graph_op_is_compare(gop));
    graph_scalar v = api_scalar(s, dt);
    graph_node *c;
    if (literal || scalar_is_literal(gop, dt, s)) {
        /* in t's shape at once: the scalar's own 0-d node, made and freed
         * again each op, was a fifth of recording one */
        if (!(c = graph_full(ctx->g, dt, t->node->ndim, t->node->shape, v)))
            return api_wrap(ctx, NULL, op);
    } else {
        /* A bound input: the buffer holds the value, so a new value each
         * step reuses the compiled program (as kiln_rand's seed does). */
        unsigned char data[16];
        kiln_status st;
        char msg[256];
        graph_scalar_store(data, dt, 0, v);
        if (!(c = api_data_node(ctx, op, dt, 0, NULL, data, &st, msg, sizeof msg)))
            return api_fail(ctx, st, "%s", msg);
    }
    kiln_tensor *r = combine(ctx, op, gop, t->node, c, dt);
    graph_unref(c);
    return r;
}

kiln_tensor *kiln_add_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_add_scalar", GRAPH_ADD, t, s, false);
}
kiln_tensor *api_add_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_add_scalar", GRAPH_ADD, t, s, true);
}
kiln_tensor *kiln_sub_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_sub_scalar", GRAPH_SUB, t, s, false);
}
kiln_tensor *api_sub_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_sub_scalar", GRAPH_SUB, t, s, true);
}
kiln_tensor *kiln_mul_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_mul_scalar", GRAPH_MUL, t, s, false);
}
kiln_tensor *api_mul_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_mul_scalar", GRAPH_MUL, t, s, true);
}
kiln_tensor *kiln_div_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_div_scalar", GRAPH_DIV, t, s, false);
}
kiln_tensor *api_div_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_div_scalar", GRAPH_DIV, t, s, true);
}
kiln_tensor *kiln_pow_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_pow_scalar", GRAPH_POW, t, s, false);
}
kiln_tensor *api_pow_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_pow_scalar", GRAPH_POW, t, s, true);
}
kiln_tensor *kiln_maximum_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_maximum_scalar", GRAPH_MAXIMUM, t, s, false);
}
kiln_tensor *api_maximum_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_maximum_scalar", GRAPH_MAXIMUM, t, s, true);
}
kiln_tensor *kiln_minimum_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_minimum_scalar", GRAPH_MINIMUM, t, s, false);
}
kiln_tensor *api_minimum_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_minimum_scalar", GRAPH_MINIMUM, t, s, true);
}
kiln_tensor *kiln_lt_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_lt_scalar", GRAPH_LT, t, s, false);
}
kiln_tensor *api_lt_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_lt_scalar", GRAPH_LT, t, s, true);
}
kiln_tensor *kiln_le_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_le_scalar", GRAPH_LE, t, s, false);
}
kiln_tensor *api_le_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_le_scalar", GRAPH_LE, t, s, true);
}
kiln_tensor *kiln_gt_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_gt_scalar", GRAPH_GT, t, s, false);
}
kiln_tensor *api_gt_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_gt_scalar", GRAPH_GT, t, s, true);
}
kiln_tensor *kiln_ge_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_ge_scalar", GRAPH_GE, t, s, false);
}
kiln_tensor *api_ge_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_ge_scalar", GRAPH_GE, t, s, true);
}
kiln_tensor *kiln_eq_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_eq_scalar", GRAPH_EQ, t, s, false);
}
kiln_tensor *api_eq_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_eq_scalar", GRAPH_EQ, t, s, true);
}
kiln_tensor *kiln_ne_scalar(kiln_tensor *t, double s) {
    return with_scalar("kiln_ne_scalar", GRAPH_NE, t, s, false);
}
kiln_tensor *api_ne_literal(kiln_tensor *t, double s) {
    return with_scalar("kiln_ne_scalar", GRAPH_NE, t, s, true);
}

/* ---- where ---- */

kiln_tensor *kiln_where(kiln_tensor *cond, kiln_tensor *a, kiln_tensor *b) {
    kiln_tensor *args[3] = {cond, a, b};
    kiln_ctx *ctx;
    kiln_tensor *e = api_check("kiln_where", 3, args, &ctx);
    if (e || !cond || !a || !b)
        return e;
    graph_node *c = cond->node, *x = a->node, *y = b->node;
    int n1, nd;
    int64_t s1[KILN_MAX_DIMS], shp[KILN_MAX_DIMS];
    if (!api_broadcast_shape(c->ndim, c->shape, x->ndim, x->shape, &n1, s1) ||
        !api_broadcast_shape(n1, s1, y->ndim, y->shape, &nd, shp))
        return api_fail(ctx, KILN_ERR_SHAPE,
                        "kiln_where: shapes %s (condition), %s and %s do not broadcast",
                        api_shape_str(c), api_shape_str(x), api_shape_str(y));
    if ((e = api_check_shape("kiln_where", ctx, nd, shp)) != NULL)
        return e;
    kiln_dtype dt = graph_dtype_promote(x->dtype, y->dtype);
    graph_node *bc = api_broadcast_to(c, nd, shp), *bx = api_broadcast_to(x, nd, shp),
               *by = api_broadcast_to(y, nd, shp);
    graph_node *cc = bc ? graph_cast(bc, KILN_BOOL) : NULL;
    graph_node *cx = bx ? graph_cast(bx, dt) : NULL, *cy = by ? graph_cast(by, dt) : NULL;
    graph_node *r = cc && cx && cy ? graph_where(cc, cx, cy) : NULL;
    graph_node *tmp[6] = {bc, bx, by, cc, cx, cy};
    for (int i = 0; i < 6; i++)
        graph_unref(tmp[i]);
    return api_wrap(ctx, r, "kiln_where");
}
