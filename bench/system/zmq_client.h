// ZmqClient: the client side of the ZeroMQ baseline (bench only): the same
// frames the perserve client library sends over MPI, over a DEALER socket,
// with the same bound on adds in flight. Not a product API.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "perserve/status.h"
#include "proto/codec.h"

namespace perserve::bench {

class ZmqClient {
 public:
  ZmqClient(zmq::context_t* context, const std::string& endpoint, int index, int max_in_flight);

  // Sends count items (columns in schema order) with priorities; waits for
  // the oldest acknowledgement when max_in_flight adds are outstanding.
  Status Add(int64_t count, const std::vector<std::vector<std::byte>>& columns, std::span<const double> priorities);
  Status Sample(int64_t batch_size, double beta, std::vector<uint64_t>* keys);
  Status Update(std::span<const uint64_t> keys, std::span<const double> priorities);
  Status Close();

  int64_t items_acknowledged() const { return items_acknowledged_; }

 private:
  Status SendFrame(std::vector<std::byte> frame);
  // Receives the next reply and checks its kind.
  Status Receive(proto::MessageKind expected, zmq::message_t* message, proto::Frame* frame);
  Status CollectAdd();

  zmq::socket_t socket_;
  int max_in_flight_;
  int in_flight_ = 0;
  uint64_t next_id_ = 1;
  int64_t items_acknowledged_ = 0;
};

}  // namespace perserve::bench
