// The perserve client library: what actor and learner code links.
//
// Every rank of the job joins once, collectively, over the communicator the
// caller passes (usually MPI_COMM_WORLD): actors with ActorClient::Join,
// learners with LearnerClient::Join, the replay ranks inside perserve-server,
// and any other rank with JoinAsBystander. The join finds the server and
// learns the schema; no addresses or configuration are involved.
//
// Several server ranks are shards of one replay: each actor is dealt one of
// them (round-robin in rank order), and each learner talks to all of them:
// a sample is drawn over the shards as one replay of their union would draw
// it (see ClientOptions::exact_shard_totals), and each key's update goes to
// the shard that issued it. The interfaces are the same for any count.
//
// The library works on its own duplicate of the communicator with
// MPI_ERRORS_RETURN, so MPI failures come back as Status values. It calls
// MPI_Init if nobody has, and never MPI_Finalize: that stays the caller's.
// A client is used from one thread at a time. Errors are Status values; only
// a failed allocation throws (std::bad_alloc), which the C ABI and the Python
// package turn into RESOURCE_EXHAUSTED.
//
// Closing at MPI_Finalize: a client still open when its process calls
// MPI_Finalize is closed by the library on the way (an attribute on
// MPI_COMM_SELF whose delete callback MPI_Finalize runs while MPI still
// works): an actor flushes, so every batch the server acknowledged is kept,
// then closes; a learner waits for its priority updates, then closes. Each
// prints one line to stderr saying so, and another with any error its close
// returned, since nobody is left to receive it: call Close() yourself to see
// errors. Forgetting Close() therefore no longer leaves the server (and with
// it the job) waiting. A client destroyed without Close() closes in its
// destructor and prints its error the same way; destructors after
// MPI_Finalize do nothing. Each error printed so is counted in
// UnreceivedCloseErrors(), for a program that wants to end with a failing
// status then (the Python package does).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"

namespace perserve {

namespace proto {
struct ItemGroup;
struct ItemGroupSpans;
}  // namespace proto

namespace client_internal {
class Connection;
class ShardSampler;
struct ShardedRequest;
struct TestAccess;  // tests build clients over a loopback Connection
}

struct ClientOptions {
  // Intake batches an actor may have sent but not yet seen acknowledged; Add
  // waits for the oldest once this many are in flight (back-pressure). For a
  // learner: priority updates sent with SendPriorityUpdate and not yet
  // acknowledged.
  int max_in_flight = 4;
  // A learner's sample requests kept in flight by Sample (0: none; Sample
  // requests and waits). With k > 0, each Sample returns the oldest request's
  // reply and sends requests until k are in flight again, so the next
  // samples travel while the caller trains. Also the bound on RequestSample.
  int prefetch = 0;
  // An actor's adds carry this timeout (seconds; 0: none). An add waits at
  // the server only while its rate limiter holds intake back; one still
  // waiting this long after it reached the server is rejected with
  // DEADLINE_EXCEEDED and nothing of it stored, reported like any rejected
  // batch (once, by Flush or the next Add). Finite and >= 0.
  double add_timeout_seconds = 0.0;
  // A learner over several server ranks splits each sample over the shards
  // by their totals: by default each shard's total from its last reply (no
  // extra round trip; other learners' updates and actors' adds since then
  // shift a shard's odds until its next reply); with this set, every shard
  // is asked for its total first (one more round trip a sample), so every
  // item is drawn with exactly its share of the current global total.
  bool exact_shard_totals = false;
  // Seeds a learner's split over several shards (0: a seed from its rank).
  uint64_t shard_seed = 0;
  // An actor's add whose columns come to at least this many bytes sends them
  // in a message of their own, right after the request, which the server
  // receives straight into its store (no copy there); smaller adds go as one
  // message, where the copy costs less than a second message. -1: never.
  int64_t columns_apart_min_bytes = 64 << 10;
};

// A batch of transitions to add: `size` items; columns[i] points at
// size * schema.columns[i].ItemBytes() bytes, row-major. The lengths are
// taken on trust; ColumnSpans lets Add check them.
struct BatchView {
  int64_t size = 0;
  std::vector<const void*> columns;
};

// The same batch with each column's bytes as a span, one per schema column in
// schema order, so Add checks each length against the schema before sending.
struct ColumnSpans {
  int64_t size = 0;
  std::vector<std::span<const std::byte>> columns;
};

// A prioritized sample. The column data stays in the received message (no
// copy): columns[i] holds size * schema.columns[i].ItemBytes() bytes. Movable,
// not copyable (the spans point into `message`).
struct SampleBatch {
  SampleBatch() = default;
  SampleBatch(SampleBatch&&) = default;
  SampleBatch& operator=(SampleBatch&&) = default;
  SampleBatch(const SampleBatch&) = delete;
  SampleBatch& operator=(const SampleBatch&) = delete;

  int64_t size = 0;
  std::vector<uint64_t> keys;         // pass these back to UpdatePriorities
  std::vector<double> weights;        // importance-sampling weights, max 1
  std::vector<double> probabilities;  // P(i) of each draw
  std::vector<std::span<const std::byte>> columns;
  std::vector<std::byte> message;     // owns the bytes `columns` point into
  std::string table;                  // the name of the table it was drawn from
};

// What one table of the replay holds, over all its server ranks
// (LearnerClient::Info).
struct ReplayInfo {
  int64_t size = 0;         // items stored
  int64_t items_added = 0;  // items ever stored (acknowledged adds)
  double total = 0.0;       // sum of the leaves, priority^alpha
  int shards = 0;           // server ranks
  int shards_ready = 0;     // those holding their --min-size-to-sample
};

struct UpdateResult {
  int64_t applied = 0;
  int64_t stale = 0;    // keys whose items had been overwritten: dropped by the server
  int64_t dropped = 0;  // bad priorities the server dropped (perserve-server --drop-bad-priorities)
};

// Checks a batch against `schema` without sending anything: as many columns
// as the schema, none NULL, each column's length size * ItemBytes(), and
// priorities empty or one per item, each finite and >= 0 (a zero is the
// server's to accept, under its --priority-eps). The error names the
// column (or priority) with what was expected and what was given.
Status CheckBatch(const Schema& schema, const ColumnSpans& batch, std::span<const double> priorities);
// Priorities finite and >= 0; the error names the first bad one. (Updates are
// not checked here: the server's policy decides, see docs/operations.md.)
Status CheckPriorities(std::span<const double> priorities);
// A request's timeout in seconds: finite and >= 0 (0: none).
Status CheckTimeout(double timeout_seconds);

// Items an actor creates over its stream's steps in one table (a server of
// step streams: docs/steps.md). steps[i] is the stream index of item i's step
// (the stream's first step is 0; ActorClient::steps_appended() counts them);
// priorities empty (the server's max priority) or one per item; columns: the
// table's item columns (ActorClient::item_schema(table)), steps.size() rows
// each, or none when it has none; table: the table's name (empty: the
// default table, the server's first).
struct NewItems {
  std::span<const int64_t> steps;
  std::span<const double> priorities;
  ColumnSpans columns;
  std::string_view table = {};
};

class ActorClient {
 public:
  // Collective over `comm` (every rank of it joins).
  static Status Join(MPI_Comm comm, const ClientOptions& options, std::unique_ptr<ActorClient>* actor);
  ~ActorClient();  // Close()s if not closed, printing its error (see the top of this file)

  const Schema& schema() const;

  // Sends a batch; priorities empty (the server gives the largest priority
  // seen so far) or one per item, finite and >= 0. The batch is checked first
  // (CheckBatch; BatchView's lengths are taken on trust): a bad batch is
  // refused here and nothing of it is sent. The batch is copied, so the
  // caller may reuse its buffers at once. Returns after sending, not after
  // the server stored it: rejections by the server of earlier batches are
  // returned by Flush or by the next Add, which then does not send its own
  // batch (the message says so; send it again). Waits while max_in_flight
  // batches are unacknowledged. `table`: the table of transitions the items
  // go to (empty: the default table); a name the server does not serve, or a
  // table whose items are computed over steps, is refused here (nothing sent).
  Status Add(const ColumnSpans& batch, std::span<const double> priorities = {}, std::string_view table = {});
  Status Add(const BatchView& batch, std::span<const double> priorities = {}, std::string_view table = {});

  // Add without copying the columns: an add of at least
  // options.columns_apart_min_bytes of columns sends them from the caller's
  // memory straight into the server's store (smaller ones are copied, as by
  // Add). Checked like Add. The columns must stay alive and unchanged until
  // the add is acknowledged: after Flush() or Close(), or once
  // options.max_in_flight later adds have returned OK (an add waits for the
  // oldest acknowledgement while max_in_flight are in flight), so an actor
  // that fills max_in_flight + 1 buffers in turn never waits for its own.
  Status AddBorrowed(const ColumnSpans& batch, std::span<const double> priorities = {}, std::string_view table = {});

  // Step streams (a server started with --n-step or --sequence-length;
  // docs/steps.md). Appends steps (schema()'s columns, steps.size rows each;
  // size 0 with no columns: none) to this actor's stream, then creates
  // `items` over the stream's steps, these included; the server computes
  // each item's layout at sample time. Checked here as Add is (and each
  // item's step below steps_appended() after this append); the server
  // checks the rest (steps it no longer holds, a step not yet followed by
  // the n steps an item needs, a sequence off its period) and refuses the
  // whole request: reported as Add's rejections are, and the refused steps
  // are not in the stream (steps_appended() then counts the steps the server
  // acknowledged, once the rejection is reported). Copies, as Add.
  // The items go to items.table (empty: the default table).
  Status Append(const ColumnSpans& steps, const NewItems& items = {});
  // The same, creating items in several tables in one request (the steps
  // sent once): one NewItems a table, each naming its table (at most once;
  // an unknown name is refused here, listing the server's tables, and
  // nothing is sent). NewItems with no items create nothing.
  Status Append(const ColumnSpans& steps, std::span<const NewItems> items);
  // Append without copying the step columns: an append whose step columns
  // come to at least options.columns_apart_min_bytes sends them from the
  // caller's memory straight into the server's ring (smaller ones, and the
  // items, are copied, as by Append). The step columns must stay alive and
  // unchanged until the append is acknowledged, as AddBorrowed's.
  Status AppendBorrowed(const ColumnSpans& steps, const NewItems& items = {});
  Status AppendBorrowed(const ColumnSpans& steps, std::span<const NewItems> items);
  // The steps this actor's stream holds so far, counting those sent: the
  // next appended step's index. After a server restored from a checkpoint
  // it starts at the steps the stream held there (docs/steps.md), and the
  // first step appended begins a new episode.
  int64_t steps_appended() const { return steps_sent_; }
  // Whether the server stores step streams, and its item columns (the
  // default table's).
  bool stores_steps() const;
  const Schema& item_schema() const;
  // The item columns of the table named `table` (empty: the default table;
  // no columns for a name the server does not serve).
  const Schema& item_schema(std::string_view table) const;
  // The server's tables' names, in its order (the default table first).
  std::vector<std::string> tables() const;

  // Takes the acknowledgements that have arrived, without waiting, and sets
  // *ready to whether an Add would send at once (fewer than max_in_flight
  // batches unacknowledged). An actor whose adds the server's rate limiter
  // holds back can go on (receive weights, act) instead of waiting in Add.
  Status CanAdd(bool* ready);

  // Waits until every batch sent has been acknowledged. Every rejected batch
  // is reported exactly once, by one Flush or Add, as a count with the first
  // error: when several were rejected since the last report, the status has
  // the first rejection's code and says how many ("3 earlier batches were
  // rejected; the first: server: ..."); rejected_batches() counts them all.
  // A Flush after that returns OK until another batch is rejected.
  Status Flush();

  // Flushes, then tells the server this actor is done. Idempotent. If it is
  // never called, MPI_Finalize does it (see the top of this file).
  Status Close();

  // Collective over every non-server rank of the job (actors, learners and
  // bystanders, each calling its Peers): a new communicator over them, ranks
  // in the order of the joined communicator, for broadcasting network
  // weights without involving (and so deadlocking on) the server rank. The
  // caller owns it (MPI_Comm_free).
  Status Peers(MPI_Comm* peers);

  // Keys of the last acknowledged batch start here (for tests and logging).
  uint64_t last_first_key() const { return last_first_key_; }
  int64_t items_acknowledged() const { return items_acknowledged_; }
  int64_t rejected_batches() const { return rejected_batches_; }

 private:
  friend struct client_internal::TestAccess;
  ActorClient(std::unique_ptr<client_internal::Connection> connection, ClientOptions options);
  // Close() from the MPI_Finalize hook, saying so on stderr.
  void CloseAtFinalize();
  // Add and AddBorrowed: `borrow` sends columns apart from the caller's memory.
  Status Send(const ColumnSpans& batch, std::span<const double> priorities, std::string_view table, bool borrow);
  // Append and AppendBorrowed.
  Status SendSteps(const ColumnSpans& steps, std::span<const NewItems> items, bool borrow);
  // Every add and append: steps (size 0: none), then each group's items
  // (groups[i] with spans[i]) over this append's steps one each
  // (item_per_step) or over its item steps. An add: every group item_per_step.
  Status SendAppend(const ColumnSpans& steps, const std::vector<proto::ItemGroup>& groups,
                    const std::vector<proto::ItemGroupSpans>& spans, bool borrow);
  // After a refused append: once nothing is in flight, the stream goes on
  // from the steps the server acknowledged.
  void RewindIfDrained();
  // Takes the oldest batch's acknowledgement: waits for it, or with `wait`
  // false sets *collected false when it has not arrived. A borrowed batch's
  // columns are then sent for good (their memory is the caller's again).
  Status CollectOldest(bool wait = true, bool* collected = nullptr);
  // The rejections not yet reported as one status (OK if none), cleared.
  Status TakePendingError(bool instead_of_send);

  std::unique_ptr<client_internal::Connection> connection_;
  ClientOptions options_;
  struct SentAdd {
    uint64_t request_id;
    uint64_t columns_send;  // the borrowed columns' send (Connection::AwaitSent), else 0
    int64_t steps = 0;      // an append's steps
    bool anchored = false;  // it names its first step (an append; an add goes at the stream's end)
  };
  int64_t steps_sent_ = 0;          // the stream's steps sent (the next first_step)
  int64_t steps_acknowledged_ = 0;  // of those, acknowledged
  bool stream_rejected_ = false;    // an append was refused: steps_sent_ goes back to steps_acknowledged_
  std::deque<SentAdd> in_flight_;  // oldest first
  Status first_rejection_;          // the first rejection not yet reported
  int64_t unreported_rejections_ = 0;
  int64_t rejected_batches_ = 0;
  uint64_t last_first_key_ = 0;
  int64_t items_acknowledged_ = 0;
  bool closed_ = false;
};

class LearnerClient {
 public:
  static Status Join(MPI_Comm comm, const ClientOptions& options, std::unique_ptr<LearnerClient>* learner);
  ~LearnerClient();  // Close()s if not closed, printing its error (see the top of this file)

  // What a sample of the default table returns.
  const Schema& schema() const;
  // What a sample of the table named `table` returns (empty: the default
  // table; no columns for a name the server does not serve).
  const Schema& schema(std::string_view table) const;
  // The server's tables' names, in its order (the default table first).
  // Every call below without a table means the default table; those with
  // one refuse a name the server does not serve (InvalidArgument listing
  // the server's tables) before sending anything.
  std::vector<std::string> tables() const;

  // Draws batch_size items proportional to priority^alpha, with replacement
  // (one draw in each of batch_size equal segments of the total, as in
  // Baselines: an item can come more than once, and a batch larger than the
  // replay mostly repeats). Waits (the server
  // defers the reply) until the replay holds its minimum size. With
  // options.prefetch = k > 0 it returns the oldest in-flight request's reply
  // and leaves k requests of (batch_size, beta) in flight; replies to
  // requests made with another size are received and dropped, those made
  // with another beta are returned with their IS weights for this beta
  // (annealing beta every call keeps the prefetched samples), except from
  // beta 0 on one server (its weights are all 1: dropped).
  //
  // timeout_seconds > 0 (finite; 0: none): a request the server still
  // defers that long after it received it is answered DEADLINE_EXCEEDED and
  // dropped; that status is this call's, and the learner stays usable (the
  // call leaves no request of its own in flight). Each request carries the
  // timeout of the call that sent it, so a prefetched request's clock
  // starts when the server receives it (while the caller still trains on
  // the previous batch), not when the call that returns it begins.
  Status Sample(int64_t batch_size, double beta, SampleBatch* batch, double timeout_seconds = 0.0);
  // The same from the table named `table`, drawn by its sampler (weights as
  // the server sends them: 1 for a table that is not prioritized). Requests
  // prefetched for another table are received and dropped, as those of
  // another batch size.
  Status Sample(std::string_view table, int64_t batch_size, double beta, SampleBatch* batch,
                double timeout_seconds = 0.0);

  // The same in two halves: requests are answered in the order they were
  // made. At most max(1, options.prefetch) requests in flight. A timeout
  // works as in Sample: ReceiveSample returns the DEADLINE_EXCEEDED.
  // batch->table names the table the reply's request named.
  Status RequestSample(int64_t batch_size, double beta, double timeout_seconds = 0.0);
  Status RequestSample(std::string_view table, int64_t batch_size, double beta, double timeout_seconds = 0.0);
  Status ReceiveSample(SampleBatch* batch);
  int samples_in_flight() const { return static_cast<int>(pending_samples_.size()); }
  // The server ranks (shards) this learner samples over.
  int shards() const;
  // Asks every server rank for its state (one round trip, answered at once
  // whatever the replay holds): sizes, items ever added, totals.
  Status Info(ReplayInfo* info);
  // The same for the table named `table`.
  Status Info(std::string_view table, ReplayInfo* info);
  // Asks every server rank for a checkpoint and waits until each is durable
  // (the servers keep serving meanwhile); *paths gets each checkpoint's
  // directory, by shard. FAILED_PRECONDITION from a server started without
  // --checkpoint-dir; a write that fails (disk full, ...) is its error.
  Status Checkpoint(std::vector<std::string>* paths);

  // New priorities (finite, > 0, checked here) for sampled keys; waits for
  // the answer.
  Status UpdatePriorities(std::span<const uint64_t> keys, std::span<const double> priorities,
                          UpdateResult* result = nullptr);
  // The same for keys sampled from the table named `table` (a key names an
  // item only together with its table). A table that keeps no priorities
  // (its sampler uniform, fifo or lifo) is refused here: InvalidArgument,
  // nothing sent.
  Status UpdatePriorities(std::string_view table, std::span<const uint64_t> keys, std::span<const double> priorities,
                          UpdateResult* result = nullptr);

  // The same without waiting for the answer: the acknowledgement is
  // collected in the background (by later calls). A rejection is returned
  // by the first call of this learner that finds its answer arrived: at its
  // start (the call then does nothing else) or, for Sample and
  // ReceiveSample, after receiving a reply (that sample is then dropped).
  // A server answers its client in order, so at the latest by the Sample or
  // ReceiveSample that receives a request sent after this update (with
  // prefetch k, the (k+1)-th Sample after it), by the SendPriorityUpdate
  // that waits for it (max_in_flight unacknowledged), or by Flush or Close.
  // Keys and priorities are copied; their values are the server's policy to
  // judge (docs/operations.md), not checked here.
  Status SendPriorityUpdate(std::span<const uint64_t> keys, std::span<const double> priorities);
  // The same for keys of the table named `table`, refused here as
  // UpdatePriorities' for a table that keeps no priorities.
  Status SendPriorityUpdate(std::string_view table, std::span<const uint64_t> keys,
                            std::span<const double> priorities);
  // Waits for every update sent; returns a rejection not yet returned.
  Status Flush();
  // Totals over acknowledged updates (both kinds).
  const UpdateResult& updates() const { return updates_; }

  // Collective over every non-server rank; see ActorClient::Peers.
  Status Peers(MPI_Comm* peers);

  // Waits for update acknowledgements, then tells the server this learner is
  // done (outstanding samples are dropped). Idempotent. If it is never
  // called, MPI_Finalize does it (see the top of this file).
  Status Close();

 private:
  struct PendingSample {
    uint64_t id;
    int table;  // its index in the server's tables
    int64_t batch_size;
    double beta;
    std::unique_ptr<client_internal::ShardedRequest> sharded;  // with several servers: the requests to each
  };
  friend struct client_internal::TestAccess;
  LearnerClient(std::unique_ptr<client_internal::Connection> connection, ClientOptions options);
  // Close() from the MPI_Finalize hook, saying so on stderr.
  void CloseAtFinalize();
  // Takes update acknowledgements: waits until at most `keep_pending` are
  // outstanding, then takes those that have arrived. Returns the rejections
  // not yet reported (as Flush's count with the first error), cleared.
  Status CollectUpdates(size_t keep_pending);
  // Pops the oldest sample request and waits for its reply (one is in flight),
  // its IS weights for `beta` (default: the request's; see CanWeighFor).
  Status ReceiveOldest(SampleBatch* batch, std::optional<double> beta = std::nullopt);
  // Whether a reply to `pending` can be weighed for `beta`.
  static bool CanWeighFor(const PendingSample& pending, double beta);
  // Sends a sample request (no checks: the callers have made them).
  // `awaited`: the caller receives this reply before it returns (its rows
  // may then go from the server's store; see proto::SampleRequest::awaited).
  Status SendSampleRequest(int table, int64_t batch_size, double beta, double timeout_seconds, bool awaited);
  Status TakePendingError();
  // The index of the table named `table` that takes priority updates, or
  // InvalidArgument (no such table, or one that keeps no priorities).
  Status UpdatableTable(std::string_view table, int* index) const;
  // Sends an update of these keys and priorities of table `table` to shard `shard`.
  Status SendUpdate(int shard, int table, std::span<const uint64_t> keys, std::span<const double> priorities,
                    uint64_t* id);
  // Sends an update split by the shards its keys name; *ids gets a request id a shard.
  Status SendUpdates(int table, std::span<const uint64_t> keys, std::span<const double> priorities,
                     std::vector<uint64_t>* ids);
  // The callers above, once the table is known (its index).
  Status SampleTable(int table, int64_t batch_size, double beta, SampleBatch* batch, double timeout_seconds);
  Status RequestSampleTable(int table, int64_t batch_size, double beta, double timeout_seconds);
  Status InfoTable(int table, ReplayInfo* info);
  Status UpdateTable(int table, std::span<const uint64_t> keys, std::span<const double> priorities,
                     UpdateResult* result);
  Status SendUpdateTable(int table, std::span<const uint64_t> keys, std::span<const double> priorities);

  std::unique_ptr<client_internal::Connection> connection_;
  ClientOptions options_;
  // With several servers: one a table (by index), the shards' states being a table's.
  std::vector<std::unique_ptr<client_internal::ShardSampler>> samplers_;
  std::deque<PendingSample> pending_samples_;  // oldest first
  std::deque<uint64_t> pending_updates_;       // request ids, oldest first
  Status update_error_;                        // the first rejection not yet reported
  int64_t unreported_update_errors_ = 0;
  UpdateResult updates_;
  bool closed_ = false;
};

// For ranks that are neither actors, learners nor servers: takes part in the
// collective join and, if asked, in Peers. The server does not wait for
// bystanders: one still alive at MPI_Finalize has its communicator freed
// there, silently (Peers then returns FAILED_PRECONDITION).
class Bystander {
 public:
  ~Bystander();
  // Collective over every non-server rank; see ActorClient::Peers.
  Status Peers(MPI_Comm* peers);

 private:
  friend Status JoinAsBystander(MPI_Comm comm, std::unique_ptr<Bystander>* bystander);
  explicit Bystander(std::unique_ptr<client_internal::Connection> connection);
  std::unique_ptr<client_internal::Connection> connection_;  // null once freed at MPI_Finalize
};

// Close errors nobody was left to receive: those of the closes the library
// made itself (at MPI_Finalize, in the destructor of a client never closed)
// and those reported with ReportUnreceivedCloseError, each printed to stderr.
// A program may end with a failing status when this is > 0: after
// MPI_Finalize, `return perserve::UnreceivedCloseErrors() > 0;` from main.
int64_t UnreceivedCloseErrors();

// For wrappers that close clients on their owners' behalf (the Python package
// at interpreter exit): prints "perserve: rank R: the <role>'s close <when>
// failed: <status>" to stderr, as the library does for its own closes, and
// counts it in UnreceivedCloseErrors(). Nothing if `closed` is OK.
void ReportUnreceivedCloseError(std::string_view role, std::string_view when, const Status& closed);

// Collective over `comm`, as the clients' joins.
Status JoinAsBystander(MPI_Comm comm, std::unique_ptr<Bystander>* bystander);
// The same, for a rank that needs nothing afterwards.
Status JoinAsBystander(MPI_Comm comm);

}  // namespace perserve
