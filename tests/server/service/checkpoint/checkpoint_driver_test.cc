// CheckpointDriver: when checkpoints begin, who hears of them, and SIGTERM's.
#include "service/checkpoint/checkpoint_driver.h"

#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "server/service/checkpoint/checkpoint_test_util.h"

namespace perserve::service {
namespace {

using checkpoint_test::CheckpointTest;

class CheckpointDriverTest : public CheckpointTest {
 protected:
  void Make(double every_seconds = 0.0, ServiceClock clock = {}) {
    replay_ = checkpoint_test::MakeReplay(64);
    checkpoint_test::AddItems(replay_.get(), 0, 40, &rng_);
    driver_ = std::make_unique<CheckpointDriver>(
        replay_.get(),
        CheckpointDriverOptions{dir_.string(), 0, 1, every_seconds, std::chrono::microseconds(1), std::move(clock)},
        CheckpointDriver::Hooks{[] { return checkpoint_test::StateOf(); },
                                [this](int client, uint64_t id, const Status& result) {
                                  answers_.push_back({client, id, result.code()});
                                },
                                [this] { ++final_begun_; }});
  }
  // Steps (`stopping` or not) until `until` holds, for at most 30 s.
  void StepUntil(const std::function<bool()>& until, bool stopping = false) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!until() && std::chrono::steady_clock::now() < deadline) driver_->Step(stopping);
    ASSERT_TRUE(until());
  }
  void StepUntilIdle() {
    StepUntil([this] { return !driver_->active(); });
  }
  struct Answer {
    int client;
    uint64_t request_id;
    Status::Code code;
  };

  std::unique_ptr<replay::StepReplay> replay_;
  std::unique_ptr<CheckpointDriver> driver_;
  std::vector<Answer> answers_;
  int final_begun_ = 0;
};

TEST_F(CheckpointDriverTest, WithoutADirectoryEveryRequestIsRefused) {
  replay_ = checkpoint_test::MakeReplay(8);
  CheckpointDriver driver(replay_.get(), {}, {});
  EXPECT_FALSE(driver.enabled());
  EXPECT_EQ(driver.Request("test").code(), Status::Code::kFailedPrecondition);
  driver.Step(false);  // nothing to do
}

TEST_F(CheckpointDriverTest, AWaiterHearsWhenItsCheckpointIsCompleteAndALaterOneWaitsForTheNext) {
  Make();
  driver_->AddWaiter(1, 10);
  ASSERT_TRUE(driver_->Request("asked").ok());
  EXPECT_TRUE(driver_->active());
  driver_->AddWaiter(2, 20);  // came while the first is written: waits for the next
  ASSERT_TRUE(driver_->Request("asked again").ok());
  StepUntil([this] { return !answers_.empty(); });
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].client, 1);
  EXPECT_EQ(answers_[0].code, Status::Code::kOk);
  EXPECT_FALSE(driver_->active()) << "the next begins at the next pass, between operations";
  driver_->Step(false);
  EXPECT_TRUE(driver_->active());
  StepUntilIdle();
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(answers_[1].client, 2);
  EXPECT_EQ(answers_[1].code, Status::Code::kOk);
  EXPECT_EQ(driver_->writer()->last_path(), (dir_ / "shard-0-of-1" / "checkpoint-000001").string());
}

TEST_F(CheckpointDriverTest, AClosingClientsWaitersAreAnsweredAtOnceAndTheCheckpointGoesOn) {
  Make();
  driver_->AddWaiter(1, 10);
  ASSERT_TRUE(driver_->Request("asked").ok());
  driver_->AddWaiter(1, 11);
  driver_->ForgetClient(1, Status::FailedPrecondition("closed"));
  ASSERT_EQ(answers_.size(), 2u);
  EXPECT_EQ(answers_[0].code, Status::Code::kFailedPrecondition);
  EXPECT_TRUE(driver_->active());
  StepUntilIdle();
  EXPECT_EQ(answers_.size(), 2u) << "nobody else waited";
}

TEST_F(CheckpointDriverTest, SigtermsCheckpointBeginsAfterTheOneBeingWrittenAndSaysSo) {
  Make();
  ASSERT_TRUE(driver_->Request("periodic").ok());
  ASSERT_TRUE(driver_->Request("SIGTERM", /*final=*/true).ok());
  EXPECT_EQ(final_begun_, 0) << "one is being written: SIGTERM's comes after it";
  EXPECT_FALSE(driver_->writing_final());
  EXPECT_TRUE(driver_->final_unfinished()) << "the service must not end before it is written";
  StepUntil([this] { return final_begun_ > 0; }, /*stopping=*/true);
  EXPECT_EQ(final_begun_, 1);
  EXPECT_TRUE(driver_->writing_final());
  StepUntilIdle();
  EXPECT_FALSE(driver_->writing_final());
  EXPECT_FALSE(driver_->final_unfinished());
}

TEST_F(CheckpointDriverTest, StoppingAnswersTheWaitersOfANextCheckpointAndWantsNoMore) {
  Make();
  ASSERT_TRUE(driver_->Request("first").ok());
  driver_->AddWaiter(3, 30);
  ASSERT_TRUE(driver_->Request("second").ok());
  driver_->Stop(Status::Unavailable("stopped"));
  ASSERT_EQ(answers_.size(), 1u);
  EXPECT_EQ(answers_[0].code, Status::Code::kUnavailable);
  StepUntilIdle();
  driver_->Step(true);
  EXPECT_FALSE(driver_->active()) << "the second was not begun";
}

TEST_F(CheckpointDriverTest, APeriodicCheckpointBeginsOnItsTimerButNotOnceStopping) {
  Make(/*every_seconds=*/0.001);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  driver_->Step(/*stopping=*/true);
  EXPECT_FALSE(driver_->active());
  driver_->Step(false);
  EXPECT_TRUE(driver_->active());
}

TEST_F(CheckpointDriverTest, ThePeriodicTimerAndTheSlicesRunOnTheServicesClock) {
  // A clock far from the steady clock's now, which moves only when told.
  auto now = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  Make(/*every_seconds=*/0.5, ServiceClock([&now] { return now; }));
  now += std::chrono::milliseconds(499);
  driver_->Step(false);
  EXPECT_FALSE(driver_->active()) << "0.499 s of the service's clock";
  EXPECT_EQ(driver_->periodic_requests(), 0);
  now += std::chrono::milliseconds(1);
  driver_->Step(false);
  EXPECT_EQ(driver_->periodic_requests(), 1);
  // The slice's budget is the service's time too: standing still, that Step
  // wrote the whole checkpoint (its helper thread's part aside).
  driver_->writer()->AwaitFinish();
  driver_->Step(false);
  EXPECT_FALSE(driver_->active()) << "written in at most two passes of a clock that stood still";
  EXPECT_EQ(driver_->writer()->longest_step().count(), 0) << "measured on the service's clock";
  now += std::chrono::milliseconds(499);
  driver_->Step(false);
  EXPECT_EQ(driver_->periodic_requests(), 1) << "the next is due 0.5 s after the first";
  now += std::chrono::milliseconds(1);
  driver_->Step(false);
  EXPECT_EQ(driver_->periodic_requests(), 2);
  EXPECT_TRUE(driver_->active());
}

}  // namespace
}  // namespace perserve::service
