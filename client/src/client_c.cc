// The C ABI of perserve/client_c.h over ActorClient and LearnerClient: the one
// place where client Status values become C return codes. Every entry point
// runs inside Guarded, so no C++ exception crosses the C boundary.
#include "perserve/client_c.h"

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "perserve/client.h"

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

namespace {

using Code = perserve::Status::Code;

thread_local std::string last_error;
thread_local bool last_error_lost = false;  // the text could not be kept (no memory)
thread_local Code last_error_code = Code::kOk;

// Sets last_error without throwing.
void SetLastError(Code code, const char* message) noexcept {
  last_error_code = code;
  try {
    last_error = std::string(perserve::Status::CodeName(code)) + ": " + message;
    last_error_lost = false;
  } catch (...) {
    last_error_lost = true;
  }
}

int Report(const perserve::Status& status) {
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

// Runs `body` (which returns the C result), turning any exception into an
// error result `failed` and a message in last_error.
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

MPI_Comm FromFortran(MPI_Fint comm) { return MPI_Comm_f2c(comm); }

const perserve::Column* ColumnAt(const perserve_schema* s, int column) {
  if (s == nullptr || s->schema == nullptr || column < 0 || column >= static_cast<int>(s->schema->columns.size())) {
    return nullptr;
  }
  return &s->schema->columns[static_cast<size_t>(column)];
}

void BindSchema(const perserve::Schema& schema, perserve_schema* view) {
  view->schema = &schema;
  view->text = schema.ToString();
}

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
std::string_view TableName(const char* table) { return table == nullptr ? std::string_view{} : table; }

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

int PeersOut(perserve::Status status, MPI_Comm comm, MPI_Fint* peers) {
  if (Report(status) != 0) return 1;
  *peers = MPI_Comm_c2f(comm);
  return 0;
}

// `count` columns of `rows` rows each as spans (data[i]: bytes[i] bytes);
// false if a length is negative.
bool SpansOf(int64_t rows, size_t count, const void* const* data, const int64_t* bytes, perserve::ColumnSpans* out) {
  *out = perserve::ColumnSpans{rows, {}};
  for (size_t i = 0; i < count; ++i) {
    if (bytes[i] < 0) return false;
    out->columns.emplace_back(static_cast<const std::byte*>(data[i]), static_cast<size_t>(bytes[i]));
  }
  return true;
}

// perserve_actor_add_columns, _add_borrowed and _add_table: the batch as
// spans, checked by `add`, to the table named `table` (empty: the default).
int AddSpans(perserve_actor* a, int64_t n, const void* const* columns, const int64_t* column_bytes,
             const double* priorities, bool borrow, std::string_view table = {}) {
  if (a == nullptr) return Fail("actor handle is NULL");
  if (columns == nullptr || column_bytes == nullptr) return Fail("columns or column_bytes is NULL");
  return Guarded([&] {
    perserve::ColumnSpans batch;
    if (!SpansOf(n, a->client->schema().columns.size(), columns, column_bytes, &batch)) {
      return Fail("a column length is negative");
    }
    std::span<const double> given;
    if (priorities != nullptr && n > 0) given = std::span<const double>(priorities, static_cast<size_t>(n));
    return Report(borrow ? a->client->AddBorrowed(batch, given, table) : a->client->Add(batch, given, table));
  });
}

}  // namespace

extern "C" {

perserve_actor* perserve_actor_join_with(MPI_Fint comm, int max_in_flight, double add_timeout_seconds) {
  return Guarded(
      [&]() -> perserve_actor* {
        auto handle = std::make_unique<perserve_actor>();
        perserve::ClientOptions options;
        options.max_in_flight = max_in_flight;
        options.add_timeout_seconds = add_timeout_seconds;
        if (Report(perserve::ActorClient::Join(FromFortran(comm), options, &handle->client)) != 0) return nullptr;
        BindSchema(handle->client->schema(), &handle->schema);
        const perserve::ActorClient& actor = *handle->client;
        const auto item_schema = [&actor](const std::string& name) -> const perserve::Schema& {
          return actor.item_schema(name);
        };
        BindTables(actor.tables(), item_schema, &handle->tables, &handle->item_schemas);
        return handle.release();
      },
      static_cast<perserve_actor*>(nullptr));
}

perserve_actor* perserve_actor_join(MPI_Fint comm, int max_in_flight) {
  return perserve_actor_join_with(comm, max_in_flight, 0.0);
}

int perserve_actor_num_columns(const perserve_actor* a) {
  return a == nullptr ? -1 : static_cast<int>(a->client->schema().columns.size());
}

int64_t perserve_actor_column_bytes(const perserve_actor* a, int column) {
  return a == nullptr ? -1 : perserve_schema_column_bytes(&a->schema, column);
}

const perserve_schema* perserve_actor_schema(const perserve_actor* a) { return a == nullptr ? nullptr : &a->schema; }

int perserve_actor_add(perserve_actor* a, int64_t n, const void* const* columns, const double* priorities) {
  if (a == nullptr) return Fail("actor handle is NULL");
  if (columns == nullptr) return Fail("columns is NULL");
  return Guarded([&] {
    perserve::BatchView batch;
    batch.size = n;
    batch.columns.assign(columns, columns + a->client->schema().columns.size());
    std::span<const double> given;
    if (priorities != nullptr && n > 0) given = std::span<const double>(priorities, static_cast<size_t>(n));
    return Report(a->client->Add(batch, given));
  });
}

int perserve_actor_add_columns(perserve_actor* a, int64_t n, const void* const* columns, const int64_t* column_bytes,
                               const double* priorities) {
  return AddSpans(a, n, columns, column_bytes, priorities, /*borrow=*/false);
}

int perserve_actor_add_borrowed(perserve_actor* a, int64_t n, const void* const* columns, const int64_t* column_bytes,
                                const double* priorities) {
  return AddSpans(a, n, columns, column_bytes, priorities, /*borrow=*/true);
}

int perserve_actor_append(perserve_actor* a, int64_t n, const void* const* columns, const int64_t* column_bytes,
                          int64_t items, const int64_t* item_steps, const double* priorities,
                          const void* const* item_columns, const int64_t* item_column_bytes) {
  if (a == nullptr) return Fail("actor handle is NULL");
  if (n < 0 || items < 0) return Fail("a negative count of steps or items");
  if (n > 0 && (columns == nullptr || column_bytes == nullptr)) return Fail("columns or column_bytes is NULL");
  if (items > 0 && item_steps == nullptr) return Fail("item_steps is NULL");
  const size_t item_column_count = a->client->item_schema().columns.size();
  if (items > 0 && item_column_count > 0 && (item_columns == nullptr || item_column_bytes == nullptr)) {
    return Fail("the server's items carry columns: item_columns or item_column_bytes is NULL");
  }
  return Guarded([&] {
    perserve::ColumnSpans steps;
    perserve::NewItems new_items;
    if (n > 0 && !SpansOf(n, a->client->schema().columns.size(), columns, column_bytes, &steps)) {
      return Fail("a column length is negative");
    }
    if (items > 0 && item_column_count > 0 &&
        !SpansOf(items, item_column_count, item_columns, item_column_bytes, &new_items.columns)) {
      return Fail("an item column length is negative");
    }
    if (items > 0) new_items.steps = std::span<const int64_t>(item_steps, static_cast<size_t>(items));
    if (items > 0 && priorities != nullptr) {
      new_items.priorities = std::span<const double>(priorities, static_cast<size_t>(items));
    }
    return Report(a->client->Append(steps, new_items));
  });
}

int64_t perserve_actor_steps_appended(const perserve_actor* a) {
  return a == nullptr ? -1 : a->client->steps_appended();
}

int perserve_actor_stores_steps(const perserve_actor* a) {
  return a == nullptr ? -1 : (a->client->stores_steps() ? 1 : 0);
}

int perserve_actor_can_add(perserve_actor* a, int* ready) {
  if (a == nullptr || ready == nullptr) return Fail("actor handle or ready is NULL");
  return Guarded([&] {
    bool can = false;
    const int code = Report(a->client->CanAdd(&can));
    *ready = can ? 1 : 0;
    return code;
  });
}

int perserve_actor_flush(perserve_actor* a) {
  if (a == nullptr) return Fail("actor handle is NULL");
  return Guarded([&] { return Report(a->client->Flush()); });
}

int perserve_actor_peers(perserve_actor* a, MPI_Fint* peers) {
  if (a == nullptr || peers == nullptr) return Fail("actor handle or peers is NULL");
  return Guarded([&] {
    MPI_Comm comm = MPI_COMM_NULL;
    const perserve::Status status = a->client->Peers(&comm);
    return PeersOut(status, comm, peers);
  });
}

int perserve_actor_close(perserve_actor* a) {
  if (a == nullptr) return Fail("actor handle is NULL");
  const int result = Guarded([&] { return Report(a->client->Close()); });
  delete a;  // the destructors do not throw: Close has run
  return result;
}

perserve_learner* perserve_learner_join_sharded(MPI_Fint comm, int prefetch, int max_in_flight,
                                                int exact_shard_totals) {
  return Guarded(
      [&]() -> perserve_learner* {
        auto handle = std::make_unique<perserve_learner>();
        perserve::ClientOptions options;
        options.prefetch = prefetch;
        options.max_in_flight = max_in_flight;
        options.exact_shard_totals = exact_shard_totals != 0;
        if (Report(perserve::LearnerClient::Join(FromFortran(comm), options, &handle->client)) != 0) return nullptr;
        BindSchema(handle->client->schema(), &handle->schema);
        const perserve::LearnerClient& learner = *handle->client;
        const auto sample_schema = [&learner](const std::string& name) -> const perserve::Schema& {
          return learner.schema(name);
        };
        BindTables(learner.tables(), sample_schema, &handle->tables, &handle->sample_schemas);
        return handle.release();
      },
      static_cast<perserve_learner*>(nullptr));
}

perserve_learner* perserve_learner_join_with(MPI_Fint comm, int prefetch, int max_in_flight) {
  return perserve_learner_join_sharded(comm, prefetch, max_in_flight, 0);
}

int perserve_learner_shards(const perserve_learner* l) { return l == nullptr ? -1 : l->client->shards(); }

int perserve_learner_checkpoint(perserve_learner* l, char* paths, size_t capacity) {
  if (l == nullptr || paths == nullptr) return Fail("learner handle or paths is NULL");
  return Guarded([&] {
    std::vector<std::string> written;
    const int code = Report(l->client->Checkpoint(&written));
    if (code != 0) return code;
    std::string joined;
    for (const std::string& path : written) joined += (joined.empty() ? "" : "\n") + path;
    if (joined.size() + 1 > capacity) {
      SetLastError(Code::kOutOfRange, ("the checkpoint paths take " + std::to_string(joined.size() + 1) +
                                       " bytes; " + std::to_string(capacity) + " given")
                                          .c_str());
      return 1;
    }
    std::memcpy(paths, joined.c_str(), joined.size() + 1);
    return 0;
  });
}

int perserve_learner_info(perserve_learner* l, int64_t* size, int64_t* items_added, double* total) {
  if (l == nullptr) return Fail("learner handle is NULL");
  return Guarded([&] {
    perserve::ReplayInfo info;
    const int code = Report(l->client->Info(&info));
    if (code != 0) return code;
    if (size != nullptr) *size = info.size;
    if (items_added != nullptr) *items_added = info.items_added;
    if (total != nullptr) *total = info.total;
    return 0;
  });
}

perserve_learner* perserve_learner_join(MPI_Fint comm) {
  return perserve_learner_join_with(comm, 0, perserve::ClientOptions{}.max_in_flight);
}

int perserve_learner_num_columns(const perserve_learner* l) {
  return l == nullptr ? -1 : static_cast<int>(l->client->schema().columns.size());
}

int64_t perserve_learner_column_bytes(const perserve_learner* l, int column) {
  return l == nullptr ? -1 : perserve_schema_column_bytes(&l->schema, column);
}

const perserve_schema* perserve_learner_schema(const perserve_learner* l) {
  return l == nullptr ? nullptr : &l->schema;
}

namespace {

int CopyOut(const perserve::SampleBatch& batch, int64_t capacity, uint64_t* keys, double* weights,
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

}  // namespace

int perserve_learner_sample_timeout(perserve_learner* l, int64_t n, double beta, double timeout_seconds,
                                    uint64_t* keys, double* weights, void* const* columns) {
  if (l == nullptr) return Fail("learner handle is NULL");
  if (keys == nullptr) return Fail("keys is NULL");
  return Guarded([&] {
    perserve::SampleBatch batch;
    if (Report(l->client->Sample(n, beta, &batch, timeout_seconds)) != 0) return 1;
    return CopyOut(batch, n, keys, weights, nullptr, columns);
  });
}

int perserve_learner_sample(perserve_learner* l, int64_t n, double beta, uint64_t* keys, double* weights,
                            void* const* columns) {
  return perserve_learner_sample_timeout(l, n, beta, 0.0, keys, weights, columns);
}

int perserve_learner_request_sample_timeout(perserve_learner* l, int64_t n, double beta, double timeout_seconds) {
  if (l == nullptr) return Fail("learner handle is NULL");
  return Guarded([&] { return Report(l->client->RequestSample(n, beta, timeout_seconds)); });
}

int perserve_learner_request_sample(perserve_learner* l, int64_t n, double beta) {
  return perserve_learner_request_sample_timeout(l, n, beta, 0.0);
}

int perserve_learner_receive_sample(perserve_learner* l, int64_t capacity, int64_t* count_out, uint64_t* keys,
                                    double* weights, double* probabilities, void* const* columns) {
  if (l == nullptr) return Fail("learner handle is NULL");
  return Guarded([&] {
    perserve::SampleBatch batch;
    if (Report(l->client->ReceiveSample(&batch)) != 0) return 1;
    if (count_out != nullptr) *count_out = batch.size;
    return CopyOut(batch, capacity, keys, weights, probabilities, columns);
  });
}

int perserve_learner_update(perserve_learner* l, const uint64_t* keys, const double* priorities, int64_t n,
                            int64_t* stale_out) {
  if (l == nullptr) return Fail("learner handle is NULL");
  if (n < 0) return Fail("n is negative");
  if (n > 0 && (keys == nullptr || priorities == nullptr)) return Fail("NULL array with n > 0");
  return Guarded([&] {
    perserve::UpdateResult result;
    const size_t count = n > 0 ? static_cast<size_t>(n) : 0;
    const int code = Report(l->client->UpdatePriorities(std::span<const uint64_t>(keys, count),
                                                        std::span<const double>(priorities, count), &result));
    if (code == 0 && stale_out != nullptr) *stale_out = result.stale;
    return code;
  });
}

int perserve_learner_send_update(perserve_learner* l, const uint64_t* keys, const double* priorities, int64_t n) {
  if (l == nullptr) return Fail("learner handle is NULL");
  if (n < 0) return Fail("n is negative");
  if (n > 0 && (keys == nullptr || priorities == nullptr)) return Fail("NULL array with n > 0");
  return Guarded([&] {
    const size_t count = n > 0 ? static_cast<size_t>(n) : 0;
    return Report(l->client->SendPriorityUpdate(std::span<const uint64_t>(keys, count),
                                                std::span<const double>(priorities, count)));
  });
}

int perserve_learner_flush(perserve_learner* l) {
  if (l == nullptr) return Fail("learner handle is NULL");
  return Guarded([&] { return Report(l->client->Flush()); });
}

int perserve_learner_update_totals(const perserve_learner* l, int64_t* applied, int64_t* stale, int64_t* dropped) {
  if (l == nullptr) return Fail("learner handle is NULL");
  const perserve::UpdateResult& totals = l->client->updates();
  if (applied != nullptr) *applied = totals.applied;
  if (stale != nullptr) *stale = totals.stale;
  if (dropped != nullptr) *dropped = totals.dropped;
  return 0;
}

int perserve_learner_peers(perserve_learner* l, MPI_Fint* peers) {
  if (l == nullptr || peers == nullptr) return Fail("learner handle or peers is NULL");
  return Guarded([&] {
    MPI_Comm comm = MPI_COMM_NULL;
    const perserve::Status status = l->client->Peers(&comm);
    return PeersOut(status, comm, peers);
  });
}

int perserve_learner_close(perserve_learner* l) {
  if (l == nullptr) return Fail("learner handle is NULL");
  const int result = Guarded([&] { return Report(l->client->Close()); });
  delete l;
  return result;
}

int perserve_actor_num_tables(const perserve_actor* a) {
  return a == nullptr ? -1 : static_cast<int>(a->tables.size());
}

const char* perserve_actor_table_name(const perserve_actor* a, int table) {
  return a == nullptr ? nullptr : TableAt(a->tables, table);
}

const perserve_schema* perserve_actor_item_schema(const perserve_actor* a, const char* table) {
  return a == nullptr ? nullptr : TableSchema(a->tables, a->item_schemas, table);
}

int perserve_actor_add_table(perserve_actor* a, const char* table, int64_t n, const void* const* columns,
                             const int64_t* column_bytes, const double* priorities) {
  return AddSpans(a, n, columns, column_bytes, priorities, /*borrow=*/false, TableName(table));
}

int perserve_actor_append_tables(perserve_actor* a, int64_t n, const void* const* columns,
                                 const int64_t* column_bytes, int groups, const perserve_new_items* items) {
  if (a == nullptr) return Fail("actor handle is NULL");
  if (n < 0 || groups < 0) return Fail("a negative count of steps or item groups");
  if (n > 0 && (columns == nullptr || column_bytes == nullptr)) return Fail("columns or column_bytes is NULL");
  if (groups > 0 && items == nullptr) return Fail("items is NULL");
  return Guarded([&] {
    perserve::ColumnSpans steps;
    if (n > 0 && !SpansOf(n, a->client->schema().columns.size(), columns, column_bytes, &steps)) {
      return Fail("a column length is negative");
    }
    std::vector<perserve::NewItems> new_items(static_cast<size_t>(groups));
    for (int g = 0; g < groups; ++g) {
      const perserve_new_items& given = items[g];
      perserve::NewItems& group = new_items[static_cast<size_t>(g)];
      group.table = TableName(given.table);
      if (given.items < 0) return Fail("a negative count of items");
      if (given.items == 0) continue;
      if (given.item_steps == nullptr) return Fail("item_steps is NULL");
      const size_t count = static_cast<size_t>(given.items);
      group.steps = std::span<const int64_t>(given.item_steps, count);
      if (given.priorities != nullptr) group.priorities = std::span<const double>(given.priorities, count);
      const size_t item_columns = a->client->item_schema(group.table).columns.size();
      if (item_columns > 0 && (given.item_columns == nullptr || given.item_column_bytes == nullptr)) {
        return Fail("the table's items carry columns: item_columns or item_column_bytes is NULL");
      }
      if (item_columns > 0 &&
          !SpansOf(given.items, item_columns, given.item_columns, given.item_column_bytes, &group.columns)) {
        return Fail("an item column length is negative");
      }
    }
    return Report(a->client->Append(steps, std::span<const perserve::NewItems>(new_items)));
  });
}

int perserve_learner_num_tables(const perserve_learner* l) {
  return l == nullptr ? -1 : static_cast<int>(l->tables.size());
}

const char* perserve_learner_table_name(const perserve_learner* l, int table) {
  return l == nullptr ? nullptr : TableAt(l->tables, table);
}

const perserve_schema* perserve_learner_table_schema(const perserve_learner* l, const char* table) {
  return l == nullptr ? nullptr : TableSchema(l->tables, l->sample_schemas, table);
}

int perserve_learner_sample_table(perserve_learner* l, const char* table, int64_t n, double beta,
                                  double timeout_seconds, uint64_t* keys, double* weights, void* const* columns) {
  if (l == nullptr) return Fail("learner handle is NULL");
  if (keys == nullptr) return Fail("keys is NULL");
  return Guarded([&] {
    perserve::SampleBatch batch;
    if (Report(l->client->Sample(TableName(table), n, beta, &batch, timeout_seconds)) != 0) return 1;
    return CopyOut(batch, n, keys, weights, nullptr, columns);
  });
}

int perserve_learner_request_sample_table(perserve_learner* l, const char* table, int64_t n, double beta,
                                          double timeout_seconds) {
  if (l == nullptr) return Fail("learner handle is NULL");
  return Guarded([&] { return Report(l->client->RequestSample(TableName(table), n, beta, timeout_seconds)); });
}

int perserve_learner_update_table(perserve_learner* l, const char* table, const uint64_t* keys,
                                  const double* priorities, int64_t n, int64_t* stale_out) {
  if (l == nullptr) return Fail("learner handle is NULL");
  if (n < 0) return Fail("n is negative");
  if (n > 0 && (keys == nullptr || priorities == nullptr)) return Fail("NULL array with n > 0");
  return Guarded([&] {
    perserve::UpdateResult result;
    const size_t count = n > 0 ? static_cast<size_t>(n) : 0;
    const int code = Report(l->client->UpdatePriorities(TableName(table), std::span<const uint64_t>(keys, count),
                                                        std::span<const double>(priorities, count), &result));
    if (code == 0 && stale_out != nullptr) *stale_out = result.stale;
    return code;
  });
}

int perserve_learner_send_update_table(perserve_learner* l, const char* table, const uint64_t* keys,
                                       const double* priorities, int64_t n) {
  if (l == nullptr) return Fail("learner handle is NULL");
  if (n < 0) return Fail("n is negative");
  if (n > 0 && (keys == nullptr || priorities == nullptr)) return Fail("NULL array with n > 0");
  return Guarded([&] {
    const size_t count = n > 0 ? static_cast<size_t>(n) : 0;
    return Report(l->client->SendPriorityUpdate(TableName(table), std::span<const uint64_t>(keys, count),
                                                std::span<const double>(priorities, count)));
  });
}

int perserve_learner_info_table(perserve_learner* l, const char* table, int64_t* size, int64_t* items_added,
                                double* total) {
  if (l == nullptr) return Fail("learner handle is NULL");
  return Guarded([&] {
    perserve::ReplayInfo info;
    const int code = Report(l->client->Info(TableName(table), &info));
    if (code != 0) return code;
    if (size != nullptr) *size = info.size;
    if (items_added != nullptr) *items_added = info.items_added;
    if (total != nullptr) *total = info.total;
    return 0;
  });
}

int perserve_bystander_join(MPI_Fint comm) {
  return Guarded([&] { return Report(perserve::JoinAsBystander(FromFortran(comm))); });
}

perserve_bystander* perserve_bystander_join_with_handle(MPI_Fint comm) {
  return Guarded(
      [&]() -> perserve_bystander* {
        auto handle = std::make_unique<perserve_bystander>();
        if (Report(perserve::JoinAsBystander(FromFortran(comm), &handle->client)) != 0) return nullptr;
        return handle.release();
      },
      static_cast<perserve_bystander*>(nullptr));
}

int perserve_bystander_peers(perserve_bystander* b, MPI_Fint* peers) {
  if (b == nullptr || peers == nullptr) return Fail("bystander handle or peers is NULL");
  return Guarded([&] {
    MPI_Comm comm = MPI_COMM_NULL;
    const perserve::Status status = b->client->Peers(&comm);
    return PeersOut(status, comm, peers);
  });
}

void perserve_bystander_free(perserve_bystander* b) { delete b; }

int perserve_schema_num_columns(const perserve_schema* s) {
  return s == nullptr || s->schema == nullptr ? -1 : static_cast<int>(s->schema->columns.size());
}

const char* perserve_schema_column_name(const perserve_schema* s, int column) {
  const perserve::Column* c = ColumnAt(s, column);
  return c == nullptr ? nullptr : c->name.c_str();
}

const char* perserve_schema_column_dtype(const perserve_schema* s, int column) {
  const perserve::Column* c = ColumnAt(s, column);
  return c == nullptr ? nullptr : perserve::DTypeName(c->dtype).data();  // names are literals: NUL-terminated
}

int perserve_schema_column_ndim(const perserve_schema* s, int column) {
  const perserve::Column* c = ColumnAt(s, column);
  return c == nullptr ? -1 : static_cast<int>(c->shape.size());
}

int64_t perserve_schema_column_dim(const perserve_schema* s, int column, int axis) {
  const perserve::Column* c = ColumnAt(s, column);
  if (c == nullptr || axis < 0 || axis >= static_cast<int>(c->shape.size())) return -1;
  return c->shape[static_cast<size_t>(axis)];
}

int64_t perserve_schema_column_bytes(const perserve_schema* s, int column) {
  const perserve::Column* c = ColumnAt(s, column);
  return c == nullptr ? -1 : c->ItemBytes();
}

const char* perserve_schema_string(const perserve_schema* s) { return s == nullptr ? nullptr : s->text.c_str(); }

int64_t perserve_unreceived_close_errors(void) { return perserve::UnreceivedCloseErrors(); }

const char* perserve_client_last_error(void) {
  return last_error_lost ? "RESOURCE_EXHAUSTED: out of memory (the error's text could not be kept)"
                         : last_error.c_str();
}

int perserve_client_last_error_code(void) { return static_cast<int>(last_error_code); }

}  // extern "C"
