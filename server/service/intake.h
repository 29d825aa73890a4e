// Intake: appends, from the decoded request to the ring and the table. The
// one owner of the held appends (HeldAdds) and the only code that applies an
// append: it decodes once (proto::DecodeAppend; a held append keeps its
// decoded form and the request's bytes, moved, not copied), asks Admission
// whether it may go, holds it or applies it, and answers it.
//
// Applying: the steps' columns come in the request, or apart (the message
// after it). Apart, they are received straight into the ring's free slots
// past its newest step (StepStore's slack; a checkpoint being written first
// keeps the rows there it still needs), then the whole append is checked
// and planned (StepReplay::Prepare: with the columns in place, their done
// values too); a refused append changes nothing, since those slots hold no
// step the ring still holds. Before the commit, a checkpoint being written
// keeps the steps and item rows the append overwrites (copy on write).
// Then the episodes' statistics, the rate limiter's count and the reply.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "proto/append.h"
#include "replay/episode_tracker.h"
#include "replay/step_replay.h"
#include "service/admission.h"
#include "service/checkpoint/checkpoint_driver.h"
#include "service/held_adds.h"
#include "service/rate_limiter.h"
#include "service/replies.h"
#include "service/stats_line.h"
#include "service/transport/transport.h"

namespace perserve::service {

class Intake {
 public:
  using Clock = std::chrono::steady_clock;
  struct Parts {
    replay::StepReplay* replay;
    Transport* transport;
    Replies* replies;
    const Admission* admission;
    CheckpointDriver* checkpoints;
    std::vector<RateLimiter>* limiters;  // a table's
    replay::EpisodeTracker* episodes;
    ServiceCounters* counters;
    std::function<Clock::time_point()> now;
    // A client's last held append has gone (its close may go now).
    std::function<void(int client)> drained;
  };
  // `max_held`: appends of one client that may be held; one more is refused.
  Intake(Parts parts, HeldAdds* held, int shard, int max_held);

  // An append request from `client`: decoded, then applied, held or refused
  // (and answered). A held one takes *message (the request's bytes; `frame`
  // views them).
  void Handle(int client, const proto::Frame& frame, std::vector<std::byte>* message);
  // A columns message the loop received from `client` (HeldAdds::Route); a
  // stray one is logged and counted as an error (it has no request id).
  void TakeColumns(int client, std::span<const std::byte> bytes);
  // The bytes of columns apart received since the last call (a pass's byte budget).
  int64_t TakeBytesReceived() { return std::exchange(bytes_received_, 0); }

  // The held appends that may go now, in order (a client's wait behind its
  // first that cannot); *any_blocked if one could not.
  void ServeHeld(bool* any_blocked);
  // The oldest held append, if its columns are here and no pinned row holds
  // it, goes now whatever the rate limiter says; whether it went.
  bool LetOldestThrough();
  // Answers DEADLINE_EXCEEDED to every held append past its timeout.
  void ExpireDeadlines(Clock::time_point now);
  // Answers every held append with `error` (SIGTERM).
  void RefuseAll(const Status& error);

 private:
  // Stores a decoded append and replies. `columns` holds its columns apart
  // when they came already; an append apart without them has entry `ticket`
  // first in its client's ledger: they are received now, or dropped.
  void Apply(int client, uint64_t request_id, const proto::DecodedAppend& append,
             std::optional<std::span<const std::byte>> columns, uint64_t ticket);
  // Receives `client`'s columns apart into the ring's next slots; *taken
  // whether they were received (else they are to be dropped).
  Status ReceiveIntoRing(int client, int64_t steps, bool* taken);
  // Takes a held append out: applies it when `refusal` is OK, else answers it.
  void Release(HeldAdds::Iterator* it, const Status& refusal);
  bool CanRelease(HeldAdds::Iterator add);
  Status Refuse(int client, uint64_t request_id, const proto::AppendMeta& meta, const Status& error);
  static std::vector<int64_t> ItemBytesByTable(const replay::StepReplay& replay);

  Parts parts_;
  HeldAdds* held_;
  int shard_;
  int max_held_;
  int64_t step_bytes_;
  std::vector<int64_t> item_bytes_;        // per table: an item's bytes of its item columns
  std::vector<replay::TableItems> groups_;  // the append being applied, a table's items each
  int64_t bytes_received_ = 0;
  bool pin_hold_logged_ = false;
  bool early_logged_ = false;
  std::vector<std::span<std::byte>> regions_;
};

}  // namespace perserve::service
