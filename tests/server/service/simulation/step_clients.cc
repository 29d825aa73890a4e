// SimulatedClients' appends of steps (simulated_clients.h): a raw actor of a
// service of step streams appends a few steps (episodes ending at random)
// with items over its recent steps where its own view says they can be
// created. Whether the ring still holds their steps when the service applies
// the append is the service's to say, and the StepModel's to judge. Now and
// then an append is flawed on purpose: an item over steps the ring no longer
// holds or the stream never had, one whose steps are not all appended, a
// sequence off its period, one at a bootstrap step (done 2), a wrong first
// step, a byte too many, more steps than the ring holds, a NaN priority, an
// item over a step it created an item over before or twice over one step
// (issue 33: one item per step). Some send their step columns apart, now
// and then before the request.
// Once an append is refused, the actor waits for every answer and goes on
// from the steps the server acknowledged, as the client library does.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "proto/append.h"
#include "proto/codec.h"
#include "server/service/simulation/simulated_clients.h"
#include "server/service/simulation/step_model.h"

namespace perserve::service::simulation {

void SimulatedClients::AppendSteps(int client) {
  Client& state = clients_[client];
  StepStream& stream = *state.stream;
  const int shard = config_.ShardOfActor(client);
  if (model_.unanswered_adds(client, shard) >= config_.max_adds_in_flight) return;  // back-pressure
  if (state.stream_refused) {
    if (!state.appends.empty()) return;
    stream.Commit(state.steps_acknowledged, {});
    state.stream_refused = false;
  }
  const StepStreamsConfig& steps = config_.steps;
  PortableRandom& rng = random_.generator();
  const int64_t first_step = stream.size();
  int64_t count = random_.Pick(0, steps.max_append);
  const StepRows rows = stream.Draw(rng, count);
  stream.Commit(first_step, rows);  // items are chosen on the stream with these steps
  std::vector<int64_t> items = stream.PickItems(rng, random_.Pick(0, 3));
  enum class Flaw {
    kNone, kEvicted, kNotAppended, kOffPeriod, kAtBootstrap, kFirstStep, kBytes, kTooManySteps, kBadPriority,
    kDuplicate
  };
  Flaw flaw = random_.Chance(0.06) ? static_cast<Flaw>(random_.Pick(1, 8)) : Flaw::kNone;
  // Issue 33: an item over a step that has one (from the second stream, so the flaws drawn before stay as they were).
  if (flaw == Flaw::kNone && later_random_.Chance(0.03)) flaw = Flaw::kDuplicate;
  int64_t sent_first_step = first_step;
  switch (flaw) {
    case Flaw::kNone:
    case Flaw::kBytes:
    case Flaw::kBadPriority:
      break;
    case Flaw::kEvicted: {  // at a step the ring overwrote, or one the stream never had
      const int64_t gone = steps_->NewestEvicted(client);
      items.push_back(gone >= 0 ? gone - random_.Pick(0, std::min<int64_t>(gone, 2)) : -random_.Pick(1, 2));
      break;
    }
    case Flaw::kNotAppended:  // past the steps appended, or short of the steps it needs
      items.push_back(stream.size() + random_.Pick(0, 2));
      if (stream.size() > 0 && !stream.Creatable(stream.size() - 1) && random_.Chance(0.5)) {
        items.back() = stream.size() - 1;
      }
      break;
    case Flaw::kOffPeriod: {
      const int64_t t = stream.OffPeriod(rng);
      items.push_back(t >= 0 ? t : stream.size());
      break;
    }
    case Flaw::kAtBootstrap: {  // at a truncated episode's bootstrap step
      const int64_t t = stream.RecentBootstrap();
      items.push_back(t >= 0 ? t : stream.size());
      break;
    }
    case Flaw::kFirstStep:
      sent_first_step = first_step + random_.Pick(1, 3);
      break;
    case Flaw::kTooManySteps:
      count = steps.options.step_capacity + 1;
      break;
    case Flaw::kDuplicate: {  // over a step it created an item over, else twice over one step
      const int64_t t = stream.RecentItem(rng);
      if (t >= 0) {
        items.push_back(t);
      } else if (!items.empty()) {
        items.push_back(items.front());
      }
      break;
    }
  }
  // Items in the tables beside the default one (issue 34; from the sixth
  // stream, so seeds of one table keep their schedules), each now and then
  // where its own layout can create them; now and then a group of a table
  // the server does not have (the append refused whole).
  std::vector<TableGroup> extra;
  for (int table = 1; table < config_.tables(); ++table) {
    if (!tables_random_.Chance(0.6)) continue;
    TableGroup group = DrawTableGroup(tables_random_, stream, table, tables_random_.Pick(1, 3));
    if (!group.steps.empty()) extra.push_back(std::move(group));
  }
  if (config_.tables() > 1 && tables_random_.Chance(0.02)) {
    extra.push_back(TableGroup{config_.tables(), {std::max<int64_t>(0, stream.size() - 1)}, {}, {}});
  }
  if (count == 0 && items.empty() && extra.empty()) return;  // nothing to send
  proto::AppendMeta meta;
  meta.steps = count;
  const bool has_priorities = random_.Chance(0.5) || flaw == Flaw::kBadPriority;
  meta.first_step = sent_first_step;
  if (random_.Chance(0.1)) meta.timeout_seconds = Timeout();
  std::vector<double> priorities;
  for (size_t i = 0; has_priorities && i < items.size(); ++i) priorities.push_back(random_.Uniform(0.01, 10.0));
  if (flaw == Flaw::kBadPriority) priorities.push_back(std::nan(""));  // with an item of its own
  if (flaw == Flaw::kBadPriority) items.push_back(std::max<int64_t>(0, stream.size() - 1));
  // The default table's items (none: steps only), then the others'.
  if (!items.empty()) meta.groups = {proto::ItemGroup{0, static_cast<int64_t>(items.size()), false, has_priorities}};
  stream.MarkItems(items);
  for (const TableGroup& group : extra) {
    meta.groups.push_back(proto::ItemGroup{group.table, static_cast<int64_t>(group.steps.size()), false,
                                           !group.priorities.empty()});
    if (group.table < config_.tables()) stream.MarkItems(group.steps, group.table);
  }
  std::vector<std::byte> step_bulk = StepStream::Wire(rows, steps.step_schema.columns.size());
  if (flaw == Flaw::kBytes) step_bulk.push_back(std::byte{7});
  // Its step columns apart (received straight into the ring), now and then before the request.
  meta.columns_follow = count > 0 && count <= steps.options.step_capacity && later_random_.Chance(0.3);
  const bool columns_first = meta.columns_follow && later_random_.Chance(0.25);
  const std::vector<std::byte> item_bulk = StepStream::Wire(
      stream.ItemRows(rng, static_cast<int64_t>(items.size())), steps.options.item_columns.size());
  const uint64_t id = state.next_request_id++;
  const std::span<const std::byte> step_columns[] = {step_bulk};
  // One span a group: a table's item columns go as one (EncodeAppend copies the spans in order).
  std::vector<std::span<const std::byte>> item_columns = {item_bulk};
  for (const TableGroup& group : extra) item_columns.push_back(group.columns);
  std::vector<proto::ItemGroupSpans> groups;
  if (!items.empty()) groups.push_back(proto::ItemGroupSpans{items, priorities, std::span(&item_columns[0], 1)});
  for (size_t g = 0; g < extra.size(); ++g) {
    groups.push_back(proto::ItemGroupSpans{extra[g].steps, extra[g].priorities, std::span(&item_columns[g + 1], 1)});
  }
  // Now and then the groups in another order than the tables'.
  if (meta.groups.size() > 1 && tables_random_.Chance(0.3)) {
    std::reverse(meta.groups.begin(), meta.groups.end());
    std::reverse(groups.begin(), groups.end());
  }
  std::vector<std::byte> frame;
  proto::EncodeAppend(id, meta,
                      meta.columns_follow ? std::span<const std::span<const std::byte>>{}
                                          : std::span<const std::span<const std::byte>>(step_columns),
                      groups, &frame);
  model_.SentAppend(client, shard, id, frame);
  if (meta.timeout_seconds > 0) model_.WithTimeout(client, shard, id, meta.timeout_seconds);
  if (random_.tracing()) {
    std::string others;
    for (const TableGroup& group : extra) others += fmt::format(", table {} at {}", group.table, fmt::join(group.steps, ", "));
    random_.Trace("client {} request {}: append of {} steps from step {} with items at {}{}{}{}{}", client, id,
                  meta.steps, meta.first_step, fmt::join(items, ", "), others,
                  meta.columns_follow ? (columns_first ? ", columns apart, before the request" : ", columns apart")
                                      : "",
                  meta.timeout_seconds > 0 ? fmt::format(", timeout {:.3f} s", meta.timeout_seconds) : "",
                  flaw == Flaw::kNone ? "" : fmt::format(" (flawed: {})", static_cast<int>(flaw)));
  }
  state.appends[id] = count;
  if (columns_first) ColumnsBeforeRequest(client, step_bulk);
  Push(client, shard, std::move(frame));
  if (meta.columns_follow && !columns_first) state.columns.push_back(std::move(step_bulk));
}

void SimulatedClients::AppendAnswered(int client, std::span<const std::byte> reply) {
  Client& state = clients_[client];
  proto::Frame frame;
  if (!proto::DecodeFrame(reply, &frame).ok()) return;
  const auto found = state.appends.find(frame.header.request_id);
  if (found == state.appends.end()) return;
  if (frame.kind() == proto::MessageKind::kAddReply) {
    state.steps_acknowledged += found->second;
  } else {
    state.stream_refused = true;  // the appends after it are refused too (their first steps are past the stream's)
  }
  state.appends.erase(found);
}

}  // namespace perserve::service::simulation
