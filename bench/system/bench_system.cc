// perserve_bench_system: the replay rank under load, as an MPI job launched
// by scripts/bench-scaling.sh (or by hand):
//
//   mpirun -np <servers + actors + 1> perserve_bench_system --transport mpi|zmq --size small|atari
//                                                           [--servers K]
//   mpirun -np <servers + actors + 1> perserve_bench_system --size atari-steps|atari-sequences
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
//      With --raw-ring, a second raw phase (also halved) does the same with
//      the replay's memory instead of two buffers that stay in cache: each
//      server receives the intake messages one after another into a buffer
//      the size of the replay's ring (huge pages, prefaulted) and sends each
//      reply gathered from runs of it at random places (a datatype, as the
//      replay sends from its ring: an n-step item's two stacks, or one run
//      an item). That splits the replay's distance from phase 1 into what
//      its memory costs MPI and what the replay itself costs.
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
//
// Step streams (docs/steps.md; --size atari-steps or atari-sequences, MPI
// only): the servers store step streams, and each actor appends 50 Atari
// steps a request (bench_schemas.h's AtariStepSchema: a 84x84 frame, action,
// reward, done), episodes of 1000 +- 10% steps, creating in each request the
// items it completes, with priorities (system/step_schedule.h). atari-steps:
// Ape-X's n-step 3 transitions, discount 0.99, obs stacked 4 deep, an item a
// step; the learner samples 512. atari-sequences: R2D2's sequences of 80
// steps every 40, obs unstacked, each item carrying state:float32:1024 (an
// LSTM's h and c, 512 units each); the learner samples 64. Each server's ring
// holds 2^18 steps (1.85 GB), its tree as many items. The ring's pages are not
// prefaulted, so the actors first append until it has wrapped, untimed; the
// rates count from the end of that fill, and the servers' CPU from the
// moment the ring wrapped. (A ring of transitions is prefaulted and its runs
// count from the start.) Phase 1's intake messages have an append's size
// (with its average items) and its replies a sample reply's.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "bench_schemas.h"
#include "mpi/join.h"
#include "perserve/client.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/transport/mpi_transport.h"
#include "service/replay_service.h"
#include "service/table_flags.h"
#include "util/page_memory.h"
#include "system/job_errors.h"
#include "system/step_schedule.h"
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

[[noreturn]] void Die(const std::string& what) { AbortJob("perserve_bench_system", what); }
void Check(const Status& status, const char* what) { CheckOrAbortJob("perserve_bench_system", status, what); }

// What each rank reports to rank 0 at the end.
struct Report {
  double role = 0;  // 0 server, 1 actor, 2 learner
  double items = 0, seconds = 0;
  double steps = 0, fill_seconds = 0;  // actors of step streams: steps appended (timed), the untimed fill
  double samples = 0, updates = 0, latency_median_ms = 0, latency_p99_ms = 0;
  // Phase 1, and (--raw-ring) phase 1 over ring-sized memory.
  struct Raw {
    double bytes = 0, seconds = 0;           // servers: intake received; the learner: replies received
    double cpu_seconds = 0, server_out_bytes = 0;  // servers
  } raw, raw_ring;
  double cpu_seconds = 0;  // servers, over the replay phase
};

// Phase 1 over the replay's memory (--raw-ring): a server's ring-sized buffer,
// and how its replies are cut into runs of it.
struct RawRing {
  std::span<std::byte> memory;  // empty: phase 1 as it is, over two buffers
  int64_t runs_per_item = 1;    // an n-step item's two stacks, or one run an item
  int64_t items_per_reply = 0;  // the server's share of a sample
};

// What a run moves: transitions (an add's rows are its items, sampled as
// added) or step streams (an add's rows are steps, and it creates items over
// them, sampled in docs/steps.md's item layout).
struct Workload {
  Schema adds;     // a row of an add: a transition, or a step
  Schema samples;  // an item as a sample returns it
  Schema items;    // step streams: the columns an actor sends with each item
  replay::StepOptions table;  // the servers' table (transitions: each step its own item)
  std::optional<replay::StepOptions> steps;  // step streams: the same
  int64_t sample_batch = kSampleBatch;
  double items_per_append = kIntakeBatch;  // items an add creates, on average
  int64_t capacity = 0;                    // transitions; or steps in the ring and items at most
  // Step streams: 1, or 3 tables over the one ring (issue 34): the workload's
  // own (the learner samples it), an R2D2 table of sequences of 80 every 40
  // steps and a uniform table of the steps themselves, every append creating
  // items in all three.
  int tables = 1;
};

// The servers' tables for `workload` (streams: the joined clients).
std::vector<replay::TableConfig> TablesFor(const Workload& workload, int streams) {
  std::vector<replay::TableConfig> tables(static_cast<size_t>(workload.tables));
  for (replay::TableConfig& table : tables) {
    table.layout = workload.table;
    table.layout.streams = std::max(1, streams);
    table.items = replay::ReplayOptions{workload.capacity, 0.6, tree::Device::kAuto, 1, true};
  }
  if (workload.tables == 3) {
    tables[1].name = "r2d2";
    tables[1].layout.kind = replay::StepOptions::Kind::kSequence;
    tables[1].layout.sequence_length = 80;
    tables[1].layout.sequence_period = 40;
    tables[1].layout.stacks.clear();
    tables[1].items.seed = 2;
    tables[2].name = "recent";
    tables[2].layout.kind = replay::StepOptions::Kind::kTransition;
    tables[2].layout.stacks.clear();
    tables[2].items.sampler = table::SelectorKind::kUniform;
    tables[2].items.seed = 3;
  }
  return tables;
}

Workload WorkloadFor(const std::string& size, bool frames_first) {
  Workload workload;
  const bool steps = std::find(StepSizes().begin(), StepSizes().end(), size) != StepSizes().end();
  workload.adds = steps ? AtariStepSchema() : SchemaFor(size);
  // Enough slots for the run, at most 2 GiB of rows (Atari transitions: 2^15
  // slots; Atari steps: 2^18, 1.85 GB).
  workload.capacity = int64_t{1} << 21;
  while (workload.capacity > 1024 && workload.capacity * workload.adds.ItemBytes() > (int64_t{2} << 30)) {
    workload.capacity /= 2;
  }
  if (!steps) {
    workload.samples = workload.adds;
    workload.table.kind = replay::StepOptions::Kind::kTransition;
    workload.table.step_capacity = workload.capacity;
    workload.table.prefault = true;
    return workload;
  }
  replay::StepOptions options;
  if (size == "atari-steps") {  // Ape-X
    options.kind = replay::StepOptions::Kind::kNStep;
    options.n_step = 3;
    options.discount = 0.99;
    options.stacks = {{"obs", 4}};
    options.frames_first = frames_first;
  } else {  // R2D2, frames unstacked
    options.kind = replay::StepOptions::Kind::kSequence;
    options.sequence_length = 80;
    options.sequence_period = 40;
    options.item_columns = {Column{"state", DType::kFloat32, {1024}}};
    workload.sample_batch = 64;
    // An episode of e steps holds ceil(e / P) sequences (its last one cut short).
    double sequences = 0, episode_steps = 0;
    for (int64_t e = kEpisodeSteps - kEpisodeSteps / 10; e <= kEpisodeSteps + kEpisodeSteps / 10; ++e) {
      sequences += static_cast<double>((e + options.sequence_period - 1) / options.sequence_period);
      episode_steps += static_cast<double>(e);
    }
    workload.items_per_append = kIntakeBatch * sequences / episode_steps;
  }
  options.step_capacity = workload.capacity;
  Schema stored;
  Check(replay::StepSchemas(options, workload.adds, &workload.samples, &stored), "step schemas");
  workload.items = Schema{options.item_columns};
  workload.table = options;
  workload.steps = options;
  return workload;
}

// An item's bytes in an add besides its rows: a transition's priority; an
// item's step index, priority and item columns.
int64_t ItemExtraBytes(const Workload& workload) { return workload.steps ? 16 + workload.items.ItemBytes() : 8; }

// The bytes of each message kind on the wire (frame header, meta, bulk).
struct Sizes {
  int64_t add_head;        // an add's frame header and meta
  int64_t intake_message;  // an add of kIntakeBatch rows with its items (on average: step streams)
  int64_t update_message;  // an update of a sample's priorities
  int64_t reply_message;   // a sample reply
};

Sizes SizesFor(const Workload& workload) {
  const int64_t header = static_cast<int64_t>(proto::kFrameHeaderBytes);
  const auto meta = [](const auto& m) { return static_cast<int64_t>(proto::SerializeMeta(m).size()); };
  const int64_t add_head = header + meta(proto::AppendMeta{0, 0, {proto::ItemGroup{}}});  // one table's items
  const int64_t batch = workload.sample_batch;
  return Sizes{add_head,
               add_head + kIntakeBatch * workload.adds.ItemBytes() +
                   std::llround(workload.items_per_append * static_cast<double>(ItemExtraBytes(workload))),
               header + meta(proto::UpdateRequest{}) + batch * 16,  // keys, priorities
               header + meta(proto::SampleReply{}) +
                   batch * (24 + workload.samples.ItemBytes())};  // keys, weights, probabilities, columns
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
// bytes, each with its seconds; servers also their CPU seconds. With a ring
// (--raw-ring), servers receive intake into it in turn and send each reply
// from runs of it at random places.
void RawMpi(int rank, int size, int servers, const Sizes& sizes, double seconds, const RawRing& ring,
            Report::Raw* report) {
  std::vector<std::byte> buffer(std::max(sizes.intake_message, sizes.update_message), std::byte{7});
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  const int actors = size - servers - 1;
  const int learner = size - 1;
  if (rank < servers) {
    const double cpu_start = CpuSeconds();
    std::vector<std::byte> reply(sizes.reply_message / servers, std::byte{9});
    // Over the ring: a reply is its head (the reply's bytes beyond its runs,
    // from `reply`) and items_per_reply x runs_per_item runs at random places.
    const int64_t runs = ring.memory.empty() ? 0 : ring.items_per_reply * ring.runs_per_item;
    const int64_t run_bytes = runs == 0 ? 0 : sizes.reply_message / servers / runs;
    const int64_t head_bytes = static_cast<int64_t>(reply.size()) - runs * run_bytes;
    std::mt19937_64 rng(static_cast<uint64_t>(rank) + 1);
    std::vector<int> lengths;
    std::vector<MPI_Aint> displacements;
    int64_t next = 0;  // where the next intake message goes in the ring
    MPI_Request reply_request = MPI_REQUEST_NULL;
    MPI_Datatype reply_type = MPI_DATATYPE_NULL;
    int ends = 0;
    double bytes = 0, reply_bytes = 0;
    const int my_clients = actors / servers + (rank < actors % servers ? 1 : 0) + 1;  // + the learner
    while (ends < my_clients) {
      MPI_Status status;
      MPI_Message message;
      MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &message, &status);
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      const bool intake = status.MPI_TAG == kRawTag && status.MPI_SOURCE != learner;
      if (intake && !ring.memory.empty()) {
        if (next + count > static_cast<int64_t>(ring.memory.size())) next = 0;
        MPI_Mrecv(ring.memory.data() + next, count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
        next += count;
      } else {
        MPI_Mrecv(buffer.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
      }
      if (status.MPI_TAG == kRawEndTag) {
        ++ends;
      } else if (!intake) {
        MPI_Wait(&reply_request, MPI_STATUS_IGNORE);  // the learner asks again only once it has the last one
        if (runs == 0) {
          MPI_Isend(reply.data(), static_cast<int>(reply.size()), MPI_BYTE, learner, kRawReplyTag, MPI_COMM_WORLD,
                    &reply_request);
        } else {
          // A datatype a reply, as the replay commits one for each reply it sends from its ring.
          if (reply_type != MPI_DATATYPE_NULL) MPI_Type_free(&reply_type);
          lengths.assign(1, static_cast<int>(head_bytes));
          displacements.assign(1, reinterpret_cast<MPI_Aint>(reply.data()));
          std::uniform_int_distribution<int64_t> place(0, (static_cast<int64_t>(ring.memory.size()) - run_bytes) / 64);
          for (int64_t r = 0; r < runs; ++r) {
            lengths.push_back(static_cast<int>(run_bytes));
            displacements.push_back(reinterpret_cast<MPI_Aint>(ring.memory.data() + 64 * place(rng)));
          }
          MPI_Type_create_hindexed(static_cast<int>(lengths.size()), lengths.data(), displacements.data(), MPI_BYTE,
                                   &reply_type);
          MPI_Type_commit(&reply_type);
          MPI_Isend(MPI_BOTTOM, 1, reply_type, learner, kRawReplyTag, MPI_COMM_WORLD, &reply_request);
        }
        reply_bytes += static_cast<double>(reply.size());
      } else {
        bytes += count;
      }
    }
    MPI_Wait(&reply_request, MPI_STATUS_IGNORE);
    if (reply_type != MPI_DATATYPE_NULL) MPI_Type_free(&reply_type);
    report->bytes += bytes;
    report->seconds += SecondsSince(start);
    report->cpu_seconds += CpuSeconds() - cpu_start;
    report->server_out_bytes += reply_bytes;
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
    report->bytes += bytes;
    report->seconds += SecondsSince(start);
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

// An actor of step streams: first appends fill_steps steps (with their items),
// untimed, so the server's ring has wrapped (its pages faulted in) before the
// measurement; then, after a barrier of the clients, appends for `seconds`.
void MpiStepActor(const Workload& workload, double seconds, int rank, int64_t fill_steps, MPI_Comm clients,
                  Report* report) {
  std::unique_ptr<ActorClient> actor;
  ClientOptions options;
  options.max_in_flight = kInFlight;
  Check(ActorClient::Join(MPI_COMM_WORLD, options, &actor), "actor join");
  if (!actor->stores_steps()) Die("the server does not store step streams");
  std::mt19937_64 rng(rank);
  std::vector<std::vector<std::byte>> columns;
  std::vector<double> unused;
  FillBatch(workload.adds, rng, &columns, &unused);
  ColumnSpans steps{kIntakeBatch, {}};
  for (const auto& column : columns) steps.columns.push_back(std::span(column));
  const int done_column = workload.adds.ColumnIndex(workload.steps->done_column);
  // An append completes at most kIntakeBatch items plus those pending before it (n, or L/P + 1).
  const size_t max_items = static_cast<size_t>(2 * kIntakeBatch);
  std::uniform_real_distribution<double> priority(0.1, 2.0);
  std::vector<double> priorities(max_items);
  for (double& p : priorities) p = priority(rng);
  std::vector<std::vector<std::byte>> item_columns;
  for (const Column& column : workload.items.columns) {
    item_columns.emplace_back(max_items * static_cast<size_t>(column.ItemBytes()));
    for (auto& b : item_columns.back()) b = static_cast<std::byte>(rng() & 0x3f);
  }
  const bool nstep = workload.steps->kind == replay::StepOptions::Kind::kNStep;
  StepSchedule schedule(nstep ? workload.steps->n_step : workload.steps->sequence_length - 1,
                        nstep ? 1 : workload.steps->sequence_period, static_cast<uint64_t>(rank));
  std::vector<int64_t> items;
  // With 3 tables: the same stream's sequences (the same seed: the same episodes) and every step.
  StepSchedule sequences(79, 40, static_cast<uint64_t>(rank));
  std::vector<std::byte> sequence_done(static_cast<size_t>(kIntakeBatch));
  std::vector<int64_t> sequence_items, step_items(static_cast<size_t>(kIntakeBatch));
  // The step columns are lent (AppendBorrowed: sent from here straight into
  // the server's ring), so an append's must not change until it is
  // acknowledged: the frames never do, and each append in flight has a done
  // column of its own (max_in_flight + 1 of them, in turn).
  std::vector<std::vector<std::byte>> done_columns(kInFlight + 1, columns[static_cast<size_t>(done_column)]);
  size_t next_done = 0;
  const auto append = [&] {
    std::vector<std::byte>& done = done_columns[next_done++ % done_columns.size()];
    steps.columns[static_cast<size_t>(done_column)] = std::span(done);
    schedule.Next(kIntakeBatch, done, &items);
    if (items.size() > max_items) Die("an append completes more items than the benchmark's buffers hold");
    NewItems created{items, std::span(priorities).first(items.size()), {}};
    if (!items.empty() && !item_columns.empty()) {
      created.columns.size = static_cast<int64_t>(items.size());
      for (size_t c = 0; c < item_columns.size(); ++c) {
        const size_t bytes = items.size() * static_cast<size_t>(workload.items.columns[c].ItemBytes());
        created.columns.columns.push_back(std::span<const std::byte>(item_columns[c]).first(bytes));
      }
    }
    if (workload.tables == 1) return Check(actor->AppendBorrowed(steps, created), "append");
    const int64_t first = actor->steps_appended();
    sequences.Next(kIntakeBatch, sequence_done, &sequence_items);
    for (int64_t j = 0; j < kIntakeBatch; ++j) step_items[static_cast<size_t>(j)] = first + j;
    const NewItems all[] = {created, NewItems{sequence_items, {}, {}, "r2d2"}, NewItems{step_items, {}, {}, "recent"}};
    Check(actor->AppendBorrowed(steps, all), "append");
  };
  MPI_Barrier(MPI_COMM_WORLD);
  const auto fill_start = Clock::now();
  while (actor->steps_appended() < fill_steps) append();
  Check(actor->Flush(), "flush");
  report->fill_seconds = SecondsSince(fill_start);
  const int64_t items_before = actor->items_acknowledged();
  const int64_t steps_before = actor->steps_appended();
  MPI_Barrier(clients);
  const auto start = Clock::now();
  while (SecondsSince(start) < seconds) append();
  Check(actor->Close(), "actor close");
  report->items = static_cast<double>(actor->items_acknowledged() - items_before);
  report->steps = static_cast<double>(actor->steps_appended() - steps_before);
  report->seconds = SecondsSince(start);
}

// `clients`: the clients' communicator for step streams (the learner waits
// there for the actors' fill), MPI_COMM_NULL for transitions.
void MpiLearner(double seconds, int64_t sample_batch, MPI_Comm clients, Report* report) {
  std::unique_ptr<LearnerClient> learner;
  Check(LearnerClient::Join(MPI_COMM_WORLD, {}, &learner), "learner join");
  MPI_Barrier(MPI_COMM_WORLD);
  if (clients != MPI_COMM_NULL) MPI_Barrier(clients);
  SampleBatch batch;
  std::vector<double> millis;
  std::vector<double> priorities(static_cast<size_t>(sample_batch), 0.5);
  const auto start = Clock::now();
  // The first sample waits for the replay's minimum size and faults in the
  // buffer it is received into (phase 1 touches its buffers before it
  // starts): the rates count from its arrival, the latencies include it.
  // Sample returns once the reply is received, its columns viewing the
  // received bytes (no copy): the latency is the time to receive and view.
  std::optional<Clock::time_point> first_arrival;
  while (SecondsSince(start) < seconds) {
    const auto asked = Clock::now();
    Check(learner->Sample(sample_batch, 0.4, &batch), "sample");
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

// `streams`: the joined clients (step streams: a stream each).
void Serve(service::Transport* transport, const Workload& workload, int streams, int shard,
           int64_t zero_copy_min_row_bytes, Report* report) {
  // A ring of transitions is prefaulted: the run measures the steady state
  // of a filled ring, not the kernel zeroing fresh pages while it fills for
  // the first time (a ring of steps is filled first, untimed).
  std::unique_ptr<replay::StepReplay> replay;
  Check(replay::StepReplay::Create(TablesFor(workload, streams), workload.adds, &replay), "replay");
  service::ServiceOptions options;
  options.stats_interval_seconds = 0;
  options.shard = shard;
  options.zero_copy_min_row_bytes = zero_copy_min_row_bytes;
  std::optional<service::ReplayService> service;
  service.emplace(replay.get(), transport, options);
  const bool steps = workload.steps.has_value();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds();
  if (!steps) {
    Check(service->Run(), "service");
    report->cpu_seconds = CpuSeconds() - cpu_start;
  } else {
    // Run()'s loop, with the CPU counted from the moment the actors' fill has
    // wrapped the ring (its pages faulted in), as the clients' rates are.
    std::optional<double> wrapped_cpu;
    int idle_passes = 0;
    while (!service->done()) {
      bool handled = false;
      Check(service->Step(&handled), "service");
      Check(transport->Progress(), "service progress");
      if (!wrapped_cpu && replay->next_step_key() >= static_cast<uint64_t>(workload.capacity)) {
        wrapped_cpu = CpuSeconds();
      }
      idle_passes = handled ? 0 : idle_passes + 1;
      if (idle_passes > 256) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    Check(transport->Drain(), "service drain");
    report->cpu_seconds = CpuSeconds() - wrapped_cpu.value_or(cpu_start);
  }
  report->items = static_cast<double>(replay->items().counters().items_added);
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
  int tables = 1;
  std::string stack_axis = "last";
  bool raw_ring = false;
  double seconds = 5.0, raw_seconds = 2.0;
  int servers = 1;
  int64_t zero_copy_min_row_bytes = perserve::service::ServiceOptions{}.zero_copy_min_row_bytes;
  int64_t columns_apart_min_bytes = perserve::ClientOptions{}.columns_apart_min_bytes;
  std::vector<std::string> sizes_known = SchemaSizes();
  sizes_known.insert(sizes_known.end(), StepSizes().begin(), StepSizes().end());
  app.add_option("--transport", transport, "mpi or zmq")->check(CLI::IsMember({"mpi", "zmq"}))->capture_default_str();
  app.add_option("--size", size_name,
                 "small (~128 B), 1k, 4k, 16k or atari (~56 KB) transitions; atari-steps (n-step transitions) or "
                 "atari-sequences over step streams (MPI only)")
      ->check(CLI::IsMember(sizes_known))->capture_default_str();
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
  app.add_option("--tables", tables,
                 "step streams: 1, or 3 tables over the one ring fed by every append (the size's own, which the "
                 "learner samples; sequences of 80 every 40 steps; the steps themselves, uniform)")
      ->check(CLI::IsMember({1, 3}))->capture_default_str();
  app.add_option("--stack-axis", stack_axis,
                 "atari-steps: the stacked frames' axis, last (84,84,4: replies assembled) or first (4,84,84: "
                 "replies sent from the ring), as perserve-server --stack-axis")
      ->check(CLI::IsMember({"first", "last"}))->capture_default_str();
  app.add_flag("--raw-ring", raw_ring,
               "also a raw MPI phase over the replay's memory: intake received into a ring-sized buffer in turn, "
               "replies sent from runs of it at random places (more server memory: a second ring)");
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
  Workload workload = WorkloadFor(size_name, stack_axis == "first");
  workload.tables = tables;
  if (tables != 1 && !workload.steps) Die("--tables 3 needs a step stream size (atari-steps, atari-sequences)");
  if (workload.steps && transport != "mpi") Die("step streams (--size " + size_name + ") need --transport mpi");
  const Sizes sizes = SizesFor(workload);
  const int64_t message_bytes = sizes.intake_message;
  const int64_t sample_batch = workload.sample_batch;
  Report report;
  report.role = rank < servers ? 0 : (rank == size - 1 ? 2 : 1);
  // The actors and the learner, without the servers: the learner waits there
  // for the actors' fill of the step ring.
  MPI_Comm clients = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < servers ? MPI_UNDEFINED : 0, rank, &clients);
  // Step streams: each actor's fill, enough for its server's actors to wrap the ring once.
  const auto fill_steps_of = [&](int actor) -> int64_t {
    if (!workload.steps) return 0;
    const int server = actor % servers;
    const int64_t server_actors = actors / servers + (server < actors % servers ? 1 : 0);
    const int64_t appends = (workload.capacity + server_actors * kIntakeBatch - 1) / (server_actors * kIntakeBatch);
    return appends * kIntakeBatch;
  };
  const int64_t fill_steps = rank >= servers && rank < size - 1 ? fill_steps_of(rank - servers) : 0;

  // --raw-ring: each server's ring-sized buffer, on huge pages as the ring
  // is and written once before any timing (the replay's ring is wrapped
  // before its timing starts).
  perserve::util::PageMemory ring_memory;
  RawRing ring;
  if (raw_ring) {
    ring.runs_per_item = workload.steps && workload.table.kind == perserve::replay::StepOptions::Kind::kNStep &&
                                 !workload.table.stacks.empty()
                             ? 2
                             : 1;
    ring.items_per_reply = sample_batch / servers;
    if (rank < servers) {
      const size_t bytes = static_cast<size_t>(workload.capacity * workload.adds.ItemBytes());
      ring_memory = perserve::util::AllocatePageMemory(bytes);
      std::memset(ring_memory.get(), 1, bytes);
      ring.memory = {ring_memory.get(), bytes};
    }
  }
  const RawRing no_ring;
  // Half of the raw phase before the replay and half after: a machine whose
  // speed drifts over the run (a shared VM) moves both sides of the ratios.
  RawMpi(rank, size, servers, sizes, raw_seconds / 2, no_ring, &report.raw);
  if (raw_ring) RawMpi(rank, size, servers, sizes, raw_seconds / 2, ring, &report.raw_ring);

  if (transport == "mpi") {
    if (rank < servers) {
      perserve::mpi::Communicator comm;
      perserve::mpi::JoinResult joined;
      perserve::proto::ServedSchemas served;
      Check(perserve::service::ServedSchemasOf(TablesFor(workload, 1), workload.adds, 0, &served), "served schemas");
      // As perserve-server's join says: an append of up to the ring's slack
      // steps may send its columns apart, received straight into the ring
      // (0, the default, had every append copied in from a buffer).
      served.max_steps_apart = perserve::replay::StepSlack(workload.adds, workload.table.step_capacity);
      const perserve::mpi::ServerInfo info{served, 0.6, workload.capacity, {}};
      Check(perserve::mpi::Join(MPI_COMM_WORLD, perserve::proto::Role::kServer, &info, &comm, &joined), "join");
      perserve::service::MpiTransport mpi_transport(comm.get(), joined.client_ranks,
                                                        perserve::service::MpiTransport::ClientRoles(joined));
      Serve(&mpi_transport, workload, static_cast<int>(joined.client_ranks.size()), joined.shard,
            zero_copy_min_row_bytes, &report);
    } else if (rank == size - 1) {
      MpiLearner(seconds, sample_batch, workload.steps ? clients : MPI_COMM_NULL, &report);
    } else if (workload.steps) {
      MpiStepActor(workload, seconds, rank, fill_steps, clients, &report);
    } else {
      MpiActor(workload.adds, seconds, rank, columns_apart_min_bytes, &report);
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
      Serve(zmq_transport.get(), workload, actors + 1, 0, zero_copy_min_row_bytes, &report);
    } else {
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == size - 1) {
        ZmqLearnerRole(&context, name, actors, seconds, &report);
      } else {
        ZmqActorRole(&context, name, rank - 1, workload.adds, seconds, rank, &report);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  if (raw_ring) RawMpi(rank, size, servers, sizes, raw_seconds / 2, ring, &report.raw_ring);
  RawMpi(rank, size, servers, sizes, raw_seconds / 2, no_ring, &report.raw);
  if (clients != MPI_COMM_NULL) MPI_Comm_free(&clients);

  std::vector<Report> reports(rank == 0 ? size : 0);
  MPI_Gather(&report, sizeof(Report), MPI_BYTE, reports.data(), sizeof(Report), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    double items = 0, steps = 0, fill_steps_all = 0, fill_seconds = 0, actor_seconds = 0, cpu = 0;
    Report::Raw raw_sum, raw_ring_sum;  // over the servers, with their longest seconds
    for (int r = servers; r < size - 1; ++r) {
      items += reports[r].items;
      steps += reports[r].steps;
      fill_steps_all += static_cast<double>(fill_steps_of(r - servers));
      fill_seconds = std::max(fill_seconds, reports[r].fill_seconds);
      actor_seconds = std::max(actor_seconds, reports[r].seconds);
    }
    for (int r = 0; r < servers; ++r) {
      for (auto [sum, one] : {std::pair{&raw_sum, &reports[r].raw}, std::pair{&raw_ring_sum, &reports[r].raw_ring}}) {
        sum->bytes += one->bytes;
        sum->seconds = std::max(sum->seconds, one->seconds);
        sum->cpu_seconds += one->cpu_seconds;
        sum->server_out_bytes += one->server_out_bytes;
      }
      cpu += reports[r].cpu_seconds;
    }
    const Report& learner = reports[size - 1];
    // An add's rows: transitions (its items) or steps.
    const double rows = workload.steps ? steps : items;
    const double items_per_s = items / actor_seconds;
    // Intake: the columns' bytes (rows, and items' columns) and the whole messages' on the wire.
    const double intake_mb_s = (rows * static_cast<double>(workload.adds.ItemBytes()) +
                                items * static_cast<double>(workload.items.ItemBytes())) / actor_seconds / 1e6;
    const double intake_wire_bytes = rows / kIntakeBatch * static_cast<double>(sizes.add_head) +
                                     rows * static_cast<double>(workload.adds.ItemBytes()) +
                                     items * static_cast<double>(ItemExtraBytes(workload));
    const double raw_mb_s = raw_sum.bytes / raw_sum.seconds / 1e6;
    const double raw_reply_mb_s = learner.raw.bytes / learner.raw.seconds / 1e6;
    // Compare like with like: the raw figures count whole messages, so scale
    // intake and samples to the bytes of their messages.
    const double intake_message_mb_s = intake_wire_bytes / actor_seconds / 1e6;
    const double samples_per_s = learner.samples / learner.seconds;
    const double batch = static_cast<double>(sample_batch);
    const double reply_mb_s = samples_per_s / batch * static_cast<double>(sizes.reply_message) / 1e6;
    // The server's CPU per GB it moved: intake in plus sample replies out.
    const double moved_gb =
        (intake_wire_bytes + learner.samples / batch * static_cast<double>(sizes.reply_message)) / 1e9;
    const double raw_cpu_s_per_gb = raw_sum.cpu_seconds / ((raw_sum.bytes + raw_sum.server_out_bytes) / 1e9);
    // Per item on the wire, to set step streams beside transitions.
    const double intake_bytes_per_item = intake_wire_bytes / items;
    const double reply_bytes_per_item = static_cast<double>(sizes.reply_message) / batch;
    std::string step_json;
    if (workload.steps) {
      const perserve::replay::StepOptions& o = *workload.steps;
      step_json = fmt::format(
          ", \"items\": \"{}\", \"step_bytes\": {}, \"step_capacity\": {}, \"item_capacity\": {}, "
          "\"episode_steps\": {}, \"fill_steps\": {:.0f}, \"fill_seconds\": {:.3f}, \"steps_in\": {:.0f}, "
          "\"steps_per_s\": {:.1f}, \"items_per_step\": {:.5f}, \"items_per_append\": {:.3f}, "
          "\"intake_wire_bytes_per_step\": {:.1f}",
          o.kind == perserve::replay::StepOptions::Kind::kNStep
              ? fmt::format("n-step {}, discount {}, stack obs:4 frames {}", o.n_step, o.discount,
                            o.frames_first ? "first" : "last")
              : fmt::format("sequences of {} every {}, obs unstacked, item column state:float32:1024",
                            o.sequence_length, o.sequence_period),
          workload.adds.ItemBytes(), workload.capacity, workload.capacity, kEpisodeSteps,
          fill_steps_all, fill_seconds, steps, steps / actor_seconds, items / steps,
          items / steps * kIntakeBatch, intake_wire_bytes / steps);
    }
    // --raw-ring: phase 1 over ring-sized memory, and the replay against it.
    std::string raw_ring_json, raw_ring_line;
    if (raw_ring) {
      const double ring_mb_s = raw_ring_sum.bytes / raw_ring_sum.seconds / 1e6;
      const double ring_reply_mb_s = learner.raw_ring.bytes / learner.raw_ring.seconds / 1e6;
      const double ring_cpu_s_per_gb =
          raw_ring_sum.cpu_seconds / ((raw_ring_sum.bytes + raw_ring_sum.server_out_bytes) / 1e9);
      raw_ring_json = fmt::format(
          ", \"raw_ring_mpi_mb_per_s\": {:.2f}, \"intake_over_raw_ring_mpi\": {:.4f}, "
          "\"raw_ring_reply_mb_per_s\": {:.2f}, \"sample_over_raw_ring_mpi\": {:.4f}, "
          "\"raw_ring_server_cpu_s_per_gb\": {:.4f}",
          ring_mb_s, intake_message_mb_s / ring_mb_s, ring_reply_mb_s, reply_mb_s / ring_reply_mb_s,
          ring_cpu_s_per_gb);
      raw_ring_line = fmt::format(
          "  raw MPI over ring-sized memory: intake {:.1f} MB/s ({:.2f}x of it), replies {:.1f} MB/s ({:.2f}x), "
          "server CPU {:.3f} s/GB\n",
          ring_mb_s, intake_message_mb_s / ring_mb_s, ring_reply_mb_s, reply_mb_s / ring_reply_mb_s,
          ring_cpu_s_per_gb);
    }
    const std::string json = fmt::format(
        "{{\"transport\": \"{}\", \"size\": \"{}\", \"item_bytes\": {}, \"message_bytes\": {}, "
        "\"reply_bytes\": {}, \"zero_copy_min_row_bytes\": {}, \"columns_apart_min_bytes\": {}, \"servers\": {}, "
        "\"actors\": {}, "
        "\"seconds\": {:.3f}, \"items_in\": {:.0f}, \"items_per_s\": {:.1f}, \"intake_mb_per_s\": {:.2f}, "
        "\"samples_per_s\": {:.1f}, \"updates_per_s\": {:.1f}, \"sample_latency_ms\": {{\"median\": {:.4f}, "
        "\"p99\": {:.4f}}}, \"raw_mpi_mb_per_s\": {:.2f}, \"intake_over_raw_mpi\": {:.4f}, "
        "\"raw_reply_mb_per_s\": {:.2f}, \"sample_reply_mb_per_s\": {:.2f}, \"sample_over_raw_mpi\": {:.4f}, "
        "\"server_cpu_s_per_gb\": {:.4f}, \"raw_server_cpu_s_per_gb\": {:.4f}, \"sample_batch\": {}, "
        "\"intake_wire_bytes_per_item\": {:.1f}, \"reply_wire_bytes_per_item\": {:.1f}, \"tables\": {}{}{}}}\n",
        transport, size_name, workload.samples.ItemBytes(), message_bytes, sizes.reply_message,
        zero_copy_min_row_bytes, columns_apart_min_bytes, servers, actors, actor_seconds, items, items_per_s,
        intake_mb_s, samples_per_s, learner.updates / learner.seconds, learner.latency_median_ms,
        learner.latency_p99_ms, raw_mb_s, intake_message_mb_s / raw_mb_s, raw_reply_mb_s, reply_mb_s,
        reply_mb_s / raw_reply_mb_s, cpu / moved_gb, raw_cpu_s_per_gb, sample_batch, intake_bytes_per_item,
        reply_bytes_per_item, workload.tables, step_json, raw_ring_json);
    const std::string what =
        workload.steps ? fmt::format("{} ({} B steps, {} B items sampled)", size_name, workload.adds.ItemBytes(),
                                     workload.samples.ItemBytes())
                       : fmt::format("{} transitions ({} B)", size_name, workload.samples.ItemBytes());
    fmt::print("transport {} | {} servers | {} | {} actors\n"
               "  intake        {:>12.0f} items/s  {:>9.1f} MB/s  ({:.2f}x raw MPI: {:.1f} MB/s in {}-byte messages)\n",
               transport, servers, what, actors, items_per_s, intake_mb_s, intake_message_mb_s / raw_mb_s, raw_mb_s,
               message_bytes);
    if (workload.steps) {
      fmt::print("  steps         {:>12.0f} steps/s, {:.3f} items a step, {:.0f} wire bytes an item (after a fill "
                 "of {:.2f} s)\n",
                 steps / actor_seconds, items / steps, intake_bytes_per_item, fill_seconds);
    }
    fmt::print("  learner       {:>12.0f} samples/s, {:.0f} updates/s, sample of {} latency median {:.3f} ms, p99 "
               "{:.3f} ms\n"
               "  replies       {:>9.1f} MB/s  ({:.2f}x raw MPI: {:.1f} MB/s in {}-byte messages)\n"
               "  server CPU    {:.3f} s/GB moved (raw MPI {:.3f} s/GB)\n",
               samples_per_s, learner.updates / learner.seconds, sample_batch, learner.latency_median_ms,
               learner.latency_p99_ms, reply_mb_s, reply_mb_s / raw_reply_mb_s, raw_reply_mb_s, sizes.reply_message,
               cpu / moved_gb, raw_cpu_s_per_gb);
    fmt::print("{}", raw_ring_line);
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
