#include "system/zmq_client.h"

#include <cstring>

#include <fmt/format.h>

#include "proto/append.h"
#include "system/zmq_transport.h"

namespace perserve::bench {
ZmqClient::ZmqClient(zmq::context_t* context, const std::string& endpoint, int index, int max_in_flight)
    : socket_(*context, zmq::socket_type::dealer), max_in_flight_(max_in_flight) {
  ConfigureSocket(&socket_);
  socket_.set(zmq::sockopt::routing_id, fmt::format("c{}", index));
  socket_.connect(endpoint);
}

Status ZmqClient::SendFrame(std::vector<std::byte> frame) { return SendOwned(&socket_, std::move(frame)); }

Status ZmqClient::Receive(proto::MessageKind expected, zmq::message_t* message, proto::Frame* frame) {
  try {
    if (!socket_.recv(*message, zmq::recv_flags::none)) return Status::Internal("zmq receive interrupted");
  } catch (const zmq::error_t& e) {
    return Status::Internal(std::string("zmq receive: ") + e.what());
  }
  PERSERVE_RETURN_IF_ERROR(proto::DecodeFrame(
      std::span(static_cast<const std::byte*>(message->data()), message->size()), frame));
  if (frame->kind() == proto::MessageKind::kErrorReply) {
    proto::ErrorReply error;
    PERSERVE_RETURN_IF_ERROR(proto::DecodeMeta(*frame, &error));
    return Status::FromCode(error.code, "server: " + error.message);
  }
  if (frame->kind() != expected) return Status::Internal(fmt::format("unexpected reply kind {}", frame->header.kind));
  return Status::Ok();
}

Status ZmqClient::CollectAdd() {
  zmq::message_t message;
  proto::Frame frame;
  PERSERVE_RETURN_IF_ERROR(Receive(proto::MessageKind::kAddReply, &message, &frame));
  proto::AddReply reply;
  PERSERVE_RETURN_IF_ERROR(proto::DecodeMeta(frame, &reply));
  items_acknowledged_ += reply.count;
  --in_flight_;
  return Status::Ok();
}

Status ZmqClient::Add(int64_t count, const std::vector<std::vector<std::byte>>& columns,
                      std::span<const double> priorities) {
  while (in_flight_ >= max_in_flight_) PERSERVE_RETURN_IF_ERROR(CollectAdd());
  // An add: an append of `count` steps at the stream's end, each its own item.
  proto::AppendMeta meta;
  meta.first_step = proto::AppendMeta::kAtEnd;
  meta.steps = count;
  meta.groups = {proto::ItemGroup{0, 0, /*item_per_step=*/true, /*has_priorities=*/true}};
  std::vector<std::span<const std::byte>> spans(columns.begin(), columns.end());
  const proto::ItemGroupSpans group{{}, priorities, {}};
  std::vector<std::byte> frame;
  proto::EncodeAppend(next_id_++, meta, spans, std::span(&group, 1), &frame);
  PERSERVE_RETURN_IF_ERROR(SendFrame(std::move(frame)));
  ++in_flight_;
  return Status::Ok();
}

Status ZmqClient::Sample(int64_t batch_size, double beta, std::vector<uint64_t>* keys) {
  std::vector<std::byte> frame;
  proto::EncodeFrame(proto::MessageKind::kSampleRequest, next_id_++, proto::SampleRequest{batch_size, beta}, {},
                     &frame);
  PERSERVE_RETURN_IF_ERROR(SendFrame(std::move(frame)));
  zmq::message_t message;
  proto::Frame reply_frame;
  PERSERVE_RETURN_IF_ERROR(Receive(proto::MessageKind::kSampleReply, &message, &reply_frame));
  proto::SampleReply reply;
  PERSERVE_RETURN_IF_ERROR(proto::DecodeMeta(reply_frame, &reply));
  keys->resize(static_cast<size_t>(reply.count));
  std::memcpy(keys->data(), reply_frame.bulk.data(), keys->size() * sizeof(uint64_t));
  return Status::Ok();
}

Status ZmqClient::Update(std::span<const uint64_t> keys, std::span<const double> priorities) {
  std::vector<std::byte> frame;
  proto::EncodeFrame(proto::MessageKind::kUpdateRequest, next_id_++,
                     proto::UpdateRequest{static_cast<int64_t>(keys.size())},
                     {std::as_bytes(keys), std::as_bytes(priorities)}, &frame);
  PERSERVE_RETURN_IF_ERROR(SendFrame(std::move(frame)));
  zmq::message_t message;
  proto::Frame reply;
  return Receive(proto::MessageKind::kUpdateReply, &message, &reply);
}

Status ZmqClient::Close() {
  while (in_flight_ > 0) PERSERVE_RETURN_IF_ERROR(CollectAdd());
  std::vector<std::byte> frame;
  proto::EncodeFrame(proto::MessageKind::kCloseRequest, next_id_++, proto::Empty{}, {}, &frame);
  PERSERVE_RETURN_IF_ERROR(SendFrame(std::move(frame)));
  zmq::message_t message;
  proto::Frame reply;
  return Receive(proto::MessageKind::kCloseReply, &message, &reply);
}

}  // namespace perserve::bench
