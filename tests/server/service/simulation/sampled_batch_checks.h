// SampledBatchChecks: what a batch the real LearnerClient returns must be,
// checked against the replies its SimulatedConnection received and the
// shards' replays: rows that are the items added under their keys (the
// ReferenceModel's), keys of the shards that drew them, weights in (0, 1]
// and probabilities in (0, 1]. With one shard: the keys, probabilities and
// weights of a sample reply, its weights for the call's beta (w^(beta /
// the request's beta), never from a reply of beta 0), w_i / w_j = (P_i /
// P_j)^-beta. Over several: each shard's items are one of its replies', the
// weights those one replay of the union gives (one smallest leaf for the
// whole batch, at most every drawing shard's), probabilities within a shard
// in its leaves' ratios, the shards' shares of the split at most 1. When no
// shard changed since the batch's requests went out (over several shards:
// with exact shard totals), exactly leaf / (the union's total) and (leaf /
// the union's smallest leaf)^-beta, from the replays as they stand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "perserve/client.h"
#include "server/service/simulation/simulated_connection.h"

namespace perserve::service::simulation {

class SampledBatchChecks {
 public:
  SampledBatchChecks(int client, LibraryWorld* world, SimulatedConnection* connection)
      : client_(client), world_(*world), config_(world->config), connection_(*connection) {}

  // `batch`, returned by `call` for `batch_size` items at `beta`. Over
  // several shards `sharded_since` (null: unknown) are the shards' versions
  // since which nothing may have changed for the batch to be exact.
  void Check(const SampleBatch& batch, int64_t batch_size, double beta, const char* call,
             const std::vector<uint64_t>* sharded_since);
  // What Check holds of every batch, of any table (`table`: its index;
  // `what` names the call): `batch_size` items, each the item added under
  // its key (a self-checking row; with step streams the StepModel's
  // reference, of that table), a key of the job's shards, an IS weight in
  // (0, 1] (exactly 1 from a table that does not draw by priority) and a
  // probability in (0, 1].
  void CheckRows(const SampleBatch& batch, int64_t batch_size, int table, const std::string& what);

 private:
  // Each returns the versions since which nothing may have changed for the
  // batch to be exact (empty: no such moment is known), and takes the
  // replies it matched out of the connection's.
  std::vector<uint64_t> CheckOneShard(const SampleBatch& batch, double beta, const std::string& what);
  std::vector<uint64_t> CheckShards(const SampleBatch& batch, double beta, const std::string& what,
                                    const std::vector<uint64_t>* sharded_since);
  void CheckExact(const SampleBatch& batch, double beta, const std::string& what, const std::vector<uint64_t>& since);

  const int client_;
  LibraryWorld& world_;
  const SimulationConfig& config_;
  SimulatedConnection& connection_;
};

}  // namespace perserve::service::simulation
