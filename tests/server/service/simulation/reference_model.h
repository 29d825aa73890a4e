// ReferenceModel: what must hold of the replay ranks (one or several shards
// of one replay), as their clients and the simulator see them. Told every
// request a client sends to a shard and every reply it receives from one
// (in the order it receives them; the client library's clients too, through
// their SimulatedConnection), it checks, per client and shard:
//   - every reply answers a request of that client not answered yet, with
//     the reply kind (or an error code) that request may get; a close reply
//     comes after the replies to everything sent before it (waiting samples
//     aside: a close drops them), and nothing after it;
//   - acknowledged adds' keys carry their shard, are distinct, in each
//     actor's order, and at the end cover each shard's 0 .. next_key - 1
//     exactly: no add lost or applied twice; an add that names its first
//     step is acknowledged exactly when that is its stream's next step (the
//     steps its acknowledged adds carried), else refused FAILED_PRECONDITION;
//   - every sampled row (of samples and shard samples) is whole and is the item added under its key (rows
//     check themselves: self_checking_rows.h), its key was live at some
//     moment between request and reply, its IS weight in (0, 1] and its
//     probability in (0, 1], and the weights of one reply in the ratios its
//     probabilities and beta give (w_i / w_j = (P_i / P_j)^-beta);
//   - an update's counts add up, and keys live throughout are never stale; a
//     key of another shard is refused;
//   - after every step that changed a shard's items, a table of transitions
//     holds exactly the items over the steps its ring holds (the newest
//     `capacity` keys), each with a positive leaf: no item vanishes while
//     its step is held;
//   - at the end, only what the docs allow is unanswered.
// With step streams, what only they have (an append's verdict, a drawn
// item's bytes and wholeness, stale updates of evicted items) is the
// StepModel's (step_model.h).
// A violation throws SimulationFailure with what broke.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "proto/append.h"
#include "proto/messages.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/service/simulation/simulation_config.h"

namespace perserve::service::simulation {

struct SimulationFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void Fail(const std::string& what) { throw SimulationFailure(what); }

// Fails with `what` unless `holds`: the text, or a callable that makes it
// (formatted only on failure: checks run for every item).
template <class Message>
void Expect(bool holds, Message&& what) {
  if (holds) return;
  if constexpr (std::is_invocable_v<Message>) {
    Fail(what());
  } else {
    Fail(std::string(what));
  }
}

class StepModel;

class ReferenceModel {
 public:
  // Clients and shards as `config` numbers them (SimulationConfig::clients).
  explicit ReferenceModel(const SimulationConfig& config);

  // Requests as clients send them to `shard`; `next_key` is that shard's
  // replay's next key then (local: without the shard's bits).
  // An add of transitions (an append whose steps are each its own item):
  // `valid`: false for one the server must refuse (a bad priority, columns
  // of the wrong size, too many items); `first_step`: the stream index it
  // names (refused FAILED_PRECONDITION unless its stream's next), or
  // proto::AppendMeta::kAtEnd (after whatever the stream holds).
  void SentAdd(int client, int shard, uint64_t request_id, int64_t first_item, int64_t count, bool valid,
               bool columns_apart, int64_t first_step = proto::AppendMeta::kAtEnd);
  // An append of steps (step streams): its whole frame, which the StepModel
  // judges when the service answers it.
  void SentAppend(int client, int shard, uint64_t request_id, std::span<const std::byte> frame);
  // The step columns of an append sent apart, as `client` sends them to
  // `shard` (before or after the request; each client's in its appends'
  // order): the StepModel's, with step streams.
  void SentColumns(int client, int shard, std::span<const std::byte> columns);
  // Services of step streams: the model that checks their appends, drawn
  // items and updates (step_model.h); this one keeps to what both kinds share.
  void SetStepModel(StepModel* steps) { steps_ = steps; }
  // Samples, shard samples and updates name their table (an index of
  // config.steps.tables; 0, the default, for a server of transitions);
  // `next_key` is that table's.
  void SentSample(int client, int shard, uint64_t request_id, double beta, uint64_t next_key, int table = 0);
  // A shard sample (a learner's share of a sample over shards) of `count`
  // items (0: a probe of the shard's state, answered at once unless `wait`).
  void SentShardSample(int client, int shard, uint64_t request_id, int64_t count, uint64_t next_key, int table = 0);
  // `bad`: elements with a bad priority; `never_issued`: a key the replay
  // never issued; `wrong_shard`: a key of another shard; `priorities`: the
  // update's, for the StepModel's tables.
  void SentUpdate(int client, int shard, uint64_t request_id, std::vector<uint64_t> keys, int64_t bad,
                  bool never_issued, bool wrong_shard, uint64_t next_key, int table = 0,
                  std::vector<double> priorities = {});
  void SentClose(int client, int shard, uint64_t request_id);
  void SentCheckpoint(int client, int shard, uint64_t request_id);
  // After this, UNAVAILABLE is an answer any request may get.
  void SentTerminate() { terminated_ = true; }
  bool terminated() const { return terminated_; }
  // The request `client` just sent carries a timeout: past it (on the
  // simulation's clock) DEADLINE_EXCEEDED is an answer it may get.
  void WithTimeout(int client, int shard, uint64_t request_id, double seconds);
  // The simulation's clock, which the service's deadlines run on.
  void SetNow(std::chrono::steady_clock::time_point now) { now_ = now; }
  std::chrono::steady_clock::time_point now() const { return now_; }

  // A reply `client` received from `shard`. Returns the keys of a sample
  // reply (for the learner's updates), else nothing.
  std::vector<uint64_t> Received(int client, int shard, std::span<const std::byte> bytes, uint64_t next_key);

  // Where something was seen, formatted only if a check fails (checks run
  // for every item): a reference to a callable that returns the text, valid
  // for the call it is passed to.
  class Describe {
   public:
    template <class F>
    requires std::is_invocable_r_v<std::string, const F&> Describe(
        const F& describe)  // NOLINT: converts from any such callable
        : object_(&describe), call_([](const void* object) { return (*static_cast<const F*>(object))(); }) {}
    std::string operator()() const { return call_(object_); }

   private:
    const void* object_;
    std::string (*call_)(const void*);
  };
  // An item found under `key` (a sampled row, a restored one): checked now
  // if its add's acknowledgement has come, else when it comes.
  void ObservedItem(uint64_t key, int64_t id, const Describe& where);
  void ObservedItem(uint64_t key, int64_t id, const std::string& where) {
    const auto describe = [&where] { return where; };
    ObservedItem(key, id, Describe(describe));
  }

  // Crash-restart: the job restarted from its checkpoints, whose default
  // tables had issued keys below next_keys[s] (shard s). Every client is a
  // new one (nothing in flight, none closed); an actor's stream of
  // transitions goes on from `stream_steps(client, shard)`, the steps the
  // restored shard holds of it (as the join says); the items acknowledged
  // are those keys, issued again above them; `restored`: the restored
  // transitions' keys and items (self_checking_rows.h), those whose
  // acknowledgement never came among them. (With step streams the StepModel
  // checks each restored item.)
  void Restarted(std::span<const uint64_t> next_keys, const std::function<int64_t(int, int)>& stream_steps,
                 std::span<const std::pair<uint64_t, int64_t>> restored);

  // Whether `client` has its close reply from every shard it talks to.
  bool closed(int client) const;
  bool closed(int client, int shard) const { return ledger(client, shard).closed; }
  bool close_sent(int client, int shard) const { return ledger(client, shard).close_sent; }
  int64_t unanswered(int client, int shard) const {
    return static_cast<int64_t>(ledger(client, shard).requests.size());
  }
  int64_t unanswered_adds(int client, int shard) const { return Unanswered(client, shard, Kind::kAdd); }
  // Whether every actor of `shard` has sent its close (then its samples may
  // fail FAILED_PRECONDITION) ...
  bool EveryActorClosing(int shard) const;
  // ... and of every shard.
  bool EveryActorClosing() const;
  // What `client` waits for from `shard`: its unanswered requests, named (for liveness failures).
  std::string DescribeUnanswered(int client, int shard) const;

  // After every step: shard `shard`'s items within their capacity, its tree
  // finite, keys issued no fewer than acknowledged; when its items changed
  // (`changed`: keys issued or items held), a table of transitions holds
  // exactly the items over its ring's steps.
  void CheckReplay(int shard, const replay::StepReplay& table, bool changed) const;
  // Once every client has closed: each shard's keys, then every client's requests.
  void CheckEnd(int shard, const replay::StepReplay& table) const;
  void CheckEnd() const;

 private:
  enum class Kind { kAdd, kSample, kShardSample, kUpdate, kClose, kCheckpoint };
  struct Request {
    explicit Request(Kind request_kind = Kind::kAdd) : kind(request_kind) {}
    Kind kind;
    bool valid = true;
    int64_t first_item = 0, count = 0;
    uint64_t next_key_sent = 0;  // the replay's next key when it was sent
    std::vector<uint64_t> keys;  // an update's
    double beta = 0.0;           // a sample's
    int64_t bad = 0;
    bool never_issued = false;
    bool wrong_shard = false;    // an update's key of another shard
    bool columns_apart = false;  // an add's
    bool append = false;         // an add's: of steps (the StepModel judged it)
    // An append's: the table its first group names (its reply's first key
    // is that table's), and the default table's items.
    int first_table = 0;
    int64_t default_items = 0;
    int table = 0;  // a sample's, shard sample's or update's
    int64_t first_step = proto::AppendMeta::kAtEnd;  // an add's of transitions: the stream index it names
    int64_t waiting_before = 0;  // the client's unanswered requests of its kind when it was sent
    std::chrono::steady_clock::time_point sent_at{};
    double timeout_seconds = 0.0;  // 0: none
  };
  struct Ledger {
    std::map<uint64_t, Request> requests;  // unanswered, by request id
    bool close_sent = false;
    bool closed = false;          // its close reply has come
    uint64_t last_first_key = 0;  // its latest acknowledged add's
    int64_t last_count = 0;       // and its count
    bool acknowledged_any = false;
    // An actor's stream of transitions there: the steps of its adds
    // acknowledged so far. Its replies come in the order the service sent
    // them, which is the order it applied its adds: when an add's reply is
    // received this is the stream as the service had it then.
    int64_t stream_steps = 0;
  };

  static const char* KindName(Kind kind);
  // One ledger a client and shard (an actor talks only to its own).
  Ledger& ledger(int client, int shard) { return ledgers_[static_cast<size_t>(client * config_.shards + shard)]; }
  const Ledger& ledger(int client, int shard) const {
    return ledgers_[static_cast<size_t>(client * config_.shards + shard)];
  }
  int64_t Unanswered(int client, int shard, Kind kind) const;
  // Records a request `client` sends to `shard`.
  void Sent(int client, int shard, uint64_t request_id, Request request);
  void CheckError(int client, int shard, uint64_t request_id, const Request& request,
                  const proto::ErrorReply& error) const;
  void AddAcknowledged(int client, int shard, const Request& request, uint64_t first_key, int64_t count,
                       uint64_t next_key);
  std::vector<uint64_t> SampleReceived(int client, int shard, const Request& request, std::span<const std::byte> bulk,
                                       int64_t count, uint64_t next_key);
  std::vector<uint64_t> ShardSampleReceived(int client, int shard, const Request& request,
                                            const proto::ShardSampleReply& reply, std::span<const std::byte> bulk,
                                            uint64_t next_key);
  // A drawn item's checks that both kinds of sample share: of this shard,
  // live, whole, the item added under its key.
  void CheckDrawn(const Describe& what, int shard, const Request& request, uint64_t key,
                  std::span<const std::byte> columns, int64_t count, int64_t i, uint64_t next_key);
  // How failures name a client (and its shard when there are several).
  std::string Who(int client, int shard) const;
  void UpdateAnswered(const Request& request, int64_t applied, int64_t stale, int64_t dropped, uint64_t next_key) const;

  const SimTable& Table(int table) const { return tables_[static_cast<size_t>(table)]; }

  const SimulationConfig config_;
  std::vector<Ledger> ledgers_;
  std::map<uint64_t, int64_t> item_of_key_;         // from the acknowledgements, by key (its shard's bits in it)
  std::multimap<uint64_t, int64_t> sampled_early_;  // observed before their add's acknowledgement came
  std::vector<int64_t> items_acknowledged_;         // a shard: the default table's
  int64_t unkeyed_items_ = 0;  // of them, in appends whose first key is another table's
  std::vector<SimTable> tables_;                    // the services' tables (of transitions: one)
  bool terminated_ = false;
  StepModel* steps_ = nullptr;
  std::chrono::steady_clock::time_point now_{};
  mutable std::vector<int64_t> slots_;  // CheckReplay's scratch
  mutable std::vector<double> leaves_;
};

}  // namespace perserve::service::simulation
