#include "mpi/join.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "proto/codec.h"

namespace perserve::mpi {

Status CheckJoinEntry(int rank, int32_t role, int32_t version) {
  if (version != proto::kProtocolVersion) {
    return Status::FailedPrecondition(fmt::format("rank {} speaks perserve protocol version {}, this rank speaks {}",
                                                  rank, version, proto::kProtocolVersion));
  }
  if (role < static_cast<int32_t>(proto::Role::kServer) || role > static_cast<int32_t>(proto::Role::kBystander)) {
    return Status::InvalidArgument(fmt::format("rank {} joined with an unknown role {}", rank, role));
  }
  return Status::Ok();
}

Status CheckServersAgree(const std::vector<int>& ranks, const std::vector<proto::ServedSchemas>& schemas,
                         const std::vector<double>& alphas) {
  for (size_t s = 1; s < ranks.size(); ++s) {
    const std::string first = schemas[0].ToString(), theirs = schemas[s].ToString();
    if (theirs != first) {
      return Status::FailedPrecondition(fmt::format(
          "the server ranks are shards of one replay and must serve one schema: server rank {} has {}, server "
          "rank {} has {}",
          ranks[0], first, ranks[s], theirs));
    }
    // Bit equality: the same flag value parses to the same double everywhere.
    if (std::memcmp(&alphas[s], &alphas[0], sizeof(double)) != 0) {
      return Status::FailedPrecondition(fmt::format(
          "the server ranks are shards of one replay and must use one --alpha: server rank {} has {}, server rank "
          "{} has {}",
          ranks[0], alphas[0], ranks[s], alphas[s]));
    }
  }
  return Status::Ok();
}

Status CheckSchemaLength(int server_rank, uint64_t length) {
  if (length >= 1 && length <= kMaxSchemaBytes) return Status::Ok();
  return Status::InvalidArgument(fmt::format("server rank {} sent a schema of {} bytes; a schema takes 1 to {} bytes",
                                             server_rank, length, kMaxSchemaBytes));
}

Status CheckServerInfo(int server_rank, double alpha, double capacity) {
  if (!std::isfinite(alpha) || !(alpha >= 0.0)) {
    return Status::InvalidArgument(fmt::format("server rank {} sent alpha {}; alpha is finite and >= 0", server_rank,
                                               alpha));
  }
  if (!(capacity >= 1.0 && capacity <= static_cast<double>(kMaxServerCapacity)) || capacity != std::floor(capacity)) {
    return Status::InvalidArgument(fmt::format("server rank {} sent a capacity of {}; a capacity is a whole number "
                                               "in [1, 2^40]",
                                               server_rank, capacity));
  }
  return Status::Ok();
}

Status CheckServerCount(size_t servers) {
  if (servers <= static_cast<size_t>(proto::kMaxShards)) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{} ranks joined as perserve servers; at most {} can (a key names its shard in {} bits): launch fewer "
      "server ranks",
      servers, proto::kMaxShards, proto::kShardKeyBits));
}

namespace {

// The hello every rank sends rank 0 of the parent communicator, and rank 0
// receives before the join returns.
constexpr int kHelloTag = 7398;
constexpr double kFirstWaitReport = 5.0;
constexpr double kWaitReportEvery = 30.0;

// "1-3, 5, 7-8".
std::string Ranges(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return text;
}

std::string RanksPhrase(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + Ranges(ranks);
}

// Rank 0 of the parent communicator learns who has joined from a hello each
// other rank sends it (on the parent: the duplicate does not exist until
// everyone has joined). Every hello is received before the join returns.
class Hellos {
 public:
  Status Start(MPI_Comm parent) {
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Comm_rank(parent, &rank_), "MPI_Comm_rank"));
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Comm_size(parent, &size_), "MPI_Comm_size"));
    if (rank_ == 0) {
      received_.resize(static_cast<size_t>(size_));
      for (int rank = 1; rank < size_; ++rank) {
        requests_.emplace_back();
        PERSERVE_RETURN_IF_ERROR(Check(MPI_Irecv(&received_[rank], 1, MPI_INT32_T, rank, kHelloTag, parent,
                                                 &requests_.back()),
                                       "MPI_Irecv (join hello)"));
      }
    } else {
      requests_.emplace_back();
      PERSERVE_RETURN_IF_ERROR(
          Check(MPI_Isend(&sent_, 1, MPI_INT32_T, 0, kHelloTag, parent, &requests_.back()), "MPI_Isend (join hello)"));
    }
    return Status::Ok();
  }

  // What a long wait's log line adds: rank 0 names the ranks not heard from.
  std::string Missing() {
    if (rank_ != 0) return " (rank 0 names the ranks missing)";
    std::vector<int> missing;
    for (int rank = 1; rank < size_; ++rank) {
      int arrived = 0;
      // A completed request is MPI_REQUEST_NULL, which tests as complete again.
      if (MPI_Test(&requests_[rank - 1], &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS || !arrived) {
        missing.push_back(rank);
      }
    }
    return missing.empty() ? "; every rank has said hello" : "; not joined yet: " + RanksPhrase(missing);
  }

  Status Finish() {
    return Check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
                 "MPI_Waitall (join hello)");
  }

  int size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 0;
  int32_t sent_ = 1;
  std::vector<int32_t> received_;
  std::vector<MPI_Request> requests_;
};

// Waits for `request` in MPI_Test; from 5 s on, and every 30 s after, says so.
Status WaitSaying(MPI_Request* request, const char* what, Hellos* hellos, const JoinLog& log) {
  const auto start = std::chrono::steady_clock::now();
  double next_report = kFirstWaitReport;
  while (true) {
    int done = 0;
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Test(request, &done, MPI_STATUS_IGNORE), what));
    if (done) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited < next_report) continue;
    next_report += kWaitReportEvery;
    log(fmt::format("the join has waited {:.0f} s for every rank of the communicator ({} ranks) to join{}. Every "
                    "rank must join: one that neither acts nor learns joins as a bystander "
                    "(perserve::JoinAsBystander, perserve_bystander_join, perserve.Bystander).",
                    waited, hellos->size(), hellos->Missing()));
  }
}

Status JoinUnguarded(MPI_Comm parent, proto::Role role, const ServerInfo* server, Communicator* comm,
                     JoinResult* result, const JoinLog& log) {
  MPI_Request pending = MPI_REQUEST_NULL;
  PERSERVE_RETURN_IF_ERROR(comm->BeginDuplicate(parent, &pending));  // initializes MPI if needed
  Hellos hellos;
  PERSERVE_RETURN_IF_ERROR(hellos.Start(parent));
  PERSERVE_RETURN_IF_ERROR(WaitSaying(&pending, "MPI_Comm_idup (join)", &hellos, log));
  PERSERVE_RETURN_IF_ERROR(comm->FinishDuplicate());
  const int32_t mine[2] = {static_cast<int32_t>(role), proto::kProtocolVersion};
  std::vector<int32_t> table(2 * static_cast<size_t>(comm->size()));
  PERSERVE_RETURN_IF_ERROR(Check(
      MPI_Iallgather(mine, 2, MPI_INT32_T, table.data(), 2, MPI_INT32_T, comm->get(), &pending), "MPI_Iallgather"));
  PERSERVE_RETURN_IF_ERROR(WaitSaying(&pending, "MPI_Iallgather (join)", &hellos, log));
  PERSERVE_RETURN_IF_ERROR(hellos.Finish());

  result->role = role;
  result->roles.clear();
  std::vector<int> clients;
  for (int rank = 0; rank < comm->size(); ++rank) {
    // Every rank sees the same table, so every rank fails alike on a bad entry.
    PERSERVE_RETURN_IF_ERROR(CheckJoinEntry(rank, table[2 * rank], table[2 * rank + 1]));
    const auto their_role = static_cast<proto::Role>(table[2 * rank]);
    result->roles.push_back(their_role);
    if (their_role == proto::Role::kServer) result->server_ranks.push_back(rank);
    if (their_role == proto::Role::kActor || their_role == proto::Role::kLearner) clients.push_back(rank);
  }
  if (result->server_ranks.empty()) {
    return Status::FailedPrecondition("no rank joined as a perserve server: launch perserve-server in the job");
  }
  PERSERVE_RETURN_IF_ERROR(CheckServerCount(result->server_ranks.size()));

  // A server's restore, now that it knows its shard.
  proto::ServedSchemas mine_served;
  if (role == proto::Role::kServer) {
    mine_served = server->schemas;
    const auto own = std::find(result->server_ranks.begin(), result->server_ranks.end(), comm->rank());
    if (server->before_broadcast) {
      PERSERVE_RETURN_IF_ERROR(server->before_broadcast(static_cast<int>(own - result->server_ranks.begin()),
                                                        static_cast<int>(result->server_ranks.size()),
                                                        &mine_served.stream_steps));
    }
  }
  // Each server broadcasts its schema, alpha and capacity; everyone takes
  // part in every broadcast.
  std::vector<proto::ServedSchemas> schemas;
  std::vector<double> alphas;
  for (size_t s = 0; s < result->server_ranks.size(); ++s) {
    const int root = result->server_ranks[s];
    std::string bytes;
    if (root == comm->rank()) bytes = proto::SerializeServedSchemas(mine_served);
    uint64_t size = bytes.size();
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Bcast(&size, 1, MPI_UINT64_T, root, comm->get()), "MPI_Bcast (schema size)"));
    // Checked before anything is allocated; all ranks got the same size, so
    // all stop here together (no rank waits in a broadcast the others skip).
    PERSERVE_RETURN_IF_ERROR(CheckSchemaLength(root, size));
    bytes.resize(size);
    PERSERVE_RETURN_IF_ERROR(
        Check(MPI_Bcast(bytes.data(), static_cast<int>(size), MPI_BYTE, root, comm->get()), "MPI_Bcast (schema)"));
    proto::ServedSchemas schema;
    const Status decoded =
        proto::DeserializeServedSchemas(std::as_bytes(std::span(bytes.data(), bytes.size())), &schema);
    if (!decoded.ok()) {
      return Status::InvalidArgument(fmt::format("server rank {} sent a schema that does not decode: {}", root,
                                                 decoded.message()));
    }
    double info[2] = {0.0, 0.0};  // alpha, capacity (exact in a double up to 2^53)
    if (root == comm->rank()) info[0] = server->alpha, info[1] = static_cast<double>(server->capacity);
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Bcast(info, 2, MPI_DOUBLE, root, comm->get()), "MPI_Bcast (alpha, capacity)"));
    // Checked before the capacity becomes an integer (NaN or 1e300 would be
    // undefined behaviour); every rank got the same values and stops alike.
    PERSERVE_RETURN_IF_ERROR(CheckServerInfo(root, info[0], info[1]));
    schemas.push_back(std::move(schema));
    alphas.push_back(info[0]);
    result->capacities.push_back(static_cast<int64_t>(info[1]));
  }
  PERSERVE_RETURN_IF_ERROR(CheckServersAgree(result->server_ranks, schemas, alphas));
  result->served = schemas[0];
  result->alpha = alphas[0];

  // Actors round-robin over the servers; learners to every server.
  const int shards = static_cast<int>(result->server_ranks.size());
  int actors_dealt = 0;
  for (int rank : clients) {
    const bool learner = result->roles[rank] == proto::Role::kLearner;
    const int own = learner ? -1 : actors_dealt++ % shards;
    // An actor's stream at its server is its place among that server's actors.
    const size_t stream = learner ? 0 : static_cast<size_t>((actors_dealt - 1) / shards);
    if (!learner && rank == comm->rank() && stream < schemas[own].stream_steps.size()) {
      result->first_step = schemas[own].stream_steps[stream];
    }
    for (int s = 0; s < shards; ++s) {
      if (!learner && s != own) continue;
      if (rank == comm->rank()) result->servers.push_back(result->server_ranks[s]);
      if (result->server_ranks[s] == comm->rank()) result->client_ranks.push_back(rank);
    }
  }
  // A server lists its actors first, then the learners.
  std::stable_partition(result->client_ranks.begin(), result->client_ranks.end(),
                        [result](int rank) { return result->roles[rank] != proto::Role::kLearner; });
  if (!result->servers.empty()) result->server_rank = result->servers.front();
  for (int s = 0; s < shards; ++s) {
    if (result->server_ranks[s] == comm->rank()) result->shard = s;
  }
  return Status::Ok();
}

}  // namespace

Status Join(MPI_Comm parent, proto::Role role, const ServerInfo* server, Communicator* comm, JoinResult* result,
            const JoinLog& log) {
  if (role == proto::Role::kServer && server == nullptr) {
    return Status::InvalidArgument("a server rank joins with its schema, alpha and capacity");
  }
  const JoinLog say = log ? log : JoinLog([](const std::string& message) {
    int world_rank = -1;  // MPI is initialized by the time a join waits
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    std::fprintf(stderr, "perserve rank %d: %s\n", world_rank, message.c_str());
  });
  try {
    return JoinUnguarded(parent, role, server, comm, result, say);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory in the join");
  } catch (const std::exception& e) {
    return Status::Internal(std::string("the join failed: ") + e.what());
  }
}

}  // namespace perserve::mpi

namespace perserve::mpi {

std::string DescribeRoles(const JoinResult& joined) {
  std::vector<int> actors, learners, bystanders;
  std::vector<int> ranks = joined.client_ranks;  // a server's own clients
  if (joined.role != proto::Role::kServer) {
    ranks.clear();
    for (int rank = 0; rank < static_cast<int>(joined.roles.size()); ++rank) ranks.push_back(rank);
  }
  for (int rank : ranks) {
    if (joined.roles[rank] == proto::Role::kActor) actors.push_back(rank);
    if (joined.roles[rank] == proto::Role::kLearner) learners.push_back(rank);
    if (joined.roles[rank] == proto::Role::kBystander) bystanders.push_back(rank);
  }
  std::string text;
  for (const auto& [name, ranks] : {std::pair<const char*, const std::vector<int>&>{"actors", actors},
                                    {"learners", learners}, {"bystanders", bystanders}}) {
    if (ranks.empty()) continue;
    if (!text.empty()) text += ", ";
    text += fmt::format("{} at {}", name, RanksPhrase(ranks));
  }
  return text.empty() ? "no clients" : text;
}

}  // namespace perserve::mpi

namespace perserve::mpi {

std::string DescribeShard(const JoinResult& joined, std::string* warning) {
  warning->clear();
  if (joined.server_ranks.size() <= 1) return "";
  const bool has_actor = std::any_of(joined.client_ranks.begin(), joined.client_ranks.end(),
                                     [&](int rank) { return joined.roles[rank] != proto::Role::kLearner; });
  int64_t global = 0;
  for (int64_t capacity : joined.capacities) global += capacity;
  if (!has_actor) {
    *warning = fmt::format("shard {} (rank {}) has no actor: with {} actors dealt round-robin over {} servers it will "
                           "stay empty and serve no part of any sample; start no more servers than actors",
                           joined.shard, joined.server_ranks[joined.shard],
                           std::count(joined.roles.begin(), joined.roles.end(), proto::Role::kActor),
                           joined.server_ranks.size());
  }
  return fmt::format("shard {} of {} (servers at {}; {} items in all)", joined.shard, joined.server_ranks.size(),
                     RanksPhrase(joined.server_ranks), global);
}

}  // namespace perserve::mpi
