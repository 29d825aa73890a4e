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
// Bad input never stops the loop: a frame that does not decode, a kind the
// service does not know, or a request the replay rejects gets an ErrorReply
// with a typed status, and nothing of that request is applied.
//
// A sample request that arrives before min_size_to_sample items are stored is
// deferred (its reply held back) and served as soon as enough have arrived;
// other clients are served meanwhile.
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
};

struct ServiceCounters {
  int64_t messages = 0;
  int64_t add_requests = 0;
  int64_t sample_requests = 0;
  int64_t update_requests = 0;
  int64_t errors = 0;
  int64_t deferred_samples = 0;
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

  Status Handle(int client, int tag, std::span<const std::byte> bytes);
  Status HandleAdd(int client, const proto::Frame& frame);
  Status HandleSample(int client, const proto::Frame& frame);
  Status HandleUpdate(int client, const proto::Frame& frame);
  Status HandleClose(int client, const proto::Frame& frame);
  Status ServeSample(int client, uint64_t request_id, int64_t batch_size, double beta);
  Status ServeDeferred();
  bool ReadyToSample() const { return replay_->size() >= std::max<int64_t>(1, options_.min_size_to_sample); }
  Status ReplyError(int client, uint64_t request_id, const Status& error);
  template <class Meta>
  Status Reply(int client, proto::MessageKind kind, uint64_t request_id, const Meta& meta,
               std::initializer_list<std::span<const std::byte>> bulk = {});
  void MaybeLogStats();

  replay::Replay* replay_;
  Transport* transport_;
  ServiceOptions options_;
  std::vector<bool> open_;
  int open_clients_;
  int next_client_ = 0;  // where the next round-robin pass starts
  std::deque<DeferredSample> deferred_;
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
