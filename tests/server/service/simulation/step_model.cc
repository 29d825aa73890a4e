#include "server/service/simulation/step_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "proto/codec.h"
#include "server/service/simulation/reference_model.h"

namespace perserve::service::simulation {
namespace {

using proto::MessageKind;
using table::SelectorKind;
using table::SelectorKindName;
using Code = Status::Code;

}  // namespace

StepModel::StepModel(const SimulationConfig& config, const std::vector<ShardLink>* links)
    : config_(config), links_(*links) {}

void StepModel::ObserveSends() {
  for (int s = 0; s < static_cast<int>(links_.size()); ++s) {
    links_[static_cast<size_t>(s)].transport->ObserveSends(
        [this, s](int index, std::span<const std::byte> frame) { ReplySent(s, index, frame); });
  }
}

StepModel::Saved StepModel::Save(int shard) const { return Saved{shards_[static_cast<size_t>(shard)]}; }

void StepModel::RollBack(int shard, const Saved& saved) {
  Shard& state = shards_[static_cast<size_t>(shard)];
  state = saved.shard;
  state.held_itemless.clear();
  for (Table& table : state.tables) {
    for (int stream = 0; stream < static_cast<int>(state.client_of.size()); ++stream) {
      table.ref.StartNewEpisode(stream);
    }
  }
}

void StepModel::Restarted() {
  appends_.clear();
  updates_.clear();
  samples_.clear();
  verdicts_.clear();
  awaiting_columns_.clear();
  early_columns_.clear();
  failure_.clear();
  ObserveSends();
}

void StepModel::Start() {
  ObserveSends();
  for (const ShardLink& link : links_) {
    const int streams = link.transport->client_count();
    Shard& shard = shards_.emplace_back();
    for (int t = 0; t < link.table->tables(); ++t) {
      replay::StepOptions layout = t == 0 ? config_.steps.options : config_.steps.tables[static_cast<size_t>(t)].layout;
      layout.streams = streams;
      // Its item options as the service's table has them (capacity, sampler, remover, priority policy ...).
      shard.tables.emplace_back(layout, config_.steps.step_schema, link.table->table(t).items().options());
    }
    shard.client_of.assign(static_cast<size_t>(streams), -1);
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
             std::none_of(request.groups.begin(), request.groups.end(),
                          [](const proto::ItemGroup& group) { return group.item_per_step; }),
         [&] { return fmt::format("client {}: its append {} does not decode", client, request_id); });
  const StepStreamsConfig& steps = config_.steps;
  const int tables = static_cast<int>(steps.tables.size());
  Append append;
  append.first_step = request.first_step;
  append.count = request.steps;
  append.apart = request.columns_follow;
  const int64_t step_bytes = steps.step_schema.ItemBytes();
  const auto item_bytes = [&steps](int table) {
    return Schema{steps.tables[static_cast<size_t>(table)].layout.item_columns}.ItemBytes();
  };
  // The service's checks before it holds a request (proto::DecodeAppend's, the counts, the ring's slack for
  // columns apart), then of the bulk's size.
  append.malformed = request.steps < 0 || (request.steps == 0 && request.item_count() == 0) ||
                     request.first_step < 0 || request.steps > steps.options.step_capacity ||
                     (request.columns_follow && request.steps > replay::StepSlack(steps.step_schema,
                                                                                  steps.options.step_capacity));
  std::vector<bool> named(static_cast<size_t>(tables), false);
  for (const proto::ItemGroup& group : request.groups) {
    const bool known = group.table >= 0 && group.table < tables;
    append.malformed |= !known || group.items < 0 ||
                        (known && (named[static_cast<size_t>(group.table)] ||
                                   group.items > steps.tables[static_cast<size_t>(group.table)].items.capacity));
    if (known) named[static_cast<size_t>(group.table)] = true;
  }
  if (!append.malformed) {
    int64_t expected = request.columns_follow ? 0 : request.steps * step_bytes;
    for (const proto::ItemGroup& group : request.groups) {
      expected += group.items * (8 + item_bytes(group.table) + (group.has_priorities ? 8 : 0));
    }
    append.malformed = frame.bulk.size() != static_cast<size_t>(expected);
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
    for (const proto::ItemGroup& items : request.groups) {
      Append::Group& group = append.groups.emplace_back();
      group.table = items.table;
      (void)proto::TakeArray(&bulk, static_cast<size_t>(items.items), &group.steps);
      (void)proto::TakeArray(&bulk, items.has_priorities ? static_cast<size_t>(items.items) : 0, &group.priorities);
      for (const double p : group.priorities) append.bad_priority |= !(p >= 0.0) || std::isinf(p);
      group.rows.assign(static_cast<size_t>(items.items), {});
      for (const Column& column : steps.tables[static_cast<size_t>(items.table)].layout.item_columns) {
        for (auto& row : group.rows) row.push_back(take(column.ItemBytes()));
      }
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

void StepModel::SentSample(int client, int shard, uint64_t request_id, int table) {
  samples_[RequestKey{client, shard, request_id}] = table;
}

void StepModel::SentUpdate(int client, int shard, uint64_t request_id, int table, const std::vector<uint64_t>& keys,
                           std::vector<double> priorities) {
  updates_[RequestKey{client, shard, request_id}] = Update{table, keys, std::move(priorities)};
}

bool StepModel::MayRefuse(int client, int shard, uint64_t request_id, int32_t code) const {
  const auto found = verdicts_.find(RequestKey{client, shard, request_id});
  if (found == verdicts_.end()) return false;
  return (found->second.invalid_argument && code == static_cast<int32_t>(Code::kInvalidArgument)) ||
         (found->second.failed_precondition && code == static_cast<int32_t>(Code::kFailedPrecondition));
}

StepModel::Verdict StepModel::Judge(int shard, int stream, const Append& append) {
  Shard& state = shards_[static_cast<size_t>(shard)];
  Verdict verdict;
  if (append.malformed) {
    verdict.invalid_argument = true;
  } else if (append.first_step != state.ring().steps(stream)) {
    verdict.failed_precondition = true;
    verdict.invalid_argument = append.bad_columns;
  } else if (append.bad_columns || append.bad_priority) {
    verdict.invalid_argument = true;
  } else {
    for (Table& table : state.tables) table.ref.Append(stream, append.rows);
    const uint64_t oldest = state.ring().OldestKeyAfter(0);
    for (const Append::Group& group : append.groups) {
      const replay::step_test::StepReference& ref = state.tables[static_cast<size_t>(group.table)].ref;
      std::vector<int64_t> steps;  // of its creatable items
      for (const int64_t t : group.steps) {
        const bool creatable = ref.Creatable(stream, t, oldest);
        verdict.invalid_argument |= !creatable;
        if (!creatable) continue;
        // One item per step (issue 33, finding 7): none over a step the table holds an item over, nor two in one
        // append.
        verdict.invalid_argument |= ref.ItemOver(stream, t);
        steps.push_back(t);
      }
      std::sort(steps.begin(), steps.end());
      verdict.invalid_argument |= std::adjacent_find(steps.begin(), steps.end()) != steps.end();
    }
    if (verdict.invalid_argument) {
      for (Table& table : state.tables) table.ref.Unappend(stream, append.count);
    }
  }
  return verdict;
}

void StepModel::Commit(int shard, int stream, const Append& append) {
  Shard& state = shards_[static_cast<size_t>(shard)];
  for (int t = 0; t < static_cast<int>(state.tables.size()); ++t) {
    Table& table = state.tables[static_cast<size_t>(t)];
    // The items whose earliest step left the ring go from every table; then, in a table given items, the
    // remover's while it would hold more than its capacity; then the new items.
    for (const uint64_t key : table.ref.EvictItemsOutsideRing()) {
      table.selector.Remove(key);
      ++counts_.evicted;
    }
    const Append::Group* group = append.GroupOf(t);
    if (group == nullptr) continue;
    const int64_t count = static_cast<int64_t>(group->steps.size());
    for (const uint64_t key : table.selector.PushOut(count)) {
      table.ref.RemoveItem(key);
      ++counts_.pushed_out;
      counts_.lowest_removed += table.selector.options().remover == replay::RemoverKind::kLowestPriorityFirst;
    }
    const uint64_t first_key = table.earliest.size();
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t key = first_key + static_cast<uint64_t>(i);
      table.ref.AddItem(key, replay::step_test::RefItem{stream, group->steps[static_cast<size_t>(i)],
                                                        group->rows[static_cast<size_t>(i)]});
      table.earliest.push_back(table.ref.EarliestKey(key));
    }
    table.selector.Add(first_key, count, group->priorities);
    table.inserted += count;
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
  const auto sample = samples_.find(key);
  if (sample == samples_.end()) return;
  const int table = sample->second;
  samples_.erase(sample);
  std::span<const std::byte> bulk = frame.bulk;
  std::vector<uint64_t> keys;
  std::vector<double> weights, probabilities, leaves;
  if (frame.kind() == MessageKind::kSampleReply) {
    proto::SampleReply reply;
    if (!proto::DecodeMeta(frame, &reply).ok()) return;
    const size_t count = static_cast<size_t>(reply.count);
    if (!proto::TakeArray(&bulk, count, &keys).ok() || !proto::TakeArray(&bulk, count, &weights).ok() ||
        !proto::TakeArray(&bulk, count, &probabilities).ok()) {
      return;
    }
    CheckDrawn(shard, table, what(), keys, probabilities, bulk);
  } else if (frame.kind() == MessageKind::kShardSampleReply) {
    proto::ShardSampleReply reply;
    if (!proto::DecodeMeta(frame, &reply).ok() || reply.count == 0) return;
    const size_t count = static_cast<size_t>(reply.count);
    if (!proto::TakeArray(&bulk, count, &keys).ok() || !proto::TakeArray(&bulk, count, &leaves).ok()) return;
    CheckDrawn(shard, table, what(), keys, {}, bulk);
  }
}

void StepModel::AppendAnswered(int client, int shard, uint64_t request_id, const proto::Frame& frame) {
  const auto found = appends_.find(RequestKey{client, shard, request_id});
  const Append append = std::move(found->second);
  appends_.erase(found);
  const auto what = [&] {
    return fmt::format("client {}{}: append {} (steps {} .. {}, {} items)", client,
                       config_.shards > 1 ? fmt::format(" (shard {})", shard) : "", request_id, append.first_step,
                       append.first_step + append.count - 1, append.items());
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
  // Its first key: its first group's table's next (the default table's without items).
  Shard& state = shards_[static_cast<size_t>(shard)];
  const int first_table = append.groups.empty() ? 0 : append.groups.front().table;
  const uint64_t first_key = proto::LocalKey(reply.first_key);
  const uint64_t expected_key = state.tables[static_cast<size_t>(first_table)].earliest.size();
  Expect(first_key == expected_key && reply.count == append.items(), [&] {
    return fmt::format("{} was acknowledged with {} items from key {}; {} items from key {} of table {} expected",
                       what(), reply.count, first_key, append.items(), expected_key, first_table);
  });
  ++counts_.appends;
  counts_.items += reply.count;
  Commit(shard, stream, append);
}

bool StepModel::Whole(int shard, int table, uint64_t key) const {
  // Held by the reference's table: so all its steps are in the ring.
  return shards_[static_cast<size_t>(shard)].tables[static_cast<size_t>(table)].ref.Held(key);
}

void StepModel::CheckDrawn(int shard, int t, const std::string& what, std::span<const uint64_t> keys,
                           std::span<const double> probabilities, std::span<const std::byte> columns) {
  Shard& state = shards_[static_cast<size_t>(shard)];
  Table& table = state.tables[static_cast<size_t>(t)];
  const SimTable& config = config_.steps.tables[static_cast<size_t>(t)];
  const Schema& schema = config.sample_schema;
  const size_t count = keys.size();
  Expect(columns.size() == count * static_cast<size_t>(schema.ItemBytes()),
         [&] { return fmt::format("{}: {} items in {} bytes of columns", what, count, columns.size()); });
  // Its minimum size and rate limiter let it go (RateLimiter::CanSample, said again plainly).
  const RateLimiterOptions& limiter = config.limiter;
  const double r = limiter.samples_per_insert, m = static_cast<double>(limiter.min_size_to_sample);
  const double diff = static_cast<double>(table.inserted) * r - static_cast<double>(table.sampled);
  Expect(table.selector.size() >= limiter.min_size_to_sample &&
             (r == 0.0 || diff - static_cast<double>(count) >= r * m - limiter.error_buffer),
         [&] {
           return fmt::format("{}: {} items drawn from {} held{} (min size {}), {} inserted and {} sampled before: its "
                              "rate limiter (samples per insert {}, error buffer {}) does not let it go",
                              what, count, table.selector.size(),
                              state.tables.size() > 1 ? fmt::format(" by table {}", config.name) : "",
                              limiter.min_size_to_sample, table.inserted, table.sampled, r, limiter.error_buffer);
         });
  table.sampled += static_cast<int64_t>(count);
  const SelectorKind sampler = table.selector.options().sampler;
  const int64_t limit = table.selector.options().max_times_sampled;
  const auto table_name = [&] { return state.tables.size() > 1 ? fmt::format(" of table {}", config.name) : ""; };
  // A prioritized queue's batch comes back shuffled: each item drawn at most its draws left, all held as it began.
  const bool shuffled = sampler == SelectorKind::kPrioritized && limit > 0;
  if (shuffled) {
    std::map<uint64_t, int64_t> times;
    for (const uint64_t key : keys) ++times[proto::LocalKey(key)];
    for (const auto& [key, drawn] : times) {
      Expect(!table.selector.Held(key) || table.selector.times_sampled(key) + drawn <= limit, [&, key = key,
                                                                                             drawn = drawn] {
        return fmt::format("{}: item {}{} drawn {} times in one batch, {} times before (max_times_sampled {})", what,
                           key, table_name(), drawn, table.selector.times_sampled(key), limit);
      });
    }
  }
  for (size_t i = 0; i < count; ++i) {
    const uint64_t local = proto::LocalKey(keys[i]);
    Expect(proto::ShardOfKey(keys[i]) == shard && Whole(shard, t, local), [&] {
      return fmt::format(
          "{}: item {} (key {}){} is not held as it is sent: {} keys issued, its earliest step {}, the ring's "
          "oldest {}",
          what, i, keys[i], table_name(), table.earliest.size(),
          local < table.earliest.size() ? table.earliest[local] : 0, state.ring().OldestKeyAfter(0));
    });
    // The draw its selector makes now (fifo, lifo, the heaps), or the chance a uniform draw has now.
    const std::optional<uint64_t> next = table.selector.Next();
    Expect(!next.has_value() || *next == local, [&] {
      return fmt::format("{}: draw {}{} (sampler {}) gave item {}, but the reference's selector gives item {}", what, i,
                         table_name(), SelectorKindName(sampler), local, *next);
    });
    if (sampler == SelectorKind::kUniform && !probabilities.empty()) {
      const double chance = 1.0 / static_cast<double>(table.selector.size());
      Expect(std::abs(probabilities[i] - chance) <= 1e-12 * chance, [&] {
        return fmt::format("{}: draw {}{} (uniform) has probability {}, but {} items are held", what, i, table_name(),
                           probabilities[i], table.selector.size());
      });
    }
    const std::vector<std::vector<std::byte>> expected = table.ref.Expected(local);
    size_t offset = 0;  // column c's rows start here
    for (size_t c = 0; c < schema.columns.size(); ++c) {
      const size_t bytes = static_cast<size_t>(schema.columns[c].ItemBytes());
      const std::span<const std::byte> got = columns.subspan(offset + i * bytes, bytes);
      Expect(std::equal(got.begin(), got.end(), expected[c].begin(), expected[c].end()), [&] {
        const auto& item = table.ref.item(local);
        return fmt::format("{}: item {} (key {}{}, stream {} step {}): its {} is not the reference's", what, i,
                           keys[i], table_name(), item.stream, item.t, schema.columns[c].name);
      });
      offset += count * bytes;
    }
    ++counts_.drawn;
    if (state.tables.size() > 1) ++counts_.drawn_by[static_cast<size_t>(sampler)];
    if (limit > 0 && !shuffled) Drawn(&table, local);
  }
  if (shuffled) {
    for (const uint64_t key : keys) Drawn(&table, proto::LocalKey(key));
  }
}

void StepModel::Drawn(Table* table, uint64_t key) {
  table->selector.Drawn(key);
  if (table->selector.Held(key)) return;
  table->ref.RemoveItem(key);  // its k-th draw
  ++counts_.sampled_out;
}

std::vector<std::vector<std::byte>> StepModel::Expected(uint64_t key, int table) const {
  const int shard = proto::ShardOfKey(key);
  const uint64_t local = proto::LocalKey(key);
  Expect(shard < config_.shards &&
             local < shards_[static_cast<size_t>(shard)].tables[static_cast<size_t>(table)].earliest.size(),
         [&] { return fmt::format("key {:#x} of table {} was never issued", key, table); });
  return shards_[static_cast<size_t>(shard)].tables[static_cast<size_t>(table)].ref.Expected(local);
}

void StepModel::UpdateAnswered(int client, int shard, uint64_t request_id, const proto::Frame& frame) {
  const auto found = updates_.find(RequestKey{client, shard, request_id});
  const Update update = std::move(found->second);
  updates_.erase(found);
  const std::vector<uint64_t>& keys = update.keys;
  proto::UpdateReply reply;
  if (frame.kind() != MessageKind::kUpdateReply || !proto::DecodeMeta(frame, &reply).ok()) return;
  // Each key whose item is gone is stale, unless its priority was bad (dropped first).
  int64_t gone = 0;
  for (const uint64_t key : keys) gone += !Whole(shard, update.table, proto::LocalKey(key));
  Expect(reply.stale <= gone && reply.stale + reply.dropped >= gone, [&] {
    return fmt::format("client {}: update {} of {} keys: {} stale, {} dropped, but {} of its items were overwritten "
                       "or evicted when it was applied",
                       client, request_id, keys.size(), reply.stale, reply.dropped, gone);
  });
  counts_.stale += reply.stale;
  if (update.priorities.size() != keys.size()) return;
  // The priorities it set, in order: those not bad (as Replay::IsBadPriority counts them) of held items.
  Table& table = shards_[static_cast<size_t>(shard)].tables[static_cast<size_t>(update.table)];
  const replay::ReplayOptions& options = table.selector.options();
  std::vector<std::pair<uint64_t, double>> applied;
  int64_t bad = 0, stale = 0;
  for (size_t j = 0; j < keys.size(); ++j) {
    const double p = update.priorities[j];
    if (std::isnan(p) || std::isinf(p) || p < 0.0 || (!options.drop_bad_priorities && p + options.priority_eps == 0.0)) {
      ++bad;
    } else if (!table.selector.Held(proto::LocalKey(keys[j]))) {
      ++stale;
    } else {
      applied.emplace_back(proto::LocalKey(keys[j]), p);
    }
  }
  Expect(reply.applied == ssize(applied) && reply.stale == stale && reply.dropped == bad, [&] {
    return fmt::format("client {}: update {} of {} keys: {} applied, {} stale, {} dropped; the reference {}, {}, {}",
                       client, request_id, keys.size(), reply.applied, reply.stale, reply.dropped, applied.size(),
                       stale, bad);
  });
  table.selector.Update(applied);
  if (options.sampler != SelectorKind::kPrioritized ||
      options.remover == replay::RemoverKind::kLowestPriorityFirst) {
    counts_.selector_updates += ssize(applied);
  }
}

void StepModel::CheckShard(int shard, const replay::StepReplay& table, bool changed) {
  const replay::StepReplay& steps = table;
  Shard& state = shards_[static_cast<size_t>(shard)];
  const std::string which = config_.shards == 1 ? "the step ring" : fmt::format("shard {}'s step ring", shard);
  Expect(steps.next_step_key() == state.ring().next_key(), [&] {
    return fmt::format("{}: {} steps issued, the reference {}", which, steps.next_step_key(), state.ring().next_key());
  });
  for (int stream = 0; stream < static_cast<int>(state.client_of.size()); ++stream) {
    Expect(steps.stream_steps(stream) == state.ring().steps(stream), [&] {
      return fmt::format("{}: stream {} holds {} steps, the reference {}", which, stream, steps.stream_steps(stream),
                         state.ring().steps(stream));
    });
  }
  for (int t = 0; t < static_cast<int>(state.tables.size()); ++t) {
    CheckTable(shard, t, table.table(t).items(), changed || t > 0);
  }
}

void StepModel::CheckTable(int shard, int t, const replay::Replay& items, bool changed) {
  const Table& table = shards_[static_cast<size_t>(shard)].tables[static_cast<size_t>(t)];
  const std::string which =
      (config_.shards == 1 ? std::string("the") : fmt::format("shard {}'s", shard)) +
      (shards_[static_cast<size_t>(shard)].tables.size() == 1
           ? std::string(" table")
           : fmt::format(" table {}", config_.steps.tables[static_cast<size_t>(t)].name));
  Expect(items.next_key() == table.earliest.size(), [&] {
    return fmt::format("{}: {} items issued, the reference {}", which, items.next_key(), table.earliest.size());
  });
  if (!changed) return;
  // The table holds exactly the reference's items (none vanished while its steps are held, none outlived them,
  // its remover or its max_times_sampled), each drawable.
  Expect(items.size() == table.ref.held_items() && items.size() == table.selector.size(), [&] {
    return fmt::format("{}: it holds {} items, the reference {}", which, items.size(), table.ref.held_items());
  });
  std::vector<int64_t> slots;
  for (int64_t slot = 0; slot < items.slots_used(); ++slot) {
    const uint64_t key = items.KeyAt(slot);
    if (key == replay::Replay::kNoKey) continue;
    Expect(table.ref.Held(key), [&] {
      return fmt::format("{}: it holds item {} (earliest step {}, the ring's oldest {}), which the reference "
                         "does not (its steps left the ring, or its remover or max_times_sampled took it)",
                         which, key, key < table.earliest.size() ? table.earliest[key] : 0,
                         table.ref.OldestKeyAfter(0));
    });
    slots.push_back(slot);
  }
  std::vector<double> leaves(slots.size());
  Expect(items.tree().Get(slots, leaves).ok(), "reading the items' leaves");
  for (const double leaf : leaves) {
    Expect(leaf > 0.0, [&] { return fmt::format("{}: a held item has leaf {}", which, leaf); });
  }
  // With selectors (a sampler but prioritized, the lowest-priority remover, max_times_sampled): every held
  // item's priority and times sampled, and the draws left, as the reference has them.
  const replay::SelectorState selectors = items.Selectors();
  if (selectors.keys.empty()) return;
  Expect(selectors.keys == table.selector.keys() && items.draws_left() == table.selector.draws_left(), [&] {
    return fmt::format("{}: its selectors hold {} keys with {} draws left, the reference {} and {}", which,
                       selectors.keys.size(), items.draws_left(), table.selector.size(), table.selector.draws_left());
  });
  for (size_t i = 0; i < selectors.keys.size(); ++i) {
    const uint64_t key = selectors.keys[i];
    Expect(selectors.priorities[i] == table.selector.priority(key) &&
               (selectors.times_sampled.empty() || selectors.times_sampled[i] == table.selector.times_sampled(key)),
           [&] {
             return fmt::format("{}: item {} has priority {} and was sampled {} times; the reference {} and {}", which,
                                key, selectors.priorities[i],
                                selectors.times_sampled.empty() ? 0 : selectors.times_sampled[i],
                                table.selector.priority(key), table.selector.times_sampled(key));
           });
  }
}

}  // namespace perserve::service::simulation
