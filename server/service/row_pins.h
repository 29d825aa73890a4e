// RowPins: the ring slots whose rows a sample reply sent from the store
// (zero-copy) is still reading. An add that would overwrite a pinned slot
// waits; a reply's pins go when the transport hands its token back.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace perserve::service {

class RowPins {
 public:
  explicit RowPins(int64_t capacity) : capacity_(capacity) {}

  bool empty() const { return replies_.empty(); }
  // Pins `slots` (a slot may repeat: it is pinned as often) for the reply
  // `token` to `client`. O(slots); the per-slot counts are allocated at the
  // first pin.
  void Pin(uint64_t token, int client, std::span<const int64_t> slots);
  // Unpins the replies whose sends completed (tokens not pinned are ignored).
  void Release(std::span<const uint64_t> tokens);
  // Whether any of the `count` slots from `first_slot` on (around the ring) is pinned. O(count).
  bool Holds(int64_t first_slot, int64_t count) const;
  // The client of the oldest reply still pinning rows (0 when none).
  int OldestClient() const;

 private:
  struct Reply {
    int client;
    std::vector<int64_t> slots;
  };
  int64_t capacity_;
  std::vector<uint32_t> counts_;  // per slot
  std::unordered_map<uint64_t, Reply> replies_;
};

}  // namespace perserve::service
