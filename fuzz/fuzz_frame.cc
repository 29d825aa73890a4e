// fuzz_frame: one received message through the codec, as either side reads
// it: DecodeFrame, DecodeMeta into the meta struct of its kind, then the bulk
// arrays the kind carries (TakeArray). Every outcome must be a Status, never
// a crash or undefined behaviour. A frame that decodes whole is canonical
// (reserved bytes 0, booleans 0 or 1, no trailing meta bytes), so encoding its
// header fields, meta and bulk again must give back the very same bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "proto/append.h"
#include "proto/codec.h"

namespace perserve::proto {
namespace {

void CheckRoundTrip(const Frame& frame, const std::vector<std::byte>& again, std::span<const std::byte> bytes) {
  FUZZ_CHECK(again.size() == bytes.size());
  FUZZ_CHECK(std::equal(again.begin(), again.end(), bytes.begin()));
  Frame redecoded;
  FUZZ_CHECK(DecodeFrame(again, &redecoded).ok());
  FUZZ_CHECK(redecoded.header.magic == frame.header.magic);
  FUZZ_CHECK(redecoded.header.version == frame.header.version);
  FUZZ_CHECK(redecoded.header.kind == frame.header.kind);
  FUZZ_CHECK(redecoded.header.request_id == frame.header.request_id);
  FUZZ_CHECK(redecoded.header.meta_bytes == frame.header.meta_bytes);
  FUZZ_CHECK(redecoded.header.bulk_bytes == frame.header.bulk_bytes);
}

// Decodes the meta as `Meta`; when it decodes, encodes the frame again.
template <class Meta>
Status DecodeAndReencode(const Frame& frame, std::span<const std::byte> bytes, Meta* meta) {
  const Status status = DecodeMeta(frame, meta);
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == Status::Code::kInvalidArgument);
    return status;
  }
  std::vector<std::byte> again;
  EncodeFrame(frame.kind(), frame.header.request_id, *meta, {frame.bulk}, &again);
  CheckRoundTrip(frame, again, bytes);
  return status;
}

// Takes `count` values of T off the front of *bulk: all of them, or none and an error.
template <class T>
void TakeAndCheck(std::span<const std::byte>* bulk, int64_t count) {
  const std::span<const std::byte> before = *bulk;
  std::vector<T> values;
  const Status status = TakeArray(bulk, static_cast<size_t>(count), &values);
  if (status.ok()) {
    FUZZ_CHECK(values.size() == static_cast<size_t>(count));
    FUZZ_CHECK(bulk->data() == before.data() + values.size() * sizeof(T));
    FUZZ_CHECK(bulk->size() == before.size() - values.size() * sizeof(T));
    if (count > 0) FUZZ_CHECK(std::memcmp(values.data(), before.data(), values.size() * sizeof(T)) == 0);
  } else {
    FUZZ_CHECK(status.code() == Status::Code::kInvalidArgument);
    FUZZ_CHECK(bulk->data() == before.data() && bulk->size() == before.size());
  }
}

void CheckKind(const Frame& frame, std::span<const std::byte> bytes) {
  std::span<const std::byte> bulk = frame.bulk;
  switch (frame.kind()) {
    case MessageKind::kAppendRequest: {
      AppendMeta meta;
      if (DecodeAndReencode(frame, bytes, &meta).ok()) {
        // The decoder against its own checks, for a few step sizes and
        // tables' item sizes (one table, or three).
        constexpr int64_t kOneTable[] = {8};
        constexpr int64_t kThreeTables[] = {0, 8, 3};
        for (const int64_t step_bytes : {int64_t{1}, int64_t{17}}) {
          for (const std::span<const int64_t> item_bytes :
               {std::span<const int64_t>(kOneTable), std::span<const int64_t>(kThreeTables)}) {
            DecodedAppend append;
            const Status decoded = DecodeAppend(frame, step_bytes, item_bytes, &append);
            if (!decoded.ok()) {
              FUZZ_CHECK(decoded.code() == Status::Code::kInvalidArgument);
              continue;
            }
            FUZZ_CHECK(append.groups.size() == append.meta.groups.size());
            size_t bulk_bytes = append.step_columns.size();
            for (size_t g = 0; g < append.groups.size(); ++g) {
              const ItemGroup& group = append.meta.groups[g];
              const DecodedItems& items = append.groups[g];
              const int64_t count = group.item_count(append.meta.steps);
              FUZZ_CHECK(items.table == group.table && items.table >= 0 &&
                         static_cast<size_t>(items.table) < item_bytes.size());
              for (size_t earlier = 0; earlier < g; ++earlier) FUZZ_CHECK(append.groups[earlier].table != items.table);
              FUZZ_CHECK(items.item_steps.size() == static_cast<size_t>(group.item_per_step ? 0 : count));
              FUZZ_CHECK(items.priorities.size() == static_cast<size_t>(group.has_priorities ? count : 0));
              FUZZ_CHECK(items.item_columns.size() ==
                         static_cast<size_t>(count * item_bytes[static_cast<size_t>(items.table)]));
              bulk_bytes += items.item_steps.size() * 8 + items.priorities.size() * 8 + items.item_columns.size();
            }
            FUZZ_CHECK(append.step_columns.size() ==
                       static_cast<size_t>(append.meta.columns_follow ? 0 : append.meta.steps * step_bytes));
            FUZZ_CHECK(bulk_bytes == frame.bulk.size());
          }
        }
      }
      return;
    }
    case MessageKind::kAddReply: {
      AddReply meta;
      DecodeAndReencode(frame, bytes, &meta);
      return;
    }
    case MessageKind::kSampleRequest: {
      SampleRequest meta;
      DecodeAndReencode(frame, bytes, &meta);
      return;
    }
    case MessageKind::kSampleReply: {
      SampleReply meta;
      if (DecodeAndReencode(frame, bytes, &meta).ok()) {
        TakeAndCheck<uint64_t>(&bulk, meta.count);
        TakeAndCheck<double>(&bulk, meta.count);
        TakeAndCheck<double>(&bulk, meta.count);
      }
      return;
    }
    case MessageKind::kUpdateRequest: {
      UpdateRequest meta;
      if (DecodeAndReencode(frame, bytes, &meta).ok()) {
        TakeAndCheck<uint64_t>(&bulk, meta.count);
        TakeAndCheck<double>(&bulk, meta.count);
      }
      return;
    }
    case MessageKind::kUpdateReply: {
      UpdateReply meta;
      DecodeAndReencode(frame, bytes, &meta);
      return;
    }
    case MessageKind::kCloseRequest:
    case MessageKind::kCloseReply:
    case MessageKind::kShardSampleRequest: {
      ShardSampleRequest meta;
      if (DecodeAndReencode(frame, bytes, &meta).ok()) TakeAndCheck<double>(&bulk, meta.count);
      return;
    }
    case MessageKind::kShardSampleReply: {
      ShardSampleReply meta;
      if (DecodeAndReencode(frame, bytes, &meta).ok()) {
        TakeAndCheck<uint64_t>(&bulk, meta.count);
        TakeAndCheck<double>(&bulk, meta.count);
      }
      return;
    }
    case MessageKind::kCheckpointReply: {
      CheckpointReply meta;
      DecodeAndReencode(frame, bytes, &meta);
      return;
    }
    case MessageKind::kErrorReply: {
      ErrorReply meta;
      if (DecodeAndReencode(frame, bytes, &meta).ok()) {
        Status::FromCode(meta.code, meta.message);  // any code a peer sends becomes a status
      }
      return;
    }
  }
  // A kind this side does not know: the service answers it UNIMPLEMENTED,
  // and the meta is never read.
}

}  // namespace
}  // namespace perserve::proto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace perserve;
  const auto bytes = std::as_bytes(std::span(data, size));
  proto::Frame frame;
  const Status decoded = proto::DecodeFrame(bytes, &frame);
  if (decoded.ok()) {
    FUZZ_CHECK(frame.meta.size() + frame.bulk.size() + proto::kFrameHeaderBytes == size);
    proto::CheckKind(frame, bytes);
    return 0;
  }
  FUZZ_CHECK(decoded.code() == Status::Code::kInvalidArgument ||
             decoded.code() == Status::Code::kFailedPrecondition);
  if (decoded.code() == Status::Code::kFailedPrecondition) {
    // Another version: the header is still filled in, so its request id can be answered.
    FUZZ_CHECK(frame.header.version != proto::kProtocolVersion);
    FUZZ_CHECK(std::memcmp(&frame.header, data, proto::kFrameHeaderBytes) == 0);
  }
  return 0;
}
