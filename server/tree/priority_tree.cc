#include "tree/priority_tree.h"

#include <bit>
#include <new>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tree/cpu/cpu_priority_tree.h"
#include "tree/cuda/cuda_device.h"

#include <vector>

namespace perserve::tree {
namespace {

constexpr struct {
  std::string_view name;
  UpdateStrategy strategy;
} kStrategies[] = {
    {"auto", UpdateStrategy::kAuto},
    {"per_element", UpdateStrategy::kPerElement},
    {"rebuild", UpdateStrategy::kRebuild},
    {"sparse", UpdateStrategy::kSparse},
};

}  // namespace

Status ParseUpdateStrategy(std::string_view name, UpdateStrategy* strategy) {
  for (const auto& entry : kStrategies) {
    if (entry.name == name) {
      *strategy = entry.strategy;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument(
      fmt::format("unknown update strategy \"{}\"; expected auto, per_element, rebuild or sparse", name));
}

std::string_view UpdateStrategyName(UpdateStrategy strategy) {
  for (const auto& entry : kStrategies) {
    if (entry.strategy == strategy) return entry.name;
  }
  return "unknown";
}

Status ParseDevice(std::string_view name, Device* device) {
  if (name == "auto") {
    *device = Device::kAuto;
  } else if (name == "cpu") {
    *device = Device::kCpu;
  } else if (name == "cuda") {
    *device = Device::kCuda;
  } else {
    return Status::InvalidArgument(fmt::format("unknown device \"{}\"; expected cpu, cuda or auto", name));
  }
  return Status::Ok();
}

Status PriorityTree::ReadLeaves(int64_t first, std::span<double> values) const {
  std::vector<int64_t> indices(values.size());
  for (size_t j = 0; j < indices.size(); ++j) indices[j] = first + static_cast<int64_t>(j);
  return Get(indices, values);
}

Status PriorityTree::Create(int64_t capacity, Device device, std::unique_ptr<PriorityTree>* tree) {
  if (capacity < 1 || capacity > kMaxCapacity) {
    return Status::InvalidArgument(fmt::format("capacity {} is outside [1, {}]", capacity, kMaxCapacity));
  }
  const int64_t rounded = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(capacity)));
  if (device != Device::kCpu) {
    std::string why;
    if (UsableCudaDeviceCount(&why) > 0) {
      const Status created = CreateCudaPriorityTree(rounded, tree);
      if (created.ok()) {
        spdlog::info("priority tree: {} leaves on the CUDA device (device {})", rounded,
                     device == Device::kAuto ? "auto" : "cuda");
        return Status::Ok();
      }
      why = "the CUDA tree could not be created: " + created.ToString();
    }
    if (device == Device::kCuda) return Status::Unavailable("device \"cuda\" requested, but " + why);
    spdlog::info("priority tree: {} leaves on the CPU (device auto: {})", rounded, why);
  }
  try {
    *tree = std::make_unique<CpuPriorityTree>(rounded);
  } catch (const std::bad_alloc&) {
    return Status::Unavailable(fmt::format("cannot allocate a tree of {} leaves ({} bytes of nodes)", rounded,
                                           2 * rounded * static_cast<int64_t>(sizeof(TreeNode))));
  }
  return Status::Ok();
}

}  // namespace perserve::tree
