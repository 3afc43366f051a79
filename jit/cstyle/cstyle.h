/* cstyle.h — jit/cstyle's face: kernel IR instructions printed as C-family
 * expressions over variables v<id>, for the targets whose code is C (the CPU
 * through cc, CUDA through NVRTC). A target describes its spellings in a
 * cstyle_target; everything else is the same text for both. */
#ifndef KILN_JIT_CSTYLE_H
#define KILN_JIT_CSTYLE_H

#include <stdbool.h>
#include <stddef.h>

#include "lower/lower.h"

typedef struct cstyle_target {
    const char *type[KILN_NUM_DTYPES]; /* the type a dtype computes in (halves: float) */
    const char *u8, *u32, *u64;        /* unsigned types of 8, 32 and 64 bits */
    const char *nan, *inf;             /* double NaN and +infinity */
    const char *f32_bits, *bits_f32;   /* bit casts float <-> int32 (functions of one argument) */
    const char *f64_bits, *bits_f64;   /* double <-> int64 */
} cstyle_target;

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
