#include "mpi/join.h"

#include <chrono>
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

Status CheckSchemaLength(int server_rank, uint64_t length) {
  if (length >= 1 && length <= kMaxSchemaBytes) return Status::Ok();
  return Status::InvalidArgument(fmt::format("server rank {} sent a schema of {} bytes; a schema takes 1 to {} bytes",
                                             server_rank, length, kMaxSchemaBytes));
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

Status JoinUnguarded(MPI_Comm parent, proto::Role role, const Schema* server_schema, Communicator* comm,
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

  // Each server broadcasts its schema; everyone takes part in every broadcast.
  for (size_t s = 0; s < result->server_ranks.size(); ++s) {
    const int root = result->server_ranks[s];
    std::string bytes;
    if (root == comm->rank()) bytes = proto::SerializeSchema(*server_schema);
    uint64_t size = bytes.size();
    PERSERVE_RETURN_IF_ERROR(Check(MPI_Bcast(&size, 1, MPI_UINT64_T, root, comm->get()), "MPI_Bcast (schema size)"));
    // Checked before anything is allocated; all ranks got the same size, so
    // all stop here together (no rank waits in a broadcast the others skip).
    PERSERVE_RETURN_IF_ERROR(CheckSchemaLength(root, size));
    bytes.resize(size);
    PERSERVE_RETURN_IF_ERROR(
        Check(MPI_Bcast(bytes.data(), static_cast<int>(size), MPI_BYTE, root, comm->get()), "MPI_Bcast (schema)"));
    Schema schema;
    const Status decoded = proto::DeserializeSchema(std::as_bytes(std::span(bytes.data(), bytes.size())), &schema);
    if (!decoded.ok()) {
      return Status::InvalidArgument(fmt::format("server rank {} sent a schema that does not decode: {}", root,
                                                 decoded.message()));
    }
    for (size_t c = 0; c < clients.size(); ++c) {
      if (c % result->server_ranks.size() != s) continue;
      if (clients[c] == comm->rank()) {
        result->server_rank = root;
        result->schema = schema;
      }
      if (root == comm->rank()) result->client_ranks.push_back(clients[c]);
    }
    if (root == comm->rank()) result->schema = schema;
  }
  return Status::Ok();
}

}  // namespace

Status Join(MPI_Comm parent, proto::Role role, const Schema* server_schema, Communicator* comm, JoinResult* result,
            const JoinLog& log) {
  if (role == proto::Role::kServer && server_schema == nullptr) {
    return Status::InvalidArgument("a server rank joins with its schema");
  }
  const JoinLog say = log ? log : JoinLog([](const std::string& message) {
    int world_rank = -1;  // MPI is initialized by the time a join waits
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    std::fprintf(stderr, "perserve rank %d: %s\n", world_rank, message.c_str());
  });
  try {
    return JoinUnguarded(parent, role, server_schema, comm, result, say);
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
