// Ending a benchmark's MPI job on an error it cannot go on from: the
// program's name and what failed on stderr, then MPI_Abort, so that no rank
// waits on one that stopped.
#pragma once

#include <mpi.h>

#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "perserve/status.h"

namespace perserve::bench {

[[noreturn]] inline void AbortJob(std::string_view program, std::string_view what) {
  fmt::print(stderr, "{}: {}\n", program, what);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

inline void CheckOrAbortJob(std::string_view program, const Status& status, std::string_view what) {
  if (!status.ok()) AbortJob(program, fmt::format("{}: {}", what, status.ToString()));
}

}  // namespace perserve::bench
