// CHECK and CHECK_OK for the multi-rank test programs: on the first failed
// check the rank prints where and why and exits non-zero, which fails the
// whole mpirun and so its ctest entry.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "perserve/status.h"

namespace perserve::mpi_test {

// This process's rank in MPI_COMM_WORLD, remembered for checks made after
// MPI_Finalize (-1 if MPI was never up when asked).
inline int WorldRank() {
  static int rank = -1;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Whether `text` (or a status's message) holds `part`: what checks of error
// messages ask.
inline bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
inline bool Contains(const Status& status, const std::string& part) { return Contains(status.message(), part); }

}  // namespace perserve::mpi_test

#define CHECK(condition, ...)                                                                             \
  do {                                                                                                    \
    if (!(condition)) {                                                                                   \
      fmt::print(stderr, "[rank {}] {}:{}: check failed: {}: {}\n", ::perserve::mpi_test::WorldRank(),   \
                 __FILE__, __LINE__, #condition, fmt::format(__VA_ARGS__));                               \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)

#define CHECK_OK(expr)                                              \
  do {                                                              \
    const ::perserve::Status check_ok_status = (expr);              \
    CHECK(check_ok_status.ok(), "{}", check_ok_status.ToString()); \
  } while (0)
