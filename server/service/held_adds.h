// HeldAdds: the adds the service cannot store yet (the rate limiter, rows of
// a reply in flight, their columns still to come, an earlier held add of the
// same client), in arrival order, with how many each client has held; and
// the columns apart each client owes, in the order its adds came.
//
// The columns of an add sent apart (proto::kAddColumnsTag) are a second
// message right after the request. They reach the server by two paths: the
// loop's receive of any message (Route: a copy kept with the held add) or the
// add's own matched probe and receive, straight into the store, when it is
// applied (the service, between ColumnsReady and Settle). Both must give each
// message to the add it belongs to, so every add apart whose columns have not
// come yet has an entry in its client's ledger, in arrival order, and a
// columns message always goes to the first entry: the add it belongs to, or a
// refused add's (dropped). An entry leaves the ledger when its message has
// been taken (Route, Settle) or dropped. This class alone touches a client's
// columns messages; it claims one only to receive it at once (a claimed
// message the loop's receive cannot see would reorder them, issue 24's
// first finding).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "proto/append.h"
#include "service/transport/transport.h"

namespace perserve::service {

// A held append, kept as it was decoded: `append` views `message`, the
// request's bytes as received (moved here, not copied).
struct HeldAdd {
  using Clock = std::chrono::steady_clock;
  int client;
  uint64_t request_id;
  std::vector<std::byte> message;
  proto::DecodedAppend append;
  Clock::time_point arrived;
  Clock::time_point deadline;
  std::optional<std::vector<std::byte>> columns{};  // its columns apart, here (the loop's receive took them) ...
  uint64_t ticket = 0;                              // ... or owed: its entry in the client's ledger
  int64_t steps() const { return append.meta.steps; }
  int64_t items() const { return append.meta.item_count(); }
  bool columns_follow() const { return append.meta.columns_follow; }
  bool awaits_columns() const { return columns_follow() && !columns; }
};

class HeldAdds {
 public:
  using Iterator = std::deque<HeldAdd>::iterator;
  using ConstIterator = std::deque<HeldAdd>::const_iterator;

  HeldAdds(Transport* transport, int clients);

  bool empty() const { return adds_.empty(); }
  size_t size() const { return adds_.size(); }
  const HeldAdd& front() const { return adds_.front(); }
  int count(int client) const { return per_client_[client]; }
  Iterator begin() { return adds_.begin(); }
  Iterator end() { return adds_.end(); }
  ConstIterator begin() const { return adds_.begin(); }
  ConstIterator end() const { return adds_.end(); }

  // Holds `add`; one that awaits its columns takes the next entry of its
  // client's ledger (add.ticket).
  void Hold(HeldAdd add);
  // Takes the add at *it out of the queue (*it moves to the next). If it
  // awaits its columns its ledger entry stays: the caller applies it
  // (ColumnsReady before, Settle after) or refuses it (Refuse).
  HeldAdd Take(Iterator* it);
  // Every held add, in order; the columns each still owes are to be dropped.
  std::deque<HeldAdd> TakeAll();

  // The ledger. A new entry for an add apart that is applied at once (nothing
  // owed before it: Owes false); its ticket.
  uint64_t Owe(int client);
  // Whether `client` owes columns of earlier adds (received or dropped first).
  bool Owes(int client) const { return !ledger_[client].empty(); }
  // Whether the add of `ticket` may receive its columns now: its entry is the
  // first (the refused adds' columns before it that have come are dropped
  // first) and they have arrived. Claims nothing.
  bool ColumnsReady(int client, uint64_t ticket);
  // For a held add: its columns are here, or may be received now.
  bool ColumnsReady(const HeldAdd& add) { return !add.awaits_columns() || ColumnsReady(add.client, add.ticket); }
  // The same, without dropping anything (for descriptions).
  bool ColumnsYetToCome(int client, uint64_t ticket) const;
  // The add of `ticket` was applied: its columns were received (`taken`), or
  // are to be dropped.
  void Settle(int client, uint64_t ticket, bool taken);
  // The add of `ticket` is refused: its columns are dropped, as soon as they
  // come. Ticket 0 (none): an add refused on arrival, whose columns come
  // after every columns message the client owes now.
  void Refuse(int client, uint64_t ticket = 0);

  // A columns message the loop's receive took from `client`: kept with the
  // held add it belongs to, dropped (a refused add's), or early: it came
  // before its append request (a client may send them in that order), so it
  // is kept for the client's next append apart (TakeEarly); one more than
  // `max_early` waiting is dropped (kStray).
  enum class Routed { kKept, kDropped, kEarly, kStray };
  Routed Route(int client, std::span<const std::byte> bytes, int max_early);
  // The oldest columns message `client` sent before its append request, for
  // its next append apart (the one it belongs to: each client's columns
  // messages go to its appends apart in order, whichever came first).
  std::optional<std::vector<std::byte>> TakeEarly(int client);
  // Early columns messages kept, over all clients (the stats line).
  size_t early() const;

 private:
  struct Owed {
    uint64_t ticket;
    bool drop;
  };
  // Receives and drops the refused adds' columns at the front of the
  // client's ledger that have arrived.
  void DropArrived(int client);
  Owed* Find(int client, uint64_t ticket);

  Transport* transport_;
  std::deque<HeldAdd> adds_;
  std::vector<int> per_client_;
  std::vector<std::deque<Owed>> ledger_;
  std::vector<std::deque<std::vector<std::byte>>> early_;
  uint64_t next_ticket_ = 1;
};

}  // namespace perserve::service
