// Selector: which held item a table draws (or removes) next, over item slots.
//
// A table holds items in slots [0, capacity) and keeps one selector to sample
// from and one to pick what to remove (as in Reverb, a remover is a selector:
// oldest first is the FIFO selector, lowest priority first the min-heap one).
// A selector knows only slots, the order they were inserted in and their
// priorities; the items themselves are the table's.
//
// Contract shared by every kind:
//   - Insert(slots, priorities): new items, in batch order; a later item is
//     younger. Every slot in [0, capacity), not held, not repeated in the
//     batch; every priority finite and >= 0.
//   - Update(slots, priorities): new priorities for held slots, applied in
//     batch order (a repeated slot: the last one wins).
//   - Delete(slots): held slots, not repeated in the batch.
//   - Select(fractions, ...): one draw per fraction u in [0, 1); the caller
//     brings the randomness, so a draw is a function of the selector's state
//     and u alone, reproducible on any machine. Draws change nothing.
//   - A refused call changes nothing; its status names the first bad element
//     (its position in the batch). Codes: kOutOfRange for a slot outside the
//     capacity, kNotFound for a slot that should be held and is not,
//     kFailedPrecondition for inserting a held slot or drawing from an empty
//     selector, kInvalidArgument for the rest (repeats, a bad priority or
//     fraction, span sizes that differ).
//
// The draw of each kind (u: the draw's fraction; probability: the chance the
// draw had, for importance weights):
//   prioritized  the item at mass u * total of its sum tree (leaf p^alpha,
//                clamped up to 2^-1022: tree_algorithm.h's LeafFromPriority),
//                probability leaf / total.
//   uniform      the floor(u * size)-th item of the held sequence (Insert
//                appends; Delete moves the last item into the deleted one's
//                place, one element at a time in batch order), probability
//                1 / size.
//   fifo, lifo   the oldest (fifo) or newest (lifo) item still held,
//                probability 1. Update changes no order.
//   max_heap,    the highest (max) or lowest (min) priority, probability 1;
//   min_heap     among equal priorities the one whose priority was set first
//                (by Insert or by Update: an update, even to the same value,
//                sends the item behind its equals, as Reverb's heap does).
//
// Checkpoints: ListHeld gives the held slots in an order from which Insert
// rebuilds the same selector: a fresh selector of the same kind and options,
// given Insert(those slots, each slot's last priority) in that order (one
// batch or any consecutive batches), draws exactly as this one does for every
// fraction, bit for bit (the prioritized one sets the same leaves, and its
// tree's nodes are a function of its leaves). The priorities are the table's
// to keep: the selectors other than the heaps do not hold them.
//
// Memory, preallocated for the whole capacity at Create (2^21 slots: MiB):
// every kind 4 bytes a slot for the batch checks (SlotMarks), plus
//   prioritized  the tree's 32 bytes a leaf (capacity rounded up to a power
//                of two) + 1 byte          ~= 37 B a slot,  74 MiB at 2^21
//   uniform      16 bytes (dense array, position)  20 B,  40 MiB
//   fifo, lifo   16 bytes (previous, next)          20 B,  40 MiB
//   heaps        32 bytes (heap entry of priority, sequence and slot,
//                position)                          36 B,  72 MiB
//
// Thread safety: none. The owning table serialises every call.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "perserve/status.h"
#include "table/slot_marks.h"
#include "tree/priority_tree.h"

namespace perserve::table {

enum class SelectorKind { kPrioritized, kUniform, kFifo, kLifo, kMaxHeap, kMinHeap };

// "prioritized", "uniform", "fifo", "lifo", "max_heap", "min_heap"; any other
// name is kInvalidArgument, naming the known ones.
Status ParseSelectorKind(std::string_view name, SelectorKind* kind);
std::string_view SelectorKindName(SelectorKind kind);

struct SelectorOptions {
  int64_t capacity = tree::PriorityTree::kDefaultCapacity;  // slots are [0, capacity)
  double alpha = 1.0;                                       // prioritized only: leaf = priority^alpha
  tree::Device device = tree::Device::kCpu;                 // prioritized only: where its tree lives
};

class Selector {
 public:
  // Capacity in [1, PriorityTree::kMaxCapacity]; alpha finite and >= 0 (every
  // kind checks it, so a flag is refused alike whatever the kind). Allocates
  // the whole capacity's memory now: kUnavailable where it cannot.
  static Status Create(SelectorKind kind, const SelectorOptions& options, std::unique_ptr<Selector>* selector);

  virtual ~Selector() = default;
  Selector(const Selector&) = delete;
  Selector& operator=(const Selector&) = delete;

  // Costs, k the batch size and n the items held: uniform, fifo and lifo
  // O(k); heaps O(k log n); prioritized the tree's Update, O(k log capacity).
  Status Insert(std::span<const int64_t> slots, std::span<const double> priorities);
  Status Update(std::span<const int64_t> slots, std::span<const double> priorities);
  Status Delete(std::span<const int64_t> slots);

  // Writes draw i's slot and probability for fractions[i]; the three spans
  // have one size. A non-empty batch needs size() > 0. O(k) but for
  // prioritized, O(k log capacity).
  Status Select(std::span<const double> fractions, std::span<int64_t> slots, std::span<double> probabilities) const;

  // Replaces *slots with every held slot once, in the rebuild order above.
  // O(n) (heaps: O(n log n); prioritized: O(capacity)).
  virtual void ListHeld(std::vector<int64_t>* slots) const = 0;

  virtual SelectorKind kind() const = 0;
  virtual int64_t size() const = 0;
  int64_t capacity() const { return capacity_; }
  bool Holds(int64_t slot) const { return slot >= 0 && slot < capacity_ && HoldsInRange(slot); }

 protected:
  explicit Selector(int64_t capacity) : capacity_(capacity), marks_(capacity) {}

  // The kinds' halves of the calls above, given batches that passed the
  // shared checks. Only the prioritized kind can still refuse one (its tree
  // refuses a power that overflows, or a total past its bound), and then
  // changes nothing.
  virtual bool HoldsInRange(int64_t slot) const = 0;
  virtual Status InsertChecked(std::span<const int64_t> slots, std::span<const double> priorities) = 0;
  virtual Status UpdateChecked(std::span<const int64_t> slots, std::span<const double> priorities) = 0;
  virtual Status DeleteChecked(std::span<const int64_t> slots) = 0;
  virtual Status SelectChecked(std::span<const double> fractions, std::span<int64_t> slots,
                               std::span<double> probabilities) const = 0;

 private:
  Status CheckSlot(int64_t slot, size_t position) const;

  int64_t capacity_;
  SlotMarks marks_;  // repeats within a batch
};

}  // namespace perserve::table
