// Helpers the checkpoint tests share: replays of numbered items, their bytes
// and nodes, a checkpoint written in tiny slices, and the tools to forge a
// checkpoint's files with their MANIFEST lines made to match.
#pragma once

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
#include "service/checkpoint/checkpoint.h"

namespace perserve::service::checkpoint_test {

namespace fs = std::filesystem;
using std::chrono::microseconds;

// `obs_bytes` per item in the obs column: large rows make a checkpoint's
// slice a few rows, so adds can overwrite rows it has not written yet.
inline Schema TestSchema(int64_t obs_bytes = 5) {
  return Schema{{{"id", DType::kInt64, {}}, {"obs", DType::kUInt8, {obs_bytes}}, {"x", DType::kFloat32, {3}}}};
}

inline std::unique_ptr<replay::Replay> MakeReplay(int64_t capacity, uint64_t seed = 17, double alpha = 0.6,
                                                  int64_t obs_bytes = 5) {
  std::unique_ptr<replay::Replay> replay;
  const Status created = replay::Replay::Create(replay::ReplayOptions{capacity, alpha, tree::Device::kCpu, seed},
                                                TestSchema(obs_bytes), &replay);
  EXPECT_TRUE(created.ok()) << created.ToString();
  return replay;
}

// Adds `count` items numbered from `first` (every byte a function of it), in
// batches of up to 100.
inline void AddBatch(replay::Replay* replay, int64_t first, int64_t count, std::mt19937_64* rng) {
  const int64_t obs_bytes = replay->store().schema().columns[1].ItemBytes();
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
  uint64_t first_key = 0;
  ASSERT_TRUE(replay->Add(count, bulk, priorities, &first_key).ok());
}

inline void AddItems(replay::Replay* replay, int64_t first, int64_t count, std::mt19937_64* rng) {
  for (int64_t done = 0; done < count; done += 100) AddBatch(replay, first + done, std::min<int64_t>(100, count - done), rng);
}

// Every held item's bytes, oldest key first.
inline std::vector<std::byte> Items(const replay::Replay& replay) {
  std::vector<int64_t> slots;
  for (uint64_t key = replay.oldest_key(); key < replay.next_key(); ++key) {
    slots.push_back(static_cast<int64_t>(key % static_cast<uint64_t>(replay.capacity())));
  }
  std::vector<std::byte> out(slots.size() * static_cast<size_t>(replay.store().schema().ItemBytes()));
  replay.store().Gather(slots, out);
  return out;
}

inline void ExpectSameNodes(const replay::Replay& a, const replay::Replay& b) {
  const size_t nodes = 2 * static_cast<size_t>(a.tree().capacity());
  std::vector<double> sums_a(nodes), mins_a(nodes), sums_b(nodes), mins_b(nodes);
  ASSERT_TRUE(a.tree().ReadNodes(sums_a, mins_a).ok());
  ASSERT_TRUE(b.tree().ReadNodes(sums_b, mins_b).ok());
  EXPECT_EQ(std::memcmp(sums_a.data(), sums_b.data(), nodes * sizeof(double)), 0) << "sum nodes differ";
  EXPECT_EQ(std::memcmp(mins_a.data(), mins_b.data(), nodes * sizeof(double)), 0) << "min nodes differ";
}

inline CheckpointState StateOf(const replay::Replay& replay) {
  CheckpointState state;
  state.schema = replay.store().schema().ToString();
  state.capacity = replay.capacity();
  state.alpha = replay.alpha();
  state.replay = replay.State();
  state.limiter.inserted = 123;
  state.episodes = {replay::EpisodeCarry{2.5, 0, 3.0, 0}};
  return state;
}

// Begin, then Step with a tiny budget until done; `between` runs between steps.
inline Status Write(CheckpointWriter* writer, replay::Replay* replay, const std::function<void()>& between = {}) {
  PERSERVE_RETURN_IF_ERROR(writer->Begin(*replay, StateOf(*replay)));
  bool done = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done) {
    if (std::chrono::steady_clock::now() > deadline) return Status::Internal("the checkpoint never ended");
    PERSERVE_RETURN_IF_ERROR(writer->Step(*replay, microseconds(1), &done));
    if (between && !done) between();
  }
  return Status::Ok();
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("perserve-checkpoint-test-{}", ::getpid());
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
