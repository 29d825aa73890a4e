// A checkpoint of step streams taken by the service while actors append:
// the service writes the steps and items an append overwrites before
// applying it (CheckpointDriver::BeforeWrite), so the restored replay serves
// as the replay did when the checkpoint began.
#include <chrono>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "proto/append.h"
#include "server/service/checkpoint/step_checkpoint_test_util.h"
#include "server/service/service_test_util.h"

namespace perserve::service {
namespace {

using namespace step_checkpoint_test;
namespace fs = std::filesystem;

// 32 steps of `stream` from `first`, the last ending the episode, an item at each.
struct AppendBytes {
  std::vector<std::byte> steps;
  std::vector<int64_t> items;
  std::vector<double> priorities;
};

TEST(StepCheckpointServiceTest, AppendsDuringACheckpointKeepItTheReplayAtItsBeginning) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("perserve-step-service-ckpt-{}", ::getpid());
  fs::remove_all(dir);
  // 64 KB steps in a ring of 256 (and a slack of 512): a slice writes 16 steps.
  const Schema schema = StepSchema(2048);
  const StepOptions options = NStepOptions(256);
  StepFixture served = MakeFixture(options, schema, 256);
  StepFixture twin = MakeFixture(options, schema, 256);
  const int64_t slots = served.steps->steps().slots();
  ASSERT_LE(slots, 768);
  LoopbackTransport transport(2);
  ServiceOptions service_options;
  service_options.stats_interval_seconds = 0.0;
  service_options.checkpoint_dir = dir.string();
  service_options.checkpoint_slice = std::chrono::microseconds(1);
  ReplayService service(served.steps.get(), &transport, service_options);

  Driver driver(8);
  uint64_t request_id = 0;
  int64_t next_first[2] = {0, 0};
  const auto push = [&](int stream, bool to_twin) {
    const int64_t first = next_first[stream];
    next_first[stream] += 32;
    AppendBytes append{driver.Steps(schema, 32, true), {}, {}};
    for (int64_t t = first; t < first + 32; ++t) {
      append.items.push_back(t);
      append.priorities.push_back(0.5 + static_cast<double>(t % 7));
    }
    proto::AppendMeta meta;
    meta.first_step = first;
    meta.steps = 32;
    meta.groups = {proto::ItemGroup{0, 32, false, /*has_priorities=*/true}};
    const std::span<const std::byte> columns[] = {append.steps};
    const proto::ItemGroupSpans group{append.items, append.priorities, {}};
    std::vector<std::byte> frame;
    proto::EncodeAppend(++request_id, meta, columns, std::span(&group, 1), &frame);
    transport.Push(stream, std::move(frame));
    if (!to_twin) return;
    uint64_t key = 0;
    ASSERT_TRUE(twin.steps->Append(stream, first, 32, append.steps, append.items, append.priorities, {}, &key).ok());
  };
  const auto pass = [&] {
    bool handled = false;
    ASSERT_TRUE(service.Step(&handled).ok());
  };
  // The ring wraps twice; then the checkpoint begins.
  for (int round = 0; round < 16; ++round) {
    push(round % 2, true);
    while (served.steps->next_step_key() != twin.steps->next_step_key()) pass();
  }
  ASSERT_TRUE(service.RequestCheckpoint("test").ok());
  // Appends that go round the ring's slots while the checkpoint is written
  // (the service takes one append of each actor a pass; the checkpoint
  // writes a slice a pass): they overwrite steps it has not written yet.
  const int during = static_cast<int>(slots / 32) + 1;
  for (int round = 0; round < during; ++round) push(round % 2, false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (service.checkpoints()->active() && std::chrono::steady_clock::now() < deadline) pass();
  ASSERT_FALSE(service.checkpoints()->active());
  ASSERT_EQ(served.steps->next_step_key(), twin.steps->next_step_key() + static_cast<uint64_t>(during * 32));

  StepFixture restored = MakeFixture(options, schema, 256);
  const Status loaded = Restore(service.checkpoints()->last_path(), &restored);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  ExpectSameServing(&restored, &twin);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perserve::service
