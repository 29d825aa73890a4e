#include "server/service/simulation/step_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "proto/codec.h"
#include "server/service/simulation/reference_model.h"

namespace perserve::service::simulation {
namespace {

using proto::MessageKind;
using Code = Status::Code;

}  // namespace

StepModel::StepModel(const SimulationConfig& config, const std::vector<ShardLink>* links)
    : config_(config), links_(*links) {}

void StepModel::Start() {
  for (const ShardLink& link : links_) {
    const int s = static_cast<int>(shards_.size());
    link.transport->ObserveSends(
        [this, s](int index, std::span<const std::byte> frame) { ReplySent(s, index, frame); });
    replay::StepOptions options = config_.steps.options;
    options.streams = link.transport->client_count();
    shards_.emplace_back(options, config_.steps.step_schema);
    Shard& shard = shards_.back();
    shard.client_of.assign(static_cast<size_t>(options.streams), -1);
    for (int client = 0; client < static_cast<int>(link.index.size()); ++client) {
      if (link.index[static_cast<size_t>(client)] >= 0) {
        shard.client_of[static_cast<size_t>(link.index[static_cast<size_t>(client)])] = client;
      }
    }
  }
}

int StepModel::Stream(int client, int shard) const {
  return links_[static_cast<size_t>(shard)].index[static_cast<size_t>(client)];
}

int64_t StepModel::NewestEvicted(int client) const {
  const int shard = config_.ShardOfActor(client);
  const replay::step_test::StepReference& ref = reference(shard);
  const auto& history = ref.history(Stream(client, shard));
  const uint64_t oldest = ref.OldestKeyAfter(0);
  for (int64_t i = static_cast<int64_t>(history.size()) - 1; i >= 0; --i) {
    if (history[static_cast<size_t>(i)].key < oldest) return i;
  }
  return -1;
}

void StepModel::SentAppend(int client, int shard, uint64_t request_id, std::span<const std::byte> bytes) {
  proto::Frame frame;
  proto::AppendMeta request;
  Expect(proto::DecodeFrame(bytes, &frame).ok() && proto::DecodeMeta(frame, &request).ok() &&
             request.groups.size() <= 1 && (request.groups.empty() || !request.groups[0].item_per_step),
         [&] { return fmt::format("client {}: its append {} does not decode", client, request_id); });
  // The server's one table's items: the one group's, if any.
  const proto::ItemGroup items = request.groups.empty() ? proto::ItemGroup{} : request.groups[0];
  const StepStreamsConfig& steps = config_.steps;
  Append append;
  append.first_step = request.first_step;
  append.count = request.steps;
  append.apart = request.columns_follow;
  const Schema items_schema{steps.options.item_columns};
  const int64_t step_bytes = steps.step_schema.ItemBytes();
  const int64_t item_bytes = items_schema.ItemBytes();
  // The service's checks before it holds a request (proto::DecodeAppend's, the counts, the ring's slack for
  // columns apart), then of the bulk's size.
  append.malformed = request.steps < 0 || items.items < 0 || (request.steps == 0 && items.items == 0) ||
                     request.first_step < 0 || items.table != 0 || request.steps > steps.options.step_capacity ||
                     items.items > config_.capacity ||
                     (request.columns_follow && request.steps > replay::StepSlack(steps.step_schema,
                                                                                  steps.options.step_capacity));
  if (!append.malformed) {
    const size_t expected =
        static_cast<size_t>((request.columns_follow ? 0 : request.steps * step_bytes) +
                            items.items * (8 + item_bytes + (items.has_priorities ? 8 : 0)));
    append.malformed = frame.bulk.size() != expected;
  }
  if (!append.malformed) {
    std::span<const std::byte> bulk = frame.bulk;
    const auto take = [&bulk](int64_t n) {
      const std::span<const std::byte> part = bulk.first(static_cast<size_t>(n));
      bulk = bulk.subspan(static_cast<size_t>(n));
      return std::vector<std::byte>(part.begin(), part.end());
    };
    if (!request.columns_follow) {
      append.rows.assign(static_cast<size_t>(request.steps), {});
      for (const Column& column : steps.step_schema.columns) {
        for (auto& row : append.rows) row.push_back(take(column.ItemBytes()));
      }
    }
    std::vector<double> priorities;
    (void)proto::TakeArray(&bulk, static_cast<size_t>(items.items), &append.item_steps);
    (void)proto::TakeArray(&bulk, items.has_priorities ? static_cast<size_t>(items.items) : 0, &priorities);
    for (const double p : priorities) append.bad_priority |= !(p >= 0.0) || std::isinf(p);
    append.item_rows.assign(static_cast<size_t>(items.items), {});
    for (const Column& column : items_schema.columns) {
      for (auto& row : append.item_rows) row.push_back(take(column.ItemBytes()));
    }
  }
  const RequestKey key{client, shard, request_id};
  const bool fresh = appends_.emplace(key, std::move(append)).second;
  Expect(fresh, [&] { return fmt::format("client {}: append {} sent twice", client, request_id); });
  if (!request.columns_follow) return;
  // Its columns: sent already (before the request), or to come (SentColumns), in the client's order.
  awaiting_columns_[{client, shard}].push_back(key);
  std::deque<std::vector<std::byte>>& early = early_columns_[{client, shard}];
  if (!early.empty()) {
    SentColumns(client, shard, early.front());
    early.pop_front();
  }
}

void StepModel::SentColumns(int client, int shard, std::span<const std::byte> columns) {
  std::deque<RequestKey>& awaiting = awaiting_columns_[{client, shard}];
  if (awaiting.empty()) {  // before its request: the next append apart's
    early_columns_[{client, shard}].emplace_back(columns.begin(), columns.end());
    return;
  }
  const auto found = appends_.find(awaiting.front());
  awaiting.pop_front();
  if (found == appends_.end()) return;  // answered already (refused on arrival): dropped by the service
  Append& append = found->second;
  const Schema& schema = config_.steps.step_schema;
  if (append.malformed) return;
  if (columns.size() != static_cast<size_t>(append.count * schema.ItemBytes())) {
    append.bad_columns = true;
    return;
  }
  append.rows.assign(static_cast<size_t>(append.count), {});
  size_t offset = 0;  // the wire layout: each column's rows, column after column
  for (const Column& column : schema.columns) {
    const size_t bytes = static_cast<size_t>(column.ItemBytes());
    for (auto& row : append.rows) {
      const std::span<const std::byte> part = columns.subspan(offset, bytes);
      row.emplace_back(part.begin(), part.end());
      offset += bytes;
    }
  }
}

void StepModel::SentUpdate(int client, int shard, uint64_t request_id, const std::vector<uint64_t>& keys) {
  updates_[RequestKey{client, shard, request_id}] = keys;
}

bool StepModel::MayRefuse(int client, int shard, uint64_t request_id, int32_t code) const {
  const auto found = verdicts_.find(RequestKey{client, shard, request_id});
  if (found == verdicts_.end()) return false;
  return (found->second.invalid_argument && code == static_cast<int32_t>(Code::kInvalidArgument)) ||
         (found->second.failed_precondition && code == static_cast<int32_t>(Code::kFailedPrecondition));
}

StepModel::Verdict StepModel::Judge(int shard, int stream, const Append& append) {
  replay::step_test::StepReference& ref = shards_[static_cast<size_t>(shard)].ref;
  Verdict verdict;
  if (append.malformed) {
    verdict.invalid_argument = true;
  } else if (append.first_step != ref.steps(stream)) {
    verdict.failed_precondition = true;
    verdict.invalid_argument = append.bad_columns;
  } else if (append.bad_columns || append.bad_priority) {
    verdict.invalid_argument = true;
  } else {
    ref.Append(stream, append.rows);
    const uint64_t oldest = ref.OldestKeyAfter(0);
    std::vector<int64_t> steps;  // of its creatable items
    for (const int64_t t : append.item_steps) {
      const bool creatable = ref.Creatable(stream, t, oldest);
      verdict.invalid_argument |= !creatable;
      if (!creatable) continue;
      // One item per step (issue 33, finding 7): none over a step the table holds an item over, nor two in one append.
      verdict.invalid_argument |= ref.ItemOver(stream, t);
      steps.push_back(t);
    }
    std::sort(steps.begin(), steps.end());
    verdict.invalid_argument |= std::adjacent_find(steps.begin(), steps.end()) != steps.end();
    if (verdict.invalid_argument) ref.Unappend(stream, append.count);
  }
  return verdict;
}

void StepModel::Commit(int shard, int stream, const Append& append, uint64_t first_key) {
  replay::step_test::StepReference& ref = shards_[static_cast<size_t>(shard)].ref;
  const int64_t count = static_cast<int64_t>(append.item_steps.size());
  const int64_t held = ref.held_items(), pushed_out = ref.pushed_out();
  ref.RemoveItemsBeforeAdd(count, config_.capacity);
  counts_.pushed_out += ref.pushed_out() - pushed_out;
  counts_.evicted += held - ref.held_items() - (ref.pushed_out() - pushed_out);
  Shard& state = shards_[static_cast<size_t>(shard)];
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t key = first_key + static_cast<uint64_t>(i);
    ref.AddItem(key, replay::step_test::RefItem{stream, append.item_steps[static_cast<size_t>(i)],
                                                append.item_rows[static_cast<size_t>(i)]});
    state.earliest.push_back(ref.EarliestKey(key));
  }
}

void StepModel::ReplySent(int shard, int index, std::span<const std::byte> bytes) {
  if (!failure_.empty()) return;
  try {
    CheckReply(shard, index, bytes);
  } catch (const SimulationFailure& failure) {
    failure_ = failure.what();
  }
}

void StepModel::CheckReply(int shard, int index, std::span<const std::byte> bytes) {
  proto::Frame frame;
  if (!proto::DecodeFrame(bytes, &frame).ok()) return;  // the ReferenceModel fails it when it is received
  const int client = shards_[static_cast<size_t>(shard)].client_of[static_cast<size_t>(index)];
  const uint64_t id = frame.header.request_id;
  const RequestKey key{client, shard, id};
  const auto what = [&] {
    return fmt::format("client {}{}: the reply to request {}", client,
                       config_.shards > 1 ? fmt::format(" (shard {})", shard) : "", id);
  };
  if (appends_.count(key) > 0) return AppendAnswered(client, shard, id, frame);
  if (updates_.count(key) > 0) return UpdateAnswered(client, shard, id, frame);
  std::span<const std::byte> bulk = frame.bulk;
  std::vector<uint64_t> keys;
  std::vector<double> skipped;
  if (frame.kind() == MessageKind::kSampleReply) {
    proto::SampleReply reply;
    if (!proto::DecodeMeta(frame, &reply).ok()) return;
    const size_t count = static_cast<size_t>(reply.count);
    if (!proto::TakeArray(&bulk, count, &keys).ok() || !proto::TakeArray(&bulk, 2 * count, &skipped).ok()) return;
    CheckDrawn(shard, what(), keys, bulk);
  } else if (frame.kind() == MessageKind::kShardSampleReply) {
    proto::ShardSampleReply reply;
    if (!proto::DecodeMeta(frame, &reply).ok() || reply.count == 0) return;
    const size_t count = static_cast<size_t>(reply.count);
    if (!proto::TakeArray(&bulk, count, &keys).ok() || !proto::TakeArray(&bulk, count, &skipped).ok()) return;
    CheckDrawn(shard, what(), keys, bulk);
  }
}

void StepModel::AppendAnswered(int client, int shard, uint64_t request_id, const proto::Frame& frame) {
  const auto found = appends_.find(RequestKey{client, shard, request_id});
  const Append append = std::move(found->second);
  appends_.erase(found);
  const auto what = [&] {
    return fmt::format("client {}{}: append {} (steps {} .. {}, {} items)", client,
                       config_.shards > 1 ? fmt::format(" (shard {})", shard) : "", request_id, append.first_step,
                       append.first_step + append.count - 1, append.item_steps.size());
  };
  if (frame.kind() == MessageKind::kErrorReply) {
    proto::ErrorReply error;
    if (!proto::DecodeMeta(frame, &error).ok()) return;
    // Only its own flaws are judged here; a timeout, too many held or SIGTERM are the ReferenceModel's.
    if (error.code != static_cast<int32_t>(Code::kInvalidArgument) &&
        error.code != static_cast<int32_t>(Code::kFailedPrecondition)) {
      return;
    }
    const Verdict verdict = Judge(shard, Stream(client, shard), append);
    if (!verdict.invalid_argument && !verdict.failed_precondition) {
      Fail(fmt::format("{} was refused ({}), but it was valid when the service answered it (stream of {} steps)",
                       what(), Status::FromCode(error.code, error.message).ToString(),
                       reference(shard).steps(Stream(client, shard))));
    }
    verdicts_[RequestKey{client, shard, request_id}] = verdict;
    ++counts_.refused;
    return;
  }
  proto::AddReply reply;
  if (frame.kind() != MessageKind::kAddReply || !proto::DecodeMeta(frame, &reply).ok()) return;
  const int stream = Stream(client, shard);
  const Verdict verdict = Judge(shard, stream, append);
  Expect(!verdict.invalid_argument && !verdict.failed_precondition, [&] {
    return fmt::format("{} was acknowledged, but it was invalid when the service applied it ({}; the stream held "
                       "{} steps)",
                       what(),
                       verdict.failed_precondition ? "its first step is not the stream's next" : "an item or a count",
                       reference(shard).steps(stream) - (verdict.invalid_argument ? 0 : append.count));
  });
  Shard& state = shards_[static_cast<size_t>(shard)];
  const uint64_t first_key = proto::LocalKey(reply.first_key);
  Expect(first_key == state.earliest.size() && reply.count == static_cast<int64_t>(append.item_steps.size()), [&] {
    return fmt::format("{} was acknowledged with {} items from key {}; {} items from key {} expected", what(),
                       reply.count, first_key, append.item_steps.size(), state.earliest.size());
  });
  ++counts_.appends;
  counts_.items += reply.count;
  Commit(shard, stream, append, first_key);
}

bool StepModel::Whole(int shard, uint64_t key) const {
  // Held by the reference's table: so all its steps are in the ring.
  return shards_[static_cast<size_t>(shard)].ref.Held(key);
}

void StepModel::CheckDrawn(int shard, const std::string& what, std::span<const uint64_t> keys,
                           std::span<const std::byte> columns) {
  const Schema& schema = config_.steps.sample_schema;
  const size_t count = keys.size();
  Expect(columns.size() == count * static_cast<size_t>(schema.ItemBytes()),
         [&] { return fmt::format("{}: {} items in {} bytes of columns", what, count, columns.size()); });
  for (size_t i = 0; i < count; ++i) {
    const uint64_t local = proto::LocalKey(keys[i]);
    Expect(proto::ShardOfKey(keys[i]) == shard && Whole(shard, local), [&] {
      const Shard& state = shards_[static_cast<size_t>(shard)];
      return fmt::format(
          "{}: item {} (key {}) is not whole as it is sent: {} keys issued, its earliest step {}, the ring's "
          "oldest {}",
          what, i, keys[i], state.earliest.size(), local < state.earliest.size() ? state.earliest[local] : 0,
          state.ref.OldestKeyAfter(0));
    });
    const std::vector<std::vector<std::byte>> expected = reference(shard).Expected(local);
    size_t offset = 0;  // column c's rows start here
    for (size_t c = 0; c < schema.columns.size(); ++c) {
      const size_t bytes = static_cast<size_t>(schema.columns[c].ItemBytes());
      const std::span<const std::byte> got = columns.subspan(offset + i * bytes, bytes);
      Expect(std::equal(got.begin(), got.end(), expected[c].begin(), expected[c].end()), [&] {
        const auto& item = reference(shard).item(local);
        return fmt::format("{}: item {} (key {}, stream {} step {}): its {} is not the reference's", what, i, keys[i],
                           item.stream, item.t, schema.columns[c].name);
      });
      offset += count * bytes;
    }
    ++counts_.drawn;
  }
}

std::vector<std::vector<std::byte>> StepModel::Expected(uint64_t key) const {
  const int shard = proto::ShardOfKey(key);
  const uint64_t local = proto::LocalKey(key);
  Expect(shard < config_.shards && local < shards_[static_cast<size_t>(shard)].earliest.size(),
         [&] { return fmt::format("key {:#x} was never issued", key); });
  return reference(shard).Expected(local);
}

void StepModel::UpdateAnswered(int client, int shard, uint64_t request_id, const proto::Frame& frame) {
  const auto found = updates_.find(RequestKey{client, shard, request_id});
  const std::vector<uint64_t> keys = std::move(found->second);
  updates_.erase(found);
  proto::UpdateReply reply;
  if (frame.kind() != MessageKind::kUpdateReply || !proto::DecodeMeta(frame, &reply).ok()) return;
  // Each key whose item is gone is stale, unless its priority was bad (dropped first).
  int64_t gone = 0;
  for (const uint64_t key : keys) gone += !Whole(shard, proto::LocalKey(key));
  Expect(reply.stale <= gone && reply.stale + reply.dropped >= gone, [&] {
    return fmt::format("client {}: update {} of {} keys: {} stale, {} dropped, but {} of its items were overwritten "
                       "or evicted when it was applied",
                       client, request_id, keys.size(), reply.stale, reply.dropped, gone);
  });
  counts_.stale += reply.stale;
}

void StepModel::CheckShard(int shard, const replay::StepReplay& table, bool changed) {
  const replay::Replay& items = table.items();
  const replay::StepReplay& steps = table;
  const Shard& state = shards_[static_cast<size_t>(shard)];
  const std::string which = config_.shards == 1 ? "the step ring" : fmt::format("shard {}'s step ring", shard);
  Expect(steps.next_step_key() == state.ref.next_key() && items.next_key() == state.earliest.size(), [&] {
    return fmt::format("{}: {} steps and {} items issued, the reference {} and {}", which, steps.next_step_key(),
                       items.next_key(), state.ref.next_key(), state.earliest.size());
  });
  for (int stream = 0; stream < static_cast<int>(state.client_of.size()); ++stream) {
    Expect(steps.stream_steps(stream) == state.ref.steps(stream), [&] {
      return fmt::format("{}: stream {} holds {} steps, the reference {}", which, stream, steps.stream_steps(stream),
                         state.ref.steps(stream));
    });
  }
  if (!changed) return;
  // The table holds exactly the reference's items (none vanished while its steps are held, none outlived them or
  // the FIFO remover), each drawable.
  Expect(items.size() == state.ref.held_items(), [&] {
    return fmt::format("{}: the table holds {} items, the reference {}", which, items.size(), state.ref.held_items());
  });
  std::vector<int64_t> slots;
  for (int64_t slot = 0; slot < items.slots_used(); ++slot) {
    const uint64_t key = items.KeyAt(slot);
    if (key == replay::Replay::kNoKey) continue;
    Expect(state.ref.Held(key), [&] {
      return fmt::format("{}: the table holds item {} (earliest step {}, the ring's oldest {}), which the reference "
                         "does not (its steps left the ring, or the FIFO remover took it)",
                         which, key, key < state.earliest.size() ? state.earliest[key] : 0,
                         state.ref.OldestKeyAfter(0));
    });
    slots.push_back(slot);
  }
  std::vector<double> leaves(slots.size());
  Expect(items.tree().Get(slots, leaves).ok(), "reading the items' leaves");
  for (const double leaf : leaves) {
    Expect(leaf > 0.0, [&] { return fmt::format("{}: a held item has leaf {}", which, leaf); });
  }
}

}  // namespace perserve::service::simulation
