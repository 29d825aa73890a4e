// perserve._perserve: the pybind11 layer between the perserve Python package
// (client/python/perserve/) and the C++ client. Thin on purpose: schema
// checks by column name, prefetch policy and exceptions' classes live in
// Python or in the C++ client; this file only converts.
//
// Contracts kept here:
//  - every call that can wait on MPI (joins, add, sample, flush, close,
//    peers) releases the GIL while it waits; a mutex per client keeps the C++
//    client to one thread at a time;
//  - timeouts arrive in seconds, 0 for none (the Python layer maps None);
//  - a sample's arrays are views of the received message: one capsule owns
//    the C++ SampleBatch and is the base of every array (no copy); when the
//    last array goes, the message's buffer returns to its learner's pool,
//    and the next sample is received into it (no allocation, zero-fill or
//    page faults: 29 MB a sample of Atari transitions);
//  - a non-OK Status raises perserve.errors' class for its code (StatusError
//    below, translated at the module boundary).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <mutex>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "perserve/client.h"

namespace py = pybind11;

namespace perserve::python {
namespace {

struct StatusError {
  int code;
  std::string message;
};

void Check(const Status& status) {
  if (!status.ok()) throw StatusError{static_cast<int>(status.code()), status.message()};
}

MPI_Comm CommFromFortran(int64_t handle) { return MPI_Comm_f2c(static_cast<MPI_Fint>(handle)); }

py::list SchemaColumns(const Schema& schema) {
  py::list columns;
  for (const Column& column : schema.columns) {
    columns.append(py::make_tuple(column.name, std::string(DTypeName(column.dtype)), py::tuple(py::cast(column.shape))));
  }
  return columns;
}

// Buffers of samples Python is done with, received into again. Used with the
// GIL held (a capsule's destructor runs with it), so it needs no lock of its
// own; shared by a learner and every sample it returned, which may outlive it.
class MessagePool {
 public:
  // At most this many kept: the sample in hand, the one arriving, and one
  // the user still holds (a learner that keeps the previous batch).
  static constexpr size_t kBuffers = 3;

  std::vector<std::byte> Take() {
    if (buffers_.empty()) return {};
    std::vector<std::byte> buffer = std::move(buffers_.back());
    buffers_.pop_back();
    return buffer;
  }
  void Give(std::vector<std::byte> buffer) {
    if (buffers_.size() < kBuffers && buffer.capacity() > 0) buffers_.push_back(std::move(buffer));
  }
  size_t size() const { return buffers_.size(); }

 private:
  std::vector<std::vector<std::byte>> buffers_;
};

// What a sample's capsule owns: the batch, and the pool its buffer returns to.
struct OwnedSample {
  SampleBatch batch;
  std::shared_ptr<MessagePool> pool;
};

// A sample as Python sees it: (keys, weights, probabilities, message, [column arrays],
// table name), every array a view into the one SampleBatch the capsule owns.
py::tuple SampleToPython(SampleBatch batch, const Schema& schema, std::shared_ptr<MessagePool> pool) {
  auto* sample = new OwnedSample{std::move(batch), std::move(pool)};
  SampleBatch* owned = &sample->batch;
  py::capsule base(sample, [](void* p) {
    auto* done = static_cast<OwnedSample*>(p);
    done->pool->Give(std::move(done->batch.message));
    delete done;
  });
  const py::ssize_t n = owned->size;
  py::array keys(py::dtype::of<uint64_t>(), {n}, {}, owned->keys.data(), base);
  py::array weights(py::dtype::of<double>(), {n}, {}, owned->weights.data(), base);
  py::array probabilities(py::dtype::of<double>(), {n}, {}, owned->probabilities.data(), base);
  py::array message(py::dtype::of<uint8_t>(), {static_cast<py::ssize_t>(owned->message.size())}, {},
                    owned->message.data(), base);
  py::list columns;
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const Column& column = schema.columns[i];
    std::vector<py::ssize_t> shape{n};
    for (int64_t d : column.shape) shape.push_back(static_cast<py::ssize_t>(d));
    columns.append(py::array(py::dtype(std::string(DTypeName(column.dtype))), shape, {},
                             owned->columns[i].data(), base));
  }
  return py::make_tuple(keys, weights, probabilities, message, columns, owned->table);
}

template <typename T>
std::span<const T> SpanOf(const py::array_t<T, py::array::c_style | py::array::forcecast>& array) {
  return std::span<const T>(array.data(), static_cast<size_t>(array.size()));
}

// One span per buffer (C-contiguous, in column order), `rows` rows; the
// buffers stay held in *views while the spans are used.
ColumnSpans SpansOf(int64_t rows, const std::vector<py::buffer>& buffers, std::vector<py::buffer_info>* views) {
  ColumnSpans spans{rows, {}};
  for (const py::buffer& buffer : buffers) {
    views->push_back(buffer.request());
    spans.columns.emplace_back(static_cast<const std::byte*>(views->back().ptr),
                               static_cast<size_t>(views->back().size * views->back().itemsize));
  }
  return spans;
}

// What the Python-facing clients share: the client, and calls made with the
// GIL released under the client's mutex (a client is not thread-safe), their
// Status raised as a perserve.Error.
template <class Client>
class Guarded {
 public:
  int64_t peers() {
    MPI_Comm comm = MPI_COMM_NULL;
    Locked([&] { return client_->Peers(&comm); });
    return MPI_Comm_c2f(comm);
  }

 protected:
  template <typename Body>
  void Locked(Body body) {
    Status status;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(mutex_);
      status = body();
    }
    Check(status);
  }

  std::unique_ptr<Client> client_;
  std::mutex mutex_;
};

class Actor : public Guarded<ActorClient> {
 public:
  Actor(int64_t comm, int max_in_flight, double add_timeout_seconds) {
    ClientOptions options;
    options.max_in_flight = max_in_flight;
    options.add_timeout_seconds = add_timeout_seconds;
    py::gil_scoped_release release;
    Check(ActorClient::Join(CommFromFortran(comm), options, &client_));
  }

  py::list schema() const { return SchemaColumns(client_->schema()); }
  std::string schema_string() const { return client_->schema().ToString(); }
  std::vector<std::string> tables() const { return client_->tables(); }

  // columns: one C-contiguous buffer per schema column, in schema order
  // (the Python layer has checked dtypes and shapes by name); table: its
  // name ("": the default table).
  using Priorities = py::array_t<double, py::array::c_style | py::array::forcecast>;

  void add(int64_t size, const std::vector<py::buffer>& columns, std::optional<Priorities> priorities,
           const std::string& table) {
    std::vector<py::buffer_info> views;
    const ColumnSpans batch = SpansOf(size, columns, &views);
    std::span<const double> given;
    if (priorities) given = SpanOf(*priorities);
    Locked([&] { return client_->Add(batch, given, table); });
  }

  // An append: `size` steps (one buffer per step column, in order; size 0:
  // none), then for each group (table name, "" the default; item stream
  // indices; priorities or None; item columns, one buffer per item column of
  // the table, in order) its items.
  using Steps = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
  using Group = std::tuple<std::string, Steps, std::optional<Priorities>, std::vector<py::buffer>>;
  void append(int64_t size, const std::vector<py::buffer>& columns, const std::vector<Group>& groups) {
    std::vector<py::buffer_info> views;
    views.reserve(columns.size() + 8 * groups.size());
    const ColumnSpans steps = SpansOf(size, columns, &views);
    std::vector<NewItems> items(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& [table, item_steps, priorities, item_columns] = groups[g];
      items[g].table = table;
      items[g].steps = std::span<const int64_t>(item_steps.data(), static_cast<size_t>(item_steps.size()));
      if (priorities) items[g].priorities = SpanOf(*priorities);
      items[g].columns = SpansOf(static_cast<int64_t>(item_steps.size()), item_columns, &views);
      if (item_columns.empty()) items[g].columns.size = 0;
    }
    Locked([&] { return client_->Append(steps, std::span<const NewItems>(items)); });
  }
  int64_t steps_appended() const { return client_->steps_appended(); }
  bool stores_steps() const { return client_->stores_steps(); }
  py::list item_schema(const std::string& table) const { return SchemaColumns(client_->item_schema(table)); }

  void flush() { Locked([&] { return client_->Flush(); }); }
  void close() { Locked([&] { return client_->Close(); }); }
  bool can_add() {
    bool ready = false;
    Locked([&] { return client_->CanAdd(&ready); });
    return ready;
  }
  int64_t items_acknowledged() const { return client_->items_acknowledged(); }
  int64_t rejected_batches() const { return client_->rejected_batches(); }

};

class Learner : public Guarded<LearnerClient> {
 public:
  Learner(int64_t comm, int prefetch, int max_in_flight, bool exact_shard_totals) {
    ClientOptions options;
    options.prefetch = prefetch;
    options.max_in_flight = max_in_flight;
    options.exact_shard_totals = exact_shard_totals;
    py::gil_scoped_release release;
    Check(LearnerClient::Join(CommFromFortran(comm), options, &client_));
  }

  py::list schema(const std::string& table) const { return SchemaColumns(client_->schema(table)); }
  std::string schema_string() const { return client_->schema().ToString(); }
  std::vector<std::string> tables() const { return client_->tables(); }
  int shards() const { return client_->shards(); }
  std::vector<std::string> checkpoint() {
    std::vector<std::string> paths;
    Locked([&] { return client_->Checkpoint(&paths); });
    return paths;
  }
  py::tuple info(const std::string& table) {
    ReplayInfo info;
    Locked([&] { return client_->Info(table, &info); });
    return py::make_tuple(info.size, info.items_added, info.total, info.shards, info.shards_ready);
  }

  // table: its name ("": the default table).
  py::tuple sample(const std::string& table, int64_t batch_size, double beta, double timeout_seconds) {
    SampleBatch batch;
    batch.message = pool_->Take();
    Locked([&] { return client_->Sample(table, batch_size, beta, &batch, timeout_seconds); });
    const Schema& schema = client_->schema(batch.table);
    return SampleToPython(std::move(batch), schema, pool_);
  }
  void request_sample(const std::string& table, int64_t batch_size, double beta, double timeout_seconds) {
    Locked([&] { return client_->RequestSample(table, batch_size, beta, timeout_seconds); });
  }
  py::tuple receive_sample() {
    SampleBatch batch;
    batch.message = pool_->Take();
    Locked([&] { return client_->ReceiveSample(&batch); });
    const Schema& schema = client_->schema(batch.table);
    return SampleToPython(std::move(batch), schema, pool_);
  }
  int samples_in_flight() const { return client_->samples_in_flight(); }

  using Keys = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;
  using Priorities = py::array_t<double, py::array::c_style | py::array::forcecast>;

  void send_update(const std::string& table, const Keys& keys, const Priorities& priorities) {
    Locked([&] { return client_->SendPriorityUpdate(table, SpanOf(keys), SpanOf(priorities)); });
  }
  py::tuple update_and_wait(const std::string& table, const Keys& keys, const Priorities& priorities) {
    UpdateResult result;
    Locked([&] { return client_->UpdatePriorities(table, SpanOf(keys), SpanOf(priorities), &result); });
    return py::make_tuple(result.applied, result.stale, result.dropped);
  }
  py::tuple updates() const {
    const UpdateResult& totals = client_->updates();
    return py::make_tuple(totals.applied, totals.stale, totals.dropped);
  }
  void flush() { Locked([&] { return client_->Flush(); }); }
  void close() { Locked([&] { return client_->Close(); }); }
  size_t pooled_messages() const { return pool_->size(); }  // for the tests

 private:
  std::shared_ptr<MessagePool> pool_ = std::make_shared<MessagePool>();
};

class BystanderHandle : public Guarded<Bystander> {
 public:
  explicit BystanderHandle(int64_t comm) {
    Locked([&] { return JoinAsBystander(CommFromFortran(comm), &client_); });
  }
};

// Registered with Py_AtExit, so it runs once the interpreter is finalized:
// after the package's atexit handler has closed the clients still open
// (perserve/client.py) and after any close at MPI_Finalize called by hand.
// A close error printed then, which no Python code could catch, makes the
// process exit with status 1 (a job's launcher then reports the rank),
// instead of 0 as if nothing had been lost. MPI is finalized first, as
// mpi4py's own exit hook, which exit() skips, would have done.
void ExitFailingAfterUnreceivedCloseErrors() {
  if (UnreceivedCloseErrors() == 0) return;
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
  std::fprintf(stderr, "perserve: exit status 1: %lld close error(s) above reached no caller\n",
               static_cast<long long>(UnreceivedCloseErrors()));
  std::exit(1);
}

}  // namespace
}  // namespace perserve::python

PYBIND11_MODULE(_perserve, m) {
  using namespace perserve::python;
  m.doc() = "perserve's C++ client, as the perserve package uses it (not a public API)";

  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const StatusError& error) {
      py::object make = py::module_::import("perserve.errors").attr("_from_status");
      py::object exception = make(error.code, error.message);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
    } catch (const std::bad_alloc&) {
      py::object make = py::module_::import("perserve.errors").attr("_from_status");
      py::object exception =
          make(static_cast<int>(perserve::Status::Code::kResourceExhausted), std::string("out of memory"));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
    }
  });

  m.def(
      "report_unreceived_close_error",
      [](const std::string& role, const std::string& when, int code, const std::string& message) {
        perserve::ReportUnreceivedCloseError(role, when, perserve::Status::FromCode(code, message));
      },
      py::arg("role"), py::arg("when"), py::arg("code"), py::arg("message"));
  m.def("unreceived_close_errors", &perserve::UnreceivedCloseErrors);
  if (Py_AtExit(&ExitFailingAfterUnreceivedCloseErrors) != 0) {
    PyErr_WarnEx(PyExc_RuntimeWarning,
                 "perserve: could not register its exit hook: a close error at exit will not fail the exit status", 1);
  }

  py::class_<Actor>(m, "Actor")
      .def(py::init<int64_t, int, double>(), py::arg("comm"), py::arg("max_in_flight"),
           py::arg("add_timeout_seconds"))
      .def("schema", &Actor::schema)
      .def("schema_string", &Actor::schema_string)
      .def("tables", &Actor::tables)
      .def("add", &Actor::add, py::arg("size"), py::arg("columns"), py::arg("priorities"), py::arg("table"))
      .def("append", &Actor::append, py::arg("size"), py::arg("columns"), py::arg("groups"))
      .def_property_readonly("steps_appended", &Actor::steps_appended)
      .def("stores_steps", &Actor::stores_steps)
      .def("item_schema", &Actor::item_schema, py::arg("table"))
      .def("flush", &Actor::flush)
      .def("can_add", &Actor::can_add)
      .def("close", &Actor::close)
      .def("peers", &Actor::peers)
      .def_property_readonly("items_acknowledged", &Actor::items_acknowledged)
      .def_property_readonly("rejected_batches", &Actor::rejected_batches);

  py::class_<Learner>(m, "Learner")
      .def(py::init<int64_t, int, int, bool>(), py::arg("comm"), py::arg("prefetch"), py::arg("max_in_flight"),
           py::arg("exact_shard_totals"))
      .def("schema", &Learner::schema, py::arg("table"))
      .def("tables", &Learner::tables)
      .def("shards", &Learner::shards)
      .def("info", &Learner::info, py::arg("table"))
      .def("checkpoint", &Learner::checkpoint)
      .def("schema_string", &Learner::schema_string)
      .def("sample", &Learner::sample, py::arg("table"), py::arg("batch_size"), py::arg("beta"),
           py::arg("timeout_seconds"))
      .def("request_sample", &Learner::request_sample, py::arg("table"), py::arg("batch_size"), py::arg("beta"),
           py::arg("timeout_seconds"))
      .def("receive_sample", &Learner::receive_sample)
      .def_property_readonly("samples_in_flight", &Learner::samples_in_flight)
      .def("send_update", &Learner::send_update)
      .def("update_and_wait", &Learner::update_and_wait)
      .def("updates", &Learner::updates)
      .def("flush", &Learner::flush)
      .def("close", &Learner::close)
      .def("pooled_messages", &Learner::pooled_messages)
      .def("peers", &Learner::peers);

  py::class_<BystanderHandle>(m, "Bystander")
      .def(py::init<int64_t>(), py::arg("comm"))
      .def("peers", &BystanderHandle::peers);
}
