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
// A close the library makes on its owner's behalf (that hook, or the
// destructor of a client never closed) returns its error to nobody: it is
// printed to stderr, naming the rank, and counted (UnreceivedCloseErrors in
// perserve/client.h), so a program can still end with a failing status.
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

#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
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

  // The line a client closed by the hook prints, then its close's error.
  static void ReportClosedAtFinalize(const char* role, const Status& closed) noexcept {
    try {
      fmt::print(stderr, "perserve: rank {}: {} closed at MPI_Finalize; call close() yourself to see its errors\n",
                 RankForMessages(), role);
    } catch (...) {  // nothing may leave an MPI callback
    }
    ReportCloseError(role, "at MPI_Finalize", closed);
  }

  // A close nobody is left to receive the result of: `close` runs unless MPI
  // is finalized (no server to tell then), and its error is reported. For the
  // destructors of clients never closed.
  template <class Close>
  static void CloseFromDestructor(const void* client, const char* role, Close close) noexcept {
    Unregister(client);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) ReportCloseError(role, "by its destructor (close() was never called)", close());
  }

  // Prints "perserve: rank R: the <role>'s close <when> failed: <status>" to
  // stderr and counts it; nothing if `closed` is OK. Callable at any time,
  // before MPI_Init or after MPI_Finalize too.
  static void ReportCloseError(std::string_view role, std::string_view when, const Status& closed) noexcept {
    if (closed.ok()) return;
    {
      Registry& registry = Get();
      std::lock_guard lock(registry.mutex);
      ++registry.close_errors_reported;
    }
    try {
      fmt::print(stderr, "perserve: rank {}: the {}'s close {} failed: {}\n", RankForMessages(), role, when,
                 closed.ToString());
      std::fflush(stderr);
    } catch (...) {  // called from MPI callbacks and destructors: nothing may leave
    }
  }

  static int64_t CloseErrorsReported() noexcept {
    Registry& registry = Get();
    std::lock_guard lock(registry.mutex);
    return registry.close_errors_reported;
  }

 private:
  struct Registry {
    std::mutex mutex;
    std::vector<std::pair<const void*, std::function<void()>>> clients;  // oldest first
    bool hook_set = false;
    int64_t close_errors_reported = 0;
  };

  // This process's rank in MPI_COMM_WORLD, or "?" outside MPI_Init..MPI_Finalize.
  static std::string RankForMessages() {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    int rank = -1;
    if (!initialized || finalized || MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS) return "?";
    return std::to_string(rank);
  }

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
