// StepLayout: how a StepReplay's samples are laid out (step_replay.h's
// header states the layouts): the sample and stored schemas and, per sample
// column, where its bytes come from. Built once, from the options and the
// step schema, by StepSchemas and StepReplay::Create.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"

namespace perserve::replay {

// A table's item layout (step_replay.h states each kind's), with the ring's
// sizes (a StepReplay's first table gives them; see StepReplay::Create).
struct StepOptions {
  enum class Kind { kTransition, kNStep, kSequence };
  Kind kind = Kind::kNStep;
  int n_step = 1;                 // kNStep: n >= 1
  double discount = 0.99;         // kNStep: finite, in [0, 1]
  int sequence_length = 0;        // kSequence: L >= 1
  int sequence_period = 0;        // kSequence: P in [1, L]
  std::vector<std::pair<std::string, int>> stacks;  // step column -> depth >= 1 (depth 1: not stacked)
  // Where a stack's k frames go: a new last axis (c.shape + [k], Dopamine's
  // (84, 84, 4)) or a new first axis ([k] + c.shape, PyTorch's (4, 84, 84)).
  // Frames first, each stack is its k frames one after another, as stored:
  // a reply can send them from the ring (ItemTable::PlanReply).
  bool frames_first = false;
  std::string reward_column = "reward";  // scalar float32 or float64 step column (not for kTransition)
  std::string done_column = "done";      // scalar uint8 step column: 0, 1 (terminal) or 2 (truncated: bootstrap step)
  std::vector<Column> item_columns;      // columns an actor sends with each item (e.g. a recurrent state)
  int64_t step_capacity = int64_t{1} << 21;  // steps the ring holds (all streams together)
  int streams = 1;                        // stream ids are 0 .. streams-1 (the service's client ids)
  bool prefault = false;                  // write every page of the step ring at start (--prefault-store)
};

struct SampleColumn {
  enum class Source {
    kStep,      // a step column at t (kTransition, kNStep) or at t .. t+L-1 (kSequence), stacked to `depth`
    kNextStep,  // kNStep's next_c: the step column at t+n', stacked to `depth`
    kReturn,    // kNStep's float64 n-step return
    kDiscount,  // kNStep's float64 discount
    kMask,      // kSequence's uint8 [L]
    kItem,      // an item column, as sent
  };
  Source source = Source::kStep;
  int column = 0;     // the step column (kStep, kNextStep) or the item column (kItem)
  int depth = 1;      // frames stacked (1: not stacked), on the axis StepOptions::frames_first says
  int64_t bytes = 0;  // one item's bytes of this column in a sample
};

struct StepLayout {
  Schema sample_schema;
  Schema stored_schema;               // step int64, then the item columns
  std::vector<SampleColumn> columns;  // one per sample_schema column
  std::vector<int> depths;            // per step column: its stack depth (1: not stacked)
  int max_depth = 1;                  // K: the deepest stack
  int64_t span = 1;                   // steps an item needs at most: 1, n + K or L + K - 1
  int reward_column = -1;
  int done_column = -1;
  int64_t item_column_bytes = 0;      // one item's bytes of the item columns
};

// StepSchemas' checks and result, with the plan Assemble follows.
Status BuildStepLayout(const StepOptions& options, const Schema& step_schema, StepLayout* layout);

}  // namespace perserve::replay
