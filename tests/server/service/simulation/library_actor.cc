#include "server/service/simulation/library_actor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <iterator>

#include "server/service/simulation/self_checking_rows.h"

namespace perserve::service::simulation {
namespace {

using client_internal::TestAccess;
using Code = Status::Code;

bool Is(const Status& status, Code code) { return status.code() == code; }

}  // namespace

LibraryActor::LibraryActor(int client, LibraryWorld* world)
    : LibraryClient(client, world), next_item_(int64_t{world->run} << 24) {
  options_.max_in_flight = config_.library_max_in_flight;
  options_.columns_apart_min_bytes = config_.columns_apart_min_bytes;
  // Some adds time out at the server (while its rate limiter holds them).
  if (random_.Chance(0.3)) options_.add_timeout_seconds = random_.Chance(0.5) ? random_.Uniform(0.001, 0.1) : 3600.0;
  actor_ = TestAccess::Actor(std::move(owned_connection_), options_);
  // max_in_flight + 1 sets: the fewest with which an actor never waits for its own (docs/client.md).
  buffers_.resize(static_cast<size_t>(options_.max_in_flight + 1));
  const int64_t most = std::max<int64_t>(12, config_.capacity + 1);
  for (Buffers& buffers : buffers_) {
    buffers.ids.resize(static_cast<size_t>(8 * most));
    buffers.pads.resize(static_cast<size_t>(config_.pad_bytes * most));
    Fill(&buffers);
  }
}

void LibraryActor::Fill(Buffers* buffers) {
  // Now and then more items than the replay holds: the server refuses it.
  buffers->count =
      random_.Chance(0.02) ? config_.capacity + 1 : random_.Pick(1, std::min<int64_t>(12, config_.capacity));
  buffers->first_item = next_item_;
  next_item_ += buffers->count;
  for (int64_t i = 0; i < buffers->count; ++i) {
    WriteRow(buffers->ids, buffers->pads, i, config_.pad_bytes, ItemId(client_, buffers->first_item + i));
  }
  buffers->priorities.clear();
  if (random_.Chance(0.5)) {
    for (int64_t i = 0; i < buffers->count; ++i) buffers->priorities.push_back(random_.Uniform(0.01, 10.0));
  }
  buffers->lent = false;
}

void LibraryActor::Reclaim() {
  for (Buffers& buffers : buffers_) {
    // Given back once max_in_flight later adds have returned OK: written at once.
    if (buffers.lent && ok_adds_ - buffers.lent_at - 1 >= options_.max_in_flight) Fill(&buffers);
  }
}

void LibraryActor::Act() {
  const double u = random_.Uniform(0.0, 1.0);
  if (u < 0.003) {  // leaves early
    Finish();
    closed_early_ = true;
    return;
  }
  if (u < 0.08) return Flush("Flush");
  if (u < 0.14) return CallCanAdd(*actor_);
  if (u < 0.17) {  // a batch the library refuses before sending: a column one byte short
    const Buffers& buffers = buffers_[next_buffers_];
    const ColumnSpans spans{
        buffers.count,
        {std::span(buffers.ids).first(static_cast<size_t>(8 * buffers.count)),
         std::span(buffers.pads).first(static_cast<size_t>(config_.pad_bytes * buffers.count - 1))}};
    doing_ = "Add (a column one byte short)";
    const int64_t frames = connection_->frames_sent();
    const Status status = actor_->Add(spans);
    Fingerprint(status);
    Expect(Is(status, Code::kInvalidArgument) && connection_->frames_sent() == frames, [&] {
      return fmt::format("client {}: Add of a column one byte short returned {} and sent {} frames", client_,
                         status.ToString(), connection_->frames_sent() - frames);
    });
    return;
  }
  Add(config_.lend_buffers && random_.Chance(0.85));
}

void LibraryActor::Add(bool borrow) {
  size_t index = next_buffers_;
  while (buffers_[index].lent) {
    index = (index + 1) % buffers_.size();
    // With max_in_flight + 1 sets, the rule always gives one back in time.
    Expect(index != next_buffers_, [&] {
      return fmt::format(
          "client {}: every set of buffers is still lent after {} adds returned "
          "OK (max_in_flight {})",
          client_, ok_adds_, options_.max_in_flight);
    });
  }
  Buffers& buffers = buffers_[index];
  const ColumnSpans spans{buffers.count,
                          {std::span(buffers.ids).first(static_cast<size_t>(8 * buffers.count)),
                           std::span(buffers.pads).first(static_cast<size_t>(config_.pad_bytes * buffers.count))}};
  connection_->NextAdd(buffers.first_item, buffers.count <= config_.capacity);
  const int64_t frames = connection_->frames_sent();
  const char* call = borrow ? "AddBorrowed" : "Add";
  doing_ = fmt::format("{} of {} items from item {}", call, buffers.count, buffers.first_item);
  const Status status =
      borrow ? actor_->AddBorrowed(spans, buffers.priorities) : actor_->Add(spans, buffers.priorities);
  Fingerprint(status);
  if (!status.ok()) {
    ExpectReport(status, call);
    Expect(connection_->frames_sent() == frames, [&] {
      return fmt::format("client {}: {} returned {} but sent its batch", client_, call, status.ToString());
    });
    return;  // not sent: the same items go with the next add
  }
  Expect(connection_->frames_sent() > frames,
         [&] { return fmt::format("client {}: {} returned OK but sent nothing", client_, call); });
  buffers.lent = true;
  buffers.lent_at = ok_adds_++;
  next_buffers_ = (index + 1) % buffers_.size();
  if (!borrow) Fill(&buffers);  // Add copied it: the caller's again at once
  Reclaim();
}

void LibraryActor::Flush(const char* call) {
  doing_ = call;
  const Status status = actor_->Flush();
  Fingerprint(status);
  ExpectReport(status, call);
  for (Buffers& buffers : buffers_) {
    if (buffers.lent) Fill(&buffers);  // every add acknowledged: all of them the caller's again
  }
  CheckCounts(call);
}

void LibraryActor::Finish() {
  Flush("Flush");
  doing_ = "Close";
  const Status status = actor_->Close();
  Fingerprint(status);
  Expect(status.ok(),
         [&] { return fmt::format("client {}: Close after Flush returned {}", client_, status.ToString()); });
  CheckCounts("Close");
}

void LibraryActor::ExpectReport(const Status& status, const char* call) {
  ExpectRejectionReport(client_, status, call, *connection_, &reported_, &world_.counts);
}

bool IsRejectionReport(const Status& status) {
  int64_t count = 0;
  const std::string& message = status.message();
  return !status.ok() && (message.rfind("an earlier batch was rejected", 0) == 0 ||
                          std::sscanf(message.c_str(), "%" SCNd64 " earlier batches were rejected", &count) == 1);
}

void ExpectRejectionReport(int client, const Status& status, const char* call, const SimulatedConnection& connection,
                           int64_t* reported, LibraryCounts* counts) {
  if (status.ok()) return;
  // "an earlier batch was rejected..." or "N earlier batches were rejected..." (docs/client.md).
  int64_t count = 0;
  const std::string& message = status.message();
  if (message.rfind("an earlier batch was rejected", 0) == 0) {
    count = 1;
  } else if (std::sscanf(message.c_str(), "%" SCNd64 " earlier batches were rejected", &count) != 1) {
    count = 0;
  }
  Expect(count >= 1, [&] {
    return fmt::format("client {}: {} returned {}, not a report of rejected adds", client, call, status.ToString());
  });
  const std::map<uint64_t, int>& refused = connection.add_errors();
  Expect(*reported + count <= static_cast<int64_t>(refused.size()), [&] {
    return fmt::format("client {}: {} reports {} rejected adds, but {} of its adds were refused and {} reported before",
                       client, call, count, refused.size(), *reported);
  });
  // The library takes acknowledgements in request order: its report starts with the oldest refusal not reported.
  const auto first = std::next(refused.begin(), *reported);
  Expect(first->second == static_cast<int>(status.code()), [&] {
    return fmt::format(
        "client {}: {} reports {} rejected adds as {}, but the oldest refusal not reported yet (request "
        "{}) was {}",
        client, call, count, status.ToString(), first->first, Status::FromCode(first->second, "").ToString());
  });
  *reported += count;
  counts->rejections_reported += count;
}

void LibraryActor::CheckCounts(const char* when) const { CheckActorCounts(*actor_, reported_, "adds", when); }

}  // namespace perserve::service::simulation
