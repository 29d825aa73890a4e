// ReplayService: the replay rank's event loop over a Transport: decode each
// frame, dispatch it to the Replay, reply, keep statistics, stop when every
// client has closed.
//
// Fairness: each Step() visits the open clients round-robin and takes at most
// messages_per_client_pass messages (default 4) and about
// bytes_per_client_pass bytes (1 MiB) from each, so a client with a
// thousand queued batches waits its turn like everyone else: any client's
// request is handled within one pass over the clients after it arrives (the
// bound the tests check). Taking a few at once from a busy client spreads the
// cost of probing every client over more messages (measured 1.2-1.9x the
// small-transition intake of one per pass); one per pass serves a learner
// sooner when actors flood. Actors bound their own batches in flight
// (back-pressure), so nothing queues without limit.
//
// No request stops the loop: a frame that does not decode, a kind the service
// does not know, a request the replay rejects, or one that cannot be served
// (a reply over MPI's 2 GiB, an allocation that fails: RESOURCE_EXHAUSTED)
// gets an ErrorReply with a typed status, and nothing of that request is
// applied. A reply that cannot even be sent is logged and counted
// (replies_dropped). Only a failing transport (MPI itself) ends Run.
//
// A sample request waits (is deferred, its reply held back) until
// min_size_to_sample items are stored, and while its client has not received
// earlier sample replies past its allowance (max_unread_sample_replies, or
// max_unread_reply_bytes: one reply always goes out when none is unread);
// other clients are served meanwhile. A client may have at most
// max_deferred_samples waiting; one more is refused with RESOURCE_EXHAUSTED.
// So per client the server holds at most max(max_unread_reply_bytes, one
// reply) of unread replies plus a few small deferred records, whatever the
// client sends or fails to read (docs/operations.md states the whole bound).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "proto/codec.h"
#include "replay/episode_tracker.h"
#include "replay/replay.h"
#include "service/transport.h"

namespace perserve::service {

struct ServiceOptions {
  int64_t min_size_to_sample = 1;
  double stats_interval_seconds = 5.0;  // <= 0: no periodic stats lines
  int64_t max_sample_batch = int64_t{1} << 20;
  // The most messages one pass takes from one client (>= 1) ...
  int messages_per_client_pass = 4;
  // ... and once this many bytes have come from it in the pass, no more (the
  // first message is always taken): a few small intake batches per pass, but
  // one Atari-sized one, so large batches do not hold a learner back.
  int64_t bytes_per_client_pass = int64_t{1} << 20;
  // Scalar columns whose per-actor episodes the stats lines report (off when
  // the schema lacks either).
  std::string reward_column = "reward";
  std::string done_column = "done";
  // Per-client allowances (see the header comment).
  int max_unread_sample_replies = 4;
  int64_t max_unread_reply_bytes = int64_t{256} << 20;
  int max_deferred_samples = 16;
  // A receive buffer grown past this by one large message is freed after it,
  // so one huge (even rejected) frame does not pin its size for good.
  int64_t keep_receive_bytes = int64_t{16} << 20;
};

struct ServiceCounters {
  int64_t messages = 0;
  int64_t add_requests = 0;
  int64_t sample_requests = 0;
  int64_t update_requests = 0;
  int64_t errors = 0;
  int64_t deferred_samples = 0;  // sample requests that had to wait
  int64_t replies_dropped = 0;   // replies the transport refused to send
};

class ReplayService {
 public:
  ReplayService(replay::Replay* replay, Transport* transport, ServiceOptions options);

  // Serves until every client has closed, then drains the last replies.
  Status Run();

  // One fair pass: at most messages_per_client_pass messages from each open client, then deferred
  // samples if the replay has grown enough. Sets *handled if any message was.
  Status Step(bool* handled);

  bool done() const { return open_clients_ == 0; }
  const ServiceCounters& counters() const { return counters_; }
  replay::EpisodeTracker& episodes() { return episodes_; }
  // The summary line Run() logs at the end (also used for the stats lines).
  std::string Summary() const;

 private:
  struct DeferredSample {
    int client;
    uint64_t request_id;
    int64_t batch_size;
    double beta;
  };

  // Handle() with exceptions (allocation failures) turned into error replies.
  void HandleGuarded(int client, int tag, std::span<const std::byte> bytes);
  void Handle(int client, int tag, std::span<const std::byte> bytes);
  void HandleAdd(int client, const proto::Frame& frame);
  void HandleSample(int client, const proto::Frame& frame);
  void HandleUpdate(int client, const proto::Frame& frame);
  void HandleClose(int client, const proto::Frame& frame);
  void ServeSample(int client, uint64_t request_id, int64_t batch_size, double beta);
  void ServeDeferred();
  // The whole frame a sample of `batch_size` items is answered with.
  int64_t SampleReplyBytes(int64_t batch_size) const;
  bool ReadyToSample() const { return replay_->size() >= std::max<int64_t>(1, options_.min_size_to_sample); }
  // Whether a sample reply of `reply_bytes` may go to `client` now.
  bool CanServe(int client, int64_t reply_bytes) const;
  void ReplyError(int client, uint64_t request_id, const Status& error);
  template <class Meta>
  void Reply(int client, proto::MessageKind kind, uint64_t request_id, const Meta& meta,
             std::initializer_list<std::span<const std::byte>> bulk = {});
  void Send(int client, uint64_t request_id, std::vector<std::byte> frame, bool sample_reply);
  void MaybeLogStats();

  replay::Replay* replay_;
  Transport* transport_;
  ServiceOptions options_;
  std::vector<bool> open_;
  int open_clients_;
  int next_client_ = 0;  // where the next round-robin pass starts
  std::deque<DeferredSample> deferred_;
  std::vector<int> deferred_per_client_;
  std::vector<bool> blocked_;  // ServeDeferred's scratch
  ServiceCounters counters_;
  replay::EpisodeTracker episodes_;
  std::vector<std::byte> receive_buffer_;
  replay::SampleResult sample_;

  using Clock = std::chrono::steady_clock;
  Clock::time_point stats_since_ = Clock::now();
  replay::ReplayCounters replay_at_last_stats_;
  ServiceCounters service_at_last_stats_;
};

}  // namespace perserve::service
