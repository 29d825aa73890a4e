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

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "proto/codec.h"
#include "replay/episode_tracker.h"
#include "replay/replay.h"
#include "service/checkpoint.h"
#include "service/rate_limiter.h"
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
};

struct ServiceCounters {
  int64_t messages = 0;
  int64_t add_requests = 0;
  int64_t sample_requests = 0;
  int64_t update_requests = 0;
  int64_t errors = 0;
  int64_t deferred_samples = 0;  // sample requests that had to wait
  int64_t replies_dropped = 0;   // replies the transport refused to send
  int64_t deferred_adds = 0;     // add requests the rate limiter held back
  int64_t deadlines_exceeded = 0;
  int64_t limiter_overrides = 0;  // adds let through so both kinds could not wait on each other
  int64_t zero_copy_replies = 0;  // sample replies sent from the store
  int64_t pinned_adds = 0;        // adds held because they would overwrite rows of a reply in flight
};

class ReplayService {
 public:
  ReplayService(replay::Replay* replay, Transport* transport, ServiceOptions options);

  // Serves until every client has closed, then drains the last replies.
  Status Run();

  // One fair pass: at most messages_per_client_pass messages from each open client, then deferred
  // samples if the replay has grown enough. Sets *handled if any message was.
  Status Step(bool* handled);

  // Every client has closed, or after SIGTERM they have had their grace
  // period (kStopGrace) to see UNAVAILABLE and close; never while the final
  // checkpoint SIGTERM asked for is being written.
  bool done() const {
    return !WritingFinalCheckpoint() && (open_clients_ == 0 || (stopping_ && Clock::now() >= stop_deadline_));
  }
  // After a restore: the rate limiter's and the episodes' saved state.
  void Restore(const CheckpointState& state);
  // Starts a checkpoint now (the reason goes to the log); FAILED_PRECONDITION
  // without a checkpoint directory. One already being written: the next
  // begins when it ends.
  Status RequestCheckpoint(const std::string& reason);
  const CheckpointWriter* checkpoints() const { return checkpoints_.get(); }
  const ServiceCounters& counters() const { return counters_; }
  // The adds of `client` held now (rate limiter, rows in flight, columns to come).
  int held_adds(int client) const { return deferred_adds_per_client_[client]; }
  replay::EpisodeTracker& episodes() { return episodes_; }
  // The summary line Run() logs at the end (also used for the stats lines).
  std::string Summary() const;
  // The stats line's last part: the open clients by role, what waits, for
  // what and for how long, and the clients silent for over an interval.
  std::string DescribeClients() const;

 private:
  using Clock = std::chrono::steady_clock;

  struct DeferredSample {
    int client;
    uint64_t request_id;
    int64_t batch_size;
    double beta;
    Clock::time_point arrived;
    Clock::time_point deadline;  // Clock::time_point::max(): none
    bool shard_sample = false;   // a ShardSampleRequest: draws at `fractions` (a probe when empty)
    std::vector<double> fractions;
    bool awaited = false;        // the client receives the reply next: its rows may go from the store
  };
  struct DeferredAdd {
    int client;
    uint64_t request_id;
    int64_t count;
    std::vector<std::byte> frame;  // the whole request, decoded again when applied
    Clock::time_point arrived;
    Clock::time_point deadline;
    bool columns_follow = false;   // its columns come apart (they wait in the transport until applied) ...
    std::optional<std::vector<std::byte>> columns{};  // ... unless the loop's receive took them first
    // Its columns come apart and are not here yet.
    bool awaits_columns() const { return columns_follow && !columns; }
  };
  // What keeps a sample from being served now.
  enum class SampleWait { kNone, kMinSize, kRateLimiter, kUnread };

  // Handle() with exceptions (allocation failures) turned into error replies.
  void HandleGuarded(int client, int tag, std::span<const std::byte> bytes);
  void Handle(int client, int tag, std::span<const std::byte> bytes);
  void HandleAdd(int client, const proto::Frame& frame, std::span<const std::byte> bytes);
  // Stores a decoded add and replies; its columns apart, if they follow,
  // go straight into the store (or are dropped, if it is refused).
  // `columns_received`: an add apart's columns, received already (a copy).
  void ApplyAdd(int client, const proto::Frame& frame, const proto::AddRequest& request,
                std::optional<std::span<const std::byte>> columns_received = std::nullopt);
  // A columns message the loop received as a message: a refused add's
  // (dropped), the oldest held add's waiting for them (kept), or a stray one
  // (dropped, logged and counted as an error: it has no request id to answer).
  void TakeColumns(int client, std::span<const std::byte> bytes);
  // The columns of `client`'s add sent apart, received into their slots.
  // *taken: whether they were (else the caller drops them).
  Status AddColumnsApart(int client, int64_t count, std::span<const double> priorities, uint64_t* first_key,
                         bool* taken);
  // Whether an add whose columns follow (columns_follow) waits for them.
  bool ColumnsMissing(int client, bool columns_follow);
  // Whether `client`'s next columns to come are not here yet, or are a refused add's.
  bool ColumnsYetToCome(int client) const;
  // The columns of a refused add are received and dropped, now or (not yet
  // arrived) as soon as they come, before any later add's of that client.
  void DropColumns(int client);
  void DropLateColumns(int client);
  void HandleSample(int client, const proto::Frame& frame);
  void HandleUpdate(int client, const proto::Frame& frame);
  void HandleClose(int client, const proto::Frame& frame);
  void HandleCheckpoint(int client, const proto::Frame& frame);
  // Begins a checkpoint for the waiters queued for the next one.
  void BeginCheckpoint();
  // Each pass: signals, the periodic timer, and a slice of the one being written.
  void StepCheckpoint();
  // Answers the waiters of the checkpoint that ended (its path, or `error`);
  // the next pass's StepCheckpoint does what follows (may run inside an add).
  void CheckpointEnded(const Status& error);
  // SIGTERM: answers every waiting and every later request UNAVAILABLE (but
  // closes), until every client has closed or kStopGrace has passed. Called
  // when the final checkpoint begins, so nothing is acknowledged that it
  // lacks (a checkpoint is the replay as it was at its Begin).
  void StopServing();
  Status StoppedError() const;
  bool WritingFinalCheckpoint() const { return stopping_ && checkpoints_ != nullptr && checkpoints_->active(); }
  static constexpr std::chrono::seconds kStopGrace{10};
  void HandleShardSample(int client, const proto::Frame& frame);
  // Queues a sample that cannot be served now, or refuses it (hopeless, or
  // too many of the client's waiting).
  void Defer(DeferredSample sample, SampleWait wait);
  void ServeSample(int client, uint64_t request_id, int64_t batch_size, double beta, bool awaited);
  void ServeShardSample(int client, uint64_t request_id, std::span<const double> fractions, bool awaited);
  // Replies with what sample_ holds: `arrays` (its keys first, which this
  // tags with the server's shard, in place), then its rows. They go from the
  // store (pinned until received) only for a reply the client `awaited`: a
  // prefetched one may stay unread while the learner waits for the actors
  // (a barrier), and rows it pinned would hold their adds for ever.
  void SendDrawn(int client, uint64_t request_id, proto::MessageKind kind, const std::string& meta, bool awaited,
                 std::initializer_list<std::span<const std::byte>> arrays);
  void Serve(const DeferredSample& sample);
  SampleWait WaitFor(const DeferredSample& sample) const;
  void ServeDeferred();
  void ServeDeferredAdds(bool* any_blocked);
  // Takes a held add out of the queue: stores it (or answers why not) when
  // `refusal` is OK, else answers `refusal`; a close that waited behind the
  // client's held adds goes once the last is out. Returns the next one.
  std::deque<DeferredAdd>::iterator ReleaseHeldAdd(std::deque<DeferredAdd>::iterator it, const Status& refusal);
  void ServeDeferredSamples(bool* any_blocked);
  // Answers DEADLINE_EXCEEDED to every waiting request past its timeout.
  void ExpireDeadlines();
  // With no actor open: fails every waiting sample that can never be served.
  void FailHopelessSamples();
  // Takes the waiting sample at *it out of the queue (*it moves to the next).
  DeferredSample TakeWaitingSample(std::deque<DeferredSample>::iterator* it);
  // Takes a waiting sample out and answers it `error`. Returns the next one.
  std::deque<DeferredSample>::iterator FailWaitingSample(std::deque<DeferredSample>::iterator it,
                                                         const Status& error);
  // Closes `client` (its adds all applied): the reply, then the bookkeeping.
  void FinishClose(int client, uint64_t request_id);
  SampleWait WaitFor(int client, int64_t batch_size) const;
  std::string Describe(SampleWait wait, int client) const;
  bool Hopeless(SampleWait wait) const {
    return open_actors_ == 0 && (wait == SampleWait::kMinSize || wait == SampleWait::kRateLimiter);
  }
  // Answers FAILED_PRECONDITION to a sample that can never be served. A
  // learner's probe of this shard's state (a shard sample of no items) gets
  // it too, but as the state it asked for, not an error: the learner leaves
  // an actor-less shard out (warned about at start), so it is neither
  // counted in `errors` nor logged as a warning.
  void RefuseHopeless(const DeferredSample& sample, SampleWait wait);
  // Whether an add of `count` items from `client` must be held: behind the
  // client's held adds, or by the rate limiter (LimiterHolds).
  bool HoldAdd(int client, int64_t count) const;
  bool LimiterHolds(int64_t count) const;
  // Whether the next `count` slots hold rows of a sample reply still in flight.
  bool PinHolds(int64_t count) const;
  // Pins the rows of sample_ that a reply sent from the store did not copy
  // (copy_row_), and unpins those the transport has finished sending.
  void Pin(uint64_t token, int client);
  void ReleasePins();
  // The client of the oldest reply still pinning rows (0 when none).
  int OldestPinnedClient() const;
  // What holds a held add, checked in this order.
  enum class AddHold { kEarlierAdd, kColumns, kRowsInFlight, kRateLimiter, kNone };
  AddHold HeldBy(std::deque<DeferredAdd>::const_iterator add) const;
  // Why the oldest held add waits (the stats line, the refusal of one more).
  std::string DescribeAddHold() const;
  // What `add` waits for (its DEADLINE_EXCEEDED says so).
  std::string DescribeAddWait(std::deque<DeferredAdd>::const_iterator add) const;
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
  Transport* transport_;
  ServiceOptions options_;
  std::vector<bool> open_;
  int open_clients_;
  int open_actors_ = 0;    // open clients that joined as actors (or unknown)
  int open_learners_ = 0;  // ... as learners (or unknown)
  RateLimiter limiter_;
  std::deque<DeferredAdd> deferred_adds_;
  std::vector<int> deferred_adds_per_client_;
  std::vector<std::optional<uint64_t>> pending_close_;  // a close's request id, waiting behind held adds
  std::vector<Clock::time_point> last_heard_;
  int next_client_ = 0;  // where the next round-robin pass starts
  std::deque<DeferredSample> deferred_;
  std::vector<int> deferred_per_client_;
  std::vector<bool> blocked_;  // ServeDeferred's scratch
  ServiceCounters counters_;
  replay::EpisodeTracker episodes_;
  std::vector<std::byte> receive_buffer_;
  std::vector<int> columns_to_drop_;   // each client's refused adds whose columns are yet to come
  int64_t columns_bytes_taken_ = 0;    // the columns apart the last message brought (the pass's byte budget)
  std::vector<std::span<std::byte>> regions_;  // where the last add apart went
  replay::SampleResult sample_;
  // Rows of sample replies in flight (sent from the store): a count per slot
  // (allocated at the first such reply), and each reply's client and slots.
  std::vector<uint32_t> pins_;
  struct PinnedReply {
    int client;
    std::vector<int64_t> slots;
  };
  std::unordered_map<uint64_t, PinnedReply> pinned_replies_;
  std::vector<uint64_t> completed_tokens_;
  std::vector<char> copy_row_;  // SendDrawn's scratch: which rows to copy
  bool pin_hold_logged_ = false;
  // Rows within capacity / kCopyGuardDivisor slots ahead of the ring's next
  // write are copied into a reply sent from the store, so an add waits for a
  // reply's rows only when the reply is still unread after that many adds.
  static constexpr int64_t kCopyGuardDivisor = 8;
  // Checkpoints: the writer (null without a directory), who waits for the one
  // being written and for the next, and what happens when it ends.
  std::unique_ptr<CheckpointWriter> checkpoints_;
  std::vector<std::pair<int, uint64_t>> checkpoint_waiters_, next_checkpoint_waiters_;
  bool checkpoint_wanted_ = false;       // the next one should begin
  bool stop_after_checkpoint_ = false;   // SIGTERM: the next checkpoint to begin is the final one
  bool stopping_ = false;
  Clock::time_point stop_deadline_;
  std::string checkpoint_reason_;
  Clock::time_point next_periodic_checkpoint_ = Clock::time_point::max();

  Clock::time_point stats_since_ = Clock::now();
  replay::ReplayCounters replay_at_last_stats_;
  ServiceCounters service_at_last_stats_;
};

}  // namespace perserve::service
