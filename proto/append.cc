#include "proto/append.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace perserve::proto {

int64_t AppendMeta::item_count() const {
  int64_t count = 0;
  for (const ItemGroup& group : groups) count += group.item_count(steps);
  return count;
}

namespace {

// The meta's counts and tables, before any size is computed from them.
Status CheckMeta(const AppendMeta& m, size_t tables) {
  if (m.steps < 0) return Status::InvalidArgument(fmt::format("an append of {} steps is malformed", m.steps));
  bool any_items = false;
  bool all_per_step = !m.groups.empty();
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const ItemGroup& group = m.groups[g];
    if (group.table < 0 || static_cast<size_t>(group.table) >= tables) {
      return Status::InvalidArgument(fmt::format("item group {} names table {}; this server has {} table{} (0 to {})",
                                                 g, group.table, tables, tables == 1 ? "" : "s", tables - 1));
    }
    for (size_t earlier = 0; earlier < g; ++earlier) {
      if (m.groups[earlier].table == group.table) {
        return Status::InvalidArgument(fmt::format("item groups {} and {} both name table {}: an append names a "
                                                   "table once",
                                                   earlier, g, group.table));
      }
    }
    if (group.items < 0 || (group.item_per_step && group.items != 0)) {
      return Status::InvalidArgument(fmt::format("item group {} (table {}) of {} items{} is malformed", g,
                                                 group.table, group.items,
                                                 group.item_per_step ? " and an item per step" : ""));
    }
    any_items |= group.item_count(m.steps) > 0;
    all_per_step &= group.item_per_step;
  }
  if (m.steps == 0 && !any_items) {
    return Status::InvalidArgument(
        fmt::format("an append of no steps and no items ({} item groups) is malformed", m.groups.size()));
  }
  if (m.first_step < 0 && !(m.first_step == AppendMeta::kAtEnd && all_per_step)) {
    return Status::InvalidArgument(fmt::format("an append from step {}: negative (only an add, every item group an "
                                               "item per step, may go at the stream's end, {})",
                                               m.first_step, AppendMeta::kAtEnd));
  }
  if (!(m.timeout_seconds >= 0.0)) {
    return Status::InvalidArgument(fmt::format("timeout {} s must be >= 0", m.timeout_seconds));
  }
  return Status::Ok();
}

}  // namespace

Status DecodeAppend(const Frame& frame, int64_t step_bytes, std::span<const int64_t> item_bytes_by_table,
                    DecodedAppend* append) {
  PERSERVE_RETURN_IF_ERROR(DecodeMeta(frame, &append->meta));
  const AppendMeta& m = append->meta;
  PERSERVE_RETURN_IF_ERROR(CheckMeta(m, item_bytes_by_table.size()));
  const std::span<const std::byte> bulk = frame.bulk;
  const uint64_t size = bulk.size();
  // Each part's count bounded by the bytes not yet claimed first, so no
  // product or sum below can overflow.
  bool fits = m.columns_follow ||
              static_cast<uint64_t>(m.steps) <= size / std::max<uint64_t>(1, static_cast<uint64_t>(step_bytes));
  const uint64_t step_part = m.columns_follow ? 0 : static_cast<uint64_t>(m.steps) * static_cast<uint64_t>(step_bytes);
  uint64_t expected = fits ? step_part : 0;
  for (const ItemGroup& group : m.groups) {
    const uint64_t items = static_cast<uint64_t>(group.item_count(m.steps));
    const uint64_t per_item = (group.item_per_step ? 0 : 8) + (group.has_priorities ? 8 : 0) +
                              static_cast<uint64_t>(item_bytes_by_table[static_cast<size_t>(group.table)]);
    fits = fits && expected <= size && (per_item == 0 || items <= (size - expected) / per_item);
    if (fits) expected += items * per_item;
  }
  if (!fits || size != expected) {
    std::string groups;
    for (const ItemGroup& group : m.groups) {
      groups += fmt::format("; table {}: {} items ({}{}{} bytes of item columns each)", group.table,
                            group.item_count(m.steps), group.item_per_step ? "one per step, " : "",
                            group.has_priorities ? "with priorities, " : "",
                            item_bytes_by_table[static_cast<size_t>(group.table)]);
    }
    return Status::InvalidArgument(fmt::format("an append of {} steps ({} bytes each{}){} carries {} bulk bytes",
                                               m.steps, step_bytes, m.columns_follow ? ", sent apart" : "", groups,
                                               size));
  }
  std::span<const std::byte> rest = bulk;
  append->step_columns = rest.first(static_cast<size_t>(step_part));
  rest = rest.subspan(static_cast<size_t>(step_part));
  append->groups.resize(m.groups.size());
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const ItemGroup& group = m.groups[g];
    DecodedItems& decoded = append->groups[g];
    const size_t items = static_cast<size_t>(group.item_count(m.steps));
    decoded.table = group.table;
    decoded.item_per_step = group.item_per_step;
    PERSERVE_RETURN_IF_ERROR(TakeArray(&rest, group.item_per_step ? 0 : items, &decoded.item_steps));
    PERSERVE_RETURN_IF_ERROR(TakeArray(&rest, group.has_priorities ? items : 0, &decoded.priorities));
    const size_t column_bytes = items * static_cast<size_t>(item_bytes_by_table[static_cast<size_t>(group.table)]);
    decoded.item_columns = rest.first(column_bytes);
    rest = rest.subspan(column_bytes);
  }
  return Status::Ok();
}

void EncodeAppend(uint64_t request_id, const AppendMeta& meta,
                  std::span<const std::span<const std::byte>> step_columns, std::span<const ItemGroupSpans> groups,
                  std::vector<std::byte>* out) {
  size_t tail_bytes = 0;
  for (const auto& column : step_columns) tail_bytes += column.size();
  for (const ItemGroupSpans& group : groups) {
    tail_bytes += group.item_steps.size_bytes() + group.priorities.size_bytes();
    for (const auto& column : group.item_columns) tail_bytes += column.size();
  }
  std::span<std::byte> tail =
      EncodeFrameWithTail(MessageKind::kAppendRequest, request_id, SerializeMeta(meta), {}, tail_bytes, out);
  const auto put = [&tail](std::span<const std::byte> bytes) {
    if (!bytes.empty()) std::memcpy(tail.data(), bytes.data(), bytes.size());
    tail = tail.subspan(bytes.size());
  };
  for (const auto& column : step_columns) put(column);
  for (const ItemGroupSpans& group : groups) {
    put(std::as_bytes(group.item_steps));
    put(std::as_bytes(group.priorities));
    for (const auto& column : group.item_columns) put(column);
  }
}

}  // namespace perserve::proto
