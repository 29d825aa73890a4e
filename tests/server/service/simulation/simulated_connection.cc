#include "server/service/simulation/simulated_connection.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "proto/append.h"
#include "proto/codec.h"
#include "service/checkpoint/checkpoint.h"
#include "service/table_flags.h"

namespace perserve::service::simulation {
namespace {

// The run has failed: what every call of an aborted connection returns.
Status Stopped() { return Status::Unavailable("the simulation stopped (the run failed elsewhere)"); }

}  // namespace

SimulatedConnection::SimulatedConnection(int client, LibraryWorld* world, Fiber* fiber)
    : client_(client),
      world_(*world),
      fiber_(fiber),
      shards_(world->shards),
      drawn_(static_cast<size_t>(world->config.shards)),
      item_schema_{world->config.steps.options.item_columns} {
  for (int shard = 0; shard < world->config.shards; ++shard) {
    const ShardLink& link = shards_[static_cast<size_t>(shard)];
    const int index = link.index[static_cast<size_t>(client)];
    if (index >= 0) servers_.push_back(Server{shard, link.transport, index});
  }
}

int64_t SimulatedConnection::first_step() const {
  if (!world_.config.actor(client_)) return 0;
  return shards_[static_cast<size_t>(servers_.front().shard)].StreamSteps(client_);
}

void SimulatedConnection::Fingerprint(std::span<const std::byte> bytes) {
  Hash64 hash;
  hash.Update(std::as_bytes(std::span(&fingerprint_, 1)));
  hash.Update(bytes);
  fingerprint_ = hash.Finish();
}

std::vector<std::byte> SimulatedConnection::AcquireBuffer(size_t expected_bytes) {
  std::vector<std::byte> buffer;
  buffer.reserve(expected_bytes);
  return buffer;
}

uint64_t SimulatedConnection::Track(int server, uint64_t token, size_t bytes, bool lent) {
  sends_.push_back(Sent{server, token, bytes, lent});
  return sends_.size();
}

Status SimulatedConnection::SendTo(int server, std::vector<std::byte> frame) {
  if (aborted_) return Stopped();
  if (server < 0 || server >= shard_count())
    Fail(fmt::format("client {}: the library sent to server {}", client_, server));
  const Server& to = servers_[static_cast<size_t>(server)];
  Observe(to.shard, frame);
  ++frames_sent_;
  const size_t bytes = frame.size();
  Track(server, to.transport->PushTracked(to.index, std::move(frame)), bytes, /*lent=*/false);
  return Status::Ok();
}

Status SimulatedConnection::SendColumns(std::vector<std::byte> columns) {
  if (aborted_) return Stopped();
  const Server& to = servers_.front();
  world_.random.Trace("client {}: columns apart of {} bytes (copied)", client_, columns.size());
  world_.model.SentColumns(client_, to.shard, columns);
  ++world_.counts.columns_apart;
  const size_t bytes = columns.size();
  Track(0, to.transport->PushTracked(to.index, std::move(columns), proto::kAddColumnsTag), bytes, /*lent=*/false);
  return Status::Ok();
}

Status SimulatedConnection::SendColumnsFrom(std::span<const std::span<const std::byte>> columns, uint64_t* token) {
  *token = 0;
  if (aborted_) return Stopped();
  const Server& to = servers_.front();
  size_t bytes = 0;
  for (const std::span<const std::byte> column : columns) bytes += column.size();
  world_.random.Trace("client {}: columns apart of {} bytes, lent", client_, bytes);
  ++world_.counts.columns_apart;
  if (world_.config.steps.on) {  // the model takes them as sent (the step actors lend none: never read later)
    std::vector<std::byte> sent;
    for (const std::span<const std::byte> column : columns) sent.insert(sent.end(), column.begin(), column.end());
    world_.model.SentColumns(client_, to.shard, sent);
  }
  *token = Track(0, to.transport->PushLent(to.index, {columns.begin(), columns.end()}, proto::kAddColumnsTag), bytes,
                 /*lent=*/true);
  world_.counts.lent_sends += bytes > world_.config.eager_limit;
  return Status::Ok();
}

bool SimulatedConnection::Completed(const Sent& sent) const {
  return servers_[static_cast<size_t>(sent.server)].transport->SendCompleted(sent.token);
}

Status SimulatedConnection::AwaitSent(uint64_t token) {
  if (token == 0 || token > sends_.size()) Fail(fmt::format("client {}: AwaitSent of an unknown send", client_));
  while (!Completed(sends_[token - 1])) PERSERVE_RETURN_IF_ERROR(Wait(Waiting::kSent, token));
  return Status::Ok();
}

Status SimulatedConnection::DrainSends() {
  while (std::any_of(sends_.begin(), sends_.end(), [this](const Sent& sent) { return !Completed(sent); })) {
    PERSERVE_RETURN_IF_ERROR(Wait(Waiting::kDrain));
  }
  return Status::Ok();
}

Status SimulatedConnection::Wait(Waiting what, uint64_t token) {
  if (aborted_) return Stopped();
  waiting_ = what;
  wait_token_ = token;
  ++world_.counts.blocked_calls;
  fiber_->Yield();
  waiting_ = Waiting::kNothing;
  return aborted_ ? Stopped() : Status::Ok();
}

bool SimulatedConnection::CanProceed() const {
  switch (waiting_) {
    case Waiting::kNothing:
      return true;
    case Waiting::kReply:
      return std::any_of(servers_.begin(), servers_.end(), [](const Server& server) {
        return server.transport->NextReplyInFlight(server.index) || !server.transport->outbox(server.index).empty();
      });
    case Waiting::kSent:
      return Completed(sends_[wait_token_ - 1]);
    case Waiting::kDrain:
      return std::all_of(sends_.begin(), sends_.end(), [this](const Sent& sent) { return Completed(sent); });
  }
  return true;
}

std::string SimulatedConnection::DescribeWait() const {
  switch (waiting_) {
    case Waiting::kNothing:
      return "is not blocked";
    case Waiting::kReply: {
      std::string unanswered;
      for (const Server& server : servers_) {
        unanswered +=
            fmt::format("; shard {}: {}", server.shard, world_.model.DescribeUnanswered(client_, server.shard));
      }
      return "waits for a reply (unanswered" + unanswered + ")";
    }
    case Waiting::kSent: {
      const Sent& sent = sends_[wait_token_ - 1];
      return fmt::format("waits for its send of {} bytes ({}) to shard {} to complete: the server has not received it",
                         sent.bytes, sent.lent ? "lent columns" : "copied",
                         servers_[static_cast<size_t>(sent.server)].shard);
    }
    case Waiting::kDrain: {
      int64_t pending = 0;
      for (const Sent& sent : sends_) pending += !Completed(sent);
      return fmt::format("waits for {} sends to complete (its close drains them): the server has not received them",
                         pending);
    }
  }
  return "?";
}

void SimulatedConnection::Observe(int shard, std::span<const std::byte> bytes) {
  ReferenceModel& model = world_.model;
  const SimulationConfig& config = world_.config;
  proto::Frame frame;
  if (!proto::DecodeFrame(bytes, &frame).ok()) Fail(fmt::format("client {}: the library sent a broken frame", client_));
  const uint64_t id = frame.header.request_id;
  const auto decode = [&](auto* meta) {
    if (!proto::DecodeMeta(frame, meta).ok()) {
      Fail(
          fmt::format("client {}: the library's request {} (kind {}) does not decode", client_, id, frame.header.kind));
    }
  };
  const std::string to = config.shards > 1 && world_.random.tracing() ? fmt::format(" to shard {}", shard) : "";
  double timeout = 0.0;
  switch (frame.kind()) {
    case proto::MessageKind::kAppendRequest: {
      proto::AppendMeta request;
      decode(&request);
      timeout = request.timeout_seconds;
      if (request.groups.empty() || !request.groups[0].item_per_step) {
        model.SentAppend(client_, shard, id, bytes);
        world_.random.Trace("client {} request {}: append of {} steps from step {}, {} items (library{}){}", client_,
                            id, request.steps, request.first_step, request.item_count(),
                            request.columns_follow ? ", columns apart" : "", to);
        break;
      }
      model.SentAdd(client_, shard, id, next_add_first_item_, request.steps, next_add_valid_, request.columns_follow,
                    request.first_step);
      world_.random.Trace("client {} request {}: add of {} items from item {} (library){}{}", client_, id,
                          request.steps, next_add_first_item_, request.columns_follow ? ", columns apart" : "", to);
      break;
    }
    case proto::MessageKind::kSampleRequest: {
      proto::SampleRequest request;
      decode(&request);
      model.SentSample(client_, shard, id, request.beta, shards_[static_cast<size_t>(shard)].NextKey(request.table),
                       request.table);
      if (request.table != 0) other_tables_.insert(id);
      betas_[id] = request.beta;
      world_.random.Trace("client {} request {}: sample of {} (library, beta {}{}){}", client_, id, request.batch_size,
                          request.beta, request.awaited ? ", awaited" : "", to);
      timeout = request.timeout_seconds;
      break;
    }
    case proto::MessageKind::kShardSampleRequest: {
      proto::ShardSampleRequest request;
      decode(&request);
      model.SentShardSample(client_, shard, id, request.count,
                            shards_[static_cast<size_t>(shard)].NextKey(request.table), request.table);
      if (request.table != 0) other_tables_.insert(id);
      world_.random.Trace("client {} request {}: shard sample of {} (library{}{}){}", client_, id, request.count,
                          request.wait ? ", waits" : "", request.awaited ? ", awaited" : "", to);
      timeout = request.timeout_seconds;
      break;
    }
    case proto::MessageKind::kUpdateRequest: {
      proto::UpdateRequest request;
      decode(&request);
      std::span<const std::byte> bulk = frame.bulk;
      std::vector<uint64_t> keys;
      std::vector<double> priorities;
      if (!proto::TakeArray(&bulk, static_cast<size_t>(request.count), &keys).ok() ||
          !proto::TakeArray(&bulk, static_cast<size_t>(request.count), &priorities).ok()) {
        Fail(fmt::format("client {}: the library's update {} is short", client_, id));
      }
      // Bad as the replay counts them (and SimulatedClients::Update).
      const bool zero_is_bad = config.priority_eps == 0.0 && !config.drop_bad_priorities;
      const int64_t bad = std::count_if(priorities.begin(), priorities.end(), [zero_is_bad](double p) {
        return std::isnan(p) || std::isinf(p) || p < 0.0 || (zero_is_bad && p == 0.0);
      });
      bool never_issued = false, wrong_shard = false;
      const uint64_t table_next_key = shards_[static_cast<size_t>(shard)].NextKey(request.table);
      for (const uint64_t key : keys) {
        wrong_shard |= proto::ShardOfKey(key) != shard;
        never_issued |= proto::ShardOfKey(key) == shard && proto::LocalKey(key) >= table_next_key;
      }
      // Over several shards the library routes each key to its shard; one
      // server is sent every key and checks them itself.
      if (wrong_shard && config.shards > 1) {
        Fail(fmt::format("client {}: the library sent update {} with a key of another shard to shard {}", client_, id,
                         shard));
      }
      model.SentUpdate(client_, shard, id, keys, bad, never_issued, wrong_shard, table_next_key, request.table,
                       priorities);
      world_.random.Trace("client {} request {}: update of {} keys (library, {} bad{}{}){}", client_, id, keys.size(),
                          bad, never_issued ? ", one never issued" : "", wrong_shard ? ", one of another shard" : "",
                          to);
      break;
    }
    case proto::MessageKind::kCloseRequest:
      model.SentClose(client_, shard, id);
      world_.random.Trace("client {} request {}: close (library){}", client_, id, to);
      break;
    case proto::MessageKind::kCheckpointRequest:
      model.SentCheckpoint(client_, shard, id);
      world_.random.Trace("client {} request {}: checkpoint (library){}", client_, id, to);
      break;
    default:
      Fail(fmt::format("client {}: the library sent a request of kind {}", client_, frame.header.kind));
  }
  if (timeout > 0) model.WithTimeout(client_, shard, id, timeout);
  kinds_[id] = frame.kind();
  sent_versions_[id] = world_.versions;
}

Status SimulatedConnection::ReceiveReply(bool wait, std::vector<std::byte>* buffer, size_t* length, bool* received) {
  *received = false;
  std::vector<size_t> ready;
  while (true) {
    if (aborted_) return Stopped();
    ready.clear();
    for (size_t s = 0; s < servers_.size(); ++s) {
      const Server& server = servers_[s];
      if (server.transport->NextReplyInFlight(server.index) || !server.transport->outbox(server.index).empty()) {
        ready.push_back(s);
      }
    }
    if (!ready.empty()) break;
    if (!wait) return Status::Ok();
    PERSERVE_RETURN_IF_ERROR(Wait(Waiting::kReply));
  }
  // Replies of different servers may arrive in any order; one server's in the order it sent them.
  const Server& from =
      servers_[ready.size() == 1 ? ready.front()
                                 : ready[static_cast<size_t>(world_.library_random.Pick(0, ssize(ready) - 1))]];
  if (from.transport->NextReplyInFlight(from.index)) from.transport->Deliver(from.index);
  std::deque<std::vector<std::byte>>& outbox = from.transport->outbox(from.index);
  const std::vector<std::byte> reply = std::move(outbox.front());
  outbox.pop_front();
  proto::Frame frame;
  if (proto::DecodeFrame(reply, &frame).ok()) {
    Fingerprint(std::as_bytes(std::span(&frame.header, 1)));
    Fingerprint(frame.bulk);
  }
  world_.random.Trace(
      "client {} receives the reply to request {} (kind {}){}", client_, frame.header.request_id, frame.header.kind,
      world_.config.shards > 1 && world_.random.tracing() ? fmt::format(" from shard {}", from.shard) : "");
  world_.model.Received(client_, from.shard, reply, shards_[static_cast<size_t>(from.shard)].replay->next_key());
  Record(from.shard, reply);
  // As mpi::ReceiveGrowing: the frame is the first *length bytes of *buffer, which only grows.
  if (buffer->size() < reply.size()) buffer->resize(reply.size());
  std::memcpy(buffer->data(), reply.data(), reply.size());
  *length = reply.size();
  *received = true;
  return Status::Ok();
}

const std::vector<proto::TableSchemas>& SimulatedConnection::tables() const {
  if (tables_.empty()) {
    const replay::StepReplay& replay = *shards_.front().table;
    proto::ServedSchemas served;
    const Status made = ServedSchemasOf(TableConfigsOf(replay), replay.step_schema(), replay.steps().slack(), &served);
    if (!made.ok()) Fail(fmt::format("client {}: the tables' schemas: {}", client_, made.ToString()));
    tables_ = std::move(served.tables);
  }
  return tables_;
}

void SimulatedConnection::Record(int shard, std::span<const std::byte> bytes) {
  proto::Frame frame;
  (void)proto::DecodeFrame(bytes, &frame);  // the model has decoded it already
  const uint64_t id = frame.header.request_id;
  const auto kind_of = kinds_.find(id);
  if (kind_of == kinds_.end()) Fail(fmt::format("client {}: a reply to request {}, never sent", client_, id));
  const proto::MessageKind request_kind = kind_of->second;
  kinds_.erase(kind_of);
  const double beta = betas_.count(id) > 0 ? betas_[id] : 0.0;
  betas_.erase(id);
  std::vector<uint64_t> versions = std::move(sent_versions_[id]);
  sent_versions_.erase(id);
  // The batch checks match the default table's replies only (another table's keys may be the same numbers).
  const bool other_table = other_tables_.erase(id) > 0;
  if (frame.kind() == proto::MessageKind::kErrorReply) {
    proto::ErrorReply error;
    (void)proto::DecodeMeta(frame, &error);
    error_codes_.insert(error.code);
    if (request_kind == proto::MessageKind::kAppendRequest) add_errors_[id] = error.code;
    if (error.code == static_cast<int>(Status::Code::kFailedPrecondition) &&
        request_kind == proto::MessageKind::kShardSampleRequest) {
      refused_by_.insert(shard);
    }
    return;
  }
  std::span<const std::byte> bulk = frame.bulk;
  switch (frame.kind()) {
    case proto::MessageKind::kAddReply: {
      proto::AddReply reply;
      (void)proto::DecodeMeta(frame, &reply);
      items_acknowledged_ += reply.count;
      return;
    }
    case proto::MessageKind::kUpdateReply: {
      proto::UpdateReply reply;
      (void)proto::DecodeMeta(frame, &reply);
      updates_.applied += reply.applied;
      updates_.stale += reply.stale;
      updates_.dropped += reply.dropped;
      return;
    }
    case proto::MessageKind::kShardSampleReply: {
      if (other_table) return;
      DrawnReply drawn;
      drawn.shard = shard;
      drawn.request_id = id;
      drawn.versions = std::move(versions);
      (void)proto::DecodeMeta(frame, &drawn.state);
      if (drawn.state.count == 0) return;
      const size_t count = static_cast<size_t>(drawn.state.count);
      (void)proto::TakeArray(&bulk, count, &drawn.keys);
      (void)proto::TakeArray(&bulk, count, &drawn.leaves);
      std::deque<DrawnReply>& kept = drawn_[static_cast<size_t>(shard)];
      kept.push_back(std::move(drawn));
      if (kept.size() > 64) kept.pop_front();
      return;
    }
    case proto::MessageKind::kSampleReply: {
      if (other_table) return;
      proto::SampleReply reply;
      (void)proto::DecodeMeta(frame, &reply);
      DrawnReply drawn;
      drawn.shard = shard;
      drawn.request_id = id;
      drawn.versions = std::move(versions);
      drawn.beta = beta;
      const size_t count = static_cast<size_t>(reply.count);
      (void)proto::TakeArray(&bulk, count, &drawn.keys);
      (void)proto::TakeArray(&bulk, count, &drawn.weights);
      (void)proto::TakeArray(&bulk, count, &drawn.probabilities);
      std::deque<DrawnReply>& kept = drawn_[static_cast<size_t>(shard)];
      kept.push_back(std::move(drawn));
      if (kept.size() > 64) kept.pop_front();
      return;
    }
    default:
      return;
  }
}

}  // namespace perserve::service::simulation
