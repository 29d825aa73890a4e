#include "table/selector.h"

#include <cmath>
#include <new>

#include <fmt/format.h>

#include "table/heap_selector.h"
#include "table/insertion_order_selector.h"
#include "table/prioritized_selector.h"
#include "table/uniform_selector.h"

namespace perserve::table {
namespace {

constexpr struct {
  std::string_view name;
  SelectorKind kind;
} kKinds[] = {
    {"prioritized", SelectorKind::kPrioritized}, {"uniform", SelectorKind::kUniform},
    {"fifo", SelectorKind::kFifo},               {"lifo", SelectorKind::kLifo},
    {"max_heap", SelectorKind::kMaxHeap},        {"min_heap", SelectorKind::kMinHeap},
};

Status CheckPriority(double priority, size_t position) {
  if (std::isfinite(priority) && priority >= 0.0) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("priority {} at position {} must be finite and >= 0", priority, position));
}

Status CheckSizes(size_t slots, size_t priorities) {
  if (slots == priorities) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{} slots but {} priorities", slots, priorities));
}

}  // namespace

Status ParseSelectorKind(std::string_view name, SelectorKind* kind) {
  for (const auto& entry : kKinds) {
    if (entry.name == name) {
      *kind = entry.kind;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument(fmt::format(
      "unknown selector \"{}\"; expected prioritized, uniform, fifo, lifo, max_heap or min_heap", name));
}

std::string_view SelectorKindName(SelectorKind kind) {
  for (const auto& entry : kKinds) {
    if (entry.kind == kind) return entry.name;
  }
  return "unknown";
}

Status Selector::Create(SelectorKind kind, const SelectorOptions& options, std::unique_ptr<Selector>* selector) {
  if (options.capacity < 1 || options.capacity > tree::PriorityTree::kMaxCapacity) {
    return Status::InvalidArgument(
        fmt::format("capacity {} is outside [1, {}]", options.capacity, tree::PriorityTree::kMaxCapacity));
  }
  if (!(std::isfinite(options.alpha) && options.alpha >= 0.0)) {
    return Status::InvalidArgument(fmt::format("alpha {} must be finite and >= 0", options.alpha));
  }
  try {
    switch (kind) {
      case SelectorKind::kPrioritized:
        return PrioritizedSelector::Create(options, selector);
      case SelectorKind::kUniform:
        *selector = std::make_unique<UniformSelector>(options.capacity);
        return Status::Ok();
      case SelectorKind::kFifo:
      case SelectorKind::kLifo:
        *selector = std::make_unique<InsertionOrderSelector>(kind, options.capacity);
        return Status::Ok();
      case SelectorKind::kMaxHeap:
      case SelectorKind::kMinHeap:
        *selector = std::make_unique<HeapSelector>(kind, options.capacity);
        return Status::Ok();
    }
  } catch (const std::bad_alloc&) {
    return Status::Unavailable(fmt::format("cannot allocate a {} selector of {} slots", SelectorKindName(kind),
                                           options.capacity));
  }
  return Status::InvalidArgument(fmt::format("unknown selector kind {}", static_cast<int>(kind)));
}

Status Selector::CheckSlot(int64_t slot, size_t position) const {
  if (slot >= 0 && slot < capacity_) return Status::Ok();
  return Status::OutOfRange(fmt::format("slot {} at position {} is outside [0, {})", slot, position, capacity_));
}

Status Selector::Insert(std::span<const int64_t> slots, std::span<const double> priorities) {
  PERSERVE_RETURN_IF_ERROR(CheckSizes(slots.size(), priorities.size()));
  marks_.BeginBatch();
  for (size_t j = 0; j < slots.size(); ++j) {
    PERSERVE_RETURN_IF_ERROR(CheckSlot(slots[j], j));
    if (HoldsInRange(slots[j])) {
      return Status::FailedPrecondition(fmt::format("slot {} at position {} is already held", slots[j], j));
    }
    if (!marks_.MarkOnce(slots[j])) {
      return Status::InvalidArgument(fmt::format("slot {} at position {} repeats an earlier one", slots[j], j));
    }
    PERSERVE_RETURN_IF_ERROR(CheckPriority(priorities[j], j));
  }
  return InsertChecked(slots, priorities);
}

Status Selector::Update(std::span<const int64_t> slots, std::span<const double> priorities) {
  PERSERVE_RETURN_IF_ERROR(CheckSizes(slots.size(), priorities.size()));
  for (size_t j = 0; j < slots.size(); ++j) {
    PERSERVE_RETURN_IF_ERROR(CheckSlot(slots[j], j));
    if (!HoldsInRange(slots[j])) {
      return Status::NotFound(fmt::format("slot {} at position {} is not held", slots[j], j));
    }
    PERSERVE_RETURN_IF_ERROR(CheckPriority(priorities[j], j));
  }
  return UpdateChecked(slots, priorities);
}

Status Selector::Delete(std::span<const int64_t> slots) {
  marks_.BeginBatch();
  for (size_t j = 0; j < slots.size(); ++j) {
    PERSERVE_RETURN_IF_ERROR(CheckSlot(slots[j], j));
    if (!HoldsInRange(slots[j])) {
      return Status::NotFound(fmt::format("slot {} at position {} is not held", slots[j], j));
    }
    if (!marks_.MarkOnce(slots[j])) {
      return Status::InvalidArgument(fmt::format("slot {} at position {} repeats an earlier one", slots[j], j));
    }
  }
  return DeleteChecked(slots);
}

Status Selector::Select(std::span<const double> fractions, std::span<int64_t> slots,
                        std::span<double> probabilities) const {
  if (slots.size() != fractions.size() || probabilities.size() != fractions.size()) {
    return Status::InvalidArgument(fmt::format("{} fractions but {} slots and {} probabilities", fractions.size(),
                                               slots.size(), probabilities.size()));
  }
  for (size_t i = 0; i < fractions.size(); ++i) {
    if (!(fractions[i] >= 0.0 && fractions[i] < 1.0)) {
      return Status::InvalidArgument(fmt::format("fraction {} at position {} must be in [0, 1)", fractions[i], i));
    }
  }
  if (fractions.empty()) return Status::Ok();
  if (size() == 0) return Status::FailedPrecondition("the selector holds no item to draw");
  return SelectChecked(fractions, slots, probabilities);
}

}  // namespace perserve::table
