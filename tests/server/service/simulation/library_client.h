// LibraryClient: a client of the real client library (perserve/client.h) in
// the deterministic simulation, run in a Fiber over its SimulatedConnection:
// each tick the simulator gives it a turn, in which it begins a call (or
// pauses, as a learner training), or goes on with a blocked call once what
// it waits for has come; once the run stops working it flushes and closes.
// Besides the ReferenceModel's checks of every frame it sends and receives,
// each kind checks what the library returns: LibraryActor (lent buffers,
// rejected adds reported once), LibraryLearner (statuses, updates, and its
// batches through SampledBatchChecks).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "client/src/connection.h"
#include "perserve/client.h"
#include "server/service/simulation/fiber.h"
#include "server/service/simulation/simulated_connection.h"

namespace perserve::client_internal {

// Builds the library's clients over a Connection of the test's (as the
// loopback tests do): the constructors are private to the library.
struct TestAccess {
  static std::unique_ptr<ActorClient> Actor(std::unique_ptr<Connection> connection, ClientOptions options) {
    return std::unique_ptr<ActorClient>(new ActorClient(std::move(connection), options));
  }
  static std::unique_ptr<LearnerClient> Learner(std::unique_ptr<Connection> connection, ClientOptions options) {
    return std::unique_ptr<LearnerClient>(new LearnerClient(std::move(connection), options));
  }
};

}  // namespace perserve::client_internal

namespace perserve::service::simulation {

// The fiber and its turns (LibraryActor and LibraryLearner are the two kinds).
class LibraryClient {
 public:
  LibraryClient(int client, LibraryWorld* world);
  virtual ~LibraryClient() = default;
  LibraryClient(const LibraryClient&) = delete;
  LibraryClient& operator=(const LibraryClient&) = delete;

  // One tick of the run for this client. While `work`, it may begin a call
  // (or pause, as a learner training), or go on with a blocked call whose
  // reply or send has come; then it finishes (flush, close) and goes on
  // until it has closed. Rethrows a SimulationFailure its checks raised.
  void Tick(bool work);
  bool closed() const { return fiber_.finished(); }
  // What it is doing, for a liveness failure.
  std::string Describe() const;
  // The run failed: its blocked call fails at once, its fiber ends, and the
  // client is closed without waiting (nothing is sent any more).
  void Abort();
  uint64_t fingerprint() const { return connection_->fingerprint(); }

 protected:
  // One call, chosen at random (in the fiber).
  virtual void Act() = 0;
  // Flush and close, with the final checks (in the fiber).
  virtual void Finish() = 0;
  virtual Status CloseClient() = 0;
  virtual const char* role() const = 0;

  void Fingerprint(const Status& status);
  // A call of actor.CanAdd, which must succeed (whether it may add is the library's to say).
  void CallCanAdd(ActorClient& actor);
  // An actor's counts against what its connection saw: every refused request
  // ("adds", "appends") reported once, and the items acknowledged.
  void CheckActorCounts(const ActorClient& actor, int64_t reported, const char* requests, const char* when) const;

  const int client_;
  LibraryWorld& world_;
  ScheduleRandom& random_;  // world.library_random
  const SimulationConfig& config_;
  Fiber fiber_;
  std::unique_ptr<SimulatedConnection> owned_connection_;  // until the client takes it
  SimulatedConnection* connection_;
  std::string doing_ = "nothing yet";  // the call it is in
  bool closed_early_ = false;

 private:
  enum class Task { kNone, kAct, kFinish };
  void Body();
  Task task_ = Task::kNone;
  bool aborting_ = false;
  int paused_ticks_ = 0;
};

}  // namespace perserve::service::simulation
