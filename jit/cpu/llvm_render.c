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
    bool failed;
    char why[256]; /* why generation failed, when it is not memory */
} gen;

/* ---- types and constants ---- */

static bool is_float(kiln_dtype dt) { return graph_dtype_is_float(dt); }
static bool is_signed(kiln_dtype dt) { return dt == KILN_I32 || dt == KILN_I64; }

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

static LLVMValueRef libm1(gen *g, const char *base, LLVMValueRef x) { return libm(g, base, &x, 1); }

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
                     lower_prim_name(x->prim), kiln_dtype_name(x->dt),
                     x->a >= 0 ? kiln_dtype_name(ins[x->a].dt) : "none");
        else
            snprintf(g->why, sizeof g->why, "kiln: the LLVM renderer cannot emit %s %s of %s",
                     lower_uop_name(x->op),
                     x->op == UOP_ALU || x->op == UOP_RAND ? graph_op_name(x->gop) : "",
                     kiln_dtype_name(x->dt));
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
    if (!a || (x->prim >= PRIM_ADD && x->prim != PRIM_ABS && x->prim < PRIM_CAST &&
               !(x->prim >= PRIM_SQRT && x->prim <= PRIM_TRUNC) && !b))
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

/* The two graph ops with no rule yet, gelu and pow on floats, through the
 * libm functions the C path calls; NULL for anything else. */
static LLVMValueRef alu(gen *g, const lower_ins *x) {
    LLVMValueRef a = g->val[x->a];
    if (x->dt != KILN_F32 && x->dt != KILN_F64)
        return NULL;
    LLVMTypeRef t = cty(g, x->dt);
    if (x->gop == GRAPH_POW) {
        LLVMValueRef args[2] = {a, g->val[x->b]};
        return libm(g, "pow", args, 2);
    }
    if (x->gop != GRAPH_GELU)
        return NULL;
    LLVMValueRef z = L_->LLVMBuildFMul(B, L_->LLVMBuildFNeg(B, a, ""), cf(g, t, 0.70710678118654752440), "");
    LLVMValueRef ec = libm1(g, "erfc", z);
    LLVMValueRef v = L_->LLVMBuildFMul(B, L_->LLVMBuildFMul(B, cf(g, t, 0.5), a, ""), ec, "");
    return sel(g, fcmp(g, LLVMRealOEQ, ec, cf(g, t, 0.0)), cf(g, t, -0.0), v);
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
    case UOP_IMM:
        r = imm(g, x->dt, x->imm);
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
    case UOP_ALU:
        r = alu(g, x);
        if (!r)
            r = refuse(g, x);
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

/* Marks in `in` the instructions that `target` needs (render_c.c's rule: dead
 * ones are never emitted, so an unused load cannot read out of bounds; with
 * inner_only, only the inner ones a pass over the reduced elements redoes). */
static void needs(const lower_kernel *k, int target, bool inner_only, bool *in) {
    if (inner_only && !k->ins[target].inner)
        return;
    in[target] = true;
    for (int i = target; i >= 0; i--) {
        if (!in[i])
            continue;
        const lower_ins *x = &k->ins[i];
        int ops[3] = {x->a, x->b, x->c};
        for (int j = 0; j < 3; j++)
            if (ops[j] >= 0 && (!inner_only || k->ins[ops[j]].inner))
                in[ops[j]] = true;
    }
}

static void needs_results(const lower_kernel *k, bool inner_only, bool *in) {
    for (int o = 0; o < k->nouts; o++)
        needs(k, k->results[o], inner_only, in);
    needs(k, k->store, inner_only, in);
}

/* ---- kernels ---- */

static void elementwise(gen *g, LLVMValueRef lo, LLVMValueRef hi, bool *live) {
    const lower_kernel *k = g->k;
    needs_results(k, false, live);
    LLVMValueRef T = i64c(g, k->tile), N = i64c(g, k->numel);
    LLVMValueRef glo = L_->LLVMBuildMul(B, lo, T, "");
    LLVMValueRef ghi = L_->LLVMBuildMul(B, hi, T, "");
    ghi = sel(g, icmp(g, LLVMIntSLT, ghi, N), ghi, N);
    loop l;
    g->gidx = loop_open(g, &l, glo, ghi);
    for (int i = 0; i < k->nins; i++)
        if (live[i])
            ins_value(g, i);
    store_results(g);
    loop_close(g, &l, false);
}

/* The reduction red over the row: its accumulators, a pass over the reduced
 * elements, and its value (prelude semantics: sums in double or uint64,
 * max/min/arg keeping the first of ties, NaN winning). */
static void reduce(gen *g, int red, bool *pass) {
    const lower_kernel *k = g->k;
    const lower_ins *x = &k->ins[red];
    kiln_dtype in = k->ins[x->a].dt;
    bool fl = is_float(in), sum = x->gop == GRAPH_SUM;
    LLVMTypeRef at_ = fl ? g->f64 : g->i64;
    LLVMValueRef acc = var(g, at_, fl ? cf(g, g->f64, 0.0) : i64c(g, 0));
    LLVMValueRef at = sum ? NULL : var(g, g->i64, i64c(g, -1));
    memset(pass, 0, sizeof *pass * (size_t)k->nins);
    needs(k, x->a, true, pass);
    loop l;
    g->ridx = loop_open(g, &l, i64c(g, 0), i64c(g, k->rnumel));
    for (int i = 0; i < k->nins; i++)
        if (pass[i])
            ins_value(g, i);
    LLVMValueRef v = fl ? to_f64(g, g->val[x->a], in) : wide(g, g->val[x->a], in);
    LLVMValueRef cur = get(g, at_, acc);
    if (sum) {
        set(g, acc, fl ? L_->LLVMBuildFAdd(B, cur, v, "") : L_->LLVMBuildAdd(B, cur, v, ""));
    } else {
        bool mx = x->gop == GRAPH_RMAX || x->gop == GRAPH_ARGMAX;
        LLVMValueRef pos = get(g, g->i64, at);
        LLVMValueRef take = icmp(g, LLVMIntSLT, pos, i64c(g, 0));
        if (fl)
            take = bor(g, take,
                       band(g, fcmp(g, LLVMRealOEQ, cur, cur),
                            bor(g, fcmp(g, LLVMRealUNE, v, v),
                                fcmp(g, mx ? LLVMRealOGT : LLVMRealOLT, v, cur))));
        else
            take = bor(g, take, icmp(g, mx ? LLVMIntSGT : LLVMIntSLT, v, cur));
        set(g, acc, sel(g, take, v, cur));
        set(g, at, sel(g, take, g->ridx, pos));
    }
    loop_close(g, &l, sum && fl);
    kiln_dtype dt = x->dt;
    LLVMValueRef r;
    if (x->gop == GRAPH_ARGMAX || x->gop == GRAPH_ARGMIN) {
        LLVMValueRef pos = get(g, g->i64, at);
        r = sel(g, icmp(g, LLVMIntSLT, pos, i64c(g, 0)), i64c(g, 0), pos);
        if (dt != KILN_I64)
            r = L_->LLVMBuildTrunc(B, r, cty(g, dt), "");
    } else {
        r = get(g, at_, acc);
        if (fl)
            r = dt == KILN_F64 ? r : rnd(g, dt, L_->LLVMBuildFPTrunc(B, r, g->f32, ""));
        else if (dt != KILN_I64)
            r = L_->LLVMBuildTrunc(B, r, cty(g, dt), "");
    }
    g->val[red] = r;
}

/* Reductions and row kernels, as render_phased in render_c.c: per output row,
 * one pass over its reduced elements per reduction, in order, outer values
 * as soon as the reductions they read are done, then (in a row kernel) a
 * last pass that stores. */
static void phased(gen *g, LLVMValueRef lo, LLVMValueRef hi, bool *live) {
    const lower_kernel *k = g->k;
    int n = k->nins;
    int *stage = calloc((size_t)n, sizeof *stage);
    bool *pass = calloc((size_t)n, sizeof *pass);
    if (!stage || !pass) {
        free(stage);
        free(pass);
        g->failed = true;
        return;
    }
    needs_results(k, false, live);
    int nred = 0;
    for (int i = 0; i < n; i++) {
        const lower_ins *x = &k->ins[i];
        if (!live[i] || x->inner)
            continue;
        if (x->op == UOP_REDUCE) {
            stage[i] = ++nred;
            continue;
        }
        int ops[3] = {x->a, x->b, x->c};
        for (int j = 0; j < 3; j++)
            if (ops[j] >= 0 && stage[ops[j]] > stage[i])
                stage[i] = stage[ops[j]];
    }
    loop rows;
    g->gidx = loop_open(g, &rows, lo, hi);
    for (int s = 0, done = 0; s <= nred; s++) {
        for (int i = 0; i < n; i++)
            if (live[i] && !k->ins[i].inner && k->ins[i].op != UOP_REDUCE && stage[i] == s)
                ins_value(g, i);
        if (s == nred)
            break;
        int red = done;
        while (!(live[red] && k->ins[red].op == UOP_REDUCE))
            red++;
        done = red + 1;
        reduce(g, red, pass);
    }
    bool inner = k->ins[k->store].inner;
    for (int o = 0; o < k->nouts; o++)
        inner = inner || k->ins[k->results[o]].inner;
    if (inner) {
        memset(pass, 0, sizeof *pass * (size_t)n);
        needs_results(k, true, pass);
        loop l;
        g->ridx = loop_open(g, &l, i64c(g, 0), i64c(g, k->rnumel));
        for (int i = 0; i < n; i++)
            if (pass[i])
                ins_value(g, i);
        store_results(g);
        loop_close(g, &l, false);
    } else {
        store_results(g);
    }
    loop_close(g, &rows, false);
    free(stage);
    free(pass);
}

/* Matmul register tile: MR rows by NV vectors of W accumulators. */
enum { MR = 6 };

typedef struct mm {
    kiln_dtype dt, at, bt;
    LLVMTypeRef acc, vec;
    int w, nv, nr;
    LLVMValueRef oa, ob, i0, mr, bt_idx;
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
    LLVMValueRef off = i64c(g, o->offset);
    int64_t inner = 1;
    for (int d = k->nbatch - 1; d >= 0; d--) {
        if (o->batch_strides[d] && k->batch[d] > 1) {
            LLVMValueRef q = L_->LLVMBuildSDiv(B, bt, i64c(g, inner), "");
            q = L_->LLVMBuildSRem(B, q, i64c(g, k->batch[d]), "");
            off = L_->LLVMBuildAdd(B, off, L_->LLVMBuildMul(B, q, i64c(g, o->batch_strides[d]), ""), "");
        }
        inner *= k->batch[d];
    }
    return off;
}

/* One tile of columns starting at j0; with `tail` (j0 constant), only the
 * first ncols columns exist and loads of the others read column j0. */
static void mm_tile(gen *g, const mm *p, LLVMValueRef j0, bool tail, int64_t ncols, bool *live) {
    const lower_kernel *k = g->k;
    LLVMValueRef accs[MR][4];
    LLVMValueRef zero = L_->LLVMConstNull(p->vec);
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < p->nv; v++)
            accs[i][v] = var(g, p->vec, zero);
    bool fast = !tail && k->b.col_stride == 1 && p->bt != KILN_F16 && p->bt != KILN_BF16;
    loop kl;
    LLVMValueRef kk = loop_open(g, &kl, i64c(g, 0), i64c(g, k->k));
    LLVMValueRef brow = L_->LLVMBuildAdd(B, p->ob, L_->LLVMBuildMul(B, kk, i64c(g, k->b.row_stride), ""), "");
    LLVMValueRef bv[4];
    for (int v = 0; v < p->nv; v++) {
        if (fast) {
            LLVMValueRef idx = L_->LLVMBuildAdd(B, brow, L_->LLVMBuildAdd(B, j0, i64c(g, v * p->w), ""), "");
            LLVMTypeRef st = sty(g, p->bt);
            LLVMTypeRef svec = g->L->LLVMVectorType(st, (unsigned)p->w);
            LLVMValueRef ptr = L_->LLVMBuildBitCast(B, elem_ptr(g, k->b.buf, p->bt, idx),
                                                    g->L->LLVMPointerType(svec, 0), "");
            LLVMValueRef x = get(g, svec, ptr);
            g->L->LLVMSetAlignment(x, (unsigned)kiln_dtype_size(p->bt));
            if (st != p->acc)
                x = p->acc == g->i64 ? (is_signed(p->bt) ? L_->LLVMBuildSExt(B, x, p->vec, "")
                                                         : L_->LLVMBuildZExt(B, x, p->vec, ""))
                                     : L_->LLVMBuildFPExt(B, x, p->vec, "");
            bv[v] = x;
            continue;
        }
        LLVMValueRef x = L_->LLVMGetUndef(p->vec);
        for (int l = 0; l < p->w; l++) {
            int64_t j = (int64_t)v * p->w + l;
            LLVMValueRef col = tail ? i64c(g, j < ncols ? j : 0) : i64c(g, j);
            col = L_->LLVMBuildAdd(B, j0, col, "");
            LLVMValueRef idx = L_->LLVMBuildAdd(B, brow, L_->LLVMBuildMul(B, col, i64c(g, k->b.col_stride), ""), "");
            x = L_->LLVMBuildInsertElement(B, x, to_acc(g, p, load(g, k->b.buf, idx), p->bt),
                                           i32c(g, l), "");
        }
        bv[v] = x;
    }
    LLVMValueRef mask = L_->LLVMConstNull(g->L->LLVMVectorType(g->i32, (unsigned)p->w));
    LLVMValueRef acol = L_->LLVMBuildMul(B, kk, i64c(g, k->a.col_stride), "");
    for (int i = 0; i < MR; i++) {
        LLVMValueRef row = sel(g, icmp(g, LLVMIntSLT, i64c(g, i), p->mr), i64c(g, i), i64c(g, 0));
        row = L_->LLVMBuildAdd(B, p->i0, row, "");
        LLVMValueRef idx = L_->LLVMBuildAdd(
            B, p->oa, L_->LLVMBuildAdd(B, L_->LLVMBuildMul(B, row, i64c(g, k->a.row_stride), ""), acol, ""), "");
        LLVMValueRef a = to_acc(g, p, load(g, k->a.buf, idx), p->at);
        a = L_->LLVMBuildInsertElement(B, L_->LLVMGetUndef(p->vec), a, i32c(g, 0), "");
        a = L_->LLVMBuildShuffleVector(B, a, L_->LLVMGetUndef(p->vec), mask, "");
        for (int v = 0; v < p->nv; v++) {
            LLVMValueRef c = get(g, p->vec, accs[i][v]);
            LLVMValueRef r;
            if (p->acc == g->i64) {
                r = L_->LLVMBuildAdd(B, L_->LLVMBuildMul(B, a, bv[v], ""), c, "");
            } else {
                LLVMValueRef args[3] = {a, bv[v], c};
                r = intrinsic(g, "llvm.fmuladd", p->vec, args, 3);
            }
            set(g, accs[i][v], r);
        }
    }
    loop_close(g, &kl, false);
    /* The finished tile goes through memory to the scalar epilogue. */
    LLVMTypeRef tile_t = g->L->LLVMArrayType(p->acc, (unsigned)(MR * p->nr));
    LLVMValueRef tile = var(g, tile_t, NULL);
    LLVMValueRef base = L_->LLVMBuildBitCast(B, tile, g->L->LLVMPointerType(p->acc, 0), "");
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < p->nv; v++) {
            LLVMValueRef at = i64c(g, (int64_t)i * p->nr + (int64_t)v * p->w);
            LLVMValueRef ptr = L_->LLVMBuildInBoundsGEP2(B, p->acc, base, &at, 1, "");
            ptr = L_->LLVMBuildBitCast(B, ptr, g->L->LLVMPointerType(p->vec, 0), "");
            LLVMValueRef st = L_->LLVMBuildStore(B, get(g, p->vec, accs[i][v]), ptr);
            g->L->LLVMSetAlignment(st, (unsigned)(p->acc == g->f32 ? 4 : 8));
        }
    loop il, jl;
    LLVMValueRef i = loop_open(g, &il, i64c(g, 0), p->mr);
    LLVMValueRef j = loop_open(g, &jl, i64c(g, 0), i64c(g, ncols));
    LLVMValueRef at = L_->LLVMBuildAdd(B, L_->LLVMBuildMul(B, i, i64c(g, p->nr), ""), j, "");
    g->dot = get(g, p->acc, L_->LLVMBuildInBoundsGEP2(B, p->acc, base, &at, 1, ""));
    LLVMValueRef gi = L_->LLVMBuildMul(B, p->bt_idx, i64c(g, k->n * k->m), "");
    gi = L_->LLVMBuildAdd(B, gi, L_->LLVMBuildMul(B, L_->LLVMBuildAdd(B, p->i0, i, ""), i64c(g, k->m), ""), "");
    g->gidx = L_->LLVMBuildAdd(B, gi, L_->LLVMBuildAdd(B, j0, j, ""), "");
    for (int x = 0; x < k->nins; x++)
        if (live[x])
            ins_value(g, x);
    store_results(g);
    loop_close(g, &jl, false);
    loop_close(g, &il, false);
}

static int64_t pow2_at_least(int64_t v) {
    int64_t p = 1;
    while (p < v)
        p *= 2;
    return p;
}

static int64_t mm_row_blocks(const lower_kernel *k) { return (k->n + MR - 1) / MR; }

static void matmul(gen *g, LLVMValueRef lo, LLVMValueRef hi, bool *live) {
    const lower_kernel *k = g->k;
    needs_results(k, false, live);
    mm p = {.dt = k->out->dtype, .at = buf_dtype(k, k->a.buf), .bt = buf_dtype(k, k->b.buf)};
    p.acc = is_float(p.dt) ? (p.dt == KILN_F64 ? g->f64 : g->f32) : g->i64;
    int64_t esize = p.acc == g->f32 ? 4 : 8;
    p.w = (int)(g->vbytes / esize > 1 ? g->vbytes / esize : 1);
    if (pow2_at_least(k->m) < p.w)
        p.w = (int)pow2_at_least(k->m);
    p.nv = k->m > p.w ? 2 : 1;
    p.nr = p.w * p.nv;
    p.vec = g->L->LLVMVectorType(p.acc, (unsigned)p.w);
    int64_t nib = mm_row_blocks(k);
    loop q;
    LLVMValueRef blk = loop_open(g, &q, lo, hi);
    p.bt_idx = L_->LLVMBuildSDiv(B, blk, i64c(g, nib), "");
    p.i0 = L_->LLVMBuildMul(B, L_->LLVMBuildSRem(B, blk, i64c(g, nib), ""), i64c(g, MR), "");
    LLVMValueRef left = L_->LLVMBuildSub(B, i64c(g, k->n), p.i0, "");
    p.mr = sel(g, icmp(g, LLVMIntSLT, left, i64c(g, MR)), left, i64c(g, MR));
    p.oa = operand_offset(g, &k->a, p.bt_idx);
    p.ob = operand_offset(g, &k->b, p.bt_idx);
    int64_t full = k->m / p.nr;
    if (full > 0) {
        loop jl;
        LLVMValueRef jt = loop_open(g, &jl, i64c(g, 0), i64c(g, full));
        mm_tile(g, &p, L_->LLVMBuildMul(B, jt, i64c(g, p.nr), ""), false, p.nr, live);
        loop_close(g, &jl, false);
    }
    if (k->m % p.nr)
        mm_tile(g, &p, i64c(g, full * p.nr), true, k->m % p.nr, live);
    loop_close(g, &q, false);
}

/* The kernel's three functions. */
static void kernel(gen *g, const lower_kernel *k, LLVMValueRef pfor, LLVMTypeRef pfor_t,
                   LLVMTypeRef body_t) {
    const jit_llvm_api *L = g->L;
    int nb = k->nouts + k->ninputs;
    g->k = k;
    LLVMTypeRef *pt = calloc((size_t)nb + 2, sizeof *pt);
    LLVMValueRef *args = calloc((size_t)nb + 2, sizeof *args);
    bool *live = calloc((size_t)(k->nins ? k->nins : 1), sizeof *live);
    g->val = calloc((size_t)(k->nins ? k->nins : 1), sizeof *g->val);
    g->ptr = calloc((size_t)nb + 1, sizeof *g->ptr);
    if (!pt || !args || !live || !g->val || !g->ptr) {
        g->failed = true;
        goto done;
    }
    for (int i = 0; i < nb; i++)
        pt[i] = L->LLVMPointerType(sty(g, buf_dtype(k, i)), 0);
    pt[nb] = pt[nb + 1] = g->i64;
    char name[128];
    snprintf(name, sizeof name, "%s.inner", k->name);
    LLVMValueRef inner = add_fn(g, name, L->LLVMFunctionType(g->vd, pt, (unsigned)nb + 2, 0), true);
    for (int i = 0; i < nb; i++)
        fn_attr(g, inner, (unsigned)i + 1, "noalias");
    snprintf(name, sizeof name, "%s.body", k->name);
    LLVMValueRef body = add_fn(g, name, body_t, true);
    LLVMTypeRef entry_p[2] = {L->LLVMPointerType(g->i8p, 0), g->i32};
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
    L->LLVMBuildCall2(B, L->LLVMFunctionType(g->vd, pt, (unsigned)nb + 2, 0), inner, args,
                      (unsigned)nb + 2, "");
    fn_end(g);

    int64_t n, work;
    bool par;
    if (k->kind == LOWER_ELEMENTWISE) {
        n = (k->numel + k->tile - 1) / k->tile;
        par = k->numel >= 32768;
    } else if (k->kind == LOWER_MATMUL) {
        int64_t nb_ = 1;
        for (int d = 0; d < k->nbatch; d++)
            nb_ *= k->batch[d];
        n = nb_ * mm_row_blocks(k);
        work = nb_ * k->n * k->m * k->k;
        par = work >= 65536;
    } else {
        n = k->numel;
        par = k->numel * k->rnumel >= 32768;
    }
    fn_begin(g, entry);
    LLVMValueRef ctx = L->LLVMBuildBitCast(B, L->LLVMGetParam(entry, 0), g->i8p, "");
    if (par) {
        LLVMValueRef a[4] = {body, ctx, i64c(g, n), L->LLVMGetParam(entry, 1)};
        L->LLVMBuildCall2(B, pfor_t, pfor, a, 4, "");
    } else {
        LLVMValueRef a[3] = {ctx, i64c(g, 0), i64c(g, n)};
        L->LLVMBuildCall2(B, body_t, body, a, 3, "");
    }
    fn_end(g);

    fn_begin(g, inner);
    for (int i = 0; i < nb; i++)
        g->ptr[i] = L->LLVMGetParam(inner, (unsigned)i);
    LLVMValueRef lo = L->LLVMGetParam(inner, (unsigned)nb), hi = L->LLVMGetParam(inner, (unsigned)nb + 1);
    if (k->kind == LOWER_ELEMENTWISE)
        elementwise(g, lo, hi, live);
    else if (k->kind == LOWER_MATMUL)
        matmul(g, lo, hi, live);
    else
        phased(g, lo, hi, live);
    fn_end(g);
done:
    free(pt);
    free(args);
    free(live);
    free(g->val);
    free(g->ptr);
    g->val = g->ptr = NULL;
}

LLVMModuleRef jit_llvm_render(const jit_llvm_api *L, LLVMContextRef cx, const lower_program *p,
                              int vbytes, char *msg, size_t cap) {
    gen g = {.L = L, .cx = cx, .vbytes = vbytes};
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
        if (p->kernels[i].kind != LOWER_ALIAS)
            kernel(&g, &p->kernels[i], pfor, pfor_t, body_t);
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
