// The perserve client library: what actor and learner code links.
//
// Every rank of the job joins once, collectively, over the communicator the
// caller passes (usually MPI_COMM_WORLD): actors with ActorClient::Join,
// learners with LearnerClient::Join, the replay ranks inside perserve-server,
// and any other rank with JoinAsBystander. The join finds the server and
// learns the schema; no addresses or configuration are involved.
//
// The library works on its own duplicate of the communicator with
// MPI_ERRORS_RETURN, so MPI failures come back as Status values. It calls
// MPI_Init if nobody has, and never MPI_Finalize: that stays the caller's.
// A client is used from one thread at a time.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"

namespace perserve {

namespace client_internal {
class Connection;
}

struct ClientOptions {
  // Intake batches an actor may have sent but not yet seen acknowledged; Add
  // waits for the oldest once this many are in flight (back-pressure).
  int max_in_flight = 4;
};

// A batch of transitions to add: `size` items; columns[i] points at
// size * schema.columns[i].ItemBytes() bytes, row-major.
struct BatchView {
  int64_t size = 0;
  std::vector<const void*> columns;
};

// A prioritized sample. The column data stays in the received message (no
// copy): columns[i] holds size * schema.columns[i].ItemBytes() bytes. Movable,
// not copyable (the spans point into `message`).
struct SampleBatch {
  SampleBatch() = default;
  SampleBatch(SampleBatch&&) = default;
  SampleBatch& operator=(SampleBatch&&) = default;
  SampleBatch(const SampleBatch&) = delete;
  SampleBatch& operator=(const SampleBatch&) = delete;

  int64_t size = 0;
  std::vector<uint64_t> keys;         // pass these back to UpdatePriorities
  std::vector<double> weights;        // importance-sampling weights, max 1
  std::vector<double> probabilities;  // P(i) of each draw
  std::vector<std::span<const std::byte>> columns;
  std::vector<std::byte> message;     // owns the bytes `columns` point into
};

struct UpdateResult {
  int64_t applied = 0;
  int64_t stale = 0;  // keys whose items had been overwritten: dropped by the server
};

class ActorClient {
 public:
  // Collective over `comm` (every rank of it joins).
  static Status Join(MPI_Comm comm, const ClientOptions& options, std::unique_ptr<ActorClient>* actor);
  ~ActorClient();  // Close()s, ignoring errors

  const Schema& schema() const;

  // Sends a batch; priorities empty (the server gives the largest priority
  // seen so far) or one per item, finite and > 0. The batch is copied, so the
  // caller may reuse its buffers at once. Returns after sending, not after the
  // server stored it: a rejection of an earlier batch is returned by Flush or
  // by the next Add, which then does not send its own batch (the message says
  // so; send it again). Waits while max_in_flight batches are unacknowledged.
  Status Add(const BatchView& batch, std::span<const double> priorities = {});

  // Waits until every batch sent has been acknowledged; returns the first
  // error not yet returned.
  Status Flush();

  // Flushes, then tells the server this actor is done. Idempotent.
  Status Close();

  // Keys of the last acknowledged batch start here (for tests and logging).
  uint64_t last_first_key() const { return last_first_key_; }
  int64_t items_acknowledged() const { return items_acknowledged_; }

 private:
  ActorClient(std::unique_ptr<client_internal::Connection> connection, ClientOptions options);
  Status CollectOldest();

  std::unique_ptr<client_internal::Connection> connection_;
  ClientOptions options_;
  std::vector<uint64_t> in_flight_;  // request ids, oldest first
  Status pending_error_;
  uint64_t last_first_key_ = 0;
  int64_t items_acknowledged_ = 0;
  bool closed_ = false;
};

class LearnerClient {
 public:
  static Status Join(MPI_Comm comm, const ClientOptions& options, std::unique_ptr<LearnerClient>* learner);
  ~LearnerClient();

  const Schema& schema() const;

  // Draws batch_size items proportional to priority^alpha. Waits (the server
  // defers the reply) until the replay holds its minimum size.
  Status Sample(int64_t batch_size, double beta, SampleBatch* batch);

  // The same in two halves, so one sample can be in flight while the learner
  // trains on the previous one. At most one request outstanding.
  Status RequestSample(int64_t batch_size, double beta);
  Status ReceiveSample(SampleBatch* batch);

  // New priorities (finite, > 0) for sampled keys; waits for the answer.
  Status UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities,
                          UpdateResult* result = nullptr);

  // Tells the server this learner is done (an outstanding sample is dropped). Idempotent.
  Status Close();

 private:
  explicit LearnerClient(std::unique_ptr<client_internal::Connection> connection);

  std::unique_ptr<client_internal::Connection> connection_;
  uint64_t pending_sample_ = 0;  // request id; 0 when none
  bool closed_ = false;
};

// For ranks that are neither actors, learners nor servers: takes part in the
// collective join and nothing else.
Status JoinAsBystander(MPI_Comm comm);

}  // namespace perserve
