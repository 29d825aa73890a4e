#include "table/prioritized_selector.h"

namespace perserve::table {

Status PrioritizedSelector::Create(const SelectorOptions& options, std::unique_ptr<Selector>* selector) {
  std::unique_ptr<tree::PriorityTree> tree;
  PERSERVE_RETURN_IF_ERROR(tree::PriorityTree::Create(options.capacity, options.device, &tree));
  selector->reset(new PrioritizedSelector(options, std::move(tree)));
  return Status::Ok();
}

PrioritizedSelector::PrioritizedSelector(const SelectorOptions& options, std::unique_ptr<tree::PriorityTree> tree)
    : Selector(options.capacity),
      alpha_(options.alpha),
      tree_(std::move(tree)),
      held_(static_cast<size_t>(options.capacity), 0) {}

Status PrioritizedSelector::InsertChecked(std::span<const int64_t> slots, std::span<const double> priorities) {
  // The tree checks what is left (a power that overflows, a total past its
  // bound) before it changes any leaf; the held flags follow only its success.
  PERSERVE_RETURN_IF_ERROR(tree_->UpdateWithExponent(slots, priorities, alpha_));
  for (const int64_t slot : slots) held_[static_cast<size_t>(slot)] = 1;
  size_ += static_cast<int64_t>(slots.size());
  return Status::Ok();
}

Status PrioritizedSelector::UpdateChecked(std::span<const int64_t> slots, std::span<const double> priorities) {
  return tree_->UpdateWithExponent(slots, priorities, alpha_);
}

Status PrioritizedSelector::DeleteChecked(std::span<const int64_t> slots) {
  zeros_.assign(slots.size(), 0.0);
  PERSERVE_RETURN_IF_ERROR(tree_->Update(slots, zeros_));
  for (const int64_t slot : slots) held_[static_cast<size_t>(slot)] = 0;
  size_ -= static_cast<int64_t>(slots.size());
  return Status::Ok();
}

Status PrioritizedSelector::SelectChecked(std::span<const double> fractions, std::span<int64_t> slots,
                                          std::span<double> probabilities) const {
  // `probabilities` holds the masses, then the drawn leaves, then leaf / total.
  const double total = tree_->Total();
  for (size_t i = 0; i < fractions.size(); ++i) probabilities[i] = fractions[i] * total;
  PERSERVE_RETURN_IF_ERROR(tree_->FindPrefixSum(probabilities, slots));
  PERSERVE_RETURN_IF_ERROR(tree_->Get(slots, probabilities));
  for (double& probability : probabilities) probability /= total;
  return Status::Ok();
}

void PrioritizedSelector::ListHeld(std::vector<int64_t>* slots) const {
  // Any order rebuilds the tree: its nodes are a function of its leaves.
  slots->clear();
  slots->reserve(static_cast<size_t>(size_));
  for (int64_t slot = 0; slot < capacity(); ++slot) {
    if (held_[static_cast<size_t>(slot)] != 0) slots->push_back(slot);
  }
}

}  // namespace perserve::table
