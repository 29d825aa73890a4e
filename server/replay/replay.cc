#include "replay/replay.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace perserve::replay {

Status Replay::Create(const ReplayOptions& options, Schema schema, std::unique_ptr<Replay>* replay) {
  if (!(options.alpha >= 0.0) || !std::isfinite(options.alpha)) {
    return Status::InvalidArgument(fmt::format("alpha {} must be finite and >= 0", options.alpha));
  }
  if (options.capacity < 1 || options.capacity > tree::PriorityTree::kMaxCapacity) {
    return Status::InvalidArgument(fmt::format("capacity {} is outside [1, 2^40]", options.capacity));
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
      tree_(std::move(tree)) {}

Status Replay::CheckPriorities(std::span<const double> priorities) {
  for (size_t j = 0; j < priorities.size(); ++j) {
    const double p = priorities[j];
    if (!std::isfinite(p) || !(p > 0.0)) {
      return Status::InvalidArgument(fmt::format("priority {} at position {} is not finite and > 0", p, j));
    }
  }
  return Status::Ok();
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
  if (!priorities.empty() && static_cast<int64_t>(priorities.size()) != count) {
    return Status::InvalidArgument(fmt::format("{} priorities for {} items", priorities.size(), count));
  }
  std::vector<double> defaulted;
  if (priorities.empty()) {
    defaulted.assign(static_cast<size_t>(count), max_priority_);
    priorities = defaulted;
  }
  PERSERVE_RETURN_IF_ERROR(CheckPriorities(priorities));

  const int64_t first_slot = static_cast<int64_t>(next_key_ % static_cast<uint64_t>(options_.capacity));
  slots_.resize(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) slots_[j] = (first_slot + j) % options_.capacity;
  // The tree computes the leaves p^alpha (on the device where it lives), and
  // fails without a change on a priority whose power overflows.
  PERSERVE_RETURN_IF_ERROR(tree_->UpdateWithExponent(slots_, priorities, options_.alpha));
  store_.Write(first_slot, count, columns);
  *first_key = next_key_;
  next_key_ += static_cast<uint64_t>(count);
  max_priority_ = std::max(max_priority_, *std::max_element(priorities.begin(), priorities.end()));
  counters_.items_added += count;
  return Status::Ok();
}

Status Replay::Sample(int64_t batch_size, double beta, SampleResult* result) {
  if (batch_size < 1) return Status::InvalidArgument(fmt::format("batch size {} must be >= 1", batch_size));
  if (!std::isfinite(beta) || !(beta >= 0.0)) {
    return Status::InvalidArgument(fmt::format("beta {} must be finite and >= 0", beta));
  }
  if (size() == 0) return Status::FailedPrecondition("the replay is empty");
  const double total = tree_->Total();
  result->slots.resize(static_cast<size_t>(batch_size));
  leaves_.resize(static_cast<size_t>(batch_size));
  // Stratified draws, their leaves and the leaf values in one tree call; each
  // call draws fresh masses from the seed and its own counter value.
  PERSERVE_RETURN_IF_ERROR(tree_->Sample(options_.seed, samples_drawn_++, result->slots, leaves_));

  const double n = static_cast<double>(size());
  const double max_weight = std::pow(n * tree_->Min() / total, -beta);
  result->keys.resize(static_cast<size_t>(batch_size));
  result->weights.resize(static_cast<size_t>(batch_size));
  result->probabilities.resize(static_cast<size_t>(batch_size));
  for (int64_t i = 0; i < batch_size; ++i) {
    const double probability = leaves_[i] / total;
    result->keys[i] = KeyAtSlot(result->slots[i]);
    result->probabilities[i] = probability;
    result->weights[i] = std::pow(n * probability, -beta) / max_weight;
  }
  counters_.items_sampled += batch_size;
  return Status::Ok();
}

Status Replay::UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities,
                                int64_t* applied, int64_t* stale) {
  if (keys.size() != priorities.size()) {
    return Status::InvalidArgument(fmt::format("{} keys but {} priorities", keys.size(), priorities.size()));
  }
  for (size_t j = 0; j < keys.size(); ++j) {
    if (keys[j] >= next_key_) {
      return Status::NotFound(fmt::format("key {} at position {} was never issued (next key is {})", keys[j], j,
                                          next_key_));
    }
  }
  PERSERVE_RETURN_IF_ERROR(CheckPriorities(priorities));
  // Keys older than the newest `capacity` have been overwritten: drop them.
  const uint64_t oldest_live = next_key_ > static_cast<uint64_t>(options_.capacity)
                                   ? next_key_ - static_cast<uint64_t>(options_.capacity)
                                   : 0;
  slots_.clear();
  live_priorities_.clear();
  double largest = 0.0;
  for (size_t j = 0; j < keys.size(); ++j) {
    if (keys[j] < oldest_live) continue;
    slots_.push_back(static_cast<int64_t>(keys[j] % static_cast<uint64_t>(options_.capacity)));
    live_priorities_.push_back(priorities[j]);
    largest = std::max(largest, priorities[j]);
  }
  const size_t kept = slots_.size();
  PERSERVE_RETURN_IF_ERROR(tree_->UpdateWithExponent(slots_, live_priorities_, options_.alpha));
  max_priority_ = std::max(max_priority_, largest);
  *applied = static_cast<int64_t>(kept);
  *stale = static_cast<int64_t>(keys.size() - kept);
  counters_.priorities_updated += *applied;
  counters_.stale_updates_dropped += *stale;
  return Status::Ok();
}

}  // namespace perserve::replay
