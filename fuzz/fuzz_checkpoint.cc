// fuzz_checkpoint: restoring a checkpoint directory written from fuzzed bytes
// (fuzz/inputs.h has the layout): its MANIFEST (as given, or made to list
// each part's true size and hash, so the checks behind the hashes are
// reached), state.bin, leaves.bin and the columns of a 64-item replay of
// fuzz::ServiceSchema, loaded by LoadCheckpoint as `perserve-server
// --restore` loads one; with the input's steps bit, a step ring's parts too,
// restored into the step replay of fuzz/step_replay_fixture.h (64 steps and
// items).
//
// Checked: LoadCheckpoint answers with a status and never crashes, throws or
// hits UB; an error is one of the codes a restore gives; and a checkpoint
// that restores is one the server can serve from: the replay within its
// capacity and key space, a finite tree total, no leaf between 0 and the
// smallest normal double, a min that is positive whenever the total is, and
// a sample drawn from it comes back with positive weights; a restored step
// replay assembles every sampled item, and takes an append that evicts.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "fuzz/fuzz_check.h"
#include "fuzz/inputs.h"
#include "fuzz/step_replay_fixture.h"
#include "proto/messages.h"
#include "replay/replay.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kCapacity = 64;

void WriteFile(const fs::path& file, std::span<const std::byte> bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A MANIFEST listing each part the input gives with its true size and hash.
std::string TrueManifest(const fuzz::CheckpointInput& input) {
  std::string text = fmt::format("perserve-checkpoint {}\nshard 0 of 1\n",
                                 input.steps ? checkpoint_layout::kStepFormat : kCheckpointFormat);
  for (size_t part = 1; part < std::size(fuzz::kCheckpointParts); ++part) {
    if (!input.present[part]) continue;
    Hash64 hash;
    hash.Update(input.parts[part]);
    text += fmt::format("part {} {} {:016x}\n", fuzz::kCheckpointParts[part], input.parts[part].size(), hash.Finish());
  }
  return text + "end\n";
}

void CheckRestored(const replay::Replay& replay) {
  FUZZ_CHECK(replay.size() >= 0 && replay.size() <= kCapacity);
  FUZZ_CHECK(replay.next_key() >= static_cast<uint64_t>(replay.size()));
  FUZZ_CHECK(replay.next_key() <= proto::kLocalKeyMask + 1);
  const double total = replay.tree().Total();
  FUZZ_CHECK(std::isfinite(total) && total >= 0.0);
  std::vector<int64_t> slots(static_cast<size_t>(replay.tree().capacity()));
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int64_t>(i);
  std::vector<double> leaves(slots.size());
  FUZZ_CHECK(replay.tree().Get(slots, leaves).ok());
  for (const double leaf : leaves) FUZZ_CHECK(leaf == 0.0 || leaf >= std::numeric_limits<double>::min());
  if (total > 0.0) FUZZ_CHECK(replay.tree().Min() > 0.0);
}

// A restored step replay serves: every sampled item assembles (ASan sees any
// read of a step not held), and an append that overwrites the oldest steps
// evicts their items through the rebuilt lists.
void CheckRestoredSteps(replay::Replay* items, replay::StepReplay* steps) {
  for (int round = 0; round < 2; ++round) {
    if (items->tree().Total() > 0.0) {
      replay::SampleResult sample;
      FUZZ_CHECK(items->Sample(8, 0.4, &sample).ok());
      std::vector<std::byte> out(sample.slots.size() * static_cast<size_t>(steps->SampleItemBytes()));
      steps->Assemble(sample.slots, out);
    }
    const int64_t count = kCapacity / 2;
    std::vector<std::byte> bulk(static_cast<size_t>(count * steps->step_schema().ItemBytes()), std::byte{1});
    uint64_t first = 0;
    FUZZ_CHECK(steps->Append(0, steps->stream_steps(0), count, bulk, {}, {}, {}, &first).ok());
  }
}

}  // namespace
}  // namespace perserve::service

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace perserve;
  namespace fs = std::filesystem;
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  static const fs::path root = fs::temp_directory_path() / fmt::format("perserve-fuzz-checkpoint-{}", ::getpid());
  const fs::path dir = root / "checkpoint-000000";
  std::error_code error;
  fs::remove_all(root, error);
  fs::create_directories(dir, error);
  FUZZ_CHECK(!error);

  const fuzz::CheckpointInput input = fuzz::ParseCheckpointInput(std::as_bytes(std::span(data, size)));
  for (size_t part = 1; part < std::size(fuzz::kCheckpointParts); ++part) {
    if (input.present[part]) service::WriteFile(dir / fuzz::kCheckpointParts[part], input.parts[part]);
  }
  if (input.own_manifest) {
    if (input.present[0]) service::WriteFile(dir / fuzz::kCheckpointParts[0], input.parts[0]);
  } else {
    const std::string manifest = service::TrueManifest(input);
    service::WriteFile(dir / fuzz::kCheckpointParts[0], std::as_bytes(std::span(manifest.data(), manifest.size())));
  }

  std::unique_ptr<replay::Replay> replay;
  std::unique_ptr<replay::StepReplay> steps;
  const replay::ReplayOptions options{service::kCapacity, 0.6, tree::Device::kCpu, 7};
  if (input.steps) {
    FUZZ_CHECK(fuzz::MakeStepServiceReplay(options, &replay, &steps));
  } else {
    FUZZ_CHECK(replay::Replay::Create(options, fuzz::ServiceSchema(), &replay).ok());
  }
  service::CheckpointState state;
  std::string loaded;
  const Status status = service::LoadCheckpoint(dir.string(), 0, 1, replay.get(), &state, &loaded, steps.get());
  if (!status.ok()) {
    const Status::Code code = status.code();
    FUZZ_CHECK(code == Status::Code::kInvalidArgument || code == Status::Code::kFailedPrecondition ||
               code == Status::Code::kNotFound || code == Status::Code::kUnavailable);
    return 0;
  }
  service::CheckRestored(*replay);
  if (replay->tree().Total() > 0.0) {
    replay::SampleResult sample;
    FUZZ_CHECK(replay->Sample(8, 0.4, &sample).ok());
    for (const double weight : sample.weights) FUZZ_CHECK(weight > 0.0 && weight <= 1.0);
  }
  if (steps != nullptr) service::CheckRestoredSteps(replay.get(), steps.get());
  return 0;
}
