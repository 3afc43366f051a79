/* ir.h — lower/'s private kernel-IR builder: instructions are interned (so the
 * same computation is one SSA value) and index arithmetic is simplified as it
 * is built, using each index value's known range. */
#ifndef KILN_LOWER_IR_H
#define KILN_LOWER_IR_H

#include "lower/lower.h"

typedef struct ir_builder {
    lower_ins *ins;
    int64_t *min; /* index values: a lower bound */
    int n, cap;
    int *table; /* open addressing over instruction ids, -1 empty */
    int tcap;
    bool failed; /* out of memory: every later call returns 0 */
} ir_builder;

void ir_init(ir_builder *b);
void ir_free(ir_builder *b);

/* The interned instruction id for proto (its `inner` and bounds are derived). */
int ir_add(ir_builder *b, lower_ins proto);

int ir_gidx(ir_builder *b, int64_t numel);
int ir_ridx(ir_builder *b, int64_t rnumel);
/* An elementwise kernel's flat element index over numel elements as
 * TILE * tile + LANE (lower.h). */
int ir_tiled_gidx(ir_builder *b, int64_t numel, int64_t tile);
int ir_imm(ir_builder *b, kiln_dtype dt, graph_scalar v);
int ir_index(ir_builder *b, int64_t v);
int ir_bool(ir_builder *b, bool v);
int ir_iadd(ir_builder *b, int x, int y);
int ir_imul(ir_builder *b, int x, int64_t c);
int ir_idiv(ir_builder *b, int x, int64_t d);
int ir_imod(ir_builder *b, int x, int64_t d);
int ir_ilt(ir_builder *b, int x, int y);
int ir_and(ir_builder *b, int x, int y); /* y < 0 means "true" */
/* The integer value x as an index clamped into [0, n), and whether it lies
 * there; both fold where x is an immediate or its dtype cannot leave it. */
int ir_iclamp(ir_builder *b, int x, int64_t n);
int ir_ivalid(ir_builder *b, int x, int64_t n);
int ir_alu(ir_builder *b, graph_op op, kiln_dtype dt, int x, int y);
int ir_where(ir_builder *b, kiln_dtype dt, int c, int x, int y);
int ir_load(ir_builder *b, kiln_dtype dt, int buf, int index, int valid);
int ir_rand(ir_builder *b, graph_op op, kiln_dtype dt, int index, uint64_t seed);
/* The same with the key a value (an i64 instruction): UOP_RAND with b = key. */
int ir_rand_keyed(ir_builder *b, graph_op op, kiln_dtype dt, int index, int key);
/* The reduction op of the inner value over the reduced index ridx. */
int ir_reduce(ir_builder *b, graph_op op, kiln_dtype dt, int value, int ridx);
/* A matmul epilogue's input: the finished dot product of the output element. */
int ir_acc(ir_builder *b, kiln_dtype dt);

/* Primitive prim of dtype dt on x (and y, z; -1 when unused). Immediate
 * integer operands fold where the result is plain wrapping arithmetic, and a
 * few identities (x + 0, x * 1, x & -1, shifts by 0) fold for integers only:
 * no float folding, so that -0, NaN payloads and rounding stay the target's. */
int ir_prim(ir_builder *b, lower_prim prim, kiln_dtype dt, int x, int y, int z);

/* True when instruction id is an index immediate equal to v. */
bool ir_is_index(const ir_builder *b, int id, int64_t v);

#endif /* KILN_LOWER_IR_H */
