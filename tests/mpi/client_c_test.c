/* The client C ABI (perserve/client_c.h) from C, under mpirun beside
 * perserve-server --column id:int64 --column x:float32:2 --min-size-to-sample 50.
 * argv[1]: "actor" adds 50 items (ids 0..49, x = {id, -id}) and, after two rejected
 * batches, item 50; "learner" samples,
 * checks every item's bytes and the weights, updates priorities, closes. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perserve/client_c.h"

#define CHECK(cond)                                                                                       \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, perserve_client_last_error()); \
      exit(1);                                                                                            \
    }                                                                                                     \
  } while (0)

static int run_actor(void) {
  perserve_actor* actor = perserve_actor_join(MPI_Comm_c2f(MPI_COMM_WORLD), 2);
  CHECK(actor != NULL);
  CHECK(perserve_actor_num_columns(actor) == 2);
  CHECK(perserve_actor_column_bytes(actor, 0) == 8 && perserve_actor_column_bytes(actor, 1) == 8);
  CHECK(perserve_actor_column_bytes(actor, 2) == -1);
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
    CHECK(perserve_actor_add(actor, 5, columns, priorities) == 0);
  }
  double bad[1] = {NAN};
  int64_t one_id[1] = {7};
  float one_x[2] = {0, 0};
  const void* one[2] = {one_id, one_x};
  perserve_actor_add(actor, 1, one, bad); /* rejected by the server: seen at flush */
  CHECK(perserve_actor_flush(actor) != 0);
  CHECK(strstr(perserve_client_last_error(), "priority") != NULL);
  /* The same, seen by a later add (2 in flight): that add sends nothing and says so. */
  CHECK(perserve_actor_add(actor, 1, one, bad) == 0);
  one_id[0] = 50;
  one_x[0] = 50.0f;
  one_x[1] = -50.0f;
  CHECK(perserve_actor_add(actor, 1, one, NULL) == 0); /* key 50 */
  CHECK(perserve_actor_add(actor, 1, one, NULL) != 0);
  CHECK(strstr(perserve_client_last_error(), "earlier batch was rejected, and this one was not sent") != NULL);
  CHECK(perserve_actor_flush(actor) == 0);
  CHECK(perserve_actor_close(actor) == 0);
  return 0;
}

static int run_learner(void) {
  perserve_learner* learner = perserve_learner_join(MPI_Comm_c2f(MPI_COMM_WORLD));
  CHECK(learner != NULL);
  enum { kBatch = 32 };
  uint64_t keys[kBatch];
  double weights[kBatch];
  int64_t ids[kBatch];
  float x[2 * kBatch];
  void* columns[2] = {ids, x};
  CHECK(perserve_learner_sample(learner, kBatch, 0.5, keys, weights, columns) == 0);
  double priorities[kBatch];
  for (int i = 0; i < kBatch; ++i) {
    CHECK(keys[i] <= 50);
    CHECK(ids[i] == (int64_t)keys[i]); /* one actor: keys are ids */
    CHECK(x[2 * i] == (float)ids[i] && x[2 * i + 1] == -(float)ids[i]);
    CHECK(weights[i] > 0.0 && weights[i] <= 1.0 + 1e-12);
    priorities[i] = 0.5;
  }
  int64_t stale = -1;
  CHECK(perserve_learner_update(learner, keys, priorities, kBatch, &stale) == 0);
  CHECK(stale == 0);
  priorities[0] = -1.0;
  CHECK(perserve_learner_update(learner, keys, priorities, kBatch, &stale) != 0);
  CHECK(strstr(perserve_client_last_error(), "INVALID_ARGUMENT") != NULL);
  CHECK(perserve_learner_close(learner) == 0);
  printf("client_c_test: learner sampled %d items and checked them from C\n", kBatch);
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int code = argc > 1 && strcmp(argv[1], "actor") == 0 ? run_actor() : run_learner();
  MPI_Finalize();
  return code;
}
