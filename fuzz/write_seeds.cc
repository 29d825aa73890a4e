// fuzz_write_seeds <dir>: writes each fuzz target's seed corpus, real frames
// encoded by the codec, into <dir>/<target>/ (scripts/fuzz.sh runs it before
// fuzzing, so no binary seed is kept in the repository):
//   fuzz_frame    one file per message: every request and reply kind;
//   fuzz_service  sessions in fuzz/inputs.h's record layout: an actor and a
//                 learner adding, sampling, updating and closing, broken
//                 messages among them;
//   fuzz_join     join data of a server rank with the default and a small
//                 schema, and entries of another version and role, a NaN
//                 capacity and one server too many;
//   fuzz_checkpoint  real checkpoints of a table of 64 transitions (partly
//                 filled, wrapped, with updated priorities), written by the
//                 server's CheckpointWriter, with their own MANIFEST and
//                 with one made to match; checkpoints of the n-step table
//                 (partly filled and wrapped, with items evicted); and both
//                 in the formats written before the one item model (1, 2).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <utility>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <cereal/archives/binary.hpp>

#include "fuzz/inputs.h"
#include "fuzz/step_replay_fixture.h"
#include "proto/append.h"
#include "proto/codec.h"
#include "replay/replay.h"
#include "service/checkpoint/checkpoint.h"
#include "service/checkpoint/step_checkpoint.h"

namespace perserve::fuzz {
namespace {

using proto::MessageKind;
using Bytes = std::vector<std::byte>;

template <class Meta>
Bytes Frame(MessageKind kind, uint64_t request_id, const Meta& meta,
            std::initializer_list<std::span<const std::byte>> bulk = {}) {
  Bytes frame;
  proto::EncodeFrame(kind, request_id, meta, bulk, &frame);
  return frame;
}

// `count` items of ServiceSchema(), ids from `first_id`, and their
// priorities (0.5, 1.5, ...) when asked for.
struct ServiceItems {
  std::vector<int64_t> ids;
  std::vector<uint8_t> tags;
  std::vector<double> priorities;
};

ServiceItems MakeServiceItems(int64_t first_id, int64_t count, bool with_priorities) {
  ServiceItems items;
  for (int64_t j = 0; j < count; ++j) {
    items.ids.push_back(first_id + j);
    items.tags.push_back(static_cast<uint8_t>(j));
    items.tags.push_back(static_cast<uint8_t>(255 - j));
    if (with_priorities) items.priorities.push_back(0.5 + static_cast<double>(j));
  }
  return items;
}

// An add of `count` transitions (an append whose steps are its items) after
// whatever the sender's stream holds; with `columns_follow`, its step
// columns are not in the frame (the sender's next message).
Bytes AddFrame(uint64_t request_id, int64_t first_id, int64_t count, bool with_priorities,
               bool columns_follow = false) {
  const ServiceItems items = MakeServiceItems(first_id, count, with_priorities);
  proto::AppendMeta meta;
  meta.first_step = proto::AppendMeta::kAtEnd;
  meta.steps = count;
  meta.groups = {proto::ItemGroup{0, 0, /*item_per_step=*/true, with_priorities}};
  meta.columns_follow = columns_follow;
  const std::span<const std::byte> columns[] = {std::as_bytes(std::span(items.ids)),
                                                std::as_bytes(std::span(items.tags))};
  const proto::ItemGroupSpans group{{}, items.priorities, {}};
  Bytes frame;
  proto::EncodeAppend(request_id, meta, columns_follow ? std::span<const std::span<const std::byte>>{} : columns,
                      std::span(&group, 1), &frame);
  return frame;
}

// An append of 2 steps creating items in three tables: an item per step in
// table 1, items over listed steps with priorities in table 2, then one in
// table 0 (each table's item columns empty: the fuzzer varies the sizes).
Bytes ThreeTablesAppendFrame(uint64_t request_id) {
  proto::AppendMeta meta;
  meta.first_step = 0;
  meta.steps = 2;
  meta.groups = {proto::ItemGroup{1, 0, true, false}, proto::ItemGroup{2, 2, false, true},
                 proto::ItemGroup{0, 1, false, false}};
  const std::vector<std::byte> steps(2, std::byte{3});
  const std::span<const std::byte> columns[] = {steps};
  const std::vector<int64_t> listed = {0, 1}, one = {1};
  const std::vector<double> priorities = {0.5, 2.0};
  const proto::ItemGroupSpans groups[] = {{}, {listed, priorities, {}}, {one, {}, {}}};
  Bytes frame;
  proto::EncodeAppend(request_id, meta, columns, groups, &frame);
  return frame;
}

Bytes UpdateFrame(uint64_t request_id, const std::vector<uint64_t>& keys, const std::vector<double>& priorities) {
  return Frame(MessageKind::kUpdateRequest, request_id, proto::UpdateRequest{static_cast<int64_t>(keys.size())},
               {std::as_bytes(std::span(keys)), std::as_bytes(std::span(priorities))});
}

Bytes SampleReplyFrame(uint64_t request_id) {
  const std::vector<uint64_t> keys = {3, 1};
  const std::vector<double> weights = {1.0, 0.5};
  const std::vector<double> probabilities = {0.25, 0.5};
  const Bytes items(2 * static_cast<size_t>(ServiceSchema().ItemBytes()), std::byte{7});
  return Frame(MessageKind::kSampleReply, request_id, proto::SampleReply{2},
               {std::as_bytes(std::span(keys)), std::as_bytes(std::span(weights)),
                std::as_bytes(std::span(probabilities)), std::span(items)});
}

constexpr double kFractions[2] = {0.25, 0.75};

std::map<std::string, Bytes> FrameSeeds() {
  return {
      {"add", AddFrame(1, 0, 4, false)},
      {"add_with_priorities", AddFrame(2, 4, 3, true)},
      {"add_reply", Frame(MessageKind::kAddReply, 2, proto::AddReply{4, 3})},
      {"sample", Frame(MessageKind::kSampleRequest, 3, proto::SampleRequest{2, 0.4})},
      {"sample_table_2", Frame(MessageKind::kSampleRequest, 3, proto::SampleRequest{2, 0.4, 0.0, false, 2})},
      {"append_three_tables", ThreeTablesAppendFrame(9)},
      {"sample_reply", SampleReplyFrame(3)},
      {"update", UpdateFrame(4, {0, 5}, {2.0, 0.25})},
      {"update_reply", Frame(MessageKind::kUpdateReply, 4, proto::UpdateReply{1, 1})},
      {"shard_sample", Frame(MessageKind::kShardSampleRequest, 7, proto::ShardSampleRequest{2, true},
                             {std::as_bytes(std::span(kFractions))})},
      {"checkpoint", Frame(MessageKind::kCheckpointRequest, 8, proto::Empty{})},
      {"close", Frame(MessageKind::kCloseRequest, 5, proto::Empty{})},
      {"close_reply", Frame(MessageKind::kCloseReply, 5, proto::Empty{})},
      {"error_reply", Frame(MessageKind::kErrorReply, 6,
                            proto::ErrorReply{static_cast<int32_t>(Status::Code::kInvalidArgument),
                                              "priority -1 at position 0 is not finite and > 0"})},
  };
}

constexpr uint8_t kActor = 0, kLearner = kClientBit;

// An append to fuzz_step_service's streams: `count` steps from first_step
// (obs {first_step + j, 1}, reward j, done every 5th) and items at `items`.
Bytes AppendFrame(uint64_t request_id, int64_t first_step, int64_t count, const std::vector<int64_t>& items,
                  bool with_priorities) {
  std::vector<uint8_t> obs, done;
  std::vector<float> reward;
  for (int64_t j = first_step; j < first_step + count; ++j) {
    obs.push_back(static_cast<uint8_t>(j));
    obs.push_back(1);
    reward.push_back(static_cast<float>(j));
    done.push_back(j % 5 == 4);
  }
  const std::vector<double> priorities(with_priorities ? items.size() : 0, 0.75);
  proto::AppendMeta meta;
  meta.first_step = first_step;
  meta.steps = count;
  if (!items.empty()) meta.groups = {proto::ItemGroup{0, static_cast<int64_t>(items.size()), false, with_priorities}};
  const std::span<const std::byte> columns[] = {std::as_bytes(std::span(obs)), std::as_bytes(std::span(reward)),
                                                std::as_bytes(std::span(done))};
  const proto::ItemGroupSpans group{items, priorities, {}};
  Bytes frame;
  proto::EncodeAppend(request_id, meta, columns, std::span(&group, meta.groups.size()), &frame);
  return frame;
}

std::map<std::string, Bytes> StepServiceSeeds() {
  std::map<std::string, Bytes> seeds;
  // Two actors' streams interleaved past the ring's 64 steps (evicting items),
  // a sample, an update of its keys, a refused item, the closes.
  Bytes session;
  AppendServiceRecord(kLearner, Frame(MessageKind::kSampleRequest, 1, proto::SampleRequest{8, 0.4}), &session);
  uint64_t request = 1;
  for (int64_t first = 0; first < 80; first += 8) {
    std::vector<int64_t> items;
    for (int64_t t = std::max<int64_t>(0, first - 2); t < first + 6; ++t) items.push_back(t);
    AppendServiceRecord(kActor | kStepBit, AppendFrame(request++, first, 8, items, first % 16 == 0), &session);
  }
  AppendServiceRecord(kActor, AppendFrame(request++, 80, 2, {81}, false), &session);  // refused: step 83 not in
  AppendServiceRecord(kLearner | kReadRepliesBit | kStepBit, UpdateFrame(2, {0, 70, 75}, {1.5, 0.1, 4.0}), &session);
  AppendServiceRecord(kActor | kStepBit, Frame(MessageKind::kCloseRequest, request, proto::Empty{}), &session);
  AppendServiceRecord(kLearner | kReadRepliesBit, Frame(MessageKind::kCloseRequest, 3, proto::Empty{}), &session);
  seeds["session"] = session;
  // A transition add to a server of steps, and a steps-only append.
  Bytes kinds;
  AppendServiceRecord(kActor, AddFrame(1, 0, 2, false), &kinds);
  AppendServiceRecord(kActor | kStepBit, AppendFrame(2, 0, 3, {}, false), &kinds);
  seeds["kinds"] = kinds;
  return seeds;
}

std::map<std::string, Bytes> ServiceSeeds() {
  std::map<std::string, Bytes> seeds;
  // The learner asks before anything is stored (deferred), the actor adds,
  // the learner's update follows its sample, both close.
  Bytes session;
  AppendServiceRecord(kLearner, Frame(MessageKind::kSampleRequest, 1, proto::SampleRequest{4, 0.4}), &session);
  AppendServiceRecord(kActor | kStepBit, AddFrame(1, 0, 8, false), &session);
  AppendServiceRecord(kActor, AddFrame(2, 8, 4, true), &session);
  AppendServiceRecord(kLearner | kReadRepliesBit | kStepBit, UpdateFrame(2, {0, 3, 9}, {1.5, 0.1, 4.0}), &session);
  AppendServiceRecord(kLearner, Frame(MessageKind::kSampleRequest, 3, proto::SampleRequest{16, 1.0}), &session);
  AppendServiceRecord(kLearner, Frame(MessageKind::kShardSampleRequest, 5, proto::ShardSampleRequest{2, true},
                                      {std::as_bytes(std::span(kFractions))}),
                      &session);
  AppendServiceRecord(kActor | kStepBit, Frame(MessageKind::kCloseRequest, 3, proto::Empty{}), &session);
  AppendServiceRecord(kLearner | kReadRepliesBit, Frame(MessageKind::kCloseRequest, 4, proto::Empty{}), &session);
  seeds["session"] = session;

  // Samples piling up unread until the allowances defer and refuse them.
  Bytes flood;
  AppendServiceRecord(kActor, AddFrame(1, 0, 64, false), &flood);
  for (uint64_t id = 1; id <= 24; ++id) {
    AppendServiceRecord(kLearner | kStepBit, Frame(MessageKind::kSampleRequest, id, proto::SampleRequest{512, 0.5}),
                        &flood);
  }
  seeds["sample_flood"] = flood;

  // Broken messages between good ones: a reply kind, a wrong tag, a cut
  // header, a bad priority, an update of a key never issued.
  Bytes broken;
  const Bytes add = AddFrame(1, 0, 2, true);
  AppendServiceRecord(kActor, add, &broken);
  AppendServiceRecord(kActor, Frame(MessageKind::kAddReply, 2, proto::AddReply{0, 2}), &broken);
  AppendServiceRecord(kActor | kReplyTagBit, AddFrame(3, 2, 1, false), &broken);
  AppendServiceRecord(kActor, std::span(add).first(20), &broken);
  Bytes bad_priority = AddFrame(4, 2, 1, true);
  const double minus_one = -1.0;
  std::memcpy(bad_priority.data() + bad_priority.size() - sizeof(double), &minus_one, sizeof(double));
  AppendServiceRecord(kActor | kStepBit, bad_priority, &broken);
  AppendServiceRecord(kLearner, UpdateFrame(5, {1000}, {1.0}), &broken);
  AppendServiceRecord(kLearner, Frame(MessageKind::kSampleRequest, 6, proto::SampleRequest{2, -1.0}), &broken);
  seeds["broken"] = broken;

  // Adds with their columns apart: one whole, one whose columns come a step
  // late, one a column short, and columns no add waits for.
  Bytes apart;
  const auto apart_add = [&apart](uint64_t id, int64_t first, int64_t count, int64_t sent, uint8_t control) {
    const Bytes whole = AddFrame(id, first, count, true);
    proto::Frame frame;
    (void)proto::DecodeFrame(whole, &frame);
    const size_t priority_bytes = static_cast<size_t>(count) * sizeof(double);
    AppendServiceRecord(kActor | control, AddFrame(id, first, count, true, /*columns_follow=*/true), &apart);
    const auto columns = frame.bulk.first(frame.bulk.size() - priority_bytes);
    return Bytes(columns.begin(), columns.begin() + static_cast<std::ptrdiff_t>(sent * 10));  // 10 bytes an item
  };
  Bytes columns = apart_add(1, 0, 4, 4, 0);
  AppendServiceRecord(kActor | kColumnsTagBit | kStepBit, columns, &apart);
  columns = apart_add(2, 4, 4, 4, kStepBit);
  AppendServiceRecord(kActor | kColumnsTagBit | kStepBit, columns, &apart);
  columns = apart_add(3, 8, 4, 3, 0);
  AppendServiceRecord(kActor | kColumnsTagBit | kStepBit, columns, &apart);
  AppendServiceRecord(kActor | kColumnsTagBit | kStepBit, columns, &apart);
  seeds["columns_apart"] = apart;

  // Every frame seed alone, from the actor.
  for (const auto& [name, frame] : FrameSeeds()) {
    Bytes single;
    AppendServiceRecord(kActor | kStepBit, frame, &single);
    seeds["single_" + name] = single;
  }
  return seeds;
}

std::map<std::string, Bytes> JoinSeeds() {
  const auto server = static_cast<int32_t>(proto::Role::kServer);
  const auto learner = static_cast<int32_t>(proto::Role::kLearner);
  const std::string default_schema = proto::SerializeServedSchemas(proto::TransitionSchemas(Schema::Default()));
  const std::string small_schema = proto::SerializeServedSchemas(proto::TransitionSchemas(ServiceSchema()));
  const Schema frame_step{{{"obs", DType::kUInt8, {84, 84}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
  const Schema stacked{{{"obs", DType::kUInt8, {84, 84, 4}},
                        {"return", DType::kFloat64, {}},
                        {"discount", DType::kFloat64, {}},
                        {"next_obs", DType::kUInt8, {84, 84, 4}}}};
  const std::string step_schemas =
      proto::SerializeServedSchemas(proto::OneTableSchemas(true, frame_step, stacked, {}));
  // An n-step table (the default), a uniform table of transitions and a fifo table over steps.
  proto::ServedSchemas tables = proto::OneTableSchemas(true, frame_step, stacked, {});
  tables.tables.push_back(proto::TableSchemas{"eval", false, frame_step, {}, "uniform", false});
  tables.tables.push_back(proto::TableSchemas{"queue", true, stacked, {}, "fifo", false});
  const std::string table_schemas = proto::SerializeServedSchemas(tables);
  const auto join = [](int32_t rank, int32_t role, int32_t version, uint64_t length, const std::string& schema,
                       double alpha = 0.6, double capacity = 1 << 21, uint32_t servers = 1) {
    return EncodeJoinInput(JoinInput{rank, role, version, length, alpha, capacity, servers,
                                     std::as_bytes(std::span(schema.data(), schema.size()))});
  };
  return {
      {"server_default_schema", join(0, server, proto::kProtocolVersion, default_schema.size(), default_schema)},
      {"server_small_schema", join(1, server, proto::kProtocolVersion, small_schema.size(), small_schema, 1.0, 64, 2)},
      {"learner_no_schema", join(2, learner, proto::kProtocolVersion, 0, "")},
      {"server_step_schemas", join(0, server, proto::kProtocolVersion, step_schemas.size(), step_schemas)},
      {"server_three_tables", join(0, server, proto::kProtocolVersion, table_schemas.size(), table_schemas)},
      {"other_version", join(3, server, proto::kProtocolVersion + 1, small_schema.size(), small_schema)},
      {"unknown_role", join(4, 5, proto::kProtocolVersion, uint64_t{1} << 40, small_schema)},
      {"nan_capacity", join(0, server, proto::kProtocolVersion, small_schema.size(), small_schema, 0.6,
                            std::numeric_limits<double>::quiet_NaN())},
      {"too_many_servers", join(0, server, proto::kProtocolVersion, small_schema.size(), small_schema, 0.6, 1024, 1025)},
  };
}

// Appends `count` transitions of ServiceSchema numbered from `first_id` to
// `stream` of a table of transitions, with priorities.
void AddTransitions(replay::StepReplay* table, int stream, int64_t first_id, int64_t count) {
  const ServiceItems added = MakeServiceItems(first_id, count, /*with_priorities=*/true);
  Bytes bulk;
  for (auto part : {std::as_bytes(std::span(added.ids)), std::as_bytes(std::span(added.tags))}) {
    bulk.insert(bulk.end(), part.begin(), part.end());
  }
  const replay::TableItems add{0, /*item_per_step=*/true, {}, added.priorities, {}};
  const replay::AppendRequest request{stream, table->stream_steps(stream), store::StepBatch{count, bulk, false},
                                      {&add, 1}};
  uint64_t first_key = 0;
  (void)table->Append(request, &first_key);
}

// Appends `rounds` of 3 steps (every fifth ending an episode) alternating
// between the two streams of the n-step table, each with the items its
// steps completed.
void AppendSteps(replay::StepReplay* steps, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    const int stream = round % 2;
    const int64_t first = steps->stream_steps(stream);
    Bytes bulk;
    for (const Column& column : steps->step_schema().columns) {
      for (int j = 0; j < 3; ++j) {
        Bytes row(static_cast<size_t>(column.ItemBytes()), std::byte{static_cast<uint8_t>(round + j)});
        if (column.name == "done") row[0] = std::byte{static_cast<uint8_t>(j == 2 && round % 5 == 4 ? 1 : 0)};
        if (column.name == "reward") row = Bytes(4, std::byte{0});
        bulk.insert(bulk.end(), row.begin(), row.end());
      }
    }
    // The items at first - 2 .. first + 2 that these steps complete (each is refused alone if not).
    uint64_t key = 0;
    (void)steps->Append(stream, first, 3, bulk, {}, {}, {}, &key);
    for (int64_t t = first - 2; t < first + 3; ++t) {
      const double priority = 1.0 + static_cast<double>(t % 4);
      (void)steps->Append(stream, first + 3, 0, {}, std::span<const int64_t>(&t, 1),
                          std::span<const double>(&priority, 1), {}, &key);
    }
  }
}

// Every third held item's priority updated.
void UpdateSome(replay::StepReplay* table) {
  replay::Replay& items = table->mutable_items();
  std::vector<uint64_t> keys;
  for (int64_t slot = 0; slot < items.slots_used(); slot += 3) {
    if (items.KeyAt(slot) != replay::Replay::kNoKey) keys.push_back(items.KeyAt(slot));
  }
  replay::UpdateCounts counts;
  (void)items.UpdatePriorities(keys, std::vector<double>(keys.size(), 7.5), &counts);
}

// `table` checkpointed by the server's CheckpointWriter (format 4), packed
// as fuzz_checkpoint reads it: with `control`'s bits, and the writer's
// MANIFEST when kOwnManifestBit is among them.
Bytes PackedCheckpoint(const replay::StepReplay& table, uint8_t control) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("perserve-fuzz-seed-{}", ::getpid());
  std::error_code error;
  fs::remove_all(dir, error);
  service::CheckpointState state;
  state.limiter = {table.items().size(), 3 * table.items().size(), true, -5.0, 12.0};
  state.episodes = {replay::EpisodeCarry{2.5, 0, 3.0, 0}, replay::EpisodeCarry{}};
  Bytes seed = {static_cast<std::byte>(control)};
  {
    service::CheckpointWriter writer(dir.string(), 0, 1, table.items().capacity());
    if (!writer.Begin(table, state).ok()) return {};
    for (bool done = false; !done;) {
      if (!writer.Step(table, std::chrono::microseconds(1000), &done).ok()) return {};
    }
    const bool own_manifest = (control & kOwnManifestBit) != 0;
    for (size_t part = own_manifest ? 0 : 1; part < std::size(kCheckpointParts); ++part) {
      std::ifstream in(fs::path(writer.last_path()) / CheckpointPartName(part, /*legacy=*/false), std::ios::binary);
      if (!in) continue;  // a schema of fewer columns
      const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      AppendCheckpointRecord(static_cast<uint8_t>(part), std::as_bytes(std::span(bytes.data(), bytes.size())), &seed);
    }
  }
  fs::remove_all(dir, error);
  return seed;
}

template <class T>
std::span<const std::byte> BytesOf(const std::vector<T>& values) {
  return std::as_bytes(std::span(values));
}

std::string Encoded(const auto& value) {
  std::ostringstream bytes;
  {
    cereal::BinaryOutputArchive archive(bytes);
    archive(value);
  }
  return bytes.str();
}

// `table` as the code before the one item model wrote it (format 1 for
// transitions, 2 for n-step items; docs/checkpoints.md): the items' keys
// next - size .. next - 1 in slots key mod capacity, those no longer held
// with leaf 0 (format 2) and the ring's parts beside them (format 2);
// packed with kLegacyBit, with a MANIFEST of the right format when
// `own_manifest`. For a format 1 table every step is an item, held while
// its step is: the ring's columns are the items'.
Bytes LegacyCheckpoint(const replay::StepReplay& table, bool own_manifest) {
  const replay::Replay& items = table.items();
  const store::StepStore& ring = table.steps();
  const bool transitions = table.RowsAreSteps();
  const int32_t format = transitions ? service::checkpoint_layout::kTransitionFormat
                                     : service::checkpoint_layout::kStepFormat;
  const int64_t capacity = table.options().step_capacity;
  const uint64_t next_key = transitions ? ring.next_key() : items.next_key();
  const int64_t size = static_cast<int64_t>(std::min<uint64_t>(next_key, static_cast<uint64_t>(capacity)));
  const uint64_t oldest = next_key - static_cast<uint64_t>(size);
  std::vector<std::pair<std::string, std::string>> parts;
  service::CheckpointState state;
  state.format = format;
  state.schema = transitions ? table.step_schema().ToString() : items.store().schema().ToString();
  state.capacity = capacity;
  state.alpha = items.alpha();
  state.size = size;
  state.replay = items.State();
  state.replay.next_key = next_key;
  parts.emplace_back("state.bin", Encoded(state));
  std::vector<double> leaves;
  std::vector<uint64_t> step_keys;
  for (uint64_t key = oldest; key < next_key; ++key) {
    const int64_t slot = items.SlotOf(key);
    double leaf = 0.0;
    if (slot >= 0) (void)items.tree().Get(std::span<const int64_t>(&slot, 1), std::span<double>(&leaf, 1));
    leaves.push_back(leaf);
    uint64_t step = 0;
    if (slot >= 0) std::memcpy(&step, items.store().Rows(0, slot, 1).data(), sizeof(step));
    step_keys.push_back(step);
  }
  const auto text = [](std::span<const std::byte> bytes) {
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  parts.emplace_back("leaves.bin", text(BytesOf(leaves)));
  if (transitions) {
    // Each transition's columns: the step's, key for key.
    for (size_t c = 0; c < ring.schema().columns.size(); ++c) {
      std::string column;
      for (uint64_t key = oldest; key < next_key; ++key) {
        column += text({ring.Row(static_cast<int>(c), key), static_cast<size_t>(ring.schema().columns[c].ItemBytes())});
      }
      parts.emplace_back(fmt::format("column-{}.bin", c), column);
    }
  } else {
    parts.emplace_back("column-0.bin", text(BytesOf(step_keys)));
    service::StepCheckpointState steps;
    steps.flags = service::StepFlags(table, format);
    steps.next_key = ring.next_key();
    for (int s = 0; s < ring.streams(); ++s) {
      steps.stream_steps.push_back(ring.stream_steps(s));
      steps.next_episode_start.push_back(ring.next_episode_start(s));
    }
    parts.emplace_back(service::kStepStateFile, Encoded(steps));
    std::vector<int64_t> info;
    for (uint64_t key = ring.oldest_key(); key < ring.next_key(); ++key) {
      const store::StepInfo& step = ring.Info(key);
      info.insert(info.end(), {step.stream, step.index, step.episode_start});
    }
    parts.emplace_back(service::kStepInfoFile, text(BytesOf(info)));
    for (size_t c = 0; c < ring.schema().columns.size(); ++c) {
      std::string column;
      for (uint64_t key = ring.oldest_key(); key < ring.next_key(); ++key) {
        column += text({ring.Row(static_cast<int>(c), key), static_cast<size_t>(ring.schema().columns[c].ItemBytes())});
      }
      parts.emplace_back(service::StepColumnFile(c), column);
    }
  }
  Bytes seed = {static_cast<std::byte>(kLegacyBit | (transitions ? 0 : kStepsBit) | (own_manifest ? kOwnManifestBit : 0))};
  std::string manifest = fmt::format("perserve-checkpoint {}\nshard 0 of 1\n", format);
  for (const auto& [name, bytes] : parts) {
    service::Hash64 hash;
    hash.Update(std::as_bytes(std::span(bytes.data(), bytes.size())));
    manifest += fmt::format("part {} {} {:016x}\n", name, bytes.size(), hash.Finish());
    const auto* at = std::find(std::begin(kCheckpointParts), std::end(kCheckpointParts), name);
    AppendCheckpointRecord(static_cast<uint8_t>(at - std::begin(kCheckpointParts)),
                           std::as_bytes(std::span(bytes.data(), bytes.size())), &seed);
  }
  manifest += "end\n";
  if (own_manifest) AppendCheckpointRecord(0, std::as_bytes(std::span(manifest.data(), manifest.size())), &seed);
  return seed;
}

// The table of ServiceSchema transitions holding `items` added (alternating
// streams, then every third priority updated).
std::unique_ptr<replay::StepReplay> Transitions(int64_t items) {
  std::unique_ptr<replay::StepReplay> table;
  if (!MakeTransitionServiceReplay(replay::ReplayOptions{64, 0.6, tree::Device::kCpu, 7}, &table)) return nullptr;
  for (int64_t first = 0; first < items; first += 16) {
    AddTransitions(table.get(), static_cast<int>((first / 16) % 2), first, std::min<int64_t>(16, items - first));
  }
  UpdateSome(table.get());
  return table;
}

// The n-step table after `rounds` appends (AppendSteps), every third priority updated.
std::unique_ptr<replay::StepReplay> NSteps(int rounds) {
  std::unique_ptr<replay::StepReplay> table;
  if (!MakeStepServiceReplay(replay::ReplayOptions{64, 0.6, tree::Device::kCpu, 7}, &table)) return nullptr;
  AppendSteps(table.get(), rounds);
  UpdateSome(table.get());
  return table;
}

std::map<std::string, Bytes> CheckpointSeeds() {
  const auto partly = Transitions(40), wrapped = Transitions(100), empty = Transitions(0);
  const auto steps_partly = NSteps(6), steps_wrapped = NSteps(40);
  if (!partly || !wrapped || !empty || !steps_partly || !steps_wrapped) return {};
  return {{"partly_filled_own_manifest", PackedCheckpoint(*partly, kOwnManifestBit)},
          {"partly_filled", PackedCheckpoint(*partly, 0)},
          {"wrapped_own_manifest", PackedCheckpoint(*wrapped, kOwnManifestBit)},
          {"wrapped", PackedCheckpoint(*wrapped, 0)},
          {"empty", PackedCheckpoint(*empty, 0)},
          {"steps_partly_filled", PackedCheckpoint(*steps_partly, kStepsBit)},
          {"steps_wrapped_own_manifest", PackedCheckpoint(*steps_wrapped, kStepsBit | kOwnManifestBit)},
          {"steps_wrapped", PackedCheckpoint(*steps_wrapped, kStepsBit)},
          {"format1_partly_filled", LegacyCheckpoint(*partly, false)},
          {"format1_wrapped_own_manifest", LegacyCheckpoint(*wrapped, true)},
          {"format2_partly_filled", LegacyCheckpoint(*steps_partly, false)},
          {"format2_wrapped_own_manifest", LegacyCheckpoint(*steps_wrapped, true)}};
}

bool WriteSeeds(const std::filesystem::path& dir, const std::map<std::string, Bytes>& seeds) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    std::fprintf(stderr, "fuzz_write_seeds: cannot create %s: %s\n", dir.c_str(), error.message().c_str());
    return false;
  }
  for (const auto& [name, bytes] : seeds) {
    std::ofstream file(dir / name, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!file) {
      std::fprintf(stderr, "fuzz_write_seeds: cannot write %s\n", (dir / name).c_str());
      return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace perserve::fuzz

int main(int argc, char** argv) {
  using namespace perserve::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_write_seeds <dir>\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const bool written = WriteSeeds(dir / "fuzz_frame", FrameSeeds()) &&
                       WriteSeeds(dir / "fuzz_service", ServiceSeeds()) &&
                       WriteSeeds(dir / "fuzz_step_service", StepServiceSeeds()) &&
                       WriteSeeds(dir / "fuzz_join", JoinSeeds()) &&
                       WriteSeeds(dir / "fuzz_checkpoint", CheckpointSeeds());
  return written ? 0 : 1;
}
