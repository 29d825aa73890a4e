// perserve-server's --table specs: parsed as docs/tables.md says, refused
// with the spec and the problem named, and turned into the StepReplay's
// tables with each one's minimum size and rate limiter.
#include "service/table_flags.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace perserve::service {
namespace {

Schema StepSchema() {
  return Schema{{{"obs", DType::kUInt8, {4}},
                 {"action", DType::kInt32, {}},
                 {"reward", DType::kFloat32, {}},
                 {"done", DType::kUInt8, {}}}};
}

TableDefaults Defaults() {
  TableDefaults defaults;
  defaults.items = replay::ReplayOptions{};
  defaults.items.device = tree::Device::kCpu;
  defaults.limiter = RateLimiterOptions{0.0, 0.0, 1000};
  defaults.step_capacity = 4096;
  defaults.streams = 2;
  return defaults;
}

TEST(TableFlagsTest, ASpecGivesEveryKeyAndValuesMayHoldCommas) {
  TableFlags t;
  ASSERT_TRUE(ParseTableSpec("r2d2:sequence_length=80,sequence_period=40,item_column=state:float32:2,256,"
                             "stack=obs:4,stack=action:2,sampler=uniform,remover=min_heap,max_items=5000,"
                             "max_times_sampled=3,alpha=0.9,min_size=64,samples_per_insert=8,error_buffer=100",
                             &t)
                  .ok());
  EXPECT_EQ(t.name, "r2d2");
  EXPECT_EQ(t.sequence_length, 80);
  EXPECT_EQ(t.sequence_period, 40);
  EXPECT_EQ(t.item_columns, (std::vector<std::string>{"state:float32:2,256"}));
  EXPECT_EQ(t.stacks, (std::vector<std::string>{"obs:4", "action:2"}));
  EXPECT_EQ(t.sampler, "uniform");
  EXPECT_EQ(t.remover, "min_heap");
  EXPECT_EQ(t.max_items, 5000);
  EXPECT_EQ(t.max_times_sampled, 3);
  EXPECT_EQ(t.alpha, 0.9);
  EXPECT_EQ(t.min_size, 64);
  EXPECT_EQ(t.samples_per_insert, 8.0);
  EXPECT_EQ(t.error_buffer, 100.0);
  ASSERT_TRUE(ParseTableSpec("eval", &t).ok());  // a name alone: transitions, every default
  EXPECT_EQ(t.name, "eval");
  EXPECT_EQ(t.n_step, 0);
  EXPECT_FALSE(t.min_size.has_value());
}

TEST(TableFlagsTest, BadSpecsAreRefusedNamingTheProblem) {
  TableFlags t;
  const auto refused = [&t](const std::string& spec, const std::string& fragment) {
    const Status status = ParseTableSpec(spec, &t);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << spec;
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.ToString();
  };
  refused(":n_step=3", "give NAME:key=value");
  refused("n_step=3", "give NAME:key=value");
  refused("apex:nstep=3", "unknown key \"nstep\" (keys: n_step,");
  refused("apex:n_step=three", "n_step=three is not a number");
  refused("apex:alpha=0.5x", "alpha=0.5x is not a number");
  refused("apex:n_step", "\"n_step\" is not key=value");
}

TEST(TableFlagsTest, TablesGetTheirLayoutsSelectorsAndLimitsOrTheServersDefaults) {
  std::vector<TableFlags> flags(3);
  ASSERT_TRUE(ParseTableSpec("apex:n_step=3,discount=0.9,stack=obs:4,stack_axis=first,max_items=2000,min_size=100",
                             &flags[0])
                  .ok());
  ASSERT_TRUE(ParseTableSpec("r2d2:sequence_length=8,sequence_period=4,alpha=0.9,samples_per_insert=2,"
                             "error_buffer=64",
                             &flags[1])
                  .ok());
  ASSERT_TRUE(ParseTableSpec("queue:sampler=fifo,max_times_sampled=1,max_items=300", &flags[2]).ok());
  std::unique_ptr<replay::StepReplay> replay;
  std::vector<RateLimiterOptions> limits;
  const Status made = TablesOf(flags, Defaults(), StepSchema(), &replay, &limits);
  ASSERT_TRUE(made.ok()) << made.ToString();
  ASSERT_EQ(replay->tables(), 3);
  EXPECT_EQ(replay->table(0).name(), "apex");
  EXPECT_EQ(replay->table(0).options().kind, replay::StepOptions::Kind::kNStep);
  EXPECT_EQ(replay->table(0).items().capacity(), 2000);
  EXPECT_TRUE(replay->table(0).options().frames_first);
  EXPECT_FALSE(replay->table(1).options().frames_first) << "frames last unless a table says first";
  EXPECT_EQ(replay->table(1).items().capacity(), 4096) << "max_items defaults to the ring's capacity";
  EXPECT_EQ(replay->table(1).items().alpha(), 0.9);
  EXPECT_EQ(replay->table(2).items().options().sampler, table::SelectorKind::kFifo);
  EXPECT_EQ(replay->table(2).items().options().max_times_sampled, 1);
  EXPECT_NE(replay->table(1).items().options().seed, replay->table(0).items().options().seed);
  ASSERT_EQ(limits.size(), 3u);
  EXPECT_EQ(limits[0].min_size_to_sample, 100);
  EXPECT_EQ(limits[1].samples_per_insert, 2.0);
  EXPECT_EQ(limits[1].error_buffer, 64.0);
  // Not given: the server's 1000, but never more than half of what a ring of long episodes holds whole.
  // (sequences of 8 every 4 steps: (4096 - 8) / 4 + 1 = 1023 whole ones in a ring of one long episode).
  EXPECT_EQ(limits[1].min_size_to_sample, 511);
  EXPECT_EQ(limits[0].min_size_to_sample, 100) << "given: kept";
  EXPECT_EQ(limits[2].min_size_to_sample, 300) << "a table of 300 transitions cannot wait for 1000";
}

TEST(TableFlagsTest, BadTablesAreRefusedNamingTheTable) {
  const auto refused = [](const std::vector<std::string>& specs, const std::string& fragment) {
    std::vector<TableFlags> flags;
    for (const std::string& spec : specs) {
      flags.emplace_back();
      ASSERT_TRUE(ParseTableSpec(spec, &flags.back()).ok()) << spec;
    }
    std::unique_ptr<replay::StepReplay> replay;
    std::vector<RateLimiterOptions> limits;
    const Status status = TablesOf(flags, Defaults(), StepSchema(), &replay, &limits);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.ToString();
  };
  refused({"a:n_step=3,sequence_length=4"}, "table a: n-step and sequence length both");
  refused({"a:stack=obs:4"}, "table a: a stack, item column");
  refused({"a:n_step=3,sequence_period=2"}, "table a: the sequence period is for sequences");
  refused({"a:sequence_length=3,discount=0.5"}, "table a: the discount is for n-step items");
  refused({"a:sampler=random"}, "table a: ");
  refused({"a:remover=lifo"}, "table a: remover \"lifo\"");
  refused({"a:max_items=10,min_size=11"}, "table a: min size to sample 11 must be in [1, 10]");
  refused({"a:samples_per_insert=-1"}, "table a: ");
  refused({"a:stack=obs:x,n_step=1"}, "table a: stack obs:x: give name:depth");
  refused({"a:stack=obs:4,stack_axis=middle,n_step=1"}, "table a: stack axis middle: give first");
  refused({"a:stack_axis=first"}, "table a: a stack, item column");
  refused({"a", "a:n_step=2"}, "table a: two tables have this name");
  refused({"a:n_step=5000"}, "table a: an item spans");
}

}  // namespace
}  // namespace perserve::service
