// The collective join every rank of a perserve job makes at start-up, over the
// communicator the caller passes (default MPI_COMM_WORLD):
//
//   1. each rank duplicates the communicator (Communicator);
//   2. MPI_Allgather of {role, protocol version} from every rank (non-blocking,
//      so a join that waits says so: after 5 s, and every 30 s after, each
//      rank logs that it waits, and rank 0, to which every rank also sends a
//      hello first, names the ranks that have not joined yet);
//   3. every rank checks that all versions match and that there is at least
//      one server; all ranks see the same table, so all agree on failure;
//   4. each server rank, in rank order, broadcasts its schema (size, bytes).
//
// Clients (actors and learners, in rank order) are dealt to the servers
// round-robin; each learns its server's rank and schema, each server the
// ranks of its clients. No configuration is needed to find anyone.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mpi/communicator.h"
#include "perserve/schema.h"
#include "perserve/status.h"
#include "proto/messages.h"

namespace perserve::mpi {

struct JoinResult {
  proto::Role role = proto::Role::kBystander;
  std::vector<int> server_ranks;
  int server_rank = -1;           // a client's server
  Schema schema;                  // a client's server's schema (a server's own)
  std::vector<int> client_ranks;  // a server's clients
  std::vector<proto::Role> roles; // every rank's role, by rank
};

// The most bytes a schema may take on the wire (thousands of columns).
inline constexpr uint64_t kMaxSchemaBytes = uint64_t{1} << 20;

// Collective over `parent`. A server passes its schema; others pass nullptr.
// On success `comm` holds the duplicated communicator all later messages use.
// Everything a peer sends is range-checked before use (roles, versions,
// schema lengths and contents), and nothing throws: every rank sees the same
// data, so every rank returns the same error and none waits on another.
// Where a join that waits says so; empty: stderr, prefixed "perserve rank N: ".
using JoinLog = std::function<void(const std::string&)>;

Status Join(MPI_Comm parent, proto::Role role, const Schema* server_schema, Communicator* comm, JoinResult* result,
            const JoinLog& log = {});

// "actors at ranks 1-8, learners at rank 9": a server's clients, or for
// another rank every client and bystander of the job.
std::string DescribeRoles(const JoinResult& joined);

// The join's checks on what a peer sent, on their own (tests and fuzzing).
Status CheckJoinEntry(int rank, int32_t role, int32_t version);
Status CheckSchemaLength(int server_rank, uint64_t length);

}  // namespace perserve::mpi
