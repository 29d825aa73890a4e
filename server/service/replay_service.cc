#include "service/replay_service.h"

#include <csignal>
#include <cstring>
#include <new>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/coverage_marks.h"

namespace perserve::service {
namespace {

std::vector<ClientRole> RolesOf(const Transport& transport) {
  std::vector<ClientRole> roles;
  for (int client = 0; client < transport.client_count(); ++client) roles.push_back(transport.Role(client));
  return roles;
}

// The request id of a frame too broken to decode, if its header has one.
uint64_t RequestIdOf(std::span<const std::byte> bytes) {
  proto::FrameHeader header;
  if (bytes.size() < sizeof(header)) return 0;
  std::memcpy(&header, bytes.data(), sizeof(header));
  return header.request_id;
}

// Each table's limiter: its own options, or the service-wide ones.
std::vector<RateLimiter> LimitersOf(const replay::StepReplay& replay, const ServiceOptions& options) {
  std::vector<RateLimiter> limiters;
  for (int t = 0; t < replay.tables(); ++t) {
    RateLimiterOptions table{options.samples_per_insert, options.error_buffer, options.min_size_to_sample};
    if (static_cast<size_t>(t) < options.tables.size()) table = options.tables[static_cast<size_t>(t)];
    table.min_size_to_sample = std::max<int64_t>(1, table.min_size_to_sample);
    limiters.emplace_back(table);
  }
  return limiters;
}

}  // namespace

ReplayService::ReplayService(replay::StepReplay* replay, Transport* transport, ServiceOptions options)
    : replay_(replay),
      transport_(transport),
      options_(std::move(options)),
      clock_(options_.clock),
      replies_(transport, &counters_),
      clients_(RolesOf(*transport), Now()),
      limiters_(LimitersOf(*replay, options_)),
      held_(transport, transport->client_count()),
      pins_(replay->steps().slots()),
      checkpoints_(replay,
                   CheckpointDriverOptions{options_.checkpoint_dir, options_.shard, options_.shards,
                                           options_.checkpoint_every_seconds, options_.checkpoint_slice, clock_,
                                           options_.checkpoint_file_system},
                   CheckpointDriver::Hooks{
                       [this] {
                         if (!held_.empty()) PERSERVE_MARK("checkpoint: begun while appends are held");
                         if (!sampling_.waiting().empty()) PERSERVE_MARK("checkpoint: begun while samples wait");
                         return SaveState();
                       },
                       [this](int client, uint64_t request_id, const Status& result) {
                         if (!result.ok()) return replies_.Error(client, request_id, result);
                         replies_.Reply(client, proto::MessageKind::kCheckpointReply, request_id,
                                        proto::CheckpointReply{checkpoints_.writer()->last_path()});
                       },
                       [this] { StopServing(); }, options_.checkpoint_begun}),
      stats_(options_.stats_interval_seconds, Now()),
      episodes_(replay->step_schema(), options_.reward_column, options_.done_column, transport->client_count(),
                /*bootstrap_steps=*/replay->steps().episodic()),
      admission_(*replay, clients_, limiters_, pins_, held_, *transport,
                 ReplyAllowance{options_.max_unread_sample_replies, options_.max_unread_reply_bytes}),
      intake_(Intake::Parts{replay, transport, &replies_, &admission_, &checkpoints_, &limiters_, &episodes_,
                            &counters_, [this] { return Now(); },
                            [this](int client) {
                              if (const std::optional<uint64_t> close = clients_.TakePendingClose(client)) {
                                FinishClose(client, *close);
                              }
                            }},
              &held_, options_.shard, options_.max_deferred_adds),
      sampling_(Sampling::Parts{replay, transport, &replies_, &admission_, &limiters_, &pins_, &counters_,
                                [this] { return Now(); }},
                SamplingOptions{options_.max_sample_batch, options_.max_deferred_samples,
                                options_.zero_copy_min_row_bytes, options_.shard},
                transport->client_count()) {}

CheckpointState ReplayService::SaveState() const {
  CheckpointState state;
  state.shard = options_.shard;
  state.shards = options_.shards;
  for (const RateLimiter& limiter : limiters_) state.tables.push_back(TableCheckpointState{{}, {}, 0, {}, limiter.State()});
  state.episodes = episodes_.carries();
  return state;
}

void ReplayService::Restore(const CheckpointState& state) {
  // A restore gives one state a table (formats 1 to 3: table 0's alone, of
  // a server of one table); without them, `limiter` is table 0's.
  if (state.tables.empty()) limiters_.front().Restore(state.limiter);
  for (size_t t = 0; t < std::min(limiters_.size(), state.tables.size()); ++t) {
    limiters_[t].Restore(state.tables[t].limiter);
  }
  // Where the ring keeps episodes, a restored stream begins a new one (its
  // episode in progress ended with the actor that appended it); else the
  // statistics' episodes in progress carry on.
  if (!replay_->steps().episodic()) episodes_.RestoreCarries(state.episodes);
}

std::string ReplayService::Summary() const {
  const store::StepStore& ring = replay_->steps();
  int64_t held = 0, ever = 0;
  for (int t = 0; t < replay_->tables(); ++t) {
    held += replay_->table(t).items().size();
    ever += replay_->table(t).items().counters().items_added;
  }
  return service::Summary(*replay_, counters_, limiters_) +
         fmt::format("; steps: {} held, {} appended; items: {} held, {} ever", ring.held(), ring.next_key(), held,
                     ever);
}

Status ReplayService::Run() {
  int idle_passes = 0;
  while (!done()) {
    bool handled = false;
    PERSERVE_RETURN_IF_ERROR(Step(&handled));
    PERSERVE_RETURN_IF_ERROR(transport_->Progress());
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
      bytes += static_cast<int64_t>(receive_buffer_.size());
      HandleGuarded(client, tag);  // a held append takes the buffer
      bytes += intake_.TakeBytesReceived();
      if (static_cast<int64_t>(receive_buffer_.capacity()) > options_.keep_receive_bytes) {
        std::vector<std::byte>().swap(receive_buffer_);
      }
    }
  }
  if (clients > 0) next_client_ = (next_client_ + 1) % clients;
  ServeDeferred();
  TakeSignal();
  checkpoints_.Step(shutdown_.stopping());
  shutdown_.Step(Now(), checkpoints_);
  MaybeLogStats();
  return Status::Ok();
}

void ReplayService::HandleGuarded(int client, int tag) {
  const uint64_t request_id = RequestIdOf(receive_buffer_);
  try {
    Handle(client, tag);
  } catch (const std::bad_alloc&) {
    replies_.Error(client, request_id, Status::ResourceExhausted("the server ran out of memory handling this request"));
  } catch (const std::exception& e) {
    replies_.Error(client, request_id, Status::Internal(std::string("handling this request failed: ") + e.what()));
  }
}

void ReplayService::Handle(int client, int tag) {
  const std::span<const std::byte> bytes = receive_buffer_;
  if (tag == proto::kAddColumnsTag) return intake_.TakeColumns(client, bytes);
  proto::Frame frame;
  const Status decoded = proto::DecodeFrame(bytes, &frame);
  if (tag != proto::kRequestTag) {
    return replies_.Error(client, RequestIdOf(bytes),
                          Status::Unimplemented(fmt::format("unknown message tag {} (requests use tag {}, an "
                                                            "append's columns apart tag {})",
                                                            tag, proto::kRequestTag, proto::kAddColumnsTag)));
  }
  if (!decoded.ok()) return replies_.Error(client, RequestIdOf(bytes), decoded);
  if (shutdown_.stopping() && frame.kind() != proto::MessageKind::kCloseRequest) {
    return replies_.Error(client, frame.header.request_id, Shutdown::Refusal(checkpoints_));
  }
  switch (frame.kind()) {
    case proto::MessageKind::kAppendRequest:
      return intake_.Handle(client, frame, &receive_buffer_);
    case proto::MessageKind::kSampleRequest:
      return sampling_.HandleSample(client, frame);
    case proto::MessageKind::kShardSampleRequest:
      return sampling_.HandleShardSample(client, frame);
    case proto::MessageKind::kUpdateRequest:
      return HandleUpdate(client, frame);
    case proto::MessageKind::kCloseRequest:
      return HandleClose(client, frame);
    case proto::MessageKind::kCheckpointRequest:
      return HandleCheckpoint(client, frame);
    default:
      return replies_.Error(client, frame.header.request_id,
                            Status::Unimplemented(fmt::format("unknown message kind {}", frame.header.kind)));
  }
}

void ReplayService::ServeDeferred() {
  const Clock::time_point now = Now();
  sampling_.ExpireDeadlines(now);
  intake_.ExpireDeadlines(now);
  bool appends_blocked = false, samples_blocked = false;
  intake_.ServeHeld(&appends_blocked);
  sampling_.ServeWaiting(&samples_blocked);
  if (!appends_blocked || !samples_blocked || !sampling_.LimiterHoldsOne()) return;
  if (intake_.LetOldestThrough()) sampling_.ServeWaiting(&samples_blocked);
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
  if (status.ok()) status = replay_->CheckTable(request.table);
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
    if (status.ok()) {
      status = replay_->mutable_table(request.table).mutable_items().UpdatePriorities(keys, priorities, &counts);
    }
  }
  if (!status.ok()) return replies_.Error(client, frame.header.request_id, status);
  replies_.Reply(client, proto::MessageKind::kUpdateReply, frame.header.request_id,
                 proto::UpdateReply{counts.applied, counts.stale, counts.dropped});
}

void ReplayService::HandleClose(int client, const proto::Frame& frame) {
  proto::Empty meta;
  Status status = proto::DecodeMeta(frame, &meta);
  if (status.ok() && !frame.bulk.empty()) status = Status::InvalidArgument("a close request carries no bulk data");
  if (!status.ok()) return replies_.Error(client, frame.header.request_id, status);
  if (clients_.pending_close(client)) {
    return replies_.Error(client, frame.header.request_id,
                          Status::FailedPrecondition(fmt::format(
                              "this client's close (request {}) waits already, behind its held adds ({})",
                              *clients_.pending_close(client), admission_.DescribeHeld())));
  }
  if (held_.count(client) > 0) {
    PERSERVE_MARK("close: waits behind its client's held appends");
    clients_.SetPendingClose(client, frame.header.request_id);  // after its held appends (Intake's drained)
    return;
  }
  FinishClose(client, frame.header.request_id);
}

void ReplayService::FinishClose(int client, uint64_t request_id) {
  if (!clients_.Close(client, Now())) return;
  sampling_.ForgetClient(client);
  // Its checkpoint requests not answered yet are answered now: the close
  // reply comes after everything sent before it, and nothing comes after it.
  checkpoints_.ForgetClient(client, Status::FailedPrecondition("the client closed before the checkpoint it asked "
                                                               "for was durable (the checkpoint goes on)"));
  spdlog::debug("{} closed; {} still open", transport_->ClientName(client), clients_.open_clients());
  replies_.Reply(client, proto::MessageKind::kCloseReply, request_id, proto::Empty{});
  if (clients_.open_actors() == 0) sampling_.FailHopeless();
}

void ReplayService::HandleCheckpoint(int client, const proto::Frame& frame) {
  proto::Empty meta;
  Status status = proto::DecodeMeta(frame, &meta);
  if (status.ok() && !frame.bulk.empty()) status = Status::InvalidArgument("a checkpoint request carries no bulk data");
  if (status.ok()) status = checkpoints_.CheckEnabled();
  if (!status.ok()) return replies_.Error(client, frame.header.request_id, status);
  checkpoints_.AddWaiter(client, frame.header.request_id);
  (void)checkpoints_.Request("asked by " + transport_->ClientName(client));
}

void ReplayService::TakeSignal() {
  if (!options_.take_signal || shutdown_.stopping()) return;
  const int signal = options_.take_signal();
  if (signal != SIGUSR1 && signal != SIGTERM) return;
  const bool term = signal == SIGTERM;
  const Status asked = checkpoints_.Request(term ? "SIGTERM: then the server stops" : "SIGUSR1", /*final=*/term);
  if (!asked.ok()) {
    spdlog::warn("{}: {}", term ? "SIGTERM" : "SIGUSR1", asked.message());
    if (term) StopServing();
  }
}

void ReplayService::StopServing() {
  if (shutdown_.stopping()) return;
  shutdown_.Begin(Now(), checkpoints_);
  const Status stopping = Shutdown::Refusal(checkpoints_);
  sampling_.RefuseAll(stopping);
  intake_.RefuseAll(stopping);
  checkpoints_.Stop(stopping);
  for (int client = 0; client < clients_.size(); ++client) {
    if (const std::optional<uint64_t> close = clients_.TakePendingClose(client)) FinishClose(client, *close);
  }
  Shutdown::Log(clients_.open_clients(), options_.checkpoint_dir, checkpoints_);
}

std::string ReplayService::DescribeClients() const {
  const Clock::time_point now = Now();
  std::string text = clients_.DescribeOpen(now);
  const WaitingSamples& waiting = sampling_.waiting();
  if (!waiting.empty()) {
    const WaitingSample& oldest = waiting.front();
    text += fmt::format(" | waiting samples {} (oldest {:.1f} s, for {})", waiting.size(),
                        std::chrono::duration<double>(now - oldest.arrived).count(),
                        admission_.Describe(admission_.WaitFor(oldest), oldest.client, oldest.table));
  } else {
    text += " | waiting samples 0";
  }
  if (!held_.empty()) {
    text += fmt::format(" | held adds {} (oldest {:.1f} s: {})", held_.size(),
                        std::chrono::duration<double>(now - held_.front().arrived).count(), admission_.DescribeHeld());
  }
  for (int t = 0; t < replay_->tables(); ++t) {
    if (limiters_[static_cast<size_t>(t)].enabled()) {
      text += fmt::format(" | rate limiter{} {}", admission_.OfTable(t), limiters_[static_cast<size_t>(t)].Describe());
    }
  }
  text += clients_.DescribeSilent(now, std::max(1.0, options_.stats_interval_seconds),
                                  [this](int client) { return transport_->ClientName(client); });
  return text;
}

void ReplayService::MaybeLogStats() {
  const Clock::time_point now = Now();
  if (!stats_.Due(now)) return;
  const store::StepStore& ring = replay_->steps();
  ++counters_.stats_lines;
  last_stats_line_ = fmt::format("{}; steps {} held | {}", stats_.Take(*replay_, counters_, now), ring.held(),
                                 DescribeClients());
  spdlog::info("{}", last_stats_line_);
  if (episodes_.enabled()) {
    const replay::EpisodeSummary e = episodes_.TakeInterval();
    spdlog::info("episodes {} | return mean {:.3f} max {:.3f} | length mean {:.1f}", e.episodes, e.mean_return,
                 e.max_return, e.mean_length);
  }
}

}  // namespace perserve::service
