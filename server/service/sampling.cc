#include "service/sampling.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/coverage_marks.h"

namespace perserve::service {
namespace {

// Rows within this fraction of the ring ahead of its next write are copied
// into a reply sent from the store (see the header).
constexpr int64_t kCopyGuardDivisor = 8;
// Parts of a reply from the ring under this many bytes are copied behind its head.
constexpr int64_t kSmallestBlock = 1024;

// A sample deferred: what it waits for (coverage_marks.h).
void MarkWait(Admission::SampleWait wait) {
  switch (wait) {
    case Admission::SampleWait::kMinSize:
      PERSERVE_MARK("sample: waits for the minimum size");
      break;
    case Admission::SampleWait::kDraws:
      PERSERVE_MARK("sample: waits for items to draw (max_times_sampled)");
      break;
    case Admission::SampleWait::kRateLimiter:
      PERSERVE_MARK("sample: waits for the rate limiter");
      break;
    case Admission::SampleWait::kUnread:
      PERSERVE_MARK("sample: waits for its client to read earlier replies");
      break;
    case Admission::SampleWait::kNone:
      PERSERVE_MARK("sample: waits behind its client's earlier samples");
      break;
  }
}

}  // namespace

Sampling::Sampling(Parts parts, SamplingOptions options, int clients)
    : parts_(std::move(parts)), options_(options), waiting_(clients) {}

Status Sampling::CheckReplyFits(int table, int64_t count) const {
  const int64_t reply_bytes = parts_.admission->SampleReplyBytes(table, count);
  if (reply_bytes <= std::numeric_limits<int>::max()) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "a sample of {} items would be a {}-byte reply, over MPI's 2 GiB message limit", count, reply_bytes));
}

void Sampling::HandleSample(int client, const proto::Frame& frame) {
  ++parts_.counters->sample_requests;
  proto::SampleRequest request;
  Status status = proto::DecodeMeta(frame, &request);
  if (status.ok() && (request.batch_size < 1 || request.batch_size > options_.max_sample_batch)) {
    status = Status::InvalidArgument(fmt::format("batch size {} is outside [1, {}]", request.batch_size,
                                                 options_.max_sample_batch));
  }
  if (status.ok() && !frame.bulk.empty()) status = Status::InvalidArgument("a sample request carries no bulk data");
  if (status.ok()) status = parts_.replay->CheckTable(request.table);
  if (status.ok() && !(request.timeout_seconds >= 0.0)) {
    status = Status::InvalidArgument(fmt::format("timeout {} s must be >= 0", request.timeout_seconds));
  }
  if (status.ok()) status = CheckReplyFits(request.table, request.batch_size);
  if (!status.ok()) return parts_.replies->Error(client, frame.header.request_id, status);
  const Clock::time_point now = parts_.now();
  WaitingSample sample{client,  frame.header.request_id, request.batch_size, request.beta, now,
                       DeadlineAfter(now, request.timeout_seconds), /*shard_sample=*/false, {}, request.awaited,
                       request.table};
  const Admission::SampleWait wait = parts_.admission->WaitFor(sample);
  if (waiting_.count(client) == 0 && wait == Admission::SampleWait::kNone) return Serve(sample);
  Defer(std::move(sample), wait);
}

void Sampling::HandleShardSample(int client, const proto::Frame& frame) {
  ++parts_.counters->sample_requests;
  proto::ShardSampleRequest request;
  Status status = proto::DecodeMeta(frame, &request);
  if (status.ok() && (request.count < 0 || request.count > options_.max_sample_batch)) {
    status = Status::InvalidArgument(fmt::format("a shard sample of {} items is outside [0, {}]", request.count,
                                                 options_.max_sample_batch));
  }
  if (status.ok() && frame.bulk.size() != static_cast<uint64_t>(request.count) * sizeof(double)) {
    status = Status::InvalidArgument(fmt::format("a shard sample of {} items must carry {} bulk bytes, got {}",
                                                 request.count, request.count * sizeof(double), frame.bulk.size()));
  }
  if (status.ok() && !(request.timeout_seconds >= 0.0)) {
    status = Status::InvalidArgument(fmt::format("timeout {} s must be >= 0", request.timeout_seconds));
  }
  if (status.ok()) status = parts_.replay->CheckTable(request.table);
  if (status.ok()) status = CheckReplyFits(request.table, request.count);
  const Clock::time_point now = parts_.now();
  WaitingSample sample{client,  frame.header.request_id, request.count, 0.0, now,
                       DeadlineAfter(now, request.timeout_seconds), /*shard_sample=*/true, {}, request.awaited,
                       status.ok() ? request.table : 0};
  std::span<const std::byte> bulk = frame.bulk;
  if (status.ok()) status = proto::TakeArray(&bulk, static_cast<size_t>(request.count), &sample.fractions);
  if (status.ok()) status = replay::CheckFractions(sample.fractions);
  if (!status.ok()) return parts_.replies->Error(client, frame.header.request_id, status);
  // A probe without wait answers at once; other requests as samples do.
  const Admission::SampleWait wait = parts_.admission->WaitFor(sample);
  if ((request.count == 0 && !request.wait) ||
      (waiting_.count(client) == 0 && wait == Admission::SampleWait::kNone)) {
    return Serve(sample);
  }
  Defer(std::move(sample), wait);
}

void Sampling::Defer(WaitingSample sample, Admission::SampleWait wait) {
  if (parts_.admission->Hopeless(wait)) return RefuseHopeless(sample, wait);
  if (waiting_.count(sample.client) >= options_.max_waiting) {
    return parts_.replies->Error(sample.client, sample.request_id,
                                 Status::ResourceExhausted(fmt::format(
                                     "{} sample requests of this client wait already (the most one client may have "
                                     "waiting: --max-deferred-samples); receive their replies first",
                                     waiting_.count(sample.client))));
  }
  MarkWait(wait);
  ++parts_.counters->deferred_samples;
  waiting_.Push(std::move(sample));
}

void Sampling::RefuseHopeless(const WaitingSample& sample, Admission::SampleWait wait) {
  PERSERVE_MARK("sample: refused as hopeless (no actor open)");
  const std::string why = fmt::format("no actor remains open and this sample waits for {}: it can never be served",
                                      parts_.admission->Describe(wait, sample.client, sample.table));
  if (!sample.shard_sample || !sample.fractions.empty()) {
    return parts_.replies->Error(sample.client, sample.request_id, Status::FailedPrecondition(why));
  }
  spdlog::debug("{} request {}: a probe of this shard: {}", parts_.transport->ClientName(sample.client),
                sample.request_id, why);
  parts_.replies->Reply(sample.client, proto::MessageKind::kErrorReply, sample.request_id,
                        proto::ErrorReply{static_cast<int32_t>(Status::Code::kFailedPrecondition), why});
}

void Sampling::Serve(const WaitingSample& sample) {
  if (sample.shard_sample) return ServeShardSample(sample);
  ServeSample(sample);
}

void Sampling::ServeSample(const WaitingSample& sample) {
  const Status status =
      parts_.replay->mutable_table(sample.table).Sample(sample.batch_size, sample.beta, &sample_);
  if (!status.ok()) return parts_.replies->Error(sample.client, sample.request_id, status);
  (*parts_.limiters)[static_cast<size_t>(sample.table)].Sampled(sample.batch_size);
  SendDrawn(sample, proto::MessageKind::kSampleReply, proto::SerializeMeta(proto::SampleReply{sample.batch_size}),
            {std::as_bytes(std::span(sample_.keys)), std::as_bytes(std::span(sample_.weights)),
             std::as_bytes(std::span(sample_.probabilities))});
}

void Sampling::ServeShardSample(const WaitingSample& sample) {
  const int64_t count = static_cast<int64_t>(sample.fractions.size());
  replay::Replay& items = parts_.replay->mutable_table(sample.table).mutable_items();
  if (count > 0) {
    const Status status = items.SampleAt(sample.fractions, &sample_);
    if (!status.ok()) return parts_.replies->Error(sample.client, sample.request_id, status);
    (*parts_.limiters)[static_cast<size_t>(sample.table)].Sampled(count);
  } else {
    sample_.keys.clear();
    sample_.leaves.clear();
    sample_.slots.clear();
  }
  const int64_t held = parts_.admission->held_items(sample.table);
  const proto::ShardSampleReply meta{count,         held, items.counters().items_added, items.tree().Total(),
                                     items.tree().Min(), held >= parts_.admission->min_size(sample.table)};
  SendDrawn(sample, proto::MessageKind::kShardSampleReply, proto::SerializeMeta(meta),
            {std::as_bytes(std::span(sample_.keys)), std::as_bytes(std::span(sample_.leaves))});
}

void Sampling::SendDrawn(const WaitingSample& sample, proto::MessageKind kind, const std::string& meta,
                         std::initializer_list<std::span<const std::byte>> arrays) {
  for (uint64_t& key : sample_.keys) key = proto::ShardKey(options_.shard, key);  // in place: `arrays` view them
  const int client = sample.client;
  const uint64_t request_id = sample.request_id;
  const bool awaited = sample.awaited;
  const replay::StepReplay& replay = *parts_.replay;
  const replay::ItemTable& table = replay.table(sample.table);
  const int64_t count = static_cast<int64_t>(sample_.slots.size());
  const int64_t row_bytes = table.SampleItemBytes();
  const size_t column_bytes = static_cast<size_t>(count * row_bytes);
  const int64_t reply_bytes = parts_.admission->SampleReplyBytes(sample.table, count);
  if (count > 0 && awaited && table.RepliesFromRing() && options_.zero_copy_min_row_bytes >= 0 &&
      row_bytes >= options_.zero_copy_min_row_bytes) {
    return SendFromRing(sample, kind, meta, arrays, column_bytes, reply_bytes);
  }
  std::vector<std::byte> frame = parts_.transport->AcquireBuffer(static_cast<size_t>(reply_bytes));
  const std::span<std::byte> columns = proto::EncodeFrameWithTail(kind, request_id, meta, arrays, column_bytes, &frame);
  table.Assemble(sample_.slots, columns);
  // A reply without rows (a shard's state) does not count against the client's unread allowance.
  parts_.replies->Send(client, request_id, std::move(frame), /*sample_reply=*/count > 0);
}

void Sampling::SendFromRing(const WaitingSample& sample, proto::MessageKind kind, const std::string& meta,
                            std::initializer_list<std::span<const std::byte>> arrays, size_t column_bytes,
                            int64_t reply_bytes) {
  parts_.replay->table(sample.table).PlanReply(sample_.slots, &plan_);
  const store::StepStore& ring = parts_.replay->steps();
  const int64_t slots = ring.slots();
  const int64_t head_slot = ring.SlotOf(ring.next_key());
  const int64_t guard = std::max<int64_t>(1, slots / kCopyGuardDivisor);
  const int64_t smallest = std::min(kSmallestBlock, options_.zero_copy_min_row_bytes);
  const auto in_place = [&](const replay::ReplyPlan::Part& part) {
    if (part.row == nullptr) return false;   // computed
    if (part.step_slot < 0) return true;     // the zero frame: never changes
    return part.bytes >= smallest && (part.step_slot - head_slot + slots) % slots >= guard;
  };
  size_t room = 0;
  for (const replay::ReplyPlan::Part& part : plan_.parts) {
    if (!in_place(part)) room += static_cast<size_t>(part.bytes);
  }
  std::vector<std::byte> frame =
      parts_.transport->AcquireBuffer(static_cast<size_t>(reply_bytes) - column_bytes + room);
  proto::EncodeFrameHead(kind, sample.request_id, meta, arrays, column_bytes, &frame, room);
  const size_t head_bytes = frame.size() - room;
  // The copies go behind the head, in the order they are sent; the buffer
  // does not grow, so the blocks' addresses in it stay valid.
  std::byte* copy = frame.data() + head_bytes;
  blocks_.clear();
  pinned_.clear();
  for (const replay::ReplyPlan::Part& part : plan_.parts) {
    const auto bytes = static_cast<size_t>(part.bytes);
    if (in_place(part)) {
      blocks_.push_back({part.row, bytes});
      if (part.step_slot >= 0) pinned_.push_back(part.step_slot);
      continue;
    }
    std::memcpy(copy, part.row != nullptr ? part.row : plan_.scratch.data() + part.offset, bytes);
    blocks_.push_back({copy, bytes});
    copy += bytes;
  }
  uint64_t token = 0;
  const Status sent =
      parts_.transport->SendSampleReplyBlocks(sample.client, std::move(frame), head_bytes, blocks_, &token);
  if (!sent.ok()) return parts_.replies->Dropped(sample.client, sample.request_id, sent);
  if (token != 0) {
    PERSERVE_MARK("sample: reply sent from the ring, its rows pinned");
    parts_.pins->Pin(token, sample.client, pinned_);
    ++parts_.counters->zero_copy_replies;
  }
}

void Sampling::ServeWaiting(bool* any_blocked) {
  *any_blocked = false;
  if (waiting_.empty()) return;
  blocked_.assign(static_cast<size_t>(parts_.transport->client_count()), false);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const Admission::SampleWait wait =
        blocked_[it->client] ? Admission::SampleWait::kNone : parts_.admission->WaitFor(*it);
    // What it waits for can change after the last actor closed (its unread
    // replies read, then the rate limiter's): hopeless is checked each time.
    if (!blocked_[it->client] && parts_.admission->Hopeless(wait)) {
      RefuseHopeless(waiting_.Take(&it), wait);
      continue;
    }
    if (blocked_[it->client] || wait != Admission::SampleWait::kNone) {
      blocked_[it->client] = true;
      *any_blocked = true;
      ++it;
      continue;
    }
    const WaitingSample sample = waiting_.Take(&it);
    try {
      Serve(sample);
    } catch (const std::bad_alloc&) {
      parts_.replies->Error(sample.client, sample.request_id,
                            Status::ResourceExhausted("the server ran out of memory serving this sample"));
    }
  }
}

bool Sampling::LimiterHoldsOne() const {
  return std::any_of(waiting_.begin(), waiting_.end(), [this](const WaitingSample& d) {
    return parts_.admission->WaitFor(d) == Admission::SampleWait::kRateLimiter;
  });
}

void Sampling::ExpireDeadlines(Clock::time_point now) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    PERSERVE_MARK("sample: waited past its timeout");
    ++parts_.counters->deadlines_exceeded;
    const std::string why =
        fmt::format("the sample waited {:.3f} s, its timeout, for {}",
                    std::chrono::duration<double>(now - it->arrived).count(),
                    parts_.admission->Describe(parts_.admission->WaitFor(*it), it->client, it->table));
    const WaitingSample expired = waiting_.Take(&it);
    parts_.replies->Error(expired.client, expired.request_id, Status::DeadlineExceeded(why));
  }
}

void Sampling::FailHopeless() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const Admission::SampleWait wait = parts_.admission->WaitFor(*it);
    if (!parts_.admission->Hopeless(wait)) {
      ++it;
      continue;
    }
    RefuseHopeless(waiting_.Take(&it), wait);
  }
}

void Sampling::RefuseAll(const Status& error) {
  for (const WaitingSample& waiting : waiting_.TakeAll()) parts_.replies->Error(waiting.client, waiting.request_id, error);
}

}  // namespace perserve::service
