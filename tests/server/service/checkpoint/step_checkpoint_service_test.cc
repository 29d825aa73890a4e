// A checkpoint of step streams taken by the service while actors append:
// the service writes the steps an append overwrites before applying it
// (CheckpointDriver::BeforeAppend), so the restored replay serves as the
// replay did when the checkpoint began.
#include <chrono>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "server/service/service_test_util.h"
#include "server/service/checkpoint/step_checkpoint_test_util.h"

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
  // 8 KB steps in a ring of 256: a slice writes 128 steps.
  const Schema schema = StepSchema(256);
  const StepOptions options = NStepOptions(256);
  StepFixture served = MakeFixture(options, schema, 256);
  StepFixture twin = MakeFixture(options, schema, 256);
  LoopbackTransport transport(2);
  ServiceOptions service_options;
  service_options.stats_interval_seconds = 0.0;
  service_options.checkpoint_dir = dir.string();
  service_options.checkpoint_slice = std::chrono::microseconds(1);
  ReplayService service(served.items.get(), served.steps.get(), &transport, service_options);

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
    proto::AddRequest request{32, true};
    request.first_step = first;
    request.items = 32;
    transport.Push(stream, service_test::Frame(proto::MessageKind::kAddRequest, ++request_id, request,
                                               {std::span<const std::byte>(append.steps),
                                                std::as_bytes(std::span(append.items)),
                                                std::as_bytes(std::span(append.priorities))}));
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
  // A whole ring of appends before its first slice of steps.
  for (int round = 0; round < 8; ++round) push(round % 2, false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (service.checkpoints()->active() && std::chrono::steady_clock::now() < deadline) pass();
  ASSERT_FALSE(service.checkpoints()->active());
  ASSERT_EQ(served.steps->next_step_key(), twin.steps->next_step_key() + 8 * 32);

  StepFixture restored = MakeFixture(options, schema, 256);
  const Status loaded = Restore(service.checkpoints()->last_path(), &restored);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  ExpectSameServing(&restored, &twin);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perserve::service
