// The client library's own promises, under mpirun beside a real server
// (tests/CMakeLists.txt: mpi_client_checks, perserve-server --capacity 100
// --column id:int64 --column payload:uint8:3 --column value:float64:2):
//
//   actor      bad batches refused at their own Add (a column's length, a
//              NaN priority, a priority count), naming the column, with
//              nothing sent; three batches the server rejects while in
//              flight all reported, as one count with the first error,
//              and only once (regression: Flush used to report the first
//              and then succeed twice).
//   learner    prefetch keeps k requests in flight and answers in request
//              order; a changed size drops older requests; updates that do
//              not wait, with back-pressure, totals and a rejection
//              returned by the first call that finds it arrived, at the
//              latest the ReceiveSample of a request sent after it.
//   bystander  joins with a handle.
// Then all three build the peers communicator (without the server) and
// broadcast over it.
//
// mpi_client_sample_deadline (the same server with --min-size-to-sample 50):
//
//   deadline_learner  bad timeouts refused before sending; with the replay
//                     empty, a sample with a 0.5 s timeout comes back
//                     DEADLINE_EXCEEDED in 0.4-5 s, leaving nothing in
//                     flight; a timed-out RequestSample is returned by its
//                     ReceiveSample while an untimed one behind it waits;
//                     after the actor's 50 items the waiting one is answered
//                     and sampling goes on (the learner stays usable).
//   deadline_actor    a bad add timeout refused at the join, then 50 items
//                     added with an add timeout once the learner says so.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "check.h"
#include "perserve/client.h"

namespace {

using perserve::Status;

int rank = -1;

using perserve::mpi_test::Contains;

// Columns for n items: id, payload (3 bytes), value (2 doubles), as spans.
struct Batch {
  explicit Batch(int64_t n, int64_t first_id = 0) : ids(n), payload(3 * n, 7), values(2 * n, 0.5) {
    for (int64_t j = 0; j < n; ++j) ids[j] = first_id + j;
  }
  perserve::ColumnSpans Spans() const {
    return {static_cast<int64_t>(ids.size()),
            {std::as_bytes(std::span(ids)), std::as_bytes(std::span(payload)), std::as_bytes(std::span(values))}};
  }
  std::vector<int64_t> ids;
  std::vector<uint8_t> payload;
  std::vector<double> values;
};

int Actor() {
  perserve::ClientOptions options;
  options.max_in_flight = 4;
  std::unique_ptr<perserve::ActorClient> actor;
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, options, &actor));

  // Refused here, nothing sent.
  Batch good(10);
  perserve::ColumnSpans short_value = good.Spans();
  short_value.columns[2] = short_value.columns[2].first(8 * 19);
  Status s = actor->Add(short_value);
  CHECK(!s.ok() && s.code() == Status::Code::kInvalidArgument, "{}", s.ToString());
  CHECK(Contains(s, "column \"value\": expected 160 bytes (10 items of float64[2], 16 bytes an item), given 152 bytes"),
        "{}", s.ToString());
  perserve::ColumnSpans two_columns = good.Spans();
  two_columns.columns.pop_back();
  s = actor->Add(two_columns);
  CHECK(Contains(s, "the batch has 2 columns, the schema 3"), "{}", s.ToString());
  std::vector<double> priorities(10, 1.0);
  priorities[4] = std::nan("");
  s = actor->Add(good.Spans(), priorities);
  CHECK(Contains(s, "priority nan at position 4 must be finite and >= 0"), "{}", s.ToString());
  priorities[4] = -2.0;
  s = actor->Add(good.Spans(), priorities);
  CHECK(Contains(s, "priority -2 at position 4"), "{}", s.ToString());
  s = actor->Add(good.Spans(), std::vector<double>(9, 1.0));
  CHECK(Contains(s, "9 priorities for 10 items"), "{}", s.ToString());
  CHECK_OK(actor->Flush());  // nothing was sent, so nothing to report
  CHECK(actor->items_acknowledged() == 0, "{}", actor->items_acknowledged());

  // Three rejected batches in flight (over the capacity of 100: only the
  // server knows): one report, counting all three, then nothing more.
  Batch big(101);
  for (int i = 0; i < 3; ++i) CHECK_OK(actor->Add(big.Spans()));
  s = actor->Flush();
  CHECK(s.code() == Status::Code::kInvalidArgument, "{}", s.ToString());
  CHECK(Contains(s, "3 earlier batches were rejected; the first: server: an add of 101 items"), "{}", s.ToString());
  CHECK(actor->rejected_batches() == 3, "{}", actor->rejected_batches());
  CHECK_OK(actor->Flush());
  // Rejected while in flight, reported by the next Add that has to wait: it is not sent.
  for (int i = 0; i < 2; ++i) CHECK_OK(actor->Add(big.Spans()));
  CHECK_OK(actor->Add(good.Spans()));
  CHECK_OK(actor->Add(good.Spans()));
  s = actor->Add(good.Spans());  // waits for the oldest: the first big batch's rejection
  CHECK(Contains(s, "an earlier batch was rejected, and this one was not sent: server: an add of 101 items"), "{}",
        s.ToString());
  s = actor->Flush();  // the second big batch's, reported once too
  CHECK(Contains(s, "an earlier batch was rejected: server: an add of 101 items"), "{}", s.ToString());
  CHECK_OK(actor->Flush());
  CHECK(actor->rejected_batches() == 5, "{}", actor->rejected_batches());
  // Nothing rejected was stored: the two good batches hold keys 0..19.
  CHECK(actor->items_acknowledged() == 20 && actor->last_first_key() == 10, "{} {}", actor->items_acknowledged(),
        actor->last_first_key());
  for (int i = 0; i < 8; ++i) CHECK_OK(actor->Add(Batch(10, 20 + 10 * i).Spans(), std::vector<double>(10, 1.0)));
  CHECK_OK(actor->Flush());

  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(actor->Peers(&peers));
  int value = 0;
  MPI_Bcast(&value, 1, MPI_INT, 1, peers);
  CHECK(value == 77, "{}", value);
  MPI_Comm_free(&peers);
  CHECK_OK(actor->Close());
  return 0;
}

int Learner() {
  perserve::ClientOptions options;
  options.prefetch = 3;
  options.max_in_flight = 2;
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, options, &learner));
  perserve::SampleBatch batch;
  CHECK_OK(learner->Sample(16, 0.4, &batch));  // waits for the first items
  CHECK(batch.size == 16 && learner->samples_in_flight() == 3, "{} {}", batch.size, learner->samples_in_flight());
  CHECK_OK(learner->Sample(16, 0.4, &batch));
  CHECK(batch.size == 16 && learner->samples_in_flight() == 3, "{}", learner->samples_in_flight());
  // Another size: the three requests for 16 are received and dropped.
  CHECK_OK(learner->Sample(5, 0.4, &batch));
  CHECK(batch.size == 5 && learner->samples_in_flight() == 3, "{}", learner->samples_in_flight());
  for (int i = 0; i < 3; ++i) CHECK_OK(learner->ReceiveSample(&batch));
  // By hand: answered in request order, at most prefetch in flight.
  CHECK_OK(learner->RequestSample(2, 0.4));
  CHECK_OK(learner->RequestSample(3, 0.4));
  CHECK_OK(learner->RequestSample(4, 0.4));
  Status s = learner->RequestSample(5, 0.4);
  CHECK(s.code() == Status::Code::kFailedPrecondition, "{}", s.ToString());
  for (int64_t expected : {2, 3, 4}) {
    CHECK_OK(learner->ReceiveSample(&batch));
    CHECK(batch.size == expected, "{} != {}", batch.size, expected);
  }

  // Updates that do not wait: ten with two in flight at most, then the totals.
  for (int i = 0; i < 10; ++i) CHECK_OK(learner->SendPriorityUpdate(batch.keys, std::vector<double>(4, 2.0 + i)));
  CHECK_OK(learner->Flush());
  CHECK(learner->updates().applied == 40 && learner->updates().stale == 0, "{}", learner->updates().applied);
  // A bad priority is the server's to judge (its policy; here the default,
  // which refuses the update whole): returned by the next call, once.
  CHECK_OK(learner->SendPriorityUpdate(batch.keys, std::vector<double>{1.0, 1.0, INFINITY, 1.0}));
  s = learner->Flush();
  CHECK(s.code() == Status::Code::kInvalidArgument && Contains(s, "priority inf at position 2"), "{}", s.ToString());
  CHECK_OK(learner->Flush());
  CHECK(learner->updates().applied == 40, "a refused update applied {}", learner->updates().applied - 40);
  // Rejected by the server: returned by the next call (here Flush), once.
  const std::vector<uint64_t> never{uint64_t{1} << 40};
  CHECK_OK(learner->SendPriorityUpdate(never, std::vector<double>{1.0}));
  s = learner->Flush();
  CHECK(s.code() == Status::Code::kNotFound &&
            Contains(s, "an earlier priority update was rejected: server: key 1099511627776"),
        "{}", s.ToString());
  CHECK_OK(learner->Flush());
  // Returned by the first call that finds its answer arrived: a
  // RequestSample (which then sends nothing) or, at the latest, the
  // ReceiveSample of a request sent after the update (the server answers in
  // order), which drops that sample.
  CHECK_OK(learner->SendPriorityUpdate(never, std::vector<double>{1.0}));
  s = learner->RequestSample(2, 0.4);
  if (s.ok()) s = learner->ReceiveSample(&batch);
  CHECK(s.code() == Status::Code::kNotFound && Contains(s, "an earlier priority update was rejected"), "{}",
        s.ToString());
  CHECK(learner->samples_in_flight() == 0, "{}", learner->samples_in_flight());
  CHECK_OK(learner->RequestSample(2, 0.4));  // reported once: the learner goes on
  CHECK_OK(learner->ReceiveSample(&batch));

  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(learner->Peers(&peers));
  int value = 77;
  MPI_Bcast(&value, 1, MPI_INT, 1, peers);
  MPI_Comm_free(&peers);
  CHECK_OK(learner->Close());
  std::printf("client_checks_test: learner done\n");
  return 0;
}

// Ends this rank (and with it the job) if it is still alive after `seconds`:
// a wait that a timeout should end must not hang the test when the server
// ignores the timeout.
class Watchdog {
 public:
  Watchdog(double seconds, std::string what)
      : thread_([this, seconds, what = std::move(what)] {
          std::unique_lock lock(mutex_);
          if (!done_changed_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) {
            fmt::print(stderr, "[rank {}] {} after {} s: does the server honour timeouts?\n", rank, what, seconds);
            std::_Exit(3);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    done_changed_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int DeadlineLearner() {
  perserve::ClientOptions options;
  options.prefetch = 2;
  std::unique_ptr<perserve::LearnerClient> learner;
  CHECK_OK(perserve::LearnerClient::Join(MPI_COMM_WORLD, options, &learner));
  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(learner->Peers(&peers));
  perserve::SampleBatch batch;
  for (double bad : {-1.0, std::nan(""), double{INFINITY}}) {
    const Status s = learner->Sample(8, 0.4, &batch, bad);
    CHECK(s.code() == Status::Code::kInvalidArgument && Contains(s, "must be finite and >= 0"), "{}", s.ToString());
    CHECK(learner->RequestSample(8, 0.4, bad).code() == Status::Code::kInvalidArgument, "{}", bad);
  }
  CHECK(learner->samples_in_flight() == 0, "{}", learner->samples_in_flight());
  {
    Watchdog watchdog(20, "no DEADLINE_EXCEEDED for a sample with a timeout");
    const auto start = std::chrono::steady_clock::now();
    Status s = learner->Sample(8, 0.4, &batch, 0.5);
    const double waited = SecondsSince(start);
    CHECK(s.code() == Status::Code::kDeadlineExceeded, "{}", s.ToString());
    CHECK(waited >= 0.4 && waited <= 5.0, "DEADLINE_EXCEEDED after {} s", waited);
    CHECK(learner->samples_in_flight() == 0, "{}", learner->samples_in_flight());  // no prefetch after a failure
    // By hand: a request with a timeout, and one without behind it.
    CHECK_OK(learner->RequestSample(4, 0.4, 0.3));
    CHECK_OK(learner->RequestSample(6, 0.4));
    s = learner->ReceiveSample(&batch);
    CHECK(s.code() == Status::Code::kDeadlineExceeded, "{}", s.ToString());
    CHECK(learner->samples_in_flight() == 1, "{}", learner->samples_in_flight());
  }
  int go = 1;
  MPI_Bcast(&go, 1, MPI_INT, 1, peers);  // the actor adds its 50 items now
  CHECK_OK(learner->ReceiveSample(&batch));  // the untimed request, answered at 50 items
  CHECK(batch.size == 6, "{}", batch.size);
  CHECK_OK(learner->Sample(8, 0.4, &batch, 10.0));
  CHECK(batch.size == 8 && learner->samples_in_flight() == 2, "{} {}", batch.size, learner->samples_in_flight());
  perserve::UpdateResult result;
  CHECK_OK(learner->UpdatePriorities(batch.keys, std::vector<double>(8, 2.0), &result));
  CHECK(result.applied == 8 && result.stale == 0 && result.dropped == 0, "{} {} {}", result.applied, result.stale,
        result.dropped);
  CHECK(learner->updates().applied == 8 && learner->updates().dropped == 0, "{}", learner->updates().applied);
  MPI_Comm_free(&peers);
  CHECK_OK(learner->Close());
  std::printf("client_checks_test: deadline_learner done\n");
  return 0;
}

int DeadlineActor() {
  perserve::ClientOptions options;
  std::unique_ptr<perserve::ActorClient> actor;
  for (double bad : {-1.0, std::nan(""), double{INFINITY}}) {
    options.add_timeout_seconds = bad;
    const Status s = perserve::ActorClient::Join(MPI_COMM_WORLD, options, &actor);  // refused before the collective
    CHECK(s.code() == Status::Code::kInvalidArgument && Contains(s, "add_timeout_seconds must be finite and >= 0"),
          "{}", s.ToString());
  }
  options.add_timeout_seconds = 30.0;  // nothing holds adds back here: no effect
  CHECK_OK(perserve::ActorClient::Join(MPI_COMM_WORLD, options, &actor));
  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(actor->Peers(&peers));
  int go = 0;
  MPI_Bcast(&go, 1, MPI_INT, 1, peers);
  for (int i = 0; i < 5; ++i) CHECK_OK(actor->Add(Batch(10, 10 * i).Spans()));
  CHECK_OK(actor->Flush());
  CHECK(actor->items_acknowledged() == 50, "{}", actor->items_acknowledged());
  MPI_Comm_free(&peers);
  CHECK_OK(actor->Close());
  return 0;
}

int Bystander() {
  std::unique_ptr<perserve::Bystander> bystander;
  CHECK_OK(perserve::JoinAsBystander(MPI_COMM_WORLD, &bystander));
  MPI_Comm peers = MPI_COMM_NULL;
  CHECK_OK(bystander->Peers(&peers));
  int size = 0, value = 0;
  MPI_Comm_size(peers, &size);
  CHECK(size == 3, "{}", size);
  MPI_Bcast(&value, 1, MPI_INT, 1, peers);
  CHECK(value == 77, "{}", value);
  MPI_Comm_free(&peers);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string role = argc > 1 ? argv[1] : "";
  const int code = role == "actor"              ? Actor()
                   : role == "learner"          ? Learner()
                   : role == "deadline_learner" ? DeadlineLearner()
                   : role == "deadline_actor"   ? DeadlineActor()
                                                : Bystander();
  MPI_Finalize();
  return code;
}
