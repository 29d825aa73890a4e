// LibraryLearner: a learner of the real client library in the simulation
// (library_client.h). It samples with prefetch and changing beta and batch
// sizes (over several shards through its ShardSampler), now and then in
// halves (RequestSample, ReceiveSample), with timeouts, and updates
// priorities of keys it sampled (some bad, some never issued, some of no
// shard of the job); it asks for Info and checkpoints, flushes and closes.
// Every call's status must be one the model allows (a code some reply
// brought, or the library's own: FAILED_PRECONDITION from a sample only
// once every actor of every shard has sent its close, DEADLINE_EXCEEDED
// only past a timeout it set), updates() what the replies said, and every
// batch what SampledBatchChecks says.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "perserve/client.h"
#include "server/service/simulation/library_client.h"
#include "server/service/simulation/sampled_batch_checks.h"

namespace perserve::service::simulation {

class LibraryLearner final : public LibraryClient {
 public:
  LibraryLearner(int client, LibraryWorld* world);

 private:
  // A call that may send sample requests: when it began, its timeout, and
  // every shard's replay version then.
  struct SampleCall {
    std::chrono::steady_clock::time_point began;
    double timeout = 0.0;
    std::vector<uint64_t> versions;
    bool none_in_flight = false;  // it began with no sample request in flight
  };
  struct Requested {
    int64_t batch_size;
    double beta;
  };
  void Act() override;
  void Finish() override;
  Status CloseClient() override { return learner_->Close(); }
  const char* role() const override { return "learner"; }

  void Sample();
  void Halves();
  // With several tables: a sample of another table than the default, by
  // name (its sampler's draws; the StepModel checks each as the service
  // sends it), with nothing in flight.
  void SampleOtherTable();
  void Update();
  void BeginSampleCall(double timeout);
  double DrawTimeout();
  // A call's error: one some reply brought, or (a sample's) the library's own.
  void ExpectAllowed(const Status& status, const char* call, bool sample_call, bool local_invalid_argument = false);
  // For SampledBatchChecks: the shards' versions since which nothing may
  // have changed for a sharded batch to be exact (null: no such moment known).
  const std::vector<uint64_t>* ShardedSince() const;
  void CheckCounts(const char* when) const;

  ClientOptions options_;
  bool halves_ = false;  // samples with RequestSample / ReceiveSample only
  std::unique_ptr<LearnerClient> learner_;
  SampleBatch batch_;  // reused: the library receives into the previous reply's memory
  int64_t batch_size_ = 1;
  double beta_ = 0.4;
  std::vector<uint64_t> keys_;       // of the last batch, for updates
  std::deque<SampleCall> calls_;     // the last few
  std::deque<Requested> requested_;  // a halves learner's requests in flight
  SampledBatchChecks checks_;
};

}  // namespace perserve::service::simulation
