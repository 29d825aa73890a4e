// The step replay fuzz_step_service serves and fuzz_checkpoint restores into:
// fuzz::StepServiceSchema, 2-step transitions (discount 0.5), obs stacked 2
// deep, `capacity` steps and items, one stream per service client.
#pragma once

#include <cstdint>
#include <memory>

#include "fuzz/inputs.h"
#include "replay/replay.h"
#include "replay/step_replay.h"

namespace perserve::fuzz {

inline replay::StepOptions StepServiceOptions(int64_t capacity) {
  replay::StepOptions options;
  options.n_step = 2;
  options.discount = 0.5;
  options.stacks = {{"obs", 2}};
  options.step_capacity = capacity;
  options.streams = kServiceClients;
  return options;
}

// The items' Replay (over `options`' capacity and seed) and the StepReplay
// over it; false if either cannot be made.
inline bool MakeStepServiceReplay(replay::ReplayOptions options, std::unique_ptr<replay::Replay>* items,
                                  std::unique_ptr<replay::StepReplay>* steps) {
  const replay::StepOptions step_options = StepServiceOptions(options.capacity);
  Schema samples, stored;
  return replay::StepSchemas(step_options, StepServiceSchema(), &samples, &stored).ok() &&
         replay::Replay::Create(options, stored, items).ok() &&
         replay::StepReplay::Create(step_options, StepServiceSchema(), items->get(), steps).ok();
}

}  // namespace perserve::fuzz
