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
    UOP_RIDX,  /* i64: flat index among the reduced elements (inner) */
    UOP_IMM,   /* an immediate of dt */
    UOP_IADD,  /* i64 index arithmetic on values >= 0 */
    UOP_IMUL,
    UOP_IDIV,
    UOP_IMOD,
    UOP_ILT,   /* bool: a < b on i64 */
    UOP_AND,   /* bool: a && b */
    UOP_LOAD,  /* dt: input buf at index a when valid b holds (b < 0: always), else 0 */
    UOP_ALU,   /* dt: graph op gop (unary, cast, binary, comparison) on a (and b) */
    UOP_WHERE, /* dt: a ? b : c */
    UOP_RAND,  /* dt: Philox value (gop GRAPH_RAND or GRAPH_RANDN) at index a, seed imm.i */
    UOP_REDUCE, /* dt: gop SUM/RMAX/RMIN/ARGMAX/ARGMIN of inner value a over RIDX */
    UOP_ACC     /* dt: in a matmul kernel, the finished dot product of output element GIDX */
} lower_uop;

typedef struct lower_ins {
    lower_uop op;
    kiln_dtype dt;
    graph_op gop;
    int a, b, c;
    graph_scalar imm;
    int buf;
    bool inner;
    int64_t min, max; /* index values: bounds (inclusive) over every lane, masked
                         ones included; a target may pick a narrower type */
} lower_ins;

/* LOWER_ALIAS runs no code: its output is a reshape of its one input and
 * shares the input's buffer. */
typedef enum lower_kind { LOWER_ELEMENTWISE, LOWER_REDUCE, LOWER_MATMUL, LOWER_ALIAS } lower_kind;

/* Strides (in elements) of a matmul operand over its base buffer. */
typedef struct lower_operand {
    int buf;
    int64_t offset;
    int64_t batch_strides[KILN_MAX_DIMS];
    int64_t row_stride, col_stride;
} lower_operand;

typedef struct lower_kernel {
    char name[96];
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
    /* LOWER_MATMUL */
    int nbatch;
    int64_t batch[KILN_MAX_DIMS];
    int64_t n, k, m;
    lower_operand a, b;
} lower_kernel;

typedef struct lower_program {
    int nkernels;
    lower_kernel *kernels; /* in execution order */
} lower_program;

/* Cuts the graph below the n target nodes into kernels. With fuse false every
 * op is its own kernel (eager mode's baseline). Returns NULL when out of
 * memory. The program holds references to every node it names. */
lower_program *lower_schedule(int n, graph_node *const *targets, bool fuse);
void lower_program_free(lower_program *p);

/* The readable text form of a kernel (KILN_DEBUG=3). */
void lower_print_kernel(FILE *f, const lower_kernel *k);

/* Fills k->fused from the n graph nodes computed in k (each listed once):
 * their ops in order of first use, repeats counted ("add×2 exp"), constants
 * left out. */
void lower_describe_fused(lower_kernel *k, int n, graph_node *const *nodes);

#endif /* KILN_LOWER_H */
