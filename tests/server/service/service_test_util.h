// Helpers the service tests share: frames to push into a LoopbackTransport
// and replies popped from it, checked for kind and request id.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <initializer_list>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "proto/codec.h"
#include "replay/replay.h"
#include "server/service/loopback_transport.h"
#include "service/replay_service.h"

namespace perserve::service::service_test {

template <class Meta>
std::vector<std::byte> Frame(proto::MessageKind kind, uint64_t request_id, const Meta& meta,
                             std::initializer_list<std::span<const std::byte>> bulk = {}) {
  std::vector<std::byte> frame;
  proto::EncodeFrame(kind, request_id, meta, bulk, &frame);
  return frame;
}

// Pops `client`'s oldest reply into `kept` (the decoded frame points into it)
// and checks its kind and request id; an empty frame when there is none.
inline proto::Frame PopReply(LoopbackTransport& transport, int client, proto::MessageKind kind, uint64_t request_id,
                             std::deque<std::vector<std::byte>>& kept) {
  std::deque<std::vector<std::byte>>& outbox = transport.outbox(client);
  EXPECT_FALSE(outbox.empty()) << "client " << client << ": no reply for request " << request_id;
  if (outbox.empty()) return {};
  kept.push_back(std::move(outbox.front()));
  outbox.pop_front();
  proto::Frame frame;
  EXPECT_TRUE(proto::DecodeFrame(kept.back(), &frame).ok());
  EXPECT_EQ(frame.kind(), kind) << "client " << client << ", request " << request_id;
  EXPECT_EQ(frame.header.request_id, request_id) << "client " << client;
  return frame;
}

// A replay (CPU tree, alpha 1) behind a ReplayService on a LoopbackTransport,
// and the steps and replies a test needs.
class ServiceFixture : public ::testing::Test {
 protected:
  // roles: what each client joined as (empty: unknown, counted as both).
  void Start(int clients, int64_t capacity, const Schema& schema, ServiceOptions options,
             const std::vector<ClientRole>& roles = {}) {
    transport_ = std::make_unique<LoopbackTransport>(clients);
    for (size_t client = 0; client < roles.size(); ++client) transport_->SetRole(static_cast<int>(client), roles[client]);
    const Status created =
        replay::Replay::Create(replay::ReplayOptions{capacity, 1.0, tree::Device::kCpu, 11}, schema, &replay_);
    ASSERT_TRUE(created.ok()) << created.ToString();
    service_ = std::make_unique<ReplayService>(replay_.get(), transport_.get(), options);
  }

  // Default options but for the minimum size, and no stats lines.
  static ServiceOptions Options(int64_t min_size) {
    ServiceOptions options;
    options.min_size_to_sample = min_size;
    options.stats_interval_seconds = 0.0;
    return options;
  }

  void Step() {
    bool handled = false;
    ASSERT_TRUE(service_->Step(&handled).ok());
  }

  proto::Frame Reply(int client, proto::MessageKind kind, uint64_t request_id) {
    return PopReply(*transport_, client, kind, request_id, kept_);
  }

  // The status an error reply to request_id carries.
  Status ErrorStatus(int client, uint64_t request_id) {
    proto::ErrorReply error;
    EXPECT_TRUE(proto::DecodeMeta(Reply(client, proto::MessageKind::kErrorReply, request_id), &error).ok());
    return Status::FromCode(error.code, error.message);
  }

  std::unique_ptr<LoopbackTransport> transport_;
  std::unique_ptr<replay::Replay> replay_;
  std::unique_ptr<ReplayService> service_;
  std::deque<std::vector<std::byte>> kept_;  // the replies' bytes, which decoded frames point into
};

}  // namespace perserve::service::service_test
