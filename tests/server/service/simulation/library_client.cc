#include "server/service/simulation/library_client.h"

#include <fmt/format.h>

namespace perserve::service::simulation {

LibraryClient::LibraryClient(int client, LibraryWorld* world)
    : client_(client),
      world_(*world),
      random_(world->library_random),
      config_(world->config),
      fiber_([this] { Body(); }),
      owned_connection_(std::make_unique<SimulatedConnection>(client, world, &fiber_)),
      connection_(owned_connection_.get()) {}

void LibraryClient::Body() {
  while (!aborting_) {
    if (task_ == Task::kFinish) {
      doing_ = "its end (Flush, Close)";
      Finish();
      return;
    }
    Act();
    if (closed_early_ || aborting_) return;  // torn down: it ends here, never suspended
    task_ = Task::kNone;
    doing_ = "nothing (between calls)";
    fiber_.Yield();
  }
}

void LibraryClient::Tick(bool work) {
  if (fiber_.finished()) return;
  if (connection_->blocked()) {
    // A blocked call goes on once what it waits for has come (now or a little later).
    if (connection_->CanProceed() && random_.Chance(0.8)) fiber_.Resume();
    return;
  }
  if (!work) {
    paused_ticks_ = 0;
    task_ = Task::kFinish;
    fiber_.Resume();
    return;
  }
  if (paused_ticks_ > 0) {
    --paused_ticks_;
    return;
  }
  if (random_.Chance(0.04)) {
    paused_ticks_ = static_cast<int>(random_.Pick(1, 30));  // training: its replies wait unread
    return;
  }
  if (!random_.Chance(0.5)) return;
  task_ = Task::kAct;
  fiber_.Resume();
}

std::string LibraryClient::Describe() const {
  if (fiber_.finished()) return fmt::format("client {} (library {}): closed", client_, role());
  return fmt::format("client {} (library {}) in {}: {}", client_, role(), doing_, connection_->DescribeWait());
}

void LibraryClient::Abort() {
  connection_->Abort();
  aborting_ = true;
  if (fiber_.started() && !fiber_.finished()) {
    try {
      fiber_.Resume();  // its wait fails at once; the body ends (a check it fails no longer counts)
    } catch (...) {
    }
  }
  (void)CloseClient();  // sends nothing, waits for nothing: only so its destructor has nothing to say
}

void LibraryClient::Fingerprint(const Status& status) {
  const int code = static_cast<int>(status.code());
  connection_->Fingerprint(std::as_bytes(std::span(&code, 1)));
}

void LibraryClient::CallCanAdd(ActorClient& actor) {
  doing_ = "CanAdd";
  bool ready = false;
  const Status status = actor.CanAdd(&ready);
  Fingerprint(status);
  Expect(status.ok(), [&] { return fmt::format("client {}: CanAdd returned {}", client_, status.ToString()); });
}

void LibraryClient::CheckActorCounts(const ActorClient& actor, int64_t reported, const char* requests,
                                     const char* when) const {
  const int64_t refused = static_cast<int64_t>(connection_->add_errors().size());
  Expect(actor.rejected_batches() == refused && reported == refused, [&] {
    return fmt::format("client {}: after {}, {} {} refused by the server, rejected_batches() {}, {} reported",
                       client_, when, refused, requests, actor.rejected_batches(), reported);
  });
  Expect(actor.items_acknowledged() == connection_->items_acknowledged(), [&] {
    return fmt::format("client {}: after {}, items_acknowledged() {} but the replies acknowledged {}", client_, when,
                       actor.items_acknowledged(), connection_->items_acknowledged());
  });
}

}  // namespace perserve::service::simulation
