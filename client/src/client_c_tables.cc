// The C ABI's tables (perserve/client_c.h, issue 34): a client's tables by
// name and index, their schemas, and adds, appends, samples, updates and
// infos of a table by name (NULL or "": the default table).
#include "client/src/c_abi.h"

using namespace perserve::c_abi;

extern "C" {

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

}  // extern "C"
