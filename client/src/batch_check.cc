// CheckBatch, CheckPriorities and CheckTimeout: what a client refuses before
// sending, so a bad request fails at its own call and costs the server nothing.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "perserve/client.h"

namespace perserve {
namespace {

std::string Describe(const Column& column) {
  return fmt::format("{}[{}], {} bytes an item", DTypeName(column.dtype), fmt::join(column.shape, ","),
                     column.ItemBytes());
}

// One message carries the whole batch, and MPI counts its bytes in an int.
constexpr uint64_t kMaxMessageBytes = (uint64_t{1} << 31) - 1;

}  // namespace

Status CheckPriorities(std::span<const double> priorities) {
  for (size_t j = 0; j < priorities.size(); ++j) {
    if (!std::isfinite(priorities[j]) || priorities[j] < 0.0) {
      return Status::InvalidArgument(
          fmt::format("priority {} at position {} must be finite and >= 0; nothing was sent", priorities[j], j));
    }
  }
  return Status::Ok();
}

Status CheckTimeout(double timeout_seconds) {
  if (!std::isfinite(timeout_seconds) || timeout_seconds < 0.0) {
    return Status::InvalidArgument(
        fmt::format("a timeout of {} seconds: it must be finite and >= 0 (0: none); nothing was sent", timeout_seconds));
  }
  return Status::Ok();
}

Status CheckBatch(const Schema& schema, const ColumnSpans& batch, std::span<const double> priorities) {
  if (batch.size < 1) return Status::InvalidArgument(fmt::format("a batch of {} items; nothing was sent", batch.size));
  if (batch.columns.size() != schema.columns.size()) {
    return Status::InvalidArgument(fmt::format("the batch has {} columns, the schema {} ({}); nothing was sent",
                                               batch.columns.size(), schema.columns.size(), schema.ToString()));
  }
  uint64_t total = static_cast<uint64_t>(batch.size) * sizeof(double);
  for (const Column& column : schema.columns) {
    const uint64_t item = static_cast<uint64_t>(column.ItemBytes());
    if (item > 0 && static_cast<uint64_t>(batch.size) > (kMaxMessageBytes - std::min(total, kMaxMessageBytes)) / item) {
      total = kMaxMessageBytes + 1;
      break;
    }
    total += static_cast<uint64_t>(batch.size) * item;
  }
  if (total > kMaxMessageBytes) {
    return Status::InvalidArgument(fmt::format(
        "a batch of {} items ({} bytes an item) is over MPI's 2 GiB message limit; send it in parts; nothing was sent",
        batch.size, schema.ItemBytes()));
  }
  for (size_t i = 0; i < batch.columns.size(); ++i) {
    const Column& column = schema.columns[i];
    const uint64_t expected = static_cast<uint64_t>(batch.size) * static_cast<uint64_t>(column.ItemBytes());
    if (batch.columns[i].data() == nullptr && expected > 0) {
      return Status::InvalidArgument(fmt::format("column \"{}\" is NULL; nothing was sent", column.name));
    }
    if (batch.columns[i].size() != expected) {
      return Status::InvalidArgument(fmt::format(
          "column \"{}\": expected {} bytes ({} items of {}), given {} bytes; nothing was sent", column.name,
          expected, batch.size, Describe(column), batch.columns[i].size()));
    }
  }
  if (!priorities.empty() && static_cast<int64_t>(priorities.size()) != batch.size) {
    return Status::InvalidArgument(
        fmt::format("{} priorities for {} items; nothing was sent", priorities.size(), batch.size));
  }
  return CheckPriorities(priorities);
}

}  // namespace perserve
