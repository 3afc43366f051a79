/* rules.h — lower/'s private interface between the rule driver (rules.c) and
 * the rule files: each rewrites one graph op of a kernel into primitives,
 * through an ir_builder, on operands that are already rewritten. Values of
 * f16 and bf16 live in f32: a rule for a half type computes in f32 and ends
 * with rules_round_half. */
#ifndef KILN_LOWER_RULES_H
#define KILN_LOWER_RULES_H

#include "lower/ir.h"

/* The dtype a value of dt computes in: f32 for the half types. */
static inline kiln_dtype rules_ctype(kiln_dtype dt) {
    return dt == KILN_F16 || dt == KILN_BF16 ? KILN_F32 : dt;
}

/* The integer dtype with a float dtype's width (its bits). */
static inline kiln_dtype rules_bits_type(kiln_dtype dt) {
    return dt == KILN_F64 ? KILN_I64 : KILN_I32;
}

static inline int rules_f(ir_builder *b, kiln_dtype dt, double v) {
    return ir_imm(b, dt, (graph_scalar){.f = v});
}

static inline int rules_i(ir_builder *b, kiln_dtype dt, int64_t v) {
    return ir_imm(b, dt, (graph_scalar){.i = v});
}

static inline int rules_p1(ir_builder *b, lower_prim p, kiln_dtype dt, int x) {
    return ir_prim(b, p, dt, x, -1, -1);
}

static inline int rules_p2(ir_builder *b, lower_prim p, kiln_dtype dt, int x, int y) {
    return ir_prim(b, p, dt, x, y, -1);
}

static inline int rules_sel(ir_builder *b, kiln_dtype dt, int c, int x, int y) {
    return ir_where(b, dt, c, x, y);
}

/* A graph op that is one primitive on some dtypes: a table entry per op. */
typedef struct rules_direct {
    bool on;
    lower_prim prim;
} rules_direct;

/* op as table[op]'s primitive on x (and y, for a binary one), or -1 when the
 * table has no entry for op. */
static inline int rules_direct_op(ir_builder *b, const rules_direct *table, graph_op op,
                                  kiln_dtype dt, int x, int y) {
    if (op < 0 || op >= GRAPH_NUM_OPS || !table[op].on)
        return -1;
    lower_prim p = table[op].prim;
    return lower_prim_arity(p) == 1 ? rules_p1(b, p, dt, x) : rules_p2(b, p, dt, x, y);
}

/* A bool primitive (compare or logic) on x and y. */
static inline int rules_test(ir_builder *b, lower_prim p, int x, int y) {
    return ir_prim(b, p, KILN_BOOL, x, y, -1);
}

/* rules_math.c: float op `op` of compute dtype dt (f32 or f64) on x (and y). */
int rules_float(ir_builder *b, graph_op op, kiln_dtype dt, int x, int y);

/* rules_int.c: integer op of dt on x (and y); casts from `from` to `to`; the
 * f32 (or f64) value x of dtype src rounded to the half type half, as f32. */
int rules_int(ir_builder *b, graph_op op, kiln_dtype dt, int x, int y);
int rules_cast(ir_builder *b, kiln_dtype from, kiln_dtype to, int x);
/* GRAPH_BITCAST between dtypes of one size: x's bits read as to */
int rules_bitcast(ir_builder *b, kiln_dtype from, kiln_dtype to, int x);
int rules_round_half(ir_builder *b, kiln_dtype half, kiln_dtype src, int x);

/* rules_rand.c: kiln_rand / kiln_randn's value of dtype dt at index idx. */
int rules_rand(ir_builder *b, graph_op op, kiln_dtype dt, int idx, uint64_t seed);
/* The same with the seed an i64 value (a bound input). */
int rules_rand_keyed(ir_builder *b, graph_op op, kiln_dtype dt, int idx, int seed);

#endif /* KILN_LOWER_RULES_H */
