/* llvm_render.c — kernel IR to an LLVM module through the LLVM C API: one
 * external function per kernel with the C path's signature, an internal body
 * over a range of program instances that the runtime's parallel_for splits
 * between threads, and an inner function whose buffer pointers are noalias
 * (the C path's restrict), so that the optimiser vectorises its loops.
 * Element semantics come from lower/'s rules: this file emits their
 * primitives as LLVM instructions and intrinsics (llvm.exp2, llvm.fma, …);
 * what stays here is the half types' storage conversions and rounding of
 * values computed outside the IR (reduction results, dot products).
 * Matmuls are register tiles of explicit vectors accumulated over k, then the
 * kernel's instruction list as the epilogue of each element. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cpu/llvm_api.h"

typedef struct gen {
    const jit_llvm_api *L;
    LLVMContextRef cx;
    LLVMModuleRef m;
    LLVMBuilderRef b;  /* code */
    LLVMBuilderRef ab; /* allocas, at the end of the entry block */
    LLVMBasicBlockRef start;
    LLVMValueRef fn;
    LLVMTypeRef i1, i8, i16, i32, i64, f32, f64, vd, i8p;
    int vbytes;
    const lower_kernel *k;
    LLVMValueRef *val;  /* per instruction, its value in the current scope */
    LLVMValueRef *ptr;  /* per buffer, its typed pointer */
    LLVMValueRef gidx, ridx, dot;
    LLVMValueRef tile, lane; /* an elementwise kernel's UOP_TILE and UOP_LANE */
    LLVMValueRef S;     /* the current function's run-time sizes (i64 *), or NULL */
    bool failed;
    char why[256]; /* why generation failed, when it is not memory */
} gen;

/* ---- types and constants ---- */

static bool is_float(kiln_dtype dt) { return graph_dtype_is_float(dt); }
static bool is_signed(kiln_dtype dt) { return graph_dtype_is_signed(dt); }

/* The type a dtype computes in (the C path's ctype). */
static LLVMTypeRef cty(const gen *g, kiln_dtype dt) {
    switch (dt) {
    case KILN_F64:
        return g->f64;
    case KILN_F32:
    case KILN_F16:
    case KILN_BF16:
        return g->f32;
    case KILN_I32:
        return g->i32;
    case KILN_I64:
        return g->i64;
    default:
        return g->i8;
    }
}

/* The type a dtype is stored as. */
static LLVMTypeRef sty(const gen *g, kiln_dtype dt) {
    return dt == KILN_F16 || dt == KILN_BF16 ? g->i16 : cty(g, dt);
}

static LLVMValueRef ci(const gen *g, LLVMTypeRef t, int64_t v) {
    return g->L->LLVMConstInt(t, (unsigned long long)v, 1);
}

static LLVMValueRef i64c(const gen *g, int64_t v) { return ci(g, g->i64, v); }
static LLVMValueRef i32c(const gen *g, int64_t v) { return ci(g, g->i32, v); }
static LLVMValueRef cf(const gen *g, LLVMTypeRef t, double v) { return g->L->LLVMConstReal(t, v); }

static kiln_dtype buf_dtype(const lower_kernel *k, int buf) {
    return buf < k->nouts ? k->outs[buf]->dtype : k->inputs[buf - k->nouts]->dtype;
}

/* ---- functions, variables, loops ---- */

static void fn_attr(gen *g, LLVMValueRef fn, unsigned idx, const char *name) {
    const jit_llvm_api *L = g->L;
    unsigned kind = L->LLVMGetEnumAttributeKindForName(name, strlen(name));
    L->LLVMAddAttributeAtIndex(fn, idx, L->LLVMCreateEnumAttribute(g->cx, kind, 0));
}

static LLVMValueRef add_fn(gen *g, const char *name, LLVMTypeRef ty, bool internal) {
    LLVMValueRef f = g->L->LLVMAddFunction(g->m, name, ty);
    if (internal)
        g->L->LLVMSetLinkage(f, LLVMInternalLinkage);
    fn_attr(g, f, LLVMAttributeFunctionIndex, "nounwind");
    return f;
}

static void fn_begin(gen *g, LLVMValueRef fn) {
    const jit_llvm_api *L = g->L;
    g->fn = fn;
    LLVMBasicBlockRef entry = L->LLVMAppendBasicBlockInContext(g->cx, fn, "entry");
    g->start = L->LLVMAppendBasicBlockInContext(g->cx, fn, "start");
    L->LLVMPositionBuilderAtEnd(g->ab, entry);
    L->LLVMPositionBuilderAtEnd(g->b, g->start);
}

static void fn_end(gen *g) {
    g->L->LLVMBuildRetVoid(g->b);
    g->L->LLVMBuildBr(g->ab, g->start);
}

/* A mutable variable (promoted to a register by the optimiser). */
static LLVMValueRef var(gen *g, LLVMTypeRef t, LLVMValueRef init) {
    LLVMValueRef a = g->L->LLVMBuildAlloca(g->ab, t, "");
    if (init)
        g->L->LLVMBuildStore(g->b, init, a);
    return a;
}

static LLVMValueRef get(gen *g, LLVMTypeRef t, LLVMValueRef v) {
    return g->L->LLVMBuildLoad2(g->b, t, v, "");
}

static void set(gen *g, LLVMValueRef v, LLVMValueRef x) { g->L->LLVMBuildStore(g->b, x, v); }

/* Run-time size j (lower_sizes_mark), read from S in the current function. */
static LLVMValueRef size_at(gen *g, int j) {
    if (!g->S) {
        g->failed = true;
        snprintf(g->why, sizeof g->why, "kiln: the LLVM renderer has no run-time sizes in scope");
        return i64c(g, 0);
    }
    LLVMValueRef at = i64c(g, j);
    return get(g, g->i64, g->L->LLVMBuildInBoundsGEP2(g->b, g->i64, g->S, &at, 1, ""));
}

/* A size of the kernel (field: a member of it or of its plan): the literal, or
 * its run-time value S[j] (lower_sizes_mark), read in the current function.
 * Every decision made here on a value must be one the C text shows, since the
 * program is shared by the sizes that text stands for. */
static LLVMValueRef szv(gen *g, const int64_t *field) {
    int j = lower_size_index(g->k, field);
    return j < 0 ? i64c(g, *field) : size_at(g, j);
}

/* The run-time sizes from the array of buffer addresses (the entry after the
 * buffers), for the functions that follow; NULL when the kernel has none. */
static void bind_sizes(gen *g, LLVMValueRef bufs) {
    g->S = NULL;
    if (!g->k->nsizes)
        return;
    LLVMValueRef at = i64c(g, g->k->nouts + g->k->ninputs);
    LLVMValueRef p = get(g, g->i8p, g->L->LLVMBuildInBoundsGEP2(g->b, g->i8p, bufs, &at, 1, ""));
    g->S = g->L->LLVMBuildBitCast(g->b, p, g->L->LLVMPointerType(g->i64, 0), "");
}

typedef struct loop {
    LLVMValueRef var, i;
    LLVMBasicBlockRef head, exit;
} loop;

/* for (i = lo; i < hi; i++): returns i, the builder in the body. */
static LLVMValueRef loop_open(gen *g, loop *l, LLVMValueRef lo, LLVMValueRef hi) {
    const jit_llvm_api *L = g->L;
    l->var = var(g, g->i64, lo);
    l->head = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "head");
    LLVMBasicBlockRef body = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "body");
    l->exit = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "exit");
    L->LLVMBuildBr(g->b, l->head);
    L->LLVMPositionBuilderAtEnd(g->b, l->head);
    l->i = get(g, g->i64, l->var);
    L->LLVMBuildCondBr(g->b, L->LLVMBuildICmp(g->b, LLVMIntSLT, l->i, hi, ""), body, l->exit);
    L->LLVMPositionBuilderAtEnd(g->b, body);
    return l->i;
}

/* Closes the loop. With reorder, the loop carries llvm.loop.vectorize.enable,
 * which lets the vectoriser reassociate a floating-point sum (the C path's
 * `omp simd reduction`). */
static void loop_close(gen *g, loop *l, bool reorder) {
    const jit_llvm_api *L = g->L;
    set(g, l->var, L->LLVMBuildAdd(g->b, l->i, i64c(g, 1), ""));
    LLVMValueRef br = L->LLVMBuildBr(g->b, l->head);
    if (reorder) {
        LLVMMetadataRef tmp = L->LLVMTemporaryMDNode(g->cx, NULL, 0);
        LLVMMetadataRef hint[2] = {
            L->LLVMMDStringInContext2(g->cx, "llvm.loop.vectorize.enable", 26),
            L->LLVMValueAsMetadata(L->LLVMConstInt(g->i1, 1, 0)),
        };
        LLVMMetadataRef h = L->LLVMMDNodeInContext2(g->cx, hint, 2);
        LLVMMetadataRef ops[2] = {tmp, h};
        LLVMMetadataRef id = L->LLVMMDNodeInContext2(g->cx, ops, 2);
        L->LLVMMetadataReplaceAllUsesWith(tmp, id);
        unsigned kind = L->LLVMGetMDKindIDInContext(g->cx, "llvm.loop", 9);
        L->LLVMSetMetadata(br, kind, L->LLVMMetadataAsValue(g->cx, id));
    }
    L->LLVMPositionBuilderAtEnd(g->b, l->exit);
}

/* ---- calls ---- */

static LLVMValueRef intrinsic(gen *g, const char *name, LLVMTypeRef t, LLVMValueRef *args,
                              unsigned n) {
    const jit_llvm_api *L = g->L;
    unsigned id = L->LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = L->LLVMGetIntrinsicDeclaration(g->m, id, &t, 1);
    LLVMTypeRef ft = L->LLVMIntrinsicGetType(g->cx, id, &t, 1);
    return L->LLVMBuildCall2(g->b, ft, f, args, n, "");
}

static LLVMValueRef intrinsic1(gen *g, const char *name, LLVMValueRef x) {
    return intrinsic(g, name, g->L->LLVMTypeOf(x), &x, 1);
}

/* A libm function of one or two arguments of type t (float or double): the
 * same function the C path calls, so results agree bit for bit. Marked
 * readnone: errno is never read, and the vectoriser may then widen calls of
 * the ones it knows (expf, logf, ...) by scalarising them. */
static LLVMValueRef libm(gen *g, const char *base, LLVMValueRef *args, unsigned n) {
    const jit_llvm_api *L = g->L;
    LLVMTypeRef t = L->LLVMTypeOf(args[0]);
    char name[32];
    snprintf(name, sizeof name, "%s%s", base, t == g->f32 ? "f" : "");
    LLVMTypeRef params[2] = {t, t};
    LLVMTypeRef ft = L->LLVMFunctionType(t, params, n, 0);
    LLVMValueRef f = L->LLVMGetNamedFunction(g->m, name);
    if (!f) {
        f = L->LLVMAddFunction(g->m, name, ft);
        fn_attr(g, f, LLVMAttributeFunctionIndex, "nounwind");
        fn_attr(g, f, LLVMAttributeFunctionIndex, "readnone");
        fn_attr(g, f, LLVMAttributeFunctionIndex, "willreturn");
    }
    return L->LLVMBuildCall2(g->b, ft, f, args, n, "");
}

/* ---- scalar helpers (prelude.h as IR) ---- */

#define B (g->b)
#define L_ (g->L)

static LLVMValueRef sel(gen *g, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) {
    return L_->LLVMBuildSelect(B, c, a, b, "");
}
static LLVMValueRef icmp(gen *g, LLVMIntPredicate p, LLVMValueRef a, LLVMValueRef b) {
    return L_->LLVMBuildICmp(B, p, a, b, "");
}
static LLVMValueRef fcmp(gen *g, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b) {
    return L_->LLVMBuildFCmp(B, p, a, b, "");
}
static LLVMValueRef band(gen *g, LLVMValueRef a, LLVMValueRef b) {
    return L_->LLVMBuildAnd(B, a, b, "");
}
static LLVMValueRef bor(gen *g, LLVMValueRef a, LLVMValueRef b) {
    return L_->LLVMBuildOr(B, a, b, "");
}
static LLVMValueRef shl(gen *g, LLVMValueRef a, int64_t s) {
    return L_->LLVMBuildShl(B, a, ci(g, L_->LLVMTypeOf(a), s), "");
}
static LLVMValueRef lshr(gen *g, LLVMValueRef a, int64_t s) {
    return L_->LLVMBuildLShr(B, a, ci(g, L_->LLVMTypeOf(a), s), "");
}
static LLVMValueRef bit(gen *g, LLVMValueRef c) { return L_->LLVMBuildZExt(B, c, g->i8, ""); }

/* kh_h2f: a subnormal half is m * 2^-24, exactly representable. */
static LLVMValueRef h2f(gen *g, LLVMValueRef h) {
    LLVMValueRef x = L_->LLVMBuildZExt(B, h, g->i32, "");
    LLVMValueRef s = shl(g, band(g, x, i32c(g, 0x8000)), 16);
    LLVMValueRef e = band(g, lshr(g, x, 10), i32c(g, 0x1f));
    LLVMValueRef m = band(g, x, i32c(g, 0x3ff));
    LLVMValueRef normal =
        bor(g, s, bor(g, shl(g, L_->LLVMBuildAdd(B, e, i32c(g, 112), ""), 23), shl(g, m, 13)));
    LLVMValueRef special = bor(g, s, bor(g, i32c(g, 0x7f800000), shl(g, m, 13)));
    LLVMValueRef sub = L_->LLVMBuildFMul(B, L_->LLVMBuildUIToFP(B, m, g->f32, ""),
                                         cf(g, g->f32, 0x1p-24), "");
    sub = bor(g, s, L_->LLVMBuildBitCast(B, sub, g->i32, ""));
    LLVMValueRef u = sel(g, icmp(g, LLVMIntEQ, e, i32c(g, 0)), sub,
                         sel(g, icmp(g, LLVMIntEQ, e, i32c(g, 31)), special, normal));
    return L_->LLVMBuildBitCast(B, u, g->f32, "");
}

/* Rounds r up by one where the remainder is above half, or at half with r odd. */
static LLVMValueRef round_even(gen *g, LLVMValueRef r, LLVMValueRef rem, LLVMValueRef half) {
    LLVMValueRef up = bor(g, icmp(g, LLVMIntUGT, rem, half),
                          band(g, icmp(g, LLVMIntEQ, rem, half),
                               icmp(g, LLVMIntNE, band(g, r, i32c(g, 1)), i32c(g, 0))));
    return L_->LLVMBuildAdd(B, r, L_->LLVMBuildZExt(B, up, g->i32, ""), "");
}

/* kh_f2h. */
static LLVMValueRef f2h(gen *g, LLVMValueRef f) {
    LLVMValueRef u = L_->LLVMBuildBitCast(B, f, g->i32, "");
    LLVMValueRef s = band(g, lshr(g, u, 16), i32c(g, 0x8000));
    LLVMValueRef e = band(g, lshr(g, u, 23), i32c(g, 0xff));
    LLVMValueRef m = band(g, u, i32c(g, 0x7fffff));
    LLVMValueRef nan = bor(g, s, bor(g, i32c(g, 0x7c00),
                                     sel(g, icmp(g, LLVMIntNE, m, i32c(g, 0)),
                                         bor(g, i32c(g, 0x200), lshr(g, m, 13)), i32c(g, 0))));
    LLVMValueRef e2 = L_->LLVMBuildSub(B, e, i32c(g, 112), "");
    LLVMValueRef inf = bor(g, s, i32c(g, 0x7c00));
    /* Subnormal: the shift is 14 - e2 in [14, 24] where used; clamped so the
     * lanes that do not use it stay defined. */
    LLVMValueRef sh = L_->LLVMBuildSub(B, i32c(g, 14), e2, "");
    sh = sel(g, icmp(g, LLVMIntUGT, sh, i32c(g, 24)), i32c(g, 24), sh);
    LLVMValueRef m2 = bor(g, m, i32c(g, 0x800000));
    LLVMValueRef r = L_->LLVMBuildLShr(B, m2, sh, "");
    LLVMValueRef mask = L_->LLVMBuildSub(B, L_->LLVMBuildShl(B, i32c(g, 1), sh, ""), i32c(g, 1), "");
    LLVMValueRef half = L_->LLVMBuildShl(B, i32c(g, 1), L_->LLVMBuildSub(B, sh, i32c(g, 1), ""), "");
    LLVMValueRef subn = bor(g, s, round_even(g, r, band(g, m2, mask), half));
    subn = sel(g, icmp(g, LLVMIntSLT, e2, i32c(g, -10)), s, subn);
    LLVMValueRef rn = bor(g, shl(g, e2, 10), lshr(g, m, 13));
    LLVMValueRef norm = bor(g, s, round_even(g, rn, band(g, m, i32c(g, 0x1fff)), i32c(g, 0x1000)));
    LLVMValueRef res = sel(g, icmp(g, LLVMIntSLE, e2, i32c(g, 0)), subn, norm);
    res = sel(g, icmp(g, LLVMIntSGE, e2, i32c(g, 31)), inf, res);
    res = sel(g, icmp(g, LLVMIntEQ, e, i32c(g, 255)), nan, res);
    return L_->LLVMBuildTrunc(B, res, g->i16, "");
}

static LLVMValueRef b2f(gen *g, LLVMValueRef h) {
    return L_->LLVMBuildBitCast(B, shl(g, L_->LLVMBuildZExt(B, h, g->i32, ""), 16), g->f32, "");
}

/* kh_f2b. */
static LLVMValueRef f2b(gen *g, LLVMValueRef f) {
    LLVMValueRef u = L_->LLVMBuildBitCast(B, f, g->i32, "");
    LLVMValueRef nan = icmp(g, LLVMIntUGT, band(g, u, i32c(g, 0x7fffffff)), i32c(g, 0x7f800000));
    LLVMValueRef q = bor(g, lshr(g, u, 16), i32c(g, 0x40));
    LLVMValueRef r = L_->LLVMBuildAdd(
        B, u, L_->LLVMBuildAdd(B, i32c(g, 0x7fff), band(g, lshr(g, u, 16), i32c(g, 1)), ""), "");
    return L_->LLVMBuildTrunc(B, sel(g, nan, q, lshr(g, r, 16)), g->i16, "");
}

/* kh_rh / kh_rb: a float rounded to the half type dt (no-op for others). */
static LLVMValueRef rnd(gen *g, kiln_dtype dt, LLVMValueRef x) {
    if (dt == KILN_F16)
        return h2f(g, f2h(g, x));
    if (dt == KILN_BF16)
        return b2f(g, f2b(g, x));
    return x;
}

/* A value of dt widened to double ((double)v in C). */
static LLVMValueRef to_f64(gen *g, LLVMValueRef v, kiln_dtype dt) {
    if (dt == KILN_F64)
        return v;
    if (is_float(dt))
        return L_->LLVMBuildFPExt(B, v, g->f64, "");
    return is_signed(dt) ? L_->LLVMBuildSIToFP(B, v, g->f64, "") : L_->LLVMBuildUIToFP(B, v, g->f64, "");
}

/* An integer value of dt as int64 ((uint64_t)v in C). */
static LLVMValueRef wide(gen *g, LLVMValueRef v, kiln_dtype dt) {
    if (dt == KILN_I64)
        return v;
    return is_signed(dt) ? L_->LLVMBuildSExt(B, v, g->i64, "") : L_->LLVMBuildZExt(B, v, g->i64, "");
}

/* ---- primitives (lower/lower.h's semantics, as IR) ---- */

/* Stops generation with a message naming what this target cannot emit. */
static LLVMValueRef refuse(gen *g, const lower_ins *x) {
    const lower_ins *ins = g->k->ins;
    if (!g->failed) {
        if (x->op == UOP_PRIM)
            snprintf(g->why, sizeof g->why,
                     "kiln: the LLVM renderer has no form of primitive %s on %s (operand %s)",
                     lower_prim_name(x->prim), graph_dtype_name(x->dt),
                     x->a >= 0 ? graph_dtype_name(ins[x->a].dt) : "none");
        else
            snprintf(g->why, sizeof g->why, "kiln: the LLVM renderer cannot emit %s %s of %s",
                     lower_uop_name(x->op),
                     x->op == UOP_ALU || x->op == UOP_RAND ? graph_op_name(x->gop) : "",
                     graph_dtype_name(x->dt));
    }
    g->failed = true;
    return L_->LLVMGetUndef(cty(g, x->dt));
}

static const char *float_intrinsic(lower_prim p) {
    switch (p) {
    case PRIM_ABS:
        return "llvm.fabs";
    case PRIM_SQRT:
        return "llvm.sqrt";
    case PRIM_EXP2:
        return "llvm.exp2";
    case PRIM_LOG2:
        return "llvm.log2";
    case PRIM_LOG:
        return "llvm.log";
    case PRIM_EXP:
        return "llvm.exp";
    case PRIM_SIN:
        return "llvm.sin";
    case PRIM_COS:
        return "llvm.cos";
    case PRIM_FLOOR:
        return "llvm.floor";
    case PRIM_TRUNC:
        return "llvm.trunc";
    default:
        return NULL;
    }
}

static LLVMValueRef float_prim(gen *g, const lower_ins *x, LLVMValueRef a, LLVMValueRef b,
                               LLVMValueRef c) {
    const char *f = float_intrinsic(x->prim);
    if (f)
        return intrinsic1(g, f, a);
    const char *lib = lower_prim_libm(x->prim);
    if (lib) { /* no intrinsic: libm's, as the C path calls it */
        LLVMValueRef args[2] = {a, b};
        return libm(g, lib, args, (unsigned)lower_prim_arity(x->prim));
    }
    switch (x->prim) {
    case PRIM_NEG:
        return L_->LLVMBuildFNeg(B, a, "");
    case PRIM_ADD:
        return L_->LLVMBuildFAdd(B, a, b, "");
    case PRIM_SUB:
        return L_->LLVMBuildFSub(B, a, b, "");
    case PRIM_MUL:
        return L_->LLVMBuildFMul(B, a, b, "");
    case PRIM_DIV:
        return L_->LLVMBuildFDiv(B, a, b, "");
    case PRIM_FMA: {
        LLVMValueRef args[3] = {a, b, c};
        return intrinsic(g, "llvm.fma", L_->LLVMTypeOf(a), args, 3);
    }
    case PRIM_MAX:
    case PRIM_MIN: {
        LLVMRealPredicate p = x->prim == PRIM_MAX ? LLVMRealOGE : LLVMRealOLE;
        LLVMValueRef r = sel(g, fcmp(g, p, a, b), a, b);
        r = sel(g, fcmp(g, LLVMRealUNO, b, b), b, r);
        return sel(g, fcmp(g, LLVMRealUNO, a, a), a, r);
    }
    default:
        return refuse(g, x);
    }
}

/* Division and remainder with lower.h's total rules: x / 0 = x % 0 = 0,
 * MIN / -1 = MIN and MIN % -1 = 0, without ever executing a trapping one. */
static LLVMValueRef int_divide(gen *g, const lower_ins *x, LLVMValueRef a, LLVMValueRef b) {
    LLVMTypeRef t = cty(g, x->dt);
    bool s = is_signed(x->dt);
    LLVMValueRef zero = ci(g, t, 0), z = icmp(g, LLVMIntEQ, b, zero);
    LLVMValueRef m1 = s ? icmp(g, LLVMIntEQ, b, ci(g, t, -1)) : NULL;
    LLVMValueRef bad = s ? bor(g, z, m1) : z;
    LLVMValueRef safe = sel(g, bad, ci(g, t, 1), b);
    if (x->prim == PRIM_DIV) {
        LLVMValueRef q = s ? L_->LLVMBuildSDiv(B, a, safe, "") : L_->LLVMBuildUDiv(B, a, safe, "");
        if (s)
            q = sel(g, m1, L_->LLVMBuildSub(B, zero, a, ""), q);
        return sel(g, z, zero, q);
    }
    LLVMValueRef r = s ? L_->LLVMBuildSRem(B, a, safe, "") : L_->LLVMBuildURem(B, a, safe, "");
    return sel(g, bad, zero, r);
}

static LLVMValueRef int_prim(gen *g, const lower_ins *x, LLVMValueRef a, LLVMValueRef b) {
    LLVMTypeRef t = cty(g, x->dt);
    bool s = is_signed(x->dt);
    switch (x->prim) {
    case PRIM_NEG:
        return L_->LLVMBuildSub(B, ci(g, t, 0), a, "");
    case PRIM_ABS:
        return s ? sel(g, icmp(g, LLVMIntSLT, a, ci(g, t, 0)), L_->LLVMBuildSub(B, ci(g, t, 0), a, ""), a)
                 : a;
    case PRIM_ADD:
        return L_->LLVMBuildAdd(B, a, b, "");
    case PRIM_SUB:
        return L_->LLVMBuildSub(B, a, b, "");
    case PRIM_MUL:
        return L_->LLVMBuildMul(B, a, b, "");
    case PRIM_DIV:
    case PRIM_MOD:
        return int_divide(g, x, a, b);
    case PRIM_MAX:
        return sel(g, icmp(g, s ? LLVMIntSGT : LLVMIntUGT, a, b), a, b);
    case PRIM_MIN:
        return sel(g, icmp(g, s ? LLVMIntSLT : LLVMIntULT, a, b), a, b);
    case PRIM_AND:
        return band(g, a, b);
    case PRIM_OR:
        return bor(g, a, b);
    case PRIM_XOR:
        return L_->LLVMBuildXor(B, a, b, "");
    case PRIM_SHL:
        return L_->LLVMBuildShl(B, a, b, "");
    case PRIM_SHR:
        return L_->LLVMBuildLShr(B, a, b, "");
    default:
        return refuse(g, x);
    }
}

static LLVMValueRef compare_prim(gen *g, const lower_ins *x, kiln_dtype in, LLVMValueRef a,
                                 LLVMValueRef b) {
    int k = x->prim - PRIM_LT;
    if (is_float(in)) {
        static const LLVMRealPredicate fp[] = {LLVMRealOLT, LLVMRealOLE, LLVMRealOEQ, LLVMRealUNE};
        return bit(g, fcmp(g, fp[k], a, b));
    }
    bool s = is_signed(in);
    LLVMIntPredicate ip[] = {s ? LLVMIntSLT : LLVMIntULT, s ? LLVMIntSLE : LLVMIntULE, LLVMIntEQ,
                             LLVMIntNE};
    return bit(g, icmp(g, ip[k], a, b));
}

/* lower.h's cast: the rules have clamped a float cast to an integer into
 * range, so the plain conversion is defined. */
static LLVMValueRef cast_prim(gen *g, kiln_dtype from, kiln_dtype to, LLVMValueRef v) {
    LLVMTypeRef t = cty(g, to), ft = cty(g, from);
    if (to == KILN_BOOL)
        return bit(g, is_float(from) ? fcmp(g, LLVMRealUNE, v, cf(g, ft, 0.0))
                                     : icmp(g, LLVMIntNE, v, ci(g, ft, 0)));
    if (ft == t)
        return v;
    if (is_float(to) && is_float(from))
        return to == KILN_F64 ? L_->LLVMBuildFPExt(B, v, t, "") : L_->LLVMBuildFPTrunc(B, v, t, "");
    if (is_float(to))
        return is_signed(from) ? L_->LLVMBuildSIToFP(B, v, t, "") : L_->LLVMBuildUIToFP(B, v, t, "");
    if (is_float(from))
        return is_signed(to) ? L_->LLVMBuildFPToSI(B, v, t, "") : L_->LLVMBuildFPToUI(B, v, t, "");
    if (L_->LLVMGetIntTypeWidth(t) < L_->LLVMGetIntTypeWidth(ft))
        return L_->LLVMBuildTrunc(B, v, t, "");
    return is_signed(from) ? L_->LLVMBuildSExt(B, v, t, "") : L_->LLVMBuildZExt(B, v, t, "");
}

static LLVMValueRef prim(gen *g, const lower_ins *x) {
    const lower_ins *ins = g->k->ins;
    LLVMValueRef *v = g->val;
    LLVMValueRef a = x->a >= 0 ? v[x->a] : NULL, b = x->b >= 0 ? v[x->b] : NULL,
                 c = x->c >= 0 ? v[x->c] : NULL;
    kiln_dtype in = x->a >= 0 ? ins[x->a].dt : x->dt;
    if (!a || (lower_prim_arity(x->prim) >= 2 && !b))
        return refuse(g, x);
    if (x->prim == PRIM_CAST)
        return cast_prim(g, in, x->dt, a);
    if (x->prim == PRIM_BITCAST) {
        bool ok = (x->dt == KILN_I32 && cty(g, in) == g->f32) || (x->dt == KILN_F32 && in == KILN_I32) ||
                  (x->dt == KILN_I64 && in == KILN_F64) || (x->dt == KILN_F64 && in == KILN_I64);
        return ok ? L_->LLVMBuildBitCast(B, a, cty(g, x->dt), "") : refuse(g, x);
    }
    if (x->prim >= PRIM_LT && x->prim <= PRIM_NE)
        return compare_prim(g, x, in, a, b);
    if (x->dt == KILN_BOOL) {
        bool logic = x->prim == PRIM_AND || x->prim == PRIM_OR || x->prim == PRIM_XOR;
        return logic ? int_prim(g, x, a, b) : refuse(g, x);
    }
    if (is_float(x->dt))
        return x->prim == PRIM_FMA && !c ? refuse(g, x) : float_prim(g, x, a, b, c);
    return int_prim(g, x, a, b);
}

/* ---- memory ---- */

static LLVMValueRef elem_ptr(gen *g, int buf, kiln_dtype dt, LLVMValueRef idx) {
    return L_->LLVMBuildInBoundsGEP2(B, sty(g, dt), g->ptr[buf], &idx, 1, "");
}

static LLVMValueRef load(gen *g, int buf, LLVMValueRef idx) {
    kiln_dtype dt = buf_dtype(g->k, buf);
    LLVMValueRef v = get(g, sty(g, dt), elem_ptr(g, buf, dt, idx));
    return dt == KILN_F16 ? h2f(g, v) : dt == KILN_BF16 ? b2f(g, v) : v;
}

static void store(gen *g, int buf, LLVMValueRef idx, LLVMValueRef v) {
    kiln_dtype dt = buf_dtype(g->k, buf);
    v = dt == KILN_F16 ? f2h(g, v) : dt == KILN_BF16 ? f2b(g, v) : v;
    set(g, elem_ptr(g, buf, dt, idx), v);
}

static void store_results(gen *g) {
    const lower_kernel *k = g->k;
    for (int o = 0; o < k->nouts; o++)
        store(g, o, g->val[k->store], g->val[k->results[o]]);
}

/* ---- instructions ---- */

static LLVMValueRef imm(gen *g, kiln_dtype dt, graph_scalar v) {
    if (is_float(dt))
        return cf(g, cty(g, dt), v.f);
    return ci(g, cty(g, dt), v.i);
}

static void ins_value(gen *g, int i) {
    const lower_ins *x = &g->k->ins[i];
    LLVMValueRef *v = g->val, r = NULL;
    switch (x->op) {
    case UOP_GIDX:
        r = g->gidx;
        break;
    case UOP_RIDX:
        r = g->ridx;
        break;
    case UOP_TILE:
        r = g->tile;
        break;
    case UOP_LANE:
        r = g->lane;
        break;
    case UOP_IMM:
        if (x->sized) {
            /* the value's bits (a float's as a double's), from S */
            r = size_at(g, x->sized - 1);
            if (is_float(x->dt)) {
                r = L_->LLVMBuildBitCast(B, r, g->f64, "");
                if (cty(g, x->dt) != g->f64)
                    r = L_->LLVMBuildFPTrunc(B, r, cty(g, x->dt), "");
            } else if (cty(g, x->dt) != g->i64) {
                r = L_->LLVMBuildTrunc(B, r, cty(g, x->dt), "");
            }
        } else {
            r = imm(g, x->dt, x->imm);
        }
        break;
    case UOP_IADD:
        r = L_->LLVMBuildAdd(B, v[x->a], v[x->b], "");
        break;
    case UOP_IMUL:
        r = L_->LLVMBuildMul(B, v[x->a], v[x->b], "");
        break;
    case UOP_IDIV:
        r = L_->LLVMBuildSDiv(B, v[x->a], v[x->b], "");
        break;
    case UOP_IMOD:
        r = L_->LLVMBuildSRem(B, v[x->a], v[x->b], "");
        break;
    case UOP_ILT:
        r = bit(g, icmp(g, LLVMIntSLT, v[x->a], v[x->b]));
        break;
    case UOP_AND:
        r = bit(g, band(g, icmp(g, LLVMIntNE, v[x->a], ci(g, g->i8, 0)),
                        icmp(g, LLVMIntNE, v[x->b], ci(g, g->i8, 0))));
        break;
    case UOP_ICLAMP: {
        int64_t hi = x->imm.i > 0 ? x->imm.i - 1 : 0;
        LLVMValueRef w = wide(g, v[x->a], g->k->ins[x->a].dt);
        w = sel(g, icmp(g, LLVMIntSLT, w, i64c(g, 0)), i64c(g, 0), w);
        r = sel(g, icmp(g, LLVMIntSGT, w, i64c(g, hi)), i64c(g, hi), w);
        break;
    }
    case UOP_IVALID: {
        LLVMValueRef w = wide(g, v[x->a], g->k->ins[x->a].dt);
        r = bit(g, band(g, icmp(g, LLVMIntSGE, w, i64c(g, 0)),
                        icmp(g, LLVMIntSLT, w, i64c(g, x->imm.i))));
        break;
    }
    case UOP_LOAD:
        if (x->b >= 0) {
            /* A masked load reads index 0 where invalid, never out of bounds. */
            LLVMValueRef ok = icmp(g, LLVMIntNE, v[x->b], ci(g, g->i8, 0));
            LLVMValueRef val = load(g, x->buf, sel(g, ok, v[x->a], i64c(g, 0)));
            r = sel(g, ok, val, L_->LLVMConstNull(cty(g, x->dt)));
        } else {
            r = load(g, x->buf, v[x->a]);
        }
        break;
    case UOP_PRIM:
        r = prim(g, x);
        break;
    case UOP_WHERE:
        r = sel(g, icmp(g, LLVMIntNE, v[x->a], ci(g, g->i8, 0)), v[x->b], v[x->c]);
        break;
    case UOP_REDUCE:
        return; /* set once its pass is done */
    case UOP_ACC:
        if (is_float(x->dt))
            r = rnd(g, x->dt, g->dot);
        else
            r = x->dt == KILN_I64 ? g->dot : L_->LLVMBuildTrunc(B, g->dot, cty(g, x->dt), "");
        break;
    default:
        r = refuse(g, x);
        break;
    }
    v[i] = r;
}

/* ---- kernels ---- */

static LLVMValueRef add(gen *g, LLVMValueRef a, LLVMValueRef b) { return L_->LLVMBuildAdd(B, a, b, ""); }
static LLVMValueRef mul(gen *g, LLVMValueRef a, LLVMValueRef b) { return L_->LLVMBuildMul(B, a, b, ""); }

/* A block's values; a store pass reads its stash back from output 0 (see
 * lower_block). */
static void block_values(gen *g, const lower_block *blk) {
    for (int i = 0; i < blk->n; i++) {
        int id = blk->ins[i];
        if (blk->kind == LOWER_BLOCK_STORE && id == blk->stash)
            g->val[id] = load(g, 0, g->val[g->k->store]);
        else
            ins_value(g, id);
    }
}

static void elementwise(gen *g, LLVMValueRef lo, LLVMValueRef hi, const lower_plan *plan) {
    const lower_kernel *k = g->k;
    LLVMValueRef T = i64c(g, k->tile), N = szv(g, &k->numel);
    /* tile by tile, so that a tile's index (UOP_TILE) is the outer loop's
     * and an element's place in it (UOP_LANE) linear in the inner one's */
    loop tl, l;
    g->tile = loop_open(g, &tl, lo, hi);
    LLVMValueRef glo = L_->LLVMBuildMul(B, g->tile, T, "");
    LLVMValueRef ghi = L_->LLVMBuildAdd(B, glo, T, "");
    if (!lower_tiles_whole(k))
        ghi = sel(g, icmp(g, LLVMIntSLT, ghi, N), ghi, N);
    g->gidx = loop_open(g, &l, glo, ghi);
    g->lane = L_->LLVMBuildSub(B, g->gidx, glo, "");
    for (int i = 0; i < plan->nblocks; i++)
        block_values(g, &plan->blocks[i]);
    store_results(g);
    loop_close(g, &l, false);
    loop_close(g, &tl, false);
}

/* A reduction's accumulator (prelude semantics: sums in double or uint64,
 * max/min/arg keeping the first of ties, NaN winning). */
typedef struct racc {
    const lower_ins *x;
    kiln_dtype in;
    bool fl, sum;
    LLVMTypeRef t;
    LLVMValueRef acc, at;
} racc;

static racc racc_new(gen *g, int red) {
    racc a = {.x = &g->k->ins[red]};
    a.in = g->k->ins[a.x->a].dt;
    a.fl = is_float(a.in);
    a.sum = a.x->gop == GRAPH_SUM;
    a.t = a.fl ? g->f64 : g->i64;
    a.acc = var(g, a.t, a.fl ? cf(g, g->f64, 0.0) : i64c(g, 0));
    a.at = var(g, g->i64, i64c(g, -1));
    return a;
}

/* Takes value v (already widened to the accumulator's type) at position r;
 * with `valid`, only where it holds. */
static void racc_step(gen *g, racc *a, LLVMValueRef v, LLVMValueRef r, LLVMValueRef valid) {
    LLVMValueRef cur = get(g, a->t, a->acc);
    if (a->sum) {
        LLVMValueRef s = a->fl ? L_->LLVMBuildFAdd(B, cur, v, "") : L_->LLVMBuildAdd(B, cur, v, "");
        set(g, a->acc, valid ? sel(g, valid, s, cur) : s);
        return;
    }
    bool mx = a->x->gop == GRAPH_RMAX || a->x->gop == GRAPH_ARGMAX;
    LLVMValueRef pos = get(g, g->i64, a->at);
    LLVMValueRef take = icmp(g, LLVMIntSLT, pos, i64c(g, 0));
    if (a->fl)
        take = bor(g, take,
                   band(g, fcmp(g, LLVMRealOEQ, cur, cur),
                        bor(g, fcmp(g, LLVMRealUNE, v, v),
                            fcmp(g, mx ? LLVMRealOGT : LLVMRealOLT, v, cur))));
    else
        take = bor(g, take, icmp(g, mx ? LLVMIntSGT : LLVMIntSLT, v, cur));
    if (valid)
        take = band(g, take, valid);
    set(g, a->acc, sel(g, take, v, cur));
    set(g, a->at, sel(g, take, r, pos));
}

static LLVMValueRef racc_value(gen *g, racc *a) {
    kiln_dtype dt = a->x->dt;
    LLVMValueRef r;
    if (a->x->gop == GRAPH_ARGMAX || a->x->gop == GRAPH_ARGMIN) {
        LLVMValueRef pos = get(g, g->i64, a->at);
        r = sel(g, icmp(g, LLVMIntSLT, pos, i64c(g, 0)), i64c(g, 0), pos);
        if (dt != KILN_I64)
            r = L_->LLVMBuildTrunc(B, r, cty(g, dt), "");
    } else {
        r = get(g, a->t, a->acc);
        if (a->fl)
            r = dt == KILN_F64 ? r : rnd(g, dt, L_->LLVMBuildFPTrunc(B, r, g->f32, ""));
        else if (dt != KILN_I64)
            r = L_->LLVMBuildTrunc(B, r, cty(g, dt), "");
    }
    return r;
}

/* One pass over reduced elements [lo, hi) into accumulator a. */
static void racc_pass(gen *g, racc *a, const lower_block *blk, LLVMValueRef lo, LLVMValueRef hi) {
    loop l;
    g->ridx = loop_open(g, &l, lo, hi);
    block_values(g, blk);
    if (blk->stash >= 0)
        store(g, 0, g->val[g->k->store], g->val[blk->stash]);
    LLVMValueRef v = g->val[a->x->a];
    if (a->t != g->f32) /* f32: a float chunk's sum (row_pass), its values f32 already */
        v = a->fl ? to_f64(g, v, a->in) : wide(g, v, a->in);
    racc_step(g, a, v, g->ridx, NULL);
    loop_close(g, &l, a->sum && a->fl);
}

/* A float's bits as a signed integer that orders as the float does (the
 * magnitude bits of a negative value flipped); its own inverse. NaN has
 * its own flag in extreme(), so where it lands does not matter. */
static LLVMValueRef order_key(gen *g, LLVMValueRef bits, LLVMTypeRef it, int64_t mag) {
    LLVMValueRef m = sel(g, icmp(g, LLVMIntSLT, bits, ci(g, it, 0)), ci(g, it, mag), ci(g, it, 0));
    return L_->LLVMBuildXor(B, bits, m, "");
}

/* Max or min as an integer max or min over order keys, which the loop
 * vectoriser widens without fast-math flags (a float compare-and-select it
 * may not reorder), with NaN tracked by a flag of its own, as the C path
 * does. The ordered scan that argmax needs left softmax's row max scalar. */
static void extreme(gen *g, const lower_block *blk) {
    const lower_ins *x = &g->k->ins[blk->reduce];
    kiln_dtype in = g->k->ins[x->a].dt, dt = x->dt;
    bool mx = x->gop == GRAPH_RMAX, fl = is_float(in), d64 = in == KILN_F64;
    LLVMTypeRef kt = fl && !d64 ? g->i32 : g->i64;
    int64_t lo = kt == g->i32 ? INT32_MIN : INT64_MIN, hi = kt == g->i32 ? INT32_MAX : INT64_MAX;
    int64_t mag = kt == g->i32 ? INT32_MAX : INT64_MAX;
    LLVMValueRef acc = var(g, kt, ci(g, kt, mx ? lo : hi)), nan = var(g, g->i8, ci(g, g->i8, 0));
    loop l;
    LLVMValueRef R = szv(g, &g->k->rnumel);
    g->ridx = loop_open(g, &l, i64c(g, 0), R);
    block_values(g, blk);
    LLVMValueRef v = g->val[x->a], key;
    if (fl) {
        key = order_key(g, L_->LLVMBuildBitCast(B, v, kt, ""), kt, mag);
        LLVMValueRef isnan = L_->LLVMBuildZExt(B, fcmp(g, LLVMRealUNO, v, v), g->i8, "");
        set(g, nan, L_->LLVMBuildOr(B, get(g, g->i8, nan), isnan, ""));
    } else {
        key = wide(g, v, in);
    }
    LLVMValueRef cur = get(g, kt, acc);
    set(g, acc, sel(g, icmp(g, mx ? LLVMIntSGT : LLVMIntSLT, key, cur), key, cur));
    loop_close(g, &l, true);
    /* an empty reduction is 0 (the select folds away when R is a literal) */
    LLVMValueRef empty = icmp(g, LLVMIntEQ, R, i64c(g, 0));
    LLVMValueRef r = sel(g, empty, ci(g, kt, 0), get(g, kt, acc));
    if (fl) {
        LLVMTypeRef ft = d64 ? g->f64 : g->f32;
        r = L_->LLVMBuildBitCast(B, order_key(g, r, kt, mag), ft, "");
        r = sel(g, icmp(g, LLVMIntNE, get(g, g->i8, nan), ci(g, g->i8, 0)), cf(g, ft, NAN), r);
        r = sel(g, empty, cf(g, ft, 0.0), r);
    } else if (dt != KILN_I64) {
        r = L_->LLVMBuildTrunc(B, r, cty(g, dt), "");
    }
    g->val[blk->reduce] = r;
}



/* ---- rows split across threads (the plan's `split`) ----
 * Each pass over a row runs as SPLIT_CHUNKS chunks spread over the threads by
 * jit_llvm_parallel_for, each chunk its own function. A chunk function gets
 * a context of 64-bit slots: the buffer array, the row, the results of the
 * reductions finished so far, and per chunk a partial accumulator and
 * position; it recomputes the row's outer values (cheap: once per chunk).
 * The chunks then combine in order, so the first of equal values (and the
 * first NaN) still wins, as in the C path. */
enum { SPLIT_CHUNKS = 256, SLOT_BUFS = 0, SLOT_ROW = 1, SLOT_REDS = 2 };

static LLVMValueRef slot_ptr(gen *g, LLVMValueRef ctx, int64_t i, LLVMTypeRef t) {
    LLVMValueRef p = L_->LLVMBuildInBoundsGEP2(B, g->i64, ctx, (LLVMValueRef[]){i64c(g, i)}, 1, "");
    return L_->LLVMBuildBitCast(B, p, g->L->LLVMPointerType(t, 0), "");
}

static LLVMValueRef slot_at(gen *g, LLVMValueRef ctx, LLVMValueRef i, LLVMTypeRef t) {
    LLVMValueRef p = L_->LLVMBuildInBoundsGEP2(B, g->i64, ctx, &i, 1, "");
    return L_->LLVMBuildBitCast(B, p, g->L->LLVMPointerType(t, 0), "");
}

static int plan_reductions(const lower_plan *plan) {
    int n = 0;
    for (int i = 0; i < plan->nblocks; i++)
        n += plan->blocks[i].kind == LOWER_BLOCK_REDUCE;
    return n;
}

/* The buffers' typed pointers from the array of buffer addresses. */
static void bind_buffers(gen *g, LLVMValueRef bufs) {
    const lower_kernel *k = g->k;
    for (int i = 0; i < k->nouts + k->ninputs; i++) {
        LLVMValueRef at = i64c(g, i);
        LLVMValueRef p = get(g, g->i8p, L_->LLVMBuildInBoundsGEP2(B, g->i8p, bufs, &at, 1, ""));
        g->ptr[i] = L_->LLVMBuildBitCast(B, p, g->L->LLVMPointerType(sty(g, buf_dtype(k, i)), 0), "");
    }
    bind_sizes(g, bufs);
}

/* The chunk function of block `upto` (a reduction or the store pass). */
static LLVMValueRef split_chunk_fn(gen *g, const lower_plan *plan, int upto, LLVMTypeRef body_t) {
    const jit_llvm_api *L = g->L;
    const lower_kernel *k = g->k;
    char name[128];
    snprintf(name, sizeof name, "%s.chunk%d", k->name, upto);
    LLVMValueRef fn = add_fn(g, name, body_t, true);
    fn_begin(g, fn);
    LLVMValueRef ctx = L->LLVMBuildBitCast(B, L->LLVMGetParam(fn, 0), L->LLVMPointerType(g->i64, 0), "");
    LLVMValueRef bufs = get(g, g->i8p, slot_ptr(g, ctx, SLOT_BUFS, g->i8p));
    bind_buffers(g, L->LLVMBuildBitCast(B, bufs, L->LLVMPointerType(g->i8p, 0), ""));
    g->gidx = get(g, g->i64, slot_ptr(g, ctx, SLOT_ROW, g->i64));
    int nred = plan_reductions(plan), q = 0;
    for (int i = 0; i < upto; i++) {
        const lower_block *blk = &plan->blocks[i];
        if (blk->kind == LOWER_BLOCK_OUTER) {
            block_values(g, blk);
        } else if (blk->kind == LOWER_BLOCK_REDUCE) {
            LLVMTypeRef t = cty(g, k->ins[blk->reduce].dt);
            g->val[blk->reduce] = get(g, t, slot_ptr(g, ctx, SLOT_REDS + q++, t));
        }
    }
    const lower_block *blk = &plan->blocks[upto];
    loop cl;
    LLVMValueRef c = loop_open(g, &cl, L->LLVMGetParam(fn, 1), L->LLVMGetParam(fn, 2));
    LLVMValueRef R = szv(g, &k->rnumel), C = i64c(g, SPLIT_CHUNKS);
    LLVMValueRef lo = L_->LLVMBuildSDiv(B, mul(g, R, c), C, "");
    LLVMValueRef hi = L_->LLVMBuildSDiv(B, mul(g, R, add(g, c, i64c(g, 1))), C, "");
    if (blk->kind == LOWER_BLOCK_REDUCE) {
        racc a = racc_new(g, blk->reduce);
        racc_pass(g, &a, blk, lo, hi);
        int64_t base = SLOT_REDS + nred;
        set(g, slot_at(g, ctx, add(g, i64c(g, base), c), a.t), get(g, a.t, a.acc));
        set(g, slot_at(g, ctx, add(g, i64c(g, base + SPLIT_CHUNKS), c), g->i64), get(g, g->i64, a.at));
    } else {
        loop l;
        g->ridx = loop_open(g, &l, lo, hi);
        block_values(g, blk);
        store_results(g);
        loop_close(g, &l, false);
    }
    loop_close(g, &cl, false);
    fn_end(g);
    return fn;
}

/* The entry of a split kernel: the rows one after the other, each pass
 * spread over the threads. */
static void split_rows(gen *g, const lower_plan *plan, LLVMValueRef entry, LLVMValueRef pfor,
                       LLVMTypeRef pfor_t, LLVMTypeRef body_t) {
    const jit_llvm_api *L = g->L;
    const lower_kernel *k = g->k;
    LLVMValueRef *chunks = calloc((size_t)plan->nblocks, sizeof *chunks);
    if (!chunks) {
        g->failed = true;
        return;
    }
    for (int i = 0; i < plan->nblocks; i++)
        if (plan->blocks[i].kind != LOWER_BLOCK_OUTER)
            chunks[i] = split_chunk_fn(g, plan, i, body_t);
    fn_begin(g, entry);
    int nred = plan_reductions(plan);
    int64_t nslots = SLOT_REDS + nred + 2 * SPLIT_CHUNKS;
    LLVMValueRef ctxa = var(g, L->LLVMArrayType(g->i64, (unsigned)nslots), NULL);
    LLVMValueRef ctx = L->LLVMBuildBitCast(B, ctxa, L->LLVMPointerType(g->i64, 0), "");
    LLVMValueRef bufs = L->LLVMGetParam(entry, 0);
    set(g, slot_ptr(g, ctx, SLOT_BUFS, g->i8p), L->LLVMBuildBitCast(B, bufs, g->i8p, ""));
    bind_buffers(g, bufs);
    LLVMValueRef ctx8 = L->LLVMBuildBitCast(B, ctx, g->i8p, "");
    loop rows;
    g->gidx = loop_open(g, &rows, i64c(g, 0), szv(g, &k->numel));
    set(g, slot_ptr(g, ctx, SLOT_ROW, g->i64), g->gidx);
    bool stored = false;
    for (int i = 0, q = 0; i < plan->nblocks; i++) {
        const lower_block *blk = &plan->blocks[i];
        if (blk->kind == LOWER_BLOCK_OUTER) {
            block_values(g, blk);
            continue;
        }
        LLVMValueRef a[4] = {chunks[i], ctx8, i64c(g, SPLIT_CHUNKS), L->LLVMGetParam(entry, 1)};
        L->LLVMBuildCall2(B, pfor_t, pfor, a, 4, "");
        if (blk->kind == LOWER_BLOCK_STORE) {
            stored = true;
            continue;
        }
        racc acc = racc_new(g, blk->reduce);
        int64_t base = SLOT_REDS + nred;
        loop cl;
        LLVMValueRef c = loop_open(g, &cl, i64c(g, 0), i64c(g, SPLIT_CHUNKS));
        LLVMValueRef at = get(g, g->i64, slot_at(g, ctx, add(g, i64c(g, base + SPLIT_CHUNKS), c), g->i64));
        LLVMValueRef v = get(g, acc.t, slot_at(g, ctx, add(g, i64c(g, base), c), acc.t));
        racc_step(g, &acc, v, at, acc.sum ? NULL : icmp(g, LLVMIntSGE, at, i64c(g, 0)));
        loop_close(g, &cl, false);
        LLVMValueRef r = racc_value(g, &acc);
        g->val[blk->reduce] = r;
        set(g, slot_ptr(g, ctx, SLOT_REDS + q++, cty(g, k->ins[blk->reduce].dt)), r);
    }
    if (!stored)
        store_results(g);
    loop_close(g, &rows, false);
    fn_end(g);
    free(chunks);
}

/* A scatter pass: the row's source elements in order (never vectorised:
 * an element may land where the one before did), each stored only where
 * its index is inside the axis. */
static void scatter_pass(gen *g, const lower_block *blk) {
    const jit_llvm_api *L = g->L;
    const lower_kernel *k = g->k;
    const lower_scatter_store *st = &k->scatter[blk->reduce];
    loop l;
    g->ridx = loop_open(g, &l, i64c(g, 0), szv(g, &k->snumel));
    block_values(g, blk);
    if (st->valid >= 0) {
        LLVMBasicBlockRef yes = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "store");
        LLVMBasicBlockRef next = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "next");
        L->LLVMBuildCondBr(B, icmp(g, LLVMIntNE, g->val[st->valid], ci(g, g->i8, 0)), yes, next);
        L->LLVMPositionBuilderAtEnd(B, yes);
        store(g, 0, g->val[st->at], g->val[st->value]);
        L->LLVMBuildBr(B, next);
        L->LLVMPositionBuilderAtEnd(B, next);
    } else {
        store(g, 0, g->val[st->at], g->val[st->value]);
    }
    loop_close(g, &l, false);
}

/* The plan's prefetch (plan.c: plan_prefetch) before the chunk [c0, c1) of
 * a pass, as render_c.c prints it: for row gidx + 1, when there is one,
 * lower_prefetch_loads's loads at every step-th element of the chunk, each
 * an llvm.prefetch (read, into L2, data). Their index values are computed
 * for the next row and the current row's put back after. */
static void prefetch_chunk(gen *g, const lower_plan *plan, LLVMValueRef c0, LLVMValueRef c1) {
    const jit_llvm_api *L = g->L;
    const lower_kernel *k = g->k;
    bool *need = calloc((size_t)k->nins, sizeof *need);
    int *loads = malloc((size_t)k->nins * sizeof *loads), step;
    LLVMValueRef *saved = malloc((size_t)k->nins * sizeof *saved);
    if (!need || !loads || !saved) {
        g->failed = true;
        free(need), free(loads), free(saved);
        return;
    }
    int nl = lower_prefetch_loads(k, plan, need, loads, &step);
    if (nl) {
        LLVMValueRef next = add(g, g->gidx, i64c(g, 1)), gsave = g->gidx, rsave = g->ridx;
        LLVMBasicBlockRef yes = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "prefetch");
        LLVMBasicBlockRef done = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "prefetched");
        L->LLVMBuildCondBr(B, icmp(g, LLVMIntSLT, next, szv(g, &k->numel)), yes, done);
        L->LLVMPositionBuilderAtEnd(B, yes);
        memcpy(saved, g->val, (size_t)k->nins * sizeof *saved);
        g->gidx = next;
        LLVMValueRef n = L->LLVMBuildSDiv(B, add(g, L->LLVMBuildSub(B, c1, c0, ""), i64c(g, step - 1)),
                                          i64c(g, step), "");
        loop l;
        LLVMValueRef q = loop_open(g, &l, i64c(g, 0), n);
        g->ridx = add(g, c0, mul(g, q, i64c(g, step)));
        for (int id = 0; id < k->nins; id++)
            if (need[id])
                ins_value(g, id);
        for (int i = 0; i < nl; i++) {
            const lower_ins *x = &k->ins[loads[i]];
            LLVMValueRef idx = g->val[x->a];
            if (x->b >= 0)
                idx = sel(g, icmp(g, LLVMIntNE, g->val[x->b], ci(g, g->i8, 0)), idx, i64c(g, 0));
            LLVMValueRef args[4] = {
                L->LLVMBuildBitCast(B, elem_ptr(g, x->buf, buf_dtype(k, x->buf), idx), g->i8p, ""),
                ci(g, g->i32, 0), ci(g, g->i32, 2), ci(g, g->i32, 1)};
            intrinsic(g, "llvm.prefetch", g->i8p, args, 4);
        }
        loop_close(g, &l, false);
        memcpy(g->val, saved, (size_t)k->nins * sizeof *saved);
        g->gidx = gsave, g->ridx = rsave;
        L->LLVMBuildBr(B, done);
        L->LLVMPositionBuilderAtEnd(B, done);
    }
    free(need), free(loads), free(saved);
}

/* The store pass over the row's elements [lo, hi). */
static void store_pass(gen *g, const lower_block *blk, LLVMValueRef lo, LLVMValueRef hi) {
    loop l;
    g->ridx = loop_open(g, &l, lo, hi);
    block_values(g, blk);
    store_results(g);
    loop_close(g, &l, false);
}

/* Pass i of the plan over the row's elements: a sum into a, or (a NULL)
 * the store pass; where the pass runs in chunks (lower_pass_chunk), chunk
 * by chunk, each led by prefetch_chunk where the pass prefetches, and each
 * summed into a float of its own, then into a's double, where it sums in
 * float (lower_pass_fsum). */
static void row_pass(gen *g, const lower_plan *plan, int i, racc *a) {
    const lower_block *blk = &plan->blocks[i];
    LLVMValueRef R = szv(g, &g->k->rnumel);
    int64_t chunk = lower_pass_chunk(g->k, plan, i);
    if (!chunk) {
        if (a)
            racc_pass(g, a, blk, i64c(g, 0), R);
        else
            store_pass(g, blk, i64c(g, 0), R);
        return;
    }
    LLVMValueRef C = i64c(g, chunk);
    loop cl;
    LLVMValueRef ch = loop_open(g, &cl, i64c(g, 0), L_->LLVMBuildSDiv(B, add(g, R, i64c(g, chunk - 1)), C, ""));
    LLVMValueRef c0 = mul(g, ch, C), c1 = add(g, c0, C);
    c1 = sel(g, icmp(g, LLVMIntSLT, c1, R), c1, R);
    if (lower_plan_prefetches(g->k, plan, i))
        prefetch_chunk(g, plan, c0, c1);
    if (a && lower_pass_fsum(g->k, plan, i)) {
        /* the chunk's end through a volatile: its loop vectorised alike for a
         * literal R and a run-time one, so their float sums add in one order */
        LLVMValueRef end = var(g, g->i64, NULL);
        L_->LLVMSetVolatile(L_->LLVMBuildStore(B, c1, end), 1);
        c1 = get(g, g->i64, end);
        L_->LLVMSetVolatile(c1, 1);
        racc part = *a;
        part.t = g->f32;
        part.acc = var(g, g->f32, cf(g, g->f32, 0.0));
        racc_pass(g, &part, blk, c0, c1);
        LLVMValueRef s = L_->LLVMBuildFPExt(B, get(g, g->f32, part.acc), g->f64, "");
        set(g, a->acc, L_->LLVMBuildFAdd(B, get(g, g->f64, a->acc), s, ""));
    } else if (a) {
        racc_pass(g, a, blk, c0, c1);
    } else {
        store_pass(g, blk, c0, c1);
    }
    loop_close(g, &cl, false);
}

/* Pass i of the plan, which finishes reduction blocks[i].reduce. */
static void reduce(gen *g, const lower_plan *plan, int i) {
    const lower_block *blk = &plan->blocks[i];
    const lower_ins *x = &g->k->ins[blk->reduce];
    if (x->gop == GRAPH_RMAX || x->gop == GRAPH_RMIN) {
        extreme(g, blk);
        return;
    }
    racc a = racc_new(g, blk->reduce);
    row_pass(g, plan, i, &a);
    g->val[blk->reduce] = racc_value(g, &a);
}

/* Reductions and row kernels: per output row, the plan's blocks in order:
 * outer values, passes that finish reductions, and in a row kernel a last
 * pass that stores. */
static void phased(gen *g, LLVMValueRef lo, LLVMValueRef hi, const lower_plan *plan) {
    loop rows;
    g->gidx = loop_open(g, &rows, lo, hi);
    bool stored = false;
    for (int i = 0; i < plan->nblocks; i++) {
        const lower_block *blk = &plan->blocks[i];
        switch (blk->kind) {
        case LOWER_BLOCK_OUTER:
            block_values(g, blk);
            break;
        case LOWER_BLOCK_REDUCE:
            reduce(g, plan, i);
            break;
        case LOWER_BLOCK_STORE:
            row_pass(g, plan, i, NULL);
            stored = true;
            break;
        case LOWER_BLOCK_SCATTER:
            scatter_pass(g, blk);
            break;
        }
    }
    if (!stored)
        store_results(g);
    loop_close(g, &rows, false);
}

/* ---- matmul: the plan's GotoBLAS blocking, as render_c.c renders it ---- */

typedef struct mm {
    const lower_mm_plan *plan;
    kiln_dtype at, bt;
    LLVMTypeRef acc, vec, accp;
    int64_t nr;
    LLVMValueRef ukr, ukr_r, ukr_c, ukr_rc; /* whole tiles; the partial ones' (lower_mm_edges) */
    int erows, evecs;
    bool direct; /* whole tiles stored into the output (lower_mm_stores_direct) */
    LLVMTypeRef ukr_t;
} mm;

static LLVMValueRef to_acc(gen *g, const mm *p, LLVMValueRef v, kiln_dtype from) {
    if (p->acc == g->f64)
        return to_f64(g, v, from);
    if (p->acc == g->f32)
        return from == KILN_F64 ? L_->LLVMBuildFPTrunc(B, v, g->f32, "") : v;
    return wide(g, v, from);
}

static LLVMValueRef operand_offset(gen *g, const lower_operand *o, LLVMValueRef bt) {
    const lower_kernel *k = g->k;
    LLVMValueRef off = szv(g, &o->offset);
    LLVMValueRef inner = i64c(g, 1);
    for (int d = k->nbatch - 1; d >= 0; d--) {
        /* as the C text has the term or not */
        if (o->batch_strides[d] && k->batch[d] > 1) {
            LLVMValueRef q = L_->LLVMBuildSDiv(B, bt, inner, "");
            q = L_->LLVMBuildSRem(B, q, szv(g, &k->batch[d]), "");
            off = L_->LLVMBuildAdd(B, off, L_->LLVMBuildMul(B, q, szv(g, &o->batch_strides[d]), ""), "");
        }
        inner = L_->LLVMBuildMul(B, inner, szv(g, &k->batch[d]), "");
    }
    return off;
}

/* Whether the tile row at ir holds real rows only: a whole tile, or the
 * last rows' own micro-kernel's (lower_mm_edges). */
static LLVMValueRef whole_rows(gen *g, const struct mm *p, LLVMValueRef mc, LLVMValueRef ir) {
    LLVMValueRef left = L_->LLVMBuildSub(B, mc, ir, "");
    return bor(g, icmp(g, LLVMIntSGE, left, i64c(g, p->plan->mr)),
               icmp(g, LLVMIntEQ, left, i64c(g, p->erows ? p->erows : -1)));
}

static LLVMValueRef imin(gen *g, LLVMValueRef a, LLVMValueRef b) {
    return sel(g, icmp(g, LLVMIntSLT, a, b), a, b);
}
static LLVMValueRef gep(gen *g, LLVMTypeRef t, LLVMValueRef p, LLVMValueRef i) {
    return L_->LLVMBuildInBoundsGEP2(B, t, p, &i, 1, "");
}

/* A sum, max or min down columns (plan->columns), as render_c.c renders
 * it: outputs [lo, hi) in chunks of partial results (double, or 64-bit
 * integers) that each input row is taken into, the loop over a chunk
 * contiguous so that it widens; then each output's value from its partial
 * result. Each output still takes its elements in order; a NaN sticks. */
static void columns(gen *g, LLVMValueRef lo, LLVMValueRef hi, const lower_plan *plan) {
    const jit_llvm_api *L = g->L;
    const lower_kernel *k = g->k;
    int red = -1;
    for (int i = 0; i < plan->nblocks; i++)
        if (plan->blocks[i].kind == LOWER_BLOCK_REDUCE)
            red = i;
    const lower_block *rb = &plan->blocks[red];
    racc proto = racc_new(g, rb->reduce); /* its accumulator type and the value's finish */
    LLVMValueRef parta = var(g, L->LLVMArrayType(proto.t, (unsigned)plan->columns), NULL);
    LLVMValueRef part = L->LLVMBuildBitCast(B, parta, L->LLVMPointerType(proto.t, 0), "");
    bool mx = k->ins[rb->reduce].gop == GRAPH_RMAX;
    LLVMValueRef zero = proto.sum ? (proto.fl ? cf(g, g->f64, 0.0) : i64c(g, 0))
                        : proto.fl ? cf(g, g->f64, mx ? -INFINITY : INFINITY)
                                   : i64c(g, mx ? INT64_MIN : INT64_MAX);
    LLVMValueRef cw = i64c(g, plan->columns);
    loop ch;
    /* chunk index q over ceil((hi - lo) / cw) */
    LLVMValueRef nch = L->LLVMBuildSDiv(B, add(g, L->LLVMBuildSub(B, hi, lo, ""), i64c(g, plan->columns - 1)), cw, "");
    LLVMValueRef q = loop_open(g, &ch, i64c(g, 0), nch);
    LLVMValueRef start = add(g, lo, mul(g, q, cw));
    LLVMValueRef end = imin(g, add(g, start, cw), hi);
    loop z;
    LLVMValueRef zi = loop_open(g, &z, start, end);
    set(g, gep(g, proto.t, part, L->LLVMBuildSub(B, zi, start, "")), zero);
    loop_close(g, &z, true);
    /* plan->column_step rows a pass over the chunk, each partial result
     * loaded and stored once for them; then the rows left one a pass */
    int64_t step = plan->column_step > 1 ? plan->column_step : 1;
    LLVMValueRef R = szv(g, &k->rnumel);
    LLVMValueRef passes = L->LLVMBuildSDiv(B, R, i64c(g, step), "");
    LLVMValueRef done = mul(g, passes, i64c(g, step));
    for (int tail = 0; tail < 2; tail++) {
        int64_t n = tail ? 1 : step;
        if (tail && step == 1)
            break;
        loop rows;
        LLVMValueRef pass = loop_open(g, &rows, tail ? done : i64c(g, 0), tail ? R : passes);
        loop cols;
        g->gidx = loop_open(g, &cols, start, end);
        LLVMValueRef slot = gep(g, proto.t, part, L->LLVMBuildSub(B, g->gidx, start, ""));
        LLVMValueRef cur = get(g, proto.t, slot);
        for (int64_t u = 0; u < n; u++) {
            g->ridx = n > 1 ? add(g, mul(g, pass, i64c(g, step)), i64c(g, u)) : pass;
            for (int i = 0; i <= red; i++)
                block_values(g, &plan->blocks[i]);
            LLVMValueRef v = g->val[k->ins[rb->reduce].a];
            v = proto.fl ? to_f64(g, v, proto.in) : wide(g, v, proto.in);
            if (proto.sum) {
                cur = proto.fl ? L->LLVMBuildFAdd(B, cur, v, "") : L->LLVMBuildAdd(B, cur, v, "");
            } else {
                LLVMValueRef take =
                    proto.fl ? band(g, fcmp(g, LLVMRealOEQ, cur, cur),
                                    bor(g, fcmp(g, LLVMRealUNE, v, v),
                                        fcmp(g, mx ? LLVMRealOGT : LLVMRealOLT, v, cur)))
                             : icmp(g, mx ? LLVMIntSGT : LLVMIntSLT, v, cur);
                cur = sel(g, take, v, cur);
            }
        }
        set(g, slot, cur);
        loop_close(g, &cols, true);
        loop_close(g, &rows, false);
    }
    loop outs;
    g->gidx = loop_open(g, &outs, start, end);
    for (int i = 0; i < red; i++)
        block_values(g, &plan->blocks[i]);
    set(g, proto.acc, get(g, proto.t, gep(g, proto.t, part, L->LLVMBuildSub(B, g->gidx, start, ""))));
    g->val[rb->reduce] = racc_value(g, &proto);
    for (int i = red + 1; i < plan->nblocks; i++)
        block_values(g, &plan->blocks[i]);
    store_results(g);
    loop_close(g, &outs, false);
    loop_close(g, &ch, false);
}


/* The micro-kernel ukr(kc, a, rs, cs, b, c, ldc, add): an MR x NR tile of C
 * (NR = NV vectors) accumulated in registers over kc steps of A (MR values
 * per step, rows rs apart, steps cs apart: packed, or the operand in place)
 * and packed B (NR values per step), then stored into, or added to, the C
 * block (rows ldc = NC apart). Products are contracted (llvm.fmuladd). */
static LLVMValueRef mm_micro_kernel(gen *g, mm *p, const char *suffix, int mr, int nv) {
    const jit_llvm_api *L = g->L;
    const lower_mm_plan *pl = p->plan;
    LLVMTypeRef params[8] = {g->i64, p->accp, g->i64, g->i64, p->accp, p->accp, g->i64, g->i1};
    p->ukr_t = L->LLVMFunctionType(g->vd, params, 8, 0);
    char name[128];
    snprintf(name, sizeof name, "%s.ukr%s", g->k->name, suffix);
    LLVMValueRef fn = add_fn(g, name, p->ukr_t, true);
    /* a, b and c (attribute indices count the return value first). */
    fn_attr(g, fn, 2, "noalias");
    fn_attr(g, fn, 5, "noalias");
    fn_attr(g, fn, 6, "noalias");
    fn_begin(g, fn);
    LLVMValueRef kc = L->LLVMGetParam(fn, 0), a = L->LLVMGetParam(fn, 1);
    LLVMValueRef rs = L->LLVMGetParam(fn, 2), cs = L->LLVMGetParam(fn, 3);
    LLVMValueRef bp = L->LLVMGetParam(fn, 4), c = L->LLVMGetParam(fn, 5);
    LLVMValueRef ldc = L->LLVMGetParam(fn, 6), addp = L->LLVMGetParam(fn, 7);
    LLVMValueRef accs[12][4];
    LLVMValueRef zero = L->LLVMConstNull(p->vec);
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++)
            accs[i][v] = var(g, p->vec, zero);
    LLVMTypeRef vptr = L->LLVMPointerType(p->vec, 0);
    unsigned esz = p->acc == g->f32 ? 4 : 8;
    loop kl;
    LLVMValueRef kk = loop_open(g, &kl, i64c(g, 0), kc);
    LLVMValueRef brow = gep(g, p->acc, bp, mul(g, kk, i64c(g, p->nr)));
    LLVMValueRef bv[4];
    for (int v = 0; v < nv; v++) {
        LLVMValueRef ptr = gep(g, p->acc, brow, i64c(g, (int64_t)v * pl->lanes));
        bv[v] = get(g, p->vec, L->LLVMBuildBitCast(B, ptr, vptr, ""));
        L->LLVMSetAlignment(bv[v], esz);
    }
    LLVMValueRef acol = mul(g, kk, cs);
    LLVMValueRef mask = L->LLVMConstNull(L->LLVMVectorType(g->i32, (unsigned)pl->lanes));
    for (int i = 0; i < mr; i++) {
        LLVMValueRef x = get(g, p->acc, gep(g, p->acc, a, add(g, mul(g, i64c(g, i), rs), acol)));
        x = L->LLVMBuildInsertElement(B, L->LLVMGetUndef(p->vec), x, i32c(g, 0), "");
        x = L->LLVMBuildShuffleVector(B, x, L->LLVMGetUndef(p->vec), mask, "");
        for (int v = 0; v < nv; v++) {
            LLVMValueRef cur = get(g, p->vec, accs[i][v]), r;
            if (p->acc == g->i64) {
                r = add(g, mul(g, x, bv[v]), cur);
            } else {
                LLVMValueRef args[3] = {x, bv[v], cur};
                r = intrinsic(g, "llvm.fmuladd", p->vec, args, 3);
            }
            set(g, accs[i][v], r);
        }
    }
    loop_close(g, &kl, false);
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) {
            LLVMValueRef at = add(g, mul(g, i64c(g, i), ldc), i64c(g, (int64_t)v * pl->lanes));
            LLVMValueRef ptr = L->LLVMBuildBitCast(B, gep(g, p->acc, c, at), vptr, "");
            LLVMValueRef old = get(g, p->vec, ptr);
            L->LLVMSetAlignment(old, esz);
            LLVMValueRef sum = p->acc == g->i64 ? add(g, old, get(g, p->vec, accs[i][v]))
                                                : L->LLVMBuildFAdd(B, old, get(g, p->vec, accs[i][v]), "");
            LLVMValueRef st = L->LLVMBuildStore(B, sel(g, addp, sum, get(g, p->vec, accs[i][v])), ptr);
            L->LLVMSetAlignment(st, esz);
        }
    fn_end(g);
    return fn;
}

/* Packs `rows` rows from `first` on (rows row_stride apart in buffer buf) and
 * kc steps of k (k_stride apart) into panels of `unit` rows, step-major,
 * converted to the accumulation type; rows past `rows` are zeros. */
static void mm_pack(gen *g, const mm *p, LLVMValueRef dst, int buf, LLVMValueRef first, LLVMValueRef rows, LLVMValueRef kc, int64_t unit,
                    LLVMValueRef row_stride, LLVMValueRef k_stride) {
    loop r0l, pl, rl;
    LLVMValueRef r0 = loop_open(g, &r0l, i64c(g, 0), L_->LLVMBuildSDiv(B, add(g, rows, i64c(g, unit - 1)), i64c(g, unit), ""));
    LLVMValueRef panel = gep(g, p->acc, dst, mul(g, r0, mul(g, i64c(g, unit), kc)));
    LLVMValueRef pp = loop_open(g, &pl, i64c(g, 0), kc);
    LLVMValueRef r = loop_open(g, &rl, i64c(g, 0), i64c(g, unit));
    LLVMValueRef row = add(g, mul(g, r0, i64c(g, unit)), r);
    LLVMValueRef inside = icmp(g, LLVMIntSLT, row, rows);
    LLVMValueRef safe = sel(g, inside, row, i64c(g, 0));
    LLVMValueRef idx = add(g, first, add(g, mul(g, safe, row_stride), mul(g, pp, k_stride)));
    LLVMValueRef v = to_acc(g, p, load(g, buf, idx), buf_dtype(g->k, buf));
    v = sel(g, inside, v, L_->LLVMConstNull(p->acc));
    set(g, gep(g, p->acc, panel, add(g, mul(g, pp, i64c(g, unit)), r)), v);
    loop_close(g, &rl, false);
    loop_close(g, &pl, false);
    loop_close(g, &r0l, false);
}

/* The epilogue of output element (row, col) of the batch, from its dot. */
static void mm_epilogue(gen *g, const lower_plan *plan, LLVMValueRef bt, LLVMValueRef row,
                        LLVMValueRef col, LLVMValueRef dot) {
    const lower_kernel *k = g->k;
    g->dot = dot;
    LLVMValueRef m = szv(g, &k->m);
    g->gidx = add(g, add(g, mul(g, bt, mul(g, szv(g, &k->n), m)), mul(g, row, m)), col);
    for (int x = 0; x < plan->nblocks; x++)
        block_values(g, &plan->blocks[x]);
    store_results(g);
}

static LLVMValueRef libc_fn(gen *g, const char *name, LLVMTypeRef ty) {
    LLVMValueRef f = g->L->LLVMGetNamedFunction(g->m, name);
    return f ? f : add_fn(g, name, ty, false);
}

/* Tasks lo..hi of the plan's MC x NC output blocks (over every batch). A
 * task walks k in steps of KC: it packs its KC x NC slice of B (and A unless
 * A is read in place) into the thread's panels, runs the micro-kernel over
 * every MR x NR tile, the sums collecting in the thread's C block, on which
 * the epilogue then runs. Should the panels not be allocated, a plain dot
 * product per element is the fallback. */
static void matmul(gen *g, LLVMValueRef lo, LLVMValueRef hi, const lower_plan *plan, mm *p) {
    const jit_llvm_api *L = g->L;
    const lower_kernel *k = g->k;
    const lower_mm_plan *pl = &plan->mm;
    /* Sizes, blocks and strides: literals, or read at run time (constant
     * expressions fold when they are literals). */
    LLVMValueRef N = szv(g, &k->n), K = szv(g, &k->k), M = szv(g, &k->m);
    LLVMValueRef MC = szv(g, &pl->mc), NC = szv(g, &pl->nc), KC = szv(g, &pl->kc);
    LLVMValueRef RSA = szv(g, &k->a.row_stride), CSA = szv(g, &k->a.col_stride);
    LLVMValueRef RSB = szv(g, &k->b.row_stride), CSB = szv(g, &k->b.col_stride);
    LLVMValueRef MR = i64c(g, pl->mr);
    LLVMValueRef nbm = L->LLVMBuildSDiv(B, add(g, N, L->LLVMBuildSub(B, MC, i64c(g, 1), "")), MC, "");
    LLVMValueRef nbn = L->LLVMBuildSDiv(B, add(g, M, L->LLVMBuildSub(B, NC, i64c(g, 1), "")), NC, "");
    LLVMValueRef mcp = mul(g, L->LLVMBuildSDiv(B, add(g, MC, i64c(g, pl->mr - 1)), MR, ""), MR);
    LLVMValueRef csz = mul(g, mcp, NC), bsz = mul(g, KC, NC), asz = mul(g, mcp, KC);
    int64_t esz = p->acc == g->f32 ? 4 : 8;
    LLVMValueRef bytes = mul(g, L->LLVMBuildSDiv(B, add(g, mul(g, add(g, add(g, csz, bsz), asz), i64c(g, esz)),
                                                        i64c(g, 63)), i64c(g, 64), ""), i64c(g, 64));
    /* K > 0 as the C text tests it: at run time when K is read there */
    bool sized_k = lower_size_index(k, &k->k) >= 0;
    LLVMTypeRef aa_p[2] = {g->i64, g->i64};
    LLVMValueRef aalloc = libc_fn(g, "aligned_alloc", L->LLVMFunctionType(g->i8p, aa_p, 2, 0));
    LLVMValueRef freef = libc_fn(g, "free", L->LLVMFunctionType(g->vd, &g->i8p, 1, 0));
    LLVMValueRef args[8] = {i64c(g, 64), bytes};
    LLVMValueRef raw = sized_k || k->k > 0
                           ? L->LLVMBuildCall2(B, L->LLVMFunctionType(g->i8p, aa_p, 2, 0), aalloc, args, 2, "")
                           : L->LLVMConstNull(g->i8p);
    LLVMValueRef mem = raw; /* what is freed: an empty k gets the panels' memory but no use */
    if (sized_k)
        raw = sel(g, icmp(g, LLVMIntSGT, K, i64c(g, 0)), raw, L->LLVMConstNull(g->i8p));
    LLVMValueRef cb = L->LLVMBuildBitCast(B, raw, p->accp, "");
    LLVMValueRef bp = gep(g, p->acc, cb, csz), ap = gep(g, p->acc, cb, add(g, csz, bsz));
    LLVMValueRef have = icmp(g, LLVMIntNE, raw, L->LLVMConstNull(g->i8p));
    /* Where one step of k covers K, row blocks vary fastest and a task
     * whose B panel is the one the thread packed last (packedv) does not pack
     * it again (as the C renderer does) */
    LLVMValueRef repack = icmp(g, LLVMIntSGT, K, KC);
    LLVMValueRef packedv = var(g, g->i64, i64c(g, -1));
    loop tl;
    LLVMValueRef t = loop_open(g, &tl, lo, hi);
    LLVMValueRef bt = L->LLVMBuildSDiv(B, t, mul(g, nbm, nbn), "");
    LLVMValueRef ib = sel(g, repack, L->LLVMBuildSRem(B, L->LLVMBuildSDiv(B, t, nbn, ""), nbm, ""),
                          L->LLVMBuildSRem(B, t, nbm, ""));
    LLVMValueRef jb = sel(g, repack, L->LLVMBuildSRem(B, t, nbn, ""),
                          L->LLVMBuildSRem(B, L->LLVMBuildSDiv(B, t, nbm, ""), nbn, ""));
    LLVMValueRef i0 = mul(g, ib, MC), j0 = mul(g, jb, NC);
    LLVMValueRef mc = imin(g, L->LLVMBuildSub(B, N, i0, ""), MC);
    LLVMValueRef nc = imin(g, L->LLVMBuildSub(B, M, j0, ""), NC);
    LLVMValueRef oa = operand_offset(g, &k->a, bt), ob = operand_offset(g, &k->b, bt);
    LLVMValueRef full = pl->a_direct ? mul(g, L->LLVMBuildSDiv(B, mc, i64c(g, pl->mr), ""), i64c(g, pl->mr))
                                     : i64c(g, 0);
    LLVMBasicBlockRef blocked = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "blocked");
    LLVMBasicBlockRef plain = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "plain");
    LLVMBasicBlockRef next = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "next");
    L->LLVMBuildCondBr(B, have, blocked, plain);

    L->LLVMPositionBuilderAtEnd(B, blocked);
    {
        LLVMValueRef p0v = var(g, g->i64, i64c(g, 0));
        LLVMBasicBlockRef head = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "khead");
        LLVMBasicBlockRef body = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "kbody");
        LLVMBasicBlockRef done = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "kdone");
        L->LLVMBuildBr(B, head);
        L->LLVMPositionBuilderAtEnd(B, head);
        LLVMValueRef p0 = get(g, g->i64, p0v);
        L->LLVMBuildCondBr(B, icmp(g, LLVMIntSLT, p0, K), body, done);
        L->LLVMPositionBuilderAtEnd(B, body);
        LLVMValueRef kc = imin(g, L->LLVMBuildSub(B, K, p0, ""), KC);
        LLVMValueRef panel = add(g, mul(g, bt, nbn), jb);
        LLVMValueRef need = L->LLVMBuildOr(
            B, repack, icmp(g, LLVMIntNE, get(g, g->i64, packedv), panel), "");
        LLVMBasicBlockRef packb = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "packb");
        LLVMBasicBlockRef havepanel = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "havepanel");
        L->LLVMBuildCondBr(B, need, packb, havepanel);
        L->LLVMPositionBuilderAtEnd(B, packb);
        mm_pack(g, p, bp, k->b.buf, add(g, ob, add(g, mul(g, j0, CSB), mul(g, p0, RSB))),
                nc, kc, p->nr, CSB, RSB);
        set(g, packedv, panel);
        L->LLVMBuildBr(B, havepanel);
        L->LLVMPositionBuilderAtEnd(B, havepanel);
        mm_pack(g, p, gep(g, p->acc, ap, mul(g, full, kc)), k->a.buf,
                add(g, oa, add(g, mul(g, add(g, i0, full), RSA), mul(g, p0, CSA))),
                L->LLVMBuildSub(B, mc, full, ""), kc, pl->mr, RSA, CSA);
        LLVMValueRef addp = icmp(g, LLVMIntSGT, p0, i64c(g, 0));
        loop irl, jrl;
        LLVMValueRef irb = loop_open(g, &irl, i64c(g, 0), L->LLVMBuildSDiv(B, add(g, mc, i64c(g, pl->mr - 1)), i64c(g, pl->mr), ""));
        LLVMValueRef ir = mul(g, irb, i64c(g, pl->mr));
        LLVMValueRef jrb = loop_open(g, &jrl, i64c(g, 0), L->LLVMBuildSDiv(B, add(g, nc, i64c(g, p->nr - 1)), i64c(g, p->nr), ""));
        LLVMValueRef jr = mul(g, jrb, i64c(g, p->nr));
        LLVMValueRef cptr = gep(g, p->acc, cb, add(g, mul(g, ir, NC), jr)), ldc = NC;
        if (p->direct) {
            /* a whole tile of real rows straight into the output
             * (lower_mm_stores_direct), as the C renderer does */
            LLVMValueRef dst = band(g, icmp(g, LLVMIntSGE, L->LLVMBuildSub(B, nc, jr, ""), i64c(g, p->nr)),
                                    whole_rows(g, p, mc, ir));
            LLVMValueRef at = add(g, mul(g, add(g, mul(g, bt, N), add(g, i0, ir)), M), add(g, j0, jr));
            LLVMValueRef optr = L->LLVMBuildBitCast(B, elem_ptr(g, 0, buf_dtype(k, 0), at), p->accp, "");
            cptr = sel(g, dst, optr, cptr);
            ldc = sel(g, dst, M, NC);
        }
        LLVMValueRef bpanel = gep(g, p->acc, bp, mul(g, jr, kc));
        LLVMValueRef apacked = gep(g, p->acc, ap, mul(g, ir, kc));
        LLVMValueRef aptr = apacked, rs = i64c(g, 1), cs = i64c(g, pl->mr);
        if (pl->a_direct) {
            LLVMValueRef in_place = icmp(g, LLVMIntSLT, ir, full);
            LLVMValueRef aoff = add(g, oa, add(g, mul(g, add(g, i0, ir), RSA), mul(g, p0, CSA)));
            LLVMValueRef adirect = L->LLVMBuildBitCast(B, elem_ptr(g, k->a.buf, p->at, aoff), p->accp, "");
            aptr = sel(g, in_place, adirect, apacked);
            rs = sel(g, in_place, RSA, rs);
            cs = sel(g, in_place, CSA, cs);
        }
        LLVMValueRef ua[8] = {kc, aptr, rs, cs, bpanel, cptr, ldc, addp};
        /* a partial tile takes its own size's micro-kernel where there is one */
        LLVMValueRef ukr = p->ukr, ukr_r = p->ukr_r;
        if (p->evecs) {
            LLVMValueRef ec = icmp(g, LLVMIntSLE, L->LLVMBuildSub(B, nc, jr, ""),
                                   i64c(g, (int64_t)p->evecs * pl->lanes));
            ukr = sel(g, ec, p->ukr_c, ukr);
            if (p->erows)
                ukr_r = sel(g, ec, p->ukr_rc, ukr_r);
        }
        if (p->erows)
            ukr = sel(g, icmp(g, LLVMIntSLE, L->LLVMBuildSub(B, mc, ir, ""), i64c(g, p->erows)),
                      ukr_r, ukr);
        L->LLVMBuildCall2(B, p->ukr_t, ukr, ua, 8, "");
        loop_close(g, &jrl, false);
        loop_close(g, &irl, false);
        set(g, p0v, add(g, p0, KC));
        L->LLVMBuildBr(B, head);
        L->LLVMPositionBuilderAtEnd(B, done);
        loop il, jl;
        LLVMValueRef i = loop_open(g, &il, i64c(g, 0), mc);
        /* the columns whole tiles left in the output already */
        LLVMValueRef from = i64c(g, 0);
        if (p->direct) {
            LLVMValueRef ir = mul(g, L->LLVMBuildSDiv(B, i, i64c(g, pl->mr), ""), i64c(g, pl->mr));
            LLVMValueRef whole = mul(g, L->LLVMBuildSDiv(B, nc, i64c(g, p->nr), ""), i64c(g, p->nr));
            from = sel(g, whole_rows(g, p, mc, ir), whole, from);
        }
        LLVMValueRef j = loop_open(g, &jl, from, nc);
        LLVMValueRef dot = get(g, p->acc, gep(g, p->acc, cb, add(g, mul(g, i, NC), j)));
        mm_epilogue(g, plan, bt, add(g, i0, i), add(g, j0, j), dot);
        loop_close(g, &jl, false);
        loop_close(g, &il, false);
        L->LLVMBuildBr(B, next);
    }

    L->LLVMPositionBuilderAtEnd(B, plain);
    {
        loop il, jl, kl;
        LLVMValueRef i = loop_open(g, &il, i64c(g, 0), mc);
        LLVMValueRef j = loop_open(g, &jl, i64c(g, 0), nc);
        LLVMValueRef acc = var(g, p->acc, L->LLVMConstNull(p->acc));
        LLVMValueRef kk = loop_open(g, &kl, i64c(g, 0), K);
        LLVMValueRef ai = add(g, oa, add(g, mul(g, add(g, i0, i), RSA), mul(g, kk, CSA)));
        LLVMValueRef bi = add(g, ob, add(g, mul(g, kk, RSB), mul(g, add(g, j0, j), CSB)));
        LLVMValueRef x = to_acc(g, p, load(g, k->a.buf, ai), p->at);
        LLVMValueRef y = to_acc(g, p, load(g, k->b.buf, bi), p->bt);
        LLVMValueRef cur = get(g, p->acc, acc);
        set(g, acc, p->acc == g->i64 ? add(g, mul(g, x, y), cur)
                                     : L->LLVMBuildFAdd(B, L->LLVMBuildFMul(B, x, y, ""), cur, ""));
        loop_close(g, &kl, false);
        mm_epilogue(g, plan, bt, add(g, i0, i), add(g, j0, j), get(g, p->acc, acc));
        loop_close(g, &jl, false);
        loop_close(g, &il, false);
        L->LLVMBuildBr(B, next);
    }
    L->LLVMPositionBuilderAtEnd(B, next);
    loop_close(g, &tl, false);
    if (sized_k || k->k > 0)
        L->LLVMBuildCall2(B, L->LLVMFunctionType(g->vd, &g->i8p, 1, 0), freef, &mem, 1, "");
}

static void mm_setup(gen *g, const lower_plan *plan, mm *p) {
    const lower_kernel *k = g->k;
    p->plan = &plan->mm;
    p->at = buf_dtype(k, k->a.buf);
    p->bt = buf_dtype(k, k->b.buf);
    p->acc = plan->mm.acc == KILN_F64 ? g->f64 : plan->mm.acc == KILN_F32 ? g->f32 : g->i64;
    p->accp = g->L->LLVMPointerType(p->acc, 0);
    p->vec = g->L->LLVMVectorType(p->acc, (unsigned)plan->mm.lanes);
    p->nr = (int64_t)plan->mm.lanes * plan->mm.nv;
}

/* The kernel's three functions. */
static void kernel(gen *g, const lower_kernel *k, const lower_plan *plan, LLVMValueRef pfor,
                   LLVMTypeRef pfor_t, LLVMTypeRef body_t) {
    const jit_llvm_api *L = g->L;
    int nb = k->nouts + k->ninputs;
    g->k = k;
    /* inner's parameters: the buffers, lo, hi and the run-time sizes */
    LLVMTypeRef *pt = calloc((size_t)nb + 3, sizeof *pt);
    LLVMValueRef *args = calloc((size_t)nb + 3, sizeof *args);
    g->vbytes = plan->vector_bytes;
    g->val = calloc((size_t)(k->nins ? k->nins : 1), sizeof *g->val);
    g->ptr = calloc((size_t)nb + 1, sizeof *g->ptr);
    if (!pt || !args || !g->val || !g->ptr) {
        g->failed = true;
        goto done;
    }
    /* The scheduler makes them only for targets that say they pack them
     * (LOWER_SPLIT_OPERANDS); this one does not. */
    if (k->kind == LOWER_MATMUL && (lower_operand_split(&k->a) || lower_operand_split(&k->b))) {
        snprintf(g->why, sizeof g->why, "kiln: the LLVM renderer cannot read the split operand "
                 "of matmul kernel %s", k->name);
        g->failed = true;
        goto done;
    }
    for (int i = 0; i < nb; i++)
        pt[i] = L->LLVMPointerType(sty(g, buf_dtype(k, i)), 0);
    pt[nb] = pt[nb + 1] = g->i64;
    pt[nb + 2] = L->LLVMPointerType(g->i64, 0);
    LLVMTypeRef entry_p[2] = {L->LLVMPointerType(g->i8p, 0), g->i32};
    g->S = NULL;
    if (plan->split) {
        LLVMValueRef e = add_fn(g, k->name, L->LLVMFunctionType(g->vd, entry_p, 2, 0), false);
        split_rows(g, plan, e, pfor, pfor_t, body_t);
        goto done;
    }
    char name[128];
    snprintf(name, sizeof name, "%s.inner", k->name);
    LLVMValueRef inner = add_fn(g, name, L->LLVMFunctionType(g->vd, pt, (unsigned)nb + 3, 0), true);
    for (int i = 0; i < nb; i++)
        fn_attr(g, inner, (unsigned)i + 1, "noalias");
    snprintf(name, sizeof name, "%s.body", k->name);
    LLVMValueRef body = add_fn(g, name, body_t, true);
    LLVMValueRef entry = add_fn(g, k->name, L->LLVMFunctionType(g->vd, entry_p, 2, 0), false);

    fn_begin(g, body);
    LLVMValueRef bufs = L->LLVMBuildBitCast(B, L->LLVMGetParam(body, 0),
                                            L->LLVMPointerType(g->i8p, 0), "");
    for (int i = 0; i < nb; i++) {
        LLVMValueRef at = i64c(g, i);
        LLVMValueRef p = get(g, g->i8p, L->LLVMBuildInBoundsGEP2(B, g->i8p, bufs, &at, 1, ""));
        args[i] = L->LLVMBuildBitCast(B, p, pt[i], "");
    }
    args[nb] = L->LLVMGetParam(body, 1);
    args[nb + 1] = L->LLVMGetParam(body, 2);
    bind_sizes(g, bufs);
    args[nb + 2] = g->S ? g->S : L->LLVMConstNull(pt[nb + 2]);
    L->LLVMBuildCall2(B, L->LLVMFunctionType(g->vd, pt, (unsigned)nb + 3, 0), inner, args,
                      (unsigned)nb + 3, "");
    fn_end(g);

    mm p;
    if (k->kind == LOWER_MATMUL) {
        mm_setup(g, plan, &p);
        lower_mm_edges(k, plan, &p.erows, &p.evecs);
        p.direct = lower_mm_stores_direct(k, plan);
        p.ukr = mm_micro_kernel(g, &p, "", plan->mm.mr, plan->mm.nv);
        p.ukr_r = p.erows ? mm_micro_kernel(g, &p, ".r", p.erows, plan->mm.nv) : NULL;
        p.ukr_c = p.evecs ? mm_micro_kernel(g, &p, ".c", plan->mm.mr, p.evecs) : NULL;
        p.ukr_rc = p.erows && p.evecs ? mm_micro_kernel(g, &p, ".rc", p.erows, p.evecs) : NULL;
    }
    fn_begin(g, entry);
    LLVMValueRef bufs8 = L->LLVMGetParam(entry, 0);
    LLVMValueRef ctx = L->LLVMBuildBitCast(B, bufs8, g->i8p, "");
    bind_sizes(g, bufs8);
    LLVMValueRef n = szv(g, &plan->grid);
    LLVMValueRef pa[4] = {body, ctx, n, L->LLVMGetParam(entry, 1)};
    LLVMValueRef sa[3] = {ctx, i64c(g, 0), n};
    if (lower_size_index(k, &plan->parallel) >= 0) {
        /* whether to spread the work, decided at run time */
        LLVMBasicBlockRef yes = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "spread");
        LLVMBasicBlockRef no = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "serial");
        LLVMBasicBlockRef after = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "after");
        L->LLVMBuildCondBr(B, icmp(g, LLVMIntNE, szv(g, &plan->parallel), i64c(g, 0)), yes, no);
        L->LLVMPositionBuilderAtEnd(B, yes);
        L->LLVMBuildCall2(B, pfor_t, pfor, pa, 4, "");
        L->LLVMBuildBr(B, after);
        L->LLVMPositionBuilderAtEnd(B, no);
        L->LLVMBuildCall2(B, body_t, body, sa, 3, "");
        L->LLVMBuildBr(B, after);
        L->LLVMPositionBuilderAtEnd(B, after);
    } else if (plan->parallel) {
        L->LLVMBuildCall2(B, pfor_t, pfor, pa, 4, "");
    } else {
        L->LLVMBuildCall2(B, body_t, body, sa, 3, "");
    }
    fn_end(g);

    fn_begin(g, inner);
    for (int i = 0; i < nb; i++)
        g->ptr[i] = L->LLVMGetParam(inner, (unsigned)i);
    g->S = k->nsizes ? L->LLVMGetParam(inner, (unsigned)nb + 2) : NULL;
    LLVMValueRef lo = L->LLVMGetParam(inner, (unsigned)nb), hi = L->LLVMGetParam(inner, (unsigned)nb + 1);
    if (k->kind == LOWER_ELEMENTWISE)
        elementwise(g, lo, hi, plan);
    else if (k->kind == LOWER_MATMUL)
        matmul(g, lo, hi, plan, &p);
    else if (plan->columns)
        columns(g, lo, hi, plan);
    else
        phased(g, lo, hi, plan);
    fn_end(g);
done:
    free(pt);
    free(args);
    free(g->val);
    free(g->ptr);
    g->val = g->ptr = NULL;
}

LLVMModuleRef jit_llvm_render(const jit_llvm_api *L, LLVMContextRef cx, const lower_program *p,
                              const lower_plan *plans, char *msg, size_t cap) {
    gen g = {.L = L, .cx = cx};
    g.m = L->LLVMModuleCreateWithNameInContext("kiln", cx);
    g.b = L->LLVMCreateBuilderInContext(cx);
    g.ab = L->LLVMCreateBuilderInContext(cx);
    g.i1 = L->LLVMInt1TypeInContext(cx);
    g.i8 = L->LLVMInt8TypeInContext(cx);
    g.i16 = L->LLVMInt16TypeInContext(cx);
    g.i32 = L->LLVMInt32TypeInContext(cx);
    g.i64 = L->LLVMInt64TypeInContext(cx);
    g.f32 = L->LLVMFloatTypeInContext(cx);
    g.f64 = L->LLVMDoubleTypeInContext(cx);
    g.vd = L->LLVMVoidTypeInContext(cx);
    g.i8p = L->LLVMPointerType(g.i8, 0);
    LLVMTypeRef body_p[3] = {g.i8p, g.i64, g.i64};
    LLVMTypeRef body_t = L->LLVMFunctionType(g.vd, body_p, 3, 0);
    LLVMTypeRef pfor_p[4] = {L->LLVMPointerType(body_t, 0), g.i8p, g.i64, g.i32};
    LLVMTypeRef pfor_t = L->LLVMFunctionType(g.vd, pfor_p, 4, 0);
    LLVMValueRef pfor = add_fn(&g, "jit_llvm_parallel_for", pfor_t, false);
    for (int i = 0; i < p->nkernels && !g.failed; i++)
        if (lower_kind_has_code(p->kernels[i].kind))
            kernel(&g, &p->kernels[i], &plans[i], pfor, pfor_t, body_t);
    L->LLVMDisposeBuilder(g.b);
    L->LLVMDisposeBuilder(g.ab);
    char *err = NULL;
    if (!g.failed && L->LLVMVerifyModule(g.m, LLVMReturnStatusAction, &err)) {
        snprintf(msg, cap, "kiln: the LLVM code generator built an invalid module: %.400s",
                 err ? err : "");
        g.failed = true;
    } else if (g.failed) {
        snprintf(msg, cap, "%s", g.why[0] ? g.why : "kiln: out of memory while generating LLVM IR");
    }
    if (err)
        L->LLVMDisposeMessage(err);
    if (g.failed) {
        L->LLVMDisposeModule(g.m);
        return NULL;
    }
    return g.m;
}
