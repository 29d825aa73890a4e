#include "replay/item_table.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include <fmt/format.h>

#include "common/coverage_marks.h"

namespace perserve::replay {

ItemTable::ItemTable(std::string name, const StepOptions& options, StepLayout layout, std::unique_ptr<Replay> items,
                     const store::StepStore* steps)
    : name_(std::move(name)),
      options_(options),
      layout_(std::move(layout)),
      steps_(steps),
      items_(std::move(items)),
      item_head_(static_cast<size_t>(steps_->slots()), kNoItem),
      item_next_(static_cast<size_t>(items_->capacity()), kNoItem),
      item_prev_(static_cast<size_t>(items_->capacity()), kNoItem),
      item_earliest_(static_cast<size_t>(items_->capacity()), 0),
      item_over_(static_cast<size_t>(steps_->slots()), kNoItem) {
  int64_t stacked_bytes = 0;
  for (size_t c = 0; c < layout_.depths.size(); ++c) {
    if (layout_.depths[c] > 1) stacked_bytes = std::max(stacked_bytes, steps_->schema().columns[c].ItemBytes());
  }
  zero_frame_.assign(static_cast<size_t>(stacked_bytes), std::byte{0});
}

bool ItemTable::RowsAreSteps() const { return options_.kind == StepOptions::Kind::kTransition; }

int64_t ItemTable::ReachableItems() const {
  const int64_t capacity = options_.step_capacity;
  int64_t items = capacity;
  if (options_.kind == StepOptions::Kind::kNStep) {
    items = capacity - options_.n_step - (layout_.max_depth - 1);
  } else if (options_.kind == StepOptions::Kind::kSequence) {
    const int64_t room = capacity - options_.sequence_length - (layout_.max_depth - 1);
    items = room < 0 ? 0 : room / options_.sequence_period + 1;
  }
  return std::clamp<int64_t>(items, 0, items_->capacity());
}

Status ItemTable::CheckItem(const StreamView& request, size_t position, int64_t t, uint64_t* step_key,
                            uint64_t* earliest_key) const {
  const auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument(
        fmt::format("{}item {} over step {} of stream {}: {}", label_, position, t, request.stream, why));
  };
  if (t < 0) return refuse("the stream never had it (stream indices start at 0)");
  if (t >= request.new_steps) {
    return refuse(fmt::format("not appended yet (the stream's last step, with this request, is {})",
                              request.new_steps - 1));
  }
  if (t < request.oldest) {
    if (request.oldest == request.old_steps) {
      return refuse(fmt::format("the ring no longer holds it (it holds none of the stream's {} steps)",
                                request.old_steps));
    }
    return refuse(fmt::format("the ring no longer holds it (the stream holds steps {} .. {})", request.oldest,
                              request.old_steps - 1));
  }
  *step_key = request.Key(t);
  if (options_.kind == StepOptions::Kind::kTransition) {
    if (*step_key < request.oldest_key_after) {
      return refuse(fmt::format("the ring no longer holds it once this request's {} steps are in",
                                request.new_steps - request.old_steps));
    }
    *earliest_key = *step_key;
    return Status::Ok();
  }
  if (request.Done(t) == store::kTruncated) {
    return refuse("it is a truncated episode's bootstrap observation (done 2): items end there, none starts there");
  }
  const int64_t episode_start = request.EpisodeStart(t);
  const int64_t earliest = std::max(episode_start, t - layout_.max_depth + 1);
  if (earliest < request.oldest || request.Key(earliest) < request.oldest_key_after) {
    return refuse(fmt::format("it needs step {} (the first of its stack of {} within its episode), which the ring "
                              "no longer holds once this request's {} steps are in",
                              earliest, layout_.max_depth, request.new_steps - request.old_steps));
  }
  const bool n_step = options_.kind == StepOptions::Kind::kNStep;
  if (!n_step && (t - episode_start) % options_.sequence_period != 0) {
    return refuse(fmt::format("a sequence must start a multiple of the period {} steps into its episode; this "
                              "one starts {} steps into the episode that began at step {}",
                              options_.sequence_period, t - episode_start, episode_start));
  }
  // The last step it needs unless its episode ends before: t+n (the
  // successor) or t+L-1. An episode that ends at any step up to it makes the
  // item whole (ending at `last` itself: `last` is in anyway).
  const int64_t last = n_step ? t + options_.n_step : t + options_.sequence_length - 1;
  for (int64_t i = t; i <= std::min(last, request.new_steps - 1); ++i) {
    if (request.EpisodeStart(i) != episode_start) {  // only across a restore: its episode ended there
      PERSERVE_MARK("append: an item over steps on both sides of a restore refused");
      return refuse(fmt::format("step {} begins a new episode (the server was restored from a checkpoint there)",
                                request.EpisodeStart(i)));
    }
    if (request.Done(i) != 0) {
      *earliest_key = request.Key(earliest);
      return Status::Ok();
    }
  }
  if (last >= request.new_steps) {
    return refuse(fmt::format("it needs step {} ({}), not appended yet (the stream's last step, with this "
                              "request, is {}), and its episode does not end before",
                              last, n_step ? "its n-step successor" : "its sequence's last", request.new_steps - 1));
  }
  *earliest_key = request.Key(earliest);
  return Status::Ok();
}

void ItemTable::CollectEvicted(int64_t steps) {
  removed_.clear();
  removed_slots_.clear();
  for (uint64_t key = steps_->oldest_key(); key < steps_->OldestKeyAfter(steps); ++key) {
    for (int64_t item = item_head_[static_cast<size_t>(steps_->SlotOf(key))]; item != kNoItem;
         item = item_next_[static_cast<size_t>(item)]) {
      removed_.push_back(items_->KeyAt(item));
    }
  }
  // Oldest key first, whatever the lists' order (a restore links them anew):
  // the order their slots are freed in, and so taken again, is the table's.
  std::sort(removed_.begin(), removed_.end());
  for (const uint64_t key : removed_) removed_slots_.push_back(items_->SlotOf(key));
}

void ItemTable::Link(int64_t item_slot, uint64_t earliest_key) {
  int64_t& head = item_head_[static_cast<size_t>(steps_->SlotOf(earliest_key))];
  item_earliest_[static_cast<size_t>(item_slot)] = earliest_key;
  item_prev_[static_cast<size_t>(item_slot)] = kNoItem;
  item_next_[static_cast<size_t>(item_slot)] = head;
  if (head != kNoItem) item_prev_[static_cast<size_t>(head)] = item_slot;
  head = item_slot;
  item_over_[static_cast<size_t>(steps_->SlotOf(ItemStepKey(item_slot)))] = item_slot;
}

void ItemTable::Unlink(int64_t item_slot) {
  const int64_t prev = item_prev_[static_cast<size_t>(item_slot)];
  const int64_t next = item_next_[static_cast<size_t>(item_slot)];
  if (prev != kNoItem) {
    item_next_[static_cast<size_t>(prev)] = next;
  } else {
    item_head_[static_cast<size_t>(steps_->SlotOf(item_earliest_[static_cast<size_t>(item_slot)]))] = next;
  }
  if (next != kNoItem) item_prev_[static_cast<size_t>(next)] = prev;
  int64_t& over = item_over_[static_cast<size_t>(steps_->SlotOf(ItemStepKey(item_slot)))];
  if (over == item_slot) over = kNoItem;
}

int64_t ItemTable::ItemOver(uint64_t step_key) const {
  const int64_t item = item_over_[static_cast<size_t>(steps_->SlotOf(step_key))];
  if (item == kNoItem || items_->KeyAt(item) == Replay::kNoKey) return kNoItem;
  return ItemStepKey(item) == step_key ? item : kNoItem;
}

Status ItemTable::CheckCount(int64_t steps, int64_t items, bool item_per_step) const {
  if (item_per_step) {  // an add: its items are its steps
    const int64_t capacity = std::min(options_.step_capacity, items_->capacity());
    if (steps >= 1 && steps <= capacity) return Status::Ok();
    return Status::InvalidArgument(
        fmt::format("{}an add of {} items: the count must be in [1, capacity {}]", label_, steps, capacity));
  }
  if (items < 0 || items > items_->capacity()) {
    return Status::InvalidArgument(fmt::format("{}an append of {} items: the count must be in [0, item capacity {}]",
                                               label_, items, items_->capacity()));
  }
  return Status::Ok();
}

Status ItemTable::PrepareItems(const StreamView& view, const TableItems& request, int64_t steps) {
  const int64_t count = request.count(steps);
  if (request.item_per_step && options_.kind != StepOptions::Kind::kTransition) {
    return Status::FailedPrecondition(fmt::format(
        "{}this table's items are n-step transitions or sequences over steps (--n-step, --sequence-length): append "
        "steps and name the steps items start at (Append; docs/steps.md), rather than adding transitions",
        label_));
  }
  PERSERVE_RETURN_IF_ERROR(CheckCount(steps, count, request.item_per_step));
  if (count > 0) {
    const Status checked = items_->CheckAdd(count, request.priorities);
    if (!checked.ok()) {
      return Status::FromCode(static_cast<int>(checked.code()), label_ + checked.message());
    }
  } else if (!request.priorities.empty()) {
    return Status::InvalidArgument(fmt::format("{}no items but {} priorities", label_, request.priorities.size()));
  }
  const uint64_t expected_item_bytes = static_cast<uint64_t>(count * layout_.item_column_bytes);
  if (request.item_columns.size() != expected_item_bytes) {
    return Status::InvalidArgument(fmt::format("{}{} items must carry {} bytes of item columns ({} per item), got {}",
                                               label_, count, expected_item_bytes, layout_.item_column_bytes,
                                               request.item_columns.size()));
  }
  earliest_keys_.resize(static_cast<size_t>(count));
  item_step_keys_.resize(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) {
    const int64_t t = request.item_per_step ? view.old_steps + j : request.item_steps[j];
    PERSERVE_RETURN_IF_ERROR(CheckItem(view, static_cast<size_t>(j), t, &item_step_keys_[j], &earliest_keys_[j]));
    // One item per step: the ring's held steps may carry one already.
    if (item_step_keys_[j] < view.first_new_key) {
      const int64_t held = ItemOver(item_step_keys_[j]);
      if (held != kNoItem) {
        return Status::InvalidArgument(fmt::format("{}item {} over step {} of stream {}: the table holds an item over "
                                                   "that step already (key {}); an item is created once",
                                                   label_, j, t, view.stream, items_->KeyAt(held)));
      }
    }
  }
  if (!request.item_per_step && count > 1) {
    std::vector<uint64_t> sorted(item_step_keys_.begin(), item_step_keys_.end());
    std::sort(sorted.begin(), sorted.end());
    const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    if (twice != sorted.end()) {
      const auto first = std::find(item_step_keys_.begin(), item_step_keys_.end(), *twice);
      return Status::InvalidArgument(fmt::format("{}the request creates two items over step {} of stream {}; an item "
                                                 "is created once",
                                                 label_, request.item_steps[first - item_step_keys_.begin()],
                                                 view.stream));
    }
  }
  // The plan: the items the steps push out, and the item slots the new ones take.
  CollectEvicted(steps);
  items_->PlanSlots(removed_, count, &item_slots_, &pushed_out_);
  return Status::Ok();
}

void ItemTable::PrepareEvictions(int64_t steps) {
  earliest_keys_.clear();
  item_step_keys_.clear();
  CollectEvicted(steps);
  item_slots_.clear();
  pushed_out_.clear();  // a table that takes no items makes no room
}

void ItemTable::UnlinkLeaving() {
  // Off their lists go the items leaving: evicted with their steps, and those
  // the table's remover takes (their slots are about to be reused).
  for (const int64_t slot : removed_slots_) Unlink(slot);
  for (const int64_t slot : pushed_out_) Unlink(slot);
}

void ItemTable::ClearStepSlots(uint64_t first_key, int64_t steps) {
  // The new steps' slots start with no items: their lists and items belonged to keys long gone.
  for (int64_t j = 0; j < steps; ++j) {
    const size_t slot = static_cast<size_t>(steps_->SlotOf(first_key + static_cast<uint64_t>(j)));
    item_head_[slot] = kNoItem;
    item_over_[slot] = kNoItem;
  }
}

Status ItemTable::CommitItems(const TableItems& request, int stream, uint64_t* first_item_key) {
  const int64_t count = static_cast<int64_t>(item_step_keys_.size());
  if (count == 0) {
    *first_item_key = items_->next_key();
    return items_->Remove(removed_);
  }
  // The stored rows: each item's step key, then the item columns as sent.
  const size_t key_bytes = static_cast<size_t>(count) * sizeof(uint64_t);
  rows_.resize(key_bytes + request.item_columns.size());
  std::memcpy(rows_.data(), item_step_keys_.data(), key_bytes);
  if (!request.item_columns.empty()) {
    std::memcpy(rows_.data() + key_bytes, request.item_columns.data(), request.item_columns.size());
  }
  uint64_t first = 0;
  const Status added = items_->Add(count, rows_, request.priorities, &first, removed_);
  if (!added.ok()) {  // PrepareItems' checks passed: only a failing tree device gets here
    return Status::Internal(fmt::format("stream {}'s steps are appended, but its {} items of table {} failed: {}",
                                        stream, count, name_, added.ToString()));
  }
  for (int64_t j = 0; j < count; ++j) {
    assert(items_->SlotOf(first + static_cast<uint64_t>(j)) == item_slots_[j]);
    Link(item_slots_[j], earliest_keys_[j]);
  }
  *first_item_key = first;
  return Status::Ok();
}

Status ItemTable::Sample(int64_t batch_size, double beta, SampleResult* result) {
  const Status drawn = items_->Sample(batch_size, beta, result);
  for (const int64_t slot : result->removed_slots) Unlink(slot);
  return drawn;
}

void ItemTable::StepSlots(std::span<const int64_t> item_slots, std::vector<int64_t>* step_slots) const {
  step_slots->resize(item_slots.size());
  // Each item's row is a cache miss of its own: started for all at once.
  for (const int64_t slot : item_slots) PrefetchItemRow(slot);
  for (size_t i = 0; i < item_slots.size(); ++i) {
    (*step_slots)[i] = steps_->SlotOf(ItemStepKey(item_slots[i]));
  }
}

Status ItemTable::LinkRestored() {
  const std::vector<uint8_t> no_done;
  const std::vector<int64_t> no_start;
  for (int64_t item_slot = 0; item_slot < items_->slots_used(); ++item_slot) {
    const uint64_t item_key = items_->KeyAt(item_slot);
    if (item_key == Replay::kNoKey) continue;
    const uint64_t step_key = ItemStepKey(item_slot);
    if (step_key < steps_->oldest_key() || step_key >= steps_->next_key()) {
      return Status::InvalidArgument(fmt::format("{}item key {}: its step key {} is not held (the ring holds {} .. {})",
                                                 label_, item_key, step_key, steps_->oldest_key(),
                                                 static_cast<int64_t>(steps_->next_key()) - 1));
    }
    const store::StepInfo& info = steps_->Info(step_key);
    const StreamView held{*steps_,
                          info.stream,
                          steps_->stream_oldest(info.stream),
                          steps_->stream_steps(info.stream),
                          steps_->stream_steps(info.stream),
                          steps_->next_key(),
                          steps_->oldest_key(),
                          no_done,
                          no_start};
    uint64_t checked_step = 0, earliest = 0;
    const Status checked = CheckItem(held, 0, info.index, &checked_step, &earliest);
    if (!checked.ok()) {
      return Status::InvalidArgument(fmt::format("item key {}: {}", item_key, checked.message()));
    }
    const int64_t other = ItemOver(step_key);
    if (other != kNoItem) {
      return Status::InvalidArgument(fmt::format("{}item keys {} and {} are both over step key {}", label_,
                                                 items_->KeyAt(other), item_key, step_key));
    }
    Link(item_slot, earliest);
  }
  return Status::Ok();
}

}  // namespace perserve::replay
