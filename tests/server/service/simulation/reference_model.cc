#include "server/service/simulation/reference_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "proto/codec.h"
#include "server/service/simulation/self_checking_rows.h"

namespace perserve::service::simulation {
namespace {

using proto::MessageKind;
using Code = Status::Code;

[[noreturn]] void Fail(const std::string& what) { throw SimulationFailure(what); }

void Expect(bool holds, const std::string& what) {
  if (!holds) Fail(what);
}

bool Is(int32_t code, Code expected) { return code == static_cast<int32_t>(expected); }

}  // namespace

const char* ReferenceModel::KindName(Kind kind) {
  switch (kind) {
    case Kind::kAdd:
      return "an add";
    case Kind::kSample:
      return "a sample";
    case Kind::kShardSample:
      return "a shard sample";
    case Kind::kUpdate:
      return "an update";
    case Kind::kClose:
      return "a close";
    case Kind::kCheckpoint:
      return "a checkpoint request";
  }
  return "?";
}

ReferenceModel::ReferenceModel(const SimulationConfig& config, int clients) : config_(config), ledgers_(clients) {}

void ReferenceModel::SentAdd(int client, uint64_t request_id, int64_t first_item, int64_t count, bool valid,
                             bool columns_apart) {
  Request request(Kind::kAdd);
  request.valid = valid;
  request.first_item = first_item;
  request.count = count;
  request.columns_apart = columns_apart;
  Sent(client, request_id, std::move(request));
}

void ReferenceModel::SentSample(int client, uint64_t request_id, double beta, uint64_t next_key) {
  Request request(Kind::kSample);
  request.beta = beta;
  request.next_key_sent = next_key;
  Sent(client, request_id, std::move(request));
}

void ReferenceModel::SentShardSample(int client, uint64_t request_id, int64_t count, uint64_t next_key) {
  Request request(Kind::kShardSample);
  request.count = count;
  request.next_key_sent = next_key;
  Sent(client, request_id, std::move(request));
}

void ReferenceModel::SentUpdate(int client, uint64_t request_id, std::vector<uint64_t> keys, int64_t bad,
                                bool never_issued, uint64_t next_key) {
  Request request(Kind::kUpdate);
  request.valid = !never_issued && (bad == 0 || config_.drop_bad_priorities);
  request.next_key_sent = next_key;
  request.keys = std::move(keys);
  request.bad = bad;
  request.never_issued = never_issued;
  Sent(client, request_id, std::move(request));
}

void ReferenceModel::SentClose(int client, uint64_t request_id) {
  ledgers_[client].close_sent = true;
  Sent(client, request_id, Request(Kind::kClose));
}

void ReferenceModel::SentCheckpoint(int client, uint64_t request_id) {
  Sent(client, request_id, Request(Kind::kCheckpoint));
}

void ReferenceModel::Sent(int client, uint64_t request_id, Request request) {
  // Both kinds of sample wait in one queue, under one allowance.
  const bool sample = request.kind == Kind::kSample || request.kind == Kind::kShardSample;
  request.waiting_before = sample ? Unanswered(client, Kind::kSample) + Unanswered(client, Kind::kShardSample)
                                  : Unanswered(client, request.kind);
  request.sent_at = now_;
  const bool fresh = ledgers_[client].requests.emplace(request_id, std::move(request)).second;
  Expect(fresh, fmt::format("client {} sent request {} twice (a bug of the simulator)", client, request_id));
}

int64_t ReferenceModel::Unanswered(int client, Kind kind) const {
  int64_t count = 0;
  for (const auto& [id, request] : ledgers_[client].requests) count += request.kind == kind;
  return count;
}

std::vector<uint64_t> ReferenceModel::Received(int client, std::span<const std::byte> bytes, uint64_t next_key) {
  Ledger& ledger = ledgers_[client];
  proto::Frame frame;
  const Status decoded = proto::DecodeFrame(bytes, &frame);
  Expect(decoded.ok(), fmt::format("client {}: a reply does not decode: {}", client, decoded.ToString()));
  const uint64_t id = frame.header.request_id;
  Expect(!ledger.closed,
         fmt::format("client {}: a reply (kind {}, request {}) after its close reply", client, frame.header.kind, id));
  const auto found = ledger.requests.find(id);
  Expect(found != ledger.requests.end(),
         fmt::format("client {}: a reply (kind {}) to request {}, which it never sent or had answered already", client,
                     frame.header.kind, id));
  const Request request = std::move(found->second);
  ledger.requests.erase(found);
  const std::string what = fmt::format("client {} request {}", client, id);

  if (frame.kind() == MessageKind::kErrorReply) {
    proto::ErrorReply error;
    Expect(proto::DecodeMeta(frame, &error).ok(), what + ": an error reply's meta does not decode");
    CheckError(client, id, request, error);
    return {};
  }
  switch (request.kind) {
    case Kind::kAdd: {
      proto::AddReply reply;
      Expect(frame.kind() == MessageKind::kAddReply && proto::DecodeMeta(frame, &reply).ok(),
             fmt::format("{}: an add answered with kind {}", what, frame.header.kind));
      Expect(request.valid, what + ": an add the server must refuse was stored");
      Expect(reply.count == request.count,
             fmt::format("{}: {} items acknowledged of {}", what, reply.count, request.count));
      AddAcknowledged(client, request, reply.first_key, reply.count, next_key);
      return {};
    }
    case Kind::kSample: {
      proto::SampleReply reply;
      Expect(frame.kind() == MessageKind::kSampleReply && proto::DecodeMeta(frame, &reply).ok(),
             fmt::format("{}: a sample answered with kind {}", what, frame.header.kind));
      Expect(frame.bulk.size() == static_cast<size_t>(reply.count * (3 * 8 + 8 + config_.pad_bytes)),
             fmt::format("{}: a sample reply of {} items has {} bulk bytes", what, reply.count, frame.bulk.size()));
      return SampleReceived(client, request, frame.bulk, reply.count, next_key);
    }
    case Kind::kShardSample: {
      proto::ShardSampleReply reply;
      Expect(frame.kind() == MessageKind::kShardSampleReply && proto::DecodeMeta(frame, &reply).ok(),
             fmt::format("{}: a shard sample answered with kind {}", what, frame.header.kind));
      return ShardSampleReceived(client, request, reply, frame.bulk, next_key);
    }
    case Kind::kUpdate: {
      proto::UpdateReply reply;
      Expect(frame.kind() == MessageKind::kUpdateReply && proto::DecodeMeta(frame, &reply).ok(),
             fmt::format("{}: an update answered with kind {}", what, frame.header.kind));
      Expect(request.valid, what + ": an update the server must refuse was applied");
      UpdateAnswered(request, reply.applied, reply.stale, reply.dropped, next_key);
      return {};
    }
    case Kind::kClose:
      Expect(frame.kind() == MessageKind::kCloseReply,
             fmt::format("{}: a close answered with kind {}", what, frame.header.kind));
      // It comes after the replies to everything sent before it (read in
      // order, so read already), but for waiting samples, which a close drops.
      for (const auto& [earlier, waiting] : ledger.requests) {
        Expect(waiting.kind == Kind::kSample || waiting.kind == Kind::kShardSample,
               fmt::format("{}: the close reply came before the reply to request {} ({})", what, earlier,
                           KindName(waiting.kind)));
      }
      ledger.closed = true;
      return {};
    case Kind::kCheckpoint:
      Expect(frame.kind() == MessageKind::kCheckpointReply && config_.checkpoints,
             fmt::format("{}: a checkpoint request answered with kind {}", what, frame.header.kind));
      return {};
  }
  return {};
}

void ReferenceModel::WithTimeout(int client, uint64_t request_id, double seconds) {
  const auto found = ledgers_[client].requests.find(request_id);
  Expect(found != ledgers_[client].requests.end(), "a timeout for a request never sent (a bug of the simulator)");
  found->second.timeout_seconds = seconds;
}

void ReferenceModel::CheckError(int client, uint64_t request_id, const Request& request,
                                const proto::ErrorReply& error) const {
  const int32_t code = error.code;
  bool allowed = terminated_ && Is(code, Code::kUnavailable);
  // A request past its timeout, held or waiting (an add, a sample), may end so; never one sooner.
  const double waited = std::chrono::duration<double>(now_ - request.sent_at).count();
  allowed |= request.timeout_seconds > 0 && waited >= request.timeout_seconds && Is(code, Code::kDeadlineExceeded) &&
             (request.kind == Kind::kAdd || request.kind == Kind::kSample || request.kind == Kind::kShardSample);
  switch (request.kind) {
    case Kind::kAdd:  // too many held (at most its unanswered ones), or malformed
      allowed |= (request.waiting_before >= config_.options.max_deferred_adds && Is(code, Code::kResourceExhausted)) ||
                 (!request.valid && Is(code, Code::kInvalidArgument));
      break;
    case Kind::kSample:  // too many waiting (at most its unanswered ones), or hopeless once every actor closed
    case Kind::kShardSample:
      allowed |=
          (request.waiting_before >= config_.options.max_deferred_samples && Is(code, Code::kResourceExhausted)) ||
          (EveryActorClosing() && Is(code, Code::kFailedPrecondition));
      break;
    case Kind::kUpdate:
      allowed |= (request.never_issued && Is(code, Code::kNotFound)) ||
                 (request.bad > 0 && !config_.drop_bad_priorities && Is(code, Code::kInvalidArgument));
      break;
    case Kind::kClose:
      break;
    case Kind::kCheckpoint:  // no directory, or its client closed first; a write failed (EFBIG: Unavailable)
      allowed |= Is(code, Code::kFailedPrecondition) && (!config_.checkpoints || ledgers_[client].close_sent);
      allowed |= config_.disk_faults && (Is(code, Code::kUnavailable) || Is(code, Code::kResourceExhausted));
      break;
  }
  Expect(allowed, fmt::format("client {} request {} ({}): {}, which it must not get", client, request_id,
                              KindName(request.kind), Status::FromCode(code, error.message).ToString()));
}

bool ReferenceModel::EveryActorClosing() const {
  for (int client = 0; client < config_.actors; ++client) {
    if (!ledgers_[client].close_sent) return false;
  }
  return true;
}

void ReferenceModel::AddAcknowledged(int client, const Request& request, uint64_t first_key, int64_t count,
                                     uint64_t next_key) {
  Ledger& ledger = ledgers_[client];
  Expect(first_key + static_cast<uint64_t>(count) <= next_key,
         fmt::format("client {}: keys {} .. {} acknowledged, but the replay issued keys below {} only", client,
                     first_key, first_key + static_cast<uint64_t>(count) - 1, next_key));
  Expect(!ledger.acknowledged_any || first_key > ledger.last_first_key,
         fmt::format("client {}: an add acknowledged at key {} after its earlier add's at {}: out of its order", client,
                     first_key, ledger.last_first_key));
  ledger.acknowledged_any = true;
  ledger.last_first_key = first_key;
  items_acknowledged_ += count;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t key = first_key + static_cast<uint64_t>(i);
    const int64_t id = ItemId(client, request.first_item + i);
    const auto [it, inserted] = item_of_key_.emplace(key, id);
    Expect(inserted, fmt::format("key {} acknowledged twice (client {} item {}, and item {:#x} before)", key, client,
                                 request.first_item + i, it->second));
    const auto [early, end] = sampled_early_.equal_range(key);
    for (auto seen = early; seen != end; ++seen) {
      Expect(seen->second == id, fmt::format("a sample held item {:#x} under key {}, which was added as item {:#x}",
                                             seen->second, key, id));
    }
    sampled_early_.erase(early, end);
  }
}

std::vector<uint64_t> ReferenceModel::SampleReceived(int client, const Request& request,
                                                     std::span<const std::byte> bulk, int64_t count,
                                                     uint64_t next_key) {
  std::vector<uint64_t> keys;
  std::vector<double> weights, probabilities;
  std::span<const std::byte> columns = bulk;  // once the keys, weights and probabilities are taken
  Expect(proto::TakeArray(&columns, static_cast<size_t>(count), &keys).ok() &&
             proto::TakeArray(&columns, static_cast<size_t>(count), &weights).ok() &&
             proto::TakeArray(&columns, static_cast<size_t>(count), &probabilities).ok(),
         fmt::format("client {}: a sample reply is short", client));
  for (int64_t i = 0; i < count; ++i) {
    const std::string what = fmt::format("client {}: sampled item {} of {} (key {})", client, i, count, keys[i]);
    Expect(weights[i] > 0.0 && weights[i] <= 1.0, fmt::format("{}: IS weight {}", what, weights[i]));
    Expect(probabilities[i] > 0.0 && probabilities[i] <= 1.0,
           fmt::format("{}: probability {}", what, probabilities[i]));
    CheckDrawn(what, request, keys[i], columns, count, i, next_key);
  }
  // w_i = (leaf_i / min_leaf)^-beta and P_i = leaf_i / total, so against the
  // most probable item m: w_i = w_m (P_i / P_m)^-beta.
  const auto most = std::max_element(probabilities.begin(), probabilities.end()) - probabilities.begin();
  for (int64_t i = 0; i < count; ++i) {
    const double expected = weights[most] * std::pow(probabilities[i] / probabilities[most], -request.beta);
    Expect(std::abs(weights[i] - expected) <= 1e-9 + 1e-6 * expected,
           fmt::format("client {}: sampled item {} has IS weight {}, but its probability {} beside item {}'s ({}, "
                       "weight {}) at beta {} gives {}",
                       client, i, weights[i], probabilities[i], most, probabilities[most], weights[most], request.beta,
                       expected));
  }
  return keys;
}

std::vector<uint64_t> ReferenceModel::ShardSampleReceived(int client, const Request& request,
                                                          const proto::ShardSampleReply& reply,
                                                          std::span<const std::byte> bulk, uint64_t next_key) {
  const std::string what = fmt::format("client {}: a shard sample of {}", client, request.count);
  Expect(
      reply.count == request.count && bulk.size() == static_cast<size_t>(reply.count * (2 * 8 + 8 + config_.pad_bytes)),
      fmt::format("{}: {} items, {} bulk bytes", what, reply.count, bulk.size()));
  Expect(reply.size >= 0 && reply.size <= config_.capacity && reply.items_added >= reply.size,
         fmt::format("{}: size {} of {} added", what, reply.size, reply.items_added));
  Expect(reply.ready == (reply.size >= config_.options.min_size_to_sample),
         fmt::format("{}: ready {} at size {}", what, reply.ready, reply.size));
  std::vector<uint64_t> keys;
  std::vector<double> leaves;
  std::span<const std::byte> columns = bulk;  // once the keys and leaves are taken
  Expect(proto::TakeArray(&columns, static_cast<size_t>(reply.count), &keys).ok() &&
             proto::TakeArray(&columns, static_cast<size_t>(reply.count), &leaves).ok(),
         what + ": short");
  for (int64_t i = 0; i < reply.count; ++i) {
    const std::string item = fmt::format("{}: item {} (key {})", what, i, keys[i]);
    Expect(leaves[i] > 0.0 && leaves[i] >= reply.min_leaf && leaves[i] <= reply.total * (1 + 1e-12),
           fmt::format("{}: leaf {}, min leaf {}, total {}", item, leaves[i], reply.min_leaf, reply.total));
    CheckDrawn(item, request, keys[i], columns, reply.count, i, next_key);
  }
  return keys;
}

void ReferenceModel::CheckDrawn(const std::string& what, const Request& request, uint64_t key,
                                std::span<const std::byte> columns, int64_t count, int64_t i, uint64_t next_key) {
  Expect(key < next_key && key + static_cast<uint64_t>(config_.capacity) >= request.next_key_sent,
         fmt::format("{}: not live at any moment between its request (next key {}) and its reply (next key {})", what,
                     request.next_key_sent, next_key));
  int64_t id = 0;
  Expect(ReadRow(columns, count, i, config_.pad_bytes, &id), fmt::format("{}: its row is torn (id {:#x})", what, id));
  ObservedItem(key, id, what);
}

void ReferenceModel::ObservedItem(uint64_t key, int64_t id, const std::string& where) {
  const auto found = item_of_key_.find(key);
  if (found == item_of_key_.end()) {
    sampled_early_.emplace(key, id);
    return;
  }
  Expect(found->second == id,
         fmt::format("{}: item {:#x} under key {}, which was added as item {:#x}", where, id, key, found->second));
}

void ReferenceModel::UpdateAnswered(const Request& request, int64_t applied, int64_t stale, int64_t dropped,
                                    uint64_t next_key) const {
  const int64_t count = static_cast<int64_t>(request.keys.size());
  Expect(applied >= 0 && stale >= 0 && dropped >= 0 && applied + stale + dropped == count,
         fmt::format("an update of {} keys: {} applied, {} stale, {} dropped", count, applied, stale, dropped));
  Expect(dropped == request.bad, fmt::format("an update with {} bad priorities: {} dropped", request.bad, dropped));
  // Stale: overwritten when it was applied, between the request and its reply.
  const uint64_t capacity = static_cast<uint64_t>(config_.capacity);
  int64_t surely_stale = 0, maybe_stale = 0;
  for (const uint64_t key : request.keys) {
    surely_stale += key + capacity < request.next_key_sent;
    maybe_stale += key + capacity < next_key;
  }
  Expect(stale + dropped >= surely_stale && stale <= maybe_stale,
         fmt::format("an update: {} stale, but {} of its keys were overwritten before it was sent and {} by its reply",
                     stale, surely_stale, maybe_stale));
}

void ReferenceModel::CheckReplay(const replay::Replay& replay) const {
  Expect(replay.size() <= replay.capacity(), fmt::format("the replay holds {} items", replay.size()));
  const double total = replay.tree().Total();
  Expect(std::isfinite(total) && total >= 0.0, fmt::format("the tree's total is {}", total));
  Expect(replay.next_key() >= static_cast<uint64_t>(items_acknowledged_),
         fmt::format("{} items acknowledged, {} keys issued", items_acknowledged_, replay.next_key()));
}

void ReferenceModel::CheckEnd(const replay::Replay& replay) const {
  CheckReplay(replay);
  Expect(replay.next_key() == static_cast<uint64_t>(items_acknowledged_),
         fmt::format("{} keys issued but {} items acknowledged: an add lost or stored unacknowledged",
                     replay.next_key(), items_acknowledged_));
  Expect(static_cast<int64_t>(item_of_key_.size()) == items_acknowledged_, "acknowledged keys overlap");
  Expect(sampled_early_.empty(),
         fmt::format("{} sampled keys were never acknowledged (first {})", sampled_early_.size(),
                     sampled_early_.empty() ? 0 : sampled_early_.begin()->first));
  for (int client = 0; client < static_cast<int>(ledgers_.size()); ++client) {
    // A close drops the client's waiting samples unanswered; nothing else may be.
    for (const auto& [id, request] : ledgers_[client].requests) {
      Expect(request.kind == Kind::kSample || request.kind == Kind::kShardSample,
             fmt::format("client {} request {} ({}) was never answered", client, id, KindName(request.kind)));
    }
  }
}

}  // namespace perserve::service::simulation
