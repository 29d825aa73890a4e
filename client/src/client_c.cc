// The C ABI of perserve/client_c.h over ActorClient, LearnerClient and
// Bystander: joins, adds and appends, samples and updates of the default
// table, schemas and the last error (the tables' calls: client_c_tables.cc;
// what they share, and where Status values become C return codes: c_abi.h).
#include <cstring>
#include <memory>
#include <string>

#include "client/src/c_abi.h"

using namespace perserve::c_abi;

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

// The default table's: the tables' calls with no table (client_c_tables.cc).
int perserve_learner_update(perserve_learner* l, const uint64_t* keys, const double* priorities, int64_t n,
                            int64_t* stale_out) {
  return perserve_learner_update_table(l, nullptr, keys, priorities, n, stale_out);
}

int perserve_learner_send_update(perserve_learner* l, const uint64_t* keys, const double* priorities, int64_t n) {
  return perserve_learner_send_update_table(l, nullptr, keys, priorities, n);
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

const char* perserve_client_last_error(void) { return LastError(); }

int perserve_client_last_error_code(void) { return LastErrorCode(); }

}  // extern "C"
