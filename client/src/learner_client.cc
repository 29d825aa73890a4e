#include <fmt/format.h>

#include "client/src/connection.h"
#include "perserve/client.h"

namespace perserve {

using client_internal::Connection;

Status LearnerClient::Join(MPI_Comm comm, const ClientOptions&, std::unique_ptr<LearnerClient>* learner) {
  auto connection = std::make_unique<Connection>();
  PERSERVE_RETURN_IF_ERROR(connection->Join(comm, proto::Role::kLearner));
  learner->reset(new LearnerClient(std::move(connection)));
  return Status::Ok();
}

LearnerClient::LearnerClient(std::unique_ptr<Connection> connection) : connection_(std::move(connection)) {}

LearnerClient::~LearnerClient() { (void)Close(); }

const Schema& LearnerClient::schema() const { return connection_->schema(); }

Status LearnerClient::Sample(int64_t batch_size, double beta, SampleBatch* batch) {
  PERSERVE_RETURN_IF_ERROR(RequestSample(batch_size, beta));
  return ReceiveSample(batch);
}

Status LearnerClient::RequestSample(int64_t batch_size, double beta) {
  if (closed_) return Status::FailedPrecondition("the learner is closed");
  if (pending_sample_ != 0) return Status::FailedPrecondition("a sample request is already in flight");
  const uint64_t id = connection_->NextRequestId();
  std::vector<std::byte> frame;
  proto::EncodeFrame(proto::MessageKind::kSampleRequest, id, proto::SampleRequest{batch_size, beta}, {}, &frame);
  PERSERVE_RETURN_IF_ERROR(connection_->Send(std::move(frame)));
  pending_sample_ = id;
  return Status::Ok();
}

Status LearnerClient::ReceiveSample(SampleBatch* batch) {
  if (pending_sample_ == 0) return Status::FailedPrecondition("no sample request is in flight");
  const uint64_t id = std::exchange(pending_sample_, 0);
  proto::Frame frame;
  PERSERVE_RETURN_IF_ERROR(connection_->AwaitReply(id, &batch->message, &frame));
  proto::SampleReply reply;
  PERSERVE_RETURN_IF_ERROR(proto::DecodeMeta(frame, &reply));
  const size_t count = static_cast<size_t>(reply.count);
  std::span<const std::byte> bulk = frame.bulk;
  PERSERVE_RETURN_IF_ERROR(proto::TakeArray(&bulk, count, &batch->keys));
  PERSERVE_RETURN_IF_ERROR(proto::TakeArray(&bulk, count, &batch->weights));
  PERSERVE_RETURN_IF_ERROR(proto::TakeArray(&bulk, count, &batch->probabilities));
  batch->size = reply.count;
  batch->columns.clear();
  for (const Column& column : schema().columns) {
    const size_t bytes = count * static_cast<size_t>(column.ItemBytes());
    if (bulk.size() < bytes) return Status::Internal("a sample reply is shorter than its schema says");
    batch->columns.push_back(bulk.first(bytes));
    bulk = bulk.subspan(bytes);
  }
  return Status::Ok();
}

Status LearnerClient::UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities,
                                       UpdateResult* result) {
  if (closed_) return Status::FailedPrecondition("the learner is closed");
  if (keys.size() != priorities.size()) {
    return Status::InvalidArgument(fmt::format("{} keys but {} priorities", keys.size(), priorities.size()));
  }
  const uint64_t id = connection_->NextRequestId();
  std::vector<std::byte> frame;
  proto::EncodeFrame(proto::MessageKind::kUpdateRequest, id, proto::UpdateRequest{static_cast<int64_t>(keys.size())},
                     {std::as_bytes(keys), std::as_bytes(priorities)}, &frame);
  PERSERVE_RETURN_IF_ERROR(connection_->Send(std::move(frame)));
  std::vector<std::byte> message;
  proto::Frame reply_frame;
  PERSERVE_RETURN_IF_ERROR(connection_->AwaitReply(id, &message, &reply_frame));
  proto::UpdateReply reply;
  PERSERVE_RETURN_IF_ERROR(proto::DecodeMeta(reply_frame, &reply));
  if (result != nullptr) *result = UpdateResult{reply.applied, reply.stale};
  return Status::Ok();
}

Status LearnerClient::Close() {
  if (closed_) return Status::Ok();
  closed_ = true;
  pending_sample_ = 0;  // the server drops a deferred sample of a closed client
  return connection_->Close();
}

Status JoinAsBystander(MPI_Comm comm) {
  mpi::Communicator joined;
  mpi::JoinResult result;
  return mpi::Join(comm, proto::Role::kBystander, nullptr, &joined, &result);
}

}  // namespace perserve
