/* why.h — why a sync missed the graph cache, for KILN_DEBUG=1: each missed
 * capture is described node by node (op, dtype, shape, parameters) and
 * compared with the recent ones of the same structure, so that the line
 * names what differed: a shape, a dtype, a constant, a view. */
#ifndef KILN_JIT_WHY_H
#define KILN_JIT_WHY_H

#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"

typedef struct jit_why jit_why;

/* Writes into msg why cap (captured at sync `sync`) matched no compiled
 * program, against the captures this history holds, then remembers cap.
 * *w is made on first use; out of memory, msg says less. */
void jit_why_miss(jit_why **w, const graph_capture *cap, int64_t sync, char *msg, size_t len);
void jit_why_free(jit_why *w);

#endif /* KILN_JIT_WHY_H */
