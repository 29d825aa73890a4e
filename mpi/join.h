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
//   4. each server rank, in rank order, broadcasts its schemas (size, bytes:
//      proto::ServedSchemas, what its adds take and its samples return), its
//      alpha and its capacity; all servers must agree on schemas and alpha
//      (every rank refuses the join otherwise, naming the ranks). At most
//      proto::kMaxShards (1024) servers may join.
//
// Placement: the servers are shards of one replay. Actors (in rank order) are
// dealt to the servers round-robin, one server each; every learner talks to
// every server. Each learns its servers' ranks and the schema, each server
// the ranks of its clients (its actors and all learners). No configuration is
// needed to find anyone.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mpi/communicator.h"
#include "perserve/schema.h"
#include "perserve/status.h"
#include "proto/codec.h"
#include "proto/messages.h"

namespace perserve::mpi {

// What a server rank brings to the join.
struct ServerInfo {
  proto::ServedSchemas schemas;
  double alpha = 0.6;
  int64_t capacity = 0;
  // Called once the server knows its shard (of `shards`), before it
  // broadcasts its schemas: a restore, giving each stream's steps so far
  // (schemas.stream_steps). Every other rank waits in the join meanwhile;
  // an error ends the join (the caller ends the job).
  std::function<Status(int shard, int shards, std::vector<int64_t>* stream_steps)> before_broadcast;
};

struct JoinResult {
  proto::Role role = proto::Role::kBystander;
  std::vector<int> server_ranks;   // every server, in rank order (shard s is server_ranks[s])
  std::vector<int64_t> capacities; // each server's capacity, by shard
  double alpha = 0.0;              // the servers' alpha
  std::vector<int> servers;        // the ranks this rank talks to: an actor's one, a learner's all, a server's none
  int server_rank = -1;            // a client's first server (an actor's only one)
  int shard = -1;                  // a server's index among the servers
  proto::ServedSchemas served;     // the servers' schemas (served.adds: what an actor adds)
  std::vector<int> client_ranks;   // a server's clients: its actors, then every learner
  std::vector<proto::Role> roles;  // every rank's role, by rank
  int64_t first_step = 0;          // an actor's: its stream's steps so far at its server (a restore's; else 0)
};

// The most bytes a schema may take on the wire (thousands of columns).
inline constexpr uint64_t kMaxSchemaBytes = uint64_t{1} << 20;
// The largest capacity a server may announce: the priority tree's largest
// (tree::PriorityTree::kMaxCapacity, 2^40 leaves).
inline constexpr int64_t kMaxServerCapacity = int64_t{1} << 40;

// Collective over `parent`. A server passes what it serves; others nullptr.
// On success `comm` holds the duplicated communicator all later messages use.
// Everything a peer sends is range-checked before use (roles, versions,
// schema lengths and contents), and nothing throws: every rank sees the same
// data, so every rank returns the same error and none waits on another.
// Where a join that waits says so; empty: stderr, prefixed "perserve rank N: ".
using JoinLog = std::function<void(const std::string&)>;

Status Join(MPI_Comm parent, proto::Role role, const ServerInfo* server, Communicator* comm, JoinResult* result,
            const JoinLog& log = {});

// "actors at ranks 1-8, learners at rank 9": a server's clients, or for
// another rank every client and bystander of the job.
std::string DescribeRoles(const JoinResult& joined);

// A server's start-up words on the shards: "" with one server, else "shard 1
// of 2 (servers at ranks 0-1)", and `warning` set when this shard has no
// actor (it will stay empty and serve no strata).
std::string DescribeShard(const JoinResult& joined, std::string* warning);

// Where every server must agree (schema, alpha): the first difference from
// server 0, naming both ranks; OK when they agree.
Status CheckServersAgree(const std::vector<int>& ranks, const std::vector<proto::ServedSchemas>& schemas,
                         const std::vector<double>& alphas);

// The join's checks on what a peer sent, on their own (tests and fuzzing).
Status CheckJoinEntry(int rank, int32_t role, int32_t version);
Status CheckSchemaLength(int server_rank, uint64_t length);
// A server's alpha and capacity as broadcast (both doubles): alpha finite and
// >= 0, capacity a whole number in [1, kMaxServerCapacity]. Only then is the
// capacity converted to an integer.
Status CheckServerInfo(int server_rank, double alpha, double capacity);
// At most proto::kMaxShards servers: a key carries its shard in its top
// proto::kShardKeyBits bits, and more would wrap into another shard's keys.
Status CheckServerCount(size_t servers);

}  // namespace perserve::mpi
