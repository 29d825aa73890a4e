#include "service/replay_service.h"

#include <csignal>
#include <cstring>
#include <limits>
#include <new>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace perserve::service {
namespace {

std::vector<ClientRole> RolesOf(const Transport& transport) {
  std::vector<ClientRole> roles;
  for (int client = 0; client < transport.client_count(); ++client) roles.push_back(transport.Role(client));
  return roles;
}

}  // namespace

ReplayService::ReplayService(replay::Replay* replay, Transport* transport, ServiceOptions options)
    : ReplayService(replay, nullptr, transport, std::move(options)) {}

ReplayService::ReplayService(replay::Replay* replay, replay::StepReplay* steps, Transport* transport,
                             ServiceOptions options)
    : replay_(replay),
      steps_(steps),
      transport_(transport),
      options_(options),
      clients_(RolesOf(*transport), Now()),
      limiter_(RateLimiterOptions{options.samples_per_insert, options.error_buffer,
                                  std::max<int64_t>(1, options.min_size_to_sample)}),
      held_(transport, transport->client_count()),
      waiting_(transport->client_count()),
      pins_(replay->capacity()),
      checkpoints_(replay,
                   CheckpointDriverOptions{options.checkpoint_dir, options.shard, options.shards,
                                           options.checkpoint_every_seconds, options.checkpoint_slice},
                   CheckpointDriver::Hooks{
                       [this] {
                         CheckpointState state;
                         state.schema = replay_->store().schema().ToString();
                         state.capacity = replay_->capacity();
                         state.alpha = replay_->alpha();
                         state.shard = options_.shard;
                         state.shards = options_.shards;
                         state.replay = replay_->State();
                         state.limiter = limiter_.State();
                         state.episodes = episodes_.carries();
                         return state;
                       },
                       [this](int client, uint64_t request_id, const Status& result) {
                         if (!result.ok()) return ReplyError(client, request_id, result);
                         Reply(client, proto::MessageKind::kCheckpointReply, request_id,
                               proto::CheckpointReply{checkpoints_.writer()->last_path()});
                       },
                       [this] { StopServing(); }},
                   steps),
      stats_(options.stats_interval_seconds),
      episodes_(steps != nullptr ? steps->step_schema() : replay->store().schema(), options_.reward_column,
                options_.done_column, transport->client_count(), /*bootstrap_steps=*/steps != nullptr) {
  // Samples of steps are assembled (stacked, n-step returns) into the reply: there are no rows to lend.
  if (steps_ != nullptr) options_.zero_copy_min_row_bytes = -1;
}

void ReplayService::Restore(const CheckpointState& state) {
  limiter_.Restore(state.limiter);
  // A restored step stream begins a new episode: its episode in progress ended with the actor that appended it.
  if (steps_ == nullptr) episodes_.RestoreCarries(state.episodes);
}

Status ReplayService::Run() {
  int idle_passes = 0;
  while (!done()) {
    bool handled = false;
    PERSERVE_RETURN_IF_ERROR(Step(&handled));
    PERSERVE_RETURN_IF_ERROR(transport_->Progress());
    MaybeLogStats();
    // Poll hard while busy; when nothing has come for a while, yield the core
    // (clients often share the node, and with oversubscription the core).
    idle_passes = handled ? 0 : idle_passes + 1;
    if (idle_passes > 256) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  PERSERVE_RETURN_IF_ERROR(transport_->Drain());
  spdlog::info("final: {}", Summary());
  return Status::Ok();
}

Status ReplayService::Step(bool* handled) {
  *handled = false;
  transport_->TakeCompletedRows(&completed_tokens_);
  pins_.Release(completed_tokens_);
  const int clients = clients_.size();
  for (int visited = 0; visited < clients; ++visited) {
    const int client = (next_client_ + visited) % clients;
    int64_t bytes = 0;
    for (int taken = 0; taken < options_.messages_per_client_pass && bytes < options_.bytes_per_client_pass &&
                        clients_.open(client);
         ++taken) {
      bool received = false;
      int tag = 0;
      PERSERVE_RETURN_IF_ERROR(transport_->TryReceive(client, &receive_buffer_, &tag, &received));
      if (!received) break;
      *handled = true;
      clients_.Heard(client, Now());
      ++counters_.messages;
      columns_bytes_taken_ = 0;
      HandleGuarded(client, tag, receive_buffer_);
      bytes += static_cast<int64_t>(receive_buffer_.size()) + columns_bytes_taken_;
      if (static_cast<int64_t>(receive_buffer_.capacity()) > options_.keep_receive_bytes) {
        std::vector<std::byte>().swap(receive_buffer_);
      }
    }
  }
  if (clients > 0) next_client_ = (next_client_ + 1) % clients;
  ServeDeferred();
  TakeSignal();
  checkpoints_.Step(stopping_);
  // The clients' grace after SIGTERM runs from the end of the final
  // checkpoint: while it is written perserve-server makes no MPI call (its
  // transport pauses), so a checkpoint longer than the grace left live
  // clients none to see UNAVAILABLE and close.
  if (stopping_ && stop_deadline_ == Clock::time_point::max() && !checkpoints_.final_unfinished()) {
    stop_deadline_ = Now() + kStopGrace;
  }
  return Status::Ok();
}

namespace {

// The request id of a frame too broken to decode, if its header has one.
uint64_t RequestIdOf(std::span<const std::byte> bytes) {
  proto::FrameHeader header;
  if (bytes.size() < sizeof(header)) return 0;
  std::memcpy(&header, bytes.data(), sizeof(header));
  return header.request_id;
}

}  // namespace

void ReplayService::HandleGuarded(int client, int tag, std::span<const std::byte> bytes) {
  try {
    Handle(client, tag, bytes);
  } catch (const std::bad_alloc&) {
    ReplyError(client, RequestIdOf(bytes),
               Status::ResourceExhausted("the server ran out of memory handling this request"));
  } catch (const std::exception& e) {
    ReplyError(client, RequestIdOf(bytes), Status::Internal(std::string("handling this request failed: ") + e.what()));
  }
}

void ReplayService::Handle(int client, int tag, std::span<const std::byte> bytes) {
  if (tag == proto::kAddColumnsTag) return TakeColumns(client, bytes);
  proto::Frame frame;
  const Status decoded = proto::DecodeFrame(bytes, &frame);
  if (tag != proto::kRequestTag) {
    return ReplyError(client, RequestIdOf(bytes),
                      Status::Unimplemented(fmt::format("unknown message tag {} (requests use tag {}, an add's "
                                                        "columns apart tag {})",
                                                        tag, proto::kRequestTag, proto::kAddColumnsTag)));
  }
  if (!decoded.ok()) return ReplyError(client, RequestIdOf(bytes), decoded);
  if (stopping_ && frame.kind() != proto::MessageKind::kCloseRequest) {
    return ReplyError(client, frame.header.request_id, StoppedError());
  }
  switch (frame.kind()) {
    case proto::MessageKind::kAddRequest:
      return HandleAdd(client, frame, bytes);
    case proto::MessageKind::kSampleRequest:
      return HandleSample(client, frame);
    case proto::MessageKind::kShardSampleRequest:
      return HandleShardSample(client, frame);
    case proto::MessageKind::kUpdateRequest:
      return HandleUpdate(client, frame);
    case proto::MessageKind::kCloseRequest:
      return HandleClose(client, frame);
    case proto::MessageKind::kCheckpointRequest:
      return HandleCheckpoint(client, frame);
    default:
      return ReplyError(client, frame.header.request_id,
                        Status::Unimplemented(fmt::format("unknown message kind {}", frame.header.kind)));
  }
}

void ReplayService::TakeColumns(int client, std::span<const std::byte> bytes) {
  if (held_.Route(client, bytes) != HeldAdds::Routed::kStray) return;
  // Nothing to answer: the message has no request id. Said here, and counted.
  ++counters_.errors;
  spdlog::warn("{} sent {} bytes of an add's columns apart (tag {}) with no add waiting for them (send them right "
               "after their add request, with columns_follow); dropped",
               transport_->ClientName(client), bytes.size(), proto::kAddColumnsTag);
}

void ReplayService::HandleAdd(int client, const proto::Frame& frame, std::span<const std::byte> bytes) {
  ++counters_.add_requests;
  proto::AddRequest request;
  Status status = proto::DecodeMeta(frame, &request);
  if (status.ok()) status = CheckAddKind(request);
  if (status.ok()) status = CheckTimeout(request.timeout_seconds);
  if (status.ok() && request.columns_follow && !transport_->TakesColumnsApart()) {
    return ReplyError(client, frame.header.request_id,
                      Status::Unimplemented("this server's transport takes an add's columns in its request"));
  }
  if (!status.ok()) {
    if (request.columns_follow) held_.Refuse(client);
    return ReplyError(client, frame.header.request_id, status);
  }
  const int64_t items = request.stored_items();
  uint64_t ticket = 0;  // an add apart's entry in its client's ledger
  if (!HoldAdd(client, items)) {
    if (!request.columns_follow) return ApplyAdd(client, frame, request, std::nullopt, 0);
    // Its columns go straight into the store if nothing is owed before them
    // and they are here; else it is held, its entry kept.
    ticket = held_.Owe(client);
    if (held_.ColumnsReady(client, ticket)) return ApplyAdd(client, frame, request, std::nullopt, ticket);
  }
  if (held_.count(client) >= options_.max_deferred_adds) {
    if (request.columns_follow) held_.Refuse(client, ticket);
    return ReplyError(client, frame.header.request_id,
                      Status::ResourceExhausted(fmt::format(
                          "{} adds of this client are held already ({}; the most one client may have waiting: "
                          "--max-deferred-adds); wait for their acknowledgements",
                          held_.count(client), DescribeAddHold())));
  }
  if (PinHolds(items)) {
    ++counters_.pinned_adds;
    if (!pin_hold_logged_) {
      pin_hold_logged_ = true;
      spdlog::warn("intake waits: the next slots of the ring hold rows of a sample reply {} has not received yet "
                   "(sent from the store, they must not change until it has); adds are held until it receives it "
                   "(logged once; the stats line counts such adds)",
                   transport_->ClientName(pins_.OldestClient()));
    }
  }
  ++counters_.deferred_adds;
  const Clock::time_point now = Now();
  HeldAdd add{client, frame.header.request_id, items, std::vector<std::byte>(bytes.begin(), bytes.end()),
              now, DeadlineAfter(now, request.timeout_seconds), request.columns_follow};
  add.ticket = ticket;
  held_.Hold(std::move(add));
}

Status ReplayService::CheckAddKind(const proto::AddRequest& request) const {
  if (request.is_append() != (steps_ != nullptr)) {
    return Status::FailedPrecondition(
        steps_ != nullptr ? "this server stores step streams (--n-step or --sequence-length): actors append steps and "
                            "create items over them (Append; docs/steps.md), they do not add transitions"
                          : "this server stores transitions: append steps only to a server started with --n-step or "
                            "--sequence-length (docs/steps.md)");
  }
  if (!request.is_append()) return replay_->CheckAddCount(request.count);
  if ((request.count == 0 && request.items == 0) || request.columns_follow) {
    return Status::InvalidArgument(fmt::format("an append of {} steps and {} items{} is malformed: one > 0, with "
                                               "the steps in the request",
                                               request.count, request.items,
                                               request.columns_follow ? " with its columns apart" : ""));
  }
  // Checked here, before it can be held: one that can never be stored must not wait for the rate limiter.
  return steps_->CheckCounts(request.count, request.items);
}

int64_t ReplayService::SampleRowBytes() const {
  return steps_ != nullptr ? steps_->SampleItemBytes() : replay_->store().schema().ItemBytes();
}

std::string ReplayService::DescribeSteps() const {
  if (steps_ == nullptr) return "";
  const store::StepStore& ring = steps_->steps();
  return fmt::format("; steps: {} held, {} appended, {} items whole ({} evicted with their steps)",
                     ring.next_key() - ring.oldest_key(), ring.next_key(), replay_->live_size(),
                     replay_->size() - replay_->live_size());
}

int64_t ReplayService::HeldItems() const { return steps_ != nullptr ? replay_->live_size() : replay_->size(); }

bool ReplayService::HoldAdd(int client, int64_t count) const {
  // Behind its own held adds, or the limiter's, or rows a learner has yet to receive.
  return held_.count(client) > 0 || LimiterHolds(count) || PinHolds(count);
}

bool ReplayService::LimiterHolds(int64_t count) const {
  // Nobody left to sample: holding intake back would only stall the actors.
  return clients_.open_learners() > 0 && !limiter_.CanInsert(count, HeldItems());
}

void ReplayService::ApplyAdd(int client, const proto::Frame& frame, const proto::AddRequest& request,
                             std::optional<std::span<const std::byte>> columns_received, uint64_t ticket) {
  if (request.is_append()) return ApplyAppend(client, frame, request);
  const uint64_t priority_bytes = request.has_priorities ? static_cast<uint64_t>(request.count) * sizeof(double) : 0;
  Status status;
  if (frame.bulk.size() < priority_bytes || (request.columns_follow && frame.bulk.size() != priority_bytes)) {
    status = Status::InvalidArgument(
        fmt::format("an add of {} items {}carries {} bulk bytes", request.count,
                    request.columns_follow ? "with its columns apart " : "with priorities ", frame.bulk.size()));
  }
  uint64_t first_key = 0;
  const bool columns_owed = request.columns_follow && !columns_received.has_value();
  bool columns_taken = false;
  if (status.ok()) {
    const auto columns = columns_received.value_or(frame.bulk.first(frame.bulk.size() - priority_bytes));
    std::span<const std::byte> rest = frame.bulk.last(priority_bytes);
    std::vector<double> priorities;
    status = proto::TakeArray(&rest, request.has_priorities ? static_cast<size_t>(request.count) : 0, &priorities);
    // A checkpoint being written keeps the rows this add overwrites: it
    // writes them first (an error there abandons the checkpoint, not the add).
    if (status.ok()) checkpoints_.BeforeAdd(request.count);
    if (status.ok() && columns_owed) {
      status = AddColumnsApart(client, request.count, priorities, &first_key, &columns_taken);
    } else if (status.ok()) {
      status = replay_->Add(request.count, columns, priorities, &first_key);
      if (status.ok()) episodes_.Observe(client, request.count, columns);
    }
  }
  if (columns_owed) held_.Settle(client, ticket, columns_taken);
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  limiter_.Inserted(request.count, HeldItems());
  Reply(client, proto::MessageKind::kAddReply, frame.header.request_id,
        proto::AddReply{proto::ShardKey(options_.shard, first_key), request.count});
}

void ReplayService::ApplyAppend(int client, const proto::Frame& frame, const proto::AddRequest& request) {
  // The bulk: the steps' columns, the items' steps, their priorities, their columns.
  const int64_t step_bytes = steps_->step_schema().ItemBytes();
  const int64_t item_bytes = steps_->ItemColumnBytes();
  const uint64_t priority_count = request.has_priorities ? static_cast<uint64_t>(request.items) : 0;
  std::span<const std::byte> bulk = frame.bulk;
  // Counts bounded by the bulk first, so the products below cannot overflow.
  const bool fits = static_cast<uint64_t>(request.count) <= bulk.size() / static_cast<uint64_t>(step_bytes) &&
                    static_cast<uint64_t>(request.items) <= bulk.size() / 8;
  const uint64_t expected = fits ? static_cast<uint64_t>(request.count * step_bytes) +
                                       static_cast<uint64_t>(request.items) * (8 + static_cast<uint64_t>(item_bytes)) +
                                       priority_count * 8
                                 : 0;
  Status status;
  if (!fits || bulk.size() != expected) {
    status = Status::InvalidArgument(fmt::format(
        "an append of {} steps ({} bytes each: {}) and {} items ({}{} bytes of item columns each) carries {} bulk "
        "bytes",
        request.count, step_bytes, steps_->step_schema().ToString(), request.items,
        request.has_priorities ? "with priorities, " : "", item_bytes, bulk.size()));
  }
  const std::span<const std::byte> step_columns = fits ? bulk.first(static_cast<size_t>(request.count * step_bytes))
                                                       : std::span<const std::byte>{};
  uint64_t first_key = 0;
  if (status.ok()) {
    bulk = bulk.subspan(step_columns.size());
    std::vector<int64_t> item_steps;
    std::vector<double> priorities;
    status = proto::TakeArray(&bulk, static_cast<size_t>(request.items), &item_steps);
    if (status.ok()) status = proto::TakeArray(&bulk, static_cast<size_t>(priority_count), &priorities);
    // A checkpoint being written keeps the steps and item rows this append
    // overwrites: it writes them first (an error abandons the checkpoint).
    if (status.ok()) checkpoints_.BeforeAppend(request.count, request.items);
    if (status.ok()) {
      status = steps_->Append(client, request.first_step, request.count, step_columns, item_steps, priorities, bulk,
                              &first_key);
    }
  }
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  if (request.count > 0) episodes_.Observe(client, request.count, step_columns);
  limiter_.Inserted(request.items, HeldItems());
  Reply(client, proto::MessageKind::kAddReply, frame.header.request_id,
        proto::AddReply{proto::ShardKey(options_.shard, first_key), request.items});
}

Status ReplayService::AddColumnsApart(int client, int64_t count, std::span<const double> priorities,
                                      uint64_t* first_key, bool* taken) {
  bool arrived = false;
  int64_t bytes = 0;
  PERSERVE_RETURN_IF_ERROR(transport_->ProbeColumns(client, &arrived, &bytes));
  if (!arrived) return Status::Internal("an add's columns were applied before they arrived");
  const int64_t expected = count * replay_->store().schema().ItemBytes();
  if (bytes != expected) {
    return Status::InvalidArgument(fmt::format("an add of {} items sent {} bytes of columns apart; {} expected ({} "
                                               "per item: {})",
                                               count, bytes, expected, replay_->store().schema().ItemBytes(),
                                               replay_->store().schema().ToString()));
  }
  columns_bytes_taken_ += bytes;
  // Received straight into the slots, once every check has passed.
  PERSERVE_RETURN_IF_ERROR(
      replay_->AddInPlace(count, priorities,
                          [&](std::span<const std::span<std::byte>> regions) {
                            *taken = true;
                            regions_.assign(regions.begin(), regions.end());
                            return transport_->ReceiveColumns(client, regions);
                          },
                          first_key));
  episodes_.ObserveRegions(client, regions_);
  return Status::Ok();
}

ReplayService::Clock::time_point ReplayService::DeadlineAfter(Clock::time_point arrived, double timeout_seconds) {
  if (!(timeout_seconds > 0.0) || timeout_seconds > 1e9) return Clock::time_point::max();
  return arrived + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
}

int64_t ReplayService::SampleReplyBytes(int64_t batch_size) const {
  // Bounded operands (batch <= max_sample_batch, an item <= 1 GiB): no overflow.
  const int64_t meta = static_cast<int64_t>(proto::SerializeMeta(proto::SampleReply{batch_size}).size());
  return static_cast<int64_t>(proto::kFrameHeaderBytes) + meta + batch_size * (SampleRowBytes() + 3 * 8);
}

Status ReplayService::CheckTimeout(double timeout_seconds) {
  if (timeout_seconds >= 0.0) return Status::Ok();
  return Status::InvalidArgument(fmt::format("timeout {} s must be >= 0", timeout_seconds));
}

Status ReplayService::CheckReplyFits(int64_t count) const {
  const int64_t reply_bytes = SampleReplyBytes(count);
  if (reply_bytes <= std::numeric_limits<int>::max()) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "a sample of {} items would be a {}-byte reply, over MPI's 2 GiB message limit", count, reply_bytes));
}

ReplayService::SampleWait ReplayService::WaitFor(const WaitingSample& sample) const {
  // A probe waits only for the minimum size (it takes nothing from the limiter).
  if (sample.shard_sample && sample.fractions.empty()) {
    return HeldItems() < limiter_.options().min_size_to_sample ? SampleWait::kMinSize : SampleWait::kNone;
  }
  return WaitFor(sample.client, sample.batch_size);
}

ReplayService::SampleWait ReplayService::WaitFor(int client, int64_t batch_size) const {
  if (HeldItems() < limiter_.options().min_size_to_sample) return SampleWait::kMinSize;
  if (!limiter_.CanSample(batch_size, HeldItems())) return SampleWait::kRateLimiter;
  const Transport::Unread unread = transport_->UnreadSampleReplies(client);
  if (unread.replies == 0) return SampleWait::kNone;
  const bool allowed = unread.replies < options_.max_unread_sample_replies &&
                       unread.bytes + SampleReplyBytes(batch_size) <= options_.max_unread_reply_bytes;
  return allowed ? SampleWait::kNone : SampleWait::kUnread;
}

std::string ReplayService::Describe(SampleWait wait, int client) const {
  switch (wait) {
    case SampleWait::kNone:
      return "nothing";
    case SampleWait::kMinSize:
      return fmt::format("the replay holds {} of the {} items sampling needs (--min-size-to-sample)",
                         HeldItems(), limiter_.options().min_size_to_sample);
    case SampleWait::kRateLimiter:
      return fmt::format("the rate limiter: the learners are ahead of the actors ({})", limiter_.Describe());
    case SampleWait::kUnread: {
      const Transport::Unread unread = transport_->UnreadSampleReplies(client);
      return fmt::format("{} to receive its {} earlier sample replies ({} bytes; --max-unread-sample-replies, "
                         "--max-unread-reply-bytes)",
                         transport_->ClientName(client), unread.replies, unread.bytes);
    }
  }
  return "unknown";
}

void ReplayService::RefuseHopeless(const WaitingSample& sample, SampleWait wait) {
  const std::string why = fmt::format("no actor remains open and this sample waits for {}: it can never be served",
                                      Describe(wait, sample.client));
  if (!sample.shard_sample || !sample.fractions.empty()) {
    return ReplyError(sample.client, sample.request_id, Status::FailedPrecondition(why));
  }
  spdlog::debug("{} request {}: a probe of this shard: {}", transport_->ClientName(sample.client), sample.request_id,
                why);
  Reply(sample.client, proto::MessageKind::kErrorReply, sample.request_id,
        proto::ErrorReply{static_cast<int32_t>(Status::Code::kFailedPrecondition), why});
}

void ReplayService::HandleSample(int client, const proto::Frame& frame) {
  ++counters_.sample_requests;
  proto::SampleRequest request;
  Status status = proto::DecodeMeta(frame, &request);
  if (status.ok() && (request.batch_size < 1 || request.batch_size > options_.max_sample_batch)) {
    status = Status::InvalidArgument(fmt::format("batch size {} is outside [1, {}]", request.batch_size,
                                                 options_.max_sample_batch));
  }
  if (status.ok() && !frame.bulk.empty()) status = Status::InvalidArgument("a sample request carries no bulk data");
  if (status.ok()) status = CheckTimeout(request.timeout_seconds);
  if (status.ok()) status = CheckReplyFits(request.batch_size);
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  const Clock::time_point now = Now();
  WaitingSample sample{client, frame.header.request_id, request.batch_size, request.beta, now,
                       DeadlineAfter(now, request.timeout_seconds), /*shard_sample=*/false, {}, request.awaited};
  const SampleWait wait = WaitFor(sample);
  if (waiting_.count(client) == 0 && wait == SampleWait::kNone) return Serve(sample);
  Defer(std::move(sample), wait);
}

void ReplayService::Defer(WaitingSample sample, SampleWait wait) {
  if (Hopeless(wait)) return RefuseHopeless(sample, wait);
  if (waiting_.count(sample.client) >= options_.max_deferred_samples) {
    return ReplyError(sample.client, sample.request_id,
                      Status::ResourceExhausted(fmt::format(
                          "{} sample requests of this client wait already (the most one client may have waiting: "
                          "--max-deferred-samples); receive their replies first",
                          waiting_.count(sample.client))));
  }
  ++counters_.deferred_samples;
  waiting_.Push(std::move(sample));
}

void ReplayService::HandleShardSample(int client, const proto::Frame& frame) {
  ++counters_.sample_requests;
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
  if (status.ok()) status = CheckTimeout(request.timeout_seconds);
  if (status.ok()) status = CheckReplyFits(request.count);
  const Clock::time_point now = Now();
  WaitingSample sample{client, frame.header.request_id, request.count, 0.0, now,
                       DeadlineAfter(now, request.timeout_seconds), /*shard_sample=*/true, {}, request.awaited};
  std::span<const std::byte> bulk = frame.bulk;
  if (status.ok()) status = proto::TakeArray(&bulk, static_cast<size_t>(request.count), &sample.fractions);
  if (status.ok()) status = replay::CheckFractions(sample.fractions);
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  // A probe without wait answers at once; other requests as samples do.
  const SampleWait wait = WaitFor(sample);
  if ((request.count == 0 && !request.wait) || (waiting_.count(client) == 0 && wait == SampleWait::kNone)) {
    return Serve(sample);
  }
  Defer(std::move(sample), wait);
}

void ReplayService::Serve(const WaitingSample& sample) {
  if (sample.shard_sample) return ServeShardSample(sample.client, sample.request_id, sample.fractions, sample.awaited);
  ServeSample(sample.client, sample.request_id, sample.batch_size, sample.beta, sample.awaited);
}

void ReplayService::ServeShardSample(int client, uint64_t request_id, std::span<const double> fractions,
                                     bool awaited) {
  const int64_t count = static_cast<int64_t>(fractions.size());
  if (count > 0) {
    const Status status = replay_->SampleAt(fractions, &sample_);
    if (!status.ok()) return ReplyError(client, request_id, status);
    limiter_.Sampled(count);
  } else {
    sample_.keys.clear();
    sample_.leaves.clear();
    sample_.slots.clear();
  }
  const proto::ShardSampleReply meta{count,
                                     HeldItems(),
                                     replay_->counters().items_added,
                                     replay_->tree().Total(),
                                     replay_->tree().Min(),
                                     HeldItems() >= limiter_.options().min_size_to_sample};
  SendDrawn(client, request_id, proto::MessageKind::kShardSampleReply, proto::SerializeMeta(meta), awaited,
            {std::as_bytes(std::span(sample_.keys)), std::as_bytes(std::span(sample_.leaves))});
}

void ReplayService::ServeSample(int client, uint64_t request_id, int64_t batch_size, double beta, bool awaited) {
  const Status status = replay_->Sample(batch_size, beta, &sample_);
  if (!status.ok()) return ReplyError(client, request_id, status);
  limiter_.Sampled(batch_size);
  SendDrawn(client, request_id, proto::MessageKind::kSampleReply, proto::SerializeMeta(proto::SampleReply{batch_size}),
            awaited,
            {std::as_bytes(std::span(sample_.keys)), std::as_bytes(std::span(sample_.weights)),
             std::as_bytes(std::span(sample_.probabilities))});
}

void ReplayService::SendDrawn(int client, uint64_t request_id, proto::MessageKind kind, const std::string& meta,
                              bool awaited,
                              std::initializer_list<std::span<const std::byte>> arrays) {
  for (uint64_t& key : sample_.keys) key = proto::ShardKey(options_.shard, key);  // in place: `arrays` view them
  const int64_t count = static_cast<int64_t>(sample_.slots.size());
  const int64_t row_bytes = SampleRowBytes();
  const size_t column_bytes = static_cast<size_t>(count * row_bytes);
  if (count > 0 && awaited && options_.zero_copy_min_row_bytes >= 0 && row_bytes >= options_.zero_copy_min_row_bytes) {
    // Rows the next adds will soon overwrite are copied into the reply; the
    // others go from the store and stay pinned while the reply travels.
    const int64_t capacity = replay_->capacity();
    const int64_t head_slot = replay_->next_slot();
    const int64_t guard = std::max<int64_t>(1, capacity / kCopyGuardDivisor);
    copy_row_.resize(sample_.slots.size());
    for (size_t i = 0; i < sample_.slots.size(); ++i) {
      copy_row_[i] = static_cast<char>((sample_.slots[i] - head_slot + capacity) % capacity < guard);
    }
    const size_t room = Transport::CopiedRowBytes(replay_->store(), copy_row_);
    std::vector<std::byte> head =
        transport_->AcquireBuffer(static_cast<size_t>(SampleReplyBytes(count)) - column_bytes + room);
    proto::EncodeFrameHead(kind, request_id, meta, arrays, column_bytes, &head, room);
    uint64_t token = 0;
    const Status sent =
        transport_->SendSampleReplyRows(client, std::move(head), replay_->store(), sample_.slots, copy_row_, &token);
    if (!sent.ok()) return ReplyDropped(client, request_id, sent);
    if (token != 0) {
      pins_.Pin(token, client, sample_.slots, copy_row_);
      ++counters_.zero_copy_replies;
    }
    return;
  }
  std::vector<std::byte> frame = transport_->AcquireBuffer(static_cast<size_t>(SampleReplyBytes(count)));
  const std::span<std::byte> columns = proto::EncodeFrameWithTail(kind, request_id, meta, arrays, column_bytes, &frame);
  if (steps_ != nullptr) {
    steps_->Assemble(sample_.slots, columns);
  } else {
    replay_->store().Gather(sample_.slots, columns);
  }
  // A reply without rows (a shard's state) does not count against the client's unread allowance.
  Send(client, request_id, std::move(frame), /*sample_reply=*/count > 0);
}

ReplayService::AddHold ReplayService::HeldBy(HeldAdds::ConstIterator add) const {
  const auto same_client = [client = add->client](const HeldAdd& other) { return other.client == client; };
  if (std::any_of(held_.begin(), add, same_client)) return AddHold::kEarlierAdd;
  if (add->awaits_columns() && held_.ColumnsYetToCome(add->client, add->ticket)) return AddHold::kColumns;
  if (PinHolds(add->count)) return AddHold::kRowsInFlight;
  if (LimiterHolds(add->count)) return AddHold::kRateLimiter;
  return AddHold::kNone;
}

bool ReplayService::CanRelease(HeldAdds::Iterator add) {
  if (LimiterHolds(add->count) || PinHolds(add->count)) return false;
  return held_.ColumnsReady(*add);
}

std::string ReplayService::DescribeAddHold() const {
  if (held_.empty()) return "nothing holds them";
  const HeldAdd& oldest = held_.front();
  switch (HeldBy(held_.begin())) {
    case AddHold::kColumns:
      return fmt::format("the oldest waits for its columns, the message {} sends after the request",
                         transport_->ClientName(oldest.client));
    case AddHold::kRowsInFlight:
      return fmt::format("the oldest would overwrite rows of a sample reply {} has not received yet",
                         transport_->ClientName(pins_.OldestClient()));
    case AddHold::kRateLimiter:
      return "the rate limiter holds them: the learners are behind";
    default:
      return "each behind its client's earlier held adds";
  }
}

std::string ReplayService::DescribeAddWait(HeldAdds::ConstIterator add) const {
  switch (HeldBy(add)) {
    case AddHold::kEarlierAdd:
      return "its client's earlier held adds";
    case AddHold::kColumns:
      return fmt::format("its columns, the message {} sends after the request", transport_->ClientName(add->client));
    case AddHold::kRowsInFlight:
      return fmt::format("rows it would overwrite, of a sample reply {} has not received yet",
                         transport_->ClientName(pins_.OldestClient()));
    case AddHold::kRateLimiter:
      return fmt::format("the rate limiter: the actors are ahead of the learners ({})", limiter_.Describe());
    case AddHold::kNone:
      break;
  }
  return "its turn";
}

// Held adds, then waiting samples, each in arrival order; once one of a
// client's cannot go, its later ones wait behind it (a client's requests of a
// kind are answered in order). When the rate limiter holds both kinds and
// neither can go, the oldest add goes anyway (logged once): a buffer too
// small for one add and one sample must not hang the job.
void ReplayService::ServeDeferred() {
  ExpireDeadlines();
  bool adds_blocked = false, samples_blocked = false;
  ServeHeldAdds(&adds_blocked);
  ServeWaitingSamples(&samples_blocked);
  if (!adds_blocked || !samples_blocked || held_.empty()) return;
  const bool limiter_holds_samples = std::any_of(waiting_.begin(), waiting_.end(), [this](const WaitingSample& d) {
    return WaitFor(d) == SampleWait::kRateLimiter;
  });
  const HeldAdds::Iterator oldest = held_.begin();
  if (!limiter_holds_samples || PinHolds(oldest->count) || !held_.ColumnsReady(*oldest)) {
    return;
  }
  if (counters_.limiter_overrides++ == 0) {
    spdlog::warn("rate limiter: an add of {} items and a sample both wait on each other (--error-buffer {} is "
                 "too small for one add and one sample: it needs 2 E >= n R + b); letting the oldest add through, "
                 "now and whenever this recurs",
                 oldest->count, options_.error_buffer);
  }
  HeldAdds::Iterator it = held_.begin();
  ReleaseHeldAdd(&it, Status::Ok());
  ServeWaitingSamples(&samples_blocked);
}

void ReplayService::ReleaseHeldAdd(HeldAdds::Iterator* it, const Status& refusal) {
  HeldAdd add = held_.Take(it);
  Status status = refusal;
  proto::Frame frame;
  proto::AddRequest request;
  if (status.ok()) status = proto::DecodeFrame(add.frame, &frame);
  if (status.ok()) status = proto::DecodeMeta(frame, &request);
  try {
    if (status.ok()) {
      ApplyAdd(add.client, frame, request,
               add.columns ? std::optional<std::span<const std::byte>>(*add.columns) : std::nullopt, add.ticket);
    } else {
      if (add.awaits_columns()) held_.Refuse(add.client, add.ticket);
      ReplyError(add.client, add.request_id, status);
    }
  } catch (const std::bad_alloc&) {
    ReplyError(add.client, add.request_id,
               Status::ResourceExhausted("the server ran out of memory storing this add"));
  }
  if (held_.count(add.client) == 0 && clients_.pending_close(add.client)) {
    FinishClose(add.client, *clients_.TakePendingClose(add.client));
  }
}

void ReplayService::ServeHeldAdds(bool* any_blocked) {
  *any_blocked = false;
  if (held_.empty()) return;
  blocked_.assign(static_cast<size_t>(clients_.size()), false);
  for (auto it = held_.begin(); it != held_.end();) {
    const int client = it->client;
    if (blocked_[client] || !CanRelease(it)) {
      blocked_[client] = true;
      *any_blocked = true;
      ++it;
      continue;
    }
    ReleaseHeldAdd(&it, Status::Ok());
  }
}

void ReplayService::ServeWaitingSamples(bool* any_blocked) {
  *any_blocked = false;
  if (waiting_.empty()) return;
  blocked_.assign(static_cast<size_t>(clients_.size()), false);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const SampleWait wait = blocked_[it->client] ? SampleWait::kNone : WaitFor(*it);
    // What it waits for can change after the last actor closed (its unread
    // replies read, then the rate limiter's): hopeless is checked each time.
    if (!blocked_[it->client] && Hopeless(wait)) {
      RefuseHopeless(waiting_.Take(&it), wait);
      continue;
    }
    if (blocked_[it->client] || wait != SampleWait::kNone) {
      blocked_[it->client] = true;
      *any_blocked = true;
      ++it;
      continue;
    }
    const WaitingSample sample = waiting_.Take(&it);
    try {
      Serve(sample);
    } catch (const std::bad_alloc&) {
      ReplyError(sample.client, sample.request_id,
                 Status::ResourceExhausted("the server ran out of memory serving this sample"));
    }
  }
}

void ReplayService::ExpireDeadlines() {
  const Clock::time_point now = Now();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    ++counters_.deadlines_exceeded;
    const std::string why = fmt::format("the sample waited {:.3f} s, its timeout, for {}",
                                        std::chrono::duration<double>(now - it->arrived).count(),
                                        Describe(WaitFor(*it), it->client));
    const WaitingSample expired = waiting_.Take(&it);
    ReplyError(expired.client, expired.request_id, Status::DeadlineExceeded(why));
  }
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    ++counters_.deadlines_exceeded;
    const std::string why = fmt::format("the add waited {:.3f} s, its timeout, for {}; nothing of it was stored",
                                        std::chrono::duration<double>(now - it->arrived).count(), DescribeAddWait(it));
    ReleaseHeldAdd(&it, Status::DeadlineExceeded(why));
  }
}

void ReplayService::FailHopelessSamples() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const SampleWait wait = WaitFor(*it);
    if (!Hopeless(wait)) {
      ++it;
      continue;
    }
    RefuseHopeless(waiting_.Take(&it), wait);
  }
}

void ReplayService::HandleUpdate(int client, const proto::Frame& frame) {
  ++counters_.update_requests;
  proto::UpdateRequest request;
  Status status = proto::DecodeMeta(frame, &request);
  constexpr uint64_t kBytesPerKey = sizeof(uint64_t) + sizeof(double);
  const bool count_fits = request.count >= 0 && static_cast<uint64_t>(request.count) <= frame.bulk.size() / kBytesPerKey;
  const uint64_t expected = count_fits ? static_cast<uint64_t>(request.count) * kBytesPerKey : 0;
  if (status.ok() && (!count_fits || frame.bulk.size() != expected)) {
    status = Status::InvalidArgument(fmt::format("an update of {} keys must carry {} bulk bytes a key, got {} in all",
                                                 request.count, kBytesPerKey, frame.bulk.size()));
  }
  replay::UpdateCounts counts;
  if (status.ok()) {
    const size_t count = static_cast<size_t>(request.count);
    std::span<const std::byte> bulk = frame.bulk;
    std::vector<uint64_t> keys;
    std::vector<double> priorities;
    status = proto::TakeArray(&bulk, count, &keys);
    for (size_t j = 0; status.ok() && j < keys.size(); ++j) {
      if (proto::ShardOfKey(keys[j]) != options_.shard) {
        status = Status::InvalidArgument(fmt::format("key {:#x} at position {} belongs to shard {}; this server is "
                                                     "shard {} (a key's top {} bits name its shard)",
                                                     keys[j], j, proto::ShardOfKey(keys[j]), options_.shard,
                                                     proto::kShardKeyBits));
      }
      keys[j] = proto::LocalKey(keys[j]);
    }
    if (status.ok()) status = proto::TakeArray(&bulk, count, &priorities);
    if (status.ok()) status = replay_->UpdatePriorities(keys, priorities, &counts);
  }
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  Reply(client, proto::MessageKind::kUpdateReply, frame.header.request_id,
        proto::UpdateReply{counts.applied, counts.stale, counts.dropped});
}

void ReplayService::HandleClose(int client, const proto::Frame& frame) {
  proto::Empty meta;
  Status status = proto::DecodeMeta(frame, &meta);
  if (status.ok() && !frame.bulk.empty()) status = Status::InvalidArgument("a close request carries no bulk data");
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  if (clients_.pending_close(client)) {
    return ReplyError(client, frame.header.request_id,
                      Status::FailedPrecondition(fmt::format(
                          "this client's close (request {}) waits already, behind its held adds ({})",
                          *clients_.pending_close(client), DescribeAddHold())));
  }
  if (held_.count(client) > 0) {
    clients_.SetPendingClose(client, frame.header.request_id);  // after its held adds (ReleaseHeldAdd)
    return;
  }
  FinishClose(client, frame.header.request_id);
}

void ReplayService::FinishClose(int client, uint64_t request_id) {
  if (!clients_.Close(client, Now())) return;
  waiting_.ForgetClient(client);
  // Its checkpoint requests not answered yet are answered now: the close
  // reply comes after everything sent before it, and nothing comes after it.
  checkpoints_.ForgetClient(client, Status::FailedPrecondition("the client closed before the checkpoint it asked "
                                                               "for was durable (the checkpoint goes on)"));
  spdlog::debug("{} closed; {} still open", transport_->ClientName(client), clients_.open_clients());
  Reply(client, proto::MessageKind::kCloseReply, request_id, proto::Empty{});
  if (clients_.open_actors() == 0) FailHopelessSamples();
}

void ReplayService::HandleCheckpoint(int client, const proto::Frame& frame) {
  proto::Empty meta;
  Status status = proto::DecodeMeta(frame, &meta);
  if (status.ok() && !frame.bulk.empty()) status = Status::InvalidArgument("a checkpoint request carries no bulk data");
  if (status.ok()) status = checkpoints_.CheckEnabled();
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  checkpoints_.AddWaiter(client, frame.header.request_id);
  (void)checkpoints_.Request("asked by " + transport_->ClientName(client));
}

void ReplayService::TakeSignal() {
  if (!options_.take_signal || stopping_) return;
  const int signal = options_.take_signal();
  if (signal != SIGUSR1 && signal != SIGTERM) return;
  const bool term = signal == SIGTERM;
  const Status asked = checkpoints_.Request(term ? "SIGTERM: then the server stops" : "SIGUSR1", /*final=*/term);
  if (!asked.ok()) {
    spdlog::warn("{}: {}", term ? "SIGTERM" : "SIGUSR1", asked.message());
    if (term) StopServing();
  }
}

Status ReplayService::StoppedError() const {
  const CheckpointWriter* writer = checkpoints_.writer();
  std::string where;
  if (checkpoints_.writing_final()) {
    where = "; its final checkpoint, holding everything acknowledged before this, is being written to " +
            writer->path();
  } else if (writer != nullptr && !writer->last_path().empty()) {
    where = "; its last checkpoint: " + writer->last_path();
  }
  return Status::Unavailable("the server has stopped serving (SIGTERM)" + where);
}

void ReplayService::StopServing() {
  if (stopping_) return;
  stopping_ = true;
  stop_deadline_ = checkpoints_.final_unfinished() ? Clock::time_point::max() : Now() + kStopGrace;
  const Status stopping = StoppedError();
  for (const WaitingSample& waiting : waiting_.TakeAll()) ReplyError(waiting.client, waiting.request_id, stopping);
  // The columns still to come of the held adds are dropped as they come.
  for (const HeldAdd& held : held_.TakeAll()) ReplyError(held.client, held.request_id, stopping);
  checkpoints_.Stop(stopping);
  for (int client = 0; client < clients_.size(); ++client) {
    if (const std::optional<uint64_t> close = clients_.TakePendingClose(client)) FinishClose(client, *close);
  }
  const CheckpointWriter* writer = checkpoints_.writer();
  spdlog::info("SIGTERM: no longer serving; every request is answered UNAVAILABLE until the {} open clients "
               "close, or for {} s{}{}",
               clients_.open_clients(), kStopGrace.count(),
               checkpoints_.writing_final() ? " after its final checkpoint is complete" : "",
               writer != nullptr && (writer->active() || !writer->last_path().empty())
                   ? "; restore with --restore " + options_.checkpoint_dir
                   : "");
  // A launcher kills this rank a fixed time after SIGTERM (docs/checkpoints.md):
  // which checkpoint a restore takes if the final one is cut short.
  if (checkpoints_.writing_final()) {
    spdlog::info("SIGTERM: if this rank is killed before {} is complete, --restore takes {}", writer->path(),
                 writer->last_path().empty() ? "nothing (no checkpoint is complete yet)" : writer->last_path());
  }
}

void ReplayService::ReplyError(int client, uint64_t request_id, const Status& error) {
  ++counters_.errors;
  spdlog::warn("{} request {}: {}", transport_->ClientName(client), request_id, error.ToString());
  Reply(client, proto::MessageKind::kErrorReply, request_id,
        proto::ErrorReply{static_cast<int32_t>(error.code()), error.message()});
}

template <class Meta>
void ReplayService::Reply(int client, proto::MessageKind kind, uint64_t request_id, const Meta& meta,
                          std::initializer_list<std::span<const std::byte>> bulk) {
  std::vector<std::byte> frame = transport_->AcquireBuffer(256);
  proto::EncodeFrame(kind, request_id, meta, bulk, &frame);
  Send(client, request_id, std::move(frame), /*sample_reply=*/false);
}

// A reply the transport will not take is the end of that request, not of the
// server: the client may wait for it, so the log says which.
void ReplayService::Send(int client, uint64_t request_id, std::vector<std::byte> frame, bool sample_reply) {
  const Status sent = sample_reply ? transport_->SendSampleReply(client, std::move(frame))
                                   : transport_->Send(client, std::move(frame));
  if (!sent.ok()) ReplyDropped(client, request_id, sent);
}

void ReplayService::ReplyDropped(int client, uint64_t request_id, const Status& sent) {
  ++counters_.replies_dropped;
  spdlog::error("the reply to {} request {} was dropped: {}", transport_->ClientName(client), request_id,
                sent.ToString());
}

std::string ReplayService::DescribeClients() const {
  const Clock::time_point now = Now();
  std::string text = clients_.DescribeOpen(now);
  if (!waiting_.empty()) {
    const WaitingSample& oldest = waiting_.front();
    text += fmt::format(" | waiting samples {} (oldest {:.1f} s, for {})", waiting_.size(),
                        std::chrono::duration<double>(now - oldest.arrived).count(),
                        Describe(WaitFor(oldest), oldest.client));
  } else {
    text += " | waiting samples 0";
  }
  if (!held_.empty()) {
    text += fmt::format(" | held adds {} (oldest {:.1f} s: {})", held_.size(),
                        std::chrono::duration<double>(now - held_.front().arrived).count(), DescribeAddHold());
  }
  if (limiter_.enabled()) text += " | rate limiter " + limiter_.Describe();
  text += clients_.DescribeSilent(now, std::max(1.0, options_.stats_interval_seconds),
                                  [this](int client) { return transport_->ClientName(client); });
  return text;
}

void ReplayService::MaybeLogStats() {
  const Clock::time_point now = Now();
  if (!stats_.Due(now)) return;
  spdlog::info("{}{} | {}", stats_.Take(*replay_, counters_, now), DescribeSteps(), DescribeClients());
  if (episodes_.enabled()) {
    const replay::EpisodeSummary e = episodes_.TakeInterval();
    spdlog::info("episodes {} | return mean {:.3f} max {:.3f} | length mean {:.1f}", e.episodes, e.mean_return,
                 e.max_return, e.mean_length);
  }
}

}  // namespace perserve::service
