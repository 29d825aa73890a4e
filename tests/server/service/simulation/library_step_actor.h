// LibraryStepActor: an actor of the real client library appending steps to a
// service of step streams (library_client.h; docs/steps.md): ActorClient::
// Append of a few steps (episodes ending at random) with items over its
// recent steps where its view says they can be created, priorities or none,
// item columns, its step columns apart (into the ring: ClientOptions'
// columns_apart_min_bytes, up to the connection's max_steps_apart). Now and
// then an item outside its stream, which the library refuses without
// sending. It never names a step it created an item over again (one item
// per step). It checks that the library reports every refused
// append once, that after a refusal steps_appended() goes back to the steps
// the server acknowledged (its view follows it), and that
// items_acknowledged() is what the replies said. What the service does with
// each append the StepModel judges.
#pragma once

#include <cstdint>
#include <memory>

#include "perserve/client.h"
#include "server/service/simulation/library_client.h"
#include "server/service/simulation/step_stream.h"

namespace perserve::service::simulation {

class LibraryStepActor final : public LibraryClient {
 public:
  LibraryStepActor(int client, LibraryWorld* world);

 private:
  void Act() override;
  void Finish() override;
  Status CloseClient() override { return actor_->Close(); }
  const char* role() const override { return "step actor"; }

  // `outside`: with an item past the stream's steps (the library's to refuse).
  void Append(bool outside);
  void Flush();
  void CheckCounts(const char* when) const;

  ClientOptions options_;
  std::unique_ptr<ActorClient> actor_;
  StepStream stream_;
  int64_t reported_ = 0;  // refused appends the library has reported
};

}  // namespace perserve::service::simulation
