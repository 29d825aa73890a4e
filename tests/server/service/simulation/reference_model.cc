#include "server/service/simulation/reference_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "proto/codec.h"
#include "server/service/simulation/self_checking_rows.h"
#include "server/service/simulation/step_model.h"

namespace perserve::service::simulation {
namespace {

using proto::MessageKind;
using Code = Status::Code;

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

ReferenceModel::ReferenceModel(const SimulationConfig& config)
    : config_(config),
      ledgers_(static_cast<size_t>(config.clients() * config.shards)),
      items_acknowledged_(static_cast<size_t>(config.shards), 0),
      tables_(config.steps.on ? config.steps.tables : std::vector<SimTable>(1)) {
  if (!config.steps.on) {  // one prioritized table of transitions
    tables_[0].items.capacity = config.capacity;
    tables_[0].limiter.min_size_to_sample = config.options.min_size_to_sample;
  }
}

void ReferenceModel::SentAdd(int client, int shard, uint64_t request_id, int64_t first_item, int64_t count, bool valid,
                             bool columns_apart, int64_t first_step) {
  Request request(Kind::kAdd);
  request.valid = valid;
  request.first_item = first_item;
  request.count = count;
  request.columns_apart = columns_apart;
  request.first_step = first_step;
  Sent(client, shard, request_id, std::move(request));
}

void ReferenceModel::SentAppend(int client, int shard, uint64_t request_id, std::span<const std::byte> frame) {
  proto::Frame decoded;
  proto::AppendMeta meta;
  Expect(steps_ != nullptr && proto::DecodeFrame(frame, &decoded).ok() && proto::DecodeMeta(decoded, &meta).ok() &&
             std::none_of(meta.groups.begin(), meta.groups.end(),
                          [](const proto::ItemGroup& group) { return group.item_per_step; }),
         [&] { return fmt::format("client {}: an append {} to a server of transitions, or one that does not decode",
                                  client, request_id); });
  Request request(Kind::kAdd);
  request.append = true;
  request.count = meta.item_count();
  request.first_table = meta.groups.empty() ? 0 : meta.groups.front().table;
  for (const proto::ItemGroup& group : meta.groups) request.default_items += group.table == 0 ? group.items : 0;
  request.columns_apart = meta.columns_follow;
  Sent(client, shard, request_id, std::move(request));
  steps_->SentAppend(client, shard, request_id, frame);
}

void ReferenceModel::SentColumns(int client, int shard, std::span<const std::byte> columns) {
  if (steps_ != nullptr) steps_->SentColumns(client, shard, columns);
}

void ReferenceModel::SentSample(int client, int shard, uint64_t request_id, double beta, uint64_t next_key,
                                int table) {
  Request request(Kind::kSample);
  request.beta = beta;
  request.next_key_sent = next_key;
  request.table = table;
  if (steps_ != nullptr) steps_->SentSample(client, shard, request_id, table);
  Sent(client, shard, request_id, std::move(request));
}

void ReferenceModel::SentShardSample(int client, int shard, uint64_t request_id, int64_t count, uint64_t next_key,
                                     int table) {
  Request request(Kind::kShardSample);
  request.count = count;
  request.next_key_sent = next_key;
  request.table = table;
  if (steps_ != nullptr) steps_->SentSample(client, shard, request_id, table);
  Sent(client, shard, request_id, std::move(request));
}

void ReferenceModel::SentUpdate(int client, int shard, uint64_t request_id, std::vector<uint64_t> keys, int64_t bad,
                                bool never_issued, bool wrong_shard, uint64_t next_key, int table,
                                std::vector<double> priorities) {
  Request request(Kind::kUpdate);
  request.table = table;
  request.valid = !never_issued && !wrong_shard && (bad == 0 || config_.drop_bad_priorities);
  request.next_key_sent = next_key;
  request.keys = std::move(keys);
  request.bad = bad;
  request.never_issued = never_issued;
  request.wrong_shard = wrong_shard;
  if (steps_ != nullptr) steps_->SentUpdate(client, shard, request_id, table, request.keys, std::move(priorities));
  Sent(client, shard, request_id, std::move(request));
}

void ReferenceModel::SentClose(int client, int shard, uint64_t request_id) {
  ledger(client, shard).close_sent = true;
  Sent(client, shard, request_id, Request(Kind::kClose));
}

void ReferenceModel::SentCheckpoint(int client, int shard, uint64_t request_id) {
  Sent(client, shard, request_id, Request(Kind::kCheckpoint));
}

void ReferenceModel::Sent(int client, int shard, uint64_t request_id, Request request) {
  Expect(config_.actor(client) ? shard == config_.ShardOfActor(client) : shard >= 0 && shard < config_.shards, [&] {
    return fmt::format("client {} sent request {} to shard {}, not one of its servers (actors add to shard i mod {})",
                       client, request_id, shard, config_.shards);
  });
  Expect(!ledger(client, shard).close_sent || request.kind == Kind::kClose, [&] {
    return fmt::format("client {} sent request {} to shard {} after its close", client, request_id, shard);
  });
  // Both kinds of sample wait in one queue, under one allowance.
  const bool sample = request.kind == Kind::kSample || request.kind == Kind::kShardSample;
  request.waiting_before =
      sample ? Unanswered(client, shard, Kind::kSample) + Unanswered(client, shard, Kind::kShardSample)
             : Unanswered(client, shard, request.kind);
  request.sent_at = now_;
  const bool fresh = ledger(client, shard).requests.emplace(request_id, std::move(request)).second;
  Expect(fresh, [&] { return fmt::format("client {} sent request {} to shard {} twice", client, request_id, shard); });
}

int64_t ReferenceModel::Unanswered(int client, int shard, Kind kind) const {
  int64_t count = 0;
  for (const auto& [id, request] : ledger(client, shard).requests) count += request.kind == kind;
  return count;
}

bool ReferenceModel::closed(int client) const {
  if (config_.actor(client)) return ledger(client, config_.ShardOfActor(client)).closed;
  for (int shard = 0; shard < config_.shards; ++shard) {
    if (!ledger(client, shard).closed) return false;
  }
  return true;
}

std::string ReferenceModel::DescribeUnanswered(int client, int shard) const {
  std::string text;
  for (const auto& [id, request] : ledger(client, shard).requests) {
    text += fmt::format("{}request {} ({})", text.empty() ? "" : ", ", id, KindName(request.kind));
  }
  return text.empty() ? "nothing" : text;
}

std::vector<uint64_t> ReferenceModel::Received(int client, int shard, std::span<const std::byte> bytes,
                                               uint64_t next_key) {
  Ledger& ledger = this->ledger(client, shard);
  const auto who = [&] { return Who(client, shard); };
  proto::Frame frame;
  const Status decoded = proto::DecodeFrame(bytes, &frame);
  Expect(decoded.ok(), [&] { return fmt::format("{}: a reply does not decode: {}", who(), decoded.ToString()); });
  const uint64_t id = frame.header.request_id;
  Expect(!ledger.closed, [&] {
    return fmt::format("{}: a reply (kind {}, request {}) after its close reply", who(), frame.header.kind, id);
  });
  const auto found = ledger.requests.find(id);
  Expect(found != ledger.requests.end(), [&] {
    return fmt::format("{}: a reply (kind {}) to request {}, which it never sent or had answered already", who(),
                       frame.header.kind, id);
  });
  const Request request = std::move(found->second);
  ledger.requests.erase(found);
  const auto what = [&] { return fmt::format("{} request {}", who(), id); };

  if (frame.kind() == MessageKind::kErrorReply) {
    proto::ErrorReply error;
    Expect(proto::DecodeMeta(frame, &error).ok(), [&] { return what() + ": an error reply's meta does not decode"; });
    CheckError(client, shard, id, request, error);
    return {};
  }
  switch (request.kind) {
    case Kind::kAdd: {
      proto::AddReply reply;
      Expect(frame.kind() == MessageKind::kAddReply && proto::DecodeMeta(frame, &reply).ok(),
             [&] { return fmt::format("{}: an add answered with kind {}", what(), frame.header.kind); });
      Expect(request.valid, [&] { return what() + ": an add the server must refuse was stored"; });
      Expect(reply.count == request.count,
             [&] { return fmt::format("{}: {} items acknowledged of {}", what(), reply.count, request.count); });
      // An append's first key is its first group's table's; the StepModel checks every table's keys.
      AddAcknowledged(client, shard, request, reply.first_key, request.append ? request.default_items : reply.count,
                      next_key);
      return {};
    }
    case Kind::kSample: {
      proto::SampleReply reply;
      Expect(frame.kind() == MessageKind::kSampleReply && proto::DecodeMeta(frame, &reply).ok(),
             [&] { return fmt::format("{}: a sample answered with kind {}", what(), frame.header.kind); });
      Expect(frame.bulk.size() == static_cast<size_t>(reply.count * (3 * 8 + config_.RowBytes(request.table))), [&] {
        return fmt::format("{}: a sample reply of {} items has {} bulk bytes", what(), reply.count, frame.bulk.size());
      });
      return SampleReceived(client, shard, request, frame.bulk, reply.count, next_key);
    }
    case Kind::kShardSample: {
      proto::ShardSampleReply reply;
      Expect(frame.kind() == MessageKind::kShardSampleReply && proto::DecodeMeta(frame, &reply).ok(),
             [&] { return fmt::format("{}: a shard sample answered with kind {}", what(), frame.header.kind); });
      return ShardSampleReceived(client, shard, request, reply, frame.bulk, next_key);
    }
    case Kind::kUpdate: {
      proto::UpdateReply reply;
      Expect(frame.kind() == MessageKind::kUpdateReply && proto::DecodeMeta(frame, &reply).ok(),
             [&] { return fmt::format("{}: an update answered with kind {}", what(), frame.header.kind); });
      Expect(request.valid, [&] { return what() + ": an update the server must refuse was applied"; });
      UpdateAnswered(request, reply.applied, reply.stale, reply.dropped, next_key);
      return {};
    }
    case Kind::kClose:
      Expect(frame.kind() == MessageKind::kCloseReply,
             [&] { return fmt::format("{}: a close answered with kind {}", what(), frame.header.kind); });
      // It comes after the replies to everything sent before it (read in
      // order, so read already), but for waiting samples, which a close drops.
      for (const auto& [earlier, waiting] : ledger.requests) {
        // Structured bindings captured by name (Clang before 16 cannot capture them implicitly).
        const bool unanswered_sample = waiting.kind == Kind::kSample || waiting.kind == Kind::kShardSample;
        Expect(unanswered_sample, [&, &earlier = earlier, &waiting = waiting] {
          return fmt::format("{}: the close reply came before the reply to request {} ({})", what(), earlier,
                             KindName(waiting.kind));
        });
      }
      ledger.closed = true;
      return {};
    case Kind::kCheckpoint:
      Expect(frame.kind() == MessageKind::kCheckpointReply && config_.checkpoints,
             [&] { return fmt::format("{}: a checkpoint request answered with kind {}", what(), frame.header.kind); });
      return {};
  }
  return {};
}

void ReferenceModel::WithTimeout(int client, int shard, uint64_t request_id, double seconds) {
  const auto found = ledger(client, shard).requests.find(request_id);
  Expect(found != ledger(client, shard).requests.end(), "a timeout for a request never sent (a bug of the simulator)");
  found->second.timeout_seconds = seconds;
}

void ReferenceModel::CheckError(int client, int shard, uint64_t request_id, const Request& request,
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
                 (!request.valid && Is(code, Code::kInvalidArgument)) ||
                 (request.append && steps_->MayRefuse(client, shard, request_id, code));
      // An add that names a step other than its stream's next when it is applied (replies come in that order).
      allowed |= !request.append && request.first_step != proto::AppendMeta::kAtEnd &&
                 request.first_step != ledger(client, shard).stream_steps && Is(code, Code::kFailedPrecondition);
      // An append of steps alone is never held by the rate limiter (issue 33, finding 3): its timeout never
      // fires for it.
      Expect(!(request.append && request.count == 0 && Is(code, Code::kDeadlineExceeded) &&
               error.message.find("rate limiter") != std::string::npos),
             [&] {
               return fmt::format("{} request {}, an append of steps alone, was held by the rate limiter: {}",
                                  Who(client, shard), request_id, error.message);
             });
      break;
    case Kind::kSample:  // too many waiting (at most its unanswered ones), or hopeless once every actor closed
    case Kind::kShardSample:
      allowed |=
          (request.waiting_before >= config_.options.max_deferred_samples && Is(code, Code::kResourceExhausted)) ||
          (EveryActorClosing(shard) && Is(code, Code::kFailedPrecondition));
      // A shard's part drawn at fractions, of a table that draws through its selector (or a queue's).
      allowed |= request.kind == Kind::kShardSample && request.count > 0 && !Table(request.table).draws_at_fractions() &&
                 Is(code, Code::kFailedPrecondition);
      break;
    case Kind::kUpdate:
      allowed |= (!Table(request.table).takes_updates() && Is(code, Code::kFailedPrecondition)) ||
                 (request.never_issued && Is(code, Code::kNotFound)) ||
                 (request.wrong_shard && Is(code, Code::kInvalidArgument)) ||
                 (request.bad > 0 && !config_.drop_bad_priorities && Is(code, Code::kInvalidArgument));
      break;
    case Kind::kClose:
      break;
    case Kind::kCheckpoint:  // no directory, or its client closed first; a write failed (EFBIG: Unavailable)
      allowed |= Is(code, Code::kFailedPrecondition) && (!config_.checkpoints || ledger(client, shard).close_sent);
      allowed |= config_.disk_faults && (Is(code, Code::kUnavailable) || Is(code, Code::kResourceExhausted));
      break;
  }
  Expect(allowed, [&] {
    return fmt::format("{} request {} ({}): {}, which it must not get", Who(client, shard), request_id,
                       KindName(request.kind), Status::FromCode(code, error.message).ToString());
  });
}

bool ReferenceModel::EveryActorClosing(int shard) const {
  for (int client = 0; client < config_.clients(); ++client) {
    if (config_.actor(client) && config_.ShardOfActor(client) == shard && !ledger(client, shard).close_sent) {
      return false;
    }
  }
  return true;
}

bool ReferenceModel::EveryActorClosing() const {
  for (int shard = 0; shard < config_.shards; ++shard) {
    if (!EveryActorClosing(shard)) return false;
  }
  return true;
}

void ReferenceModel::AddAcknowledged(int client, int shard, const Request& request, uint64_t first_key, int64_t count,
                                     uint64_t next_key) {
  Ledger& ledger = this->ledger(client, shard);
  if (!request.append) {
    Expect(request.first_step == proto::AppendMeta::kAtEnd || request.first_step == ledger.stream_steps, [&] {
      return fmt::format("client {}: an add from step {} acknowledged, but its stream's next step was {}", client,
                         request.first_step, ledger.stream_steps);
    });
    ledger.stream_steps += count;
  }
  Expect(proto::ShardOfKey(first_key) == shard, [&] {
    return fmt::format("client {}: an add acknowledged by shard {} at key {:#x}, of shard {}", client, shard, first_key,
                       proto::ShardOfKey(first_key));
  });
  if (request.append && request.first_table != 0) {  // the key of another table (the StepModel's to check)
    items_acknowledged_[static_cast<size_t>(shard)] += count;
    unkeyed_items_ += count;
    return;
  }
  const uint64_t first_local = proto::LocalKey(first_key);
  Expect(first_local + static_cast<uint64_t>(count) <= next_key, [&] {
    return fmt::format("client {}: keys {} .. {} acknowledged, but the replay issued keys below {} only", client,
                       first_local, first_local + static_cast<uint64_t>(count) - 1, next_key);
  });
  // An append's items may be none: its key is then the next one, which the next append may take too.
  const bool may_share = request.append && (count == 0 || ledger.last_count == 0);
  Expect(!ledger.acknowledged_any || first_key > ledger.last_first_key ||
             (may_share && first_key == ledger.last_first_key),
         [&] {
    return fmt::format("client {}: an add acknowledged at key {} after its earlier add's at {}: out of its order",
                       client, first_key, ledger.last_first_key);
  });
  ledger.acknowledged_any = true;
  ledger.last_first_key = first_key;
  ledger.last_count = count;
  items_acknowledged_[static_cast<size_t>(shard)] += count;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t key = first_key + static_cast<uint64_t>(i);
    const int64_t id = ItemId(client, request.first_item + i);
    const auto [it, inserted] = item_of_key_.emplace(key, id);
    Expect(inserted, [&, &it = it] {
      return fmt::format("key {} acknowledged twice (client {} item {}, and item {:#x} before)", key, client,
                         request.first_item + i, it->second);
    });
    const auto [early, end] = sampled_early_.equal_range(key);
    for (auto seen = early; seen != end; ++seen) {
      Expect(seen->second == id, [&] {
        return fmt::format("a sample held item {:#x} under key {}, which was added as item {:#x}", seen->second, key,
                           id);
      });
    }
    sampled_early_.erase(early, end);
  }
}

std::vector<uint64_t> ReferenceModel::SampleReceived(int client, int shard, const Request& request,
                                                     std::span<const std::byte> bulk, int64_t count,
                                                     uint64_t next_key) {
  std::vector<uint64_t> keys;
  std::vector<double> weights, probabilities;
  std::span<const std::byte> columns = bulk;  // once the keys, weights and probabilities are taken
  Expect(proto::TakeArray(&columns, static_cast<size_t>(count), &keys).ok() &&
             proto::TakeArray(&columns, static_cast<size_t>(count), &weights).ok() &&
             proto::TakeArray(&columns, static_cast<size_t>(count), &probabilities).ok(),
         [&] { return fmt::format("{}: a sample reply is short", Who(client, shard)); });
  for (int64_t i = 0; i < count; ++i) {
    const auto what = [&] {
      return fmt::format("{}: sampled item {} of {} (key {})", Who(client, shard), i, count, keys[i]);
    };
    Expect(weights[i] > 0.0 && weights[i] <= 1.0, [&] { return fmt::format("{}: IS weight {}", what(), weights[i]); });
    Expect(probabilities[i] > 0.0 && probabilities[i] <= 1.0,
           [&] { return fmt::format("{}: probability {}", what(), probabilities[i]); });
    CheckDrawn(what, shard, request, keys[i], columns, count, i, next_key);
  }
  // A table that does not draw by priority gives every weight 1; one whose
  // items leave as they are drawn (max_times_sampled) draws each from the
  // table as it is then, so its probabilities are not of one total.
  const SimTable& drawn_from = Table(request.table);
  if (drawn_from.sampler() != table::SelectorKind::kPrioritized) {
    for (int64_t i = 0; i < count; ++i) {
      Expect(weights[i] == 1.0, [&] {
        return fmt::format("{}: sampled item {} of table {} (sampler {}) has IS weight {}", Who(client, shard), i,
                           drawn_from.name, table::SelectorKindName(drawn_from.sampler()), weights[i]);
      });
    }
    return keys;
  }
  if (drawn_from.items.max_times_sampled > 0) return keys;
  // w_i = (leaf_i / min_leaf)^-beta and P_i = leaf_i / total, so against the
  // most probable item m: w_i = w_m (P_i / P_m)^-beta.
  const auto most = std::max_element(probabilities.begin(), probabilities.end()) - probabilities.begin();
  for (int64_t i = 0; i < count; ++i) {
    const double expected = weights[most] * std::pow(probabilities[i] / probabilities[most], -request.beta);
    Expect(std::abs(weights[i] - expected) <= 1e-9 + 1e-6 * expected, [&] {
      return fmt::format(
          "{}: sampled item {} has IS weight {}, but its probability {} beside item {}'s ({}, weight {}) "
          "at beta {} gives {}",
          Who(client, shard), i, weights[i], probabilities[i], most, probabilities[most], weights[most], request.beta,
          expected);
    });
  }
  return keys;
}

std::vector<uint64_t> ReferenceModel::ShardSampleReceived(int client, int shard, const Request& request,
                                                          const proto::ShardSampleReply& reply,
                                                          std::span<const std::byte> bulk, uint64_t next_key) {
  const auto what = [&] { return fmt::format("{}: a shard sample of {}", Who(client, shard), request.count); };
  Expect(reply.count == request.count &&
             bulk.size() == static_cast<size_t>(reply.count * (2 * 8 + config_.RowBytes(request.table))),
         [&] { return fmt::format("{}: {} items, {} bulk bytes", what(), reply.count, bulk.size()); });
  const SimTable& table = Table(request.table);
  Expect(reply.size >= 0 && reply.size <= table.items.capacity && reply.items_added >= reply.size,
         [&] { return fmt::format("{}: size {} of {} added", what(), reply.size, reply.items_added); });
  Expect(reply.ready == (reply.size >= table.limiter.min_size_to_sample),
         [&] { return fmt::format("{}: ready {} at size {}", what(), reply.ready, reply.size); });
  std::vector<uint64_t> keys;
  std::vector<double> leaves;
  std::span<const std::byte> columns = bulk;  // once the keys and leaves are taken
  Expect(proto::TakeArray(&columns, static_cast<size_t>(reply.count), &keys).ok() &&
             proto::TakeArray(&columns, static_cast<size_t>(reply.count), &leaves).ok(),
         [&] { return what() + ": short"; });
  for (int64_t i = 0; i < reply.count; ++i) {
    const auto item = [&] { return fmt::format("{}: item {} (key {})", what(), i, keys[i]); };
    Expect(leaves[i] > 0.0 && leaves[i] >= reply.min_leaf && leaves[i] <= reply.total * (1 + 1e-12), [&] {
      return fmt::format("{}: leaf {}, min leaf {}, total {}", item(), leaves[i], reply.min_leaf, reply.total);
    });
    CheckDrawn(item, shard, request, keys[i], columns, reply.count, i, next_key);
  }
  return keys;
}

void ReferenceModel::CheckDrawn(const Describe& what, int shard, const Request& request, uint64_t key,
                                std::span<const std::byte> columns, int64_t count, int64_t i, uint64_t next_key) {
  Expect(proto::ShardOfKey(key) == shard,
         [&] { return fmt::format("{}: a key of shard {} from shard {}", what(), proto::ShardOfKey(key), shard); });
  const uint64_t local = proto::LocalKey(key);
  // (`next_key` is the default table's; another table's keys are the StepModel's to check.)
  Expect(request.table != 0 || local < next_key, [&] {
    return fmt::format("{}: a key not issued by its reply (next key {})", what(), next_key);
  });
  // Whether it was held as it was sent, its bytes and wholeness: with step streams the StepModel's (a table's items
  // there are not its newest keys: items leave with their steps, the oldest first only when the table is full).
  if (steps_ != nullptr) return;
  // Transitions: an item leaves when its step leaves the ring (the newest `capacity` steps, as many items).
  Expect(local + static_cast<uint64_t>(config_.capacity) >= request.next_key_sent, [&] {
    return fmt::format("{}: not live at any moment between its request (next key {}) and its reply (next key {})",
                       what(), request.next_key_sent, next_key);
  });
  int64_t id = 0;
  Expect(ReadRow(columns, count, i, config_.pad_bytes, &id),
         [&] { return fmt::format("{}: its row is torn (id {:#x})", what(), id); });
  ObservedItem(key, id, what);
}

void ReferenceModel::ObservedItem(uint64_t key, int64_t id, const Describe& where) {
  const auto found = item_of_key_.find(key);
  if (found == item_of_key_.end()) {
    sampled_early_.emplace(key, id);
    return;
  }
  Expect(found->second == id, [&] {
    return fmt::format("{}: item {:#x} under key {}, which was added as item {:#x}", where(), id, key, found->second);
  });
}

std::string ReferenceModel::Who(int client, int shard) const {
  // One shard names no shard, as before shards were simulated.
  return config_.shards == 1 ? fmt::format("client {}", client) : fmt::format("client {} (shard {})", client, shard);
}

void ReferenceModel::UpdateAnswered(const Request& request, int64_t applied, int64_t stale, int64_t dropped,
                                    uint64_t next_key) const {
  const int64_t count = static_cast<int64_t>(request.keys.size());
  Expect(applied >= 0 && stale >= 0 && dropped >= 0 && applied + stale + dropped == count, [&] {
    return fmt::format("an update of {} keys: {} applied, {} stale, {} dropped", count, applied, stale, dropped);
  });
  Expect(dropped == request.bad,
         [&] { return fmt::format("an update with {} bad priorities: {} dropped", request.bad, dropped); });
  // Stale: overwritten when it was applied, between the request and its reply
  // (with step streams, evicted too: the StepModel counts them as the reply is sent).
  if (steps_ != nullptr) return;
  const uint64_t capacity = static_cast<uint64_t>(config_.capacity);
  int64_t surely_stale = 0, maybe_stale = 0;
  for (const uint64_t key : request.keys) {
    surely_stale += proto::LocalKey(key) + capacity < request.next_key_sent;
    maybe_stale += proto::LocalKey(key) + capacity < next_key;
  }
  Expect(stale + dropped >= surely_stale && stale <= maybe_stale, [&] {
    return fmt::format(
        "an update: {} stale, but {} of its keys were overwritten before it was sent and {} by its reply", stale,
        surely_stale, maybe_stale);
  });
}

void ReferenceModel::CheckReplay(int shard, const replay::StepReplay& table, bool changed) const {
  const replay::Replay& replay = table.items();
  const std::string which = config_.shards == 1 ? "the replay" : fmt::format("shard {}'s replay", shard);
  Expect(replay.size() <= replay.capacity(), [&] { return fmt::format("{} holds {} items", which, replay.size()); });
  const double total = replay.tree().Total();
  Expect(std::isfinite(total) && total >= 0.0, [&] { return fmt::format("{}'s tree's total is {}", which, total); });
  const int64_t acknowledged = items_acknowledged_[static_cast<size_t>(shard)];
  Expect(replay.next_key() >= static_cast<uint64_t>(acknowledged), [&] {
    return fmt::format("{}: {} items acknowledged, {} keys issued", which, acknowledged, replay.next_key());
  });
  if (!changed || steps_ != nullptr) return;  // step streams: the StepModel's
  // Transitions: each step is the item over itself (the same keys), and both leave together: the table holds
  // exactly the items over the ring's steps, each drawable.
  const store::StepStore& ring = table.steps();
  const uint64_t next = replay.next_key();
  const uint64_t oldest = next > static_cast<uint64_t>(config_.capacity) ? next - config_.capacity : 0;
  Expect(ring.next_key() == next && ring.oldest_key() == oldest && replay.size() == static_cast<int64_t>(next - oldest),
         [&] {
           return fmt::format("{}: {} items held, keys below {} issued; its ring holds steps {} .. {}", which,
                              replay.size(), next, ring.oldest_key(), ring.next_key());
         });
  slots_.clear();
  for (uint64_t key = oldest; key < next; ++key) {
    slots_.push_back(replay.SlotOf(key));
    Expect(slots_.back() >= 0, [&] {
      return fmt::format("{}: the item of key {} is gone while its step is held (the ring holds {} .. {})", which,
                         key, oldest, next - 1);
    });
  }
  leaves_.resize(slots_.size());
  Expect(replay.tree().Get(slots_, leaves_).ok(), "reading the items' leaves");
  for (size_t i = 0; i < leaves_.size(); ++i) {
    Expect(leaves_[i] > 0.0,
           [&] { return fmt::format("{}: the item of key {} is held with leaf {}", which, oldest + i, leaves_[i]); });
  }
}

void ReferenceModel::Restarted(std::span<const uint64_t> next_keys, const std::function<int64_t(int, int)>& stream_steps,
                               std::span<const std::pair<uint64_t, int64_t>> restored) {
  std::fill(ledgers_.begin(), ledgers_.end(), Ledger{});
  for (int client = 0; client < config_.clients(); ++client) {
    if (config_.actor(client)) {
      const int shard = config_.ShardOfActor(client);
      ledger(client, shard).stream_steps = stream_steps(client, shard);
    }
  }
  // Keys issued after the checkpoint began are issued again; items seen but
  // never acknowledged went with the job, but for those restored (below).
  std::erase_if(item_of_key_, [&](const auto& entry) {
    return proto::LocalKey(entry.first) >= next_keys[static_cast<size_t>(proto::ShardOfKey(entry.first))];
  });
  sampled_early_.clear();
  for (const auto& [key, id] : restored) {
    const auto [it, inserted] = item_of_key_.emplace(key, id);
    Expect(inserted || it->second == id, [&, &it = it, key = key, id = id] {
      return fmt::format("the restore holds item {:#x} under key {}, which was added as item {:#x}", id, key,
                         it->second);
    });
  }
  int64_t acknowledged = 0;
  for (size_t s = 0; s < next_keys.size(); ++s) {
    items_acknowledged_[s] = static_cast<int64_t>(next_keys[s]);
    acknowledged += items_acknowledged_[s];
  }
  unkeyed_items_ = acknowledged - static_cast<int64_t>(item_of_key_.size());
  Expect(unkeyed_items_ >= 0, [&] {
    return fmt::format("{} keys issued before the restored checkpoints began, but {} items known under them",
                       acknowledged, item_of_key_.size());
  });
}

void ReferenceModel::CheckEnd(int shard, const replay::StepReplay& table) const {
  const replay::Replay& replay = table.items();
  CheckReplay(shard, table, /*changed=*/true);
  const int64_t acknowledged = items_acknowledged_[static_cast<size_t>(shard)];
  Expect(replay.next_key() == static_cast<uint64_t>(acknowledged), [&] {
    return fmt::format("{}{} keys issued but {} items acknowledged: an add lost or stored unacknowledged",
                       config_.shards == 1 ? "" : fmt::format("shard {}: ", shard), replay.next_key(), acknowledged);
  });
}

void ReferenceModel::CheckEnd() const {
  int64_t acknowledged = 0;
  for (const int64_t count : items_acknowledged_) acknowledged += count;
  Expect(static_cast<int64_t>(item_of_key_.size()) + unkeyed_items_ == acknowledged, "acknowledged keys overlap");
  Expect(sampled_early_.empty(), [&] {
    return fmt::format("{} sampled keys were never acknowledged (first {:#x})", sampled_early_.size(),
                       sampled_early_.empty() ? 0 : sampled_early_.begin()->first);
  });
  for (int client = 0; client < config_.clients(); ++client) {
    for (int shard = 0; shard < config_.shards; ++shard) {
      // A close drops the client's waiting samples unanswered; nothing else may be.
      for (const auto& [id, request] : ledger(client, shard).requests) {
        Expect(request.kind == Kind::kSample || request.kind == Kind::kShardSample, [&, &id = id, &request = request] {
          return fmt::format("client {} request {} ({}{}) was never answered", client, id, KindName(request.kind),
                             config_.shards == 1 ? "" : fmt::format(", shard {}", shard));
        });
      }
    }
  }
}

}  // namespace perserve::service::simulation
