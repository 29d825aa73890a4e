#include "service/table_flags.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <locale>
#include <sstream>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "table/selector.h"

namespace perserve::service {
namespace {

constexpr std::string_view kKeys =
    "n_step, discount, sequence_length, sequence_period, stack, stack_axis, item_column, sampler, remover, max_items, "
    "max_times_sampled, alpha, min_size, samples_per_insert, error_buffer";

// Whether `text` at `at` begins "key=": lower-case letters and underscores, then '='.
bool KeyStartsAt(std::string_view text, size_t at) {
  size_t end = at;
  while (end < text.size() && (std::islower(static_cast<unsigned char>(text[end])) || text[end] == '_')) ++end;
  return end > at && end < text.size() && text[end] == '=';
}

template <typename T>
Status ParseNumber(std::string_view spec, std::string_view key, std::string_view value, T* out) {
  T parsed{};
  bool whole = false;
  if constexpr (std::is_floating_point_v<T>) {
    // libc++ (before 20) has no floating-point std::from_chars: a stream in
    // the classic locale, no leading blanks, every character read.
    std::istringstream stream{std::string(value)};
    stream.imbue(std::locale::classic());
    stream >> std::noskipws >> parsed;
    whole = !stream.fail() && stream.peek() == std::char_traits<char>::eof();
  } else {
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    whole = error == std::errc() && end == value.data() + value.size();
  }
  if (!whole) {
    return Status::InvalidArgument(fmt::format("--table {}: {}={} is not a number", spec, key, value));
  }
  *out = parsed;
  return Status::Ok();
}

// The same into an optional value (a key the table may leave to the server's flag).
template <typename T>
Status ParseNumber(std::string_view spec, std::string_view key, std::string_view value, std::optional<T>* out) {
  T parsed{};
  PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed));
  *out = parsed;
  return Status::Ok();
}

// The table's item layout from its flags (the ring's fields from the defaults).
Status LayoutOf(const TableFlags& flags, const TableDefaults& defaults, replay::StepOptions* options) {
  using replay::StepOptions;
  if (flags.n_step > 0 && flags.sequence_length > 0) {
    return Status::InvalidArgument("n-step and sequence length both choose the item kind: give one");
  }
  if (flags.n_step == 0 && flags.sequence_length == 0 &&
      (!flags.stacks.empty() || !flags.stack_axis.empty() || !flags.item_columns.empty() || flags.sequence_period > 0 ||
       flags.discount)) {
    return Status::InvalidArgument("a stack, item column, sequence period, discount or stack axis shapes n-step "
                                   "items or sequences: give the n-step or the sequence length too (without them "
                                   "the table stores transitions)");
  }
  if (flags.n_step > 0 && flags.sequence_period > 0) {
    return Status::InvalidArgument("the sequence period is for sequences, not n-step items");
  }
  if (flags.sequence_length > 0 && flags.discount) {
    return Status::InvalidArgument("the discount is for n-step items; a sequence returns its rewards as they are");
  }
  options->kind = flags.n_step > 0           ? StepOptions::Kind::kNStep
                  : flags.sequence_length > 0 ? StepOptions::Kind::kSequence
                                              : StepOptions::Kind::kTransition;
  options->n_step = std::max(1, flags.n_step);
  options->discount = flags.discount.value_or(0.99);
  options->sequence_length = flags.sequence_length;
  options->sequence_period = flags.sequence_period > 0 ? flags.sequence_period : flags.sequence_length;
  options->reward_column = defaults.reward_column;
  options->done_column = defaults.done_column;
  options->step_capacity = defaults.step_capacity;
  options->streams = defaults.streams;
  options->prefault = defaults.prefault;
  for (const std::string& spec : flags.stacks) {
    const size_t colon = spec.rfind(':');
    int depth = -1;
    if (colon != std::string::npos && colon > 0) {
      const std::string_view digits = std::string_view(spec).substr(colon + 1);
      const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), depth);
      if (error != std::errc() || end != digits.data() + digits.size()) depth = -1;
    }
    if (depth < 0) return Status::InvalidArgument(fmt::format("stack {}: give name:depth, as obs:4", spec));
    options->stacks.emplace_back(spec.substr(0, colon), depth);
  }
  if (!flags.stack_axis.empty() && flags.stack_axis != "first" && flags.stack_axis != "last") {
    return Status::InvalidArgument(
        fmt::format("stack axis {}: give first (frames on a new first axis: 4,84,84) or last (84,84,4)",
                    flags.stack_axis));
  }
  options->frames_first = flags.stack_axis == "first";
  for (const std::string& spec : flags.item_columns) {
    Column column;
    PERSERVE_RETURN_IF_ERROR(ParseColumn(spec, &column));
    options->item_columns.push_back(column);
  }
  return Status::Ok();
}

// SplitMix64's finalizer: table t's seed from the server's.
uint64_t TableSeed(uint64_t seed, int table) {
  if (table == 0) return seed;  // a server of one table samples as it always has
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(table);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Status ParseTableSpec(std::string_view spec, TableFlags* table) {
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  if (name.empty() || name.find('=') != std::string_view::npos || name.find(',') != std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("--table {}: give NAME:key=value,... (as apex:n_step=3,stack=obs:4)", spec));
  }
  TableFlags parsed;
  parsed.name = std::string(name);
  const std::string_view pairs = colon == std::string_view::npos ? std::string_view() : spec.substr(colon + 1);
  size_t at = 0;
  while (at < pairs.size()) {
    size_t end = at;
    while (end < pairs.size() && !(pairs[end] == ',' && KeyStartsAt(pairs, end + 1))) ++end;
    const std::string_view pair = pairs.substr(at, end - at);
    at = end + 1;
    const size_t equals = pair.find('=');
    if (equals == std::string_view::npos) {
      return Status::InvalidArgument(fmt::format("--table {}: \"{}\" is not key=value (keys: {})", spec, pair, kKeys));
    }
    const std::string_view key = pair.substr(0, equals);
    const std::string_view value = pair.substr(equals + 1);
    if (key == "n_step") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.n_step));
    } else if (key == "discount") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.discount));
    } else if (key == "sequence_length") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.sequence_length));
    } else if (key == "sequence_period") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.sequence_period));
    } else if (key == "stack") {
      parsed.stacks.emplace_back(value);
    } else if (key == "stack_axis") {
      parsed.stack_axis = std::string(value);
    } else if (key == "item_column") {
      parsed.item_columns.emplace_back(value);
    } else if (key == "sampler") {
      parsed.sampler = std::string(value);
    } else if (key == "remover") {
      parsed.remover = std::string(value);
    } else if (key == "max_items") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.max_items));
    } else if (key == "max_times_sampled") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.max_times_sampled));
    } else if (key == "alpha") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.alpha));
    } else if (key == "min_size") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.min_size));
    } else if (key == "samples_per_insert") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.samples_per_insert));
    } else if (key == "error_buffer") {
      PERSERVE_RETURN_IF_ERROR(ParseNumber(spec, key, value, &parsed.error_buffer));
    } else {
      return Status::InvalidArgument(fmt::format("--table {}: unknown key \"{}\" (keys: {})", spec, key, kKeys));
    }
  }
  *table = std::move(parsed);
  return Status::Ok();
}

Status TablesOf(const std::vector<TableFlags>& flags, const TableDefaults& defaults, const Schema& step_schema,
                std::unique_ptr<replay::StepReplay>* replay, std::vector<RateLimiterOptions>* limits) {
  std::vector<replay::TableConfig> tables;
  limits->clear();
  for (size_t t = 0; t < flags.size(); ++t) {
    const TableFlags& table = flags[t];
    const auto refuse = [&](const Status& status) {
      return Status::InvalidArgument(fmt::format("table {}: {}", table.name, status.message()));
    };
    replay::TableConfig config;
    config.name = table.name;
    if (const Status s = LayoutOf(table, defaults, &config.layout); !s.ok()) return refuse(s);
    config.items = defaults.items;
    config.items.capacity = table.max_items > 0 ? table.max_items : defaults.step_capacity;
    config.items.alpha = table.alpha.value_or(defaults.items.alpha);
    config.items.seed = TableSeed(defaults.items.seed, static_cast<int>(t));
    config.items.max_times_sampled = table.max_times_sampled;
    if (const Status s = table::ParseSelectorKind(table.sampler, &config.items.sampler); !s.ok()) return refuse(s);
    if (table.remover == "fifo") {
      config.items.remover = replay::RemoverKind::kOldestFirst;
    } else if (table.remover == "min_heap") {
      config.items.remover = replay::RemoverKind::kLowestPriorityFirst;
    } else {
      return refuse(Status::InvalidArgument(fmt::format(
          "remover \"{}\": fifo (the oldest item leaves first) or min_heap (the lowest priority)", table.remover)));
    }
    RateLimiterOptions limit = defaults.limiter;
    if (table.samples_per_insert) limit.samples_per_insert = *table.samples_per_insert;
    if (table.error_buffer) limit.error_buffer = *table.error_buffer;
    if (table.min_size) limit.min_size_to_sample = *table.min_size;
    const bool min_given = table.min_size.has_value() || defaults.min_size_given;
    if (min_given && (limit.min_size_to_sample < 1 || limit.min_size_to_sample > config.items.capacity)) {
      return refuse(Status::InvalidArgument(fmt::format(
          "min size to sample {} must be in [1, {}]: the table holds at most {} items (its max_items, else "
          "--capacity); no sample could ever be served",
          limit.min_size_to_sample, config.items.capacity, config.items.capacity)));
    }
    if (const Status s = RateLimiter::Validate(limit); !s.ok()) return refuse(s);
    tables.push_back(std::move(config));
    limits->push_back(limit);
  }
  PERSERVE_RETURN_IF_ERROR(replay::StepReplay::Create(std::move(tables), step_schema, replay));
  for (size_t t = 0; t < flags.size(); ++t) {
    if (flags[t].min_size || defaults.min_size_given) continue;
    // Never a minimum the table cannot reach: all of a ring of transitions,
    // half the whole items of a ring of one long episode per stream.
    const replay::ItemTable& table = (*replay)->table(static_cast<int>(t));
    const int64_t reachable = table.ReachableItems();
    (*limits)[t].min_size_to_sample = std::min<int64_t>(
        (*limits)[t].min_size_to_sample, table.RowsAreSteps() ? reachable : std::max<int64_t>(1, reachable / 2));
  }
  return Status::Ok();
}

Status ServedSchemasOf(const std::vector<replay::TableConfig>& tables, const Schema& step_schema,
                       int64_t max_steps_apart, proto::ServedSchemas* served) {
  if (tables.empty()) return Status::InvalidArgument("no tables to serve");
  served->tables.clear();
  for (const replay::TableConfig& table : tables) {
    Schema samples, stored;
    PERSERVE_RETURN_IF_ERROR(replay::StepSchemas(table.layout, step_schema, &samples, &stored));
    const table::SelectorKind sampler = table.items.sampler;
    served->tables.push_back(proto::TableSchemas{
        table.name, table.layout.kind != replay::StepOptions::Kind::kTransition, std::move(samples),
        Schema{table.layout.item_columns}, std::string(table::SelectorKindName(sampler)),
        sampler == table::SelectorKind::kPrioritized || sampler == table::SelectorKind::kMaxHeap ||
            sampler == table::SelectorKind::kMinHeap,
        table.items.max_times_sampled});
  }
  const proto::TableSchemas& first = served->tables.front();
  served->steps = first.steps;
  served->adds = step_schema;
  served->samples = first.samples;
  served->items = first.items;
  served->max_steps_apart = max_steps_apart;
  return Status::Ok();
}

std::vector<replay::TableConfig> TableConfigsOf(const replay::StepReplay& replay) {
  std::vector<replay::TableConfig> tables;
  for (int t = 0; t < replay.tables(); ++t) {
    const replay::ItemTable& table = replay.table(t);
    tables.push_back(replay::TableConfig{table.name(), table.options(), table.items().options()});
  }
  return tables;
}

}  // namespace perserve::service
