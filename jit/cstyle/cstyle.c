/* cstyle.c — primitives and immediates as C-family expressions. The
 * semantics are lower/lower.h's, made total: integer arithmetic goes through
 * the unsigned type of its width (wrapping, never signed overflow), division
 * and remainder test their divisor first, float max/min spell out their NaN
 * rule. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cstyle/cstyle.h"

void cstyle_put(cstyle_buf *b, const char *fmt, ...) {
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->failed = true;
            return;
        }
        if (b->s && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 16384) + (size_t)w;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

void cstyle_refuse_buf(cstyle_buf *b, const char *why) {
    if (b->err && !b->failed)
        snprintf(b->err, b->errcap, "%s", why);
    b->failed = b->refused = true;
}

kiln_status cstyle_finish(cstyle_buf *b, const char *what, char **out) {
    *out = NULL;
    if (!b->failed) {
        *out = b->s;
        return KILN_OK;
    }
    free(b->s);
    if (b->refused)
        return KILN_ERR_COMPILE;
    if (b->err)
        snprintf(b->err, b->errcap, "kiln: out of memory while generating %s", what);
    return KILN_ERR_OOM;
}

static bool is_float(kiln_dtype dt) { return graph_dtype_is_float(dt); }
static bool is_signed(kiln_dtype dt) { return graph_dtype_is_signed(dt); }

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
             lower_prim_name(x->prim), graph_dtype_name(x->dt),
             x->a >= 0 ? graph_dtype_name(ins[x->a].dt) : "none");
    return false;
}

void cstyle_refuse(const lower_ins *x, const char *target, char *msg, size_t mcap) {
    if (x->op == UOP_ALU || x->op == UOP_RAND)
        snprintf(msg, mcap, "kiln: the %s renderer cannot print %s %s of %s: no rule rewrote it "
                 "into primitives", target, lower_uop_name(x->op), graph_op_name(x->gop),
                 graph_dtype_name(x->dt));
    else
        snprintf(msg, mcap, "kiln: the %s renderer cannot print uop %s of %s", target,
                 lower_uop_name(x->op), graph_dtype_name(x->dt));
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
    case PRIM_EXP:
        return "exp";
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

/* True when instruction i is a literal float immediate that is not NaN. */
static bool plain_float_imm(const lower_ins *ins, int i) {
    return i >= 0 && ins[i].op == UOP_IMM && !ins[i].sized && !isnan(ins[i].imm.f);
}

static bool float_prim(const cstyle_target *t, const lower_ins *ins, const lower_ins *x, char *out,
                       size_t cap) {
    const char *sfx = x->dt == KILN_F64 ? "" : "f", *op = binary_op(x->prim), *f = float_fn(x->prim);
    int a = x->a, b = x->b, c = x->c, w = -1;
    (void)t;
    const char *lib = lower_prim_libm(x->prim);
    if (lib && lower_prim_arity(x->prim) == 1)
        w = snprintf(out, cap, "%s%s(v%d)", lib, sfx, a);
    else if (lib)
        w = snprintf(out, cap, "%s%s(v%d, v%d)", lib, sfx, a, b);
    else if (f)
        w = snprintf(out, cap, "%s%s(v%d)", f, sfx, a);
    else if (x->prim == PRIM_NEG)
        w = snprintf(out, cap, "(-v%d)", a);
    else if (x->prim == PRIM_DIV)
        w = snprintf(out, cap, "(v%d / v%d)", a, b);
    else if (op && x->prim <= PRIM_MUL)
        w = snprintf(out, cap, "(v%d %s v%d)", a, op, b);
    else if (x->prim == PRIM_FMA)
        w = snprintf(out, cap, "fma%s(v%d, v%d, v%d)", sfx, a, b, c);
    else if ((x->prim == PRIM_MAX || x->prim == PRIM_MIN) && plain_float_imm(ins, b))
        /* against a literal that is not NaN (a clamp): one compare and one
         * select, which is maxps/minps's own form, a NaN a and ties giving
         * a; the general form below took two compares and two selects a
         * side (row softmax's two clamps of x - max: 8 instructions a
         * vector of its e^x pass on AVX2) */
        w = snprintf(out, cap, "(v%d %s v%d ? v%d : v%d)", b, x->prim == PRIM_MAX ? ">" : "<", a, b,
                     a);
    else if ((x->prim == PRIM_MAX || x->prim == PRIM_MIN) && plain_float_imm(ins, a))
        w = snprintf(out, cap, "(v%d %s v%d ? v%d : v%d)", a, x->prim == PRIM_MAX ? ">=" : "<=", b, a,
                     b);
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
    else if (from == KILN_BOOL)
        /* a select, not a conversion of the byte: gcc 12 left a loop
         * holding (float)(uint8_t) of a compare scalar ("no vectype":
         * a max-pool backward counting its ties: 3.5 -> 15.4 GB/s) */
        w = snprintf(out, cap, "(v%d ? (%s)1 : (%s)0)", a, t->type[to], t->type[to]);
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
        ok = is_float(x->dt) ? float_prim(t, ins, x, out, cap) : int_prim(t, x, out, cap);
    }
    return ok || refuse(ins, x, msg, mcap);
}

const char *cstyle_storage_type(const cstyle_target *t, kiln_dtype dt) {
    return dt == KILN_F16 || dt == KILN_BF16 ? t->u16 : t->type[dt];
}

const char *cstyle_round_half(kiln_dtype dt) {
    return dt == KILN_F16 ? "kh_rh" : dt == KILN_BF16 ? "kh_rb" : "";
}

void cstyle_store(kiln_dtype dt, const char *val, char *out, size_t cap) {
    if (dt == KILN_F16 || dt == KILN_BF16)
        snprintf(out, cap, "%s(%s)", dt == KILN_F16 ? "kh_f2h" : "kh_f2b", val);
    else
        snprintf(out, cap, "%s", val);
}

void cstyle_load(const cstyle_target *t, kiln_dtype dt, int buf, const char *idx, char *out,
                 size_t cap) {
    char name[32];
    snprintf(name, sizeof name, t->buffer, buf);
    if (dt == KILN_F16 || dt == KILN_BF16)
        snprintf(out, cap, "%s(%s[%s])", dt == KILN_F16 ? "kh_h2f" : "kh_b2f", name, idx);
    else
        snprintf(out, cap, "%s[%s]", name, idx);
}

bool cstyle_ins(const cstyle_target *t, const lower_ins *ins, int i, bool narrow, char *out,
                size_t cap, char *msg, size_t mcap) {
    const lower_ins *x = &ins[i];
    bool index = lower_uop_is_index(x->op);
    /* Index operands in int32 when narrow: 64-bit division by a constant
     * does not vectorise, and views make kernels full of it. */
    char it[32] = "";
    if (narrow)
        snprintf(it, sizeof it, "(%s)", t->type[KILN_I32]);
    char e[1024];
    bool ok = true;
    switch (x->op) {
    case UOP_GIDX:
    case UOP_RIDX:
        snprintf(e, sizeof e, "%s%s", it, x->op == UOP_GIDX ? "g" : "r");
        break;
    case UOP_TILE:
        snprintf(e, sizeof e, "%st", it);
        break;
    case UOP_LANE:
        snprintf(e, sizeof e, "%s%s", it, t->lane);
        break;
    case UOP_IMM:
        if (x->sized && is_float(x->dt))
            snprintf(e, sizeof e, "(%s)%s(S[%d])", t->type[x->dt], t->bits_f64, x->sized - 1);
        else if (x->sized)
            snprintf(e, sizeof e, "(%s)S[%d]", t->type[x->dt], x->sized - 1);
        else
            ok = cstyle_imm(t, x->dt, x->imm, e, sizeof e);
        break;
    case UOP_IADD:
    case UOP_IMUL:
    case UOP_IDIV:
    case UOP_IMOD: {
        const char *op = x->op == UOP_IADD ? "+" : x->op == UOP_IMUL ? "*" : x->op == UOP_IDIV ? "/" : "%";
        snprintf(e, sizeof e, "%sv%d %s %sv%d", it, x->a, op, it, x->b);
        break;
    }
    case UOP_ILT:
        snprintf(e, sizeof e, "(%s)(%sv%d < %sv%d)", t->u8, it, x->a, it, x->b);
        break;
    case UOP_AND:
        snprintf(e, sizeof e, "(%s)(v%d && v%d)", t->u8, x->a, x->b);
        break;
    case UOP_ICLAMP: {
        /* The value widened first: a u8 compared with 0 is always false, and
         * an i64 index must not be cut before it is clamped. */
        const char *w = t->type[KILN_I64];
        long long hi = x->imm.i > 0 ? (long long)x->imm.i - 1 : 0;
        snprintf(e, sizeof e, "%s((%s)v%d < 0 ? 0 : (%s)v%d > %lldLL ? %lldLL : (%s)v%d)", it, w,
                 x->a, w, x->a, hi, hi, w, x->a);
        break;
    }
    case UOP_IVALID:
        snprintf(e, sizeof e, "(%s)((%s)v%d >= 0 && (%s)v%d < %lldLL)", t->u8, t->type[KILN_I64],
                 x->a, t->type[KILN_I64], x->a, (long long)x->imm.i);
        break;
    case UOP_LOAD: {
        char idx[48], ld[160];
        /* A masked load reads index 0 where invalid, never out of bounds. */
        if (x->b >= 0)
            snprintf(idx, sizeof idx, "v%d ? v%d : 0", x->b, x->a);
        else
            snprintf(idx, sizeof idx, "v%d", x->a);
        cstyle_load(t, x->dt, x->buf, idx, ld, sizeof ld);
        if (x->b >= 0)
            snprintf(e, sizeof e, "v%d ? %s : (%s)0", x->b, ld, t->type[x->dt]);
        else
            snprintf(e, sizeof e, "%s", ld);
        break;
    }
    case UOP_ALU: /* lower_rules() left an op it has no rule for */
        ok = false;
        cstyle_refuse(x, t->name, msg, mcap);
        break;
    case UOP_PRIM:
        ok = cstyle_prim(t, ins, i, e, sizeof e, msg, mcap);
        break;
    case UOP_WHERE:
        snprintf(e, sizeof e, "v%d ? v%d : v%d", x->a, x->b, x->c);
        break;
    case UOP_REDUCE:
        snprintf(e, sizeof e, "acc");
        break;
    case UOP_ACC: {
        const char *r = cstyle_round_half(x->dt);
        char wrap[64] = "";
        if (x->dt == KILN_I32)
            snprintf(wrap, sizeof wrap, "(%s)(%s)", t->type[KILN_I32], t->u32);
        snprintf(e, sizeof e, "(%s)%s(dot)", t->type[x->dt], is_float(x->dt) ? r : wrap);
        break;
    }
    default:
        ok = false;
        cstyle_refuse(x, t->name, msg, mcap);
        break;
    }
    if (!ok)
        return false;
    /* Immediates are not const: a front end would fold them and warn about,
     * e.g., an unsigned compared with a constant 0. */
    const char *ty = t->type[index ? (narrow ? KILN_I32 : KILN_I64) : x->dt];
    int w = snprintf(out, cap, "%s%s v%d = %s;", x->op == UOP_IMM ? "" : "const ", ty, i, e);
    if (w < 0 || (size_t)w >= cap) {
        snprintf(msg, mcap, "kiln: the %s renderer's statement for %%%d is too long", t->name, i);
        return false;
    }
    return true;
}

const char *cstyle_size(cstyle_buf *b, const lower_kernel *k, const int64_t *field) {
    char *s = b->sizes[b->nsize++ % 8];
    int j = lower_size_index(k, field);
    if (j >= 0)
        snprintf(s, sizeof b->sizes[0], "S[%d]", j);
    else
        snprintf(s, sizeof b->sizes[0], "%lldLL", (long long)*field);
    return s;
}

const char *cstyle_size_product(cstyle_buf *b, const lower_kernel *k, int n,
                                const int64_t *fields) {
    char *s = b->sizes[b->nsize++ % 8];
    int64_t lit = 1;
    size_t len = 0;
    s[0] = '\0';
    for (int i = 0; i < n; i++) {
        int j = lower_size_index(k, &fields[i]);
        if (j < 0)
            lit *= fields[i];
        else if (len < sizeof b->sizes[0])
            len += (size_t)snprintf(s + len, sizeof b->sizes[0] - len, "S[%d] * ", j);
    }
    if (len >= sizeof b->sizes[0]) {
        /* more run-time sizes than one string holds: refused, never cut */
        cstyle_refuse_buf(b, "kiln: a product of too many run-time sizes");
        return "0";
    }
    snprintf(s + len, sizeof b->sizes[0] - len, "%lldLL", (long long)lit);
    return s;
}

void cstyle_sizes_decl(cstyle_buf *b, const lower_kernel *k, const char *indent) {
    if (k->nsizes)
        cstyle_put(b, "%sconst int64_t *const S = (const int64_t *)bufs[%d]; (void)S;\n", indent,
                   k->nouts + k->ninputs);
}

void cstyle_operand_offset(cstyle_buf *b, const cstyle_target *t, const char *indent,
                           const char *name, const lower_kernel *k, const lower_operand *o) {
    cstyle_put(b, "%sconst %s %s = %s", indent, t->type[KILN_I64], name, cstyle_size(b, k, &o->offset));
    for (int d = k->nbatch - 1; d >= 0; d--) {
        /* inner: the product of the batch sizes after d */
        if (o->batch_strides[d] && k->batch[d] > 1)
            cstyle_put(b, " + ((bt / (%s)) %% %s) * %s",
                       cstyle_size_product(b, k, k->nbatch - 1 - d, &k->batch[d + 1]),
                       cstyle_size(b, k, &k->batch[d]), cstyle_size(b, k, &o->batch_strides[d]));
    }
    cstyle_put(b, ";\n");
}

void cstyle_reduce_take(cstyle_buf *b, const char *indent, graph_op gop, bool is_float_in, int v) {
    const char *cmp = gop == GRAPH_RMAX || gop == GRAPH_ARGMAX ? ">" : "<";
    if (is_float_in)
        cstyle_put(b,
                   "%sif (at < 0 || (best == best && (v%d != v%d || v%d %s best))) "
                   "{ best = v%d; at = r; }\n",
                   indent, v, v, v, cmp, v);
    else
        cstyle_put(b, "%sif (at < 0 || v%d %s best) { best = v%d; at = r; }\n", indent, v, cmp, v);
}
