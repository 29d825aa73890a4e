#include "client/src/shard_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "client/src/portable_shuffle.h"
#include "common/coverage_marks.h"
#include "perserve/importance_weight.h"

namespace perserve::client_internal {

Status PlanShardSample(int64_t batch_size, std::span<const ShardState> shards, std::mt19937_64* rng,
                       ShardPlan* plan) {
  const size_t count = shards.size();
  plan->totals.assign(count, 0.0);
  plan->total = 0.0;
  for (size_t s = 0; s < count; ++s) {
    if (shards[s].CanServe()) plan->totals[s] = shards[s].total;
    plan->total += plan->totals[s];
  }
  if (!(plan->total > 0.0)) return Status::FailedPrecondition(WhyNoShardServes(shards, /*by_size=*/false));
  // Stratum j is [j T / B, (j + 1) T / B): one uniform draw in it, then the
  // shard whose share of [0, T) holds the draw, and the draw's fraction of
  // that shard's total.
  std::vector<double> ends(count);
  std::partial_sum(plan->totals.begin(), plan->totals.end(), ends.begin());
  const size_t last = static_cast<size_t>(
      std::distance(plan->totals.begin(),
                    std::find_if(plan->totals.rbegin(), plan->totals.rend(), [](double t) { return t > 0.0; }).base()) -
      1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double below_one = std::nextafter(1.0, 0.0);
  const size_t batch = static_cast<size_t>(batch_size);
  std::vector<int> stratum_shard(batch);
  std::vector<double> stratum_fraction(batch);
  for (size_t j = 0; j < batch; ++j) {
    const double u = (static_cast<double>(j) + unit(*rng)) / static_cast<double>(batch) * plan->total;
    size_t s = 0;
    while (s < last && !(plan->totals[s] > 0.0 && u < ends[s])) ++s;
    const double offset = ends[s] - plan->totals[s];
    stratum_shard[j] = static_cast<int>(s);
    stratum_fraction[j] = std::clamp((u - offset) / plan->totals[s], 0.0, below_one);
  }
  std::vector<size_t> order(batch);
  std::iota(order.begin(), order.end(), size_t{0});
  PortableShuffle(std::span(order), rng);  // std::shuffle's permutation differs between standard libraries
  plan->shard_of.resize(batch);
  plan->fractions.assign(count, {});
  for (size_t position = 0; position < batch; ++position) {
    const size_t j = order[position];
    plan->shard_of[position] = stratum_shard[j];
    plan->fractions[static_cast<size_t>(stratum_shard[j])].push_back(stratum_fraction[j]);
  }
  return Status::Ok();
}

std::string WhyNoShardServes(std::span<const ShardState> shards, bool by_size) {
  std::string why;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string reason = !shards[s].why_not.empty() ? shards[s].why_not
                               : !shards[s].ready ? fmt::format("holds {} items, not yet its minimum", shards[s].size)
                               : by_size          ? "it holds no items"
                                                  : "its total is 0";
    why += fmt::format("{}shard {}: {}", s == 0 ? "" : "; ", s, reason);
  }
  return "no shard of the replay can be sampled (" + why + ")";
}

ShardSplit ShardSplitOf(const proto::TableSchemas& table) {
  if (table.sampler != "prioritized") return ShardSplit::kBySize;
  return table.max_times_sampled > 0 ? ShardSplit::kByTotal : ShardSplit::kStrata;
}

Status TimeLeft(const Connection& connection, ShardedRequest* request, const char* while_doing, double* seconds) {
  *seconds = 0.0;
  if (request->timeout_seconds == 0.0) return Status::Ok();
  const auto now = connection.Now();
  if (request->deadline == std::chrono::steady_clock::time_point{}) {
    request->deadline = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(request->timeout_seconds));
  }
  *seconds = std::chrono::duration<double>(request->deadline - now).count();
  if (*seconds > 0.0) return Status::Ok();
  return Status::DeadlineExceeded(
      fmt::format("the sample's timeout of {} s passed {}", request->timeout_seconds, while_doing));
}

ShardSampler::ShardSampler(int shards, int table, ShardSplit split, bool exact_totals, uint64_t seed)
    : shards_(static_cast<size_t>(shards)),
      probes_(static_cast<size_t>(shards), 0),
      table_(table),
      split_(split),
      exact_totals_(exact_totals),
      rng_(seed),
      messages_(static_cast<size_t>(shards)),
      frames_(static_cast<size_t>(shards)),
      replies_(static_cast<size_t>(shards)) {}

Status ShardSampler::Send(Connection* connection, ShardedRequest* request) {
  request->ids.assign(shards_.size(), 0);
  PERSERVE_RETURN_IF_ERROR(TakeAnsweredProbes(connection));
  const bool any_serves =
      std::any_of(shards_.begin(), shards_.end(), [this](const ShardState& shard) { return CanServe(shard); });
  if (!exact_totals_ && any_serves) return PlanAndSend(connection, request, request->awaited);
  // Every shard's state, answered at once: the plan is drawn over those ready.
  request->planned = false;
  for (size_t s = 0; s < shards_.size(); ++s) {
    PERSERVE_RETURN_IF_ERROR(SendShardSample(connection, static_cast<int>(s), table_, {}, /*wait=*/false, 0.0,
                                             /*awaited=*/false, &request->ids[s]));
  }
  return Status::Ok();
}

Status ShardSampler::PlanAndSend(Connection* connection, ShardedRequest* request, bool awaited) {
  if (by_parts()) {
    std::vector<size_t> all(static_cast<size_t>(request->batch_size));
    std::iota(all.begin(), all.end(), size_t{0});
    PERSERVE_RETURN_IF_ERROR(PlanShardParts(all, split_, shards_, &rng_, &request->parts));
    return SendParts(connection, request, awaited);
  }
  PERSERVE_RETURN_IF_ERROR(PlanShardSample(request->batch_size, shards_, &rng_, &request->plan));
  return SendPlanned(connection, request, awaited);
}

Status ShardSampler::SendPlanned(Connection* connection, ShardedRequest* request, bool awaited) {
  double time_left = 0.0;
  PERSERVE_RETURN_IF_ERROR(TimeLeft(*connection, request, "before its parts were asked of the shards", &time_left));
  request->planned = true;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const std::vector<double>& fractions = request->plan.fractions[s];
    // A shard given no strata is still asked for its state (at once).
    PERSERVE_RETURN_IF_ERROR(SendShardSample(connection, static_cast<int>(s), table_, fractions,
                                             /*wait=*/!fractions.empty(), time_left, awaited, &request->ids[s]));
  }
  return Status::Ok();
}

Status SendShardSample(Connection* connection, int shard, int table, std::span<const double> fractions, bool wait,
                       double timeout_seconds, bool awaited, uint64_t* id) {
  *id = connection->NextRequestId();
  std::vector<std::byte> frame = connection->AcquireBuffer(fractions.size_bytes() + 64);
  proto::EncodeFrame(proto::MessageKind::kShardSampleRequest, *id,
                     proto::ShardSampleRequest{static_cast<int64_t>(fractions.size()), wait, timeout_seconds,
                                               awaited, table},
                     {std::as_bytes(fractions)}, &frame);
  return connection->SendTo(shard, std::move(frame));
}

Status ShardSampler::TakeState(int shard, const Status& answered, const proto::Frame& frame,
                               proto::ShardSampleReply* reply) {
  ShardState& state = shards_[static_cast<size_t>(shard)];
  if (answered.code() == Status::Code::kFailedPrecondition) {  // it can never serve (no actor left)
    state.ready = false;
    state.why_not = answered.message();
  }
  PERSERVE_RETURN_IF_ERROR(answered);
  if (frame.kind() != proto::MessageKind::kShardSampleReply) {
    return Status::Internal(fmt::format("shard {} answered a shard sample with message kind {}", shard,
                                        frame.header.kind));
  }
  PERSERVE_RETURN_IF_ERROR(proto::DecodeMeta(frame, reply));
  state.ready = reply->ready;
  state.size = reply->size;
  state.total = reply->total;
  state.min_leaf = reply->min_leaf;
  return Status::Ok();
}

Status ShardSampler::TakeAll(Connection* connection, ShardedRequest* request) {
  Status first_error;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const Status answered = connection->AwaitReply(request->ids[s], &messages_[s], &frames_[s]);
    const Status taken = TakeState(static_cast<int>(s), answered, frames_[s], &replies_[s]);
    if (!taken.ok() && taken.code() != Status::Code::kFailedPrecondition && first_error.ok()) first_error = taken;
  }
  return first_error;
}

Status ShardSampler::TakeProbe(int shard, const Status& answered, const proto::Frame& frame) {
  probes_[static_cast<size_t>(shard)] = 0;
  // A probe that ran out of time says nothing; the sample that sent it has its own answer.
  if (answered.code() == Status::Code::kDeadlineExceeded) return Status::Ok();
  ShardState& state = shards_[static_cast<size_t>(shard)];
  // A probe's state can be older than a later reply's: once a shard is known
  // ready, only a refusal is news.
  if (answered.ok() && state.ready) return Status::Ok();
  proto::ShardSampleReply reply;
  const Status taken = TakeState(shard, answered, frame, &reply);
  return taken.code() == Status::Code::kFailedPrecondition ? Status::Ok() : taken;
}

Status ShardSampler::TakeAnsweredProbes(Connection* connection) {
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (probes_[s] == 0) continue;
    bool answered = false;
    std::vector<std::byte> message;
    proto::Frame frame;
    const Status polled = connection->PollReply(probes_[s], &answered, &message, &frame);
    if (!answered) {
      PERSERVE_RETURN_IF_ERROR(polled);
      continue;
    }
    PERSERVE_RETURN_IF_ERROR(TakeProbe(static_cast<int>(s), polled, frame));
  }
  return Status::Ok();
}

Status ShardSampler::AwaitAServingShard(Connection* connection, ShardedRequest* request) {
  std::vector<uint64_t> waiting;
  std::vector<int> waiting_shard;
  while (std::none_of(shards_.begin(), shards_.end(), [this](const ShardState& shard) { return CanServe(shard); })) {
    double time_left = 0.0;
    PERSERVE_RETURN_IF_ERROR(TimeLeft(*connection, request, "while no shard of the replay was ready", &time_left));
    waiting.clear();
    waiting_shard.clear();
    for (size_t s = 0; s < shards_.size(); ++s) {
      if (!shards_[s].why_not.empty()) continue;  // it never will be
      if (probes_[s] == 0) {
        PERSERVE_RETURN_IF_ERROR(SendShardSample(connection, static_cast<int>(s), table_, {}, /*wait=*/true, time_left,
                                                 /*awaited=*/false, &probes_[s]));
      }
      waiting.push_back(probes_[s]);
      waiting_shard.push_back(static_cast<int>(s));
    }
    if (waiting.empty()) return Status::Ok();  // no shard can ever serve: the plan says why
    size_t first = 0;
    std::vector<std::byte> message;
    proto::Frame frame;
    const Status answered = connection->AwaitFirstReply(waiting, &first, &message, &frame);
    PERSERVE_RETURN_IF_ERROR(TakeProbe(waiting_shard[first], answered, frame));
  }
  return Status::Ok();
}

Status ShardSampler::Receive(Connection* connection, const Schema& schema, ShardedRequest* request,
                             SampleBatch* batch) {
  const size_t shards = shards_.size();
  if (!request->planned) {
    PERSERVE_RETURN_IF_ERROR(TakeAll(connection, request));
    PERSERVE_RETURN_IF_ERROR(AwaitAServingShard(connection, request));
    PERSERVE_RETURN_IF_ERROR(PlanAndSend(connection, request, /*awaited=*/true));  // taken just below
  }
  if (by_parts()) return ReceiveParts(connection, schema, request, batch);
  while (true) {
    PERSERVE_RETURN_IF_ERROR(TakeAll(connection, request));
    // A shard that refused its part as never servable has left the plan (for
    // good): the whole sample is drawn again over the others, so every item
    // keeps its share of their total; if none of them is ready yet, once one
    // is (as before any shard was ready).
    bool refused = false;
    for (size_t s = 0; s < shards; ++s) refused |= !request->plan.fractions[s].empty() && !shards_[s].why_not.empty();
    if (!refused) break;
    PERSERVE_MARK("learner: a shard left a sample's plan");
    PERSERVE_RETURN_IF_ERROR(AwaitAServingShard(connection, request));
    PERSERVE_RETURN_IF_ERROR(PlanAndSend(connection, request, /*awaited=*/true));  // taken just below
  }

  const ShardPlan& plan = request->plan;
  const int64_t item_bytes = schema.ItemBytes();
  for (size_t s = 0; s < shards; ++s) {
    const size_t count = plan.fractions[s].size();
    const uint64_t expected = count * (2 * sizeof(uint64_t) + static_cast<uint64_t>(item_bytes));
    if (replies_[s].count != static_cast<int64_t>(count) || frames_[s].bulk.size() != expected) {
      return Status::Internal(fmt::format("shard {} answered {} items ({} bulk bytes) to a request for {}", s,
                                          replies_[s].count, frames_[s].bulk.size(), count));
    }
  }
  // The global minimum leaf: every shard's state is fresh from this sample.
  double min_leaf = std::numeric_limits<double>::infinity();
  for (const ShardState& shard : shards_) {
    if (shard.size > 0) min_leaf = std::min(min_leaf, shard.min_leaf);
  }
  const size_t batch_size = static_cast<size_t>(request->batch_size);
  batch->size = request->batch_size;
  batch->keys.resize(batch_size);
  batch->weights.resize(batch_size);
  batch->probabilities.resize(batch_size);
  batch->message.resize(batch_size * static_cast<size_t>(item_bytes));
  std::vector<size_t> next(shards, 0);
  for (size_t position = 0; position < batch_size; ++position) {
    const size_t s = static_cast<size_t>(plan.shard_of[position]);
    const size_t i = next[s]++;
    const std::byte* bulk = frames_[s].bulk.data();
    const size_t count = plan.fractions[s].size();
    double leaf = 0.0;
    std::memcpy(&batch->keys[position], bulk + i * sizeof(uint64_t), sizeof(uint64_t));
    std::memcpy(&leaf, bulk + (count + i) * sizeof(uint64_t), sizeof(double));
    batch->probabilities[position] = plan.totals[s] / plan.total * (leaf / replies_[s].total);
    batch->weights[position] = ImportanceWeight(leaf, min_leaf, request->beta);
    // Column after column, each count rows of its item size, as on the wire.
    const std::byte* source = bulk + 2 * count * sizeof(uint64_t);
    std::byte* target = batch->message.data();
    for (const Column& column : schema.columns) {
      const size_t row = static_cast<size_t>(column.ItemBytes());
      std::memcpy(target + position * row, source + i * row, row);
      source += count * row;
      target += batch_size * row;
    }
  }
  ViewColumns(schema, batch_size, batch);
  return Status::Ok();
}

}  // namespace perserve::client_internal
