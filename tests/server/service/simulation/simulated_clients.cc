#include "server/service/simulation/simulated_clients.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "proto/append.h"
#include "proto/codec.h"
#include "server/service/service_test_util.h"
#include "server/service/simulation/self_checking_rows.h"
#include "server/service/simulation/step_model.h"
#include "service/checkpoint/checkpoint.h"

namespace perserve::service::simulation {
namespace {

using proto::MessageKind;
using service_test::Frame;

// A key no replay of the simulation ever issues.
constexpr uint64_t kNeverIssuedKey = uint64_t{1} << 40;

}  // namespace

SimulatedClients::SimulatedClients(const SimulationConfig& config, ScheduleRandom* random, ScheduleRandom* later_random,
                                   ScheduleRandom* library_random, ScheduleRandom* tables_random,
                                   ReferenceModel* model, std::vector<ShardLink>* shards, const StepModel* steps,
                                   int run)
    : config_(config),
      random_(*random),
      later_random_(*later_random),
      library_random_(*library_random),
      tables_random_(*tables_random),
      model_(*model),
      shards_(*shards),
      steps_(steps) {
  for (int client = 0; client < config.actors + config.learners; ++client) {
    clients_.emplace_back(client < config.actors ? ClientRole::kActor : ClientRole::kLearner);
    if (client >= config.actors) continue;
    // Its stream goes on from the steps its shard holds of it (after a crash-restart, the restored ones), as the
    // join says; of transitions, its items are numbered past every earlier life's.
    Client& actor = clients_.back();
    const int shard = config.ShardOfActor(client);
    actor.steps_sent = actor.steps_acknowledged = shards_[static_cast<size_t>(shard)].StreamSteps(client);
    if (config.steps.on) {
      actor.stream = std::make_unique<StepStream>(config.steps, client, steps->History(client, shard), run);
    } else {
      actor.next_item = int64_t{run} << 24;
    }
  }
}

int SimulatedClients::PickShard(int client) {
  if (clients_[client].role == ClientRole::kActor) return config_.ShardOfActor(client);
  return config_.shards == 1 ? 0 : static_cast<int>(library_random_.Pick(0, config_.shards - 1));
}

int SimulatedClients::PickTable() {
  return config_.tables() == 1 ? 0 : static_cast<int>(tables_random_.Pick(0, config_.tables() - 1));
}

void SimulatedClients::Tick(int client) {
  if (config_.shard_samples && clients_[client].role == ClientRole::kLearner && !clients_[client].close_sent &&
      later_random_.Chance(0.1)) {
    ShardSample(client);
  }
  if (clients_[client].paused_ticks > 0) {
    --clients_[client].paused_ticks;
    return;
  }
  if (random_.Chance(0.5)) ColumnsArrive(client, 1);
  Read(client, random_.Pick(0, 3));
}

void SimulatedClients::Finish(int client) {
  Client& state = clients_[client];
  state.paused_ticks = 0;
  ColumnsArrive(client, state.columns.size());
  if (!state.close_sent && random_.Chance(0.3)) Close(client);
  Read(client, std::numeric_limits<int64_t>::max());
}

void SimulatedClients::Act(int client) {
  Client& state = clients_[client];
  if (state.close_sent) return;
  if (random_.Chance(0.002)) return Close(client);  // a client that leaves early
  if (random_.Chance(0.05)) {
    state.paused_ticks = static_cast<int>(random_.Pick(1, 30));  // stops reading for a while
    return;
  }
  if (random_.Chance(0.02)) return AskCheckpoint(client);
  if (state.role == ClientRole::kActor) return config_.steps.on ? AppendSteps(client) : Add(client);
  if (random_.Chance(0.35) && !state.sampled_keys.empty()) return Update(client);
  Sample(client);
}

void SimulatedClients::Add(int client) {
  Client& state = clients_[client];
  const int shard = config_.ShardOfActor(client);
  if (model_.unanswered_adds(client, shard) >= config_.max_adds_in_flight) return;  // back-pressure
  proto::AppendMeta meta;
  meta.steps = random_.Pick(1, std::min<int64_t>(12, config_.capacity));
  meta.groups = {proto::ItemGroup{0, 0, /*item_per_step=*/true, /*has_priorities=*/random_.Chance(0.5)}};
  bool& has_priorities = meta.groups[0].has_priorities;
  meta.columns_follow = random_.Chance(0.4);
  if (random_.Chance(0.1)) meta.timeout_seconds = Timeout();
  // Now and then an add the server must refuse whole.
  enum class Flaw { kNone, kBadPriority, kColumnsSize, kTooMany };
  Flaw flaw = random_.Chance(0.05) ? static_cast<Flaw>(random_.Pick(1, 3)) : Flaw::kNone;
  if (flaw == Flaw::kColumnsSize && !meta.columns_follow) flaw = Flaw::kTooMany;
  // Issue 24, found by seed 3: an add apart refused on arrival (too many
  // held, or a bad count) while an earlier add apart of its client still
  // waited for its columns dropped the earlier add's columns, and that add
  // took the refused add's. Such adds are sent as any other since the fix
  // (HeldAdds' ledger).
  if (flaw == Flaw::kTooMany) meta.steps = config_.capacity + 1;
  const int64_t count = meta.steps;
  std::vector<double> priorities;
  has_priorities |= flaw == Flaw::kBadPriority;
  for (int64_t i = 0; has_priorities && i < count; ++i) priorities.push_back(random_.Uniform(0.01, 10.0));
  if (flaw == Flaw::kBadPriority) {
    priorities[static_cast<size_t>(random_.Pick(0, count - 1))] =
        std::array{-1.0, std::nan(""), HUGE_VAL}[random_.Pick(0, 2)];
  }
  const bool valid = flaw == Flaw::kNone;
  // Its first step (issue 33): the stream's next as this actor counts it, or its end. After a refusal the adds
  // that name a step wait until every add is answered (those sent meanwhile go at the end).
  if (state.stream_refused && state.appends.empty()) {
    state.steps_sent = state.steps_acknowledged;
    state.stream_refused = false;
  }
  const bool at_end = state.stream_refused || later_random_.Chance(0.3);
  meta.first_step = at_end ? proto::AppendMeta::kAtEnd : state.steps_sent;
  if (valid) state.steps_sent += count;
  // Its columns apart may arrive before the request (MPI matches the two tags apart).
  const bool columns_first = meta.columns_follow && later_random_.Chance(0.25);
  const int64_t columns_count = count + (flaw == Flaw::kColumnsSize ? 1 : 0);
  std::vector<std::byte> columns = EncodeColumns(client, state.next_item, columns_count, config_.pad_bytes);
  const uint64_t id = state.next_request_id++;
  model_.SentAdd(client, shard, id, state.next_item, count, valid, meta.columns_follow, meta.first_step);
  if (meta.timeout_seconds > 0) model_.WithTimeout(client, shard, id, meta.timeout_seconds);
  random_.Trace("client {} request {}: add of {} items from item {}{}{}{}{}{}", client, id, count, state.next_item,
                at_end ? " at the stream's end" : fmt::format(" from step {}", meta.first_step),
                has_priorities ? ", priorities" : "",
                meta.columns_follow ? (columns_first ? ", columns apart, before the request" : ", columns apart") : "",
                meta.timeout_seconds > 0 ? fmt::format(", timeout {:.3f} s", meta.timeout_seconds) : "",
                valid ? "" : " (to be refused)");
  if (valid) state.next_item += count;
  state.appends[id] = count;
  const std::span<const std::byte> in_request[] = {columns};
  const proto::ItemGroupSpans group{{}, priorities, {}};
  std::vector<std::byte> frame;
  proto::EncodeAppend(id, meta,
                      meta.columns_follow ? std::span<const std::span<const std::byte>>{}
                                          : std::span<const std::span<const std::byte>>(in_request),
                      std::span(&group, 1), &frame);
  if (columns_first) ColumnsBeforeRequest(client, std::move(columns));
  Push(client, shard, std::move(frame));
  // Else they arrive later, perhaps after later requests (another tag).
  if (meta.columns_follow && !columns_first) state.columns.push_back(std::move(columns));
}

double SimulatedClients::Timeout() {
  // Half fire within a run (the service's clock is the simulation's: 1 ms a
  // step), half never do.
  return later_random_.Chance(0.5) ? later_random_.Uniform(0.001, 0.1) : 3600.0;
}

void SimulatedClients::Sample(int client) {
  const int shard = PickShard(client);
  if (model_.unanswered(client, shard) >= config_.max_requests_waiting) return;
  const uint64_t id = clients_[client].next_request_id++;
  proto::SampleRequest request{random_.Pick(1, 16), random_.Uniform(0.0, 1.0)};
  if (random_.Chance(0.1)) request.timeout_seconds = Timeout();
  // Awaited: the server may send its rows from the store, pinned until this client reads it.
  if (config_.awaited_samples) request.awaited = library_random_.Chance(0.5);
  request.table = PickTable();
  if (request.table > 0) {
    // A queue's batch mostly within what its table can ever hold (a larger one waits until every actor closed).
    const replay::ReplayOptions& items = config_.steps.tables[static_cast<size_t>(request.table)].items;
    if (items.max_times_sampled > 0 && tables_random_.Chance(0.9)) {
      request.batch_size = std::min(request.batch_size, items.capacity * items.max_times_sampled);
    }
  }
  clients_[client].sample_tables[id] = request.table;
  model_.SentSample(client, shard, id, request.beta, NextKey(shard), request.table);
  if (request.timeout_seconds > 0) model_.WithTimeout(client, shard, id, request.timeout_seconds);
  random_.Trace("client {} request {}: sample of {}{} (beta {}{}{}){}", client, id, request.batch_size,
                request.table > 0 ? fmt::format(" from table {}", request.table) : "", request.beta,
                request.timeout_seconds > 0 ? fmt::format(", timeout {:.3f} s", request.timeout_seconds) : "",
                request.awaited ? ", awaited" : "",
                config_.shards > 1 && random_.tracing() ? fmt::format(" to shard {}", shard) : "");
  Push(client, shard, Frame(MessageKind::kSampleRequest, id, request));
}

void SimulatedClients::ShardSample(int client) {
  const int shard = PickShard(client);
  if (model_.unanswered(client, shard) >= config_.max_requests_waiting) return;
  const uint64_t id = clients_[client].next_request_id++;
  // A probe of the shard's state (now, or once it is ready), or draws at fractions of its total.
  proto::ShardSampleRequest request{later_random_.Chance(0.3) ? 0 : later_random_.Pick(1, 16),
                                    later_random_.Chance(0.5)};
  std::vector<double> fractions;
  for (int64_t i = 0; i < request.count; ++i) fractions.push_back(later_random_.Uniform(0.0, 1.0));
  if (config_.awaited_samples) request.awaited = library_random_.Chance(0.5);
  request.table = PickTable();
  clients_[client].sample_tables[id] = request.table;
  model_.SentShardSample(client, shard, id, request.count, NextKey(shard), request.table);
  random_.Trace("client {} request {}: shard sample of {}{}{}{}{}", client, id, request.count,
                request.table > 0 ? fmt::format(" from table {}", request.table) : "",
                request.wait ? ", waits" : "", request.awaited ? ", awaited" : "",
                config_.shards > 1 && random_.tracing() ? fmt::format(" to shard {}", shard) : "");
  Push(client, shard, Frame(MessageKind::kShardSampleRequest, id, request, {std::as_bytes(std::span(fractions))}));
}

void SimulatedClients::Update(int client) {
  Client& state = clients_[client];
  const int shard = PickShard(client);
  // The keys it sampled from that shard (with one shard, all of them), of
  // one table: that of one of them, with several.
  int table = 0;
  if (config_.tables() > 1) {
    table = state.sampled_tables[static_cast<size_t>(tables_random_.Pick(0, ssize(state.sampled_tables) - 1))];
  }
  std::vector<uint64_t> shard_keys;
  for (size_t i = 0; i < state.sampled_keys.size(); ++i) {
    const uint64_t key = state.sampled_keys[i];
    if (proto::ShardOfKey(key) == shard && state.sampled_tables[i] == table) shard_keys.push_back(key);
  }
  if (shard_keys.empty()) return Sample(client);
  // A table that takes no priorities (uniform, fifo, lifo) refuses updates: now and then one is sent anyway.
  if (table > 0 && !config_.steps.tables[static_cast<size_t>(table)].takes_updates() &&
      !tables_random_.Chance(0.2)) {
    return Sample(client);
  }
  std::vector<uint64_t> keys;
  std::vector<double> priorities;
  for (int64_t i = random_.Pick(1, 8); i > 0; --i) {
    keys.push_back(shard_keys[static_cast<size_t>(random_.Pick(0, static_cast<int64_t>(shard_keys.size()) - 1))]);
    priorities.push_back(random_.Chance(0.1) ? 0.0 : random_.Uniform(0.01, 10.0));
  }
  if (random_.Chance(0.1))
    priorities[static_cast<size_t>(random_.Pick(0, static_cast<int64_t>(keys.size()) - 1))] = std::nan("");
  // A table beside the default one: now and then priorities of a few values, which ties make matter.
  // Or all one value: the heaps then order the keys by the update's order (each set behind its equals).
  if (table > 0 && tables_random_.Chance(0.5)) {
    const bool one_value = tables_random_.Chance(0.5);
    const double value = TablePriority(tables_random_);
    for (double& p : priorities) p = std::isnan(p) ? p : one_value ? value : TablePriority(tables_random_);
  }
  // Bad as the replay counts them: NaN, and zero with neither eps nor drop_bad_priorities (replay.h).
  const bool zero_is_bad = config_.priority_eps == 0.0 && !config_.drop_bad_priorities;
  const int64_t bad = std::count_if(priorities.begin(), priorities.end(),
                                    [zero_is_bad](double p) { return std::isnan(p) || (zero_is_bad && p == 0.0); });
  const bool never_issued = random_.Chance(0.03);
  if (never_issued) keys.back() = proto::ShardKey(shard, kNeverIssuedKey);
  // With several shards, now and then a key of another shard, which its server refuses.
  const bool wrong_shard = config_.shards > 1 && library_random_.Chance(0.03);
  if (wrong_shard) keys.front() = proto::ShardKey((shard + 1) % config_.shards, proto::LocalKey(keys.front()));
  const uint64_t id = state.next_request_id++;
  model_.SentUpdate(client, shard, id, keys, bad, never_issued, wrong_shard, NextKey(shard, table), table,
                    priorities);
  random_.Trace("client {} request {}: update of {} keys{} ({} bad{}{}){}", client, id, keys.size(),
                table > 0 ? fmt::format(" of table {}", table) : "", bad,
                never_issued ? ", one never issued" : "", wrong_shard ? ", one of another shard" : "",
                config_.shards > 1 && random_.tracing() ? fmt::format(" to shard {}", shard) : "");
  Push(client, shard,
       Frame(MessageKind::kUpdateRequest, id, proto::UpdateRequest{static_cast<int64_t>(keys.size()), table},
             {std::as_bytes(std::span(keys)), std::as_bytes(std::span(priorities))}));
}

void SimulatedClients::Push(int client, int shard, std::vector<std::byte> frame, int tag) {
  ShardLink& link = shards_[static_cast<size_t>(shard)];
  link.transport->Push(link.index[static_cast<size_t>(client)], std::move(frame), tag);
}

void SimulatedClients::Close(int client) {
  clients_[client].close_sent = true;
  // An actor closes with its shard, a learner with every shard.
  for (int shard = 0; shard < config_.shards; ++shard) {
    if (shards_[static_cast<size_t>(shard)].index[static_cast<size_t>(client)] < 0) continue;
    const uint64_t id = clients_[client].next_request_id++;
    model_.SentClose(client, shard, id);
    random_.Trace("client {} request {}: close{}", client, id,
                  config_.shards > 1 && random_.tracing() ? fmt::format(" to shard {}", shard) : "");
    Push(client, shard, Frame(MessageKind::kCloseRequest, id, proto::Empty{}));
  }
}

void SimulatedClients::AskCheckpoint(int client) {
  const int shard = PickShard(client);
  const uint64_t id = clients_[client].next_request_id++;
  model_.SentCheckpoint(client, shard, id);
  random_.Trace("client {} request {}: checkpoint{}", client, id,
                config_.shards > 1 && random_.tracing() ? fmt::format(" of shard {}", shard) : "");
  Push(client, shard, Frame(MessageKind::kCheckpointRequest, id, proto::Empty{}));
}

void SimulatedClients::ColumnsArrive(int client, size_t how_many) {
  std::deque<std::vector<std::byte>>& columns = clients_[client].columns;
  const int shard = config_.ShardOfActor(client);
  for (; how_many > 0 && !columns.empty(); --how_many) {
    random_.Trace("client {}: columns apart of {} bytes arrive", client, columns.front().size());
    model_.SentColumns(client, shard, columns.front());
    ++columns_apart_;
    Push(client, shard, std::move(columns.front()), proto::kAddColumnsTag);
    columns.pop_front();
  }
}

void SimulatedClients::ColumnsBeforeRequest(int client, std::vector<std::byte> columns) {
  ColumnsArrive(client, clients_[client].columns.size());
  const int shard = config_.ShardOfActor(client);
  random_.Trace("client {}: columns apart of {} bytes arrive before their request", client, columns.size());
  model_.SentColumns(client, shard, columns);
  ++columns_apart_;
  ++columns_first_;
  Push(client, shard, std::move(columns), proto::kAddColumnsTag);
}

void SimulatedClients::Read(int client, int64_t most) {
  std::vector<int> ready;  // the shards with a reply for it
  for (; most > 0; --most) {
    ready.clear();
    for (int shard = 0; shard < config_.shards; ++shard) {
      const ShardLink& link = shards_[static_cast<size_t>(shard)];
      const int index = link.index[static_cast<size_t>(client)];
      if (index >= 0 && (link.transport->NextReplyInFlight(index) || !link.transport->outbox(index).empty())) {
        ready.push_back(shard);
      }
    }
    if (ready.empty()) return;
    // Replies of different servers may arrive in any order (no draw with one).
    const int shard =
        ready.size() == 1 ? ready.front() : ready[static_cast<size_t>(library_random_.Pick(0, ssize(ready) - 1))];
    LoopbackTransport& transport = *shards_[static_cast<size_t>(shard)].transport;
    const int index = shards_[static_cast<size_t>(shard)].index[static_cast<size_t>(client)];
    std::deque<std::vector<std::byte>>& outbox = transport.outbox(index);
    if (transport.NextReplyInFlight(index)) transport.Deliver(index);
    const std::vector<std::byte> reply = std::move(outbox.front());
    outbox.pop_front();
    ++replies_;
    proto::Frame frame;
    if (proto::DecodeFrame(reply, &frame).ok()) {
      Hash64 hash;
      hash.Update(std::as_bytes(std::span(&fingerprint_, 1)));
      hash.Update(std::as_bytes(std::span(&frame.header, 1)));
      hash.Update(frame.bulk);
      fingerprint_ = hash.Finish();
    }
    random_.Trace("client {} receives the reply to request {} (kind {}){}", client, frame.header.request_id,
                  frame.header.kind,
                  config_.shards > 1 && random_.tracing() ? fmt::format(" from shard {}", shard) : "");
    std::vector<uint64_t> keys = model_.Received(client, shard, reply, NextKey(shard));
    if (clients_[client].role == ClientRole::kActor) AppendAnswered(client, reply);
    Client& state = clients_[client];
    int table = 0;
    if (const auto asked = state.sample_tables.find(frame.header.request_id); asked != state.sample_tables.end()) {
      table = asked->second;
      state.sample_tables.erase(asked);
    }
    std::vector<uint64_t>& sampled = state.sampled_keys;
    sampled.insert(sampled.end(), keys.begin(), keys.end());
    state.sampled_tables.insert(state.sampled_tables.end(), keys.size(), table);
    if (sampled.size() > 64) {
      sampled.erase(sampled.begin(), sampled.end() - 64);
      state.sampled_tables.erase(state.sampled_tables.begin(), state.sampled_tables.end() - 64);
    }
  }
}

}  // namespace perserve::service::simulation
