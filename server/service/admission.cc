#include "service/admission.h"

#include <algorithm>

#include <fmt/format.h>

#include "proto/codec.h"

namespace perserve::service {

std::string Admission::OfTable(int table) const {
  return replay_.tables() == 1 ? std::string() : fmt::format(" of table {}", replay_.table(table).name());
}

int Admission::LimitingTable(const proto::DecodedAppend& append) const {
  if (clients_.open_learners() == 0) return -1;
  for (const proto::DecodedItems& group : append.groups) {
    const int64_t items = group.item_per_step ? append.meta.steps : static_cast<int64_t>(group.item_steps.size());
    if (items > 0 && !limiter(group.table).CanInsert(items, held_items(group.table))) return group.table;
  }
  return -1;
}

Admission::AppendHold Admission::HeldBy(HeldAdds::ConstIterator add) const {
  const auto same_client = [client = add->client](const HeldAdd& other) { return other.client == client; };
  if (std::any_of(held_.begin(), add, same_client)) return AppendHold::kEarlierAppend;
  if (add->awaits_columns() && held_.ColumnsYetToCome(add->client, add->ticket)) return AppendHold::kColumns;
  if (PinHolds(add->steps())) return AppendHold::kRowsInFlight;
  if (LimiterHolds(add->append)) return AppendHold::kRateLimiter;
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
      return fmt::format("the rate limiter{} holds them: the learners are behind",
                         OfTable(LimitingTable(oldest.append)));
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
    case AppendHold::kRateLimiter: {
      const int table = LimitingTable(add->append);
      return fmt::format("the rate limiter{}: the actors are ahead of the learners ({})", OfTable(table),
                         limiter(table).Describe());
    }
    case AppendHold::kNone:
      break;
  }
  return "its turn";
}

int64_t Admission::SampleReplyBytes(int table, int64_t batch_size) const {
  // Bounded operands (batch <= max_sample_batch, an item <= 1 GiB): no overflow.
  const int64_t meta = static_cast<int64_t>(proto::SerializeMeta(proto::SampleReply{batch_size}).size());
  return static_cast<int64_t>(proto::kFrameHeaderBytes) + meta + batch_size * (replay_.table(table).SampleItemBytes() + 3 * 8);
}

Admission::SampleWait Admission::WaitFor(const WaitingSample& sample) const {
  // A probe waits only for the minimum size (it takes nothing from the limiter).
  if (sample.shard_sample && sample.fractions.empty()) {
    return held_items(sample.table) < min_size(sample.table) ? SampleWait::kMinSize : SampleWait::kNone;
  }
  return WaitFor(sample.client, sample.table, sample.batch_size, SampleReplyBytes(sample.table, sample.batch_size));
}

Admission::SampleWait Admission::WaitFor(int client, int table, int64_t batch_size, int64_t reply_bytes) const {
  if (held_items(table) < min_size(table)) return SampleWait::kMinSize;
  const int64_t draws_left = replay_.table(table).items().draws_left();
  if (draws_left >= 0 && draws_left < batch_size) return SampleWait::kDraws;
  if (!limiter(table).CanSample(batch_size, held_items(table))) return SampleWait::kRateLimiter;
  const Transport::Unread unread = transport_.UnreadSampleReplies(client);
  if (unread.replies == 0) return SampleWait::kNone;
  const bool allowed = unread.replies < allowance_.max_unread_sample_replies &&
                       unread.bytes + reply_bytes <= allowance_.max_unread_reply_bytes;
  return allowed ? SampleWait::kNone : SampleWait::kUnread;
}

std::string Admission::Describe(SampleWait wait, int client, int table) const {
  switch (wait) {
    case SampleWait::kNone:
      return "nothing";
    case SampleWait::kMinSize:
      return fmt::format("the {} holds {} of the {} items sampling needs (--min-size-to-sample)",
                         replay_.tables() == 1 ? std::string("replay") : "table " + replay_.table(table).name(),
                         held_items(table), min_size(table));
    case SampleWait::kDraws: {
      const replay::Replay& items = replay_.table(table).items();
      return fmt::format("new items{}: its {} items have {} draws left, fewer than the sample's (each item is drawn "
                         "at most {} times: max_times_sampled)",
                         OfTable(table), items.size(), items.draws_left(), items.options().max_times_sampled);
    }
    case SampleWait::kRateLimiter:
      return fmt::format("the rate limiter{}: the learners are ahead of the actors ({})", OfTable(table),
                         limiter(table).Describe());
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
