#include "service/replies.h"

#include <spdlog/spdlog.h>

namespace perserve::service {

void Replies::Error(int client, uint64_t request_id, const Status& error) {
  ++counters_->errors;
  spdlog::warn("{} request {}: {}", transport_->ClientName(client), request_id, error.ToString());
  Reply(client, proto::MessageKind::kErrorReply, request_id,
        proto::ErrorReply{static_cast<int32_t>(error.code()), error.message()});
}

// A reply the transport will not take is the end of that request, not of the
// server: the client may wait for it, so the log says which.
void Replies::Send(int client, uint64_t request_id, std::vector<std::byte> frame, bool sample_reply) {
  const Status sent = sample_reply ? transport_->SendSampleReply(client, std::move(frame))
                                   : transport_->Send(client, std::move(frame));
  if (!sent.ok()) Dropped(client, request_id, sent);
}

void Replies::Dropped(int client, uint64_t request_id, const Status& sent) {
  ++counters_->replies_dropped;
  spdlog::error("the reply to {} request {} was dropped: {}", transport_->ClientName(client), request_id,
                sent.ToString());
}

}  // namespace perserve::service
