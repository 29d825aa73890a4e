#include "service/checkpoint/table_checkpoint.h"

#include <cmath>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "proto/messages.h"
#include "table/selector.h"

namespace perserve::service {

std::vector<std::pair<std::string, std::string>> TableCheckpointFlags(const replay::ItemTable& table) {
  using Kind = replay::StepOptions::Kind;
  const replay::StepOptions& o = table.options();
  const replay::ReplayOptions& items = table.items().options();
  const bool n_step = o.kind == Kind::kNStep, sequence = o.kind == Kind::kSequence;
  std::vector<std::string> stacks;
  for (const auto& [name, depth] : o.stacks) stacks.push_back(fmt::format("{}:{}", name, depth));
  const std::string none = "none";
  return {
      {"kind", n_step ? "n_step" : sequence ? "sequence" : "transition"},
      {"n_step", n_step ? fmt::format("{}", o.n_step) : none},
      {"discount", n_step ? fmt::format("{}", o.discount) : none},
      {"sequence_length", sequence ? fmt::format("{}", o.sequence_length) : none},
      {"sequence_period", sequence ? fmt::format("{}", o.sequence_period) : none},
      {"stack", stacks.empty() ? none : fmt::format("{}", fmt::join(stacks, " "))},
      {"item_column", o.item_columns.empty() ? none : Schema{o.item_columns}.ToString()},
      {"max_items", fmt::format("{}", items.capacity)},
      {"sampler", std::string(table::SelectorKindName(items.sampler))},
      {"remover", items.remover == replay::RemoverKind::kOldestFirst ? "fifo" : "min_heap"},
      {"max_times_sampled", fmt::format("{}", items.max_times_sampled)},
      {"alpha", fmt::format("{}", items.alpha)},
  };
}

Status CheckTables(const std::string& dir, std::span<const TableCheckpointState> tables,
                   const replay::StepReplay& steps) {
  std::vector<std::string> names;
  for (const TableCheckpointState& table : tables) names.push_back(table.name);
  const std::string theirs = fmt::format("{}", fmt::join(names, ", "));
  if (static_cast<int>(tables.size()) != steps.tables()) {
    return Status::FailedPrecondition(
        fmt::format("{} holds {} table(s) ({}); this server has {} ({}): restore with the tables it was written with "
                    "(--table)",
                    dir, tables.size(), theirs, steps.tables(), steps.TableNames()));
  }
  for (int t = 0; t < steps.tables(); ++t) {
    const TableCheckpointState& saved = tables[static_cast<size_t>(t)];
    const replay::ItemTable& table = steps.table(t);
    if (saved.name != table.name()) {
      return Status::FailedPrecondition(
          fmt::format("{}: table {} is {} in the checkpoint and {} on this server (the checkpoint's tables: {}; this "
                      "server's: {}): restore with the tables it was written with, in that order (--table)",
                      dir, t, saved.name, table.name(), theirs, steps.TableNames()));
    }
    const auto flags = TableCheckpointFlags(table);
    if (saved.flags.size() != flags.size()) {
      return Status::InvalidArgument(fmt::format("{}/state.bin: table {} lists {} flags; a checkpoint lists {} "
                                                 "(damaged)",
                                                 dir, saved.name, saved.flags.size(), flags.size()));
    }
    for (size_t i = 0; i < flags.size(); ++i) {
      if (saved.flags[i].first != flags[i].first) {
        return Status::InvalidArgument(fmt::format("{}/state.bin: table {}: flag {} where {} belongs (damaged)", dir,
                                                   saved.name, saved.flags[i].first, flags[i].first));
      }
      if (saved.flags[i].second != flags[i].second) {
        return Status::FailedPrecondition(fmt::format(
            "{}: table {} was written with {}={}; this server's table {} has {}={} (restore with the --table flags "
            "it was written with)",
            dir, saved.name, flags[i].first, saved.flags[i].second, table.name(), flags[i].first, flags[i].second));
      }
    }
  }
  return Status::Ok();
}

Status ValidateTableState(const std::string& file, const std::string& label, const TableCheckpointState& table,
                          int64_t most_items) {
  auto bad = [&](std::string_view field, const std::string& what) {
    return Status::InvalidArgument(fmt::format("{}: {}{} {} (damaged)", file, label, field, what));
  };
  if (table.size < 0 || table.size > most_items) {
    return bad("size", fmt::format("{} is outside [0, capacity {}]", table.size, most_items));
  }
  const replay::ReplayState& r = table.replay;
  if (r.next_key < static_cast<uint64_t>(table.size)) {
    return bad("next key", fmt::format("{} is below the {} items held (their keys are below it)", r.next_key,
                                       table.size));
  }
  // Keys carry their shard in the top bits (proto::ShardKey): a next key past
  // the local key space would issue keys that name another shard.
  constexpr uint64_t kKeySpace = proto::kLocalKeyMask + 1;
  if (r.next_key > kKeySpace) {
    return bad("next key", fmt::format("{} is past a shard's key space (2^{} keys)", r.next_key, proto::kShardKeyShift));
  }
  if (!(r.max_priority > 0.0) || !std::isfinite(r.max_priority)) {
    return bad("max priority", fmt::format("{} is not finite and > 0", r.max_priority));
  }
  const replay::ReplayCounters& c = r.counters;
  for (const auto& [name, value] : {std::pair<std::string_view, int64_t>{"items added", c.items_added},
                                    {"items sampled", c.items_sampled},
                                    {"priorities updated", c.priorities_updated},
                                    {"stale updates dropped", c.stale_updates_dropped},
                                    {"priorities dropped", c.priorities_dropped}}) {
    if (value < 0) return bad(name, fmt::format("{} is negative", value));
  }
  if (static_cast<uint64_t>(c.items_added) > r.next_key) {
    return bad("items added", fmt::format("{} is past the {} keys ever issued", c.items_added, r.next_key));
  }
  const RateLimiterState& limiter = table.limiter;
  if (limiter.inserted < 0 || limiter.sampled < 0) {
    return bad("rate limiter", fmt::format("counts {} inserted and {} sampled: negative", limiter.inserted,
                                           limiter.sampled));
  }
  // The offsets seen: none yet (+inf, -inf: a limiter off, or before the
  // replay first held M items) or a finite range.
  const bool none_seen = limiter.lowest == std::numeric_limits<double>::infinity() &&
                         limiter.highest == -std::numeric_limits<double>::infinity();
  const bool range_seen =
      std::isfinite(limiter.lowest) && std::isfinite(limiter.highest) && limiter.lowest <= limiter.highest;
  if (limiter.observed && !none_seen && !range_seen) {
    return bad("rate limiter", fmt::format("offsets seen [{}, {}] are not a finite range", limiter.lowest,
                                           limiter.highest));
  }
  return Status::Ok();
}

}  // namespace perserve::service
