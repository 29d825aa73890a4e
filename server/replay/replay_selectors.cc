// Replay's selectors side: a sampler other than prioritized, the
// lowest-priority remover, max_times_sampled, and their checkpoint state.
// None of it runs for the default options (has_selectors_ false).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "perserve/importance_weight.h"
#include "replay/batch_shuffle.h"
#include "replay/replay.h"

namespace perserve::replay {

Status Replay::InsertIntoSelectors(std::span<const int64_t> slots, std::span<const double> priorities) {
  for (size_t j = 0; j < slots.size(); ++j) priorities_[static_cast<size_t>(slots[j])] = priorities[j];
  if (options_.max_times_sampled > 0) {
    for (const int64_t slot : slots) times_sampled_[static_cast<size_t>(slot)] = 0;
    draws_left_ += options_.max_times_sampled * static_cast<int64_t>(slots.size());
  }
  if (sampler_ != nullptr) PERSERVE_RETURN_IF_ERROR(sampler_->Insert(slots, priorities));
  if (remover_ != nullptr) PERSERVE_RETURN_IF_ERROR(remover_->Insert(slots, priorities));
  return Status::Ok();
}

void Replay::DeleteFromSelectors(int64_t slot) {
  // A held slot, once: the selectors' checks pass, so their Deletes cannot fail.
  const std::span<const int64_t> one(&slot, 1);
  if (sampler_ != nullptr) (void)sampler_->Delete(one);
  if (remover_ != nullptr) (void)remover_->Delete(one);
  if (options_.max_times_sampled > 0) {
    draws_left_ -= options_.max_times_sampled - times_sampled_[static_cast<size_t>(slot)];
  }
}

void Replay::PlanLowestPriority(int64_t count, std::span<const int64_t> skipped, std::vector<int64_t>* slots) const {
  std::vector<int64_t> first;
  remover_->ListFirst(count + static_cast<int64_t>(skipped.size()), &first);
  slots->clear();
  for (const int64_t slot : first) {
    if (static_cast<int64_t>(slots->size()) == count) break;
    if (!std::binary_search(skipped.begin(), skipped.end(), slot)) slots->push_back(slot);
  }
}

double Replay::DrawFraction(uint64_t counter, int64_t draw, int64_t batch_size) const {
  const double u = UniformFraction(options_.seed, counter, static_cast<uint64_t>(draw));
  if (sampler_ != nullptr) return u;  // uniform: independent draws; the others ignore it
  // Prioritized: the draw's stratum of [0, 1), kept below 1 where the sum rounds up.
  const double stratified = (static_cast<double>(draw) + u) / static_cast<double>(batch_size);
  return std::min(stratified, std::nextafter(1.0, 0.0));
}

Status Replay::SampleThroughSelector(int64_t batch_size, double beta, SampleResult* result) {
  const int64_t limit = options_.max_times_sampled;
  if (limit > 0 && batch_size > draws_left_) {
    return Status::FailedPrecondition(
        fmt::format("a batch of {} needs {} draws, but the {} items held have {} left (each is drawn at most {} times)",
                    batch_size, batch_size, size_, draws_left_, limit));
  }
  const uint64_t counter = samples_drawn_++;
  const size_t count = static_cast<size_t>(batch_size);
  result->keys.resize(count);
  result->slots.resize(count);
  result->leaves.resize(count);
  result->probabilities.resize(count);
  result->weights.assign(count, 1.0);
  leaves_.resize(count);  // the draws' fractions
  for (size_t i = 0; i < count; ++i) leaves_[i] = DrawFraction(counter, static_cast<int64_t>(i), batch_size);

  if (limit == 0) {  // a non-prioritized sampler, nothing leaves: one call for the batch
    PERSERVE_RETURN_IF_ERROR(sampler_->Select(leaves_, result->slots, result->probabilities));
    PERSERVE_RETURN_IF_ERROR(tree_->Get(result->slots, result->leaves));
    for (size_t i = 0; i < count; ++i) result->keys[i] = KeyAt(result->slots[i]);
    counters_.items_sampled += batch_size;
    return Status::Ok();
  }

  // One draw at a time: an item drawn its last time leaves before the next.
  const double min_leaf = tree_->Min();  // every drawn item was held now: each weight <= 1
  for (size_t i = 0; i < count; ++i) {
    int64_t& slot = result->slots[i];
    double& leaf = result->leaves[i];
    if (sampler_ == nullptr) {
      const double total = tree_->Total();
      double mass = leaves_[i] * total;
      PERSERVE_RETURN_IF_ERROR(tree_->FindPrefixSum(std::span(&mass, 1), std::span(&slot, 1)));
      PERSERVE_RETURN_IF_ERROR(tree_->Get(std::span(&slot, 1), std::span(&leaf, 1)));
      result->probabilities[i] = leaf / total;
      result->weights[i] = ImportanceWeight(leaf, min_leaf, beta);
    } else {
      PERSERVE_RETURN_IF_ERROR(sampler_->Select(std::span(&leaves_[i], 1), std::span(&slot, 1),
                                                std::span(&result->probabilities[i], 1)));
      PERSERVE_RETURN_IF_ERROR(tree_->Get(std::span(&slot, 1), std::span(&leaf, 1)));
    }
    const uint64_t key = KeyAt(slot);
    result->keys[i] = key;
    --draws_left_;
    if (++times_sampled_[static_cast<size_t>(slot)] == limit) {
      const double zero = 0.0;
      PERSERVE_RETURN_IF_ERROR(tree_->Update(std::span(&slot, 1), std::span(&zero, 1)));
      Unlink(key, slot);
      result->removed_slots.push_back(slot);
    }
  }
  DropRemovedFromOrder();
  if (sampler_ == nullptr) {  // stratified, so in mass order: shuffled as the default batch is
    ShuffleWith(options_.seed, counter, count, [result](size_t a, size_t b) {
      std::swap(result->keys[a], result->keys[b]);
      std::swap(result->slots[a], result->slots[b]);
      std::swap(result->leaves[a], result->leaves[b]);
      std::swap(result->probabilities[a], result->probabilities[b]);
      std::swap(result->weights[a], result->weights[b]);
    });
  }
  counters_.items_sampled += batch_size;
  return Status::Ok();
}

SelectorState Replay::Selectors() const {
  SelectorState state;
  if (!has_selectors_) return state;
  for (const uint64_t key : order_) {  // ascending; keys removed from the middle are skipped
    const int64_t slot = SlotOf(key);
    if (slot < 0) continue;
    state.keys.push_back(key);
    state.priorities.push_back(priorities_[static_cast<size_t>(slot)]);
    if (options_.max_times_sampled > 0) state.times_sampled.push_back(times_sampled_[static_cast<size_t>(slot)]);
  }
  std::vector<int64_t> slots;
  if (sampler_ != nullptr) {
    sampler_->ListHeld(&slots);
    for (const int64_t slot : slots) state.sampler_order.push_back(KeyAt(slot));
  }
  if (remover_ != nullptr) {
    remover_->ListHeld(&slots);
    for (const int64_t slot : slots) state.remover_order.push_back(KeyAt(slot));
  }
  return state;
}

Status Replay::RestoreSelectors(const SelectorState& state) {
  const size_t held = static_cast<size_t>(size_);
  if (!has_selectors_) {
    if (state.keys.empty() && state.sampler_order.empty() && state.remover_order.empty()) return Status::Ok();
    return Status::InvalidArgument("selector state for a replay with the default sampler and remover");
  }
  const size_t times = options_.max_times_sampled > 0 ? held : 0;
  if (state.keys.size() != held || state.priorities.size() != held || state.times_sampled.size() != times ||
      state.sampler_order.size() != (sampler_ != nullptr ? held : 0) ||
      state.remover_order.size() != (remover_ != nullptr ? held : 0)) {
    return Status::InvalidArgument(fmt::format(
        "selector state of {} keys, {} priorities, {} counts, {} and {} ordered keys for {} items held",
        state.keys.size(), state.priorities.size(), state.times_sampled.size(), state.sampler_order.size(),
        state.remover_order.size(), held));
  }
  if ((sampler_ != nullptr && sampler_->size() != 0) || (remover_ != nullptr && remover_->size() != 0)) {
    return Status::InvalidArgument("the selectors are restored once, into a replay just restored");
  }
  draws_left_ = 0;
  for (size_t j = 0; j < held; ++j) {
    const int64_t slot = SlotOf(state.keys[j]);
    if (slot < 0 || (j > 0 && state.keys[j] <= state.keys[j - 1])) {
      return Status::InvalidArgument(
          fmt::format("key {} at position {}: not held, or not ascending", state.keys[j], j));
    }
    if (!std::isfinite(state.priorities[j]) || !(state.priorities[j] >= 0.0)) {
      return Status::InvalidArgument(fmt::format("key {}: a priority of {}", state.keys[j], state.priorities[j]));
    }
    priorities_[static_cast<size_t>(slot)] = state.priorities[j];
    if (times > 0) {
      const int64_t sampled = state.times_sampled[j];
      if (sampled < 0 || sampled >= options_.max_times_sampled) {
        return Status::InvalidArgument(fmt::format("key {}: sampled {} times, of at most {}", state.keys[j], sampled,
                                                   options_.max_times_sampled));
      }
      times_sampled_[static_cast<size_t>(slot)] = sampled;
      draws_left_ += options_.max_times_sampled - sampled;
    }
  }
  // Each selector rebuilt by inserting in its order, each item with its priority.
  const auto rebuild = [this](std::span<const uint64_t> order, table::Selector* selector) {
    std::vector<int64_t> slots(order.size());
    std::vector<double> priorities(order.size());
    for (size_t j = 0; j < order.size(); ++j) {
      slots[j] = SlotOf(order[j]);
      if (slots[j] < 0) {
        return Status::InvalidArgument(fmt::format("key {} at position {} of an order is not held", order[j], j));
      }
      priorities[j] = priorities_[static_cast<size_t>(slots[j])];
    }
    return selector->Insert(slots, priorities);  // refuses a key listed twice
  };
  if (sampler_ != nullptr) PERSERVE_RETURN_IF_ERROR(rebuild(state.sampler_order, sampler_.get()));
  if (remover_ != nullptr) PERSERVE_RETURN_IF_ERROR(rebuild(state.remover_order, remover_.get()));
  return Status::Ok();
}

}  // namespace perserve::replay
