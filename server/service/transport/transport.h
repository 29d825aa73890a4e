// Transport: how the service exchanges frames with its clients, numbered
// 0 .. client_count() - 1. MpiTransport is the real one; LoopbackTransport
// (tests) keeps everything in memory so the service logic is testable
// without mpirun.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "perserve/status.h"

namespace perserve::service {

// What a client joined as: the service tells from it when no actor (or no
// learner) remains open. kUnknown counts as either.
enum class ClientRole { kUnknown, kActor, kLearner };

// `bytes` of a message at `data` (Transport::SendSampleReplyBlocks).
struct ReplyBlock {
  const std::byte* data;
  size_t bytes;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int client_count() const = 0;

  // Moves the next waiting message from `client`, whatever its tag (a wrong
  // tag is the service's to answer), into `buffer`, its tag into *tag, and
  // sets *received; sets it false (and returns OK) when nothing is waiting.
  // Never blocks.
  virtual Status TryReceive(int client, std::vector<std::byte>* buffer, int* tag, bool* received) = 0;

  // The columns of an add sent apart (proto::kAddColumnsTag), the message
  // `client` sends right after such an add. ProbeColumns: whether it has
  // arrived, and its bytes; never blocks. It is a matched probe (MPI_Improbe):
  // it claims the message, which from then on only ReceiveColumns receives
  // (TryReceive takes the next), so call it only to receive them at once.
  // ColumnsArrived asks the same without claiming anything (MPI_Iprobe; a
  // message claimed already counts as arrived). ReceiveColumns: receives it
  // into `regions`, one after another (their sizes add up to its bytes: the
  // caller checks that first), straight where they lie, e.g. the store; with
  // no regions it is received and dropped. Only after ProbeColumns found it.
  // A transport without them (the ZeroMQ baseline) says so, and the service
  // refuses such adds.
  virtual bool TakesColumnsApart() const { return false; }
  virtual Status ColumnsArrived(int client, bool* arrived) const {
    (void)client;
    *arrived = false;
    return Status::Unimplemented("this transport takes an add's columns in its request");
  }
  virtual Status ProbeColumns(int client, bool* arrived, int64_t* bytes) {
    (void)client;
    *arrived = false;
    *bytes = 0;
    return Status::Unimplemented("this transport takes an add's columns in its request");
  }
  virtual Status ReceiveColumns(int client, std::span<const std::span<std::byte>> regions) {
    (void)client;
    (void)regions;
    return Status::Unimplemented("this transport takes an add's columns in its request");
  }

  // Queues `frame` for `client` and returns without waiting for the client to
  // receive it (a learner busy training must not stall the server).
  virtual Status Send(int client, std::vector<std::byte> frame) = 0;

  // Send() for a sample reply, whose delivery the transport tracks until the
  // client has received it (UnreadSampleReplies).
  virtual Status SendSampleReply(int client, std::vector<std::byte> frame) { return Send(client, std::move(frame)); }

  // A sample reply sent from where its bytes lie: the message is `frame`'s
  // first `head_bytes` (the frame's head, proto::EncodeFrameHead), then
  // `blocks` in order. A block may lie in `frame` behind the head (bytes the
  // service copied or computed there) or anywhere else in the server's
  // memory (rows of the step ring). A transport that sends them without
  // copying them first (MpiTransport: one MPI datatype over them) sets
  // *token to a nonzero value: the memory the blocks name must not change
  // until TakeCompletedRows hands the token back. The default gathers them
  // behind the head (a copy) and sets *token to 0.
  virtual Status SendSampleReplyBlocks(int client, std::vector<std::byte> frame, size_t head_bytes,
                                       std::span<const ReplyBlock> blocks, uint64_t* token) {
    *token = 0;
    return SendSampleReply(client, GatherBlocks(frame, head_bytes, blocks));
  }
  // The message SendSampleReplyBlocks names, in one buffer.
  static std::vector<std::byte> GatherBlocks(std::span<const std::byte> frame, size_t head_bytes,
                                       std::span<const ReplyBlock> blocks) {
    size_t bytes = head_bytes;
    for (const ReplyBlock& block : blocks) bytes += block.bytes;
    std::vector<std::byte> message(bytes);
    std::memcpy(message.data(), frame.data(), head_bytes);
    std::byte* at = message.data() + head_bytes;
    for (const ReplyBlock& block : blocks) at = std::copy_n(block.data, block.bytes, at);
    return message;
  }
  // The tokens of the row sends completed since the last call.
  virtual void TakeCompletedRows(std::vector<uint64_t>* tokens) { tokens->clear(); }

  // The sample replies sent to `client` that it has not received yet, and
  // their bytes: the service holds further samples back past an allowance, so
  // a client that stops reading cannot grow the server's memory. A transport
  // that cannot tell (the ZeroMQ baseline: its own high-water marks) says 0.
  struct Unread {
    int replies = 0;
    int64_t bytes = 0;
  };
  virtual Unread UnreadSampleReplies(int client) const {
    (void)client;
    return {};
  }

  // How logs name a client: its MPI rank where there is one.
  virtual std::string ClientName(int client) const { return "client " + std::to_string(client); }

  virtual ClientRole Role(int client) const {
    (void)client;
    return ClientRole::kUnknown;
  }

  // A buffer to encode the next frame into; a transport may recycle the
  // buffers of completed sends (the smallest holding `expected_bytes`).
  virtual std::vector<std::byte> AcquireBuffer(size_t expected_bytes) {
    (void)expected_bytes;
    return {};
  }

  // Completes what it can of the queued sends. Never blocks.
  virtual Status Progress() = 0;

  // Waits until every queued send has completed (at shutdown).
  virtual Status Drain() = 0;
};

}  // namespace perserve::service
