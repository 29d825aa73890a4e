// Clients for the multi-rank tests, run under mpirun beside a real
// perserve-server (tests/CMakeLists.txt has the command lines). Each scenario
// checks what it is about and exits non-zero on the first failure, which
// fails the whole mpirun and so the ctest entry.
//
//   end_to_end  actors add patterned items; the learner's first sample waits
//               for min size; every byte sampled for a key is what the actor
//               sent for it; after priority updates the draws follow them.
//   stale       updates for keys whose items were overwritten are dropped.
//   bad_input   a raw client sends broken frames: each gets its typed error,
//               the server keeps serving, and nothing rejected is applied.
//   flood       one actor floods; another actor and the learner stay served
//               within a stated bound.
//   overwrite   actors add patterned items into a small ring as fast as they
//               can while the learner samples, each reply awaited and so
//               sent from the store (--zero-copy-min-row-bytes 0), one actor
//               sending its columns apart (received into the store), the
//               other in one message: every row is whole and belongs to its
//               key, though intake wraps the ring many times over meanwhile.
//   held_columns  adds of 8 KiB rows (columns apart) that the rate limiter
//               holds while the stats line describes them: every row a
//               learner draws is its key's (issue 24, defect 1).
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "mpi/communicator.h"
#include "mpi/send_queue.h"
#include "perserve/client.h"
#include "raw_client.h"

namespace {

using perserve::Status;
using Clock = std::chrono::steady_clock;

using perserve::mpi_test::Frame;
using perserve::mpi_test::RawClient;

int rank = -1;

// The end_to_end schema (server flags: --column id:int64 --column payload:uint8:37 --column value:float64:3):
// every byte of an item is a function of its id.
constexpr int kPayload = 37;
uint8_t PayloadByte(int64_t id, int b) { return static_cast<uint8_t>((id * 31 + b) & 0xff); }
double ValueAt(int64_t id, int e) { return static_cast<double>(id) + 0.25 * e; }

void AddPatterned(perserve::ActorClient* actor, int64_t first_id, int64_t count, int64_t batch) {
  for (int64_t start = 0; start < count; start += batch) {
    const int64_t n = std::min(batch, count - start);
    std::vector<int64_t> ids(n);
    std::vector<uint8_t> payload(n * kPayload);
    std::vector<double> values(n * 3);
    for (int64_t j = 0; j < n; ++j) {
      ids[j] = first_id + start + j;
      for (int b = 0; b < kPayload; ++b) payload[j * kPayload + b] = PayloadByte(ids[j], b);
      for (int e = 0; e < 3; ++e) values[j * 3 + e] = ValueAt(ids[j], e);
    }
    CHECK_OK(actor->Add(perserve::BatchView{n, {ids.data(), payload.data(), values.data()}},
                        std::vector<double>(n, 1.0)));
  }
}

// Every row of `batch` is whole (its payload and values are its id's) and
// each key always comes back as the same id.
void CheckPatternedRows(const perserve::SampleBatch& batch, std::map<uint64_t, int64_t>* id_of_key) {
  for (int64_t i = 0; i < batch.size; ++i) {
    int64_t id;
    std::memcpy(&id, batch.columns[0].data() + 8 * i, 8);
    for (int b = 0; b < kPayload; ++b) {
      CHECK(static_cast<uint8_t>(batch.columns[1][i * kPayload + b]) == PayloadByte(id, b), "payload of id {}", id);
    }
    for (int e = 0; e < 3; ++e) {
      double value;
      std::memcpy(&value, batch.columns[2].data() + (i * 3 + e) * 8, 8);
      CHECK(value == ValueAt(id, e), "value of id {}", id);
    }
    const auto [it, inserted] = id_of_key->emplace(batch.keys[i], id);
    CHECK(it->second == id, "key {} came back as id {} and as id {}", batch.keys[i], it->second, id);
    CHECK(batch.weights[i] > 0.0 && batch.weights[i] <= 1.0 + 1e-12, "weight {}", batch.weights[i]);
  }
}

int EndToEndActor() {
  std::unique_ptr<perserve::ActorClient> actor;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor));
  CHECK(actor->schema().ToString() == "id:int64:;payload:uint8:37;value:float64:3", "schema {}",
        actor->schema().ToString());
  AddPatterned(actor.get(), int64_t{rank} * 1000000, 1000, 50);
  CHECK_OK(actor->Close());
  CHECK(actor->items_acknowledged() == 1000, "acknowledged {}", actor->items_acknowledged());
  return 0;
}

int EndToEndLearner(int64_t total) {
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, {}, &learner));
  std::map<uint64_t, int64_t> id_of_key;
  perserve::SampleBatch batch;
  // The server's --min-size-to-sample is `total`: this first reply is held back until every item is in.
  // Each round sends its priorities back without waiting, so the next sample's wait meets the update's
  // acknowledgement first: it is kept aside and the reply still lands in the batch's buffer.
  const std::byte* received_into = nullptr;
  for (int round = 0; round < 100; ++round) {
    CHECK_OK(learner->Sample(64, 0.4, &batch));
    CHECK(batch.size == 64 && batch.columns.size() == 3, "size {}", batch.size);
    for (int64_t i = 0; i < batch.size; ++i) {
      CHECK(batch.keys[i] < static_cast<uint64_t>(total), "key {} of {}", batch.keys[i], total);
    }
    CheckPatternedRows(batch, &id_of_key);
    if (round == 0) received_into = batch.message.data();
    CHECK(batch.message.data() == received_into, "round {}: the reply landed in a new buffer", round);
    CHECK_OK(learner->SendPriorityUpdate(batch.keys, std::vector<double>(batch.keys.size(), 1.0)));
  }
  CHECK_OK(learner->Flush());
  // New priorities by key class: key % 4 = c gets priority c + 1 (alpha 1 on the server).
  std::vector<uint64_t> keys(total);
  std::vector<double> priorities(total);
  for (int64_t k = 0; k < total; ++k) {
    keys[k] = static_cast<uint64_t>(k);
    priorities[k] = static_cast<double>(k % 4 + 1);
  }
  perserve::UpdateResult result;
  CHECK_OK(learner->UpdatePriorities(keys, priorities, &result));
  CHECK(result.applied == total && result.stale == 0, "applied {} stale {}", result.applied, result.stale);
  std::vector<double> counts(4, 0.0);
  const int rounds = 200, size = 256;
  for (int round = 0; round < rounds; ++round) {
    CHECK_OK(learner->Sample(size, 0.4, &batch));
    for (uint64_t key : batch.keys) counts[key % 4] += 1.0;
  }
  double chi_square = 0.0;
  for (int c = 0; c < 4; ++c) {
    const double expected = rounds * size * (c + 1) / 10.0;
    chi_square += (counts[c] - expected) * (counts[c] - expected) / expected;
  }
  CHECK(chi_square < 16.27, "chi-square {} over 3 dof: {} {} {} {}", chi_square, counts[0], counts[1], counts[2],
        counts[3]);
  CHECK_OK(learner->Close());
  fmt::print("[rank {}] end_to_end: {} keys checked byte for byte, class frequencies chi-square {:.2f}\n", rank,
             id_of_key.size(), chi_square);
  return 0;
}

// One rank over MPI_COMM_SELF: mpi::ReceiveGrowing's buffer only grows (a
// small message after a large one lands in the same memory, the large one's
// bytes behind it untouched), and SendQueue hands a completed send's buffer
// back by size: a frame estimated a few bytes over the small buffer's
// capacity takes the small one, not the large one it would shrink.
int BuffersSelf() {
  constexpr size_t kLarge = size_t{3} << 20, kSmall = 450;
  perserve::mpi::SendQueue sends;
  std::vector<std::byte> large(kLarge, std::byte{1}), small(kSmall, std::byte{2});
  const std::byte* large_data = large.data();
  const std::byte* small_data = small.data();
  CHECK_OK(sends.Send(std::move(large), 0, 1, MPI_COMM_SELF));
  CHECK_OK(sends.Send(std::move(small), 0, 1, MPI_COMM_SELF));
  std::vector<std::byte> buffer;
  size_t length = 0;
  bool received = false;
  CHECK_OK(perserve::mpi::ReceiveGrowing(MPI_COMM_SELF, 0, 1, /*wait=*/true, &buffer, &length, &received));
  CHECK(received && length == kLarge && buffer.size() == kLarge, "length {} size {}", length, buffer.size());
  const std::byte* receives_into = buffer.data();
  CHECK_OK(perserve::mpi::ReceiveGrowing(MPI_COMM_SELF, 0, 1, /*wait=*/true, &buffer, &length, &received));
  CHECK(received && length == kSmall && buffer.size() == kLarge && buffer.data() == receives_into,
        "length {} size {} moved {}", length, buffer.size(), buffer.data() != receives_into);
  CHECK(buffer[0] == std::byte{2} && buffer[kSmall - 1] == std::byte{2} && buffer[kSmall] == std::byte{1},
        "the small message's bytes, then the large one's");
  for (int i = 0; i < 1000 && sends.in_flight() > 0; ++i) CHECK_OK(sends.Progress());
  CHECK(sends.in_flight() == 0, "{} sends still in flight", sends.in_flight());
  const std::vector<std::byte> frame = sends.Acquire(kSmall + 14);
  CHECK(frame.data() == small_data, "a {}-byte frame took the {}-byte buffer", kSmall + 14, frame.capacity());
  const std::vector<std::byte> columns = sends.Acquire(kLarge);
  CHECK(columns.data() == large_data && columns.size() == kLarge, "size {}", columns.size());
  fmt::print("[rank {}] buffers: received into one growing buffer, recycled by size\n", rank);
  return 0;
}

// One rank over MPI_COMM_SELF: while mpi::StopWaiting's `paused` returns
// true (the server from SIGTERM until its final checkpoint is complete),
// ReceiveGrowing takes nothing (the message stays for later), and
// ReceiveMatched gives a matched message up at once, unreceived, with
// UNAVAILABLE; `terminating` alone still lets a message complete.
int PausedSelf() {
  constexpr int kTag = 7;
  constexpr size_t kBytes = 100;
  bool paused = true;
  const perserve::mpi::StopWaiting stop_waiting{.terminating = [] { return true; },
                                                .paused = [&paused] { return paused; }};
  for (int i = 0; i < 2; ++i) {
    const std::vector<std::byte> message(kBytes, std::byte{static_cast<unsigned char>(i + 1)});
    CHECK(MPI_Send(message.data(), static_cast<int>(kBytes), MPI_BYTE, 0, kTag, MPI_COMM_SELF) == MPI_SUCCESS,
          "MPI_Send to self");
  }
  std::vector<std::byte> buffer;
  size_t length = 0;
  bool received = true;
  CHECK_OK(perserve::mpi::ReceiveGrowing(MPI_COMM_SELF, 0, kTag, /*wait=*/false, &buffer, &length, &received,
                                         nullptr, stop_waiting));
  CHECK(!received && buffer.empty(), "received {} while paused", received);
  int waiting = 0;
  CHECK(MPI_Iprobe(0, kTag, MPI_COMM_SELF, &waiting, MPI_STATUS_IGNORE) == MPI_SUCCESS && waiting,
        "the first message is still there");

  MPI_Message matched = MPI_MESSAGE_NULL;
  CHECK(MPI_Mprobe(0, kTag, MPI_COMM_SELF, &matched, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Mprobe");
  std::vector<std::byte> into(kBytes, std::byte{0});
  const perserve::Status given_up = perserve::mpi::ReceiveMatched(&matched, into.data(), static_cast<int>(kBytes),
                                                                   MPI_BYTE, stop_waiting);
  CHECK(given_up.code() == perserve::Status::Code::kUnavailable &&
            given_up.message().find("until its final checkpoint is complete") != std::string::npos,
        "{}", given_up.ToString());
  CHECK(matched == MPI_MESSAGE_NULL && into[0] == std::byte{0}, "the matched message was given up unreceived");

  paused = false;  // terminating only: a message that is all there completes
  CHECK_OK(perserve::mpi::ReceiveGrowing(MPI_COMM_SELF, 0, kTag, /*wait=*/false, &buffer, &length, &received,
                                         nullptr, stop_waiting));
  CHECK(received && length == kBytes && buffer[0] == std::byte{2}, "received {} length {}", received, length);
  fmt::print("[rank {}] paused: nothing taken while paused, a matched message given up unreceived\n", rank);
  return 0;
}

int StaleActor() {
  std::unique_ptr<perserve::ActorClient> actor;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor));
  AddPatterned(actor.get(), 0, 1000, 10);
  CHECK_OK(actor->Close());
  return 0;
}

int StaleLearner() {
  // Server: --capacity 100 --min-size-to-sample 100, so keys 0..99 exist when the first sample returns.
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, {}, &learner));
  perserve::SampleBatch batch;
  uint64_t newest = 0;
  while (newest < 110) {  // key 110 exists only once keys 0..10 have been overwritten
    CHECK_OK(learner->Sample(16, 0.4, &batch));
    for (uint64_t key : batch.keys) newest = std::max(newest, key);
  }
  const std::vector<uint64_t> old_keys = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  perserve::UpdateResult result;
  CHECK_OK(learner->UpdatePriorities(old_keys, std::vector<double>(10, 5.0), &result));
  CHECK(result.stale == 10 && result.applied == 0, "applied {} stale {}", result.applied, result.stale);
  const Status unknown = learner->UpdatePriorities(std::vector<uint64_t>{1u << 30}, std::vector<double>{1.0});
  CHECK(unknown.code() == Status::Code::kNotFound, "{}", unknown.ToString());
  CHECK_OK(learner->Close());
  fmt::print("[rank {}] stale: 10 updates for overwritten keys dropped and counted\n", rank);
  return 0;
}

int BadInputClient() {
  using perserve::proto::MessageKind;
  RawClient raw;
  raw.Join();
  const int64_t item_bytes = raw.schema().ItemBytes();  // the default schema: 45
  const std::vector<std::byte> two_items(2 * item_bytes, std::byte{1});
  const std::vector<std::byte> short_items(2 * item_bytes - 1, std::byte{1});
  const std::vector<double> nan_priorities = {1.0, std::nan("")};
  const std::vector<double> negative = {-1.0, 1.0};
  using perserve::mpi_test::AddFrame;
  std::vector<std::byte> wrong_version = AddFrame(3, 0, 2, two_items);
  const uint16_t version = perserve::proto::kProtocolVersion + 1;
  std::memcpy(wrong_version.data() + 4, &version, 2);
  std::vector<std::byte> truncated = AddFrame(4, 0, 2, two_items);
  truncated.resize(truncated.size() / 2);

  CHECK(raw.ErrorOf(std::vector<std::byte>(5, std::byte{0x7f})) == Status::Code::kInvalidArgument, "garbage");
  CHECK(raw.ErrorOf(AddFrame(2, 0, 2, two_items), /*tag=*/12345) == Status::Code::kUnimplemented,
        "unknown tag");
  CHECK(raw.ErrorOf(std::vector<std::byte>(100, std::byte{0x11})) == Status::Code::kInvalidArgument, "bad magic");
  CHECK(raw.ErrorOf(wrong_version) == Status::Code::kFailedPrecondition, "wrong version");
  CHECK(raw.ErrorOf(truncated) == Status::Code::kInvalidArgument, "truncated");
  CHECK(raw.ErrorOf(Frame(static_cast<MessageKind>(99), 5, perserve::proto::Empty{})) ==
            Status::Code::kUnimplemented, "unknown kind");
  CHECK(raw.ErrorOf(AddFrame(6, 0, 2, short_items)) == Status::Code::kInvalidArgument,
        "wrong column sizes");
  CHECK(raw.ErrorOf(AddFrame(7, 0, 2, two_items, nan_priorities)) == Status::Code::kInvalidArgument, "NaN priority");
  CHECK(raw.ErrorOf(AddFrame(8, 0, 2, two_items, negative)) == Status::Code::kInvalidArgument, "negative priority");
  CHECK(raw.ErrorOf(AddFrame(12, 5, 2, two_items)) == Status::Code::kFailedPrecondition, "a step index past the stream's");
  const std::vector<uint64_t> unknown_key = {12345};
  const std::vector<double> one = {1.0};
  CHECK(raw.ErrorOf(Frame(MessageKind::kUpdateRequest, 9, perserve::proto::UpdateRequest{1},
                          {std::as_bytes(std::span(unknown_key)), std::as_bytes(std::span(one))})) ==
            Status::Code::kNotFound, "unknown key");

  // Still serving, and nothing of the rejected adds was stored: the first key issued is 0.
  const perserve::proto::Frame added = raw.Exchange(AddFrame(10, 0, 2, two_items));
  CHECK(added.kind() == MessageKind::kAddReply, "kind {}", added.header.kind);
  perserve::proto::AddReply reply;
  CHECK_OK(perserve::proto::DecodeMeta(added, &reply));
  CHECK(reply.first_key == 0 && reply.count == 2, "first key {} count {}", reply.first_key, reply.count);
  const perserve::proto::Frame closed = raw.Exchange(Frame(MessageKind::kCloseRequest, 11, perserve::proto::Empty{}));
  CHECK(closed.kind() == MessageKind::kCloseReply, "kind {}", closed.header.kind);
  fmt::print("[rank {}] bad_input: 11 broken requests answered with their errors, server still serving\n", rank);
  return 0;
}

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The stated bound, independent of how loaded the machine is: while one actor
// floods (6000 batches of 200 as fast as the server takes them), the quiet
// actor's 40 add+flush round trips and the learner's 40 samples all finish
// before the flood does -- nobody waits for the flood to end (the service's
// guarantee is one round-robin pass; tests/server/service checks that exactly).
// As a sanity bound, no single request takes over 10 s. Finish times are
// steady_clock readings, one clock for all ranks on one machine. Ranks (see
// tests/CMakeLists.txt): 0 server, 1 flooder, 2 quiet actor, 3 learner.
constexpr double kSanityBoundMillis = 10000.0;
constexpr int kFinishTag = 990;

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

void ReportFinish() {
  const int64_t finished = NowNanos();
  CHECK(MPI_Send(&finished, 1, MPI_INT64_T, 1, kFinishTag, MPI_COMM_WORLD) == MPI_SUCCESS, "send finish time");
}

int FloodActor(bool flooder) {
  std::unique_ptr<perserve::ActorClient> actor;
  perserve::ClientOptions options;
  options.max_in_flight = flooder ? 32 : 1;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, options, &actor));
  std::vector<std::vector<std::byte>> columns;
  perserve::BatchView batch{flooder ? 200 : 1, {}};
  for (const auto& column : actor->schema().columns) {
    columns.emplace_back(static_cast<size_t>(batch.size * column.ItemBytes()), std::byte{3});
    batch.columns.push_back(columns.back().data());
  }
  double worst = 0.0;
  const int batches = flooder ? 6000 : 40;
  for (int i = 0; i < batches; ++i) {
    const auto start = Clock::now();
    CHECK_OK(actor->Add(batch));
    if (!flooder) {
      CHECK_OK(actor->Flush());
      worst = std::max(worst, MillisSince(start));
    }
  }
  CHECK_OK(actor->Flush());
  const int64_t flood_end = NowNanos();
  CHECK_OK(actor->Close());
  if (!flooder) {
    CHECK(worst < kSanityBoundMillis, "an add took {:.1f} ms under a flood", worst);
    ReportFinish();
    fmt::print("[rank {}] flood: slowest add+flush of the quiet actor {:.2f} ms\n", rank, worst);
    return 0;
  }
  for (int other = 0; other < 2; ++other) {
    int64_t finished = 0;
    MPI_Status status;
    CHECK(MPI_Recv(&finished, 1, MPI_INT64_T, MPI_ANY_SOURCE, kFinishTag, MPI_COMM_WORLD, &status) == MPI_SUCCESS,
          "receive finish time");
    CHECK(finished < flood_end, "rank {} finished {:.1f} ms after the flood ended: it waited for the flood",
          status.MPI_SOURCE, (finished - flood_end) / 1e6);
    fmt::print("[rank {}] flood: rank {} finished {:.1f} ms before the flood ended\n", rank, status.MPI_SOURCE,
               (flood_end - finished) / 1e6);
  }
  return 0;
}

// Enough for adds to meet replies in flight in every run, sanitizers on too
// (with 5000 about one run in ten under ASan saw none).
constexpr int64_t kOverwriteItems = 20000;  // each of the two actors: the ring of 256 wraps 156 times

int OverwriteActor() {
  std::unique_ptr<perserve::ActorClient> actor;
  perserve::ClientOptions options;
  options.columns_apart_min_bytes = rank % 2 == 0 ? 0 : -1;  // one actor's columns apart, straight into the store
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, options, &actor));
  AddPatterned(actor.get(), int64_t{rank} * 1000000, kOverwriteItems, 50);
  CHECK_OK(actor->Close());
  CHECK(actor->items_acknowledged() == kOverwriteItems, "acknowledged {}", actor->items_acknowledged());
  return 0;
}

// Samples until every actor has closed (the replay then stops growing),
// pausing now and then. Without prefetch: every reply is awaited, so its rows
// go from the store (prefetched ones are copied: docs/operations.md).
int OverwriteLearner() {
  std::unique_ptr<perserve::LearnerClient> learner;
  perserve::ClientOptions options;
  options.prefetch = 0;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, options, &learner));
  std::map<uint64_t, int64_t> id_of_key;
  perserve::SampleBatch batch;
  perserve::ReplayInfo info;
  int64_t rows = 0;
  for (int round = 0; round < 100000; ++round) {
    CHECK_OK(learner->Sample(512, 0.4, &batch));  // 47 KB: over the eager limit, its rows read as it travels
    CheckPatternedRows(batch, &id_of_key);
    rows += batch.size;
    if (round % 16 == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // replies stay unread while intake goes on
      CHECK_OK(learner->Info(&info));
      if (info.items_added == 2 * kOverwriteItems) break;
    }
  }
  CHECK(info.items_added == 2 * kOverwriteItems, "the actors added {} items", info.items_added);
  fmt::print("[rank {}] overwrite: {} rows checked, {} keys, while {} items went through a ring of 256\n", rank, rows,
             id_of_key.size(), info.items_added);
  CHECK_OK(learner->Close());
  return 0;
}

// AddBorrowed's rule, where it can fail: batches of 8 rows of 8 KiB (64 KiB,
// over the eager limit, so MPI reads the actor's buffers while the columns
// travel, not when the add returns), 5 sets of buffers in turn (max_in_flight
// 4 + 1), each refilled as soon as the rule allows (with 1 or 4 sets the
// learner finds rows of other ids). Server flags: --column id:int64 --column
// payload:uint8:8192 --capacity 64 --min-size-to-sample 64.
constexpr int kLentPayload = 8192;
constexpr int64_t kLentItems = 4000;

// Adds ids 0 .. items - 1 in batches of 8 rows of 8 KiB (64 KiB: their
// columns go apart), filling `buffers` sets of buffers in turn; lent
// (AddBorrowed) or copied (Add).
int PayloadActor(int64_t items, int buffers, bool lent) {
  std::unique_ptr<perserve::ActorClient> actor;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor));
  constexpr int64_t kBatch = 8;
  std::vector<std::vector<int64_t>> ids(buffers, std::vector<int64_t>(kBatch));
  std::vector<std::vector<uint8_t>> payloads(buffers, std::vector<uint8_t>(kBatch * kLentPayload));
  for (int64_t start = 0, round = 0; start < items; start += kBatch, ++round) {
    const size_t set = static_cast<size_t>(round % buffers);
    for (int64_t j = 0; j < kBatch; ++j) {
      ids[set][j] = start + j;
      for (int b = 0; b < kLentPayload; ++b) payloads[set][j * kLentPayload + b] = PayloadByte(start + j, b);
    }
    const perserve::ColumnSpans batch{kBatch,
                                      {std::as_bytes(std::span(ids[set])), std::as_bytes(std::span(payloads[set]))}};
    CHECK_OK(lent ? actor->AddBorrowed(batch) : actor->Add(batch));
  }
  CHECK_OK(actor->Close());
  CHECK(actor->items_acknowledged() == items, "acknowledged {}", actor->items_acknowledged());
  return 0;
}

int LentLearner() {
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, {}, &learner));
  perserve::SampleBatch batch;
  perserve::ReplayInfo info;
  int64_t rows = 0;
  while (true) {
    CHECK_OK(learner->Info(&info));
    const bool last = info.items_added == kLentItems;
    CHECK_OK(learner->Sample(32, 0.4, &batch));
    for (int64_t i = 0; i < batch.size; ++i) {
      int64_t id = 0;
      std::memcpy(&id, batch.columns[0].data() + i * 8, 8);
      CHECK(id >= 0 && id < kLentItems, "id {}", id);
      const std::byte* payload = batch.columns[1].data() + i * kLentPayload;
      for (int b = 0; b < kLentPayload; ++b) {
        CHECK(payload[b] == std::byte{PayloadByte(id, b)}, "payload byte {} of id {}: the actor's buffer changed "
              "before its columns were sent", b, id);
      }
    }
    rows += batch.size;
    if (last) break;
  }
  fmt::print("[rank {}] lent: {} rows of 8 KiB checked, sent from the actor's own buffers\n", rank, rows);
  CHECK_OK(learner->Close());
  return 0;
}

// Issue 24's recipe for defect 1 (server flags: --column id:int64 --column
// payload:uint8:8192 --samples-per-insert 1 --error-buffer 40
// --messages-per-client-pass 1 --stats-interval 1e-6): 16 adds of 8 rows,
// 64 KiB each, so their columns come apart (PayloadActor); one actor, so key
// k holds id k.
constexpr int64_t kHeldColumnsItems = 128;

// Samples as the rate limiter lets it until every add is in; the last sample
// may be refused FAILED_PRECONDITION (the actor has closed, the limiter holds it).
int HeldColumnsLearner() {
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, {}, &learner));
  perserve::SampleBatch batch;
  perserve::ReplayInfo info;
  int64_t rows = 0, wrong = 0;
  while (true) {
    CHECK_OK(learner->Info(&info));
    const bool all_in = info.items_added == kHeldColumnsItems;
    const Status sampled = learner->Sample(8, 0.4, &batch);
    if (all_in && sampled.code() == Status::Code::kFailedPrecondition) break;
    CHECK_OK(sampled);
    for (int64_t i = 0; i < batch.size; ++i) {
      int64_t id = 0;
      std::memcpy(&id, batch.columns[0].data() + i * 8, 8);
      wrong += static_cast<uint64_t>(id) != batch.keys[i];
      const std::byte* payload = batch.columns[1].data() + i * kLentPayload;
      for (int b = 0; b < kLentPayload; ++b) CHECK(payload[b] == std::byte{PayloadByte(id, b)}, "payload of id {}", id);
    }
    rows += batch.size;
    if (all_in) break;
  }
  CHECK(wrong == 0, "{} of {} sampled rows hold another key's id: an add's columns were stored under another add",
        wrong, rows);
  fmt::print("[rank {}] held_columns: {} rows checked, each its key's\n", rank, rows);
  CHECK_OK(learner->Close());
  return 0;
}

int FloodLearner() {
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, {}, &learner));
  perserve::SampleBatch batch;
  CHECK_OK(learner->Sample(64, 0.4, &batch));  // waits for the first data
  double worst = 0.0;
  for (int i = 0; i < 40; ++i) {
    const auto start = Clock::now();
    CHECK_OK(learner->Sample(64, 0.4, &batch));
    worst = std::max(worst, MillisSince(start));
  }
  CHECK(worst < kSanityBoundMillis, "a sample took {:.1f} ms under a flood", worst);
  ReportFinish();
  CHECK_OK(learner->Close());
  fmt::print("[rank {}] flood: slowest sample of 64 {:.2f} ms\n", rank, worst);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string scenario = argc > 1 ? argv[1] : "";
  const std::string role = argc > 2 ? argv[2] : "";
  int code = 2;
  if (scenario == "end_to_end" && role == "actor") code = EndToEndActor();
  if (scenario == "end_to_end" && role == "learner") code = EndToEndLearner(argc > 3 ? std::atoll(argv[3]) : 2000);
  if (scenario == "buffers" && role == "self") code = BuffersSelf();
  if (scenario == "paused" && role == "self") code = PausedSelf();
  if (scenario == "lent" && role == "actor") code = PayloadActor(kLentItems, argc > 3 ? std::atoi(argv[3]) : 5, true);
  if (scenario == "lent" && role == "learner") code = LentLearner();
  if (scenario == "stale" && role == "actor") code = StaleActor();
  if (scenario == "stale" && role == "learner") code = StaleLearner();
  if (scenario == "bad_input" && role == "raw") code = BadInputClient();
  if (scenario == "bad_input" && role == "bystander") code = perserve::JoinAsBystander(MPI_COMM_WORLD).ok() ? 0 : 1;
  if (scenario == "flood" && role == "flooder") code = FloodActor(true);
  if (scenario == "flood" && role == "actor") code = FloodActor(false);
  if (scenario == "flood" && role == "learner") code = FloodLearner();
  if (scenario == "overwrite" && role == "actor") code = OverwriteActor();
  if (scenario == "overwrite" && role == "learner") code = OverwriteLearner();
  if (scenario == "held_columns" && role == "actor") code = PayloadActor(kHeldColumnsItems, 1, false);
  if (scenario == "held_columns" && role == "learner") code = HeldColumnsLearner();
  if (code == 2) fmt::print(stderr, "usage: mpi_test_client <scenario> <role>\n");
  MPI_Finalize();
  return code;
}
