// Sampling: sample requests and a learner's shard samples, from the request
// to the reply. The one owner of the waiting samples (WaitingSamples): a
// request Admission says must wait is queued (at most max_waiting a client;
// a hopeless one is refused), served in arrival order once it may go, or
// answered DEADLINE_EXCEEDED past its timeout.
//
// Replies: the keys (tagged with this server's shard), weights and
// probabilities (a shard sample: keys and leaves), then the items' rows.
// Items of at least zero_copy_min_row_bytes go straight from the ring when
// the learner awaits the reply and the table's replies are rows of the ring
// (ItemTable::RepliesFromRing: transitions, n-step items and sequences with
// nothing stacked on a last axis): the table plans the reply
// (ItemTable::PlanReply) and the transport sends its parts where they lie
// (an MPI datatype over them), the steps they read pinned in RowPins until
// sent. Parts of steps within an eighth of the ring ahead of its next write
// are copied instead, so an append waits for a reply only when the reply is
// still unread after that many; so are the table's computed parts, and parts
// under kSmallestBlock bytes (or under zero_copy_min_row_bytes, where that
// is less), not worth a block of their own. Other items are assembled into
// the reply (ItemTable::Assemble).
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "proto/codec.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/admission.h"
#include "service/rate_limiter.h"
#include "service/replies.h"
#include "service/row_pins.h"
#include "service/stats_line.h"
#include "service/transport/transport.h"
#include "service/waiting_samples.h"

namespace perserve::service {

struct SamplingOptions {
  int64_t max_sample_batch = int64_t{1} << 20;
  int max_waiting = 16;  // --max-deferred-samples
  int64_t zero_copy_min_row_bytes = 8192;
  int shard = 0;
};

class Sampling {
 public:
  using Clock = std::chrono::steady_clock;
  struct Parts {
    replay::StepReplay* replay;
    Transport* transport;
    Replies* replies;
    const Admission* admission;
    std::vector<RateLimiter>* limiters;  // a table's
    RowPins* pins;
    ServiceCounters* counters;
    std::function<Clock::time_point()> now;
  };
  Sampling(Parts parts, SamplingOptions options, int clients);

  const WaitingSamples& waiting() const { return waiting_; }
  // A kSampleRequest or a kShardSampleRequest.
  void HandleSample(int client, const proto::Frame& frame);
  void HandleShardSample(int client, const proto::Frame& frame);
  // The waiting samples that may go now, in order; *any_blocked if one could not.
  void ServeWaiting(bool* any_blocked);
  // Whether a waiting sample is held by the rate limiter (which may then let an append through).
  bool LimiterHoldsOne() const;
  void ExpireDeadlines(Clock::time_point now);
  // With no actor open: refuses every waiting sample that can never be served.
  void FailHopeless();
  // `client` closed: its waiting samples are forgotten (nothing follows its close reply).
  void ForgetClient(int client) { waiting_.ForgetClient(client); }
  // Answers every waiting sample with `error` (SIGTERM).
  void RefuseAll(const Status& error);

 private:
  void Defer(WaitingSample sample, Admission::SampleWait wait);
  void Serve(const WaitingSample& sample);
  void ServeSample(const WaitingSample& sample);
  void ServeShardSample(const WaitingSample& sample);
  // Replies with what sample_ holds: `arrays` (its keys first, which this
  // tags with the shard, in place), then its rows, from the ring only when
  // `awaited` (see the top).
  void SendDrawn(const WaitingSample& sample, proto::MessageKind kind, const std::string& meta,
                 std::initializer_list<std::span<const std::byte>> arrays);
  // SendDrawn's reply from the ring (see the top).
  void SendFromRing(const WaitingSample& sample, proto::MessageKind kind, const std::string& meta,
                    std::initializer_list<std::span<const std::byte>> arrays, size_t column_bytes,
                    int64_t reply_bytes);
  // Answers FAILED_PRECONDITION to a sample that can never be served; a
  // learner's probe of this shard's state gets it as the state it asked for
  // (not counted as an error: the learner leaves an actor-less shard out).
  void RefuseHopeless(const WaitingSample& sample, Admission::SampleWait wait);
  Status CheckReplyFits(int table, int64_t count) const;

  Parts parts_;
  SamplingOptions options_;
  WaitingSamples waiting_;
  replay::SampleResult sample_;
  replay::ReplyPlan plan_;
  std::vector<ReplyBlock> blocks_;
  std::vector<int64_t> pinned_;  // the step slots of a reply's parts sent from the ring
  std::vector<bool> blocked_;
};

}  // namespace perserve::service
