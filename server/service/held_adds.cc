#include "service/held_adds.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace perserve::service {

HeldAdds::HeldAdds(Transport* transport, int clients)
    : transport_(transport),
      per_client_(static_cast<size_t>(clients), 0),
      ledger_(static_cast<size_t>(clients)),
      early_(static_cast<size_t>(clients)) {}

void HeldAdds::Hold(HeldAdd add) {
  if (add.awaits_columns() && add.ticket == 0) add.ticket = Owe(add.client);
  ++per_client_[add.client];
  adds_.push_back(std::move(add));
}

HeldAdd HeldAdds::Take(Iterator* it) {
  HeldAdd add = std::move(**it);
  *it = adds_.erase(*it);
  --per_client_[add.client];
  return add;
}

std::deque<HeldAdd> HeldAdds::TakeAll() {
  std::deque<HeldAdd> all = std::exchange(adds_, {});
  std::fill(per_client_.begin(), per_client_.end(), 0);
  for (const HeldAdd& add : all) {
    if (add.awaits_columns()) Refuse(add.client, add.ticket);
  }
  return all;
}

uint64_t HeldAdds::Owe(int client) {
  const uint64_t ticket = next_ticket_++;
  ledger_[client].push_back({ticket, /*drop=*/false});
  return ticket;
}

HeldAdds::Owed* HeldAdds::Find(int client, uint64_t ticket) {
  for (Owed& owed : ledger_[client]) {
    if (owed.ticket == ticket) return &owed;
  }
  return nullptr;
}

bool HeldAdds::ColumnsReady(int client, uint64_t ticket) {
  DropArrived(client);
  return !ColumnsYetToCome(client, ticket);
}

bool HeldAdds::ColumnsYetToCome(int client, uint64_t ticket) const {
  const std::deque<Owed>& owed = ledger_[client];
  if (owed.empty() || owed.front().ticket != ticket || owed.front().drop) return true;
  bool arrived = false;
  return !transport_->ColumnsArrived(client, &arrived).ok() || !arrived;
}

void HeldAdds::Settle(int client, uint64_t ticket, bool taken) {
  std::deque<Owed>& owed = ledger_[client];
  if (owed.empty() || owed.front().ticket != ticket) {
    // The service applies an add apart only when its entry is first: a bug
    // if not. Its columns are dropped where they stand in the order.
    spdlog::error("an add's columns were applied out of their client's order (entry {} of {}); dropped", ticket,
                  owed.size());
    return Refuse(client, ticket);
  }
  if (taken) {
    owed.pop_front();
  } else {
    owed.front().drop = true;
  }
  DropArrived(client);
}

void HeldAdds::Refuse(int client, uint64_t ticket) {
  Owed* owed = ticket != 0 ? Find(client, ticket) : nullptr;
  if (owed != nullptr) {
    owed->drop = true;
  } else {
    ledger_[client].push_back({next_ticket_++, /*drop=*/true});
  }
  DropArrived(client);
}

void HeldAdds::DropArrived(int client) {
  std::deque<Owed>& owed = ledger_[client];
  while (!owed.empty() && owed.front().drop) {
    bool arrived = false;
    int64_t bytes = 0;
    if (!transport_->ProbeColumns(client, &arrived, &bytes).ok() || !arrived) return;
    const Status dropped = transport_->ReceiveColumns(client, {});
    if (!dropped.ok()) spdlog::error("dropping the columns of a refused add failed: {}", dropped.ToString());
    owed.pop_front();
  }
}

HeldAdds::Routed HeldAdds::Route(int client, std::span<const std::byte> bytes, int max_early) {
  std::deque<Owed>& owed = ledger_[client];
  if (owed.empty()) {
    if (static_cast<int>(early_[client].size()) >= max_early) return Routed::kStray;
    early_[client].emplace_back(bytes.begin(), bytes.end());
    return Routed::kEarly;
  }
  const Owed first = owed.front();
  owed.pop_front();
  if (first.drop) return Routed::kDropped;
  for (HeldAdd& add : adds_) {
    if (add.client == client && add.ticket == first.ticket && add.awaits_columns()) {
      add.columns.emplace(bytes.begin(), bytes.end());
      return Routed::kKept;
    }
  }
  // An entry with no held add: an add applied at once owes its columns only
  // while it is being applied, when the loop receives nothing.
  spdlog::error("columns owed by an add no longer held (entry {}); dropped", first.ticket);
  return Routed::kDropped;
}

std::optional<std::vector<std::byte>> HeldAdds::TakeEarly(int client) {
  std::deque<std::vector<std::byte>>& early = early_[client];
  if (early.empty()) return std::nullopt;
  std::vector<std::byte> bytes = std::move(early.front());
  early.pop_front();
  return bytes;
}

size_t HeldAdds::early() const {
  size_t count = 0;
  for (const auto& early : early_) count += early.size();
  return count;
}

}  // namespace perserve::service
