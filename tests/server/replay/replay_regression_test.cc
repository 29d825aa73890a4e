// Replay defects that once slipped through the rest of the suite (issue 19),
// each pinned by a direct test: the running max priority after an update, a
// one-item replay's weights, and keys and rows once the table is full.
#include <cmath>
#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "replay/replay.h"
#include "server/replay/replay_test_util.h"

namespace perserve::replay {
namespace {

// Each item's own number in an int64 column, and a 3-byte tag derived from it
// in a second column, so a row written from the wrong offset of either shows.
Schema IdTagSchema() { return Schema{{{"id", DType::kInt64, {}}, {"tag", DType::kUInt8, {3}}}}; }

uint8_t TagByte(int64_t id, int b) { return static_cast<uint8_t>(7 * id + 50 * b + 1); }

// `count` items numbered first, first + 1, ..., column after column.
std::vector<std::byte> Items(int64_t first, int64_t count) {
  std::vector<int64_t> ids;
  std::vector<uint8_t> tags;
  for (int64_t id = first; id < first + count; ++id) {
    ids.push_back(id);
    for (int b = 0; b < 3; ++b) tags.push_back(TagByte(id, b));
  }
  std::vector<std::byte> bulk(ids.size() * 8 + tags.size());
  std::memcpy(bulk.data(), ids.data(), ids.size() * 8);
  std::memcpy(bulk.data() + ids.size() * 8, tags.data(), tags.size());
  return bulk;
}

using replay_test::Leaf;

std::unique_ptr<Replay> MakeReplay(int64_t capacity, double alpha, bool max_priority_from_adds = false) {
  ReplayOptions options{capacity, alpha, tree::Device::kCpu, 11};
  options.max_priority_from_adds = max_priority_from_adds;
  return replay_test::MakeReplay(options, IdTagSchema());
}

// The defect: UpdatePriorities no longer raising the running max, so a later
// add without priorities got the max of the adds alone (or 1.0 when adds do
// not raise it, the default). Checked with and without max_priority_from_adds.
TEST(ReplayRegressionTest, AnUpdateRaisesTheMaxPriorityThatAPriorityLessAddGets) {
  for (bool from_adds : {false, true}) {
    SCOPED_TRACE(from_adds ? "max_priority_from_adds" : "default: updates only");
    auto replay = MakeReplay(16, 0.5, from_adds);
    uint64_t first = 0;
    ASSERT_TRUE(replay->Add(2, Items(0, 2), std::vector<double>{1.0, 4.0}, &first).ok());
    ASSERT_EQ(replay->max_priority(), from_adds ? 4.0 : 1.0);
    UpdateCounts counts;
    ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{0}, std::vector<double>{25.0}, &counts).ok());
    ASSERT_EQ(counts.applied, 1);
    EXPECT_EQ(replay->max_priority(), 25.0);
    ASSERT_TRUE(replay->Add(3, Items(2, 3), {}, &first).ok());
    ASSERT_EQ(first, 2u);
    for (int64_t slot = 2; slot < 5; ++slot) {
      EXPECT_EQ(Leaf(*replay, slot), std::pow(25.0, 0.5)) << "slot " << slot << ": not the updated max";
    }
    // A later update below the max leaves it where it is: the max is the largest
    // priority ever seen, not the largest now stored.
    ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{0}, std::vector<double>{0.5}, &counts).ok());
    ASSERT_TRUE(replay->Add(1, Items(5, 1), {}, &first).ok());
    EXPECT_EQ(Leaf(*replay, 5), 5.0);
  }
}

// With one item, P = 1 and N * P = 1 for every draw, and its leaf is the
// minimum, so every weight is exactly 1 whatever beta is (a weight computed
// through N that slips gives 0^-beta / 0^-beta = NaN here).
TEST(ReplayRegressionTest, AOneItemReplayGivesEveryDrawWeightExactlyOne) {
  for (double priority : {1.0, 3.5, 1e-6}) {
    auto replay = MakeReplay(8, 0.6);
    uint64_t first = 0;
    ASSERT_TRUE(replay->Add(1, Items(0, 1), std::vector<double>{priority}, &first).ok());
    for (double beta : {0.0, 0.4, 1.0}) {
      SampleResult sample;
      ASSERT_TRUE(replay->Sample(16, beta, &sample).ok());
      ASSERT_EQ(sample.weights.size(), 16u);
      for (size_t i = 0; i < sample.weights.size(); ++i) {
        EXPECT_EQ(sample.keys[i], 0u);
        EXPECT_EQ(sample.probabilities[i], 1.0);
        EXPECT_EQ(sample.weights[i], 1.0) << "priority " << priority << ", beta " << beta << ", draw " << i;
      }
    }
  }
}

// Capacity 4, 7 items in batches of 1, 2 and 4 (the last fills the table and
// the FIFO remover takes the oldest: the new items take the freed slots, the
// last freed first, and one never used). After every add, every sampled key
// lies in the held range [next_key - size, next_key), sits at the slot the
// table says it has (SlotOf, KeyAt), and its row in both columns is the one
// written for it; every held key gets drawn.
TEST(ReplayRegressionTest, AfterTheRingWrapsEverySampledKeyIsLiveAndItsRowIsItsOwn) {
  const int64_t capacity = 4;
  auto replay = MakeReplay(capacity, 1.0);
  int64_t added = 0;
  for (int64_t count : {1, 2, 4}) {
    uint64_t first = 0;
    ASSERT_TRUE(replay->Add(count, Items(added, count), {}, &first).ok());
    ASSERT_EQ(first, static_cast<uint64_t>(added));
    added += count;
    const uint64_t live_begin = static_cast<uint64_t>(std::max<int64_t>(0, added - capacity));
    const uint64_t live_end = static_cast<uint64_t>(added);
    std::set<uint64_t> drawn;
    for (int round = 0; round < 8; ++round) {
      SampleResult sample;
      ASSERT_TRUE(replay->Sample(32, 0.5, &sample).ok());
      const int64_t batch = static_cast<int64_t>(sample.keys.size());
      std::vector<std::byte> rows(static_cast<size_t>(batch * replay->store().schema().ItemBytes()));
      replay->store().Gather(sample.slots, rows);
      for (int64_t i = 0; i < batch; ++i) {
        const uint64_t key = sample.keys[i];
        ASSERT_GE(key, live_begin) << "after " << added << " items";
        ASSERT_LT(key, live_end) << "after " << added << " items";
        ASSERT_EQ(sample.slots[i], replay->SlotOf(key));
        ASSERT_EQ(replay->KeyAt(sample.slots[i]), key);
        int64_t id = -1;
        std::memcpy(&id, rows.data() + 8 * i, 8);
        EXPECT_EQ(id, static_cast<int64_t>(key)) << "after " << added << " items: the id column of key " << key;
        for (int b = 0; b < 3; ++b) {
          EXPECT_EQ(static_cast<uint8_t>(rows[8 * batch + 3 * i + b]), TagByte(static_cast<int64_t>(key), b))
              << "after " << added << " items: byte " << b << " of the tag column of key " << key;
        }
        drawn.insert(key);
      }
    }
    EXPECT_EQ(drawn.size(), live_end - live_begin) << "after " << added << " items: a live key never drawn";
  }
  EXPECT_EQ(replay->size(), capacity);
  EXPECT_EQ(replay->next_key(), 7u);
}

}  // namespace
}  // namespace perserve::replay
