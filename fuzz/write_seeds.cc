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
//   fuzz_checkpoint  real checkpoints of a 64-item replay (partly filled,
//                 wrapped, with updated priorities), written by the
//                 server's CheckpointWriter, with their own MANIFEST and
//                 with one made to match; and checkpoints of step streams
//                 (partly filled and wrapped, with items evicted).
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
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fuzz/inputs.h"
#include "proto/codec.h"
#include "replay/replay.h"
#include "fuzz/step_replay_fixture.h"
#include "service/checkpoint/checkpoint.h"

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

Bytes AddFrame(uint64_t request_id, int64_t first_id, int64_t count, bool with_priorities) {
  const ServiceItems items = MakeServiceItems(first_id, count, with_priorities);
  return Frame(MessageKind::kAddRequest, request_id, proto::AddRequest{count, with_priorities},
               {std::as_bytes(std::span(items.ids)), std::as_bytes(std::span(items.tags)),
                std::as_bytes(std::span(items.priorities))});
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
  proto::AddRequest request{count, with_priorities};
  request.first_step = first_step;
  request.items = static_cast<int64_t>(items.size());
  return Frame(MessageKind::kAddRequest, request_id, request,
               {std::as_bytes(std::span(obs)), std::as_bytes(std::span(reward)), std::as_bytes(std::span(done)),
                std::as_bytes(std::span(items)), std::as_bytes(std::span(priorities))});
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
    proto::AddRequest request{count, true};
    request.columns_follow = true;
    AppendServiceRecord(kActor | control,
                        Frame(MessageKind::kAddRequest, id, request, {frame.bulk.last(priority_bytes)}), &apart);
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
  const std::string step_schemas = proto::SerializeServedSchemas(proto::ServedSchemas{true, frame_step, stacked, {}, {}});
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
      {"other_version", join(3, server, proto::kProtocolVersion + 1, small_schema.size(), small_schema)},
      {"unknown_role", join(4, 5, proto::kProtocolVersion, uint64_t{1} << 40, small_schema)},
      {"nan_capacity", join(0, server, proto::kProtocolVersion, small_schema.size(), small_schema, 0.6,
                            std::numeric_limits<double>::quiet_NaN())},
      {"too_many_servers", join(0, server, proto::kProtocolVersion, small_schema.size(), small_schema, 0.6, 1024, 1025)},
  };
}

// A checkpoint of a 64-item replay holding `items` added (then every third
// priority updated), packed as fuzz_checkpoint reads it: `own_manifest` with
// the writer's MANIFEST, else without one (the target makes it).
Bytes CheckpointSeed(int64_t items, bool own_manifest) {
  namespace fs = std::filesystem;
  std::unique_ptr<replay::Replay> replay;
  if (!replay::Replay::Create(replay::ReplayOptions{64, 0.6, tree::Device::kCpu, 7}, ServiceSchema(), &replay).ok()) {
    return {};
  }
  for (int64_t first = 0; first < items; first += 16) {
    const int64_t count = std::min<int64_t>(16, items - first);
    const ServiceItems added = MakeServiceItems(first, count, /*with_priorities=*/true);
    Bytes bulk;
    for (auto part : {std::as_bytes(std::span(added.ids)), std::as_bytes(std::span(added.tags))}) {
      bulk.insert(bulk.end(), part.begin(), part.end());
    }
    uint64_t first_key = 0;
    (void)replay->Add(count, bulk, added.priorities, &first_key);
  }
  std::vector<uint64_t> keys;
  for (uint64_t key = replay->oldest_key(); key < replay->next_key(); key += 3) keys.push_back(key);
  replay::UpdateCounts counts;
  (void)replay->UpdatePriorities(keys, std::vector<double>(keys.size(), 7.5), &counts);

  const fs::path dir = fs::temp_directory_path() / fmt::format("perserve-fuzz-seed-{}", ::getpid());
  std::error_code error;
  fs::remove_all(dir, error);
  service::CheckpointState state;
  state.schema = replay->store().schema().ToString();
  state.capacity = replay->capacity();
  state.alpha = replay->alpha();
  state.replay = replay->State();
  state.limiter = {items, 3 * items, true, -5.0, 12.0};
  state.episodes = {replay::EpisodeCarry{2.5, 0, 3.0, 0}, replay::EpisodeCarry{}};
  Bytes seed = {static_cast<std::byte>(own_manifest ? kOwnManifestBit : 0)};
  {
    service::CheckpointWriter writer(dir.string(), 0, 1, 64);
    if (!writer.Begin(*replay, state).ok()) return {};
    for (bool done = false; !done;) {
      if (!writer.Step(*replay, std::chrono::microseconds(1000), &done).ok()) return {};
    }
    for (size_t part = own_manifest ? 0 : 1; part < std::size(kCheckpointParts); ++part) {
      std::ifstream in(fs::path(writer.last_path()) / kCheckpointParts[part], std::ios::binary);
      if (!in) continue;  // a step ring's part: none here
      const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      AppendCheckpointRecord(static_cast<uint8_t>(part), std::as_bytes(std::span(bytes.data(), bytes.size())), &seed);
    }
  }
  fs::remove_all(dir, error);
  return seed;
}

// A checkpoint of fuzz/step_replay_fixture.h's step replay after `rounds`
// appends of 3 steps (every fifth ending an episode) alternating between the
// two streams, each creating the items its steps completed, packed with the
// steps bit.
Bytes StepCheckpointSeed(int rounds, bool own_manifest) {
  namespace fs = std::filesystem;
  std::unique_ptr<replay::Replay> items;
  std::unique_ptr<replay::StepReplay> steps;
  if (!MakeStepServiceReplay(replay::ReplayOptions{64, 0.6, tree::Device::kCpu, 7}, &items, &steps)) return {};
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
  const fs::path dir = fs::temp_directory_path() / fmt::format("perserve-fuzz-step-seed-{}", ::getpid());
  std::error_code error;
  fs::remove_all(dir, error);
  service::CheckpointState state;
  state.schema = items->store().schema().ToString();
  state.capacity = items->capacity();
  state.alpha = items->alpha();
  state.replay = items->State();
  Bytes seed = {static_cast<std::byte>(kStepsBit | (own_manifest ? kOwnManifestBit : 0))};
  {
    service::CheckpointWriter writer(dir.string(), 0, 1, 64);
    if (!writer.Begin(*items, state, steps.get()).ok()) return {};
    for (bool done = false; !done;) {
      if (!writer.Step(*items, std::chrono::microseconds(1000), &done).ok()) return {};
    }
    for (size_t part = own_manifest ? 0 : 1; part < std::size(kCheckpointParts); ++part) {
      std::ifstream in(fs::path(writer.last_path()) / kCheckpointParts[part], std::ios::binary);
      if (!in) continue;  // a schema of fewer columns
      const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      AppendCheckpointRecord(static_cast<uint8_t>(part), std::as_bytes(std::span(bytes.data(), bytes.size())), &seed);
    }
  }
  fs::remove_all(dir, error);
  return seed;
}

std::map<std::string, Bytes> CheckpointSeeds() {
  return {{"partly_filled_own_manifest", CheckpointSeed(40, true)},
          {"partly_filled", CheckpointSeed(40, false)},
          {"wrapped_own_manifest", CheckpointSeed(100, true)},
          {"wrapped", CheckpointSeed(100, false)},
          {"empty", CheckpointSeed(0, false)},
          {"steps_partly_filled", StepCheckpointSeed(6, false)},
          {"steps_wrapped_own_manifest", StepCheckpointSeed(40, true)},
          {"steps_wrapped", StepCheckpointSeed(40, false)}};
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
