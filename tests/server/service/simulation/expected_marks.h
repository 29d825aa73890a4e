// The coverage marks (common/coverage_marks.h) the simulation's many-seeds
// test must hit: every interleaving listed here happens in some seed of any
// kSeedsForCoverage of them, or the test fails naming it (a change that
// makes one unreachable, in the service or the simulation, is seen).
// docs/testing.md says what each means and how often seeds 1-10000 hit it.
#pragma once

#include <array>
#include <string_view>

namespace perserve::service::simulation {

inline constexpr auto kExpectedMarks = std::to_array<std::string_view>({
    // Intake.
    "append: its columns came before its request",
    "append: its columns came while it was held",
    "append: held by the rate limiter",
    "append: held by rows of a sample reply in flight",
    "append: held past its timeout",
    "append: refused, its client has the most held already",
    "rate limiter: the oldest append let through (both kinds waited)",
    "close: waits behind its client's held appends",
    // Sampling.
    "sample: waits for the minimum size",
    "sample: waits for the rate limiter",
    "sample: waits for its client to read earlier replies",
    "sample: waits behind its client's earlier samples",
    "sample: waited past its timeout",
    "sample: refused as hopeless (no actor open)",
    "sample: reply sent from the ring, its rows pinned",
    "sample: waits for items to draw (max_times_sampled)",
    // Checkpoints.
    "checkpoint: begun while appends are held",
    "checkpoint: begun while samples wait",
    "checkpoint: asked for while one is being written",
    "checkpoint: SIGTERM's waits for the one being written",
    "checkpoint: a periodic one complete",
    "checkpoint: a write failed, the previous one kept",
    "checkpoint: ring steps written before an append overwrites them",
    "checkpoint: an item's row written before an append overwrites it",
    // Crash-restarts.
    "append: an item over steps on both sides of a restore refused",
    "restore: a held step began an episode after an earlier restore",
    // The client library's learner over shards.
    "learner: a shard left a sample's plan",
});

}  // namespace perserve::service::simulation
