// Frames built by hand, and a client that speaks raw frames, to send what the
// library never would (the multi-rank test clients; CHECK from check.h).
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "check.h"
#include "mpi/join.h"
#include "perserve/status.h"
#include "proto/append.h"
#include "proto/codec.h"

namespace perserve::mpi_test {

template <class Meta>
std::vector<std::byte> Frame(proto::MessageKind kind, uint64_t request_id, const Meta& meta,
                             std::initializer_list<std::span<const std::byte>> bulk = {}) {
  std::vector<std::byte> frame;
  proto::EncodeFrame(kind, request_id, meta, bulk, &frame);
  return frame;
}

// An append of `count` transitions (`columns`: each column's rows) from
// index `first_step` of the sender's stream, each its own item (an add).
inline std::vector<std::byte> AddFrame(uint64_t request_id, int64_t first_step, int64_t count,
                                       std::span<const std::byte> columns, std::span<const double> priorities = {}) {
  proto::AppendMeta meta;
  meta.first_step = first_step;
  meta.steps = count;
  meta.groups = {proto::ItemGroup{0, 0, /*item_per_step=*/true, /*has_priorities=*/!priorities.empty()}};
  const std::span<const std::byte> one[] = {columns};
  const proto::ItemGroupSpans group{{}, priorities, {}};
  std::vector<std::byte> frame;
  proto::EncodeAppend(request_id, meta, one, std::span(&group, 1), &frame);
  return frame;
}

class RawClient {
 public:
  void Join() { CHECK_OK(mpi::Join(MPI_COMM_WORLD, proto::Role::kActor, nullptr, &comm_, &join_)); }

  void Send(const std::vector<std::byte>& frame, int tag = proto::kRequestTag) {
    CHECK(MPI_Send(frame.data(), static_cast<int>(frame.size()), MPI_BYTE, join_.server_rank, tag, comm_.get()) ==
              MPI_SUCCESS,
          "send");
  }

  // Waits for the next reply (kept in reply_ until the next call).
  proto::Frame Receive() {
    bool received = false;
    CHECK_OK(mpi::ReceiveBytes(comm_.get(), join_.server_rank, proto::kReplyTag, true, &reply_, &received));
    proto::Frame decoded;
    CHECK_OK(proto::DecodeFrame(reply_, &decoded));
    return decoded;
  }

  // Sends `frame` and returns the reply.
  proto::Frame Exchange(const std::vector<std::byte>& frame, int tag = proto::kRequestTag) {
    Send(frame, tag);
    return Receive();
  }

  // The status an error reply carries (checks that it is one).
  static Status ErrorIn(const proto::Frame& reply) {
    CHECK(reply.kind() == proto::MessageKind::kErrorReply, "kind {}", reply.header.kind);
    proto::ErrorReply error;
    CHECK_OK(proto::DecodeMeta(reply, &error));
    return Status::FromCode(error.code, error.message);
  }

  Status::Code ErrorOf(const std::vector<std::byte>& frame, int tag = proto::kRequestTag) {
    return ErrorIn(Exchange(frame, tag)).code();
  }

  const Schema& schema() const { return join_.served.adds; }

 private:
  mpi::Communicator comm_;
  mpi::JoinResult join_;
  std::vector<std::byte> reply_;
};

}  // namespace perserve::mpi_test
