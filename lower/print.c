/* print.c — the readable text forms of a kernel: the list of graph ops fused
 * into it (for the profiler and KILN_DEBUG=3), and its IR (KILN_DEBUG=3), one
 * line per instruction, inner ones (run per reduced element) indented. */
#include <string.h>

#include "lower/lower.h"

static const char *const uop_names[] = {
    [UOP_GIDX] = "gidx", [UOP_RIDX] = "ridx", [UOP_TILE] = "tile", [UOP_LANE] = "lane", [UOP_IMM] = "imm",   [UOP_IADD] = "iadd",
    [UOP_IMUL] = "imul", [UOP_IDIV] = "idiv", [UOP_IMOD] = "imod", [UOP_ILT] = "ilt",
    [UOP_AND] = "and",   [UOP_ICLAMP] = "iclamp", [UOP_IVALID] = "ivalid", [UOP_LOAD] = "load", [UOP_ALU] = "alu",   [UOP_WHERE] = "where",
    [UOP_RAND] = "rand", [UOP_REDUCE] = "reduce", [UOP_ACC] = "acc",   [UOP_PRIM] = "prim",
};
_Static_assert(sizeof uop_names / sizeof *uop_names == UOP_NUM_OPS, "a uop without a name");

/* Each primitive's name, operand count and whether it is a libm function
 * (then named after it). */
typedef struct prim_info {
    const char *name;
    int arity;
    bool libm;
} prim_info;

static const prim_info prims[] = {
    [PRIM_NEG] = {"neg", 1, false},     [PRIM_ADD] = {"add", 2, false},
    [PRIM_SUB] = {"sub", 2, false},     [PRIM_MUL] = {"mul", 2, false},
    [PRIM_DIV] = {"div", 2, false},     [PRIM_MOD] = {"mod", 2, false},
    [PRIM_FMA] = {"fma", 3, false},     [PRIM_MAX] = {"max", 2, false},
    [PRIM_MIN] = {"min", 2, false},     [PRIM_ABS] = {"abs", 1, false},
    [PRIM_SQRT] = {"sqrt", 1, false},   [PRIM_EXP2] = {"exp2", 1, false},
    [PRIM_LOG2] = {"log2", 1, false},   [PRIM_LOG] = {"log", 1, false},
    [PRIM_EXP] = {"exp", 1, false},     [PRIM_ERFC] = {"erfc", 1, true},
    [PRIM_POW] = {"pow", 2, true},      [PRIM_TAN] = {"tan", 1, true},
    [PRIM_ASIN] = {"asin", 1, true},    [PRIM_ACOS] = {"acos", 1, true},
    [PRIM_ATAN] = {"atan", 1, true},    [PRIM_ATAN2] = {"atan2", 2, true},
    [PRIM_SINH] = {"sinh", 1, true},    [PRIM_COSH] = {"cosh", 1, true},
    [PRIM_ASINH] = {"asinh", 1, true},  [PRIM_ACOSH] = {"acosh", 1, true},
    [PRIM_ATANH] = {"atanh", 1, true},  [PRIM_ERF] = {"erf", 1, true},
    [PRIM_EXPM1] = {"expm1", 1, true},  [PRIM_LOG1P] = {"log1p", 1, true},
    [PRIM_FMOD] = {"fmod", 2, true},    [PRIM_SIN] = {"sin", 1, false},
    [PRIM_COS] = {"cos", 1, false},     [PRIM_FLOOR] = {"floor", 1, false},
    [PRIM_TRUNC] = {"trunc", 1, false}, [PRIM_LT] = {"lt", 2, false},
    [PRIM_LE] = {"le", 2, false},       [PRIM_EQ] = {"eq", 2, false},
    [PRIM_NE] = {"ne", 2, false},       [PRIM_AND] = {"and", 2, false},
    [PRIM_OR] = {"or", 2, false},       [PRIM_XOR] = {"xor", 2, false},
    [PRIM_SHL] = {"shl", 2, false},     [PRIM_SHR] = {"shr", 2, false},
    [PRIM_CAST] = {"cast", 1, false},   [PRIM_BITCAST] = {"bitcast", 1, false},
};
_Static_assert(sizeof prims / sizeof *prims == PRIM_NUM, "a primitive without a table entry");

const char *lower_uop_name(lower_uop op) {
    return op >= 0 && op < UOP_NUM_OPS && uop_names[op] ? uop_names[op] : "?";
}

static const prim_info *info(lower_prim p) {
    return p >= 0 && p < PRIM_NUM && prims[p].name ? &prims[p] : NULL;
}

const char *lower_prim_name(lower_prim p) { return info(p) ? info(p)->name : "?"; }

int lower_prim_arity(lower_prim p) { return info(p) ? info(p)->arity : 2; }

const char *lower_prim_libm(lower_prim p) { return info(p) && info(p)->libm ? info(p)->name : NULL; }

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

bool lower_kind_has_code(lower_kind k) { return k != LOWER_ALIAS && k != LOWER_COLLECTIVE; }

/* A split operand's axes (lower.h's lower_operand): size:stride, and the
 * masked axis it moves along (-1: none) and its step there; the masks. */
static void print_split(FILE *f, const char *which, const lower_operand *o) {
    if (!lower_operand_split(o))
        return;
    fprintf(f, "  %s split: rows", which);
    for (int d = 0; d < o->nrdims; d++)
        fprintf(f, " %lld:%lld/%d*%lld", (long long)o->rsize[d], (long long)o->rstride[d],
                o->rmask[d], (long long)o->rstep[d]);
    fprintf(f, ", columns");
    for (int d = 0; d < o->ncdims; d++)
        fprintf(f, " %lld:%lld/%d*%lld", (long long)o->csize[d], (long long)o->cstride[d],
                o->cmask[d], (long long)o->cstep[d]);
    for (int m = 0; m < o->nmasks; m++)
        fprintf(f, ", mask %d [%lld, %lld) from %lld", m, (long long)o->mlo[m],
                (long long)o->mhi[m], (long long)o->morigin[m]);
    fprintf(f, "\n");
}

void lower_print_kernel(FILE *f, const lower_kernel *k) {
    fprintf(f, "kernel %s: %lld elements x %lld reduced, tile %lld, %d inputs\n", k->name,
            (long long)k->numel, (long long)k->rnumel, (long long)k->tile, k->ninputs);
    fprintf(f, "  fuses: %s\n", k->fused[0] ? k->fused : "(nothing computed)");
    for (int j = 0; k->kind == LOWER_SCATTER && j < k->nscatter; j++)
        fprintf(f, "  scatter pass %d over %lld source elements per row: buf0[%%%d] = %%%d where %%%d\n",
                j, (long long)k->snumel, k->scatter[j].at, k->scatter[j].value, k->scatter[j].valid);
    if (k->kind == LOWER_ALIAS) {
        fprintf(f, "  shares the buffer of buf1\n");
        return;
    }
    if (k->kind == LOWER_COLLECTIVE) {
        fprintf(f, "  a collective of buf1, run by dist/\n");
        return;
    }
    if (k->kind == LOWER_MATMUL) {
        fprintf(f, "  dot [%lld x %lld] @ [%lld x %lld], %d batch dims; A buf%d strides (%lld, %lld), "
                   "B buf%d strides (%lld, %lld)\n",
                (long long)k->n, (long long)k->k, (long long)k->k, (long long)k->m, k->nbatch,
                k->a.buf, (long long)k->a.row_stride, (long long)k->a.col_stride, k->b.buf,
                (long long)k->b.row_stride, (long long)k->b.col_stride);
        print_split(f, "A", &k->a);
        print_split(f, "B", &k->b);
        fprintf(f, "  epilogue:\n");
    }
    if (k->kind == LOWER_ATTENTION) {
        const lower_attention *a = &k->att;
        fprintf(f, "  %s: %lld queries, %lld keys, widths %lld and %lld, %d batch dims, scale %.17g%s;",
                graph_op_name(a->op), (long long)a->l, (long long)a->s, (long long)a->d,
                (long long)a->dv, k->nbatch, a->scale, a->causal ? ", causal" : "");
        for (int j = 0; j < a->nsrc; j++)
            fprintf(f, " buf%d+%lld (%lld, %lld)", a->src[j].buf, (long long)a->src[j].offset,
                    (long long)a->src[j].row_stride, (long long)a->src[j].col_stride);
        fprintf(f, "\n  %sstores:", a->joint ? "joint; " : "");
        for (int p = 0; p < a->nstores; p++) {
            const lower_operand *o = &a->store[p];
            fprintf(f, " buf%d+%lld (%lld;", o->buf, (long long)o->offset, (long long)o->row_stride);
            for (int d = 0; d < k->nbatch; d++)
                fprintf(f, " %lld", (long long)o->batch_strides[d]);
            fprintf(f, ")");
        }
        fprintf(f, "\n  e^x:\n");
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
        else if (x->op == UOP_IMM || x->op == UOP_ICLAMP || x->op == UOP_IVALID)
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
