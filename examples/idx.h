/* idx.h — reading IDX files (the format of MNIST and Fashion-MNIST), plain or
 * gzip-compressed, for the training examples. */
#ifndef KILN_EXAMPLES_IDX_H
#define KILN_EXAMPLES_IDX_H

#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_DIMS 4

/* An array of unsigned bytes, row-major. */
typedef struct idx_array {
    int ndim;
    int64_t dims[IDX_MAX_DIMS];
    size_t count; /* elements: the product of dims */
    uint8_t *data;
} idx_array;

/* Reads the IDX file at path, which must hold unsigned bytes (type 0x08) in
 * want_ndim dimensions. Returns 0 with *out filled (free it with idx_free),
 * or -1 with *out empty and err holding a message that names the file and
 * what is wrong with it: missing or unreadable, not IDX, another type or
 * rank, truncated, or longer than its header says. */
int idx_load(const char *path, int want_ndim, idx_array *out, char *err, size_t errlen);

/* Frees the data of an array from idx_load and empties it. */
void idx_free(idx_array *a);

/* Puts idx[0..n) in the examples' training order for seed: a fixed-seed
 * Fisher-Yates shuffle from a 64-bit LCG (Knuth's MMIX), so that
 * bench/cnn_epoch.c (and its PyTorch peer, which ports it) trains on the
 * batches examples/fashion_mnist.c does. */
void idx_shuffle(int64_t *idx, int64_t n, uint64_t seed);

#endif
