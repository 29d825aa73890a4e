// Helpers shared by the tree tests: creating trees, comparing them node for
// node with the reference, and random batches of the shapes the replay sends.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/tree/reference_tree.h"
#include "tree/cuda/cuda_device.h"
#include "tree/priority_tree.h"
#include "tree/tree_algorithm.h"

namespace perserve::tree::testing {

// Whether `device` can run here; says why not in `why`.
inline bool DeviceUsable(Device device, std::string* why) {
  return device != Device::kCuda || UsableCudaDeviceCount(why) > 0;
}

// In a test body: skips the test, saying why, where `device` cannot run.
#define PERSERVE_SKIP_IF_UNUSABLE(device)                                             \
  do {                                                                                 \
    std::string why_unusable;                                                          \
    if (!::perserve::tree::testing::DeviceUsable((device), &why_unusable)) {           \
      GTEST_SKIP() << "no CUDA device: " << why_unusable;                              \
    }                                                                                  \
  } while (0)

// The devices the backend-agnostic tests run on (CUDA ones skip without a device).
inline const Device kBothDevices[] = {Device::kCpu, Device::kCuda};

inline std::unique_ptr<PriorityTree> MakeTree(int64_t capacity, UpdateStrategy strategy,
                                              Device device = Device::kCpu) {
  std::unique_ptr<PriorityTree> tree;
  const Status status = PriorityTree::Create(capacity, device, &tree);
  EXPECT_TRUE(status.ok()) << status.ToString();
  if (tree) tree->SetStrategy(strategy);
  return tree;
}

// A test over one device: the parameter, skipped where it cannot run.
class DeviceTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { PERSERVE_SKIP_IF_UNUSABLE(GetParam()); }
  std::unique_ptr<PriorityTree> Make(int64_t capacity, UpdateStrategy strategy = UpdateStrategy::kAuto) {
    return MakeTree(capacity, strategy, GetParam());
  }
};

inline std::string DeviceParamName(const ::testing::TestParamInfo<Device>& info) {
  return info.param == Device::kCuda ? "Cuda" : "Cpu";
}

// Every node's sum and min, bit for bit. Reports the first differing node.
inline ::testing::AssertionResult NodesMatch(const PriorityTree& tree, const ReferenceTree& reference) {
  const size_t slots = reference.sums().size();
  std::vector<double> sums(slots), mins(slots);
  const Status status = tree.ReadNodes(sums, mins);
  if (!status.ok()) return ::testing::AssertionFailure() << status.ToString();
  for (size_t node = 1; node < slots; ++node) {
    const bool same_sum = std::memcmp(&sums[node], &reference.sums()[node], sizeof(double)) == 0;
    const bool same_min = std::memcmp(&mins[node], &reference.mins()[node], sizeof(double)) == 0;
    if (!same_sum || !same_min) {
      return ::testing::AssertionFailure()
             << "node " << node << ": tree (sum " << sums[node] << ", min " << mins[node] << "), reference (sum "
             << reference.sums()[node] << ", min " << reference.mins()[node] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

struct Batch {
  std::vector<int64_t> indices;
  std::vector<double> values;
};

// A priority-like value over a wide range of magnitudes, sometimes 0 and
// sometimes subnormal, so that sums round and empty subtrees appear.
inline double RandomValue(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double pick = unit(rng);
  if (pick < 0.10) return 0.0;
  if (pick < 0.12) return 4.9e-324 * static_cast<double>(1 + rng() % 1000);
  return std::ldexp(1.0 + unit(rng), static_cast<int>(rng() % 61) - 30);
}

enum class BatchShape { kRandom, kDuplicates, kSiblings, kAllLeaves, kZeroRun };

inline Batch RandomBatch(std::mt19937_64& rng, int64_t capacity, BatchShape shape) {
  Batch batch;
  std::uniform_int_distribution<int64_t> leaf(0, capacity - 1);
  // Batch sizes 1..40000, weighted toward the replay's 1..2048.
  const int64_t size_classes[] = {1, 8, 64, 512, 2048, 40000};
  const int64_t k = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(size_classes[rng() % 6]));
  switch (shape) {
    case BatchShape::kRandom:
      for (int64_t j = 0; j < k; ++j) batch.indices.push_back(leaf(rng));
      break;
    case BatchShape::kDuplicates: {
      const int64_t pool[] = {leaf(rng), leaf(rng), leaf(rng)};
      for (int64_t j = 0; j < std::max<int64_t>(k, 2); ++j) batch.indices.push_back(pool[rng() % 3]);
      break;
    }
    case BatchShape::kSiblings:
      for (int64_t j = 0; j < (k + 1) / 2; ++j) {
        const int64_t left = leaf(rng) & ~int64_t{1};
        batch.indices.push_back(left);
        batch.indices.push_back(std::min(left + 1, capacity - 1));
      }
      break;
    case BatchShape::kAllLeaves:
      for (int64_t i = 0; i < capacity; ++i) batch.indices.push_back(i);
      std::shuffle(batch.indices.begin(), batch.indices.end(), rng);
      break;
    case BatchShape::kZeroRun: {
      const int64_t first = leaf(rng);
      for (int64_t i = first; i < std::min(capacity, first + k); ++i) batch.indices.push_back(i);
      break;
    }
  }
  for (size_t j = 0; j < batch.indices.size(); ++j) {
    batch.values.push_back(shape == BatchShape::kZeroRun ? 0.0 : RandomValue(rng));
  }
  return batch;
}

// Masses that stress the descent: stratified and uniform draws, the ends of
// [0, total], and the exact boundaries between leaves (prefix sums and their
// neighbours), where a rounding slip sends the walk the wrong way.
inline std::vector<double> DescentMasses(const ReferenceTree& reference, std::mt19937_64& rng) {
  const double total = reference.Total();
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> masses;
  const int strata = 512;
  for (int i = 0; i < strata; ++i) masses.push_back((i + unit(rng)) * total / strata);
  for (int i = 0; i < 64; ++i) masses.push_back(unit(rng) * total);
  const double largest = std::numeric_limits<double>::max();
  for (double edge : {0.0, total, std::nextafter(total, 0.0), std::nextafter(total, largest), 2.0 * total,
                      1e300, std::numeric_limits<double>::denorm_min()}) {
    masses.push_back(edge);
  }
  std::uniform_int_distribution<int64_t> leaf(0, reference.capacity() - 1);
  for (int i = 0; i < 64; ++i) {
    // Sum of the leaves before a random leaf, added along its root path.
    double before = 0.0;
    for (int64_t node = reference.capacity() + leaf(rng); node > 1; node /= 2) {
      if (node % 2 == 1) before += reference.sums()[node - 1];
    }
    for (double boundary : {before, std::nextafter(before, 0.0), std::nextafter(before, largest)}) {
      masses.push_back(boundary);
    }
  }
  for (int64_t node = 2; node < 2 * reference.capacity(); node = 2 * node + static_cast<int64_t>(rng() % 2)) {
    masses.push_back(reference.sums()[node]);  // left-child sums on one random path
  }
  return masses;
}

// The reference's nodes in the tree's layout, for calling the descent's steps directly.
inline std::vector<TreeNode> NodesOf(const ReferenceTree& reference) {
  std::vector<TreeNode> nodes(reference.sums().size());
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i] = TreeNode{reference.sums()[i], reference.mins()[i]};
  return nodes;
}

inline void ApplyToReference(const Batch& batch, ReferenceTree* reference) {
  for (size_t j = 0; j < batch.indices.size(); ++j) reference->Set(batch.indices[j], batch.values[j]);
}

}  // namespace perserve::tree::testing
