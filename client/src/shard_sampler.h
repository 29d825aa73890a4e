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
// A shard takes part once it holds its --min-size-to-sample items and can
// serve its part. Before any shard is known to, a sample asks every shard
// for its state (answered at once) and draws over those that are ready; only
// when none is does it wait, for the first shard to become ready (a probe
// per shard, answered when that shard is ready, or at once with
// FAILED_PRECONDITION when it never can be: no actor remains open on it). A
// shard whose part of a sample is refused as never servable (no actor left
// and its minimum size or rate limiter unmet) leaves the plan for good and
// the sample is drawn again over the other shards, waiting as above if none
// of them is ready yet; the sample fails FAILED_PRECONDITION only when no
// shard can serve. A sample's timeout is
// one budget for all of its rounds. The batch's order is a random
// permutation of the strata, so any sub-batch is an unbiased sample too. IS
// weights are (leaf_i / global min leaf)^-beta over every shard's smallest
// leaf, the same numbers one replay of the union gives; probabilities are the
// ones drawn with: (the split's total of its shard / the split's T) x leaf_i
// / (the shard's total when it drew).
//
// A table sampled otherwise (uniform, fifo, lifo, a heap, or any sampler with
// max_times_sampled) cannot be drawn at given fractions: its sample is split
// into parts instead (ShardSplit::kBySize, kByTotal; shard_parts.cc), one
// position at a time, shard s with probability its size / the shards' sizes
// (prioritized with max_times_sampled: its total / the totals), and each
// shard draws its part with the table's own selector through a plain sample
// request, waiting as a sample waits. Readiness, refusals, the timeout and
// exact_totals are as above; a refused part alone is drawn again, over the
// other shards, and the parts already drawn are kept.
#pragma once

#include <chrono>
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
  std::string why_not;  // its refusal, when it can never serve (kept: no actor ever comes back)
  // Whether a sample's strata may go to it (by_size: a part split by size).
  bool CanServe(bool by_size = false) const { return ready && (by_size ? size > 0 : total > 0.0) && why_not.empty(); }
};

// How a table's samples are split over the shards.
enum class ShardSplit {
  kStrata,   // prioritized: strata of the global total, drawn at fractions (exact global PER)
  kBySize,   // uniform, fifo, lifo, the heaps: a part a shard by its size, its own selector's draws
  kByTotal,  // prioritized with max_times_sampled: a part a shard by its total, its own draws
};
ShardSplit ShardSplitOf(const proto::TableSchemas& table);

// Which shard serves each position of a batch, at which fraction.
struct ShardPlan {
  std::vector<int> shard_of;                   // per batch position
  std::vector<std::vector<double>> fractions;  // per shard, in batch order
  std::vector<double> totals;                  // the totals the split used (0: the shard took no part)
  double total = 0.0;                          // their sum
};

// Splits `batch_size` strata of the total of the shards that can serve
// (stratified, then shuffled). FAILED_PRECONDITION when none can.
Status PlanShardSample(int64_t batch_size, std::span<const ShardState> shards, std::mt19937_64* rng,
                       ShardPlan* plan);

// Which shard draws each position of a batch split into parts.
struct ShardParts {
  std::vector<int> shard_of;        // per batch position
  std::vector<double> share;        // per position: the chance its shard had (its weight / the weights' sum)
  std::vector<size_t> positions;    // the positions of the round in flight (all, or those drawn again) ...
  std::vector<int64_t> counts;      // ... and how many of them each shard draws
};

// Assigns each of `positions` a shard that can serve (ShardState::CanServe
// by size), independently: shard s with probability w_s / sum w, w its size
// (kBySize) or total (kByTotal), one 53-bit draw of *rng each (the same under
// every standard library). FAILED_PRECONDITION when no shard can serve.
Status PlanShardParts(std::span<const size_t> positions, ShardSplit split, std::span<const ShardState> shards,
                      std::mt19937_64* rng, ShardParts* parts);

// Why no shard can serve, shard by shard, as the sample's FAILED_PRECONDITION says.
std::string WhyNoShardServes(std::span<const ShardState> shards, bool by_size);

// Sends shard `shard` a ShardSampleRequest about table `table` (its index):
// draw at `fractions` (none: only report its state, at once or with `wait`
// once it is ready), `awaited` as proto::SampleRequest's; *id its request id.
Status SendShardSample(Connection* connection, int shard, int table, std::span<const double> fractions, bool wait,
                       double timeout_seconds, bool awaited, uint64_t* id);

// One sample request over the shards, from its sending to its reply.
struct ShardedRequest {
  int64_t batch_size = 0;
  double beta = 0.0;
  double timeout_seconds = 0.0;  // 0: none; else one budget for every round of the sample ...
  std::chrono::steady_clock::time_point deadline{};  // ... which ends here (set at its first request that may wait)
  bool awaited = false;        // received right after it is sent (proto::SampleRequest::awaited)
  bool planned = false;        // false: state requests are in flight, the plan comes when they answer
  ShardPlan plan;               // kStrata's
  ShardParts parts;            // the others'
  std::vector<uint64_t> ids;   // per shard: the request in flight (by parts: its state request)
  std::vector<uint64_t> part_ids;  // by parts, per shard: its part's sample request (0: none)
};

// The time left of a sample's one timeout budget in *seconds (0: it has
// none); DEADLINE_EXCEEDED, saying `while_doing`, once the budget is spent.
// The budget starts with the sample's first request that may wait: a state
// round answered at once does not count, nor the time a prefetched sample
// spends in flight before the learner receives it.
Status TimeLeft(const Connection& connection, ShardedRequest* request, const char* while_doing, double* seconds);

// One table's samples over the shards (a learner has one a table: each
// table has its own totals, items and readiness on every shard).
class ShardSampler {
 public:
  ShardSampler(int shards, int table, ShardSplit split, bool exact_totals, uint64_t seed);

  // Sends the sample's requests: each shard its strata when some shard is
  // known to serve (and totals may be reused), else a state request to every shard.
  Status Send(Connection* connection, ShardedRequest* request);

  // Waits for the replies (planning and sending first if state requests went
  // out, waiting for a shard to become ready if none is) and merges them into
  // *batch. Every reply of the request is taken, even after an error, so none
  // is left behind; a probe still waiting on a shard is taken later.
  Status Receive(Connection* connection, const Schema& schema, ShardedRequest* request, SampleBatch* batch);

  const std::vector<ShardState>& shards() const { return shards_; }

 private:
  bool by_parts() const { return split_ != ShardSplit::kStrata; }
  bool CanServe(const ShardState& shard) const { return shard.CanServe(split_ == ShardSplit::kBySize); }
  // Plans the whole batch (strata or parts) and sends it.
  Status PlanAndSend(Connection* connection, ShardedRequest* request, bool awaited);
  // Sends each shard its strata; `awaited`: the caller receives them next.
  Status SendPlanned(Connection* connection, ShardedRequest* request, bool awaited);
  // By parts (shard_parts.cc): sends each shard of the round its part (a
  // sample request of its count) and every shard a state request (for the
  // next split), ...
  Status SendParts(Connection* connection, ShardedRequest* request, bool awaited);
  // ... and takes their replies into *batch at the round's positions, drawing
  // again the parts refused as never servable, until the batch is whole.
  Status ReceiveParts(Connection* connection, const Schema& schema, ShardedRequest* request, SampleBatch* batch);
  // One round's replies: parts into *batch, states into shards_; *redraw the
  // positions of the parts refused (their shards leave the plan).
  Status TakeParts(Connection* connection, const Schema& schema, ShardedRequest* request, SampleBatch* batch,
                   std::vector<size_t>* redraw);
  // Takes the reply of every request in request->ids into the shards'
  // states (errors other than a shard's FAILED_PRECONDITION, which marks it
  // as never serving, are the sample's: the first is returned).
  Status TakeAll(Connection* connection, ShardedRequest* request);
  // A reply to a shard sample request (`answered` its status): the shard's
  // state, or the refusal that takes it out for good.
  Status TakeState(int shard, const Status& answered, const proto::Frame& frame, proto::ShardSampleReply* reply);
  // With no shard able to serve: probes every shard that may still become
  // ready (unless one is in flight) and waits until one is, or none can be
  // (each probe's reply as it comes).
  Status AwaitAServingShard(Connection* connection, ShardedRequest* request);
  // Takes the replies of probes left waiting by earlier samples that have arrived.
  Status TakeAnsweredProbes(Connection* connection);
  // A probe's reply, taken: the shard is ready, or never will be.
  Status TakeProbe(int shard, const Status& answered, const proto::Frame& frame);

  std::vector<ShardState> shards_;
  // Per shard: a probe waiting for it to become ready (its request id; 0: none).
  std::vector<uint64_t> probes_;
  int table_;  // its index in the server's tables, named in every request
  ShardSplit split_;
  bool exact_totals_;
  std::mt19937_64 rng_;
  // Scratch: each shard's reply to the request being received.
  std::vector<std::vector<std::byte>> messages_;
  std::vector<proto::Frame> frames_;
  std::vector<proto::ShardSampleReply> replies_;
};

// batch->columns as views of batch->message: each column of `schema`'s
// batch_size rows, column after column (a sample over shards, assembled).
inline void ViewColumns(const Schema& schema, size_t batch_size, SampleBatch* batch) {
  batch->columns.clear();
  std::span<const std::byte> columns = batch->message;
  for (const Column& column : schema.columns) {
    const size_t bytes = batch_size * static_cast<size_t>(column.ItemBytes());
    batch->columns.push_back(columns.first(bytes));
    columns = columns.subspan(bytes);
  }
}

}  // namespace perserve::client_internal
