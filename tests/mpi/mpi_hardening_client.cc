// Hardening regressions (issue 11) under mpirun, beside a real perserve-server
// or a rank that plays a broken one (tests/CMakeLists.txt has the command
// lines). Each scenario exits non-zero on the first failed check.
//
//   huge_reply  (server --column obs:uint8:2090) a sample of 1,015,839 items
//               would be a reply of 2,147,483,686 bytes, just over MPI's
//               int count: it used to kill the server (a failed send was
//               fatal). Now an INVALID_ARGUMENT, and the server serves on.
//   unread      (server --column obs:uint8:65536 --max-unread-sample-replies 2)
//               30 sample requests of 4 MiB replies, none read for a while:
//               two replies go out, 16 wait, 12 are refused with
//               RESOURCE_EXHAUSTED; reading lets the waiting 16 out, in order.
//   bad_join    rank 0 plays a broken server in the join (a schema length of
//               2^62, a schema that does not decode, or an unknown role); an
//               actor (C++) and a learner (C ABI) get an error naming it, and
//               every rank ends normally (it used to be SIGABRT everywhere).
#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "perserve/client.h"
#include "perserve/client_c.h"
#include "proto/codec.h"
#include "raw_client.h"

namespace {

using perserve::Status;
using perserve::mpi_test::Frame;
using perserve::mpi_test::RawClient;
using perserve::proto::MessageKind;

using perserve::mpi_test::Contains;

// The sender's first add (its stream from step 0): `count` rows of 7s.
std::vector<std::byte> AddFrame(uint64_t request_id, int64_t count, int64_t item_bytes) {
  const std::vector<std::byte> rows(static_cast<size_t>(count * item_bytes), std::byte{7});
  return perserve::mpi_test::AddFrame(request_id, 0, count, rows);
}

std::vector<std::byte> SampleFrame(uint64_t request_id, int64_t batch_size) {
  return Frame(MessageKind::kSampleRequest, request_id, perserve::proto::SampleRequest{batch_size, 0.5});
}

void ExpectAdded(RawClient& raw, int64_t count) {
  const perserve::proto::Frame reply = raw.Receive();
  CHECK(reply.kind() == MessageKind::kAddReply, "kind {}", reply.header.kind);
  perserve::proto::AddReply added;
  CHECK_OK(perserve::proto::DecodeMeta(reply, &added));
  CHECK(added.count == count, "added {}", added.count);
}

void Close(RawClient& raw) {
  const perserve::proto::Frame closed = raw.Exchange(Frame(MessageKind::kCloseRequest, 999, perserve::proto::Empty{}));
  CHECK(closed.kind() == MessageKind::kCloseReply, "kind {}", closed.header.kind);
}

int HugeReply() {
  RawClient raw;
  raw.Join();
  const int64_t item_bytes = raw.schema().ItemBytes();
  CHECK(item_bytes == 2090, "the server's item is {} bytes; run it with --column obs:uint8:2090", item_bytes);
  raw.Send(AddFrame(1, 1, item_bytes));
  ExpectAdded(raw, 1);
  const Status refused = RawClient::ErrorIn(raw.Exchange(SampleFrame(2, 1'015'839)));
  CHECK(refused.code() == Status::Code::kInvalidArgument, "{}", refused.ToString());
  CHECK(Contains(refused.message(), "a 2147483686-byte reply, over MPI's 2 GiB"), "{}", refused.ToString());
  const perserve::proto::Frame sample = raw.Exchange(SampleFrame(3, 4));
  CHECK(sample.kind() == MessageKind::kSampleReply, "kind {}", sample.header.kind);
  CHECK(sample.bulk.size() == 4 * (24 + 2090), "bulk {}", sample.bulk.size());
  Close(raw);
  fmt::print("huge_reply: the 2,147,483,686-byte reply refused by name; the server served on\n");
  return 0;
}

int Unread() {
  RawClient raw;
  raw.Join();
  const int64_t item_bytes = raw.schema().ItemBytes();
  CHECK(item_bytes == 65536, "the server's item is {} bytes; run it with --column obs:uint8:65536", item_bytes);
  raw.Send(AddFrame(1, 64, item_bytes));
  ExpectAdded(raw, 64);
  const int requests = 30;
  for (int r = 0; r < requests; ++r) raw.Send(SampleFrame(100 + r, 64));
  // Long enough for the server to handle 30 small requests many times over;
  // only then does this client start reading.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::vector<uint64_t> sampled;
  std::vector<uint64_t> refused;
  for (int r = 0; r < requests; ++r) {
    const perserve::proto::Frame reply = raw.Receive();
    if (reply.kind() == MessageKind::kSampleReply) {
      CHECK(reply.bulk.size() == static_cast<size_t>(64 * (24 + item_bytes)), "bulk {}", reply.bulk.size());
      sampled.push_back(reply.header.request_id);
      continue;
    }
    const Status error = RawClient::ErrorIn(reply);
    CHECK(error.code() == Status::Code::kResourceExhausted, "request {}: {}", reply.header.request_id,
          error.ToString());
    CHECK(Contains(error.message(), "16 sample requests of this client wait already"), "{}", error.ToString());
    refused.push_back(reply.header.request_id);
  }
  CHECK(sampled.size() == 18 && refused.size() == 12, "{} sampled, {} refused", sampled.size(), refused.size());
  for (size_t i = 0; i < sampled.size(); ++i) CHECK(sampled[i] == 100 + i, "sample {} answered {}", i, sampled[i]);
  for (size_t i = 0; i < refused.size(); ++i) CHECK(refused[i] == 118 + i, "refusal {} for {}", i, refused[i]);
  Close(raw);
  fmt::print("unread: 2 replies out unread, 16 waiting, 12 refused; the waiting ones served in order once read\n");
  return 0;
}

// What a broken server sends in the join, and what every client must say.
struct BrokenJoin {
  int32_t role = 1;               // proto::Role::kServer
  uint64_t schema_bytes = 0;      // 0: no broadcast at all (the join fails before it)
  std::string mention;
  // Set: a valid schema, then these {alpha, capacity} (schema_bytes unused).
  std::optional<std::array<double, 2>> info{};
};

BrokenJoin BrokenJoinFor(const std::string& variant) {
  if (variant == "huge_schema") return {1, uint64_t{1} << 62, "sent a schema of 4611686018427387904 bytes"};
  if (variant == "garbage_schema") return {1, 16, "sent a schema that does not decode"};
  if (variant == "unknown_role") return {9, 0, "rank 0 joined with an unknown role 9"};
  // A capacity of NaN was cast to int64 unchecked (undefined behaviour).
  if (variant == "nan_capacity") {
    return {1, 0, "server rank 0 sent a capacity of nan", std::array{0.6, std::numeric_limits<double>::quiet_NaN()}};
  }
  if (variant == "negative_alpha") return {1, 0, "server rank 0 sent alpha -1", std::array{-1.0, 1024.0}};
  CHECK(false, "unknown bad_join variant {}", variant);
  return {};
}

// Rank 0: the join's collectives as a server would make them, with bad data.
int BrokenServer(const BrokenJoin& broken) {
  // Non-blocking, as the join makes them (they do not match blocking ones);
  // the hellos the others send this rank are left unread.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &comm, &request) == MPI_SUCCESS, "idup");
  CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE) == MPI_SUCCESS, "idup wait");
  int size = 0;
  MPI_Comm_size(comm, &size);
  const int32_t mine[2] = {broken.role, perserve::proto::kProtocolVersion};
  std::vector<int32_t> table(2 * static_cast<size_t>(size));
  CHECK(MPI_Iallgather(mine, 2, MPI_INT32_T, table.data(), 2, MPI_INT32_T, comm, &request) == MPI_SUCCESS,
        "allgather");
  CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE) == MPI_SUCCESS, "allgather wait");
  if (broken.info) {
    const std::string schema = perserve::proto::SerializeServedSchemas(perserve::proto::TransitionSchemas(perserve::Schema::Default()));
    uint64_t length = schema.size();
    CHECK(MPI_Bcast(&length, 1, MPI_UINT64_T, 0, comm) == MPI_SUCCESS, "bcast size");
    CHECK(MPI_Bcast(const_cast<char*>(schema.data()), static_cast<int>(length), MPI_BYTE, 0, comm) == MPI_SUCCESS,
          "bcast schema");
    std::array<double, 2> info = *broken.info;
    CHECK(MPI_Bcast(info.data(), 2, MPI_DOUBLE, 0, comm) == MPI_SUCCESS, "bcast info");
  } else if (broken.schema_bytes > 0) {
    uint64_t length = broken.schema_bytes;
    CHECK(MPI_Bcast(&length, 1, MPI_UINT64_T, 0, comm) == MPI_SUCCESS, "bcast size");
    if (length <= perserve::mpi::kMaxSchemaBytes) {
      std::vector<std::byte> garbage(length, std::byte{0xff});
      CHECK(MPI_Bcast(garbage.data(), static_cast<int>(length), MPI_BYTE, 0, comm) == MPI_SUCCESS, "bcast");
    }
  }
  MPI_Comm_free(&comm);
  return 0;
}

int BadJoinActor(const BrokenJoin& broken) {
  std::unique_ptr<perserve::ActorClient> actor;
  const Status joined = perserve::ActorClient::Join(MPI_COMM_WORLD, {}, &actor);
  CHECK(!joined.ok() && actor == nullptr, "the join succeeded");
  CHECK(Contains(joined.message(), broken.mention), "{}", joined.ToString());
  fmt::print("bad_join: the actor's join failed: {}\n", joined.ToString());
  return 0;
}

int BadJoinCLearner(const BrokenJoin& broken) {
  perserve_learner* learner = perserve_learner_join(MPI_Comm_c2f(MPI_COMM_WORLD));
  CHECK(learner == nullptr, "the join succeeded");
  const std::string error = perserve_client_last_error();
  CHECK(Contains(error, broken.mention), "{}", error);
  fmt::print("bad_join: the C learner's join failed: {}\n", error);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string scenario = argc > 1 ? argv[1] : "";
  const std::string role = argc > 2 ? argv[2] : "";
  const std::string variant = argc > 3 ? argv[3] : "";
  int code = 2;
  if (scenario == "huge_reply" && role == "raw") code = HugeReply();
  if (scenario == "unread" && role == "raw") code = Unread();
  if (scenario == "bad_join" && role == "server") code = BrokenServer(BrokenJoinFor(variant));
  if (scenario == "bad_join" && role == "actor") code = BadJoinActor(BrokenJoinFor(variant));
  if (scenario == "bad_join" && role == "c_learner") code = BadJoinCLearner(BrokenJoinFor(variant));
  if (code == 2) fmt::print(stderr, "usage: mpi_hardening_client <scenario> <role> [variant]\n");
  MPI_Finalize();
  return code;
}
