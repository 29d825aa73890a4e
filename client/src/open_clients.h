// OpenClients: this process's clients still open, which the library closes
// at MPI_Finalize if their owners did not (internal to the client library).
//
// The first registration sets an attribute on MPI_COMM_SELF. MPI_Finalize
// deletes MPI_COMM_SELF's attributes before anything else, while MPI still
// works (the standard's "Allowing User Functions at Process Termination";
// callbacks run in the reverse order of setting), so the attribute's delete
// callback can still talk to the server: it takes each client still
// registered out of the registry and calls its close function.
// Without it, a client that forgot Close() would leave its server waiting
// for the close, and the whole job hanging in MPI_Finalize.
//
// Thread safe: a mutex guards the registry, and the close functions run
// without it held (they unregister themselves). The registry is never
// destroyed, so clients destroyed during static destruction, or an
// MPI_Finalize called from an atexit handler, still find it.
//
// Header only (inline): the one registry is shared by every file of
// libperserve_client.so that includes it.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "mpi/communicator.h"
#include "perserve/status.h"

namespace perserve::client_internal {

class OpenClients {
 public:
  // Registers `client` (its address is the key) with what closes it at
  // MPI_Finalize; sets the MPI_COMM_SELF attribute the first time. Call after
  // MPI_Init (a join has run). Errors: the MPI calls that set the attribute.
  static Status Register(const void* client, std::function<void()> close_at_finalize) {
    Registry& registry = Get();
    std::lock_guard lock(registry.mutex);
    if (!registry.hook_set) {
      int keyval = MPI_KEYVAL_INVALID;
      PERSERVE_RETURN_IF_ERROR(mpi::Check(
          MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &CloseAllAtFinalize, &keyval, nullptr), "MPI_Comm_create_keyval"));
      PERSERVE_RETURN_IF_ERROR(mpi::Check(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr), "MPI_Comm_set_attr"));
      registry.hook_set = true;
    }
    registry.clients.emplace_back(client, std::move(close_at_finalize));
    return Status::Ok();
  }

  // Takes `client` out; nothing if it is not registered (closed already, or
  // taken out by the hook). Close() and the destructors call it. No MPI.
  static void Unregister(const void* client) noexcept {
    Registry& registry = Get();
    std::lock_guard lock(registry.mutex);
    auto& clients = registry.clients;
    for (auto it = clients.begin(); it != clients.end(); ++it) {
      if (it->first == client) {
        clients.erase(it);
        return;
      }
    }
  }

  // The line (and the error, if any) a client closed by the hook prints.
  static void Report(const char* role, const Status& closed) noexcept {
    try {
      int rank = -1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      fmt::print(stderr, "perserve: rank {}: {} closed at MPI_Finalize; call close() yourself to see its errors\n",
                 rank, role);
      if (!closed.ok()) {
        fmt::print(stderr, "perserve: rank {}: the {}'s close at MPI_Finalize failed: {}\n", rank, role,
                   closed.ToString());
      }
      std::fflush(stderr);
    } catch (...) {  // nothing may leave an MPI callback
    }
  }

 private:
  struct Registry {
    std::mutex mutex;
    std::vector<std::pair<const void*, std::function<void()>>> clients;  // oldest first
    bool hook_set = false;
  };

  static Registry& Get() {
    static Registry* registry = new Registry;  // never destroyed: see the top
    return *registry;
  }

  // MPI_COMM_SELF's delete callback: closes the newest client still open
  // until none is left. An exception (a failed allocation) must not reach
  // MPI's C code: it ends that client's close, and the next is closed.
  static int CloseAllAtFinalize(MPI_Comm, int, void*, void*) {
    Registry& registry = Get();
    while (true) {
      std::function<void()> close;
      {
        std::lock_guard lock(registry.mutex);
        if (registry.clients.empty()) break;
        close = std::move(registry.clients.back().second);
        registry.clients.pop_back();
      }
      try {
        close();
      } catch (...) {
      }
    }
    return MPI_SUCCESS;
  }
};

}  // namespace perserve::client_internal
