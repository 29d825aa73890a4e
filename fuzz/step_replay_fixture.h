// The tables fuzz_step_service serves and fuzz_checkpoint restores into:
// fuzz::StepServiceSchema's 2-step items (discount 0.5, obs stacked 2
// deep), or fuzz::ServiceSchema's transitions; `capacity` steps and items,
// one stream per service client.
#pragma once

#include <cstdint>
#include <memory>

#include "fuzz/inputs.h"
#include "replay/replay.h"
#include "replay/step_replay.h"

namespace perserve::fuzz {

inline replay::StepOptions StepServiceOptions(int64_t capacity) {
  replay::StepOptions options;
  options.kind = replay::StepOptions::Kind::kNStep;
  options.n_step = 2;
  options.discount = 0.5;
  options.stacks = {{"obs", 2}};
  options.step_capacity = capacity;
  options.streams = kServiceClients;
  return options;
}

// The n-step table over `options`' capacity and seed (its items' capacity
// too); false if it cannot be made.
inline bool MakeStepServiceReplay(const replay::ReplayOptions& options, std::unique_ptr<replay::StepReplay>* steps) {
  return replay::StepReplay::Create(StepServiceOptions(options.capacity), options, StepServiceSchema(), steps).ok();
}

// The table of ServiceSchema transitions over `options`' capacity and seed.
inline bool MakeTransitionServiceReplay(const replay::ReplayOptions& options,
                                        std::unique_ptr<replay::StepReplay>* steps) {
  replay::StepOptions transitions;
  transitions.kind = replay::StepOptions::Kind::kTransition;
  transitions.step_capacity = options.capacity;
  transitions.streams = kServiceClients;
  return replay::StepReplay::Create(transitions, options, ServiceSchema(), steps).ok();
}

}  // namespace perserve::fuzz
