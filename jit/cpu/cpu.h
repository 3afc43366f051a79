/* cpu.h — what jit/'s files share about the CPU target: the C renderer and
 * compiler. The CPU's two devices (cc and llvm, jit/cpu/device.c) are reached
 * through jit/devices.c's table like any device. */
#ifndef KILN_JIT_CPU_H
#define KILN_JIT_CPU_H

#include <stdbool.h>
#include <stddef.h>

#include "cache/cache.h"
#include "lower/lower.h"

/* What the planner is told about this host (both CPU code generators plan
 * against it). */
const lower_target *jit_cpu_target(void);

/* The C translation unit of a program planned for jit_cpu_target(), in *out
 * (malloc'd). Kernel k of the program is the function named k's name.
 * KILN_ERR_COMPILE with a message naming the instruction and dtypes this
 * target cannot print, or KILN_ERR_OOM. */
kiln_status jit_cpu_render(const lower_program *p, const lower_plan *plans, char **out,
                           char *msg, size_t cap);

/* The line jit_cpu_render writes before each kernel's code: where a
 * program's text may be cut into translation units (the prelude, then a run
 * of kernels) that compile in parallel. */
#define JIT_CPU_KERNEL_MARK "/* ---- kernel ---- */\n"
/* Every kernel function's parameters, as render_c.c prints them and
 * compile.c finds a kernel's name by (its fold of repeated kernels). */
#define JIT_CPU_KERNEL_PARAMS "(char **bufs, int nthreads)"
/* The line after the mark of a kernel the plan leaves scalar (tiny: see
 * lower_plan_scalar): a unit of only such kernels compiles at -O1. */
#define JIT_CPU_TINY_MARK "/* tiny */\n"

/* The command that compiles generated C ($KILN_CC, else cc). */
const char *jit_cpu_compiler(void);
const char *jit_cpu_compiler_id(void);
/* The CPU's "model name" from /proc/cpuinfo ("unknown" without one). */
void jit_cpu_model(char *dst, size_t cap);
/* The flags it compiles with (NULL-terminated). */
const char *const *jit_cpu_flags(void);

/* The key of a translation unit: source, compiler identity, flags, version. */
cache_key jit_cpu_key(const char *src);

/* The dlopen handle of src compiled (from the disk cache when there; else
 * compiled now and stored, *compiled set). NULL with a message on failure. */
void *jit_cpu_load(cache *c, const char *src, cache_key key, bool *compiled, char *msg,
                   size_t cap);

#endif /* KILN_JIT_CPU_H */
