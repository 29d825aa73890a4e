#include "proto/append.h"

#include <cstring>

#include <fmt/format.h>

namespace perserve::proto {

Status DecodeAppend(const Frame& frame, int64_t step_bytes, int64_t item_bytes, DecodedAppend* append) {
  PERSERVE_RETURN_IF_ERROR(DecodeMeta(frame, &append->meta));
  const AppendMeta& m = append->meta;
  if (m.steps < 0 || m.items < 0 || (m.steps == 0 && m.item_count() == 0) || (m.item_per_step && m.items != 0)) {
    return Status::InvalidArgument(fmt::format("an append of {} steps and {} items{} is malformed", m.steps, m.items,
                                               m.item_per_step ? " (an item per step)" : ""));
  }
  if (m.first_step < 0 && !(m.first_step == AppendMeta::kAtEnd && m.item_per_step)) {
    return Status::InvalidArgument(fmt::format("an append from step {}: negative (only an add of an item per step may "
                                               "go at the stream's end, {})",
                                               m.first_step, AppendMeta::kAtEnd));
  }
  if (!(m.timeout_seconds >= 0.0)) {
    return Status::InvalidArgument(fmt::format("timeout {} s must be >= 0", m.timeout_seconds));
  }
  const std::span<const std::byte> bulk = frame.bulk;
  const uint64_t size = bulk.size();
  // Counts bounded by the bulk first, so the products below cannot overflow.
  const uint64_t items = static_cast<uint64_t>(m.item_count());
  const uint64_t per_item = (m.item_per_step ? 0 : 8) + (m.has_priorities ? 8 : 0) + static_cast<uint64_t>(item_bytes);
  const bool steps_fit = m.columns_follow || static_cast<uint64_t>(m.steps) <=
                                                   size / std::max<uint64_t>(1, static_cast<uint64_t>(step_bytes));
  const bool fits = steps_fit && (per_item == 0 || items <= size / per_item);
  const uint64_t step_part = m.columns_follow ? 0 : static_cast<uint64_t>(m.steps) * static_cast<uint64_t>(step_bytes);
  const uint64_t expected = fits ? step_part + items * per_item : 0;
  if (!fits || size != expected) {
    return Status::InvalidArgument(fmt::format(
        "an append of {} steps ({} bytes each{}) and {} items ({}{}{} bytes of item columns each) carries {} bulk "
        "bytes",
        m.steps, step_bytes, m.columns_follow ? ", sent apart" : "", m.item_count(),
        m.item_per_step ? "one per step, " : "", m.has_priorities ? "with priorities, " : "", item_bytes, size));
  }
  std::span<const std::byte> rest = bulk;
  append->step_columns = rest.first(static_cast<size_t>(step_part));
  rest = rest.subspan(static_cast<size_t>(step_part));
  PERSERVE_RETURN_IF_ERROR(TakeArray(&rest, m.item_per_step ? 0 : static_cast<size_t>(items), &append->item_steps));
  PERSERVE_RETURN_IF_ERROR(TakeArray(&rest, m.has_priorities ? static_cast<size_t>(items) : 0, &append->priorities));
  append->item_columns = rest;
  return Status::Ok();
}

void EncodeAppend(uint64_t request_id, const AppendMeta& meta,
                  std::span<const std::span<const std::byte>> step_columns, std::span<const int64_t> item_steps,
                  std::span<const double> priorities, std::span<const std::span<const std::byte>> item_columns,
                  std::vector<std::byte>* out) {
  size_t tail_bytes = item_steps.size_bytes() + priorities.size_bytes();
  for (const auto& column : step_columns) tail_bytes += column.size();
  for (const auto& column : item_columns) tail_bytes += column.size();
  std::span<std::byte> tail =
      EncodeFrameWithTail(MessageKind::kAppendRequest, request_id, SerializeMeta(meta), {}, tail_bytes, out);
  const auto put = [&tail](std::span<const std::byte> bytes) {
    if (!bytes.empty()) std::memcpy(tail.data(), bytes.data(), bytes.size());
    tail = tail.subspan(bytes.size());
  };
  for (const auto& column : step_columns) put(column);
  put(std::as_bytes(item_steps));
  put(std::as_bytes(priorities));
  for (const auto& column : item_columns) put(column);
}

}  // namespace perserve::proto
