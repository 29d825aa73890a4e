// MpiTransport: frames over the joined communicator. Receives use a
// source-specific MPI_Improbe per client, so the service decides the order
// clients are served in (round-robin) instead of MPI_ANY_SOURCE, which lets a
// flooding client starve the others. Replies go out through a SendQueue, so a
// learner that is busy training never stalls the server.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "mpi/byte_blocks.h"
#include "mpi/join.h"
#include "mpi/send_queue.h"
#include "service/transport/transport.h"

namespace perserve::service {

class MpiTransport final : public Transport {
 public:
  // roles[i]: what client_ranks[i] joined as.
  MpiTransport(MPI_Comm comm, std::vector<int> client_ranks, std::vector<ClientRole> roles);
  // The roles of a server's clients (joined.client_ranks), from its join.
  static std::vector<ClientRole> ClientRoles(const mpi::JoinResult& joined);

  int client_count() const override { return static_cast<int>(client_ranks_.size()); }
  Status TryReceive(int client, std::vector<std::byte>* buffer, int* tag, bool* received) override;
  bool TakesColumnsApart() const override { return true; }
  Status ProbeColumns(int client, bool* arrived, int64_t* bytes) override;
  Status ColumnsArrived(int client, bool* arrived) const override;
  // A datatype over the regions (an hindexed type when there are several).
  // An abandoned receive (mpi::StopWaiting) may still write into the
  // regions later: the replay gives a failed add's rows a zero leaf, so they
  // are never drawn.
  Status ReceiveColumns(int client, std::span<const std::span<std::byte>> regions) override;
  // Once `stop_waiting.terminating` returns true (SIGTERM: the server is to
  // stop), a message whose sender died after it was matched is given up on
  // (mpi::StopWaiting) instead of holding the loop for ever: TryReceive
  // logs it and receives nothing, ReceiveColumns answers UNAVAILABLE.
  // While `stop_waiting.paused` returns true (from SIGTERM until the final
  // checkpoint is complete) the transport makes no MPI call at all, since
  // any may block for as long as the launcher's grace (mpi::StopWaiting):
  // nothing is received, a message being received is given up on at once,
  // ColumnsArrived and ProbeColumns find nothing, and replies are held (a
  // sample reply's rows copied) and sent, in order, by the first Progress
  // or Drain after the pause. Held sample replies count as unread.
  void SetStopWaiting(mpi::StopWaiting stop_waiting) { stop_waiting_ = std::move(stop_waiting); }
  Status Send(int client, std::vector<std::byte> frame) override;
  Status SendSampleReply(int client, std::vector<std::byte> frame) override;
  // One message: an MPI hindexed datatype over the head and each block
  // where it lies (adjacent blocks joined into one).
  Status SendSampleReplyBlocks(int client, std::vector<std::byte> frame, size_t head_bytes,
                               std::span<const ReplyBlock> blocks, uint64_t* token) override;
  void TakeCompletedRows(std::vector<uint64_t>* tokens) override { sends_.TakeCompleted(tokens); }
  Unread UnreadSampleReplies(int client) const override;
  std::string ClientName(int client) const override { return "rank " + std::to_string(client_ranks_[client]); }
  ClientRole Role(int client) const override { return roles_[client]; }
  std::vector<std::byte> AcquireBuffer(size_t expected_bytes) override { return sends_.Acquire(expected_bytes); }
  Status Progress() override;
  Status Drain() override;

 private:
  bool Paused() const { return stop_waiting_.paused && stop_waiting_.paused(); }
  // Sends what was held during a pause.
  Status SendHeld();

  MPI_Comm comm_;
  std::vector<int> client_ranks_;
  std::vector<ClientRole> roles_;
  mpi::SendQueue sends_;
  // Each client's columns message ProbeColumns matched, until received.
  struct ProbedColumns {
    MPI_Message message = MPI_MESSAGE_NULL;
    int64_t bytes = 0;
  };
  std::vector<ProbedColumns> probed_;
  uint64_t next_token_ = 1;
  mpi::ByteBlocks blocks_;  // a datatype's blocks, reused across messages
  mpi::StopWaiting stop_waiting_;
  // Replies held while paused, oldest first; the held sample replies per client.
  struct HeldSend {
    int client;
    std::vector<std::byte> frame;
    bool sample_reply;
  };
  std::vector<HeldSend> held_;
  std::vector<Unread> held_sample_replies_;
};

}  // namespace perserve::service
