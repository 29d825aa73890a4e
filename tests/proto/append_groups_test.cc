// Appends that create items in several tables (protocol 9's item groups):
// each group's parts where proto/append.h puts them, and every way a peer can
// get the groups wrong refused with a message naming it.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "proto/append.h"
#include "proto/codec.h"

namespace perserve::proto {
namespace {

// Item column bytes by table: table 0 has 4 bytes of item columns an item,
// table 1 none, table 2 2 bytes.
constexpr int64_t kItemBytes[] = {4, 0, 2};

Status Decode(const std::vector<std::byte>& frame, DecodedAppend* append) {
  Frame decoded;
  PERSERVE_RETURN_IF_ERROR(DecodeFrame(frame, &decoded));
  return DecodeAppend(decoded, /*step_bytes=*/3, kItemBytes, append);
}

// The meta with `bulk_bytes` zero bytes of bulk, decoded.
Status DecodeMetaWithBulk(const AppendMeta& meta, size_t bulk_bytes) {
  std::vector<std::byte> frame;
  const std::vector<std::byte> bulk(bulk_bytes);
  EncodeFrame(MessageKind::kAppendRequest, 1, meta, {std::span<const std::byte>(bulk)}, &frame);
  DecodedAppend append;
  return Decode(frame, &append);
}

// 4 steps; table 2 gets items over steps 1 and 3 with priorities and item
// columns, table 1 items over step 0 without, then table 0 one item with its
// columns: the groups come back in the meta's order, each with its own bytes.
TEST(AppendGroupsTest, ItemsInSeveralTablesRoundTripInTheMetasOrder) {
  AppendMeta meta;
  meta.first_step = 12;
  meta.steps = 4;
  meta.groups = {ItemGroup{2, 2, false, true}, ItemGroup{1, 1, false, false}, ItemGroup{0, 1, false, false}};
  const std::vector<std::byte> steps(12, std::byte{0x5});
  const std::span<const std::byte> step_columns[] = {steps};
  const std::vector<int64_t> steps_2 = {13, 15}, steps_1 = {12}, steps_0 = {14};
  const std::vector<double> priorities_2 = {0.5, 2.5};
  const std::vector<std::byte> columns_2 = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  const std::vector<std::byte> columns_0 = {std::byte{9}, std::byte{8}, std::byte{7}, std::byte{6}};
  const std::span<const std::byte> item_columns_2[] = {columns_2};
  const std::span<const std::byte> item_columns_0[] = {columns_0};
  const ItemGroupSpans groups[] = {
      {steps_2, priorities_2, item_columns_2}, {steps_1, {}, {}}, {steps_0, {}, item_columns_0}};
  std::vector<std::byte> frame;
  EncodeAppend(8, meta, step_columns, groups, &frame);

  DecodedAppend append;
  const Status decoded = Decode(frame, &append);
  ASSERT_TRUE(decoded.ok()) << decoded.ToString();
  EXPECT_EQ(append.meta.first_step, 12);
  EXPECT_EQ(append.item_count(), 4);
  EXPECT_EQ(append.step_columns.size(), 12u);
  ASSERT_EQ(append.groups.size(), 3u);
  EXPECT_EQ(append.groups[0].table, 2);
  EXPECT_EQ(append.groups[0].item_steps, steps_2);
  EXPECT_EQ(append.groups[0].priorities, priorities_2);
  ASSERT_EQ(append.groups[0].item_columns.size(), 4u);
  EXPECT_EQ(append.groups[0].item_columns[3], std::byte{4});
  EXPECT_EQ(append.groups[1].table, 1);
  EXPECT_EQ(append.groups[1].item_steps, steps_1);
  EXPECT_TRUE(append.groups[1].priorities.empty());
  EXPECT_TRUE(append.groups[1].item_columns.empty());
  EXPECT_EQ(append.groups[2].table, 0);
  EXPECT_EQ(append.groups[2].item_steps, steps_0);
  ASSERT_EQ(append.groups[2].item_columns.size(), 4u);
  EXPECT_EQ(append.groups[2].item_columns[0], std::byte{9});
}

// No group: steps only. An add (an item per step) to two tables of
// transitions at the stream's end: each group has the steps as its items.
TEST(AppendGroupsTest, StepsOnlyAndAnAddToTwoTablesDecode) {
  AppendMeta steps_only;
  steps_only.first_step = 0;
  steps_only.steps = 2;
  EXPECT_TRUE(DecodeMetaWithBulk(steps_only, 6).ok());

  AppendMeta add;
  add.first_step = AppendMeta::kAtEnd;
  add.steps = 2;
  add.groups = {ItemGroup{1, 0, true, true}, ItemGroup{2, 0, true, false}};
  const std::vector<std::byte> steps(6, std::byte{0x1});
  const std::span<const std::byte> step_columns[] = {steps};
  const std::vector<double> priorities = {1.0, 3.0};
  const std::vector<std::byte> columns_2(4, std::byte{0x2});
  const std::span<const std::byte> item_columns_2[] = {columns_2};
  const ItemGroupSpans groups[] = {{{}, priorities, {}}, {{}, {}, item_columns_2}};
  std::vector<std::byte> frame;
  EncodeAppend(2, add, step_columns, groups, &frame);
  DecodedAppend append;
  const Status decoded = Decode(frame, &append);
  ASSERT_TRUE(decoded.ok()) << decoded.ToString();
  EXPECT_EQ(append.item_count(), 4);
  ASSERT_EQ(append.groups.size(), 2u);
  EXPECT_TRUE(append.groups[0].item_per_step);
  EXPECT_TRUE(append.groups[0].item_steps.empty());
  EXPECT_EQ(append.groups[0].priorities, priorities);
  EXPECT_EQ(append.groups[1].item_columns.size(), 4u);
}

TEST(AppendGroupsTest, AnUnknownTableOrATableTwiceIsRefused) {
  AppendMeta unknown;
  unknown.steps = 1;
  unknown.groups = {ItemGroup{3, 1, false, false}};
  Status status = DecodeMetaWithBulk(unknown, 3 + 8);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("item group 0 names table 3; this server has 3 tables (0 to 2)"), std::string::npos)
      << status.ToString();
  unknown.groups[0].table = -1;
  status = DecodeMetaWithBulk(unknown, 3 + 8);
  EXPECT_NE(status.message().find("names table -1"), std::string::npos) << status.ToString();

  AppendMeta twice;
  twice.steps = 1;
  twice.groups = {ItemGroup{1, 1, false, false}, ItemGroup{2, 0, false, false}, ItemGroup{1, 0, false, false}};
  status = DecodeMetaWithBulk(twice, 3 + 8);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("item groups 0 and 2 both name table 1"), std::string::npos) << status.ToString();
}

TEST(AppendGroupsTest, MalformedGroupsAreRefused) {
  AppendMeta negative;
  negative.steps = 1;
  negative.groups = {ItemGroup{0, -1, false, false}};
  EXPECT_NE(DecodeMetaWithBulk(negative, 3).message().find("item group 0 (table 0) of -1 items is malformed"),
            std::string::npos);
  AppendMeta per_step_with_items;
  per_step_with_items.steps = 1;
  per_step_with_items.groups = {ItemGroup{1, 0, true, false}, ItemGroup{2, 1, true, false}};
  EXPECT_NE(DecodeMetaWithBulk(per_step_with_items, 3).message().find("item group 1 (table 2) of 1 items and an "
                                                                      "item per step is malformed"),
            std::string::npos);
  // Groups that create nothing, and no steps.
  AppendMeta empty;
  empty.groups = {ItemGroup{0, 0, false, false}, ItemGroup{1, 0, true, false}};
  EXPECT_NE(DecodeMetaWithBulk(empty, 0).message().find("an append of no steps and no items (2 item groups)"),
            std::string::npos);
  // At the stream's end only when every group is an item per step.
  AppendMeta mixed;
  mixed.first_step = AppendMeta::kAtEnd;
  mixed.steps = 1;
  mixed.groups = {ItemGroup{1, 0, true, false}, ItemGroup{2, 1, false, false}};
  EXPECT_NE(DecodeMetaWithBulk(mixed, 3 + 2 + 8).message().find("an append from step -1"), std::string::npos);
  mixed.groups.pop_back();
  EXPECT_TRUE(DecodeMetaWithBulk(mixed, 3).ok());
}

// The bulk must be exactly the steps plus every group's parts: one byte short
// or over is refused, naming each group's count, and counts far past the bulk
// in a later group do not overflow the sum.
TEST(AppendGroupsTest, TheBulkMustBeExactlyTheGroupsSizes) {
  AppendMeta meta;
  meta.first_step = 0;
  meta.steps = 2;
  meta.groups = {ItemGroup{0, 1, false, true}, ItemGroup{2, 0, true, false}};
  const size_t exact = 2 * 3 + (8 + 8 + 4) + 2 * 2;
  EXPECT_TRUE(DecodeMetaWithBulk(meta, exact).ok());
  const Status short_one = DecodeMetaWithBulk(meta, exact - 1);
  EXPECT_EQ(short_one.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(short_one.message().find("table 0: 1 items (with priorities, 4 bytes of item columns each); table 2: 2 "
                                     "items (one per step, 2 bytes of item columns each) carries 29 bulk bytes"),
            std::string::npos)
      << short_one.ToString();
  EXPECT_EQ(DecodeMetaWithBulk(meta, exact + 1).code(), Status::Code::kInvalidArgument);
  // Columns apart: the bulk holds only the groups.
  meta.columns_follow = true;
  EXPECT_TRUE(DecodeMetaWithBulk(meta, exact - 6).ok());
  meta.columns_follow = false;

  AppendMeta huge;
  huge.steps = 1;
  huge.groups = {ItemGroup{1, 1, false, false}, ItemGroup{0, int64_t{1} << 62, false, true},
                 ItemGroup{2, int64_t{1} << 62, false, true}};
  EXPECT_EQ(DecodeMetaWithBulk(huge, 64).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace perserve::proto
