// Restoring checkpoints from outside (issue 25): every field of the MANIFEST,
// of state.bin and of item-slots.bin is checked, forged values whose hashes
// were made to match are refused by range, another --alpha or --max-items is
// refused, a directory holding only a partial checkpoint says so, and the
// round trips a mutation run let through are pinned down: the hash of every
// small part, the leaves of a partly filled table, and a checkpoint of large
// rows while adds overwrite steps it has not written yet.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "proto/bounded_input_archive.h"
#include "proto/codec.h"
#include "server/service/checkpoint/checkpoint_test_util.h"
#include "server/service/loopback_transport.h"
#include "server/service/service_test_util.h"
#include "service/replay_service.h"

namespace perserve::service {
namespace {

using namespace checkpoint_test;
using std::chrono::microseconds;

class CheckpointRestoreTest : public CheckpointTest {
 protected:
  // A table of 300 transitions in a capacity of 500, checkpointed; the checkpoint's directory.
  fs::path WriteOne(double alpha = 0.6) {
    replay_ = MakeReplay(500, 17, alpha);
    AddItems(replay_.get(), 0, 300, &rng_);
    CheckpointWriter writer(dir_.string(), 0, 1);
    const Status written = Write(&writer, replay_.get());
    EXPECT_TRUE(written.ok()) << written.ToString();
    return writer.last_path();
  }

  Status Load(double alpha = 0.6, int64_t capacity = 500) {
    auto target = MakeReplay(capacity, 17, alpha);
    std::string loaded;
    return LoadCheckpoint(dir_.string(), 0, 1, target.get(), &state_, &loaded);
  }
  // Into a table whose items' capacity is `max_items` (its ring's is 500).
  Status LoadWithMaxItems(int64_t max_items) {
    replay::StepOptions options;
    options.kind = replay::StepOptions::Kind::kTransition;
    options.step_capacity = 500;
    std::unique_ptr<replay::StepReplay> target;
    EXPECT_TRUE(replay::StepReplay::Create(options, replay::ReplayOptions{max_items, 0.6, tree::Device::kCpu, 17},
                                           TestSchema(), &target)
                    .ok());
    std::string loaded;
    return LoadCheckpoint(dir_.string(), 0, 1, target.get(), &state_, &loaded);
  }

  // The checkpoint's state, decoded.
  static CheckpointState StateIn(const fs::path& checkpoint) {
    const std::string bytes = ReadFile(checkpoint / "state.bin");
    proto::BoundedInputArchive archive(std::as_bytes(std::span(bytes.data(), bytes.size())));
    CheckpointState state;
    archive(state);
    return state;
  }

  std::unique_ptr<replay::StepReplay> replay_;
  CheckpointState state_;
};

void ExpectRefused(const Status& status, Status::Code code, const std::string& mention) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_NE(status.message().find(mention), std::string::npos)
      << "\"" << status.message() << "\" lacks \"" << mention << "\"";
}

// One bit flipped in a hash's first hex digit ('6' -> 'v' is not a hex digit)
// made std::stoull throw out of the server's main (exit 134). Each damaged
// MANIFEST is a clear error naming the line.
TEST_F(CheckpointRestoreTest, ADamagedManifestIsAClearErrorNeverACrash) {
  const fs::path checkpoint = WriteOne();
  const std::string good = ReadFile(checkpoint / "MANIFEST");
  ASSERT_TRUE(Load().ok());
  const size_t hash_at = good.find("part table-0-leaves.bin ");
  ASSERT_NE(hash_at, std::string::npos);
  const size_t first_digit = good.find(' ', good.find(' ', hash_at + 5) + 1) + 1;
  const std::string line = fmt::format("line {}:", std::count(good.begin(), good.begin() + hash_at, '\n') + 1);
  struct Case {
    std::string manifest;
    std::string mention;
  };
  std::string bad_digit = good;
  bad_digit[first_digit] = 'v';
  std::string short_hash = good;
  short_hash.erase(first_digit, 1);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  const std::vector<Case> cases = {
      {bad_digit, line + " the hash"},
      {short_hash, line + " the hash"},
      {replaced("part table-0-leaves.bin ", "part table-0-leaves.bin 12x"), line + " the byte count"},
      {replaced("part table-0-leaves.bin ", "part table-0-leaves.bin -"), line + " the byte count"},
      {replaced("part table-0-leaves.bin ", "part table-0-leaves.bin  "), line},
      {replaced("part table-0-leaves.bin ", "part table-0-item-slots.bin "), "table-0-item-slots.bin listed twice"},
      {replaced("part table-0-leaves.bin ", "part step-column-x.bin "), "an unknown part \"step-column-x.bin\""},
      {replaced("part table-0-leaves.bin ", "part ../leaves.bin "), "an unknown part \"../leaves.bin\""},
      {replaced("part table-0-leaves.bin", "part state.bin"), "state.bin listed twice"},
      {replaced("perserve-checkpoint 4", "perserve-checkpoint 99999999999999999999"), "not a perserve checkpoint"},
      {replaced("perserve-checkpoint 4", "perserve-checkpoint 4x"), "not a perserve checkpoint"},
      {replaced("perserve-checkpoint 4", "perserve-checkpoint 5"), "has checkpoint format 5; this server reads"},
      {replaced("part table-0-leaves.bin ", "part table-0-leaf.bin "), "an unknown part \"table-0-leaf.bin\""},
      {replaced("part table-0-leaves.bin ", "part table-x-leaves.bin "), "an unknown part \"table-x-leaves.bin\""},
      {replaced("shard 0 of 1", "shard 0 of 1.5"), "line 2: not a \"shard S of K\" line"},
      {replaced("shard 0 of 1", "shard 99999999999 of 1"), "line 2"},
      {good + "part table-0-column-0.bin 1 0000000000000000\n", "a line after \"end\""},
      {good.substr(0, good.size() - 1), "ends inside a line"},
      {"", "not a perserve checkpoint manifest"},
  };
  for (const Case& c : cases) {
    std::ofstream(checkpoint / "MANIFEST", std::ios::trunc | std::ios::binary) << c.manifest;
    const Status status = Load();
    EXPECT_FALSE(status.ok()) << c.manifest;
    EXPECT_NE(status.message().find(c.mention), std::string::npos)
        << "\"" << status.message() << "\" lacks \"" << c.mention << "\"";
  }
  std::ofstream(checkpoint / "MANIFEST", std::ios::trunc | std::ios::binary) << good;
  EXPECT_TRUE(Load().ok());
}

// A restore that skipped the hash of leaves.bin or state.bin passed every
// test: one flipped byte (the file's size unchanged) in any small part is
// refused.
TEST_F(CheckpointRestoreTest, AFlippedByteInTheLeavesOrTheStateIsRefused) {
  const fs::path checkpoint = WriteOne();
  for (const std::string part : {"table-0-leaves.bin", "state.bin", "steps.bin", "step-info.bin", "table-0-selectors.bin"}) {
    const std::string good = ReadFile(checkpoint / part);
    std::string flipped = good;
    flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x10);
    std::ofstream(checkpoint / part, std::ios::trunc | std::ios::binary) << flipped;
    ExpectRefused(Load(), Status::Code::kInvalidArgument, part + ": its hash does not match the manifest");
    std::ofstream(checkpoint / part, std::ios::trunc | std::ios::binary) << good;
    ASSERT_TRUE(Load().ok()) << part;
  }
  // item-slots.bin's records are checked as they are read, before its hash:
  // a flipped key bit gives two items one key.
  const std::string good = ReadFile(checkpoint / "table-0-item-slots.bin");
  std::string flipped = good;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x10);
  std::ofstream(checkpoint / "table-0-item-slots.bin", std::ios::trunc | std::ios::binary) << flipped;
  ExpectRefused(Load(), Status::Code::kInvalidArgument, "table-0-item-slots.bin: ");
  std::ofstream(checkpoint / "table-0-item-slots.bin", std::ios::trunc | std::ios::binary) << good;
  ASSERT_TRUE(Load().ok());
}

// A state.bin forged with its hash recomputed: every value out of range is
// refused, naming state.bin and the field. (A next key of 2^54 + 5 restored,
// and every key sampled after it carried shard bits: every update refused.)
TEST_F(CheckpointRestoreTest, AForgedStateIsRefusedByRangeNamingTheField) {
  const fs::path checkpoint = WriteOne();
  const CheckpointState good = StateIn(checkpoint);
  struct Case {
    std::function<void(CheckpointState*)> forge;
    std::string mention;
  };
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Case> cases = {
      {[](CheckpointState* s) { s->tables[0].replay.next_key = (uint64_t{1} << 54) + 5; }, "next key"},
      {[](CheckpointState* s) { s->tables[0].replay.next_key = ~uint64_t{0}; }, "next key"},
      {[](CheckpointState* s) { s->tables[0].replay.next_key = 299; }, "next key"},
      {[](CheckpointState* s) { s->tables[0].size = 501; }, "size"},
      {[](CheckpointState* s) { s->tables[0].size = -1; }, "size"},
      {[](CheckpointState* s) { s->format = 7; }, "format"},
      {[](CheckpointState* s) { s->shards = 2; }, "shard"},
      {[](CheckpointState* s) { s->tables[0].replay.max_priority = nan; }, "max priority"},
      {[](CheckpointState* s) { s->tables[0].replay.max_priority = 0.0; }, "max priority"},
      {[](CheckpointState* s) { s->tables[0].replay.counters.items_added = 301; }, "items added"},
      {[](CheckpointState* s) { s->tables[0].replay.counters.items_sampled = -4; }, "items sampled"},
      {[](CheckpointState* s) { s->tables[0].replay.counters.stale_updates_dropped = -1; }, "stale updates dropped"},
      {[](CheckpointState* s) { s->tables[0].limiter.inserted = -1; }, "rate limiter"},
      {[](CheckpointState* s) { s->tables[0].limiter = {1, 1, true, nan, 3.0}; }, "rate limiter"},
      {[](CheckpointState* s) { s->tables[0].limiter = {1, 1, true, 5.0, 3.0}; }, "rate limiter"},
      {[](CheckpointState* s) { s->tables[0].limiter = {1, 1, true, 5.0, -std::numeric_limits<double>::infinity()}; },
       "rate limiter"},
      {[](CheckpointState* s) { s->episodes = {replay::EpisodeCarry{nan, 0, 1.0, 0}}; }, "episodes"},
      {[](CheckpointState* s) { s->episodes = {replay::EpisodeCarry{1.0, 2, 1.0, 0}}; }, "episodes"},
      {[](CheckpointState* s) { s->episodes = {replay::EpisodeCarry{1.0, 0, -3.0, 0}}; }, "episodes"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    CheckpointState forged = good;
    cases[i].forge(&forged);
    ForgePart(checkpoint, "state.bin", EncodeState(forged));
    const Status status = Load();
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << "case " << i << ": " << status.ToString();
    // Format 4 names a table's fields with their table.
    const bool whole = cases[i].mention == "format" || cases[i].mention == "shard" || cases[i].mention == "episodes";
    const std::string mention = whole ? cases[i].mention : "table default's " + cases[i].mention;
    EXPECT_NE(status.message().find("state.bin: " + mention), std::string::npos)
        << "case " << i << ": \"" << status.message() << "\" lacks \"state.bin: " << mention << "\"";
  }
  // Bytes past the state's end.
  ForgePart(checkpoint, "state.bin", EncodeState(good) + "x");
  ExpectRefused(Load(), Status::Code::kInvalidArgument, "state.bin: 1 bytes past the state's end");
  // A size the item parts do not have.
  CheckpointState fewer = good;
  fewer.tables[0].size = 299;
  ForgePart(checkpoint, "state.bin", EncodeState(fewer));
  ExpectRefused(Load(), Status::Code::kInvalidArgument, "and its items need 2392");
  // A limiter that is off (or never saw M items) has seen no offset: +inf, -inf.
  CheckpointState off = good;
  off.tables[0].limiter = {10, 0, true, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  ForgePart(checkpoint, "state.bin", EncodeState(off));
  EXPECT_TRUE(Load().ok());
}

// Leaves from outside: NaN, negative, infinite, subnormal (no priority's leaf
// is: the tree clamps them to 2^-1022), 0 (format 3 holds drawable items
// only), or a total past the tree's limit.
TEST_F(CheckpointRestoreTest, ForgedLeavesAreRefusedNamingLeavesBin) {
  const fs::path checkpoint = WriteOne();
  const std::string good = ReadFile(checkpoint / "table-0-leaves.bin");
  for (const double leaf : {std::numeric_limits<double>::quiet_NaN(), -1.0, std::numeric_limits<double>::infinity(),
                            1e-310, 0.0, 1e308}) {
    std::string forged = good;
    for (size_t item : {size_t{7}, size_t{8}}) std::memcpy(forged.data() + item * sizeof(double), &leaf, sizeof(leaf));
    ForgePart(checkpoint, "table-0-leaves.bin", forged);
    const Status status = Load();
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << leaf << ": " << status.ToString();
    EXPECT_NE(status.message().find("leaves.bin"), std::string::npos) << leaf << ": " << status.message();
  }
  ForgePart(checkpoint, "table-0-leaves.bin", good);
  EXPECT_TRUE(Load().ok());
}

// item-slots.bin from outside: a slot past the table, two items in one slot,
// one key twice, a key past the next key: each refused, naming the file.
TEST_F(CheckpointRestoreTest, ForgedItemSlotsAreRefusedNamingTheFile) {
  const fs::path checkpoint = WriteOne();
  const std::string good = ReadFile(checkpoint / "table-0-item-slots.bin");
  auto record = [&](size_t item, size_t field) {
    int64_t value = 0;
    std::memcpy(&value, good.data() + item * 16 + field * 8, sizeof(value));
    return value;
  };
  struct Case {
    size_t item, field;
    int64_t value;
    std::string mention;
  };
  const std::vector<Case> cases = {
      {7, 1, 500, "table-0-item-slots.bin: key 7: slot 500 is outside [0, capacity 500)"},
      {7, 1, -1, "table-0-item-slots.bin: key 7: slot -1 is outside"},
      {8, 1, record(7, 1), fmt::format("table-0-item-slots.bin: keys 7 and 8 both in slot {}", record(7, 1))},
      {8, 0, record(7, 0), "table-0-item-slots.bin: key 7 is held twice"},
      {7, 0, 300, "table-0-item-slots.bin: key 300 is not one a table of this ring can hold"},
      {7, 0, int64_t{1} << 40, "table-0-item-slots.bin: key 1099511627776 is not one"},
  };
  ASSERT_EQ(record(7, 0), 7);
  ASSERT_EQ(record(8, 0), 8);
  for (const Case& c : cases) {
    std::string forged = good;
    std::memcpy(forged.data() + c.item * 16 + c.field * 8, &c.value, sizeof(c.value));
    ForgePart(checkpoint, "table-0-item-slots.bin", forged);
    ExpectRefused(Load(), Status::Code::kInvalidArgument, c.mention);
  }
  ForgePart(checkpoint, "table-0-item-slots.bin", good);
  EXPECT_TRUE(Load().ok());
}

// Written at alpha 0.6, restored with --alpha 0.5: the old leaves are p^0.6,
// the new ones would be p^0.5. Refused, naming both.
TEST_F(CheckpointRestoreTest, ARestoreWithAnotherAlphaIsRefused) {
  WriteOne(0.6);
  ExpectRefused(Load(0.5), Status::Code::kFailedPrecondition,
                "table default was written with alpha=0.6; this server's table default has alpha=0.5");
  EXPECT_TRUE(Load(0.6).ok());
}

// The table's item capacity shapes what it holds (the FIFO remover's
// limit): another --max-items is refused, naming both.
TEST_F(CheckpointRestoreTest, ARestoreWithAnotherMaxItemsIsRefused) {
  WriteOne();
  ExpectRefused(LoadWithMaxItems(400), Status::Code::kFailedPrecondition,
                "table default was written with max_items=500; this server's table default has max_items=400");
  EXPECT_TRUE(LoadWithMaxItems(500).ok());
}

// A job stopped while its first checkpoint was written leaves only
// checkpoint-000000.partial: the restore said "no checkpoint for shard 0 of 1
// ... restore with the same number of server ranks", the wrong way.
TEST_F(CheckpointRestoreTest, ADirectoryHoldingOnlyAPartialCheckpointSaysSo) {
  auto replay = MakeReplay(500);
  AddItems(replay.get(), 0, 100, &rng_);
  std::string partial;
  {
    CheckpointWriter writer(dir_.string(), 0, 1);
    ASSERT_TRUE(writer.Begin(*replay, StateOf()).ok());
    partial = writer.path() + ".partial";
    fs::copy(partial, dir_ / "left", fs::copy_options::recursive);
  }
  fs::rename(dir_ / "left", partial);  // as a job killed mid-write leaves it
  ExpectRefused(Load(), Status::Code::kFailedPrecondition,
                "holds only a partial checkpoint (checkpoint-000000.partial): its writing was cut short");
  auto target = MakeReplay(500);
  std::string loaded;
  ExpectRefused(LoadCheckpoint(partial, 0, 1, target.get(), &state_, &loaded), Status::Code::kFailedPrecondition,
                "is a partial checkpoint");
}

// Found by the crash sweep (checkpoint_crash_test.cc): a job whose first
// checkpoint failed (its partial removed) or was lost in a crash leaves its
// shard's directory empty, and the restore said "... (it has shard-0-of-1):
// restore with the same number of server ranks", naming the job's own
// directory. Likewise shard 1's directory for shard 0 of the same job.
TEST_F(CheckpointRestoreTest, ADirectoryWhoseFirstCheckpointNeverCompletedSaysThereIsNone) {
  auto replay = MakeReplay(500);
  AddItems(replay.get(), 0, 100, &rng_);
  {
    CheckpointWriter writer(dir_.string(), 0, 1);
    ASSERT_TRUE(writer.Begin(*replay, StateOf()).ok());
  }  // abandoned: its partial is removed
  ASSERT_TRUE(fs::is_empty(dir_ / "shard-0-of-1"));
  ExpectRefused(Load(), Status::Code::kNotFound, "no complete checkpoint in " + dir_.string());
  fs::remove_all(dir_ / "shard-0-of-1");
  fs::create_directories(dir_ / "shard-1-of-2");
  auto target = MakeReplay(500);
  std::string loaded;
  ExpectRefused(LoadCheckpoint(dir_.string(), 0, 2, target.get(), &state_, &loaded), Status::Code::kNotFound,
                "no complete checkpoint in " + dir_.string());
}

// The only round trip was a full, wrapped ring, where the next slot is the
// oldest: leaves read from the wrong slot passed. Here the table is partly
// filled (slots 0 .. 299 of 500 used) and every key's leaf must come back
// under that key, in its slot, every node bit-exact.
TEST_F(CheckpointRestoreTest, APartlyFilledReplayRoundTripsEveryLeafUnderItsKey) {
  const fs::path checkpoint = WriteOne();
  replay::UpdateCounts counts;
  std::vector<uint64_t> keys;
  std::vector<double> priorities;
  for (uint64_t key = 0; key < 300; key += 3) keys.push_back(key), priorities.push_back(0.1 + key);
  auto replay = std::move(replay_);
  ASSERT_TRUE(replay->mutable_items().UpdatePriorities(keys, priorities, &counts).ok());
  fs::remove_all(dir_);
  CheckpointWriter writer(dir_.string(), 0, 1);
  ASSERT_TRUE(Write(&writer, replay.get()).ok());
  auto restored = MakeReplay(500);
  const Status status = Restore(dir_.string(), restored.get(), &state_);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(restored->items().size(), 300);
  ASSERT_EQ(restored->items().slots_used(), 300) << "a partly filled table";
  ExpectSameTable(*restored, *replay);
  // Both take the next adds into the same slots.
  std::mt19937_64 rng_a(4), rng_b(4);
  AddItems(replay.get(), 300, 250, &rng_a);
  AddItems(restored.get(), 300, 250, &rng_b);
  ExpectSameTable(*restored, *replay);
}

// BeforeAdd made a no-op passed every test: their rows were all written
// before the first add (one slice held them all). Steps of 100 KB make a
// slice 10 steps, and the adds between slices go round the ring's slots
// (capacity and slack) before the checkpoint is complete, so they overwrite
// steps it has not written yet: the checkpoint must still be the table as it
// was when it began.
TEST_F(CheckpointRestoreTest, AddsOverwritingRowsNotYetWrittenDoNotChangeTheCheckpoint) {
  constexpr int64_t kCapacity = 64, kRowBytes = 100000;
  auto replay = MakeReplay(kCapacity, 17, 0.6, kRowBytes);
  AddItems(replay.get(), 0, kCapacity, &rng_);
  const std::vector<HeldItem> at_begin = HeldItems(*replay);
  const RingContents ring_at_begin = Ring(*replay);
  const int64_t slots = replay->steps().slots();
  ASSERT_LT(slots, 8 * kCapacity) << "a slack this large takes too many adds to go round";
  CheckpointWriter writer(dir_.string(), 0, 1, kCapacity);
  int64_t next_id = kCapacity;
  int passes = 0;
  const Status written = Write(&writer, replay.get(), [&] {
    // Each pass goes a third of the way round the slots.
    for (int64_t added = 0; added < slots / 3; added += 16) {
      AddBatch(replay.get(), next_id, 16, &rng_, &writer);
      next_id += 16;
    }
    ++passes;
  });
  ASSERT_TRUE(written.ok()) << written.ToString();
  ASSERT_GE(passes, 4) << "the checkpoint ended before the adds went round the ring's slots";
  ASSERT_GT(next_id, kCapacity + slots) << "every step held at Begin was overwritten";
  auto restored = MakeReplay(kCapacity, 17, 0.6, kRowBytes);
  const Status status = Restore(dir_.string(), restored.get(), &state_);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(restored->items().next_key(), static_cast<uint64_t>(kCapacity));
  EXPECT_TRUE(HeldItems(*restored) == at_begin) << "items changed after Begin went into the checkpoint";
  ExpectSameRing(Ring(*restored), ring_at_begin, "the restored ring and the ring at Begin");
}

// No restore test ran a rate limiter: a restore that left it fresh passed.
// Restored, the limiter holds an add the fresh one would take (the actors are
// 90 items ahead), and the next checkpoint carries its state on.
TEST_F(CheckpointRestoreTest, TheServiceRestoresTheRateLimitersStateAndActsOnIt) {
  auto replay = MakeReplay(500);
  AddItems(replay.get(), 0, 100, &rng_);
  ServiceOptions options;
  options.min_size_to_sample = 10;
  options.samples_per_insert = 1.0;
  options.error_buffer = 20.0;
  options.stats_interval_seconds = 0.0;
  options.checkpoint_dir = dir_.string();
  LoopbackTransport transport(1);
  ReplayService service(replay.get(), &transport, options);
  CheckpointState restored;
  restored.limiter = RateLimiterState{100, 0, true, 60.0, 90.0};
  service.Restore(restored);

  const std::vector<std::byte> columns(static_cast<size_t>(5 * replay->step_schema().ItemBytes()));
  transport.Push(0, service_test::AddFrame(1, replay->stream_steps(0), 5, columns));
  bool handled = false;
  ASSERT_TRUE(service.Step(&handled).ok());
  EXPECT_EQ(service.held_adds(0), 1) << "the restored limiter holds the add (100 + 5 > 10 + 20)";

  ASSERT_TRUE(service.RequestCheckpoint("test").ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (service.checkpoints()->active() && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(service.Step(&handled).ok());
  }
  ASSERT_FALSE(service.checkpoints()->active());
  ASSERT_TRUE(Load().ok());
  EXPECT_EQ(state_.limiter.inserted, 100);
  EXPECT_EQ(state_.limiter.sampled, 0);
  EXPECT_TRUE(state_.limiter.observed);
  EXPECT_EQ(state_.limiter.lowest, 60.0);
  EXPECT_EQ(state_.limiter.highest, 90.0);
}

}  // namespace
}  // namespace perserve::service
