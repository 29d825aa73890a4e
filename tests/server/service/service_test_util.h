// Helpers the service tests share: frames to push into a LoopbackTransport
// and replies popped from it, checked for kind and request id.
#pragma once

#include <cstddef>
#include <deque>
#include <initializer_list>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "proto/codec.h"
#include "service/loopback_transport.h"

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

}  // namespace perserve::service::service_test
