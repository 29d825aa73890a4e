// Clients that reach MPI_Finalize without Close() are closed by the library on
// the way (issue 12), under mpirun beside perserve-server --column id:int64
// --column value:float64 --capacity 1000 --min-size-to-sample <items>
// (tests/CMakeLists.txt: mpi_finalize_closes_clients, and with Python actors
// python_finalize_closes_clients):
//
//   actor <n>                 adds n items (ids 0..n-1, value id / 2) in
//                             batches of 10, then one of 1001 items (over the
//                             capacity: rejected), and calls MPI_Finalize
//                             with neither Flush nor Close. The hook must
//                             have flushed (n acknowledged, 1 rejected) and
//                             printed the closing line and the rejection,
//                             and counted it (UnreceivedCloseErrors).
//   learner <items> <actors>  its first sample waits until the replay holds
//                             all items; checks the sampled ids (with one
//                             actor, key == id), sends a priority update
//                             without waiting, and finalizes without Close:
//                             the hook collects the update's acknowledgement.
//   bystander                 keeps its handle through MPI_Finalize: freed
//                             there silently, Peers refused after.
//
// Without the hook the server waits for the closes that never come, and the
// job never ends (the ctest's TIMEOUT catches that).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "check.h"
#include "perserve/client.h"

namespace {

using perserve::Status;

int rank = -1;

using perserve::mpi_test::Contains;

// MPI_Finalize with this process's stderr going to a temporary file; returns
// what was written there (and echoes it to the real stderr, for the log).
std::string FinalizeCapturingStderr() {
  std::fflush(stderr);
  FILE* capture = std::tmpfile();
  CHECK(capture != nullptr, "tmpfile");
  const int saved = dup(STDERR_FILENO);
  CHECK(saved >= 0 && dup2(fileno(capture), STDERR_FILENO) >= 0, "dup2");
  MPI_Finalize();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string text;
  std::rewind(capture);
  char chunk[4096];
  for (size_t got; (got = std::fread(chunk, 1, sizeof chunk, capture)) > 0;) text.append(chunk, got);
  std::fclose(capture);
  std::fputs(text.c_str(), stderr);
  return text;
}

// The line the hook prints for a client it closed.
std::string ClosedLine(const char* role) {
  return fmt::format("perserve: rank {}: {} closed at MPI_Finalize; call close() yourself to see its errors", rank,
                     role);
}

int Actor(int64_t items) {
  std::unique_ptr<perserve::ActorClient> actor;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor));
  for (int64_t start = 0; start < items; start += 10) {
    const int64_t n = std::min<int64_t>(10, items - start);
    std::vector<int64_t> ids(n);
    std::vector<double> values(n);
    for (int64_t j = 0; j < n; ++j) {
      ids[j] = start + j;
      values[j] = 0.5 * static_cast<double>(ids[j]);
    }
    CHECK_OK(actor->Add(perserve::ColumnSpans{n, {std::as_bytes(std::span(ids)), std::as_bytes(std::span(values))}}));
  }
  // Over the capacity: only the server knows, and nobody asks before MPI_Finalize.
  const std::vector<int64_t> big_ids(1001, 0);
  const std::vector<double> big_values(1001, 0.0);
  CHECK_OK(actor->Add(
      perserve::ColumnSpans{1001, {std::as_bytes(std::span(big_ids)), std::as_bytes(std::span(big_values))}}));

  const std::string said = FinalizeCapturingStderr();  // no Flush, no Close
  CHECK(Contains(said, ClosedLine("actor")), "stderr: {}", said);
  CHECK(Contains(said, fmt::format("perserve: rank {}: the actor's close at MPI_Finalize failed: INVALID_ARGUMENT: "
                                   "an earlier batch was rejected: server: an add of 1001 items",
                                   rank)),
        "stderr: {}", said);
  CHECK(actor->items_acknowledged() == items && actor->rejected_batches() == 1, "{} acknowledged, {} rejected",
        actor->items_acknowledged(), actor->rejected_batches());
  CHECK(perserve::UnreceivedCloseErrors() == 1, "{} close errors counted", perserve::UnreceivedCloseErrors());
  CHECK_OK(actor->Close());  // closed already: harmless
  actor.reset();             // the destructor after MPI_Finalize does nothing
  return 0;
}

int Learner(int64_t items, int actors) {
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, {}, &learner));
  perserve::SampleBatch batch;
  CHECK_OK(learner->Sample(1000, 0.4, &batch));  // deferred until the replay holds every item
  CHECK(batch.size == 1000, "{}", batch.size);
  const auto* ids = reinterpret_cast<const int64_t*>(batch.columns[0].data());
  const auto* values = reinterpret_cast<const double*>(batch.columns[1].data());
  for (int64_t i = 0; i < batch.size; ++i) {
    CHECK(ids[i] >= 0 && ids[i] < items / actors, "id {}", ids[i]);
    CHECK(values[i] == 0.5 * static_cast<double>(ids[i]), "id {} value {}", ids[i], values[i]);
    CHECK(batch.keys[i] < static_cast<uint64_t>(items), "key {}", batch.keys[i]);
    if (actors == 1) CHECK(batch.keys[i] == static_cast<uint64_t>(ids[i]), "key {} id {}", batch.keys[i], ids[i]);
  }
  const std::vector<uint64_t> keys(batch.keys.begin(), batch.keys.begin() + 10);
  CHECK_OK(learner->SendPriorityUpdate(keys, std::vector<double>(10, 2.0)));

  const std::string said = FinalizeCapturingStderr();  // no Flush, no Close
  CHECK(Contains(said, ClosedLine("learner")), "stderr: {}", said);
  CHECK(!Contains(said, "close at MPI_Finalize failed"), "stderr: {}", said);
  CHECK(learner->updates().applied == 10, "{} applied", learner->updates().applied);
  CHECK(perserve::UnreceivedCloseErrors() == 0, "{} close errors counted", perserve::UnreceivedCloseErrors());
  CHECK_OK(learner->Close());
  learner.reset();
  std::printf("finalize_test: learner saw all %lld items; the update was acknowledged inside MPI_Finalize\n",
              static_cast<long long>(items));
  return 0;
}

int Bystander() {
  std::unique_ptr<perserve::Bystander> bystander;
  CHECK_OK(perserve::JoinAsBystander(MPI_COMM_WORLD, &bystander));
  const std::string said = FinalizeCapturingStderr();
  CHECK(!Contains(said, "perserve:"), "a bystander has nothing to report: {}", said);
  MPI_Comm peers = MPI_COMM_NULL;
  const Status s = bystander->Peers(&peers);  // no MPI call: refused
  CHECK(s.code() == Status::Code::kFailedPrecondition, "{}", s.ToString());
  bystander.reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  perserve::mpi_test::WorldRank();  // remembered for the checks after MPI_Finalize
  const std::string role = argc > 1 ? argv[1] : "";
  if (role == "actor" && argc == 3) return Actor(std::atoll(argv[2]));
  if (role == "learner" && argc == 4) return Learner(std::atoll(argv[2]), std::atoi(argv[3]));
  if (role == "bystander") return Bystander();
  fmt::print(stderr, "usage: {} actor <n> | learner <items> <actors> | bystander\n", argv[0]);
  MPI_Abort(MPI_COMM_WORLD, 2);
  return 2;
}
