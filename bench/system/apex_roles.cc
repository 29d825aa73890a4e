#include "system/apex_roles.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <thread>

namespace perserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration Seconds(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }
double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Runs `once` at `per_second` (0: back to back) for `seconds`: call i at
// start + i / per_second, or at once when that time has passed, none begun
// after the end. *took: the seconds it ran, at least the calls' scheduled
// span (calls on time then count as exactly the rate asked; a rank that fell
// behind, as less).
template <typename Once>
Status Paced(double per_second, double seconds, Once once, double* took) {
  const auto start = Clock::now();
  const auto end = start + Seconds(seconds);
  Status status;
  int64_t calls = 0;
  for (; status.ok(); ++calls) {
    const auto next = per_second > 0 ? start + Seconds(static_cast<double>(calls) / per_second) : start;
    if (next >= end || Clock::now() >= end) break;
    std::this_thread::sleep_until(next);
    status = once();
  }
  *took = std::max(SecondsSince(start), per_second > 0 ? static_cast<double>(calls) / per_second : seconds);
  return status;
}

}  // namespace

ApexActor::ApexActor(ActorClient* actor, uint64_t seed)
    : actor_(actor), schedule_(/*reach=*/3, /*period=*/1, seed), rng_(seed) {
  const Schema& schema = actor_->schema();
  done_column_ = schema.ColumnIndex("done");
  for (const Column& column : schema.columns) {
    columns_.emplace_back(static_cast<size_t>(kApexAppendSteps * column.ItemBytes()));
    for (auto& b : columns_.back()) b = static_cast<std::byte>(rng_() & 0x3f);
  }
  // The step columns are lent (AppendBorrowed: sent from here straight into
  // the server's ring), so an append's must not change until it is
  // acknowledged: the frames never do, and each append in flight has a done
  // column of its own (max_in_flight + 1 of them, in turn).
  if (done_column_ >= 0) done_columns_.assign(kApexInFlight + 1, columns_[static_cast<size_t>(done_column_)]);
  // An append completes at most its steps' items plus the n pending before it.
  priorities_.resize(static_cast<size_t>(2 * kApexAppendSteps));
  std::uniform_real_distribution<double> priority(0.1, 2.0);
  for (double& p : priorities_) p = priority(rng_);
}

Status ApexActor::AppendOnce() {
  if (!actor_->stores_steps() || done_column_ < 0) {
    return Status::FailedPrecondition("the server must store step streams with a done column (--n-step 3)");
  }
  ColumnSpans steps{kApexAppendSteps, {}};
  for (const auto& column : columns_) steps.columns.push_back(std::span<const std::byte>(column));
  std::vector<std::byte>& done = done_columns_[next_done_++ % done_columns_.size()];
  steps.columns[static_cast<size_t>(done_column_)] = std::span<const std::byte>(done);
  schedule_.Next(kApexAppendSteps, done, &items_);
  if (items_.size() > priorities_.size()) return Status::Internal("an append completes more items than expected");
  return actor_->AppendBorrowed(steps, NewItems{items_, std::span(priorities_).first(items_.size()), {}});
}

Status ApexActor::RunPhase(double steps_per_second, double seconds, PhaseCounts* counts) {
  const int64_t before = actor_->steps_appended();
  Status status = Paced(steps_per_second / kApexAppendSteps, seconds, [&] { return AppendOnce(); }, &counts->seconds);
  counts->steps = static_cast<double>(actor_->steps_appended() - before);
  if (!status.ok()) return status;
  return actor_->Flush();
}

Status ApexActor::Fill(int64_t steps) {
  for (int64_t appended = 0; appended < steps; appended += kApexAppendSteps) {
    if (Status status = AppendOnce(); !status.ok()) return status;
  }
  return actor_->Flush();
}

ApexLearner::ApexLearner(LearnerClient* learner, int64_t batch_size, uint64_t seed)
    : learner_(learner), batch_size_(batch_size), rng_(seed), priorities_(static_cast<size_t>(batch_size)) {}

Status ApexLearner::SampleOnce(PhaseCounts* counts) {
  const auto asked = Clock::now();
  if (Status status = learner_->Sample(batch_size_, 0.4, &batch_); !status.ok()) return status;
  counts->latencies_ms.push_back(1e3 * SecondsSince(asked));
  counts->samples += static_cast<double>(batch_.size);
  std::uniform_real_distribution<double> priority(0.1, 2.0);
  for (double& p : priorities_) p = priority(rng_);
  return learner_->SendPriorityUpdate(batch_.keys, std::span(priorities_).first(batch_.keys.size()));
}

Status ApexLearner::RunPhase(double batches_per_second, double seconds, PhaseCounts* counts) {
  return Paced(batches_per_second, seconds, [&] { return SampleOnce(counts); }, &counts->seconds);
}

}  // namespace perserve::bench
