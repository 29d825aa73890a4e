// Connection: one client's link to its replay rank (internal to the client
// library): request ids, sends that complete in the background, and replies
// matched to their requests by id (a deferred sample reply can arrive after
// the replies to later requests). The matching and the close handshake live
// here; how frames travel is a subclass's: MpiConnection over the joined
// communicator, and in tests a loopback one straight into a ReplayService.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string_view>
#include <vector>

#include "mpi/byte_blocks.h"
#include "mpi/communicator.h"
#include "mpi/join.h"
#include "mpi/send_queue.h"
#include "perserve/schema.h"
#include "proto/codec.h"

namespace perserve::client_internal {

class Connection {
 public:
  virtual ~Connection() = default;

  // What an actor appends: a step's columns (a transition's, when the
  // server's items are its steps).
  virtual const Schema& schema() const = 0;
  // What a sample returns (the schema itself for transitions).
  virtual const Schema& sample_schema() const { return schema(); }
  // Whether the server's items are computed over steps (n-step items,
  // sequences: actors name them) rather than being the steps, and the
  // columns an actor sends with each item it creates.
  virtual bool steps() const { return false; }
  virtual const Schema& item_schema() const {
    static const Schema none;
    return none;
  }
  // Every table the server serves, in its order (tables()[0] the default
  // one, whose schemas are sample_schema() and item_schema()). By default one
  // prioritized table, "default", over this connection's schemas.
  virtual const std::vector<proto::TableSchemas>& tables() const;
  // The index of the table named `name` in tables() (empty: the default
  // table, 0). InvalidArgument naming it and listing the server's tables when
  // there is none of that name; nothing is sent.
  Status TableIndex(std::string_view name, int* index) const;
  // An actor's stream's steps so far (a restored server's; else 0): where its
  // steps_appended starts.
  virtual int64_t first_step() const { return 0; }
  // An append of at most this many steps may send its step columns apart
  // (the server's ring has that many free slots past its newest step).
  virtual int64_t max_steps_apart() const { return 0; }
  uint64_t NextRequestId() { return next_request_id_++; }

  // A buffer to encode the next frame into (recycled where the transport can).
  virtual std::vector<std::byte> AcquireBuffer(size_t expected_bytes) = 0;

  // Sends a frame to the first (an actor's only) server without waiting for
  // it to be received; the buffer is kept until the send completes.
  virtual Status Send(std::vector<std::byte> frame) = 0;

  // Whether SendColumns works here, and it: the step columns of the append
  // request sent last, as a message of their own (proto::kAddColumnsTag).
  virtual bool SendsColumnsApart() const { return false; }
  virtual Status SendColumns(std::vector<std::byte> columns) {
    (void)columns;
    return Status::Unimplemented("this connection sends an add's columns in its request");
  }
  // The same straight from the caller's memory, without copying it (MPI: one
  // datatype over the columns where they lie). *token names the send: the
  // memory must stay unchanged until AwaitSent(*token) has returned.
  virtual Status SendColumnsFrom(std::span<const std::span<const std::byte>> columns, uint64_t* token) {
    (void)columns;
    *token = 0;
    return Status::Unimplemented("this connection sends an add's columns in its request");
  }
  virtual Status AwaitSent(uint64_t token) {
    (void)token;
    return Status::Ok();
  }

  // The servers this client talks to: an actor 1, a learner every shard.
  virtual int shard_count() const { return 1; }
  // Send() to shard `shard` (0 .. shard_count() - 1). Request ids are unique
  // over all of them, so replies match by id whichever server sends them.
  virtual Status SendTo(int shard, std::vector<std::byte> frame) {
    if (shard != 0) return Status::Internal("this connection has one server");
    return Send(std::move(frame));
  }

  // Waits for the reply to `request_id`; replies to other requests that
  // arrive first are kept for their own callers. An ErrorReply becomes the
  // returned status. On success `frame` points into `*message`, which holds
  // exactly the reply. What *message held before is overwritten, its buffer
  // reused: pass the previous reply of the same kind (a SampleBatch's
  // message) and a large reply lands in memory already touched, without the
  // allocation, zero-fill and page faults of a fresh buffer.
  Status AwaitReply(uint64_t request_id, std::vector<std::byte>* message, proto::Frame* frame);
  // The same for whichever of `request_ids` is answered first (one kept
  // already, else the first to arrive); *answered its index in request_ids.
  Status AwaitFirstReply(std::span<const uint64_t> request_ids, size_t* answered, std::vector<std::byte>* message,
                         proto::Frame* frame);

  // The same without waiting: *ready false (and OK) when the reply has not
  // arrived yet. Receives whatever replies are waiting, keeping them.
  Status PollReply(uint64_t request_id, bool* ready, std::vector<std::byte>* message, proto::Frame* frame);

  // Collective over every non-server rank of the joined communicator: a new
  // communicator over them (MPI_Comm_create_group, so servers take no part).
  virtual Status Peers(MPI_Comm* peers) const = 0;

  // The time the client's own timeouts are measured on (a sample's one
  // budget over its rounds, ShardSampler): the steady clock; the
  // deterministic simulation's connections run on its clock, as its servers do.
  virtual std::chrono::steady_clock::time_point Now() const { return std::chrono::steady_clock::now(); }

  // Sends kCloseRequest to every server and waits for their replies, then
  // for every send.
  Status Close();

 protected:
  // The next reply frame from the server: waits for one when `wait`, else
  // sets *received false when none has arrived. The frame is the first
  // *length bytes of *buffer, which only grows (mpi::ReceiveGrowing).
  virtual Status ReceiveReply(bool wait, std::vector<std::byte>* buffer, size_t* length, bool* received) = 0;
  // Lets sends in the background complete (without waiting for them) ...
  virtual Status ProgressSends() = 0;
  // ... and waits for every one.
  virtual Status DrainSends() = 0;

 private:
  // Replies up to this size that arrive before their caller asks are copied
  // out of the receive buffer; larger ones take the buffer with them.
  static constexpr size_t kCopyEarlyReplyBytes = size_t{64} << 10;

  // Keeps the reply in the first `length` bytes of *buffer for its caller.
  // A large one leaves the spare buffer (if any) in *buffer.
  void KeepEarly(std::vector<std::byte>* buffer, size_t length);
  // Moves the kept reply `early` into *message; the buffer *message held
  // becomes the spare if it is the larger.
  void TakeEarly(std::map<uint64_t, std::vector<std::byte>>::iterator early, std::vector<std::byte>* message);
  // Decodes a reply in *message.
  Status Finish(std::vector<std::byte>* message, proto::Frame* frame);

  uint64_t next_request_id_ = 1;
  mutable std::vector<proto::TableSchemas> default_tables_;  // tables()' default, made on first use
  std::map<uint64_t, std::vector<std::byte>> early_replies_;
  std::vector<std::byte> spare_;  // the largest buffer left over, received into next
};

// Over MPI: the joined communicator, sends through an mpi::SendQueue.
class MpiConnection final : public Connection {
 public:
  // Collective over `parent`. A bystander has no server (server_rank -1).
  Status Join(MPI_Comm parent, proto::Role role);

  const Schema& schema() const override { return join_.served.adds; }
  const Schema& sample_schema() const override { return join_.served.samples; }
  bool steps() const override { return join_.served.steps; }
  const Schema& item_schema() const override { return join_.served.items; }
  const std::vector<proto::TableSchemas>& tables() const override { return join_.served.tables; }
  int64_t first_step() const override { return join_.first_step; }
  int64_t max_steps_apart() const override { return join_.served.max_steps_apart; }
  std::vector<std::byte> AcquireBuffer(size_t expected_bytes) override { return sends_.Acquire(expected_bytes); }
  Status Send(std::vector<std::byte> frame) override { return SendTo(0, std::move(frame)); }
  int shard_count() const override { return static_cast<int>(join_.servers.size()); }
  Status SendTo(int shard, std::vector<std::byte> frame) override;
  bool SendsColumnsApart() const override { return true; }
  Status SendColumns(std::vector<std::byte> columns) override;
  Status SendColumnsFrom(std::span<const std::span<const std::byte>> columns, uint64_t* token) override;
  Status AwaitSent(uint64_t token) override { return sends_.Await(token); }
  Status Peers(MPI_Comm* peers) const override;

 protected:
  Status ReceiveReply(bool wait, std::vector<std::byte>* buffer, size_t* length, bool* received) override;
  Status ProgressSends() override { return sends_.Progress(); }
  Status DrainSends() override { return sends_.Drain(); }

 private:
  mpi::Communicator comm_;
  mpi::JoinResult join_;
  mpi::SendQueue sends_;
  mpi::ByteBlocks blocks_;   // SendColumnsFrom's datatype
  uint64_t next_token_ = 1;  // names SendColumnsFrom's sends
};

}  // namespace perserve::client_internal
