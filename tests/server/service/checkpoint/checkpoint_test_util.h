// Helpers the checkpoint tests share: tables of numbered transitions (a
// StepReplay of kTransition: each step its own item), their held items,
// ring and tree nodes compared bit for bit, a checkpoint written in tiny
// slices, and the tools to forge a checkpoint's files with their MANIFEST
// lines made to match.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cereal/archives/binary.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/replay/step_test_util.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service::checkpoint_test {

namespace fs = std::filesystem;
using std::chrono::microseconds;

// `obs_bytes` per item in the obs column: large rows make a checkpoint's
// slice a few rows, so appends can overwrite rows it has not written yet.
inline Schema TestSchema(int64_t obs_bytes = 5) {
  return Schema{{{"id", DType::kInt64, {}}, {"obs", DType::kUInt8, {obs_bytes}}, {"x", DType::kFloat32, {3}}}};
}

// A table of transitions: a ring of `capacity` steps, as many items, `streams` streams.
inline std::unique_ptr<replay::StepReplay> MakeReplay(int64_t capacity, uint64_t seed = 17, double alpha = 0.6,
                                                      int64_t obs_bytes = 5, int streams = 1) {
  replay::step_test::StepFixture fixture;
  const Status created =
      replay::step_test::MakeTransitionReplay(TestSchema(obs_bytes), capacity, streams, &fixture, alpha, seed);
  EXPECT_TRUE(created.ok()) << created.ToString();
  return std::move(fixture.steps);
}

// Prepares `request`, lets a checkpoint being written keep what its Commit
// overwrites (BeforeWrite, as the service's Intake does), and commits it.
inline Status AppendDuringCheckpoint(replay::StepReplay* replay, const replay::AppendRequest& request,
                                     CheckpointWriter* writer, uint64_t* first_key) {
  PERSERVE_RETURN_IF_ERROR(replay->Prepare(request));
  if (writer != nullptr) {
    PERSERVE_RETURN_IF_ERROR(writer->BeforeCommit(*replay, request.steps.steps));
  }
  return replay->Commit(first_key);
}

// Adds `count` transitions numbered from `first` (every byte a function of
// it) to `stream`, with random priorities; through `writer`'s BeforeWrite
// when given.
inline void AddBatch(replay::StepReplay* replay, int64_t first, int64_t count, std::mt19937_64* rng,
                     CheckpointWriter* writer = nullptr, int stream = 0) {
  const int64_t obs_bytes = replay->step_schema().columns[1].ItemBytes();
  std::vector<int64_t> ids(count);
  std::vector<uint8_t> obs(count * obs_bytes);
  std::vector<float> x(count * 3);
  std::vector<double> priorities(count);
  std::uniform_real_distribution<double> priority(0.01, 5.0);
  for (int64_t j = 0; j < count; ++j) {
    ids[j] = first + j;
    for (int64_t b = 0; b < obs_bytes; ++b) obs[j * obs_bytes + b] = static_cast<uint8_t>((first + j) * 7 + b);
    for (int e = 0; e < 3; ++e) x[j * 3 + e] = static_cast<float>(first + j) + 0.5f * e;
    priorities[j] = priority(*rng);
  }
  std::vector<std::byte> bulk;
  for (auto part : {std::as_bytes(std::span(ids)), std::as_bytes(std::span(obs)), std::as_bytes(std::span(x))}) {
    bulk.insert(bulk.end(), part.begin(), part.end());
  }
  const replay::TableItems add{0, /*item_per_step=*/true, {}, priorities, {}};
  const replay::AppendRequest request{stream, replay->stream_steps(stream), store::StepBatch{count, bulk, false},
                                      {&add, 1}};
  uint64_t first_key = 0;
  const Status added = AppendDuringCheckpoint(replay, request, writer, &first_key);
  ASSERT_TRUE(added.ok()) << added.ToString();
}

inline void AddItems(replay::StepReplay* replay, int64_t first, int64_t count, std::mt19937_64* rng,
                     CheckpointWriter* writer = nullptr) {
  for (int64_t done = 0; done < count; done += 100) {
    AddBatch(replay, first + done, std::min<int64_t>(100, count - done), rng, writer);
  }
}

// What a table holds of one item: its key, slot, leaf, the row its Replay
// stores (the step key, the item columns) and the row a sample assembles.
struct HeldItem {
  uint64_t key = 0;
  int64_t slot = 0;
  double leaf = 0.0;
  std::vector<std::byte> stored, sample;
  bool operator==(const HeldItem& other) const {
    return key == other.key && slot == other.slot && std::memcmp(&leaf, &other.leaf, sizeof(leaf)) == 0 &&
           stored == other.stored && sample == other.sample;
  }
};

// Every held item, oldest key first.
inline std::vector<HeldItem> HeldItems(const replay::StepReplay& replay) {
  const replay::Replay& items = replay.items();
  std::vector<HeldItem> held;
  for (int64_t slot = 0; slot < items.slots_used(); ++slot) {
    const uint64_t key = items.KeyAt(slot);
    if (key == replay::Replay::kNoKey) continue;
    HeldItem item{key, slot, replay::step_test::Leaf(items, slot), {}, {}};
    item.stored.resize(static_cast<size_t>(items.store().schema().ItemBytes()));
    items.store().Gather(std::span<const int64_t>(&slot, 1), item.stored);
    item.sample.resize(static_cast<size_t>(replay.SampleItemBytes()));
    replay.Assemble(std::span<const int64_t>(&slot, 1), item.sample);
    held.push_back(std::move(item));
  }
  std::sort(held.begin(), held.end(), [](const HeldItem& a, const HeldItem& b) { return a.key < b.key; });
  EXPECT_EQ(static_cast<int64_t>(held.size()), items.size());
  return held;
}

// What the ring holds: the streams' counts and next episode starts, and per
// held step (oldest key first) its bookkeeping and its columns' bytes.
struct RingContents {
  bool episodic = false;
  uint64_t oldest = 0, next = 0;
  std::vector<int64_t> stream_steps, next_episode_start;
  std::vector<int64_t> info;  // per step: stream, index, episode start, done
  std::vector<double> rewards;
  std::vector<std::byte> rows;
  bool operator==(const RingContents& other) const = default;
};

inline RingContents Ring(const replay::StepReplay& replay) {
  const store::StepStore& ring = replay.steps();
  RingContents contents{ring.episodic(), ring.oldest_key(), ring.next_key(), {}, {}, {}, {}, {}};
  for (int s = 0; s < ring.streams(); ++s) {
    contents.stream_steps.push_back(ring.stream_steps(s));
    contents.next_episode_start.push_back(ring.next_episode_start(s));
  }
  for (uint64_t key = contents.oldest; key < contents.next; ++key) {
    const store::StepInfo& info = ring.Info(key);
    contents.info.insert(contents.info.end(), {info.stream, info.index, info.episode_start, info.done});
    contents.rewards.push_back(info.reward);
    for (size_t c = 0; c < ring.schema().columns.size(); ++c) {
      const std::byte* row = ring.Row(static_cast<int>(c), key);
      contents.rows.insert(contents.rows.end(), row, row + ring.schema().columns[c].ItemBytes());
    }
  }
  return contents;
}

// The same ring, each part compared on its own (the first step that differs
// named). With `a_restored`, `a` was just restored: every stream of a ring
// with episodes begins a new one at its next step (StepReplay::EndRestore),
// whatever `b`'s episodes do.
inline void ExpectSameRing(const RingContents& a, const RingContents& b, const std::string& what = "the rings",
                           bool a_restored = false) {
  EXPECT_EQ(a.oldest, b.oldest) << what << ": oldest key";
  EXPECT_EQ(a.next, b.next) << what << ": next key";
  EXPECT_EQ(a.stream_steps, b.stream_steps) << what << ": the streams' step counts";
  if (a_restored && a.episodic) {
    EXPECT_EQ(a.next_episode_start, a.stream_steps) << what << ": the restored streams' next episode starts";
  } else {
    EXPECT_EQ(a.next_episode_start, b.next_episode_start) << what << ": the streams' next episode starts";
  }
  if (a.info != b.info || a.rewards != b.rewards || a.rows != b.rows) {
    ADD_FAILURE() << what << ": the held steps differ";
    for (size_t i = 0; i < std::min(a.rewards.size(), b.rewards.size()); ++i) {
      const bool same_info = std::equal(a.info.begin() + 4 * i, a.info.begin() + 4 * i + 4, b.info.begin() + 4 * i);
      if (!same_info || a.rewards[i] != b.rewards[i]) {
        ADD_FAILURE() << what << ": step key " << a.oldest + i << ": stream, index, episode start, done "
                      << a.info[4 * i] << " " << a.info[4 * i + 1] << " " << a.info[4 * i + 2] << " "
                      << a.info[4 * i + 3] << " against " << b.info[4 * i] << " " << b.info[4 * i + 1] << " "
                      << b.info[4 * i + 2] << " " << b.info[4 * i + 3];
        break;
      }
    }
  }
}

inline void ExpectSameNodes(const replay::Replay& a, const replay::Replay& b) {
  ASSERT_EQ(a.tree().capacity(), b.tree().capacity());
  const size_t nodes = 2 * static_cast<size_t>(a.tree().capacity());
  std::vector<double> sums_a(nodes), mins_a(nodes), sums_b(nodes), mins_b(nodes);
  ASSERT_TRUE(a.tree().ReadNodes(sums_a, mins_a).ok());
  ASSERT_TRUE(b.tree().ReadNodes(sums_b, mins_b).ok());
  EXPECT_EQ(std::memcmp(sums_a.data(), sums_b.data(), nodes * sizeof(double)), 0) << "sum nodes differ";
  EXPECT_EQ(std::memcmp(mins_a.data(), mins_b.data(), nodes * sizeof(double)), 0) << "min nodes differ";
}

// Held items, ring and tree nodes: the same, bit for bit (`restored` a copy
// of `original` through a checkpoint: ExpectSameRing's a_restored).
inline void ExpectSameTable(const replay::StepReplay& restored, const replay::StepReplay& original) {
  const replay::StepReplay& a = restored;
  const replay::StepReplay& b = original;
  EXPECT_EQ(a.items().next_key(), b.items().next_key());
  EXPECT_EQ(a.items().size(), b.items().size());
  EXPECT_EQ(a.items().max_priority(), b.items().max_priority());
  EXPECT_TRUE(HeldItems(a) == HeldItems(b)) << "the held items differ";
  ExpectSameRing(Ring(a), Ring(b), "the rings", /*a_restored=*/true);
  ExpectSameNodes(a.items(), b.items());
}

// After the same appends to both since a restore: the same items in the
// same slots with the same leaves and rows, the same ring and the same tree
// nodes (the restored table took the slots the uninterrupted one would:
// free-slots.bin), so the same samples follow.
inline void ExpectSameTablesSince(const replay::StepReplay& a, const replay::StepReplay& b) {
  std::vector<HeldItem> x = HeldItems(a), y = HeldItems(b);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i].key, y[i].key) << "held item " << i;
    ASSERT_TRUE(x[i] == y[i]) << "key " << x[i].key << ": slot, leaf or rows differ (slots " << x[i].slot << " and "
                              << y[i].slot << ")";
  }
  EXPECT_EQ(a.items().next_key(), b.items().next_key());
  ExpectSameRing(Ring(a), Ring(b));
  ExpectSameNodes(a.items(), b.items());
}

// The next `rounds` samples of both (each draws from both): the same keys,
// weights, probabilities and assembled bytes.
inline void ExpectSameSamples(replay::StepReplay* a, replay::StepReplay* b, int rounds, int64_t batch = 32) {
  for (int round = 0; round < rounds; ++round) {
    replay::SampleResult x, y;
    ASSERT_TRUE(a->mutable_items().Sample(batch, 0.4, &x).ok());
    ASSERT_TRUE(b->mutable_items().Sample(batch, 0.4, &y).ok());
    ASSERT_EQ(x.keys, y.keys) << "sample " << round;
    ASSERT_EQ(x.slots, y.slots) << "sample " << round;
    ASSERT_EQ(std::memcmp(x.weights.data(), y.weights.data(), x.weights.size() * sizeof(double)), 0) << round;
    ASSERT_EQ(std::memcmp(x.probabilities.data(), y.probabilities.data(), x.probabilities.size() * sizeof(double)),
              0)
        << "sample " << round;
    std::vector<std::byte> bytes_a(x.slots.size() * static_cast<size_t>(a->SampleItemBytes()));
    std::vector<std::byte> bytes_b(bytes_a.size());
    a->Assemble(x.slots, bytes_a);
    b->Assemble(y.slots, bytes_b);
    ASSERT_EQ(bytes_a, bytes_b) << "sample " << round;
  }
}

inline CheckpointState StateOf() {
  CheckpointState state;
  state.limiter.inserted = 123;
  state.episodes = {replay::EpisodeCarry{2.5, 0, 3.0, 0}};
  return state;
}

// Begin, then Step with a tiny budget until done; `between` runs after
// Begin and between steps (as appends come between the service's passes).
inline Status Write(CheckpointWriter* writer, replay::StepReplay* replay, const std::function<void()>& between = {}) {
  PERSERVE_RETURN_IF_ERROR(writer->Begin(*replay, StateOf()));
  if (between) between();
  bool done = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done) {
    if (std::chrono::steady_clock::now() > deadline) return Status::Internal("the checkpoint never ended");
    PERSERVE_RETURN_IF_ERROR(writer->Step(*replay, microseconds(1), &done));
    if (between && !done) between();
  }
  return Status::Ok();
}

// Restores the checkpoint at or under `path` into `into`.
inline Status Restore(const std::string& path, replay::StepReplay* into, CheckpointState* state = nullptr) {
  CheckpointState ignored;
  std::string loaded;
  return LoadCheckpoint(path, 0, 1, into, state != nullptr ? state : &ignored, &loaded);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("perserve-checkpoint-test-{}-{}", ::getpid(), test->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code error;
    fs::permissions(dir_ / "shard-0-of-1", fs::perms::owner_all, fs::perm_options::add, error);
    fs::remove_all(dir_, error);
  }
  fs::path dir_;
  std::mt19937_64 rng_{5};
};

// The bytes of a file.
inline std::string ReadFile(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Replaces `name` in the checkpoint at `dir` with `bytes` and its MANIFEST
// line with their true size and hash: a forgery no hash check can see.
inline void ForgePart(const fs::path& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir / name, std::ios::binary | std::ios::trunc) << bytes;
  Hash64 hash;
  hash.Update(std::as_bytes(std::span(bytes.data(), bytes.size())));
  std::istringstream manifest(ReadFile(dir / "MANIFEST"));
  std::string line, forged;
  while (std::getline(manifest, line)) {
    if (line.starts_with("part " + name + " ")) line = fmt::format("part {} {} {:016x}", name, bytes.size(), hash.Finish());
    forged += line + "\n";
  }
  std::ofstream(dir / "MANIFEST", std::ios::trunc) << forged;
}

// state.bin as the writer encodes it.
inline std::string EncodeState(const CheckpointState& state) {
  std::ostringstream bytes;
  {
    cereal::BinaryOutputArchive archive(bytes);
    archive(state);
  }
  return bytes.str();
}

}  // namespace perserve::service::checkpoint_test
