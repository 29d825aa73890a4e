// Frames and schemas on the wire: round trips and every way a peer can send
// something broken.
#include <cstring>

#include <gtest/gtest.h>

#include "proto/append.h"
#include "proto/codec.h"

namespace perserve::proto {
namespace {

// An append of 2 steps of 3 bytes, each its own item, with priorities.
std::vector<std::byte> AddFrame(uint64_t id) {
  const double priorities[2] = {1.0, 2.0};
  const std::byte columns[6] = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}, std::byte{6}};
  AppendMeta meta;
  meta.first_step = AppendMeta::kAtEnd;
  meta.steps = 2;
  meta.groups = {ItemGroup{/*table=*/0, /*items=*/0, /*item_per_step=*/true, /*has_priorities=*/true}};
  const std::span<const std::byte> step_columns[] = {columns};
  const ItemGroupSpans group{{}, priorities, {}};
  std::vector<std::byte> frame;
  EncodeAppend(id, meta, step_columns, std::span(&group, 1), &frame);
  return frame;
}

TEST(CodecTest, RoundTripsHeaderMetaAndBulk) {
  const std::vector<std::byte> frame = AddFrame(42);
  Frame decoded;
  ASSERT_TRUE(DecodeFrame(frame, &decoded).ok());
  EXPECT_EQ(decoded.kind(), MessageKind::kAppendRequest);
  EXPECT_EQ(decoded.header.request_id, 42u);
  EXPECT_EQ(decoded.bulk.size(), 6u + 2 * sizeof(double));
  DecodedAppend append;
  const int64_t no_item_columns[] = {0};
  ASSERT_TRUE(DecodeAppend(decoded, /*step_bytes=*/3, no_item_columns, &append).ok());
  EXPECT_EQ(append.meta.steps, 2);
  EXPECT_EQ(append.item_count(), 2);
  EXPECT_EQ(append.meta.first_step, AppendMeta::kAtEnd);
  ASSERT_EQ(append.step_columns.size(), 6u);
  EXPECT_EQ(append.step_columns[5], std::byte{6});
  ASSERT_EQ(append.groups.size(), 1u);
  EXPECT_EQ(append.groups[0].table, 0);
  EXPECT_TRUE(append.groups[0].item_per_step);
  EXPECT_TRUE(append.groups[0].item_steps.empty());
  EXPECT_EQ(append.groups[0].priorities, (std::vector<double>{1.0, 2.0}));
  EXPECT_TRUE(append.groups[0].item_columns.empty());
}

// An append of steps and items over listed steps, with item columns: each
// part where the layout (proto/append.h) puts it.
TEST(CodecTest, AnAppendOfStepsAndListedItemsRoundTrips) {
  AppendMeta meta;
  meta.first_step = 7;
  meta.steps = 3;
  meta.groups = {ItemGroup{0, /*items=*/2, false, false}};
  meta.timeout_seconds = 1.5;
  const std::vector<std::byte> first(3, std::byte{0xa}), second(6, std::byte{0xb});
  const std::span<const std::byte> step_columns[] = {first, second};  // 1 + 2 bytes a step
  const std::vector<int64_t> item_steps = {5, 9};
  const std::vector<std::byte> state(8, std::byte{0xc});  // 4 bytes an item
  const std::span<const std::byte> item_columns[] = {state};
  const ItemGroupSpans group{item_steps, {}, item_columns};
  std::vector<std::byte> frame;
  EncodeAppend(3, meta, step_columns, std::span(&group, 1), &frame);
  Frame decoded;
  ASSERT_TRUE(DecodeFrame(frame, &decoded).ok());
  DecodedAppend append;
  const int64_t four[] = {4};
  ASSERT_TRUE(DecodeAppend(decoded, 3, four, &append).ok());
  EXPECT_EQ(append.meta.first_step, 7);
  EXPECT_EQ(append.meta.timeout_seconds, 1.5);
  ASSERT_EQ(append.step_columns.size(), 9u);
  EXPECT_EQ(append.step_columns[2], std::byte{0xa});
  EXPECT_EQ(append.step_columns[3], std::byte{0xb});
  ASSERT_EQ(append.groups.size(), 1u);
  EXPECT_EQ(append.groups[0].item_steps, item_steps);
  EXPECT_TRUE(append.groups[0].priorities.empty());
  ASSERT_EQ(append.groups[0].item_columns.size(), 8u);
  EXPECT_EQ(append.groups[0].item_columns[0], std::byte{0xc});
  // Against other byte counts it does not add up, and says so.
  const Status wrong = DecodeAppend(decoded, 4, four, &append);
  EXPECT_EQ(wrong.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(wrong.message().find("carries 33 bulk bytes"), std::string::npos) << wrong.ToString();

  // Its columns apart: none in the request.
  meta.columns_follow = true;
  EncodeAppend(4, meta, {}, std::span(&group, 1), &frame);
  ASSERT_TRUE(DecodeFrame(frame, &decoded).ok());
  ASSERT_TRUE(DecodeAppend(decoded, 3, four, &append).ok());
  EXPECT_TRUE(append.step_columns.empty());
  EXPECT_EQ(append.groups[0].item_steps, item_steps);
  EXPECT_EQ(append.groups[0].item_columns.size(), 8u);
}

// Malformed appends are refused by the decoder, naming the problem.
TEST(CodecTest, MalformedAppendsAreRefused) {
  const auto decode = [](AppendMeta meta, size_t bulk_bytes) {
    std::vector<std::byte> frame;
    const std::vector<std::byte> bulk(bulk_bytes);
    EncodeFrame(MessageKind::kAppendRequest, 1, meta, {std::span<const std::byte>(bulk)}, &frame);
    Frame decoded;
    EXPECT_TRUE(DecodeFrame(frame, &decoded).ok());
    DecodedAppend append;
    const int64_t no_item_columns[] = {0};
    return DecodeAppend(decoded, 3, no_item_columns, &append);
  };
  AppendMeta none;
  EXPECT_NE(decode(none, 0).message().find("an append of no steps and no items"), std::string::npos);
  AppendMeta negative;
  negative.steps = -1;
  negative.groups = {ItemGroup{0, 2, false, false}};
  EXPECT_EQ(decode(negative, 16).code(), Status::Code::kInvalidArgument);
  AppendMeta both;  // items listed and an item per step
  both.steps = 1;
  both.groups = {ItemGroup{0, 1, true, false}};
  EXPECT_NE(decode(both, 11).message().find("and an item per step is malformed"), std::string::npos);
  AppendMeta at_end;  // only an add goes at the stream's end
  at_end.first_step = AppendMeta::kAtEnd;
  at_end.steps = 1;
  EXPECT_NE(decode(at_end, 3).message().find("an append from step -1"), std::string::npos);
  at_end.groups = {ItemGroup{0, 0, true, false}};
  EXPECT_TRUE(decode(at_end, 3).ok());
  AppendMeta timeout;
  timeout.steps = 1;
  timeout.timeout_seconds = -1.0;
  EXPECT_NE(decode(timeout, 3).message().find("timeout -1 s"), std::string::npos);
  AppendMeta huge;  // counts far past the bulk: no overflow, a refusal
  huge.steps = int64_t{1} << 62;
  huge.groups = {ItemGroup{0, int64_t{1} << 62, false, true}};
  EXPECT_EQ(decode(huge, 64).code(), Status::Code::kInvalidArgument);
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
  AppendMeta too_short_for;
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
