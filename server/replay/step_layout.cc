#include "replay/step_layout.h"

#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>

#include "replay/step_replay.h"
#include "tree/priority_tree.h"

namespace perserve::replay {
namespace {

using Kind = StepOptions::Kind;

bool IsScalar(const Column& column) { return column.shape.empty(); }

Status CheckKind(const StepOptions& options) {
  if (options.kind == Kind::kTransition) return Status::Ok();
  if (options.kind == Kind::kNStep) {
    if (options.n_step < 1) return Status::InvalidArgument(fmt::format("n-step {} must be >= 1", options.n_step));
    if (!(options.discount >= 0.0 && options.discount <= 1.0)) {
      return Status::InvalidArgument(fmt::format("discount {} must be finite and in [0, 1]", options.discount));
    }
    return Status::Ok();
  }
  if (options.sequence_length < 1) {
    return Status::InvalidArgument(fmt::format("sequence length {} must be >= 1", options.sequence_length));
  }
  if (options.sequence_period < 1 || options.sequence_period > options.sequence_length) {
    return Status::InvalidArgument(fmt::format("sequence period {} must be in [1, sequence length {}]",
                                               options.sequence_period, options.sequence_length));
  }
  return Status::Ok();
}

Status FindReward(const StepOptions& options, const Schema& schema, int* index) {
  *index = schema.ColumnIndex(options.reward_column);
  if (*index < 0) {
    return Status::InvalidArgument(
        fmt::format("the reward column \"{}\" is not a step column ({})", options.reward_column, schema.ToString()));
  }
  const Column& column = schema.columns[*index];
  if (!IsScalar(column) || (column.dtype != DType::kFloat32 && column.dtype != DType::kFloat64)) {
    return Status::InvalidArgument(fmt::format("the reward column {} must be a scalar float32 or float64",
                                               column.ToString()));
  }
  return Status::Ok();
}

Status FindDone(const StepOptions& options, const Schema& schema, int* index) {
  *index = schema.ColumnIndex(options.done_column);
  if (*index < 0) {
    return Status::InvalidArgument(
        fmt::format("the done column \"{}\" is not a step column ({})", options.done_column, schema.ToString()));
  }
  const Column& column = schema.columns[*index];
  if (!IsScalar(column) || column.dtype != DType::kUInt8) {
    return Status::InvalidArgument(fmt::format("the done column {} must be a scalar uint8", column.ToString()));
  }
  return Status::Ok();
}

// The stack depth of every step column (1: not stacked), and which are named
// in the stacks (kNStep's next_ columns).
Status FindStacks(const StepOptions& options, const Schema& schema, StepLayout* layout,
                  std::vector<bool>* named) {
  std::vector<std::pair<std::string, int>> stacks = options.stacks;
  if (stacks.empty() && options.kind == Kind::kNStep && schema.ColumnIndex("obs") >= 0) stacks.emplace_back("obs", 1);
  layout->depths.assign(schema.columns.size(), 1);
  named->assign(schema.columns.size(), false);
  for (const auto& [name, depth] : stacks) {
    const int index = schema.ColumnIndex(name);
    if (index < 0) {
      return Status::InvalidArgument(fmt::format("stack {}:{}: \"{}\" is not a step column ({})", name, depth, name,
                                                 schema.ToString()));
    }
    if (depth < 1) return Status::InvalidArgument(fmt::format("stack {}:{}: the depth must be >= 1", name, depth));
    if (index == layout->reward_column || index == layout->done_column) {
      return Status::InvalidArgument(fmt::format("stack {}:{}: the reward and done columns are not stacked", name,
                                                 depth));
    }
    if ((*named)[index]) return Status::InvalidArgument(fmt::format("stack {}: named twice", name));
    (*named)[index] = true;
    layout->depths[index] = depth;
    layout->max_depth = std::max(layout->max_depth, depth);
  }
  if (options.kind == Kind::kNStep && stacks.empty()) {
    return Status::InvalidArgument(fmt::format(
        "n-step items need an observation column for next_: name it with --stack COLUMN:DEPTH (depth 1: not "
        "stacked), or call a step column obs (step columns: {})",
        schema.ToString()));
  }
  return Status::Ok();
}

Column Stacked(const Column& column, int depth, int length, bool frames_first) {
  Column out = column;
  if (depth > 1) {
    if (frames_first) {
      out.shape.insert(out.shape.begin(), depth);
    } else {
      out.shape.push_back(depth);
    }
  }
  if (length > 0) out.shape.insert(out.shape.begin(), length);
  return out;
}

}  // namespace

Status BuildStepLayout(const StepOptions& options, const Schema& step_schema, StepLayout* layout) {
  const Status valid = step_schema.Validate();
  if (!valid.ok()) return Status::InvalidArgument("the step schema: " + valid.message());
  PERSERVE_RETURN_IF_ERROR(CheckKind(options));
  if (options.step_capacity < 1 || options.step_capacity > tree::PriorityTree::kMaxCapacity) {
    return Status::InvalidArgument(fmt::format("step capacity {} is outside [1, 2^40]", options.step_capacity));
  }
  if (options.streams < 1) return Status::InvalidArgument(fmt::format("{} streams: need >= 1", options.streams));
  StepLayout result;
  const bool transition = options.kind == Kind::kTransition;
  if (transition) {
    // A transition is its own step: no episodes, nothing stacked or computed.
    if (!options.stacks.empty()) {
      return Status::InvalidArgument(fmt::format("stack {}:{}: transitions are not stacked (stacks are for n-step "
                                                 "items and sequences: --n-step, --sequence-length)",
                                                 options.stacks.front().first, options.stacks.front().second));
    }
    if (!options.item_columns.empty()) {
      return Status::InvalidArgument(fmt::format("item column {}: transitions carry no item columns (they are for "
                                                 "n-step items and sequences: --n-step, --sequence-length)",
                                                 options.item_columns.front().ToString()));
    }
    result.depths.assign(step_schema.columns.size(), 1);
  } else {
    PERSERVE_RETURN_IF_ERROR(FindReward(options, step_schema, &result.reward_column));
    PERSERVE_RETURN_IF_ERROR(FindDone(options, step_schema, &result.done_column));
  }
  std::vector<bool> named(step_schema.columns.size(), false);
  if (!transition) PERSERVE_RETURN_IF_ERROR(FindStacks(options, step_schema, &result, &named));

  // An item needs steps t-K+1 .. t+n (n-step) or t-K+1 .. t+L-1 (sequence): all in the ring at once.
  const bool n_step = options.kind == Kind::kNStep;
  const int64_t span = transition ? 1
                       : n_step   ? int64_t{options.n_step} + result.max_depth
                                  : int64_t{options.sequence_length} + result.max_depth - 1;
  result.span = span;
  if (span > options.step_capacity) {
    return Status::InvalidArgument(fmt::format(
        "an item spans {} steps ({} {} and a stack of {}), more than the step ring holds ({} steps)", span,
        n_step ? "n-step" : "sequence length", n_step ? options.n_step : options.sequence_length, result.max_depth,
        options.step_capacity));
  }

  const auto add = [&result](Column column, SampleColumn source) {
    source.bytes = column.ItemBytes();
    result.sample_schema.columns.push_back(std::move(column));
    result.columns.push_back(source);
  };
  using Source = SampleColumn::Source;
  const int length = n_step || transition ? 0 : options.sequence_length;
  for (int c = 0; c < static_cast<int>(step_schema.columns.size()); ++c) {
    if (n_step && (c == result.reward_column || c == result.done_column)) continue;
    add(Stacked(step_schema.columns[c], result.depths[c], length, options.frames_first), {Source::kStep, c, result.depths[c]});
  }
  if (n_step) {
    add(Column{"return", DType::kFloat64, {}}, {Source::kReturn});
    add(Column{"discount", DType::kFloat64, {}}, {Source::kDiscount});
    for (int c = 0; c < static_cast<int>(step_schema.columns.size()); ++c) {
      if (!named[c]) continue;
      Column next = Stacked(step_schema.columns[c], result.depths[c], 0, options.frames_first);
      next.name = "next_" + next.name;
      add(std::move(next), {Source::kNextStep, c, result.depths[c]});
    }
  } else if (!transition) {
    add(Column{"mask", DType::kUInt8, {options.sequence_length}}, {Source::kMask});
  }
  result.stored_schema.columns.push_back(Column{"step", DType::kInt64, {}});
  for (int i = 0; i < static_cast<int>(options.item_columns.size()); ++i) {
    add(options.item_columns[i], {Source::kItem, i});
    result.stored_schema.columns.push_back(options.item_columns[i]);
    result.item_column_bytes += options.item_columns[i].ItemBytes();
  }
  Status status = result.sample_schema.Validate();
  if (!status.ok()) {
    return Status::InvalidArgument(fmt::format("the sample layout {}: {} (an item column, or a step column named "
                                               "like a generated one: return, discount, next_*, mask)",
                                               result.sample_schema.ToString(), status.message()));
  }
  status = result.stored_schema.Validate();
  if (!status.ok()) {
    return Status::InvalidArgument(fmt::format("the items' stored columns {}: {} (\"step\" is the stored step key)",
                                               result.stored_schema.ToString(), status.message()));
  }
  *layout = std::move(result);
  return Status::Ok();
}

Status StepSchemas(const StepOptions& options, const Schema& step_schema, Schema* sample_schema,
                   Schema* stored_schema) {
  StepLayout layout;
  PERSERVE_RETURN_IF_ERROR(BuildStepLayout(options, step_schema, &layout));
  *sample_schema = std::move(layout.sample_schema);
  *stored_schema = std::move(layout.stored_schema);
  return Status::Ok();
}

}  // namespace perserve::replay
