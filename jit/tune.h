/* tune.h — KILN_TUNE=1: plans chosen by timing (jit/tune.c). Private to jit/. */
#ifndef KILN_JIT_TUNE_H
#define KILN_JIT_TUNE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cache/cache.h"
#include "jit/device.h"
#include "lower/lower.h"

/* Whether the environment asks for tuning (KILN_TUNE=1). */
bool jit_tune_wanted(void);

/* For every kernel of p that lower offers other plans for
 * (lower_plan_variants), replaces plans[i] by the fastest of them on d:
 * the choice stored for the kernel (memory, then the disk level of c, keyed
 * by d's key and the kernel's text under its heuristics' plan) where there
 * is one, else each variant compiled (all of them in one program, one
 * compile), run on the kernel's real shapes (inputs that already hold data
 * read in place, the others and every output in scratch buffers) in
 * alternating rounds, timed, and the winner stored. p's kernels must still
 * name their nodes (before the runtime binds them); their buffers are as
 * they were when this returns. Counts into *tuned (kernels timed) and
 * *stored (kernels that took a choice without being timed: a stored one,
 * or their twin's in the same program). A kernel that cannot be tuned (its variants fail
 * to compile, no memory for scratch) keeps its plan: tuning never fails a
 * sync, and says why at debug >= 1. */
void jit_tune_program(jit_device *d, cache *c, int debug, const lower_program *p,
                      lower_plan *plans, int64_t *tuned, int64_t *stored);

#endif /* KILN_JIT_TUNE_H */
