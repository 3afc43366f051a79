/* rules.c — the rule driver: rebuilds a kernel's instruction list so that
 * every graph-level op (UOP_ALU) and every random value (UOP_RAND) becomes a
 * sequence of primitives, and renumbers everything that names an
 * instruction. Ops that are one primitive are rewritten here; the others go
 * to rules_math.c (float composites), rules_int.c (integer ops, casts, half
 * rounding) and rules_rand.c (Philox). */
#include <stdlib.h>
#include <string.h>

#include "lower/rules.h"

/* Float ops whose result needs no rounding to a half type: they only move
 * or select the (already half) operand values. */
static bool exact_in_half(graph_op op) {
    return op == GRAPH_NEG || op == GRAPH_ABS || op == GRAPH_RELU || op == GRAPH_MAXIMUM ||
           op == GRAPH_MINIMUM || op == GRAPH_FLOOR || op == GRAPH_CEIL || op == GRAPH_TRUNC ||
           op == GRAPH_ROUND || op == GRAPH_COPYSIGN || op == GRAPH_FMOD;
}

static int compare(ir_builder *b, graph_op op, int x, int y) {
    switch (op) {
    case GRAPH_LT:
        return rules_test(b, PRIM_LT, x, y);
    case GRAPH_LE:
        return rules_test(b, PRIM_LE, x, y);
    case GRAPH_GT:
        return rules_test(b, PRIM_LT, y, x);
    case GRAPH_GE:
        return rules_test(b, PRIM_LE, y, x);
    case GRAPH_EQ:
        return rules_test(b, PRIM_EQ, x, y);
    default:
        return rules_test(b, PRIM_NE, x, y);
    }
}

/* Bool arithmetic is the int64 result tested against 0 (graph/dtype.c's
 * wrap to bool). */
static int bool_op(ir_builder *b, graph_op op, int x, int y) {
    if (op == GRAPH_BITNOT) /* not ~x, which is nonzero for both values */
        return rules_test(b, PRIM_EQ, x, rules_i(b, KILN_BOOL, 0));
    x = rules_p1(b, PRIM_CAST, KILN_I64, x);
    if (y >= 0)
        y = rules_p1(b, PRIM_CAST, KILN_I64, y);
    int r = rules_int(b, op, KILN_I64, x, y);
    return rules_test(b, PRIM_NE, r, rules_i(b, KILN_I64, 0));
}

static int alu(ir_builder *b, const lower_kernel *k, const lower_ins *x, int a, int y) {
    kiln_dtype in = k->ins[x->a].dt;
    if (x->gop == GRAPH_CAST)
        return rules_cast(b, in, x->dt, a);
    if (x->gop == GRAPH_BITCAST)
        return rules_bitcast(b, in, x->dt, a);
    if (graph_op_is_compare(x->gop))
        return compare(b, x->gop, a, y);
    if (graph_dtype_is_float(x->dt)) {
        kiln_dtype ct = rules_ctype(x->dt);
        int r = rules_float(b, x->gop, ct, a, y);
        if (ct != x->dt && !exact_in_half(x->gop))
            r = rules_round_half(b, x->dt, ct, r);
        return r;
    }
    if (x->dt == KILN_BOOL)
        return bool_op(b, x->gop, a, y);
    return rules_int(b, x->gop, x->dt, a, y);
}

/* Whether float value i of k (before the rules) is never below zero, NaN
 * aside, by its op alone: into nn[i], its operands' already there. Integer
 * values are never marked (an integer sum has no float to round). */
static bool nonneg(const lower_kernel *k, const bool *nn, int i) {
    const lower_ins *x = &k->ins[i];
    if (!graph_dtype_is_float(x->dt))
        return false;
    bool a = x->a >= 0 && nn[x->a], b = x->b >= 0 && nn[x->b], c = x->c >= 0 && nn[x->c];
    switch (x->op) {
    case UOP_IMM:
        return !x->sized && x->imm.f >= 0;
    case UOP_WHERE:
        return b && c;
    case UOP_REDUCE:
        return (x->gop == GRAPH_SUM || x->gop == GRAPH_RMAX || x->gop == GRAPH_RMIN) && a;
    case UOP_ALU:
        switch (x->gop) {
        case GRAPH_EXP:
        case GRAPH_SQRT:
        case GRAPH_RSQRT:
        case GRAPH_ABS:
        case GRAPH_SIGMOID:
        case GRAPH_RELU:
        case GRAPH_COSH:
        case GRAPH_ERFC:
        case GRAPH_ACOS:
            return true;
        case GRAPH_MUL:
            return x->a == x->b || (a && b); /* a square, or a product of such values */
        case GRAPH_ADD:
        case GRAPH_DIV:
        case GRAPH_MINIMUM:
            return a && b;
        case GRAPH_MAXIMUM:
            return a || b;
        case GRAPH_RECIP:
            return a;
        case GRAPH_CAST:
            return a; /* from a float marked (integers never are) */
        default:
            return false;
        }
    default:
        return false;
    }
}

bool lower_rules(lower_kernel *k) {
    if (k->nins == 0)
        return true;
    int *map = malloc(sizeof *map * (size_t)k->nins);
    bool *nn = calloc((size_t)k->nins, sizeof *nn);
    if (!map || !nn) {
        free(map), free(nn);
        return false;
    }
    for (int i = 0; i < k->nins; i++)
        nn[i] = nonneg(k, nn, i);
    ir_builder b;
    ir_init(&b);
    for (int i = 0; i < k->nins; i++) {
        const lower_ins *x = &k->ins[i];
        int a = x->a >= 0 ? map[x->a] : -1, y = x->b >= 0 ? map[x->b] : -1,
            c = x->c >= 0 ? map[x->c] : -1;
        if (x->op == UOP_ALU) {
            map[i] = alu(&b, k, x, a, y);
        } else if (x->op == UOP_RAND) {
            map[i] = y >= 0 ? rules_rand_keyed(&b, x->gop, x->dt, a, y)
                            : rules_rand(&b, x->gop, x->dt, a, (uint64_t)x->imm.i);
        } else {
            lower_ins p = *x;
            p.a = a;
            p.b = y;
            p.c = c;
            p.nonneg = x->op == UOP_REDUCE && x->gop == GRAPH_SUM && nn[x->a];
            map[i] = ir_add(&b, p);
        }
    }
    bool ok = !b.failed;
    if (ok) {
        for (int o = 0; o < k->nouts; o++)
            k->results[o] = map[k->results[o]];
        k->result = k->nouts > 0 ? k->results[0] : map[k->result];
        k->store = map[k->store];
        for (int j = 0; j < k->nscatter; j++) {
            lower_scatter_store *st = &k->scatter[j];
            st->value = map[st->value];
            st->at = map[st->at];
            st->valid = st->valid >= 0 ? map[st->valid] : -1;
        }
        free(k->ins);
        k->ins = b.ins;
        k->nins = b.n;
        b.ins = NULL;
    }
    ir_free(&b);
    free(map);
    free(nn);
    return ok;
}
