// StepModel: what must hold of the services' step streams (docs/steps.md),
// beside the ReferenceModel's checks of every request and reply. Each shard
// has a StepReference (tests/server/replay/step_reference.h: every stream's
// whole history, every item's sample recomputed from it), kept in the
// service's own order: every reply a shard sends passes through ReplySent
// as it is sent (LoopbackTransport::ObserveSends), and the service answers
// an append when it applies it. So, exactly:
//   - an append is acknowledged only if it was valid then (its first step
//     the stream's next, its counts and bytes right, every item creatable
//     once its steps are in: all its steps appended and still in the ring, a
//     sequence on its period), and refused then with the one code its first
//     flaw gets (InvalidArgument; FailedPrecondition for a wrong first step),
//     changing nothing; its items get the keys the reference expects;
//   - every sampled item (samples and shard samples, raw and library
//     learners) is whole when it is sent: not overwritten in the items'
//     ring, and none of its steps overwritten (exact eviction); its bytes
//     are the reference's, column by column;
//   - an update counts stale exactly the keys whose items are overwritten or
//     evicted then (less those dropped for a bad priority);
//   - after every step, each held item's leaf is nonzero exactly when all
//     its steps are in the ring, and the ring's keys and streams are the
//     reference's.
// A violation throws SimulationFailure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/replay/step_reference.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/simulated_clients.h"
#include "server/service/simulation/simulation_config.h"
#include "server/service/simulation/simulator.h"

namespace perserve::service::simulation {

// A shard's replays of step streams: the items' (with `options`, the
// seed's capacity) and the StepReplay over it, a stream per client index.
Status CreateStepReplays(const StepStreamsConfig& config, int streams, const replay::ReplayOptions& options,
                         std::unique_ptr<replay::Replay>* items, std::unique_ptr<replay::StepReplay>* steps);

class StepModel {
 public:
  // `links`: the shards as their clients reach them (a stream per client index there).
  StepModel(const SimulationConfig& config, const std::vector<ShardLink>* links);

  // Once the shards' transports exist: each shard's reference, and the
  // transports' observers of what their services send (ReplySent).
  void Start();

  // An append `client` sends to `shard` (its whole frame), and an update's keys.
  void SentAppend(int client, int shard, uint64_t request_id, std::span<const std::byte> frame);
  void SentUpdate(int client, int shard, uint64_t request_id, const std::vector<uint64_t>& keys);
  // A reply `shard`'s service sends to its client `index`, as it sends it.
  // Called inside the service's Step, which would turn an exception into an
  // error reply: a failure is kept for ThrowIfFailed instead.
  void ReplySent(int shard, int index, std::span<const std::byte> frame);
  // After each step: throws the first failure ReplySent found.
  void ThrowIfFailed() const {
    if (!failure_.empty()) Fail(failure_);
  }
  // Whether error `code` answers that append as its verdict says (asked when it is received).
  bool MayRefuse(int client, int shard, uint64_t request_id, int32_t code) const;

  // After each step of `shard`.
  void CheckShard(int shard, const replay::Replay& items, const replay::StepReplay& steps);
  const StepCounts& counts() const { return counts_; }

  // An item's sample, column by column (a key with its shard's bits); fails for a key never issued.
  std::vector<std::vector<std::byte>> Expected(uint64_t key) const;
  // `client`'s stream on `shard` as the service holds it: the reference's history.
  const replay::step_test::StepReference& reference(int shard) const { return shards_[static_cast<size_t>(shard)].ref; }
  int Stream(int client, int shard) const;
  // The newest index of `client`'s stream whose steps the ring no longer holds (-1: none).
  int64_t NewestEvicted(int client) const;

 private:
  using RequestKey = std::tuple<int, int, uint64_t>;  // client, shard, request id
  using Rows = std::vector<std::vector<std::vector<std::byte>>>;
  struct Append {
    int64_t first_step = 0, count = 0;
    bool malformed = false;     // refused on its counts or bytes, whatever the stream holds
    bool bad_priority = false;  // refused once its first step is checked
    Rows rows;                  // rows[j][c]: step j's bytes of step column c
    std::vector<int64_t> item_steps;
    Rows item_rows;             // item_rows[i][c]: item i's bytes of item column c
  };
  // What an append may be refused with, judged when the service answered it.
  struct Verdict {
    bool invalid_argument = false, failed_precondition = false;
  };
  struct Shard {
    explicit Shard(const replay::StepOptions& options, const Schema& schema) : ref(options, schema) {}
    replay::step_test::StepReference ref;
    std::vector<uint64_t> earliest;  // by item key: its earliest step's key
    std::vector<int> client_of;      // by transport index
  };

  // Judges `append` from `stream` against the reference as it stands; a valid one's steps stay appended.
  Verdict Judge(int shard, int stream, const Append& append);
  void CheckReply(int shard, int index, std::span<const std::byte> frame);
  void AppendAnswered(int client, int shard, uint64_t request_id, const proto::Frame& frame);
  // The drawn items of a sample or shard sample reply: whole, and the reference's bytes.
  void CheckDrawn(int shard, const std::string& what, std::span<const uint64_t> keys,
                  std::span<const std::byte> columns);
  void UpdateAnswered(int client, int shard, uint64_t request_id, const proto::Frame& frame);
  // Whether the item under local `key` of `shard` is whole now.
  bool Whole(int shard, uint64_t key) const;

  const SimulationConfig& config_;
  const std::vector<ShardLink>& links_;
  std::vector<Shard> shards_;
  std::map<RequestKey, Append> appends_;                 // sent, not answered yet
  std::map<RequestKey, std::vector<uint64_t>> updates_;  // sent, not answered yet
  std::map<RequestKey, Verdict> verdicts_;               // refusable appends, until received
  StepCounts counts_;
  std::string failure_;  // the first failure ReplySent found
};

}  // namespace perserve::service::simulation
