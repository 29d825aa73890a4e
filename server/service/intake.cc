#include "service/intake.h"

#include <new>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/coverage_marks.h"

namespace perserve::service {
Intake::Intake(Parts parts, HeldAdds* held, int shard, int max_held)
    : parts_(std::move(parts)),
      held_(held),
      shard_(shard),
      max_held_(max_held),
      step_bytes_(parts_.replay->step_schema().ItemBytes()),
      item_bytes_(ItemBytesByTable(*parts_.replay)) {}

std::vector<int64_t> Intake::ItemBytesByTable(const replay::StepReplay& replay) {
  std::vector<int64_t> bytes;
  for (int t = 0; t < replay.tables(); ++t) bytes.push_back(replay.table(t).ItemColumnBytes());
  return bytes;
}

void Intake::Handle(int client, const proto::Frame& frame, std::vector<std::byte>* message) {
  ++parts_.counters->add_requests;
  const uint64_t request_id = frame.header.request_id;
  proto::DecodedAppend append;
  Status status = proto::DecodeAppend(frame, step_bytes_, item_bytes_, &append);
  const proto::AppendMeta& meta = append.meta;
  for (const proto::DecodedItems& group : append.groups) {
    if (!status.ok()) break;
    const int64_t items = group.item_per_step ? meta.steps : static_cast<int64_t>(group.item_steps.size());
    status = parts_.replay->CheckCounts(meta.steps, group.table, items, group.item_per_step);
  }
  if (status.ok()) status = parts_.replay->CheckSteps(meta.steps, meta.item_count());
  if (status.ok() && meta.columns_follow && !parts_.transport->TakesColumnsApart()) {
    status = Status::Unimplemented("this server's transport takes an append's columns in its request");
  }
  const int64_t slack = parts_.replay->steps().slack();
  if (status.ok() && meta.columns_follow && meta.steps > slack) {
    status = Status::InvalidArgument(fmt::format("an append of {} steps sends its columns apart; at most {} may (the "
                                                 "join's max_steps_apart)",
                                                 meta.steps, slack));
  }
  // Columns the client sent before this request are this request's.
  std::optional<std::vector<std::byte>> early;
  if (meta.columns_follow) early = held_->TakeEarly(client);
  if (!status.ok()) {
    if (meta.columns_follow && !early) held_->Refuse(client);  // its columns, when they come, are dropped
    return parts_.replies->Error(client, request_id, status);
  }
  const bool holds = parts_.admission->HoldsNew(client, append);
  uint64_t ticket = 0;  // an append apart's entry in its client's ledger
  if (!holds && early) return Apply(client, request_id, append, std::span<const std::byte>(*early), 0);
  if (!holds && !meta.columns_follow) return Apply(client, request_id, append, std::nullopt, 0);
  if (!holds) {
    // Its columns go straight into the ring if nothing is owed before them
    // and they are here; else it is held, its entry kept.
    ticket = held_->Owe(client);
    if (held_->ColumnsReady(client, ticket)) return Apply(client, request_id, append, std::nullopt, ticket);
  }
  if (held_->count(client) >= max_held_) {
    PERSERVE_MARK("append: refused, its client has the most held already");
    if (meta.columns_follow && !early) held_->Refuse(client, ticket);
    return parts_.replies->Error(
        client, request_id,
        Status::ResourceExhausted(fmt::format("{} adds of this client are held already ({}; the most one client may "
                                              "have waiting: --max-deferred-adds); wait for their acknowledgements",
                                              held_->count(client), parts_.admission->DescribeHeld())));
  }
  if (parts_.admission->LimiterHolds(append)) PERSERVE_MARK("append: held by the rate limiter");
  if (parts_.admission->PinHolds(meta.steps)) {
    PERSERVE_MARK("append: held by rows of a sample reply in flight");
    ++parts_.counters->pinned_adds;
    if (!pin_hold_logged_) {
      pin_hold_logged_ = true;
      spdlog::warn("intake waits: the next slots of the ring hold rows of a sample reply not received yet (sent from "
                   "the store, they must not change until it is); appends are held until it is (logged once; the "
                   "stats line counts such appends)");
    }
  }
  ++parts_.counters->deferred_adds;
  const Clock::time_point now = parts_.now();
  const Clock::time_point deadline = DeadlineAfter(now, meta.timeout_seconds);
  // The decoded append views the request's bytes, which move (not copied) with it.
  HeldAdd add{client, request_id, std::move(*message), std::move(append), now, deadline, std::move(early), ticket};
  held_->Hold(std::move(add));
}

void Intake::TakeColumns(int client, std::span<const std::byte> bytes) {
  const HeldAdds::Routed routed = held_->Route(client, bytes, max_held_);
  if (routed == HeldAdds::Routed::kEarly) PERSERVE_MARK("append: its columns came before its request");
  if (routed == HeldAdds::Routed::kKept) PERSERVE_MARK("append: its columns came while it was held");
  if (routed == HeldAdds::Routed::kEarly && !early_logged_) {
    early_logged_ = true;
    spdlog::warn("{} sent an append's columns apart (tag {}) before the append request; they are kept for its next "
                 "append apart (logged once)",
                 parts_.transport->ClientName(client), proto::kAddColumnsTag);
  }
  if (routed != HeldAdds::Routed::kStray) return;
  // Nothing to answer: the message has no request id. Said here, and counted.
  ++parts_.counters->errors;
  spdlog::warn("{} sent {} bytes of an append's columns apart (tag {}) with no append to take them ({} kept already, "
               "the most: --max-deferred-adds); dropped",
               parts_.transport->ClientName(client), bytes.size(), proto::kAddColumnsTag, max_held_);
}

Status Intake::ReceiveIntoRing(int client, int64_t steps, bool* taken) {
  bool arrived = false;
  int64_t bytes = 0;
  PERSERVE_RETURN_IF_ERROR(parts_.transport->ProbeColumns(client, &arrived, &bytes));
  if (!arrived) return Status::Internal("an append's columns were applied before they arrived");
  const int64_t expected = steps * step_bytes_;
  if (bytes != expected) {
    return Status::InvalidArgument(fmt::format("an append of {} steps sent {} bytes of columns apart; {} expected ({} "
                                               "per step: {})",
                                               steps, bytes, expected, step_bytes_,
                                               parts_.replay->step_schema().ToString()));
  }
  bytes_received_ += bytes;
  // Into the ring's free slots past its newest step: a checkpoint being
  // written first keeps the rows there it still needs.
  parts_.checkpoints->BeforeWrite(steps);
  parts_.replay->mutable_steps().WriteRegions(steps, &regions_);
  *taken = true;
  return parts_.transport->ReceiveColumns(client, regions_);
}

void Intake::Apply(int client, uint64_t request_id, const proto::DecodedAppend& append,
                   std::optional<std::span<const std::byte>> columns, uint64_t ticket) {
  const proto::AppendMeta& meta = append.meta;
  const bool owed = meta.columns_follow && !columns.has_value();
  groups_.clear();
  for (const proto::DecodedItems& group : append.groups) {
    groups_.push_back(
        replay::TableItems{group.table, group.item_per_step, group.item_steps, group.priorities, group.item_columns});
  }
  replay::AppendRequest request{client, meta.first_step,
                                store::StepBatch{meta.steps, columns.value_or(append.step_columns), false}, groups_};
  Status status;
  bool taken = false;
  if (owed) {
    status = ReceiveIntoRing(client, meta.steps, &taken);
    request.steps = store::StepBatch{meta.steps, {}, true};
  }
  if (status.ok()) status = parts_.replay->Prepare(request);
  uint64_t first_key = 0;
  if (status.ok()) {
    // A checkpoint being written keeps what the commit overwrites, in the
    // ring and every table (columns received into the ring kept theirs before).
    parts_.checkpoints->BeforeCommit(request.steps.in_ring ? 0 : meta.steps);
    status = parts_.replay->Commit(&first_key);
  }
  if (owed) held_->Settle(client, ticket, taken);
  if (!status.ok()) return parts_.replies->Error(client, request_id, status);
  if (meta.steps > 0) {
    if (request.steps.in_ring) {
      parts_.episodes->ObserveRegions(client, regions_);
    } else {
      parts_.episodes->Observe(client, meta.steps, request.steps.bulk);
    }
  }
  const int64_t items = meta.item_count();
  for (const replay::TableItems& group : groups_) {
    (*parts_.limiters)[static_cast<size_t>(group.table)].Inserted(
        group.count(meta.steps), parts_.replay->table(group.table).items().size());
  }
  parts_.replies->Reply(client, proto::MessageKind::kAddReply, request_id,
                        proto::AddReply{proto::ShardKey(shard_, first_key), items});
}

bool Intake::CanRelease(HeldAdds::Iterator add) {
  if (parts_.admission->LimiterHolds(add->append) || parts_.admission->PinHolds(add->steps())) return false;
  return held_->ColumnsReady(*add);
}

void Intake::Release(HeldAdds::Iterator* it, const Status& refusal) {
  HeldAdd add = held_->Take(it);
  try {
    if (refusal.ok()) {
      Apply(add.client, add.request_id, add.append,
            add.columns ? std::optional<std::span<const std::byte>>(*add.columns) : std::nullopt, add.ticket);
    } else {
      if (add.awaits_columns()) held_->Refuse(add.client, add.ticket);
      parts_.replies->Error(add.client, add.request_id, refusal);
    }
  } catch (const std::bad_alloc&) {
    parts_.replies->Error(add.client, add.request_id,
                          Status::ResourceExhausted("the server ran out of memory storing this add"));
  }
  if (held_->count(add.client) == 0) parts_.drained(add.client);
}

void Intake::ServeHeld(bool* any_blocked) {
  *any_blocked = false;
  if (held_->empty()) return;
  std::vector<int> blocked;  // clients whose oldest must wait: their later ones wait behind it
  for (auto it = held_->begin(); it != held_->end();) {
    const int client = it->client;
    if (std::find(blocked.begin(), blocked.end(), client) != blocked.end() || !CanRelease(it)) {
      if (std::find(blocked.begin(), blocked.end(), client) == blocked.end()) blocked.push_back(client);
      *any_blocked = true;
      ++it;
      continue;
    }
    Release(&it, Status::Ok());
  }
}

bool Intake::LetOldestThrough() {
  HeldAdds::Iterator oldest = held_->begin();
  if (oldest == held_->end() || parts_.admission->PinHolds(oldest->steps()) || !held_->ColumnsReady(*oldest)) {
    return false;
  }
  PERSERVE_MARK("rate limiter: the oldest append let through (both kinds waited)");
  if (parts_.counters->limiter_overrides++ == 0) {
    spdlog::warn("rate limiter: an add of {} items and a sample both wait on each other (--error-buffer {} is "
                 "too small for one add and one sample: it needs 2 E >= n R + b); letting the oldest add through, "
                 "now and whenever this recurs",
                 oldest->items(),
                 parts_.admission->limiter(std::max(0, parts_.admission->LimitingTable(oldest->append)))
                     .options()
                     .error_buffer);
  }
  Release(&oldest, Status::Ok());
  return true;
}

void Intake::ExpireDeadlines(Clock::time_point now) {
  for (auto it = held_->begin(); it != held_->end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    PERSERVE_MARK("append: held past its timeout");
    ++parts_.counters->deadlines_exceeded;
    const std::string why = fmt::format("the add waited {:.3f} s, its timeout, for {}; nothing of it was stored",
                                        std::chrono::duration<double>(now - it->arrived).count(),
                                        parts_.admission->DescribeWait(it));
    Release(&it, Status::DeadlineExceeded(why));
  }
}

void Intake::RefuseAll(const Status& error) {
  // The columns still to come of the held appends are dropped as they come.
  for (const HeldAdd& held : held_->TakeAll()) parts_.replies->Error(held.client, held.request_id, error);
}

}  // namespace perserve::service
