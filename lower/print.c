/* print.c — the readable text forms of a kernel: the list of graph ops fused
 * into it (for the profiler and KILN_DEBUG=3), and its IR (KILN_DEBUG=3), one
 * line per instruction, inner ones (run per reduced element) indented. */
#include <string.h>

#include "lower/lower.h"

static const char *const uop_names[] = {
    [UOP_GIDX] = "gidx", [UOP_RIDX] = "ridx", [UOP_IMM] = "imm",   [UOP_IADD] = "iadd",
    [UOP_IMUL] = "imul", [UOP_IDIV] = "idiv", [UOP_IMOD] = "imod", [UOP_ILT] = "ilt",
    [UOP_AND] = "and",   [UOP_LOAD] = "load", [UOP_ALU] = "alu",   [UOP_WHERE] = "where",
    [UOP_RAND] = "rand", [UOP_REDUCE] = "reduce", [UOP_ACC] = "acc",   [UOP_PRIM] = "prim",
};
_Static_assert(sizeof uop_names / sizeof *uop_names == UOP_NUM_OPS, "a uop without a name");

static const char *const prim_names[] = {
    [PRIM_NEG] = "neg",     [PRIM_ADD] = "add",   [PRIM_SUB] = "sub",     [PRIM_MUL] = "mul",
    [PRIM_DIV] = "div",     [PRIM_MOD] = "mod",   [PRIM_FMA] = "fma",     [PRIM_MAX] = "max",
    [PRIM_MIN] = "min",     [PRIM_ABS] = "abs",   [PRIM_SQRT] = "sqrt",   [PRIM_EXP2] = "exp2",
    [PRIM_LOG2] = "log2",   [PRIM_LOG] = "log",   [PRIM_EXP] = "exp",     [PRIM_ERFC] = "erfc",
    [PRIM_POW] = "pow",     [PRIM_SIN] = "sin",   [PRIM_COS] = "cos",
    [PRIM_FLOOR] = "floor", [PRIM_TRUNC] = "trunc", [PRIM_LT] = "lt",     [PRIM_LE] = "le",
    [PRIM_EQ] = "eq",       [PRIM_NE] = "ne",     [PRIM_AND] = "and",     [PRIM_OR] = "or",
    [PRIM_XOR] = "xor",     [PRIM_SHL] = "shl",   [PRIM_SHR] = "shr",     [PRIM_CAST] = "cast",
    [PRIM_BITCAST] = "bitcast", [PRIM_TAN] = "tan",   [PRIM_ASIN] = "asin",   [PRIM_ACOS] = "acos",
    [PRIM_ATAN] = "atan",   [PRIM_ATAN2] = "atan2", [PRIM_SINH] = "sinh",  [PRIM_COSH] = "cosh",
    [PRIM_ASINH] = "asinh", [PRIM_ACOSH] = "acosh", [PRIM_ATANH] = "atanh", [PRIM_ERF] = "erf",
    [PRIM_EXPM1] = "expm1", [PRIM_LOG1P] = "log1p", [PRIM_FMOD] = "fmod",
};
_Static_assert(sizeof prim_names / sizeof *prim_names == PRIM_NUM, "a primitive without a name");

const char *lower_uop_name(lower_uop op) {
    return op >= 0 && op < UOP_NUM_OPS && uop_names[op] ? uop_names[op] : "?";
}

const char *lower_prim_name(lower_prim p) {
    return p >= 0 && p < PRIM_NUM && prim_names[p] ? prim_names[p] : "?";
}

int lower_prim_arity(lower_prim p) {
    switch (p) {
    case PRIM_NEG:
    case PRIM_ABS:
    case PRIM_SQRT:
    case PRIM_EXP2:
    case PRIM_LOG2:
    case PRIM_LOG:
    case PRIM_EXP:
    case PRIM_ERFC:
    case PRIM_SIN:
    case PRIM_COS:
    case PRIM_FLOOR:
    case PRIM_TRUNC:
    case PRIM_CAST:
    case PRIM_BITCAST:
    case PRIM_TAN:
    case PRIM_ASIN:
    case PRIM_ACOS:
    case PRIM_ATAN:
    case PRIM_SINH:
    case PRIM_COSH:
    case PRIM_ASINH:
    case PRIM_ACOSH:
    case PRIM_ATANH:
    case PRIM_ERF:
    case PRIM_EXPM1:
    case PRIM_LOG1P:
        return 1;
    case PRIM_FMA:
        return 3;
    default:
        return 2;
    }
}

const char *lower_prim_libm(lower_prim p) {
    switch (p) {
    case PRIM_ERFC:
    case PRIM_POW:
    case PRIM_TAN:
    case PRIM_ASIN:
    case PRIM_ACOS:
    case PRIM_ATAN:
    case PRIM_ATAN2:
    case PRIM_SINH:
    case PRIM_COSH:
    case PRIM_ASINH:
    case PRIM_ACOSH:
    case PRIM_ATANH:
    case PRIM_ERF:
    case PRIM_EXPM1:
    case PRIM_LOG1P:
    case PRIM_FMOD:
        return prim_names[p]; /* named after the function */
    default:
        return NULL;
    }
}

void lower_describe_fused(lower_kernel *k, int n, graph_node *const *nodes) {
    int count[GRAPH_NUM_OPS] = {0};
    for (int i = 0; i < n; i++)
        count[nodes[i]->op]++;
    size_t at = 0;
    k->fused[0] = 0;
    if (k->kind == LOWER_ALIAS)
        snprintf(k->fused, sizeof k->fused, "view");
    for (int i = 0; i < n && at < sizeof k->fused; i++) {
        graph_op op = nodes[i]->op;
        if (op == GRAPH_CONST || !count[op])
            continue;
        int len = count[op] > 1 ? snprintf(k->fused + at, sizeof k->fused - at, "%s%s×%d",
                                           at ? " " : "", graph_op_name(op), count[op])
                                : snprintf(k->fused + at, sizeof k->fused - at, "%s%s",
                                           at ? " " : "", graph_op_name(op));
        count[op] = 0;
        at += (size_t)len;
    }
    /* A description cut short says so, at a space: never in half a name. */
    if (at >= sizeof k->fused) {
        char *cut = k->fused + sizeof k->fused - 5;
        while (cut > k->fused && *cut != ' ')
            cut--;
        memcpy(cut, " ...", 5);
    }
}

void lower_print_kernel(FILE *f, const lower_kernel *k) {
    fprintf(f, "kernel %s: %lld elements x %lld reduced, tile %lld, %d inputs\n", k->name,
            (long long)k->numel, (long long)k->rnumel, (long long)k->tile, k->ninputs);
    fprintf(f, "  fuses: %s\n", k->fused[0] ? k->fused : "(nothing computed)");
    if (k->kind == LOWER_ALIAS) {
        fprintf(f, "  shares the buffer of buf1\n");
        return;
    }
    if (k->kind == LOWER_MATMUL) {
        fprintf(f, "  dot [%lld x %lld] @ [%lld x %lld], %d batch dims; A buf%d strides (%lld, %lld), "
                   "B buf%d strides (%lld, %lld)\n",
                (long long)k->n, (long long)k->k, (long long)k->k, (long long)k->m, k->nbatch,
                k->a.buf, (long long)k->a.row_stride, (long long)k->a.col_stride, k->b.buf,
                (long long)k->b.row_stride, (long long)k->b.col_stride);
        fprintf(f, "  epilogue:\n");
    }
    for (int i = 0; i < k->nins; i++) {
        const lower_ins *x = &k->ins[i];
        fprintf(f, "  %s%%%d = %s.%s", x->inner ? "  " : "", i, lower_uop_name(x->op),
                graph_dtype_name(x->dt));
        if (x->op == UOP_ALU || x->op == UOP_REDUCE || x->op == UOP_RAND)
            fprintf(f, " %s", graph_op_name(x->gop));
        if (x->op == UOP_PRIM)
            fprintf(f, " %s", lower_prim_name(x->prim));
        if (x->op == UOP_IMM && graph_dtype_is_float(x->dt))
            fprintf(f, " %.17g", x->imm.f);
        else if (x->op == UOP_IMM)
            fprintf(f, " %lld", (long long)x->imm.i);
        if (x->op == UOP_LOAD)
            fprintf(f, " buf%d", x->buf);
        int ops[3] = {x->a, x->b, x->c};
        for (int j = 0; j < 3; j++)
            if (ops[j] >= 0)
                fprintf(f, " %%%d", ops[j]);
        for (int o = 0; o < k->nouts; o++)
            if (k->results[o] == i)
                fprintf(f, "   -> buf%d[%%%d]", o, k->store);
        fprintf(f, "\n");
    }
}
