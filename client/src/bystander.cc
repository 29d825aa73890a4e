#include "client/src/connection.h"
#include "perserve/client.h"

namespace perserve {

Bystander::Bystander(std::unique_ptr<client_internal::Connection> connection) : connection_(std::move(connection)) {}

Bystander::~Bystander() = default;

Status Bystander::Peers(MPI_Comm* peers) { return connection_->Peers(peers); }

Status JoinAsBystander(MPI_Comm comm, std::unique_ptr<Bystander>* bystander) {
  auto connection = std::make_unique<client_internal::MpiConnection>();
  PERSERVE_RETURN_IF_ERROR(connection->Join(comm, proto::Role::kBystander));
  bystander->reset(new Bystander(std::move(connection)));
  return Status::Ok();
}

Status JoinAsBystander(MPI_Comm comm) {
  std::unique_ptr<Bystander> bystander;
  return JoinAsBystander(comm, &bystander);
}

}  // namespace perserve
