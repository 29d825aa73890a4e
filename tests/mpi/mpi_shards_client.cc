// Clients for the multi-server (shard) tests, run under mpirun beside K
// perserve-server ranks (tests/CMakeLists.txt has the command lines).
//
//   sampling ROLE MODE   each actor adds kPerActor items with known
//                        priorities (a function of the item's id), flushes,
//                        and meets the learners at a barrier. The learner
//                        then checks, over every shard as one replay: the
//                        draw frequencies (chi-square over items), each
//                        draw's weight against what one replay of the union
//                        gives, its probability, its bytes and its key's
//                        shard; then updates routed to the owning shards, a
//                        key of no shard, a key never issued, and keys
//                        overwritten on each shard (stale, per shard).
//                        MODE: "last" (totals from the last replies) or
//                        "exact" (ClientOptions::exact_shard_totals).
//   learners ROLE        actors add for a while; two learners sample and
//                        update concurrently over two shards.
//   ending ROLE MODE     (servers --samples-per-insert 1) issue 24's finding
//                        3: actor 1 (shard 1's) adds 100 items and closes
//                        while actor 0 keeps adding; the learner samples 60
//                        times. Once shard 1's rate limiter can never serve
//                        its part again, every sample is drawn over shard 0:
//                        none fails (every other one failed
//                        FAILED_PRECONDITION, in exact mode almost every one).
//   tiny ROLE MODE       (servers --alpha 2 --priority-eps 0) the actors add
//                        as for sampling; the learner updates one drawn key
//                        to 1e-200, whose leaf (1e-400 underflows) is clamped
//                        to 2^-1022: every weight drawn after it, over every
//                        shard, is > 0 and <= 1 (a zero min made them all 0).
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "check.h"
#include "perserve/client.h"
#include "proto/messages.h"

namespace {

using perserve::Status;
using perserve::mpi_test::Contains;
using Clock = std::chrono::steady_clock;

constexpr int64_t kPerActor = 400;
constexpr int64_t kIdsPerActor = 1000000;  // actor a's ids: a * kIdsPerActor + j
constexpr double kBeta = 0.4;

// Server flags: --column id:int64 --alpha 1, so a leaf is the priority itself.
double PriorityOf(int64_t id) { return 1.0 + static_cast<double>(id % 13) + 2.0 * static_cast<double>(id / kIdsPerActor); }

bool Near(double a, double b, double relative) { return std::abs(a - b) <= relative * std::abs(b); }

// Every non-server rank: the actors' indices (-1 for a learner), in rank order.
std::vector<int> ActorIndices(MPI_Comm peers, bool actor) {
  int size = 0, rank = 0;
  MPI_Comm_size(peers, &size);
  MPI_Comm_rank(peers, &rank);
  std::vector<int> flags(static_cast<size_t>(size));
  const int mine = actor ? 1 : 0;
  MPI_Allgather(&mine, 1, MPI_INT, flags.data(), 1, MPI_INT, peers);
  std::vector<int> indices;
  int next = 0;
  for (int flag : flags) indices.push_back(flag ? next++ : -1);
  return indices;
}

int SamplingActor() {
  std::unique_ptr<perserve::ActorClient> actor;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor));
  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(actor->Peers(&peers));
  int peer_rank = 0;
  MPI_Comm_rank(peers, &peer_rank);
  const std::vector<int> indices = ActorIndices(peers, true);
  const int64_t base = indices[static_cast<size_t>(peer_rank)] * kIdsPerActor;
  std::vector<int64_t> ids(kPerActor);
  std::vector<double> priorities(kPerActor);
  for (int64_t j = 0; j < kPerActor; ++j) {
    ids[j] = base + j;
    priorities[j] = PriorityOf(ids[j]);
  }
  for (int64_t start = 0; start < kPerActor; start += 50) {  // in batches of 50, in id order
    CHECK_OK(actor->Add(perserve::BatchView{50, {ids.data() + start}},
                        std::span<const double>(priorities.data() + start, 50)));
  }
  CHECK_OK(actor->Flush());
  MPI_Barrier(peers);  // every item is in
  MPI_Barrier(peers);  // the learner is done
  MPI_Comm_free(&peers);
  CHECK_OK(actor->Close());
  return 0;
}

struct Model {
  std::map<int64_t, double> priority;  // live items' priorities by id
  double Total() const {
    double total = 0.0;
    for (const auto& [id, p] : priority) total += p;
    return total;
  }
  double Min() const {
    double min = INFINITY;
    for (const auto& [id, p] : priority) min = std::min(min, p);
    return min;
  }
};

// Checks one batch against the model; counts draws by id; learns each key's id.
void CheckBatch(const perserve::SampleBatch& batch, const Model& model, bool check_probabilities,
                std::map<int64_t, int64_t>* draws, std::map<uint64_t, int64_t>* id_of_key,
                std::map<int64_t, int>* shard_of_actor) {
  const double total = model.Total(), min = model.Min();
  for (int64_t i = 0; i < batch.size; ++i) {
    int64_t id = 0;
    std::memcpy(&id, batch.columns[0].data() + i * 8, 8);
    CHECK(model.priority.count(id) == 1, "drew id {}, not a live item", id);
    const double p = model.priority.at(id);
    // What one replay holding every shard's items gives: (leaf / min leaf)^-beta.
    CHECK(batch.weights[i] == std::pow(p / min, -kBeta), "id {}: weight {} != {}", id, batch.weights[i],
          std::pow(p / min, -kBeta));
    if (check_probabilities) {
      CHECK(Near(batch.probabilities[i], p / total, 1e-9), "id {}: probability {} != {}", id,
            batch.probabilities[i], p / total);
    }
    const uint64_t key = batch.keys[i];
    const int shard = perserve::proto::ShardOfKey(key);
    const int actor = static_cast<int>(id / kIdsPerActor);
    auto [where, fresh] = shard_of_actor->emplace(actor, shard);
    CHECK(where->second == shard, "actor {}'s items come from shards {} and {}", actor, where->second, shard);
    auto [known, new_key] = id_of_key->emplace(key, id);
    CHECK(known->second == id, "key {:#x} gave ids {} and {}", key, known->second, id);
    ++(*draws)[id];
  }
}

int SamplingLearner(bool exact, int servers) {
  perserve::ClientOptions options;
  options.prefetch = 2;
  options.exact_shard_totals = exact;
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, options, &learner));
  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(learner->Peers(&peers));
  const std::vector<int> indices = ActorIndices(peers, false);
  int actors = 0;
  for (int index : indices) actors += index >= 0;
  MPI_Barrier(peers);  // every item is in

  // The live items: on each shard, the newest `capacity` of its actor's
  // (server flags: --capacity 256, one actor a shard at most).
  constexpr int64_t kCapacity = 256;
  Model model;
  for (int a = 0; a < actors; ++a) {
    for (int64_t j = kPerActor - kCapacity; j < kPerActor; ++j) {
      model.priority[a * kIdsPerActor + j] = PriorityOf(a * kIdsPerActor + j);
    }
  }

  std::map<int64_t, int64_t> draws;
  std::map<uint64_t, int64_t> id_of_key;
  std::map<int64_t, int> shard_of_actor;
  perserve::SampleBatch batch;
  constexpr int kBatches = 120;
  for (int b = 0; b < kBatches; ++b) {
    CHECK_OK(learner->Sample(512, kBeta, &batch));
    CHECK(batch.size == 512, "batch of {}", batch.size);
    CheckBatch(batch, model, /*check_probabilities=*/true, &draws, &id_of_key, &shard_of_actor);
  }
  // Each actor's items on their own shard, every actor's shard a different one.
  std::set<int> shards;
  for (const auto& [actor, shard] : shard_of_actor) shards.insert(shard);
  CHECK(static_cast<int>(shard_of_actor.size()) == actors && static_cast<int>(shards.size()) == actors,
        "{} actors' items came from {} shards", shard_of_actor.size(), shards.size());
  // Chi-square over items: every live item drawn in proportion to its priority
  // over all shards' total.
  const double total = model.Total();
  const double n = kBatches * 512.0;
  double chi2 = 0.0;
  for (const auto& [id, p] : model.priority) {
    const double expected = n * p / total;
    const double observed = draws.count(id) ? static_cast<double>(draws.at(id)) : 0.0;
    chi2 += (observed - expected) * (observed - expected) / expected;
  }
  const double dof = static_cast<double>(model.priority.size() - 1);
  const double z = (chi2 - dof) / std::sqrt(2.0 * dof);
  fmt::print("[learner] {} servers, {} actors, totals from {}: chi-square {:.1f} over {} items (z {:.2f})\n", servers,
             actors, exact ? "a fresh round trip" : "the last replies", chi2, model.priority.size(), z);
  CHECK(z < 6.0, "draws do not follow priority / global total: chi-square {:.1f}, {} degrees of freedom", chi2, dof);

  // Updates go to the shard that owns each key: raise every third drawn item
  // to 40, one update over all shards, then check the new weights and (with
  // fresh totals) probabilities.
  std::vector<uint64_t> keys;
  std::vector<double> priorities;
  for (const auto& [key, id] : id_of_key) {
    if (id % 3 != 0) continue;
    keys.push_back(key);
    priorities.push_back(40.0);
    model.priority[id] = 40.0;
  }
  perserve::UpdateResult result;
  CHECK_OK(learner->UpdatePriorities(keys, priorities, &result));
  CHECK(result.applied == static_cast<int64_t>(keys.size()) && result.stale == 0, "applied {} stale {} of {}",
        result.applied, result.stale, keys.size());
  for (int b = 0; b < 20; ++b) {
    // A prefetched request was split before the update: take it, then check.
    CHECK_OK(learner->Sample(512, kBeta, &batch));
    if (b >= options.prefetch) CheckBatch(batch, model, exact, &draws, &id_of_key, &shard_of_actor);
  }

  // A key that names no shard of this job: refused before anything is sent.
  Status status = learner->UpdatePriorities(std::vector<uint64_t>{perserve::proto::ShardKey(servers, 0)},
                                            std::vector<double>{1.0});
  CHECK(status.code() == Status::Code::kInvalidArgument && Contains(status, "names shard"), "{}", status.ToString());
  // A key its shard never issued: that shard refuses it.
  status = learner->UpdatePriorities(std::vector<uint64_t>{perserve::proto::ShardKey(servers - 1, 1 << 30)},
                                     std::vector<double>{1.0});
  CHECK(status.code() == Status::Code::kNotFound && Contains(status, "never issued"), "{}", status.ToString());
  // The first item of each shard with an actor was overwritten there: stale on every shard.
  keys.clear();
  for (int shard : shards) keys.push_back(perserve::proto::ShardKey(shard, 0));
  CHECK_OK(learner->UpdatePriorities(keys, std::vector<double>(keys.size(), 5.0), &result));
  CHECK(result.stale == static_cast<int64_t>(keys.size()) && result.applied == 0, "stale {} applied {} of {}",
        result.stale, result.applied, keys.size());

  MPI_Barrier(peers);
  MPI_Comm_free(&peers);
  CHECK_OK(learner->Close());
  fmt::print("[learner] sampling over {} shards: frequencies, weights, updates and stale keys as one replay\n",
             servers);
  return 0;
}

// A learner (exact_shard_totals as asked) and the peers' communicator, past
// the actors' ActorIndices collective.
std::unique_ptr<perserve::LearnerClient> JoinLearnerWithPeers(bool exact, MPI_Comm* peers) {
  perserve::ClientOptions options;
  options.exact_shard_totals = exact;
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, options, &learner));
  CHECK_OK(learner->Peers(peers));
  (void)ActorIndices(*peers, false);
  return learner;
}

int TinyPriorityLearner(bool exact) {
  MPI_Comm peers = MPI_COMM_NULL;
  std::unique_ptr<perserve::LearnerClient> learner = JoinLearnerWithPeers(exact, &peers);
  MPI_Barrier(peers);  // every item is in
  perserve::SampleBatch batch;
  CHECK_OK(learner->Sample(512, kBeta, &batch));
  perserve::UpdateResult result;
  CHECK_OK(learner->UpdatePriorities(std::vector<uint64_t>{batch.keys[0]}, std::vector<double>{1e-200}, &result));
  CHECK(result.applied == 1, "applied {}", result.applied);
  double smallest = 1.0;
  for (int b = 0; b < 40; ++b) {
    CHECK_OK(learner->Sample(512, kBeta, &batch));
    for (int64_t i = 0; i < batch.size; ++i) {
      CHECK(batch.weights[i] > 0.0 && batch.weights[i] <= 1.0, "weight {} for key {:#x}", batch.weights[i],
            batch.keys[i]);
      smallest = std::min(smallest, batch.weights[i]);
    }
  }
  MPI_Barrier(peers);
  MPI_Comm_free(&peers);
  CHECK_OK(learner->Close());
  fmt::print("[learner] tiny: every weight over the shards in (0, 1] after a priority of 1e-200 (smallest {:.3g})\n",
             smallest);
  return 0;
}

int EndingActor() {
  std::unique_ptr<perserve::ActorClient> actor;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor));
  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(actor->Peers(&peers));
  const std::vector<int> indices = ActorIndices(peers, true);
  int rank = 0;
  MPI_Comm_rank(peers, &rank);
  MPI_Comm_free(&peers);
  const int index = indices[static_cast<size_t>(rank)];
  // Actor 1 (shard 1's) stops early; actor 0 is paced by the rate limiter
  // until the learner has closed.
  const int batches = index == 1 ? 2 : 40;
  std::vector<int64_t> ids(50);
  for (int b = 0; b < batches; ++b) {
    for (int64_t j = 0; j < 50; ++j) ids[static_cast<size_t>(j)] = index * kIdsPerActor + b * 50 + j;
    CHECK_OK(actor->Add(perserve::BatchView{50, {ids.data()}}));
  }
  CHECK_OK(actor->Close());
  return 0;
}

int EndingLearner(bool exact) {
  MPI_Comm peers = MPI_COMM_NULL;
  std::unique_ptr<perserve::LearnerClient> learner = JoinLearnerWithPeers(exact, &peers);
  MPI_Comm_free(&peers);
  perserve::SampleBatch batch;
  int failed = 0;
  int64_t from_shard_1 = 0;
  for (int step = 0; step < 60; ++step) {
    const Status sampled = learner->Sample(32, kBeta, &batch, /*timeout_seconds=*/30.0);
    if (!sampled.ok()) {
      ++failed;
      fmt::print("[learner] sample {} failed: {}\n", step, sampled.ToString());
      continue;
    }
    for (const uint64_t key : batch.keys) from_shard_1 += perserve::proto::ShardOfKey(key) == 1;
  }
  CHECK(failed == 0, "{} of 60 samples failed while shard 0 could serve", failed);
  CHECK(from_shard_1 > 0, "shard 1 served no item before its rate limiter was spent");
  CHECK_OK(learner->Close());
  fmt::print("[learner] ending: 60 samples, none failed, {} items from shard 1 before it left the plan\n",
             from_shard_1);
  return 0;
}

int LearnersActor(double seconds) {
  std::unique_ptr<perserve::ActorClient> actor;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor));
  std::vector<int64_t> ids(50);
  int64_t next = 0;
  const auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    for (int64_t& id : ids) id = next++;
    CHECK_OK(actor->Add(perserve::BatchView{50, {ids.data()}}));
  }
  CHECK_OK(actor->Close());
  return 0;
}

int LearnersLearner(double seconds, int servers) {
  perserve::ClientOptions options;
  options.prefetch = 1;
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, options, &learner));
  perserve::SampleBatch batch;
  int64_t steps = 0;
  std::set<int> shards;
  const auto start = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    CHECK_OK(learner->Sample(64, kBeta, &batch, /*timeout_seconds=*/30.0));
    std::vector<double> priorities(static_cast<size_t>(batch.size));
    for (int64_t i = 0; i < batch.size; ++i) {
      CHECK(batch.weights[i] > 0.0 && batch.weights[i] <= 1.0, "weight {}", batch.weights[i]);
      CHECK(batch.probabilities[i] > 0.0 && batch.probabilities[i] <= 1.0, "probability {}",
            batch.probabilities[i]);
      shards.insert(perserve::proto::ShardOfKey(batch.keys[i]));
      priorities[i] = 0.5 + static_cast<double>(i % 7);
    }
    CHECK_OK(learner->SendPriorityUpdate(batch.keys, priorities));
    ++steps;
  }
  CHECK_OK(learner->Flush());
  const perserve::UpdateResult& updates = learner->updates();
  CHECK(updates.applied + updates.stale == steps * 64, "{} applied + {} stale of {}", updates.applied,
        updates.stale, steps * 64);
  CHECK(static_cast<int>(shards.size()) == servers, "drew from {} of {} shards", shards.size(), servers);
  CHECK_OK(learner->Close());
  fmt::print("[learner] {} steps over {} shards, {} updates applied, {} stale\n", steps, servers, updates.applied,
             updates.stale);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  CHECK(argc >= 4, "usage: mpi_shards_client sampling|ending|tiny|learners actor|learner MODE|SECONDS SERVERS");
  const std::string scenario = argv[1], role = argv[2], arg = argv[3];
  const int servers = argc > 4 ? std::stoi(argv[4]) : 1;
  int code = 1;
  if (scenario == "sampling") {
    code = role == "actor" ? SamplingActor() : SamplingLearner(arg == "exact", servers);
  } else if (scenario == "ending") {
    code = role == "actor" ? EndingActor() : EndingLearner(arg == "exact");
  } else if (scenario == "tiny") {
    code = role == "actor" ? SamplingActor() : TinyPriorityLearner(arg == "exact");
  } else if (scenario == "learners") {
    code = role == "actor" ? LearnersActor(std::stod(arg)) : LearnersLearner(std::stod(arg), servers);
  }
  MPI_Finalize();
  return code;
}
