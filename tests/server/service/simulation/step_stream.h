// StepStream: an actor's own view of its step stream in the simulation (raw
// actors and the library's alike): the steps it sent, as rows, and which of
// them items can be created at (the reference's rules, step_reference.h, on
// this one stream: every step the item needs appended, a sequence on its
// period; whether the ring still holds them is the service's to say), and
// the steps it sent items over (one item per step: it sends none over them
// again but on purpose), table by table (each with its own layout: issue
// 34). Steps are drawn with bytes unique to the actor and step, so a sample
// that showed a step overwritten in the ring would show another step's
// bytes. Every `table` below is an index of config.tables (0: the default).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "server/replay/step_reference.h"
#include "server/service/simulation/portable_random.h"
#include "server/service/simulation/schedule_random.h"
#include "server/service/simulation/step_config.h"

namespace perserve::service::simulation {

// rows[j][c]: row j's bytes of column c.
using StepRows = std::vector<std::vector<std::vector<std::byte>>>;

class StepStream {
 public:
  // An actor's stream as its service holds it, as the join says: `held`,
  // every step it appended (the StepModel's reference; none in the job's
  // first life). After a crash-restart (`run` 1, 2 ...) its next step is the
  // first of a new episode (the one in progress ended with the process); it
  // creates no items over the held steps (whether the table still has them
  // is the server's), and it draws bytes no earlier life drew.
  StepStream(const StepStreamsConfig& config, int client, const std::vector<replay::step_test::RefStep>& held,
             int run);

  int64_t size() const { return views_[0].steps(0); }
  // `count` new steps to follow the view (not in it yet); each step's done
  // comes from DrawEpisodeEnd, the one place episodes end.
  StepRows Draw(PortableRandom& rng, int64_t count);
  // The view becomes its first `kept` steps, then `rows` (after an append,
  // or, with no rows, after a refusal: what the server holds); the items
  // sent over the steps it drops are forgotten.
  void Commit(int64_t kept, const StepRows& rows);
  bool Creatable(int64_t t, int table = 0) const { return views_[static_cast<size_t>(table)].Creatable(0, t, 0); }
  // Up to `most` distinct steps among the recent ones where an item of
  // `table` can be created now and none was sent yet.
  std::vector<int64_t> PickItems(PortableRandom& rng, int64_t most, int table = 0) const;
  // Items of `table` are sent over these steps.
  void MarkItems(const std::vector<int64_t>& steps, int table = 0) {
    items_[static_cast<size_t>(table)].insert(steps.begin(), steps.end());
  }
  // A recent step an item was sent over, or -1 if none is.
  int64_t RecentItem(PortableRandom& rng) const;
  // A step where a sequence cannot start (off its period), or -1 if none is recent.
  int64_t OffPeriod(PortableRandom& rng) const;
  // A recent bootstrap step (done 2: no item starts there), or -1 if none is.
  int64_t RecentBootstrap() const;
  // The item columns' rows of `count` new items of `table`.
  StepRows ItemRows(PortableRandom& rng, int64_t count, int table = 0) const;
  // The layout of `table`'s items.
  const replay::StepOptions& layout(int table) const;
  // The wire layout of rows: each column's rows, column after column.
  static std::vector<std::byte> Wire(const StepRows& rows, size_t columns);

 private:
  const StepStreamsConfig& config_;
  const int client_;
  std::vector<replay::step_test::StepReference> views_;  // a table's (the same steps, its layout)
  int64_t drawn_ = 0;  // steps drawn ever (refused ones too): their bytes differ
  std::vector<std::set<int64_t>> items_;  // a table's: steps items were sent over
};

// A priority for an item or update of a table beside the default one:
// half of them one of three values, so that equal priorities are common
// (the heaps' and the lowest-priority remover's ties: table_reference.h).
inline double TablePriority(ScheduleRandom& random) {
  if (random.Chance(0.5)) return std::array{0.5, 1.0, 2.0}[static_cast<size_t>(random.Pick(0, 2))];
  return random.Uniform(0.01, 10.0);
}

// One table's items of an append: a table's index (past the last: one the
// server does not have), its items' steps and priorities (none: the
// server's max priority), their item columns in the wire layout.
struct TableGroup {
  int table = 0;
  std::vector<int64_t> steps;
  std::vector<double> priorities;
  std::vector<std::byte> columns;
};

// Items of `table` (beside the default one) at up to `most` recent steps of
// `stream` where they can be created (none: no steps), with priorities half
// the time (TablePriority) and random item columns: raw and library actors
// alike.
inline TableGroup DrawTableGroup(ScheduleRandom& random, const StepStream& stream, int table, int64_t most) {
  TableGroup group{table, stream.PickItems(random.generator(), most, table), {}, {}};
  if (group.steps.empty()) return group;
  if (random.Chance(0.5)) {
    for (size_t i = 0; i < group.steps.size(); ++i) group.priorities.push_back(TablePriority(random));
  }
  group.columns =
      StepStream::Wire(stream.ItemRows(random.generator(), static_cast<int64_t>(group.steps.size()), table),
                       stream.layout(table).item_columns.size());
  return group;
}

}  // namespace perserve::service::simulation
