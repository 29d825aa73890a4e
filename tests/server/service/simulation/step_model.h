// StepModel: what must hold of the services' step streams (docs/steps.md),
// beside the ReferenceModel's checks of every request and reply. Each shard
// has a StepReference (tests/server/replay/step_reference.h: every stream's
// whole history, every item's sample recomputed from it), kept in the
// service's own order: every reply a shard sends passes through ReplySent
// as it is sent (LoopbackTransport::ObserveSends), and the service answers
// an append when it applies it. So, exactly:
//   - an append is acknowledged only if it was valid then (its first step
//     the stream's next, its counts and bytes right, its columns apart of
//     its steps' size, every item creatable once its steps are in: all its
//     steps appended and still in the ring, a sequence on its period, no
//     item over a step the table holds an item over or twice over one
//     step), and refused then with the one code its first flaw gets
//     (InvalidArgument; FailedPrecondition for a wrong first step),
//     changing nothing; its items get the keys the reference expects;
//   - the table the reference keeps (StepReference::RemoveItemsBeforeAdd):
//     an item leaves only when its earliest step leaves the ring, or when
//     the table is full (more than the seed's capacity would be held: the
//     oldest held leave first), in that order at the append that does it
//     (issue 33: no longer when its key falls out of a ring of `capacity`
//     item slots);
//   - every sampled item (samples and shard samples, raw and library
//     learners) is held when it is sent, so whole (exact eviction); its
//     bytes are the reference's, column by column;
//   - an update counts stale exactly the keys whose items are gone then
//     (less those dropped for a bad priority);
//   - an append that creates no items is never held by the rate limiter
//     (issue 33, finding 3): a client's oldest append the service has not
//     answered is held if any is (requests are received in order); if it
//     creates no items and carries its columns, nothing but the limiter or
//     rows pinned by a reply in flight could hold it past the next step
//     (one that came behind an append the limiter held waits at most one
//     step once that one goes), so it is never held two steps in a row with
//     no rows pinned;
//   - after every step that changed the items, the table holds exactly the
//     reference's items, each with a positive leaf (no item vanishes while
//     its steps are held), and after every step the ring's keys and streams
//     are the reference's.
// Several tables (issue 34): each table of a shard has its own reference
// (its layout over the same steps, its items and keys) and a
// TableReference (table_reference.h) for its sampler, remover and
// max_times_sampled, kept in the service's order like the rest: every draw
// of a fifo, lifo or heap table is the one the reference's selector gives
// then, a uniform draw's probability is 1 / (items held then), a queue's
// item leaves with its k-th draw, the remover takes the items the
// reference's does, and after every step each table's priorities, times
// sampled and draws left are the reference's. And each table's minimum
// size and rate limiter (rate_limiter.h) hold for every draw: a sample of b
// items is sent only while the table holds its M items and, with R > 0,
// I R - S - b >= R M - E (its items inserted I and sampled S before it).
// A violation throws SimulationFailure.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/replay/step_reference.h"
#include "server/service/simulation/reference_model.h"
#include "server/service/simulation/simulated_clients.h"
#include "server/service/simulation/simulation_config.h"
#include "server/service/simulation/simulator.h"
#include "server/service/simulation/table_reference.h"

namespace perserve::service::simulation {

class StepModel {
 public:
  // `links`: the shards as their clients reach them (a stream per client index there).
  StepModel(const SimulationConfig& config, const std::vector<ShardLink>* links);

  // Once the shards' transports exist: each shard's reference, and the
  // transports' observers of what their services send (ReplySent).
  void Start();

  // Crash-restart (the simulator's): what the model holds of a shard, saved
  // as a checkpoint of it begins (Save: in the service's order, like the
  // rest), and put back when the job restarts from that checkpoint
  // (RollBack), where every stream's next step begins a new episode (the
  // restore ended the one in progress). Restarted, once every shard is
  // back: the requests in flight went with their clients, and the links
  // name the restarted services' transports. What the run counted stays.
  struct Saved;
  Saved Save(int shard) const;
  void RollBack(int shard, const Saved& saved);
  void Restarted();
  // The steps `client`'s stream on `shard` holds (every one it appended), as the restored service has them.
  const std::vector<replay::step_test::RefStep>& History(int client, int shard) const {
    return reference(shard).history(Stream(client, shard));
  }

  // An append `client` sends to `shard` (its whole frame), its step columns
  // when they go apart (sent before or after the request: a client's go to
  // its appends apart in order), and an update's keys.
  void SentAppend(int client, int shard, uint64_t request_id, std::span<const std::byte> frame);
  void SentColumns(int client, int shard, std::span<const std::byte> columns);
  // A sample or shard sample of `table`, and an update of its keys with these priorities.
  void SentSample(int client, int shard, uint64_t request_id, int table);
  void SentUpdate(int client, int shard, uint64_t request_id, int table, const std::vector<uint64_t>& keys,
                  std::vector<double> priorities);
  // A reply `shard`'s service sends to its client `index`, as it sends it.
  // Called inside the service's Step, which would turn an exception into an
  // error reply: a failure is kept for ThrowIfFailed instead.
  void ReplySent(int shard, int index, std::span<const std::byte> frame);
  // After each step: throws the first failure ReplySent found.
  void ThrowIfFailed() const {
    if (!failure_.empty()) Fail(failure_);
  }
  // Whether error `code` answers that append as its verdict says (asked when it is received).
  bool MayRefuse(int client, int shard, uint64_t request_id, int32_t code) const;

  // After each step of `shard`; `changed`: its items' keys issued or count changed.
  void CheckShard(int shard, const replay::StepReplay& table, bool changed);
  // After each step of `shard`: `held(index)` appends of its client `index`
  // are held (ReplayService::held_adds); `rows_pinned`: replies in flight pin
  // rows of its ring (ReplayService::rows_pinned), which may hold any append.
  template <class Held>
  void CheckHeld(int shard, const Held& held, bool rows_pinned) {
    Shard& state = shards_[static_cast<size_t>(shard)];
    if (rows_pinned) {
      state.held_itemless.clear();
      return;
    }
    std::vector<RequestKey> itemless;  // the clients' oldest held appends that create no items
    for (int index = 0; index < static_cast<int>(state.client_of.size()); ++index) {
      const int client = state.client_of[static_cast<size_t>(index)];
      if (client < 0 || held(index) == 0) continue;
      // Its oldest append not answered: ids grow in the order it sends them.
      const auto oldest = appends_.lower_bound(RequestKey{client, shard, 0});
      if (oldest == appends_.end() || std::get<0>(oldest->first) != client || std::get<1>(oldest->first) != shard) {
        continue;
      }
      const Append& append = oldest->second;
      if (append.malformed || append.apart || append.items() > 0) continue;
      Expect(std::find(state.held_itemless.begin(), state.held_itemless.end(), oldest->first) ==
                 state.held_itemless.end(),
             [&] {
               return fmt::format("client {}{}: append {}, of {} steps and no items, is held a second step (the rate "
                                  "limiter holds only appends that create items)",
                                  client, config_.shards > 1 ? fmt::format(" (shard {})", shard) : "",
                                  std::get<2>(oldest->first), append.count);
             });
      itemless.push_back(oldest->first);
    }
    state.held_itemless = std::move(itemless);
  }
  const StepCounts& counts() const { return counts_; }

  // An item's sample, column by column (a key of `table` with its shard's bits); fails for a key never issued.
  std::vector<std::vector<std::byte>> Expected(uint64_t key, int table = 0) const;
  // The steps of `shard` as the service holds them: the default table's reference (every table's holds them).
  const replay::step_test::StepReference& reference(int shard) const {
    return shards_[static_cast<size_t>(shard)].tables[0].ref;
  }
  int Stream(int client, int shard) const;
  // The newest index of `client`'s stream whose steps the ring no longer holds (-1: none).
  int64_t NewestEvicted(int client) const;

 private:
  using RequestKey = std::tuple<int, int, uint64_t>;  // client, shard, request id
  using Rows = std::vector<std::vector<std::vector<std::byte>>>;
  struct Append {
    int64_t first_step = 0, count = 0;
    bool malformed = false;     // refused on its counts or bytes, whatever the stream holds
    // Its columns apart are not its steps' size: refused InvalidArgument
    // when they are received into the ring, but after its first step is
    // checked when they came with it (before the request, or while it was held).
    bool bad_columns = false;
    bool apart = false;  // its step columns are a message of their own
    bool bad_priority = false;  // refused once its first step is checked
    Rows rows;                  // rows[j][c]: step j's bytes of step column c
    struct Group {              // one table's items, in the request's order
      int table = 0;
      std::vector<int64_t> steps;
      std::vector<double> priorities;  // empty: none given
      Rows rows;                       // rows[i][c]: item i's bytes of item column c
    };
    std::vector<Group> groups;
    int64_t items() const {
      int64_t items = 0;
      for (const Group& group : groups) items += static_cast<int64_t>(group.steps.size());
      return items;
    }
    const Group* GroupOf(int table) const {
      for (const Group& group : groups) {
        if (group.table == table) return &group;
      }
      return nullptr;
    }
  };
  struct Update {
    int table = 0;
    std::vector<uint64_t> keys;
    std::vector<double> priorities;
  };
  // What an append may be refused with, judged when the service answered it.
  struct Verdict {
    bool invalid_argument = false, failed_precondition = false;
  };
  struct Table {
    Table(const replay::StepOptions& layout, const Schema& schema, const replay::ReplayOptions& items)
        : ref(layout, schema), selector(items) {}
    replay::step_test::StepReference ref;  // the shard's steps, this table's layout and items
    TableReference selector;               // its sampler, remover and max_times_sampled
    std::vector<uint64_t> earliest;        // by item key: its earliest step's key
    int64_t inserted = 0, sampled = 0;     // items, as its rate limiter counts them
  };
  struct Shard {
    std::vector<Table> tables;              // the default one first
    std::vector<int> client_of;             // by transport index
    std::vector<RequestKey> held_itemless;  // CheckHeld's after the shard's last step
    replay::step_test::StepReference& ring() { return tables[0].ref; }
  };

  // The transports' observers of what their services send (ReplySent).
  void ObserveSends();
  // Judges `append` from `stream` against the reference as it stands; a valid one's steps stay appended.
  Verdict Judge(int shard, int stream, const Append& append);
  // An acknowledged append's items come in, in each table at its next keys:
  // first the items whose earliest step left the ring go (from every
  // table), then the remover's while a table would hold more than its capacity.
  void Commit(int shard, int stream, const Append& append);
  // A draw of a table with max_times_sampled gave `key`: its k-th takes it out.
  void Drawn(Table* table, uint64_t key);
  void CheckReply(int shard, int index, std::span<const std::byte> frame);
  void AppendAnswered(int client, int shard, uint64_t request_id, const proto::Frame& frame);
  // The drawn items of a sample (with its probabilities) or shard sample
  // reply (none) of `table`: whole, each the draw its selector gives, and
  // the reference's bytes; then the draws' effect (max_times_sampled).
  void CheckDrawn(int shard, int table, const std::string& what, std::span<const uint64_t> keys,
                  std::span<const double> probabilities, std::span<const std::byte> columns);
  void UpdateAnswered(int client, int shard, uint64_t request_id, const proto::Frame& frame);
  // Whether the item under local `key` of `shard`'s `table` is whole now.
  bool Whole(int shard, int table, uint64_t key) const;
  // After each step: `table` (its index) of `shard` holds exactly its reference's items and selectors' state.
  void CheckTable(int shard, int table, const replay::Replay& items, bool changed);

  const SimulationConfig& config_;
  const std::vector<ShardLink>& links_;
  std::vector<Shard> shards_;
  std::map<RequestKey, Append> appends_;                 // sent, not answered yet
  std::map<RequestKey, Update> updates_;                 // sent, not answered yet
  std::map<RequestKey, int> samples_;                    // samples and shard samples not answered yet: their tables
  std::map<RequestKey, Verdict> verdicts_;               // refusable appends, until received
  std::map<std::pair<int, int>, std::deque<RequestKey>> awaiting_columns_;  // by client and shard, in send order
  std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> early_columns_;  // sent before their request
  StepCounts counts_;
  std::string failure_;  // the first failure ReplySent found
};

struct StepModel::Saved {
  Shard shard;
};

}  // namespace perserve::service::simulation
