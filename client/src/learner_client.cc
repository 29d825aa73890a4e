#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "client/src/connection.h"
#include "client/src/open_clients.h"
#include "client/src/shard_sampler.h"
#include "perserve/client.h"

namespace perserve {

using client_internal::Connection;
using client_internal::OpenClients;

namespace {

// CollectUpdates' argument when it should only take acknowledgements that have arrived.
constexpr size_t kNoWait = static_cast<size_t>(-1);

// Waits for the reply to each of `ids` (every one, even after an error, so
// none is left behind), decodes it as a Meta and hands it to take(index,
// meta). Returns the first error.
template <class Meta, class Take>
Status AwaitEach(Connection* connection, const std::vector<uint64_t>& ids, Take take) {
  Status first_error;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<std::byte> message;
    proto::Frame frame;
    Meta reply;
    Status status = connection->AwaitReply(ids[i], &message, &frame);
    if (status.ok()) status = proto::DecodeMeta(frame, &reply);
    if (status.ok()) {
      take(i, reply);
    } else if (first_error.ok()) {
      first_error = status;
    }
  }
  return first_error;
}

}  // namespace

Status LearnerClient::Join(MPI_Comm comm, const ClientOptions& options, std::unique_ptr<LearnerClient>* learner) {
  if (options.max_in_flight < 1) return Status::InvalidArgument("max_in_flight must be >= 1");
  if (options.prefetch < 0) return Status::InvalidArgument("prefetch must be >= 0");
  auto connection = std::make_unique<client_internal::MpiConnection>();
  PERSERVE_RETURN_IF_ERROR(connection->Join(comm, proto::Role::kLearner));
  LearnerClient* joined = new LearnerClient(std::move(connection), options);
  learner->reset(joined);
  const Status registered = OpenClients::Register(joined, [joined] { joined->CloseAtFinalize(); });
  if (!registered.ok()) learner->reset();  // closes it with the server
  return registered;
}

LearnerClient::LearnerClient(std::unique_ptr<Connection> connection, ClientOptions options)
    : connection_(std::move(connection)), options_(options) {
  if (connection_->shard_count() > 1) {
    uint64_t seed = options_.shard_seed;
    if (seed == 0) {
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      seed = 0x5a4d5eedULL + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(rank + 1);
    }
    // Each table its own split and shard states; the default table's seed is the learner's.
    for (size_t table = 0; table < connection_->tables().size(); ++table) {
      samplers_.push_back(std::make_unique<client_internal::ShardSampler>(
          connection_->shard_count(), static_cast<int>(table),
          client_internal::ShardSplitOf(connection_->tables()[table]), options_.exact_shard_totals,
          seed ^ (0xd1b54a32d192ed03ULL * table)));
    }
  }
}

LearnerClient::~LearnerClient() {
  OpenClients::CloseFromDestructor(this, "learner", [this] { return Close(); });
}

void LearnerClient::CloseAtFinalize() { OpenClients::ReportClosedAtFinalize("learner", Close()); }

const Schema& LearnerClient::schema() const { return connection_->sample_schema(); }

const Schema& LearnerClient::schema(std::string_view table) const {
  static const Schema none;
  int index = 0;
  if (!connection_->TableIndex(table, &index).ok()) return none;
  return connection_->tables()[static_cast<size_t>(index)].samples;
}

std::vector<std::string> LearnerClient::tables() const {
  std::vector<std::string> names;
  for (const proto::TableSchemas& table : connection_->tables()) names.push_back(table.name);
  return names;
}

int LearnerClient::shards() const { return connection_->shard_count(); }

Status LearnerClient::Checkpoint(std::vector<std::string>* paths) {
  if (closed_) return Status::FailedPrecondition("the learner is closed");
  PERSERVE_RETURN_IF_ERROR(CollectUpdates(kNoWait));
  const int shards = connection_->shard_count();
  std::vector<uint64_t> ids;
  for (int shard = 0; shard < shards; ++shard) {
    ids.push_back(connection_->NextRequestId());
    std::vector<std::byte> frame;
    proto::EncodeFrame(proto::MessageKind::kCheckpointRequest, ids.back(), proto::Empty{}, {}, &frame);
    PERSERVE_RETURN_IF_ERROR(connection_->SendTo(shard, std::move(frame)));
  }
  paths->assign(ids.size(), "");
  return AwaitEach<proto::CheckpointReply>(
      connection_.get(), ids,
      [paths](size_t shard, const proto::CheckpointReply& reply) { (*paths)[shard] = reply.path; });
}

Status LearnerClient::Info(ReplayInfo* info) { return InfoTable(0, info); }

Status LearnerClient::Info(std::string_view table, ReplayInfo* info) {
  int index = 0;
  PERSERVE_RETURN_IF_ERROR(connection_->TableIndex(table, &index));
  return InfoTable(index, info);
}

Status LearnerClient::InfoTable(int table, ReplayInfo* info) {
  if (closed_) return Status::FailedPrecondition("the learner is closed");
  PERSERVE_RETURN_IF_ERROR(CollectUpdates(kNoWait));
  const int shards = connection_->shard_count();
  std::vector<uint64_t> ids(static_cast<size_t>(shards));
  for (int shard = 0; shard < shards; ++shard) {
    PERSERVE_RETURN_IF_ERROR(client_internal::SendShardSample(connection_.get(), shard, table, {}, /*wait=*/false,
                                                              0.0, /*awaited=*/false,
                                                              &ids[static_cast<size_t>(shard)]));
  }
  ReplayInfo sum;
  sum.shards = shards;
  PERSERVE_RETURN_IF_ERROR(AwaitEach<proto::ShardSampleReply>(
      connection_.get(), ids, [&sum](size_t, const proto::ShardSampleReply& reply) {
        sum.size += reply.size;
        sum.items_added += reply.items_added;
        sum.total += reply.total;
        sum.shards_ready += reply.ready ? 1 : 0;
      }));
  *info = sum;
  return Status::Ok();
}

Status LearnerClient::Sample(int64_t batch_size, double beta, SampleBatch* batch, double timeout_seconds) {
  return SampleTable(0, batch_size, beta, batch, timeout_seconds);
}

Status LearnerClient::Sample(std::string_view table, int64_t batch_size, double beta, SampleBatch* batch,
                             double timeout_seconds) {
  int index = 0;
  PERSERVE_RETURN_IF_ERROR(connection_->TableIndex(table, &index));
  return SampleTable(index, batch_size, beta, batch, timeout_seconds);
}

Status LearnerClient::SampleTable(int table, int64_t batch_size, double beta, SampleBatch* batch,
                                  double timeout_seconds) {
  if (closed_) return Status::FailedPrecondition("the learner is closed");
  PERSERVE_RETURN_IF_ERROR(CheckTimeout(timeout_seconds));
  PERSERVE_RETURN_IF_ERROR(CollectUpdates(kNoWait));
  // Requests made for another table or size are not what the caller asks for now:
  // received and dropped, their errors with them (each is popped, so a
  // failing connection ends the loop and fails the request below instead).
  // Those of another beta are kept and weighed for this one (annealed beta
  // changes every call: dropping them wasted every prefetched sample, which
  // the servers' rate limiters had counted), unless their weights cannot be.
  while (!pending_samples_.empty() &&
         (pending_samples_.front().table != table || pending_samples_.front().batch_size != batch_size ||
          !CanWeighFor(pending_samples_.front(), beta))) {
    (void)ReceiveOldest(batch);
  }
  if (pending_samples_.empty()) {
    PERSERVE_RETURN_IF_ERROR(SendSampleRequest(table, batch_size, beta, timeout_seconds, /*awaited=*/true));
  }
  // A DEADLINE_EXCEEDED (or any error) returns before topping up: no request
  // of this call is left in flight.
  PERSERVE_RETURN_IF_ERROR(ReceiveOldest(batch, beta));
  while (samples_in_flight() < options_.prefetch) {
    PERSERVE_RETURN_IF_ERROR(SendSampleRequest(table, batch_size, beta, timeout_seconds, /*awaited=*/false));
  }
  return CollectUpdates(kNoWait);  // the answers that came before this reply (see SendPriorityUpdate)
}

Status LearnerClient::RequestSample(int64_t batch_size, double beta, double timeout_seconds) {
  return RequestSampleTable(0, batch_size, beta, timeout_seconds);
}

Status LearnerClient::RequestSample(std::string_view table, int64_t batch_size, double beta,
                                    double timeout_seconds) {
  int index = 0;
  PERSERVE_RETURN_IF_ERROR(connection_->TableIndex(table, &index));
  return RequestSampleTable(index, batch_size, beta, timeout_seconds);
}

Status LearnerClient::RequestSampleTable(int table, int64_t batch_size, double beta, double timeout_seconds) {
  if (closed_) return Status::FailedPrecondition("the learner is closed");
  PERSERVE_RETURN_IF_ERROR(CheckTimeout(timeout_seconds));
  PERSERVE_RETURN_IF_ERROR(CollectUpdates(kNoWait));
  if (samples_in_flight() >= std::max(1, options_.prefetch)) {
    return Status::FailedPrecondition(
        fmt::format("{} sample requests are already in flight (the prefetch option allows {})", samples_in_flight(),
                    std::max(1, options_.prefetch)));
  }
  return SendSampleRequest(table, batch_size, beta, timeout_seconds, /*awaited=*/false);
}

Status LearnerClient::SendSampleRequest(int table, int64_t batch_size, double beta, double timeout_seconds,
                                        bool awaited) {
  if (!samplers_.empty()) {
    // One server checks these itself; over several the split needs them first.
    if (batch_size < 1) return Status::InvalidArgument(fmt::format("batch size {} must be >= 1", batch_size));
    if (!std::isfinite(beta) || !(beta >= 0.0)) {
      return Status::InvalidArgument(fmt::format("beta {} must be finite and >= 0", beta));
    }
    auto request = std::make_unique<client_internal::ShardedRequest>();
    request->batch_size = batch_size;
    request->beta = beta;
    request->timeout_seconds = timeout_seconds;
    request->awaited = awaited;
    PERSERVE_RETURN_IF_ERROR(samplers_[static_cast<size_t>(table)]->Send(connection_.get(), request.get()));
    pending_samples_.push_back(PendingSample{0, table, batch_size, beta, std::move(request)});
    return Status::Ok();
  }
  const uint64_t id = connection_->NextRequestId();
  std::vector<std::byte> frame;
  proto::EncodeFrame(proto::MessageKind::kSampleRequest, id,
                     proto::SampleRequest{batch_size, beta, timeout_seconds, awaited, table}, {}, &frame);
  PERSERVE_RETURN_IF_ERROR(connection_->Send(std::move(frame)));
  pending_samples_.push_back(PendingSample{id, table, batch_size, beta, nullptr});
  return Status::Ok();
}

Status LearnerClient::ReceiveSample(SampleBatch* batch) {
  if (closed_) return Status::FailedPrecondition("the learner is closed");
  if (pending_samples_.empty()) return Status::FailedPrecondition("no sample request is in flight");
  PERSERVE_RETURN_IF_ERROR(CollectUpdates(kNoWait));
  PERSERVE_RETURN_IF_ERROR(ReceiveOldest(batch));
  return CollectUpdates(kNoWait);  // the answers that came before this reply (see SendPriorityUpdate)
}

bool LearnerClient::CanWeighFor(const PendingSample& pending, double beta) {
  // Over shards the learner computes the weights itself; one server's are
  // w = (leaf / min leaf)^-beta, so w^(beta' / beta) is the weight for beta',
  // except from beta 0 (every weight 1).
  return pending.beta == beta || pending.sharded != nullptr || pending.beta > 0.0;
}

Status LearnerClient::ReceiveOldest(SampleBatch* batch, std::optional<double> beta) {
  PendingSample pending = std::move(pending_samples_.front());
  pending_samples_.pop_front();
  const double weigh_for = beta.value_or(pending.beta);
  const proto::TableSchemas& table = connection_->tables()[static_cast<size_t>(pending.table)];
  batch->table = table.name;
  if (pending.sharded != nullptr) {
    pending.sharded->beta = weigh_for;  // the weights are computed on receipt
    return samplers_[static_cast<size_t>(pending.table)]->Receive(connection_.get(), table.samples,
                                                                  pending.sharded.get(), batch);
  }
  const uint64_t id = pending.id;
  proto::Frame frame;
  PERSERVE_RETURN_IF_ERROR(connection_->AwaitReply(id, &batch->message, &frame));
  proto::SampleReply reply;
  PERSERVE_RETURN_IF_ERROR(proto::DecodeMeta(frame, &reply));
  const size_t count = static_cast<size_t>(reply.count);
  std::span<const std::byte> bulk = frame.bulk;
  PERSERVE_RETURN_IF_ERROR(proto::TakeArray(&bulk, count, &batch->keys));
  PERSERVE_RETURN_IF_ERROR(proto::TakeArray(&bulk, count, &batch->weights));
  PERSERVE_RETURN_IF_ERROR(proto::TakeArray(&bulk, count, &batch->probabilities));
  if (weigh_for != pending.beta) {
    for (double& weight : batch->weights) weight = std::pow(weight, weigh_for / pending.beta);
  }
  batch->size = reply.count;
  batch->columns.clear();
  for (const Column& column : table.samples.columns) {
    const size_t bytes = count * static_cast<size_t>(column.ItemBytes());
    if (bulk.size() < bytes) return Status::Internal("a sample reply is shorter than its schema says");
    batch->columns.push_back(bulk.first(bytes));
    bulk = bulk.subspan(bytes);
  }
  return Status::Ok();
}

namespace {

// The values are the server's to judge: its policy refuses an update with a
// bad priority whole, or with --drop-bad-priorities drops just those.
Status CheckUpdate(std::span<const uint64_t> keys, std::span<const double> priorities) {
  if (keys.size() != priorities.size()) {
    return Status::InvalidArgument(fmt::format("{} keys but {} priorities", keys.size(), priorities.size()));
  }
  return Status::Ok();
}

void EncodeUpdate(uint64_t id, int table, std::span<const uint64_t> keys, std::span<const double> priorities,
                  std::vector<std::byte>* frame) {
  proto::EncodeFrame(proto::MessageKind::kUpdateRequest, id,
                     proto::UpdateRequest{static_cast<int64_t>(keys.size()), table},
                     {std::as_bytes(keys), std::as_bytes(priorities)}, frame);
}

}  // namespace

Status LearnerClient::UpdatableTable(std::string_view table, int* index) const {
  PERSERVE_RETURN_IF_ERROR(connection_->TableIndex(table, index));
  const proto::TableSchemas& served = connection_->tables()[static_cast<size_t>(*index)];
  if (served.updatable) return Status::Ok();
  return Status::InvalidArgument(fmt::format("table {} samples {}: it keeps no priorities; nothing was sent",
                                             served.name, served.sampler));
}

Status LearnerClient::SendUpdate(int shard, int table, std::span<const uint64_t> keys,
                                 std::span<const double> priorities, uint64_t* id) {
  *id = connection_->NextRequestId();
  std::vector<std::byte> frame = connection_->AcquireBuffer(keys.size_bytes() + priorities.size_bytes() + 64);
  EncodeUpdate(*id, table, keys, priorities, &frame);
  return connection_->SendTo(shard, std::move(frame));
}

Status LearnerClient::SendUpdates(int table, std::span<const uint64_t> keys, std::span<const double> priorities,
                                  std::vector<uint64_t>* ids) {
  PERSERVE_RETURN_IF_ERROR(CheckUpdate(keys, priorities));
  ids->clear();
  const int shards = connection_->shard_count();
  if (shards == 1) {  // the server checks the keys' shard
    ids->emplace_back();
    return SendUpdate(0, table, keys, priorities, &ids->back());
  }
  // Each key goes to the shard it names; nothing is sent if one names none.
  std::vector<std::vector<uint64_t>> shard_keys(static_cast<size_t>(shards));
  std::vector<std::vector<double>> shard_priorities(static_cast<size_t>(shards));
  for (size_t j = 0; j < keys.size(); ++j) {
    const int shard = proto::ShardOfKey(keys[j]);
    if (shard >= shards) {
      return Status::InvalidArgument(fmt::format("key {:#x} at position {} names shard {}; this job has {} server "
                                                 "ranks (a key's top {} bits name its shard)",
                                                 keys[j], j, shard, shards, proto::kShardKeyBits));
    }
    shard_keys[static_cast<size_t>(shard)].push_back(keys[j]);
    shard_priorities[static_cast<size_t>(shard)].push_back(priorities[j]);
  }
  for (int shard = 0; shard < shards; ++shard) {
    if (shard_keys[static_cast<size_t>(shard)].empty()) continue;
    ids->emplace_back();
    PERSERVE_RETURN_IF_ERROR(SendUpdate(shard, table, shard_keys[static_cast<size_t>(shard)],
                                        shard_priorities[static_cast<size_t>(shard)], &ids->back()));
  }
  return Status::Ok();
}

Status LearnerClient::UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities,
                                       UpdateResult* result) {
  return UpdatePriorities(std::string_view{}, keys, priorities, result);
}

Status LearnerClient::UpdatePriorities(std::string_view table, std::span<const uint64_t> keys,
                                       std::span<const double> priorities, UpdateResult* result) {
  int index = 0;
  PERSERVE_RETURN_IF_ERROR(UpdatableTable(table, &index));
  return UpdateTable(index, keys, priorities, result);
}

Status LearnerClient::UpdateTable(int table, std::span<const uint64_t> keys, std::span<const double> priorities,
                                  UpdateResult* result) {
  if (closed_) return Status::FailedPrecondition("the learner is closed");
  PERSERVE_RETURN_IF_ERROR(CollectUpdates(kNoWait));
  std::vector<uint64_t> ids;
  PERSERVE_RETURN_IF_ERROR(SendUpdates(table, keys, priorities, &ids));
  // Every shard's answer is taken; the first refusal is the call's (the
  // other shards' parts are applied: each shard applies its part whole or not).
  UpdateResult total;
  const Status status = AwaitEach<proto::UpdateReply>(
      connection_.get(), ids, [&total](size_t, const proto::UpdateReply& reply) {
        total.applied += reply.applied;
        total.stale += reply.stale;
        total.dropped += reply.dropped;
      });
  updates_.applied += total.applied;
  updates_.stale += total.stale;
  updates_.dropped += total.dropped;
  PERSERVE_RETURN_IF_ERROR(status);
  if (result != nullptr) *result = total;
  return Status::Ok();
}

Status LearnerClient::SendPriorityUpdate(std::span<const uint64_t> keys, std::span<const double> priorities) {
  return SendPriorityUpdate(std::string_view{}, keys, priorities);
}

Status LearnerClient::SendPriorityUpdate(std::string_view table, std::span<const uint64_t> keys,
                                         std::span<const double> priorities) {
  int index = 0;
  PERSERVE_RETURN_IF_ERROR(UpdatableTable(table, &index));
  return SendUpdateTable(index, keys, priorities);
}

Status LearnerClient::SendUpdateTable(int table, std::span<const uint64_t> keys, std::span<const double> priorities) {
  if (closed_) return Status::FailedPrecondition("the learner is closed");
  PERSERVE_RETURN_IF_ERROR(CollectUpdates(kNoWait));
  PERSERVE_RETURN_IF_ERROR(CheckUpdate(keys, priorities));
  // Back-pressure: at most max_in_flight - 1 unacknowledged before this one
  // (each is one request a shard it touches).
  PERSERVE_RETURN_IF_ERROR(CollectUpdates(static_cast<size_t>(options_.max_in_flight - 1) *
                                          static_cast<size_t>(connection_->shard_count())));
  std::vector<uint64_t> ids;
  PERSERVE_RETURN_IF_ERROR(SendUpdates(table, keys, priorities, &ids));
  pending_updates_.insert(pending_updates_.end(), ids.begin(), ids.end());
  return Status::Ok();
}

Status LearnerClient::CollectUpdates(size_t keep_pending) {
  while (!pending_updates_.empty()) {
    std::vector<std::byte> message;
    proto::Frame frame;
    bool ready = true;
    const uint64_t id = pending_updates_.front();
    Status status = pending_updates_.size() > keep_pending ? connection_->AwaitReply(id, &message, &frame)
                                                           : connection_->PollReply(id, &ready, &message, &frame);
    if (!ready) break;
    pending_updates_.pop_front();
    proto::UpdateReply reply;
    if (status.ok()) status = proto::DecodeMeta(frame, &reply);
    if (status.ok()) {
      updates_.applied += reply.applied;
      updates_.stale += reply.stale;
      updates_.dropped += reply.dropped;
    } else if (unreported_update_errors_++ == 0) {
      update_error_ = status;
    }
  }
  return TakePendingError();
}

Status LearnerClient::TakePendingError() {
  const int64_t count = std::exchange(unreported_update_errors_, 0);
  const Status first = std::exchange(update_error_, Status::Ok());
  if (count == 0) return Status::Ok();
  const std::string what = count == 1 ? std::string("an earlier priority update was rejected: ")
                                      : fmt::format("{} earlier priority updates were rejected; the first: ", count);
  return Status::FromCode(static_cast<int>(first.code()), what + first.message());
}

Status LearnerClient::Flush() {
  if (closed_) return Status::Ok();
  return CollectUpdates(0);
}

Status LearnerClient::Peers(MPI_Comm* peers) { return connection_->Peers(peers); }

Status LearnerClient::Close() {
  if (closed_) return Status::Ok();
  OpenClients::Unregister(this);
  const Status flushed = CollectUpdates(0);
  closed_ = true;
  pending_samples_.clear();  // the server drops a deferred sample of a closed client
  const Status closed = connection_->Close();
  return flushed.ok() ? closed : flushed;
}

}  // namespace perserve
