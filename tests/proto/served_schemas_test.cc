// The join's ServedSchemas with its tables (protocol 9): round trips, the
// default table agreeing with the top level, and every table checked.
#include <string>

#include <gtest/gtest.h>

#include "proto/codec.h"
#include "proto/messages.h"

namespace perserve::proto {
namespace {

Status RoundTrip(const ServedSchemas& sent, ServedSchemas* decoded) {
  const std::string bytes = SerializeServedSchemas(sent);
  return DeserializeServedSchemas(std::as_bytes(std::span(bytes.data(), bytes.size())), decoded);
}

const Schema kStep{{{"obs", DType::kUInt8, {2}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
const Schema kNStep{{{"obs", DType::kUInt8, {2}}, {"reward", DType::kFloat32, {}}, {"next_obs", DType::kUInt8, {2}}}};
const Schema kItemColumns{{{"state", DType::kFloat32, {4}}}};

// A server of an n-step prioritized table (the default), a uniform table of
// transitions and a fifo sequence table with item columns.
ServedSchemas ThreeTables() {
  ServedSchemas served = OneTableSchemas(true, kStep, kNStep, {});
  served.tables[0].name = "apex";
  served.tables.push_back(TableSchemas{"eval", false, kStep, {}, "uniform", false});
  served.tables.push_back(TableSchemas{"r2d2", true, kStep, kItemColumns, "fifo", false, 1});
  return served;
}

TEST(ServedSchemasTest, EveryTableRoundTripsInOrder) {
  const ServedSchemas sent = ThreeTables();
  ServedSchemas decoded;
  const Status status = RoundTrip(sent, &decoded);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(decoded.tables.size(), 3u);
  EXPECT_EQ(decoded.tables[0].name, "apex");
  EXPECT_TRUE(decoded.tables[0].steps);
  EXPECT_EQ(decoded.tables[0].samples.ToString(), kNStep.ToString());
  EXPECT_EQ(decoded.tables[1].sampler, "uniform");
  EXPECT_FALSE(decoded.tables[1].updatable);
  EXPECT_FALSE(decoded.tables[1].steps);
  EXPECT_EQ(decoded.tables[2].items.ToString(), kItemColumns.ToString());
  EXPECT_EQ(decoded.tables[0].max_times_sampled, 0);
  EXPECT_EQ(decoded.tables[2].max_times_sampled, 1);
  EXPECT_EQ(decoded.TableIndex("r2d2"), 2);
  EXPECT_EQ(decoded.TableIndex("default"), -1);
  // Shards agree on every table: each is in ToString.
  const std::string text = decoded.ToString();
  EXPECT_NE(text.find("table \"eval\" (transitions, uniform, no updates)"), std::string::npos) << text;
  EXPECT_NE(text.find("table \"r2d2\" (over steps, fifo, no updates, max_times_sampled 1)"), std::string::npos)
      << text;
  ServedSchemas other = sent;
  other.tables[2].sampler = "lifo";
  EXPECT_NE(other.ToString(), sent.ToString());
  other = sent;
  other.tables[2].max_times_sampled = 2;  // shards split a sample by it: they must agree
  EXPECT_NE(other.ToString(), sent.ToString());
  other.tables[2].max_times_sampled = -1;
  const Status negative = RoundTrip(other, &decoded);
  EXPECT_EQ(negative.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(negative.message().find("max_times_sampled -1"), std::string::npos) << negative.ToString();
}

// One table named "default": what single-table servers serve; ToString as before tables.
TEST(ServedSchemasTest, OneDefaultTableIsWhatSingleTableServersSend) {
  const ServedSchemas served = TransitionSchemas(kStep);
  ASSERT_EQ(served.tables.size(), 1u);
  EXPECT_EQ(served.tables[0].name, "default");
  EXPECT_EQ(served.tables[0].sampler, "prioritized");
  EXPECT_TRUE(served.tables[0].updatable);
  EXPECT_EQ(served.ToString(), kStep.ToString());
  ServedSchemas decoded;
  ASSERT_TRUE(RoundTrip(served, &decoded).ok());
  EXPECT_EQ(decoded.TableIndex("default"), 0);
}

TEST(ServedSchemasTest, BadTablesAreRefused) {
  ServedSchemas decoded;
  const auto refusal = [&decoded](const ServedSchemas& served) {
    const Status status = RoundTrip(served, &decoded);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
    return status.message();
  };
  ServedSchemas none = ThreeTables();
  none.tables.clear();
  EXPECT_NE(refusal(none).find("at least one table"), std::string::npos);

  ServedSchemas unnamed = ThreeTables();
  unnamed.tables[1].name.clear();
  EXPECT_NE(refusal(unnamed).find("table 1 has an empty name"), std::string::npos);

  ServedSchemas twice = ThreeTables();
  twice.tables[2].name = "apex";
  EXPECT_NE(refusal(twice).find("tables 0 and 2 are both named \"apex\""), std::string::npos);

  ServedSchemas sampler = ThreeTables();
  sampler.tables[1].sampler = "random";
  EXPECT_NE(refusal(sampler).find("table \"eval\" samples by \"random\""), std::string::npos);

  ServedSchemas transitions = ThreeTables();  // a table of transitions samples what actors append
  transitions.tables[1].samples = kNStep;
  EXPECT_NE(refusal(transitions).find("table \"eval\": a table of transitions must sample what it adds"),
            std::string::npos);

  ServedSchemas bad_items = ThreeTables();
  bad_items.tables[2].items = Schema{{{"state", DType::kFloat32, {4}}, {"state", DType::kFloat32, {4}}}};
  EXPECT_NE(refusal(bad_items).find("table \"r2d2\":"), std::string::npos);

  ServedSchemas disagreeing = ThreeTables();  // tables[0] is the top level's
  disagreeing.tables[0].samples = kStep;
  EXPECT_NE(refusal(disagreeing).find("the default table (\"apex\", the first) must be what the top level says"),
            std::string::npos);
}

// The requests that name a table carry it last; a request of protocol 8's
// meta (without it) no longer decodes.
TEST(ServedSchemasTest, RequestsCarryTheirTable) {
  std::vector<std::byte> frame;
  EncodeFrame(MessageKind::kSampleRequest, 1, SampleRequest{32, 0.4, 0.0, false, 2}, {}, &frame);
  Frame decoded;
  ASSERT_TRUE(DecodeFrame(frame, &decoded).ok());
  SampleRequest sample;
  ASSERT_TRUE(DecodeMeta(decoded, &sample).ok());
  EXPECT_EQ(sample.table, 2);
  EXPECT_EQ(sample.batch_size, 32);

  ShardSampleRequest shard{0, false, 0.0, false, 1};
  EncodeFrame(MessageKind::kShardSampleRequest, 2, shard, {}, &frame);
  ASSERT_TRUE(DecodeFrame(frame, &decoded).ok());
  ShardSampleRequest shard_back;
  ASSERT_TRUE(DecodeMeta(decoded, &shard_back).ok());
  EXPECT_EQ(shard_back.table, 1);

  EncodeFrame(MessageKind::kUpdateRequest, 3, UpdateRequest{0, 3}, {}, &frame);
  ASSERT_TRUE(DecodeFrame(frame, &decoded).ok());
  UpdateRequest update;
  ASSERT_TRUE(DecodeMeta(decoded, &update).ok());
  EXPECT_EQ(update.table, 3);
  Frame without_table = decoded;
  without_table.meta = decoded.meta.first(decoded.meta.size() - sizeof(int32_t));
  EXPECT_EQ(DecodeMeta(without_table, &update).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace perserve::proto
