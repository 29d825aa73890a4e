// ZmqTransport: the replay service's Transport over ZeroMQ, for the MPI vs
// ZeroMQ baseline (bench/system). The server binds one ROUTER socket; each
// client connects a DEALER whose routing id is "c<index>". Messages drained
// from the socket are queued per client, so the service's round-robin pass
// treats both transports alike.
//
// Settings, as a ZeroMQ user tuning for throughput would choose them:
// - ipc:// on one node (no TCP stack), tcp:// across nodes;
// - zero-copy sends: a reply's buffer is handed to zmq_msg_init_data and freed
//   by ZeroMQ once sent, never copied;
// - high-water marks raised to 10000 messages, so bursts queue instead of
//   blocking; ZMQ_IMMEDIATE so nothing queues for a peer not yet connected;
// - one I/O thread (enough for one socket; more measured no better on ipc);
// - ZeroMQ's own opportunistic batching of small messages is left on.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "service/transport/transport.h"

namespace perserve::bench {

// Options every socket in the baseline gets.
void ConfigureSocket(zmq::socket_t* socket);

// Sends `frame` as the last part of a message without copying it: ZeroMQ
// frees the buffer once sent. `more` sends it as a non-final part.
Status SendOwned(zmq::socket_t* socket, std::vector<std::byte> frame, bool more = false);

class ZmqTransport final : public service::Transport {
 public:
  ZmqTransport(zmq::context_t* context, const std::string& endpoint, int clients);

  int client_count() const override { return static_cast<int>(queues_.size()); }
  Status TryReceive(int client, std::vector<std::byte>* buffer, int* tag, bool* received) override;
  Status Send(int client, std::vector<std::byte> frame) override;
  Status Progress() override { return Status::Ok(); }
  Status Drain() override { return Status::Ok(); }  // the socket's linger sends what is queued

 private:
  Status DrainSocket();

  zmq::socket_t socket_;
  std::vector<std::deque<std::vector<std::byte>>> queues_;
};

}  // namespace perserve::bench
