/* llvm_jit.c — libLLVM loaded at run time into a table of C API functions,
 * the host's target machine, and programs compiled through ORC's LLJIT: the
 * module from llvm_render.c, optimised with the O3 pipeline for the host CPU,
 * linked against absolute addresses of the only external functions the
 * generated code calls (libm, the parallel runtime, memset/memcpy), so that
 * nothing depends on the process's dynamic symbol table. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>

#include "jit/cpu/llvm.h"
#include "jit/cpu/llvm_api.h"

#if defined(__x86_64__)
#define JIT_LLVM_ARCH "X86"
#elif defined(__aarch64__)
#define JIT_LLVM_ARCH "AArch64"
#else
#define JIT_LLVM_ARCH ""
#endif

/* Bumped whenever the generated code changes for the same program. */
#define JIT_LLVM_GENERATOR "kiln-llvm-1"

/* LLVM's remarks and warnings (a loop it was asked to vectorise and could
 * not) would go to the program's stderr; a library keeps quiet. Failures are
 * reported through the calls that fail. */
static void quiet(LLVMDiagnosticInfoRef info, void *ctx) {
    (void)info;
    (void)ctx;
}

static jit_llvm_api api;
static char api_error[512];
static char identity[2048];
static char *host_triple, *host_cpu, *host_features;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void *open_llvm(void) {
    static const char *const names[] = {
        "libLLVM-14.so.1",
        "/usr/lib/llvm-14/lib/libLLVM-14.so.1",
        "libLLVM-14.so",
        "/usr/lib/llvm-14/lib/libLLVM-14.so",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        /* Never unloaded: LLVM keeps global state for the process's life. */
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (h)
            return h;
    }
    return NULL;
}

static void load_api(void) {
    /* A statically linked program has no dynamic loader (no AT_BASE): loading
     * libLLVM, which needs the shared C and C++ libraries, would crash it. */
    if (getauxval(AT_BASE) == 0) {
        snprintf(api_error, sizeof api_error,
                 "kiln: KILN_CPU_COMPILER=llvm needs a dynamically linked program; this one is "
                 "static and cannot load libLLVM (KILN_CPU_COMPILER=cc works)");
        return;
    }
    void *h = open_llvm();
    if (!h) {
        snprintf(api_error, sizeof api_error,
                 "kiln: KILN_CPU_COMPILER=llvm needs LLVM 14 (libLLVM-14.so.1), which cannot be "
                 "loaded: %s",
                 dlerror());
        return;
    }
    jit_llvm_api t;
    memset(&t, 0, sizeof t);
#define JIT_LLVM_RESOLVE(name)                                                                     \
    if (!(t.name = (__typeof__(name) *)(uintptr_t)dlsym(h, #name))) {                              \
        snprintf(api_error, sizeof api_error, "kiln: libLLVM lacks %s", #name);                    \
        return;                                                                                    \
    }
    JIT_LLVM_FUNCTIONS(JIT_LLVM_RESOLVE)
#undef JIT_LLVM_RESOLVE
    static const char *const init[4] = {"LLVMInitialize" JIT_LLVM_ARCH "TargetInfo",
                                        "LLVMInitialize" JIT_LLVM_ARCH "Target",
                                        "LLVMInitialize" JIT_LLVM_ARCH "TargetMC",
                                        "LLVMInitialize" JIT_LLVM_ARCH "AsmPrinter"};
    void (**slot[4])(void) = {&t.init_info, &t.init_target, &t.init_mc, &t.init_asm_printer};
    for (int i = 0; i < 4; i++)
        if (!(*slot[i] = (void (*)(void))(uintptr_t)dlsym(h, init[i]))) {
            snprintf(api_error, sizeof api_error, "kiln: libLLVM has no native target (%s)",
                     init[i]);
            return;
        }
    t.init_info();
    t.init_target();
    t.init_mc();
    t.init_asm_printer();
    host_triple = t.LLVMGetDefaultTargetTriple();
    host_cpu = t.LLVMGetHostCPUName();
    host_features = t.LLVMGetHostCPUFeatures();
    snprintf(identity, sizeof identity, "%s LLVM %s %s %s %s", JIT_LLVM_GENERATOR,
             LLVM_VERSION_STRING, host_triple, host_cpu, host_features);
    api = t;
}

const jit_llvm_api *jit_llvm_api_get(char *msg, size_t cap) {
    pthread_once(&api_once, load_api);
    if (!api.LLVMRunPasses) {
        snprintf(msg, cap, "%s", api_error);
        return NULL;
    }
    return &api;
}

bool jit_llvm_available(char *msg, size_t cap) { return jit_llvm_api_get(msg, cap) != NULL; }

const char *jit_llvm_identity(void) {
    pthread_once(&api_once, load_api);
    return identity;
}

/* The external functions generated code may call: what llvm_render.c calls,
 * and what LLVM's own lowering may turn code into. */
typedef struct symbol {
    const char *name;
    void *addr;
} symbol;

#define FN(f) {#f, (void *)(uintptr_t)f}
static const symbol symbols[] = {
    {"jit_llvm_parallel_for", (void *)(uintptr_t)jit_llvm_parallel_for},
    FN(expf), FN(exp), FN(logf), FN(log), FN(sinf), FN(sin), FN(cosf), FN(cos), FN(tanhf),
    FN(tanh), FN(powf), FN(pow), FN(erfcf), FN(erfc), FN(sqrtf), FN(sqrt), FN(truncf), FN(trunc),
    FN(fabsf), FN(fabs), FN(exp2f), FN(exp2), FN(ldexpf), FN(ldexp), FN(sincosf), FN(sincos),
    FN(floorf), FN(floor), FN(fmodf), FN(fmod), FN(memset), FN(memcpy), FN(memmove),
    FN(aligned_alloc), FN(free),
    FN(log2f), FN(log2), FN(fmaf), FN(fma),
    /* lower.h's libm-backed primitives (lower_prim_libm) */
    FN(tanf), FN(tan), FN(asinf), FN(asin), FN(acosf), FN(acos), FN(atanf), FN(atan),
    FN(atan2f), FN(atan2), FN(sinhf), FN(sinh), FN(coshf), FN(cosh), FN(asinhf), FN(asinh),
    FN(acoshf), FN(acosh), FN(atanhf), FN(atanh), FN(erff), FN(erf), FN(expm1f), FN(expm1),
    FN(log1pf), FN(log1p),
};
#undef FN

struct jit_llvm_program {
    LLVMOrcLLJITRef jit;
    double seconds;
    int nkernels;
    jit_llvm_kernel_fn fns[];
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Writes an LLVM error's message to msg (consuming the error). */
static void llvm_error(const jit_llvm_api *L, LLVMErrorRef e, const char *what, char *msg,
                       size_t cap) {
    char *s = L->LLVMGetErrorMessage(e);
    snprintf(msg, cap, "kiln: LLVM %s failed: %.400s", what, s ? s : "");
    L->LLVMDisposeErrorMessage(s);
}

static LLVMTargetMachineRef host_machine(const jit_llvm_api *L, char *msg, size_t cap) {
    LLVMTargetRef target;
    char *err = NULL;
    if (L->LLVMGetTargetFromTriple(host_triple, &target, &err)) {
        snprintf(msg, cap, "kiln: LLVM has no target for %s: %s", host_triple, err ? err : "");
        L->LLVMDisposeMessage(err);
        return NULL;
    }
    return L->LLVMCreateTargetMachine(target, host_triple, host_cpu, host_features,
                                      LLVMCodeGenLevelAggressive, LLVMRelocDefault,
                                      LLVMCodeModelJITDefault);
}

/* Builds p's module in cx and runs the O3 pipeline on it for the host. */
static LLVMModuleRef build(const jit_llvm_api *L, LLVMContextRef cx, const lower_program *p,
                           const lower_plan *plans, bool optimise, char *msg, size_t cap) {
    LLVMModuleRef m = jit_llvm_render(L, cx, p, plans, msg, cap);
    if (!m)
        return NULL;
    LLVMTargetMachineRef tm = host_machine(L, msg, cap);
    if (!tm) {
        L->LLVMDisposeModule(m);
        return NULL;
    }
    L->LLVMSetTarget(m, host_triple);
    LLVMTargetDataRef dl = L->LLVMCreateTargetDataLayout(tm);
    L->LLVMSetModuleDataLayout(m, dl);
    L->LLVMDisposeTargetData(dl);
    if (optimise) {
        LLVMPassBuilderOptionsRef o = L->LLVMCreatePassBuilderOptions();
        L->LLVMPassBuilderOptionsSetLoopVectorization(o, 1);
        L->LLVMPassBuilderOptionsSetSLPVectorization(o, 1);
        L->LLVMPassBuilderOptionsSetLoopUnrolling(o, 1);
        L->LLVMPassBuilderOptionsSetLoopInterleaving(o, 1);
        LLVMErrorRef e = L->LLVMRunPasses(m, "default<O3>", tm, o);
        L->LLVMDisposePassBuilderOptions(o);
        if (e) {
            llvm_error(L, e, "optimisation", msg, cap);
            L->LLVMDisposeModule(m);
            m = NULL;
        }
    }
    L->LLVMDisposeTargetMachine(tm);
    return m;
}

char *jit_llvm_module_text(const lower_program *p, const lower_plan *plans, bool optimised,
                           char *msg, size_t cap) {
    const jit_llvm_api *L = jit_llvm_api_get(msg, cap);
    if (!L)
        return NULL;
    LLVMOrcThreadSafeContextRef tsc = L->LLVMOrcCreateNewThreadSafeContext();
    L->LLVMContextSetDiagnosticHandler(L->LLVMOrcThreadSafeContextGetContext(tsc), quiet, NULL);
    LLVMModuleRef m =
        build(L, L->LLVMOrcThreadSafeContextGetContext(tsc), p, plans, optimised, msg, cap);
    char *out = NULL;
    if (m) {
        char *s = L->LLVMPrintModuleToString(m);
        out = strdup(s);
        L->LLVMDisposeMessage(s);
        L->LLVMDisposeModule(m);
        if (!out)
            snprintf(msg, cap, "kiln: out of memory");
    }
    L->LLVMOrcDisposeThreadSafeContext(tsc);
    return out;
}

static bool define_symbols(const jit_llvm_api *L, LLVMOrcLLJITRef jit, char *msg, size_t cap) {
    enum { N = sizeof symbols / sizeof symbols[0] };
    LLVMJITCSymbolMapPair pairs[N];
    for (int i = 0; i < N; i++) {
        pairs[i].Name = L->LLVMOrcLLJITMangleAndIntern(jit, symbols[i].name);
        pairs[i].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)symbols[i].addr;
        pairs[i].Sym.Flags.GenericFlags =
            LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
        pairs[i].Sym.Flags.TargetFlags = 0;
    }
    LLVMOrcMaterializationUnitRef mu = L->LLVMOrcAbsoluteSymbols(pairs, N);
    LLVMErrorRef e = L->LLVMOrcJITDylibDefine(L->LLVMOrcLLJITGetMainJITDylib(jit), mu);
    if (e) {
        L->LLVMOrcDisposeMaterializationUnit(mu);
        llvm_error(L, e, "symbol definition", msg, cap);
        return false;
    }
    return true;
}

static LLVMOrcLLJITRef new_jit(const jit_llvm_api *L, char *msg, size_t cap) {
    LLVMTargetMachineRef tm = host_machine(L, msg, cap);
    if (!tm)
        return NULL;
    LLVMOrcLLJITBuilderRef b = L->LLVMOrcCreateLLJITBuilder();
    L->LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
        b, L->LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
    LLVMOrcLLJITRef jit;
    LLVMErrorRef e = L->LLVMOrcCreateLLJIT(&jit, b);
    if (e) {
        llvm_error(L, e, "JIT creation", msg, cap);
        return NULL;
    }
    if (!define_symbols(L, jit, msg, cap)) {
        LLVMErrorRef d = L->LLVMOrcDisposeLLJIT(jit);
        if (d)
            L->LLVMDisposeErrorMessage(L->LLVMGetErrorMessage(d));
        return NULL;
    }
    return jit;
}

kiln_status jit_llvm_compile(const lower_program *p, const lower_plan *plans,
                             jit_llvm_program **out, char *msg,
                             size_t cap) {
    *out = NULL;
    const jit_llvm_api *L = jit_llvm_api_get(msg, cap);
    if (!L)
        return KILN_ERR_DEVICE;
    double t0 = now();
    jit_llvm_program *h = calloc(1, sizeof *h + sizeof(jit_llvm_kernel_fn) * (size_t)p->nkernels);
    if (!h) {
        snprintf(msg, cap, "kiln: out of memory");
        return KILN_ERR_OOM;
    }
    h->nkernels = p->nkernels;
    LLVMOrcThreadSafeContextRef tsc = L->LLVMOrcCreateNewThreadSafeContext();
    L->LLVMContextSetDiagnosticHandler(L->LLVMOrcThreadSafeContextGetContext(tsc), quiet, NULL);
    LLVMModuleRef m =
        build(L, L->LLVMOrcThreadSafeContextGetContext(tsc), p, plans, true, msg, cap);
    if (!m || !(h->jit = new_jit(L, msg, cap))) {
        if (m)
            L->LLVMDisposeModule(m);
        L->LLVMOrcDisposeThreadSafeContext(tsc);
        free(h);
        return KILN_ERR_COMPILE;
    }
    if (getenv("KILN_DEBUG") && atoi(getenv("KILN_DEBUG")) >= 4) {
        char *s = L->LLVMPrintModuleToString(m);
        fprintf(stderr, "kiln: optimised LLVM IR\n%s\n", s);
        L->LLVMDisposeMessage(s);
    }
    LLVMOrcThreadSafeModuleRef tsm = L->LLVMOrcCreateNewThreadSafeModule(m, tsc);
    L->LLVMOrcDisposeThreadSafeContext(tsc);
    LLVMErrorRef e = L->LLVMOrcLLJITAddLLVMIRModule(h->jit, L->LLVMOrcLLJITGetMainJITDylib(h->jit), tsm);
    if (e) {
        L->LLVMOrcDisposeThreadSafeModule(tsm);
        llvm_error(L, e, "adding the module", msg, cap);
        jit_llvm_free(h);
        return KILN_ERR_COMPILE;
    }
    /* The first lookup generates the machine code of the whole module. */
    for (int i = 0; i < p->nkernels; i++) {
        if (!lower_kind_has_code(p->kernels[i].kind))
            continue;
        LLVMOrcExecutorAddress a = 0;
        e = L->LLVMOrcLLJITLookup(h->jit, &a, p->kernels[i].name);
        if (e) {
            llvm_error(L, e, "code generation", msg, cap);
            jit_llvm_free(h);
            return KILN_ERR_COMPILE;
        }
        h->fns[i] = (jit_llvm_kernel_fn)(uintptr_t)a;
    }
    h->seconds = now() - t0;
    if (getenv("KILN_DEBUG") && atoi(getenv("KILN_DEBUG")) >= 2)
        fprintf(stderr, "kiln: LLVM compiled %d kernels in %.1f ms\n", p->nkernels,
                h->seconds * 1e3);
    *out = h;
    return KILN_OK;
}

jit_llvm_kernel_fn jit_llvm_kernel(const jit_llvm_program *h, int i) {
    return i >= 0 && i < h->nkernels ? h->fns[i] : NULL;
}

void jit_llvm_free(jit_llvm_program *h) {
    if (!h)
        return;
    if (h->jit) {
        LLVMErrorRef e = api.LLVMOrcDisposeLLJIT(h->jit);
        if (e)
            api.LLVMDisposeErrorMessage(api.LLVMGetErrorMessage(e));
    }
    free(h);
}
