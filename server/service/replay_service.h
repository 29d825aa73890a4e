// ReplayService: the replay rank's event loop over a Transport. It receives,
// dispatches and orders; each concern's state has one owner
// (docs/architecture.md, "The replay rank's components"): ClientBook
// (roles, open, last heard, a close waiting), Intake (appends, with the
// HeldAdds), Sampling (samples, with the WaitingSamples), Admission (what
// holds a request), RowPins (rows of replies in flight), CheckpointDriver
// (checkpoints, their waiters, SIGTERM's final one), RateLimiter, Shutdown,
// StatsLine; Replies sends every answer. The service asks them and acts.
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
// Several tables: every request names its table (an index; the default
// table is 0), each table has its own minimum size and rate limiter
// (ServiceOptions::tables), and an append may create items in several.
//
// A sample request waits (is deferred, its reply held back) until its table
// holds its min_size_to_sample items, and while its client has not received
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
// while the learners are ahead, appends that create items while the actors
// are. A held append is kept whole (at most max_deferred_adds per client; an
// actor's own max_in_flight bounds them first) and applied in its client's
// order; that client's close waits behind its held appends. Nothing holds
// intake once no learner remains.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "proto/codec.h"
#include "replay/episode_tracker.h"
#include "replay/step_replay.h"
#include "service/admission.h"
#include "service/checkpoint/checkpoint_driver.h"
#include "service/client_book.h"
#include "service/held_adds.h"
#include "service/intake.h"
#include "service/rate_limiter.h"
#include "service/replies.h"
#include "service/row_pins.h"
#include "service/sampling.h"
#include "service/service_clock.h"
#include "service/shutdown.h"
#include "service/stats_line.h"
#include "service/transport/transport.h"

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
  // Appends of one client the rate limiter may hold; one more is refused.
  int max_deferred_adds = 32;
  // The rate limiter (off at 0); min_size_to_sample is its M.
  double samples_per_insert = 0.0;
  double error_buffer = 0.0;
  // Per table (by index): its minimum size and rate limiter. A table past
  // this list's end (every table when it is empty) takes the three above.
  std::vector<RateLimiterOptions> tables{};
  // A receive buffer grown past this by one large message is freed after it,
  // so one huge (even rejected) frame does not pin its size for good.
  int64_t keep_receive_bytes = int64_t{16} << 20;
  // This server's index among the job's servers: the shard its keys carry
  // (proto::ShardKey); an update's key of another shard is refused.
  int shard = 0;
  int shards = 1;
  // Checkpoints (service/checkpoint/checkpoint.h): under this directory
  // (empty: none), every this many seconds (0: only when asked), writing for
  // about checkpoint_slice per pass of the loop.
  std::string checkpoint_dir{};
  double checkpoint_every_seconds = 0.0;
  std::chrono::microseconds checkpoint_slice{2000};
  // What checkpoints are written to (not owned; it outlives the service):
  // the real file system, or a test's or the simulation's stand-in.
  FileSystem* checkpoint_file_system = PosixFileSystem();
  // Sample replies of transitions whose rows are at least this many bytes go
  // out from the ring where the transport can (MPI: a datatype over the rows,
  // no gather copy) when the learner awaits them; the rows stay pinned until
  // the reply is sent, and an append that would overwrite them waits for
  // that. Smaller rows are gathered into the reply: a copy is cheaper than a
  // datatype of many tiny blocks (docs/performance.md, the crossover). < 0:
  // always gathered.
  int64_t zero_copy_min_row_bytes = 8192;
  // Polled each pass: SIGUSR1 asks for a checkpoint, SIGTERM for one and
  // then the end of serving; 0: nothing. Empty: never polled.
  std::function<int()> take_signal{};
  // Told each checkpoint's path as it begins, while the replay is what it
  // will hold (the simulation keeps what a restore of it must give). Empty: none.
  std::function<void(const std::string& path)> checkpoint_begun{};
  // The time every deadline, wait, grace and timer is measured on (empty:
  // the steady clock): the request timeouts, the periodic checkpoints and
  // their slices, the stats lines (service_clock.h). The simulation's runs
  // on its own, so they fire at the same step of every run.
  std::function<std::chrono::steady_clock::time_point()> clock{};
};

class ReplayService {
 public:
  // Serves `replay` (not owned) to the transport's clients.
  ReplayService(replay::StepReplay* replay, Transport* transport, ServiceOptions options);

  // Serves until every client has closed, then drains the last replies.
  Status Run();

  // One fair pass: at most messages_per_client_pass messages from each open client, then deferred
  // samples if the replay has grown enough, the signals, a checkpoint's slice, and the stats line
  // when it is due. Sets *handled if any message was.
  Status Step(bool* handled);

  // Every client has closed, or after SIGTERM they have had their grace
  // period (Shutdown::kGrace) to see UNAVAILABLE and close; never while the
  // final checkpoint SIGTERM asked for is being written, or waits for the
  // one being written to end.
  bool done() const {
    return !checkpoints_.final_unfinished() && (clients_.open_clients() == 0 || shutdown_.Over(Now()));
  }
  // After a restore: every table's rate limiter's and the episodes' saved state.
  void Restore(const CheckpointState& state);
  // Starts a checkpoint now (the reason goes to the log); FAILED_PRECONDITION
  // without a checkpoint directory. One already being written: the next
  // begins when it ends.
  Status RequestCheckpoint(const std::string& reason) { return checkpoints_.Request(reason); }
  const CheckpointWriter* checkpoints() const { return checkpoints_.writer(); }
  // Checkpoints the periodic timer asked for (checkpoint_every_seconds).
  int64_t periodic_checkpoints() const { return checkpoints_.periodic_requests(); }
  // The last periodic stats line ("" before the first; counters().stats_lines counts them).
  const std::string& last_stats_line() const { return last_stats_line_; }
  const ServiceCounters& counters() const { return counters_; }
  // The appends of `client` held now (rate limiter, rows in flight, columns to come).
  int held_adds(int client) const { return held_.count(client); }
  // Whether replies in flight pin rows of the ring (an append over them waits).
  bool rows_pinned() const { return !pins_.empty(); }
  replay::EpisodeTracker& episodes() { return episodes_; }
  // The summary line Run() logs at the end.
  std::string Summary() const;
  // The stats line's last part: the open clients by role, what waits, for
  // what and for how long, and the clients silent for over an interval.
  std::string DescribeClients() const;

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point Now() const { return clock_.Now(); }

  // Handle() with exceptions (allocation failures) turned into error replies.
  void HandleGuarded(int client, int tag);
  void Handle(int client, int tag);
  void HandleUpdate(int client, const proto::Frame& frame);
  void HandleClose(int client, const proto::Frame& frame);
  void HandleCheckpoint(int client, const proto::Frame& frame);
  // Each pass: deadlines, then held appends, then waiting samples, each in
  // arrival order; when the rate limiter holds both kinds and neither can go,
  // the oldest append goes anyway (logged once): a buffer too small for one
  // add and one sample must not hang the job.
  void ServeDeferred();
  // Closes `client` (its appends all applied): the reply, then the bookkeeping.
  void FinishClose(int client, uint64_t request_id);
  // SIGUSR1 and SIGTERM, polled each pass.
  void TakeSignal();
  // SIGTERM: answers every waiting and every later request UNAVAILABLE (but
  // closes), until every client has closed or the grace has passed. Called
  // when the final checkpoint begins, so nothing is acknowledged that it
  // lacks (a checkpoint is the replay as it was at its Begin).
  void StopServing();
  // At the end of each pass: the stats line, when its interval has passed.
  void MaybeLogStats();
  CheckpointState SaveState() const;

  replay::StepReplay* replay_;
  Transport* transport_;
  ServiceOptions options_;
  ServiceClock clock_;
  ServiceCounters counters_;
  Replies replies_;
  ClientBook clients_;
  std::vector<RateLimiter> limiters_;  // a table's
  HeldAdds held_;
  RowPins pins_;
  CheckpointDriver checkpoints_;
  StatsLine stats_;
  replay::EpisodeTracker episodes_;
  Admission admission_;
  Intake intake_;
  Sampling sampling_;
  Shutdown shutdown_;

  int next_client_ = 0;  // where the next round-robin pass starts
  std::vector<std::byte> receive_buffer_;
  std::vector<uint64_t> completed_tokens_;
  std::string last_stats_line_;
};

}  // namespace perserve::service
