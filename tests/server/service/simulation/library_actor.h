// LibraryActor: an actor of the real client library in the simulation
// (library_client.h). It adds batches of self-checking rows, mostly through
// AddBorrowed from max_in_flight + 1 sets of buffers that it refills with the
// next items' bytes as soon as docs/client.md's rule allows (an add's
// buffers are the caller's again once max_in_flight later adds have returned
// OK, or after Flush): were the library or the service to read a buffer
// later, a sample would show another item's bytes under a key. It checks
// that every rejected add is reported exactly once, as a count with the
// oldest unreported refusal's code, and that items_acknowledged() and
// rejected_batches() are what the replies said.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "perserve/client.h"
#include "server/service/simulation/library_client.h"

namespace perserve::service::simulation {

// Whether `status` is the ActorClient's report of rejected adds or appends
// ("an earlier batch was rejected..." or "N earlier batches were rejected...").
bool IsRejectionReport(const Status& status);
// A failed call of `client`'s ActorClient (Add, AddBorrowed, Append, Flush)
// other than its own refusals: a report of rejected batches, each reported
// once (docs/client.md), the count with the oldest unreported refusal's code
// as `connection` received it. *reported: those reported so far.
void ExpectRejectionReport(int client, const Status& status, const char* call, const SimulatedConnection& connection,
                           int64_t* reported, LibraryCounts* counts);

class LibraryActor final : public LibraryClient {
 public:
  LibraryActor(int client, LibraryWorld* world);

 private:
  // A set of column buffers: the next add's items, written in place (never
  // reallocated: a lent add's columns are read from here).
  struct Buffers {
    std::vector<std::byte> ids, pads;
    int64_t first_item = 0, count = 0;
    std::vector<double> priorities;
    bool lent = false;    // an add from it returned OK and its buffers may not change yet
    int64_t lent_at = 0;  // ok_adds_ before that add
  };
  void Act() override;
  void Finish() override;
  Status CloseClient() override { return actor_->Close(); }
  const char* role() const override { return "actor"; }

  void Add(bool borrow);
  void Flush(const char* call);
  // Writes the next items into `buffers` (this is where a buffer lent too
  // early would change under the library).
  void Fill(Buffers* buffers);
  // Frees the buffers docs/client.md gives back (max_in_flight later adds
  // returned OK) and refills them at once.
  void Reclaim();
  // A failed Add, AddBorrowed or Flush: the report of rejected adds, once each.
  void ExpectReport(const Status& status, const char* call);
  void CheckCounts(const char* when) const;

  ClientOptions options_;
  std::unique_ptr<ActorClient> actor_;
  std::vector<Buffers> buffers_;
  size_t next_buffers_ = 0;
  int64_t next_item_;  // from int64_t{run} << 24 (items no earlier life of the job added)
  int64_t ok_adds_ = 0;
  int64_t reported_ = 0;  // rejected adds the library has reported
};

}  // namespace perserve::service::simulation
