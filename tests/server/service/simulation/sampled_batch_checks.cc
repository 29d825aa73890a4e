#include "server/service/simulation/sampled_batch_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "perserve/importance_weight.h"
#include "proto/messages.h"
#include "server/service/simulation/self_checking_rows.h"
#include "server/service/simulation/step_model.h"
#include "table/selector.h"

namespace perserve::service::simulation {
namespace {

bool Near(double value, double expected, double relative = 1e-9) {
  return std::abs(value - expected) <= 1e-300 + relative * std::abs(expected);
}

}  // namespace

void SampledBatchChecks::Check(const SampleBatch& batch, int64_t batch_size, double beta, const char* call,
                               const std::vector<uint64_t>* sharded_since) {
  const std::string what = fmt::format("client {}: {} of {} at beta {}", client_, call, batch_size, beta);
  CheckRows(batch, batch_size, 0, what);
  ++world_.counts.batches;
  connection_.Fingerprint(std::as_bytes(std::span(batch.keys)));
  connection_.Fingerprint(std::as_bytes(std::span(batch.weights)));
  connection_.Fingerprint(std::as_bytes(std::span(batch.probabilities)));
  const std::vector<uint64_t> since =
      config_.shards == 1 ? CheckOneShard(batch, beta, what) : CheckShards(batch, beta, what, sharded_since);
  CheckExact(batch, beta, what, since);
}

void SampledBatchChecks::CheckRows(const SampleBatch& batch, int64_t batch_size, int table, const std::string& what) {
  const size_t n = static_cast<size_t>(batch_size);
  // Self-checking rows' id and pad, or the step layout's columns (the StepModel's reference says their bytes).
  const SimTable* drawn_from = config_.steps.on ? &config_.steps.tables[static_cast<size_t>(table)] : nullptr;
  const Schema* steps = drawn_from != nullptr ? &drawn_from->sample_schema : nullptr;
  const bool by_priority = drawn_from == nullptr || drawn_from->sampler() == table::SelectorKind::kPrioritized;
  bool columns_fit = steps != nullptr ? batch.columns.size() == steps->columns.size()
                                      : batch.columns.size() == 2 && batch.columns[0].size() == 8 * n &&
                                            batch.columns[1].size() == n * static_cast<size_t>(config_.pad_bytes);
  for (size_t c = 0; steps != nullptr && columns_fit && c < batch.columns.size(); ++c) {
    columns_fit = batch.columns[c].size() == n * static_cast<size_t>(steps->columns[c].ItemBytes());
  }
  Expect(batch.size == batch_size && batch.keys.size() == n && batch.weights.size() == n &&
             batch.probabilities.size() == n && columns_fit,
         [&] {
           return fmt::format("{}: a batch of {} ({} keys, {} columns)", what, batch.size, batch.keys.size(),
                              batch.columns.size());
         });
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = batch.keys[i];
    const auto item = [&] { return fmt::format("{}: item {} (key {:#x})", what, i, key); };
    Expect(proto::ShardOfKey(key) < config_.shards, [&] { return item() + ": names no shard of the job"; });
    if (steps != nullptr) {
      const std::vector<std::vector<std::byte>> expected = world_.steps->Expected(key, table);
      for (size_t c = 0; c < batch.columns.size(); ++c) {
        const size_t bytes = static_cast<size_t>(steps->columns[c].ItemBytes());
        const std::span<const std::byte> got = batch.columns[c].subspan(i * bytes, bytes);
        Expect(std::equal(got.begin(), got.end(), expected[c].begin(), expected[c].end()),
               [&] { return fmt::format("{}: its {} is not the reference's", item(), steps->columns[c].name); });
      }
    } else {
      int64_t id = 0;
      Expect(ReadRow(batch.columns[0], batch.columns[1], static_cast<int64_t>(i), config_.pad_bytes, &id),
             [&] { return fmt::format("{}: its row is torn (id {:#x})", item(), id); });
      world_.model.ObservedItem(key, id, item);
    }
    Expect(by_priority ? batch.weights[i] > 0.0 && batch.weights[i] <= 1.0 : batch.weights[i] == 1.0,
           [&] { return fmt::format("{}: IS weight {}", item(), batch.weights[i]); });
    Expect(batch.probabilities[i] > 0.0 && batch.probabilities[i] <= 1.0,
           [&] { return fmt::format("{}: probability {}", item(), batch.probabilities[i]); });
  }
}

std::vector<uint64_t> SampledBatchChecks::CheckOneShard(const SampleBatch& batch, double beta,
                                                        const std::string& what) {
  // The library takes its replies in request order: the batch is the oldest
  // reply left with its keys and numbers (one with the same keys but another
  // beta, say, was dropped before it).
  std::deque<DrawnReply>& drawn = connection_.drawn(0);
  const size_t n = batch.keys.size();
  std::string failure;
  auto reply = drawn.begin();
  for (; reply != drawn.end(); ++reply) {
    if (reply->keys != batch.keys) continue;
    std::string mismatch;
    for (size_t i = 0; i < n && mismatch.empty(); ++i) {
      // Weighed again for another beta: w^(beta / the request's beta), never from a reply of beta 0.
      const double expected = beta == reply->beta ? reply->weights[i]
                              : reply->beta > 0.0 ? std::pow(reply->weights[i], beta / reply->beta)
                                                  : -1.0;
      if (batch.probabilities[i] != reply->probabilities[i] || !Near(batch.weights[i], expected)) {
        mismatch = fmt::format(
            "{}: item {} has probability {} and IS weight {}; its reply (request {} at beta {}) "
            "had {} and {}",
            what, i, batch.probabilities[i], batch.weights[i], reply->request_id, reply->beta, reply->probabilities[i],
            reply->weights[i]);
      }
    }
    if (mismatch.empty()) break;
    if (failure.empty()) failure = mismatch;
  }
  Expect(reply != drawn.end(), [&] {
    return failure.empty() ? what + ": its keys are those of no sample reply the learner received" : failure;
  });
  // As one replay: w_i / w_j = (P_i / P_j)^-beta (ReferenceModel::SampleReceived).
  const size_t most = static_cast<size_t>(std::max_element(batch.probabilities.begin(), batch.probabilities.end()) -
                                          batch.probabilities.begin());
  for (size_t i = 0; i < n; ++i) {
    const double expected = batch.weights[most] * std::pow(batch.probabilities[i] / batch.probabilities[most], -beta);
    Expect(std::abs(batch.weights[i] - expected) <= 1e-9 + 1e-6 * expected, [&] {
      return fmt::format(
          "{}: item {} has IS weight {}, but its probability {} beside item {}'s ({}, weight {}) gives {}", what, i,
          batch.weights[i], batch.probabilities[i], most, batch.probabilities[most], batch.weights[most], expected);
    });
  }
  std::vector<uint64_t> since = std::move(reply->versions);
  drawn.erase(drawn.begin(), reply + 1);  // it, and the older ones the library dropped
  return since;
}

std::vector<uint64_t> SampledBatchChecks::CheckShards(const SampleBatch& batch, double beta, const std::string& what,
                                                      const std::vector<uint64_t>* sharded_since) {
  const size_t n = batch.keys.size();
  const size_t shards = static_cast<size_t>(config_.shards);
  // The batch's items of each shard, in batch order, are that shard's reply's, in its order (the merge).
  std::vector<std::vector<size_t>> positions(shards);
  for (size_t i = 0; i < n; ++i) positions[static_cast<size_t>(proto::ShardOfKey(batch.keys[i]))].push_back(i);
  std::vector<size_t> taking;  // the shards the batch has items of
  std::vector<std::vector<std::deque<DrawnReply>::iterator>> candidates(shards);
  for (size_t s = 0; s < shards; ++s) {
    if (positions[s].empty()) continue;
    taking.push_back(s);
    std::deque<DrawnReply>& drawn = connection_.drawn(static_cast<int>(s));
    for (auto reply = drawn.begin(); reply != drawn.end(); ++reply) {
      bool same = reply->keys.size() == positions[s].size();
      for (size_t k = 0; same && k < positions[s].size(); ++k) same = reply->keys[k] == batch.keys[positions[s][k]];
      // A twin of a candidate (the same leaves and state too: small replays,
      // as step streams' rings keep, draw the same keys again and again) would
      // only multiply the combinations below.
      same = same && std::none_of(candidates[s].begin(), candidates[s].end(), [&](const auto& other) {
        return other->leaves == reply->leaves && other->state.total == reply->state.total &&
               other->state.min_leaf == reply->state.min_leaf;
      });
      if (same) candidates[s].push_back(reply);
    }
    Expect(!candidates[s].empty(), [&] {
      return fmt::format("{}: its {} items of shard {} are those of no reply shard {} sent it", what,
                         positions[s].size(), s, s);
    });
  }
  // One reply a shard (a rare equal-keys twin aside): the first combination that holds.
  std::vector<size_t> choice(shards, 0);
  std::string first_failure;
  for (int combination = 0; combination < 256; ++combination) {
    std::vector<double> leaf(n);
    for (const size_t s : taking) {
      const DrawnReply& reply = *candidates[s][choice[s]];
      for (size_t k = 0; k < positions[s].size(); ++k) leaf[positions[s][k]] = reply.leaves[k];
    }
    std::string failure;
    // One replay of the union: w_i = (leaf_i / m)^-beta with one m for the whole batch, at most every shard's
    // smallest leaf; in logarithms, log w_i + beta log leaf_i = beta log m for every i.
    const auto common = [&](size_t i) { return std::log(batch.weights[i]) + beta * std::log(leaf[i]); };
    const auto slack = [&](size_t i) {
      return 1e-12 + 1e-10 * (std::abs(std::log(batch.weights[i])) + beta * std::abs(std::log(leaf[i])));
    };
    for (size_t i = 0; i < n && failure.empty(); ++i) {
      if (beta == 0.0 ? batch.weights[i] != 1.0 : std::abs(common(i) - common(0)) > slack(i) + slack(0)) {
        failure = fmt::format(
            "{}: item {} (key {:#x}, leaf {}) has IS weight {}, item 0 (leaf {}) {}: not one "
            "smallest leaf for the batch at beta {}",
            what, i, batch.keys[i], leaf[i], batch.weights[i], leaf[0], batch.weights[0], beta);
      }
    }
    for (const size_t s : taking) {
      const DrawnReply& reply = *candidates[s][choice[s]];
      if (failure.empty() && beta > 0.0 && common(0) > beta * std::log(reply.state.min_leaf) + slack(0)) {
        failure = fmt::format("{}: its weights' smallest leaf {} is above shard {}'s smallest leaf {}", what,
                              std::exp(common(0) / beta), s, reply.state.min_leaf);
      }
    }
    // Probabilities: (T'_s / T') leaf_i / T_s, so P_i / leaf_i is one number c_s within a shard, and the
    // shards' shares c_s T_s of the split add up to at most 1.
    double shares = 0.0;
    for (const size_t s : taking) {
      const DrawnReply& reply = *candidates[s][choice[s]];
      const size_t first = positions[s].front();
      const double c = std::log(batch.probabilities[first]) - std::log(leaf[first]);
      for (const size_t i : positions[s]) {
        const double ci = std::log(batch.probabilities[i]) - std::log(leaf[i]);
        if (failure.empty() && std::abs(ci - c) > 1e-12 + 1e-10 * (std::abs(ci) + std::abs(c))) {
          failure =
              fmt::format("{}: items {} and {} of shard {} have probabilities {} and {} for leaves {} and {}", what,
                          first, i, s, batch.probabilities[first], batch.probabilities[i], leaf[first], leaf[i]);
        }
      }
      shares += std::exp(c) * reply.state.total;
    }
    if (failure.empty() && shares > 1.0 + 1e-9) {
      failure = fmt::format("{}: the shards' shares of the split add up to {}", what, shares);
    }
    if (failure.empty()) {
      // Taken: erased, each shard's deque apart, so the other iterators stay
      // valid. Only it: a request planned once its state came (no shard known
      // to serve when it was sent) draws after later requests planned at once.
      // Unless another reply of a shard held the same keys (another state):
      // the shares' bound may take the wrong one of the two, and a later
      // batch may need it (seed 10607: step streams' few whole items).
      const bool ambiguous =
          std::any_of(taking.begin(), taking.end(), [&](size_t s) { return candidates[s].size() > 1; });
      for (const size_t s : taking) {
        if (!ambiguous) connection_.drawn(static_cast<int>(s)).erase(candidates[s][choice[s]]);
      }
      return sharded_since != nullptr ? *sharded_since : std::vector<uint64_t>{};
    }
    if (first_failure.empty()) first_failure = failure;
    size_t s = 0;  // the next combination
    for (; s < taking.size(); ++s) {
      const size_t shard = taking[s];
      if (++choice[shard] < candidates[shard].size()) break;
      choice[shard] = 0;
    }
    if (s == taking.size()) break;
  }
  Fail(first_failure);
}

void SampledBatchChecks::CheckExact(const SampleBatch& batch, double beta, const std::string& what,
                                    const std::vector<uint64_t>& since) {
  // Only if no shard changed since the batch's requests went out.
  if (since.empty() || since != world_.versions) return;
  double total = 0.0;
  double min_leaf = std::numeric_limits<double>::infinity();
  for (int shard = 0; shard < config_.shards; ++shard) {
    const replay::Replay& replay = *world_.shards[static_cast<size_t>(shard)].replay;
    // Over several shards only when every shard takes part (the split is over those that can serve).
    const int64_t size = replay.size();
    if (config_.shards > 1 && (size < config_.options.min_size_to_sample || !(replay.tree().Total() > 0.0) ||
                               connection_.refused_by(shard))) {
      return;
    }
    total += replay.tree().Total();
    if (replay.size() > 0) min_leaf = std::min(min_leaf, replay.tree().Min());
  }
  ++world_.counts.exact_batches;
  for (size_t i = 0; i < batch.keys.size(); ++i) {
    const int shard = proto::ShardOfKey(batch.keys[i]);
    const replay::Replay& replay = *world_.shards[static_cast<size_t>(shard)].replay;
    const int64_t slot = replay.SlotOf(proto::LocalKey(batch.keys[i]));
    Expect(slot >= 0, [&] {
      return fmt::format("{}: item {} (key {:#x}) is no longer held, though nothing changed since it was drawn", what,
                         i, batch.keys[i]);
    });
    double leaf = 0.0;
    Expect(replay.tree().Get(std::span(&slot, 1), std::span(&leaf, 1)).ok(), "reading a leaf");
    Expect(Near(batch.probabilities[i], leaf / total), [&] {
      return fmt::format(
          "{}: item {} (key {:#x}, leaf {}) has probability {}; one replay of the {} shards (total {}) "
          "gives {}",
          what, i, batch.keys[i], leaf, batch.probabilities[i], config_.shards, total, leaf / total);
    });
    Expect(Near(batch.weights[i], ImportanceWeight(leaf, min_leaf, beta)), [&] {
      return fmt::format(
          "{}: item {} (key {:#x}, leaf {}) has IS weight {}; one replay of the {} shards (smallest leaf "
          "{}) gives {}",
          what, i, batch.keys[i], leaf, batch.weights[i], config_.shards, min_leaf,
          ImportanceWeight(leaf, min_leaf, beta));
    });
  }
}

}  // namespace perserve::service::simulation
