// CheckBatch / CheckPriorities (client/src/batch_check.cc): what an actor
// refuses before sending, each error naming the column or priority with what
// was expected and what was given. No MPI: the checks need only the schema.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "perserve/client.h"

namespace perserve {
namespace {

Schema TestSchema() {
  return Schema{{{"id", DType::kInt64, {}}, {"obs", DType::kUInt8, {84, 84, 4}}, {"value", DType::kFloat32, {2}}}};
}

// Spans over fake memory: CheckBatch reads lengths, never bytes.
ColumnSpans Batch(int64_t n, std::vector<size_t> lengths) {
  static const std::byte fake{};
  ColumnSpans batch{n, {}};
  for (size_t length : lengths) batch.columns.emplace_back(&fake, length);
  return batch;
}

TEST(CheckBatchTest, AcceptsABatchThatMatchesTheSchema) {
  EXPECT_TRUE(CheckBatch(TestSchema(), Batch(3, {24, 3 * 28224, 24}), {}).ok());
  const std::vector<double> priorities{1.0, 1e-300, 1e300};
  EXPECT_TRUE(CheckBatch(TestSchema(), Batch(3, {24, 3 * 28224, 24}), priorities).ok());
}

TEST(CheckBatchTest, AWrongLengthNamesTheColumnWithExpectedAndGiven) {
  const Status s = CheckBatch(TestSchema(), Batch(3, {24, 3 * 28224, 12}), {});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "column \"value\": expected 24 bytes (3 items of float32[2], 8 bytes an item), given 12 bytes; "
            "nothing was sent");
  const Status obs = CheckBatch(TestSchema(), Batch(3, {24, 28224, 24}), {});
  EXPECT_NE(obs.message().find("column \"obs\": expected 84672 bytes (3 items of uint8[84,84,4]"),
            std::string::npos)
      << obs.message();
}

// Longer is refused as shorter is: the server would store the first bytes
// and the rest would shift every later column (a mutation to `<` passed).
TEST(CheckBatchTest, AColumnLongerThanTheSchemaSaysIsRefused) {
  const Status s = CheckBatch(TestSchema(), Batch(3, {24, 3 * 28224 + 1, 24}), {});
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("column \"obs\": expected 84672 bytes (3 items of uint8[84,84,4], 28224 bytes an "
                             "item), given 84673 bytes"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(CheckBatch(TestSchema(), Batch(3, {32, 3 * 28224, 24}), {}).ok()) << "an id column of 4 items";
}

TEST(CheckBatchTest, RefusesAColumnCountNullsAndEmptyBatches) {
  EXPECT_NE(CheckBatch(TestSchema(), Batch(3, {24, 3 * 28224}), {}).message().find("2 columns, the schema 3"),
            std::string::npos);
  ColumnSpans with_null = Batch(3, {24, 3 * 28224, 24});
  with_null.columns[0] = {};
  EXPECT_NE(CheckBatch(TestSchema(), with_null, {}).message().find("column \"id\" is NULL"), std::string::npos);
  EXPECT_NE(CheckBatch(TestSchema(), Batch(0, {0, 0, 0}), {}).message().find("a batch of 0 items"),
            std::string::npos);
}

TEST(CheckBatchTest, RefusesBatchesOverTheMessageLimitWithoutOverflowing) {
  const int64_t huge = int64_t{1} << 40;  // times 28 kB an item: far past 2^64 / 2 GiB
  const Status s = CheckBatch(TestSchema(), Batch(huge, {0, 0, 0}), {});
  EXPECT_NE(s.message().find("over MPI's 2 GiB message limit"), std::string::npos) << s.message();
  const Status max = CheckBatch(TestSchema(), Batch(std::numeric_limits<int64_t>::max(), {0, 0, 0}), {});
  EXPECT_NE(max.message().find("over MPI's 2 GiB message limit"), std::string::npos) << max.message();
}

TEST(CheckBatchTest, PrioritiesMustBeOnePerItemFiniteAndPositive) {
  const ColumnSpans batch = Batch(3, {24, 3 * 28224, 24});
  EXPECT_NE(CheckBatch(TestSchema(), batch, std::vector<double>{1.0, 1.0}).message().find("2 priorities for 3 items"),
            std::string::npos);
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (double bad : {nan, inf, -inf, -1.0}) {
    const Status s = CheckBatch(TestSchema(), batch, std::vector<double>{1.0, bad, 1.0});
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(s.message().find("at position 1 must be finite and >= 0"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(CheckBatch(TestSchema(), batch, std::vector<double>{1.0, 0.0, 1.0}).ok())
      << "a zero is the server's to accept (--priority-eps)";
  EXPECT_TRUE(CheckPriorities(std::vector<double>{0.5, 2.0}).ok());
  EXPECT_FALSE(CheckPriorities(std::vector<double>{0.5, nan}).ok());
}

}  // namespace
}  // namespace perserve
