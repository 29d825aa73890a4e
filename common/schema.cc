#include "perserve/schema.h"

#include <charconv>
#include <set>

namespace perserve {
namespace {

constexpr struct {
  std::string_view name;
  DType dtype;
  int64_t size;
} kDTypes[] = {
    {"uint8", DType::kUInt8, 1},     {"int32", DType::kInt32, 4},     {"int64", DType::kInt64, 8},
    {"float32", DType::kFloat32, 4}, {"float64", DType::kFloat64, 8},
};

// Largest bytes one item of one column may take (1 GiB): a guard against
// shapes whose product overflows.
constexpr int64_t kMaxItemBytes = int64_t{1} << 30;

}  // namespace

Status ParseDType(std::string_view name, DType* dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.name == name) {
      *dtype = entry.dtype;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown dtype \"" + std::string(name) +
                                 "\"; expected uint8, int32, int64, float32 or float64");
}

std::string_view DTypeName(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "unknown";
}

int64_t DTypeSize(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.size;
  }
  return 0;
}

int64_t Column::ElementCount() const {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return count;
}

std::string Column::ToString() const {
  std::string text = name + ":" + std::string(DTypeName(dtype)) + ":";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(shape[i]);
  }
  return text;
}

Status ParseColumn(std::string_view spec, Column* column) {
  const size_t first = spec.find(':');
  if (first == std::string_view::npos) {
    return Status::InvalidArgument("column \"" + std::string(spec) + "\" is not name:dtype[:shape]");
  }
  const size_t second = spec.find(':', first + 1);
  Column parsed;
  parsed.name = std::string(spec.substr(0, first));
  const std::string_view dtype = spec.substr(first + 1, second == std::string_view::npos ? std::string_view::npos
                                                                                          : second - first - 1);
  PERSERVE_RETURN_IF_ERROR(ParseDType(dtype, &parsed.dtype));
  std::string_view dims = second == std::string_view::npos ? std::string_view() : spec.substr(second + 1);
  while (!dims.empty()) {
    const size_t comma = dims.find(',');
    const std::string_view dim = dims.substr(0, comma);
    int64_t value = 0;
    const auto [end, error] = std::from_chars(dim.data(), dim.data() + dim.size(), value);
    if (error != std::errc() || end != dim.data() + dim.size() || value <= 0) {
      return Status::InvalidArgument("column \"" + std::string(spec) + "\" has a bad dimension \"" +
                                     std::string(dim) + "\"");
    }
    parsed.shape.push_back(value);
    dims = comma == std::string_view::npos ? std::string_view() : dims.substr(comma + 1);
  }
  *column = std::move(parsed);
  return Status::Ok();
}

int64_t Schema::ItemBytes() const {
  int64_t bytes = 0;
  for (const Column& column : columns) bytes += column.ItemBytes();
  return bytes;
}

int Schema::ColumnIndex(std::string_view name) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

Status Schema::Validate() const {
  if (columns.empty()) return Status::InvalidArgument("a schema needs at least one column");
  std::set<std::string> names;
  for (const Column& column : columns) {
    if (column.name.empty()) return Status::InvalidArgument("a column name is empty");
    if (!names.insert(column.name).second) return Status::InvalidArgument("column \"" + column.name + "\" repeats");
    if (DTypeSize(column.dtype) == 0) return Status::InvalidArgument("column \"" + column.name + "\" has no dtype");
    int64_t elements = 1;
    for (int64_t d : column.shape) {
      if (d <= 0 || elements > kMaxItemBytes / d) {
        return Status::InvalidArgument("column \"" + column.name + "\" has a bad shape");
      }
      elements *= d;
    }
    if (elements * DTypeSize(column.dtype) > kMaxItemBytes) {
      return Status::InvalidArgument("column \"" + column.name + "\" is over 1 GiB an item");
    }
  }
  return Status::Ok();
}

std::string Schema::ToString() const {
  std::string text;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) text += ';';
    text += columns[i].ToString();
  }
  return text;
}

Schema Schema::Default() {
  return Schema{{
      {"obs", DType::kFloat32, {4}},
      {"action", DType::kInt64, {}},
      {"reward", DType::kFloat32, {}},
      {"next_obs", DType::kFloat32, {4}},
      {"done", DType::kUInt8, {}},
  }};
}

}  // namespace perserve
