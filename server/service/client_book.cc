#include "service/client_book.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace perserve::service {

ClientBook::ClientBook(std::vector<ClientRole> roles, Clock::time_point now)
    : roles_(std::move(roles)),
      open_(roles_.size(), true),
      last_heard_(roles_.size(), now),
      pending_close_(roles_.size()),
      open_clients_(static_cast<int>(roles_.size())),
      without_learners_since_(now) {
  for (const ClientRole role : roles_) {
    open_actors_ += role != ClientRole::kLearner;
    open_learners_ += role != ClientRole::kActor;
  }
}

bool ClientBook::Close(int client, Clock::time_point now) {
  if (!open_[client]) return false;
  open_[client] = false;
  --open_clients_;
  open_actors_ -= roles_[client] != ClientRole::kLearner;
  open_learners_ -= roles_[client] != ClientRole::kActor;
  if (roles_[client] != ClientRole::kActor && open_learners_ == 0) without_learners_since_ = now;
  return true;
}

std::optional<uint64_t> ClientBook::TakePendingClose(int client) {
  return std::exchange(pending_close_[client], std::nullopt);
}

std::string ClientBook::DescribeOpen(Clock::time_point now) const {
  int actors = 0, learners = 0, unknown = 0;
  for (int client = 0; client < size(); ++client) {
    if (!open_[client]) continue;
    actors += roles_[client] == ClientRole::kActor;
    learners += roles_[client] == ClientRole::kLearner;
    unknown += roles_[client] == ClientRole::kUnknown;
  }
  std::string text = fmt::format("open {} actors, {} learners", actors, learners);
  if (unknown > 0) text += fmt::format(", {} others", unknown);
  if (const auto since = without_learners_since()) {
    text += fmt::format(" (no learner open for {:.0f} s: intake goes on, nothing samples)",
                        std::chrono::duration<double>(now - *since).count());
  }
  return text;
}

std::string ClientBook::DescribeSilent(Clock::time_point now, double silent_after,
                                       const std::function<std::string(int)>& name) const {
  std::vector<std::string> silent;
  for (int client = 0; client < size(); ++client) {
    const double quiet = std::chrono::duration<double>(now - last_heard_[client]).count();
    if (!open_[client] || quiet <= silent_after) continue;
    const ClientRole role = roles_[client];
    const char* kind = role == ClientRole::kActor ? "actor" : role == ClientRole::kLearner ? "learner" : "client";
    silent.push_back(fmt::format("{} ({}) {:.0f} s", name(client), kind, quiet));
  }
  if (silent.empty()) return "";
  constexpr size_t kShown = 8;
  std::string text = " | silent:";
  for (size_t i = 0; i < std::min(silent.size(), kShown); ++i) text += (i == 0 ? " " : ", ") + silent[i];
  if (silent.size() > kShown) text += fmt::format(" and {} more", silent.size() - kShown);
  return text;
}

}  // namespace perserve::service
