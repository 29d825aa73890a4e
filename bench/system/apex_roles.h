// The two client roles of perserve_bench_apex, each a phase at a time at a
// set rate, over the public client library only (perserve/client.h), so
// the benchmark runs against any perserve-server:
//   ApexActor   appends Atari steps (bench_schemas.h's AtariStepSchema: an
//               84x84 frame, action, reward, done), 50 an append, paced to a
//               rate in steps/s, creating the 3-step items each append
//               completes (system/step_schedule.h), with priorities;
//   ApexLearner asks for samples of a batch size, paced to a rate in batches/s
//               (or back to back), one request in flight: each sample's
//               latency is then exactly its request's trip (with more in
//               flight, a reply that arrived while the learner waited for its
//               next send time would count that wait), and sends new
//               priorities for its keys without waiting (Ape-X's learner).
// Neither owns the MPI job: main() joins, and they run on the joined client.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "perserve/client.h"
#include "system/step_schedule.h"

namespace perserve::bench {

inline constexpr int64_t kApexAppendSteps = 50;  // steps an append carries
inline constexpr int kApexInFlight = 4;          // appends in flight (ClientOptions::max_in_flight)

// What one rank did in one phase.
struct PhaseCounts {
  double seconds = 0;
  double steps = 0;    // an actor's appended steps
  double samples = 0;  // a learner's sampled items
  std::vector<double> latencies_ms;  // a learner's, one a sample
};

class ApexActor {
 public:
  // Checks that `actor`'s server stores step streams of n-step items.
  ApexActor(ActorClient* actor, uint64_t seed);

  // Appends at `steps_per_second` (0: as fast as the server takes them) for
  // `seconds`, catching up after a stall, then flushes (untimed).
  Status RunPhase(double steps_per_second, double seconds, PhaseCounts* counts);
  // Appends `steps` (rounded up to whole appends) as fast as the server
  // takes them, then flushes: the untimed fill before the phases.
  Status Fill(int64_t steps);

 private:
  Status AppendOnce();

  ActorClient* actor_;
  StepSchedule schedule_;
  std::mt19937_64 rng_;
  std::vector<std::vector<std::byte>> columns_;       // one append's steps, never changed
  std::vector<std::vector<std::byte>> done_columns_;  // a done column for each append in flight, in turn
  size_t next_done_ = 0;
  int done_column_ = -1;
  std::vector<double> priorities_;
  std::vector<int64_t> items_;
};

class ApexLearner {
 public:
  ApexLearner(LearnerClient* learner, int64_t batch_size, uint64_t seed);

  // Asks for a sample at `batches_per_second` (0: back to back) for
  // `seconds`; a request whose time has passed goes at once.
  Status RunPhase(double batches_per_second, double seconds, PhaseCounts* counts);
  // One sample and its update.
  Status SampleOnce(PhaseCounts* counts);

 private:
  LearnerClient* learner_;
  int64_t batch_size_;
  std::mt19937_64 rng_;
  SampleBatch batch_;
  std::vector<double> priorities_;
};

}  // namespace perserve::bench
