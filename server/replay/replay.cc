#include "replay/replay.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "perserve/importance_weight.h"
#include "tree/tree_validation.h"

namespace perserve::replay {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
// Keeps the shuffle's stream apart from the tree's masses, which use the same
// (seed, counter).
constexpr uint64_t kShuffleStream = 0x5f3c2b7a91d4e806ULL;

// SplitMix64's output function: a bijective 64-bit mixer.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Fisher-Yates over slots and their leaf values together, driven by a
// SplitMix64 stream keyed by (seed, counter): the same call always gives the
// same permutation. j is drawn uniformly from [0, i] by a 64x64 -> 128-bit
// multiply (no modulo bias).
void Shuffle(uint64_t seed, uint64_t counter, std::span<int64_t> slots, std::span<double> leaves) {
  uint64_t state = Mix(seed ^ kShuffleStream) + Mix(counter + kGolden);
  for (size_t i = slots.size(); i > 1; --i) {
    state += kGolden;
    const size_t j = static_cast<size_t>((static_cast<unsigned __int128>(Mix(state)) * i) >> 64);
    std::swap(slots[i - 1], slots[j]);
    std::swap(leaves[i - 1], leaves[j]);
  }
}

Status NothingLive(int64_t size) {
  if (size == 0) return Status::FailedPrecondition("the replay is empty");
  return Status::FailedPrecondition(
      fmt::format("the replay is empty: the {} items it holds are all removed (leaf 0)", size));
}

}  // namespace

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
  PERSERVE_RETURN_IF_ERROR(schema.Validate());
  std::unique_ptr<tree::PriorityTree> tree;
  PERSERVE_RETURN_IF_ERROR(tree::PriorityTree::Create(options.capacity, options.device, &tree));
  tree->PrepareAuto();  // before any request can wait for it
  replay->reset(new Replay(options, std::move(schema), std::move(tree)));
  return Status::Ok();
}

Replay::Replay(const ReplayOptions& options, Schema schema, std::unique_ptr<tree::PriorityTree> tree)
    : options_(options),
      store_(std::move(schema), options.capacity, options.prefault_store),
      tree_(std::move(tree)),
      zero_leaf_(static_cast<size_t>(options.capacity), 0) {}

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

uint64_t Replay::KeyAtSlot(int64_t slot) const {
  // The newest key k < next_key with k mod capacity == slot.
  const uint64_t capacity = static_cast<uint64_t>(options_.capacity);
  const uint64_t newest = next_key_ - 1;
  return newest - (newest - static_cast<uint64_t>(slot) + capacity) % capacity;
}

Status Replay::Add(int64_t count, std::span<const std::byte> columns, std::span<const double> priorities,
                   uint64_t* first_key) {
  PERSERVE_RETURN_IF_ERROR(store_.CheckBatch(count, columns));
  return AddInPlace(
      count, priorities,
      [columns](std::span<const std::span<std::byte>> regions) {
        store::TransitionStore::CopyInto(columns, regions);
        return Status::Ok();
      },
      first_key);
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
  std::vector<int64_t> slots(static_cast<size_t>(count));
  std::vector<double> shifted(static_cast<size_t>(count), largest);
  for (int64_t j = 0; j < count; ++j) {
    slots[j] = (next_slot() + j) % options_.capacity;
    if (!priorities.empty()) shifted[j] = priorities[j] + options_.priority_eps;
  }
  return tree::ValidateTotalStaysBounded(*tree_, slots, shifted, options_.alpha);
}

Status Replay::AddInPlace(int64_t count, std::span<const double> priorities, const Fill& fill, uint64_t* first_key) {
  PERSERVE_RETURN_IF_ERROR(CheckAdd(count, priorities));
  // What goes to the tree: each priority plus eps, or the running max (which
  // already includes eps) for a priority-less add.
  shifted_.resize(static_cast<size_t>(count));
  if (priorities.empty()) {
    std::fill(shifted_.begin(), shifted_.end(), max_priority_);
  } else {
    for (size_t j = 0; j < priorities.size(); ++j) shifted_[j] = priorities[j] + options_.priority_eps;
  }

  const int64_t first_slot = next_slot();
  slots_.resize(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) slots_[j] = (first_slot + j) % options_.capacity;
  // The tree computes the leaves (p + eps)^alpha (on the device where it lives), and
  // fails without a change on a priority whose power overflows.
  PERSERVE_RETURN_IF_ERROR(tree_->UpdateWithExponent(slots_, shifted_, options_.alpha));
  for (const int64_t slot : slots_) {  // removed items overwritten now: no longer counted
    zero_leaves_ -= zero_leaf_[slot];
    zero_leaf_[slot] = 0;
  }
  store_.Regions(first_slot, count, &regions_);
  const Status filled = fill(regions_);
  *first_key = next_key_;
  next_key_ += static_cast<uint64_t>(count);
  if (!filled.ok()) {
    shifted_.assign(static_cast<size_t>(count), 0.0);
    (void)tree_->Update(slots_, shifted_);  // half-written rows are never drawn
    for (const int64_t slot : slots_) zero_leaf_[slot] = 1;
    zero_leaves_ += count;
    return filled;
  }
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
  if (live_size() == 0) return NothingLive(size());
  const double total = tree_->Total();
  result->slots.resize(static_cast<size_t>(batch_size));
  leaves_.resize(static_cast<size_t>(batch_size));
  // Stratified draws, their leaves and the leaf values in one tree call; each
  // call draws fresh masses from the seed and its own counter value. The draws
  // come in ascending mass order (nearly ring order): shuffle them, so that a
  // learner splitting the batch gets unbiased parts.
  const uint64_t counter = samples_drawn_++;
  PERSERVE_RETURN_IF_ERROR(tree_->Sample(options_.seed, counter, result->slots, leaves_));
  Shuffle(options_.seed, counter, result->slots, leaves_);

  // perserve/importance_weight.h: (leaf_i / min_leaf)^-beta, N and T
  // cancelled, so w_i <= 1 exactly and an item holding the minimum gets 1.
  const double min_leaf = tree_->Min();
  result->leaves.assign(leaves_.begin(), leaves_.end());
  result->keys.resize(static_cast<size_t>(batch_size));
  result->weights.resize(static_cast<size_t>(batch_size));
  result->probabilities.resize(static_cast<size_t>(batch_size));
  for (int64_t i = 0; i < batch_size; ++i) {
    result->keys[i] = KeyAtSlot(result->slots[i]);
    result->probabilities[i] = leaves_[i] / total;
    result->weights[i] = ImportanceWeight(leaves_[i], min_leaf, beta);
  }
  counters_.items_sampled += batch_size;
  return Status::Ok();
}

ReplayState Replay::State() const {
  return ReplayState{next_key_, max_priority_, options_.seed, samples_drawn_, counters_};
}

Status Replay::RestoreItems(uint64_t first_key, int64_t count, std::span<const std::byte> columns,
                            std::span<const double> leaves) {
  PERSERVE_RETURN_IF_ERROR(store_.CheckBatch(count, columns));
  if (leaves.size() != static_cast<size_t>(count)) {
    return Status::InvalidArgument(fmt::format("{} items but {} leaves", count, leaves.size()));
  }
  const uint64_t capacity = static_cast<uint64_t>(options_.capacity);
  const int64_t first_slot = static_cast<int64_t>(first_key % capacity);
  slots_.resize(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) slots_[j] = (first_slot + j) % options_.capacity;
  PERSERVE_RETURN_IF_ERROR(tree_->Update(slots_, leaves));
  for (int64_t j = 0; j < count; ++j) {
    const uint8_t zero = leaves[j] == 0.0 ? 1 : 0;
    zero_leaves_ += zero - zero_leaf_[slots_[j]];
    zero_leaf_[slots_[j]] = zero;
  }
  store_.Write(first_slot, count, columns);
  return Status::Ok();
}

Status Replay::RestoreState(const ReplayState& state) {
  if (!(state.max_priority > 0.0) || !std::isfinite(state.max_priority)) {
    return Status::InvalidArgument(fmt::format("a max priority of {}", state.max_priority));
  }
  next_key_ = state.next_key;
  max_priority_ = state.max_priority;
  options_.seed = state.seed;
  samples_drawn_ = state.samples_drawn;
  counters_ = state.counters;
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
  if (live_size() == 0 && !fractions.empty()) return NothingLive(size());
  const double total = tree_->Total();
  const size_t count = fractions.size();
  leaves_.resize(count);
  for (size_t i = 0; i < count; ++i) leaves_[i] = fractions[i] * total;  // the masses, then the leaves
  result->slots.resize(count);
  PERSERVE_RETURN_IF_ERROR(tree_->FindPrefixSum(leaves_, result->slots));
  result->leaves.resize(count);
  PERSERVE_RETURN_IF_ERROR(tree_->Get(result->slots, result->leaves));
  result->keys.resize(count);
  result->probabilities.resize(count);
  result->weights.clear();
  for (size_t i = 0; i < count; ++i) {
    result->keys[i] = KeyAtSlot(result->slots[i]);
    result->probabilities[i] = result->leaves[i] / total;
  }
  counters_.items_sampled += static_cast<int64_t>(count);
  return Status::Ok();
}

Status Replay::Remove(std::span<const uint64_t> keys) {
  slots_.clear();
  const uint64_t oldest = oldest_key();
  for (const uint64_t key : keys) {
    if (key < oldest || key >= next_key_) continue;
    const int64_t slot = static_cast<int64_t>(key % static_cast<uint64_t>(options_.capacity));
    if (zero_leaf_[slot] != 0) continue;  // already 0 (or a repeat)
    zero_leaf_[slot] = 1;
    slots_.push_back(slot);
  }
  if (slots_.empty()) return Status::Ok();
  shifted_.assign(slots_.size(), 0.0);
  const Status updated = tree_->Update(slots_, shifted_);
  if (!updated.ok()) {
    for (const int64_t slot : slots_) zero_leaf_[slot] = 0;
    return updated;
  }
  zero_leaves_ += static_cast<int64_t>(slots_.size());
  return Status::Ok();
}

Status Replay::UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities,
                                UpdateCounts* counts) {
  if (keys.size() != priorities.size()) {
    return Status::InvalidArgument(fmt::format("{} keys but {} priorities", keys.size(), priorities.size()));
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
  // Keys older than the newest `capacity` have been overwritten: drop them.
  const uint64_t oldest_live = next_key_ > static_cast<uint64_t>(options_.capacity)
                                   ? next_key_ - static_cast<uint64_t>(options_.capacity)
                                   : 0;
  UpdateCounts result;
  slots_.clear();
  shifted_.clear();
  double largest = 0.0;
  for (size_t j = 0; j < keys.size(); ++j) {
    if (IsBadPriority(priorities[j])) {  // only under drop_bad_priorities
      ++result.dropped;
      continue;
    }
    const int64_t slot = static_cast<int64_t>(keys[j] % static_cast<uint64_t>(options_.capacity));
    if (keys[j] < oldest_live || zero_leaf_[slot] != 0) {  // overwritten, or removed: applying would revive it
      ++result.stale;
      continue;
    }
    const double shifted = priorities[j] + options_.priority_eps;
    slots_.push_back(slot);
    shifted_.push_back(shifted);
    largest = std::max(largest, shifted);
  }
  PERSERVE_RETURN_IF_ERROR(tree_->UpdateWithExponent(slots_, shifted_, options_.alpha));
  max_priority_ = std::max(max_priority_, largest);
  result.applied = static_cast<int64_t>(slots_.size());
  counters_.priorities_updated += result.applied;
  counters_.stale_updates_dropped += result.stale;
  counters_.priorities_dropped += result.dropped;
  *counts = result;
  return Status::Ok();
}

}  // namespace perserve::replay
