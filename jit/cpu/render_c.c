/* render_c.c — kernel IR to C with OpenMP: one translation unit per program,
 * a function per kernel. A program instance is an OpenMP iteration over a
 * tile of output elements whose inner loop is marked `omp simd`; reductions
 * loop over the reduced elements inside each output element; matmuls are
 * register-blocked tiles of the output accumulated over k. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cpu/cpu.h"
#include "jit/cpu/prelude.h"
#include "jit/cstyle/cstyle.h"

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool failed;
    bool narrow; /* the kernel's index arithmetic fits int32: it vectorises */
    char *err;   /* why rendering failed, when it is not memory */
    size_t errcap;
    bool refused; /* failed because of what the kernel asks, not for memory */
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->failed = true;
            return;
        }
        if (b->s && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)w;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* The C type a dtype computes in, and the type it is stored as. */
static const char *ctype(kiln_dtype dt) {
    switch (dt) {
    case KILN_F64:
        return "double";
    case KILN_F32:
    case KILN_F16:
    case KILN_BF16:
        return "float";
    case KILN_I32:
        return "int32_t";
    case KILN_I64:
        return "int64_t";
    default:
        return "uint8_t";
    }
}

static const char *stype(kiln_dtype dt) {
    return dt == KILN_F16 || dt == KILN_BF16 ? "uint16_t" : ctype(dt);
}

static bool is_float(kiln_dtype dt) { return graph_dtype_is_float(dt); }

/* C's spellings for jit/cstyle; the bit casts are prelude.h's. */
static const cstyle_target c_target = {
    .type = {[KILN_F32] = "float", [KILN_F64] = "double", [KILN_F16] = "float",
             [KILN_BF16] = "float", [KILN_I32] = "int32_t", [KILN_I64] = "int64_t",
             [KILN_U8] = "uint8_t", [KILN_BOOL] = "uint8_t"},
    .u8 = "uint8_t", .u32 = "uint32_t", .u64 = "uint64_t",
    .nan = "NAN", .inf = "INFINITY",
    .f32_bits = "kh_fbits", .bits_f32 = "kh_bitsf", .f64_bits = "kh_dbits", .bits_f64 = "kh_bitsd",
};

/* Renders nothing more: the kernel needs what this target cannot print. */
static void refuse(sbuf *b, const char *why) {
    if (b->err && !b->failed)
        snprintf(b->err, b->errcap, "%s", why);
    b->failed = b->refused = true;
}

/* Rounds a float-computed value of a half type to that type. */
static const char *rnd(kiln_dtype dt) {
    return dt == KILN_F16 ? "kh_rh" : dt == KILN_BF16 ? "kh_rb" : "";
}

static void load_expr(sbuf *b, kiln_dtype dt, int buf, const char *idx) {
    if (dt == KILN_F16)
        put(b, "kh_h2f(in%d[%s])", buf, idx);
    else if (dt == KILN_BF16)
        put(b, "kh_b2f(in%d[%s])", buf, idx);
    else
        put(b, "in%d[%s]", buf, idx);
}

static void store_expr(sbuf *b, kiln_dtype dt, const char *val) {
    if (dt == KILN_F16)
        put(b, "kh_f2h(%s)", val);
    else if (dt == KILN_BF16)
        put(b, "kh_f2b(%s)", val);
    else
        put(b, "%s", val);
}

/* The two graph ops with no rule yet, gelu and pow on floats, as prelude.h
 * and libm compute them; false for anything else (the kernel is refused). */
static bool alu_expr(sbuf *b, const lower_ins *x) {
    bool f = x->dt == KILN_F32;
    if (x->dt != KILN_F32 && x->dt != KILN_F64)
        return false;
    if (x->gop == GRAPH_GELU)
        put(b, "%s(v%d)", f ? "kh_geluf" : "kh_gelu", x->a);
    else if (x->gop == GRAPH_POW)
        put(b, "%s(v%d, v%d)", f ? "powf" : "pow", x->a, x->b);
    else
        return false;
    return true;
}

static void ins_stmt(sbuf *b, const lower_ins *ins, int i) {
    const lower_ins *x = &ins[i];
    bool index = x->op <= UOP_IMOD && x->op != UOP_IMM;
    /* i = int32 operands when narrow: 64-bit division by a constant does not
     * vectorise, and views make kernels full of it */
    const char *it = b->narrow ? "(int32_t)" : "";
    put(b, "      %s v%d = ", index ? (b->narrow ? "int32_t" : "int64_t") : ctype(x->dt), i);
    switch (x->op) {
    case UOP_GIDX:
        put(b, "%sg", it);
        break;
    case UOP_RIDX:
        put(b, "%sr", it);
        break;
    case UOP_IMM: {
        char e[96];
        cstyle_imm(&c_target, x->dt, x->imm, e, sizeof e);
        put(b, "%s", e);
        break;
    }
    case UOP_IADD:
        put(b, "%sv%d + %sv%d", it, x->a, it, x->b);
        break;
    case UOP_IMUL:
        put(b, "%sv%d * %sv%d", it, x->a, it, x->b);
        break;
    case UOP_IDIV:
        put(b, "%sv%d / %sv%d", it, x->a, it, x->b);
        break;
    case UOP_IMOD:
        put(b, "%sv%d %% %sv%d", it, x->a, it, x->b);
        break;
    case UOP_ILT:
        put(b, "(uint8_t)(%sv%d < %sv%d)", it, x->a, it, x->b);
        break;
    case UOP_AND:
        put(b, "(uint8_t)(v%d && v%d)", x->a, x->b);
        break;
    case UOP_LOAD: {
        char idx[32];
        snprintf(idx, sizeof idx, "v%d", x->a);
        if (x->b >= 0) {
            /* A masked load reads index 0 where invalid, never out of bounds. */
            snprintf(idx, sizeof idx, "v%d ? v%d : 0", x->b, x->a);
            put(b, "v%d ? ", x->b);
            load_expr(b, x->dt, x->buf, idx);
            put(b, " : (%s)0", ctype(x->dt));
        } else {
            load_expr(b, x->dt, x->buf, idx);
        }
        break;
    }
    case UOP_ALU:
        if (!alu_expr(b, x)) {
            char why[256];
            cstyle_refuse(x, "C", why, sizeof why);
            refuse(b, why);
        }
        break;
    case UOP_PRIM: {
        char e[512], why[256];
        if (cstyle_prim(&c_target, ins, i, e, sizeof e, why, sizeof why))
            put(b, "%s", e);
        else
            refuse(b, why);
        break;
    }
    case UOP_WHERE:
        put(b, "v%d ? v%d : v%d", x->a, x->b, x->c);
        break;
    case UOP_REDUCE:
        put(b, "acc");
        break;
    case UOP_ACC:
        put(b, "(%s)%s(dot)", ctype(x->dt),
            is_float(x->dt) ? rnd(x->dt) : (x->dt == KILN_I32 ? "(int32_t)(uint32_t)" : ""));
        break;
    default: {
        char why[256];
        cstyle_refuse(x, "C", why, sizeof why);
        refuse(b, why);
        break;
    }
    }
    put(b, ";\n");
}

static void params(sbuf *b, const lower_kernel *k) {
    put(b, "void %s(char **bufs, int nthreads) {\n", k->name);
    for (int o = 0; o < k->nouts; o++)
        put(b, "  %s *restrict out%d = (%s *)bufs[%d];\n", stype(k->outs[o]->dtype), o,
            stype(k->outs[o]->dtype), o);
    for (int i = 0; i < k->ninputs; i++)
        put(b, "  const %s *restrict in%d = (const %s *)bufs[%d];\n", stype(k->inputs[i]->dtype),
            k->nouts + i, stype(k->inputs[i]->dtype), k->nouts + i);
    put(b, "  (void)nthreads;\n");
}

static void reduce_init(sbuf *b, const lower_ins *red, kiln_dtype in) {
    graph_op op = red->gop;
    const char *acc = is_float(in) ? "double" : "int64_t";
    if (op == GRAPH_SUM) {
        put(b, "      %s acc = 0;\n", is_float(in) ? "double" : "uint64_t");
    } else {
        put(b, "      %s best = 0; int64_t at = -1;\n", acc);
    }
}

static void reduce_step(sbuf *b, const lower_ins *red, kiln_dtype in) {
    int v = red->a;
    switch (red->gop) {
    case GRAPH_SUM:
        put(b, is_float(in) ? "        acc += (double)v%d;\n" : "        acc += (uint64_t)v%d;\n", v);
        return;
    default: {
        bool mx = red->gop == GRAPH_RMAX || red->gop == GRAPH_ARGMAX;
        if (is_float(in))
            put(b,
                "        if (at < 0 || (best == best && (v%d != v%d || v%d %s best))) "
                "{ best = v%d; at = r; }\n",
                v, v, v, mx ? ">" : "<", v);
        else
            put(b, "        if (at < 0 || v%d %s best) { best = v%d; at = r; }\n", v,
                mx ? ">" : "<", v);
        return;
    }
    }
}

/* Assigns the finished reduction to v<id>, declared before its pass. */
static void reduce_result(sbuf *b, const lower_ins *red, int id) {
    kiln_dtype dt = red->dt;
    if (red->gop == GRAPH_ARGMAX || red->gop == GRAPH_ARGMIN)
        put(b, "        v%d = at < 0 ? 0 : at;\n", id);
    else if (red->gop == GRAPH_SUM && is_float(dt))
        put(b, "        v%d = %s((%s)acc);\n", id, rnd(dt), ctype(dt));
    else
        put(b, "        v%d = (%s)%s;\n", id, ctype(dt), red->gop == GRAPH_SUM ? "acc" : "best");
}

static void store_stmt(sbuf *b, const lower_kernel *k, const char *indent) {
    for (int o = 0; o < k->nouts; o++) {
        char val[32];
        snprintf(val, sizeof val, "v%d", k->results[o]);
        put(b, "%sout%d[v%d] = ", indent, o, k->store);
        store_expr(b, k->outs[o]->dtype, val);
        put(b, ";\n");
    }
}

/* The instructions of a block of the plan. */
static void block_stmts(sbuf *b, const lower_kernel *k, const lower_block *blk) {
    for (int i = 0; i < blk->n; i++)
        ins_stmt(b, k->ins, blk->ins[i]);
}

/* Elementwise: a tile of output elements per program instance, its loop
 * vectorised. */
static void render_elementwise(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    put(b, "  const int64_t N = %lldLL, T = %lldLL;\n", (long long)k->numel, (long long)k->tile);
    if (plan->parallel)
        put(b, "  #pragma omp parallel for schedule(static) num_threads(nthreads)\n");
    put(b, "  for (int64_t t = 0; t < %lldLL; t++) {\n", (long long)plan->grid);
    put(b, "    const int64_t lo = t * T, hi = lo + T < N ? lo + T : N;\n");
    put(b, "    #pragma omp simd\n");
    put(b, "    for (int64_t g = lo; g < hi; g++) {\n");
    for (int i = 0; i < plan->nblocks; i++)
        block_stmts(b, k, &plan->blocks[i]);
    store_stmt(b, k, "      ");
    put(b, "    }\n  }\n}\n\n");
}

/* A max/min/arg pass split across threads: each reduces a contiguous chunk
 * of the row, then the chunks combine in order, so the first of equal values
 * (and the first NaN) still wins. */
static void split_ordered_pass(sbuf *b, const lower_kernel *k, const lower_block *blk) {
    const lower_ins *x = &k->ins[blk->reduce];
    kiln_dtype in = k->ins[x->a].dt;
    const char *acc = is_float(in) ? "double" : "int64_t";
    put(b, "      enum { KT = 256 };\n");
    put(b, "      %s pbest[KT]; int64_t pat[KT];\n", acc);
    put(b, "      for (int t = 0; t < KT; t++) pat[t] = -1;\n");
    put(b, "      #pragma omp parallel num_threads(nthreads < KT ? nthreads : KT)\n");
    put(b, "      {\n");
    put(b, "        const int t = omp_get_thread_num(), T = omp_get_num_threads();\n");
    put(b, "        const int64_t lo = R * t / T, hi = R * (t + 1) / T;\n");
    reduce_init(b, x, in);
    put(b, "        for (int64_t r = lo; r < hi; r++) {\n");
    block_stmts(b, k, blk);
    reduce_step(b, x, in);
    put(b, "        }\n");
    put(b, "        pbest[t] = best; pat[t] = at;\n");
    put(b, "      }\n");
    put(b, "      for (int t = 0; t < KT; t++) {\n");
    put(b, "        if (pat[t] < 0) continue;\n");
    put(b, "        const int64_t r = pat[t];\n");
    put(b, "        const %s v%d = (%s)pbest[t];\n", ctype(k->ins[x->a].dt), x->a,
        ctype(k->ins[x->a].dt));
    reduce_step(b, x, in);
    put(b, "      }\n");
}

/* A pass over the reduced elements that finishes one reduction. A sum may
 * run in SIMD lanes (a different order of additions, in double, well inside
 * every float tolerance); max/min and the arg reductions keep their order,
 * which decides ties and NaN. */
static void reduce_pass(sbuf *b, const lower_kernel *k, const lower_block *blk, bool split) {
    const lower_ins *x = &k->ins[blk->reduce];
    kiln_dtype in = k->ins[x->a].dt;
    put(b, "    %s v%d;\n    {\n", ctype(x->dt), blk->reduce);
    reduce_init(b, x, in);
    if (x->gop != GRAPH_SUM && split) {
        split_ordered_pass(b, k, blk);
    } else {
        if (x->gop == GRAPH_SUM)
            put(b, split ? "      #pragma omp parallel for simd reduction(+:acc) "
                           "schedule(static) num_threads(nthreads)\n"
                         : "      #pragma omp simd reduction(+:acc)\n");
        put(b, "      for (int64_t r = 0; r < R; r++) {\n");
        block_stmts(b, k, blk);
        reduce_step(b, x, in);
        put(b, "      }\n");
    }
    reduce_result(b, x, blk->reduce);
    put(b, "    }\n");
}

/* Reductions and row kernels: a program instance per output row, walking
 * the plan's blocks: outer values, passes that finish reductions, and in a
 * row kernel a last pass that stores. */
static void render_phased(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    put(b, "  const int64_t N = %lldLL, R = %lldLL;\n", (long long)k->numel, (long long)k->rnumel);
    if (plan->parallel)
        put(b, "  #pragma omp parallel for schedule(static) num_threads(nthreads)\n");
    put(b, "  for (int64_t g = 0; g < N; g++) {\n");
    bool stored = false;
    for (int i = 0; i < plan->nblocks; i++) {
        const lower_block *blk = &plan->blocks[i];
        switch (blk->kind) {
        case LOWER_BLOCK_OUTER:
            block_stmts(b, k, blk);
            break;
        case LOWER_BLOCK_REDUCE:
            reduce_pass(b, k, blk, plan->split);
            break;
        case LOWER_BLOCK_STORE:
            put(b, plan->split
                       ? "    #pragma omp parallel for simd schedule(static) num_threads(nthreads)\n"
                       : "    #pragma omp simd\n");
            put(b, "    for (int64_t r = 0; r < R; r++) {\n");
            block_stmts(b, k, blk);
            store_stmt(b, k, "      ");
            put(b, "    }\n");
            stored = true;
            break;
        }
    }
    if (!stored)
        store_stmt(b, k, "    ");
    put(b, "  }\n}\n\n");
}

static void render_ir_kernel(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    params(b, k);
    b->narrow = plan->narrow;
    if (k->kind == LOWER_ELEMENTWISE)
        render_elementwise(b, k, plan);
    else
        render_phased(b, k, plan);
    b->narrow = false;
}

static void operand_offset(sbuf *b, const char *name, const lower_kernel *k,
                           const lower_operand *o) {
    put(b, "      const int64_t %s = %lldLL", name, (long long)o->offset);
    int64_t inner = 1;
    for (int d = k->nbatch - 1; d >= 0; d--) {
        if (o->batch_strides[d] && k->batch[d] > 1)
            put(b, " + ((bt / %lldLL) %% %lldLL) * %lldLL", (long long)inner,
                (long long)k->batch[d], (long long)o->batch_strides[d]);
        inner *= k->batch[d];
    }
    put(b, ";\n");
}

/* The register tile of the micro-kernel, from the plan: vector bytes, rows
 * (MR) and vectors per row (NV). */
typedef struct mm_shape {
    int vbytes, mr, nv;
} mm_shape;

/* The micro-kernel: an MR x NR tile of C (NR = NV vectors) accumulated in
 * registers over kc steps of A (MR values per step, rows `rs` apart, steps
 * `cs` apart: packed, or the operand itself) and packed B (NR values per
 * step), then stored into, or added to, the thread's C block. ISO
 * C mode turns off contraction of a*b+c, so it is turned back on here alone:
 * the epilogue keeps the rounding of the unfused ops. */
static void mm_micro_kernel(sbuf *b, const char *name, const char *e, mm_shape s) {
    put(b, "#pragma GCC push_options\n#pragma GCC optimize(\"fp-contract=fast\")\n");
    put(b,
        "static __attribute__((noinline)) void %s_ukr(int64_t kc, const %s *restrict a, "
        "int64_t rs, int64_t cs, const %s *restrict b, %s *restrict c, int add) {\n",
        name, e, e, e);
    put(b, "#ifdef __clang__\n#pragma clang fp contract(fast)\n#endif\n");
    for (int i = 0; i < s.mr; i++)
        for (int v = 0; v < s.nv; v++)
            put(b, "  %s_v c%d_%d = {0};\n", name, i, v);
    for (int i = 1; i < s.mr; i++)
        put(b, "  const int64_t r%d = %d * rs;\n", i, i);
    put(b, "  for (int64_t p = 0; p < kc; p++, a += cs, b += %s_NR) {\n", name);
    for (int v = 0; v < s.nv; v++)
        put(b, "    const %s_v b%d = *(const %s_v *)(b + %d * %s_L);\n", name, v, name, v, name);
    for (int i = 0; i < s.mr; i++) {
        if (i == 0)
            put(b, "    { const %s a0 = a[0];", e);
        else
            put(b, "    { const %s a%d = a[r%d];", e, i, i);
        for (int v = 0; v < s.nv; v++)
            put(b, " c%d_%d = a%d * b%d + c%d_%d;", i, v, i, v, i, v);
        put(b, " }\n");
    }
    put(b, "  }\n");
    put(b, "  if (add) {\n");
    for (int i = 0; i < s.mr; i++)
        for (int v = 0; v < s.nv; v++)
            put(b, "    *(%s_v *)(c + %d * %s_NC + %d * %s_L) += c%d_%d;\n", name, i, name, v,
                name, i, v);
    put(b, "  } else {\n");
    for (int i = 0; i < s.mr; i++)
        for (int v = 0; v < s.nv; v++)
            put(b, "    *(%s_v *)(c + %d * %s_NC + %d * %s_L) = c%d_%d;\n", name, i, name, v,
                name, i, v);
    put(b, "  }\n}\n#pragma GCC pop_options\n");
}

/* Packs rows [i0, i0 + mc) and k [p0, p0 + kc) of an operand into panels of
 * `unit` rows, step-major (unit values per k step), converted to the packed
 * type; rows past mc are zeros. A is packed by its rows, B by its columns,
 * so B's row stride is its k stride here. */
static void mm_pack(sbuf *b, const char *name, const char *which, const char *e,
                    const char *unit, kiln_dtype dt, int buf, int64_t row_stride,
                    int64_t k_stride) {
    put(b,
        "static void %s_pack_%s(%s *restrict dst, const %s *restrict src, int64_t o, "
        "int64_t mc, int64_t kc) {\n",
        name, which, e, stype(dt));
    put(b, "  const %s *restrict in%d = src;\n", stype(dt), buf);
    put(b, "  for (int64_t r0 = 0; r0 < mc; r0 += %s, dst += %s * kc) {\n", unit, unit);
    put(b, "    if (r0 + %s <= mc) {\n", unit);
    /* Reads run along the operand's contiguous axis; where that is k, in
     * steps of 16 so that the panel rows being written stay in L1. */
    if (k_stride == 1 && row_stride != 1) {
        put(b, "      for (int64_t q = 0; q < kc; q += 16)\n");
        put(b, "      for (int64_t r = 0; r < %s; r++)\n", unit);
        put(b, "        for (int64_t p = q; p < (q + 16 < kc ? q + 16 : kc); p++)\n");
    } else {
        put(b, "      for (int64_t p = 0; p < kc; p++)\n");
        put(b, "        for (int64_t r = 0; r < %s; r++)\n", unit);
    }
    put(b, "          dst[p * %s + r] = (%s)", unit, e);
    char idx[96];
    snprintf(idx, sizeof idx, "o + (r0 + r) * %lldLL + p * %lldLL", (long long)row_stride,
             (long long)k_stride);
    load_expr(b, dt, buf, idx);
    put(b, ";\n    } else {\n");
    put(b, "      for (int64_t p = 0; p < kc; p++)\n");
    put(b, "        for (int64_t r = 0; r < %s; r++)\n", unit);
    put(b, "          dst[p * %s + r] = r0 + r < mc ? (%s)", unit, e);
    load_expr(b, dt, buf, idx);
    put(b, " : (%s)0;\n    }\n  }\n}\n", e);
}

/* The kernel's buffers as typed pointers (as params() declares them). */
static void mm_buffers(sbuf *b, const lower_kernel *k) {
    for (int o = 0; o < k->nouts; o++)
        put(b, "  %s *restrict out%d = (%s *)bufs[%d];\n", stype(k->outs[o]->dtype), o,
            stype(k->outs[o]->dtype), o);
    for (int i = 0; i < k->ninputs; i++)
        put(b, "  const %s *restrict in%d = (const %s *)bufs[%d];\n", stype(k->inputs[i]->dtype),
            k->nouts + i, stype(k->inputs[i]->dtype), k->nouts + i);
}

/* A GotoBLAS-style matmul. The output is cut into blocks of MC rows by NC
 * columns, and the blocks of every batch are the OpenMP tasks, so that both
 * long and skinny shapes give every thread work. A task walks k in steps of
 * KC: it packs its KC x NC slice of B into thread-local panels (contiguous
 * whatever B's strides, converted to the accumulation type), and A too
 * unless A can be read in place, and runs the micro-kernel over them, one
 * panel of A against every panel of B in turn; the sums collect in a
 * thread-local C block, on which the epilogue then runs element by
 * element. Floats accumulate in their own precision (halves in float),
 * integers in wrapping uint64_t. Should the panels not be allocated, a plain
 * dot product per element is the fallback. */
static void render_matmul(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    const lower_mm_plan *mm = &plan->mm;
    kiln_dtype dt = mm->acc;
    kiln_dtype at = k->inputs[k->a.buf - k->nouts]->dtype;
    kiln_dtype bt = k->inputs[k->b.buf - k->nouts]->dtype;
    const char *e = is_float(dt) ? (dt == KILN_F64 ? "double" : "float") : "uint64_t";
    int esz = dt == KILN_F32 ? 4 : 8;
    bool direct = mm->a_direct;
    int64_t nb = 1;
    for (int d = 0; d < k->nbatch; d++)
        nb *= k->batch[d];
    mm_shape s = {mm->lanes * esz, mm->mr, mm->nv};
    int64_t lanes = mm->lanes, nr = lanes * mm->nv, mc = mm->mc, nc = mm->nc, kc = mm->kc;
    const char *name = k->name;
    put(b, "#include <stdlib.h>\n");
    put(b, "typedef %s %s_v __attribute__((vector_size(%d), may_alias));\n", e, name, s.vbytes);
    put(b, "enum { %s_MR = %d, %s_L = %lld, %s_NR = %lld, %s_MC = %lld, %s_NC = %lld, %s_KC = %lld };\n",
        name, s.mr, name, (long long)lanes, name, (long long)nr, name, (long long)mc, name,
        (long long)nc, name, (long long)kc);
    mm_micro_kernel(b, name, e, s);
    char unit[128];
    snprintf(unit, sizeof unit, "%s_MR", name);
    mm_pack(b, name, "a", e, unit, at, k->a.buf, k->a.row_stride, k->a.col_stride);
    snprintf(unit, sizeof unit, "%s_NR", name);
    mm_pack(b, name, "b", e, unit, bt, k->b.buf, k->b.col_stride, k->b.row_stride);
    /* The epilogue: a run of n output elements from their finished dot
     * products, as one vectorised loop (in int32 index arithmetic where the
     * ranges allow: a bias's broadcast index is a division per element). */
    put(b, "static inline void %s_epi(char **bufs, int64_t g0, const %s *dots, int64_t n) {\n",
        name, e);
    mm_buffers(b, k);
    put(b, "  #pragma omp simd\n");
    put(b, "  for (int64_t j = 0; j < n; j++) {\n");
    put(b, "    const int64_t g = g0 + j;\n");
    put(b, "    const %s dot = dots[j];\n", e);
    b->narrow = plan->narrow;
    for (int i = 0; i < plan->nblocks; i++)
        block_stmts(b, k, &plan->blocks[i]);
    b->narrow = false;
    store_stmt(b, k, "    ");
    put(b, "  }\n}\n");
    params(b, k);
    put(b, "  const int64_t NB = %lldLL, N = %lldLL, K = %lldLL, M = %lldLL;\n", (long long)nb,
        (long long)k->n, (long long)k->k, (long long)k->m);
    put(b, "  const int64_t MC = %s_MC, NC = %s_NC, KC = %s_KC, MR = %s_MR, NR = %s_NR;\n", name,
        name, name, name, name);
    put(b, "  const int64_t NBM = (N + MC - 1) / MC, NBN = (M + NC - 1) / NC;\n");
    put(b, "  const size_t MCP = (MC + MR - 1) / MR * MR;\n");
    put(b, "  const size_t csz = MCP * NC, bsz = KC * NC, asz = MCP * KC;\n");
    put(b, "  const size_t bytes = ((csz + bsz + asz) * sizeof(%s) + 63) / 64 * 64;\n", e);
    put(b, "  const int64_t T = NB * NBM * NBN;\n");
    put(b, "  #pragma omp parallel num_threads(nthreads < T ? nthreads : (int)T) if(%d)\n  {\n",
        plan->parallel);
    put(b, "  %s *const cb = K > 0 ? aligned_alloc(64, bytes) : NULL;\n", e);
    put(b, "  %s *const bp = cb ? cb + csz : NULL, *const ap = cb ? cb + csz + bsz : NULL;\n", e);
    put(b, "  #pragma omp for schedule(dynamic, 1)\n");
    put(b, "  for (int64_t t = 0; t < T; t++) {\n");
    put(b, "      const int64_t bt = t / (NBM * NBN), ib = t / NBN %% NBM, jb = t %% NBN;\n");
    put(b, "      const int64_t i0 = ib * MC, j0 = jb * NC;\n");
    put(b, "      const int64_t mc = N - i0 < MC ? N - i0 : MC, nc = M - j0 < NC ? M - j0 : NC;\n");
    operand_offset(b, "oa", k, &k->a);
    operand_offset(b, "ob", k, &k->b);
    put(b, "      const int64_t full = %s;\n", direct ? "mc / MR * MR" : "0");
    put(b, "      if (cb)\n");
    put(b, "        for (int64_t p0 = 0; p0 < K; p0 += KC) {\n");
    put(b, "          const int64_t kc = K - p0 < KC ? K - p0 : KC;\n");
    put(b, "          %s_pack_b(bp, in%d, ob + j0 * %lldLL + p0 * %lldLL, nc, kc);\n", name, k->b.buf,
        (long long)k->b.col_stride, (long long)k->b.row_stride);
    put(b, "          if (full < mc)\n");
    put(b, "            %s_pack_a(ap + full * kc, in%d, oa + (i0 + full) * %lldLL + p0 * %lldLL, "
           "mc - full, kc);\n",
        name, k->a.buf, (long long)k->a.row_stride, (long long)k->a.col_stride);
    put(b, "          for (int64_t ir = 0; ir < mc; ir += MR)\n");
    put(b, "            for (int64_t jr = 0; jr < nc; jr += NR)\n");
    if (direct)
        put(b, "              if (ir < full) %s_ukr(kc, in%d + oa + (i0 + ir) * %lldLL + p0 * %lldLL, "
               "%lldLL, %lldLL, bp + jr * kc, cb + ir * NC + jr, p0 > 0); else\n",
            name, k->a.buf, (long long)k->a.row_stride, (long long)k->a.col_stride,
            (long long)k->a.row_stride, (long long)k->a.col_stride);
    put(b, "              %s_ukr(kc, ap + ir * kc, 1, MR, bp + jr * kc, cb + ir * NC + jr, p0 > 0);\n",
        name);
    put(b, "        }\n");
    put(b, "      if (cb)\n");
    put(b, "        for (int64_t i = 0; i < mc; i++) {\n");
    put(b, "          const int64_t g0 = bt * N * M + (i0 + i) * M + j0;\n");
    put(b, "          %s_epi(bufs, g0, cb + i * NC, nc);\n", name);
    put(b, "        }\n");
    put(b, "      else\n");
    put(b, "        for (int64_t i = 0; i < mc; i++)\n");
    put(b, "          for (int64_t j = 0; j < nc; j++) {\n");
    put(b, "            %s dot = 0;\n", e);
    put(b, "            for (int64_t p = 0; p < K; p++) {\n");
    char idx[160];
    snprintf(idx, sizeof idx, "oa + (i0 + i) * %lldLL + p * %lldLL", (long long)k->a.row_stride,
             (long long)k->a.col_stride);
    put(b, "              dot += (%s)", e);
    load_expr(b, at, k->a.buf, idx);
    snprintf(idx, sizeof idx, "ob + p * %lldLL + (j0 + j) * %lldLL", (long long)k->b.row_stride,
             (long long)k->b.col_stride);
    put(b, " * (%s)", e);
    load_expr(b, bt, k->b.buf, idx);
    put(b, ";\n            }\n");
    put(b, "            %s_epi(bufs, bt * N * M + (i0 + i) * M + j0 + j, &dot, 1);\n", name);
    put(b, "          }\n  }\n  free(cb);\n  }\n}\n\n");
}

kiln_status jit_cpu_render(const lower_program *p, const lower_plan *plans, char **out, char *msg,
                            size_t cap) {
    sbuf b = {0};
    b.err = msg;
    b.errcap = cap;
    put(&b, "%s\n", jit_cpu_prelude);
    for (int i = 0; i < p->nkernels; i++) {
        const lower_kernel *k = &p->kernels[i];
        if (k->kind == LOWER_MATMUL)
            render_matmul(&b, k, &plans[i]);
        else if (k->kind != LOWER_ALIAS)
            render_ir_kernel(&b, k, &plans[i]);
    }
    *out = NULL;
    if (b.failed) {
        free(b.s);
        if (b.refused)
            return KILN_ERR_COMPILE;
        snprintf(msg, cap, "kiln: out of memory while generating code");
        return KILN_ERR_OOM;
    }
    *out = b.s;
    return KILN_OK;
}
