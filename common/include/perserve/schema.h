// Schema: the named, typed, fixed-shape columns every stored transition has.
//
// Fixed when the server starts (flags or a config file) and learned by every
// client at join. A batch of n transitions carries, per column, n items laid
// out row-major: n * Column::ItemBytes() bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "perserve/status.h"

namespace perserve {

enum class DType : uint8_t { kUInt8 = 0, kInt32 = 1, kInt64 = 2, kFloat32 = 3, kFloat64 = 4 };

Status ParseDType(std::string_view name, DType* dtype);
std::string_view DTypeName(DType dtype);
int64_t DTypeSize(DType dtype);

struct Column {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // empty: a scalar per item

  int64_t ElementCount() const;
  int64_t ItemBytes() const { return ElementCount() * DTypeSize(dtype); }
  std::string ToString() const;  // "obs:uint8:84,84,4", the form ParseColumn reads
};

// Parses "name:dtype:d0,d1,..." (the shape may be empty or omitted for a scalar).
Status ParseColumn(std::string_view spec, Column* column);

struct Schema {
  std::vector<Column> columns;

  int64_t ItemBytes() const;
  // Index of the column called `name`, or -1.
  int ColumnIndex(std::string_view name) const;
  // Names unique and non-empty, shapes positive, at least one column.
  Status Validate() const;
  std::string ToString() const;  // columns joined by ';'

  // CartPole-like transitions: obs float32[4], action int64, reward float32,
  // next_obs float32[4], done uint8 (45 bytes an item).
  static Schema Default();
};

}  // namespace perserve
