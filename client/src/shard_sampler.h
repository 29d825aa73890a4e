// ShardSampler: a learner's prioritized sample over several replay ranks as
// one replay (internal to the client library).
//
// Each server rank is a shard holding part of the items. A sample of B items
// is stratified over the global total T = sum of the shards' totals: stratum
// j is [j T / B, (j + 1) T / B), one uniform draw u_j in each, and the shard
// whose share of [0, T) holds u_j draws the item at fraction
// (u_j - its offset) / its total of its own current total. So every item i is
// drawn with probability leaf_i / T, exactly as one replay holding every
// shard's items would draw it, when the totals used for the split are the
// shards' current ones. They are by default those of each shard's last reply
// (no extra round trip): between that reply and the draw, other learners'
// updates and actors' adds may change them; then a stratum still picks its
// shard with the old totals' odds and, inside the shard, its item with the
// current priorities. ClientOptions::exact_shard_totals asks every shard for
// its total first (one more round trip per sample).
//
// A shard takes part once it holds its --min-size-to-sample items; before any
// does, a sample waits for them (a probe per shard, answered when that shard
// is ready, or at once with FAILED_PRECONDITION when it never can be: no
// actor remains open on it). The batch's order is a random permutation of the
// strata, so any sub-batch is an unbiased sample too. IS weights are
// (leaf_i / global min leaf)^-beta over every shard's smallest leaf, the same
// numbers one replay of the union gives; probabilities are the ones drawn
// with: (the split's total of its shard / the split's T) x leaf_i / (the
// shard's total when it drew).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "client/src/connection.h"
#include "perserve/client.h"
#include "perserve/status.h"

namespace perserve::client_internal {

// What a shard last said about itself.
struct ShardState {
  bool ready = false;   // it holds its minimum size (and can ever be drawn from)
  int64_t size = 0;
  double total = 0.0;
  double min_leaf = 0.0;
  std::string why_not;  // its refusal, when it can never be ready
};

// Which shard serves each position of a batch, at which fraction.
struct ShardPlan {
  std::vector<int> shard_of;                   // per batch position
  std::vector<std::vector<double>> fractions;  // per shard, in batch order
  std::vector<double> totals;                  // the totals the split used (0: the shard took no part)
  double total = 0.0;                          // their sum
};

// Splits `batch_size` strata of the ready shards' total (stratified, then
// shuffled). FAILED_PRECONDITION when no shard is ready with a positive total.
Status PlanShardSample(int64_t batch_size, std::span<const ShardState> shards, std::mt19937_64* rng,
                       ShardPlan* plan);

// Sends shard `shard` a ShardSampleRequest: draw at `fractions` (none: only
// report its state, at once or with `wait` once it is ready); *id its request id.
Status SendShardSample(Connection* connection, int shard, std::span<const double> fractions, bool wait,
                       double timeout_seconds, uint64_t* id);

// One sample request over the shards, from its sending to its reply.
struct ShardedRequest {
  int64_t batch_size = 0;
  double beta = 0.0;
  double timeout_seconds = 0.0;
  bool planned = false;        // false: probes are in flight, the plan comes when they answer
  ShardPlan plan;
  std::vector<uint64_t> ids;   // per shard: the request in flight
};

class ShardSampler {
 public:
  ShardSampler(int shards, bool exact_totals, uint64_t seed);

  // Sends the sample's requests: each shard its strata when some shard is
  // known ready (and totals may be reused), else a probe to every shard.
  Status Send(Connection* connection, ShardedRequest* request);

  // Waits for the replies (planning and sending first if probes went out)
  // and merges them into *batch. Every reply of the request is taken, even
  // after an error, so none is left behind.
  Status Receive(Connection* connection, const Schema& schema, ShardedRequest* request, SampleBatch* batch);

  const std::vector<ShardState>& shards() const { return shards_; }

 private:
  Status SendPlanned(Connection* connection, ShardedRequest* request);
  // Takes shard `shard`'s reply to `id`, updating its state; *frame and
  // *message hold it on success.
  Status Take(Connection* connection, int shard, uint64_t id, std::vector<std::byte>* message,
              proto::Frame* frame, proto::ShardSampleReply* reply);

  std::vector<ShardState> shards_;
  bool exact_totals_;
  std::mt19937_64 rng_;
  // Scratch: each shard's reply to the request being received.
  std::vector<std::vector<std::byte>> messages_;
  std::vector<proto::Frame> frames_;
  std::vector<proto::ShardSampleReply> replies_;
};

}  // namespace perserve::client_internal
