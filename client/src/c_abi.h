// What the C ABI's sources share (client_c.cc, client_c_tables.cc): the
// handles perserve/client_c.h declares, and the one place where client
// Status values become C return codes and error texts. Every entry point
// runs inside Guarded, so no C++ exception crosses the C boundary.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "perserve/client.h"
#include "perserve/client_c.h"

struct perserve_schema {
  const perserve::Schema* schema = nullptr;
  std::string text;  // ToString(), kept for perserve_schema_string
};
struct perserve_actor {
  std::unique_ptr<perserve::ActorClient> client;
  perserve_schema schema;
  std::vector<std::string> tables;            // the server's tables' names, in its order
  std::vector<perserve_schema> item_schemas;  // their item columns, by table
};
struct perserve_learner {
  std::unique_ptr<perserve::LearnerClient> client;
  perserve_schema schema;
  std::vector<std::string> tables;              // the server's tables' names, in its order
  std::vector<perserve_schema> sample_schemas;  // what their samples return, by table
};
struct perserve_bystander {
  std::unique_ptr<perserve::Bystander> client;
};

namespace perserve::c_abi {

using Code = Status::Code;

// Sets the thread's last error without throwing.
void SetLastError(Code code, const char* message) noexcept;
// 0 for OK, else 1 with the status as the last error.
int Report(const Status& status);
// 1, with an INVALID_ARGUMENT last error.
int Fail(const char* message);
// The last error's text and code (perserve_client_last_error and _code).
const char* LastError();
int LastErrorCode();

// Runs `body` (which returns the C result), turning any exception into an
// error result `failed` and a message in the last error.
template <typename Body, typename Result = int>
Result Guarded(Body body, Result failed = 1) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    SetLastError(Code::kResourceExhausted, "out of memory");
  } catch (const std::exception& e) {
    SetLastError(Code::kInternal, e.what());
  } catch (...) {
    SetLastError(Code::kInternal, "an unknown exception");
  }
  return failed;
}

inline MPI_Comm FromFortran(MPI_Fint comm) { return MPI_Comm_f2c(comm); }

const Column* ColumnAt(const perserve_schema* s, int column);
void BindSchema(const Schema& schema, perserve_schema* view);

// A client's tables' names and, by table, the schema `of(name)` gives (views
// of the client's own schemas, valid while it is).
template <class Of>
void BindTables(std::vector<std::string> names, Of of, std::vector<std::string>* tables,
                std::vector<perserve_schema>* schemas) {
  *tables = std::move(names);
  schemas->resize(tables->size());
  for (size_t t = 0; t < tables->size(); ++t) BindSchema(of((*tables)[t]), &(*schemas)[t]);
}

// A table argument: NULL or "" is the default table.
inline std::string_view TableName(const char* table) { return table == nullptr ? std::string_view{} : table; }
// The schema bound for the table named `table` (NULL or "": the default table), or NULL.
const perserve_schema* TableSchema(const std::vector<std::string>& tables, const std::vector<perserve_schema>& schemas,
                                   const char* table);
// A table's name by index, or NULL.
const char* TableAt(const std::vector<std::string>& tables, int table);

int PeersOut(Status status, MPI_Comm comm, MPI_Fint* peers);

// `count` columns of `rows` rows each as spans (data[i]: bytes[i] bytes);
// false if a length is negative.
bool SpansOf(int64_t rows, size_t count, const void* const* data, const int64_t* bytes, ColumnSpans* out);

// perserve_actor_add_columns, _add_borrowed and _add_table: the batch as
// spans, checked by `add`, to the table named `table` (empty: the default).
int AddSpans(perserve_actor* a, int64_t n, const void* const* columns, const int64_t* column_bytes,
             const double* priorities, bool borrow, std::string_view table = {});

// A sample's batch into the caller's arrays (any NULL skipped); OUT_OF_RANGE
// if it holds more than `capacity` items.
int CopyOut(const SampleBatch& batch, int64_t capacity, uint64_t* keys, double* weights, double* probabilities,
            void* const* columns);

}  // namespace perserve::c_abi
