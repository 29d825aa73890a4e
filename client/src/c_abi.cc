// c_abi.h: the last error (per thread) and the helpers every C entry point uses.
#include "client/src/c_abi.h"

#include <cstring>

namespace perserve::c_abi {

namespace {

thread_local std::string last_error;
thread_local bool last_error_lost = false;  // the text could not be kept (no memory)
thread_local Code last_error_code = Code::kOk;

}  // namespace

// Sets last_error without throwing.
void SetLastError(Code code, const char* message) noexcept {
  last_error_code = code;
  try {
    last_error = std::string(Status::CodeName(code)) + ": " + message;
    last_error_lost = false;
  } catch (...) {
    last_error_lost = true;
  }
}

int Report(const Status& status) {
  if (status.ok()) return 0;
  last_error_code = status.code();
  last_error = status.ToString();
  last_error_lost = false;
  return 1;
}

int Fail(const char* message) {
  SetLastError(Code::kInvalidArgument, message);
  return 1;
}

const Column* ColumnAt(const perserve_schema* s, int column) {
  if (s == nullptr || s->schema == nullptr || column < 0 || column >= static_cast<int>(s->schema->columns.size())) {
    return nullptr;
  }
  return &s->schema->columns[static_cast<size_t>(column)];
}

void BindSchema(const Schema& schema, perserve_schema* view) {
  view->schema = &schema;
  view->text = schema.ToString();
}

// The schema bound for the table named `table` (NULL or "": the default table), or NULL.
const perserve_schema* TableSchema(const std::vector<std::string>& tables, const std::vector<perserve_schema>& schemas,
                                   const char* table) {
  const std::string_view name = TableName(table);
  if (name.empty()) return schemas.empty() ? nullptr : &schemas[0];
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t] == name) return &schemas[t];
  }
  return nullptr;
}

// A table's name by index, or NULL.
const char* TableAt(const std::vector<std::string>& tables, int table) {
  if (table < 0 || table >= static_cast<int>(tables.size())) return nullptr;
  return tables[static_cast<size_t>(table)].c_str();
}

int PeersOut(Status status, MPI_Comm comm, MPI_Fint* peers) {
  if (Report(status) != 0) return 1;
  *peers = MPI_Comm_c2f(comm);
  return 0;
}

// `count` columns of `rows` rows each as spans (data[i]: bytes[i] bytes);
// false if a length is negative.
bool SpansOf(int64_t rows, size_t count, const void* const* data, const int64_t* bytes, ColumnSpans* out) {
  *out = ColumnSpans{rows, {}};
  for (size_t i = 0; i < count; ++i) {
    if (bytes[i] < 0) return false;
    out->columns.emplace_back(static_cast<const std::byte*>(data[i]), static_cast<size_t>(bytes[i]));
  }
  return true;
}

// perserve_actor_add_columns, _add_borrowed and _add_table: the batch as
// spans, checked by `add`, to the table named `table` (empty: the default).
int AddSpans(perserve_actor* a, int64_t n, const void* const* columns, const int64_t* column_bytes,
             const double* priorities, bool borrow, std::string_view table) {
  if (a == nullptr) return Fail("actor handle is NULL");
  if (columns == nullptr || column_bytes == nullptr) return Fail("columns or column_bytes is NULL");
  return Guarded([&] {
    ColumnSpans batch;
    if (!SpansOf(n, a->client->schema().columns.size(), columns, column_bytes, &batch)) {
      return Fail("a column length is negative");
    }
    std::span<const double> given;
    if (priorities != nullptr && n > 0) given = std::span<const double>(priorities, static_cast<size_t>(n));
    return Report(borrow ? a->client->AddBorrowed(batch, given, table) : a->client->Add(batch, given, table));
  });
}

int CopyOut(const SampleBatch& batch, int64_t capacity, uint64_t* keys, double* weights,
            double* probabilities, void* const* columns) {
  if (batch.size > capacity) {
    SetLastError(Code::kOutOfRange, ("a sample of " + std::to_string(batch.size) + " items does not fit " +
                                  std::to_string(capacity)).c_str());
    return 1;
  }
  const size_t n = static_cast<size_t>(batch.size);
  if (keys != nullptr) std::memcpy(keys, batch.keys.data(), n * sizeof(uint64_t));
  if (weights != nullptr) std::memcpy(weights, batch.weights.data(), n * sizeof(double));
  if (probabilities != nullptr) std::memcpy(probabilities, batch.probabilities.data(), n * sizeof(double));
  for (size_t i = 0; columns != nullptr && i < batch.columns.size(); ++i) {
    if (columns[i] != nullptr) std::memcpy(columns[i], batch.columns[i].data(), batch.columns[i].size());
  }
  return 0;
}

const char* LastError() {
  return last_error_lost ? "RESOURCE_EXHAUSTED: out of memory (the error's text could not be kept)"
                         : last_error.c_str();
}

int LastErrorCode() { return static_cast<int>(last_error_code); }

}  // namespace perserve::c_abi
