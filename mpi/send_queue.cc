#include "mpi/send_queue.h"

#include <algorithm>
#include <limits>
#include <string>

#include "mpi/communicator.h"

namespace perserve::mpi {

SendQueue::~SendQueue() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) (void)Drain();
}

std::vector<std::byte> SendQueue::Acquire(size_t expected_bytes) {
  if (pool_.empty()) return {};
  // How far a buffer's capacity is from the bytes expected, as a ratio (>= 1).
  const auto distance = [expected_bytes](const std::vector<std::byte>& buffer) {
    const double have = static_cast<double>(std::max<size_t>(buffer.capacity(), 1));
    const double want = static_cast<double>(std::max<size_t>(expected_bytes, 1));
    return std::max(have / want, want / have);
  };
  size_t pick = 0;
  for (size_t i = 1; i < pool_.size(); ++i) {
    const double d = distance(pool_[i]), best = distance(pool_[pick]);
    const bool fits = pool_[i].capacity() >= expected_bytes, best_fits = pool_[pick].capacity() >= expected_bytes;
    if (d < best || (d == best && fits && !best_fits)) pick = i;
  }
  std::vector<std::byte> buffer = std::move(pool_[pick]);
  pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(pick));
  return buffer;
}

namespace {

Status CheckMessageBytes(size_t bytes) {
  if (bytes <= static_cast<size_t>(std::numeric_limits<int>::max())) return Status::Ok();
  return Status::InvalidArgument("a message of " + std::to_string(bytes) + " bytes exceeds MPI's 2 GiB message limit");
}

}  // namespace

Status SendQueue::Send(std::vector<std::byte> bytes, int rank, int tag, MPI_Comm comm, bool tracked) {
  PERSERVE_RETURN_IF_ERROR(CheckMessageBytes(bytes.size()));
  MPI_Request request;
  PERSERVE_RETURN_IF_ERROR(
      Check(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, rank, tag, comm, &request), "MPI_Isend"));
  const auto size = static_cast<int64_t>(bytes.size());
  Started(request, std::move(bytes), size, rank, tracked, 0);
  return Status::Ok();
}

Status SendQueue::SendTyped(std::vector<std::byte> head, MPI_Datatype* type, int64_t bytes, int rank, int tag,
                            MPI_Comm comm, bool tracked, uint64_t token) {
  MPI_Request request = MPI_REQUEST_NULL;
  Status status = CheckMessageBytes(static_cast<size_t>(bytes));
  if (status.ok()) status = Check(MPI_Isend(MPI_BOTTOM, 1, *type, rank, tag, comm, &request), "MPI_Isend");
  MPI_Type_free(type);
  PERSERVE_RETURN_IF_ERROR(status);
  Started(request, std::move(head), bytes, rank, tracked, token);
  return Status::Ok();
}

void SendQueue::Started(MPI_Request request, std::vector<std::byte> buffer, int64_t bytes, int rank, bool tracked,
                        uint64_t token) {
  requests_.push_back(request);
  buffers_.push_back(std::move(buffer));
  bytes_.push_back(bytes);
  tokens_.push_back(token);
  tracked_ranks_.push_back(tracked ? rank : -1);
  if (tracked) {
    InFlight& in_flight = tracked_[rank];
    ++in_flight.messages;
    in_flight.bytes += bytes;
  }
}

void SendQueue::TakeCompleted(std::vector<uint64_t>* tokens) {
  tokens->swap(completed_tokens_);
  completed_tokens_.clear();
}

SendQueue::InFlight SendQueue::TrackedInFlight(int rank) const {
  const auto found = tracked_.find(rank);
  return found == tracked_.end() ? InFlight{} : found->second;
}

size_t SendQueue::pooled_bytes() const {
  size_t bytes = 0;
  for (const auto& buffer : pool_) bytes += buffer.capacity();
  return bytes;
}

Status SendQueue::Progress() {
  if (requests_.empty()) return Status::Ok();
  int completed = 0;
  done_.resize(requests_.size());
  PERSERVE_RETURN_IF_ERROR(Check(MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &completed,
                                              done_.data(), MPI_STATUSES_IGNORE),
                                 "MPI_Testsome"));
  if (completed > 0) ReleaseCompleted();
  return Status::Ok();
}

Status SendQueue::Await(uint64_t token) {
  const auto pending = std::find(tokens_.begin(), tokens_.end(), token);
  if (pending != tokens_.end()) {
    MPI_Request& request = requests_[static_cast<size_t>(pending - tokens_.begin())];
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait"));
    ReleaseCompleted();
  }
  std::erase(completed_tokens_, token);
  return Status::Ok();
}

void SendQueue::ReleaseCompleted() {
  // Completed requests are MPI_REQUEST_NULL: keep the others, in order.
  size_t kept = 0;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) {
      if (tokens_[i] != 0) completed_tokens_.push_back(tokens_[i]);
      if (tracked_ranks_[i] >= 0) {
        InFlight& in_flight = tracked_[tracked_ranks_[i]];
        in_flight.bytes -= bytes_[i];
        if (--in_flight.messages == 0) tracked_.erase(tracked_ranks_[i]);
      }
      const size_t capacity = buffers_[i].capacity();
      if (capacity > 0 && pool_.size() < kPoolSize && capacity <= kPoolBufferBytes &&
          pooled_bytes() + capacity <= kPoolBytes) {
        pool_.push_back(std::move(buffers_[i]));
      } else {
        std::vector<std::byte>().swap(buffers_[i]);  // freed now, not when the slot is reused
      }
      continue;
    }
    if (kept != i) {
      requests_[kept] = requests_[i];
      buffers_[kept] = std::move(buffers_[i]);
      bytes_[kept] = bytes_[i];
      tokens_[kept] = tokens_[i];
      tracked_ranks_[kept] = tracked_ranks_[i];
    }
    ++kept;
  }
  requests_.resize(kept);
  buffers_.resize(kept);
  bytes_.resize(kept);
  tokens_.resize(kept);
  tracked_ranks_.resize(kept);
}

Status SendQueue::Drain() {
  if (requests_.empty()) return Status::Ok();
  const Status status =
      Check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  for (uint64_t token : tokens_) {
    if (token != 0) completed_tokens_.push_back(token);
  }
  requests_.clear();
  buffers_.clear();
  bytes_.clear();
  tokens_.clear();
  tracked_ranks_.clear();
  tracked_.clear();
  return status;
}

}  // namespace perserve::mpi
