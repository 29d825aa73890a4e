// The "auto" strategy table of a large tree, checked for what it chooses, not
// for how fast it is (issue 19): calibration forced to `rebuild` passed every
// functional test and only made the flood test 26x slower. At 2^21 leaves a
// rebuild sweeps all 2^22 nodes whatever the batch, while the replay's update
// batches are tens to a few thousand elements; no honest measurement picks it
// for those. The table is measured once per process (~0.65 s on the CPU).
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "server/tree/tree_test_util.h"
#include "tree/cpu/cpu_priority_tree.h"

namespace perserve::tree::testing {
namespace {

constexpr int64_t kLargeCapacity = int64_t{1} << 21;
// The largest batch called small. The CPU's measured crossover to rebuild at
// 2^21 leaves is about 65536 (docs/performance.md), 32x above this. The CUDA
// backend's is not measured yet; sparse there is one kernel up to 2048
// elements against a rebuild's launch per lower level over the whole tree, so
// a bound of 256 keeps a wide margin.
int64_t LargestSmallBatch(Device device) { return device == Device::kCuda ? 256 : 2048; }

// The table's lines ("k=512: per_element 40.1us ... -> sparse") as k -> chosen strategy name.
std::map<int64_t, std::string> ChoicesFromDescription(const std::string& description) {
  std::map<int64_t, std::string> choices;
  const std::regex line_pattern(R"(^k=(\d+):.*-> (\w+)$)");
  std::istringstream lines(description);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_match(line, match, line_pattern)) choices[std::stoll(match[1])] = match[2];
  }
  return choices;
}

// The choice the CPU tree acts on, for every small batch size (not only the
// measured powers of two).
TEST(AutoTableTest, ALargeCpuTreeNeverRebuildsForASmallBatch) {
  CpuPriorityTree tree(kLargeCapacity);
  for (int64_t k = 1; k <= LargestSmallBatch(Device::kCpu); ++k) {
    const UpdateStrategy chosen = tree.AutoStrategyFor(k);
    ASSERT_NE(chosen, UpdateStrategy::kRebuild) << "k=" << k << "; the table:\n" << tree.DescribeAutoTable();
    ASSERT_NE(chosen, UpdateStrategy::kAuto) << "k=" << k;
  }
}

// What an update under kAuto actually runs is the table's choice for its
// size: a dispatch forced to rebuild (a mutation that passed every other
// test, only slowing mpi_flood_fairness) fails here.
TEST(AutoTableTest, AnAutoUpdateRunsTheStrategyTheTableChooses) {
  CpuPriorityTree tree(kLargeCapacity);
  for (const int64_t k : {int64_t{1}, int64_t{64}, int64_t{2048}}) {
    std::vector<int64_t> indices(static_cast<size_t>(k));
    std::vector<double> values(static_cast<size_t>(k), 2.0);
    for (int64_t j = 0; j < k; ++j) indices[static_cast<size_t>(j)] = j * 997 % kLargeCapacity;
    const UpdateStrategy chosen = tree.AutoStrategyFor(k);
    const int64_t before = tree.updates_run_with(chosen);
    ASSERT_TRUE(tree.Update(indices, values).ok());
    EXPECT_EQ(tree.updates_run_with(chosen), before + 1)
        << "k=" << k << " should run " << UpdateStrategyName(chosen) << "; the table:\n" << tree.DescribeAutoTable();
    EXPECT_EQ(tree.updates_run_with(UpdateStrategy::kAuto), 0);
  }
  tree.SetStrategy(UpdateStrategy::kPerElement);  // an explicit strategy runs as set
  const std::vector<int64_t> one = {5};
  const std::vector<double> value = {3.0};
  const int64_t per_element_before = tree.updates_run_with(UpdateStrategy::kPerElement);
  ASSERT_TRUE(tree.Update(one, value).ok());
  EXPECT_EQ(tree.updates_run_with(UpdateStrategy::kPerElement), per_element_before + 1);
}

// The measured table as every backend reports it.
class AutoTableDeviceTest : public DeviceTest {};

TEST_P(AutoTableDeviceTest, ALargeTreesTableNamesNoRebuildForASmallBatch) {
  std::unique_ptr<PriorityTree> tree = Make(kLargeCapacity, UpdateStrategy::kAuto);
  ASSERT_NE(tree, nullptr);
  const std::string description = tree->DescribeAutoTable();
  const std::map<int64_t, std::string> choices = ChoicesFromDescription(description);
  const int64_t largest_small = LargestSmallBatch(GetParam());
  int64_t lines_checked = 0;
  for (int64_t k = 1; k <= largest_small; k *= 2) {
    const auto choice = choices.find(k);
    ASSERT_NE(choice, choices.end()) << "no line for k=" << k << " in the table:\n" << description;
    EXPECT_NE(choice->second, "rebuild") << "k=" << k << "; the table:\n" << description;
    ++lines_checked;
  }
  EXPECT_GE(lines_checked, 9);
}

INSTANTIATE_TEST_SUITE_P(Devices, AutoTableDeviceTest, ::testing::ValuesIn(kBothDevices), DeviceParamName);

}  // namespace
}  // namespace perserve::tree::testing
