// Checkpoints written before the one item model still restore (issue 33):
// tests/data/checkpoints/ holds checkpoints written by perserve at b2cd74b
// (make_legacy_checkpoints.cc there says how), format 1 (transitions) and
// format 2 (n-step items with a stack; sequences with an item column),
// each beside expected.bin: per item the old server could draw, its key,
// leaf and the row the old server sampled for it. Restored into a table
// made with the flags of its flags.txt, every expected item is held under
// its key and slot with its leaf and assembles to the same row, nothing else
// is held, and appends, samples and a format 3 checkpoint go on from there.
// A damaged or mismatched one is refused, naming what.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/service/checkpoint/checkpoint_test_util.h"

namespace perserve::service {
namespace {

using namespace checkpoint_test;
using replay::StepOptions;

const fs::path kData = fs::path(PERSERVE_TEST_DATA) / "checkpoints";

struct Expected {
  uint64_t key = 0;
  double leaf = 0.0;
  std::vector<std::byte> row;
};

// expected.bin's records: key, leaf, then `row_bytes` of the sampled row.
std::vector<Expected> ReadExpected(const fs::path& file, int64_t row_bytes) {
  const std::string bytes = ReadFile(file);
  const size_t record = 16 + static_cast<size_t>(row_bytes);
  EXPECT_EQ(bytes.size() % record, 0u) << file << " is not of records of " << record << " bytes";
  std::vector<Expected> records(bytes.size() / record);
  for (size_t i = 0; i < records.size(); ++i) {
    const char* at = bytes.data() + i * record;
    std::memcpy(&records[i].key, at, 8);
    std::memcpy(&records[i].leaf, at + 8, 8);
    records[i].row.resize(static_cast<size_t>(row_bytes));
    std::memcpy(records[i].row.data(), at + 16, static_cast<size_t>(row_bytes));
  }
  return records;
}

Schema Columns(std::initializer_list<Column> columns) { return Schema{std::vector<Column>(columns)}; }

// What each checkpoint's flags.txt says a restore must be given.
struct Legacy {
  std::string name;
  Schema schema;
  StepOptions options;
  double alpha;
  int64_t old_capacity;  // the items' ring's, at b2cd74b: --capacity
  size_t records;        // expected.bin's
};

void PrintTo(const Legacy& legacy, std::ostream* os) { *os << legacy.name; }

Legacy Transitions() {
  StepOptions options;
  options.kind = StepOptions::Kind::kTransition;
  options.step_capacity = 64;
  return {"format1-transitions",
          Columns({{"obs", DType::kFloat32, {3}},
                   {"action", DType::kInt64, {}},
                   {"reward", DType::kFloat32, {}},
                   {"next_obs", DType::kFloat32, {3}},
                   {"done", DType::kUInt8, {}}}),
          options, 0.6, 64, 64};
}

Legacy NStep() {
  StepOptions options;
  options.kind = StepOptions::Kind::kNStep;
  options.n_step = 3;
  options.discount = 0.9;
  options.stacks = {{"obs", 2}};
  options.step_capacity = 64;
  options.streams = 2;
  return {"format2-nstep",
          Columns({{"obs", DType::kUInt8, {4}},
                   {"action", DType::kInt32, {}},
                   {"reward", DType::kFloat32, {}},
                   {"done", DType::kUInt8, {}}}),
          options, 0.6, 64, 52};
}

Legacy Sequence() {
  StepOptions options;
  options.kind = StepOptions::Kind::kSequence;
  options.sequence_length = 4;
  options.sequence_period = 2;
  options.item_columns = {Column{"state", DType::kFloat32, {2}}};
  options.step_capacity = 48;
  options.streams = 1;
  return {"format2-sequence",
          Columns({{"obs", DType::kFloat32, {2}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}),
          options, 0.7, 48, 24};
}

std::unique_ptr<replay::StepReplay> MakeTable(const Legacy& legacy, int64_t max_items, int streams = 0) {
  StepOptions options = legacy.options;
  if (streams > 0) options.streams = streams;
  replay::ReplayOptions items{max_items, legacy.alpha, tree::Device::kCpu, 99};
  items.priority_eps = 1e-6;
  std::unique_ptr<replay::StepReplay> table;
  const Status created = replay::StepReplay::Create(options, items, legacy.schema, &table);
  EXPECT_TRUE(created.ok()) << created.ToString();
  return table;
}

class LegacyCheckpointTest : public CheckpointTest, public ::testing::WithParamInterface<Legacy> {
 protected:
  // Restores the legacy checkpoint into `table` and checks it against expected.bin.
  void RestoreAndCheck(replay::StepReplay* table) {
    const Legacy& legacy = GetParam();
    CheckpointState state;
    const Status restored = Restore((kData / legacy.name).string(), table, &state);
    ASSERT_TRUE(restored.ok()) << restored.ToString();
    const std::vector<Expected> expected =
        ReadExpected(kData / legacy.name / "expected.bin", table->SampleItemBytes());
    ASSERT_EQ(expected.size(), legacy.records);
    const replay::Replay& items = table->items();
    EXPECT_EQ(items.size(), static_cast<int64_t>(expected.size())) << "items held beside the drawable ones";
    for (const Expected& item : expected) {
      const int64_t slot = items.SlotOf(item.key);
      ASSERT_GE(slot, 0) << "key " << item.key << " is not held";
      EXPECT_EQ(slot, static_cast<int64_t>(item.key % static_cast<uint64_t>(legacy.old_capacity)))
          << "key " << item.key << " keeps its slot";
      const double leaf = replay::step_test::Leaf(items, slot);
      EXPECT_EQ(std::memcmp(&leaf, &item.leaf, sizeof(leaf)), 0) << "key " << item.key << ": leaf " << leaf
                                                                  << ", expected " << item.leaf;
      std::vector<std::byte> row(static_cast<size_t>(table->SampleItemBytes()));
      table->Assemble(std::span<const int64_t>(&slot, 1), row);
      EXPECT_TRUE(row == item.row) << "key " << item.key << ": the assembled row is not the one b2cd74b sampled";
    }
    // The tree holds exactly these leaves: its total is theirs.
    double total = 0.0;
    for (const Expected& item : expected) total += item.leaf;
    EXPECT_NEAR(items.tree().Total(), total, 1e-12 * total);
    EXPECT_GE(items.next_key(), expected.back().key + 1);
    EXPECT_EQ(static_cast<int>(state.episodes.size()), table->options().streams) << "an episode carry per client";
  }
};

TEST_P(LegacyCheckpointTest, RestoresEveryDrawableItemAsTheOldServerSampledIt) {
  auto table = MakeTable(GetParam(), GetParam().old_capacity);
  RestoreAndCheck(table.get());
}

TEST_P(LegacyCheckpointTest, RestoresIntoALargerTableAndFewerStreams) {
  auto table = MakeTable(GetParam(), 4 * GetParam().old_capacity, /*streams=*/1);
  RestoreAndCheck(table.get());
  EXPECT_EQ(table->options().streams, GetParam().options.streams) << "the streams grow to the checkpoint's";
}

// Formats 1 and 2 kept item k in slot k mod --capacity: a table of fewer
// items cannot hold them there.
TEST_P(LegacyCheckpointTest, ATableOfFewerItemsThanTheOldCapacityIsRefused) {
  const Legacy& legacy = GetParam();
  auto table = MakeTable(legacy, legacy.old_capacity - 1);
  const Status status = Restore((kData / legacy.name).string(), table.get());
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find(fmt::format("restore it with --max-items {} or more", legacy.old_capacity)),
            std::string::npos)
      << status.ToString();
}

// Restored, the table serves on: samples assemble, appends go round the
// ring (evicting the restored items as their steps leave), keys go on from
// the restored next key; and a format 3 checkpoint of it restores bit for bit.
TEST_P(LegacyCheckpointTest, AppendsSamplesAndANewCheckpointGoOn) {
  const Legacy& legacy = GetParam();
  auto table = MakeTable(legacy, legacy.old_capacity);
  RestoreAndCheck(table.get());
  const uint64_t restored_next = table->items().next_key();
  replay::SampleResult sample;
  ASSERT_TRUE(table->mutable_items().Sample(16, 0.4, &sample).ok());
  std::vector<std::byte> rows(sample.slots.size() * static_cast<size_t>(table->SampleItemBytes()));
  table->Assemble(sample.slots, rows);

  // Steps of stream 0, 4 at a time, each episode 8 steps long, with an item
  // over every step an append may create one over.
  const Schema& schema = table->step_schema();
  const int64_t ring = table->options().step_capacity;
  uint64_t first_key = restored_next;
  int64_t added = 0;
  for (int round = 0; round < 2 * ring / 4; ++round) {
    const int64_t first = table->stream_steps(0);
    std::vector<std::byte> bulk;
    for (const Column& column : schema.columns) {
      for (int64_t j = 0; j < 4; ++j) {
        std::vector<std::byte> row(static_cast<size_t>(column.ItemBytes()), std::byte{static_cast<uint8_t>(first + j)});
        if (column.name == "done") row[0] = std::byte{static_cast<uint8_t>((first + j) % 8 == 7 ? 1 : 0)};
        if (column.name == "reward") std::memset(row.data(), 0, row.size());
        bulk.insert(bulk.end(), row.begin(), row.end());
      }
    }
    replay::AppendRequest request{0, first, store::StepBatch{4, bulk, false}};
    std::vector<int64_t> item_steps;
    std::vector<std::byte> item_columns;
    const replay::TableItems add{0, true};
    if (table->RowsAreSteps()) {
      request.items = {&add, 1};
    } else {
      ASSERT_TRUE(table->Append(request, &first_key).ok()) << "round " << round;
      // Then one item a request over each step that may have one now (the others are refused).
      for (int64_t t = std::max(table->steps().stream_oldest(0), first - 4); t < first + 4; ++t) {
        item_columns.assign(static_cast<size_t>(table->ItemColumnBytes()), std::byte{3});
        const replay::TableItems items{0, false, std::span<const int64_t>(&t, 1), {}, item_columns};
        const replay::AppendRequest item{0, first + 4, {}, {&items, 1}};
        uint64_t key = 0;
        if (table->Append(item, &key).ok()) {
          EXPECT_EQ(key, restored_next + static_cast<uint64_t>(added)) << "keys go on from the restored next key";
          ++added;
        }
      }
      continue;
    }
    uint64_t key = 0;
    ASSERT_TRUE(table->Append(request, &key).ok()) << "round " << round;
    EXPECT_EQ(key, restored_next + static_cast<uint64_t>(added));
    added += 4;
  }
  ASSERT_GT(added, 0);
  // The ring went round twice: every restored item left with its steps.
  const replay::Replay& items = table->items();
  for (int64_t slot = 0; slot < items.slots_used(); ++slot) {
    if (items.KeyAt(slot) != replay::Replay::kNoKey) {
      EXPECT_GE(items.KeyAt(slot), restored_next) << "a restored item outlived its steps";
    }
  }
  EXPECT_GT(items.size(), 0);
  ASSERT_TRUE(table->mutable_items().Sample(32, 0.4, &sample).ok());
  rows.resize(sample.slots.size() * static_cast<size_t>(table->SampleItemBytes()));
  table->Assemble(sample.slots, rows);

  CheckpointWriter writer(dir_.string(), 0, 1, items.capacity());
  const Status written = Write(&writer, table.get());
  ASSERT_TRUE(written.ok()) << written.ToString();
  auto again = MakeTable(legacy, legacy.old_capacity);
  const Status reloaded = Restore(dir_.string(), again.get());
  ASSERT_TRUE(reloaded.ok()) << reloaded.ToString();
  ExpectSameTable(*again, *table);
  ExpectSameSamples(again.get(), table.get(), 4, 8);
}

// A format 3 checkpoint of the table just restored (nothing appended):
// its items, now with holes in the item slots, restore bit for bit.
TEST_P(LegacyCheckpointTest, ItsFormat3CheckpointRestoresBitForBit) {
  const Legacy& legacy = GetParam();
  auto table = MakeTable(legacy, legacy.old_capacity);
  RestoreAndCheck(table.get());
  CheckpointWriter writer(dir_.string(), 0, 1, table->items().capacity());
  const Status written = Write(&writer, table.get());
  ASSERT_TRUE(written.ok()) << written.ToString();
  auto again = MakeTable(legacy, legacy.old_capacity);
  const Status reloaded = Restore(dir_.string(), again.get());
  ASSERT_TRUE(reloaded.ok()) << reloaded.ToString();
  ExpectSameTable(*again, *table);
  ExpectSameSamples(again.get(), table.get(), 4, 8);
}

// A copy of the checkpoint under dir_ with `part` replaced by `damage(bytes)`
// (its MANIFEST line made to match when `forge`), restored.
class DamagedLegacyTest : public LegacyCheckpointTest {
 protected:
  fs::path Copy() {
    const fs::path copy = dir_ / "copy";
    fs::create_directories(copy);
    fs::copy(kData / GetParam().name / "shard-0-of-1" / "checkpoint-000000", copy, fs::copy_options::recursive);
    return copy;
  }
  Status Load(const fs::path& checkpoint) {
    auto table = MakeTable(GetParam(), GetParam().old_capacity);
    return Restore(checkpoint.string(), table.get());
  }
};

TEST_P(DamagedLegacyTest, AFlippedByteIsRefusedByItsHash) {
  for (const std::string part : {"state.bin", "leaves.bin", "column-0.bin"}) {
    const fs::path copy = Copy();
    std::string bytes = ReadFile(copy / part);
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x01);
    std::ofstream(copy / part, std::ios::binary | std::ios::trunc) << bytes;
    const Status status = Load(copy);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << part << ": " << status.ToString();
    EXPECT_NE(status.message().find(part + ": its hash does not match"), std::string::npos) << status.ToString();
    fs::remove_all(copy);
  }
}

TEST_P(DamagedLegacyTest, AForgedLeafIsRefusedNamingLeavesBin) {
  const fs::path copy = Copy();
  std::string bytes = ReadFile(copy / "leaves.bin");
  const double bad = -2.0;
  std::memcpy(bytes.data() + 8 * sizeof(double), &bad, sizeof(bad));
  ForgePart(copy, "leaves.bin", bytes);
  const Status status = Load(copy);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("leaves.bin: the leaf of key"), std::string::npos) << status.ToString();
}

TEST_P(DamagedLegacyTest, ATruncatedColumnIsRefused) {
  const fs::path copy = Copy();
  fs::resize_file(copy / "column-0.bin", fs::file_size(copy / "column-0.bin") - 8);
  const Status status = Load(copy);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("column-0.bin"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("truncated or damaged"), std::string::npos) << status.ToString();
}

// A format 1 checkpoint into a table of n-step items, format 2 into one of
// transitions: refused, saying which is which.
TEST_P(DamagedLegacyTest, TheOtherKindOfTableRefusesIt) {
  const Legacy& legacy = GetParam();
  const Legacy other = legacy.options.kind == StepOptions::Kind::kTransition ? NStep() : Transitions();
  auto table = MakeTable(other, other.old_capacity);
  const Status status = Restore((kData / legacy.name).string(), table.get());
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find(legacy.options.kind == StepOptions::Kind::kTransition
                                      ? "holds a replay of transitions; this server stores step streams"
                                      : "holds a replay of step streams; this server stores transitions"),
            std::string::npos)
      << status.ToString();
}

std::string Name(const ::testing::TestParamInfo<Legacy>& info) {
  std::string name = info.param.name;
  std::erase(name, '-');
  return name;
}

INSTANTIATE_TEST_SUITE_P(Formats, LegacyCheckpointTest, ::testing::Values(Transitions(), NStep(), Sequence()), Name);
INSTANTIATE_TEST_SUITE_P(Formats, DamagedLegacyTest, ::testing::Values(Transitions(), NStep(), Sequence()), Name);

// Two items over one step (the old server let the same item be created
// twice, issue 33's finding 7): the second is refused, naming both keys.
TEST_F(CheckpointTest, ALegacyCheckpointWithTwoItemsOverOneStepIsRefused) {
  const fs::path copy = dir_ / "copy";
  fs::create_directories(copy);
  fs::copy(kData / "format2-nstep" / "shard-0-of-1" / "checkpoint-000000", copy, fs::copy_options::recursive);
  // Two drawable items (nonzero leaves) get the same step key.
  const std::string leaves = ReadFile(copy / "leaves.bin");
  std::string steps = ReadFile(copy / "column-0.bin");
  std::vector<size_t> drawable;
  for (size_t i = 0; i < leaves.size() / 8 && drawable.size() < 2; ++i) {
    double leaf = 0.0;
    std::memcpy(&leaf, leaves.data() + 8 * i, 8);
    if (leaf != 0.0) drawable.push_back(i);
  }
  ASSERT_EQ(drawable.size(), 2u);
  std::memcpy(steps.data() + 8 * drawable[1], steps.data() + 8 * drawable[0], 8);
  ForgePart(copy, "column-0.bin", steps);
  auto table = MakeTable(NStep(), 64);
  const Status status = Restore(copy.string(), table.get());
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("are both over step key"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace perserve::service
