#include "service/replay_service.h"

#include <cstring>
#include <limits>
#include <new>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "service/resident_memory.h"

namespace perserve::service {
ReplayService::ReplayService(replay::Replay* replay, Transport* transport, ServiceOptions options)
    : replay_(replay),
      transport_(transport),
      options_(options),
      open_(static_cast<size_t>(transport->client_count()), true),
      open_clients_(transport->client_count()),
      deferred_per_client_(static_cast<size_t>(transport->client_count()), 0),
      episodes_(replay->store().schema(), options_.reward_column, options_.done_column, transport->client_count()) {}

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
  const int clients = static_cast<int>(open_.size());
  for (int visited = 0; visited < clients; ++visited) {
    const int client = (next_client_ + visited) % clients;
    int64_t bytes = 0;
    for (int taken = 0; taken < options_.messages_per_client_pass && bytes < options_.bytes_per_client_pass &&
                        open_[client];
         ++taken) {
      bool received = false;
      int tag = 0;
      PERSERVE_RETURN_IF_ERROR(transport_->TryReceive(client, &receive_buffer_, &tag, &received));
      if (!received) break;
      *handled = true;
      ++counters_.messages;
      bytes += static_cast<int64_t>(receive_buffer_.size());
      HandleGuarded(client, tag, receive_buffer_);
      if (static_cast<int64_t>(receive_buffer_.capacity()) > options_.keep_receive_bytes) {
        std::vector<std::byte>().swap(receive_buffer_);
      }
    }
  }
  if (clients > 0) next_client_ = (next_client_ + 1) % clients;
  ServeDeferred();
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
  proto::Frame frame;
  const Status decoded = proto::DecodeFrame(bytes, &frame);
  if (tag != proto::kRequestTag) {
    return ReplyError(client, RequestIdOf(bytes),
                      Status::Unimplemented(fmt::format("unknown message tag {} (requests use tag {})", tag,
                                                        proto::kRequestTag)));
  }
  if (!decoded.ok()) return ReplyError(client, RequestIdOf(bytes), decoded);
  switch (frame.kind()) {
    case proto::MessageKind::kAddRequest:
      return HandleAdd(client, frame);
    case proto::MessageKind::kSampleRequest:
      return HandleSample(client, frame);
    case proto::MessageKind::kUpdateRequest:
      return HandleUpdate(client, frame);
    case proto::MessageKind::kCloseRequest:
      return HandleClose(client, frame);
    default:
      return ReplyError(client, frame.header.request_id,
                        Status::Unimplemented(fmt::format("unknown message kind {}", frame.header.kind)));
  }
}

void ReplayService::HandleAdd(int client, const proto::Frame& frame) {
  ++counters_.add_requests;
  proto::AddRequest request;
  Status status = proto::DecodeMeta(frame, &request);
  if (status.ok() && (request.count < 1 || request.count > replay_->capacity())) {
    status = Status::InvalidArgument(fmt::format("an add of {} items: the count must be in [1, capacity {}]",
                                                 request.count, replay_->capacity()));
  }
  const uint64_t priority_bytes =
      status.ok() && request.has_priorities ? static_cast<uint64_t>(request.count) * sizeof(double) : 0;
  if (status.ok() && frame.bulk.size() < priority_bytes) {
    status = Status::InvalidArgument(fmt::format("an add of {} items with priorities carries only {} bulk bytes",
                                                 request.count, frame.bulk.size()));
  }
  uint64_t first_key = 0;
  if (status.ok()) {
    const auto columns = frame.bulk.first(frame.bulk.size() - priority_bytes);
    std::span<const std::byte> rest = frame.bulk.subspan(columns.size());
    std::vector<double> priorities;
    status = proto::TakeArray(&rest, request.has_priorities ? static_cast<size_t>(request.count) : 0, &priorities);
    if (status.ok()) status = replay_->Add(request.count, columns, priorities, &first_key);
    if (status.ok()) episodes_.Observe(client, request.count, columns);
  }
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  Reply(client, proto::MessageKind::kAddReply, frame.header.request_id, proto::AddReply{first_key, request.count});
}

int64_t ReplayService::SampleReplyBytes(int64_t batch_size) const {
  // Bounded operands (batch <= max_sample_batch, an item <= 1 GiB): no overflow.
  const int64_t meta = static_cast<int64_t>(proto::SerializeMeta(proto::SampleReply{batch_size}).size());
  return static_cast<int64_t>(proto::kFrameHeaderBytes) + meta +
         batch_size * (replay_->store().schema().ItemBytes() + 3 * 8);
}

bool ReplayService::CanServe(int client, int64_t reply_bytes) const {
  if (!ReadyToSample()) return false;
  const Transport::Unread unread = transport_->UnreadSampleReplies(client);
  if (unread.replies == 0) return true;
  return unread.replies < options_.max_unread_sample_replies &&
         unread.bytes + reply_bytes <= options_.max_unread_reply_bytes;
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
  const int64_t reply_bytes = status.ok() ? SampleReplyBytes(request.batch_size) : 0;
  if (reply_bytes > std::numeric_limits<int>::max()) {
    status = Status::InvalidArgument(fmt::format("a sample of {} items would be a {}-byte reply, over MPI's 2 GiB "
                                                 "message limit",
                                                 request.batch_size, reply_bytes));
  }
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  if (deferred_per_client_[client] == 0 && CanServe(client, reply_bytes)) {
    return ServeSample(client, frame.header.request_id, request.batch_size, request.beta);
  }
  if (deferred_per_client_[client] >= options_.max_deferred_samples) {
    return ReplyError(client, frame.header.request_id,
                      Status::ResourceExhausted(fmt::format(
                          "{} sample requests of this client wait already (the most one client may have waiting: "
                          "--max-deferred-samples); receive their replies first",
                          deferred_per_client_[client])));
  }
  ++counters_.deferred_samples;
  ++deferred_per_client_[client];
  deferred_.push_back({client, frame.header.request_id, request.batch_size, request.beta});
}

void ReplayService::ServeSample(int client, uint64_t request_id, int64_t batch_size, double beta) {
  const Status status = replay_->Sample(batch_size, beta, &sample_);
  if (!status.ok()) return ReplyError(client, request_id, status);
  const size_t column_bytes = static_cast<size_t>(batch_size * replay_->store().schema().ItemBytes());
  std::vector<std::byte> frame = transport_->AcquireBuffer(static_cast<size_t>(SampleReplyBytes(batch_size)));
  const std::span<std::byte> columns = proto::EncodeFrameWithTail(
      proto::MessageKind::kSampleReply, request_id, proto::SerializeMeta(proto::SampleReply{batch_size}),
      {std::as_bytes(std::span(sample_.keys)), std::as_bytes(std::span(sample_.weights)),
       std::as_bytes(std::span(sample_.probabilities))},
      column_bytes, &frame);
  replay_->store().Gather(sample_.slots, columns);
  Send(client, request_id, std::move(frame), /*sample_reply=*/true);
}

// Deferred requests in arrival order; once one of a client's cannot be served,
// its later ones wait behind it (a client's samples are answered in order).
void ReplayService::ServeDeferred() {
  if (deferred_.empty() || !ReadyToSample()) return;
  blocked_.assign(open_.size(), false);
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    const DeferredSample waiting = *it;
    if (blocked_[waiting.client] || !CanServe(waiting.client, SampleReplyBytes(waiting.batch_size))) {
      blocked_[waiting.client] = true;
      ++it;
      continue;
    }
    it = deferred_.erase(it);
    --deferred_per_client_[waiting.client];
    try {
      ServeSample(waiting.client, waiting.request_id, waiting.batch_size, waiting.beta);
    } catch (const std::bad_alloc&) {
      ReplyError(waiting.client, waiting.request_id,
                 Status::ResourceExhausted("the server ran out of memory serving this sample"));
    }
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
    if (status.ok()) status = proto::TakeArray(&bulk, count, &priorities);
    if (status.ok()) status = replay_->UpdatePriorities(keys, priorities, &counts);
  }
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  Reply(client, proto::MessageKind::kUpdateReply, frame.header.request_id,
        proto::UpdateReply{counts.applied, counts.stale});
}

void ReplayService::HandleClose(int client, const proto::Frame& frame) {
  proto::Empty meta;
  Status status = proto::DecodeMeta(frame, &meta);
  if (status.ok() && !frame.bulk.empty()) status = Status::InvalidArgument("a close request carries no bulk data");
  if (!status.ok()) return ReplyError(client, frame.header.request_id, status);
  open_[client] = false;
  --open_clients_;
  std::erase_if(deferred_, [client](const DeferredSample& d) { return d.client == client; });
  deferred_per_client_[client] = 0;
  spdlog::debug("{} closed; {} still open", transport_->ClientName(client), open_clients_);
  Reply(client, proto::MessageKind::kCloseReply, frame.header.request_id, proto::Empty{});
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
  if (sent.ok()) return;
  ++counters_.replies_dropped;
  spdlog::error("the reply to {} request {} was dropped: {}", transport_->ClientName(client), request_id,
                sent.ToString());
}

std::string ReplayService::Summary() const {
  const replay::ReplayCounters& r = replay_->counters();
  return fmt::format("size {} of {}, {} items in, {} sampled, {} priorities updated, {} stale updates dropped, "
                     "{} requests ({} add, {} sample, {} update), {} errors, {} replies dropped",
                     replay_->size(), replay_->capacity(), r.items_added, r.items_sampled, r.priorities_updated,
                     r.stale_updates_dropped, counters_.messages, counters_.add_requests, counters_.sample_requests,
                     counters_.update_requests, counters_.errors, counters_.replies_dropped);
}

void ReplayService::MaybeLogStats() {
  if (options_.stats_interval_seconds <= 0) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - stats_since_).count();
  if (seconds < options_.stats_interval_seconds) return;
  const replay::ReplayCounters& r = replay_->counters();
  spdlog::info("size {} | in {:.0f} items/s | sampled {:.0f} items/s | updated {:.0f}/s | stale dropped {} | "
               "errors {} | deferred samples {} | rss {} MiB",
               replay_->size(), (r.items_added - replay_at_last_stats_.items_added) / seconds,
               (r.items_sampled - replay_at_last_stats_.items_sampled) / seconds,
               (r.priorities_updated - replay_at_last_stats_.priorities_updated) / seconds,
               r.stale_updates_dropped - replay_at_last_stats_.stale_updates_dropped,
               counters_.errors - service_at_last_stats_.errors, deferred_.size(), ResidentBytes() >> 20);
  if (episodes_.enabled()) {
    const replay::EpisodeSummary e = episodes_.TakeInterval();
    spdlog::info("episodes {} | return mean {:.3f} max {:.3f} | length mean {:.1f}", e.episodes, e.mean_return,
                 e.max_return, e.mean_length);
  }
  replay_at_last_stats_ = r;
  service_at_last_stats_ = counters_;
  stats_since_ = Clock::now();
}

}  // namespace perserve::service
