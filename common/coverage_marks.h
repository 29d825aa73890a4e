// Coverage marks (as TigerBeetle's): named counters at the branches where
// an interleaving that matters happens (a columns message overtaking its
// append request, a checkpoint begun while an append is held, a held
// request timing out), so a test can say which of them its runs reached.
// The deterministic simulation's many-seeds test prints every mark's hits
// and fails when one it expects was never hit (docs/testing.md lists them).
//
//   PERSERVE_MARK("append: columns came before their request");
//
// A hit costs a guarded static's check and an int64 increment (relaxed
// load and store: no lock, so hits from two threads at once may be lost,
// never torn: marks count for tests, not for operations). A mark is known
// from its first hit on; marks of one name at several places add up. The
// registry is perserve_common's, linked into the client library (shared)
// too: a program with both must take one copy, as the simulation's test
// program does (the library's; its expected marks include one of the
// library's, so a second registry would fail it).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace perserve {

class CoverageMark {
 public:
  // Registers the mark (once, at its first hit).
  explicit CoverageMark(const char* name);
  CoverageMark(const CoverageMark&) = delete;
  CoverageMark& operator=(const CoverageMark&) = delete;

  void Hit() { hits_.store(hits_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  const char* name() const { return name_; }
  int64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  void Reset() { hits_.store(0, std::memory_order_relaxed); }

 private:
  const char* name_;
  std::atomic<int64_t> hits_{0};
};

// Every mark hit since the start (or the last reset), by name, with its hits.
std::map<std::string, int64_t> CoverageMarkHits();
// Sets every known mark's hits to 0 (they stay known).
void ResetCoverageMarks();

}  // namespace perserve

#define PERSERVE_MARK(name)                                       \
  do {                                                            \
    static ::perserve::CoverageMark perserve_coverage_mark{name}; \
    perserve_coverage_mark.Hit();                                 \
  } while (false)
