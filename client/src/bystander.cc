#include "client/src/connection.h"
#include "client/src/open_clients.h"
#include "perserve/client.h"

namespace perserve {

using client_internal::OpenClients;

Bystander::Bystander(std::unique_ptr<client_internal::Connection> connection) : connection_(std::move(connection)) {}

Bystander::~Bystander() { OpenClients::Unregister(this); }

Status Bystander::Peers(MPI_Comm* peers) {
  if (connection_ == nullptr) return Status::FailedPrecondition("the bystander's communicator was freed at MPI_Finalize");
  return connection_->Peers(peers);
}

Status JoinAsBystander(MPI_Comm comm, std::unique_ptr<Bystander>* bystander) {
  auto connection = std::make_unique<client_internal::MpiConnection>();
  PERSERVE_RETURN_IF_ERROR(connection->Join(comm, proto::Role::kBystander));
  Bystander* joined = new Bystander(std::move(connection));
  bystander->reset(joined);
  // Nothing to tell a server: at MPI_Finalize the hook only frees the
  // duplicated communicator while MPI still can, silently.
  const Status registered = OpenClients::Register(joined, [joined] { joined->connection_.reset(); });
  if (!registered.ok()) bystander->reset();
  return registered;
}

Status JoinAsBystander(MPI_Comm comm) {
  std::unique_ptr<Bystander> bystander;
  return JoinAsBystander(comm, &bystander);
}

}  // namespace perserve
