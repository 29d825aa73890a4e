/* perserve/client_c.h: the client library as a C ABI, for Python (ctypes with
 * mpi4py), Fortran and other languages. Library: libperserve_client.so.
 *
 * The communicator is passed as a Fortran handle (MPI_Comm_c2f in C,
 * comm.py2f() in mpi4py). Joins are collective over it, as in client.h.
 * Functions returning int give 0 on success, non-zero on error, and
 * perserve_client_last_error() (per thread) says why;
 * perserve_client_last_error_code() gives its PERSERVE_* code (a timeout:
 * PERSERVE_DEADLINE_EXCEEDED).
 *
 * Columns are passed as an array of pointers, one per schema column, each to
 * n * perserve_*_column_bytes(i) bytes, row-major. perserve_actor_add_columns
 * also takes each column's length, and checks it against the schema.
 *
 * No function lets a C++ exception out; an allocation failure returns an
 * error with "RESOURCE_EXHAUSTED: ..." in perserve_client_last_error().
 *
 * A client still open at MPI_Finalize is closed by the library on the way
 * (an actor flushes first), with a line on stderr saying so: close clients
 * yourself to see their errors. Its handle is then still to be freed with
 * perserve_*_close (which returns 0) or perserve_bystander_free, before or
 * after MPI_Finalize. A close error printed there (nobody is left to
 * receive it) is counted by perserve_unreceived_close_errors(): after
 * MPI_Finalize, `return perserve_unreceived_close_errors() > 0;` from main
 * ends the program with a failing status then.
 */
#ifndef PERSERVE_CLIENT_C_H_
#define PERSERVE_CLIENT_C_H_

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (perserve_client_last_error_code), as perserve/status.h numbers them. */
enum perserve_status_code {
  PERSERVE_OK = 0,
  PERSERVE_INVALID_ARGUMENT = 1,
  PERSERVE_OUT_OF_RANGE = 2,
  PERSERVE_FAILED_PRECONDITION = 3,
  PERSERVE_UNAVAILABLE = 4,
  PERSERVE_INTERNAL = 5,
  PERSERVE_NOT_FOUND = 6,
  PERSERVE_UNIMPLEMENTED = 7,
  PERSERVE_RESOURCE_EXHAUSTED = 8,
  PERSERVE_DEADLINE_EXCEEDED = 9 /* a request's timeout passed before the server could serve it */
};

typedef struct perserve_actor perserve_actor;
typedef struct perserve_learner perserve_learner;
typedef struct perserve_bystander perserve_bystander;
/* The schema a client learned at its join; valid while the client is. */
typedef struct perserve_schema perserve_schema;

/* max_in_flight: intake batches sent but unacknowledged before add waits (>= 1). NULL on error. */
perserve_actor* perserve_actor_join(MPI_Fint comm, int max_in_flight);
/* The same with a timeout on every add (seconds, finite and >= 0; 0: none):
 * an add the server's rate limiter still holds back that long after it
 * arrived is rejected with DEADLINE_EXCEEDED and nothing of it stored,
 * reported like any rejected batch (by the next add or flush). */
perserve_actor* perserve_actor_join_with(MPI_Fint comm, int max_in_flight, double add_timeout_seconds);
int perserve_actor_num_columns(const perserve_actor* a);
int64_t perserve_actor_column_bytes(const perserve_actor* a, int column); /* bytes per item; -1 if no such column */
/* priorities: NULL (the server's running max) or n values, finite and >= 0
 * (checked here: a bad one fails this call and nothing is sent). Copies the batch. */
int perserve_actor_add(perserve_actor* a, int64_t n, const void* const* columns, const double* priorities);
/* The same, checked before anything is sent: column_bytes[i] is the length of
 * columns[i] in bytes (n * the column's item bytes), priorities finite and >= 0.
 * A bad batch returns non-zero at once, naming the column, what it expected
 * and what it was given, and sends nothing. */
int perserve_actor_add_columns(perserve_actor* a, int64_t n, const void* const* columns, const int64_t* column_bytes,
                               const double* priorities);
/* The same without copying the columns (ActorClient::AddBorrowed): a batch
 * of at least 64 KiB of columns goes from these arrays straight into the
 * server's store. They must stay unchanged until the batch is acknowledged:
 * after perserve_actor_flush, or once max_in_flight later adds have returned
 * 0, so an actor filling max_in_flight + 1 buffers in turn never waits. */
int perserve_actor_add_borrowed(perserve_actor* a, int64_t n, const void* const* columns, const int64_t* column_bytes,
                                const double* priorities);
/* Step streams (a server started with --n-step or --sequence-length;
 * docs/steps.md): appends n steps (columns[i]: column_bytes[i] bytes of step
 * column i, as perserve_actor_add_columns; n 0: none, columns may be NULL) to
 * this actor's stream, then creates `items` items at the stream indices
 * item_steps[0 .. items-1] (the stream's steps count from 0; these steps
 * included) with priorities (NULL: the server's max) and item columns
 * (item_columns[j]: item_column_bytes[j] bytes of item column j; NULL when
 * the server has none). Checked here as perserve_actor_add_columns; the
 * server's refusals are reported as rejected batches. Copies. */
int perserve_actor_append(perserve_actor* a, int64_t n, const void* const* columns, const int64_t* column_bytes,
                          int64_t items, const int64_t* item_steps, const double* priorities,
                          const void* const* item_columns, const int64_t* item_column_bytes);
/* Several tables (a server of several tables; docs/tables.md): a table is
 * named by a string, NULL or "" meaning the default table (the server's
 * first, which every function without a table argument uses). A name the
 * server does not serve fails PERSERVE_INVALID_ARGUMENT (the error lists the
 * server's tables) and nothing is sent. The tables' count and names, in the
 * server's order (NULL or -1 out of range or on a NULL handle): */
int perserve_actor_num_tables(const perserve_actor* a);
const char* perserve_actor_table_name(const perserve_actor* a, int table);
/* The item columns of a table (valid while the actor is); NULL for an unknown name. */
const perserve_schema* perserve_actor_item_schema(const perserve_actor* a, const char* table);
/* perserve_actor_add_columns into the table of transitions named `table`
 * (one whose items are computed over steps is refused: append to it). */
int perserve_actor_add_table(perserve_actor* a, const char* table, int64_t n, const void* const* columns,
                             const int64_t* column_bytes, const double* priorities);
/* One table's items in perserve_actor_append_tables: `items` items at the
 * stream indices item_steps[0 .. items-1], priorities NULL (the server's
 * max) or one per item, item_columns[j]: item_column_bytes[j] bytes of the
 * table's item column j (NULL when the table has none). */
typedef struct perserve_new_items {
  const char* table; /* NULL or "": the default table */
  int64_t items;
  const int64_t* item_steps;
  const double* priorities;
  const void* const* item_columns;
  const int64_t* item_column_bytes;
} perserve_new_items;
/* perserve_actor_append creating items in several tables in one request:
 * n steps as there, then items[0 .. groups-1], each naming its table at most
 * once. Checked here as perserve_actor_append, per table. Copies. */
int perserve_actor_append_tables(perserve_actor* a, int64_t n, const void* const* columns,
                                 const int64_t* column_bytes, int groups, const perserve_new_items* items);
/* The steps this actor's stream holds so far (the next step's index; after a server's --restore it starts at
   the stream's count at the checkpoint); -1 on a NULL handle. */
int64_t perserve_actor_steps_appended(const perserve_actor* a);
/* 1 when the server stores step streams, 0 when transitions, -1 on a NULL handle. */
int perserve_actor_stores_steps(const perserve_actor* a);
/* *ready = 1 when perserve_actor_add would send at once (fewer than
 * max_in_flight batches unacknowledged; acknowledgements that arrived are
 * taken, nothing waits), else 0: an actor the rate limiter holds back can go
 * on acting instead of waiting in add. */
int perserve_actor_can_add(perserve_actor* a, int* ready);
/* Every batch the server rejected is reported once: a count with the first
 * error ("3 earlier batches were rejected; the first: ..."). */
int perserve_actor_flush(perserve_actor* a);
const perserve_schema* perserve_actor_schema(const perserve_actor* a);
/* Collective over every non-server rank (actors, learners, bystanders): a new
 * communicator over them, as a Fortran handle (MPI_Comm_f2c; free it with
 * MPI_Comm_free), for broadcasts among clients. 0 on success. */
int perserve_actor_peers(perserve_actor* a, MPI_Fint* peers);
/* Flushes, closes and frees the actor (also on error). */
int perserve_actor_close(perserve_actor* a);

perserve_learner* perserve_learner_join(MPI_Fint comm);
/* prefetch: sample requests kept in flight by perserve_learner_sample (0: none),
 * and the bound on perserve_learner_request_sample; max_in_flight: priority
 * updates sent by perserve_learner_send_update before it waits (>= 1). */
perserve_learner* perserve_learner_join_with(MPI_Fint comm, int prefetch, int max_in_flight);
/* The same, and with several server ranks: exact_shard_totals non-zero asks
 * every shard for its total before each sample (ClientOptions::exact_shard_totals). */
perserve_learner* perserve_learner_join_sharded(MPI_Fint comm, int prefetch, int max_in_flight,
                                                int exact_shard_totals);
/* How many server ranks (shards) the learner samples over. */
int perserve_learner_shards(const perserve_learner* l);
/* The replay's state over all its server ranks, asked now (one round trip,
 * answered at once): items stored, items ever added, the sum of the leaves.
 * Any output may be NULL. */
int perserve_learner_info(perserve_learner* l, int64_t* size, int64_t* items_added, double* total);
/* Asks every server rank for a checkpoint and waits until each is durable.
 * paths: capacity bytes for the checkpoints' directories, one a line, by shard
 * (NUL-terminated; OUT_OF_RANGE if they do not fit). */
int perserve_learner_checkpoint(perserve_learner* l, char* paths, size_t capacity);
const perserve_schema* perserve_learner_schema(const perserve_learner* l);
int perserve_learner_num_columns(const perserve_learner* l);
int64_t perserve_learner_column_bytes(const perserve_learner* l, int column);
/* Fills caller-owned arrays: keys[n], weights[n] (may be NULL), columns[i] of n items each (may be NULL). */
int perserve_learner_sample(perserve_learner* l, int64_t n, double beta, uint64_t* keys, double* weights,
                            void* const* columns);
/* The same with a timeout (seconds, finite and >= 0; 0: none): a request the
 * server still defers (the replay below its minimum size) that long after it
 * received it fails with PERSERVE_DEADLINE_EXCEEDED, and the learner stays
 * usable. Prefetched requests carry the timeout of the call that sent them;
 * their clocks start when the server receives them. */
int perserve_learner_sample_timeout(perserve_learner* l, int64_t n, double beta, double timeout_seconds,
                                    uint64_t* keys, double* weights, void* const* columns);
/* The two halves of a sample: requests are answered in the order they were made.
 * receive fills keys[capacity], weights and probabilities (each may be NULL) and
 * columns[i] (may be NULL) for up to `capacity` items; *count_out gets the count. */
int perserve_learner_request_sample(perserve_learner* l, int64_t n, double beta);
/* A request with a timeout, as perserve_learner_sample_timeout: its receive fails with PERSERVE_DEADLINE_EXCEEDED. */
int perserve_learner_request_sample_timeout(perserve_learner* l, int64_t n, double beta, double timeout_seconds);
int perserve_learner_receive_sample(perserve_learner* l, int64_t capacity, int64_t* count_out, uint64_t* keys,
                                    double* weights, double* probabilities, void* const* columns);
/* stale_out (may be NULL): how many keys had been overwritten and were dropped. */
int perserve_learner_update(perserve_learner* l, const uint64_t* keys, const double* priorities, int64_t n,
                            int64_t* stale_out);
/* A priority update that does not wait for the server: acknowledged in the
 * background, a rejection returned by the learner's next call. Copies its input. */
int perserve_learner_send_update(perserve_learner* l, const uint64_t* keys, const double* priorities, int64_t n);
/* Waits for every update sent; returns a rejection not yet returned. */
int perserve_learner_flush(perserve_learner* l);
/* Totals over acknowledged updates, both kinds (each pointer may be NULL):
 * priorities applied, keys whose items had been overwritten (stale), and bad
 * priorities the server dropped (perserve-server --drop-bad-priorities). */
int perserve_learner_update_totals(const perserve_learner* l, int64_t* applied, int64_t* stale, int64_t* dropped);
/* Several tables, named as for the actor (NULL or "": the default table):
 * the tables' count and names in the server's order, and what a sample of
 * a table returns (valid while the learner is; NULL for an unknown name). */
int perserve_learner_num_tables(const perserve_learner* l);
const char* perserve_learner_table_name(const perserve_learner* l, int table);
const perserve_schema* perserve_learner_table_schema(const perserve_learner* l, const char* table);
/* perserve_learner_sample_timeout from a table (columns[i]: n items of the
 * table's sample column i); weights as the server sends them (1 for a table
 * that is not prioritized). Prefetched requests for another table are
 * received and dropped. */
int perserve_learner_sample_table(perserve_learner* l, const char* table, int64_t n, double beta,
                                  double timeout_seconds, uint64_t* keys, double* weights, void* const* columns);
/* perserve_learner_request_sample_timeout from a table; its reply comes by
 * perserve_learner_receive_sample (columns: the table's). */
int perserve_learner_request_sample_table(perserve_learner* l, const char* table, int64_t n, double beta,
                                          double timeout_seconds);
/* perserve_learner_update and _send_update for keys sampled from a table (a
 * key names an item only with its table). A table whose sampler keeps no
 * priorities (uniform, fifo, lifo) fails PERSERVE_INVALID_ARGUMENT, nothing sent. */
int perserve_learner_update_table(perserve_learner* l, const char* table, const uint64_t* keys,
                                  const double* priorities, int64_t n, int64_t* stale_out);
int perserve_learner_send_update_table(perserve_learner* l, const char* table, const uint64_t* keys,
                                       const double* priorities, int64_t n);
/* perserve_learner_info for one table. */
int perserve_learner_info_table(perserve_learner* l, const char* table, int64_t* size, int64_t* items_added,
                                double* total);
int perserve_learner_peers(perserve_learner* l, MPI_Fint* peers);
int perserve_learner_close(perserve_learner* l);

/* A rank that takes part in the join but neither acts nor learns. */
int perserve_bystander_join(MPI_Fint comm);
/* The same, keeping a handle for perserve_bystander_peers. NULL on error. */
perserve_bystander* perserve_bystander_join_with_handle(MPI_Fint comm);
int perserve_bystander_peers(perserve_bystander* b, MPI_Fint* peers);
void perserve_bystander_free(perserve_bystander* b);

/* The schema: columns in order; dtype names "uint8", "int32", "int64",
 * "float32", "float64"; a scalar column has ndim 0. Out-of-range columns give
 * NULL or -1. perserve_schema_string: "name:dtype:d0,d1;..." as the server's
 * --column flags. */
int perserve_schema_num_columns(const perserve_schema* s);
const char* perserve_schema_column_name(const perserve_schema* s, int column);
const char* perserve_schema_column_dtype(const perserve_schema* s, int column);
int perserve_schema_column_ndim(const perserve_schema* s, int column);
int64_t perserve_schema_column_dim(const perserve_schema* s, int column, int axis);
int64_t perserve_schema_column_bytes(const perserve_schema* s, int column); /* bytes per item */
const char* perserve_schema_string(const perserve_schema* s);

/* Close errors printed to stderr because nobody was left to receive them
 * (perserve::UnreceivedCloseErrors in client.h). */
int64_t perserve_unreceived_close_errors(void);

const char* perserve_client_last_error(void);
/* The code of the last error on this thread (enum perserve_status_code; PERSERVE_OK before any). */
int perserve_client_last_error_code(void);

#ifdef __cplusplus
}
#endif

#endif /* PERSERVE_CLIENT_C_H_ */
