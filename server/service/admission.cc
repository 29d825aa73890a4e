#include "service/admission.h"

#include <algorithm>

#include <fmt/format.h>

#include "proto/codec.h"

namespace perserve::service {

Admission::AppendHold Admission::HeldBy(HeldAdds::ConstIterator add) const {
  const auto same_client = [client = add->client](const HeldAdd& other) { return other.client == client; };
  if (std::any_of(held_.begin(), add, same_client)) return AppendHold::kEarlierAppend;
  if (add->awaits_columns() && held_.ColumnsYetToCome(add->client, add->ticket)) return AppendHold::kColumns;
  if (PinHolds(add->steps())) return AppendHold::kRowsInFlight;
  if (LimiterHolds(add->items())) return AppendHold::kRateLimiter;
  return AppendHold::kNone;
}

std::string Admission::DescribeHeld() const {
  if (held_.empty()) return "nothing holds them";
  const HeldAdd& oldest = held_.front();
  switch (HeldBy(held_.begin())) {
    case AppendHold::kColumns:
      return fmt::format("the oldest waits for its columns, the message {} sends after the request",
                         transport_.ClientName(oldest.client));
    case AppendHold::kRowsInFlight:
      return fmt::format("the oldest would overwrite rows of a sample reply {} has not received yet",
                         transport_.ClientName(pins_.OldestClient()));
    case AppendHold::kRateLimiter:
      return "the rate limiter holds them: the learners are behind";
    default:
      return "each behind its client's earlier held adds";
  }
}

std::string Admission::DescribeWait(HeldAdds::ConstIterator add) const {
  switch (HeldBy(add)) {
    case AppendHold::kEarlierAppend:
      return "its client's earlier held adds";
    case AppendHold::kColumns:
      return fmt::format("its columns, the message {} sends after the request", transport_.ClientName(add->client));
    case AppendHold::kRowsInFlight:
      return fmt::format("rows it would overwrite, of a sample reply {} has not received yet",
                         transport_.ClientName(pins_.OldestClient()));
    case AppendHold::kRateLimiter:
      return fmt::format("the rate limiter: the actors are ahead of the learners ({})", limiter_.Describe());
    case AppendHold::kNone:
      break;
  }
  return "its turn";
}

int64_t Admission::SampleReplyBytes(int64_t batch_size) const {
  // Bounded operands (batch <= max_sample_batch, an item <= 1 GiB): no overflow.
  const int64_t meta = static_cast<int64_t>(proto::SerializeMeta(proto::SampleReply{batch_size}).size());
  return static_cast<int64_t>(proto::kFrameHeaderBytes) + meta + batch_size * (replay_.SampleItemBytes() + 3 * 8);
}

Admission::SampleWait Admission::WaitFor(const WaitingSample& sample) const {
  // A probe waits only for the minimum size (it takes nothing from the limiter).
  if (sample.shard_sample && sample.fractions.empty()) {
    return held_items() < min_size() ? SampleWait::kMinSize : SampleWait::kNone;
  }
  return WaitFor(sample.client, sample.batch_size, SampleReplyBytes(sample.batch_size));
}

Admission::SampleWait Admission::WaitFor(int client, int64_t batch_size, int64_t reply_bytes) const {
  if (held_items() < min_size()) return SampleWait::kMinSize;
  if (!limiter_.CanSample(batch_size, held_items())) return SampleWait::kRateLimiter;
  const Transport::Unread unread = transport_.UnreadSampleReplies(client);
  if (unread.replies == 0) return SampleWait::kNone;
  const bool allowed = unread.replies < allowance_.max_unread_sample_replies &&
                       unread.bytes + reply_bytes <= allowance_.max_unread_reply_bytes;
  return allowed ? SampleWait::kNone : SampleWait::kUnread;
}

std::string Admission::Describe(SampleWait wait, int client) const {
  switch (wait) {
    case SampleWait::kNone:
      return "nothing";
    case SampleWait::kMinSize:
      return fmt::format("the replay holds {} of the {} items sampling needs (--min-size-to-sample)", held_items(),
                         min_size());
    case SampleWait::kRateLimiter:
      return fmt::format("the rate limiter: the learners are ahead of the actors ({})", limiter_.Describe());
    case SampleWait::kUnread: {
      const Transport::Unread unread = transport_.UnreadSampleReplies(client);
      return fmt::format("{} to receive its {} earlier sample replies ({} bytes; --max-unread-sample-replies, "
                         "--max-unread-reply-bytes)",
                         transport_.ClientName(client), unread.replies, unread.bytes);
    }
  }
  return "unknown";
}

}  // namespace perserve::service
