/* cstyle.c — primitives and immediates as C-family expressions. The
 * semantics are lower/lower.h's, made total: integer arithmetic goes through
 * the unsigned type of its width (wrapping, never signed overflow), division
 * and remainder test their divisor first, float max/min spell out their NaN
 * rule. */
#include <stdio.h>
#include <string.h>

#include "jit/cstyle/cstyle.h"

static bool is_float(kiln_dtype dt) { return graph_dtype_is_float(dt); }
static bool is_signed(kiln_dtype dt) { return dt == KILN_I32 || dt == KILN_I64; }

static const char *utype(const cstyle_target *t, kiln_dtype dt) {
    return dt == KILN_I64 ? t->u64 : dt == KILN_I32 ? t->u32 : t->u8;
}

bool cstyle_imm(const cstyle_target *t, kiln_dtype dt, graph_scalar v, char *out, size_t cap) {
    const char *ty = t->type[dt];
    int w;
    if (is_float(dt)) {
        if (v.f != v.f)
            w = snprintf(out, cap, "((%s)%s)", ty, t->nan);
        else if (v.f == __builtin_inf() || v.f == -__builtin_inf())
            w = snprintf(out, cap, "((%s)%s%s)", ty, v.f < 0 ? "-" : "", t->inf);
        else
            w = snprintf(out, cap, "((%s)%a)", ty, v.f);
    } else if (v.i == INT64_MIN) {
        w = snprintf(out, cap, "((%s)(-9223372036854775807LL - 1))", ty);
    } else {
        w = snprintf(out, cap, "((%s)%lldLL)", ty, (long long)v.i);
    }
    return w >= 0 && (size_t)w < cap;
}

static bool refuse(const lower_ins *ins, const lower_ins *x, char *msg, size_t mcap) {
    snprintf(msg, mcap, "kiln: the C-family renderer has no form of primitive %s on %s (operand %s)",
             lower_prim_name(x->prim), kiln_dtype_name(x->dt),
             x->a >= 0 ? kiln_dtype_name(ins[x->a].dt) : "none");
    return false;
}

void cstyle_refuse(const lower_ins *x, const char *target, char *msg, size_t mcap) {
    if (x->op == UOP_ALU || x->op == UOP_RAND)
        snprintf(msg, mcap, "kiln: the %s renderer cannot print %s %s of %s: no rule rewrote it "
                 "into primitives", target, lower_uop_name(x->op), graph_op_name(x->gop),
                 kiln_dtype_name(x->dt));
    else
        snprintf(msg, mcap, "kiln: the %s renderer cannot print uop %s of %s", target,
                 lower_uop_name(x->op), kiln_dtype_name(x->dt));
}

static const char *float_fn(lower_prim p) {
    switch (p) {
    case PRIM_ABS:
        return "fabs";
    case PRIM_SQRT:
        return "sqrt";
    case PRIM_EXP2:
        return "exp2";
    case PRIM_LOG2:
        return "log2";
    case PRIM_LOG:
        return "log";
    case PRIM_SIN:
        return "sin";
    case PRIM_COS:
        return "cos";
    case PRIM_FLOOR:
        return "floor";
    case PRIM_TRUNC:
        return "trunc";
    default:
        return NULL;
    }
}

static const char *binary_op(lower_prim p) {
    switch (p) {
    case PRIM_ADD:
        return "+";
    case PRIM_SUB:
        return "-";
    case PRIM_MUL:
        return "*";
    case PRIM_AND:
        return "&";
    case PRIM_OR:
        return "|";
    case PRIM_XOR:
        return "^";
    case PRIM_SHL:
        return "<<";
    case PRIM_SHR:
        return ">>";
    case PRIM_LT:
        return "<";
    case PRIM_LE:
        return "<=";
    case PRIM_EQ:
        return "==";
    case PRIM_NE:
        return "!=";
    default:
        return NULL;
    }
}

static bool float_prim(const cstyle_target *t, const lower_ins *x, char *out, size_t cap) {
    const char *sfx = x->dt == KILN_F64 ? "" : "f", *op = binary_op(x->prim), *f = float_fn(x->prim);
    int a = x->a, b = x->b, c = x->c, w = -1;
    (void)t;
    if (f)
        w = snprintf(out, cap, "%s%s(v%d)", f, sfx, a);
    else if (x->prim == PRIM_NEG)
        w = snprintf(out, cap, "(-v%d)", a);
    else if (x->prim == PRIM_DIV)
        w = snprintf(out, cap, "(v%d / v%d)", a, b);
    else if (op && x->prim <= PRIM_MUL)
        w = snprintf(out, cap, "(v%d %s v%d)", a, op, b);
    else if (x->prim == PRIM_FMA)
        w = snprintf(out, cap, "fma%s(v%d, v%d, v%d)", sfx, a, b, c);
    else if (x->prim == PRIM_MAX || x->prim == PRIM_MIN)
        w = snprintf(out, cap, "(v%d != v%d ? v%d : v%d != v%d ? v%d : v%d %s v%d ? v%d : v%d)", a,
                     a, a, b, b, b, a, x->prim == PRIM_MAX ? ">=" : "<=", b, a, b);
    return w >= 0 && (size_t)w < cap;
}

static bool int_prim(const cstyle_target *t, const lower_ins *x, char *out, size_t cap) {
    const char *ty = t->type[x->dt], *u = utype(t, x->dt), *op = binary_op(x->prim);
    bool s = is_signed(x->dt);
    int a = x->a, b = x->b, w = -1;
    switch (x->prim) {
    case PRIM_NEG:
        w = snprintf(out, cap, "((%s)(%s)(0 - (%s)v%d))", ty, u, u, a);
        break;
    case PRIM_ABS:
        w = s ? snprintf(out, cap, "((%s)(%s)(v%d < 0 ? 0 - (%s)v%d : (%s)v%d))", ty, u, a, u, a, u, a)
              : snprintf(out, cap, "v%d", a);
        break;
    case PRIM_DIV:
        w = s ? snprintf(out, cap, "(v%d == 0 ? (%s)0 : v%d == -1 ? (%s)(%s)(0 - (%s)v%d) : (%s)(v%d / v%d))",
                         b, ty, b, ty, u, u, a, ty, a, b)
              : snprintf(out, cap, "(v%d == 0 ? (%s)0 : (%s)(v%d / v%d))", b, ty, ty, a, b);
        break;
    case PRIM_MOD:
        w = s ? snprintf(out, cap, "(v%d == 0 || v%d == -1 ? (%s)0 : (%s)(v%d %% v%d))", b, b, ty,
                         ty, a, b)
              : snprintf(out, cap, "(v%d == 0 ? (%s)0 : (%s)(v%d %% v%d))", b, ty, ty, a, b);
        break;
    case PRIM_MAX:
    case PRIM_MIN:
        w = snprintf(out, cap, "(v%d %s v%d ? v%d : v%d)", a, x->prim == PRIM_MAX ? ">" : "<", b, a, b);
        break;
    case PRIM_ADD:
    case PRIM_SUB:
    case PRIM_MUL:
    case PRIM_AND:
    case PRIM_OR:
    case PRIM_XOR:
    case PRIM_SHL:
    case PRIM_SHR:
        w = snprintf(out, cap, "((%s)(%s)((%s)v%d %s (%s)v%d))", ty, u, u, a, op, u, b);
        break;
    default:
        break;
    }
    return w >= 0 && (size_t)w < cap;
}

static bool cast_prim(const cstyle_target *t, const lower_ins *ins, const lower_ins *x, char *out,
                      size_t cap) {
    kiln_dtype from = ins[x->a].dt, to = x->dt;
    int a = x->a, w;
    if (to == KILN_BOOL)
        w = snprintf(out, cap, "((%s)(v%d != 0))", t->type[to], a);
    else if (is_float(to) || is_float(from))
        w = snprintf(out, cap, "((%s)v%d)", t->type[to], a);
    else
        w = snprintf(out, cap, "((%s)(%s)(%s)v%d)", t->type[to], utype(t, to), t->u64, a);
    return w >= 0 && (size_t)w < cap;
}

static bool bitcast_prim(const cstyle_target *t, const lower_ins *ins, const lower_ins *x,
                         char *out, size_t cap) {
    kiln_dtype from = ins[x->a].dt, to = x->dt;
    const char *f = to == KILN_I32 && (from == KILN_F32 || from == KILN_F16 || from == KILN_BF16)
                        ? t->f32_bits
                    : to == KILN_F32 && from == KILN_I32 ? t->bits_f32
                    : to == KILN_I64 && from == KILN_F64 ? t->f64_bits
                    : to == KILN_F64 && from == KILN_I64 ? t->bits_f64
                                                         : NULL;
    int w = f ? snprintf(out, cap, "%s(v%d)", f, x->a) : -1;
    return w >= 0 && (size_t)w < cap;
}

bool cstyle_prim(const cstyle_target *t, const lower_ins *ins, int i, char *out, size_t cap,
                 char *msg, size_t mcap) {
    const lower_ins *x = &ins[i];
    bool ok = false;
    if (x->prim == PRIM_CAST) {
        ok = x->a >= 0 && cast_prim(t, ins, x, out, cap);
    } else if (x->prim == PRIM_BITCAST) {
        ok = x->a >= 0 && bitcast_prim(t, ins, x, out, cap);
    } else if (x->prim >= PRIM_LT && x->prim <= PRIM_NE) {
        int w = snprintf(out, cap, "((%s)(v%d %s v%d))", t->type[KILN_BOOL], x->a,
                         binary_op(x->prim), x->b);
        ok = w >= 0 && (size_t)w < cap;
    } else if (x->dt == KILN_BOOL) {
        bool logic = x->prim == PRIM_AND || x->prim == PRIM_OR || x->prim == PRIM_XOR;
        int w = logic ? snprintf(out, cap, "((%s)(v%d %s v%d))", t->type[KILN_BOOL], x->a,
                                 binary_op(x->prim), x->b)
                      : -1;
        ok = w >= 0 && (size_t)w < cap;
    } else if (x->prim >= 0 && x->prim < PRIM_NUM) {
        ok = is_float(x->dt) ? float_prim(t, x, out, cap) : int_prim(t, x, out, cap);
    }
    return ok || refuse(ins, x, msg, mcap);
}
