#include <cstring>

#include <gtest/gtest.h>

#include "store/transition_store.h"

namespace perserve::store {
namespace {

Schema TwoColumns() { return Schema{{{"a", DType::kUInt8, {3}}, {"b", DType::kInt32, {}}}}; }

// count items starting at item number `first`: column a = 3 bytes (first+j)*3.., b = first+j.
std::vector<std::byte> Batch(int first, int count) {
  std::vector<std::byte> bulk;
  for (int j = 0; j < count; ++j) {
    for (int e = 0; e < 3; ++e) bulk.push_back(static_cast<std::byte>((first + j) * 3 + e));
  }
  for (int j = 0; j < count; ++j) {
    const int32_t value = first + j;
    const auto* bytes = reinterpret_cast<const std::byte*>(&value);
    bulk.insert(bulk.end(), bytes, bytes + sizeof(value));
  }
  return bulk;
}

TEST(TransitionStoreTest, WritesWrapAroundTheRingAndGatherReadsThemBack) {
  TransitionStore store(TwoColumns(), 5);
  ASSERT_TRUE(store.CheckBatch(4, Batch(0, 4)).ok());
  store.Write(0, 4, Batch(0, 4));
  store.Write(4, 3, Batch(4, 3));  // items 4, 5, 6 -> slots 4, 0, 1
  const std::vector<int64_t> slots = {1, 4, 2, 0};
  std::vector<std::byte> out(slots.size() * 7);
  store.Gather(slots, out);
  const int expected_items[] = {6, 4, 2, 5};
  for (size_t j = 0; j < slots.size(); ++j) {
    for (int e = 0; e < 3; ++e) EXPECT_EQ(out[j * 3 + e], static_cast<std::byte>(expected_items[j] * 3 + e));
    int32_t b;
    std::memcpy(&b, out.data() + 12 + j * 4, 4);
    EXPECT_EQ(b, expected_items[j]);
  }
}

TEST(TransitionStoreTest, CheckBatchNamesWhatIsWrong) {
  TransitionStore store(TwoColumns(), 5);
  EXPECT_EQ(store.CheckBatch(0, {}).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store.CheckBatch(6, Batch(0, 6)).code(), Status::Code::kInvalidArgument);
  const std::vector<std::byte> short_batch(13);
  const Status wrong = store.CheckBatch(2, short_batch);
  EXPECT_EQ(wrong.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(wrong.message().find("14 bytes"), std::string::npos) << wrong.message();
}

}  // namespace
}  // namespace perserve::store
