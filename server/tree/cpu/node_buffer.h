// NodeBuffer: the CPU tree's 2 * capacity TreeNode array, owned, on huge
// pages (util/page_memory.h): a 2^21-leaf tree is 64 MiB, and a descent or a
// leaf-to-root walk touches one line per level in pages far apart.
#pragma once

#include <cstdint>

#include "tree/tree_algorithm.h"
#include "util/page_memory.h"

namespace perserve::tree {

class NodeBuffer {
 public:
  // Allocates 2 * capacity nodes, each {sum 0, min +inf}. Throws std::bad_alloc.
  explicit NodeBuffer(int64_t capacity);
  NodeBuffer(const NodeBuffer&) = delete;
  NodeBuffer& operator=(const NodeBuffer&) = delete;

  TreeNode* data() { return nodes_; }
  const TreeNode* data() const { return nodes_; }
  int64_t size() const { return size_; }

 private:
  util::PageMemory memory_;
  TreeNode* nodes_;
  int64_t size_;
};

}  // namespace perserve::tree
