// The C ABI of perserve/client_c.h over ActorClient and LearnerClient: the one
// place where client Status values become C return codes.
#include "perserve/client_c.h"

#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "perserve/client.h"

struct perserve_actor {
  std::unique_ptr<perserve::ActorClient> client;
};
struct perserve_learner {
  std::unique_ptr<perserve::LearnerClient> client;
};

namespace {

thread_local std::string last_error;

int Report(const perserve::Status& status) {
  if (status.ok()) return 0;
  last_error = status.ToString();
  return 1;
}

int Fail(const char* message) {
  last_error = std::string("INVALID_ARGUMENT: ") + message;
  return 1;
}

template <typename Body>
int Guarded(Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    last_error = std::string("INTERNAL: ") + e.what();
    return 1;
  }
}

int64_t ColumnBytes(const perserve::Schema& schema, int column) {
  if (column < 0 || column >= static_cast<int>(schema.columns.size())) return -1;
  return schema.columns[column].ItemBytes();
}

}  // namespace

extern "C" {

perserve_actor* perserve_actor_join(MPI_Fint comm, int max_in_flight) {
  auto handle = std::make_unique<perserve_actor>();
  perserve::ClientOptions options;
  options.max_in_flight = max_in_flight;
  if (Report(perserve::ActorClient::Join(MPI_Comm_f2c(comm), options, &handle->client)) != 0) return nullptr;
  return handle.release();
}

int perserve_actor_num_columns(const perserve_actor* a) {
  return a == nullptr ? -1 : static_cast<int>(a->client->schema().columns.size());
}

int64_t perserve_actor_column_bytes(const perserve_actor* a, int column) {
  return a == nullptr ? -1 : ColumnBytes(a->client->schema(), column);
}

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

int perserve_actor_flush(perserve_actor* a) {
  if (a == nullptr) return Fail("actor handle is NULL");
  return Guarded([&] { return Report(a->client->Flush()); });
}

int perserve_actor_close(perserve_actor* a) {
  if (a == nullptr) return Fail("actor handle is NULL");
  const int result = Guarded([&] { return Report(a->client->Close()); });
  delete a;
  return result;
}

perserve_learner* perserve_learner_join(MPI_Fint comm) {
  auto handle = std::make_unique<perserve_learner>();
  if (Report(perserve::LearnerClient::Join(MPI_Comm_f2c(comm), {}, &handle->client)) != 0) return nullptr;
  return handle.release();
}

int perserve_learner_num_columns(const perserve_learner* l) {
  return l == nullptr ? -1 : static_cast<int>(l->client->schema().columns.size());
}

int64_t perserve_learner_column_bytes(const perserve_learner* l, int column) {
  return l == nullptr ? -1 : ColumnBytes(l->client->schema(), column);
}

int perserve_learner_sample(perserve_learner* l, int64_t n, double beta, uint64_t* keys, double* weights,
                            void* const* columns) {
  if (l == nullptr) return Fail("learner handle is NULL");
  if (keys == nullptr) return Fail("keys is NULL");
  return Guarded([&] {
    perserve::SampleBatch batch;
    if (Report(l->client->Sample(n, beta, &batch)) != 0) return 1;
    std::memcpy(keys, batch.keys.data(), batch.keys.size() * sizeof(uint64_t));
    if (weights != nullptr) std::memcpy(weights, batch.weights.data(), batch.weights.size() * sizeof(double));
    for (size_t i = 0; columns != nullptr && i < batch.columns.size(); ++i) {
      if (columns[i] != nullptr) std::memcpy(columns[i], batch.columns[i].data(), batch.columns[i].size());
    }
    return 0;
  });
}

int perserve_learner_update(perserve_learner* l, const uint64_t* keys, const double* priorities, int64_t n,
                            int64_t* stale_out) {
  if (l == nullptr) return Fail("learner handle is NULL");
  if (n < 0) return Fail("n is negative");
  if (n > 0 && (keys == nullptr || priorities == nullptr)) return Fail("NULL array with n > 0");
  return Guarded([&] {
    perserve::UpdateResult result;
    const size_t count = static_cast<size_t>(n);
    const int code = Report(l->client->UpdatePriorities(std::span<const uint64_t>(keys, n > 0 ? count : 0),
                                                        std::span<const double>(priorities, n > 0 ? count : 0),
                                                        &result));
    if (code == 0 && stale_out != nullptr) *stale_out = result.stale;
    return code;
  });
}

int perserve_learner_close(perserve_learner* l) {
  if (l == nullptr) return Fail("learner handle is NULL");
  const int result = Guarded([&] { return Report(l->client->Close()); });
  delete l;
  return result;
}

int perserve_bystander_join(MPI_Fint comm) { return Report(perserve::JoinAsBystander(MPI_Comm_f2c(comm))); }

const char* perserve_client_last_error(void) { return last_error.c_str(); }

}  // extern "C"
