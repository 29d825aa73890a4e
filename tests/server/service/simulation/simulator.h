// The deterministic simulation of the replay rank (docs/design.md, "How we know it
// is right"; issue 24). One seed drives everything: a configuration
// (simulation_config.h), then a schedule in which actors and learners make
// requests through LoopbackTransports, read their replies or stop reading
// for a while, and close, while the simulator calls the real ReplayService's
// Step() over a real Replay (tree and store), requests checkpoints, makes
// their writes fail, sends signals, and crashes the job to restart it from
// its checkpoints (checks in simulator.cc, docs/testing.md). Some seeds run 2-3 shards (a service,
// replay and transport each) and clients of the real client library
// (library_client.h), each in a fiber whose blocking calls run the
// simulation's ticks. A ReferenceModel checks every reply and the replays
// after every step; once the clients stop working and close, every service
// must reach done() within a bound of steps.
//
// Nothing but the seed's generators (portable_random.h) decide anything: the service's
// clock is the simulation's (1 ms a step), so requests' timeouts fire at the
// same step of every run; checkpoints write
// one slice a pass (ServiceOptions::checkpoint_slice 0) to the simulation's
// own file system, kept in memory (MemoryFileSystem), and their helper
// thread is awaited before the next step (CheckpointWriter::AwaitFinish);
// periodic checkpoints and stats lines, where a seed draws them, run on the
// simulation's clock too (service_timers.h). So a seed's run is the same
// every time: RerunCommand(seed) replays it.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace perserve::service::simulation {

// What the step streams of a run exercised (StepModel's).
struct StepCounts {
  int64_t appends = 0;       // acknowledged
  int64_t refused = 0;       // refused for their own flaws (as judged)
  int64_t items = 0;         // created
  int64_t drawn = 0;         // sampled items whose bytes were compared
  int64_t evicted = 0;     // items that left the table with their steps, as the reference had them
  int64_t pushed_out = 0;  // items the table's FIFO remover took (the table full)
  int64_t stale = 0;         // update elements counted stale
  int64_t restored = 0;      // live items of restored checkpoints assembled and compared
  int64_t restored_exact = 0;  // checkpoints that restored the ring and items as they were when begun
  // Several tables (issue 34): draws checked against the reference's
  // selector, by sampler (table::SelectorKind's order); items taken by their
  // k-th draw (max_times_sampled); items the lowest-priority remover took;
  // priority updates applied to tables with selectors.
  std::array<int64_t, 6> drawn_by{};
  int64_t sampled_out = 0, lowest_removed = 0, selector_updates = 0;
  void Add(const StepCounts& o) {
    for (size_t i = 0; i < drawn_by.size(); ++i) drawn_by[i] += o.drawn_by[i];
    sampled_out += o.sampled_out;
    lowest_removed += o.lowest_removed;
    selector_updates += o.selector_updates;
    restored += o.restored;
    restored_exact += o.restored_exact;
    appends += o.appends;
    refused += o.refused;
    items += o.items;
    drawn += o.drawn;
    evicted += o.evicted;
    pushed_out += o.pushed_out;
    stale += o.stale;
  }
};

struct SimulationResult {
  bool passed = true;
  int shards = 1;               // the seed's configuration drew these ...
  int library_clients = 0;      // ... and these clients of the real client library
  bool step_streams = false;    // ... and services of step streams
  int tables = 1;               // ... of this many tables
  std::string failure;       // what broke, at which step, and what waited
  std::string config;        // the seed's configuration, described
  int64_t steps = 0;         // calls of ReplayService::Step
  int64_t replies = 0;       // replies the clients received
  uint64_t fingerprint = 0;  // of every reply received, in order: equal runs, equal fingerprints
  uint64_t schedule = 0;     // of every draw of the seed's generators, in order (PortableRandom::digest)
  int64_t deadlines_exceeded = 0;  // requests the service ended at their timeout
  // The library clients': batches checked (exact: against one replay of the
  // union as it stood), lent columns read at their receipt, waits that ran ticks.
  int64_t batches = 0, exact_batches = 0, lent_sends = 0, blocked_calls = 0, other_table_batches = 0;
  // Appends whose step columns went apart (raw clients' and the library's), of them raw ones sent before the request.
  int64_t columns_apart = 0, columns_first = 0;
  StepCounts step_counts;  // what the step streams exercised
  // The services' timers on the simulation's clock (service_timers.h):
  // checkpoints the periodic timer asked for, stats lines checked.
  int64_t periodic_checkpoints = 0, stats_lines = 0;
  // Crash-restarts (issue 35): the job's restarts from its checkpoints, and
  // of them those whose crash came at an operation of the file system (a
  // checkpoint being written, mostly) rather than between two steps.
  int64_t restarts = 0, restarts_mid_operation = 0;
};

// Runs one seed's whole schedule. Never throws; a failure is in the result.
SimulationResult RunSimulation(uint64_t seed);

// The shell command that runs `seed` alone.
std::string RerunCommand(uint64_t seed);

}  // namespace perserve::service::simulation
