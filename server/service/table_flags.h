// TableFlags: one table of perserve-server's, as its flags give it. The
// single-table flags (--n-step, --stack, --max-items, ...) make the table
// "default"; each --table NAME:key=value,... makes one more (docs/tables.md
// lists the keys). TablesOf turns them into the StepReplay's tables and each
// table's minimum size and rate limiter.
//
// A --table spec: NAME, a colon, then key=value pairs separated by commas.
// A value may hold commas itself (an item column's shape: state:float32:2,256):
// a comma starts a new pair only where a key= follows it. Keys:
//   n_step, discount                   n-step items (else transitions, unless ...)
//   sequence_length, sequence_period   sequences
//   stack=COLUMN:DEPTH, item_column=NAME:DTYPE:SHAPE   (each may repeat)
//   stack_axis  last (default: 84,84,4) or first (4,84,84)
//   sampler     prioritized (default), uniform, fifo, lifo, max_heap, min_heap
//   remover     fifo (default: the oldest item leaves first) or min_heap (the lowest priority)
//   max_items, max_times_sampled, alpha, min_size, samples_per_insert, error_buffer
// A key the table does not give takes the server-wide flag's value
// (--alpha, --min-size-to-sample, --samples-per-insert, --error-buffer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "proto/codec.h"
#include "replay/step_replay.h"
#include "service/rate_limiter.h"

namespace perserve::service {

struct TableFlags {
  std::string name = "default";
  int n_step = 0;
  std::optional<double> discount;
  int sequence_length = 0;
  int sequence_period = 0;
  std::vector<std::string> stacks;        // name:depth
  std::string stack_axis;                 // "", "last" or "first"
  std::vector<std::string> item_columns;  // name:dtype:shape
  std::string sampler = "prioritized";
  std::string remover = "fifo";
  int64_t max_items = 0;  // 0: the ring's capacity
  int64_t max_times_sampled = 0;
  std::optional<double> alpha;
  std::optional<int64_t> min_size;
  std::optional<double> samples_per_insert;
  std::optional<double> error_buffer;
};

// Parses one --table spec. InvalidArgument naming the spec and the problem:
// no name, an unknown key (listing the known ones), a value that is not a
// number where one is expected.
Status ParseTableSpec(std::string_view spec, TableFlags* table);

// What every table takes unless it says otherwise, and the ring's options.
struct TableDefaults {
  replay::ReplayOptions items;  // alpha, device, seed, priority policy, prefault
  RateLimiterOptions limiter;   // min size, samples per insert, error buffer
  bool min_size_given = false;  // else a table's default is min(limiter's, what it can reach)
  std::string reward_column = "reward";
  std::string done_column = "done";
  int64_t step_capacity = int64_t{1} << 21;
  int streams = 1;
  bool prefault = false;
};

// The tables and, by index, their minimum sizes and rate limiters. Checks
// each table's flags (a layout's keys without its kind, both kinds, an
// unknown sampler or remover, a minimum size outside [1, max_items], a bad
// rate limiter) and the StepReplay's own checks: InvalidArgument naming the
// table. Each table's sampling seed is the server's mixed with its index.
Status TablesOf(const std::vector<TableFlags>& flags, const TableDefaults& defaults, const Schema& step_schema,
                std::unique_ptr<replay::StepReplay>* replay, std::vector<RateLimiterOptions>* limits);

// What the join tells the clients of these tables over a ring of
// `step_schema` (the top-level fields are the first table's): each table's
// name, sample and item schemas, sampler, whether it takes priority updates
// (prioritized and the heaps) and max_times_sampled. InvalidArgument where a
// table's layout does not fit the schema (StepSchemas').
Status ServedSchemasOf(const std::vector<replay::TableConfig>& tables, const Schema& step_schema,
                       int64_t max_steps_apart, proto::ServedSchemas* served);
// A replay's tables as the configs they were made from.
std::vector<replay::TableConfig> TableConfigsOf(const replay::StepReplay& replay);

}  // namespace perserve::service
