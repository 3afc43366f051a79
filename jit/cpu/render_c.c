/* render_c.c — kernel IR to C with OpenMP: one translation unit per program,
 * a function per kernel. A program instance is an OpenMP iteration over a
 * tile of output elements whose inner loop is marked `omp simd`; reductions
 * loop over the reduced elements inside each output element; matmuls are
 * register-blocked tiles of the output accumulated over k. */
#include <stdlib.h>
#include <string.h>

#include "jit/cpu/cpu.h"
#include "jit/cpu/prelude.h"
#include "jit/cstyle/cstyle.h"

typedef cstyle_buf sbuf;

static bool is_float(kiln_dtype dt) { return graph_dtype_is_float(dt); }

/* C's spellings for jit/cstyle; the bit casts are prelude.h's. */
static const cstyle_target c_target = {
    .type = {[KILN_F32] = "float", [KILN_F64] = "double", [KILN_F16] = "float",
             [KILN_BF16] = "float", [KILN_I32] = "int32_t", [KILN_I64] = "int64_t",
             [KILN_U8] = "uint8_t", [KILN_BOOL] = "uint8_t", [KILN_I8] = "int8_t"},
    .u8 = "uint8_t", .u16 = "uint16_t", .u32 = "uint32_t", .u64 = "uint64_t",
    .nan = "NAN", .inf = "INFINITY",
    .f32_bits = "kh_fbits", .bits_f32 = "kh_bitsf", .f64_bits = "kh_dbits", .bits_f64 = "kh_bitsd",
    .buffer = "in%d",
    .lane = "(g - lo)",
    .name = "C",
};

static const char *ctype(kiln_dtype dt) { return c_target.type[dt]; }
static const char *stype(kiln_dtype dt) { return cstyle_storage_type(&c_target, dt); }
static const char *rnd(kiln_dtype dt) { return cstyle_round_half(dt); }

static void load_expr(sbuf *b, kiln_dtype dt, int buf, const char *idx) {
    char e[256];
    cstyle_load(&c_target, dt, buf, idx, e, sizeof e);
    cstyle_put(b, "%s", e);
}

static void store_expr(sbuf *b, kiln_dtype dt, const char *val) {
    char e[160];
    cstyle_store(dt, val, e, sizeof e);
    cstyle_put(b, "%s", e);
}

/* Loop counters as wide as the plan's indices: an int32 index taken from
 * an int64 counter is not provably linear, so every load and store of a
 * vectorised loop became a gather or scatter. */
static const char *counter(const sbuf *b) { return b->narrow ? "int32_t" : "int64_t"; }

/* In a columns kernel walked in rows of D (lower_plan.rows), the flat
 * output index g is row D + col: its quotient by a multiple q D of D is the
 * row's by q, its remainder the row's remainder by q, times D, plus col. The
 * compiler, shown g alone, divides it per element. */
static bool row_stmt(sbuf *b, const lower_ins *ins, int i) {
    const lower_ins *x = &ins[i];
    if (!b->rows || (x->op != UOP_IDIV && x->op != UOP_IMOD) || ins[x->a].op != UOP_GIDX ||
        ins[x->b].op != UOP_IMM || ins[x->b].sized || ins[x->b].imm.i % b->rows)
        return false;
    long long q = (long long)(ins[x->b].imm.i / b->rows), d = (long long)b->rows;
    const char *t = counter(b);
    if (x->op == UOP_IDIV && q == 1)
        cstyle_put(b, "      const %s v%d = row;\n", t, i);
    else if (x->op == UOP_IDIV)
        cstyle_put(b, "      const %s v%d = row / %lldLL;\n", t, i, q);
    else if (q == 1)
        cstyle_put(b, "      const %s v%d = col;\n", t, i);
    else
        cstyle_put(b, "      const %s v%d = row %% %lldLL * %lldLL + col;\n", t, i, q, d);
    return true;
}

static void ins_stmt(sbuf *b, const lower_ins *ins, int i) {
    char s[1280], why[256];
    if (row_stmt(b, ins, i))
        return;
    if (cstyle_ins(&c_target, ins, i, b->narrow, s, sizeof s, why, sizeof why))
        cstyle_put(b, "      %s\n", s);
    else
        cstyle_refuse_buf(b, why);
}

/* The kernel's buffers as typed pointers. */
static void buffer_ptrs(sbuf *b, const lower_kernel *k) {
    for (int o = 0; o < k->nouts; o++)
        cstyle_put(b, "  %s *restrict out%d = (%s *)bufs[%d];\n", stype(k->outs[o]->dtype), o,
            stype(k->outs[o]->dtype), o);
    for (int i = 0; i < k->ninputs; i++)
        cstyle_put(b, "  const %s *restrict in%d = (const %s *)bufs[%d];\n", stype(k->inputs[i]->dtype),
            k->nouts + i, stype(k->inputs[i]->dtype), k->nouts + i);
    /* A scatter pass reads back what it stored: loads of buffer 0, through
     * a pointer based on out0, so restrict still holds. */
    if (k->kind == LOWER_SCATTER)
        cstyle_put(b, "  const %s *const in0 = out0;\n", stype(k->out->dtype));
    cstyle_sizes_decl(b, k, "  ");
}

static void params(sbuf *b, const lower_kernel *k) {
    cstyle_put(b, "void %s" JIT_CPU_KERNEL_PARAMS " {\n", lower_kernel_symbol(k));
    buffer_ptrs(b, k);
    cstyle_put(b, "  (void)nthreads;\n");
}

static void reduce_init(sbuf *b, const lower_ins *red, kiln_dtype in) {
    graph_op op = red->gop;
    const char *acc = is_float(in) ? "double" : "int64_t";
    if (op == GRAPH_SUM) {
        cstyle_put(b, "      %s acc = 0;\n", is_float(in) ? "double" : "uint64_t");
    } else {
        cstyle_put(b, "      %s best = 0; int64_t at = -1;\n", acc);
    }
}

static void reduce_step(sbuf *b, const lower_ins *red, kiln_dtype in) {
    int v = red->a;
    switch (red->gop) {
    case GRAPH_SUM:
        cstyle_put(b, is_float(in) ? "        acc += (double)v%d;\n" : "        acc += (uint64_t)v%d;\n", v);
        return;
    default: {
        cstyle_reduce_take(b, "        ", red->gop, is_float(in), v);
        return;
    }
    }
}

/* Assigns the finished reduction to v<id>, declared before its pass. */
static void reduce_result(sbuf *b, const lower_ins *red, int id) {
    kiln_dtype dt = red->dt;
    if (red->gop == GRAPH_ARGMAX || red->gop == GRAPH_ARGMIN)
        cstyle_put(b, "        v%d = at < 0 ? 0 : at;\n", id);
    else if (red->gop == GRAPH_SUM && is_float(dt))
        cstyle_put(b, "        v%d = %s((%s)acc);\n", id, rnd(dt), ctype(dt));
    else
        cstyle_put(b, "        v%d = (%s)%s;\n", id, ctype(dt), red->gop == GRAPH_SUM ? "acc" : "best");
}

static void store_stmt(sbuf *b, const lower_kernel *k, const char *indent) {
    for (int o = 0; o < k->nouts; o++) {
        char val[32];
        snprintf(val, sizeof val, "v%d", k->results[o]);
        cstyle_put(b, "%sout%d[v%d] = ", indent, o, k->store);
        store_expr(b, k->outs[o]->dtype, val);
        cstyle_put(b, ";\n");
    }
}

/* The instructions of a block of the plan; a store pass reads its stash
 * back from output 0 (the plan's stash: only f32 and f64 outputs). */
static void block_stmts(sbuf *b, const lower_kernel *k, const lower_block *blk) {
    for (int i = 0; i < blk->n; i++) {
        int id = blk->ins[i];
        if (blk->kind == LOWER_BLOCK_STORE && id == blk->stash)
            cstyle_put(b, "      const %s v%d = out0[v%d];\n", ctype(k->ins[id].dt), id, k->store);
        else
            ins_stmt(b, k->ins, id);
    }
}

/* A sum pass's stash, stored where the store pass will read it. */
static void stash_stmt(sbuf *b, const lower_kernel *k, const lower_block *blk) {
    if (blk->stash >= 0)
        cstyle_put(b, "        out0[v%d] = v%d;\n", k->store, blk->stash);
}

/* The pragma spreading a kernel's loop over the threads: none when the plan
 * says the work is too little, or, when that is read at run time, an if
 * clause that decides. */
static void parallel_for(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    if (lower_size_index(k, &plan->parallel) >= 0)
        cstyle_put(b, "  #pragma omp parallel for schedule(static) num_threads(nthreads) if(%s)\n",
                   cstyle_size(b, k, &plan->parallel));
    else if (plan->parallel)
        cstyle_put(b, "  #pragma omp parallel for schedule(static) num_threads(nthreads)\n");
}

/* `#pragma omp simd` and its clauses, unless the plan leaves the kernel
 * scalar (lower_plan_scalar). */
static void simd(sbuf *b, const char *indent, const char *clauses) {
    if (!b->scalar)
        cstyle_put(b, "%s#pragma omp simd%s\n", indent, clauses);
}

/* The same line (no clauses, six spaces in) as a string, for loop heads
 * kept to be printed several times; "" when the kernel is scalar. */
static const char *simd_line(const sbuf *b) {
    return b->scalar ? "" : "      #pragma omp simd\n";
}

/* Elementwise: a tile of output elements per program instance, its loop
 * vectorised. */
static void render_elementwise(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    const char *ix = counter(b);
    cstyle_put(b, "  const %s N = %s, T = %lldLL, G = %s;\n", ix, cstyle_size(b, k, &k->numel),
               (long long)k->tile, cstyle_size(b, k, &plan->grid));
    parallel_for(b, k, plan);
    cstyle_put(b, "  for (%s t = 0; t < G; t++) {\n", ix);
    if (lower_tiles_whole(k))
        cstyle_put(b, "    const %s lo = t * T, hi = lo + T;\n", ix);
    else
        cstyle_put(b, "    const %s lo = t * T, hi = lo + T < N ? lo + T : N;\n", ix);
    simd(b, "    ", "");
    cstyle_put(b, "    for (%s g = lo; g < hi; g++) {\n", ix);
    for (int i = 0; i < plan->nblocks; i++)
        block_stmts(b, k, &plan->blocks[i]);
    store_stmt(b, k, "      ");
    cstyle_put(b, "    }\n  }\n}\n\n");
}

/* A max/min/arg pass split across threads: each reduces a contiguous chunk
 * of the row, then the chunks combine in order, so the first of equal values
 * (and the first NaN) still wins. */
static void split_ordered_pass(sbuf *b, const lower_kernel *k, const lower_block *blk) {
    const lower_ins *x = &k->ins[blk->reduce];
    kiln_dtype in = k->ins[x->a].dt;
    const char *acc = is_float(in) ? "double" : "int64_t";
    cstyle_put(b, "      enum { KT = 256 };\n");
    cstyle_put(b, "      %s pbest[KT]; int64_t pat[KT];\n", acc);
    cstyle_put(b, "      for (int t = 0; t < KT; t++) pat[t] = -1;\n");
    cstyle_put(b, "      #pragma omp parallel num_threads(nthreads < KT ? nthreads : KT)\n");
    cstyle_put(b, "      {\n");
    cstyle_put(b, "        const int t = omp_get_thread_num(), T = omp_get_num_threads();\n");
    cstyle_put(b, "        const int64_t lo = R * t / T, hi = R * (t + 1) / T;\n");
    reduce_init(b, x, in);
    cstyle_put(b, "        for (int64_t r = lo; r < hi; r++) {\n");
    block_stmts(b, k, blk);
    reduce_step(b, x, in);
    cstyle_put(b, "        }\n");
    cstyle_put(b, "        pbest[t] = best; pat[t] = at;\n");
    cstyle_put(b, "      }\n");
    cstyle_put(b, "      for (int t = 0; t < KT; t++) {\n");
    cstyle_put(b, "        if (pat[t] < 0) continue;\n");
    cstyle_put(b, "        const int64_t r = pat[t];\n");
    cstyle_put(b, "        const %s v%d = (%s)pbest[t];\n", ctype(k->ins[x->a].dt), x->a,
        ctype(k->ins[x->a].dt));
    reduce_step(b, x, in);
    cstyle_put(b, "      }\n");
}

/* A sum pass split across threads, each thread's share of the row read as
 * plan->split_streams streams at once (its share in that many parts, the
 * loop over a part's elements taking one of each part's, each in a scope
 * naming its r), then the share's last elements; the shares add as the
 * OpenMP reduction adds them. */
static void split_sum_streams(sbuf *b, const lower_kernel *k, const lower_plan *plan,
                              const lower_block *blk) {
    const char *ix = counter(b);
    const lower_ins *x = &k->ins[blk->reduce];
    kiln_dtype in = k->ins[x->a].dt;
    int ns = plan->split_streams;
    cstyle_put(b, "      #pragma omp parallel num_threads(nthreads) reduction(+:acc)\n      {\n");
    cstyle_put(b, "        const int t = omp_get_thread_num(), T = omp_get_num_threads();\n");
    cstyle_put(b,
               "        const %s lo = (%s)((int64_t)R * t / T), hi = (%s)((int64_t)R * (t + 1) / T),"
               " q = (hi - lo) / %d;\n",
               ix, ix, ix, ns);
    simd(b, "      ", " reduction(+:acc)");
    cstyle_put(b, "      for (%s i = 0; i < q; i++) {\n", ix);
    for (int u = 0; u < ns; u++) {
        cstyle_put(b, "        { const %s r = lo + %d * q + i;\n", ix, u);
        block_stmts(b, k, blk);
        stash_stmt(b, k, blk);
        reduce_step(b, x, in);
        cstyle_put(b, "        }\n");
    }
    cstyle_put(b, "      }\n      for (%s r = lo + %d * q; r < hi; r++) {\n", ix, ns);
    block_stmts(b, k, blk);
    stash_stmt(b, k, blk);
    reduce_step(b, x, in);
    cstyle_put(b, "      }\n      }\n");
}

/* A max/min pass in SIMD lanes: the value of a max or min does not depend on
 * the order it is taken in, except through NaN, which is tracked on its own
 * (any NaN makes the result NaN, as in graph/) and through the sign of a zero
 * tie (-0 and +0 compare equal; either may come out). The ordered scan with
 * its index, which argmax/argmin need, was a scalar loop in double: the row
 * max was most of a softmax's time.
 *
 * The NaN count is a float summed with +, not an int or-ed with |, because
 * of a gcc 12.2 miscompilation (-O2 and -O3, -march=native with AVX-512VL).
 * With `int nan` and `nan |= v != v`, where v is a select such as a causal
 * mask's `row < col ? -INFINITY : x * scale` (the attention softmax of
 * tests/transformer_test, kernel div_r2x4x16x16: a 16-wide row max, 8 int
 * lanes a vector), gcc sees that the masked lanes or in 0, makes the update
 * conditional and if-converts it into a .MASK_LOAD from the OpenMP simd
 * array that holds the lanes' nan. The vectorizer does not take that masked
 * load for a per-lane access: it steps its address by a vector each
 * iteration (vmovdqa32 -32(%rsp) then (%rsp), {%k} masked), while the array
 * is one vector (32 bytes) long, so the second half of the row ors in
 * whatever lies above it on the stack (the saved frame pointer, the return
 * address) and every row with an unmasked element past the eighth came out
 * NaN. `nan += ...` on an int does the same; on a float it cannot, since
 * adding 0.0 is not an identity (it turns -0.0 into +0.0), so the update
 * stays unconditional, no masked load is made and the loop still vectorises
 * (checked in gcc's -fdump-tree-ifcvt and in the assembly). A float rather
 * than a double: its lanes match the data's, where a double count took two
 * conversions and two adds per vector of floats (a sum of positive counts
 * never returns to 0, however it rounds). -mno-avx512f hid
 * it: the same masked load is made, but the loop is not vectorised at all
 * there. The LLVM path has no such arrays. ops_softmax_rows_test's
 * causal_attention_rows_of_16 is the reproducer, on every executor. */
static void vector_extreme_pass(sbuf *b, const lower_kernel *k, const lower_block *blk) {
    const lower_ins *x = &k->ins[blk->reduce];
    kiln_dtype in = k->ins[x->a].dt;
    bool max = x->gop == GRAPH_RMAX, f = is_float(in);
    const char *ty = f ? ctype(in) : "int64_t";
    const char *init = f ? (max ? "-INFINITY" : "INFINITY") : (max ? "INT64_MIN" : "INT64_MAX");
    cstyle_put(b, "      %s best = %s; float nan = 0;\n", ty, init);
    simd(b, "      ", max ? " reduction(max:best) reduction(+:nan)" : " reduction(min:best) reduction(+:nan)");
    cstyle_put(b, "      for (%s r = 0; r < R; r++) {\n", counter(b));
    block_stmts(b, k, blk);
    if (f)
        cstyle_put(b, "        nan += v%d != v%d;\n", x->a, x->a);
    cstyle_put(b, "        best = (%s)v%d %s best ? (%s)v%d : best;\n", ty, x->a, max ? ">" : "<", ty, x->a);
    cstyle_put(b, "      }\n");
    cstyle_put(b, "      if (R == 0) best = 0;\n");
    if (f)
        cstyle_put(b, "      if (nan != 0) best = NAN;\n");
}

/* The plan's prefetch (plan.c: plan_prefetch) at the top of a chunk of a
 * later pass: lower_prefetch_loads's loads for row g + 1 at the chunk's
 * elements (one a cache line), their index arithmetic printed again inside
 * a scope whose g is the next row. Prints nothing when no load qualifies. */
static void prefetch_next_row(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    bool *need = calloc((size_t)k->nins, sizeof *need);
    int *loads = malloc((size_t)k->nins * sizeof *loads), width;
    if (!need || !loads) {
        free(need), free(loads);
        cstyle_refuse_buf(b, "out of memory");
        return;
    }
    int nl = lower_prefetch_loads(k, plan, need, loads, &width);
    if (nl) {
        const char *ix = counter(b);
        cstyle_put(b, "      if (g + 1 < N) {\n        const %s gn = g + 1;\n        {\n", ix);
        cstyle_put(b, "        const %s g = gn;\n", ix);
        cstyle_put(b, "        for (%s r = c0; r < c1; r += %d) {\n", ix, width);
        for (int id = 0; id < k->nins; id++)
            if (need[id])
                ins_stmt(b, k->ins, id);
        for (int i = 0; i < nl; i++) {
            const lower_ins *x = &k->ins[loads[i]];
            if (x->b >= 0)
                cstyle_put(b, "          __builtin_prefetch(&in%d[v%d ? v%d : 0], 0, 2);\n", x->buf,
                           x->b, x->a);
            else
                cstyle_put(b, "          __builtin_prefetch(&in%d[v%d], 0, 2);\n", x->buf, x->a);
        }
        cstyle_put(b, "        }\n        }\n      }\n");
    }
    free(need), free(loads);
}

/* The start of pass i's loop over the row's elements (its simd clauses,
 * or NULL for none): r over [0, R), spread over the threads where the plan
 * splits rows, or, where the pass runs in chunks (lower_pass_chunk), over
 * chunks [c0, c1), each led by its prefetch where the pass prefetches, and
 * each summed in float into `part` where it sums in float (lower_pass_fsum:
 * `part` then replaces acc in the clauses); pass_end closes it. */
static void pass_begin(sbuf *b, const lower_kernel *k, const lower_plan *plan, int i,
                       const char *clauses) {
    const char *ix = counter(b);
    int64_t chunk = lower_pass_chunk(k, plan, i);
    if (plan->split) {
        cstyle_put(b, "      #pragma omp parallel for simd%s schedule(static) num_threads(nthreads)\n",
                   clauses ? clauses : "");
        cstyle_put(b, "      for (%s r = 0; r < R; r++) {\n", ix);
    } else if (chunk) {
        cstyle_put(b, "      for (%s c0 = 0; c0 < R; c0 += %lldLL) {\n", ix, (long long)chunk);
        bool fsum = lower_pass_fsum(k, plan, i);
        cstyle_put(b, "      %s%s c1 = c0 + %lldLL < R ? c0 + %lldLL : R;\n", fsum ? "" : "const ",
                   ix, (long long)chunk, (long long)chunk);
        if (lower_plan_prefetches(k, plan, i))
            prefetch_next_row(b, k, plan);
        if (fsum) {
            /* the chunk's end hidden: its loop vectorised alike for a literal R
             * and a run-time one, so their float sums add in one order */
            cstyle_put(b, "      __asm__(\"\" : \"+r\"(c1));\n      float part = 0;\n");
            clauses = " reduction(+:part)";
        }
        if (clauses)
            simd(b, "      ", clauses);
        cstyle_put(b, "      for (%s r = c0; r < c1; r++) {\n", ix);
    } else {
        if (clauses)
            simd(b, "      ", clauses);
        cstyle_put(b, "      for (%s r = 0; r < R; r++) {\n", ix);
    }
}

static void pass_end(sbuf *b, const lower_kernel *k, const lower_plan *plan, int i) {
    if (plan->split || !lower_pass_chunk(k, plan, i))
        cstyle_put(b, "      }\n");
    else if (lower_pass_fsum(k, plan, i))
        cstyle_put(b, "      }\n      acc += part;\n      }\n");
    else
        cstyle_put(b, "      }}\n");
}

/* A pass over the reduced elements that finishes one reduction. A sum may
 * run in SIMD lanes (a different order of additions, in double, or in float
 * chunks added in double: lower_plan.fsum; well inside every float
 * tolerance); max/min and the arg reductions keep their order,
 * which decides ties and NaN. */
static void reduce_pass(sbuf *b, const lower_kernel *k, const lower_plan *plan, int bi) {
    const lower_block *blk = &plan->blocks[bi];
    bool split = plan->split;
    const lower_ins *x = &k->ins[blk->reduce];
    kiln_dtype in = k->ins[x->a].dt;
    cstyle_put(b, "    %s v%d;\n    {\n", ctype(x->dt), blk->reduce);
    bool extreme = x->gop == GRAPH_RMAX || x->gop == GRAPH_RMIN;
    if (!extreme || split)
        reduce_init(b, x, in);
    if (x->gop != GRAPH_SUM && split) {
        split_ordered_pass(b, k, blk);
    } else if (split && plan->split_streams > 1) {
        split_sum_streams(b, k, plan, blk);
    } else if (extreme) {
        vector_extreme_pass(b, k, blk);
    } else {
        pass_begin(b, k, plan, bi, x->gop == GRAPH_SUM ? " reduction(+:acc)" : NULL);
        block_stmts(b, k, blk);
        stash_stmt(b, k, blk);
        if (!split && lower_pass_fsum(k, plan, bi))
            cstyle_put(b, "        part += v%d;\n", x->a);
        else
            reduce_step(b, x, in);
        pass_end(b, k, plan, bi);
    }
    reduce_result(b, x, blk->reduce);
    cstyle_put(b, "    }\n");
}

/* Takes value v<a> into a columns kernel's partial result `into`: a sum's
 * add, or an extreme's compare, a NaN sticking once taken. */
static void column_take(sbuf *b, const char *acc, const char *into, int a, bool sum, bool mx,
                        bool f) {
    if (sum)
        cstyle_put(b, "        %s += (%s)v%d;\n", into, acc, a);
    else
        cstyle_put(b,
                   "        { const %s c = %s, w = (%s)v%d;\n"
                   "        %s = %sw %s c%s ? w : c; }\n",
                   acc, into, acc, a, into, f ? "(c == c && (w != w || " : "(", mx ? ">" : "<",
                   f ? "))" : ")");
}

/* A sum, max or min down columns (plan->columns): per chunk of outputs, a
 * row of partial results (in L1) that each input row is taken into, its
 * loop over the chunk vectorised; then the chunk's results. Sums are
 * partial in double (uint64 for integers), extremes in the input's float
 * type (int64 for integers), a NaN sticking once taken. The outer values
 * the pass reads are recomputed per element (index arithmetic, as cheap as
 * keeping them). Each output still takes its elements in order. */
static void render_columns(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    const char *ix = counter(b);
    int red = -1;
    for (int i = 0; i < plan->nblocks; i++)
        if (plan->blocks[i].kind == LOWER_BLOCK_REDUCE)
            red = i;
    const lower_ins *x = &k->ins[plan->blocks[red].reduce];
    kiln_dtype in = k->ins[x->a].dt;
    bool sum = x->gop == GRAPH_SUM, mx = x->gop == GRAPH_RMAX, f = is_float(in);
    const char *acc = sum ? (f ? "double" : "uint64_t") : f ? ctype(in) : "int64_t";
    const char *init = sum ? "0" : f ? (mx ? "-INFINITY" : "INFINITY") : mx ? "INT64_MIN" : "INT64_MAX";
    cstyle_put(b, "  const %s N = %s, R = %s, CW = %lldLL;\n", ix, cstyle_size(b, k, &k->numel),
               cstyle_size(b, k, &k->rnumel), (long long)plan->columns);
    /* Chunks of outputs [g0, g0 + CW), or, walked in rows of D (the plan's
     * rows), of CW / D whole rows [c0, c1): the loops over a chunk's
     * outputs open with `outputs` (g set) and close with `close`. */
    const char *outputs, *close;
    char open_rows[256];
    b->rows = plan->rows;
    if (plan->rows) {
        cstyle_put(b, "  const %s D = %lldLL, NR = N / D, CR = CW / D;\n", ix,
                   (long long)plan->rows);
        parallel_for(b, k, plan);
        cstyle_put(b, "  for (%s c0 = 0; c0 < NR; c0 += CR) {\n", ix);
        cstyle_put(b, "    const %s c1 = c0 + CR < NR ? c0 + CR : NR, g0 = c0 * D, g1 = c1 * D;\n",
                   ix);
        snprintf(open_rows, sizeof open_rows,
                 "for (%s row = c0; row < c1; row++) {\n"
                 "%s"
                 "      for (%s col = 0; col < D; col++) {\n"
                 "      const %s g = row * D + col;\n",
                 ix, simd_line(b), ix, ix);
        outputs = open_rows;
        close = "      }}\n";
    } else {
        parallel_for(b, k, plan);
        cstyle_put(b, "  for (%s g0 = 0; g0 < N; g0 += CW) {\n", ix);
        cstyle_put(b, "    const %s g1 = g0 + CW < N ? g0 + CW : N;\n", ix);
        snprintf(open_rows, sizeof open_rows, "%s      for (%s g = g0; g < g1; g++) {\n",
                 simd_line(b), ix);
        outputs = open_rows;
        close = "      }\n";
    }
    cstyle_put(b, "    %s part[%lld];\n", acc, (long long)plan->columns);
    cstyle_put(b, "    for (%s g = g0; g < g1; g++) part[g - g0] = %s;\n", ix, init);
    /* plan->column_step rows at a time, each in a scope of its own naming
     * its row r, into one load and store of the partial result; then the
     * rows left one at a time */
    int step = plan->column_step > 1 ? plan->column_step : 1;
    cstyle_put(b, "    %s r0 = 0;\n", ix);
    if (step > 1) {
        cstyle_put(b, "    for (; r0 + %d <= R; r0 += %d) {\n      %s", step, step, outputs);
        cstyle_put(b, "        %s pacc = part[g - g0];\n", acc);
        for (int u = 0; u < step; u++) {
            cstyle_put(b, "        { const %s r = r0 + %d;\n", ix, u);
            for (int i = 0; i <= red; i++)
                block_stmts(b, k, &plan->blocks[i]);
            column_take(b, acc, "pacc", x->a, sum, mx, f);
            cstyle_put(b, "        }\n");
        }
        cstyle_put(b, "        part[g - g0] = pacc;\n%s    }\n", close);
    }
    cstyle_put(b, "    for (%s r = r0; r < R; r++) {\n", ix);
    cstyle_put(b, "      %s", outputs);
    for (int i = 0; i <= red; i++)
        block_stmts(b, k, &plan->blocks[i]);
    column_take(b, acc, "part[g - g0]", x->a, sum, mx, f);
    cstyle_put(b, "%s    }\n", close);
    /* vectorised too: what follows the reduction may be most of the work
     * (a max-pool backward's col2im divided by its window's tie count) */
    cstyle_put(b, "    %s", outputs);
    for (int i = 0; i < red; i++)
        block_stmts(b, k, &plan->blocks[i]);
    cstyle_put(b, "      %s v%d;\n      {\n        const %s %s = part[g - g0];\n", ctype(x->dt),
               plan->blocks[red].reduce, acc, sum ? "acc" : "best");
    reduce_result(b, x, plan->blocks[red].reduce);
    cstyle_put(b, "      }\n");
    for (int i = red + 1; i < plan->nblocks; i++)
        block_stmts(b, k, &plan->blocks[i]);
    store_stmt(b, k, "      ");
    cstyle_put(b, "%s  }\n}\n\n", close);
    b->rows = 0;
}

/* Reductions and row kernels: a program instance per output row, walking
 * the plan's blocks: outer values, passes that finish reductions, and in a
 * row kernel a last pass that stores. */
static void render_phased(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    const char *ix = counter(b);
    cstyle_put(b, "  const %s N = %s, R = %s;\n", ix, cstyle_size(b, k, &k->numel),
               cstyle_size(b, k, &k->rnumel));
    parallel_for(b, k, plan);
    cstyle_put(b, "  for (%s g = 0; g < N; g++) {\n", ix);
    bool stored = false;
    for (int i = 0; i < plan->nblocks; i++) {
        const lower_block *blk = &plan->blocks[i];
        switch (blk->kind) {
        case LOWER_BLOCK_OUTER:
            block_stmts(b, k, blk);
            break;
        case LOWER_BLOCK_REDUCE:
            reduce_pass(b, k, plan, i);
            break;
        case LOWER_BLOCK_SCATTER: {
            /* serial, in the source's order: an element may land where the
             * one before it did, and the last assignment wins */
            const lower_scatter_store *st = &k->scatter[blk->reduce];
            char val[32];
            snprintf(val, sizeof val, "v%d", st->value);
            cstyle_put(b, "    for (%s r = 0; r < %s; r++) {\n", ix, cstyle_size(b, k, &k->snumel));
            block_stmts(b, k, blk);
            if (st->valid >= 0)
                cstyle_put(b, "      if (v%d)\n  ", st->valid);
            cstyle_put(b, "      out0[v%d] = ", st->at);
            store_expr(b, k->out->dtype, val);
            cstyle_put(b, ";\n    }\n");
            break;
        }
        case LOWER_BLOCK_STORE:
            pass_begin(b, k, plan, i, "");
            block_stmts(b, k, blk);
            store_stmt(b, k, "      ");
            pass_end(b, k, plan, i);
            stored = true;
            break;
        }
    }
    if (!stored)
        store_stmt(b, k, "    ");
    cstyle_put(b, "  }\n}\n\n");
}

/* 512-bit vectors legal in every function of a kernel under clang
 * (KILN_CC=clang), which otherwise splits the vector types the matmul and
 * attention kernels name into 256-bit halves on AVX-512 hosts where its
 * -march=native prefers 256: the 6 x 4 micro-kernel's 24 accumulators
 * became 48 registers' worth and spilled, and products ran 7x slower than
 * gcc's (256x768 @ w^T 25-28 ms against 3.7; at 0555a44 too). Loops it
 * vectorises by itself keep its own width. */
static void clang_wide_begin(sbuf *b, const lower_plan *plan) {
    if (plan->vector_bytes >= 64)
        cstyle_put(b, "#if defined(__clang__)\n#pragma clang attribute push "
                      "(__attribute__((min_vector_width(512))), apply_to = function)\n#endif\n");
}

static void clang_wide_end(sbuf *b, const lower_plan *plan) {
    if (plan->vector_bytes >= 64)
        cstyle_put(b, "#if defined(__clang__)\n#pragma clang attribute pop\n#endif\n");
}

/* The plan's vector width, said to the compiler around a kernel whose
 * loops it vectorises by itself: gcc 12 under -march=native prefers 256-bit
 * vectors on AVX-512 hosts, and in 512-bit ones fused kernels ran
 * 1.15-1.35x faster (Xeon with two 512-bit FMA units, 2 threads:
 * gelu(a*b+c) over 16M 21.0 -> 15.4 ms, an 11-op chain 25.5 -> 19.1,
 * softmax 4096^2 11.4 -> 9.6, layer-norm 6.9 -> 5.4, a 64M sum 9.1 -> 7.9).
 * Matmuls name their vectors' width themselves. */
static void wide_begin(sbuf *b, const lower_plan *plan) {
    if (plan->vector_bytes >= 64)
        cstyle_put(b, "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC push_options\n"
                      "#pragma GCC target(\"prefer-vector-width=512\")\n#endif\n");
    clang_wide_begin(b, plan);
}

static void wide_end(sbuf *b, const lower_plan *plan) {
    clang_wide_end(b, plan);
    if (plan->vector_bytes >= 64)
        cstyle_put(b, "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC pop_options\n#endif\n");
}

static void render_ir_kernel(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    b->scalar = lower_plan_scalar(k, plan);
    if (!b->scalar)
        wide_begin(b, plan);
    params(b, k);
    b->narrow = plan->narrow;
    if (k->kind == LOWER_ELEMENTWISE)
        render_elementwise(b, k, plan);
    else if (plan->columns)
        render_columns(b, k, plan);
    else
        render_phased(b, k, plan);
    b->narrow = false;
    if (!b->scalar)
        wide_end(b, plan);
    b->scalar = false;
}

/* The register tile of the micro-kernel, from the plan: vector bytes, rows
 * (MR) and vectors per row (NV), of packed B panels `panel` vectors wide
 * (NV, but for the last columns' own micro-kernel). */
typedef struct mm_shape {
    int vbytes, mr, nv, panel;
} mm_shape;

/* The micro-kernels and packing routines are named by what they compute (the
 * element type, the tile's shape; the source's type and the panel width),
 * not by the kernel, and each is guarded (#ifndef NAME_), so that the
 * matmuls of one translation unit share them: gcc -O3 spent about 40 of a
 * matmul kernel's 100 ms on its own copies (the MLP training step's eight
 * products, mostly 6x4 tiles of f32). */
static const char *mm_tag(const char *e) {
    return !strcmp(e, "float") ? "f32" : !strcmp(e, "double") ? "f64" : "u64";
}

static int mm_esize(const char *e) { return strcmp(e, "float") ? 8 : 4; }

/* The vector types of e in vbytes: NAME_v (aligned, the registers and packed
 * panels) and NAME_u (any element: tiles stored into the output). */
static void mm_vector_type(char *out, size_t cap, const char *e, int vbytes) {
    snprintf(out, cap, "kh_mm_%s_%d", mm_tag(e), vbytes);
}

static void mm_vector_types(sbuf *b, const char *e, int vbytes) {
    char vt[64];
    mm_vector_type(vt, sizeof vt, e, vbytes);
    cstyle_put(b, "#ifndef %s_\n#define %s_\n", vt, vt);
    cstyle_put(b, "typedef %s %s_v __attribute__((vector_size(%d), may_alias));\n", e, vt, vbytes);
    cstyle_put(b, "typedef %s %s_u __attribute__((vector_size(%d), may_alias, aligned(%d)));\n", e,
               vt, vbytes, mm_esize(e));
    cstyle_put(b, "#endif\n");
}

static void mm_ukr_name(char *out, size_t cap, const char *e, mm_shape s) {
    if (s.nv == s.panel)
        snprintf(out, cap, "kh_mm_%s_%d_%dx%d_ukr", mm_tag(e), s.vbytes, s.mr, s.nv);
    else
        snprintf(out, cap, "kh_mm_%s_%d_%dx%dof%d_ukr", mm_tag(e), s.vbytes, s.mr, s.nv, s.panel);
}

/* The micro-kernel: an MR x NR tile of C (NR = NV vectors) accumulated in
 * registers over kc steps of A (MR values per step, rows `rs` apart, steps
 * `cs` apart: packed, or the operand itself) and packed B (NR values per
 * step), then stored into, or added to, the thread's C block. ISO
 * C mode turns off contraction of a*b+c, so it is turned back on here alone:
 * the epilogue keeps the rounding of the unfused ops. */
static void mm_micro_kernel(sbuf *b, const char *e, mm_shape s) {
    char name[64], vt[64];
    mm_ukr_name(name, sizeof name, e, s);
    mm_vector_type(vt, sizeof vt, e, s.vbytes);
    int lanes = s.vbytes / mm_esize(e);
    cstyle_put(b, "#ifndef %s_\n#define %s_\n", name, name);
    cstyle_put(b, "#pragma GCC push_options\n#pragma GCC optimize(\"fp-contract=fast\")\n");
    cstyle_put(b,
        "static __attribute__((noinline)) void %s(int64_t kc, const %s *restrict a, "
        "int64_t rs, int64_t cs, const %s *restrict b, %s *restrict c, int64_t ldc, int add) {\n",
        name, e, e, e);
    cstyle_put(b, "#ifdef __clang__\n#pragma clang fp contract(fast)\n#endif\n");
    for (int i = 0; i < s.mr; i++)
        for (int v = 0; v < s.nv; v++)
            cstyle_put(b, "  %s_v c%d_%d = {0};\n", vt, i, v);
    for (int i = 1; i < s.mr; i++)
        cstyle_put(b, "  const int64_t r%d = %d * rs;\n", i, i);
    /* k unrolled by 4: the loop's own increments and branch were a tenth
     * of the tile's instructions. The micro-kernel alone on L1/L2-resident
     * panels (kc 256, one core): 197-201 -> 211-223 GFLOP/s with A read in
     * place; whole products alternating with the loop as it was (ops
     * --quick, load 0.3): 2048^2 50.2-50.5 -> 44.2-47.1 ms, 1024^2 6.4 ->
     * 5.8-6.1, 64x4096 @ 4096^2 8.5 -> 7.7 ms. */
    cstyle_put(b, "  #pragma GCC unroll 4\n");
    cstyle_put(b, "  for (int64_t p = 0; p < kc; p++, a += cs, b += %d) {\n", lanes * s.panel);
    for (int v = 0; v < s.nv; v++)
        cstyle_put(b, "    const %s_v b%d = *(const %s_v *)(b + %d);\n", vt, v, vt, v * lanes);
    for (int i = 0; i < s.mr; i++) {
        if (i == 0)
            cstyle_put(b, "    { const %s a0 = a[0];", e);
        else
            cstyle_put(b, "    { const %s a%d = a[r%d];", e, i, i);
        for (int v = 0; v < s.nv; v++)
            cstyle_put(b, " c%d_%d = a%d * b%d + c%d_%d;", i, v, i, v, i, v);
        cstyle_put(b, " }\n");
    }
    cstyle_put(b, "  }\n");
    cstyle_put(b, "  if (add) {\n");
    for (int i = 0; i < s.mr; i++)
        for (int v = 0; v < s.nv; v++)
            cstyle_put(b, "    *(%s_u *)(c + %d * ldc + %d) += c%d_%d;\n", vt, i, v * lanes,
                i, v);
    cstyle_put(b, "  } else {\n");
    for (int i = 0; i < s.mr; i++)
        for (int v = 0; v < s.nv; v++)
            cstyle_put(b, "    *(%s_u *)(c + %d * ldc + %d) = c%d_%d;\n", vt, i, v * lanes,
                i, v);
    cstyle_put(b, "  }\n}\n#pragma GCC pop_options\n#endif\n");
}

/* A tr x tr block of f32 transposed in vector registers (tr is the plan's
 * lower_mm_plan.pack_tr): rows s + i ss to rows d + j ds; defines KH_TR16
 * or KH_TR8 where the compiler has the vectors (else the pack copies).
 * AVX-512 (16): interleaving pairs of rows, then pairs of pairs (as
 * doubles), leaves lane L of vector 4i + j holding rows 4i .. 4i + 3 at
 * column 4L + j; two rounds of 128-bit lane shuffles gather each column's
 * four lanes. AVX2 (8): the same two interleavings within each 128-bit
 * half, then one exchange of halves. */
static void mm_tr(sbuf *b, int tr) {
    /* In the compiler's vector extensions, not <immintrin.h>: parsing that
     * header was 0.65 s of every translation unit that packed a transposed
     * operand (the MLP training step's cold compile: 2 units, 1.8 s in
     * all). The shuffles' indices are those of the intrinsics they replace:
     * unpacklo/hi_ps, unpacklo/hi_pd (as pairs of floats), permute2f128
     * and shuffle_f32x4; gcc and clang pick the instructions. */
    cstyle_put(b,
        "#if !defined(KH_SHUF)\n"
        "#if defined(__clang__)\n"
        "#define KH_SHUF(m, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)\n"
        "#else\n"
        "#define KH_SHUF(m, a, b, ...) __builtin_shuffle(a, b, (m){__VA_ARGS__})\n"
        "#endif\n"
        "#endif\n");
    if (tr == 16)
        cstyle_put(b,
        "#if defined(__AVX512F__) && !defined(KH_TR16)\n"
        "#define KH_TR16\n"
        "typedef float kh_tr16_v __attribute__((vector_size(64), may_alias, aligned(4)));\n"
        "typedef int32_t kh_tr16_m __attribute__((vector_size(64)));\n"
        "#define KH_LO16 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29\n"
        "#define KH_HI16 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31\n"
        "#define KH_LOD16 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29\n"
        "#define KH_HID16 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31\n"
        "#define KH_EVEN16 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27\n"
        "#define KH_ODD16 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31\n"
        "static inline void kh_tr16(const float *restrict s, int64_t ss, float *restrict d, "
        "int64_t ds) {\n"
        "  kh_tr16_v r[16], t[16];\n"
        "  for (int i = 0; i < 16; i++) r[i] = *(const kh_tr16_v *)(s + i * ss);\n"
        "  for (int i = 0; i < 8; i++) {\n"
        "    t[2 * i] = KH_SHUF(kh_tr16_m, r[2 * i], r[2 * i + 1], KH_LO16);\n"
        "    t[2 * i + 1] = KH_SHUF(kh_tr16_m, r[2 * i], r[2 * i + 1], KH_HI16);\n"
        "  }\n"
        "  for (int i = 0; i < 4; i++) {\n"
        "    const kh_tr16_v a = t[4 * i], b = t[4 * i + 1], c = t[4 * i + 2], e = t[4 * i + 3];\n"
        "    r[4 * i] = KH_SHUF(kh_tr16_m, a, c, KH_LOD16);\n"
        "    r[4 * i + 1] = KH_SHUF(kh_tr16_m, a, c, KH_HID16);\n"
        "    r[4 * i + 2] = KH_SHUF(kh_tr16_m, b, e, KH_LOD16);\n"
        "    r[4 * i + 3] = KH_SHUF(kh_tr16_m, b, e, KH_HID16);\n"
        "  }\n"
        "  for (int j = 0; j < 4; j++) {\n"
        "    const kh_tr16_v s0 = KH_SHUF(kh_tr16_m, r[j], r[4 + j], KH_EVEN16);\n"
        "    const kh_tr16_v s1 = KH_SHUF(kh_tr16_m, r[j], r[4 + j], KH_ODD16);\n"
        "    const kh_tr16_v s2 = KH_SHUF(kh_tr16_m, r[8 + j], r[12 + j], KH_EVEN16);\n"
        "    const kh_tr16_v s3 = KH_SHUF(kh_tr16_m, r[8 + j], r[12 + j], KH_ODD16);\n"
        "    *(kh_tr16_v *)(d + j * ds) = KH_SHUF(kh_tr16_m, s0, s2, KH_EVEN16);\n"
        "    *(kh_tr16_v *)(d + (4 + j) * ds) = KH_SHUF(kh_tr16_m, s1, s3, KH_EVEN16);\n"
        "    *(kh_tr16_v *)(d + (8 + j) * ds) = KH_SHUF(kh_tr16_m, s0, s2, KH_ODD16);\n"
        "    *(kh_tr16_v *)(d + (12 + j) * ds) = KH_SHUF(kh_tr16_m, s1, s3, KH_ODD16);\n"
        "  }\n"
        "}\n"
        "#endif\n");
    else
        cstyle_put(b,
        "#if defined(__AVX2__) && !defined(KH_TR8)\n"
        "#define KH_TR8\n"
        "typedef float kh_tr8_v __attribute__((vector_size(32), may_alias, aligned(4)));\n"
        "typedef int32_t kh_tr8_m __attribute__((vector_size(32)));\n"
        "static inline void kh_tr8(const float *restrict s, int64_t ss, float *restrict d, "
        "int64_t ds) {\n"
        "  kh_tr8_v r[8], t[8];\n"
        "  for (int i = 0; i < 8; i++) r[i] = *(const kh_tr8_v *)(s + i * ss);\n"
        "  for (int i = 0; i < 4; i++) {\n"
        "    t[2 * i] = KH_SHUF(kh_tr8_m, r[2 * i], r[2 * i + 1], 0, 8, 1, 9, 4, 12, 5, 13);\n"
        "    t[2 * i + 1] = KH_SHUF(kh_tr8_m, r[2 * i], r[2 * i + 1], 2, 10, 3, 11, 6, 14, 7, 15);\n"
        "  }\n"
        "  for (int i = 0; i < 2; i++) {\n"
        "    const kh_tr8_v a = t[4 * i], b = t[4 * i + 1], c = t[4 * i + 2], e = t[4 * i + 3];\n"
        "    r[4 * i] = KH_SHUF(kh_tr8_m, a, c, 0, 1, 8, 9, 4, 5, 12, 13);\n"
        "    r[4 * i + 1] = KH_SHUF(kh_tr8_m, a, c, 2, 3, 10, 11, 6, 7, 14, 15);\n"
        "    r[4 * i + 2] = KH_SHUF(kh_tr8_m, b, e, 0, 1, 8, 9, 4, 5, 12, 13);\n"
        "    r[4 * i + 3] = KH_SHUF(kh_tr8_m, b, e, 2, 3, 10, 11, 6, 7, 14, 15);\n"
        "  }\n"
        "  for (int j = 0; j < 4; j++) {\n"
        "    *(kh_tr8_v *)(d + j * ds) = KH_SHUF(kh_tr8_m, r[j], r[4 + j], 0, 1, 2, 3, 8, 9, 10, 11);\n"
        "    *(kh_tr8_v *)(d + (4 + j) * ds) = KH_SHUF(kh_tr8_m, r[j], r[4 + j], 4, 5, 6, 7, 12, 13, "
        "14, 15);\n"
        "  }\n"
        "}\n"
        "#endif\n");
}

/* mm_pack's partial panel at r0 (rows past mc zeros), into dst. */
static void mm_pack_partial(sbuf *b, const char *e, int unit, kiln_dtype dt, const char *idx) {
    cstyle_put(b, "      for (int64_t p = 0; p < kc; p++)\n");
    cstyle_put(b, "        for (int64_t r = 0; r < %d; r++)\n", unit);
    cstyle_put(b, "          dst[p * %d + r] = r0 + r < mc ? (%s)", unit, e);
    load_expr(b, dt, 0, idx);
    cstyle_put(b, " : (%s)0;\n", e);
}

/* Packs rows [i0, i0 + mc) and k [p0, p0 + kc) of an operand into panels of
 * `unit` rows, step-major (unit values per k step), converted to the packed
 * type; rows past mc are zeros. A is packed by its rows, B by its columns,
 * so B's row stride is its k stride here. The strides are arguments (rs,
 * ks), shared by the kernels that call it, except a stride of literal 1
 * (rs_one, ks_one), which is the routine's own, so that its loop over the
 * contiguous axis is a plain vector loop; their values choose the loop
 * order. */
static void mm_pack(sbuf *b, char *name, size_t cap, const char *e, int unit, kiln_dtype dt,
                    int64_t row_stride, int64_t k_stride, bool rs_one, bool ks_one, int tr) {
    /* Reads run along the operand's contiguous axis; where that is k, in
     * steps of 16 so that the panel rows being written stay in L1. */
    bool by_k = k_stride == 1 && row_stride != 1;
    /* tr (the plan's pack_tr, 0 for A): f32 read along k into panels of
     * whole tr x tr blocks, transposed in registers tr source rows at a
     * time (mm_tr); element copies where the compiler lacks the vectors */
    if (tr)
        mm_tr(b, tr);
    snprintf(name, cap, "kh_mm_pack_%s_d%d_%d%s%s%s", mm_tag(e), (int)dt, unit, by_k ? "_k" : "",
             ks_one ? "_k1" : rs_one ? "_r1" : "", tr == 16 ? "_t16" : tr == 8 ? "_t8" : "");
    cstyle_put(b, "#ifndef %s_\n#define %s_\n", name, name);
    cstyle_put(b,
        "static void %s(%s *restrict dst, const %s *restrict src, int64_t o, "
        "int64_t mc, int64_t kc, int64_t rs, int64_t ks) {\n",
        name, e, stype(dt));
    cstyle_put(b, "  const %s *restrict in0 = src;\n", stype(dt));
    if (ks_one || rs_one)
        cstyle_put(b, "  (void)%s;\n", ks_one ? "ks" : "rs");
    const char *idx = ks_one ? "o + (r0 + r) * rs + p"
                    : rs_one ? "o + (r0 + r) + p * ks" : "o + (r0 + r) * rs + p * ks";
    /* Read along the rows (B by its columns, rows of the panels contiguous
     * in the source): every whole panel's next PACK_STEPS steps in turn, so
     * that the source is read as that many rows at a time along their
     * length, and each panel takes those steps' values in a row; then the
     * last, partial panel. A panel at a time read a line from each of kc
     * rows of B, its next panel's lines in those rows long evicted (rows 16
     * KiB apart share their L1 and L2 sets): 64 x 4096 @ 4096^2 on the Zen 3
     * EPYC, the pack 39% of the product; the product 30.5-31.7 -> 21.1-21.8
     * ms at 8 steps (by hand, alternating; 4 and 16 22.3-23.5). */
    enum { PACK_STEPS = 8 };
    if (!by_k && !tr) {
        cstyle_put(b, "  const int64_t whole = mc - mc %% %d;\n", unit);
        cstyle_put(b, "  for (int64_t q = 0; q < kc; q += %d)\n", PACK_STEPS);
        cstyle_put(b, "    for (int64_t r0 = 0; r0 < whole; r0 += %d)\n", unit);
        cstyle_put(b, "      for (int64_t p = q; p < (q + %d < kc ? q + %d : kc); p++)\n",
                   PACK_STEPS, PACK_STEPS);
        cstyle_put(b, "        for (int64_t r = 0; r < %d; r++)\n", unit);
        cstyle_put(b, "          dst[r0 * kc + p * %d + r] = (%s)", unit, e);
        load_expr(b, dt, 0, idx);
        cstyle_put(b, ";\n  dst += whole * kc;\n  if (whole < mc) {\n    const int64_t r0 = whole;\n");
        mm_pack_partial(b, e, unit, dt, idx);
        cstyle_put(b, "  }\n}\n#endif\n");
        return;
    }
    cstyle_put(b, "  for (int64_t r0 = 0; r0 < mc; r0 += %d, dst += %d * kc) {\n", unit, unit);
    cstyle_put(b, "    if (r0 + %d <= mc) {\n", unit);
    if (tr) {
        cstyle_put(b, "#ifdef KH_TR%d\n", tr);
        cstyle_put(b, "      const int64_t q0 = kc - kc %% %d;\n", tr);
        cstyle_put(b, "      for (int64_t r = 0; r < %d; r += %d)\n", unit, tr);
        cstyle_put(b, "        for (int64_t q = 0; q < q0; q += %d)\n", tr);
        cstyle_put(b, "          kh_tr%d(in0 + o + (r0 + r) * rs + q, rs, dst + q * %d + r, %d);\n",
                   tr, unit, unit);
        cstyle_put(b, "      for (int64_t r = 0; r < %d; r++)\n", unit);
        cstyle_put(b, "        for (int64_t p = q0; p < kc; p++)\n");
        cstyle_put(b, "          dst[p * %d + r] = in0[o + (r0 + r) * rs + p];\n", unit);
        cstyle_put(b, "#else\n");
    }
    if (by_k) {
        cstyle_put(b, "      for (int64_t q = 0; q < kc; q += 16)\n");
        cstyle_put(b, "      for (int64_t r = 0; r < %d; r++)\n", unit);
        cstyle_put(b, "        for (int64_t p = q; p < (q + 16 < kc ? q + 16 : kc); p++)\n");
    } else {
        cstyle_put(b, "      for (int64_t p = 0; p < kc; p++)\n");
        cstyle_put(b, "        for (int64_t r = 0; r < %d; r++)\n", unit);
    }
    cstyle_put(b, "          dst[p * %d + r] = (%s)", unit, e);
    load_expr(b, dt, 0, idx);
    cstyle_put(b, ";\n");
    if (tr)
        cstyle_put(b, "#endif\n");
    cstyle_put(b, "    } else {\n");
    mm_pack_partial(b, e, unit, dt, idx);
    cstyle_put(b, "    }\n  }\n}\n#endif\n");
}


/* A split operand's layout as one array the kernel passes to its packing:
 * size, stride and step of each column axis, then of each row axis (an
 * axis that is plain is one axis of size M or K and its stride), then the
 * bounds and origin of each masked axis. Literals or run-time sizes; at
 * the one call the compiler propagates them. */
static void split_layout_decl(sbuf *b, const lower_kernel *k, const lower_operand *o,
                              const char *name) {
    cstyle_put(b, "  const int64_t %s[] = {", name);
    if (o->ncdims)
        for (int d = 0; d < o->ncdims; d++)
            cstyle_put(b, "%s, %s, %s, ", cstyle_size(b, k, &o->csize[d]),
                       cstyle_size(b, k, &o->cstride[d]), cstyle_size(b, k, &o->cstep[d]));
    else
        cstyle_put(b, "%s, %s, 0, ", cstyle_size(b, k, &k->m), cstyle_size(b, k, &o->col_stride));
    if (o->nrdims)
        for (int d = 0; d < o->nrdims; d++)
            cstyle_put(b, "%s, %s, %s, ", cstyle_size(b, k, &o->rsize[d]),
                       cstyle_size(b, k, &o->rstride[d]), cstyle_size(b, k, &o->rstep[d]));
    else
        cstyle_put(b, "%s, %s, 0, ", cstyle_size(b, k, &k->k), cstyle_size(b, k, &o->row_stride));
    for (int m = 0; m < o->nmasks; m++)
        cstyle_put(b, "%s, %s, %s, ", cstyle_size(b, k, &o->mlo[m]), cstyle_size(b, k, &o->mhi[m]),
                   cstyle_size(b, k, &o->morigin[m]));
    cstyle_put(b, "};\n");
}

/* Statements adding index v's offset over split axes [first, first + n)
 * of layout L to `off`, and for each axis along a masked axis its
 * coordinate there to cM (mask: the operand's rmask or cmask from first);
 * v is consumed. */
static void split_offset(sbuf *b, const char *indent, const char *v, const char *off, int first,
                         int n, const int8_t *mask, const char *cm, const char *cm_at) {
    for (int d = first + n - 1; d >= first; d--) {
        cstyle_put(b, "%s{ const int64_t q = %s %% L[%d]; %s += q * L[%d];", indent, v, 3 * d, off,
                   3 * d + 1);
        if (mask && mask[d - first] >= 0)
            cstyle_put(b, " %s%d%s += q * L[%d];", cm, mask[d - first], cm_at, 3 * d + 2);
        if (d > first)
            cstyle_put(b, " %s /= L[%d];", v, 3 * d);
        cstyle_put(b, " }\n");
    }
}

/* The condition that every masked coordinate lies within its bounds: mask m
 * at row coordinate rmM plus column coordinate cmM<at>. */
static void split_valid(sbuf *b, const lower_operand *o, int base, const char *at) {
    for (int m = 0; m < o->nmasks; m++)
        cstyle_put(b, "%s(uint64_t)(rm%d + cm%d%s - L[%d]) < (uint64_t)(L[%d] - L[%d])",
                   m ? " && " : "", m, m, at, base + 3 * m, base + 3 * m + 1, base + 3 * m);
}

/* Statements narrowing segment g's range [lo, hi) of a split B's panel
 * (from s0, the segment's first column) to where every mask holds, given
 * each masked axis' row coordinate rmM. */
static void split_range(sbuf *b, const char *ind, const lower_operand *o, int mb) {
    /* the valid range of each masked coordinate; a division per k step cost
     * as much as the product on 3x3 convolutions, whose columns step by 1 */
    for (int m = 0; m < o->nmasks; m++) {
        int at = mb + 3 * m;
        cstyle_put(b, "%s{\n%s  const int64_t a = rm%d + cm%d[s0], s = ms%d[g], l = L[%d], h = L[%d];\n",
                   ind, ind, m, m, m, at, at + 1);
        cstyle_put(b, "%s  if (s == 0) {\n%s    if (a < l || a >= h) hi = lo;\n%s  } else {\n", ind,
                   ind, ind);
        cstyle_put(b, "%s    const int64_t rl = a >= l ? 0 : s == 1 ? l - a : (l - a + s - 1) / s;\n", ind);
        cstyle_put(b, "%s    const int64_t rh = a >= h ? 0 : s == 1 ? h - a : (h - a + s - 1) / s;\n", ind);
        cstyle_put(b, "%s    if (s0 + rl > lo) lo = s0 + rl;\n%s    if (s0 + rh < hi) hi = s0 + rh;\n",
                   ind, ind);
        cstyle_put(b, "%s  }\n%s}\n", ind, ind);
    }
    cstyle_put(b, "%sif (hi < lo) hi = lo;\n", ind);
}

/* Packs a split B (lower.h's lower_operand): columns [j0, j0 + mc) and k
 * [p0, p0 + kc) into panels of `unit` columns, step-major, as mm_pack does.
 * A panel's columns are cut once into segments whose offsets are
 * consecutive and whose masked coordinates move by a constant step (a
 * convolution's output row, or the part of one a panel holds); each k step
 * then copies each segment as a vector, within the range its masks allow,
 * and writes zeros around it (an element in a pad is never loaded). The k
 * rows' offsets follow an odometer over their axes. Panels of 64 columns
 * over output rows of 32 read element by element took 2.2x the time of the
 * product they fed. */
static void mm_pack_split(sbuf *b, const lower_kernel *k, const char *name, const char *e,
                          const char *unit, int units, kiln_dtype dt, int buf,
                          const lower_operand *o) {
    int nc = o->ncdims ? o->ncdims : 1, nr = o->nrdims ? o->nrdims : 1, mb = 3 * (nc + nr);
    const int8_t *cmask = o->ncdims ? o->cmask : NULL, *rmask = o->nrdims ? o->rmask : NULL;
    /* Each segment's valid range worked out once a panel for each phase of
     * the masked row axes (lower_split_row_period: 9 for a 3x3 kernel)
     * instead of once a k step, the table on the stack (at most 16 KB).
     * Measured on the 3x3 layer 8x64x32x32 with 64 filters: the kernel
     * 2.40-2.46 -> 2.24-2.34 ms, its packing about 0.8 of them. */
    int first;
    int64_t period = lower_split_row_period(k, o, &first);
    bool phased = period > 0 && period * units <= 4096;
    /* one element's offset and validity, for the fallback's dot products */
    cstyle_put(b,
        "static inline int64_t %s_b_at(int64_t p, int64_t j, const int64_t *restrict L, "
        "int *ok) {\n  int64_t off = 0;\n", name);
    for (int m = 0; m < o->nmasks; m++)
        cstyle_put(b, "  int64_t rm%d = L[%d], cm%d = 0;\n", m, mb + 3 * m + 2, m);
    split_offset(b, "  ", "j", "off", 0, nc, cmask, "cm", "");
    split_offset(b, "  ", "p", "off", nc, nr, rmask, "rm", "");
    cstyle_put(b, "  *ok = 1");
    if (o->nmasks) {
        cstyle_put(b, " && ");
        split_valid(b, o, mb, "");
    }
    cstyle_put(b, ";\n  return off;\n}\n");
    cstyle_put(b,
        "static void %s_pack_b(%s *restrict dst, const %s *restrict src, int64_t o, int64_t j0, "
        "int64_t mc, int64_t p0, int64_t kc, const int64_t *restrict L) {\n",
        name, e, stype(dt));
    cstyle_put(b, "  const %s *restrict in%d = src;\n", stype(dt), buf);
    cstyle_put(b, "  for (int64_t r0 = 0; r0 < mc; r0 += %s, dst += %s * kc) {\n", unit, unit);
    cstyle_put(b, "    const int64_t nr = mc - r0 < %s ? mc - r0 : %s;\n", unit, unit);
    cstyle_put(b, "    int64_t coff[%s], sst[%s + 1];\n    int64_t ns = 0;\n", unit, unit);
    for (int m = 0; m < o->nmasks; m++)
        cstyle_put(b, "    int64_t cm%d[%s], ms%d[%s];\n", m, unit, m, unit);
    cstyle_put(b, "    for (int64_t r = 0; r < nr; r++) {\n");
    cstyle_put(b, "      int64_t j = j0 + r0 + r, off = 0;\n");
    for (int m = 0; m < o->nmasks; m++)
        cstyle_put(b, "      cm%d[r] = 0;\n", m);
    split_offset(b, "      ", "j", "off", 0, nc, cmask, "cm", "[r]");
    cstyle_put(b, "      coff[r] = off;\n");
    cstyle_put(b, "      const int64_t len = ns ? r - sst[ns - 1] : 0;\n");
    cstyle_put(b, "      int cont = ns > 0 && off == coff[r - 1] + 1;\n");
    for (int m = 0; m < o->nmasks; m++)
        cstyle_put(b, "      cont = cont && (len == 1 ? cm%d[r] >= cm%d[r - 1] : "
                      "cm%d[r] - cm%d[r - 1] == ms%d[ns - 1]);\n", m, m, m, m, m);
    cstyle_put(b, "      if (!cont) {\n        sst[ns++] = r;\n");
    for (int m = 0; m < o->nmasks; m++)
        cstyle_put(b, "        ms%d[ns - 1] = 0;\n", m);
    cstyle_put(b, "      }");
    if (o->nmasks) {
        cstyle_put(b, " else if (len == 1) {\n");
        for (int m = 0; m < o->nmasks; m++)
            cstyle_put(b, "        ms%d[ns - 1] = cm%d[r] - cm%d[r - 1];\n", m, m, m);
        cstyle_put(b, "      }");
    }
    cstyle_put(b, "\n    }\n    sst[ns] = nr;\n");
    cstyle_put(b, "    int64_t c[%d], q = p0;\n", nr);
    for (int d = nr - 1; d >= 0; d--)
        cstyle_put(b, "    c[%d] = q %% L[%d]; q /= L[%d];\n", d, 3 * (nc + d), 3 * (nc + d));
    if (phased) {
        /* each phase's coordinates of the masked row axes, as an odometer
         * over them (innermost last) */
        cstyle_put(b, "    int16_t seg_lo[%lld][%s], seg_hi[%lld][%s];\n", (long long)period, unit,
                   (long long)period, unit);
        cstyle_put(b, "    for (int64_t t = 0; t < %lld; t++) {\n      int64_t u = t;\n",
                   (long long)period);
        for (int d = nr - 1; d >= first; d--)
            cstyle_put(b, "      const int64_t t%d = u %% L[%d]; u /= L[%d];\n", d, 3 * (nc + d),
                       3 * (nc + d));
        cstyle_put(b, "      (void)u;\n");
        for (int m = 0; m < o->nmasks; m++) {
            cstyle_put(b, "      const int64_t rm%d = L[%d]", m, mb + 3 * m + 2);
            for (int d = first; d < nr; d++)
                if (rmask[d] == m)
                    cstyle_put(b, " + t%d * L[%d]", d, 3 * (nc + d) + 2);
            cstyle_put(b, ";\n");
        }
        cstyle_put(b, "      for (int64_t g = 0; g < ns; g++) {\n");
        cstyle_put(b, "        const int64_t s0 = sst[g];\n        int64_t lo = s0, hi = sst[g + 1];\n");
        split_range(b, "        ", o, mb);
        cstyle_put(b, "        seg_lo[t][g] = (int16_t)lo;\n        seg_hi[t][g] = (int16_t)hi;\n");
        cstyle_put(b, "      }\n    }\n    int64_t ph = p0 %% %lld;\n", (long long)period);
    }
    cstyle_put(b, "    for (int64_t p = 0; p < kc; p++) {\n");
    cstyle_put(b, "      %s *restrict d = dst + p * %s;\n", e, unit);
    cstyle_put(b, "      const int64_t ko = o");
    for (int d = 0; d < nr; d++)
        cstyle_put(b, " + c[%d] * L[%d]", d, 3 * (nc + d) + 1);
    cstyle_put(b, ";\n");
    for (int m = 0; m < o->nmasks && !phased; m++) {
        cstyle_put(b, "      const int64_t rm%d = L[%d]", m, mb + 3 * m + 2);
        for (int d = 0; d < nr; d++)
            if (rmask && rmask[d] == m)
                cstyle_put(b, " + c[%d] * L[%d]", d, 3 * (nc + d) + 2);
        cstyle_put(b, ";\n");
    }
    cstyle_put(b, "      for (int64_t r = nr; r < %s; r++) d[r] = (%s)0;\n", unit, e);
    cstyle_put(b, "      for (int64_t g = 0; g < ns; g++) {\n");
    cstyle_put(b, "        const int64_t s0 = sst[g], s1 = sst[g + 1], base = ko + coff[s0] - s0;\n");
    if (phased) {
        cstyle_put(b, "        const int64_t lo = seg_lo[ph][g], hi = seg_hi[ph][g];\n");
    } else {
        cstyle_put(b, "        int64_t lo = s0, hi = s1;\n");
        if (o->nmasks)
            split_range(b, "        ", o, mb);
    }
    if (o->nmasks)
        cstyle_put(b, "        for (int64_t r = s0; r < lo; r++) d[r] = (%s)0;\n", e);
    cstyle_put(b, "        for (int64_t r = lo; r < hi; r++) d[r] = (%s)", e);
    load_expr(b, dt, buf, "base + r");
    cstyle_put(b, ";\n");
    if (o->nmasks)
        cstyle_put(b, "        for (int64_t r = hi; r < s1; r++) d[r] = (%s)0;\n", e);
    cstyle_put(b, "      }\n");
    /* the odometer: the innermost axis steps, carrying outwards */
    if (phased)
        cstyle_put(b, "      if (++ph == %lld) ph = 0;\n", (long long)period);
    cstyle_put(b, "      ");
    for (int d = nr - 1; d >= 0; d--)
        cstyle_put(b, "if (++c[%d] == L[%d]) { c[%d] = 0; ", d, 3 * (nc + d), d);
    for (int d = 0; d < nr; d++)
        cstyle_put(b, "}");
    cstyle_put(b, "\n    }\n  }\n}\n");
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
    mm_shape s = {mm->lanes * esz, mm->mr, mm->nv, mm->nv};
    int64_t lanes = mm->lanes, nr = lanes * mm->nv;
    const char *name = lower_kernel_symbol(k);
    cstyle_put(b, "#include <stdlib.h>\n");
    /* C's tiles may lie in the output itself, at any element (NAME_u) */
    mm_vector_types(b, e, s.vbytes);
    cstyle_put(b, "enum { %s_MR = %d, %s_L = %lld, %s_NR = %lld };\n", name, s.mr, name,
        (long long)lanes, name, (long long)nr);
    /* the partial tiles' own micro-kernels (lower_mm_edges): r for the
     * last rows, c for the last columns, rc for the corner */
    int erows, evecs;
    lower_mm_edges(k, plan, &erows, &evecs);
    const mm_shape tile_r = {s.vbytes, erows, s.nv, s.nv}, tile_c = {s.vbytes, s.mr, evecs, s.nv},
                   tile_rc = {s.vbytes, erows, evecs, s.nv};
    char ukr[64], ukr_r[64], ukr_c[64], ukr_rc[64];
    mm_ukr_name(ukr, sizeof ukr, e, s);
    mm_ukr_name(ukr_r, sizeof ukr_r, e, tile_r);
    mm_ukr_name(ukr_c, sizeof ukr_c, e, tile_c);
    mm_ukr_name(ukr_rc, sizeof ukr_rc, e, tile_rc);
    mm_micro_kernel(b, e, s);
    /* whole tiles go straight into the output (lower_mm_stores_direct)
     * where the tile row at ir holds real rows only: a whole tile, or the
     * last rows' own micro-kernel's */
    bool to_out = lower_mm_stores_direct(k, plan);
    if (to_out)
        cstyle_put(b, "static inline int %s_whole(int64_t mc, int64_t ir) { return mc - ir >= %s_MR || "
                      "mc - ir == %d; }\n", name, name, erows ? erows : -1);
    if (erows)
        mm_micro_kernel(b, e, tile_r);
    if (evecs)
        mm_micro_kernel(b, e, tile_c);
    if (erows && evecs)
        mm_micro_kernel(b, e, tile_rc);
    char pack_a[96], pack_b[96];
    mm_pack(b, pack_a, sizeof pack_a, e, s.mr, at, k->a.row_stride, k->a.col_stride,
            lower_size_index(k, &k->a.row_stride) < 0 && k->a.row_stride == 1,
            lower_size_index(k, &k->a.col_stride) < 0 && k->a.col_stride == 1, 0);
    bool split = lower_operand_split(&k->b);
    if (split) {
        char unit[128];
        snprintf(unit, sizeof unit, "%s_NR", name);
        snprintf(pack_b, sizeof pack_b, "%s_pack_b", name);
        mm_pack_split(b, k, name, e, unit, (int)nr, bt, k->b.buf, &k->b);
    } else {
        mm_pack(b, pack_b, sizeof pack_b, e, (int)nr, bt, k->b.col_stride, k->b.row_stride,
                lower_size_index(k, &k->b.col_stride) < 0 && k->b.col_stride == 1,
                lower_size_index(k, &k->b.row_stride) < 0 && k->b.row_stride == 1, mm->pack_tr);
    }
    /* Sizes, blocks and strides are variables of the kernel (literals, or
     * run-time sizes when the program is shared by several sizes). */
    /* The epilogue: a run of n output elements from their finished dot
     * products, as one vectorised loop (in int32 index arithmetic where the
     * ranges allow: a bias's broadcast index is a division per element). */
    cstyle_put(b, "static inline void %s_epi(char **bufs, int64_t g0, const %s *dots, int64_t n) {\n",
        name, e);
    buffer_ptrs(b, k);
    if (plan->narrow)
        cstyle_put(b, "  const int32_t g0n = (int32_t)g0, nn = (int32_t)n;\n");
    cstyle_put(b, "  #pragma omp simd\n");
    if (plan->narrow) {
        /* An int32 element counted from an int32 start, so that a load at
         * (int32_t)g stays linear in j, a vector load: narrowed from an
         * int64 g per element it was a gather (a residual's add took as
         * long as the product of the tied head's gradient). */
        cstyle_put(b, "  for (int32_t j = 0; j < nn; j++) {\n");
        cstyle_put(b, "    const int32_t g = g0n + j;\n");
    } else {
        cstyle_put(b, "  for (int64_t j = 0; j < n; j++) {\n");
        cstyle_put(b, "    const int64_t g = g0 + j;\n");
    }
    cstyle_put(b, "    const %s dot = dots[j];\n", e);
    b->narrow = plan->narrow;
    for (int i = 0; i < plan->nblocks; i++)
        block_stmts(b, k, &plan->blocks[i]);
    b->narrow = false;
    store_stmt(b, k, "    ");
    cstyle_put(b, "  }\n}\n");
    params(b, k);
    cstyle_put(b, "  const int64_t NB = %s, N = %s, K = %s, M = %s;\n",
        cstyle_size_product(b, k, k->nbatch, k->batch), cstyle_size(b, k, &k->n),
        cstyle_size(b, k, &k->k), cstyle_size(b, k, &k->m));
    cstyle_put(b, "  const int64_t MC = %s, NC = %s, KC = %s, MR = %s_MR, NR = %s_NR;\n",
        cstyle_size(b, k, &plan->mm.mc), cstyle_size(b, k, &plan->mm.nc),
        cstyle_size(b, k, &plan->mm.kc), name, name);
    cstyle_put(b, "  const int64_t RSA = %s, CSA = %s, RSB = %s, CSB = %s;\n",
        cstyle_size(b, k, &k->a.row_stride), cstyle_size(b, k, &k->a.col_stride),
        cstyle_size(b, k, &k->b.row_stride), cstyle_size(b, k, &k->b.col_stride));
    if (split) {
        split_layout_decl(b, k, &k->b, "LB");
        cstyle_put(b, "  (void)RSB;\n  (void)CSB;\n");
    }
    cstyle_put(b, "  const int64_t NBM = (N + MC - 1) / MC, NBN = (M + NC - 1) / NC;\n");
    cstyle_put(b, "  const size_t MCP = (MC + MR - 1) / MR * MR;\n");
    cstyle_put(b, "  const size_t csz = MCP * NC, bsz = KC * NC, asz = MCP * KC;\n");
    cstyle_put(b, "  const size_t bytes = ((csz + bsz + asz) * sizeof(%s) + 63) / 64 * 64;\n", e);
    cstyle_put(b, "  const int64_t T = NB * NBM * NBN;\n");
    cstyle_put(b, "  #pragma omp parallel num_threads(nthreads < T ? nthreads : (int)T) if(%s)\n  {\n",
        cstyle_size(b, k, &plan->parallel));
    cstyle_put(b, "  %s *const cb = K > 0 ? aligned_alloc(64, bytes) : NULL;\n", e);
    cstyle_put(b, "  %s *const bp = cb ? cb + csz : NULL, *const ap = cb ? cb + csz + bsz : NULL;\n", e);
    /* Where one step of k covers K, row blocks vary fastest, so that a
     * thread's consecutive tasks share their B panel, packed once (`packed`:
     * the panel in bp) rather than per task: 1.1-1.17x on 256 to 384 cubes,
     * 1.05-1.09x at 512. Otherwise columns vary fastest, as before: a row
     * block of A is read by the next tasks. */
    cstyle_put(b, "  int64_t packed = -1;\n");
    cstyle_put(b, "  const int reuse = K <= KC;\n");
    cstyle_put(b, "  #pragma omp for schedule(dynamic, 1)\n");
    cstyle_put(b, "  for (int64_t t = 0; t < T; t++) {\n");
    cstyle_put(b, "      const int64_t bt = t / (NBM * NBN), jb = reuse ? t / NBM %% NBN : t %% NBN,\n"
           "                    ib = reuse ? t %% NBM : t / NBN %% NBM;\n");
    cstyle_put(b, "      const int64_t i0 = ib * MC, j0 = jb * NC;\n");
    cstyle_put(b, "      const int64_t mc = N - i0 < MC ? N - i0 : MC, nc = M - j0 < NC ? M - j0 : NC;\n");
    cstyle_operand_offset(b, &c_target, "      ", "oa", k, &k->a);
    cstyle_operand_offset(b, &c_target, "      ", "ob", k, &k->b);
    cstyle_put(b, "      const int64_t full = %s;\n", direct ? "mc / MR * MR" : "0");
    cstyle_put(b, "      if (cb)\n");
    cstyle_put(b, "        for (int64_t p0 = 0; p0 < K; p0 += KC) {\n");
    cstyle_put(b, "          const int64_t kc = K - p0 < KC ? K - p0 : KC;\n");
    cstyle_put(b, "          if (!reuse || packed != bt * NBN + jb) {\n");
    if (split)
        cstyle_put(b, "            %s(bp, in%d, ob, j0, nc, p0, kc, LB);\n", pack_b, k->b.buf);
    else
        cstyle_put(b, "            %s(bp, in%d, ob + j0 * CSB + p0 * RSB, nc, kc, CSB, RSB);\n",
            pack_b, k->b.buf);
    cstyle_put(b, "            packed = bt * NBN + jb;\n          }\n");
    cstyle_put(b, "          if (full < mc)\n");
    cstyle_put(b, "            %s(ap + full * kc, in%d, oa + (i0 + full) * RSA + p0 * CSA, "
           "mc - full, kc, RSA, CSA);\n", pack_a, k->a.buf);
    cstyle_put(b, "          for (int64_t ir = 0; ir < mc; ir += MR)\n");
    cstyle_put(b, "            for (int64_t jr = 0; jr < nc; jr += NR) {\n");
    /* a partial tile (only ever past `full`, the rows A is read in place
     * for) takes its own size's micro-kernel where there is one */
    char u[160];
    snprintf(u, sizeof u, "%s", ukr);
    if (erows || evecs) {
        cstyle_put(b, "              void (*const u)(int64_t, const %s *restrict, int64_t, int64_t, "
                      "const %s *restrict, %s *restrict, int64_t, int) = ", e, e, e);
        if (erows && evecs)
            cstyle_put(b, "mc - ir <= %d ? (nc - jr <= %lld ? %s : %s) : "
                          "nc - jr <= %lld ? %s : %s;\n", erows,
                       (long long)evecs * lanes, ukr_rc, ukr_r, (long long)evecs * lanes, ukr_c, ukr);
        else if (erows)
            cstyle_put(b, "mc - ir <= %d ? %s : %s;\n", erows, ukr_r, ukr);
        else
            cstyle_put(b, "nc - jr <= %lld ? %s : %s;\n", (long long)evecs * lanes, ukr_c, ukr);
        snprintf(u, sizeof u, "u");
    }
    if (to_out) {
        cstyle_put(b, "              const int dst = nc - jr >= NR && %s_whole(mc, ir);\n", name);
        cstyle_put(b, "              %s *const cp = dst ? out0 + (bt * N + i0 + ir) * M + j0 + jr : "
                      "cb + ir * NC + jr;\n", e);
        cstyle_put(b, "              const int64_t ldc = dst ? M : NC;\n");
    } else {
        cstyle_put(b, "              %s *const cp = cb + ir * NC + jr;\n", e);
        cstyle_put(b, "              const int64_t ldc = NC;\n");
    }
    if (direct)
        cstyle_put(b, "              if (ir < full) %s(kc, in%d + oa + (i0 + ir) * RSA + p0 * CSA, "
               "RSA, CSA, bp + jr * kc, cp, ldc, p0 > 0); else\n", u, k->a.buf);
    cstyle_put(b, "              %s(kc, ap + ir * kc, 1, MR, bp + jr * kc, cp, ldc, p0 > 0);\n", u);
    cstyle_put(b, "            }\n");
    cstyle_put(b, "        }\n");
    cstyle_put(b, "      if (cb)\n");
    cstyle_put(b, "        for (int64_t i = 0; i < mc; i++) {\n");
    cstyle_put(b, "          const int64_t g0 = bt * N * M + (i0 + i) * M + j0;\n");
    if (to_out) {
        /* what the output holds already: the whole panels of rows that
         * whole tiles or the last rows' own kernel wrote */
        cstyle_put(b, "          const int64_t ir = i / MR * MR;\n");
        cstyle_put(b, "          const int64_t f = %s_whole(mc, ir) ? nc / NR * NR : 0;\n", name);
        cstyle_put(b, "          %s_epi(bufs, g0 + f, cb + i * NC + f, nc - f);\n", name);
    } else {
        cstyle_put(b, "          %s_epi(bufs, g0, cb + i * NC, nc);\n", name);
    }
    cstyle_put(b, "        }\n");
    cstyle_put(b, "      else\n");
    cstyle_put(b, "        for (int64_t i = 0; i < mc; i++)\n");
    cstyle_put(b, "          for (int64_t j = 0; j < nc; j++) {\n");
    cstyle_put(b, "            %s dot = 0;\n", e);
    cstyle_put(b, "            for (int64_t p = 0; p < K; p++) {\n");
    if (split) {
        /* an element in a pad is a zero, never loaded */
        cstyle_put(b, "              int ok;\n");
        cstyle_put(b, "              const int64_t bo = ob + %s_b_at(p, j0 + j, LB, &ok);\n", name);
        cstyle_put(b, "              if (ok) ");
    } else {
        cstyle_put(b, "              ");
    }
    cstyle_put(b, "dot += (%s)", e);
    load_expr(b, at, k->a.buf, "oa + (i0 + i) * RSA + p * CSA");
    cstyle_put(b, " * (%s)", e);
    load_expr(b, bt, k->b.buf, split ? "bo" : "ob + p * RSB + (j0 + j) * CSB");
    cstyle_put(b, ";\n            }\n");
    cstyle_put(b, "            %s_epi(bufs, bt * N * M + (i0 + i) * M + j0 + j, &dot, 1);\n", name);
    cstyle_put(b, "          }\n  }\n  free(cb);\n  }\n}\n\n");
}

/* ---- fused attention (LOWER_ATTENTION) ----
 *
 * Three kernels over one batch of matrices q [L, D], k [NK, D], v [NK, DV]
 * (graph.h's GRAPH_ATTENTION*), each a loop over program instances that own
 * a block of rows and walk the other side in tiles, so that no score leaves
 * the instance's scratch (one allocation per thread, in L2 at head widths of
 * 64-128):
 *   forward  (BQ queries): s = q' k^T over a tile of BK keys (q' = scale q),
 *            online softmax (running max m, sum l, the accumulator rescaled
 *            by e^(m_old - m_new)), o += p v; out [L, DV + 1] = o / l, then
 *            lse = m + log l.
 *   dq       (BQ queries): p = e^(q' k^T - lse), dp = go v^T, ds = p (dp -
 *            delta); dq += ds k; out [L, D] = scale dq.
 *   dkv      (BK keys): p^T and ds^T against a tile of BQ queries; dv +=
 *            p^T go, dk += ds^T q; out [NK, D + DV].
 *   dkv + dq (the joint backward, lower.h's LOWER_JOINT_ATTENTION_GRADS: one
 *            instance per matrix, walking its key blocks): dkv's steps, and
 *            with each tile's ds, dq += ds k into the matrix's whole dq in
 *            scratch; out1 [L, D] = scale dq. Five products where dq and
 *            dkv apart take seven.
 * Causal: key j > query i is masked; tiles wholly above the diagonal are
 * skipped. Every product is NAME_gemm over scratch that the sources are
 * packed into (transposed where the product needs it), its widths padded to
 * whole vectors; the softmax steps are `omp simd` loops and e^x is lower's
 * rule, the kernel's instructions (NAME_exp), vectorised with them. The
 * naive reference is graph/ref_eval.c's eval_attention, which the tests hold
 * every executor to. */

/* C[m x nv vectors] (+)= A[m x kk] B[kk x nv vectors], m a multiple of 2
 * (the callers round to 4): register tiles of `rows` rows by up to NV
 * vectors (one vector at the right edge), B's and C's rows aligned whole
 * vectors. NAME_gemmt (transposed) reads A as its transpose At[kk x m]:
 * element (i, p) at At[p * lda + i]. */
static void att_gemm_rows(sbuf *b, const char *name, const char *vt, const char *T, int nv,
                          bool transposed, int rows) {
    cstyle_put(b, "  for (; i + %d <= m; i += %d) {\n", rows, rows);
    for (int r = 0; r < rows; r++) {
        if (r == 0)
            cstyle_put(b, transposed ? "    const %s *restrict a0 = A + i;\n"
                                     : "    const %s *restrict a0 = A + i * lda;\n", T);
        else
            cstyle_put(b, transposed ? "    const %s *restrict a%d = a%d + 1;\n"
                                     : "    const %s *restrict a%d = a%d + lda;\n", T, r, r - 1);
    }
    cstyle_put(b, "    int64_t j = 0;\n");
    for (int w = nv; w >= 1; w = w == 1 ? 0 : 1) {
        cstyle_put(b, "    for (; j + %d <= nv; j += %d) {\n", w, w);
        for (int r = 0; r < rows; r++)
            for (int x = 0; x < w; x++)
                cstyle_put(b, "      %s_v c%d%d = {0};\n", vt, r, x);
        cstyle_put(b, "      const %s *restrict bp = B + j * %s_L;\n", T, name);
        cstyle_put(b, "      for (int64_t p = 0; p < kk; p++, bp += ldb) {\n");
        for (int x = 0; x < w; x++)
            cstyle_put(b, "        const %s_v b%d = *(const %s_v *)(bp + %d * %s_L);\n", vt, x, vt,
                       x, name);
        for (int r = 0; r < rows; r++) {
            cstyle_put(b, transposed ? "        { const %s x = a%d[p * lda];" : "        { const %s x = a%d[p];",
                       T, r);
            for (int x = 0; x < w; x++)
                cstyle_put(b, " c%d%d = x * b%d + c%d%d;", r, x, x, r, x);
            cstyle_put(b, " }\n");
        }
        cstyle_put(b, "      }\n");
        cstyle_put(b, "      %s *restrict cp = C + i * ldc + j * %s_L;\n", T, name);
        for (int r = 0; r < rows; r++)
            for (int x = 0; x < w; x++)
                cstyle_put(b,
                    "      if (add) *(%s_v *)(cp + %d * ldc + %d * %s_L) += c%d%d; "
                    "else *(%s_v *)(cp + %d * ldc + %d * %s_L) = c%d%d;\n",
                    vt, r, x, name, r, x, vt, r, x, name, r, x);
        cstyle_put(b, "    }\n");
    }
    cstyle_put(b, "  }\n");
}

/* Register tiles of up to mr rows (lower's plan: att.mr), then 4, then 2. */
static void att_gemm(sbuf *b, const char *name, const char *vt, const char *T, int mr, int nv,
                     bool transposed) {
    cstyle_put(b, "#pragma GCC push_options\n#pragma GCC optimize(\"fp-contract=fast\")\n");
    cstyle_put(b,
        "static void %s_gemm%s(int64_t m, int64_t nv, int64_t kk, const %s *restrict A, int64_t lda, "
        "const %s *restrict B, int64_t ldb, %s *restrict C, int64_t ldc, int add) {\n",
        name, transposed ? "t" : "", T, T, T);
    cstyle_put(b, "#ifdef __clang__\n#pragma clang fp contract(fast)\n#endif\n");
    cstyle_put(b, "  int64_t i = 0;\n");
    for (int rows = mr; rows >= 2; rows = rows > 4 ? 4 : rows - 2)
        att_gemm_rows(b, name, vt, T, nv, transposed, rows);
    cstyle_put(b, "}\n#pragma GCC pop_options\n");
}

/* "const int64_t RS<x> = ..., CS<x> = ...;" and the offset o<x> of source x
 * in batch bt. */
static void att_operand(sbuf *b, const lower_kernel *k, int x, const char *name,
                        const char *indent) {
    const lower_operand *o = &k->att.src[x];
    cstyle_put(b, "%sconst int64_t RS%s = %s, CS%s = %s;\n", indent, name,
               cstyle_size(b, k, &o->row_stride), name, cstyle_size(b, k, &o->col_stride));
    char off[16];
    snprintf(off, sizeof off, "o%s", name);
    cstyle_operand_offset(b, &c_target, indent, off, k, o);
    cstyle_put(b, "%s(void)RS%s; (void)CS%s;\n", indent, name, name);
}

/* "RSW<p> = ..." and W<p>, the place of piece p's element (batch bt, row 0,
 * column 0): lower_attention.store, where each piece of the values goes. */
static void att_stores(sbuf *b, const lower_kernel *k, const char *indent) {
    kiln_dtype dt = k->out->dtype;
    for (int p = 0; p < k->att.nstores; p++) {
        const lower_operand *o = &k->att.store[p];
        char off[16];
        snprintf(off, sizeof off, "oW%d", p);
        cstyle_operand_offset(b, &c_target, indent, off, k, o);
        cstyle_put(b, "%sconst int64_t RSW%d = %s;\n", indent, p, cstyle_size(b, k, &o->row_stride));
        cstyle_put(b, "%s%s *restrict const W%d = out%d + oW%d;\n", indent, stype(dt), p, o->buf, p);
        cstyle_put(b, "%s(void)RSW%d; (void)W%d;\n", indent, p, p);
    }
}

/* NAME_tr: dst[c * ld + r] = s * src[r * rs + c] for one block of VL x VL
 * (r, c < VL): VL rows loaded as vectors, transposed in registers by log2 VL
 * stages (the stage of distance h swaps, between rows i and i + h, the
 * h-wide blocks off their diagonal), stored as VL vectors. gcc 12 and clang
 * both have __builtin_shufflevector. Element by element, the forward's
 * transposed pack of k took 0.8 of its 6.4 ms at b8 s256 d64 h8 (a store
 * a cache line apart each, about 4 cycles an element). */
static void att_transpose(sbuf *b, const char *name, const char *vt, const char *T, int lanes) {
    cstyle_put(b, "static inline void %s_tr(%s *restrict dst, int64_t ld, const %s *restrict src, "
                  "int64_t rs, %s s) {\n", name, T, T, T);
    for (int i = 0; i < lanes; i++)
        cstyle_put(b, "  %s_v r%d = *(const %s_u *)(src + %d * rs) * s;\n", vt, i, vt, i);
    for (int h = lanes / 2; h >= 1; h /= 2) {
        cstyle_put(b, "  {\n");
        for (int i = 0; i < lanes; i++) {
            if (i & h)
                continue;
            cstyle_put(b, "    const %s_v t%d = __builtin_shufflevector(r%d, r%d", vt, i, i, i + h);
            for (int j = 0; j < lanes; j++)
                cstyle_put(b, ", %d", (j & h) ? lanes + j - h : j);
            cstyle_put(b, ");\n");
            cstyle_put(b, "    const %s_v t%d = __builtin_shufflevector(r%d, r%d", vt, i + h, i, i + h);
            for (int j = 0; j < lanes; j++)
                cstyle_put(b, ", %d", (j & h) ? lanes + j : j + h);
            cstyle_put(b, ");\n");
        }
        for (int i = 0; i < lanes; i++)
            cstyle_put(b, "    r%d = t%d;\n", i, i);
        cstyle_put(b, "  }\n");
    }
    for (int i = 0; i < lanes; i++)
        cstyle_put(b, "  *(%s_u *)(dst + %d * ld) = r%d;\n", vt, i, i);
    cstyle_put(b, "}\n");
}

/* dst[r * ld + c] = (scale) source x's element (row0 + r, c), for r < rows
 * and c < cols; transposed: dst[c * ld + r], whole VL x VL blocks through
 * NAME_tr where the source is of the kernel's type and its columns are
 * adjacent. */
static void att_pack(sbuf *b, const lower_kernel *k, int x, const char *name, const char *dst,
                     const char *row0, const char *rows, const char *cols, const char *ld,
                     bool transposed, const char *scale) {
    kiln_dtype dt = k->inputs[k->att.src[x].buf - k->nouts]->dtype;
    char idx[160];
    snprintf(idx, sizeof idx, "o%s + (%s + r) * RS%s + c * CS%s", name, row0, name, name);
    bool blocks = transposed && dt == k->out->dtype && (dt == KILN_F32 || dt == KILN_F64);
    if (blocks) {
        /* the whole blocks; the rest (the last rows, the last columns)
         * element by element below */
        cstyle_put(b, "      const int64_t bl%s = CS%s == 1 ? %s / VL * VL : 0, bc%s = CS%s == 1 ? "
                      "%s / VL * VL : 0;\n", dst, name, rows, dst, name, cols);
        cstyle_put(b, "      for (int64_t r = 0; r < bl%s; r += VL)\n", dst);
        cstyle_put(b, "        for (int64_t c = 0; c < bc%s; c += VL)\n", dst);
        cstyle_put(b, "          %s_tr(%s + c * %s + r, %s, in%d + o%s + (%s + r) * RS%s + c, RS%s, "
                      "%s(T)1);\n", lower_kernel_symbol(k), dst, ld, ld, k->att.src[x].buf,
                   name, row0, name, name, scale);
        cstyle_put(b, "      for (int64_t r = 0; r < %s; r++)\n", rows);
        cstyle_put(b, "        for (int64_t c = r < bl%s ? bc%s : 0; c < %s; c++)\n", dst, dst, cols);
    } else {
        cstyle_put(b, "      for (int64_t r = 0; r < %s; r++)\n", rows);
        cstyle_put(b, "        for (int64_t c = 0; c < %s; c++)\n", cols);
    }
    cstyle_put(b, transposed ? "          %s[c * %s + r] = %s(T)" : "          %s[r * %s + c] = %s(T)",
               dst, ld, scale);
    load_expr(b, dt, k->att.src[x].buf, idx);
    cstyle_put(b, ";\n");
}

/* The scratch arrays of each kernel: names and sizes in elements. The
 * forward's KT and VR hold the whole matrix's k (transposed) and v,
 * NKB keys wide: packed once per matrix a thread visits (every query tile
 * of the matrix reads them), where packing each key tile for each query
 * tile repacked k and v L / BQ times over. */
static const char *const att_fwd_arrays[][2] = {
    {"Q", "BQ * DP"}, {"KT", "D * NKB"}, {"VR", "NKB * DVP"}, {"P", "BQ * BK"},
    {"O", "BQ * DVP"}, {"M", "BQ"}, {"LS", "BQ"}, {"MN", "BQ"}, {"CR", "BQ"}};
static const char *const att_dq_arrays[][2] = {
    {"Q", "BQ * DP"}, {"GO", "BQ * DVP"}, {"LSE", "BQ"}, {"DEL", "BQ"}, {"DQ", "BQ * DP"},
    {"KT", "D * BK"}, {"KR", "BK * DP"}, {"VT", "DV * BK"}, {"P", "BQ * BK"}, {"DPS", "BQ * BK"}};
static const char *const att_dkv_arrays[][2] = {
    {"KR", "BK * DP"}, {"VR", "BK * DVP"}, {"DK", "BK * DP"}, {"DVA", "BK * DVP"},
    {"QT", "D * BQ"}, {"QR", "BQ * DP"}, {"GOT", "DV * BQ"}, {"GOR", "BQ * DVP"},
    {"LSE", "BQ"}, {"DEL", "BQ"}, {"PT", "BK * BQ"}, {"DPT", "BK * BQ"},
    /* joined by dq: the matrix's whole dq */
    {"DQA", "(L + BQ - 1) / BQ * BQ * DP"}};

static void render_attention(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    const lower_attention *a = &k->att;
    const char *name = lower_kernel_symbol(k);
    kiln_dtype dt = k->out->dtype;
    const char *T = ctype(dt);
    int esz = dt == KILN_F64 ? 8 : 4, vb = plan->vector_bytes >= 64 ? 64 : 32;
    char vt[64];
    mm_vector_type(vt, sizeof vt, T, vb);
    cstyle_put(b, "#include <stdlib.h>\n");
    mm_vector_types(b, T, vb);
    cstyle_put(b, "enum { %s_L = %d };\n", name, vb / esz);
    att_transpose(b, name, vt, T, vb / esz);
    att_gemm(b, name, vt, T, plan->att.mr, plan->att.nv, false);
    if (lower_joint_attention(k))
        att_gemm(b, name, vt, T, plan->att.mr, plan->att.nv, true);
    /* e^x, from the kernel's instructions */
    cstyle_put(b, "static inline %s %s_exp(%s dot) {\n", T, name, T);
    for (int i = 0; i < plan->nblocks; i++)
        block_stmts(b, k, &plan->blocks[i]);
    cstyle_put(b, "      return v%d;\n}\n", k->results[0]);
    /* A row's sum in vector lanes, the lanes then added as a tree: the
     * `omp simd reduction` it replaces ended each 64-element row in 16
     * dependent scalar adds (gcc's epilogue, the hottest instructions of the
     * forward outside its products). With the e^x rule's cheaper form
     * (lower/rules_math.c), the forward at b8 s256 d64 h8 went from 6.5-6.8
     * to 6.1-6.4 ms. */
    cstyle_put(b,
        "static inline %s %s_rowsum(const %s *restrict p, int64_t n) {\n"
        "  %s_v a = {0};\n  int64_t j = 0;\n"
        "  for (; j + %s_L <= n; j += %s_L) { %s_v x; memcpy(&x, p + j, sizeof x); a += x; }\n"
        "  %s t[%s_L];\n  memcpy(t, &a, sizeof t);\n"
        "  for (int w = %s_L / 2; w >= 1; w /= 2)\n    for (int l = 0; l < w; l++) t[l] += t[l + w];\n"
        "  %s s = t[0];\n  for (; j < n; j++) s += p[j];\n  return s;\n}\n",
        T, name, T, vt, name, name, vt, T, name, name, T);
    params(b, k);
    cstyle_put(b, "  typedef %s T;\n", T);
    cstyle_put(b, "  const int64_t NB = %s, L = %s, NK = %s, D = %lldLL, DV = %lldLL;\n",
               cstyle_size_product(b, k, k->nbatch, k->batch), cstyle_size(b, k, &a->l),
               cstyle_size(b, k, &a->s), (long long)a->d, (long long)a->dv);
    cstyle_put(b, "  const int64_t BQ = %lldLL, BK = %lldLL, VL = %s_L;\n", (long long)plan->att.bq,
               (long long)plan->att.bk, name);
    cstyle_put(b, "  const int64_t DP = (D + 15) / 16 * 16, DVP = (DV + 15) / 16 * 16;\n");
    cstyle_put(b, "  const int64_t NVD = (D + VL - 1) / VL, NVV = (DV + VL - 1) / VL;\n");
    cstyle_put(b, "  const int64_t NKB = (NK + BK - 1) / BK * BK;\n");
    cstyle_put(b, "  (void)NVD; (void)NVV; (void)NKB;\n");
    cstyle_put(b, "  const T scale = (T)%.17g;\n  const int causal = %d;\n  (void)causal;\n",
               a->scale, a->causal);
    bool dkv = a->op == GRAPH_ATTENTION_DKV, fwd = a->op == GRAPH_ATTENTION;
    bool joint = lower_joint_attention(k); /* dkv, and dq as out1: one task per matrix */
    cstyle_put(b, "  const int64_t NU = %s, TASKS = NB * NU;\n",
               joint ? "1" : dkv ? "(NK + BK - 1) / BK" : "(L + BQ - 1) / BQ");
    const char *const(*arrays)[2] = fwd ? att_fwd_arrays : dkv ? att_dkv_arrays : att_dq_arrays;
    int narrays = fwd ? 9 : joint ? 13 : dkv ? 12 : 10;
    cstyle_put(b, "  size_t total = 0;\n");
    for (int i = 0; i < narrays; i++)
        cstyle_put(b, "  const size_t at_%s = total; total += ((size_t)(%s) + 15) / 16 * 16;\n",
                   arrays[i][0], arrays[i][1]);
    cstyle_put(b, "  #pragma omp parallel num_threads(nthreads < TASKS ? nthreads : (int)(TASKS > 0 ? TASKS : 1)) if(%s)\n  {\n",
               cstyle_size(b, k, &plan->parallel));
    /* zeroed once, so that the rows and columns past a tile's edge, which
     * the products compute and nothing stores, start as numbers */
    cstyle_put(b, "  T *const mem = aligned_alloc(64, total * sizeof(T));\n");
    cstyle_put(b, "  if (mem) memset(mem, 0, total * sizeof(T));\n");
    for (int i = 0; i < narrays; i++)
        cstyle_put(b, "  T *const %s = mem ? mem + at_%s : NULL;\n", arrays[i][0], arrays[i][0]);
    /* The forward's tasks are taken a matrix at a time where there are
     * matrices enough for the threads (4 each), so that each matrix's k and
     * v are packed by one thread: one task at a time, both threads packed
     * every matrix (0.8 ms of the b8 s256 d64 h8 forward's 6.4-6.7 is the
     * transposed pack of k). */
    if (fwd) {
        cstyle_put(b, "  int64_t packed = -1; /* the matrix whose k and v KT and VR hold */\n");
        cstyle_put(b, "  const int64_t CH = NB >= 4 * (int64_t)nthreads ? NU : 1;\n");
    }
    cstyle_put(b, "  #pragma omp for schedule(dynamic, %s)\n", fwd ? "CH" : "1");
    cstyle_put(b, "  for (int64_t t = 0; t < TASKS; t++) {\n");
    cstyle_put(b, "    const int64_t bt = t / NU, u0 = t %% NU * %s;\n", dkv ? "BK" : "BQ");
    att_operand(b, k, 0, "q", "    ");
    att_operand(b, k, 1, "k", "    ");
    att_operand(b, k, 2, "v", "    ");
    if (!fwd) {
        att_operand(b, k, 3, "g", "    ");
        att_operand(b, k, 4, "l", "    ");
        att_operand(b, k, 5, "d", "    ");
    }
    att_stores(b, k, "    ");
    /* Out of memory for a few hundred kilobytes of scratch: the outputs
     * become NaN rather than anything that could pass for a result. Each
     * piece's rows of this task, its columns: the forward's o and lse, dq,
     * dk and dv (and the joint kernel's dq, every row of it). */
    cstyle_put(b, "    if (!mem) {\n");
    cstyle_put(b, "      const int64_t r0 = %s, rows = %s;\n", joint ? "0" : "u0",
               joint ? "NK" : dkv ? "NK - u0 < BK ? NK - u0 : BK" : "L - u0 < BQ ? L - u0 : BQ");
    for (int p = 0; p < k->att.nstores; p++) {
        /* the joint kernel's dq: every query's row */
        bool all_queries = joint && !lower_att_piece_on_keys(&k->att, p);
        cstyle_put(b, "      for (int64_t r = %s; r < %s; r++)\n", all_queries ? "0" : "r0",
                   all_queries ? "L" : "r0 + rows");
        cstyle_put(b, "        for (int64_t c = 0; c < %lldLL; c++) W%d[r * RSW%d + c] = ",
                   (long long)lower_att_piece_cols(&k->att, p), p, p);
        store_expr(b, dt, "(T)NAN");
        cstyle_put(b, ";\n");
    }
    cstyle_put(b, "      continue;\n    }\n");
    if (fwd) {
        cstyle_put(b, "    {\n      const int64_t i0 = u0, mq = L - i0 < BQ ? L - i0 : BQ, m4 = (mq + 3) / 4 * 4;\n");
        att_pack(b, k, 0, "q", "Q", "i0", "mq", "D", "DP", false, "scale * ");
        cstyle_put(b, "      for (int64_t i = 0; i < BQ; i++) {\n");
        cstyle_put(b, "        M[i] = -INFINITY; LS[i] = 0;\n");
        cstyle_put(b, "        for (int64_t c = 0; c < DVP; c++) O[i * DVP + c] = 0;\n      }\n");
        cstyle_put(b, "      if (packed != bt) {\n");
        att_pack(b, k, 1, "k", "KT", "0", "NK", "D", "NKB", true, "");
        att_pack(b, k, 2, "v", "VR", "0", "NK", "DV", "DVP", false, "");
        cstyle_put(b, "      packed = bt;\n      }\n");
        cstyle_put(b, "      const int64_t kend = causal && i0 + mq < NK ? i0 + mq : NK;\n");
        cstyle_put(b, "      for (int64_t j0 = 0; j0 < kend; j0 += BK) {\n");
        cstyle_put(b, "      const int64_t mk = kend - j0 < BK ? kend - j0 : BK;\n");
        cstyle_put(b, "      %s_gemm(m4, BK / VL, D, Q, DP, KT + j0, NKB, P, BK, 0);\n", name);
        /* The rows' new maxima first, then their corrections e^(m_old -
         * m_new) as one vector loop over the block's rows (a scalar e^x per
         * row and tile was 7% of the forward: b8 s256 d64 h8, 6.4 -> 5.95
         * ms), then each row's exponentials and sum. */
        cstyle_put(b,
            "      for (int64_t i = 0; i < mq; i++) {\n"
            "        const int64_t lim = causal && i0 + i - j0 + 1 < mk ? i0 + i - j0 + 1 : mk;\n"
            "        const T *restrict p = P + i * BK;\n"
            "        T mx = M[i];\n"
            "        #pragma omp simd reduction(max:mx)\n"
            "        for (int64_t jj = 0; jj < lim; jj++) mx = p[jj] > mx ? p[jj] : mx;\n"
            "        MN[i] = mx;\n"
            "      }\n"
            "      #pragma omp simd\n"
            "      for (int64_t i = 0; i < mq; i++) CR[i] = MN[i] == M[i] ? (T)1 : %s_exp(M[i] - MN[i]);\n"
            "      for (int64_t i = 0; i < mq; i++) {\n"
            "        const int64_t lim = causal && i0 + i - j0 + 1 < mk ? i0 + i - j0 + 1 : mk;\n"
            "        T *restrict p = P + i * BK;\n"
            "        if (lim <= 0) {\n"
            "          for (int64_t jj = 0; jj < mk; jj++) p[jj] = 0;\n"
            "          continue;\n"
            "        }\n"
            "        const T mx = MN[i], corr = CR[i];\n"
            "        #pragma omp simd\n"
            "        for (int64_t jj = 0; jj < lim; jj++) p[jj] = %s_exp(p[jj] - mx);\n"
            "        for (int64_t jj = lim; jj < mk; jj++) p[jj] = 0;\n"
            "        LS[i] = LS[i] * corr + %s_rowsum(p, lim);\n"
            "        M[i] = mx;\n"
            "        T *restrict o = O + i * DVP;\n"
            "        #pragma omp simd\n"
            "        for (int64_t c = 0; c < DVP; c++) o[c] *= corr;\n"
            "      }\n", name, name, name);
        cstyle_put(b, "      %s_gemm(m4, NVV, mk, P, BK, VR + j0 * DVP, DVP, O, DVP, 1);\n      }\n", name);
        cstyle_put(b, "      for (int64_t i = 0; i < mq; i++) {\n");
        cstyle_put(b, "        const T inv = 1 / LS[i];\n");
        cstyle_put(b, "        for (int64_t c = 0; c < DV; c++) W0[(i0 + i) * RSW0 + c] = ");
        store_expr(b, dt, "O[i * DVP + c] * inv");
        if (a->nstores == 3) { /* o again, into the view that copied it */
            cstyle_put(b, ";\n        for (int64_t c = 0; c < DV; c++) W2[(i0 + i) * RSW2 + c] = ");
            store_expr(b, dt, "O[i * DVP + c] * inv");
        }
        cstyle_put(b, ";\n        W1[(i0 + i) * RSW1] = ");
        store_expr(b, dt, "(T)(M[i] + log((double)LS[i]))");
        cstyle_put(b, ";\n      }\n    }\n");
    } else if (!dkv) {
        cstyle_put(b, "    {\n      const int64_t i0 = u0, mq = L - i0 < BQ ? L - i0 : BQ, m4 = (mq + 3) / 4 * 4;\n");
        att_pack(b, k, 0, "q", "Q", "i0", "mq", "D", "DP", false, "scale * ");
        att_pack(b, k, 3, "g", "GO", "i0", "mq", "DV", "DVP", false, "");
        att_pack(b, k, 4, "l", "LSE", "i0", "mq", "1", "1", false, "");
        att_pack(b, k, 5, "d", "DEL", "i0", "mq", "1", "1", false, "");
        cstyle_put(b, "      for (int64_t r = 0; r < BQ * DP; r++) DQ[r] = 0;\n");
        cstyle_put(b, "      const int64_t kend = causal && i0 + mq < NK ? i0 + mq : NK;\n");
        cstyle_put(b, "      for (int64_t j0 = 0; j0 < kend; j0 += BK) {\n");
        cstyle_put(b, "      const int64_t mk = kend - j0 < BK ? kend - j0 : BK;\n");
        att_pack(b, k, 1, "k", "KT", "j0", "mk", "D", "BK", true, "");
        att_pack(b, k, 1, "k", "KR", "j0", "mk", "D", "DP", false, "");
        att_pack(b, k, 2, "v", "VT", "j0", "mk", "DV", "BK", true, "");
        cstyle_put(b, "      %s_gemm(m4, BK / VL, D, Q, DP, KT, BK, P, BK, 0);\n", name);
        cstyle_put(b, "      %s_gemm(m4, BK / VL, DV, GO, DVP, VT, BK, DPS, BK, 0);\n", name);
        cstyle_put(b,
            "      for (int64_t i = 0; i < mq; i++) {\n"
            "        const int64_t lim = causal && i0 + i - j0 + 1 < mk ? i0 + i - j0 + 1 : mk;\n"
            "        T *restrict p = P + i * BK;\n"
            "        const T *restrict dp = DPS + i * BK;\n"
            "        const T lse = LSE[i], del = DEL[i];\n"
            "        #pragma omp simd\n"
            "        for (int64_t jj = 0; jj < BK; jj++) p[jj] = jj < lim ? %s_exp(p[jj] - lse) * (dp[jj] - del) : (T)0;\n"
            "      }\n", name);
        cstyle_put(b, "      %s_gemm(m4, NVD, mk, P, BK, KR, DP, DQ, DP, 1);\n      }\n", name);
        cstyle_put(b, "      for (int64_t i = 0; i < mq; i++)\n");
        cstyle_put(b, "        for (int64_t c = 0; c < D; c++) W0[(i0 + i) * RSW0 + c] = ");
        store_expr(b, dt, "DQ[i * DP + c] * scale");
        cstyle_put(b, ";\n    }\n");
    } else {
        cstyle_put(b, "    {\n");
        if (joint)
            cstyle_put(b, "      for (int64_t r = 0; r < (L + BQ - 1) / BQ * BQ * DP; r++) DQA[r] = 0;\n");
        cstyle_put(b, "      for (int64_t j0 = u0; j0 < %s; j0 += BK) {\n", joint ? "NK" : "u0 + 1");
        cstyle_put(b, "      const int64_t mk = NK - j0 < BK ? NK - j0 : BK, m4 = (mk + 3) / 4 * 4;\n");
        att_pack(b, k, 1, "k", "KR", "j0", "mk", "D", "DP", false, "");
        att_pack(b, k, 2, "v", "VR", "j0", "mk", "DV", "DVP", false, "");
        cstyle_put(b, "      for (int64_t r = 0; r < BK * DP; r++) DK[r] = 0;\n");
        cstyle_put(b, "      for (int64_t r = 0; r < BK * DVP; r++) DVA[r] = 0;\n");
        /* causal: queries before j0 see none of these keys */
        cstyle_put(b, "      for (int64_t i0 = causal ? j0 / BQ * BQ : 0; i0 < L; i0 += BQ) {\n");
        cstyle_put(b, "      const int64_t mq = L - i0 < BQ ? L - i0 : BQ;\n");
        att_pack(b, k, 0, "q", "QT", "i0", "mq", "D", "BQ", true, "scale * ");
        att_pack(b, k, 0, "q", "QR", "i0", "mq", "D", "DP", false, "");
        att_pack(b, k, 3, "g", "GOT", "i0", "mq", "DV", "BQ", true, "");
        att_pack(b, k, 3, "g", "GOR", "i0", "mq", "DV", "DVP", false, "");
        att_pack(b, k, 4, "l", "LSE", "i0", "mq", "1", "1", false, "");
        att_pack(b, k, 5, "d", "DEL", "i0", "mq", "1", "1", false, "");
        cstyle_put(b, "      %s_gemm(m4, BQ / VL, D, KR, DP, QT, BQ, PT, BQ, 0);\n", name);
        cstyle_put(b, "      %s_gemm(m4, BQ / VL, DV, VR, DVP, GOT, BQ, DPT, BQ, 0);\n", name);
        cstyle_put(b,
            "      for (int64_t jj = 0; jj < mk; jj++) {\n"
            "        const int64_t lo = causal && j0 + jj - i0 > 0 ? j0 + jj - i0 : 0;\n"
            "        T *restrict p = PT + jj * BQ, *restrict dp = DPT + jj * BQ;\n"
            "        #pragma omp simd\n"
            "        for (int64_t ii = 0; ii < BQ; ii++) {\n"
            "          const T e = ii >= lo && ii < mq ? %s_exp(p[ii] - LSE[ii]) : (T)0;\n"
            "          p[ii] = e;\n"
            "          dp[ii] = e * (dp[ii] - DEL[ii]);\n"
            "        }\n"
            "      }\n", name);
        cstyle_put(b, "      %s_gemm(m4, NVV, mq, PT, BQ, GOR, DVP, DVA, DVP, 1);\n", name);
        cstyle_put(b, "      %s_gemm(m4, NVD, mq, DPT, BQ, QR, DP, DK, DP, 1);\n", name);
        if (joint) { /* dq of these queries += ds k over this block's keys */
            /* ds is dpt's transpose: read as such, not copied (a scalar
             * transpose of BK x BQ per tile) */
            cstyle_put(b, "      const int64_t m4q = (mq + 3) / 4 * 4;\n");
            cstyle_put(b, "      %s_gemmt(m4q, NVD, mk, DPT, BQ, KR, DP, DQA + i0 * DP, DP, 1);\n", name);
        }
        cstyle_put(b, "      }\n");
        cstyle_put(b, "      for (int64_t jj = 0; jj < mk; jj++) {\n");
        cstyle_put(b, "        for (int64_t c = 0; c < D; c++) W0[(j0 + jj) * RSW0 + c] = ");
        store_expr(b, dt, "DK[jj * DP + c] * scale");
        cstyle_put(b, ";\n        for (int64_t c = 0; c < DV; c++) W1[(j0 + jj) * RSW1 + c] = ");
        store_expr(b, dt, "DVA[jj * DVP + c]");
        cstyle_put(b, ";\n      }\n      }\n");
        if (joint) {
            cstyle_put(b, "      for (int64_t i = 0; i < L; i++)\n");
            cstyle_put(b, "        for (int64_t c = 0; c < D; c++) W2[i * RSW2 + c] = ");
            store_expr(b, dt, "DQA[i * DP + c] * scale");
            cstyle_put(b, ";\n");
        }
        cstyle_put(b, "    }\n");
    }
    cstyle_put(b, "  }\n  free(mem);\n  }\n}\n\n");
}

kiln_status jit_cpu_render(const lower_program *p, const lower_plan *plans, char **out, char *msg,
                            size_t cap) {
    sbuf b = {0};
    b.err = msg;
    b.errcap = cap;
    cstyle_put(&b, "%s\n", jit_cpu_prelude);
    for (int i = 0; i < p->nkernels; i++) {
        const lower_kernel *k = &p->kernels[i];
        if (lower_kind_has_code(k->kind))
            cstyle_put(&b, "%s%s", JIT_CPU_KERNEL_MARK,
                       lower_plan_scalar(k, &plans[i]) ? JIT_CPU_TINY_MARK : "");
        if (k->kind == LOWER_MATMUL) {
            /* gcc at -O2: a product's code is vectorised by hand (its
             * micro-kernels' vector types), and -O3 only made compiling it
             * slower: the MLP training step's 27 kernels 2.1 s in one unit,
             * 1.3-1.7 with its 8 products at -O2; the products themselves
             * ran alike (1024^3, 256x768x768, 64x4096x4096 and 2048^3 with
             * w^T, alternating, within 10% either way). */
            cstyle_put(&b, "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC push_options\n"
                           "#pragma GCC optimize(\"O2\")\n#endif\n");
            clang_wide_begin(&b, &plans[i]);
            render_matmul(&b, k, &plans[i]);
            clang_wide_end(&b, &plans[i]);
            cstyle_put(&b, "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC pop_options\n#endif\n");
        } else if (k->kind == LOWER_ATTENTION) {
            wide_begin(&b, &plans[i]);
            render_attention(&b, k, &plans[i]);
            wide_end(&b, &plans[i]);
        }
        else if (lower_kind_has_code(k->kind))
            render_ir_kernel(&b, k, &plans[i]);
    }
    return cstyle_finish(&b, "code", out);
}
