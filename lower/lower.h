/* lower.h — lower/'s face: a captured graph cut into kernels, and the kernel
 * IR that every target renders.
 *
 * A kernel is a tile program. Its grid covers the output's elements in tiles
 * of `tile` elements; a program instance computes one tile. Inside, the IR is
 * a list of SSA instructions evaluated per element of the tile: index
 * arithmetic, masked loads, ALU ops, and for reductions an accumulation over
 * the reduced elements (instructions marked `inner` run once per reduced
 * element). On the CPU a program instance is an OpenMP iteration whose tile
 * loop vectorises; on CUDA it is a thread block with the tile spread over its
 * threads. Matmul kernels carry their operand layouts, and targets render them
 * as tiled, register-blocked dot products; their instruction list is the
 * epilogue applied to each finished dot product (UOP_ACC) before it is stored
 * (a bias, an activation).
 *
 * A kernel's buffers are one array: its nouts outputs first, then its inputs
 * in order. UOP_LOAD's buf and a matmul operand's buf index that array. A
 * kernel with several outputs (siblings that read the same inputs over the
 * same grid) stores results[i] into outs[i], each at the index `store`. */
#ifndef KILN_LOWER_H
#define KILN_LOWER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/graph.h"

typedef enum lower_uop {
    UOP_GIDX,  /* i64: flat index of the output element */
    UOP_RIDX,  /* i64: flat index among the reduced elements (inner); in a scatter kernel,
                  the element of the current pass over the row (imm.i: the pass's length,
                  so that passes of different lengths are different values) */
    UOP_TILE,  /* i64: in an elementwise kernel, the program instance (tile) of the element:
                  its flat index is TILE * tile + LANE. Two values instead of one flat
                  index, so that a coordinate that lies within a tile (or outside) folds
                  to lane (or tile) arithmetic alone and a contiguous load's index stays
                  linear in the lane: a plain vector load, not a gather */
    UOP_LANE,  /* i64: the element's place in its tile, 0 to tile - 1 */
    UOP_IMM,   /* an immediate of dt */
    UOP_IADD,  /* i64 index arithmetic on values >= 0 */
    UOP_IMUL,
    UOP_IDIV,
    UOP_IMOD,
    UOP_ILT,   /* bool: a < b on i64 */
    UOP_AND,   /* bool: a && b */
    UOP_ICLAMP, /* i64 index from the integer value a (of a's dtype, loaded or computed):
                   a clamped into [0, imm.i - 1] (0 when imm.i is 0), the data-dependent
                   coordinate a gather reads at */
    UOP_IVALID, /* bool: 0 <= a < imm.i for the integer value a (of a's dtype) */
    UOP_LOAD,  /* dt: input buf at index a when valid b holds (b < 0: always), else 0 */
    UOP_ALU,   /* dt: graph op gop (unary, cast, binary, comparison) on a (and b), as the
                  scheduler emits it; lower_rules() rewrites every one into UOP_PRIMs */
    UOP_WHERE, /* dt: a ? b : c */
    UOP_RAND,  /* dt: Philox value (gop GRAPH_RAND or GRAPH_RANDN) at index a, seed imm.i */
    UOP_REDUCE, /* dt: gop SUM/RMAX/RMIN/ARGMAX/ARGMIN of inner value a over RIDX */
    UOP_ACC,    /* dt: in a matmul kernel, the finished dot product of output element GIDX */
    UOP_PRIM,   /* dt: primitive `prim` on a (and b, c): after lower_rules(), the only
                   arithmetic a renderer sees */
    UOP_NUM_OPS
} lower_uop;

/* Whether x computes an index value (i64, with the bounds min and max that
 * decide whether a kernel's indices fit int32): the index arithmetic and a
 * gather's clamped coordinate, not immediates. */
static inline bool lower_uop_is_index(lower_uop op) {
    return (op <= UOP_IMOD && op != UOP_IMM) || op == UOP_ICLAMP;
}

/* The primitive instruction set. Every target renders each of these for every
 * dtype the primitive's line allows (or refuses the kernel by name); composite
 * ops (exp, tanh, gelu, Philox, half conversions, floor division …) are
 * rewritten into them once, in lower/, by rules whose error bounds are stated
 * beside them. Semantics are total: no input is undefined behaviour.
 * Floats compute in their own type (f16/bf16 values live in f32); integers
 * wrap at dt's width; bool is 0 or 1. */
typedef enum lower_prim {
    PRIM_NEG,    /* -a */
    PRIM_ADD,    /* a + b */
    PRIM_SUB,    /* a - b */
    PRIM_MUL,    /* a * b */
    PRIM_DIV,    /* floats: IEEE a / b; integers: truncating, a / 0 = 0, MIN / -1 = MIN */
    PRIM_MOD,    /* integers: remainder with a's sign (C), a % 0 = 0 */
    PRIM_FMA,    /* floats: a * b + c rounded once */
    PRIM_MAX,    /* floats: NaN if either is NaN, else the larger, a on ties */
    PRIM_MIN,    /* floats: NaN if either is NaN, else the smaller, a on ties */
    PRIM_ABS,    /* floats: sign cleared; integers: wrapping |a| */
    PRIM_SQRT,   /* floats, correctly rounded */
    PRIM_EXP2,   /* floats: 2^a */
    PRIM_EXP,    /* floats: e^a, as the platform's libm computes it (below 1 ulp). A
                    primitive, not a rule: Cody-Waite reduction around exp2 made every
                    exp-bound kernel slower (softmax over 4096x4096 rows 2.0x, the
                    transformer block 1.3x), as long as exp2 itself is a scalar call */
    PRIM_LOG2,   /* floats: log2(a) */
    PRIM_LOG,    /* floats: the natural log, as the platform's libm computes it. Only
                    kiln_randn's Box-Muller uses it: graph/philox.c (the oracle) calls
                    libm's log, and its numbers must match bit for bit on every CPU
                    executor, which log2 times ln 2 cannot promise */
    PRIM_ERFC,   /* floats: the complementary error function, as libm computes it (glibc:
                    below 1 ulp in f32, 5 in f64). A primitive for now: an f64 erfc as
                    a rule needs piecewise minimax fits to keep a few-ulp bound in the
                    tail, where GELU's value is x times it; gelu's rule uses it */
    PRIM_POW,    /* floats: a^b, as libm computes it (below 1 ulp, every IEEE special
                    case). exp2(b log2 a) loses up to |b log2 a| ulp in the product
                    unless log2 is carried in double-double, and integer powers of a
                    negative base need the parity of b: rules_int.c covers integers */
    /* The rest of libm, for the ops users reach for now and then: each as the
     * platform's libm computes it (glibc: below 1 ulp in f32, a few in f64; CUDA's
     * libdevice states its own bounds). Primitives, not rules: none is in a hot
     * path of any workload kiln measures, and a rule per function with its own
     * range reduction and minimax fit would cost more code than every renderer's
     * one line each; a function that becomes hot gets a rule, as exp and tanh did */
    PRIM_TAN,
    PRIM_ASIN,
    PRIM_ACOS,
    PRIM_ATAN,
    PRIM_ATAN2, /* atan2(a, b) */
    PRIM_SINH,
    PRIM_COSH,
    PRIM_ASINH,
    PRIM_ACOSH,
    PRIM_ATANH,
    PRIM_ERF,
    PRIM_EXPM1,
    PRIM_LOG1P,
    PRIM_FMOD,  /* a - trunc(a / b) b, exact */
    PRIM_SIN,    /* floats */
    PRIM_COS,    /* floats */
    PRIM_FLOOR,  /* floats */
    PRIM_TRUNC,  /* floats */
    PRIM_LT,     /* bool from a and b of the operands' dtype: a < b (IEEE: false on NaN) */
    PRIM_LE,     /* a <= b */
    PRIM_EQ,     /* a == b */
    PRIM_NE,     /* a != b (true on NaN) */
    PRIM_AND,    /* integers and bool: bitwise */
    PRIM_OR,
    PRIM_XOR,
    PRIM_SHL,    /* integers: a << b, 0 <= b < width */
    PRIM_SHR,    /* integers: logical shift of a's bit pattern, 0 <= b < width */
    PRIM_CAST,   /* to dt from a's dtype: floats round to nearest even; integers wrap;
                    float to integer truncates and needs a in range (rules clamp first);
                    to bool: a != 0 */
    PRIM_BITCAST, /* the same bits as dt: f32 <-> i32, f64 <-> i64 */
    PRIM_NUM
} lower_prim;

const char *lower_prim_name(lower_prim p);
/* How many operands p takes (1 to 3). */
int lower_prim_arity(lower_prim p);
/* The libm function a float primitive is ("erfc", "atan2"; f32 adds the
 * suffix f), NULL for one that a target renders its own way. */
const char *lower_prim_libm(lower_prim p);
const char *lower_uop_name(lower_uop op);

typedef struct lower_ins {
    lower_uop op;
    kiln_dtype dt;
    graph_op gop;
    lower_prim prim; /* UOP_PRIM */
    int a, b, c;
    graph_scalar imm;
    int buf;
    bool inner;
    bool lane; /* index values: whether it depends on UOP_LANE (derived, as inner) */
    int64_t min, max; /* index values: bounds (inclusive) over every lane, masked
                         ones included; a target may pick a narrower type */
    bool nonneg;      /* UOP_REDUCE, a float sum: every value it adds is zero or above
                         (or NaN, or -inf from a division by -0, which ends any sum
                         alike), as the ops before lower_rules show (e^x, a square,
                         |x|, ...): no cancellation for a float accumulator to lose */
    int sized;        /* UOP_IMM: 0, or 1 + the run-time size (lower/sizes.c) that the
                         code reads this immediate from instead of printing imm */
} lower_ins;

/* LOWER_ALIAS runs no code: its output is a reshape of its one input and
 * shares the input's buffer. LOWER_COLLECTIVE runs no generated code either:
 * its output is a collective (GRAPH_ALL_REDUCE …) of its one input, which is
 * materialised contiguous in memory of its own, and the runtime hands both
 * to dist/. */
/* LOWER_SCATTER: one program instance per row of the output along the
 * scattered axis (every position off the axis): a pass over the row's rnumel
 * places stores the destination's value (results and store, as a row
 * kernel's last pass), then each of the kernel's scatter passes walks the
 * row's snumel source elements in order, serially, and stores `value` at
 * `at` where `valid` holds. A pass's values may load the output itself
 * (buffer 0) at `at`: what the element before left there. Rows own disjoint
 * places, so rows run in parallel with no atomics, and the order inside a
 * row makes the result deterministic (the last assignment wins). */
typedef enum lower_kind {
    LOWER_ELEMENTWISE,
    LOWER_REDUCE,
    LOWER_MATMUL,
    LOWER_ALIAS,
    LOWER_COLLECTIVE,
    LOWER_SCATTER,
    LOWER_ATTENTION
} lower_kind;

/* One scatter pass's store (instruction ids; valid -1: always). */
typedef struct lower_scatter_store {
    int value, at, valid;
} lower_scatter_store;

/* Whether a kernel of kind k is generated code (a renderer's business). */
bool lower_kind_has_code(lower_kind k);

/* Strides (in elements) of a matmul operand over its base buffer.
 *
 * A split operand's rows or columns are several axes of its base, which no
 * single stride reaches: the im2col view of a convolution's padded input,
 * whose rows are (channel, tap...) and whose columns are output positions.
 * A row index then splits row-major into nrdims axes of sizes rsize and
 * strides rstride (likewise a column index: ncdims, csize, cstride), and
 * row_stride (col_stride) is 0. Reading it in place spares the copy that
 * materialising the view would take (9x the input for a 3x3 kernel). Only a
 * target that says it packs them gets them (LOWER_SPLIT_OPERANDS), and only
 * as B; nrdims and ncdims are 0 on every other operand. */
enum { LOWER_SPLIT_DIMS = 4 };
typedef struct lower_operand {
    int buf;
    int64_t offset;
    int64_t batch_strides[KILN_MAX_DIMS];
    int64_t row_stride, col_stride;
    int nrdims, ncdims;
    int64_t rsize[LOWER_SPLIT_DIMS], rstride[LOWER_SPLIT_DIMS];
    int64_t csize[LOWER_SPLIT_DIMS], cstride[LOWER_SPLIT_DIMS];
    /* A split operand read through a pad (its zeros no stride reaches): the
     * pad's masked axes, each with its bounds [mlo, mhi) and the coordinate
     * at the operand's first element; a row or column axis that moves along
     * masked axis m has rmask (cmask) m and its step there, others -1. An
     * element is read where every masked coordinate lies within its bounds,
     * and is 0 elsewhere. */
    int nmasks;
    int64_t mlo[LOWER_SPLIT_DIMS], mhi[LOWER_SPLIT_DIMS], morigin[LOWER_SPLIT_DIMS];
    int8_t rmask[LOWER_SPLIT_DIMS], cmask[LOWER_SPLIT_DIMS];
    int64_t rstep[LOWER_SPLIT_DIMS], cstep[LOWER_SPLIT_DIMS];
} lower_operand;

static inline bool lower_operand_split(const lower_operand *o) {
    return o->nrdims > 0 || o->ncdims > 0;
}

/* LOWER_ATTENTION: GRAPH_ATTENTION or a backward op of it (see graph.h), as one
 * hand-blocked kernel per target: batch dims as a matmul's (lower_kernel.nbatch,
 * batch), l queries, s keys, d the width of q and k, dv v's; each source read as
 * strides (its rows, columns and batch strides: q, k, v, then for the backward
 * go, lse and delta, whose col_stride is unused). The output is contiguous
 * (its own buffer, row-major). The kernel's instructions compute e^x of
 * x = UOP_ACC in the node's dtype (f32 for f16 and bf16), as lower's exp
 * rule does everywhere (results[0]): a renderer prints them as a function
 * its loops call. */
enum { LOWER_ATT_STORES = 3 };
typedef struct lower_attention {
    graph_op op;     /* joint: GRAPH_ATTENTION_DKV, and the dq of the same sources
                        (LOWER_JOINT_ATTENTION_GRADS) */
    bool joint;
    int64_t l, s, d, dv;
    double scale;
    bool causal;
    int nsrc;
    lower_operand src[6];
    /* Where the values go, piece by piece: the forward's o (dv columns) and
     * lse (1); dq (d); dkv's dk (d) and dv (dv); the joint kernel's dk, dv,
     * dq. Piece p's element (batch..., row, c) is element offset + the batch
     * strides' dot + row * row_stride + c of the buffer of outs[store[p].buf]
     * (columns at stride 1; col_stride and the split fields unused). Each
     * output's own row-major layout ([..., L, Dv + 1], [..., L, D], [..., S,
     * D + Dv]; the joint kernel's dkv then dq as outs[0] and outs[1]), except
     * where the joint kernel stores into a cat (lower/stores.c): then outs is
     * the cat alone and every piece is its region. A forward with a second
     * output (a view of o that was only a copy of it) stores o there as a
     * third piece. */
    int nstores;
    lower_operand store[LOWER_ATT_STORES];
} lower_attention;

typedef struct lower_kernel {
    char name[96];   /* unique in its program: "matmul_add_relu_8x12x16_k0" */
    int dims_at, dims_len; /* where the sizes are in name ("8x12x16") */
    char symbol[96]; /* with run-time sizes, the code's name for it: name with "n" for
                        the sizes, so that programs differing in them print alike */
    char fused[160]; /* the graph ops computed in it, counted: "sub exp max sum div" */
    lower_kind kind;
    int nouts;
    graph_node **outs;   /* the nodes this kernel realizes */
    graph_node *out;     /* outs[0] */
    int ninputs;
    graph_node **inputs; /* nodes read, realized before the kernel runs */
    int nins;
    lower_ins *ins;
    int *results;    /* per output, the instruction whose value is stored */
    int result;      /* results[0] */
    int store;       /* instruction giving the output index it is stored at: the
                        output element (GIDX), or, in a row kernel, an inner
                        index: the row is stored in a last pass over it */
    int64_t numel;   /* program instances' output rows: elements, or in a row kernel rows */
    int64_t rnumel;  /* reduced elements per output element (1 if none) */
    int64_t tile;    /* output elements per program instance */
    /* A materialised cat of several sources is one elementwise kernel per
     * source, each storing its source's region of outs[0] (no select chain:
     * every element read once, from one source, at an index linear in the
     * element). They run in order, and the first (region 0) is the one that
     * allocates outs[0]; region j > 0 writes into that buffer. 0 otherwise. */
    int region;
    /* LOWER_SCATTER: source elements per row, and the passes over them */
    int64_t snumel;
    int nscatter;
    lower_scatter_store scatter[2];
    /* LOWER_MATMUL */
    int nbatch;
    int64_t batch[KILN_MAX_DIMS];
    int64_t n, k, m;
    lower_operand a, b;
    /* LOWER_ATTENTION */
    lower_attention att;
    /* Run-time sizes (lower_sizes_mark): the numbers of this kernel and its plan
     * that its code takes from an array of int64 (S[j]) instead of as literals,
     * and their values here, which the launch passes (a float immediate's as the
     * bits of a double). */
    int nsizes;
    const void **size_at;
    int64_t *size_value;
} lower_kernel;

/* Piece p of an attention kernel's values (lower_attention.store): its
 * columns, and whether its rows are the keys (dk, dv) or the queries. */
static inline int64_t lower_att_piece_cols(const lower_attention *a, int p) {
    if (a->op == GRAPH_ATTENTION)
        return p == 1 ? 1 : a->dv; /* o, lse, then o again where it is copied */
    return a->op == GRAPH_ATTENTION_DKV && p == 1 ? a->dv : a->d;
}
static inline bool lower_att_piece_on_keys(const lower_attention *a, int p) {
    return a->op == GRAPH_ATTENTION_DKV && p < 2;
}

/* Whether k is the joint attention backward (LOWER_JOINT_ATTENTION_GRADS):
 * dkv and dq in one kernel (see lower_attention.store for where each goes). */
static inline bool lower_joint_attention(const lower_kernel *k) {
    return k->kind == LOWER_ATTENTION && k->att.joint;
}

typedef struct lower_program {
    int nkernels;
    lower_kernel *kernels; /* in execution order */
} lower_program;

/* lower_schedule_program's flags. */
enum {
    /* Fuse; without it every op is its own kernel (eager mode's baseline). */
    LOWER_FUSE = 1u,
    /* The target renders an attention backward as one kernel: GRAPH_ATTENTION_DKV
     * and a GRAPH_ATTENTION_DQ of the same sources and parameters, in one run,
     * become one LOWER_ATTENTION kernel with outs {dkv, dq}, which computes each
     * tile's probabilities once for both (five products where the two kernels
     * take seven). Only with LOWER_FUSE, and only where the batch has at least
     * LOWER_JOINT_ATTENTION_BATCH matrices: the joint kernel is one program
     * instance per matrix (dq sums over every key block), so fewer would leave
     * threads idle that the two kernels' blocks keep busy. Such a target
     * also stores a piece wherever lower_attention.store puts it: where dk,
     * dv and dq are read only by one cat of views of them (the gradient of
     * a fused qkv projection), the joint kernel stores into the cat's
     * regions and nothing copies them there (lower/stores.c). */
    LOWER_JOINT_ATTENTION_GRADS = 2u,
    /* The target packs split matmul operands (lower_operand): a matmul's B
     * that is a reshape of a view over a buffer, where the view reads the
     * buffer's elements several times each (an im2col), is read in place
     * from that buffer instead of being copied out first. Only with
     * LOWER_FUSE. */
    LOWER_SPLIT_OPERANDS = 4u,
    /* The target runs an elementwise kernel's tiles as loops that vectorise
     * well however short (a CPU): where a tile of ELEMENTWISE_TILE elements
     * leaves an element's place in its tile divided (a view's coordinates
     * recovered from the flat index: a convolution's im2col over rows of
     * 14), the kernel's tile is one output row instead, so that those
     * divisions are the row's, once per row, and the row's loads are plain
     * vector loads rather than gathers (emit.c: row_tile). */
    LOWER_ROW_TILES = 8u
};
enum { LOWER_JOINT_ATTENTION_BATCH = 16 };

/* Cuts the graph below the n target nodes into kernels, into *out, as flags
 * say (true: LOWER_FUSE). On failure *out is NULL and msg names what failed:
 * KILN_ERR_OOM, or KILN_ERR_COMPILE for a graph the scheduler cannot cut. The
 * program holds references to every node it names. */
kiln_status lower_schedule_program(int n, graph_node *const *targets, unsigned flags,
                                   lower_program **out, char *msg, size_t cap);
/* As lower_schedule_program, NULL on any failure. */
lower_program *lower_schedule(int n, graph_node *const *targets, unsigned flags);
void lower_program_free(lower_program *p);

/* The readable text form of a kernel (KILN_DEBUG=3). */
void lower_print_kernel(FILE *f, const lower_kernel *k);

/* Fills k->fused from the n graph nodes computed in k (each listed once):
 * their ops in order of first use, repeats counted ("add×2 exp"), constants
 * left out. */
void lower_describe_fused(lower_kernel *k, int n, graph_node *const *nodes);

/* ---- rules: composite ops into primitives (lower/rules*.c) ---- */

/* Rewrites k's instructions so that no UOP_ALU or UOP_RAND is left: each
 * becomes UOP_PRIMs (and immediates, selects). Results, the store index and
 * reductions are renumbered with them. false when out of memory. */
bool lower_rules(lower_kernel *k);

/* ---- plans: every decision a renderer needs, made here (lower/plan.c) ---- */

/* What a target tells the planner about itself. */
typedef struct lower_target {
    const char *name;   /* "cpu", "cuda": part of the plan's key */
    bool gpu;           /* program instances are thread blocks, not loop iterations */
    int vector_bytes;   /* CPU: the widest vector register (64 with AVX-512, 32 AVX2) */
    int block_threads;  /* GPU: threads of an elementwise block */
    bool mma;           /* GPU: tensor cores that take mma.sync m16n8k16 in f16 and bf16
                           and m16n8k8 in TF32, with f32 accumulators (sm_80 on) */
    bool tf32;          /* GPU: f32 products may round their operands to TF32
                           (KILN_ALLOW_TF32=1) */
} lower_target;

/* A block of a kernel's body: instructions computed once per program
 * instance's element (or row), or in a pass over the reduced elements. */
typedef enum lower_block_kind {
    LOWER_BLOCK_OUTER,  /* once per output element (a row kernel: per row) */
    LOWER_BLOCK_REDUCE, /* a pass over the reduced elements accumulating `reduce` */
    LOWER_BLOCK_STORE,  /* a last pass over the reduced elements that stores */
    LOWER_BLOCK_SCATTER /* a scatter kernel's pass over a row's source elements, in order,
                           storing scatter[reduce] (never vectorised, never split) */
} lower_block_kind;

typedef struct lower_block {
    lower_block_kind kind;
    int reduce;         /* LOWER_BLOCK_REDUCE: the UOP_REDUCE instruction it finishes;
                           LOWER_BLOCK_SCATTER: which of the kernel's scatter stores */
    int stash;          /* -1, or an inner value a row kernel computes in a sum pass and
                           needs again in its store pass (softmax's exp): the sum pass
                           (REDUCE) also stores it into output 0 at the store index, and
                           the store pass (STORE) loads it from there instead of computing
                           it; lower_plan_program decides (see plan_stash) */
    int n;
    int *ins;           /* the instructions computed, in order (dead ones never appear) */
} lower_block;

/* Matmul blocking. On a CPU: a register tile of mr rows by nv vectors of
 * `lanes` accumulators; cache blocks of mc rows by nc columns over kc steps
 * of k, B packed per block, A read in place when a_direct (else packed). On a
 * GPU: a block owns a tile x tile output tile, stepping k by ktile. */
typedef struct lower_mm_plan {
    kiln_dtype acc;     /* the type products accumulate in: f32, f64, or (integers) u64 */
    int mr, nv, lanes;
    int64_t mc, nc, kc;
    bool a_direct;
    int pack_tr;        /* CPU: B read along k (a w^T: k contiguous, f32) packs through
                           pack_tr x pack_tr transposes in vector registers, 16 with
                           64-byte vectors, 8 with 32-byte ones, where its panels of
                           lanes x nv columns are whole blocks; 0: element copies */
    int tile, ktile;
    bool mma;           /* GPU: f16 or bf16 operands (or f32 ones rounded to TF32) through
                           the tensor cores (4 warps, each a 32 x 32 quarter of the tile in
                           m16n8k16 steps, m16n8k8 for TF32) */
} lower_mm_plan;

/* Attention blocking: a program instance owns bq queries (the forward and dq)
 * or bk keys (dkv) and walks the other side in tiles of bk keys (bq queries).
 * On a GPU the block's threads are block_threads. On a CPU the products'
 * register tiles are up to mr rows (then 4, then 2) by up to nv vectors. */
typedef struct lower_att_plan {
    int64_t bq, bk;
    int mr, nv;
} lower_att_plan;

typedef struct lower_plan {
    int nblocks;
    lower_block *blocks; /* in order; after the last, the stores (unless it is a STORE pass) */
    bool narrow;        /* every index value, masked lanes included, fits int32 */
    bool split;         /* few long rows: each pass over a row is split across threads
                           (a GPU: across row_blocks program instances) */
    int split_streams;  /* split: each thread's share of a sum pass over a row read as
                           this many streams at once (its share cut in as many parts);
                           a renderer may read it as one (the same sum, another order
                           of additions in double). 0 otherwise */
    int64_t columns;    /* a sum down columns (every load contiguous along the outputs,
                           strided along the reduced elements: a bias gradient), or a
                           sum, max or min over a small fixed window (pooling): the
                           outputs in chunks of this many, each chunk's partial sums a
                           row in cache that the input's rows are added into, rather
                           than one strided walk per output; 0: per output */
    int column_step;    /* columns: the input's rows taken into a chunk's partial results
                           per pass over the chunk (each output's elements still in
                           order): a partial result loaded and stored once for that
                           many rows, and that many streams read at once. A renderer
                           may take them one at a time (the same sums) */
    int64_t rows;       /* columns: 0, or the outputs walked as rows of this many, chunks of
                           whole rows (columns a multiple of it), a vector loop along each
                           row: every division of the flat output index by a multiple of
                           it (the output's coordinates, the places it reads) then a
                           division of the row's index, once per row, and the places
                           loaded along a row linear in it. A renderer may still walk the
                           outputs flat (the same elements, each one's sum in the same
                           order). CPU, 256-bit vectors only (see plan.c) */
    int64_t parallel;   /* 1: enough work to spread over threads (a number, not a bool,
                           so that a program shared by several sizes reads it at run
                           time: lower_sizes_mark) */
    int64_t grid;       /* program instances */
    int block_threads;  /* GPU: threads per program instance */
    int64_t row_blocks; /* GPU, split: program instances per row (grid: numel x row_blocks),
                           instance c reducing the row's elements [c row_chunk, (c + 1)
                           row_chunk); the last of a row's instances to finish combines
                           their partials in instance order and stores. 0 otherwise
                           (always on a CPU) */
    int64_t row_chunk;  /* GPU, split: reduced elements per instance, a multiple of
                           block_threads */
    int vector_bytes;   /* the vectors the code should use */
    int64_t prefetch;   /* CPU row kernel: 0, or chunk length: the pass prefetch_in runs its
                           row in chunks of this many elements, each chunk first prefetching
                           the next row's loads of pass prefetch_from (its first pass, which
                           reads the row from memory) at the same places */
    int prefetch_from, prefetch_in; /* blocks */
    int64_t fsum;       /* CPU row kernel: 0, or chunk length: a pass finishing a sum of
                           f32 (f16, bf16) values adds each chunk of this many elements in
                           float, in vector lanes, and the chunk's sum into a double; where
                           the pass prefetches, the prefetch's chunks (the same length).
                           0: every element added in double (lower_pass_chunk) */
    lower_mm_plan mm;   /* LOWER_MATMUL */
    lower_att_plan att; /* LOWER_ATTENTION */
} lower_plan;

/* The plans of every kernel of p for target t (plans[i] for kernel i; an
 * alias kernel's is empty). NULL when out of memory. */
lower_plan *lower_plan_program(const lower_program *p, const lower_target *t);
void lower_plans_free(lower_plan *plans, int n);

/* Other plans for kernel k than its heuristics' (base, from
 * lower_plan_program), for KILN_TUNE to time on the real shapes and keep the
 * fastest: up to max in out, base's own blocking first. Each is a copy of
 * *base that differs only in its matmul or attention blocking (grid and
 * parallel follow it) and shares base's blocks: free none of them. So far a
 * CPU matmul's cache blocks (mc x nc over kc), register tile (6 x 4 or 8 x
 * 3 vectors), vector width (full or half) and whether A is packed, and CPU
 * fused attention's blocks of queries and tiles of keys. Returns how many;
 * 0 where k has nothing to tune (another kind, a GPU, run-time sizes, work
 * too small to time apart). */
int lower_plan_variants(const lower_kernel *k, const lower_target *t, const lower_plan *base,
                        lower_plan *out, int max);
enum { LOWER_PLAN_VARIANTS_MAX = 24 };
/* What lower_plan_variants varies, as numbers (two plans of a kernel with
 * equal numbers are the same variant): LOWER_BLOCKING_LEN of them in out. */
enum { LOWER_BLOCKING_LEN = 11 };
void lower_plan_blocking(const lower_plan *p, int64_t *out);

/* A plan's prefetch (lower_plan.prefetch): the loads of pass prefetch_from
 * whose places the row and the element alone decide (not a gather's), into
 * loads (room for k->nins), the index instructions computing those places
 * marked in need (k->nins, false on entry), and in *step the elements a 64-byte
 * line holds of the widest of them. Returns how many. */
int lower_prefetch_loads(const lower_kernel *k, const lower_plan *p, bool *need, int *loads,
                         int *step);
/* Whether block `block` of k's plan runs in the prefetch's chunks: the
 * plan's prefetch_in, unless the kernel is tiny (lower_plan_scalar), where a
 * next row's prefetch costs more code than the row's work. */
bool lower_plan_prefetches(const lower_kernel *k, const lower_plan *p, int block);
/* Whether block `block` of k's plan finishes a sum in float chunks
 * (lower_plan.fsum): a sum of f32, f16 or bf16 values never below zero.
 * Each chunk's end is hidden from the compiler (plan.c: plan_fsum). */
bool lower_pass_fsum(const lower_kernel *k, const lower_plan *p, int block);
/* The chunk length block `block` of k's plan runs its row in: the
 * prefetch's, the float sum's (both the same where both hold), or 0 for the
 * whole row at once. */
int64_t lower_pass_chunk(const lower_kernel *k, const lower_plan *p, int block);

/* The edges of a CPU matmul's register tiles (lower_mm_plan), where its
 * sizes are literals: *rows, the rows of the last tile of a column of
 * tiles (n % mr; 0 when every tile is whole), and *vecs, the vectors of
 * the last tile of a row (0 when whole). MC and NC are whole tiles, so
 * these are the only partial tiles. A renderer gives those tiles a
 * micro-kernel of their own size instead of computing the zeros they are
 * padded with: a batch of 32 x 144 @ 144 x 196 products (a convolution's)
 * took as long as 36 x 144 @ 144 x 256. Only where the padding is a tenth
 * of the tiles' work or more (a micro-kernel more costs compile time);
 * run-time sizes (a program shared by several) have none: their tiles stay
 * whole, padded. */
void lower_mm_edges(const lower_kernel *k, const lower_plan *p, int *rows, int *vecs);

/* The period, in k steps, with which a split operand's masked row
 * coordinates repeat (a convolution's taps: 9 for a 3x3 kernel), so that a
 * packing can work out each panel segment's valid range once per phase
 * instead of once per k step: the product of the row axes' sizes from the
 * outermost masked one (*first) inwards, where those sizes are literals.
 * 0 (and *first -1) where o has no masked row axis or a size is a run-time
 * one. */
int64_t lower_split_row_period(const lower_kernel *k, const lower_operand *o, int *first);

/* Whether a CPU matmul's whole register tiles go straight into its output:
 * its epilogue is the product itself (stored at the output element, in the
 * accumulation type), so that passing the sums through the thread's C block
 * and an epilogue copying them out again only moves them twice (the CNN's
 * 16 x 9 @ 9 x 784 products per image wrote 6.4 MB through the C block).
 * Partial tiles, whose vectors would run past a row's end, still go
 * through the C block. */
bool lower_mm_stores_direct(const lower_kernel *k, const lower_plan *p);

/* Whether every tile of elementwise kernel k is whole (its sizes literals,
 * its elements a multiple of its tile: a row as the tile always is), so
 * that a renderer loops over a tile a literal count, which the compiler
 * vectorises for (rows of 14 ran as one 8+4+2 split, where an unknown count
 * ran them scalar). */
bool lower_tiles_whole(const lower_kernel *k);

/* Marks in live (k->nins, false on entry) the instructions k's stores need:
 * each output's value and the index (the instructions a plan renders). */
void lower_live(const lower_kernel *k, bool *live);

/* The plan as text (KILN_DEBUG=3). Canonical: two kernels with the same IR
 * and plan print the same text, which is what cache keys hash. */
void lower_print_plan(FILE *f, const lower_kernel *k, const lower_plan *plan);
/* Its matmul or attention blocking alone, one line (none for other kinds):
 * a part of lower_print_plan, and what KILN_TUNE says it chose. */
void lower_print_blocking(FILE *f, const lower_kernel *k, const lower_plan *plan);
/* Whether a CPU kernel's loops are left scalar (the C renderer marks them
 * for no vectorising; LLVM's passes decide for themselves): tiny kernels (at
 * most a few thousand elements of work) of fixed sizes, whose vector loops
 * cost more to compile than they save (see plan.c). A kernel with run-time
 * sizes (lower_sizes_mark) never is: it may later run large ones. */
bool lower_plan_scalar(const lower_kernel *k, const lower_plan *plan);
/* The operands' dtype of a matmul kernel that tensor cores can run (equal
 * f32, f16 or bf16 operands accumulating in f32; f32 only as TF32, where the
 * target allows it), or -1: what a GPU plan's mm.mma and the profiler's
 * rating of a product against the tensor-core peak both follow. */
int lower_mm_tensor_dtype(const lower_kernel *k);

/* ---- run-time sizes: one compiled program for graphs that differ in sizes
 * (lower/sizes.c) ----
 *
 * Graphs that differ only in sizes (a batch, a sequence length) are each
 * lowered and planned for their own sizes. Where the kernels come out alike
 * but for some numbers — loop bounds, element counts, a matmul's n, k, m,
 * batch strides and offsets, index and float immediates (a mean's 1/n) — those
 * numbers can be read at run time, so that one compiled program serves them
 * all. The candidates, in a fixed order over the kernels that have code:
 * whether it runs in parallel and its grid; elementwise numel; reductions' numel, rnumel (and a scatter's
 * snumel); a matmul's batch sizes, n, k, m, operand offsets, strides and batch
 * strides, and its cache blocks (mc, nc, kc: the register tile stays);
 * every immediate of every kernel. Everything else (tiles, blocking, vector
 * widths, index widths, which passes exist) stays in the code's text. That is
 * what makes sharing sound: a renderer prints each value it depends on, either
 * as a literal or as S[j]; programs share code only when their texts are
 * equal, and each run passes its own program's values. The key is the C text
 * whatever compiles it, so the LLVM renderer decides nothing on a value the C
 * text does not show and reads the rest at run time as well. */

/* The number of candidates of p (planned as plans); with vals, their values
 * in order (a float immediate's double bits). */
int64_t lower_sizes_values(const lower_program *p, const lower_plan *plans, int64_t *vals);
/* Widens mask (one entry per candidate, true where a value has varied): in a
 * kernel with any varying candidate, every candidate that is not an immediate
 * (its element counts, grid, strides, blocks) is marked too. They vary
 * together: a block that is the whole of a small size stays equal between two
 * sizes until the size passes it, and each such late difference would cost
 * a compile. Reading one at run time costs a load. false when out of memory
 * (mask unchanged). */
bool lower_sizes_widen(const lower_program *p, const lower_plan *plans, bool *mask);
/* Marks the candidates whose mask entry is true (every one when mask is NULL)
 * as run-time sizes, numbered per kernel in order; clears earlier marks first.
 * false when out of memory (p is then unmarked). */
bool lower_sizes_mark(lower_program *p, lower_plan *plans, const bool *mask);
void lower_sizes_clear(lower_program *p);
/* The name k's code has: k->symbol when it has run-time sizes, else k->name. */
const char *lower_kernel_symbol(const lower_kernel *k);
/* Which run-time size field (a member of k or of its plan) is in k, or -1 when
 * it is a literal. */
int lower_size_index(const lower_kernel *k, const void *field);

#endif /* KILN_LOWER_H */
