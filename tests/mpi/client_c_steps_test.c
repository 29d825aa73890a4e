/* Step streams through the client C ABI (perserve/client_c.h), under mpirun
 * beside perserve-server --column obs:uint8:2 --column reward:float32
 * --column done:uint8 --n-step 2 --discount 0.5 --stack obs:2
 * --item-column tag:int32 --capacity 64 --min-size-to-sample 4.
 * argv[1]: "actor" appends 6 steps (obs {1, i}, reward i, done at step 3)
 * and items at 0 .. 3 (tag 100 + step), has bad appends refused at the call
 * (a negative count, items without their column, an item past its stream) and
 * one refused by the server (an item whose n steps are not in yet: reported
 * by flush, and the stream goes back to the steps acknowledged), then closes;
 * "learner" samples 32 items and checks each one's stacked obs, n-step return,
 * discount, next obs and tag against the steps. */
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

enum { kSteps = 6, kBatch = 32 };

static float reward_of(int64_t step) { return (float)step; }
static int ends_episode(int64_t step) { return step == 3; }

static int run_actor(void) {
  perserve_actor* actor = perserve_actor_join(MPI_Comm_c2f(MPI_COMM_WORLD), 4);
  CHECK(actor != NULL);
  CHECK(perserve_actor_stores_steps(actor) == 1);
  CHECK(perserve_actor_steps_appended(actor) == 0);
  uint8_t obs[2 * kSteps];
  float reward[kSteps];
  uint8_t done[kSteps];
  for (int i = 0; i < kSteps; ++i) {
    obs[2 * i] = 1;
    obs[2 * i + 1] = (uint8_t)i;
    reward[i] = reward_of(i);
    done[i] = (uint8_t)ends_episode(i);
  }
  const void* columns[3] = {obs, reward, done};
  const int64_t bytes[3] = {sizeof obs, sizeof reward, sizeof done};
  const int64_t at[4] = {0, 1, 2, 3};
  const double priorities[4] = {1, 2, 3, 4};
  const int32_t tags[4] = {100, 101, 102, 103};
  const void* item_columns[1] = {tags};
  const int64_t item_bytes[1] = {sizeof tags};
  /* Refused here, nothing sent. */
  CHECK(perserve_actor_append(actor, -1, columns, bytes, 4, at, priorities, item_columns, item_bytes) != 0);
  CHECK(perserve_actor_append(actor, kSteps, columns, bytes, 4, at, priorities, NULL, NULL) != 0);
  CHECK(strstr(perserve_client_last_error(), "item_columns") != NULL);
  const int64_t past[1] = {kSteps};
  CHECK(perserve_actor_append(actor, kSteps, columns, bytes, 1, past, NULL, item_columns, item_bytes) != 0);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);
  CHECK(perserve_actor_steps_appended(actor) == 0);
  /* The same items as the default table's of several (this server's one table, "default"): a table named twice, or
   * one the server does not serve, is refused here. */
  CHECK(perserve_schema_num_columns(perserve_actor_item_schema(actor, "default")) == 1);
  const perserve_new_items twice[2] = {{"default", 4, at, priorities, item_columns, item_bytes},
                                       {NULL, 4, at, priorities, item_columns, item_bytes}};
  CHECK(perserve_actor_append_tables(actor, kSteps, columns, bytes, 2, twice) != 0);
  CHECK(strstr(perserve_client_last_error(), "two NewItems name table \"default\"") != NULL);
  const perserve_new_items unknown[1] = {{"r2d2", 4, at, priorities, item_columns, item_bytes}};
  CHECK(perserve_actor_append_tables(actor, kSteps, columns, bytes, 1, unknown) != 0);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);
  CHECK(perserve_actor_steps_appended(actor) == 0);
  /* Steps 0-5 and items 0-3 (item 2's n steps end at 3, the episode's end; item 3 is that end). */
  CHECK(perserve_actor_append_tables(actor, kSteps, columns, bytes, 1, twice) == 0);
  CHECK(perserve_actor_steps_appended(actor) == kSteps);
  CHECK(perserve_actor_flush(actor) == 0);
  /* Refused by the server: an item at step 5 needs step 7. Reported by flush;
   * the stream then goes on from the steps acknowledged. */
  const int64_t early[1] = {5};
  CHECK(perserve_actor_append(actor, 1, columns, (const int64_t[3]){2, 4, 1}, 1, early, NULL, item_columns,
                              (const int64_t[1]){4}) == 0);
  CHECK(perserve_actor_flush(actor) != 0);
  CHECK(perserve_client_last_error_code() == PERSERVE_INVALID_ARGUMENT);
  CHECK(strstr(perserve_client_last_error(), "step 5") != NULL);
  CHECK(perserve_actor_append(actor, 1, columns, (const int64_t[3]){2, 4, 1}, 0, NULL, NULL, NULL, NULL) == 0);
  CHECK(perserve_actor_steps_appended(actor) == kSteps + 1);
  CHECK(perserve_actor_close(actor) == 0);
  return 0;
}

static int run_learner(void) {
  perserve_learner* learner = perserve_learner_join(MPI_Comm_c2f(MPI_COMM_WORLD));
  CHECK(learner != NULL);
  CHECK(strcmp(perserve_schema_string(perserve_learner_schema(learner)),
               "obs:uint8:2,2;return:float64:;discount:float64:;next_obs:uint8:2,2;tag:int32:") == 0);
  uint64_t keys[kBatch];
  double weights[kBatch];
  uint8_t obs[4 * kBatch], next_obs[4 * kBatch];
  double returns[kBatch], discounts[kBatch];
  int32_t tags[kBatch];
  void* columns[5] = {obs, returns, discounts, next_obs, tags};
  CHECK(perserve_learner_sample_timeout(learner, kBatch, 0.5, 60.0, keys, weights, columns) == 0);
  for (int i = 0; i < kBatch; ++i) {
    const int64_t t = tags[i] - 100;
    CHECK(t >= 0 && t <= 3 && keys[i] == (uint64_t)t);
    /* obs stacked 2 deep on the last axis: {frame t-1, frame t} per byte; zero before the episode's start (0). */
    const uint8_t want_obs[4] = {t > 0 ? 1 : 0, 1, t > 0 ? (uint8_t)(t - 1) : 0, (uint8_t)t};
    CHECK(memcmp(&obs[4 * i], want_obs, 4) == 0);
    /* n' = 2, or 1 at step 3 (the episode's end); the discount 0 at the end. */
    const int64_t n = t == 3 ? 1 : 2;
    double want_return = 0.0, g = 1.0;
    for (int64_t j = 0; j < n; ++j) {
      want_return += g * (double)reward_of(t + j);
      g *= 0.5;
    }
    const int terminal = t + n - 1 == 3;
    CHECK(returns[i] == want_return);
    CHECK(discounts[i] == (terminal ? 0.0 : g));
    const uint8_t zeros[4] = {0, 0, 0, 0};
    const uint8_t want_next[4] = {1, 1, (uint8_t)(t + n - 1), (uint8_t)(t + n)};
    CHECK(memcmp(&next_obs[4 * i], terminal ? zeros : want_next, 4) == 0);
    CHECK(weights[i] > 0.0 && weights[i] <= 1.0);
  }
  CHECK(perserve_learner_close(learner) == 0);
  printf("client_c_steps: %d sampled items as the steps say\n", kBatch);
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int code = argc > 1 && strcmp(argv[1], "actor") == 0 ? run_actor() : run_learner();
  MPI_Finalize();
  return code;
}
