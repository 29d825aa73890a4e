// The replay's priority policy (issue 12): priority eps before the exponent,
// dropping bad update elements (counted in the counts, the counters and the
// update reply), which priorities raise the running max, shuffled samples,
// IS weights whose largest is exactly 1, and reproducible seeds.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "proto/codec.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "server/replay/replay_test_util.h"
#include "server/service/service_test_util.h"
#include "server/service/loopback_transport.h"
#include "service/replay_service.h"
#include "tree/priority_tree.h"

namespace perserve::replay {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using replay_test::IdSchema;
using replay_test::Ids;
using replay_test::Leaf;
using replay_test::MakeReplay;

ReplayOptions Options(int64_t capacity, double alpha) { return ReplayOptions{capacity, alpha, tree::Device::kCpu, 21}; }

TEST(PriorityPolicyTest, CreateRefusesAnEpsThatIsNegativeOrNotFinite) {
  for (double eps : {-1e-9, kNaN, kInf}) {
    ReplayOptions options = Options(8, 0.6);
    options.priority_eps = eps;
    std::unique_ptr<Replay> replay;
    EXPECT_EQ(Replay::Create(options, IdSchema(), &replay).code(), Status::Code::kInvalidArgument) << eps;
  }
}

// Every priority, added or updated, is p + eps before the exponent; a zero is
// then valid, and the running max is over p + eps.
TEST(PriorityPolicyTest, EpsIsAddedBeforeTheExponentAndMakesZeroValid) {
  const double eps = 0.25, alpha = 0.6;
  ReplayOptions options = Options(16, alpha);
  options.priority_eps = eps;
  options.max_priority_from_adds = true;
  auto replay = MakeReplay(options);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(3, Ids(0, 3), std::vector<double>{0.0, 2.0, 3.0}, &first).ok());
  EXPECT_EQ(Leaf(*replay, 0), std::pow(0.0 + eps, alpha));
  EXPECT_EQ(Leaf(*replay, 1), std::pow(2.0 + eps, alpha));
  EXPECT_EQ(replay->max_priority(), 3.0 + eps);

  UpdateCounts counts;
  ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{1, 2}, std::vector<double>{0.0, 5.0}, &counts).ok());
  EXPECT_EQ(counts.applied, 2);
  EXPECT_EQ(Leaf(*replay, 1), std::pow(eps, alpha));
  EXPECT_EQ(Leaf(*replay, 2), std::pow(5.0 + eps, alpha));
  EXPECT_EQ(replay->max_priority(), 5.0 + eps);
  // A priority-less add gets the running max as it is, eps not added twice.
  ASSERT_TRUE(replay->Add(1, Ids(3, 1), {}, &first).ok());
  EXPECT_EQ(Leaf(*replay, 3), std::pow(5.0 + eps, alpha));

  // Items whose TD error was zero stay drawable.
  SampleResult sample;
  bool drew_a_zero = false;
  for (int round = 0; round < 50 && !drew_a_zero; ++round) {
    ASSERT_TRUE(replay->Sample(8, 0.5, &sample).ok());
    for (uint64_t key : sample.keys) drew_a_zero |= key == 0 || key == 1;
  }
  EXPECT_TRUE(drew_a_zero);
  // Negative, NaN and infinite priorities stay refused with eps > 0.
  for (double bad : {-0.1, kNaN, kInf}) {
    EXPECT_EQ(replay->Add(1, Ids(4, 1), std::vector<double>{bad}, &first).code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(replay->UpdatePriorities(std::vector<uint64_t>{0}, std::vector<double>{bad}, &counts).code(),
              Status::Code::kInvalidArgument);
  }
}

TEST(PriorityPolicyTest, WithoutEpsAZeroPriorityIsRefusedAsBefore) {
  auto replay = MakeReplay(Options(8, 0.6));
  uint64_t first = 0;
  const Status add = replay->Add(2, Ids(0, 2), std::vector<double>{1.0, 0.0}, &first);
  EXPECT_EQ(add.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(add.message().find("position 1"), std::string::npos) << add.message();
  ASSERT_TRUE(replay->Add(2, Ids(0, 2), std::vector<double>{1.0, 2.0}, &first).ok());
  UpdateCounts counts;
  EXPECT_EQ(replay->UpdatePriorities(std::vector<uint64_t>{0}, std::vector<double>{0.0}, &counts).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(Leaf(*replay, 0), 1.0);
}

// Capacity 8 and 10 items: keys 0 and 1 are overwritten. An element is
// dropped if its priority is bad, else stale if its key was overwritten, else
// applied.
const std::vector<uint64_t> kUpdateKeys = {0, 2, 3, 4, 5, 6, 7, 1};
const std::vector<double> kUpdatePriorities = {2.0, kNaN, 7.0, kInf, -1.0, 0.0, 8.0, kNaN};

TEST(PriorityPolicyTest, DropBadPrioritiesDropsAndCountsJustThoseElements) {
  ReplayOptions options = Options(8, 1.0);
  options.drop_bad_priorities = true;
  auto replay = MakeReplay(options);
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(8, Ids(0, 8), std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, &first).ok());
  ASSERT_TRUE(replay->Add(2, Ids(8, 2), std::vector<double>{9, 10}, &first).ok());
  UpdateCounts counts{-1, -1, -1};
  const Status status = replay->UpdatePriorities(kUpdateKeys, kUpdatePriorities, &counts);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(counts.applied, 3);  // keys 3, 6 and 7
  EXPECT_EQ(counts.stale, 1);    // key 0 (key 1's NaN counts as dropped)
  EXPECT_EQ(counts.dropped, 4);
  EXPECT_EQ(replay->counters().priorities_updated, 3);
  EXPECT_EQ(replay->counters().stale_updates_dropped, 1);
  EXPECT_EQ(replay->counters().priorities_dropped, 4);
  EXPECT_EQ(Leaf(*replay, 3), 7.0);
  EXPECT_EQ(Leaf(*replay, 7), 8.0);
  // Key 6's zero is the lowest priority the learner can give, not a bad one:
  // the smallest leaf, not dropped (dropped, the item kept its old leaf, 7).
  EXPECT_EQ(Leaf(*replay, 6), std::numeric_limits<double>::min());
  for (int64_t slot : {2, 4, 5}) EXPECT_EQ(Leaf(*replay, slot), static_cast<double>(slot + 1)) << slot;
  EXPECT_EQ(replay->max_priority(), 8.0);  // from the applied elements only

  // A key never issued is still an error for the whole update.
  const double total = replay->tree().Total();
  const Status unknown =
      replay->UpdatePriorities(std::vector<uint64_t>{3, 99}, std::vector<double>{kNaN, 1.0}, &counts);
  EXPECT_EQ(unknown.code(), Status::Code::kNotFound);
  EXPECT_EQ(replay->tree().Total(), total);
  EXPECT_EQ(replay->counters().priorities_dropped, 4);

  // With eps > 0 a zero is fine and applied, not dropped.
  options.priority_eps = 0.5;
  auto shifted = MakeReplay(options);
  ASSERT_TRUE(shifted->Add(2, Ids(0, 2), std::vector<double>{1, 2}, &first).ok());
  ASSERT_TRUE(shifted->UpdatePriorities(std::vector<uint64_t>{0, 1}, std::vector<double>{0.0, -1.0}, &counts).ok());
  EXPECT_EQ(counts.applied, 1);
  EXPECT_EQ(counts.dropped, 1);
  EXPECT_EQ(Leaf(*shifted, 0), 0.5);
}

TEST(PriorityPolicyTest, WithoutDropBadPrioritiesTheWholeUpdateIsRefused) {
  auto replay = MakeReplay(Options(8, 1.0));
  uint64_t first = 0;
  ASSERT_TRUE(replay->Add(8, Ids(0, 8), std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, &first).ok());
  ASSERT_TRUE(replay->Add(2, Ids(8, 2), std::vector<double>{9, 10}, &first).ok());
  const double total = replay->tree().Total();
  UpdateCounts counts{-1, -1, -1};
  const Status status = replay->UpdatePriorities(kUpdateKeys, kUpdatePriorities, &counts);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("position 1"), std::string::npos) << status.message();  // the first bad one
  EXPECT_EQ(replay->tree().Total(), total);
  EXPECT_EQ(Leaf(*replay, 3), 4.0);
  EXPECT_EQ(counts.applied, -1);
  EXPECT_EQ(replay->counters().priorities_updated, 0);
  EXPECT_EQ(replay->counters().priorities_dropped, 0);
  EXPECT_EQ(replay->max_priority(), 1.0);
}

// The service passes the dropped count on in the update reply (a table of
// transitions: the same 10 adds, the FIFO remover taking keys 0 and 1).
TEST(PriorityPolicyTest, TheUpdateReplyCarriesTheDroppedCount) {
  ReplayOptions options = Options(8, 1.0);
  options.drop_bad_priorities = true;
  StepOptions transitions;
  transitions.kind = StepOptions::Kind::kTransition;
  transitions.step_capacity = 8;
  std::unique_ptr<StepReplay> replay;
  ASSERT_TRUE(StepReplay::Create(transitions, options, IdSchema(), &replay).ok());
  uint64_t first = 0;
  const std::vector<std::byte> rows = Ids(0, 10);
  const std::span<const std::byte> all(rows);
  const replay::TableItems add{0, true};
  ASSERT_TRUE(replay->Append(AppendRequest{0, 0, store::StepBatch{8, all.first(64)}, {&add, 1}}, &first).ok());
  ASSERT_TRUE(replay->Append(AppendRequest{0, 8, store::StepBatch{2, all.subspan(64)}, {&add, 1}}, &first).ok());
  ASSERT_EQ(replay->items().size(), 8);
  service::LoopbackTransport transport(1);
  service::ReplayService service(replay.get(), &transport, service::ServiceOptions{1, 0.0});
  const proto::UpdateRequest request{static_cast<int64_t>(kUpdateKeys.size())};
  transport.Push(0, service::service_test::Frame(proto::MessageKind::kUpdateRequest, 7, request,
                                                 {std::as_bytes(std::span(kUpdateKeys)),
                                                  std::as_bytes(std::span(kUpdatePriorities))}));
  bool handled = false;
  ASSERT_TRUE(service.Step(&handled).ok());
  std::deque<std::vector<std::byte>> kept;
  const proto::Frame frame =
      service::service_test::PopReply(transport, 0, proto::MessageKind::kUpdateReply, 7, kept);
  proto::UpdateReply reply;
  ASSERT_TRUE(proto::DecodeMeta(frame, &reply).ok());
  EXPECT_EQ(reply.applied, 3);
  EXPECT_EQ(reply.stale, 1);
  EXPECT_EQ(reply.dropped, 4);
}

// Off (the default): an actor's explicit priority does not change what a later
// priority-less add gets. On: it does. An update raises the max either way.
TEST(PriorityPolicyTest, MaxPriorityFromAddsDecidesWhetherAddsRaiseTheRunningMax) {
  for (bool from_adds : {false, true}) {
    SCOPED_TRACE(from_adds ? "max_priority_from_adds" : "default");
    ReplayOptions options = Options(16, 0.5);
    options.max_priority_from_adds = from_adds;
    auto replay = MakeReplay(options);
    uint64_t first = 0;
    ASSERT_TRUE(replay->Add(1, Ids(0, 1), std::vector<double>{100.0}, &first).ok());
    ASSERT_TRUE(replay->Add(1, Ids(1, 1), {}, &first).ok());
    EXPECT_EQ(Leaf(*replay, 1), from_adds ? 10.0 : 1.0);
    EXPECT_EQ(replay->max_priority(), from_adds ? 100.0 : 1.0);

    UpdateCounts counts;
    ASSERT_TRUE(replay->UpdatePriorities(std::vector<uint64_t>{0}, std::vector<double>{400.0}, &counts).ok());
    ASSERT_TRUE(replay->Add(1, Ids(2, 1), {}, &first).ok());
    EXPECT_EQ(Leaf(*replay, 2), 20.0);
    EXPECT_EQ(replay->max_priority(), 400.0);
  }
}

// 4096 items with varied priorities, so a batch of 512 spans the whole ring.
std::unique_ptr<Replay> FilledReplay(uint64_t seed, std::vector<double>* priorities = nullptr) {
  ReplayOptions options = Options(4096, 0.6);
  options.seed = seed;
  auto replay = MakeReplay(options);
  std::vector<double> given(4096);
  for (size_t j = 0; j < given.size(); ++j) given[j] = 0.5 + static_cast<double>((j * 37) % 101);
  uint64_t first = 0;
  EXPECT_TRUE(replay->Add(4096, Ids(0, 4096), given, &first).ok());
  if (priorities != nullptr) *priorities = given;
  return replay;
}

// The sample is the tree's stratified draws, reordered: the same multiset as
// an unshuffled twin tree's draws with the same seed and counter, but not in
// slot order (about half the neighbours ascend, as in a random permutation).
TEST(PriorityPolicyTest, SamplesAreTheTreesDrawsShuffled) {
  const uint64_t seed = 0xabc;
  std::vector<double> priorities;
  auto replay = FilledReplay(seed, &priorities);
  std::unique_ptr<tree::PriorityTree> twin;
  ASSERT_TRUE(tree::PriorityTree::Create(4096, tree::Device::kCpu, &twin).ok());
  std::vector<int64_t> all(4096);
  for (int64_t j = 0; j < 4096; ++j) all[j] = j;
  ASSERT_TRUE(twin->UpdateWithExponent(all, priorities, 0.6).ok());

  const int64_t batch = 512;
  for (uint64_t counter = 0; counter < 3; ++counter) {
    SampleResult sample;
    ASSERT_TRUE(replay->Sample(batch, 0.4, &sample).ok());
    std::vector<int64_t> drawn(batch);
    std::vector<double> values(batch);
    ASSERT_TRUE(twin->Sample(seed, counter, drawn, values).ok());
    ASSERT_TRUE(std::is_sorted(drawn.begin(), drawn.end()));  // the tree's own order

    std::vector<int64_t> shuffled = sample.slots;
    int ascents = 0;
    for (int64_t i = 1; i < batch; ++i) ascents += shuffled[i] > shuffled[i - 1];
    EXPECT_GT(ascents, 0.4 * (batch - 1)) << "call " << counter;
    EXPECT_LT(ascents, 0.6 * (batch - 1)) << "call " << counter;
    std::sort(shuffled.begin(), shuffled.end());
    EXPECT_EQ(shuffled, drawn) << "call " << counter << ": not the tree's draws";
    // Keys, probabilities and weights moved with their slots.
    for (int64_t i = 0; i < batch; ++i) {
      ASSERT_EQ(sample.keys[i], static_cast<uint64_t>(sample.slots[i]));
      ASSERT_EQ(sample.probabilities[i], Leaf(*replay, sample.slots[i]) / replay->tree().Total());
      ASSERT_EQ(sample.weights[i], std::pow(Leaf(*replay, sample.slots[i]) / replay->tree().Min(), -0.4));
    }
  }
}

TEST(PriorityPolicyTest, TheSameSeedGivesTheSameBatchesAndAnotherSeedOthers) {
  auto a = FilledReplay(5), b = FilledReplay(5), c = FilledReplay(6);
  for (int call = 0; call < 3; ++call) {
    SampleResult sa, sb, sc;
    ASSERT_TRUE(a->Sample(256, 0.5, &sa).ok());
    ASSERT_TRUE(b->Sample(256, 0.5, &sb).ok());
    ASSERT_TRUE(c->Sample(256, 0.5, &sc).ok());
    EXPECT_EQ(sa.keys, sb.keys) << "call " << call;
    EXPECT_EQ(sa.weights, sb.weights) << "call " << call;
    EXPECT_NE(sa.keys, sc.keys) << "call " << call;
  }
}

// A quarter of the items hold the smallest priority. Across replay states
// (other N and totals as items are added and updated), every weight is at
// most 1 exactly, an item holding the minimum gets exactly 1, and beta 0
// gives 1 everywhere.
TEST(PriorityPolicyTest, TheLargestWeightIsExactlyOne) {
  const double min_priority = 0.3;
  auto replay = MakeReplay(Options(2048, 0.6));
  std::mt19937_64 generator(3);
  std::uniform_real_distribution<double> above(min_priority * 1.01, 10.0);
  int64_t min_draws = 0;
  for (int round = 0; round < 40; ++round) {
    std::vector<double> priorities(37);
    for (size_t j = 0; j < priorities.size(); ++j) {
      priorities[j] = (37 * round + j) % 4 == 0 ? min_priority : above(generator);  // by key
    }
    uint64_t first = 0;
    ASSERT_TRUE(replay->Add(37, Ids(37 * round, 37), priorities, &first).ok());
    UpdateCounts counts;
    const std::vector<uint64_t> key = {static_cast<uint64_t>(generator() % replay->next_key())};
    if (key[0] % 4 != 0) {
      ASSERT_TRUE(replay->UpdatePriorities(key, std::vector<double>{above(generator)}, &counts).ok());
    }
    const double min_leaf = std::pow(min_priority, 0.6);
    for (double beta : {0.0, 0.4, 1.0}) {
      SampleResult sample;
      ASSERT_TRUE(replay->Sample(64, beta, &sample).ok());
      for (size_t i = 0; i < sample.weights.size(); ++i) {
        ASSERT_LE(sample.weights[i], 1.0) << "round " << round << ", beta " << beta;
        if (beta == 0.0 || Leaf(*replay, sample.slots[i]) == min_leaf) {
          ASSERT_EQ(sample.weights[i], 1.0) << "round " << round << ", beta " << beta << ", key " << sample.keys[i];
          min_draws += beta != 0.0;
        }
      }
    }
  }
  EXPECT_GT(min_draws, 100);  // the minimum's items were drawn often enough to mean something
}

}  // namespace
}  // namespace perserve::replay
