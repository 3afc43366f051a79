/* render_cuda.c — kernel IR to CUDA C for NVRTC: one translation unit per
 * program, an `extern "C" __global__` function per kernel. A program instance
 * is a thread block: an elementwise tile is spread over the block's threads;
 * a reduction or row kernel gives each output row one block, whose threads
 * stride over the reduced elements and combine through warp shuffles and
 * shared memory, every finished reduction broadcast to all threads before the
 * next pass (where the rows are too few to fill the device, each row's
 * passes are split over several blocks, the last of which combines them);
 * a matmul stages tiles of both operands in shared memory and each
 * thread keeps a 4x4 block of the output in registers, then applies the
 * epilogue per element. Element semantics come from lower/'s rules, printed
 * through jit/cstyle; the prelude holds only the half types' storage
 * conversions and the block-wide combines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cstyle/cstyle.h"
#include "jit/cuda/cuda.h"
#include "jit/cuda/half.h"

/* Threads per block of elementwise kernels (the planner decides the rest). */
#define EW_BLOCK 256

static const char prelude[] =
    "typedef unsigned char kh_u8;\n"
    "typedef signed char kh_i8;\n"
    "typedef unsigned short kh_u16;\n"
    "typedef unsigned int kh_u32;\n"
    "typedef int kh_i32;\n"
    "typedef long long kh_i64;\n"
    "typedef unsigned long long kh_u64;\n"
    "#define KH_D __device__ __forceinline__\n"
    "KH_D kh_u32 kh_fbits(float f) { return __float_as_uint(f); }\n"
    "KH_D float kh_bitsf(kh_u32 u) { return __uint_as_float(u); }\n"
    JIT_CUDA_STR(JIT_CUDA_HALF_CODE(__device__ __forceinline__)) "\n"
    "#define KH_NAN __longlong_as_double(0x7ff8000000000000LL)\n"
    "#define KH_INF __longlong_as_double(0x7ff0000000000000LL)\n"
    "KH_D float kh_rh(float x) { return kh_h2f(kh_f2h(x)); }\n"
    "KH_D float kh_rb(float x) { return kh_b2f(kh_f2b(x)); }\n"
    /* Matmul's inner product: fused where the target contracts nothing else
       (--fmad=false keeps elementwise code rounding like the CPU's). */
    "KH_D float kh_fma(float a, float b, float c) { return fmaf(a, b, c); }\n"
    "KH_D double kh_fma(double a, double b, double c) { return fma(a, b, c); }\n"
    "KH_D kh_u64 kh_fma(kh_u64 a, kh_u64 b, kh_u64 c) { return a * b + c; }\n"
    /* Block-wide combines. The block is a whole number of warps; sh holds
       one slot per warp and a last one (32) that broadcasts the result. The
       first barrier keeps a previous combine's readers from seeing the
       slots change under them. */
    "template <typename T> KH_D T kh_block_sum(T v, T *sh) {\n"
    "  for (int o = 16; o; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);\n"
    "  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;\n"
    "  __syncthreads(); if (!lane) sh[w] = v; __syncthreads();\n"
    "  if (!w) { v = lane < (int)(blockDim.x >> 5) ? sh[lane] : (T)0;\n"
    "    for (int o = 16; o; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);\n"
    "    if (!lane) sh[32] = v; }\n"
    "  __syncthreads(); return sh[32]; }\n"
    "KH_D bool kh_isnan(double x) { return x != x; }\n"
    "KH_D bool kh_isnan(kh_i64) { return false; }\n"
    /* Max/min with the sequential scan's rules: the first NaN wins, else
       the extreme value, and among equal values the first index. */
    "template <typename T> KH_D void kh_pick(T &b, kh_i64 &at, T ob, kh_i64 oat, bool mx) {\n"
    "  if (oat < 0) return; bool take;\n"
    "  if (at < 0) take = true;\n"
    "  else { bool an = kh_isnan(b), bn = kh_isnan(ob);\n"
    "    if (an || bn) take = bn && (!an || oat < at);\n"
    "    else if (ob == b) take = oat < at;\n"
    "    else take = mx ? ob > b : ob < b; }\n"
    "  if (take) { b = ob; at = oat; } }\n"
    "template <typename T> KH_D void kh_block_pick(T &b, kh_i64 &at, bool mx, T *sv, kh_i64 *si) {\n"
    "  for (int o = 16; o; o >>= 1) { T ob = __shfl_down_sync(0xffffffffu, b, o);\n"
    "    kh_i64 oat = __shfl_down_sync(0xffffffffu, at, o); kh_pick(b, at, ob, oat, mx); }\n"
    "  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;\n"
    "  __syncthreads(); if (!lane) { sv[w] = b; si[w] = at; } __syncthreads();\n"
    "  if (!w) { if (lane < (int)(blockDim.x >> 5)) { b = sv[lane]; at = si[lane]; } else at = -1;\n"
    "    for (int o = 16; o; o >>= 1) { T ob = __shfl_down_sync(0xffffffffu, b, o);\n"
    "      kh_i64 oat = __shfl_down_sync(0xffffffffu, at, o); kh_pick(b, at, ob, oat, mx); }\n"
    "    if (!lane) { sv[32] = b; si[32] = at; } }\n"
    "  __syncthreads(); b = sv[32]; at = si[32]; }\n";

typedef cstyle_buf sbuf;

static bool is_float(kiln_dtype dt) { return graph_dtype_is_float(dt); }

/* CUDA's spellings for jit/cstyle. */
static const cstyle_target cuda_target = {
    .type = {[KILN_F32] = "float", [KILN_F64] = "double", [KILN_F16] = "float",
             [KILN_BF16] = "float", [KILN_I32] = "kh_i32", [KILN_I64] = "kh_i64",
             [KILN_U8] = "kh_u8", [KILN_BOOL] = "kh_u8", [KILN_I8] = "kh_i8"},
    .u8 = "kh_u8", .u16 = "kh_u16", .u32 = "kh_u32", .u64 = "kh_u64",
    .nan = "KH_NAN", .inf = "KH_INF",
    .f32_bits = "__float_as_int", .bits_f32 = "__int_as_float",
    .f64_bits = "__double_as_longlong", .bits_f64 = "__longlong_as_double",
    .buffer = "b%d",
    .lane = "(g - t * T)",
    .name = "CUDA",
};

const cstyle_target *jit_cuda_cstyle_target(void) { return &cuda_target; }

static const char *ctype(kiln_dtype dt) { return cuda_target.type[dt]; }
static const char *stype(kiln_dtype dt) { return cstyle_storage_type(&cuda_target, dt); }
static const char *rnd(kiln_dtype dt) { return cstyle_round_half(dt); }

/* The node behind slot `buf` of a kernel's buffer array. */
static const graph_node *buf_node(const lower_kernel *k, int buf) {
    return buf < k->nouts ? k->outs[buf] : k->inputs[buf - k->nouts];
}

static void load_expr(sbuf *b, kiln_dtype dt, int buf, const char *idx) {
    char e[256];
    cstyle_load(&cuda_target, dt, buf, idx, e, sizeof e);
    cstyle_put(b, "%s", e);
}

static void store_expr(sbuf *b, kiln_dtype dt, int v) {
    char val[16], e[64];
    snprintf(val, sizeof val, "v%d", v);
    cstyle_store(dt, val, e, sizeof e);
    cstyle_put(b, "%s", e);
}

static void ins_stmt(sbuf *b, const lower_ins *ins, int i, const char *indent) {
    char s[1280], why[256];
    if (cstyle_ins(&cuda_target, ins, i, b->narrow, s, sizeof s, why, sizeof why))
        cstyle_put(b, "%s%s\n", indent, s);
    else
        cstyle_refuse_buf(b, why);
}

static void store_stmts(sbuf *b, const lower_kernel *k, const char *indent) {
    for (int o = 0; o < k->nouts; o++) {
        cstyle_put(b, "%sb%d[v%d] = ", indent, o, k->store);
        store_expr(b, k->outs[o]->dtype, k->results[o]);
        cstyle_put(b, ";\n");
    }
}

const lower_target *jit_cuda_target(void) {
    /* sm_90's, which CI compiles for; a device sets mma by its own */
    static const lower_target t = {
        .name = "cuda", .gpu = true, .block_threads = EW_BLOCK, .mma = true};
    return &t;
}

jit_cuda_dims jit_cuda_launch_dims(const lower_plan *plan) {
    return (jit_cuda_dims){(unsigned)plan->grid, (unsigned)plan->block_threads};
}

/* A block's statements; a store pass reads its stash back from output 0,
 * which the same thread wrote at the same index in the sum pass (both
 * passes give thread t the elements t, t + threads, …). */
static void block_stmts(sbuf *b, const lower_kernel *k, const lower_block *blk,
                        const char *indent) {
    for (int i = 0; i < blk->n; i++) {
        int id = blk->ins[i];
        if (blk->kind == LOWER_BLOCK_STORE && id == blk->stash)
            cstyle_put(b, "%sconst %s v%d = b0[v%d];\n", indent, ctype(k->ins[id].dt), id, k->store);
        else
            ins_stmt(b, k->ins, id, indent);
    }
}

static void params(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    cstyle_put(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", plan->block_threads, k->name);
    int nbufs = k->nouts + k->ninputs;
    for (int i = 0; i < nbufs; i++) {
        const char *t = stype(buf_node(k, i)->dtype);
        cstyle_put(b, "%s%s%s *b%d", i ? ", " : "", i < k->nouts ? "" : "const ", t, i);
    }
    cstyle_put(b, ") {\n");
}

/* Elementwise: a tile of output elements per block, spread over its
 * threads so that neighbouring threads touch neighbouring elements. */
static void render_elementwise(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    cstyle_put(b, "  const kh_i64 N = %lldLL, T = %lldLL;\n", (long long)k->numel,
        (long long)(k->tile > 0 ? k->tile : 1));
    cstyle_put(b, "  for (kh_i64 t = blockIdx.x; t * T < N; t += gridDim.x) {\n");
    cstyle_put(b, "    const kh_i64 hi = N - t * T < T ? N : t * T + T;\n");
    cstyle_put(b, "    for (kh_i64 g = t * T + threadIdx.x; g < hi; g += %d) {\n", plan->block_threads);
    for (int i = 0; i < plan->nblocks; i++)
        block_stmts(b, k, &plan->blocks[i], "      ");
    store_stmts(b, k, "      ");
    cstyle_put(b, "    }\n  }\n}\n\n");
}

/* The block's sum of its threads' acc (f: of floats, in double), and sum
 * red's value from it, rounded to dt. */
static void block_sum_result(sbuf *b, const char *indent, bool f, int red, kiln_dtype dt) {
    cstyle_put(b, "%sacc = kh_block_sum(acc, kh_s%s);\n", indent, f ? "d" : "u");
    if (is_float(dt))
        cstyle_put(b, "%sv%d = %s((%s)acc);\n", indent, red, rnd(dt), ctype(dt));
    else
        cstyle_put(b, "%sv%d = (%s)acc;\n", indent, red, ctype(dt));
}

/* The block's pick of its threads' best (max or min; f: a float's, with
 * NaN first), and reduction red's value from it: the index for argmax and
 * argmin, else the value in dt. */
static void block_pick_result(sbuf *b, const char *indent, bool mx, bool f, bool arg, int red,
                              kiln_dtype dt) {
    cstyle_put(b, "%skh_block_pick(best, at, %s, kh_s%s, kh_sa);\n", indent, mx ? "true" : "false",
               f ? "d" : "i");
    if (arg)
        cstyle_put(b, "%sv%d = at < 0 ? 0 : at;\n", indent, red);
    else
        cstyle_put(b, "%sv%d = (%s)best;\n", indent, red, ctype(dt));
}

/* One reduction: each thread scans its share of the row in order (so the
 * first index wins ties within it), then the block combines the shares. */
static void render_reduction(sbuf *b, const lower_kernel *k, const lower_block *blk,
                             int threads) {
    int red = blk->reduce;
    const lower_ins *x = &k->ins[red];
    kiln_dtype in = k->ins[x->a].dt, dt = x->dt;
    int v = x->a;
    cstyle_put(b, "    %s v%d;\n    {\n", ctype(dt), red);
    if (x->gop == GRAPH_SUM) {
        const char *acc = is_float(in) ? "double" : "kh_u64";
        cstyle_put(b, "      %s acc = 0;\n", acc);
        cstyle_put(b, "      for (kh_i64 r = threadIdx.x; r < R; r += %d) {\n", threads);
        block_stmts(b, k, blk, "        ");
        if (blk->stash >= 0)
            cstyle_put(b, "        b0[v%d] = v%d;\n", k->store, blk->stash);
        cstyle_put(b, "        acc += (%s)v%d;\n      }\n", acc, v);
        block_sum_result(b, "      ", is_float(in), red, dt);
    } else {
        bool mx = x->gop == GRAPH_RMAX || x->gop == GRAPH_ARGMAX;
        bool arg = x->gop == GRAPH_ARGMAX || x->gop == GRAPH_ARGMIN;
        cstyle_put(b, "      %s best = 0; kh_i64 at = -1;\n", is_float(in) ? "double" : "kh_i64");
        cstyle_put(b, "      for (kh_i64 r = threadIdx.x; r < R; r += %d) {\n", threads);
        block_stmts(b, k, blk, "        ");
        cstyle_reduce_take(b, "        ", x->gop, is_float(in), v);
        cstyle_put(b, "      }\n");
        block_pick_result(b, "      ", mx, is_float(in), arg, red, dt);
    }
    cstyle_put(b, "    }\n");
}

/* The shared arrays the kernel's combines use. */
static void shared_decls(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    bool d = false, u = false, i = false, a = false;
    for (int j = 0; j < plan->nblocks; j++) {
        if (plan->blocks[j].kind != LOWER_BLOCK_REDUCE)
            continue;
        const lower_ins *x = &k->ins[plan->blocks[j].reduce];
        bool f = is_float(k->ins[x->a].dt);
        d |= f;
        if (x->gop == GRAPH_SUM) {
            u |= !f;
        } else {
            a = true;
            i |= !f;
        }
    }
    if (d)
        cstyle_put(b, "  __shared__ double kh_sd[33];\n");
    if (u)
        cstyle_put(b, "  __shared__ kh_u64 kh_su[33];\n");
    if (i)
        cstyle_put(b, "  __shared__ kh_i64 kh_si[33];\n");
    if (a)
        cstyle_put(b, "  __shared__ kh_i64 kh_sa[33];\n");
}

/* A split kernel's arrays in the module (plan->row_blocks): per row a count
 * of its blocks that have finished, and per reduction and block its partial
 * (the accumulator, and for a max or min its index), named after the
 * kernel. Module globals are zeroed when the module loads, and the last
 * block of a row sets its count back to 0, so no launcher allocates,
 * clears or passes anything; launches of one module must not overlap (the
 * device queues every launch on one stream). */
static void split_decls(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    int64_t n = k->numel, parts = k->numel * plan->row_blocks;
    cstyle_put(b, "__device__ kh_u32 kh_n_%s[%lld];\n", k->name, (long long)n);
    for (int j = 0, slot = 0; j < plan->nblocks; j++) {
        if (plan->blocks[j].kind != LOWER_BLOCK_REDUCE)
            continue;
        const lower_ins *x = &k->ins[plan->blocks[j].reduce];
        bool f = is_float(k->ins[x->a].dt), sum = x->gop == GRAPH_SUM;
        cstyle_put(b, "__device__ %s kh_p%d_%s[%lld];\n",
                   f ? "double" : sum ? "kh_u64" : "kh_i64", slot, k->name, (long long)parts);
        if (!sum)
            cstyle_put(b, "__device__ kh_i64 kh_a%d_%s[%lld];\n", slot, k->name, (long long)parts);
        slot++;
    }
}

/* A split reduction's partial over the block's chunk, [kh_r0, kh_r1): the
 * threads stride over it as an unsplit row's do and combine; thread 0
 * keeps the result for the row's last block. */
static void render_partial(sbuf *b, const lower_kernel *k, const lower_block *blk, int slot,
                           int threads) {
    const lower_ins *x = &k->ins[blk->reduce];
    bool f = is_float(k->ins[x->a].dt);
    int v = x->a;
    cstyle_put(b, "    {\n");
    if (x->gop == GRAPH_SUM) {
        const char *acc = f ? "double" : "kh_u64";
        cstyle_put(b, "      %s acc = 0;\n", acc);
        cstyle_put(b, "      for (kh_i64 r = kh_r0 + threadIdx.x; r < kh_r1; r += %d) {\n", threads);
        block_stmts(b, k, blk, "        ");
        cstyle_put(b, "        acc += (%s)v%d;\n      }\n", acc, v);
        cstyle_put(b, "      acc = kh_block_sum(acc, kh_s%s);\n", f ? "d" : "u");
        cstyle_put(b, "      if (threadIdx.x == 0) kh_p%d_%s[kh_u] = acc;\n", slot, k->name);
    } else {
        bool mx = x->gop == GRAPH_RMAX || x->gop == GRAPH_ARGMAX;
        cstyle_put(b, "      %s best = 0; kh_i64 at = -1;\n", f ? "double" : "kh_i64");
        cstyle_put(b, "      for (kh_i64 r = kh_r0 + threadIdx.x; r < kh_r1; r += %d) {\n", threads);
        block_stmts(b, k, blk, "        ");
        cstyle_reduce_take(b, "        ", x->gop, f, v);
        cstyle_put(b, "      }\n");
        cstyle_put(b, "      kh_block_pick(best, at, %s, kh_s%s, kh_sa);\n", mx ? "true" : "false",
                   f ? "d" : "i");
        cstyle_put(b, "      if (threadIdx.x == 0) { kh_p%d_%s[kh_u] = best; kh_a%d_%s[kh_u] = at; }\n",
                   slot, k->name, slot, k->name);
    }
    cstyle_put(b, "    }\n");
}

/* In a row's last block: the row's partials combined into the reduction's
 * value, in a fixed order whichever block came last (each thread takes
 * partials t, t + threads, ... in order, then the block's fixed tree), so
 * that a sum comes out the same on every run; a max or min keeps the
 * sequential scan's answer (the first NaN, else the extreme value at its
 * first index), which does not depend on the order. The partials are read
 * past L1 (__ldcg): other blocks wrote them. */
static void render_combine(sbuf *b, const lower_kernel *k, const lower_block *blk, int slot,
                           int threads) {
    int red = blk->reduce;
    const lower_ins *x = &k->ins[red];
    kiln_dtype dt = x->dt;
    bool f = is_float(k->ins[x->a].dt);
    cstyle_put(b, "      %s v%d;\n      {\n", ctype(dt), red);
    if (x->gop == GRAPH_SUM) {
        cstyle_put(b, "        %s acc = 0;\n", f ? "double" : "kh_u64");
        cstyle_put(b, "        for (kh_i64 q = threadIdx.x; q < B; q += %d) acc += __ldcg(&kh_p%d_%s[g * B + q]);\n",
                   threads, slot, k->name);
        block_sum_result(b, "        ", f, red, dt);
    } else {
        bool mx = x->gop == GRAPH_RMAX || x->gop == GRAPH_ARGMAX;
        bool arg = x->gop == GRAPH_ARGMAX || x->gop == GRAPH_ARGMIN;
        cstyle_put(b, "        %s best = 0; kh_i64 at = -1;\n", f ? "double" : "kh_i64");
        cstyle_put(b, "        for (kh_i64 q = threadIdx.x; q < B; q += %d)\n", threads);
        cstyle_put(b, "          kh_pick(best, at, __ldcg(&kh_p%d_%s[g * B + q]), "
                      "__ldcg(&kh_a%d_%s[g * B + q]), %s);\n",
                   slot, k->name, slot, k->name, mx ? "true" : "false");
        block_pick_result(b, "        ", mx, f, arg, red, dt);
    }
    cstyle_put(b, "      }\n");
}

/* A reduction whose few rows are split across blocks (plan->row_blocks,
 * lower/plan.c): unit u is chunk u % B of row u / B. Each block computes
 * the outer values the passes read, its partial of every reduction over
 * its chunk, and counts itself done (the partials written and fenced before
 * the count, so that whichever block counts last sees them all); the last
 * block of the row combines the partials, computes what comes after the
 * reductions, stores, and clears the count for the next launch. No block
 * waits for another, so any grid is correct, however many blocks are
 * resident. */
static void render_split(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    int threads = plan->block_threads;
    shared_decls(b, k, plan);
    cstyle_put(b, "  __shared__ bool kh_last;\n");
    cstyle_put(b, "  const kh_i64 N = %lldLL, R = %lldLL, B = %lldLL, C = %lldLL;\n",
               (long long)k->numel, (long long)k->rnumel, (long long)plan->row_blocks,
               (long long)plan->row_chunk);
    cstyle_put(b, "  for (kh_i64 kh_u = blockIdx.x; kh_u < N * B; kh_u += gridDim.x) {\n");
    cstyle_put(b, "    const kh_i64 g = kh_u / B, kh_r0 = kh_u %% B * C, "
                  "kh_r1 = R - kh_r0 < C ? R : kh_r0 + C;\n");
    /* the outer values before the first pass: every block's passes may read them */
    int first = 0;
    while (first < plan->nblocks && plan->blocks[first].kind == LOWER_BLOCK_OUTER)
        block_stmts(b, k, &plan->blocks[first++], "    ");
    for (int i = first, slot = 0; i < plan->nblocks; i++)
        if (plan->blocks[i].kind == LOWER_BLOCK_REDUCE)
            render_partial(b, k, &plan->blocks[i], slot++, threads);
    cstyle_put(b, "    if (threadIdx.x == 0) {\n      __threadfence();\n");
    cstyle_put(b, "      kh_last = atomicAdd(&kh_n_%s[g], 1u) == (kh_u32)(B - 1);\n", k->name);
    cstyle_put(b, "      __threadfence();\n    }\n    __syncthreads();\n");
    cstyle_put(b, "    if (kh_last) {\n");
    for (int i = first, slot = 0; i < plan->nblocks; i++) {
        const lower_block *blk = &plan->blocks[i];
        if (blk->kind == LOWER_BLOCK_REDUCE)
            render_combine(b, k, blk, slot++, threads);
        else
            block_stmts(b, k, blk, "      ");
    }
    cstyle_put(b, "      if (threadIdx.x == 0) {\n");
    store_stmts(b, k, "        ");
    cstyle_put(b, "        kh_n_%s[g] = 0;\n      }\n    }\n", k->name);
    /* kh_last is written again by the next unit's thread 0 */
    cstyle_put(b, "    __syncthreads();\n  }\n}\n\n");
}

/* Reductions and row kernels: a block per output row, walking the plan's
 * blocks: outer values (computed by every thread alike), passes that finish
 * reductions, and in a row kernel a last pass that stores. */
static void render_phased(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    shared_decls(b, k, plan);
    cstyle_put(b, "  const kh_i64 N = %lldLL, R = %lldLL;\n", (long long)k->numel, (long long)k->rnumel);
    cstyle_put(b, "  for (kh_i64 g = blockIdx.x; g < N; g += gridDim.x) {\n");
    bool stored = false;
    for (int i = 0; i < plan->nblocks; i++) {
        const lower_block *blk = &plan->blocks[i];
        switch (blk->kind) {
        case LOWER_BLOCK_OUTER:
            block_stmts(b, k, blk, "    ");
            break;
        case LOWER_BLOCK_REDUCE:
            render_reduction(b, k, blk, plan->block_threads);
            break;
        case LOWER_BLOCK_SCATTER: {
            /* one thread walks the source elements in order, after the
             * block's threads have stored the row (and the pass before) */
            const lower_scatter_store *st = &k->scatter[blk->reduce];
            cstyle_put(b, "    __syncthreads();\n    if (threadIdx.x == 0)\n");
            cstyle_put(b, "    for (kh_i64 r = 0; r < %lldLL; r++) {\n", (long long)k->snumel);
            block_stmts(b, k, blk, "      ");
            if (st->valid >= 0)
                cstyle_put(b, "      if (v%d)\n  ", st->valid);
            cstyle_put(b, "      b0[v%d] = ", st->at);
            store_expr(b, k->out->dtype, st->value);
            cstyle_put(b, ";\n    }\n    __syncthreads();\n");
            break;
        }
        case LOWER_BLOCK_STORE:
            cstyle_put(b, "    for (kh_i64 r = threadIdx.x; r < R; r += %d) {\n", plan->block_threads);
            block_stmts(b, k, blk, "      ");
            store_stmts(b, k, "      ");
            cstyle_put(b, "    }\n");
            stored = true;
            break;
        }
    }
    if (!stored) {
        cstyle_put(b, "    if (threadIdx.x == 0) {\n");
        store_stmts(b, k, "      ");
        cstyle_put(b, "    }\n");
    }
    cstyle_put(b, "  }\n}\n\n");
}

/* A block owns the plan's output tile (64 x 64), its threads a 16 x 16 grid
 * each holding 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j, so that a
 * warp reads consecutive shared words). Each step along k stages ktile
 * columns of A and rows of B in shared memory, zero outside the matrices. */
static void render_matmul_mma(sbuf *b, const lower_kernel *k, const lower_plan *plan);

static void render_matmul(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    if (plan->mm.mma) {
        render_matmul_mma(b, k, plan);
        return;
    }
    kiln_dtype dt = plan->mm.acc;
    kiln_dtype at = buf_node(k, k->a.buf)->dtype, bt = buf_node(k, k->b.buf)->dtype;
    const char *acc = dt == KILN_F64 ? "double" : dt == KILN_F32 ? "float" : "kh_u64";
    int64_t nb = 1;
    for (int d = 0; d < k->nbatch; d++)
        nb *= k->batch[d];
    cstyle_put(b, "  enum { TM = %d, TK = %d };\n", plan->mm.tile, plan->mm.ktile);
    cstyle_put(b, "  __shared__ %s sa[TK][TM + 1], sb[TK][TM];\n", acc);
    cstyle_put(b, "  const kh_i64 NB = %lldLL, N = %lldLL, K = %lldLL, M = %lldLL;\n", (long long)nb,
        (long long)k->n, (long long)k->k, (long long)k->m);
    cstyle_put(b, "  const kh_i64 TN = (N + TM - 1) / TM, TMM = (M + TM - 1) / TM;\n");
    cstyle_put(b, "  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;\n");
    cstyle_put(b, "  for (kh_i64 tile = blockIdx.x; tile < NB * TN * TMM; tile += gridDim.x) {\n");
    cstyle_put(b, "    const kh_i64 bt = tile / (TN * TMM), i0 = (tile / TMM) %% TN * TM, "
           "j0 = tile %% TMM * TM;\n");
    cstyle_operand_offset(b, &cuda_target, "    ", "oa", k, &k->a);
    cstyle_operand_offset(b, &cuda_target, "    ", "ob", k, &k->b);
    cstyle_put(b, "    %s acc[4][4];\n", acc);
    cstyle_put(b, "    for (int i = 0; i < 4; i++)\n      for (int j = 0; j < 4; j++) acc[i][j] = 0;\n");
    cstyle_put(b, "    for (kh_i64 k0 = 0; k0 < K; k0 += TK) {\n");
    cstyle_put(b, "      for (int e = threadIdx.x; e < TM * TK; e += %d) {\n", plan->block_threads);
    cstyle_put(b, "        const int ai = e / TK, ak = e %% TK, bk = e / TM, bj = e %% TM;\n");
    cstyle_put(b, "        const kh_i64 ri = i0 + ai, ka = k0 + ak, kb = k0 + bk, cj = j0 + bj;\n");
    cstyle_put(b, "        sa[ak][ai] = ri < N && ka < K ? (%s)", acc);
    char idx[128];
    snprintf(idx, sizeof idx, "oa + ri * %lldLL + ka * %lldLL", (long long)k->a.row_stride,
             (long long)k->a.col_stride);
    load_expr(b, at, k->a.buf, idx);
    cstyle_put(b, " : (%s)0;\n", acc);
    cstyle_put(b, "        sb[bk][bj] = kb < K && cj < M ? (%s)", acc);
    snprintf(idx, sizeof idx, "ob + kb * %lldLL + cj * %lldLL", (long long)k->b.row_stride,
             (long long)k->b.col_stride);
    load_expr(b, bt, k->b.buf, idx);
    cstyle_put(b, " : (%s)0;\n", acc);
    cstyle_put(b, "      }\n      __syncthreads();\n");
    cstyle_put(b, "      for (int kk = 0; kk < TK; kk++) {\n");
    cstyle_put(b, "        %s av[4], bv[4];\n", acc);
    cstyle_put(b, "        for (int i = 0; i < 4; i++) { av[i] = sa[kk][ty + 16 * i]; "
           "bv[i] = sb[kk][tx + 16 * i]; }\n");
    cstyle_put(b, "        for (int i = 0; i < 4; i++)\n");
    cstyle_put(b, "          for (int j = 0; j < 4; j++) acc[i][j] = kh_fma(av[i], bv[j], acc[i][j]);\n");
    cstyle_put(b, "      }\n      __syncthreads();\n    }\n");
    cstyle_put(b, "    for (int i = 0; i < 4; i++)\n      for (int j = 0; j < 4; j++) {\n");
    cstyle_put(b, "        const kh_i64 row = i0 + ty + 16 * i, col = j0 + tx + 16 * j;\n");
    cstyle_put(b, "        if (row >= N || col >= M) continue;\n");
    cstyle_put(b, "        const kh_i64 g = bt * N * M + row * M + col;\n");
    cstyle_put(b, "        const %s dot = acc[i][j];\n", acc);
    for (int i = 0; i < plan->nblocks; i++)
        block_stmts(b, k, &plan->blocks[i], "        ");
    store_stmts(b, k, "        ");
    cstyle_put(b, "      }\n  }\n}\n\n");
}

/* A product through the tensor cores (plan->mm.mma): f16 or bf16 operands,
 * or f32 ones rounded to TF32 (cvt.rna). The block's 64 x 64 tile is four
 * warps' 32 x 32 quarters, each 2 x 4 mma.sync tiles of 16 x 8 with f32
 * accumulators, over k steps of 16 staged in shared memory (zero outside
 * the matrices; halves as their own 16-bit patterns), A by rows and B by
 * columns. The fragments (PTX ISA, "matrix fragments for mma.m16n8k16" and
 * "mma.m16n8k8"; g = lane / 4, t = lane % 4), rows of A and C and columns of
 * B at g and g + 8:
 *   m16n8k16 (f16, bf16: two halves a register): a0 (g, 2t..2t+1), a1
 *     (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..); b0 (2t..2t+1, g), b1
 *     (2t+8.., g);
 *   m16n8k8 (TF32, one a register): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3
 *     (g+8, t+4); b0 (t, g), b1 (t+4, g);
 *   both: c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1).
 * The epilogue then runs per element as the FMA kernel's does. */
static void render_matmul_mma(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    kiln_dtype at = buf_node(k, k->a.buf)->dtype;
    bool tf32 = at == KILN_F32;
    const char *ty = at == KILN_BF16 ? "bf16" : "f16";
    int64_t nb = 1;
    for (int d = 0; d < k->nbatch; d++)
        nb *= k->batch[d];
    cstyle_put(b, "  enum { TM = %d, TK = %d };\n", plan->mm.tile, plan->mm.ktile);
    /* rows padded by 8 elements, so that the eight rows a fragment read
     * touches fall in different banks */
    cstyle_put(b, "  __shared__ __align__(16) %s sa[TM][TK + 8], sb[TM][TK + 8];\n",
               tf32 ? "float" : "kh_u16");
    cstyle_put(b, "  const kh_i64 NB = %lldLL, N = %lldLL, K = %lldLL, M = %lldLL;\n", (long long)nb,
        (long long)k->n, (long long)k->k, (long long)k->m);
    cstyle_put(b, "  const kh_i64 TN = (N + TM - 1) / TM, TMM = (M + TM - 1) / TM;\n");
    cstyle_put(b, "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n");
    cstyle_put(b, "  const int gr = lane >> 2, t4 = lane & 3, wm = (warp >> 1) * 32, wn = (warp & 1) * 32;\n");
    cstyle_put(b, "  for (kh_i64 tile = blockIdx.x; tile < NB * TN * TMM; tile += gridDim.x) {\n");
    cstyle_put(b, "    const kh_i64 bt = tile / (TN * TMM), i0 = (tile / TMM) %% TN * TM, "
           "j0 = tile %% TMM * TM;\n");
    cstyle_operand_offset(b, &cuda_target, "    ", "oa", k, &k->a);
    cstyle_operand_offset(b, &cuda_target, "    ", "ob", k, &k->b);
    cstyle_put(b, "    float acc[2][4][4];\n");
    cstyle_put(b, "    for (int i = 0; i < 2; i++)\n      for (int j = 0; j < 4; j++)\n"
                  "        for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;\n");
    cstyle_put(b, "    for (kh_i64 k0 = 0; k0 < K; k0 += TK) {\n");
    cstyle_put(b, "      for (int e = threadIdx.x; e < TM * TK; e += %d) {\n", plan->block_threads);
    cstyle_put(b, "        const int r = e / TK, c = e %% TK;\n");
    cstyle_put(b, "        const kh_i64 ri = i0 + r, cj = j0 + r, kc = k0 + c;\n");
    const char *zero = tf32 ? "0.0f" : "(kh_u16)0";
    cstyle_put(b, "        sa[r][c] = ri < N && kc < K ? b%d[oa + ri * %lldLL + kc * %lldLL] : %s;\n",
               k->a.buf, (long long)k->a.row_stride, (long long)k->a.col_stride, zero);
    cstyle_put(b, "        sb[r][c] = cj < M && kc < K ? b%d[ob + kc * %lldLL + cj * %lldLL] : %s;\n",
               k->b.buf, (long long)k->b.row_stride, (long long)k->b.col_stride, zero);
    cstyle_put(b, "      }\n      __syncthreads();\n");
    if (tf32) {
        cstyle_put(b, "      for (int ks = 0; ks < TK; ks += 8) {\n");
        cstyle_put(b, "      kh_u32 af[2][4], bf[4][2];\n");
        cstyle_put(b, "      for (int i = 0; i < 2; i++) {\n");
        cstyle_put(b, "        const int r = wm + 16 * i + gr;\n");
        cstyle_put(b, "        const float x[4] = {sa[r][ks + t4], sa[r + 8][ks + t4], sa[r][ks + t4 + 4], "
                      "sa[r + 8][ks + t4 + 4]};\n");
        cstyle_put(b, "        for (int q = 0; q < 4; q++) asm(\"cvt.rna.tf32.f32 %%0, %%1;\" : \"=r\"(af[i][q]) "
                      ": \"f\"(x[q]));\n      }\n");
        cstyle_put(b, "      for (int j = 0; j < 4; j++) {\n");
        cstyle_put(b, "        const int c = wn + 8 * j + gr;\n");
        cstyle_put(b, "        asm(\"cvt.rna.tf32.f32 %%0, %%1;\" : \"=r\"(bf[j][0]) : \"f\"(sb[c][ks + t4]));\n");
        cstyle_put(b, "        asm(\"cvt.rna.tf32.f32 %%0, %%1;\" : \"=r\"(bf[j][1]) : \"f\"(sb[c][ks + t4 + 4]));\n");
        cstyle_put(b, "      }\n");
    } else {
        cstyle_put(b, "      {\n      kh_u32 af[2][4], bf[4][2];\n");
        cstyle_put(b, "      for (int i = 0; i < 2; i++) {\n");
        cstyle_put(b, "        const int r = wm + 16 * i + gr;\n");
        cstyle_put(b, "        af[i][0] = *(const kh_u32 *)&sa[r][2 * t4];\n");
        cstyle_put(b, "        af[i][1] = *(const kh_u32 *)&sa[r + 8][2 * t4];\n");
        cstyle_put(b, "        af[i][2] = *(const kh_u32 *)&sa[r][2 * t4 + 8];\n");
        cstyle_put(b, "        af[i][3] = *(const kh_u32 *)&sa[r + 8][2 * t4 + 8];\n      }\n");
        cstyle_put(b, "      for (int j = 0; j < 4; j++) {\n");
        cstyle_put(b, "        const int c = wn + 8 * j + gr;\n");
        cstyle_put(b, "        bf[j][0] = *(const kh_u32 *)&sb[c][2 * t4];\n");
        cstyle_put(b, "        bf[j][1] = *(const kh_u32 *)&sb[c][2 * t4 + 8];\n      }\n");
    }
    cstyle_put(b, "      for (int i = 0; i < 2; i++)\n        for (int j = 0; j < 4; j++)\n");
    if (tf32)
        cstyle_put(b, "          asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 ");
    else
        cstyle_put(b, "          asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 ", ty, ty);
    cstyle_put(b, "{%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, %%9}, {%%0, %%1, %%2, %%3};\"\n");
    cstyle_put(b, "                       : \"+f\"(acc[i][j][0]), \"+f\"(acc[i][j][1]), "
                  "\"+f\"(acc[i][j][2]), \"+f\"(acc[i][j][3])\n");
    cstyle_put(b, "                       : \"r\"(af[i][0]), \"r\"(af[i][1]), \"r\"(af[i][2]), "
                  "\"r\"(af[i][3]), \"r\"(bf[j][0]), \"r\"(bf[j][1]));\n");
    cstyle_put(b, "      }\n      __syncthreads();\n    }\n");
    cstyle_put(b, "    for (int i = 0; i < 2; i++)\n      for (int j = 0; j < 4; j++)\n"
                  "        for (int q = 0; q < 4; q++) {\n");
    cstyle_put(b, "        const kh_i64 row = i0 + wm + 16 * i + gr + (q >> 1) * 8, "
                  "col = j0 + wn + 8 * j + 2 * t4 + (q & 1);\n");
    cstyle_put(b, "        if (row >= N || col >= M) continue;\n");
    cstyle_put(b, "        const kh_i64 g = bt * N * M + row * M + col;\n");
    cstyle_put(b, "        const float dot = acc[i][j][q];\n");
    for (int i = 0; i < plan->nblocks; i++)
        block_stmts(b, k, &plan->blocks[i], "        ");
    store_stmts(b, k, "        ");
    cstyle_put(b, "      }\n  }\n}\n\n");
}

static void render_kernel(sbuf *b, const lower_kernel *k, const lower_plan *plan) {
    b->narrow = plan->narrow;
    if (k->kind == LOWER_ATTENTION && k->numel > 0)
        jit_cuda_render_attention_exp(b, k, plan); /* the function its body calls */
    if (plan->row_blocks > 0 && k->numel > 0)
        split_decls(b, k, plan);
    params(b, k, plan);
    /* Nothing to compute (the kernel is never launched); a body would only
     * divide by the empty sizes. */
    if (k->numel <= 0)
        cstyle_put(b, "}\n\n");
    else if (k->kind == LOWER_MATMUL && (lower_operand_split(&k->a) || lower_operand_split(&k->b)))
        /* made only for targets that pack them (LOWER_SPLIT_OPERANDS) */
        cstyle_refuse_buf(b, "kiln: the CUDA renderer cannot read the split operand of a matmul");
    else if (k->kind == LOWER_MATMUL)
        render_matmul(b, k, plan);
    else if (k->kind == LOWER_ATTENTION)
        jit_cuda_render_attention(b, k, plan);
    else if (k->kind == LOWER_ELEMENTWISE)
        render_elementwise(b, k, plan);
    else if (plan->row_blocks > 0)
        render_split(b, k, plan);
    else
        render_phased(b, k, plan);
}

kiln_status jit_cuda_render(const lower_program *p, const lower_plan *plans, char **out, char *msg,
                            size_t cap) {
    sbuf b = {0};
    b.err = msg;
    b.errcap = cap;
    cstyle_put(&b, "%s\n", prelude);
    for (int i = 0; i < p->nkernels; i++)
        if (lower_kind_has_code(p->kernels[i].kind))
            render_kernel(&b, &p->kernels[i], &plans[i]);
    return cstyle_finish(&b, "CUDA code", out);
}
