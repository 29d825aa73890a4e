// Frames and schemas on the wire: round trips and every way a peer can send
// something broken.
#include <cstring>

#include <gtest/gtest.h>

#include "proto/codec.h"

namespace perserve::proto {
namespace {

std::vector<std::byte> AddFrame(uint64_t id) {
  const double priorities[2] = {1.0, 2.0};
  const std::byte columns[6] = {};
  std::vector<std::byte> frame;
  EncodeFrame(MessageKind::kAddRequest, id, AddRequest{2, true},
              {std::span<const std::byte>(columns), std::as_bytes(std::span(priorities))}, &frame);
  return frame;
}

TEST(CodecTest, RoundTripsHeaderMetaAndBulk) {
  const std::vector<std::byte> frame = AddFrame(42);
  Frame decoded;
  ASSERT_TRUE(DecodeFrame(frame, &decoded).ok());
  EXPECT_EQ(decoded.kind(), MessageKind::kAddRequest);
  EXPECT_EQ(decoded.header.request_id, 42u);
  EXPECT_EQ(decoded.bulk.size(), 6u + 2 * sizeof(double));
  AddRequest request;
  ASSERT_TRUE(DecodeMeta(decoded, &request).ok());
  EXPECT_EQ(request.count, 2);
  EXPECT_TRUE(request.has_priorities);
  double second;
  std::memcpy(&second, decoded.bulk.data() + 6 + sizeof(double), sizeof(double));
  EXPECT_EQ(second, 2.0);
}

TEST(CodecTest, RejectsShortBadMagicAndInconsistentSizes) {
  std::vector<std::byte> frame = AddFrame(7);
  Frame decoded;
  EXPECT_EQ(DecodeFrame(std::span(frame).first(10), &decoded).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(DecodeFrame(std::span(frame).first(frame.size() - 1), &decoded).code(), Status::Code::kInvalidArgument);
  std::vector<std::byte> longer = frame;
  longer.push_back(std::byte{0});
  EXPECT_EQ(DecodeFrame(longer, &decoded).code(), Status::Code::kInvalidArgument);
  std::vector<std::byte> bad_magic = frame;
  bad_magic[0] = std::byte{0};
  const Status magic = DecodeFrame(bad_magic, &decoded);
  EXPECT_EQ(magic.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(magic.message().find("magic"), std::string::npos);
}

TEST(CodecTest, AnotherProtocolVersionFailsButKeepsTheRequestId) {
  std::vector<std::byte> frame = AddFrame(99);
  const uint16_t future = kProtocolVersion + 1;
  std::memcpy(frame.data() + 4, &future, sizeof(future));
  Frame decoded;
  const Status status = DecodeFrame(frame, &decoded);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(status.message().find("version"), std::string::npos);
  EXPECT_EQ(decoded.header.request_id, 99u);
}

TEST(CodecTest, TruncatedOrOversizedMetaIsAnErrorNotACrash) {
  std::vector<std::byte> frame;
  EncodeFrame(MessageKind::kSampleRequest, 1, SampleRequest{512, 0.4}, {}, &frame);
  Frame decoded;
  ASSERT_TRUE(DecodeFrame(frame, &decoded).ok());
  Frame truncated = decoded;
  truncated.meta = decoded.meta.first(decoded.meta.size() - 3);
  SampleRequest request;
  EXPECT_EQ(DecodeMeta(truncated, &request).code(), Status::Code::kInvalidArgument);
  AddRequest too_short_for;
  Frame tiny = decoded;
  tiny.meta = decoded.meta.first(4);
  EXPECT_EQ(DecodeMeta(tiny, &too_short_for).code(), Status::Code::kInvalidArgument);
  ErrorReply error_meta;
  std::vector<std::byte> garbage(24, std::byte{0xff});  // a string length of ~2^64
  Frame garbled;
  garbled.meta = garbage;
  EXPECT_EQ(DecodeMeta(garbled, &error_meta).code(), Status::Code::kInvalidArgument);
}

TEST(SchemaTest, ParsesColumnsAndRoundTripsOnTheWire) {
  Column column;
  ASSERT_TRUE(ParseColumn("obs:uint8:84,84,4", &column).ok());
  EXPECT_EQ(column.ItemBytes(), 84 * 84 * 4);
  ASSERT_TRUE(ParseColumn("reward:float32", &column).ok());
  EXPECT_TRUE(column.shape.empty());
  EXPECT_EQ(column.ItemBytes(), 4);
  EXPECT_EQ(ParseColumn("obs", &column).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseColumn("obs:complex64:2", &column).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseColumn("obs:uint8:84,0", &column).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(ParseColumn("obs:uint8:84,x", &column).code(), Status::Code::kInvalidArgument);

  const Schema schema = Schema::Default();
  const std::string bytes = SerializeSchema(schema);
  Schema back;
  ASSERT_TRUE(DeserializeSchema(std::as_bytes(std::span(bytes.data(), bytes.size())), &back).ok());
  EXPECT_EQ(back.ToString(), schema.ToString());
  EXPECT_EQ(back.ItemBytes(), 45);

  Schema duplicate{{{"a", DType::kUInt8, {}}, {"a", DType::kUInt8, {}}}};
  EXPECT_EQ(duplicate.Validate().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(Schema{}.Validate().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace perserve::proto
