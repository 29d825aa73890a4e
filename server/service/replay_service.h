// ReplayService: the replay rank's event loop over a Transport: decode each
// frame, dispatch it to the Replay, reply, keep statistics, stop when every
// client has closed.
//
// The loop dispatches and orders; each concern's state has one owner
// (docs/architecture.md, "The replay rank's components"): ClientBook (roles,
// open, last heard, a close waiting), HeldAdds (held adds and the columns
// apart each client owes), WaitingSamples, RowPins (rows of replies in
// flight), CheckpointDriver (checkpoints, their waiters, SIGTERM's final
// one), RateLimiter, StatsLine. The service asks them and acts; none calls
// another.
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
//
// Nothing waits silently or for ever. A request may carry a timeout: past it
// the request is dropped and answered DEADLINE_EXCEEDED, saying what it
// waited for. When no actor remains open and the replay can never reach the
// sampling condition (the minimum size, or the rate limiter's), waiting and
// new samples fail at once with FAILED_PRECONDITION saying so. The stats
// line reports the open clients by role, what waits and for how long, and
// clients silent for longer than an interval.
//
// Rate limiting (RateLimiter, with --samples-per-insert > 0): samples wait
// while the learners are ahead, adds while the actors are. A held add is kept
// whole (at most max_deferred_adds per client; an actor's own max_in_flight
// bounds them first) and applied in its client's order; that client's close
// waits behind its held adds. Nothing holds intake once no learner remains.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "proto/codec.h"
#include "replay/episode_tracker.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/checkpoint_driver.h"
#include "service/client_book.h"
#include "service/held_adds.h"
#include "service/rate_limiter.h"
#include "service/row_pins.h"
#include "service/stats_line.h"
#include "service/transport.h"
#include "service/waiting_samples.h"

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
  // Adds of one client the rate limiter may hold; one more is refused.
  int max_deferred_adds = 32;
  // The rate limiter (off at 0); min_size_to_sample is its M.
  double samples_per_insert = 0.0;
  double error_buffer = 0.0;
  // A receive buffer grown past this by one large message is freed after it,
  // so one huge (even rejected) frame does not pin its size for good.
  int64_t keep_receive_bytes = int64_t{16} << 20;
  // This server's index among the job's servers: the shard its keys carry
  // (proto::ShardKey); an update's key of another shard is refused.
  int shard = 0;
  int shards = 1;
  // Checkpoints (service/checkpoint.h): under this directory (empty: none),
  // every this many seconds (0: only when asked), writing for about
  // checkpoint_slice per pass of the loop.
  std::string checkpoint_dir{};
  double checkpoint_every_seconds = 0.0;
  std::chrono::microseconds checkpoint_slice{2000};
  // Sample replies whose rows (one item, all columns) are at least this many
  // bytes go out from the store where the transport can (MPI: a datatype over
  // the rows, no gather copy) when the learner awaits them (SendDrawn); the
  // rows stay pinned until the reply is sent,
  // and an add that would overwrite them waits for that. Smaller rows are
  // gathered into the reply: a copy is cheaper than a datatype of many tiny
  // blocks (docs/performance.md, the crossover). < 0: always gathered.
  int64_t zero_copy_min_row_bytes = 8192;
  // Polled each pass: SIGUSR1 asks for a checkpoint, SIGTERM for one and
  // then the end of serving; 0: nothing. Empty: never polled.
  std::function<int()> take_signal{};
  // The time every deadline, wait and grace is measured on (empty: the
  // steady clock); the simulation's runs on its own, so timeouts fire at
  // the same step of every run.
  std::function<std::chrono::steady_clock::time_point()> clock{};
};

class ReplayService {
 public:
  ReplayService(replay::Replay* replay, Transport* transport, ServiceOptions options);
  // A server of step streams (docs/steps.md): `steps` appends the actors'
  // steps and creates the items `replay` holds (StepReplay::Create made it
  // over `replay`), and assembles the samples; neither owned.
  ReplayService(replay::Replay* replay, replay::StepReplay* steps, Transport* transport, ServiceOptions options);

  // Serves until every client has closed, then drains the last replies.
  Status Run();

  // One fair pass: at most messages_per_client_pass messages from each open client, then deferred
  // samples if the replay has grown enough. Sets *handled if any message was.
  Status Step(bool* handled);

  // Every client has closed, or after SIGTERM they have had their grace
  // period (kStopGrace) to see UNAVAILABLE and close; never while the final
  // checkpoint SIGTERM asked for is being written, or waits for the one
  // being written to end.
  bool done() const {
    return !checkpoints_.final_unfinished() &&
           (clients_.open_clients() == 0 || (stopping_ && Now() >= stop_deadline_));
  }
  // After a restore: the rate limiter's and the episodes' saved state.
  void Restore(const CheckpointState& state);
  // Starts a checkpoint now (the reason goes to the log); FAILED_PRECONDITION
  // without a checkpoint directory. One already being written: the next
  // begins when it ends.
  Status RequestCheckpoint(const std::string& reason) { return checkpoints_.Request(reason); }
  const CheckpointWriter* checkpoints() const { return checkpoints_.writer(); }
  const ServiceCounters& counters() const { return counters_; }
  // The adds of `client` held now (rate limiter, rows in flight, columns to come).
  int held_adds(int client) const { return held_.count(client); }
  replay::EpisodeTracker& episodes() { return episodes_; }
  // The summary line Run() logs at the end.
  std::string Summary() const { return service::Summary(*replay_, counters_, limiter_) + DescribeSteps(); }
  // The stats line's last part: the open clients by role, what waits, for
  // what and for how long, and the clients silent for over an interval.
  std::string DescribeClients() const;

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point Now() const { return options_.clock ? options_.clock() : Clock::now(); }
  // What keeps a sample from being served now.
  enum class SampleWait { kNone, kMinSize, kRateLimiter, kUnread };
  // What holds a held add, checked in this order.
  enum class AddHold { kEarlierAdd, kColumns, kRowsInFlight, kRateLimiter, kNone };

  // Dispatch.
  // Handle() with exceptions (allocation failures) turned into error replies.
  void HandleGuarded(int client, int tag, std::span<const std::byte> bytes);
  void Handle(int client, int tag, std::span<const std::byte> bytes);
  void HandleAdd(int client, const proto::Frame& frame, std::span<const std::byte> bytes);
  void HandleSample(int client, const proto::Frame& frame);
  void HandleShardSample(int client, const proto::Frame& frame);
  void HandleUpdate(int client, const proto::Frame& frame);
  void HandleClose(int client, const proto::Frame& frame);
  void HandleCheckpoint(int client, const proto::Frame& frame);
  // A columns message the loop received as a message (HeldAdds::Route); a
  // stray one is logged and counted as an error (it has no request id).
  void TakeColumns(int client, std::span<const std::byte> bytes);

  // Intake.
  // Stores a decoded add and replies. An add apart whose columns were not
  // received yet (`columns_received` empty) has entry `ticket` first in its
  // client's ledger: they go straight into the store, or are dropped.
  void ApplyAdd(int client, const proto::Frame& frame, const proto::AddRequest& request,
                std::optional<std::span<const std::byte>> columns_received, uint64_t ticket);
  // The columns of `client`'s add sent apart, received into their slots.
  // *taken: whether they were (else they are to be dropped).
  Status AddColumnsApart(int client, int64_t count, std::span<const double> priorities, uint64_t* first_key,
                         bool* taken);
  // Whether an add of `count` items from `client` must be held: behind the
  // client's held adds, or by the rate limiter, or rows in flight.
  bool HoldAdd(int client, int64_t count) const;
  // An add of transitions to a server of them, or an append of steps to a
  // server of step streams, with sane counts.
  Status CheckAddKind(const proto::AddRequest& request) const;
  // An append of steps (and items over them) to the client's stream.
  void ApplyAppend(int client, const proto::Frame& frame, const proto::AddRequest& request);
  // Items that can be drawn: the replay's size, less (step streams) items
  // whose steps were overwritten.
  int64_t HeldItems() const;
  // Bytes of one sampled item's columns in a reply.
  int64_t SampleRowBytes() const;
  // Step streams: "; steps: S held, I items whole (E evicted)"; "" for transitions.
  std::string DescribeSteps() const;
  bool LimiterHolds(int64_t count) const;
  bool PinHolds(int64_t count) const { return pins_.Holds(replay_->next_slot(), count); }
  // Whether the held add at `add` can go now (it is its client's oldest).
  bool CanRelease(HeldAdds::Iterator add);
  AddHold HeldBy(HeldAdds::ConstIterator add) const;
  // Why the oldest held add waits (the stats line, the refusal of one more).
  std::string DescribeAddHold() const;
  // What `add` waits for (its DEADLINE_EXCEEDED says so).
  std::string DescribeAddWait(HeldAdds::ConstIterator add) const;
  // Takes a held add out: stores it (or answers why not) when `refusal` is
  // OK, else answers `refusal`; a close that waited behind the client's held
  // adds goes once the last is out. *it moves to the next.
  void ReleaseHeldAdd(HeldAdds::Iterator* it, const Status& refusal);
  void ServeHeldAdds(bool* any_blocked);

  // Samples.
  // Queues a sample that cannot be served now, or refuses it (hopeless, or
  // too many of the client's waiting).
  void Defer(WaitingSample sample, SampleWait wait);
  void Serve(const WaitingSample& sample);
  void ServeSample(int client, uint64_t request_id, int64_t batch_size, double beta, bool awaited);
  void ServeShardSample(int client, uint64_t request_id, std::span<const double> fractions, bool awaited);
  // Replies with what sample_ holds: `arrays` (its keys first, which this
  // tags with the server's shard, in place), then its rows. They go from the
  // store (pinned until received) only for a reply the client `awaited`: a
  // prefetched one may stay unread while the learner waits for the actors
  // (a barrier), and rows it pinned would hold their adds for ever.
  void SendDrawn(int client, uint64_t request_id, proto::MessageKind kind, const std::string& meta, bool awaited,
                 std::initializer_list<std::span<const std::byte>> arrays);
  SampleWait WaitFor(const WaitingSample& sample) const;
  SampleWait WaitFor(int client, int64_t batch_size) const;
  std::string Describe(SampleWait wait, int client) const;
  bool Hopeless(SampleWait wait) const {
    return clients_.open_actors() == 0 && (wait == SampleWait::kMinSize || wait == SampleWait::kRateLimiter);
  }
  // Answers FAILED_PRECONDITION to a sample that can never be served. A
  // learner's probe of this shard's state (a shard sample of no items) gets
  // it too, but as the state it asked for, not an error: the learner leaves
  // an actor-less shard out (warned about at start), so it is neither
  // counted in `errors` nor logged as a warning.
  void RefuseHopeless(const WaitingSample& sample, SampleWait wait);
  void ServeWaitingSamples(bool* any_blocked);
  // With no actor open: fails every waiting sample that can never be served.
  void FailHopelessSamples();

  // Each pass: held adds, then waiting samples, in arrival order.
  void ServeDeferred();
  // Answers DEADLINE_EXCEEDED to every waiting request past its timeout.
  void ExpireDeadlines();

  // Closing and stopping.
  // Closes `client` (its adds all applied): the reply, then the bookkeeping.
  void FinishClose(int client, uint64_t request_id);
  // SIGUSR1 and SIGTERM, polled each pass.
  void TakeSignal();
  // SIGTERM: answers every waiting and every later request UNAVAILABLE (but
  // closes), until every client has closed or kStopGrace has passed. Called
  // when the final checkpoint begins, so nothing is acknowledged that it
  // lacks (a checkpoint is the replay as it was at its Begin).
  void StopServing();
  Status StoppedError() const;
  static constexpr std::chrono::seconds kStopGrace{10};

  // Replies.
  static Clock::time_point DeadlineAfter(Clock::time_point arrived, double timeout_seconds);
  // The whole frame a sample of `batch_size` items is answered with (at most,
  // for a shard sample's reply).
  int64_t SampleReplyBytes(int64_t batch_size) const;
  // A request's timeout: >= 0 (NaN refused). A sample's reply: within one MPI message.
  static Status CheckTimeout(double timeout_seconds);
  Status CheckReplyFits(int64_t count) const;
  void ReplyError(int client, uint64_t request_id, const Status& error);
  template <class Meta>
  void Reply(int client, proto::MessageKind kind, uint64_t request_id, const Meta& meta,
             std::initializer_list<std::span<const std::byte>> bulk = {});
  void Send(int client, uint64_t request_id, std::vector<std::byte> frame, bool sample_reply);
  // A reply the transport refused to send: counted and logged.
  void ReplyDropped(int client, uint64_t request_id, const Status& sent);
  void MaybeLogStats();

  replay::Replay* replay_;
  replay::StepReplay* steps_ = nullptr;  // step streams; nullptr: transitions
  Transport* transport_;
  ServiceOptions options_;
  ClientBook clients_;
  RateLimiter limiter_;
  HeldAdds held_;
  WaitingSamples waiting_;
  RowPins pins_;
  CheckpointDriver checkpoints_;
  StatsLine stats_;
  ServiceCounters counters_;
  replay::EpisodeTracker episodes_;

  int next_client_ = 0;        // where the next round-robin pass starts
  std::vector<bool> blocked_;  // ServeDeferred's scratch: clients whose oldest must wait
  std::vector<std::byte> receive_buffer_;
  int64_t columns_bytes_taken_ = 0;            // the columns apart the last message brought (the pass's byte budget)
  std::vector<std::span<std::byte>> regions_;  // where the last add apart went
  replay::SampleResult sample_;
  std::vector<uint64_t> completed_tokens_;
  std::vector<char> copy_row_;  // SendDrawn's scratch: which rows to copy
  bool pin_hold_logged_ = false;
  // Rows within capacity / kCopyGuardDivisor slots ahead of the ring's next
  // write are copied into a reply sent from the store, so an add waits for a
  // reply's rows only when the reply is still unread after that many adds.
  static constexpr int64_t kCopyGuardDivisor = 8;
  bool stopping_ = false;
  // kStopGrace after SIGTERM's checkpoint is complete (max while it is unfinished).
  Clock::time_point stop_deadline_ = Clock::time_point::max();
};

}  // namespace perserve::service
