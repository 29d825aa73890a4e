// Admission: whether a request may go now, and if not, what it waits for.
// It decides and describes; it owns nothing and changes nothing. The
// service's one place for these answers, asked in one order for each use
// (serving, holding one more, a DEADLINE_EXCEEDED's text, the stats line):
//
// An append is held, in this order, behind its client's earlier held
// appends, for its columns apart (not yet arrived), for rows of a reply in
// flight it would overwrite (the ring's next slots pinned), or by the rate
// limiter of a table it creates items in (the actors ahead of that table's
// learners; an append that creates no items is never held by one, nor is
// any once no learner remains).
//
// A sample waits until its table holds its minimum size, until it has the
// draws the batch needs (a table whose items leave after max_times_sampled
// draws: a queue), for the table's rate limiter (the learners ahead), or for
// its client to receive earlier replies past its allowance. With no actor open, a sample waiting for size
// or the limiter is hopeless: it can never be served.
//
// Each table has its own minimum size and rate limiter (the service's
// limiters, by table index). With one table, messages read as they always
// have; with several, they name the table.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/append.h"
#include "replay/step_replay.h"
#include "service/client_book.h"
#include "service/held_adds.h"
#include "service/rate_limiter.h"
#include "service/row_pins.h"
#include "service/transport/transport.h"
#include "service/waiting_samples.h"

namespace perserve::service {

// When a request that arrived at `arrived` with this timeout (0 or less:
// none) is past it: Clock::time_point::max() for none.
inline std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::steady_clock::time_point arrived,
                                                           double timeout_seconds) {
  if (!(timeout_seconds > 0.0) || timeout_seconds > 1e9) return std::chrono::steady_clock::time_point::max();
  return arrived + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(timeout_seconds));
}

// The per-client allowances of sample replies (ServiceOptions').
struct ReplyAllowance {
  int max_unread_sample_replies = 4;
  int64_t max_unread_reply_bytes = int64_t{256} << 20;
};

class Admission {
 public:
  enum class SampleWait { kNone, kMinSize, kDraws, kRateLimiter, kUnread };
  enum class AppendHold { kEarlierAppend, kColumns, kRowsInFlight, kRateLimiter, kNone };

  Admission(const replay::StepReplay& replay, const ClientBook& clients, const std::vector<RateLimiter>& limiters,
            const RowPins& pins, const HeldAdds& held, const Transport& transport, ReplyAllowance allowance)
      : replay_(replay),
        clients_(clients),
        limiters_(limiters),
        pins_(pins),
        held_(held),
        transport_(transport),
        allowance_(allowance) {}

  // Items of `table` that can be drawn now, and the most a sample of it waits for.
  int64_t held_items(int table) const { return replay_.table(table).items().size(); }
  int64_t min_size(int table) const { return limiter(table).options().min_size_to_sample; }
  const RateLimiter& limiter(int table) const { return limiters_[static_cast<size_t>(table)]; }
  // "" with one table, else " of table <name>" (for messages).
  std::string OfTable(int table) const;

  // Appends.
  // Whether a new append of `client` must be held: behind its held appends,
  // or by pinned rows, or by a limiter.
  bool HoldsNew(int client, const proto::DecodedAppend& append) const {
    return held_.count(client) > 0 || PinHolds(append.meta.steps) || LimiterHolds(append);
  }
  bool LimiterHolds(const proto::DecodedAppend& append) const { return LimitingTable(append) >= 0; }
  // The first table whose rate limiter holds `append`'s items back, or -1.
  // An append of steps alone inserts nothing; with nobody left to sample,
  // holding intake back would only stall the actors.
  int LimitingTable(const proto::DecodedAppend& append) const;
  // Whether writing the ring's next `steps` slots would change rows a reply in flight reads.
  bool PinHolds(int64_t steps) const {
    const store::StepStore& ring = replay_.steps();
    return steps > 0 && !pins_.empty() && pins_.Holds(ring.SlotOf(ring.next_key()), steps);
  }
  AppendHold HeldBy(HeldAdds::ConstIterator add) const;
  // Why the oldest held append waits (the stats line, the refusal of one more).
  std::string DescribeHeld() const;
  // What `add` waits for (its DEADLINE_EXCEEDED says so).
  std::string DescribeWait(HeldAdds::ConstIterator add) const;

  // Samples.
  SampleWait WaitFor(const WaitingSample& sample) const;
  SampleWait WaitFor(int client, int table, int64_t batch_size, int64_t reply_bytes) const;
  bool Hopeless(SampleWait wait) const {
    return clients_.open_actors() == 0 &&
           (wait == SampleWait::kMinSize || wait == SampleWait::kDraws || wait == SampleWait::kRateLimiter);
  }
  std::string Describe(SampleWait wait, int client, int table) const;
  // Bytes of the whole reply to a sample of `batch_size` items of `table` (at most, for a shard sample's).
  int64_t SampleReplyBytes(int table, int64_t batch_size) const;

 private:
  const replay::StepReplay& replay_;
  const ClientBook& clients_;
  const std::vector<RateLimiter>& limiters_;
  const RowPins& pins_;
  const HeldAdds& held_;
  const Transport& transport_;
  ReplyAllowance allowance_;
};

}  // namespace perserve::service
