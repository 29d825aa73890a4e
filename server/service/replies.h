// Replies: how the replay rank's components answer clients. Every reply and
// error goes out through here, encoded once into a buffer the transport
// recycles, sent without waiting; an error reply is logged and counted, and a
// reply the transport refuses to send is the end of that request (logged and
// counted), never of the server.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "perserve/status.h"
#include "proto/codec.h"
#include "service/stats_line.h"
#include "service/transport/transport.h"

namespace perserve::service {

class Replies {
 public:
  Replies(Transport* transport, ServiceCounters* counters) : transport_(transport), counters_(counters) {}

  template <class Meta>
  void Reply(int client, proto::MessageKind kind, uint64_t request_id, const Meta& meta,
             std::initializer_list<std::span<const std::byte>> bulk = {}) {
    std::vector<std::byte> frame = transport_->AcquireBuffer(256);
    proto::EncodeFrame(kind, request_id, meta, bulk, &frame);
    Send(client, request_id, std::move(frame), /*sample_reply=*/false);
  }
  // An ErrorReply with `error`'s code and message; logged (warn) and counted.
  void Error(int client, uint64_t request_id, const Status& error);
  // A frame encoded already; a sample reply's delivery is tracked (Transport::SendSampleReply).
  void Send(int client, uint64_t request_id, std::vector<std::byte> frame, bool sample_reply);
  // The transport refused to send the reply to `request_id`: logged and counted.
  void Dropped(int client, uint64_t request_id, const Status& sent);

 private:
  Transport* transport_;
  ServiceCounters* counters_;
};

}  // namespace perserve::service
