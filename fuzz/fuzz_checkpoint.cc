// fuzz_checkpoint: restoring a checkpoint directory written from fuzzed bytes
// (fuzz/inputs.h has the layout): its MANIFEST (as given, or made to list
// each part's true size and hash, so the checks behind the hashes are
// reached), state.bin, the step ring's parts and the table's (format 4:
// table-0-item-slots.bin, -leaves.bin, -column-<c>.bin, -free-slots.bin,
// -selectors.bin), loaded by LoadCheckpoint as `perserve-server
// --restore` loads one, into a table of 64 steps and items: transitions of
// fuzz::ServiceSchema, or (the input's steps bit) the n-step table of
// fuzz/step_replay_fixture.h; format 4, or (the legacy bit) the format
// written before it (1 for transitions, 2 for n-step items).
//
// Checked: LoadCheckpoint answers with a status and never crashes, throws or
// hits UB; an error is one of the codes a restore gives; and a checkpoint
// that restores is one the server can serve from: the table within its
// capacity and key space, a finite tree total, every held item's leaf at
// least the smallest normal double and every free slot's 0, a min that is
// positive whenever the total is, a sample drawn from it comes back with
// positive weights and assembles from the ring (ASan sees any read of a
// step not held), and appends that go round the ring evict through the
// rebuilt lists.
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
  const int32_t format = !input.legacy ? kCheckpointFormat
                         : input.steps ? checkpoint_layout::kStepFormat
                                       : checkpoint_layout::kTransitionFormat;
  std::string text = fmt::format("perserve-checkpoint {}\nshard 0 of 1\n", format);
  for (size_t part = 1; part < std::size(fuzz::kCheckpointParts); ++part) {
    if (!input.present[part]) continue;
    Hash64 hash;
    hash.Update(input.parts[part]);
    text += fmt::format("part {} {} {:016x}\n", fuzz::CheckpointPartName(part, input.legacy), input.parts[part].size(),
                        hash.Finish());
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
  int64_t held = 0;
  for (size_t slot = 0; slot < leaves.size(); ++slot) {
    const bool holds = static_cast<int64_t>(slot) < replay.slots_used() &&
                       replay.KeyAt(static_cast<int64_t>(slot)) != replay::Replay::kNoKey;
    held += holds ? 1 : 0;
    FUZZ_CHECK(holds ? leaves[slot] >= std::numeric_limits<double>::min() : leaves[slot] == 0.0);
  }
  FUZZ_CHECK(held == replay.size());
  if (total > 0.0) FUZZ_CHECK(replay.tree().Min() > 0.0);
}

// A restored table serves: sampled items assemble, and appends that go
// round the ring (each step its own item in a table of transitions) evict
// the items over the steps they overwrite through the rebuilt lists.
void CheckServes(replay::StepReplay* table) {
  replay::Replay& items = table->mutable_items();
  for (int round = 0; round < 3; ++round) {
    if (items.size() > 0) {
      replay::SampleResult sample;
      FUZZ_CHECK(items.Sample(8, 0.4, &sample).ok());
      for (const double weight : sample.weights) FUZZ_CHECK(weight > 0.0 && weight <= 1.0);
      std::vector<std::byte> out(sample.slots.size() * static_cast<size_t>(table->SampleItemBytes()));
      table->Assemble(sample.slots, out);
    }
    const int64_t count = kCapacity / 2;
    std::vector<std::byte> bulk(static_cast<size_t>(count * table->step_schema().ItemBytes()), std::byte{0});
    const replay::TableItems add{0, /*item_per_step=*/true};
    const replay::AppendRequest request{0, table->stream_steps(0), store::StepBatch{count, bulk, false},
                                        table->RowsAreSteps() ? std::span<const replay::TableItems>(&add, 1)
                                                              : std::span<const replay::TableItems>()};
    uint64_t first = 0;
    FUZZ_CHECK(table->Append(request, &first).ok());
    CheckRestored(items);
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
    if (input.present[part]) service::WriteFile(dir / fuzz::CheckpointPartName(part, input.legacy), input.parts[part]);
  }
  if (input.own_manifest) {
    if (input.present[0]) service::WriteFile(dir / fuzz::kCheckpointParts[0], input.parts[0]);
  } else {
    const std::string manifest = service::TrueManifest(input);
    service::WriteFile(dir / fuzz::kCheckpointParts[0], std::as_bytes(std::span(manifest.data(), manifest.size())));
  }

  std::unique_ptr<replay::StepReplay> table;
  const replay::ReplayOptions options{service::kCapacity, 0.6, tree::Device::kCpu, 7};
  if (input.steps) {
    FUZZ_CHECK(fuzz::MakeStepServiceReplay(options, &table));
  } else {
    FUZZ_CHECK(fuzz::MakeTransitionServiceReplay(options, &table));
  }
  service::CheckpointState state;
  std::string loaded;
  const Status status = service::LoadCheckpoint(dir.string(), 0, 1, table.get(), &state, &loaded);
  if (!status.ok()) {
    const Status::Code code = status.code();
    FUZZ_CHECK(code == Status::Code::kInvalidArgument || code == Status::Code::kFailedPrecondition ||
               code == Status::Code::kNotFound || code == Status::Code::kUnavailable);
    return 0;
  }
  service::CheckRestored(table->items());
  service::CheckServes(table.get());
  return 0;
}
