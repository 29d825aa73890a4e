// Appends of steps whose columns come apart (issue 33: appends received
// straight into the ring), to a table of n-step items through the service:
// the columns go into the ring's slack past its newest step, then the whole
// append is checked there; a refused one (a bad done value in the received
// columns, items over steps never appended or no longer held, columns of
// another size) changes nothing: the ring's held steps, the streams' counts
// and the table are as before. Every accepted one leaves the ring and the
// table as the same append sent whole leaves a twin.
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "proto/append.h"
#include "replay/step_replay.h"
#include "server/service/service_test_util.h"

namespace perserve::service {
namespace {

using proto::MessageKind;

// obs uint8 [2], action int32, reward float32, done uint8: 11 bytes a step.
Schema StepSchema() {
  return Schema{{{"obs", DType::kUInt8, {2}},
                 {"action", DType::kInt32, {}},
                 {"reward", DType::kFloat32, {}},
                 {"done", DType::kUInt8, {}}}};
}
constexpr int64_t kStepBytes = 11;

// Steps first .. first + count - 1 of `stream` in the wire layout: obs
// {stream, index}, action and reward the index, done as `done` says (0
// where it is shorter).
std::vector<std::byte> StepColumns(int stream, int64_t first, int64_t count, const std::vector<uint8_t>& done = {}) {
  std::vector<std::byte> bulk(static_cast<size_t>(count * kStepBytes));
  for (int64_t j = 0; j < count; ++j) {
    const int64_t i = first + j;
    bulk[static_cast<size_t>(2 * j)] = std::byte{static_cast<uint8_t>(stream + 1)};
    bulk[static_cast<size_t>(2 * j + 1)] = std::byte{static_cast<uint8_t>(i)};
    const int32_t action = static_cast<int32_t>(i);
    const float reward = static_cast<float>(i);
    std::memcpy(bulk.data() + 2 * count + 4 * j, &action, 4);
    std::memcpy(bulk.data() + 6 * count + 4 * j, &reward, 4);
    bulk[static_cast<size_t>(10 * count + j)] = std::byte{static_cast<size_t>(j) < done.size() ? done[j] : uint8_t{0}};
  }
  return bulk;
}

// What a refused append must leave as it was.
struct Snapshot {
  uint64_t next_step_key = 0, oldest_step_key = 0;
  std::vector<int64_t> stream_steps, stream_oldest;
  std::vector<std::byte> held_rows;  // every held step's columns, key after key
  std::vector<int64_t> held_info;    // and its index, episode start, stream and done
  uint64_t next_item = 0;
  double total = 0.0;
  std::vector<int64_t> item_slots;  // of every key issued (-1: not held)
  std::vector<std::byte> items;     // every held item assembled
  bool operator==(const Snapshot&) const = default;

  static Snapshot Of(const replay::StepReplay& replay) {
    Snapshot s;
    const store::StepStore& ring = replay.steps();
    s.next_step_key = ring.next_key();
    s.oldest_step_key = ring.oldest_key();
    for (int stream = 0; stream < ring.streams(); ++stream) {
      s.stream_steps.push_back(ring.stream_steps(stream));
      s.stream_oldest.push_back(ring.stream_oldest(stream));
    }
    for (uint64_t key = ring.oldest_key(); key < ring.next_key(); ++key) {
      for (int c = 0; c < static_cast<int>(ring.schema().columns.size()); ++c) {
        const std::byte* row = ring.Row(c, key);
        s.held_rows.insert(s.held_rows.end(), row, row + ring.schema().columns[c].ItemBytes());
      }
      const store::StepInfo& info = ring.Info(key);
      s.held_info.insert(s.held_info.end(), {info.index, info.episode_start, info.stream, info.done});
    }
    const replay::Replay& items = replay.items();
    s.next_item = items.next_key();
    s.total = items.tree().Total();
    std::vector<int64_t> held;
    for (uint64_t key = 0; key < items.next_key(); ++key) {
      s.item_slots.push_back(items.SlotOf(key));
      if (s.item_slots.back() >= 0) held.push_back(s.item_slots.back());
    }
    s.items.resize(held.size() * static_cast<size_t>(replay.SampleItemBytes()));
    replay.Assemble(held, s.items);
    return s;
  }
};

class AppendApartTest : public ::testing::Test {
 protected:
  // n-step 2 over obs:2, a ring of 16 steps (and 16 of slack), 32 items, two actors.
  void SetUp() override {
    ASSERT_TRUE(Make(&replay_).ok());
    ASSERT_TRUE(Make(&twin_).ok());
    ASSERT_EQ(replay_->steps().slack(), 16);
    transport_ = std::make_unique<LoopbackTransport>(2);
    ServiceOptions options;
    options.stats_interval_seconds = 0.0;
    service_ = std::make_unique<ReplayService>(replay_.get(), transport_.get(), options);
  }
  static Status Make(std::unique_ptr<replay::StepReplay>* replay) {
    replay::StepOptions options;
    options.kind = replay::StepOptions::Kind::kNStep;
    options.n_step = 2;
    options.stacks = {{"obs", 2}};
    options.step_capacity = 16;
    options.streams = 2;
    return replay::StepReplay::Create(options, replay::ReplayOptions{32, 1.0, tree::Device::kCpu, 5}, StepSchema(),
                                      replay);
  }

  // `client`'s append from first_step of the steps in `columns` with items at
  // `items`, its columns apart: the request, then (unless `columns_message`
  // is false) the columns message.
  void PushApart(int client, uint64_t request_id, int64_t first_step, int64_t steps, const std::vector<int64_t>& items,
                 const std::vector<std::byte>& columns, bool columns_message = true) {
    proto::AppendMeta meta;
    meta.first_step = first_step;
    meta.steps = steps;
    if (!items.empty()) meta.groups = {proto::ItemGroup{0, static_cast<int64_t>(items.size()), false, false}};
    meta.columns_follow = true;
    const proto::ItemGroupSpans group{items, {}, {}};
    std::vector<std::byte> frame;
    proto::EncodeAppend(request_id, meta, {}, std::span(&group, meta.groups.size()), &frame);
    transport_->Push(client, std::move(frame));
    if (columns_message) transport_->Push(client, columns, proto::kAddColumnsTag);
  }
  // The same append, whole, to the twin.
  void AppendToTwin(int stream, int64_t first_step, int64_t steps, const std::vector<int64_t>& items,
                    const std::vector<std::byte>& columns) {
    uint64_t first = 0;
    const Status appended = twin_->Append(stream, first_step, steps, columns, items, {}, {}, &first);
    ASSERT_TRUE(appended.ok()) << appended.ToString();
  }
  // An accepted append of `steps` steps with items over them (each item t
  // needs t-1 .. t+2: those within the append): acknowledged with its items,
  // and the replay as the twin.
  void Accept(int client, uint64_t request_id, int64_t first_step, int64_t steps) {
    std::vector<int64_t> items;
    for (int64_t t = first_step + 1; t + 2 < first_step + steps; ++t) items.push_back(t);
    const std::vector<std::byte> columns = StepColumns(client, first_step, steps);
    PushApart(client, request_id, first_step, steps, items, columns);
    Step();
    AppendToTwin(client, first_step, steps, items, columns);
    proto::AddReply added;
    ASSERT_TRUE(proto::DecodeMeta(Reply(client, MessageKind::kAddReply, request_id), &added).ok());
    EXPECT_EQ(added.count, static_cast<int64_t>(items.size()));
    EXPECT_TRUE(Snapshot::Of(*replay_) == Snapshot::Of(*twin_)) << "request " << request_id;
  }
  // A refused append: its error, and nothing changed.
  void ExpectRefused(int client, uint64_t request_id, const std::string& fragment) {
    const Snapshot before = Snapshot::Of(*replay_);
    Step();
    proto::ErrorReply error;
    ASSERT_TRUE(proto::DecodeMeta(Reply(client, MessageKind::kErrorReply, request_id), &error).ok());
    EXPECT_EQ(static_cast<Status::Code>(error.code), Status::Code::kInvalidArgument) << error.message;
    EXPECT_NE(error.message.find(fragment), std::string::npos) << error.message << " lacks " << fragment;
    EXPECT_TRUE(Snapshot::Of(*replay_) == before) << "request " << request_id << " changed the replay";
    EXPECT_EQ(transport_->waiting(client), 0u) << "its columns were not received and dropped";
  }

  void Step() {
    bool handled = false;
    ASSERT_TRUE(service_->Step(&handled).ok());
  }
  proto::Frame Reply(int client, MessageKind kind, uint64_t request_id) {
    return service_test::PopReply(*transport_, client, kind, request_id, kept_);
  }

  std::unique_ptr<replay::StepReplay> replay_, twin_;
  std::unique_ptr<LoopbackTransport> transport_;
  std::unique_ptr<ReplayService> service_;
  std::deque<std::vector<std::byte>> kept_;
};

// Appends apart from two actors, around the ring (keys past 32: every slot
// of the ring and its slack written twice): each received into the ring
// where the twin's bulk went, its steps' episodes and its items the same.
TEST_F(AppendApartTest, ColumnsApartAreReceivedIntoTheRingAsTheSameAppendWhole) {
  const std::vector<int64_t> sizes = {6, 5, 7, 9, 16, 12, 4, 11, 13, 3, 8};
  std::vector<int64_t> next(2, 0);
  for (size_t r = 0; r < sizes.size(); ++r) {
    const int client = static_cast<int>(r % 2);
    Accept(client, r + 1, next[client], sizes[r]);
    next[client] += sizes[r];
  }
  EXPECT_GT(replay_->next_step_key(), 64u);
  EXPECT_GT(replay_->items().size(), 0);
  EXPECT_EQ(replay_->stream_steps(0), next[0]);
  EXPECT_EQ(replay_->stream_steps(1), next[1]);
}

// Refused after their columns were received into the ring: nothing of it
// stays, the held steps' rows (and the slack's) are as before.
TEST_F(AppendApartTest, ARefusedAppendApartChangesNothing) {
  Accept(0, 1, 0, 10);  // items 1 .. 7
  Accept(1, 2, 0, 12);  // items 1 .. 9; the ring has wrapped: 22 steps, 16 held
  // A bad done value in the received columns.
  std::vector<std::byte> bad_done = StepColumns(0, 10, 4);
  bad_done[10 * 4 + 2] = std::byte{3};  // the done column's third step
  PushApart(0, 3, 10, 4, {}, bad_done);
  ExpectRefused(0, 3, "step 2 of the batch has done 3");
  // Items over steps never appended, or that the ring no longer holds once the steps are in.
  PushApart(0, 4, 10, 4, {11, 14}, StepColumns(0, 10, 4));
  ExpectRefused(0, 4, "item 1 over step 14 of stream 0: not appended yet");
  PushApart(1, 5, 12, 6, {1}, StepColumns(1, 12, 6));
  ExpectRefused(1, 5, "item 0 over step 1 of stream 1: it needs step 0");
  // An item over a step that holds one already (issue 33, finding 7).
  PushApart(1, 6, 12, 2, {9}, StepColumns(1, 12, 2));
  ExpectRefused(1, 6, "the table holds an item over that step already");
  // Columns of another size: dropped, never received into the ring.
  PushApart(0, 7, 10, 4, {}, StepColumns(0, 10, 3));
  ExpectRefused(0, 7, "sent 33 bytes of columns apart; 44 expected");
  // The streams go on where they were.
  Accept(0, 8, 10, 4);
  Accept(1, 9, 12, 3);
}

// Issue 33, finding 8, over steps: a columns message that comes before its
// append request is that request's: the append goes into the ring as the
// same append whole, and the next one apart takes its own columns.
TEST_F(AppendApartTest, ColumnsBeforeTheirAppendAreTheAppends) {
  const std::vector<std::byte> first = StepColumns(0, 0, 5), second = StepColumns(0, 5, 4);
  transport_->Push(0, first, proto::kAddColumnsTag);
  PushApart(0, 1, 0, 5, {0, 1, 2}, first, /*columns_message=*/false);
  PushApart(0, 2, 5, 4, {3, 4, 5, 6}, second);
  Step();
  Step();
  AppendToTwin(0, 0, 5, {0, 1, 2}, first);
  AppendToTwin(0, 5, 4, {3, 4, 5, 6}, second);
  proto::AddReply added;
  ASSERT_TRUE(proto::DecodeMeta(Reply(0, MessageKind::kAddReply, 1), &added).ok());
  EXPECT_EQ(added.count, 3);
  ASSERT_TRUE(proto::DecodeMeta(Reply(0, MessageKind::kAddReply, 2), &added).ok());
  EXPECT_EQ(added.first_key, 3u);
  EXPECT_TRUE(Snapshot::Of(*replay_) == Snapshot::Of(*twin_));
  EXPECT_EQ(service_->counters().errors, 0);
}

}  // namespace
}  // namespace perserve::service
