/* cstyle.h — jit/cstyle's face: kernel IR instructions printed as C-family
 * expressions over variables v<id>, for the targets whose code is C (the CPU
 * through cc, CUDA through NVRTC). A target describes its spellings in a
 * cstyle_target; everything else is the same text for both. */
#ifndef KILN_JIT_CSTYLE_H
#define KILN_JIT_CSTYLE_H

#include <stdbool.h>
#include <stddef.h>

#include "lower/lower.h"

/* A growing text: what a renderer prints into. Once failed (out of memory,
 * or refused: the kernel asks for what the target cannot print, with the
 * reason in err), further printing does nothing. */
typedef struct cstyle_buf {
    char *s;
    size_t n, cap;
    bool failed;
    bool refused;
    bool narrow; /* the plan's: index arithmetic in 32 bits */
    bool scalar; /* the C renderer's: loops not marked for vectorising */
    int64_t rows; /* the C renderer's: the plan's rows while a columns kernel is walked in them */
    char *err;   /* where the reason for a refusal goes */
    size_t errcap;
    char sizes[8][128]; /* cstyle_size's results, the last eight */
    int nsize;
} cstyle_buf;

void cstyle_put(cstyle_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Fails b with reason why. */
void cstyle_refuse_buf(cstyle_buf *b, const char *why);
/* b's text (the caller owns it), or NULL after a failure, with a status:
 * KILN_ERR_COMPILE for a refusal (its reason already in err), KILN_ERR_OOM
 * (with a message naming `what` was being generated). */
kiln_status cstyle_finish(cstyle_buf *b, const char *what, char **out);

typedef struct cstyle_target {
    const char *type[KILN_NUM_DTYPES]; /* the type a dtype computes in (halves: float) */
    const char *u8, *u16, *u32, *u64;  /* unsigned types of 8, 16, 32 and 64 bits */
    const char *nan, *inf;             /* double NaN and +infinity */
    const char *f32_bits, *bits_f32;   /* bit casts float <-> int32 (functions of one argument) */
    const char *f64_bits, *bits_f64;   /* double <-> int64 */
    const char *buffer;                /* printf format of buffer i's name: "in%d", "b%d" */
    const char *lane;                  /* an elementwise element's place in its tile (UOP_LANE;
                                          its tile, UOP_TILE, is the loop's t) */
    const char *name;                  /* the target in messages: "C", "CUDA" */
} cstyle_target;

/* The statement "T v<i> = expr;" computing instruction ins[i]: index
 * arithmetic in 32 bits when the plan says narrow, masked loads that never
 * read out of bounds, primitives, and the finished reduction (`acc`) or dot
 * product (`dot`) a renderer's loop has in scope. false, with msg naming the
 * instruction and its dtypes, when it cannot be printed (never a guess). */
bool cstyle_ins(const cstyle_target *t, const lower_ins *ins, int i, bool narrow, char *out,
                size_t cap, char *msg, size_t mcap);

/* A size of kernel k (field: a member of k or of its plan) as C: the literal
 * "123LL", or "S[j]" when the program reads it at run time (lower_sizes_mark;
 * the kernel's functions have S in scope, see cstyle_sizes_decl). The string
 * lives in b until eight more are asked for. */
const char *cstyle_size(cstyle_buf *b, const lower_kernel *k, const int64_t *field);
/* The product of n sizes of k, as cstyle_size spells each: one literal when
 * none is read at run time. */
const char *cstyle_size_product(cstyle_buf *b, const lower_kernel *k, int n,
                                const int64_t *fields);
/* Declares S, k's run-time sizes, from the pointer after its buffers in
 * bufs (nothing when it has none). */
void cstyle_sizes_decl(cstyle_buf *b, const lower_kernel *k, const char *indent);

/* "const T name = offset + ...;": where a matmul operand's batch `bt` (a
 * variable in scope) starts in its buffer, over the kernel's batch dims. */
void cstyle_operand_offset(cstyle_buf *b, const cstyle_target *t, const char *indent,
                           const char *name, const lower_kernel *k, const lower_operand *o);
/* The step of a max/min/arg reduction taking value v<v> at position r into
 * (best, at): the first of equal values wins, and the first NaN. */
void cstyle_reduce_take(cstyle_buf *b, const char *indent, graph_op gop, bool is_float_in, int v);

/* The type a buffer of dt is stored as (halves: their 16 raw bits). */
const char *cstyle_storage_type(const cstyle_target *t, kiln_dtype dt);
/* The prelude function rounding a float to half type dt ("" for others). */
const char *cstyle_round_half(kiln_dtype dt);
/* The expression storing value val (an expression) into a buffer of dt. */
void cstyle_store(kiln_dtype dt, const char *val, char *out, size_t cap);

/* The expression loading element idx (an expression) of buffer buf, which
 * holds dtype dt: halves widen to float. */
void cstyle_load(const cstyle_target *t, kiln_dtype dt, int buf, const char *idx, char *out,
                 size_t cap);

/* The expression of immediate v of dtype dt. Returns false when cap is too
 * small. */
bool cstyle_imm(const cstyle_target *t, kiln_dtype dt, graph_scalar v, char *out, size_t cap);

/* The expression of primitive instruction ins[i] (a UOP_PRIM) into out.
 * false, with msg naming the primitive and its dtypes, when the primitive is
 * not defined for them (never a guess). */
bool cstyle_prim(const cstyle_target *t, const lower_ins *ins, int i, char *out, size_t cap,
                 char *msg, size_t mcap);

/* The message for an instruction a C-family target cannot print (a UOP_ALU
 * or UOP_RAND left by a missing rule, or an unknown uop). */
void cstyle_refuse(const lower_ins *x, const char *target, char *msg, size_t mcap);

#endif /* KILN_JIT_CSTYLE_H */
