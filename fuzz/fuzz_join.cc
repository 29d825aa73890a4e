// fuzz_join: what one peer contributes to the collective join (mpi/join.h),
// read as the join reads it but without MPI (fuzz/inputs.h has the layout):
// its {role, protocol version} entry (CheckJoinEntry), the schema length a
// server rank broadcasts (CheckSchemaLength), its alpha and capacity
// (CheckServerInfo), the number of servers (CheckServerCount) and the
// schemas' bytes (proto::DeserializeServedSchemas). Each must answer with a status, never crash or
// hit UB; the checks must accept exactly what the protocol allows; and a
// schema that decodes is valid and serializes back to the same bytes.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fuzz/fuzz_check.h"
#include "fuzz/inputs.h"
#include "mpi/join.h"
#include "proto/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace perserve;
  fuzz::JoinInput join;
  if (!fuzz::ParseJoinInput(std::as_bytes(std::span(data, size)), &join)) return 0;

  const Status entry = mpi::CheckJoinEntry(join.rank, join.role, join.version);
  const bool known_role = join.role >= static_cast<int32_t>(proto::Role::kServer) &&
                          join.role <= static_cast<int32_t>(proto::Role::kBystander);
  if (join.version != proto::kProtocolVersion) {
    FUZZ_CHECK(entry.code() == Status::Code::kFailedPrecondition);
  } else {
    FUZZ_CHECK(entry.code() == (known_role ? Status::Code::kOk : Status::Code::kInvalidArgument));
  }

  const Status length = mpi::CheckSchemaLength(join.rank, join.schema_length);
  const bool length_allowed = join.schema_length >= 1 && join.schema_length <= mpi::kMaxSchemaBytes;
  FUZZ_CHECK(length.code() == (length_allowed ? Status::Code::kOk : Status::Code::kInvalidArgument));

  const Status info = mpi::CheckServerInfo(join.rank, join.alpha, join.capacity);
  const bool info_allowed = std::isfinite(join.alpha) && join.alpha >= 0.0 && join.capacity >= 1.0 &&
                            join.capacity <= static_cast<double>(mpi::kMaxServerCapacity) &&
                            std::trunc(join.capacity) == join.capacity;
  FUZZ_CHECK(info.code() == (info_allowed ? Status::Code::kOk : Status::Code::kInvalidArgument));
  if (info.ok()) FUZZ_CHECK(static_cast<int64_t>(join.capacity) >= 1);  // the conversion the join then makes
  const Status servers = mpi::CheckServerCount(join.servers);
  FUZZ_CHECK(servers.code() == (join.servers <= 1024 ? Status::Code::kOk : Status::Code::kInvalidArgument));

  proto::ServedSchemas served;
  const Status decoded = proto::DeserializeServedSchemas(join.schema, &served);
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.code() == Status::Code::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(served.adds.Validate().ok() && served.samples.Validate().ok());
  FUZZ_CHECK(served.adds.ItemBytes() > 0 && served.samples.ItemBytes() > 0);
  FUZZ_CHECK(served.steps || served.samples.ToString() == served.adds.ToString());
  const std::string again = proto::SerializeServedSchemas(served);
  FUZZ_CHECK(again.size() == join.schema.size());
  FUZZ_CHECK(std::equal(again.begin(), again.end(), reinterpret_cast<const char*>(join.schema.data())));
  return 0;
}
