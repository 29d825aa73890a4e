#include "mpi/communicator.h"

#include <utility>

namespace perserve::mpi {

Status Check(int code, const char* what) {
  if (code == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Status::Internal(std::string(what) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

Status ReceiveMatched(MPI_Message* message, void* buffer, int count, MPI_Datatype type,
                      const StopWaiting& stop_waiting, std::vector<std::byte>* owner) {
  if (stop_waiting.empty()) return Check(MPI_Mrecv(buffer, count, type, message, MPI_STATUS_IGNORE), "MPI_Mrecv");
  const auto is_paused = [&stop_waiting] { return stop_waiting.paused && stop_waiting.paused(); };
  // Paused already: the matched message is dropped unreceived, as an
  // abandoned one is (MPI_Imrecv may already send to its sender, for a large one).
  bool paused = is_paused();
  MPI_Request request = MPI_REQUEST_NULL;
  if (paused) {
    *message = MPI_MESSAGE_NULL;
  } else {
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Imrecv(buffer, count, type, message, &request), "MPI_Imrecv"));
  }
  using Clock = std::chrono::steady_clock;
  Clock::time_point abandon_at = Clock::time_point::max();
  while (!paused) {
    int completed = 0;
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Test(&request, &completed, MPI_STATUS_IGNORE), "MPI_Test"));
    if (completed) return Status::Ok();
    if (abandon_at == Clock::time_point::max() && stop_waiting.terminating && stop_waiting.terminating()) {
      abandon_at = Clock::now() + kAbandonAfter;
    }
    if (Clock::now() >= abandon_at) break;
    paused = is_paused();  // asked before each MPI call: SIGTERM may come while one runs
  }
  if (!paused) (void)MPI_Request_free(&request);
  if (owner != nullptr) {
    // The targets of receives that may still complete (the server's loop
    // thread alone gives up on receives).
    static std::vector<std::vector<std::byte>> abandoned;
    abandoned.push_back(std::exchange(*owner, {}));
  }
  return Status::Unavailable(paused ? "received no further: the server stopped receiving at SIGTERM until its final "
                                      "checkpoint is complete"
                                    : "its sender stopped sending a message already begun");
}

Status ReceiveBytes(MPI_Comm comm, int source, int tag, bool wait, std::vector<std::byte>* buffer, bool* received,
                    int* matched_tag, const StopWaiting& stop_waiting) {
  size_t length = 0;
  PERSERVE_RETURN_IF_ERROR(
      ReceiveGrowing(comm, source, tag, wait, buffer, &length, received, matched_tag, stop_waiting));
  if (*received) buffer->resize(length);
  return Status::Ok();
}

Status ReceiveGrowing(MPI_Comm comm, int source, int tag, bool wait, std::vector<std::byte>* buffer, size_t* length,
                      bool* received, int* matched_tag, const StopWaiting& stop_waiting) {
  *received = false;
  if (stop_waiting.paused && stop_waiting.paused()) return Status::Ok();
  int flag = 1;
  MPI_Message message;
  MPI_Status status;
  if (wait) {
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Mprobe(source, tag, comm, &message, &status), "MPI_Mprobe"));
  } else {
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Improbe(source, tag, comm, &flag, &message, &status), "MPI_Improbe"));
  }
  *received = flag != 0;
  if (!flag) return Status::Ok();
  if (matched_tag != nullptr) *matched_tag = status.MPI_TAG;
  int count = 0;
  PERSERVE_RETURN_IF_ERROR(Check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count"));
  *length = static_cast<size_t>(count);
  if (buffer->size() < *length) buffer->resize(*length);
  return ReceiveMatched(&message, buffer->data(), count, MPI_BYTE, stop_waiting, buffer);
}

Communicator::~Communicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

Status Communicator::Duplicate(MPI_Comm parent) {
  MPI_Request request = MPI_REQUEST_NULL;
  PERSERVE_RETURN_IF_ERROR(BeginDuplicate(parent, &request));
  PERSERVE_RETURN_IF_ERROR(Check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait (MPI_Comm_idup)"));
  return FinishDuplicate();
}

Status Communicator::BeginDuplicate(MPI_Comm parent, MPI_Request* request) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) PERSERVE_RETURN_IF_ERROR(Check(MPI_Init(nullptr, nullptr), "MPI_Init"));
  return Check(MPI_Comm_idup(parent, &comm_, request), "MPI_Comm_idup");
}

Status Communicator::FinishDuplicate() {
  PERSERVE_RETURN_IF_ERROR(Check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  PERSERVE_RETURN_IF_ERROR(Check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank"));
  return Check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

}  // namespace perserve::mpi
