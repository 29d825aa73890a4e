/* perserve/client_c.h: the client library as a C ABI, for Python (ctypes with
 * mpi4py), Fortran and other languages. Library: libperserve_client.so.
 *
 * The communicator is passed as a Fortran handle (MPI_Comm_c2f in C,
 * comm.py2f() in mpi4py). Joins are collective over it, as in client.h.
 * Functions returning int give 0 on success, non-zero on error, and
 * perserve_client_last_error() (per thread) says why.
 *
 * Columns are passed as an array of pointers, one per schema column, each to
 * n * perserve_*_column_bytes(i) bytes, row-major.
 */
#ifndef PERSERVE_CLIENT_C_H_
#define PERSERVE_CLIENT_C_H_

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct perserve_actor perserve_actor;
typedef struct perserve_learner perserve_learner;

/* max_in_flight: intake batches sent but unacknowledged before add waits (>= 1). NULL on error. */
perserve_actor* perserve_actor_join(MPI_Fint comm, int max_in_flight);
int perserve_actor_num_columns(const perserve_actor* a);
int64_t perserve_actor_column_bytes(const perserve_actor* a, int column); /* bytes per item; -1 if no such column */
/* priorities: NULL (the server's running max) or n values, finite and > 0. Copies the batch. */
int perserve_actor_add(perserve_actor* a, int64_t n, const void* const* columns, const double* priorities);
int perserve_actor_flush(perserve_actor* a);
/* Flushes, closes and frees the actor (also on error). */
int perserve_actor_close(perserve_actor* a);

perserve_learner* perserve_learner_join(MPI_Fint comm);
int perserve_learner_num_columns(const perserve_learner* l);
int64_t perserve_learner_column_bytes(const perserve_learner* l, int column);
/* Fills caller-owned arrays: keys[n], weights[n] (may be NULL), columns[i] of n items each (may be NULL). */
int perserve_learner_sample(perserve_learner* l, int64_t n, double beta, uint64_t* keys, double* weights,
                            void* const* columns);
/* stale_out (may be NULL): how many keys had been overwritten and were dropped. */
int perserve_learner_update(perserve_learner* l, const uint64_t* keys, const double* priorities, int64_t n,
                            int64_t* stale_out);
int perserve_learner_close(perserve_learner* l);

/* A rank that takes part in the join but neither acts nor learns. */
int perserve_bystander_join(MPI_Fint comm);

const char* perserve_client_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* PERSERVE_CLIENT_C_H_ */
