// perserve-demo-client: synthetic actors and learners for the demo and smoke
// tests. Run in the same job as perserve-server:
//   mpirun -np 1 perserve-server : -np 2 perserve-demo-client --role actor
//          : -np 1 perserve-demo-client --role learner
// Actors send CartPole-like transitions (the server's default schema, or any
// schema: columns are filled with patterned bytes) in batches with random
// priorities; learners sample, keep one sample in flight while "training",
// and send back new priorities.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "perserve/client.h"

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int Fail(int rank, const char* role, const perserve::Status& status) {
  fmt::print(stderr, "[rank {} {}] {}\n", rank, role, status.ToString());
  return 1;
}

// A request the server answered UNAVAILABLE: it has stopped serving
// (SIGTERM, or perserve-launch's Ctrl-C) and its final checkpoint is
// complete. The client closes (the requests still in flight were refused
// too: that error says so, and is expected) and ends cleanly, so the job
// ends without a launcher killing a rank; anything else is a failure.
template <class Client>
int StopOrFail(int rank, const char* role, const perserve::Status& status, Client* client) {
  if (status.code() != perserve::Status::Code::kUnavailable) return Fail(rank, role, status);
  fmt::print("[rank {} {}] the server stopped: {}\n", rank, role, status.message());
  (void)client->Close();
  return 0;
}

// Writes `value` as element e of an array of `dtype`.
void SetElement(perserve::DType dtype, unsigned char* data, int64_t e, double value) {
  switch (dtype) {
    case perserve::DType::kUInt8: data[e] = static_cast<unsigned char>(value); return;
    case perserve::DType::kInt32: { const int32_t v = static_cast<int32_t>(value); std::memcpy(data + 4 * e, &v, 4); return; }
    case perserve::DType::kInt64: { const int64_t v = static_cast<int64_t>(value); std::memcpy(data + 8 * e, &v, 8); return; }
    case perserve::DType::kFloat32: { const float v = static_cast<float>(value); std::memcpy(data + 4 * e, &v, 4); return; }
    case perserve::DType::kFloat64: std::memcpy(data + 8 * e, &value, 8); return;
  }
}

int RunActor(int rank, double seconds, int64_t batch_size) {
  std::unique_ptr<perserve::ActorClient> actor;
  if (auto s = perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor); !s.ok()) return Fail(rank, "actor", s);
  const perserve::Schema& schema = actor->schema();
  std::mt19937_64 rng(static_cast<uint64_t>(rank));
  std::uniform_real_distribution<double> priority(0.1, 2.0);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::bernoulli_distribution episode_ends(0.01);
  std::vector<std::vector<unsigned char>> columns;
  perserve::BatchView batch{batch_size, {}};
  for (const perserve::Column& column : schema.columns) {
    columns.emplace_back(static_cast<size_t>(batch_size * column.ItemBytes()));
    batch.columns.push_back(columns.back().data());
  }
  std::vector<double> priorities(static_cast<size_t>(batch_size));
  int64_t batches = 0;
  const auto start = Clock::now();
  while (SecondsSince(start) < seconds) {
    // Plausible values: a reward of 1 a step, episodes of ~100 steps, small
    // floats, random bytes elsewhere.
    for (size_t c = 0; c < columns.size(); ++c) {
      const perserve::Column& column = schema.columns[c];
      const int64_t elements = batch_size * column.ElementCount();
      for (int64_t e = 0; e < elements; ++e) {
        if (column.name == "done") {
          SetElement(column.dtype, columns[c].data(), e, episode_ends(rng) ? 1.0 : 0.0);
        } else if (column.name == "reward") {
          SetElement(column.dtype, columns[c].data(), e, 1.0);
        } else {
          SetElement(column.dtype, columns[c].data(), e, column.dtype == perserve::DType::kUInt8
                                                             ? static_cast<double>(rng() & 0xff)
                                                             : unit(rng));
        }
      }
    }
    for (double& p : priorities) p = priority(rng);
    if (auto s = actor->Add(batch, priorities); !s.ok()) return StopOrFail(rank, "actor", s, actor.get());
    ++batches;
  }
  if (auto s = actor->Close(); !s.ok()) return StopOrFail(rank, "actor", s, actor.get());
  fmt::print("[rank {} actor] sent {} batches of {} ({} items acknowledged) in {:.1f} s\n", rank, batches, batch_size,
             actor->items_acknowledged(), SecondsSince(start));
  return 0;
}

int RunLearner(int rank, double seconds, int64_t batch_size, double beta) {
  std::unique_ptr<perserve::LearnerClient> learner;
  if (auto s = perserve::LearnerClient::Join(MPI_COMM_WORLD, {}, &learner); !s.ok()) return Fail(rank, "learner", s);
  const auto end = [&](const perserve::Status& status) { return StopOrFail(rank, "learner", status, learner.get()); };
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(rank));
  std::exponential_distribution<double> td_error(1.0);
  perserve::SampleBatch batch;
  std::vector<double> priorities;
  int64_t steps = 0, stale = 0;
  double weight_sum = 0.0;
  const auto start = Clock::now();
  auto report = start;
  if (auto s = learner->RequestSample(batch_size, beta); !s.ok()) return end(s);
  while (SecondsSince(start) < seconds) {
    if (auto s = learner->ReceiveSample(&batch); !s.ok()) return end(s);
    // Ask for the next batch now, so it is on its way while this one "trains".
    if (auto s = learner->RequestSample(batch_size, beta); !s.ok()) return end(s);
    priorities.resize(batch.keys.size());
    for (double& p : priorities) p = 1e-3 + td_error(rng);
    for (double w : batch.weights) weight_sum += w;
    perserve::UpdateResult result;
    if (auto s = learner->UpdatePriorities(batch.keys, priorities, &result); !s.ok()) return end(s);
    stale += result.stale;
    ++steps;
    if (SecondsSince(report) >= 2.0) {
      fmt::print("[rank {} learner] {} steps, {:.0f} samples/s, mean IS weight {:.3f}, {} stale updates\n", rank,
                 steps, steps * batch_size / SecondsSince(start), weight_sum / (steps * batch_size), stale);
      report = Clock::now();
    }
  }
  if (auto s = learner->Close(); !s.ok()) return end(s);
  fmt::print("[rank {} learner] done: {} steps of {} in {:.1f} s\n", rank, steps, batch_size, SecondsSince(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"perserve demo actor / learner"};
  std::string role = "actor";
  double seconds = 10.0;
  int64_t batch_size = 0;
  double beta = 0.4;
  app.add_option("--role", role, "actor or learner")->check(CLI::IsMember({"actor", "learner"}))->capture_default_str();
  app.add_option("--seconds", seconds, "how long to run")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", batch_size, "items per add / sample (default 50 / 512)")->check(CLI::NonNegativeNumber);
  app.add_option("--beta", beta, "importance-sampling exponent")->check(CLI::NonNegativeNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int code = role == "actor" ? RunActor(rank, seconds, batch_size > 0 ? batch_size : 50)
                                   : RunLearner(rank, seconds, batch_size > 0 ? batch_size : 512, beta);
  MPI_Finalize();
  return code;
}
