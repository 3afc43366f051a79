/* cpu.h — what jit/'s files share about the CPU target. */
#ifndef KILN_JIT_CPU_H
#define KILN_JIT_CPU_H

#include <stdbool.h>
#include <stddef.h>

#include "cache/cache.h"
#include "lower/lower.h"

/* The C translation unit of a program (malloc'd), or NULL with msg saying
 * why: out of memory, or an instruction the target cannot print (named).
 * Kernel k of the program is the function named k's name. */
char *jit_cpu_render(const lower_program *p, char *msg, size_t cap);

/* The command that compiles generated C ($KILN_CC, else cc). */
const char *jit_cpu_compiler(void);
const char *jit_cpu_compiler_id(void);

/* The key of a translation unit: source, compiler identity, flags, version. */
cache_key jit_cpu_key(const char *src);

/* The dlopen handle of src compiled (from the disk cache when there; else
 * compiled now and stored, *compiled set). NULL with a message on failure. */
void *jit_cpu_load(cache *c, const char *src, cache_key key, bool *compiled, char *msg,
                   size_t cap);

#endif /* KILN_JIT_CPU_H */
