/* autograd.h — reverse-mode differentiation as a rewrite of the lazy graph:
 * given an output node, a seed and some nodes, it builds the gradient nodes
 * with graph/'s constructors, so that gradients are lazy nodes like any
 * other and compile together with the forward pass at the next sync point.
 *
 * A node autograd treats as a constant ("detached") is a GRAPH_CAT with one
 * source: it computes its source's value, every executor already handles it
 * (and fuses it as an index pass-through), hash-consing keeps it apart from
 * the source, and the api never records one otherwise (kiln_cat of one tensor
 * returns the tensor itself). The rewrite never looks through it. */
#ifndef KILN_AUTOGRAD_H
#define KILN_AUTOGRAD_H

#include <stdbool.h>
#include <stddef.h>

#include "graph/graph.h"

/* The gradients of sum(y * seed) with respect to the nodes xs[0..n): out[i]
 * receives a new reference with xs[i]'s shape and dtype, or NULL when y does
 * not depend on xs[i] through float nodes. seed has y's shape and dtype; y
 * and every xs[i] are float. With stop_at_xs the rewrite treats the xs as
 * leaves and does not look through their sources (kiln_backward's leaves);
 * otherwise out[i] is the total derivative, through other xs too. Detached
 * nodes, integer and bool nodes, and the conditions of where stop gradients.
 * Returns KILN_OK, or an error with a message in msg (out then all NULL). */
kiln_status autograd_gradients(graph_node *y, graph_node *seed, int n, graph_node *const *xs,
                               bool stop_at_xs, graph_node **out, char *msg, size_t cap);

/* A node with n's value that autograd treats as a constant (new reference;
 * NULL when out of memory). n itself when it already is one, or when nothing
 * could flow through it anyway (an integer or bool node, a constant). */
graph_node *autograd_detach(graph_node *n);

/* Whether autograd treats n as a constant: a detached node. */
bool autograd_is_detached(const graph_node *n);

#endif /* KILN_AUTOGRAD_H */
