#include "system/zmq_transport.h"

#include <cstring>

#include <fmt/format.h>

#include "proto/messages.h"

namespace perserve::bench {
namespace {

constexpr int kHighWaterMark = 10000;
// At most this many messages are moved off the socket per TryReceive, so one
// busy client's burst does not stall the pass.
constexpr int kDrainPerCall = 64;

void FreeVector(void*, void* hint) { delete static_cast<std::vector<std::byte>*>(hint); }

}  // namespace

Status SendOwned(zmq::socket_t* socket, std::vector<std::byte> frame, bool more) {
  try {
    auto* owned = new std::vector<std::byte>(std::move(frame));
    zmq::message_t message(owned->data(), owned->size(), FreeVector, owned);
    socket->send(message, more ? zmq::send_flags::sndmore : zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return Status::Internal(std::string("zmq send: ") + e.what());
  }
  return Status::Ok();
}

void ConfigureSocket(zmq::socket_t* socket) {
  socket->set(zmq::sockopt::sndhwm, kHighWaterMark);
  socket->set(zmq::sockopt::rcvhwm, kHighWaterMark);
  socket->set(zmq::sockopt::immediate, 1);
  socket->set(zmq::sockopt::linger, -1);
}

ZmqTransport::ZmqTransport(zmq::context_t* context, const std::string& endpoint, int clients)
    : socket_(*context, zmq::socket_type::router), queues_(static_cast<size_t>(clients)) {
  ConfigureSocket(&socket_);
  socket_.set(zmq::sockopt::router_mandatory, 1);  // an unroutable reply is an error, not silently dropped
  socket_.bind(endpoint);
}

Status ZmqTransport::DrainSocket() {
  for (int i = 0; i < kDrainPerCall; ++i) {
    zmq::message_t identity;
    if (!socket_.recv(identity, zmq::recv_flags::dontwait)) return Status::Ok();
    zmq::message_t body;
    if (!socket_.recv(body, zmq::recv_flags::none)) return Status::Internal("ROUTER lost a message body");
    const std::string id = identity.to_string();
    const int client = id.size() > 1 && id[0] == 'c' ? std::atoi(id.c_str() + 1) : -1;
    if (client < 0 || client >= client_count()) continue;  // not one of ours
    const auto* data = static_cast<const std::byte*>(body.data());
    queues_[client].emplace_back(data, data + body.size());
  }
  return Status::Ok();
}

Status ZmqTransport::TryReceive(int client, std::vector<std::byte>* buffer, int* tag, bool* received) {
  try {
    if (queues_[client].empty()) PERSERVE_RETURN_IF_ERROR(DrainSocket());
  } catch (const zmq::error_t& e) {
    return Status::Internal(std::string("zmq receive: ") + e.what());
  }
  *received = !queues_[client].empty();
  if (!*received) return Status::Ok();
  *buffer = std::move(queues_[client].front());
  queues_[client].pop_front();
  *tag = proto::kRequestTag;
  return Status::Ok();
}

Status ZmqTransport::Send(int client, std::vector<std::byte> frame) {
  try {
    const std::string id = fmt::format("c{}", client);
    socket_.send(zmq::buffer(id), zmq::send_flags::sndmore);
  } catch (const zmq::error_t& e) {
    return Status::Internal(std::string("zmq send: ") + e.what());
  }
  return SendOwned(&socket_, std::move(frame));
}

}  // namespace perserve::bench
