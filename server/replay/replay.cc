#include "replay/replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "perserve/importance_weight.h"
#include "replay/batch_shuffle.h"
#include "tree/tree_validation.h"

namespace perserve::replay {

Status Replay::Create(const ReplayOptions& options, Schema schema, std::unique_ptr<Replay>* replay) {
  if (!(options.alpha >= 0.0) || !std::isfinite(options.alpha)) {
    return Status::InvalidArgument(fmt::format("alpha {} must be finite and >= 0", options.alpha));
  }
  if (options.capacity < 1 || options.capacity > tree::PriorityTree::kMaxCapacity) {
    return Status::InvalidArgument(fmt::format("capacity {} is outside [1, 2^40]", options.capacity));
  }
  if (!(options.priority_eps >= 0.0) || !std::isfinite(options.priority_eps)) {
    return Status::InvalidArgument(fmt::format("priority eps {} must be finite and >= 0", options.priority_eps));
  }
  if (options.max_times_sampled < 0) {
    return Status::InvalidArgument(
        fmt::format("max times sampled {} must be >= 0 (0: no limit)", options.max_times_sampled));
  }
  if (table::SelectorKindName(options.sampler) == "unknown") {
    return Status::InvalidArgument(fmt::format("unknown sampler kind {}", static_cast<int>(options.sampler)));
  }
  if (options.remover != RemoverKind::kOldestFirst && options.remover != RemoverKind::kLowestPriorityFirst) {
    return Status::InvalidArgument(fmt::format("unknown remover kind {}", static_cast<int>(options.remover)));
  }
  PERSERVE_RETURN_IF_ERROR(schema.Validate());
  // The sampler and remover selectors, on the host (the tree below is
  // today's prioritized sampler, wherever it lives).
  std::unique_ptr<table::Selector> sampler;
  if (options.sampler != table::SelectorKind::kPrioritized) {
    PERSERVE_RETURN_IF_ERROR(table::Selector::Create(
        options.sampler, table::SelectorOptions{options.capacity, options.alpha, tree::Device::kCpu}, &sampler));
  }
  std::unique_ptr<table::HeapSelector> remover;
  if (options.remover == RemoverKind::kLowestPriorityFirst) {
    remover = std::make_unique<table::HeapSelector>(table::SelectorKind::kMinHeap, options.capacity,
                                                    table::HeapSelector::Ties::kInsertedFirst);
  }
  std::unique_ptr<tree::PriorityTree> tree;
  PERSERVE_RETURN_IF_ERROR(tree::PriorityTree::Create(options.capacity, options.device, &tree));
  tree->PrepareAuto();  // before any request can wait for it
  replay->reset(new Replay(options, std::move(schema), std::move(tree)));
  Replay& made = **replay;
  made.has_selectors_ = sampler != nullptr || remover != nullptr || options.max_times_sampled > 0;
  made.draws_through_selector_ = sampler != nullptr || options.max_times_sampled > 0;
  made.sampler_ = std::move(sampler);
  made.remover_ = std::move(remover);
  if (made.has_selectors_) made.priorities_.assign(static_cast<size_t>(options.capacity), 0.0);
  if (options.max_times_sampled > 0) made.times_sampled_.assign(static_cast<size_t>(options.capacity), 0);
  return Status::Ok();
}

Replay::Replay(const ReplayOptions& options, Schema schema, std::unique_ptr<tree::PriorityTree> tree)
    : options_(options),
      store_(std::move(schema), options.capacity, options.prefault_store),
      tree_(std::move(tree)),
      slot_key_(static_cast<size_t>(options.capacity), kNoKey),
      index_(options.capacity, &slot_key_, kNoKey) {}

bool Replay::IsBadPriority(double p) const {
  const double shifted = p + options_.priority_eps;
  if (!(p >= 0.0) || !std::isfinite(shifted)) return true;
  // A zero with eps 0: refused when strict; under drop_bad_priorities it is
  // the learner's "lowest priority" and gets the smallest leaf (the tree's
  // clamp), since dropping it would leave the item at its old, often maximal,
  // priority: the opposite of what the learner meant.
  return shifted == 0.0 && !options_.drop_bad_priorities;
}

Status Replay::BadPriority(double p, size_t position) const {
  if (options_.priority_eps == 0.0) {
    return Status::InvalidArgument(fmt::format("priority {} at position {} must be finite and > 0", p, position));
  }
  return Status::InvalidArgument(fmt::format("priority {} at position {} must be finite and >= 0 (priority eps {} "
                                             "is added to it)",
                                             p, position, options_.priority_eps));
}

uint64_t Replay::oldest_key() const { return order_.empty() ? next_key_ : order_.front(); }

void Replay::Unlink(uint64_t key, int64_t slot) {
  if (has_selectors_) DeleteFromSelectors(slot);
  index_.Erase(key);
  slot_key_[static_cast<size_t>(slot)] = kNoKey;
  free_.push_back(slot);
  --size_;
  ++removed_in_order_;
}

int64_t Replay::TakeSlot() {
  if (free_.empty()) return fresh_++;
  const int64_t slot = free_.back();
  free_.pop_back();
  return slot;
}

void Replay::DropRemovedFromOrder() {
  while (!order_.empty() && SlotOf(order_.front()) < 0) {
    order_.pop_front();
    --removed_in_order_;
  }
  // Removals from the middle (evicted steps) pile up behind held keys: once
  // they outnumber the held ones, the order is rebuilt without them. O(1)
  // amortized per removal.
  if (removed_in_order_ > std::max<int64_t>(size_, 1024)) {
    std::erase_if(order_, [this](uint64_t key) { return SlotOf(key) < 0; });
    removed_in_order_ = 0;
  }
}

Status Replay::CheckAddCount(int64_t count) const {
  if (count >= 1 && count <= options_.capacity) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("an add of {} items: the count must be in [1, capacity {}]", count, options_.capacity));
}

Status Replay::CheckAdd(int64_t count, std::span<const double> priorities) const {
  PERSERVE_RETURN_IF_ERROR(CheckAddCount(count));
  if (!priorities.empty() && static_cast<int64_t>(priorities.size()) != count) {
    return Status::InvalidArgument(fmt::format("{} priorities for {} items", priorities.size(), count));
  }
  double largest = max_priority_;  // what a priority-less add gives every item
  if (!priorities.empty()) {
    largest = 0.0;
    for (size_t j = 0; j < priorities.size(); ++j) {
      if (IsBadPriority(priorities[j])) return BadPriority(priorities[j], j);
      largest = std::max(largest, priorities[j] + options_.priority_eps);
    }
  }
  // The tree's own checks, before it is asked: no power that overflows (on
  // the largest value first, one check where every priority passes), and a
  // total that stays bounded (fast path: this bound; only near the limit
  // does it need every slot).
  const auto overflows = [this](double shifted) {
    const int64_t no_slot = 0;
    return !tree::ValidateExponentBatch(std::span<const int64_t>(&no_slot, 1), std::span<const double>(&shifted, 1),
                                        options_.alpha, options_.capacity)
                .ok();
  };
  if (overflows(largest)) {
    for (size_t j = 0; j < priorities.size(); ++j) {
      if (overflows(priorities[j] + options_.priority_eps)) {
        return Status::InvalidArgument(fmt::format("priority {} at position {} overflows p^alpha (alpha {})",
                                                   priorities[j], j, options_.alpha));
      }
    }
    return Status::InvalidArgument(
        fmt::format("the max priority {} overflows p^alpha (alpha {})", largest, options_.alpha));
  }
  const double bound = tree_->Total() + static_cast<double>(count) * std::pow(largest, options_.alpha);
  if (bound <= tree::kMaxTreeTotal * 0.5) return Status::Ok();
  std::vector<int64_t> slots;
  PlanSlots({}, count, &slots);
  std::vector<double> shifted(static_cast<size_t>(count), largest);
  for (int64_t j = 0; j < count && !priorities.empty(); ++j) shifted[j] = priorities[j] + options_.priority_eps;
  return tree::ValidateTotalStaysBounded(*tree_, slots, shifted, options_.alpha);
}

void Replay::PlanSlots(std::span<const uint64_t> removed, int64_t count, std::vector<int64_t>* slots,
                       std::vector<int64_t>* pushed_out) const {
  // As Add takes them: the removed items' slots are freed (in order), then
  // the held ones the remover takes (the oldest, or the lowest priority);
  // slots are taken from the last freed back, then from the earlier free
  // list, then fresh.
  plan_free_.clear();
  for (const uint64_t key : removed) {
    const int64_t slot = SlotOf(key);
    if (slot >= 0) plan_free_.push_back(slot);
  }
  const size_t removed_slots = plan_free_.size();
  int64_t over = size_ - static_cast<int64_t>(removed_slots) + count - options_.capacity;
  if (over > 0) {
    plan_sorted_.assign(plan_free_.begin(), plan_free_.end());
    std::sort(plan_sorted_.begin(), plan_sorted_.end());
    if (remover_ != nullptr) {
      std::vector<int64_t> lowest;
      PlanLowestPriority(over, plan_sorted_, &lowest);
      plan_free_.insert(plan_free_.end(), lowest.begin(), lowest.end());
      over = 0;
    }
    for (auto it = order_.begin(); over > 0 && it != order_.end(); ++it) {
      const int64_t slot = SlotOf(*it);
      if (slot < 0 || std::binary_search(plan_sorted_.begin(), plan_sorted_.end(), slot)) continue;
      plan_free_.push_back(slot);
      --over;
    }
  }
  if (pushed_out != nullptr) {
    pushed_out->assign(plan_free_.begin() + static_cast<std::ptrdiff_t>(removed_slots), plan_free_.end());
  }
  slots->clear();
  size_t from_plan = plan_free_.size(), from_free = free_.size();
  int64_t fresh = fresh_;
  for (int64_t j = 0; j < count; ++j) {
    if (from_plan > 0) {
      slots->push_back(plan_free_[--from_plan]);
    } else if (from_free > 0) {
      slots->push_back(free_[--from_free]);
    } else {
      slots->push_back(fresh++);
    }
  }
}

Status Replay::Add(int64_t count, std::span<const std::byte> rows, std::span<const double> priorities,
                   uint64_t* first_key, std::span<const uint64_t> removed) {
  PERSERVE_RETURN_IF_ERROR(CheckAdd(count, priorities));
  PERSERVE_RETURN_IF_ERROR(store_.CheckBatch(count, rows));
  // What goes to the tree: each priority plus eps, or the running max (which
  // already includes eps) for a priority-less add.
  shifted_.resize(static_cast<size_t>(count));
  if (priorities.empty()) {
    std::fill(shifted_.begin(), shifted_.end(), max_priority_);
  } else {
    for (size_t j = 0; j < priorities.size(); ++j) shifted_[j] = priorities[j] + options_.priority_eps;
  }
  // Out go the removed items, then the oldest while too many would be held;
  // in come the new ones, into the slots freed last first.
  zeroed_.clear();
  for (const uint64_t key : removed) {
    const int64_t slot = SlotOf(key);
    if (slot < 0) continue;
    Unlink(key, slot);
    zeroed_.push_back(slot);
  }
  while (remover_ != nullptr && size_ + count > options_.capacity) {  // the lowest priority first
    const double any_fraction = 0.0;
    int64_t slot = 0;
    double probability = 0.0;
    PERSERVE_RETURN_IF_ERROR(remover_->Select(std::span(&any_fraction, 1), std::span(&slot, 1),
                                              std::span(&probability, 1)));
    Unlink(KeyAt(slot), slot);
    zeroed_.push_back(slot);
  }
  while (size_ + count > options_.capacity) {  // the oldest first
    DropRemovedFromOrder();
    const uint64_t key = order_.front();
    const int64_t slot = SlotOf(key);
    Unlink(key, slot);
    zeroed_.push_back(slot);
  }
  slots_.resize(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) slots_[j] = TakeSlot();
  // Only the freed slots no new item took need a 0: the new items took the
  // last freed first, so those are zeroed_'s first ones.
  zeroed_.resize(zeroed_.size() - std::min(zeroed_.size(), static_cast<size_t>(count)));
  if (!zeroed_.empty()) {
    leaves_.assign(zeroed_.size(), 0.0);
    PERSERVE_RETURN_IF_ERROR(tree_->Update(zeroed_, leaves_));
  }
  // The tree computes the leaves (p + eps)^alpha (on the device where it
  // lives); CheckAdd made sure the powers and the total fit.
  PERSERVE_RETURN_IF_ERROR(tree_->UpdateWithExponent(slots_, shifted_, options_.alpha));
  if (has_selectors_) PERSERVE_RETURN_IF_ERROR(InsertIntoSelectors(slots_, shifted_));
  store_.Scatter(slots_, rows);
  *first_key = next_key_;
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t key = next_key_++;
    slot_key_[static_cast<size_t>(slots_[j])] = key;
    index_.Insert(key, slots_[j]);
    order_.push_back(key);
  }
  size_ += count;
  DropRemovedFromOrder();
  if (options_.max_priority_from_adds) {
    max_priority_ = std::max(max_priority_, *std::max_element(shifted_.begin(), shifted_.end()));
  }
  counters_.items_added += count;
  return Status::Ok();
}

Status Replay::Sample(int64_t batch_size, double beta, SampleResult* result) {
  if (batch_size < 1) return Status::InvalidArgument(fmt::format("batch size {} must be >= 1", batch_size));
  if (!std::isfinite(beta) || !(beta >= 0.0)) {
    return Status::InvalidArgument(fmt::format("beta {} must be finite and >= 0", beta));
  }
  if (size_ == 0) return Status::FailedPrecondition("the replay is empty");
  result->removed_slots.clear();
  if (draws_through_selector_) return SampleThroughSelector(batch_size, beta, result);
  const double total = tree_->Total();
  result->slots.resize(static_cast<size_t>(batch_size));
  leaves_.resize(static_cast<size_t>(batch_size));
  // Stratified draws, their leaves and the leaf values in one tree call; each
  // call draws fresh masses from the seed and its own counter value. The draws
  // come in ascending mass order (nearly ring order): shuffle them, so that a
  // learner splitting the batch gets unbiased parts.
  const uint64_t counter = samples_drawn_++;
  PERSERVE_RETURN_IF_ERROR(tree_->Sample(options_.seed, counter, result->slots, leaves_));
  PrefetchKeys(result->slots);
  Shuffle(options_.seed, counter, result->slots, leaves_);

  // perserve/importance_weight.h: (leaf_i / min_leaf)^-beta, N and T
  // cancelled, so w_i <= 1 exactly and an item holding the minimum gets 1.
  const double min_leaf = tree_->Min();
  result->leaves.assign(leaves_.begin(), leaves_.end());
  result->keys.resize(static_cast<size_t>(batch_size));
  result->weights.resize(static_cast<size_t>(batch_size));
  result->probabilities.resize(static_cast<size_t>(batch_size));
  for (int64_t i = 0; i < batch_size; ++i) {
    result->keys[i] = KeyAt(result->slots[i]);
    result->probabilities[i] = leaves_[i] / total;
    result->weights[i] = ImportanceWeight(leaves_[i], min_leaf, beta);
  }
  counters_.items_sampled += batch_size;
  return Status::Ok();
}

ReplayState Replay::State() const {
  return ReplayState{next_key_, max_priority_, options_.seed, samples_drawn_, counters_};
}

Status Replay::RestoreItems(std::span<const uint64_t> keys, std::span<const int64_t> slots,
                            std::span<const std::byte> rows, std::span<const double> leaves) {
  const int64_t count = static_cast<int64_t>(keys.size());
  if (count == 0) return Status::Ok();
  if (slots.size() != keys.size() || leaves.size() != keys.size()) {
    return Status::InvalidArgument(fmt::format("{} keys, {} slots and {} leaves", keys.size(), slots.size(),
                                               leaves.size()));
  }
  PERSERVE_RETURN_IF_ERROR(store_.CheckBatch(count, rows));
  for (int64_t j = 0; j < count; ++j) {
    const int64_t slot = slots[j];
    if (slot < 0 || slot >= options_.capacity) {
      return Status::InvalidArgument(fmt::format("key {}: slot {} is outside [0, capacity {})", keys[j], slot,
                                                 options_.capacity));
    }
    // Each leaf a held item can have: finite, at least the smallest normal
    // double (a priority's leaf is clamped up to it: tree/tree_algorithm.h).
    if (!std::isfinite(leaves[j]) || !(leaves[j] >= std::numeric_limits<double>::min())) {
      return Status::InvalidArgument(fmt::format("key {}: a leaf of {} is no held item's", keys[j], leaves[j]));
    }
    if (keys[j] == kNoKey || SlotOf(keys[j]) >= 0) {
      return Status::InvalidArgument(fmt::format("key {} is held twice", keys[j]));
    }
    if (slot_key_[static_cast<size_t>(slot)] != kNoKey) {
      return Status::InvalidArgument(fmt::format("keys {} and {} both in slot {}",
                                                 slot_key_[static_cast<size_t>(slot)], keys[j], slot));
    }
    // Claimed now, so a repeat later in this call is caught as well.
    slot_key_[static_cast<size_t>(slot)] = keys[j];
    index_.Insert(keys[j], slot);
  }
  const Status updated = tree_->Update(slots, leaves);
  if (!updated.ok()) return updated;
  store_.Scatter(slots, rows);
  for (int64_t j = 0; j < count; ++j) fresh_ = std::max(fresh_, slots[j] + 1);
  size_ += count;
  return Status::Ok();
}

Status Replay::RestoreState(const ReplayState& state) {
  if (!(state.max_priority > 0.0) || !std::isfinite(state.max_priority)) {
    return Status::InvalidArgument(fmt::format("a max priority of {}", state.max_priority));
  }
  // The held keys in order, and the slots never restored free (the lowest taken first).
  order_.clear();
  free_.clear();
  for (int64_t slot = fresh_ - 1; slot >= 0; --slot) {
    const uint64_t key = slot_key_[static_cast<size_t>(slot)];
    if (key == kNoKey) {
      free_.push_back(slot);
      continue;
    }
    if (key >= state.next_key) {
      return Status::InvalidArgument(fmt::format("key {} is held, but the next key is {}", key, state.next_key));
    }
    order_.push_back(key);
  }
  std::sort(order_.begin(), order_.end());
  removed_in_order_ = 0;
  next_key_ = state.next_key;
  max_priority_ = state.max_priority;
  options_.seed = state.seed;
  samples_drawn_ = state.samples_drawn;
  counters_ = state.counters;
  return Status::Ok();
}

Status Replay::RestoreFreeSlots(int64_t slots_used, std::span<const int64_t> free_slots) {
  if (slots_used < fresh_ || slots_used > options_.capacity ||
      static_cast<int64_t>(free_slots.size()) != slots_used - size_) {
    return Status::InvalidArgument(fmt::format("{} slots used, {} of them free, with {} items held in slots below {}: "
                                               "not a table's",
                                               slots_used, free_slots.size(), size_, fresh_));
  }
  std::vector<uint8_t> listed(static_cast<size_t>(slots_used), 0);
  for (const int64_t slot : free_slots) {
    if (slot < 0 || slot >= slots_used || listed[static_cast<size_t>(slot)] != 0 ||
        slot_key_[static_cast<size_t>(slot)] != kNoKey) {
      return Status::InvalidArgument(fmt::format("free slot {}: outside [0, {}), listed twice, or holding an item",
                                                 slot, slots_used));
    }
    listed[static_cast<size_t>(slot)] = 1;
  }
  free_.assign(free_slots.begin(), free_slots.end());
  fresh_ = slots_used;
  return Status::Ok();
}

Status CheckFractions(std::span<const double> fractions) {
  for (size_t i = 0; i < fractions.size(); ++i) {
    if (!(fractions[i] >= 0.0 && fractions[i] < 1.0)) {
      return Status::InvalidArgument(
          fmt::format("fraction {} at position {} must be in [0, 1)", fractions[i], i));
    }
  }
  return Status::Ok();
}

Status Replay::SampleAt(std::span<const double> fractions, SampleResult* result) {
  PERSERVE_RETURN_IF_ERROR(CheckFractions(fractions));
  if (sampler_ != nullptr || options_.max_times_sampled > 0) {
    return Status::FailedPrecondition(fmt::format(
        "a shard's draw at given fractions needs a prioritized table without max times sampled; this one's "
        "sampler is {}, max times sampled {}",
        table::SelectorKindName(options_.sampler), options_.max_times_sampled));
  }
  if (size_ == 0 && !fractions.empty()) return Status::FailedPrecondition("the replay is empty");
  const double total = tree_->Total();
  const size_t count = fractions.size();
  leaves_.resize(count);
  for (size_t i = 0; i < count; ++i) leaves_[i] = fractions[i] * total;  // the masses, then the leaves
  result->slots.resize(count);
  PERSERVE_RETURN_IF_ERROR(tree_->FindPrefixSum(leaves_, result->slots));
  PrefetchKeys(result->slots);
  result->leaves.resize(count);
  PERSERVE_RETURN_IF_ERROR(tree_->Get(result->slots, result->leaves));
  result->keys.resize(count);
  result->probabilities.resize(count);
  result->weights.clear();
  for (size_t i = 0; i < count; ++i) {
    result->keys[i] = KeyAt(result->slots[i]);
    result->probabilities[i] = result->leaves[i] / total;
  }
  counters_.items_sampled += static_cast<int64_t>(count);
  return Status::Ok();
}

Status Replay::Remove(std::span<const uint64_t> keys) {
  slots_.clear();
  for (const uint64_t key : keys) {
    const int64_t slot = SlotOf(key);
    if (slot >= 0) slots_.push_back(slot);  // a repeat twice: the same 0
  }
  if (slots_.empty()) return Status::Ok();
  leaves_.assign(slots_.size(), 0.0);
  PERSERVE_RETURN_IF_ERROR(tree_->Update(slots_, leaves_));
  for (const uint64_t key : keys) {
    const int64_t slot = SlotOf(key);
    if (slot >= 0) Unlink(key, slot);
  }
  DropRemovedFromOrder();
  return Status::Ok();
}

Status Replay::UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities,
                                UpdateCounts* counts) {
  if (keys.size() != priorities.size()) {
    return Status::InvalidArgument(fmt::format("{} keys but {} priorities", keys.size(), priorities.size()));
  }
  if (options_.sampler == table::SelectorKind::kUniform || options_.sampler == table::SelectorKind::kFifo ||
      options_.sampler == table::SelectorKind::kLifo) {
    return Status::FailedPrecondition(fmt::format("a table whose sampler is {} takes no priority updates",
                                                  table::SelectorKindName(options_.sampler)));
  }
  for (size_t j = 0; j < keys.size(); ++j) {
    if (keys[j] >= next_key_) {
      return Status::NotFound(fmt::format("key {} at position {} was never issued (next key is {})", keys[j], j,
                                          next_key_));
    }
  }
  if (!options_.drop_bad_priorities) {
    for (size_t j = 0; j < priorities.size(); ++j) {
      if (IsBadPriority(priorities[j])) return BadPriority(priorities[j], j);
    }
  }
  UpdateCounts result;
  found_.resize(keys.size());
  index_.FindMany(keys, found_);
  slots_.clear();
  shifted_.clear();
  double largest = 0.0;
  for (size_t j = 0; j < keys.size(); ++j) {
    if (IsBadPriority(priorities[j])) {  // only under drop_bad_priorities
      ++result.dropped;
      continue;
    }
    const int64_t slot = found_[j];
    if (slot < 0) {  // no longer held
      ++result.stale;
      continue;
    }
    const double shifted = priorities[j] + options_.priority_eps;
    slots_.push_back(slot);
    shifted_.push_back(shifted);
    largest = std::max(largest, shifted);
  }
  PERSERVE_RETURN_IF_ERROR(tree_->UpdateWithExponent(slots_, shifted_, options_.alpha));
  if (has_selectors_) {
    // Checked above: held slots, valid priorities. Repeats: the last wins, as in the tree.
    for (size_t j = 0; j < slots_.size(); ++j) priorities_[static_cast<size_t>(slots_[j])] = shifted_[j];
    if (sampler_ != nullptr) PERSERVE_RETURN_IF_ERROR(sampler_->Update(slots_, shifted_));
    if (remover_ != nullptr) PERSERVE_RETURN_IF_ERROR(remover_->Update(slots_, shifted_));
  }
  max_priority_ = std::max(max_priority_, largest);
  result.applied = static_cast<int64_t>(slots_.size());
  counters_.priorities_updated += result.applied;
  counters_.stale_updates_dropped += result.stale;
  counters_.priorities_dropped += result.dropped;
  *counts = result;
  return Status::Ok();
}

}  // namespace perserve::replay
