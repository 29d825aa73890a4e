// Checkpoints of step streams (service/step_checkpoint.h): a step replay and
// its items checkpointed and restored serve the same samples, bit for bit,
// and evict the same items afterwards (n-step with a stack; sequences with an
// item column; after the ring wrapped and evicted items); a checkpoint
// written slice by slice while appends overwrite steps it has not written
// yet is the replay as it was at Begin; restored streams begin new episodes.
#include <string>

#include <gtest/gtest.h>

#include "server/service/checkpoint/step_checkpoint_test_util.h"

namespace perserve::service {
namespace {

using namespace step_checkpoint_test;
using checkpoint_test::CheckpointTest;

class StepCheckpointTest : public CheckpointTest {
 protected:
  // Drives `original` and `twin` alike for `rounds`, ends their episodes,
  // checkpoints `original`, restores into a fresh fixture, and checks it
  // serves as `twin` does, now and after both take the same later requests.
  void RoundTrip(const StepOptions& options, const Schema& schema, int64_t item_capacity, int rounds) {
    StepFixture original = MakeFixture(options, schema, item_capacity);
    StepFixture twin = MakeFixture(options, schema, item_capacity);
    Driver a(3), b(3);
    for (int i = 0; i < rounds; ++i) {
      a.Round(&original);
      b.Round(&twin);
    }
    a.EndEpisodes(&original);
    b.EndEpisodes(&twin);
    // The ring wrapped, and items left with their steps.
    ASSERT_GT(original.steps->next_step_key(), static_cast<uint64_t>(2 * options.step_capacity));
    ASSERT_LT(original.items->size(), original.items->counters().items_added);

    CheckpointWriter writer(dir_.string(), 0, 1, item_capacity);
    const Status written = WriteCheckpoint(&writer, &original);
    ASSERT_TRUE(written.ok()) << written.ToString();
    StepFixture restored = MakeFixture(options, schema, item_capacity);
    const Status loaded = Restore(writer.last_path(), &restored);
    ASSERT_TRUE(loaded.ok()) << loaded.ToString();
    for (uint64_t key = restored.steps->steps().oldest_key(); key < restored.steps->next_step_key(); ++key) {
      const store::StepInfo& x = restored.steps->steps().Info(key);
      const store::StepInfo& y = twin.steps->steps().Info(key);
      ASSERT_TRUE(x.index == y.index && x.episode_start == y.episode_start && x.stream == y.stream &&
                  x.done == y.done && x.reward == y.reward)
          << "step key " << key;
    }
    ExpectSameServing(&restored, &twin);
    // Later appends evict the same items (a list rebuilt wrong would leave an
    // item drawable whose steps are gone, or drop one) and take the same
    // slots: slots were free at the checkpoint (items left with their steps),
    // and the restored table takes them in the twin's order, so samples and
    // the priorities the driver updates after them stay the same.
    ASSERT_GT(original.items->slots_used(), original.items->size()) << "no slot was free: nothing to check";
    Driver c(9), d(9);
    for (int i = 0; i < rounds; ++i) {
      c.Round(&restored);
      d.Round(&twin);
      if (i % 25 == 0) checkpoint_test::ExpectSameTablesSince(*restored.steps, *twin.steps);
    }
    checkpoint_test::ExpectSameTablesSince(*restored.steps, *twin.steps);
    // And the restored table, checkpointed again, restores bit for bit.
    CheckpointWriter again(dir_.string(), 0, 1, item_capacity);
    ASSERT_TRUE(WriteCheckpoint(&again, &restored).ok());
    StepFixture second = MakeFixture(options, schema, item_capacity);
    const Status reloaded = Restore(again.last_path(), &second);
    ASSERT_TRUE(reloaded.ok()) << reloaded.ToString();
    ExpectSameServing(&second, &restored);
  }
};

TEST_F(StepCheckpointTest, NStepWithStackRoundTripsAfterWrapAndEvictions) {
  RoundTrip(NStepOptions(40), StepSchema(), 30, 200);
}

TEST_F(StepCheckpointTest, SequencesWithItemColumnsRoundTrip) {
  RoundTrip(SequenceOptions(48), StepSchema(), 40, 200);
}

TEST_F(StepCheckpointTest, AnEmptyRingRoundTrips) {
  StepFixture original = MakeFixture(NStepOptions(16), StepSchema(), 8);
  CheckpointWriter writer(dir_.string(), 0, 1, 8);
  ASSERT_TRUE(WriteCheckpoint(&writer, &original).ok());
  StepFixture restored = MakeFixture(NStepOptions(16), StepSchema(), 8);
  const Status loaded = Restore(writer.last_path(), &restored);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  EXPECT_EQ(restored.steps->next_step_key(), 0u);
}

// Steps of 32 KB: a slice writes 32 of them, and the appends between slices
// go round the ring's slots (capacity 128, slack 1024) before the checkpoint
// is complete, so they overwrite steps it has not written yet and take the
// slots of items it has not written yet.
TEST_F(StepCheckpointTest, AppendsDuringTheCheckpointWriteOverwrittenStepsFirst) {
  const Schema schema = StepSchema(1024);
  const StepOptions options = NStepOptions(128);
  StepFixture original = MakeFixture(options, schema, 100);
  StepFixture twin = MakeFixture(options, schema, 100);
  const int64_t slots = original.steps->steps().slots();
  ASSERT_LE(slots, 128 + 1024);
  Driver a(5), b(5);
  for (int i = 0; i < 300; ++i) {
    a.Round(&original);
    b.Round(&twin);
  }
  a.EndEpisodes(&original);
  b.EndEpisodes(&twin);
  const uint64_t began_at = original.steps->next_step_key();

  CheckpointWriter writer(dir_.string(), 0, 1, 100);
  Driver during(77);
  int slices = 0;
  const Status written = WriteCheckpoint(&writer, &original, [&] {
    ++slices;
    // A third of the way round the ring's slots.
    const uint64_t until = original.steps->next_step_key() + static_cast<uint64_t>(slots / 3);
    while (original.steps->next_step_key() < until) during.Round(&original, &writer);
  });
  ASSERT_TRUE(written.ok()) << written.ToString();
  // The appends overwrote the slot of every step the checkpoint began with
  // while it was written.
  ASSERT_GE(slices, 4);
  ASSERT_GT(original.steps->next_step_key(), began_at + static_cast<uint64_t>(slots));

  StepFixture restored = MakeFixture(options, schema, 100);
  const Status loaded = Restore(writer.last_path(), &restored);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  ExpectSameServing(&restored, &twin);
}

TEST_F(StepCheckpointTest, RestoredStreamsContinueWithANewEpisode) {
  const StepOptions options = NStepOptions(40);
  StepFixture original = MakeFixture(options, StepSchema(), 30);
  Driver a(4);
  for (int i = 0; i < 30; ++i) a.Round(&original);
  // Stream 0's last three steps do not end its episode.
  const auto zero_dones = [](std::vector<std::byte>* bulk) {
    const size_t done = static_cast<size_t>(3 * (StepSchema().columns[0].ItemBytes() + 4));  // obs, reward before
    for (size_t j = 0; j < 3; ++j) (*bulk)[done + j] = std::byte{0};
  };
  uint64_t first = 0;
  std::vector<std::byte> bulk = a.Steps(StepSchema(), 3, false);
  zero_dones(&bulk);
  ASSERT_TRUE(original.steps->Append(0, original.steps->stream_steps(0), 3, bulk, {}, {}, {}, &first).ok());
  const int64_t steps = original.steps->stream_steps(0);
  CheckpointWriter writer(dir_.string(), 0, 1, 30);
  ASSERT_TRUE(WriteCheckpoint(&writer, &original).ok());

  // More streams now than the checkpoint has: the new ones start at 0.
  StepOptions more = options;
  more.streams = 5;
  StepFixture restored = MakeFixture(more, StepSchema(), 30);
  ASSERT_TRUE(Restore(writer.last_path(), &restored).ok());
  EXPECT_EQ(restored.steps->stream_steps(0), steps);
  EXPECT_EQ(restored.steps->stream_steps(4), 0);
  EXPECT_EQ(restored.steps->steps().next_episode_start(0), steps);
  // An item over the last step before the restore and the first after it spans two episodes: refused.
  bulk = a.Steps(StepSchema(), 3, false);
  zero_dones(&bulk);
  const int64_t t = steps - 1;
  const double priority = 1.0;
  const Status spanning = restored.steps->Append(0, steps, 3, bulk, std::span<const int64_t>(&t, 1),
                                                 std::span<const double>(&priority, 1), {}, &first);
  EXPECT_EQ(spanning.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(spanning.message().find("begins a new episode"), std::string::npos) << spanning.ToString();
  // Appended alone, the new steps begin an episode at the restored count.
  ASSERT_TRUE(restored.steps->Append(0, steps, 3, bulk, {}, {}, {}, &first).ok());
  EXPECT_EQ(restored.steps->steps().Info(restored.steps->next_step_key() - 1).episode_start, steps);
  // An item over the new episode's first step, once it is whole.
  bulk = a.Steps(StepSchema(), 3, false);
  zero_dones(&bulk);
  const int64_t u = steps;
  ASSERT_TRUE(restored.steps->Append(0, steps + 3, 3, bulk, std::span<const int64_t>(&u, 1),
                                     std::span<const double>(&priority, 1), {}, &first)
                  .ok());
  // Checkpointed again (stream 0 holds steps from before the restore and an
  // episode begun by it, no done step between them; streams 1 and 2 have
  // appended nothing since), it restores bit for bit.
  CheckpointWriter again((dir_ / "again").string(), 0, 1, 30);
  ASSERT_TRUE(WriteCheckpoint(&again, &restored).ok());
  StepFixture second = MakeFixture(more, StepSchema(), 30);
  const Status reloaded = Restore(again.last_path(), &second);
  ASSERT_TRUE(reloaded.ok()) << reloaded.ToString();
  ExpectSameServing(&second, &restored);
  // And fewer streams than the checkpoint: it keeps its streams (their steps stay sampleable).
  StepOptions fewer = options;
  fewer.streams = 1;
  StepFixture narrow = MakeFixture(fewer, StepSchema(), 30);
  ASSERT_TRUE(Restore(writer.last_path(), &narrow).ok());
  EXPECT_EQ(narrow.steps->options().streams, 3);
  EXPECT_EQ(narrow.steps->stream_steps(2), original.steps->stream_steps(2));
}

}  // namespace
}  // namespace perserve::service
