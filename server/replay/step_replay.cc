#include "replay/step_replay.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace perserve::replay {
namespace {

constexpr uint64_t kNoItem = std::numeric_limits<uint64_t>::max();

}  // namespace

// The stream's steps as they will be once a request is in: those held now
// (the store) and the request's (read from its columns), indices
// stream_oldest .. new_steps - 1.
struct StepReplay::RequestView {
  const store::StepStore& store;
  int stream;
  int64_t oldest;             // the stream's oldest index held now
  int64_t old_steps;          // its steps before the request
  int64_t new_steps;          // and after
  uint64_t first_new_key;     // the request's first step's key
  uint64_t oldest_key_after;  // the ring's oldest key once the request is in
  const std::vector<uint8_t>& done;            // the request's steps'
  const std::vector<int64_t>& episode_start;   // the request's steps'

  uint64_t Key(int64_t i) const {
    return i >= old_steps ? first_new_key + static_cast<uint64_t>(i - old_steps) : store.KeyOf(stream, i);
  }
  // 0, store::kTerminal or store::kTruncated.
  uint8_t Done(int64_t i) const {
    return i >= old_steps ? done[static_cast<size_t>(i - old_steps)] : store.Info(Key(i)).done;
  }
  int64_t EpisodeStart(int64_t i) const {
    return i >= old_steps ? episode_start[static_cast<size_t>(i - old_steps)] : store.Info(Key(i)).episode_start;
  }
};

Status StepReplay::Create(const StepOptions& options, Schema step_schema, Replay* items,
                          std::unique_ptr<StepReplay>* out) {
  StepLayout layout;
  PERSERVE_RETURN_IF_ERROR(BuildStepLayout(options, step_schema, &layout));
  if (items == nullptr) return Status::InvalidArgument("no items' Replay");
  if (items->store().schema().ToString() != layout.stored_schema.ToString()) {
    return Status::InvalidArgument(fmt::format("the items' Replay stores {}; a step replay's items need {}",
                                               items->store().schema().ToString(),
                                               layout.stored_schema.ToString()));
  }
  if (items->next_key() != 0) {
    return Status::FailedPrecondition(
        fmt::format("the items' Replay already issued {} keys: a step replay adds all of its items",
                    items->next_key()));
  }
  out->reset(new StepReplay(options, std::move(step_schema), std::move(layout), items));
  return Status::Ok();
}

StepReplay::StepReplay(const StepOptions& options, Schema step_schema, StepLayout layout, Replay* items)
    : options_(options),
      layout_(std::move(layout)),
      steps_(std::move(step_schema), options.step_capacity, options.streams, layout_.reward_column,
             layout_.done_column, options.prefault),
      items_(items),
      item_head_(static_cast<size_t>(options.step_capacity), kNoItem),
      item_next_(static_cast<size_t>(items->capacity()), kNoItem) {
  int64_t stacked_bytes = 0;
  for (size_t c = 0; c < layout_.depths.size(); ++c) {
    if (layout_.depths[c] > 1) stacked_bytes = std::max(stacked_bytes, steps_.schema().columns[c].ItemBytes());
  }
  zero_frame_.assign(static_cast<size_t>(stacked_bytes), std::byte{0});
}

Status StepReplay::CheckItem(const RequestView& request, size_t position, int64_t t, uint64_t* earliest_key) const {
  const auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument(
        fmt::format("item {} over step {} of stream {}: {}", position, t, request.stream, why));
  };
  if (t < 0) return refuse("the stream never had it (stream indices start at 0)");
  if (t >= request.new_steps) {
    return refuse(fmt::format("not appended yet (the stream's last step, with this request, is {})",
                              request.new_steps - 1));
  }
  if (t < request.oldest) {
    return refuse(fmt::format("the ring no longer holds it (the stream holds steps {} .. {})", request.oldest,
                              request.old_steps - 1));
  }
  if (request.Done(t) == store::kTruncated) {
    return refuse("it is a truncated episode's bootstrap observation (done 2): items end there, none starts there");
  }
  const int64_t episode_start = request.EpisodeStart(t);
  const int64_t earliest = std::max(episode_start, t - layout_.max_depth + 1);
  if (earliest < request.oldest || request.Key(earliest) < request.oldest_key_after) {
    return refuse(fmt::format("it needs step {} (the first of its stack of {} within its episode), which the ring "
                              "no longer holds once this request's {} steps are in",
                              earliest, layout_.max_depth, request.new_steps - request.old_steps));
  }
  const bool n_step = options_.kind == StepOptions::Kind::kNStep;
  if (!n_step && (t - episode_start) % options_.sequence_period != 0) {
    return refuse(fmt::format("a sequence must start a multiple of the period {} steps into its episode; this "
                              "one starts {} steps into the episode that began at step {}",
                              options_.sequence_period, t - episode_start, episode_start));
  }
  // The last step it needs unless its episode ends before: t+n (the
  // successor) or t+L-1. An episode that ends at any step up to it makes the
  // item whole (ending at `last` itself: `last` is in anyway).
  const int64_t last = n_step ? t + options_.n_step : t + options_.sequence_length - 1;
  for (int64_t i = t; i <= std::min(last, request.new_steps - 1); ++i) {
    if (request.EpisodeStart(i) != episode_start) {  // only across a restore: its episode ended there
      return refuse(fmt::format("step {} begins a new episode (the server was restored from a checkpoint there)",
                                request.EpisodeStart(i)));
    }
    if (request.Done(i) != 0) {
      *earliest_key = request.Key(earliest);
      return Status::Ok();
    }
  }
  if (last >= request.new_steps) {
    return refuse(fmt::format("it needs step {} ({}), not appended yet (the stream's last step, with this "
                              "request, is {}), and its episode does not end before",
                              last, n_step ? "its n-step successor" : "its sequence's last", request.new_steps - 1));
  }
  *earliest_key = request.Key(earliest);
  return Status::Ok();
}

void StepReplay::CollectOverwrittenItems(int64_t steps) {
  removed_.clear();
  const uint64_t oldest_item = items_->oldest_key();
  const uint64_t item_capacity = static_cast<uint64_t>(items_->capacity());
  for (uint64_t key = steps_.oldest_key(); key < steps_.OldestKeyAfter(steps); ++key) {
    // Newest first; an item no longer held means every older one is gone too
    // (and its link may belong to its slot's new occupant: never read it).
    for (uint64_t item = item_head_[static_cast<size_t>(steps_.SlotOf(key))];
         item != kNoItem && item >= oldest_item; item = item_next_[item % item_capacity]) {
      removed_.push_back(item);
    }
  }
}

Status StepReplay::CheckCounts(int64_t steps, int64_t items) const {
  if (steps < 0 || steps > options_.step_capacity) {
    return Status::InvalidArgument(
        fmt::format("an append of {} steps: the count must be in [0, step capacity {}]", steps,
                    options_.step_capacity));
  }
  if (items < 0 || items > items_->capacity()) {
    return Status::InvalidArgument(
        fmt::format("an append of {} items: the count must be in [0, item capacity {}]", items,
                    items_->capacity()));
  }
  return Status::Ok();
}

Status StepReplay::Append(int stream, int64_t first_step, int64_t steps, std::span<const std::byte> step_columns,
                          std::span<const int64_t> item_steps, std::span<const double> priorities,
                          std::span<const std::byte> item_columns, uint64_t* first_item_key) {
  if (stream < 0 || stream >= options_.streams) {
    return Status::InvalidArgument(fmt::format("stream {} is outside [0, {})", stream, options_.streams));
  }
  const int64_t old_steps = steps_.stream_steps(stream);
  if (first_step != old_steps) {
    return Status::FailedPrecondition(fmt::format(
        "stream {} sends steps from index {}, but its next step is {}: a request was lost or repeated", stream,
        first_step, old_steps));
  }
  const int64_t count = static_cast<int64_t>(item_steps.size());
  PERSERVE_RETURN_IF_ERROR(CheckCounts(steps, count));
  if (steps > 0) {
    PERSERVE_RETURN_IF_ERROR(steps_.CheckBatch(steps, step_columns));
  } else if (!step_columns.empty()) {
    return Status::InvalidArgument(fmt::format("no steps but {} bytes of step columns", step_columns.size()));
  }
  if (count > 0) {
    PERSERVE_RETURN_IF_ERROR(items_->CheckAdd(count, priorities));
  } else if (!priorities.empty()) {
    return Status::InvalidArgument(fmt::format("no items but {} priorities", priorities.size()));
  }
  const uint64_t expected_item_bytes = static_cast<uint64_t>(count * layout_.item_column_bytes);
  if (item_columns.size() != expected_item_bytes) {
    return Status::InvalidArgument(fmt::format("{} items must carry {} bytes of item columns ({} per item), got {}",
                                               count, expected_item_bytes, layout_.item_column_bytes,
                                               item_columns.size()));
  }

  // The request's steps' episodes, then every item against the steps as they will be.
  request_done_.resize(static_cast<size_t>(steps));
  request_episode_start_.resize(static_cast<size_t>(steps));
  int64_t episode_start = steps_.next_episode_start(stream);
  for (int64_t j = 0; j < steps; ++j) {
    request_episode_start_[j] = episode_start;
    request_done_[j] = steps_.BulkDone(step_columns, steps, j);
    if (request_done_[j] != 0) episode_start = old_steps + j + 1;
  }
  const RequestView request{steps_,
                            stream,
                            steps_.stream_oldest(stream),
                            old_steps,
                            old_steps + steps,
                            steps_.next_key(),
                            steps_.OldestKeyAfter(steps),
                            request_done_,
                            request_episode_start_};
  earliest_keys_.resize(static_cast<size_t>(count));
  item_step_keys_.resize(static_cast<size_t>(count));
  for (size_t j = 0; j < item_steps.size(); ++j) {
    PERSERVE_RETURN_IF_ERROR(CheckItem(request, j, item_steps[j], &earliest_keys_[j]));
    item_step_keys_[j] = request.Key(item_steps[j]);
  }

  // Every item that needs a step this request overwrites leaves the tree,
  // then the steps go in (their lists start empty), then the new items.
  CollectOverwrittenItems(steps);
  PERSERVE_RETURN_IF_ERROR(items_->Remove(removed_));
  for (uint64_t key = steps_.oldest_key(); key < steps_.OldestKeyAfter(steps); ++key) {
    item_head_[static_cast<size_t>(steps_.SlotOf(key))] = kNoItem;
  }
  if (steps > 0) steps_.Append(stream, steps, step_columns);
  if (count == 0) {
    *first_item_key = items_->next_key();
    return Status::Ok();
  }
  const size_t key_bytes = static_cast<size_t>(count) * sizeof(uint64_t);
  const auto fill = [&](std::span<const std::span<std::byte>> regions) {
    // The step column's 1 or 2 regions, then the item columns' (Regions' order).
    size_t written = 0;
    for (const std::span<std::byte> region : regions) {
      const std::byte* source = written < key_bytes
                                    ? reinterpret_cast<const std::byte*>(item_step_keys_.data()) + written
                                    : item_columns.data() + (written - key_bytes);
      std::memcpy(region.data(), source, region.size());
      written += region.size();
    }
    return Status::Ok();
  };
  uint64_t first = 0;
  const Status added = items_->AddInPlace(count, priorities, fill, &first);
  if (!added.ok()) {  // CheckAdd passed: only a failing tree device gets here
    return Status::Internal(fmt::format("stream {}'s {} steps are appended, but its {} items failed: {}", stream,
                                        steps, count, added.ToString()));
  }
  const uint64_t item_capacity = static_cast<uint64_t>(items_->capacity());
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t key = first + static_cast<uint64_t>(j);
    uint64_t& head = item_head_[static_cast<size_t>(steps_.SlotOf(earliest_keys_[j]))];
    item_next_[key % item_capacity] = head;
    head = key;
  }
  *first_item_key = first;
  return Status::Ok();
}

Status StepReplay::StartRestore(uint64_t first_step_key, std::span<const int64_t> first_index,
                                std::span<const int64_t> episode_start) {
  if (steps_.next_key() != 0) {
    return Status::FailedPrecondition(
        fmt::format("a restore into a step replay that holds {} steps already", steps_.next_key()));
  }
  steps_.StartRestore(first_step_key, first_index, episode_start);
  options_.streams = std::max(options_.streams, steps_.streams());
  return Status::Ok();
}

Status StepReplay::RestoreItem(uint64_t item_key, double leaf) {
  if (leaf == 0.0) return Status::Ok();
  const int64_t item_slot = static_cast<int64_t>(item_key % static_cast<uint64_t>(items_->capacity()));
  uint64_t step_key = 0;
  std::memcpy(&step_key, items_->store().Rows(0, item_slot, 1).data(), sizeof(step_key));
  if (step_key < steps_.oldest_key() || step_key >= steps_.next_key()) {
    return Status::InvalidArgument(fmt::format("item key {}: its step key {} is not held (the ring holds {} .. {})",
                                               item_key, step_key, steps_.oldest_key(),
                                               static_cast<int64_t>(steps_.next_key()) - 1));
  }
  const store::StepInfo& info = steps_.Info(step_key);
  const std::vector<uint8_t> no_done;
  const std::vector<int64_t> no_start;
  const RequestView held{steps_,
                         info.stream,
                         steps_.stream_oldest(info.stream),
                         steps_.stream_steps(info.stream),
                         steps_.stream_steps(info.stream),
                         steps_.next_key(),
                         steps_.oldest_key(),
                         no_done,
                         no_start};
  uint64_t earliest = 0;
  const Status checked = CheckItem(held, 0, info.index, &earliest);
  if (!checked.ok()) return Status::InvalidArgument(fmt::format("item key {}: {}", item_key, checked.message()));
  uint64_t& head = item_head_[static_cast<size_t>(steps_.SlotOf(earliest))];
  item_next_[static_cast<size_t>(item_slot)] = head;
  head = item_key;
  return Status::Ok();
}

}  // namespace perserve::replay
