/* llvm_render.c — kernel IR to an LLVM module through the LLVM C API: one
 * external function per kernel with the C path's signature, an internal body
 * over a range of program instances that the runtime's parallel_for splits
 * between threads, and an inner function whose buffer pointers are noalias
 * (the C path's restrict), so that the optimiser vectorises its loops.
 * Element semantics are those of jit/cpu/prelude.h, written as IR: saturating
 * casts, floor division, NaN-propagating max/min, half-type rounding, Philox.
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

/* kh_odd: double to float rounded to odd. */
static LLVMValueRef odd(gen *g, LLVMValueRef d) {
    LLVMValueRef f = L_->LLVMBuildFPTrunc(B, d, g->f32, "");
    LLVMValueRef back = L_->LLVMBuildFPExt(B, f, g->f64, "");
    LLVMValueRef need = band(g, fcmp(g, LLVMRealUNE, back, d), fcmp(g, LLVMRealORD, f, f));
    LLVMValueRef u = L_->LLVMBuildBitCast(B, f, g->i32, "");
    LLVMValueRef bigger =
        fcmp(g, LLVMRealOGT, intrinsic1(g, "llvm.fabs", back), intrinsic1(g, "llvm.fabs", d));
    u = sel(g, bigger, L_->LLVMBuildSub(B, u, i32c(g, 1), ""), u);
    u = bor(g, u, i32c(g, 1));
    return sel(g, need, L_->LLVMBuildBitCast(B, u, g->f32, ""), f);
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

/* A 64-bit integer wrapped to dt's width (bool: != 0). */
static LLVMValueRef wrap(gen *g, LLVMValueRef v, kiln_dtype dt) {
    if (dt == KILN_BOOL)
        return bit(g, icmp(g, LLVMIntNE, v, i64c(g, 0)));
    if (dt == KILN_I64)
        return v;
    return L_->LLVMBuildTrunc(B, v, cty(g, dt), "");
}

/* kh_sat, then the cast to dt. */
static LLVMValueRef sat(gen *g, LLVMValueRef v, kiln_dtype dt) {
    double lo = dt == KILN_I32 ? -2147483648.0 : dt == KILN_U8 ? 0.0 : -9223372036854775808.0;
    double hi = dt == KILN_I32 ? 2147483647.0 : dt == KILN_U8 ? 255.0 : 9223372036854775808.0;
    LLVMValueRef t = intrinsic1(g, "llvm.trunc", v);
    LLVMValueRef below = fcmp(g, LLVMRealOLE, t, cf(g, g->f64, lo));
    LLVMValueRef above = fcmp(g, LLVMRealOGE, t, cf(g, g->f64, hi));
    LLVMValueRef inside = sel(g, bor(g, below, above), cf(g, g->f64, 0.0), t);
    LLVMValueRef r = L_->LLVMBuildFPToSI(B, inside, g->i64, "");
    r = sel(g, below, i64c(g, (int64_t)lo), r);
    r = sel(g, above, hi >= 9.2e18 ? i64c(g, INT64_MAX) : i64c(g, (int64_t)hi), r);
    r = sel(g, fcmp(g, LLVMRealUNO, v, v), i64c(g, 0), r);
    return dt == KILN_I64 ? r : L_->LLVMBuildTrunc(B, r, cty(g, dt), "");
}

static LLVMValueRef cast(gen *g, LLVMValueRef v, kiln_dtype from, kiln_dtype to) {
    if (to == KILN_BOOL) {
        LLVMValueRef nz = is_float(from) ? fcmp(g, LLVMRealUNE, v, cf(g, cty(g, from), 0.0))
                                         : icmp(g, LLVMIntNE, v, ci(g, cty(g, from), 0));
        return bit(g, nz);
    }
    if (to == KILN_F16 || to == KILN_BF16)
        return rnd(g, to, odd(g, to_f64(g, v, from)));
    if (is_float(to)) {
        LLVMTypeRef t = cty(g, to);
        if (!is_float(from))
            return is_signed(from) ? L_->LLVMBuildSIToFP(B, v, t, "") : L_->LLVMBuildUIToFP(B, v, t, "");
        if (cty(g, from) == t)
            return v;
        return to == KILN_F64 ? L_->LLVMBuildFPExt(B, v, t, "") : L_->LLVMBuildFPTrunc(B, v, t, "");
    }
    if (is_float(from))
        return sat(g, to_f64(g, v, from), to);
    LLVMValueRef w = wide(g, v, from);
    return to == KILN_I64 ? w : L_->LLVMBuildTrunc(B, w, cty(g, to), "");
}

/* kh_floordiv. */
static LLVMValueRef floordiv(gen *g, LLVMValueRef a, LLVMValueRef b) {
    LLVMValueRef z = icmp(g, LLVMIntEQ, b, i64c(g, 0)), m1 = icmp(g, LLVMIntEQ, b, i64c(g, -1));
    LLVMValueRef safe = sel(g, bor(g, z, m1), i64c(g, 1), b);
    LLVMValueRef q = L_->LLVMBuildSDiv(B, a, safe, ""), r = L_->LLVMBuildSRem(B, a, safe, "");
    LLVMValueRef adj = band(g, icmp(g, LLVMIntNE, r, i64c(g, 0)),
                            L_->LLVMBuildXor(B, icmp(g, LLVMIntSLT, a, i64c(g, 0)),
                                             icmp(g, LLVMIntSLT, b, i64c(g, 0)), ""));
    q = L_->LLVMBuildSub(B, q, L_->LLVMBuildZExt(B, adj, g->i64, ""), "");
    return sel(g, z, i64c(g, 0), sel(g, m1, L_->LLVMBuildSub(B, i64c(g, 0), a, ""), q));
}

/* kh_ipow, as a loop in the current function. */
static LLVMValueRef ipow(gen *g, LLVMValueRef base, LLVMValueRef e) {
    const jit_llvm_api *L = g->L;
    LLVMValueRef neg = sel(g, icmp(g, LLVMIntEQ, base, i64c(g, 1)), i64c(g, 1),
                           sel(g, icmp(g, LLVMIntEQ, base, i64c(g, -1)),
                               sel(g, icmp(g, LLVMIntNE, band(g, e, i64c(g, 1)), i64c(g, 0)),
                                   i64c(g, -1), i64c(g, 1)),
                               i64c(g, 0)));
    LLVMValueRef r = var(g, g->i64, i64c(g, 1)), bb = var(g, g->i64, base),
                 kk = var(g, g->i64, sel(g, icmp(g, LLVMIntSLT, e, i64c(g, 0)), i64c(g, 0), e));
    LLVMBasicBlockRef head = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "pow");
    LLVMBasicBlockRef body = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "pow.body");
    LLVMBasicBlockRef done = L->LLVMAppendBasicBlockInContext(g->cx, g->fn, "pow.done");
    L->LLVMBuildBr(B, head);
    L->LLVMPositionBuilderAtEnd(B, head);
    LLVMValueRef k = get(g, g->i64, kk);
    L->LLVMBuildCondBr(B, icmp(g, LLVMIntNE, k, i64c(g, 0)), body, done);
    L->LLVMPositionBuilderAtEnd(B, body);
    LLVMValueRef rv = get(g, g->i64, r), bv = get(g, g->i64, bb);
    set(g, r, sel(g, icmp(g, LLVMIntNE, band(g, k, i64c(g, 1)), i64c(g, 0)),
                  L->LLVMBuildMul(B, rv, bv, ""), rv));
    set(g, bb, L->LLVMBuildMul(B, bv, bv, ""));
    set(g, kk, lshr(g, k, 1));
    L->LLVMBuildBr(B, head);
    L->LLVMPositionBuilderAtEnd(B, done);
    return sel(g, icmp(g, LLVMIntSLT, e, i64c(g, 0)), neg, get(g, g->i64, r));
}

/* kh_rand: Philox4x32-10 of (idx, seed), then the dtype's uniform or normal
 * value, as a double. */
static LLVMValueRef philox_rand(gen *g, bool normal, kiln_dtype dt, uint64_t seed, LLVMValueRef idx) {
    LLVMValueRef c0 = L_->LLVMBuildTrunc(B, idx, g->i32, "");
    LLVMValueRef c1 = L_->LLVMBuildTrunc(B, lshr(g, idx, 32), g->i32, "");
    LLVMValueRef c2 = i32c(g, 0), c3 = i32c(g, 0);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        LLVMValueRef p0 = L_->LLVMBuildMul(B, L_->LLVMBuildZExt(B, c0, g->i64, ""),
                                           i64c(g, 0xD2511F53), "");
        LLVMValueRef p1 = L_->LLVMBuildMul(B, L_->LLVMBuildZExt(B, c2, g->i64, ""),
                                           i64c(g, 0xCD9E8D57), "");
        LLVMValueRef n0 = L_->LLVMBuildXor(
            B, L_->LLVMBuildXor(B, L_->LLVMBuildTrunc(B, lshr(g, p1, 32), g->i32, ""), c1, ""),
            i32c(g, k0), "");
        LLVMValueRef n2 = L_->LLVMBuildXor(
            B, L_->LLVMBuildXor(B, L_->LLVMBuildTrunc(B, lshr(g, p0, 32), g->i32, ""), c3, ""),
            i32c(g, k1), "");
        c0 = n0;
        c1 = L_->LLVMBuildTrunc(B, p1, g->i32, "");
        c2 = n2;
        c3 = L_->LLVMBuildTrunc(B, p0, g->i32, "");
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    LLVMValueRef w[4] = {c0, c1, c2, c3};
    LLVMValueRef d[4];
    for (int i = 0; i < 4; i++)
        d[i] = L_->LLVMBuildUIToFP(B, w[i], g->f64, "");
    LLVMValueRef b01 = bor(g, shl(g, L_->LLVMBuildZExt(B, w[0], g->i64, ""), 21),
                           L_->LLVMBuildZExt(B, lshr(g, w[1], 11), g->i64, ""));
    LLVMValueRef b23 = bor(g, shl(g, L_->LLVMBuildZExt(B, w[2], g->i64, ""), 21),
                           L_->LLVMBuildZExt(B, lshr(g, w[3], 11), g->i64, ""));
    LLVMValueRef f01 = L_->LLVMBuildUIToFP(B, b01, g->f64, "");
    LLVMValueRef f23 = L_->LLVMBuildUIToFP(B, b23, g->f64, "");
    if (!normal) {
        if (dt == KILN_F64)
            return L_->LLVMBuildFMul(B, f01, cf(g, g->f64, 0x1p-53), "");
        int sh = dt == KILN_F16 ? 21 : dt == KILN_BF16 ? 24 : 8;
        double scale = dt == KILN_F16 ? 0x1p-11 : dt == KILN_BF16 ? 0x1p-8 : 0x1p-24;
        LLVMValueRef x = L_->LLVMBuildUIToFP(B, lshr(g, w[0], sh), g->f64, "");
        return L_->LLVMBuildFMul(B, x, cf(g, g->f64, scale), "");
    }
    LLVMValueRef u1, u2;
    if (dt == KILN_F64) {
        u1 = L_->LLVMBuildFMul(B, L_->LLVMBuildFAdd(B, f01, cf(g, g->f64, 1.0), ""),
                               cf(g, g->f64, 0x1p-53), "");
        u2 = L_->LLVMBuildFMul(B, f23, cf(g, g->f64, 0x1p-53), "");
    } else {
        u1 = L_->LLVMBuildFMul(B, L_->LLVMBuildFAdd(B, d[0], cf(g, g->f64, 1.0), ""),
                               cf(g, g->f64, 0x1p-32), "");
        u2 = L_->LLVMBuildFMul(B, d[2], cf(g, g->f64, 0x1p-32), "");
    }
    LLVMValueRef rad = intrinsic1(
        g, "llvm.sqrt", L_->LLVMBuildFMul(B, cf(g, g->f64, -2.0), libm1(g, "log", u1), ""));
    LLVMValueRef ang = L_->LLVMBuildFMul(B, cf(g, g->f64, 6.28318530717958647692), u2, "");
    return L_->LLVMBuildFMul(B, rad, libm1(g, "cos", ang), "");
}

/* ---- ALU ops ---- */

static LLVMValueRef float_op(gen *g, graph_op op, kiln_dtype dt, LLVMValueRef a, LLVMValueRef c) {
    LLVMTypeRef t = cty(g, dt);
    LLVMValueRef zero = cf(g, t, 0.0), one = cf(g, t, 1.0);
    switch (op) {
    case GRAPH_NEG:
        return L_->LLVMBuildFNeg(B, a, "");
    case GRAPH_RELU:
        return sel(g, bor(g, fcmp(g, LLVMRealOGT, a, zero), fcmp(g, LLVMRealUNO, a, a)), a, zero);
    case GRAPH_RSQRT:
        return rnd(g, dt, L_->LLVMBuildFDiv(B, one, intrinsic1(g, "llvm.sqrt", a), ""));
    case GRAPH_RECIP:
        return rnd(g, dt, L_->LLVMBuildFDiv(B, one, a, ""));
    case GRAPH_ADD:
        return rnd(g, dt, L_->LLVMBuildFAdd(B, a, c, ""));
    case GRAPH_SUB:
        return rnd(g, dt, L_->LLVMBuildFSub(B, a, c, ""));
    case GRAPH_MUL:
        return rnd(g, dt, L_->LLVMBuildFMul(B, a, c, ""));
    case GRAPH_DIV:
        return rnd(g, dt, L_->LLVMBuildFDiv(B, a, c, ""));
    case GRAPH_MAXIMUM:
    case GRAPH_MINIMUM: {
        LLVMRealPredicate p = op == GRAPH_MAXIMUM ? LLVMRealOGE : LLVMRealOLE;
        LLVMValueRef r = sel(g, fcmp(g, p, a, c), a, c);
        r = sel(g, fcmp(g, LLVMRealUNO, c, c), c, r);
        return sel(g, fcmp(g, LLVMRealUNO, a, a), a, r);
    }
    case GRAPH_POW: {
        LLVMValueRef args[2] = {a, c};
        return rnd(g, dt, libm(g, "pow", args, 2));
    }
    case GRAPH_EXP:
        return rnd(g, dt, libm1(g, "exp", a));
    case GRAPH_LOG:
        return rnd(g, dt, libm1(g, "log", a));
    case GRAPH_SIN:
        return rnd(g, dt, libm1(g, "sin", a));
    case GRAPH_COS:
        return rnd(g, dt, libm1(g, "cos", a));
    case GRAPH_TANH:
        return rnd(g, dt, libm1(g, "tanh", a));
    case GRAPH_SQRT:
        return rnd(g, dt, intrinsic1(g, "llvm.sqrt", a));
    case GRAPH_ABS:
        return rnd(g, dt, intrinsic1(g, "llvm.fabs", a));
    case GRAPH_SIGMOID: {
        /* One exp, of -x where x >= 0 and of x elsewhere, as kh_sigmoid. */
        LLVMValueRef pos = fcmp(g, LLVMRealOGE, a, zero);
        LLVMValueRef e = libm1(g, "exp", sel(g, pos, L_->LLVMBuildFNeg(B, a, ""), a));
        LLVMValueRef d = L_->LLVMBuildFAdd(B, one, e, "");
        return rnd(g, dt, sel(g, pos, L_->LLVMBuildFDiv(B, one, d, ""), L_->LLVMBuildFDiv(B, e, d, "")));
    }
    case GRAPH_GELU: {
        LLVMValueRef x = L_->LLVMBuildFMul(B, L_->LLVMBuildFNeg(B, a, ""),
                                           cf(g, t, 0.70710678118654752440), "");
        LLVMValueRef ec = libm1(g, "erfc", x);
        LLVMValueRef v = L_->LLVMBuildFMul(B, L_->LLVMBuildFMul(B, cf(g, t, 0.5), a, ""), ec, "");
        return rnd(g, dt, sel(g, fcmp(g, LLVMRealOEQ, ec, zero), cf(g, t, -0.0), v));
    }
    case GRAPH_SILU: {
        LLVMValueRef first = bor(g, fcmp(g, LLVMRealOGE, a, zero), fcmp(g, LLVMRealUNO, a, a));
        LLVMValueRef e = libm1(g, "exp", sel(g, first, L_->LLVMBuildFNeg(B, a, ""), a));
        LLVMValueRef d = L_->LLVMBuildFAdd(B, one, e, "");
        LLVMValueRef v1 = L_->LLVMBuildFDiv(B, a, d, "");
        LLVMValueRef v2 = L_->LLVMBuildFDiv(B, L_->LLVMBuildFMul(B, a, e, ""), d, "");
        v2 = sel(g, fcmp(g, LLVMRealOEQ, e, zero), cf(g, t, -0.0), v2);
        return rnd(g, dt, sel(g, first, v1, v2));
    }
    default:
        return zero;
    }
}

static LLVMValueRef int_op(gen *g, graph_op op, kiln_dtype dt, LLVMValueRef a, LLVMValueRef c) {
    LLVMTypeRef t = cty(g, dt);
    LLVMIntPredicate gt = is_signed(dt) ? LLVMIntSGT : LLVMIntUGT;
    LLVMIntPredicate lt = is_signed(dt) ? LLVMIntSLT : LLVMIntULT;
    switch (op) {
    case GRAPH_RELU:
        return sel(g, icmp(g, gt, a, ci(g, t, 0)), a, ci(g, t, 0));
    case GRAPH_MAXIMUM:
        return sel(g, icmp(g, gt, a, c), a, c);
    case GRAPH_MINIMUM:
        return sel(g, icmp(g, lt, a, c), a, c);
    default:
        break;
    }
    LLVMValueRef x = wide(g, a, dt), y = c ? wide(g, c, dt) : NULL, r;
    switch (op) {
    case GRAPH_NEG:
        r = L_->LLVMBuildSub(B, i64c(g, 0), x, "");
        break;
    case GRAPH_ABS:
        r = is_signed(dt)
                ? sel(g, icmp(g, LLVMIntSLT, x, i64c(g, 0)), L_->LLVMBuildSub(B, i64c(g, 0), x, ""), x)
                : x;
        break;
    case GRAPH_ADD:
        r = L_->LLVMBuildAdd(B, x, y, "");
        break;
    case GRAPH_SUB:
        r = L_->LLVMBuildSub(B, x, y, "");
        break;
    case GRAPH_MUL:
        r = L_->LLVMBuildMul(B, x, y, "");
        break;
    case GRAPH_DIV:
        r = floordiv(g, x, y);
        break;
    case GRAPH_POW:
        r = ipow(g, x, y);
        break;
    default:
        r = i64c(g, 0);
        break;
    }
    return wrap(g, r, dt);
}

static LLVMValueRef compare(gen *g, graph_op op, kiln_dtype dt, LLVMValueRef a, LLVMValueRef c) {
    if (is_float(dt)) {
        static const LLVMRealPredicate fp[] = {LLVMRealOLT, LLVMRealOLE, LLVMRealOGT,
                                               LLVMRealOGE, LLVMRealOEQ, LLVMRealUNE};
        return bit(g, fcmp(g, fp[op - GRAPH_LT], a, c));
    }
    bool s = is_signed(dt);
    LLVMIntPredicate ip[] = {s ? LLVMIntSLT : LLVMIntULT, s ? LLVMIntSLE : LLVMIntULE,
                             s ? LLVMIntSGT : LLVMIntUGT, s ? LLVMIntSGE : LLVMIntUGE,
                             LLVMIntEQ, LLVMIntNE};
    return bit(g, icmp(g, ip[op - GRAPH_LT], a, c));
}

static LLVMValueRef alu(gen *g, const lower_ins *x) {
    const lower_ins *ins = g->k->ins;
    LLVMValueRef a = g->val[x->a], c = x->b >= 0 ? g->val[x->b] : NULL;
    kiln_dtype in = ins[x->a].dt;
    if (x->gop == GRAPH_CAST)
        return cast(g, a, in, x->dt);
    if (graph_op_is_compare(x->gop))
        return compare(g, x->gop, in, a, c);
    return is_float(x->dt) ? float_op(g, x->gop, x->dt, a, c) : int_op(g, x->gop, x->dt, a, c);
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
        break;
    case UOP_WHERE:
        r = sel(g, icmp(g, LLVMIntNE, v[x->a], ci(g, g->i8, 0)), v[x->b], v[x->c]);
        break;
    case UOP_RAND: {
        LLVMValueRef d = philox_rand(g, x->gop == GRAPH_RANDN, x->dt, (uint64_t)x->imm.i, v[x->a]);
        if (x->dt == KILN_F16 || x->dt == KILN_BF16)
            r = rnd(g, x->dt, odd(g, d));
        else if (x->dt == KILN_F64)
            r = d;
        else if (is_float(x->dt))
            r = L_->LLVMBuildFPTrunc(B, d, g->f32, "");
        else
            r = L_->LLVMBuildFPToSI(B, d, cty(g, x->dt), "");
        break;
    }
    case UOP_REDUCE:
        return; /* set once its pass is done */
    case UOP_ACC:
        if (is_float(x->dt))
            r = rnd(g, x->dt, g->dot);
        else
            r = x->dt == KILN_I64 ? g->dot : L_->LLVMBuildTrunc(B, g->dot, cty(g, x->dt), "");
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
            g->L->LLVMSetAlignment(x, (unsigned)graph_dtype_size(p->bt));
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
        snprintf(msg, cap, "kiln: out of memory while generating LLVM IR");
    }
    if (err)
        L->LLVMDisposeMessage(err);
    if (g.failed) {
        L->LLVMDisposeModule(g.m);
        return NULL;
    }
    return g.m;
}
