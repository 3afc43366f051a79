/* llvm.h — the CPU target's second code generator: kernel IR to LLVM IR,
 * optimised (O3, host CPU) and compiled in this process through ORC's LLJIT
 * (KILN_CPU_COMPILER=llvm). libLLVM is loaded at run time; without it, only
 * this path fails, with a message. Kernels have the C path's signature and
 * semantics. */
#ifndef KILN_JIT_CPU_LLVM_H
#define KILN_JIT_CPU_LLVM_H

#include <stdbool.h>
#include <stddef.h>

#include "api/kiln.h"
#include "lower/lower.h"

typedef void (*jit_llvm_kernel_fn)(char **bufs, int nthreads);

/* A compiled program: owns the JIT and its code. */
typedef struct jit_llvm_program jit_llvm_program;

/* Whether libLLVM can be loaded (loads it); a message if not. */
bool jit_llvm_available(char *msg, size_t cap);

/* What the generated code depends on besides the program: LLVM's version, the
 * target triple, the CPU and its features, the generator's own revision. */
const char *jit_llvm_identity(void);

/* Compiles every kernel of p into *out. On failure a message and
 * KILN_ERR_DEVICE (no libLLVM), KILN_ERR_OOM or KILN_ERR_COMPILE (which
 * includes the IR generator's own failures, out of memory among them, until
 * it returns a status). */
kiln_status jit_llvm_compile(const lower_program *p, const lower_plan *plans,
                             jit_llvm_program **out, char *msg,
                             size_t cap);

/* Kernel i's entry point, NULL for LOWER_ALIAS kernels. */
jit_llvm_kernel_fn jit_llvm_kernel(const jit_llvm_program *h, int i);

void jit_llvm_free(jit_llvm_program *h);

/* The program's LLVM IR as text (malloc'd), after the O3 pipeline when
 * optimised is true; NULL with a message on failure. For inspection and
 * tests (vectorised loops show as vector types). */
char *jit_llvm_module_text(const lower_program *p, const lower_plan *plans, bool optimised,
                           char *msg, size_t cap);

#endif /* KILN_JIT_CPU_LLVM_H */
