#include "tree/cpu/node_buffer.h"

#include <limits>

namespace perserve::tree {

NodeBuffer::NodeBuffer(int64_t capacity)
    : memory_(util::AllocatePageMemory(static_cast<size_t>(2 * capacity) * sizeof(TreeNode))),
      nodes_(reinterpret_cast<TreeNode*>(memory_.get())),
      size_(2 * capacity) {
  const double infinity = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < size_; ++i) nodes_[i] = TreeNode{0.0, infinity};
}

}  // namespace perserve::tree
