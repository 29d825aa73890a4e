// NodeBuffer: the CPU tree's 2 * capacity TreeNode array, owned and aligned.
//
// Aligned to 2 MiB and advised for transparent huge pages: a 2^21-leaf tree is
// 64 MiB, and a descent or a leaf-to-root walk touches one line per level in
// pages far apart, so 4 KiB pages would add a TLB miss to most cache misses.
#pragma once

#include <cstdint>

#include "tree/tree_algorithm.h"

namespace perserve::tree {

class NodeBuffer {
 public:
  // Allocates 2 * capacity nodes, each {sum 0, min +inf}. Aborts on allocation failure.
  explicit NodeBuffer(int64_t capacity);
  ~NodeBuffer();
  NodeBuffer(const NodeBuffer&) = delete;
  NodeBuffer& operator=(const NodeBuffer&) = delete;

  TreeNode* data() { return nodes_; }
  const TreeNode* data() const { return nodes_; }
  int64_t size() const { return size_; }

 private:
  TreeNode* nodes_ = nullptr;
  int64_t size_ = 0;
  size_t bytes_ = 0;
};

}  // namespace perserve::tree
