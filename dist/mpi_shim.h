/* mpi_shim.h — the ABI between libkiln and libkiln_mpi.so, the one library
 * of kiln that is built against <mpi.h>.
 *
 * Why a shim: libkiln must load and run on machines without MPI, and in
 * programs that never call kiln_dist_init, so it cannot link libmpi; and MPI
 * has no binary standard (Open MPI's handles are pointers to its globals,
 * MPICH's are integers), so libkiln cannot call a dlopened libmpi directly
 * without building against one MPI's header. The shim is compiled against the
 * real <mpi.h> and hands libkiln a table of functions whose types are kiln's
 * own: handles as opaque bytes, datatypes and ops as the enums below, counts
 * as int64_t. A different MPI needs only a different build of the shim.
 *
 * Every function returns an MPI error code (MPI_SUCCESS is 0 in every MPI)
 * or one of the negative KMPI_ERR_* codes the shim itself raises; error_string
 * turns either into text. */
#ifndef KILN_DIST_MPI_SHIM_H
#define KILN_DIST_MPI_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* Raised when the table's layout changes; libkiln refuses any other. */
#define KMPI_SHIM_VERSION 1
/* The one symbol the shim exports. */
#define KMPI_SHIM_ENTRY "kiln_mpi_shim_get"

/* An MPI_Comm or MPI_Request, whichever its MPI makes it (the shim checks
 * that it fits). */
typedef union kmpi_handle {
    uint64_t align;
    unsigned char bytes[32];
} kmpi_handle;

typedef enum kmpi_type {
    KMPI_U8,
    KMPI_U16,
    KMPI_U32,
    KMPI_U64,
    KMPI_I32,
    KMPI_I64,
    KMPI_F32,
    KMPI_F64,
    KMPI_I8,
} kmpi_type;

typedef enum kmpi_op {
    KMPI_SUM,
    KMPI_MAX,
    KMPI_MIN,
    KMPI_LOR,  /* logical or: nonzero in, 0 or 1 out */
    KMPI_LAND, /* logical and */
} kmpi_op;

/* The shim's own refusals, before MPI is called. */
#define KMPI_ERR_COUNT (-1) /* a count that does not fit MPI's int */
#define KMPI_ERR_ENUM (-2)  /* a kmpi_type or kmpi_op the shim does not know */

typedef struct kmpi_shim {
    uint32_t version;     /* KMPI_SHIM_VERSION */
    uint32_t struct_size; /* sizeof(kmpi_shim) as the shim was built */

    /* MPI_Get_library_version's text, for messages. */
    int (*library_version)(char *buf, size_t cap);
    int (*initialized)(int *flag);
    int (*finalized)(int *flag);
    /* MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, provided). */
    int (*init_thread)(int *provided_serialized);
    int (*finalize)(void);

    /* MPI_Comm_dup(MPI_COMM_WORLD) with MPI_ERRORS_RETURN set on it. */
    int (*comm_dup_world)(kmpi_handle *comm);
    int (*comm_free)(kmpi_handle *comm);
    int (*comm_rank)(const kmpi_handle *comm, int *rank);
    int (*comm_size)(const kmpi_handle *comm, int *size);

    /* Nonblocking collectives; send == NULL means MPI_IN_PLACE. Counts are
     * in elements of type: all-reduce's of the whole buffer, all-gather's
     * and reduce-scatter's of one rank's block. */
    int (*iallreduce)(const kmpi_handle *comm, const void *send, void *recv, int64_t count,
                      kmpi_type type, kmpi_op op, kmpi_handle *req);
    int (*iallgather)(const kmpi_handle *comm, const void *send, void *recv, int64_t count,
                      kmpi_type type, kmpi_handle *req);
    int (*ireduce_scatter_block)(const kmpi_handle *comm, const void *send, void *recv,
                                 int64_t count, kmpi_type type, kmpi_op op, kmpi_handle *req);
    int (*ibcast)(const kmpi_handle *comm, void *buf, int64_t count, kmpi_type type, int root,
                  kmpi_handle *req);
    /* MPI_Test: *done is 1 once the request completed (it is then freed). */
    int (*test)(kmpi_handle *req, int *done);

    /* MPI_Error_string, or the text of a KMPI_ERR_* code. */
    void (*error_string)(int code, char *buf, size_t cap);
} kmpi_shim;

typedef const kmpi_shim *(*kmpi_shim_get_fn)(void);

#endif /* KILN_DIST_MPI_SHIM_H */
