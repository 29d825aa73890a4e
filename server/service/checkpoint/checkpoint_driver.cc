#include "service/checkpoint/checkpoint_driver.h"

#include <spdlog/spdlog.h>

#include "common/coverage_marks.h"

namespace perserve::service {
CheckpointDriver::CheckpointDriver(const replay::StepReplay* replay, CheckpointDriverOptions options, Hooks hooks)
    : replay_(replay), options_(std::move(options)), hooks_(std::move(hooks)) {
  if (options_.dir.empty()) return;
  std::vector<int64_t> capacities;
  for (int t = 0; t < replay_->tables(); ++t) capacities.push_back(replay_->table(t).items().capacity());
  writer_ = std::make_unique<CheckpointWriter>(options_.dir, options_.shard, options_.shards, std::move(capacities),
                                                options_.file_system, options_.clock);
  if (options_.every_seconds > 0) next_periodic_ = options_.clock.Now() + ClockDuration(options_.every_seconds);
}

Status CheckpointDriver::CheckEnabled() const {
  if (writer_ != nullptr) return Status::Ok();
  return Status::FailedPrecondition("this server takes no checkpoints: start it with --checkpoint-dir");
}

Status CheckpointDriver::Request(const std::string& reason, bool final) {
  PERSERVE_RETURN_IF_ERROR(CheckEnabled());
  if (!wanted_) reason_ = reason;
  wanted_ = true;
  final_wanted_ |= final;
  if (!writer_->active()) {
    Begin();
  } else if (final) {
    PERSERVE_MARK("checkpoint: SIGTERM's waits for the one being written");
  } else {
    PERSERVE_MARK("checkpoint: asked for while one is being written");
  }
  return Status::Ok();
}

void CheckpointDriver::Step(bool stopping) {
  if (writer_ == nullptr) return;
  // The next checkpoint begins here, between operations: one can end inside
  // an append (BeforeWrite failed), where a snapshot begun would miss the
  // rows that append overwrites next, and SIGTERM's, stopping the service,
  // would empty the held appends being served. After one begun before SIGTERM comes
  // SIGTERM's own (the first lacks the adds acknowledged since).
  if (wanted_ && !writer_->active()) Begin();
  const Clock::time_point now = options_.clock.Now();
  if (!stopping && now >= next_periodic_) {
    next_periodic_ = now + ClockDuration(options_.every_seconds);
    ++periodic_requests_;
    periodic_wanted_ = true;
    (void)Request(fmt::format("every {} s", options_.every_seconds));
  }
  if (!writer_->active()) return;
  bool done = false;
  const Status stepped = writer_->Step(*replay_, options_.slice, &done);
  if (!stepped.ok()) return Ended(stepped);
  if (done) Ended(Status::Ok());
}

void CheckpointDriver::BeforeWrite(int64_t steps) {
  if (writer_ == nullptr) return;
  const Status kept = writer_->BeforeWrite(*replay_, steps);
  if (!kept.ok()) Ended(kept);
}

void CheckpointDriver::BeforeCommit(int64_t steps) {
  if (writer_ == nullptr) return;
  const Status kept = writer_->BeforeCommit(*replay_, steps);
  if (!kept.ok()) Ended(kept);
}

void CheckpointDriver::Begin() {
  wanted_ = false;
  waiters_ = std::exchange(next_waiters_, {});
  const bool final = std::exchange(final_wanted_, false);
  writing_periodic_ = std::exchange(periodic_wanted_, false);
  const Status begun = writer_->Begin(*replay_, hooks_.state());
  final_began_ |= final;
  if (!begun.ok()) {
    Ended(begun);
  } else {
    int64_t held = 0, ever = 0;
    for (int t = 0; t < replay_->tables(); ++t) {
      held += replay_->table(t).items().size();
      ever += replay_->table(t).items().counters().items_added;
    }
    spdlog::info("checkpoint: writing {} ({}; {} items held, {} ever added{})", writer_->path(), reason_, held, ever,
                 replay_->tables() > 1 ? fmt::format(", in {} tables", replay_->tables()) : "");
    if (hooks_.begun) hooks_.begun(writer_->path());
  }
  // SIGTERM's checkpoint holds what was acknowledged before this Begin: from
  // now on adds and updates are answered UNAVAILABLE, not acknowledged.
  if (final) hooks_.final_begun();
}

void CheckpointDriver::Ended(const Status& error) {
  if (error.ok()) {
    if (writing_periodic_) PERSERVE_MARK("checkpoint: a periodic one complete");
    spdlog::info("checkpoint: {} is complete: {:.1f} MB in {:.2f} s, the longest pass writing it {:.1f} ms",
                 writer_->last_path(), writer_->last_bytes() / 1e6, writer_->last_duration().count() / 1e6,
                 writer_->longest_step().count() / 1e3);
  } else {
    PERSERVE_MARK("checkpoint: a write failed, the previous one kept");
    spdlog::error("checkpoint: not written: {}; the previous one ({}) is kept", error.ToString(),
                  writer_->last_path().empty() ? "none" : writer_->last_path());
  }
  for (const auto& [client, request_id] : std::exchange(waiters_, {})) hooks_.answer(client, request_id, error);
  // Step begins the next, if one is wanted.
}

void CheckpointDriver::ForgetClient(int client, const Status& closed) {
  for (auto* waiters : {&waiters_, &next_waiters_}) {
    std::erase_if(*waiters, [&](const std::pair<int, uint64_t>& waiter) {
      if (waiter.first == client) hooks_.answer(client, waiter.second, closed);
      return waiter.first == client;
    });
  }
}

void CheckpointDriver::Stop(const Status& stopped) {
  wanted_ = false;
  final_wanted_ = false;
  periodic_wanted_ = false;
  for (const auto& [client, request_id] : std::exchange(next_waiters_, {})) {
    hooks_.answer(client, request_id, stopped);
  }
}

}  // namespace perserve::service
