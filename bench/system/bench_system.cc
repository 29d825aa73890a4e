// perserve_bench_system: the replay rank under load, as an MPI job launched
// by scripts/bench-scaling.sh (or by hand):
//
//   mpirun -np <servers + actors + 1> perserve_bench_system --transport mpi|zmq --size small|atari
//                                                           [--servers K]
//
// Ranks 0..K-1 are the replay servers (K = 1 unless --servers; several are
// shards of one replay, MPI only), the last rank one learner, the ranks
// between actors. Two phases in one run (the first split in halves, one
// before the second and one after it):
//   1. raw MPI: the replay's traffic without the replay. Every actor streams
//      messages of exactly an intake batch's size (50 transitions with
//      priorities) to its server (actor i to server i mod K, the join's
//      placement) with 4 sends in flight, the bound the client library keeps;
//      at the same time the learner sends each server an update-sized request
//      and waits for a message of a sample reply's size (its share of 512
//      transitions), again and again. The servers only receive and answer.
//      That is the ceiling for intake and for sample replies between these
//      ranks, both directions at once, as in the replay phase.
//   2. the replay: actors add batches of 50 with priorities, the learner
//      samples 512 and updates 512 priorities in a loop, for --seconds, over
//      the chosen transport: the perserve client library over MPI, or the same
//      protocol and the same ReplayService over ZeroMQ (system/zmq_transport.h
//      says how it is tuned). Over MPI the learner sends each update without
//      waiting for its acknowledgement (SendPriorityUpdate, as an Ape-X
//      learner does), so a sample costs one round trip, as in phase 1; the
//      ZeroMQ baseline's learner waits for it.
// Rank 0 prints a table and writes the JSON (--out): intake_over_raw_mpi and
// sample_over_raw_mpi compare each direction's bytes/s with phase 1's, and
// server_cpu_s_per_gb is the servers' CPU seconds (getrusage) per GB they
// moved (intake in, sample replies out).
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench_schemas.h"
#include "mpi/join.h"
#include "perserve/client.h"
#include "replay/replay.h"
#include "service/mpi_transport.h"
#include "service/replay_service.h"
#include "system/zmq_client.h"
#include "system/zmq_transport.h"

namespace perserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr int64_t kIntakeBatch = 50;
constexpr int64_t kSampleBatch = 512;
constexpr int kRawTag = 801;
constexpr int kRawEndTag = 802;
constexpr int kRawReplyTag = 803;
constexpr int kInFlight = 4;

[[noreturn]] void Die(const std::string& what) {
  fmt::print(stderr, "perserve_bench_system: {}\n", what);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

void Check(const Status& status, const char* what) {
  if (!status.ok()) Die(std::string(what) + ": " + status.ToString());
}

// What each rank reports to rank 0 at the end.
struct Report {
  double role = 0;  // 0 server, 1 actor, 2 learner
  double items = 0, seconds = 0;
  double samples = 0, updates = 0, latency_median_ms = 0, latency_p99_ms = 0;
  double raw_bytes = 0, raw_seconds = 0;  // servers: intake received; the learner: replies received
  double raw_cpu_seconds = 0, raw_server_out_bytes = 0;  // servers
  double cpu_seconds = 0;                                // servers, over the replay phase
};

// The bytes of each message kind on the wire (frame header, meta, bulk).
struct Sizes {
  int64_t intake_message;  // an add of kIntakeBatch transitions with priorities
  int64_t update_message;  // an update of kSampleBatch priorities
  int64_t reply_message;   // a sample reply of kSampleBatch
};

Sizes SizesFor(const Schema& schema) {
  const int64_t header = static_cast<int64_t>(proto::kFrameHeaderBytes);
  const auto meta = [](const auto& m) { return static_cast<int64_t>(proto::SerializeMeta(m).size()); };
  return Sizes{header + meta(proto::AddRequest{}) + kIntakeBatch * (schema.ItemBytes() + 8),  // columns, priorities
               header + meta(proto::UpdateRequest{}) + kSampleBatch * 16,                     // keys, priorities
               header + meta(proto::SampleReply{}) +
                   kSampleBatch * (24 + schema.ItemBytes())};  // keys, weights, probabilities, columns
}

// This process's user + system CPU seconds so far.
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// Phase 1: the replay's traffic without the replay. Each actor streams
// intake-sized messages to its server (4 in flight); at the same time the
// learner sends each server an update-sized request and waits for its
// reply-sized answer (its share of a sample of 512), over and over, as a
// learner samples. Each server only receives, and answers each request from
// a buffer it keeps. Servers report the intake bytes, the learner the reply
// bytes, each with its seconds; servers also their CPU seconds.
void RawMpi(int rank, int size, int servers, const Sizes& sizes, double seconds, Report* report) {
  std::vector<std::byte> buffer(std::max(sizes.intake_message, sizes.update_message), std::byte{7});
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  const int actors = size - servers - 1;
  const int learner = size - 1;
  if (rank < servers) {
    const double cpu_start = CpuSeconds();
    std::vector<std::byte> reply(sizes.reply_message / servers, std::byte{9});
    MPI_Request reply_request = MPI_REQUEST_NULL;
    int ends = 0;
    double bytes = 0, reply_bytes = 0;
    const int my_clients = actors / servers + (rank < actors % servers ? 1 : 0) + 1;  // + the learner
    while (ends < my_clients) {
      MPI_Status status;
      MPI_Message message;
      MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &message, &status);
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      MPI_Mrecv(buffer.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
      if (status.MPI_TAG == kRawEndTag) {
        ++ends;
      } else if (status.MPI_SOURCE == learner) {
        MPI_Wait(&reply_request, MPI_STATUS_IGNORE);  // the learner asks again only once it has the last one
        MPI_Isend(reply.data(), static_cast<int>(reply.size()), MPI_BYTE, learner, kRawReplyTag, MPI_COMM_WORLD,
                  &reply_request);
        reply_bytes += static_cast<double>(reply.size());
      } else {
        bytes += count;
      }
    }
    MPI_Wait(&reply_request, MPI_STATUS_IGNORE);
    report->raw_bytes += bytes;
    report->raw_seconds += SecondsSince(start);
    report->raw_cpu_seconds += CpuSeconds() - cpu_start;
    report->raw_server_out_bytes += reply_bytes;
  } else if (rank < learner) {
    const int server = (rank - servers) % servers;
    std::vector<std::vector<std::byte>> buffers(kInFlight, std::vector<std::byte>(sizes.intake_message, std::byte{7}));
    MPI_Request requests[kInFlight];
    std::fill(std::begin(requests), std::end(requests), MPI_REQUEST_NULL);
    for (int64_t i = 0; SecondsSince(start) < seconds; ++i) {
      const int slot = static_cast<int>(i % kInFlight);
      MPI_Wait(&requests[slot], MPI_STATUS_IGNORE);
      MPI_Isend(buffers[slot].data(), static_cast<int>(sizes.intake_message), MPI_BYTE, server, kRawTag,
                MPI_COMM_WORLD, &requests[slot]);
    }
    MPI_Waitall(kInFlight, requests, MPI_STATUSES_IGNORE);
    MPI_Send(nullptr, 0, MPI_BYTE, server, kRawEndTag, MPI_COMM_WORLD);
  } else {
    const size_t share = static_cast<size_t>(sizes.reply_message / servers);
    std::vector<std::byte> replies(share * static_cast<size_t>(servers));
    std::vector<MPI_Request> requests(2 * static_cast<size_t>(servers));
    double bytes = 0;
    while (SecondsSince(start) < seconds) {
      for (int s = 0; s < servers; ++s) {
        MPI_Irecv(replies.data() + share * s, static_cast<int>(share), MPI_BYTE, s, kRawReplyTag, MPI_COMM_WORLD,
                  &requests[2 * s]);
        MPI_Isend(buffer.data(), static_cast<int>(sizes.update_message), MPI_BYTE, s, kRawTag, MPI_COMM_WORLD,
                  &requests[2 * s + 1]);
      }
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
      bytes += static_cast<double>(share) * servers;
    }
    for (int s = 0; s < servers; ++s) MPI_Send(nullptr, 0, MPI_BYTE, s, kRawEndTag, MPI_COMM_WORLD);
    report->raw_bytes += bytes;
    report->raw_seconds += SecondsSince(start);
  }
  // The servers receive any tag above: nobody may start the join (whose
  // hellos go to rank 0) before they are done.
  MPI_Barrier(MPI_COMM_WORLD);
}

void FillBatch(const Schema& schema, std::mt19937_64& rng, std::vector<std::vector<std::byte>>* columns,
               std::vector<double>* priorities) {
  columns->clear();
  for (const Column& column : schema.columns) {
    columns->emplace_back(static_cast<size_t>(kIntakeBatch * column.ItemBytes()));
    for (auto& b : columns->back()) b = static_cast<std::byte>(rng() & 0x3f);
  }
  std::uniform_real_distribution<double> priority(0.1, 2.0);
  priorities->resize(kIntakeBatch);
  for (double& p : *priorities) p = priority(rng);
}

void Latencies(std::vector<double> millis, Report* report) {
  if (millis.empty()) return;
  std::sort(millis.begin(), millis.end());
  report->latency_median_ms = millis[millis.size() / 2];
  report->latency_p99_ms = millis[std::min(millis.size() - 1, millis.size() * 99 / 100)];
}

void MpiActor(const Schema&, double seconds, int rank, int64_t columns_apart_min_bytes, Report* report) {
  std::unique_ptr<ActorClient> actor;
  ClientOptions options;
  options.max_in_flight = kInFlight;
  options.columns_apart_min_bytes = columns_apart_min_bytes;
  Check(ActorClient::Join(MPI_COMM_WORLD, options, &actor), "actor join");
  std::mt19937_64 rng(rank);
  std::vector<std::vector<std::byte>> columns;
  std::vector<double> priorities;
  FillBatch(actor->schema(), rng, &columns, &priorities);
  // The batch never changes, so the actor lends it (AddBorrowed: no copy), as
  // phase 1's actors send from their buffers.
  ColumnSpans batch{kIntakeBatch, {}};
  for (const auto& column : columns) batch.columns.push_back(std::span(column));
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  while (SecondsSince(start) < seconds) Check(actor->AddBorrowed(batch, priorities), "add");
  Check(actor->Close(), "actor close");
  report->items = static_cast<double>(actor->items_acknowledged());
  report->seconds = SecondsSince(start);
}

void MpiLearner(double seconds, Report* report) {
  std::unique_ptr<LearnerClient> learner;
  Check(LearnerClient::Join(MPI_COMM_WORLD, {}, &learner), "learner join");
  MPI_Barrier(MPI_COMM_WORLD);
  SampleBatch batch;
  std::vector<double> millis;
  std::vector<double> priorities(kSampleBatch, 0.5);
  const auto start = Clock::now();
  // The first sample waits for the replay's minimum size and faults in the
  // buffer it is received into (phase 1 touches its buffers before it
  // starts): the rates count from its arrival, the latencies include it.
  std::optional<Clock::time_point> first_arrival;
  while (SecondsSince(start) < seconds) {
    const auto asked = Clock::now();
    Check(learner->Sample(kSampleBatch, 0.4, &batch), "sample");
    millis.push_back(1e3 * SecondsSince(asked));
    Check(learner->SendPriorityUpdate(batch.keys, priorities), "update");
    if (!first_arrival) {
      first_arrival = Clock::now();
      continue;
    }
    report->samples += static_cast<double>(batch.size);
    report->updates += static_cast<double>(batch.size);
  }
  Check(learner->Close(), "learner close");
  report->seconds = SecondsSince(first_arrival.value_or(start));
  Latencies(std::move(millis), report);
}

void Serve(service::Transport* transport, const Schema& schema, int64_t capacity, int shard,
           int64_t zero_copy_min_row_bytes, Report* report) {
  std::unique_ptr<replay::Replay> replay;
  // Prefaulted: the run measures the steady state of a filled ring, not the
  // kernel zeroing fresh pages while it fills for the first time.
  Check(replay::Replay::Create(replay::ReplayOptions{capacity, 0.6, tree::Device::kAuto, 1, true}, schema, &replay),
        "replay");
  service::ServiceOptions options;
  options.stats_interval_seconds = 0;
  options.shard = shard;
  options.zero_copy_min_row_bytes = zero_copy_min_row_bytes;
  service::ReplayService service(replay.get(), transport, options);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds();
  Check(service.Run(), "service");
  report->cpu_seconds = CpuSeconds() - cpu_start;
  report->items = static_cast<double>(replay->counters().items_added);
  report->seconds = SecondsSince(start);
}

void ZmqActorRole(zmq::context_t* context, const std::string& endpoint, int index, const Schema& schema,
                  double seconds, int rank, Report* report) {
  ZmqClient client(context, endpoint, index, kInFlight);
  std::mt19937_64 rng(rank);
  std::vector<std::vector<std::byte>> columns;
  std::vector<double> priorities;
  FillBatch(schema, rng, &columns, &priorities);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  while (SecondsSince(start) < seconds) Check(client.Add(kIntakeBatch, columns, priorities), "zmq add");
  Check(client.Close(), "zmq actor close");
  report->items = static_cast<double>(client.items_acknowledged());
  report->seconds = SecondsSince(start);
}

void ZmqLearnerRole(zmq::context_t* context, const std::string& endpoint, int index, double seconds,
                    Report* report) {
  ZmqClient client(context, endpoint, index, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<uint64_t> keys;
  std::vector<double> millis;
  std::vector<double> priorities(kSampleBatch, 0.5);
  const auto start = Clock::now();
  while (SecondsSince(start) < seconds) {
    const auto asked = Clock::now();
    Check(client.Sample(kSampleBatch, 0.4, &keys), "zmq sample");
    millis.push_back(1e3 * SecondsSince(asked));
    Check(client.Update(keys, priorities), "zmq update");
    report->samples += static_cast<double>(keys.size());
    report->updates += static_cast<double>(keys.size());
  }
  Check(client.Close(), "zmq learner close");
  report->seconds = SecondsSince(start);
  Latencies(std::move(millis), report);
}

}  // namespace
}  // namespace perserve::bench

int main(int argc, char** argv) {
  using namespace perserve::bench;
  CLI::App app{"perserve system benchmark: intake, sampling and raw MPI bandwidth in one MPI job"};
  std::string transport = "mpi", size_name = "small", out, endpoint;
  double seconds = 5.0, raw_seconds = 2.0;
  int servers = 1;
  int64_t zero_copy_min_row_bytes = perserve::service::ServiceOptions{}.zero_copy_min_row_bytes;
  int64_t columns_apart_min_bytes = perserve::ClientOptions{}.columns_apart_min_bytes;
  app.add_option("--transport", transport, "mpi or zmq")->check(CLI::IsMember({"mpi", "zmq"}))->capture_default_str();
  app.add_option("--size", size_name, "small (~128 B), 1k, 4k, 16k or atari (~56 KB) transitions")
      ->check(CLI::IsMember(SchemaSizes()))->capture_default_str();
  app.add_option("--seconds", seconds, "replay phase length")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--raw-seconds", raw_seconds, "raw MPI phase length (half before the replay phase, half after)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--servers", servers, "server ranks (shards of one replay; MPI only)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--zero-copy-min-row-bytes", zero_copy_min_row_bytes,
                 "sample replies with rows this large go from the store (-1: always gathered)")
      ->capture_default_str();
  app.add_option("--columns-apart-min-bytes", columns_apart_min_bytes,
                 "adds with this many bytes of columns send them apart, into the store (-1: never)")
      ->capture_default_str();
  app.add_option("--endpoint", endpoint, "ZeroMQ endpoint (default ipc:// in /tmp, one node)");
  app.add_option("--out", out, "JSON result file (rank 0)");
  CLI11_PARSE(app, argc, argv);

  MPI_Init(&argc, &argv);
  spdlog::set_level(spdlog::level::warn);  // the service's summary line is noise here: rank 0 prints the table
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < servers + 2) {
    Die(fmt::format("needs at least {} ranks: {} servers, an actor, a learner", servers + 2, servers));
  }
  if (servers > 1 && transport != "mpi") Die("several servers need --transport mpi");
  const int actors = size - servers - 1;
  const perserve::Schema schema = SchemaFor(size_name);
  // Enough slots for the run, at most 2 GiB of rows (Atari: 2^15 slots).
  int64_t capacity = int64_t{1} << 21;
  while (capacity > 1024 && capacity * schema.ItemBytes() > (int64_t{2} << 30)) capacity /= 2;
  const Sizes sizes = SizesFor(schema);
  const int64_t message_bytes = sizes.intake_message;
  Report report;
  report.role = rank < servers ? 0 : (rank == size - 1 ? 2 : 1);

  // Half of the raw phase before the replay and half after: a machine whose
  // speed drifts over the run (a shared VM) moves both sides of the ratios.
  RawMpi(rank, size, servers, sizes, raw_seconds / 2, &report);

  if (transport == "mpi") {
    if (rank < servers) {
      perserve::mpi::Communicator comm;
      perserve::mpi::JoinResult joined;
      const perserve::mpi::ServerInfo info{perserve::proto::TransitionSchemas(schema), 0.6, capacity};
      Check(perserve::mpi::Join(MPI_COMM_WORLD, perserve::proto::Role::kServer, &info, &comm, &joined), "join");
      perserve::service::MpiTransport mpi_transport(comm.get(), joined.client_ranks,
                                                        perserve::service::MpiTransport::ClientRoles(joined));
      Serve(&mpi_transport, schema, capacity, joined.shard, zero_copy_min_row_bytes, &report);
    } else if (rank == size - 1) {
      MpiLearner(seconds, &report);
    } else {
      MpiActor(schema, seconds, rank, columns_apart_min_bytes, &report);
    }
  } else {
    // MPI only bootstraps here: rank 0 picks the endpoint and tells the others.
    char name[256] = {};
    if (rank == 0) {
      const std::string chosen =
          endpoint.empty() ? fmt::format("ipc:///tmp/perserve-bench-{}.ipc", static_cast<long>(getpid())) : endpoint;
      std::snprintf(name, sizeof(name), "%s", chosen.c_str());
    }
    MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, MPI_COMM_WORLD);
    zmq::context_t context(1);
    std::unique_ptr<ZmqTransport> zmq_transport;  // lives until every client has its close reply
    if (rank == 0) {
      zmq_transport = std::make_unique<ZmqTransport>(&context, name, actors + 1);
      MPI_Barrier(MPI_COMM_WORLD);  // bound before anyone connects
      Serve(zmq_transport.get(), schema, capacity, 0, zero_copy_min_row_bytes, &report);
    } else {
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == size - 1) {
        ZmqLearnerRole(&context, name, actors, seconds, &report);
      } else {
        ZmqActorRole(&context, name, rank - 1, schema, seconds, rank, &report);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  RawMpi(rank, size, servers, sizes, raw_seconds / 2, &report);

  std::vector<Report> reports(rank == 0 ? size : 0);
  MPI_Gather(&report, sizeof(Report), MPI_BYTE, reports.data(), sizeof(Report), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    double items = 0, actor_seconds = 0, raw_bytes = 0, raw_seconds_max = 0, raw_cpu = 0, raw_out = 0, cpu = 0;
    for (int r = servers; r < size - 1; ++r) {
      items += reports[r].items;
      actor_seconds = std::max(actor_seconds, reports[r].seconds);
    }
    for (int r = 0; r < servers; ++r) {
      raw_bytes += reports[r].raw_bytes;
      raw_seconds_max = std::max(raw_seconds_max, reports[r].raw_seconds);
      raw_cpu += reports[r].raw_cpu_seconds;
      raw_out += reports[r].raw_server_out_bytes;
      cpu += reports[r].cpu_seconds;
    }
    const Report& learner = reports[size - 1];
    const double item_bytes = static_cast<double>(schema.ItemBytes());
    const double items_per_s = items / actor_seconds;
    const double intake_mb_s = items_per_s * item_bytes / 1e6;
    const double raw_mb_s = raw_bytes / raw_seconds_max / 1e6;
    const double raw_reply_mb_s = learner.raw_bytes / learner.raw_seconds / 1e6;
    // Compare like with like: the raw figures count whole messages, so scale
    // intake and samples to the bytes of their messages.
    const double intake_message_mb_s = items_per_s / kIntakeBatch * static_cast<double>(message_bytes) / 1e6;
    const double samples_per_s = learner.samples / learner.seconds;
    const double reply_mb_s = samples_per_s / kSampleBatch * static_cast<double>(sizes.reply_message) / 1e6;
    // The server's CPU per GB it moved: intake in plus sample replies out.
    const double moved_gb = (items / kIntakeBatch * static_cast<double>(message_bytes) +
                             learner.samples / kSampleBatch * static_cast<double>(sizes.reply_message)) / 1e9;
    const double raw_moved_gb = (raw_bytes + raw_out) / 1e9;
    const std::string json = fmt::format(
        "{{\"transport\": \"{}\", \"size\": \"{}\", \"item_bytes\": {}, \"message_bytes\": {}, "
        "\"reply_bytes\": {}, \"zero_copy_min_row_bytes\": {}, \"columns_apart_min_bytes\": {}, \"servers\": {}, "
        "\"actors\": {}, "
        "\"seconds\": {:.3f}, \"items_in\": {:.0f}, \"items_per_s\": {:.1f}, \"intake_mb_per_s\": {:.2f}, "
        "\"samples_per_s\": {:.1f}, \"updates_per_s\": {:.1f}, \"sample_latency_ms\": {{\"median\": {:.4f}, "
        "\"p99\": {:.4f}}}, \"raw_mpi_mb_per_s\": {:.2f}, \"intake_over_raw_mpi\": {:.4f}, "
        "\"raw_reply_mb_per_s\": {:.2f}, \"sample_reply_mb_per_s\": {:.2f}, \"sample_over_raw_mpi\": {:.4f}, "
        "\"server_cpu_s_per_gb\": {:.4f}, \"raw_server_cpu_s_per_gb\": {:.4f}}}\n",
        transport, size_name, schema.ItemBytes(), message_bytes, sizes.reply_message, zero_copy_min_row_bytes,
        columns_apart_min_bytes, servers, actors, actor_seconds,
        items, items_per_s, intake_mb_s, samples_per_s, learner.updates / learner.seconds, learner.latency_median_ms,
        learner.latency_p99_ms, raw_mb_s, intake_message_mb_s / raw_mb_s, raw_reply_mb_s, reply_mb_s,
        reply_mb_s / raw_reply_mb_s, cpu / moved_gb, raw_cpu / raw_moved_gb);
    fmt::print("transport {} | {} servers | {} transitions ({} B) | {} actors\n"
               "  intake        {:>12.0f} items/s  {:>9.1f} MB/s  ({:.2f}x raw MPI: {:.1f} MB/s in {}-byte messages)\n"
               "  learner       {:>12.0f} samples/s, {:.0f} updates/s, sample of {} latency median {:.3f} ms, p99 "
               "{:.3f} ms\n"
               "  replies       {:>9.1f} MB/s  ({:.2f}x raw MPI: {:.1f} MB/s in {}-byte messages)\n"
               "  server CPU    {:.3f} s/GB moved (raw MPI {:.3f} s/GB)\n",
               transport, servers, size_name, schema.ItemBytes(), actors, items_per_s, intake_mb_s,
               intake_message_mb_s / raw_mb_s, raw_mb_s, message_bytes, samples_per_s,
               learner.updates / learner.seconds, kSampleBatch, learner.latency_median_ms, learner.latency_p99_ms,
               reply_mb_s, reply_mb_s / raw_reply_mb_s, raw_reply_mb_s, sizes.reply_message, cpu / moved_gb,
               raw_cpu / raw_moved_gb);
    if (!out.empty()) {
      std::FILE* file = std::fopen(out.c_str(), "w");
      if (file == nullptr) Die("cannot write " + out);
      std::fputs(json.c_str(), file);
      std::fclose(file);
    }
  }
  MPI_Finalize();
  return 0;
}
