#include "server/service/simulation/library_learner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "proto/messages.h"

namespace perserve::service::simulation {
namespace {

using client_internal::TestAccess;
using Code = Status::Code;

bool Is(const Status& status, Code code) { return status.code() == code; }

// A local key no replay of the simulation ever issues (SimulatedClients' too).
constexpr uint64_t kNeverIssuedKey = uint64_t{1} << 40;

}  // namespace

LibraryLearner::LibraryLearner(int client, LibraryWorld* world)
    : LibraryClient(client, world), checks_(client, world, connection_) {
  options_.prefetch = config_.prefetch;
  options_.exact_shard_totals = config_.exact_shard_totals;
  options_.max_in_flight = static_cast<int>(random_.Pick(1, 4));
  options_.shard_seed = random_.generator().Bits() | 1;
  halves_ = random_.Chance(0.25);
  batch_size_ = random_.Pick(1, 16);
  beta_ = random_.Uniform(0.0, 1.0);
  learner_ = TestAccess::Learner(std::move(owned_connection_), options_);
}

void LibraryLearner::Act() {
  const double u = random_.Uniform(0.0, 1.0);
  if (u < 0.003) {  // leaves early
    Finish();
    closed_early_ = true;
    return;
  }
  if (u < 0.04) {
    doing_ = "Flush";
    const Status status = learner_->Flush();
    Fingerprint(status);
    ExpectAllowed(status, "Flush", /*sample_call=*/false);
    return CheckCounts("Flush");
  }
  if (u < 0.07) {
    doing_ = "Info";
    ReplayInfo info;
    const Status status = learner_->Info(&info);
    Fingerprint(status);
    if (!status.ok()) return ExpectAllowed(status, "Info", false);
    Expect(info.shards == config_.shards && info.size >= 0 && info.size <= config_.shards * config_.capacity &&
               info.items_added >= info.size && info.shards_ready <= info.shards,
           [&] {
             return fmt::format("client {}: Info says {} shards ({} ready), {} items of {} added", client_, info.shards,
                                info.shards_ready, info.size, info.items_added);
           });
    return;
  }
  if (u < 0.09) {
    doing_ = "Checkpoint";
    std::vector<std::string> paths;
    const Status status = learner_->Checkpoint(&paths);
    Fingerprint(status);
    if (!status.ok()) return ExpectAllowed(status, "Checkpoint", false);
    Expect(static_cast<int>(paths.size()) == config_.shards, [&] {
      return fmt::format("client {}: Checkpoint gave {} paths for {} shards", client_, paths.size(), config_.shards);
    });
    return;
  }
  if (u < 0.38 && !keys_.empty()) return Update();
  // (Not a learner in halves: a prefetching Sample leaves its table's requests in flight, which ReceiveSample would take.)
  if (config_.tables() > 1 && !halves_ && learner_->samples_in_flight() == 0 && random_.Chance(0.3)) {
    return SampleOtherTable();
  }
  halves_ ? Halves() : Sample();
}

const std::vector<uint64_t>* LibraryLearner::ShardedSince() const {
  // Over several shards a batch is exact only if every request of it went
  // out in the call that returned it: with exact totals, a call (not halves)
  // begun with nothing in flight, since it began.
  if (!config_.exact_shard_totals || halves_ || calls_.empty() || !calls_.back().none_in_flight) return nullptr;
  return &calls_.back().versions;
}

double LibraryLearner::DrawTimeout() {
  if (!random_.Chance(0.15)) return 0.0;
  return random_.Chance(0.7) ? random_.Uniform(0.001, 0.1) : 3600.0;  // fires in the run, or never
}

void LibraryLearner::BeginSampleCall(double timeout) {
  calls_.push_back(SampleCall{world_.model.now(), timeout, world_.versions, learner_->samples_in_flight() == 0});
  if (calls_.size() > 64) calls_.pop_front();
}

void LibraryLearner::Sample() {
  if (random_.Chance(0.1)) batch_size_ = random_.Pick(1, 16);
  if (random_.Chance(0.5)) beta_ = random_.Chance(0.1) ? 0.0 : random_.Uniform(0.0, 1.0);  // annealed, or 0
  const double timeout = DrawTimeout();
  BeginSampleCall(timeout);
  doing_ = fmt::format("Sample({}, beta {}, timeout {} s)", batch_size_, beta_, timeout);
  const Status status = learner_->Sample(batch_size_, beta_, &batch_, timeout);
  Fingerprint(status);
  if (!status.ok()) return ExpectAllowed(status, "Sample", /*sample_call=*/true);
  checks_.Check(batch_, batch_size_, beta_, "Sample", ShardedSince());
  keys_ = batch_.keys;
}

void LibraryLearner::SampleOtherTable() {
  const int t = static_cast<int>(random_.Pick(1, config_.tables() - 1));
  const SimTable& table = config_.steps.tables[static_cast<size_t>(t)];
  const int64_t batch_size = random_.Pick(1, 8);
  const double beta = random_.Uniform(0.0, 1.0);
  const double timeout = DrawTimeout();
  BeginSampleCall(timeout);
  doing_ = fmt::format("Sample(\"{}\", {}, beta {}, timeout {} s)", table.name, batch_size, beta, timeout);
  SampleBatch batch;
  const Status status = learner_->Sample(table.name, batch_size, beta, &batch, timeout);
  Fingerprint(status);
  if (!status.ok()) return ExpectAllowed(status, "Sample", /*sample_call=*/true);
  Expect(batch.table == table.name, [&] {
    return fmt::format("client {}: {} returned a batch of table \"{}\"", client_, doing_, batch.table);
  });
  checks_.CheckRows(batch, batch_size, t, fmt::format("client {}: {}", client_, doing_));
  ++world_.counts.other_table_batches;
}

void LibraryLearner::Halves() {
  const int in_flight = learner_->samples_in_flight();
  if (in_flight < std::max(1, options_.prefetch) && (in_flight == 0 || random_.Chance(0.5))) {
    if (random_.Chance(0.1)) batch_size_ = random_.Pick(1, 16);
    if (random_.Chance(0.5)) beta_ = random_.Uniform(0.0, 1.0);
    const double timeout = DrawTimeout();
    BeginSampleCall(timeout);
    doing_ = fmt::format("RequestSample({}, beta {}, timeout {} s)", batch_size_, beta_, timeout);
    const Status status = learner_->RequestSample(batch_size_, beta_, timeout);
    Fingerprint(status);
    if (learner_->samples_in_flight() > in_flight) requested_.push_back(Requested{batch_size_, beta_});
    if (!status.ok()) return ExpectAllowed(status, "RequestSample", true);
    Expect(learner_->samples_in_flight() == in_flight + 1, [&] {
      return fmt::format("client {}: RequestSample returned OK with {} requests in flight, {} before", client_,
                         learner_->samples_in_flight(), in_flight);
    });
    return;
  }
  if (in_flight == 0) return;
  doing_ = "ReceiveSample";
  const Status status = learner_->ReceiveSample(&batch_);
  Fingerprint(status);
  Requested requested{0, 0.0};
  if (learner_->samples_in_flight() < in_flight) {  // it took the oldest (an error at its start takes nothing)
    requested = requested_.front();
    requested_.pop_front();
  }
  if (!status.ok()) return ExpectAllowed(status, "ReceiveSample", true);
  Expect(requested.batch_size > 0,
         [&] { return fmt::format("client {}: ReceiveSample returned OK and left its request in flight", client_); });
  checks_.Check(batch_, requested.batch_size, requested.beta, "ReceiveSample", nullptr);
  keys_ = batch_.keys;
}

void LibraryLearner::Update() {
  std::vector<uint64_t> keys;
  std::vector<double> priorities;
  for (int64_t n = random_.Pick(1, 8); n > 0; --n) {
    keys.push_back(keys_[static_cast<size_t>(random_.Pick(0, ssize(keys_) - 1))]);
    priorities.push_back(random_.Uniform(0.01, 10.0));
  }
  const size_t j = static_cast<size_t>(random_.Pick(0, ssize(keys) - 1));
  int64_t nans = 0;
  bool zero = false, no_shard = false;
  const double flaw = random_.Uniform(0.0, 1.0);
  if (flaw < 0.08) {
    priorities[j] = std::nan("");
    nans = 1;
  } else if (flaw < 0.16) {
    priorities[j] = 0.0;
    zero = true;
  } else if (flaw < 0.19) {
    keys[j] = proto::ShardKey(proto::ShardOfKey(keys[j]), kNeverIssuedKey);
  } else if (flaw < 0.21) {
    // A key naming no shard of the job: refused before sending over several
    // shards; one server is sent every key and refuses it.
    keys[j] = proto::ShardKey(config_.shards, proto::LocalKey(keys[j]));
    no_shard = true;
  }
  const bool refused_here = no_shard && config_.shards > 1;
  const int64_t frames = connection_->frames_sent();
  if (random_.Chance(0.3)) {
    doing_ = fmt::format("UpdatePriorities of {} keys", keys.size());
    UpdateResult result;
    const Status status = learner_->UpdatePriorities(keys, priorities, &result);
    Fingerprint(status);
    if (!status.ok()) {
      ExpectAllowed(status, "UpdatePriorities", false, refused_here);
    } else {
      // Zero is bad only with neither eps nor --drop-bad-priorities (then the update is refused).
      Expect(!refused_here && !no_shard && result.applied + result.stale + result.dropped == ssize(keys) &&
                 result.dropped == (config_.drop_bad_priorities ? nans : 0) &&
                 (nans == 0 || config_.drop_bad_priorities) &&
                 (!zero || config_.drop_bad_priorities || config_.priority_eps > 0),
             [&] {
               return fmt::format(
                   "client {}: UpdatePriorities of {} keys ({} NaN, a zero {}, a key of no shard {}) returned "
                   "{} applied, {} stale, {} dropped",
                   client_, keys.size(), nans, zero, no_shard, result.applied, result.stale, result.dropped);
             });
    }
  } else {
    doing_ = fmt::format("SendPriorityUpdate of {} keys", keys.size());
    const Status status = learner_->SendPriorityUpdate(keys, priorities);
    Fingerprint(status);
    if (!status.ok()) ExpectAllowed(status, "SendPriorityUpdate", false, refused_here);
  }
  if (refused_here) {
    Expect(connection_->frames_sent() == frames, [&] {
      return fmt::format("client {}: an update with a key of no shard sent {} frames", client_,
                         connection_->frames_sent() - frames);
    });
  }
}

void LibraryLearner::ExpectAllowed(const Status& status, const char* call, bool sample_call,
                                   bool local_invalid_argument) {
  if (status.ok()) return;
  const std::string what = fmt::format("client {}: {} returned {}", client_, call, status.ToString());
  if (sample_call && Is(status, Code::kFailedPrecondition)) {
    // The library's own too ("no shard can serve"): only once no shard ever can.
    std::string open;
    for (int shard = 0; shard < config_.shards; ++shard) {
      if (!world_.model.EveryActorClosing(shard)) open += fmt::format(" {}", shard);
    }
    Expect(open.empty(), [&] { return what + ", but an actor of shard(s)" + open + " is still open"; });
    return;
  }
  if (sample_call && Is(status, Code::kDeadlineExceeded)) {
    // A request in flight can be many calls old (calls that fail at their
    // start leave it there): any recent call's timeout that has passed. The
    // model holds a server's DEADLINE_EXCEEDED to its request's own timeout.
    bool passed = false;
    for (const SampleCall& call : calls_) {
      passed |=
          call.timeout > 0 && std::chrono::duration<double>(world_.model.now() - call.began).count() >= call.timeout;
    }
    Expect(passed, [&] { return what + ", but no timeout it set has passed"; });
    return;
  }
  if (local_invalid_argument && Is(status, Code::kInvalidArgument)) return;
  Expect(connection_->error_codes().count(static_cast<int>(status.code())) > 0,
         [&] { return what + ", but no reply it received said so"; });
}

void LibraryLearner::CheckCounts(const char* when) const {
  const UpdateResult& told = learner_->updates();
  const UpdateResult& replied = connection_->updates();
  Expect(told.applied == replied.applied && told.stale == replied.stale && told.dropped == replied.dropped, [&] {
    return fmt::format("client {}: after {}, updates() says {} applied, {} stale, {} dropped; the replies {}, {}, {}",
                       client_, when, told.applied, told.stale, told.dropped, replied.applied, replied.stale,
                       replied.dropped);
  });
}

void LibraryLearner::Finish() {
  doing_ = "Flush";
  Status status = learner_->Flush();
  Fingerprint(status);
  ExpectAllowed(status, "Flush", false);
  CheckCounts("Flush");
  doing_ = "Close";
  status = learner_->Close();
  Fingerprint(status);
  Expect(status.ok(),
         [&] { return fmt::format("client {}: Close after Flush returned {}", client_, status.ToString()); });
  CheckCounts("Close");
}

}  // namespace perserve::service::simulation
