/* mpi_shim.c — libkiln_mpi.so: the real MPI behind mpi_shim.h's table. It is
 * the only code of kiln compiled against <mpi.h>; libkiln dlopens it when a
 * program joins a job (see mpi_shim.h for why). It keeps no state: handles
 * live in the caller's kmpi_handle bytes. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "dist/mpi_shim.h"

_Static_assert(sizeof(MPI_Comm) <= sizeof(kmpi_handle), "MPI_Comm fits a kmpi_handle");
_Static_assert(sizeof(MPI_Request) <= sizeof(kmpi_handle), "MPI_Request fits a kmpi_handle");

static MPI_Comm comm_of(const kmpi_handle *h) {
    MPI_Comm c;
    memcpy(&c, h->bytes, sizeof c);
    return c;
}

static void put_comm(kmpi_handle *h, MPI_Comm c) {
    memset(h, 0, sizeof *h);
    memcpy(h->bytes, &c, sizeof c);
}

static void put_req(kmpi_handle *h, MPI_Request r) {
    memset(h, 0, sizeof *h);
    memcpy(h->bytes, &r, sizeof r);
}

/* MPI_DATATYPE_NULL for an unknown type: the caller then returns KMPI_ERR_ENUM. */
static MPI_Datatype type_of(kmpi_type t) {
    switch (t) {
    case KMPI_U8: return MPI_UINT8_T;
    case KMPI_I8: return MPI_INT8_T;
    case KMPI_U16: return MPI_UINT16_T;
    case KMPI_U32: return MPI_UINT32_T;
    case KMPI_U64: return MPI_UINT64_T;
    case KMPI_I32: return MPI_INT32_T;
    case KMPI_I64: return MPI_INT64_T;
    case KMPI_F32: return MPI_FLOAT;
    case KMPI_F64: return MPI_DOUBLE;
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op op_of(kmpi_op op) {
    switch (op) {
    case KMPI_SUM: return MPI_SUM;
    case KMPI_MAX: return MPI_MAX;
    case KMPI_MIN: return MPI_MIN;
    case KMPI_LOR: return MPI_LOR;
    case KMPI_LAND: return MPI_LAND;
    }
    return MPI_OP_NULL;
}

static int s_library_version(char *buf, size_t cap) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    int rc = MPI_Get_library_version(v, &len);
    if (rc == MPI_SUCCESS && cap > 0)
        snprintf(buf, cap, "%.*s", len, v);
    return rc;
}

static int s_initialized(int *flag) { return MPI_Initialized(flag); }
static int s_finalized(int *flag) { return MPI_Finalized(flag); }

static int s_init_thread(int *provided_serialized) {
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    *provided_serialized = provided >= MPI_THREAD_SERIALIZED;
    return rc;
}

static int s_finalize(void) { return MPI_Finalize(); }

static int s_comm_dup_world(kmpi_handle *comm) {
    MPI_Comm c = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c);
    if (rc != MPI_SUCCESS)
        return rc;
    rc = MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&c);
        return rc;
    }
    put_comm(comm, c);
    return MPI_SUCCESS;
}

static int s_comm_free(kmpi_handle *comm) {
    MPI_Comm c = comm_of(comm);
    int rc = MPI_Comm_free(&c);
    put_comm(comm, c);
    return rc;
}

static int s_comm_rank(const kmpi_handle *comm, int *rank) {
    return MPI_Comm_rank(comm_of(comm), rank);
}

static int s_comm_size(const kmpi_handle *comm, int *size) {
    return MPI_Comm_size(comm_of(comm), size);
}

static int s_iallreduce(const kmpi_handle *comm, const void *send, void *recv, int64_t count,
                        kmpi_type type, kmpi_op op, kmpi_handle *req) {
    MPI_Datatype t = type_of(type);
    MPI_Op o = op_of(op);
    if (t == MPI_DATATYPE_NULL || o == MPI_OP_NULL)
        return KMPI_ERR_ENUM;
    if (count < 0 || count > INT_MAX)
        return KMPI_ERR_COUNT;
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(send ? send : MPI_IN_PLACE, recv, (int)count, t, o, comm_of(comm), &r);
    put_req(req, r);
    return rc;
}

static int s_iallgather(const kmpi_handle *comm, const void *send, void *recv, int64_t count,
                        kmpi_type type, kmpi_handle *req) {
    MPI_Datatype t = type_of(type);
    if (t == MPI_DATATYPE_NULL)
        return KMPI_ERR_ENUM;
    if (count < 0 || count > INT_MAX)
        return KMPI_ERR_COUNT;
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Iallgather(send ? send : MPI_IN_PLACE, (int)count, t, recv, (int)count, t,
                            comm_of(comm), &r);
    put_req(req, r);
    return rc;
}

static int s_ireduce_scatter_block(const kmpi_handle *comm, const void *send, void *recv,
                                   int64_t count, kmpi_type type, kmpi_op op, kmpi_handle *req) {
    MPI_Datatype t = type_of(type);
    MPI_Op o = op_of(op);
    if (t == MPI_DATATYPE_NULL || o == MPI_OP_NULL)
        return KMPI_ERR_ENUM;
    if (count < 0 || count > INT_MAX)
        return KMPI_ERR_COUNT;
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Ireduce_scatter_block(send ? send : MPI_IN_PLACE, recv, (int)count, t, o,
                                       comm_of(comm), &r);
    put_req(req, r);
    return rc;
}

static int s_ibcast(const kmpi_handle *comm, void *buf, int64_t count, kmpi_type type, int root,
                    kmpi_handle *req) {
    MPI_Datatype t = type_of(type);
    if (t == MPI_DATATYPE_NULL)
        return KMPI_ERR_ENUM;
    if (count < 0 || count > INT_MAX)
        return KMPI_ERR_COUNT;
    MPI_Request r = MPI_REQUEST_NULL;
    int rc = MPI_Ibcast(buf, (int)count, t, root, comm_of(comm), &r);
    put_req(req, r);
    return rc;
}

static int s_test(kmpi_handle *req, int *done) {
    MPI_Request r;
    memcpy(&r, req->bytes, sizeof r);
    int rc = MPI_Test(&r, done, MPI_STATUS_IGNORE);
    put_req(req, r);
    return rc;
}

static void s_error_string(int code, char *buf, size_t cap) {
    if (cap == 0)
        return;
    if (code == KMPI_ERR_COUNT) {
        snprintf(buf, cap, "a count beyond MPI's int range");
        return;
    }
    if (code == KMPI_ERR_ENUM) {
        snprintf(buf, cap, "a datatype or reduction the MPI shim does not know");
        return;
    }
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) == MPI_SUCCESS)
        snprintf(buf, cap, "%.*s", len, s);
    else
        snprintf(buf, cap, "MPI error %d", code);
}

static const kmpi_shim shim = {
    .version = KMPI_SHIM_VERSION,
    .struct_size = sizeof(kmpi_shim),
    .library_version = s_library_version,
    .initialized = s_initialized,
    .finalized = s_finalized,
    .init_thread = s_init_thread,
    .finalize = s_finalize,
    .comm_dup_world = s_comm_dup_world,
    .comm_free = s_comm_free,
    .comm_rank = s_comm_rank,
    .comm_size = s_comm_size,
    .iallreduce = s_iallreduce,
    .iallgather = s_iallgather,
    .ireduce_scatter_block = s_ireduce_scatter_block,
    .ibcast = s_ibcast,
    .test = s_test,
    .error_string = s_error_string,
};

/* The one exported symbol (everything else is hidden by -fvisibility=hidden). */
__attribute__((visibility("default"))) const kmpi_shim *kiln_mpi_shim_get(void) { return &shim; }
