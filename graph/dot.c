/* dot.c — debugging output: the graph below some nodes as Graphviz DOT
 * (graph_dump_dot) and shapes as text (graph_format_shape), which error
 * messages use too. */
#include <stdlib.h>

#include "graph/graph.h"

void graph_format_shape(char *out, size_t cap, int ndim, const int64_t *shape)
{
    if (cap == 0)
        return;
    /* snprintf keeps out terminated when it truncates; len >= cap means it did */
    size_t len = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && len < cap; d++)
        len += (size_t)snprintf(out + len, cap - len, d ? ",%lld" : "%lld", (long long)shape[d]);
    if (len < cap)
        snprintf(out + len, cap - len, "]");
}

void graph_dump_dot(FILE *f, int n, graph_node *const *roots)
{
    graph_node **order = NULL;
    int64_t count = 0;
    bool complete = graph_postorder(n, roots, false, &order, &count) == KILN_OK;
    fprintf(f, "digraph kiln {\n  node [shape=box, fontname=\"monospace\"];\n");
    for (int64_t i = 0; i < count; i++) {
        graph_node *node = order[i];
        char shape[16 + KILN_MAX_DIMS * 21];
        graph_format_shape(shape, sizeof shape, node->ndim, node->shape);
        fprintf(f, "  n%lld [label=\"#%lld %s\\n%s %s\"%s];\n", (long long)node->id,
                (long long)node->id, graph_op_name(node->op), graph_dtype_name(node->dtype),
                shape, node->buf ? ", style=filled, fillcolor=lightgrey" : "");
        for (int j = 0; j < node->nsrc; j++) {
            graph_node *s = node->src[j];
            /* the operand's position matters for sub, div, where, cat, matmul */
            if (node->nsrc > 1)
                fprintf(f, "  n%lld -> n%lld [label=\"%d\"];\n", (long long)s->id,
                        (long long)node->id, j);
            else
                fprintf(f, "  n%lld -> n%lld;\n", (long long)s->id, (long long)node->id);
        }
    }
    if (!complete)
        fprintf(f, "  // out of memory: the graph could not be walked\n");
    fprintf(f, "}\n");
    free(order);
}
