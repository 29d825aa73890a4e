// ReferenceModel: what must hold of the replay rank, as its clients and the
// simulator see it. Told every request a client sends and every reply it
// receives (in the order it receives them), it checks:
//   - every reply answers a request of that client not answered yet, with
//     the reply kind (or an error code) that request may get; a close reply
//     comes after the replies to everything sent before it (waiting samples
//     aside: a close drops them), and nothing after it;
//   - acknowledged adds' keys are distinct, in each actor's order, and at the
//     end cover 0 .. next_key - 1 exactly: no add lost or applied twice;
//   - every sampled row (of samples and shard samples) is whole and is the item added under its key (rows
//     check themselves: self_checking_rows.h), its key was live at some
//     moment between request and reply, its IS weight in (0, 1] and its
//     probability in (0, 1], and the weights of one reply in the ratios its
//     probabilities and beta give (w_i / w_j = (P_i / P_j)^-beta);
//   - an update's counts add up, and keys live throughout are never stale;
//   - at the end, only what the docs allow is unanswered.
// A violation throws SimulationFailure with what broke.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "proto/messages.h"
#include "replay/replay.h"
#include "server/service/simulation/simulation_config.h"

namespace perserve::service::simulation {

struct SimulationFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ReferenceModel {
 public:
  ReferenceModel(const SimulationConfig& config, int clients);

  // Requests as clients send them; `next_key` is the replay's next key then.
  // `valid`: false for an add the server must refuse (a bad priority, columns
  // of the wrong size, too many items).
  void SentAdd(int client, uint64_t request_id, int64_t first_item, int64_t count, bool valid, bool columns_apart);
  void SentSample(int client, uint64_t request_id, double beta, uint64_t next_key);
  // A shard sample (a learner's share of a sample over shards) of `count`
  // items (0: a probe of the shard's state, answered at once unless `wait`).
  void SentShardSample(int client, uint64_t request_id, int64_t count, uint64_t next_key);
  // `bad`: elements with a bad priority; `never_issued`: a key the replay never issued.
  void SentUpdate(int client, uint64_t request_id, std::vector<uint64_t> keys, int64_t bad, bool never_issued,
                  uint64_t next_key);
  void SentClose(int client, uint64_t request_id);
  void SentCheckpoint(int client, uint64_t request_id);
  // After this, UNAVAILABLE is an answer any request may get.
  void SentTerminate() { terminated_ = true; }
  // The request `client` just sent carries a timeout: past it (on the
  // simulation's clock) DEADLINE_EXCEEDED is an answer it may get.
  void WithTimeout(int client, uint64_t request_id, double seconds);
  // The simulation's clock, which the service's deadlines run on.
  void SetNow(std::chrono::steady_clock::time_point now) { now_ = now; }

  // A reply `client` received. Returns the keys of a sample reply (for the
  // learner's updates), else nothing.
  std::vector<uint64_t> Received(int client, std::span<const std::byte> bytes, uint64_t next_key);

  // An item found under `key` (a sampled row, a restored one): checked now
  // if its add's acknowledgement has come, else when it comes.
  void ObservedItem(uint64_t key, int64_t id, const std::string& where);

  bool closed(int client) const { return ledgers_[client].closed; }
  int64_t unanswered(int client) const { return static_cast<int64_t>(ledgers_[client].requests.size()); }
  int64_t unanswered_adds(int client) const { return Unanswered(client, Kind::kAdd); }

  // After every step: the replay within its capacity, its tree finite, keys
  // issued no fewer than acknowledged.
  void CheckReplay(const replay::Replay& replay) const;
  // Once every client has closed.
  void CheckEnd(const replay::Replay& replay) const;

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
    bool columns_apart = false;  // an add's
    int64_t waiting_before = 0;  // the client's unanswered requests of its kind when it was sent
    std::chrono::steady_clock::time_point sent_at{};
    double timeout_seconds = 0.0;  // 0: none
  };
  struct Ledger {
    std::map<uint64_t, Request> requests;  // unanswered, by request id
    bool close_sent = false;
    bool closed = false;          // its close reply has come
    uint64_t last_first_key = 0;  // its latest acknowledged add's
    bool acknowledged_any = false;
  };

  static const char* KindName(Kind kind);
  int64_t Unanswered(int client, Kind kind) const;
  // Whether every actor (clients 0 .. actors - 1) has sent its close.
  bool EveryActorClosing() const;
  // Records a request `client` sends.
  void Sent(int client, uint64_t request_id, Request request);
  void CheckError(int client, uint64_t request_id, const Request& request, const proto::ErrorReply& error) const;
  void AddAcknowledged(int client, const Request& request, uint64_t first_key, int64_t count, uint64_t next_key);
  std::vector<uint64_t> SampleReceived(int client, const Request& request, std::span<const std::byte> bulk,
                                       int64_t count, uint64_t next_key);
  std::vector<uint64_t> ShardSampleReceived(int client, const Request& request, const proto::ShardSampleReply& reply,
                                            std::span<const std::byte> bulk, uint64_t next_key);
  // A drawn item's checks that both kinds of sample share: live, whole, the
  // item added under its key.
  void CheckDrawn(const std::string& what, const Request& request, uint64_t key, std::span<const std::byte> columns,
                  int64_t count, int64_t i, uint64_t next_key);
  void UpdateAnswered(const Request& request, int64_t applied, int64_t stale, int64_t dropped, uint64_t next_key) const;

  const SimulationConfig config_;
  std::vector<Ledger> ledgers_;
  std::map<uint64_t, int64_t> item_of_key_;         // from the acknowledgements
  std::multimap<uint64_t, int64_t> sampled_early_;  // observed before their add's acknowledgement came
  int64_t items_acknowledged_ = 0;
  bool terminated_ = false;
  std::chrono::steady_clock::time_point now_{};
};

}  // namespace perserve::service::simulation
