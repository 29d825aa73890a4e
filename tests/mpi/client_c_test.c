/* The client C ABI (perserve/client_c.h) from C, under mpirun beside
 * perserve-server --column id:int64 --column x:float32:2 --min-size-to-sample 50 --capacity 64.
 * argv[1]: "actor" reads the schema, adds 50 items (ids 0..49, x = {id, -id}),
 * has bad batches refused at their own add (a NaN priority, a short column),
 * has batches of 65 items (over the capacity) rejected by the server and
 * reported by flush and by a later add, then adds item 50; "learner" samples
 * (one call, then prefetched halves), checks every item's bytes and the
 * weights, updates priorities with and without waiting, closes. Both then
 * broadcast over the peers communicator.
 * Before anything is added (the actor waits on a first peers broadcast), the
 * learner's sample with a 0.5 s timeout must fail with
 * PERSERVE_DEADLINE_EXCEEDED (issue 12); the actor joins with an add
 * timeout, which changes nothing where no rate limiter holds adds back. */
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "perserve/client_c.h"

#define CHECK(cond)                                                                                       \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, perserve_client_last_error()); \
      exit(1);                                                                                            \
    }                                                                                                     \
  } while (0)

static void check_peers(MPI_Fint peers_handle, int expect_root_value) {
  MPI_Comm peers = MPI_Comm_f2c(peers_handle);
  int size = 0, value = expect_root_value;
  MPI_Comm_size(peers, &size);
  CHECK(size == 2); /* the actor and the learner, not the server */
  MPI_Bcast(&value, 1, MPI_INT, 1, peers); /* root: the learner, rank 1 of the peers */
  CHECK(value == 4242);
  MPI_Comm_free(&peers);
}

/* The first broadcast over a peers communicator: the learner (root) says when
 * it is done with the empty replay, before the actor adds anything. */
static void wait_for_learner(MPI_Fint peers_handle) {
  MPI_Comm peers = MPI_Comm_f2c(peers_handle);
  int go = 0;
  MPI_Bcast(&go, 1, MPI_INT, 1, peers);
  CHECK(go == 1);
  MPI_Comm_free(&peers);
}

static int run_actor(void) {
  /* A bad add timeout is refused before the (collective) join. */
  CHECK(perserve_actor_join_with(MPI_Comm_c2f(MPI_COMM_WORLD), 2, -1.0) == NULL);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);
  CHECK(strstr(perserve_client_last_error(), "add_timeout_seconds") != NULL);
  perserve_actor* actor = perserve_actor_join_with(MPI_Comm_c2f(MPI_COMM_WORLD), 2, 30.0);
  CHECK(actor != NULL);
  MPI_Fint first_peers;
  CHECK(perserve_actor_peers(actor, &first_peers) == 0);
  wait_for_learner(first_peers);
  CHECK(perserve_actor_num_columns(actor) == 2);
  CHECK(perserve_actor_column_bytes(actor, 0) == 8 && perserve_actor_column_bytes(actor, 1) == 8);
  CHECK(perserve_actor_column_bytes(actor, 2) == -1);
  const perserve_schema* schema = perserve_actor_schema(actor);
  CHECK(perserve_schema_num_columns(schema) == 2);
  CHECK(strcmp(perserve_schema_column_name(schema, 1), "x") == 0);
  CHECK(strcmp(perserve_schema_column_dtype(schema, 0), "int64") == 0);
  CHECK(strcmp(perserve_schema_column_dtype(schema, 1), "float32") == 0);
  CHECK(perserve_schema_column_ndim(schema, 0) == 0 && perserve_schema_column_ndim(schema, 1) == 1);
  CHECK(perserve_schema_column_dim(schema, 1, 0) == 2 && perserve_schema_column_dim(schema, 1, 1) == -1);
  CHECK(perserve_schema_column_name(schema, 2) == NULL && perserve_schema_column_bytes(schema, -1) == -1);
  CHECK(strcmp(perserve_schema_string(schema), "id:int64:;x:float32:2") == 0);
  for (int64_t batch = 0; batch < 10; ++batch) {
    int64_t ids[5];
    float x[10];
    double priorities[5];
    for (int j = 0; j < 5; ++j) {
      ids[j] = batch * 5 + j;
      x[2 * j] = (float)ids[j];
      x[2 * j + 1] = -(float)ids[j];
      priorities[j] = 1.0 + (double)j;
    }
    const void* columns[2] = {ids, x};
    if (batch % 2 == 0) {
      CHECK(perserve_actor_add(actor, 5, columns, priorities) == 0);
    } else {
      const int64_t bytes[2] = {sizeof ids, sizeof x};
      CHECK(perserve_actor_add_columns(actor, 5, columns, bytes, priorities) == 0);
    }
  }
  double bad[1] = {NAN};
  int64_t one_id[1] = {7};
  float one_x[2] = {0, 0};
  const void* one[2] = {one_id, one_x};
  /* Refused at its own add, nothing sent: the flush after it has nothing to report. */
  CHECK(perserve_actor_add(actor, 1, one, bad) != 0);
  CHECK(strstr(perserve_client_last_error(), "priority nan at position 0 must be finite and >= 0") != NULL);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);
  const int64_t short_x[2] = {8, 4};
  CHECK(perserve_actor_add_columns(actor, 1, one, short_x, NULL) != 0);
  CHECK(strstr(perserve_client_last_error(), "column \"x\": expected 8 bytes") != NULL);
  CHECK(strstr(perserve_client_last_error(), "given 4 bytes") != NULL);
  CHECK(perserve_actor_add_borrowed(actor, 1, one, short_x, NULL) != 0); /* checked the same way */
  CHECK(strstr(perserve_client_last_error(), "column \"x\": expected 8 bytes") != NULL);
  CHECK(perserve_actor_add_borrowed(NULL, 1, one, short_x, NULL) != 0);
  CHECK(perserve_actor_flush(actor) == 0);
  int ready = 0; /* nothing in flight after a flush: an add would send at once */
  CHECK(perserve_actor_can_add(actor, &ready) == 0 && ready == 1);
  CHECK(perserve_actor_can_add(actor, NULL) != 0);
  /* Tables: this server has one, "default" (what every call without a table uses); another name is refused
   * before anything is sent. */
  CHECK(perserve_actor_num_tables(actor) == 1 && strcmp(perserve_actor_table_name(actor, 0), "default") == 0);
  CHECK(perserve_actor_table_name(actor, 1) == NULL && perserve_actor_num_tables(NULL) == -1);
  CHECK(perserve_schema_num_columns(perserve_actor_item_schema(actor, "default")) == 0);
  CHECK(perserve_actor_item_schema(actor, NULL) == perserve_actor_item_schema(actor, "default"));
  CHECK(perserve_actor_item_schema(actor, "r2d2") == NULL);
  const int64_t one_bytes[2] = {8, 8};
  CHECK(perserve_actor_add_table(actor, "r2d2", 1, one, one_bytes, NULL) != 0);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);
  CHECK(strstr(perserve_client_last_error(), "no table \"r2d2\": the server's tables are \"default\"") != NULL);
  const int64_t item_step[1] = {0};
  const perserve_new_items unknown[1] = {{"r2d2", 1, item_step, NULL, NULL, NULL}};
  CHECK(perserve_actor_append_tables(actor, 0, NULL, NULL, 1, unknown) != 0);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);
  CHECK(perserve_actor_flush(actor) == 0); /* nothing was sent */

  /* Over the capacity (64): only the server knows; flush reports it. */
  enum { kBig = 65 };
  int64_t big_ids[kBig];
  float big_x[2 * kBig];
  memset(big_ids, 0, sizeof big_ids);
  memset(big_x, 0, sizeof big_x);
  const void* big[2] = {big_ids, big_x};
  CHECK(perserve_actor_add(actor, kBig, big, NULL) == 0);
  CHECK(perserve_actor_flush(actor) != 0);
  CHECK(strstr(perserve_client_last_error(), "capacity") != NULL);
  /* The same, seen by a later add (2 in flight): that add sends nothing and says so. */
  CHECK(perserve_actor_add(actor, kBig, big, NULL) == 0);
  one_id[0] = 50;
  one_x[0] = 50.0f;
  one_x[1] = -50.0f;
  CHECK(perserve_actor_add(actor, 1, one, NULL) == 0); /* key 50 */
  CHECK(perserve_actor_add(actor, 1, one, NULL) != 0);
  CHECK(strstr(perserve_client_last_error(), "earlier batch was rejected, and this one was not sent") != NULL);
  CHECK(perserve_actor_flush(actor) == 0);

  /* An allocation that fails inside the library comes back as an error, not
   * an exception through C: a 1 GiB batch (its lengths claimed, never read)
   * under an address-space limit 256 MiB above what the process maps now
   * (not under AddressSanitizer, whose shadow memory such a limit breaks). */
#ifndef __SANITIZE_ADDRESS__
  {
    long pages = 0;
    FILE* statm = fopen("/proc/self/statm", "r");
    CHECK(statm != NULL && fscanf(statm, "%ld", &pages) == 1);
    fclose(statm);
    struct rlimit saved, tight;
    CHECK(getrlimit(RLIMIT_AS, &saved) == 0);
    tight = saved;
    tight.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
    CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
    const int64_t n = (int64_t)1 << 26; /* 16 bytes an item: 1 GiB */
    const int64_t claimed[2] = {8 * n, 8 * n};
    const int result = perserve_actor_add_columns(actor, n, one, claimed, NULL);
    CHECK(setrlimit(RLIMIT_AS, &saved) == 0);
    CHECK(result != 0);
    CHECK(strstr(perserve_client_last_error(), "RESOURCE_EXHAUSTED") != NULL);
    CHECK(perserve_client_last_error_code() == PERSERVE_RESOURCE_EXHAUSTED);
    CHECK(perserve_actor_flush(actor) == 0); /* nothing was sent */
  }
#endif
  MPI_Fint peers;
  CHECK(perserve_actor_peers(actor, &peers) == 0);
  check_peers(peers, 0);
  CHECK(perserve_actor_close(actor) == 0);
  return 0;
}

static void check_sample(const uint64_t* keys, const double* weights, const int64_t* ids, const float* x, int n) {
  for (int i = 0; i < n; ++i) {
    CHECK(keys[i] <= 50);
    CHECK(ids[i] == (int64_t)keys[i]); /* one actor: keys are ids */
    CHECK(x[2 * i] == (float)ids[i] && x[2 * i + 1] == -(float)ids[i]);
    CHECK(weights[i] > 0.0 && weights[i] <= 1.0 + 1e-12);
  }
}

static void on_alarm(int signal) {
  (void)signal;
  static const char message[] = "client_c_test: no DEADLINE_EXCEEDED after 20 s: does the server honour timeouts?\n";
  (void)!write(STDERR_FILENO, message, sizeof message - 1);
  _exit(3);
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int run_learner(void) {
  /* Exact shard totals: nothing to ask with one server, but the flag is taken. */
  perserve_learner* learner = perserve_learner_join_sharded(MPI_Comm_c2f(MPI_COMM_WORLD), 2, 4, 1);
  CHECK(learner != NULL);
  CHECK(perserve_learner_shards(learner) == 1);
  CHECK(strcmp(perserve_schema_string(perserve_learner_schema(learner)), "id:int64:;x:float32:2") == 0);
  enum { kBatch = 32 };
  uint64_t keys[kBatch];
  double weights[kBatch], probabilities[kBatch];
  int64_t ids[kBatch];
  float x[2 * kBatch];
  void* columns[2] = {ids, x};

  /* The replay is empty (the actor waits for the broadcast below): the server
   * defers the sample until its timeout. A server that ignored it would hang
   * this rank: the alarm ends it instead. */
  MPI_Fint first_peers;
  CHECK(perserve_learner_peers(learner, &first_peers) == 0);
  int64_t size = -1, added = -1;
  double total = -1.0;
  CHECK(perserve_learner_info(learner, &size, &added, &total) == 0); /* answered at once, empty or not */
  CHECK(size == 0 && added == 0 && total == 0.0);
  char paths[256];
  CHECK(perserve_learner_checkpoint(learner, paths, sizeof paths) != 0); /* no --checkpoint-dir */
  CHECK(perserve_client_last_error_code() == PERSERVE_FAILED_PRECONDITION);
  CHECK(strstr(perserve_client_last_error(), "--checkpoint-dir") != NULL);
  CHECK(perserve_learner_sample_timeout(learner, 8, 0.5, -1.0, keys, NULL, NULL) != 0);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);
  signal(SIGALRM, on_alarm);
  alarm(20);
  const double started = now_seconds();
  CHECK(perserve_learner_sample_timeout(learner, 8, 0.5, 0.5, keys, weights, columns) != 0);
  const double waited = now_seconds() - started;
  CHECK(perserve_client_last_error_code() == PERSERVE_DEADLINE_EXCEEDED);
  CHECK(strncmp(perserve_client_last_error(), "DEADLINE_EXCEEDED: ", 19) == 0);
  CHECK(waited >= 0.4 && waited <= 5.0);
  CHECK(perserve_learner_request_sample_timeout(learner, 4, 0.5, 0.3) == 0);
  CHECK(perserve_learner_receive_sample(learner, kBatch, NULL, keys, NULL, NULL, NULL) != 0);
  CHECK(perserve_client_last_error_code() == PERSERVE_DEADLINE_EXCEEDED);
  alarm(0);
  {
    MPI_Comm peers = MPI_Comm_f2c(first_peers);
    int go = 1;
    MPI_Bcast(&go, 1, MPI_INT, 1, peers);
    MPI_Comm_free(&peers);
  }

  /* The learner goes on: this sample waits for the actor's items. */
  CHECK(perserve_learner_sample_timeout(learner, kBatch, 0.5, 60.0, keys, weights, columns) == 0);
  check_sample(keys, weights, ids, x, kBatch);
  double priorities[kBatch];
  for (int i = 0; i < kBatch; ++i) priorities[i] = 0.5;
  int64_t stale = -1;
  CHECK(perserve_learner_update(learner, keys, priorities, kBatch, &stale) == 0);
  CHECK(stale == 0);
  priorities[0] = -1.0;
  CHECK(perserve_learner_update(learner, keys, priorities, kBatch, &stale) != 0);
  CHECK(strstr(perserve_client_last_error(), "INVALID_ARGUMENT") != NULL);
  /* A zero TD error is a valid priority under the server's default
   * --priority-eps (1e-6, as Baselines' learners add): applied, not refused. */
  priorities[0] = 0.0;
  CHECK(perserve_learner_update(learner, keys, priorities, kBatch, &stale) == 0);
  priorities[0] = 0.5;

  /* The sample above left 2 requests (prefetch) in flight: receive them, then
   * the halves by hand, answered in the order requested (sizes 3, then 5). */
  int64_t count = -1;
  for (int i = 0; i < 2; ++i) {
    CHECK(perserve_learner_receive_sample(learner, kBatch, &count, keys, weights, probabilities, columns) == 0);
    CHECK(count == kBatch);
    check_sample(keys, weights, ids, x, kBatch);
  }
  CHECK(perserve_learner_receive_sample(learner, kBatch, &count, keys, NULL, NULL, NULL) != 0);
  CHECK(strstr(perserve_client_last_error(), "FAILED_PRECONDITION: no sample request is in flight") != NULL);
  CHECK(perserve_learner_request_sample(learner, 3, 0.5) == 0);
  CHECK(perserve_learner_request_sample(learner, 5, 0.5) == 0);
  CHECK(perserve_learner_request_sample(learner, 7, 0.5) != 0); /* prefetch 2 is the bound */
  CHECK(perserve_learner_receive_sample(learner, kBatch, &count, keys, weights, probabilities, columns) == 0);
  CHECK(count == 3);
  CHECK(perserve_learner_receive_sample(learner, kBatch, &count, keys, weights, probabilities, columns) == 0);
  CHECK(count == 5);
  check_sample(keys, weights, ids, x, 5);
  for (int i = 0; i < 5; ++i) CHECK(probabilities[i] > 0.0 && probabilities[i] <= 1.0);

  /* Updates that do not wait: acknowledged in the background; a rejection is
   * returned by the next call (here flush). */
  CHECK(perserve_learner_send_update(learner, keys, priorities, 5) == 0);
  CHECK(perserve_learner_flush(learner) == 0);
  const uint64_t never[1] = {(uint64_t)1 << 40};
  CHECK(perserve_learner_send_update(learner, never, priorities, 1) == 0);
  CHECK(perserve_learner_flush(learner) != 0);
  CHECK(strstr(perserve_client_last_error(), "NOT_FOUND: an earlier priority update was rejected") != NULL);
  CHECK(perserve_learner_flush(learner) == 0);
  int64_t applied = -1, dropped = -1;
  stale = -1;
  CHECK(perserve_learner_update_totals(learner, &applied, &stale, &dropped) == 0);
  CHECK(applied == 2 * kBatch + 5 && stale == 0 && dropped == 0); /* two whole updates, then 5 */

  /* Tables: this server has one, "default"; by name (or NULL) it is what every call above used. */
  CHECK(perserve_learner_num_tables(learner) == 1 && strcmp(perserve_learner_table_name(learner, 0), "default") == 0);
  CHECK(perserve_learner_table_name(learner, -1) == NULL);
  CHECK(perserve_learner_table_schema(learner, NULL) == perserve_learner_table_schema(learner, "default"));
  const perserve_schema* default_table = perserve_learner_table_schema(learner, "default");
  CHECK(strcmp(perserve_schema_string(default_table), "id:int64:;x:float32:2") == 0);
  CHECK(perserve_learner_table_schema(learner, "r2d2") == NULL);
  CHECK(perserve_learner_sample_table(learner, "default", kBatch, 0.5, 60.0, keys, weights, columns) == 0);
  check_sample(keys, weights, ids, x, kBatch);
  CHECK(perserve_learner_update_table(learner, "default", keys, priorities, kBatch, &stale) == 0 && stale == 0);
  CHECK(perserve_learner_send_update_table(learner, NULL, keys, priorities, kBatch) == 0);
  CHECK(perserve_learner_flush(learner) == 0);
  CHECK(perserve_learner_info_table(learner, "default", &size, &added, &total) == 0 && size > 0 && total > 0.0);
  CHECK(perserve_learner_sample_table(learner, "r2d2", kBatch, 0.5, 0.0, keys, weights, columns) != 0);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);
  CHECK(strstr(perserve_client_last_error(), "no table \"r2d2\"") != NULL);
  CHECK(perserve_learner_request_sample_table(learner, "r2d2", 4, 0.5, 0.0) != 0);
  CHECK(perserve_learner_update_table(learner, "r2d2", keys, priorities, kBatch, NULL) != 0);
  CHECK(perserve_learner_send_update_table(learner, "r2d2", keys, priorities, kBatch) != 0);
  CHECK(perserve_learner_info_table(learner, "r2d2", &size, &added, &total) != 0);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);

  MPI_Fint peers;
  CHECK(perserve_learner_peers(learner, &peers) == 0);
  check_peers(peers, 4242);
  CHECK(perserve_learner_close(learner) == 0);
  /* A join with no server in the communicator fails with an error, not a crash. */
  CHECK(perserve_learner_join_with(MPI_Comm_c2f(MPI_COMM_SELF), 0, 1) == NULL);
  CHECK(strstr(perserve_client_last_error(), "no rank joined as a perserve server") != NULL);
  printf("client_c_test: learner sampled and checked items from C\n");
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int code = argc > 1 && strcmp(argv[1], "actor") == 0 ? run_actor() : run_learner();
  MPI_Finalize();
  return code;
}
