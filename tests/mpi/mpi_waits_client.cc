// Jobs that used to hang without a word (issue 12), under mpirun beside a
// real perserve-server (tests/CMakeLists.txt has the command lines; the
// server's lines are checked by tests/mpi/expect_output.py). Each scenario
// exits non-zero on the first failed check.
//
//   actors_leave  (server --min-size-to-sample 100) the actor adds 10 items and
//                 closes; the learner's sample, which used to wait for ever,
//                 fails with FAILED_PRECONDITION saying no actor remains.
//   late          a bystander that joins 9 s late; the others just join and
//                 close (the server names the late rank while it waits).
//   skew          the rate limiter under a skewed load: `fast_actor` adds as
//                 fast as it may while `slow_learner` samples with a pause,
//                 or the reverse (`slow_actor`, `fast_learner`). The learner
//                 samples until the actor has closed and its samples can
//                 never be served (FAILED_PRECONDITION); the server's summary
//                 reports the ratio's offsets, checked by expect_output.py.
//   prefetch_barrier  (server: 8 KB rows, --capacity 256) issue 24's finding
//                 2: the learner samples with prefetch 4, stops with replies
//                 unread and waits for the actor in a barrier over Peers();
//                 the actor adds 1600 items, then joins the barrier. Rows of
//                 the unread replies, sent from the store, held the actor's
//                 adds for ever: a hang.
//   policy        (server --drop-bad-priorities --min-size-to-sample 512) a
//                 learner update of 512 priorities with one NaN and one zero,
//                 which used to be refused whole: 510 are applied, 2 dropped.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "perserve/client.h"
#include "raw_client.h"

namespace {

using perserve::Status;

using perserve::mpi_test::Contains;

std::unique_ptr<perserve::ActorClient> JoinActor() {
  std::unique_ptr<perserve::ActorClient> actor;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor));
  return actor;
}

std::unique_ptr<perserve::LearnerClient> JoinLearner() {
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, {}, &learner));
  return learner;
}

// `count` items of the server's default schema (every column zero-filled but `reward`).
void AddItems(perserve::ActorClient* actor, int64_t count) {
  std::vector<std::vector<std::byte>> columns;
  perserve::BatchView batch{count, {}};
  for (const perserve::Column& column : actor->schema().columns) {
    columns.emplace_back(static_cast<size_t>(count * column.ItemBytes()), std::byte{0});
    batch.columns.push_back(columns.back().data());
  }
  CHECK_OK(actor->Add(batch));
}

int ActorsLeaveActor() {
  auto actor = JoinActor();
  AddItems(actor.get(), 10);
  CHECK_OK(actor->Close());
  return 0;
}

int ActorsLeaveLearner() {
  auto learner = JoinLearner();
  perserve::SampleBatch batch;
  const auto start = std::chrono::steady_clock::now();
  const Status sampled = learner->Sample(8, 0.4, &batch);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(sampled.code() == Status::Code::kFailedPrecondition, "{}", sampled.ToString());
  CHECK(Contains(sampled, "no actor remains open") && Contains(sampled, "holds 10 of the 100 items"), "{}",
        sampled.ToString());
  CHECK_OK(learner->Close());
  fmt::print("actors_leave: the learner's sample failed after {:.2f} s: {}\n", waited, sampled.ToString());
  return 0;
}

int Late(const std::string& role) {
  if (role == "bystander") {
    std::this_thread::sleep_for(std::chrono::seconds(9));
    CHECK_OK(perserve::JoinAsBystander(MPI_COMM_WORLD));
    return 0;
  }
  if (role == "actor") {
    auto actor = JoinActor();
    AddItems(actor.get(), 5);
    CHECK_OK(actor->Close());
    return 0;
  }
  auto learner = JoinLearner();
  CHECK_OK(learner->Close());
  return 0;
}

// The learner samples 32 items at a time until its samples can never be
// served again (the actor has closed and the limiter or the minimum size
// holds them), pausing `pause_ms` between samples.
int SkewLearner(int pause_ms) {
  auto learner = JoinLearner();
  perserve::SampleBatch batch;
  int64_t sampled = 0;
  while (true) {
    const Status status = learner->Sample(32, 0.4, &batch);
    if (status.code() == Status::Code::kFailedPrecondition && Contains(status, "no actor remains open")) break;
    CHECK_OK(status);
    sampled += batch.size;
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  CHECK_OK(learner->Close());
  fmt::print("skew: the learner sampled {} items\n", sampled);
  return 0;
}

// The actor adds `batches` batches of 20, pausing `pause_ms` between them.
int SkewActor(int batches, int pause_ms) {
  auto actor = JoinActor();
  for (int b = 0; b < batches; ++b) {
    AddItems(actor.get(), 20);
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  CHECK_OK(actor->Close());
  fmt::print("skew: the actor added {} items\n", 20 * batches);
  return 0;
}

int PolicyActor() {
  auto actor = JoinActor();
  AddItems(actor.get(), 512);
  CHECK_OK(actor->Close());
  return 0;
}

int PolicyLearner() {
  auto learner = JoinLearner();
  perserve::SampleBatch batch;
  CHECK_OK(learner->Sample(512, 0.4, &batch));
  std::vector<double> priorities(512, 2.0);
  priorities[7] = std::nan("");
  priorities[8] = -1.0;
  priorities[9] = 0.0;  // valid under the default --priority-eps 1e-6: applied, not dropped
  perserve::UpdateResult result;
  CHECK_OK(learner->UpdatePriorities(batch.keys, priorities, &result));
  CHECK(result.dropped == 2 && result.applied == 510 && result.stale == 0, "applied {} stale {} dropped {}",
        result.applied, result.stale, result.dropped);
  CHECK_OK(learner->Close());
  fmt::print("policy: 510 priorities applied (the zero among them), the NaN and the negative one dropped\n");
  return 0;
}

}  // namespace

// Both roles meet here, over every non-server rank, once the actor's adds are in.
void BarrierOverPeers(MPI_Comm peers) {
  CHECK(MPI_Barrier(peers) == MPI_SUCCESS, "barrier over the peers");
  MPI_Comm_free(&peers);
}

int PrefetchBarrierActor() {
  std::unique_ptr<perserve::ActorClient> actor = JoinActor();
  for (int batch = 0; batch < 400; ++batch) AddItems(actor.get(), 4);
  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(actor->Peers(&peers));
  BarrierOverPeers(peers);
  CHECK_OK(actor->Close());
  fmt::print("prefetch_barrier: the actor added {} items and met the learner\n", actor->items_acknowledged());
  return 0;
}

int PrefetchBarrierLearner() {
  perserve::ClientOptions options;
  options.prefetch = 4;
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, options, &learner));
  perserve::SampleBatch batch;
  for (int round = 0; round < 5; ++round) CHECK_OK(learner->Sample(16, 0.4, &batch));  // 131 KB replies
  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(learner->Peers(&peers));  // four replies unread
  BarrierOverPeers(peers);
  CHECK_OK(learner->Close());
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string scenario = argc > 1 ? argv[1] : "";
  const std::string role = argc > 2 ? argv[2] : "";
  const int batches = argc > 3 ? std::atoi(argv[3]) : 300;
  int code = 2;
  if (scenario == "actors_leave" && role == "actor") code = ActorsLeaveActor();
  if (scenario == "actors_leave" && role == "learner") code = ActorsLeaveLearner();
  if (scenario == "late") code = Late(role);
  if (scenario == "prefetch_barrier" && role == "actor") code = PrefetchBarrierActor();
  if (scenario == "prefetch_barrier" && role == "learner") code = PrefetchBarrierLearner();
  if (scenario == "policy" && role == "actor") code = PolicyActor();
  if (scenario == "policy" && role == "learner") code = PolicyLearner();
  if (scenario == "skew" && role == "fast_actor") code = SkewActor(batches, 0);
  if (scenario == "skew" && role == "slow_actor") code = SkewActor(batches, 2);
  if (scenario == "skew" && role == "fast_learner") code = SkewLearner(0);
  if (scenario == "skew" && role == "slow_learner") code = SkewLearner(2);
  if (code == 2) fmt::print(stderr, "usage: mpi_waits_client <scenario> <role> [batches]\n");
  MPI_Finalize();
  return code;
}
