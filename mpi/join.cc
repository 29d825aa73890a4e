#include "mpi/join.h"

#include <cstring>
#include <new>
#include <string>

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

Status JoinUnguarded(MPI_Comm parent, proto::Role role, const Schema* server_schema, Communicator* comm,
                     JoinResult* result) {
  PERSERVE_RETURN_IF_ERROR(comm->Duplicate(parent));
  const int32_t mine[2] = {static_cast<int32_t>(role), proto::kProtocolVersion};
  std::vector<int32_t> table(2 * static_cast<size_t>(comm->size()));
  PERSERVE_RETURN_IF_ERROR(
      Check(MPI_Allgather(mine, 2, MPI_INT32_T, table.data(), 2, MPI_INT32_T, comm->get()), "MPI_Allgather (join)"));

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

Status Join(MPI_Comm parent, proto::Role role, const Schema* server_schema, Communicator* comm, JoinResult* result) {
  if (role == proto::Role::kServer && server_schema == nullptr) {
    return Status::InvalidArgument("a server rank joins with its schema");
  }
  try {
    return JoinUnguarded(parent, role, server_schema, comm, result);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory in the join");
  } catch (const std::exception& e) {
    return Status::Internal(std::string("the join failed: ") + e.what());
  }
}

}  // namespace perserve::mpi
