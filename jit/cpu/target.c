/* target.c — what the CPU target tells the planner about this host: the
 * widest vector registers its kernels may use. Both CPU code generators (cc
 * and LLVM) plan against it, so that they make the same decisions. */
#include "jit/cpu/cpu.h"

static int host_vector_bytes(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return 64;
    if (__builtin_cpu_supports("avx2"))
        return 32;
    return 16;
#else
    return 16;
#endif
}

const lower_target *jit_cpu_target(void) {
    static lower_target t = {.name = "cpu"};
    /* Racing first calls store the same value. */
    if (!t.vector_bytes)
        t.vector_bytes = host_vector_bytes();
    return &t;
}
