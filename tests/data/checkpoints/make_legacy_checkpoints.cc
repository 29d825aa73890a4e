// make_legacy_checkpoints: writes small, deterministic checkpoints with the
// code of perserve commit b2cd74b (format 1: transitions; format 2: step
// streams, n-step and sequence items), for the tests that the later code
// keeps restoring them.
//
// Usage: make_legacy_checkpoints OUT_DIR
// Writes OUT_DIR/{format1-transitions,format2-nstep,format2-sequence}/, each a
// --checkpoint-dir (shard-0-of-1/checkpoint-000000/...) with beside it:
//   expected.bin  per held item with a nonzero leaf, key order: key (uint64
//                 LE), leaf (double LE, read from the tree), the item's
//                 sampled row (sample schema's ItemBytes: for transitions the
//                 store's row, column after column; for step streams
//                 StepReplay::Assemble of that one item)
//   flags.txt     what a restore must be given
//   README
// then restores each with this code (LoadCheckpoint into fresh replays) and
// checks that it reproduces expected.bin, the tree's nodes and the samples.
//
// Built by hand in a worktree at b2cd74b (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
// -DPERSERVE_BUILD_PYTHON=OFF; cmake --build build --target perserve_server_core), from the repository root:
//   c++ -O2 -DFMT_SHARED -DPERSERVE_HAVE_CUDA=1 -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB
//       -Iserver -Icommon/include -I. -isystem /usr/local/cuda/include -fopenmp -std=c++20
//       -c make_legacy_checkpoints.cc -o build/make_legacy_checkpoints.o
//   cd build/server && c++ ../make_legacy_checkpoints.o -o ../make_legacy_checkpoints
//       -L/usr/local/cuda/targets/x86_64-linux/lib libperserve_server_core.a libperserve_tree_core.a
//       /usr/lib/gcc/x86_64-linux-gnu/12/libgomp.so /usr/local/cuda/lib/libcudart_static.a ../proto/libperserve_proto.a
//       ../common/libperserve_common.a -lspdlog -lfmt -lcudadevrt -lrt -lpthread -ldl
//   build/make_legacy_checkpoints OUT_DIR
//
// Needs no MPI: Replay/StepReplay and CheckpointWriter are driven directly,
// the CheckpointState built as ReplayService builds it (one client for the
// transitions, a client per stream for the steps; rate limiter off, M =
// min(1000, capacity); the episode tracker observing every batch).

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "replay/episode_tracker.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/checkpoint.h"
#include "service/rate_limiter.h"
#include "service/step_checkpoint.h"

namespace fs = std::filesystem;
using namespace perserve;

namespace {

constexpr const char* kCommit = "b2cd74b";

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "make_legacy_checkpoints: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& status, const std::string& what) {
  if (!status.ok()) Die(what + ": " + status.ToString());
}

Schema ParseSchema(const std::vector<std::string>& specs) {
  Schema schema;
  for (const std::string& spec : specs) {
    Column column;
    Check(ParseColumn(spec, &column), "column " + spec);
    schema.columns.push_back(column);
  }
  Check(schema.Validate(), "schema");
  return schema;
}

template <typename T>
void Put(std::vector<std::byte>* out, const T& value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out->insert(out->end(), p, p + sizeof(T));
}

// Wire layout of `count` rows: rows[c] holds column c's rows back to back.
std::vector<std::byte> Bulk(const std::vector<std::vector<std::byte>>& columns) {
  std::vector<std::byte> bulk;
  for (const auto& c : columns) bulk.insert(bulk.end(), c.begin(), c.end());
  return bulk;
}

double Leaf(const replay::Replay& replay, int64_t slot) {
  double value = 0.0;
  Check(replay.tree().Get(std::span<const int64_t>(&slot, 1), std::span<double>(&value, 1)), "tree Get");
  return value;
}

// expected.bin's bytes: every held item with a nonzero leaf, key order. `row` writes one item's sampled row.
template <typename Row>
std::vector<std::byte> Expected(const replay::Replay& replay, int64_t row_bytes, const Row& row, int64_t* records) {
  std::vector<std::byte> out;
  *records = 0;
  for (uint64_t key = replay.oldest_key(); key < replay.next_key(); ++key) {
    const int64_t slot = static_cast<int64_t>(key % static_cast<uint64_t>(replay.capacity()));
    const double leaf = Leaf(replay, slot);
    if (leaf == 0.0) continue;
    Put(&out, key);
    Put(&out, leaf);
    std::vector<std::byte> bytes(static_cast<size_t>(row_bytes));
    row(slot, std::span<std::byte>(bytes));
    out.insert(out.end(), bytes.begin(), bytes.end());
    ++*records;
  }
  return out;
}

void WriteFile(const fs::path& file, std::span<const std::byte> bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) Die("cannot write " + file.string());
}

void WriteText(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::trunc);
  out << text;
  if (!out) Die("cannot write " + file.string());
}

std::vector<std::byte> ReadBytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string s{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// The service's CheckpointState for `replay` (replay_service.cc's hook).
service::CheckpointState StateOf(const replay::Replay& replay, const service::RateLimiter& limiter,
                                 const replay::EpisodeTracker& episodes) {
  service::CheckpointState state;
  state.schema = replay.store().schema().ToString();
  state.capacity = replay.capacity();
  state.alpha = replay.alpha();
  state.shard = 0;
  state.shards = 1;
  state.replay = replay.State();
  state.limiter = limiter.State();
  state.episodes = episodes.carries();
  return state;
}

// Writes one checkpoint under `dir` (a --checkpoint-dir): Begin, then Step until complete.
void WriteCheckpoint(const fs::path& dir, const replay::Replay& replay, service::CheckpointState state,
                     const replay::StepReplay* steps) {
  service::CheckpointWriter writer(dir.string(), 0, 1, replay.capacity());
  Check(writer.Begin(replay, std::move(state), steps), "checkpoint Begin");
  bool done = false;
  for (int i = 0; !done; ++i) {
    if (i > 100000) Die("the checkpoint never completed");
    Check(writer.Step(replay, std::chrono::microseconds(100000), &done), "checkpoint Step");
    writer.AwaitFinish();  // the helper thread's fsyncs, MANIFEST and rename: the next Step completes it
  }
  std::printf("  wrote %s (%" PRId64 " bytes)\n", writer.last_path().c_str(), writer.last_bytes());
}

void ExpectSameNodes(const replay::Replay& a, const replay::Replay& b, const std::string& what) {
  const size_t nodes = 2 * static_cast<size_t>(a.tree().capacity());
  std::vector<double> sa(nodes), ma(nodes), sb(nodes), mb(nodes);
  Check(a.tree().ReadNodes(sa, ma), "ReadNodes");
  Check(b.tree().ReadNodes(sb, mb), "ReadNodes");
  if (std::memcmp(sa.data(), sb.data(), nodes * sizeof(double)) != 0 ||
      std::memcmp(ma.data(), mb.data(), nodes * sizeof(double)) != 0) {
    Die(what + ": the restored tree's nodes differ");
  }
}

void ExpectSameState(const replay::Replay& a, const replay::Replay& b, const std::string& what) {
  const replay::ReplayState x = a.State(), y = b.State();
  if (x.next_key != y.next_key || x.max_priority != y.max_priority || x.seed != y.seed ||
      x.samples_drawn != y.samples_drawn || x.counters.items_added != y.counters.items_added ||
      x.counters.items_sampled != y.counters.items_sampled ||
      x.counters.priorities_updated != y.counters.priorities_updated ||
      x.counters.stale_updates_dropped != y.counters.stale_updates_dropped ||
      x.counters.priorities_dropped != y.counters.priorities_dropped || a.size() != b.size() ||
      a.live_size() != b.live_size()) {
    Die(what + ": the restored replay's state differs");
  }
}

// The checkpoint directory's MANIFEST starts with "perserve-checkpoint <format>".
void CheckManifest(const fs::path& dir, int format) {
  const fs::path manifest = dir / "shard-0-of-1" / "checkpoint-000000" / "MANIFEST";
  std::ifstream in(manifest);
  std::string first;
  std::getline(in, first);
  if (first != fmt::format("perserve-checkpoint {}", format)) {
    Die(fmt::format("{}: first line '{}', not format {}", manifest.string(), first, format));
  }
}

std::string Readme(const std::string& name, const std::string& what) {
  return fmt::format(
      "written by perserve at commit {} with make_legacy_checkpoints.cc\n\n"
      "{}: {}\n"
      "shard-0-of-1/checkpoint-000000/  the checkpoint (pass this directory, or its checkpoint, to --restore)\n"
      "flags.txt     what a restore must be given\n"
      "expected.bin  per held item with a nonzero leaf, in key order: key (uint64 little-endian), leaf (double\n"
      "              little-endian, from the tree), the item's sampled row as the server at {} returns it\n"
      "              (sample schema ItemBytes bytes, column after column)\n",
      kCommit, name, what, kCommit);
}

// ---------------------------------------------------------------- format 1

const std::vector<std::string> kTransitionColumns = {"obs:float32:3", "action:int64", "reward:float32",
                                                     "next_obs:float32:3", "done:uint8"};

replay::ReplayOptions TransitionOptions(uint64_t seed) {
  replay::ReplayOptions options;
  options.capacity = 64;
  options.alpha = 0.6;
  options.device = tree::Device::kCpu;
  options.seed = seed;
  options.priority_eps = 1e-6;
  return options;
}

void Format1(const fs::path& out) {
  const std::string name = "format1-transitions";
  std::printf("%s\n", name.c_str());
  const fs::path dir = out / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Schema schema = ParseSchema(kTransitionColumns);
  std::unique_ptr<replay::Replay> replay;
  Check(replay::Replay::Create(TransitionOptions(7), schema, &replay), "Replay::Create");
  // The service's: M = min(1000, capacity), limiter off; one client.
  service::RateLimiter limiter({0.0, 0.0, std::min<int64_t>(1000, replay->capacity())});
  replay::EpisodeTracker episodes(schema, "reward", "done", 1);

  for (int64_t first = 0; first < 100; first += 10) {
    std::vector<std::vector<std::byte>> columns(5);
    std::vector<double> priorities;
    for (int64_t i = first; i < first + 10; ++i) {
      const float fi = static_cast<float>(i);
      for (float v : {fi, fi + 0.5f, -fi}) Put(&columns[0], v);
      Put(&columns[1], static_cast<int64_t>(i));
      Put(&columns[2], static_cast<float>(0.25 * static_cast<double>(i)));
      for (float v : {fi + 1.0f, fi + 1.5f, -(fi + 1.0f)}) Put(&columns[3], v);
      Put(&columns[4], static_cast<uint8_t>(i % 7 == 6 ? 1 : 0));
      priorities.push_back(1.0 + static_cast<double>(i % 5) * 0.5);
    }
    const std::vector<std::byte> bulk = Bulk(columns);
    uint64_t first_key = 0;
    Check(replay->Add(10, bulk, priorities, &first_key), "Add");
    if (first_key != static_cast<uint64_t>(first)) Die("unexpected first key");
    episodes.Observe(0, 10, bulk);
    limiter.Inserted(10, replay->size());
  }
  std::vector<uint64_t> keys;
  std::vector<double> priorities;
  for (uint64_t key = 60; key < 80; ++key) {
    keys.push_back(key);
    priorities.push_back(2.0 + 0.1 * static_cast<double>(key % 3));
  }
  replay::UpdateCounts counts;
  Check(replay->UpdatePriorities(keys, priorities, &counts), "UpdatePriorities");
  if (counts.applied != 20) Die("update: not all applied");
  for (int i = 0; i < 2; ++i) {
    replay::SampleResult sample;
    Check(replay->Sample(16, 0.4, &sample), "Sample");
    limiter.Sampled(16);
  }
  WriteCheckpoint(dir, *replay, StateOf(*replay, limiter, episodes), nullptr);

  const int64_t row_bytes = schema.ItemBytes();
  const auto gather = [](const replay::Replay& r) {
    return [&r](int64_t slot, std::span<std::byte> row) { r.store().Gather(std::span<const int64_t>(&slot, 1), row); };
  };
  int64_t records = 0;
  const std::vector<std::byte> expected = Expected(*replay, row_bytes, gather(*replay), &records);
  WriteFile(dir / "expected.bin", expected);
  WriteText(dir / "flags.txt",
            fmt::format("--column {}\n"
                        "--capacity 64\n"
                        "--alpha 0.6\n"
                        "--priority-eps 1e-06\n"
                        "--device cpu (written on the CPU tree)\n"
                        "replay seed 7 (ReplayOptions::seed itself; perserve-server's --seed S gives rank r the seed "
                        "ShardSeed(S, r); a restore takes the seed from state.bin)\n"
                        "no --n-step, no --sequence-length (transitions: checkpoint format 1)\n"
                        "schema {}\n"
                        "clients 1 (state.bin holds 1 episode carry; rate limiter off, min size to sample 64)\n"
                        "expected.bin: {} records of 8 + 8 + {} bytes (key, leaf, row)\n",
                        fmt::join(kTransitionColumns, " --column "), schema.ToString(), records, row_bytes));
  WriteText(dir / "README",
            Readme(name, "100 transitions added (10 adds of 10) to a capacity-64 ring (keys 36..99 held), "
                         "keys 60..79 updated, two samples of 16 drawn"));
  std::printf("  expected.bin: %" PRId64 " drawable items, %" PRId64 " bytes a row\n", records, row_bytes);

  // Restore with this code and check.
  CheckManifest(dir, 1);
  std::unique_ptr<replay::Replay> restored;
  Check(replay::Replay::Create(TransitionOptions(12345), schema, &restored), "Replay::Create (restore)");
  service::CheckpointState state;
  std::string loaded;
  Check(service::LoadCheckpoint(dir.string(), 0, 1, restored.get(), &state, &loaded), "LoadCheckpoint");
  if (state.format != 1) Die("format 1 expected");
  int64_t again = 0;
  if (Expected(*restored, row_bytes, gather(*restored), &again) != ReadBytes(dir / "expected.bin")) {
    Die(name + ": the restore does not reproduce expected.bin");
  }
  ExpectSameNodes(*replay, *restored, name);
  ExpectSameState(*replay, *restored, name);
  for (int round = 0; round < 4; ++round) {
    replay::SampleResult x, y;
    Check(replay->Sample(16, 0.4, &x), "Sample");
    Check(restored->Sample(16, 0.4, &y), "Sample");
    if (x.keys != y.keys || x.weights != y.weights) Die(name + ": the restored replay samples differently");
  }
  std::printf("  restored %s: %" PRId64 " items, expected.bin reproduced, same tree and samples\n", loaded.c_str(),
              restored->size());
}

// ---------------------------------------------------------------- format 2

struct StepSetup {
  std::vector<std::string> columns;
  replay::StepOptions options;
  replay::ReplayOptions items;  // the items' Replay
};

struct StepFixture {
  std::unique_ptr<replay::Replay> items;
  std::unique_ptr<replay::StepReplay> steps;
};

StepFixture MakeSteps(const StepSetup& setup, uint64_t seed) {
  StepFixture f;
  const Schema schema = ParseSchema(setup.columns);
  Schema sample, stored;
  Check(replay::StepSchemas(setup.options, schema, &sample, &stored), "StepSchemas");
  replay::ReplayOptions options = setup.items;
  options.seed = seed;
  Check(replay::Replay::Create(options, stored, &f.items), "Replay::Create (items)");
  Check(replay::StepReplay::Create(setup.options, schema, f.items.get(), &f.steps), "StepReplay::Create");
  return f;
}

// A stream's steps as the generator appended them (done values), for deciding which items are creatable.
struct StreamLog {
  std::vector<uint8_t> done;
  std::vector<int64_t> episode_start;
  int64_t next_item = 0;  // the first index not yet itemized nor skipped
};

// Whether the item at t is creatable now (step_replay.h), given the stream's appended steps.
bool Creatable(const replay::StepOptions& o, const StreamLog& log, int64_t t) {
  const int64_t last = static_cast<int64_t>(log.done.size()) - 1;
  if (log.done[t] == 2) return false;  // a bootstrap step: never an item
  if (o.kind == replay::StepOptions::Kind::kSequence &&
      (t - log.episode_start[t]) % o.sequence_period != 0) {
    return false;
  }
  const int64_t span = o.kind == replay::StepOptions::Kind::kNStep ? o.n_step : o.sequence_length - 1;
  if (last >= t + span) return true;
  for (int64_t e = t; e <= last; ++e) {
    if (log.done[e] != 0) return true;  // the episode ended within the span
  }
  return false;
}

// Whether the item at t can never be created (a bootstrap step, a sequence off the period).
bool NeverItem(const replay::StepOptions& o, const StreamLog& log, int64_t t) {
  if (log.done[t] == 2) return true;
  return o.kind == replay::StepOptions::Kind::kSequence && (t - log.episode_start[t]) % o.sequence_period != 0;
}

struct StepRun {
  StepFixture f;
  service::RateLimiter limiter{{0.0, 0.0, 1}};
  std::unique_ptr<replay::EpisodeTracker> episodes;
  std::vector<StreamLog> logs;
  int64_t items_created = 0, appends = 0;
};

// Appends `rows` (wire layout) of `count` steps to `stream`, then creates, one request each, every item of the
// stream that has become creatable, in index order; `priority(t)`, `item_columns(t)` give an item's.
template <typename Priority, typename ItemColumns>
void AppendAndItemize(StepRun* run, int stream, int64_t count, const std::vector<std::byte>& bulk,
                      const std::vector<uint8_t>& dones, const Priority& priority, const ItemColumns& item_columns) {
  replay::StepReplay& steps = *run->f.steps;
  StreamLog& log = run->logs[stream];
  uint64_t first = 0;
  Check(steps.Append(stream, steps.stream_steps(stream), count, bulk, {}, {}, {}, &first), "Append (steps)");
  run->episodes->Observe(stream, count, bulk);
  run->limiter.Inserted(0, run->f.items->live_size());
  ++run->appends;
  for (uint8_t d : dones) {
    const int64_t index = static_cast<int64_t>(log.done.size());
    const int64_t start = index == 0 ? 0 : (log.done[index - 1] != 0 ? index : log.episode_start[index - 1]);
    log.done.push_back(d);
    log.episode_start.push_back(start);
  }
  const int64_t held = steps.stream_steps(stream);
  for (int64_t t = std::max(log.next_item, steps.steps().stream_oldest(stream)); t < held; ++t) {
    if (NeverItem(steps.options(), log, t)) {
      // Append must refuse it.
      const double p = priority(t);
      const std::vector<std::byte> columns = item_columns(t);
      if (steps.Append(stream, held, 0, {}, std::span<const int64_t>(&t, 1), std::span<const double>(&p, 1),
                       columns, &first)
              .ok()) {
        Die(fmt::format("stream {}: an item at {} (never an item) was accepted", stream, t));
      }
      log.next_item = t + 1;
      continue;
    }
    if (!Creatable(steps.options(), log, t)) break;
    const double p = priority(t);
    const std::vector<std::byte> columns = item_columns(t);
    Check(steps.Append(stream, held, 0, {}, std::span<const int64_t>(&t, 1), std::span<const double>(&p, 1), columns,
                       &first),
          fmt::format("Append (item at stream {} step {})", stream, t));
    run->limiter.Inserted(1, run->f.items->live_size());
    ++run->items_created;
    log.next_item = t + 1;
  }
}

std::string StepFlagsText(const replay::StepReplay& steps) {
  std::string text;
  for (const auto& [flag, value] : service::StepFlags(steps)) text += fmt::format("  {} {}\n", flag, value);
  return text;
}

// Writes the checkpoint, expected.bin, and checks a restore.
void FinishSteps(const fs::path& dir, const std::string& name, const StepSetup& setup, StepRun* run,
                 const std::string& flags, const std::string& what, int sample_rounds) {
  replay::Replay& items = *run->f.items;
  replay::StepReplay& steps = *run->f.steps;
  WriteCheckpoint(dir, items, StateOf(items, run->limiter, *run->episodes), &steps);
  const int64_t row_bytes = steps.SampleItemBytes();
  const auto assemble = [](const replay::StepReplay& s) {
    return [&s](int64_t slot, std::span<std::byte> row) { s.Assemble(std::span<const int64_t>(&slot, 1), row); };
  };
  int64_t records = 0;
  WriteFile(dir / "expected.bin", Expected(items, row_bytes, assemble(steps), &records));
  int64_t evicted = 0;
  for (uint64_t key = items.oldest_key(); key < items.next_key(); ++key) {
    if (Leaf(items, static_cast<int64_t>(key % static_cast<uint64_t>(items.capacity()))) == 0.0) ++evicted;
  }
  std::string streams;
  for (int s = 0; s < setup.options.streams; ++s) {
    streams += fmt::format(" stream {}: {} steps appended, indices {}..{} held, next episode starts at {};", s,
                           steps.stream_steps(s), steps.steps().stream_oldest(s), steps.stream_steps(s) - 1,
                           steps.steps().next_episode_start(s));
  }
  WriteText(dir / "flags.txt",
            flags + fmt::format("step flags as steps.bin records them (service::StepFlags):\n{}"
                                "sample schema {} ({} bytes an item)\n"
                                "items' stored schema {}\n"
                                "state: {} items held (keys {}..{}), {} drawable, {} evicted (leaf 0); steps held "
                                "keys {}..{};{}\n"
                                "expected.bin: {} records of 8 + 8 + {} bytes (key, leaf, row)\n",
                                StepFlagsText(steps), steps.sample_schema().ToString(), row_bytes,
                                items.store().schema().ToString(), items.size(), items.oldest_key(),
                                items.next_key() - 1, items.live_size(), evicted, steps.steps().oldest_key(),
                                steps.next_step_key() - 1, streams, records, row_bytes));
  WriteText(dir / "README", Readme(name, what));
  std::printf("  %" PRId64 " items created, %" PRId64 " held, expected.bin: %" PRId64
              " drawable items (%" PRId64 " evicted), %" PRId64 " bytes a row\n",
              run->items_created, items.size(), records, evicted, row_bytes);
  if (records != items.live_size()) Die("expected.bin's records are not the live items");

  CheckManifest(dir, 2);
  StepFixture restored = MakeSteps(setup, 12345);
  service::CheckpointState state;
  std::string loaded;
  Check(service::LoadCheckpoint(dir.string(), 0, 1, restored.items.get(), &state, &loaded, restored.steps.get()),
        "LoadCheckpoint");
  if (state.format != 2) Die("format 2 expected");
  int64_t again = 0;
  if (Expected(*restored.items, row_bytes, assemble(*restored.steps), &again) != ReadBytes(dir / "expected.bin")) {
    Die(name + ": the restore does not reproduce expected.bin");
  }
  ExpectSameNodes(items, *restored.items, name);
  ExpectSameState(items, *restored.items, name);
  if (steps.next_step_key() != restored.steps->next_step_key() ||
      steps.steps().oldest_key() != restored.steps->steps().oldest_key()) {
    Die(name + ": the restored step ring differs");
  }
  for (int s = 0; s < setup.options.streams; ++s) {
    if (steps.stream_steps(s) != restored.steps->stream_steps(s)) Die(name + ": a stream's steps differ");
  }
  for (int round = 0; round < sample_rounds; ++round) {
    replay::SampleResult x, y;
    Check(items.Sample(8, 0.4, &x), "Sample");
    Check(restored.items->Sample(8, 0.4, &y), "Sample");
    if (x.keys != y.keys || x.weights != y.weights) Die(name + ": the restored replay samples differently");
    std::vector<std::byte> a(x.slots.size() * static_cast<size_t>(row_bytes)), b(a.size());
    steps.Assemble(x.slots, a);
    restored.steps->Assemble(y.slots, b);
    if (a != b) Die(name + ": the restored replay assembles differently");
  }
  if (setup.options.streams > 1) {
    // A restore into a StepReplay made with one stream grows it to the checkpoint's streams.
    StepSetup one = setup;
    one.options.streams = 1;
    StepFixture fewer = MakeSteps(one, 12345);
    service::CheckpointState ignored;
    std::string where;
    Check(service::LoadCheckpoint(dir.string(), 0, 1, fewer.items.get(), &ignored, &where, fewer.steps.get()),
          "LoadCheckpoint (one stream)");
    if (fewer.steps->steps().streams() != setup.options.streams ||
        Expected(*fewer.items, row_bytes, assemble(*fewer.steps), &again) != ReadBytes(dir / "expected.bin")) {
      Die(name + ": a restore into one stream does not reproduce expected.bin");
    }
    std::printf("  a restore into a StepReplay made with 1 stream also reproduces expected.bin (streams grew to %d)\n",
                fewer.steps->steps().streams());
  }
  std::printf("  restored %s: %" PRId64 " items, %" PRIu64 " steps held, expected.bin reproduced, same tree and "
              "samples\n",
              loaded.c_str(), restored.items->size(),
              restored.steps->next_step_key() - restored.steps->steps().oldest_key());
}

void Format2NStep(const fs::path& out) {
  const std::string name = "format2-nstep";
  std::printf("%s\n", name.c_str());
  const fs::path dir = out / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  StepSetup setup;
  setup.columns = {"obs:uint8:4", "action:int32", "reward:float32", "done:uint8"};
  setup.options.kind = replay::StepOptions::Kind::kNStep;
  setup.options.n_step = 3;
  setup.options.discount = 0.9;
  setup.options.stacks = {{"obs", 2}};
  setup.options.step_capacity = 64;
  setup.options.streams = 2;
  setup.items = TransitionOptions(9);  // capacity 64 (= --capacity), alpha 0.6, eps 1e-6, CPU

  StepRun run;
  run.f = MakeSteps(setup, 9);
  run.limiter = service::RateLimiter({0.0, 0.0, std::min<int64_t>(1000, setup.items.capacity)});
  run.episodes = std::make_unique<replay::EpisodeTracker>(run.f.steps->step_schema(), "reward", "done",
                                                          setup.options.streams, /*bootstrap_steps=*/true);
  run.logs.resize(2);
  const auto priority = [](int64_t t) { return 0.5 + static_cast<double>(t % 4) * 0.25; };
  const auto no_columns = [](int64_t) { return std::vector<std::byte>{}; };
  for (int batch = 0; batch < 24; ++batch) {
    const int s = batch % 2;
    const int64_t j0 = run.f.steps->stream_steps(s);
    std::vector<std::vector<std::byte>> columns(4);
    std::vector<uint8_t> dones;
    for (int64_t j = j0; j < j0 + 5; ++j) {
      for (uint8_t v : {static_cast<uint8_t>(j % 251), static_cast<uint8_t>(s), static_cast<uint8_t>((j * 3) % 251),
                        uint8_t{7}}) {
        Put(&columns[0], v);
      }
      Put(&columns[1], static_cast<int32_t>(j));
      Put(&columns[2], static_cast<float>(0.5 * static_cast<double>(j) + s));
      const uint8_t done = j % 11 == 10 ? 1 : (j % 17 == 16 ? 2 : 0);
      Put(&columns[3], done);
      dones.push_back(done);
    }
    AppendAndItemize(&run, s, 5, Bulk(columns), dones, priority, no_columns);
  }
  // A few held items' priorities: the 6 newest drawable ones, and the newest evicted one (a stale update).
  replay::Replay& items = *run.f.items;
  std::vector<uint64_t> keys;
  std::vector<double> priorities;
  for (uint64_t key = items.next_key(); key-- > items.oldest_key() && keys.size() < 6;) {
    if (Leaf(items, static_cast<int64_t>(key % 64)) != 0.0) keys.push_back(key);
  }
  for (uint64_t key = items.next_key(); key-- > items.oldest_key();) {
    if (Leaf(items, static_cast<int64_t>(key % 64)) == 0.0) {
      keys.push_back(key);
      break;
    }
  }
  for (uint64_t key : keys) priorities.push_back(1.5 + 0.25 * static_cast<double>(key % 4));
  replay::UpdateCounts counts;
  Check(items.UpdatePriorities(keys, priorities, &counts), "UpdatePriorities");
  std::printf("  update of %zu keys: %" PRId64 " applied, %" PRId64 " stale\n", keys.size(), counts.applied,
              counts.stale);
  replay::SampleResult sample;
  Check(items.Sample(8, 0.4, &sample), "Sample");
  run.limiter.Sampled(8);

  const std::string flags =
      "--column obs:uint8:4 --column action:int32 --column reward:float32 --column done:uint8\n"
      "--n-step 3\n"
      "--discount 0.9\n"
      "--stack obs:2\n"
      "--capacity 64 (the step ring; the items' Replay capacity is --capacity too: 64)\n"
      "--alpha 0.6\n"
      "--priority-eps 1e-06\n"
      "--device cpu (written on the CPU tree)\n"
      "no --item-column; --reward-column reward --done-column done (the defaults)\n"
      "streams 2 (StepOptions::streams; perserve-server sets it to the MPI world size; a restore into fewer streams grows "
      "them to 2: StepStore::StartRestore, checked below with 1)\n"
      "items' replay seed 9 (ReplayOptions::seed itself; a restore takes it from state.bin)\n";
  FinishSteps(dir, name, setup, &run, flags,
              "120 steps (24 appends of 5, streams 0 and 1 alternating) into a 64-step ring, n-step items (n 3, "
              "discount 0.9, obs stacked 2) created one a request as they became creatable; the items' ring "
              "(capacity 64) wrapped, items whose steps were overwritten were evicted (leaf 0); a few priorities "
              "updated (one stale), one sample of 8 drawn",
              4);
}

void Format2Sequence(const fs::path& out) {
  const std::string name = "format2-sequence";
  std::printf("%s\n", name.c_str());
  const fs::path dir = out / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  StepSetup setup;
  setup.columns = {"obs:float32:2", "reward:float32", "done:uint8"};
  setup.options.kind = replay::StepOptions::Kind::kSequence;
  setup.options.n_step = 1;  // as server_main's StepOptionsOf sets it (max(1, --n-step unset))
  setup.options.discount = 0.99;
  setup.options.sequence_length = 4;
  setup.options.sequence_period = 2;
  setup.options.item_columns = {Column{"state", DType::kFloat32, {2}}};
  setup.options.step_capacity = 48;
  setup.options.streams = 1;
  setup.items = TransitionOptions(11);
  setup.items.capacity = 48;
  setup.items.alpha = 0.7;

  StepRun run;
  run.f = MakeSteps(setup, 11);
  run.limiter = service::RateLimiter({0.0, 0.0, std::min<int64_t>(1000, setup.items.capacity)});
  run.episodes = std::make_unique<replay::EpisodeTracker>(run.f.steps->step_schema(), "reward", "done",
                                                          setup.options.streams, /*bootstrap_steps=*/true);
  run.logs.resize(1);
  const auto priority = [](int64_t t) { return 1.0 + static_cast<double>(t % 3); };
  const auto state_column = [](int64_t t) {
    std::vector<std::byte> bytes;
    Put(&bytes, static_cast<float>(t));
    Put(&bytes, static_cast<float>(0.5 * static_cast<double>(t)));
    return bytes;
  };
  for (int batch = 0; batch < 30; ++batch) {
    const int64_t j0 = run.f.steps->stream_steps(0);
    std::vector<std::vector<std::byte>> columns(3);
    std::vector<uint8_t> dones;
    for (int64_t j = j0; j < j0 + 3; ++j) {
      Put(&columns[0], static_cast<float>(j));
      Put(&columns[0], static_cast<float>(-j));
      Put(&columns[1], static_cast<float>(j));
      const uint8_t done = j % 13 == 12 ? 1 : 0;
      Put(&columns[2], done);
      dones.push_back(done);
    }
    AppendAndItemize(&run, 0, 3, Bulk(columns), dones, priority, state_column);
  }

  const std::string flags =
      "--column obs:float32:2 --column reward:float32 --column done:uint8\n"
      "--sequence-length 4\n"
      "--sequence-period 2\n"
      "--item-column state:float32:2\n"
      "no --stack (none)\n"
      "--capacity 48 (the step ring; the items' Replay capacity is --capacity too: 48)\n"
      "--alpha 0.7\n"
      "--priority-eps 1e-06\n"
      "--device cpu (written on the CPU tree)\n"
      "--reward-column reward --done-column done (the defaults)\n"
      "streams 1\n"
      "items' replay seed 11 (ReplayOptions::seed itself; a restore takes it from state.bin)\n";
  FinishSteps(dir, name, setup, &run, flags,
              "90 steps (30 appends of 3, one stream; episodes end at j % 13 == 12) into a 48-step ring, sequence "
              "items (length 4, period 2, item column state) at every creatable start; the oldest items were "
              "evicted with their steps (leaf 0); no update, no sample",
              4);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) Die("usage: make_legacy_checkpoints OUT_DIR");
  const fs::path out = argv[1];
  fs::create_directories(out);
  Format1(out);
  Format2NStep(out);
  Format2Sequence(out);
  std::printf("all written and verified under %s\n", out.c_str());
  return 0;
}
