/* internal.h — what autograd/'s own files share and nobody else sees. */
#ifndef KILN_AUTOGRAD_INTERNAL_H
#define KILN_AUTOGRAD_INTERNAL_H

#include "autograd/autograd.h"

/* The vector-Jacobian product of one node: given g, the gradient of the output
 * with respect to n (n's shape and dtype), out[j] receives a new reference to
 * the gradient's contribution to n->src[j] (its shape and dtype) for every j
 * with need[j]; the others stay NULL. n is a float node that autograd looks
 * through, and need[j] is set only for float sources. Returns KILN_OK, or an
 * error with a message (the out[j] then all NULL). */
kiln_status autograd_vjp(graph_node *n, graph_node *g, const bool *need, graph_node **out,
                         char *msg, size_t cap);

/* The gradient of a view node's source given the gradient g of the view
 * (consumed). NULL when out of memory, or when the view maps two elements to
 * one source element in a way other than broadcasting (*bad is then set). */
graph_node *autograd_view_vjp(const graph_node *v, graph_node *g, bool *bad);

/* The gradient of a collective node's source given g, the gradient of its
 * result (borrowed): rules_dist.c. NULL when out of memory. */
graph_node *autograd_collective_vjp(graph_node *n, graph_node *g);

/* Helpers that consume the references they are given (so that rules read as
 * expressions) and return a new one, or NULL when any argument is NULL or
 * memory runs out. */
graph_node *autograd_take_binary(graph_op op, graph_node *a, graph_node *b);
graph_node *autograd_take_unary(graph_op op, graph_node *a);
graph_node *autograd_take_where(graph_node *c, graph_node *a, graph_node *b);
graph_node *autograd_take_reduce(graph_node *a, uint32_t axes);
graph_node *autograd_take_reshape(graph_node *a, int ndim, const int64_t *shape);
/* A constant of like's shape and dtype. */
graph_node *autograd_full(const graph_node *like, double v);
/* A constant of like's dtype in a given shape. */
graph_node *autograd_full_shape(const graph_node *like, int ndim, const int64_t *shape, double v);

#endif /* KILN_AUTOGRAD_INTERNAL_H */
