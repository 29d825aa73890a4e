// HeldAdds: the held adds' queue and the ledger of the columns apart each
// client owes, over a LoopbackTransport (the MPI rules it models: a matched
// probe claims, columns messages of one client are non-overtaking).
#include "service/held_adds.h"

#include <optional>

#include <gtest/gtest.h>

#include "server/service/loopback_transport.h"

namespace perserve::service {
namespace {

constexpr int kClient = 0;

std::vector<std::byte> Columns(uint8_t tag, size_t bytes = 4) { return std::vector<std::byte>(bytes, std::byte{tag}); }

// A held append of one step whose columns come apart.
HeldAdd AddApart(uint64_t request_id) {
  proto::DecodedAppend append;
  append.meta.first_step = proto::AppendMeta::kAtEnd;
  append.meta.steps = 1;
  append.meta.groups = {proto::ItemGroup{0, 0, /*item_per_step=*/true, false}};
  append.groups = {proto::DecodedItems{0, /*item_per_step=*/true, {}, {}, {}}};
  append.meta.columns_follow = true;
  return HeldAdd{kClient, request_id, {}, append, {}, HeldAdd::Clock::time_point::max()};
}

constexpr int kMaxEarly = 2;

class HeldAddsTest : public ::testing::Test {
 protected:
  void PushColumns(uint8_t tag) { transport_.Push(kClient, Columns(tag), proto::kAddColumnsTag); }
  // What the loop's receive takes next from the client, routed.
  HeldAdds::Routed ReceiveAndRoute() {
    std::vector<std::byte> buffer;
    int tag = 0;
    bool received = false;
    EXPECT_TRUE(transport_.TryReceive(kClient, &buffer, &tag, &received).ok());
    EXPECT_TRUE(received);
    EXPECT_EQ(tag, proto::kAddColumnsTag);
    return held_.Route(kClient, buffer, kMaxEarly);
  }
  // Receives the claimed columns of the add at the ledger's front: their first byte.
  uint8_t ReceiveInPlace() {
    bool arrived = false;
    int64_t bytes = 0;
    EXPECT_TRUE(transport_.ProbeColumns(kClient, &arrived, &bytes).ok());
    EXPECT_TRUE(arrived);
    std::vector<std::byte> into(static_cast<size_t>(bytes));
    const std::span<std::byte> region(into);
    EXPECT_TRUE(transport_.ReceiveColumns(kClient, std::span(&region, 1)).ok());
    return static_cast<uint8_t>(into.at(0));
  }

  LoopbackTransport transport_{1};
  HeldAdds held_{&transport_, 1};
};

TEST_F(HeldAddsTest, ColumnsTakenByTheLoopGoToTheOldestHeldAddThenTheNext) {
  held_.Hold(AddApart(1));
  held_.Hold(AddApart(2));
  PushColumns(1);
  PushColumns(2);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kKept);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kKept);
  auto it = held_.begin();
  ASSERT_TRUE(it->columns);
  EXPECT_EQ(it->columns->at(0), std::byte{1}) << "the oldest add takes the first columns";
  ++it;
  ASSERT_TRUE(it->columns);
  EXPECT_EQ(it->columns->at(0), std::byte{2});
  EXPECT_FALSE(held_.Owes(kClient));
}

TEST_F(HeldAddsTest, ARefusedAddsColumnsAreDroppedAfterTheEarlierHeldAddsNotBefore) {
  held_.Hold(AddApart(1));  // owes its columns
  held_.Refuse(kClient);    // an add refused on arrival: its columns come second
  PushColumns(1);
  PushColumns(2);
  const uint64_t first = held_.front().ticket;
  EXPECT_TRUE(held_.ColumnsReady(kClient, first)) << "the held add's columns come first, and are here";
  EXPECT_EQ(transport_.waiting(kClient), 2u) << "nothing was dropped";
  auto it = held_.begin();
  const HeldAdd add = held_.Take(&it);
  EXPECT_EQ(ReceiveInPlace(), 1) << "the held add receives its own columns";
  held_.Settle(kClient, add.ticket, /*taken=*/true);
  EXPECT_EQ(transport_.waiting(kClient), 0u) << "the refused add's columns, now first, were dropped";
  EXPECT_FALSE(held_.Owes(kClient));
}

TEST_F(HeldAddsTest, ARefusedAddsColumnsRoutedByTheLoopAreDropped) {
  held_.Refuse(kClient);  // not arrived yet: owed, to drop
  EXPECT_TRUE(held_.Owes(kClient));
  held_.Hold(AddApart(2));
  PushColumns(1);
  PushColumns(2);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kDropped);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kKept);
  EXPECT_EQ(held_.front().columns->at(0), std::byte{2});
}

TEST_F(HeldAddsTest, AnAddWaitsWhileColumnsOwedBeforeItHaveNotCome) {
  held_.Hold(AddApart(1));
  held_.Hold(AddApart(2));
  const uint64_t second = std::next(held_.begin())->ticket;
  EXPECT_FALSE(held_.ColumnsReady(kClient, second));
  PushColumns(1);
  EXPECT_FALSE(held_.ColumnsReady(kClient, second)) << "the columns here are the first add's";
  EXPECT_TRUE(held_.ColumnsReady(kClient, held_.front().ticket));
  EXPECT_EQ(transport_.claimed(kClient), 0u) << "asking claims nothing";
}

TEST_F(HeldAddsTest, AHeldAddRefusedBeforeItsColumnsCameHasThemDroppedInItsPlace) {
  held_.Hold(AddApart(1));
  held_.Hold(AddApart(2));
  auto it = held_.begin();
  const HeldAdd refused = held_.Take(&it);
  held_.Refuse(kClient, refused.ticket);  // e.g. past its timeout
  PushColumns(1);
  PushColumns(2);
  EXPECT_TRUE(held_.ColumnsReady(kClient, held_.front().ticket)) << "the refused add's columns were dropped first";
  EXPECT_EQ(transport_.waiting(kClient), 1u);
  EXPECT_EQ(ReceiveInPlace(), 2);
}

TEST_F(HeldAddsTest, ColumnsNotTakenByTheirAddAreDroppedAndTheNextAddsStayInOrder) {
  held_.Hold(AddApart(1));
  held_.Hold(AddApart(2));
  PushColumns(1);
  PushColumns(2);
  auto it = held_.begin();
  const HeldAdd add = held_.Take(&it);
  ASSERT_TRUE(held_.ColumnsReady(kClient, add.ticket));
  held_.Settle(kClient, add.ticket, /*taken=*/false);  // refused after its checks: its columns dropped
  EXPECT_EQ(transport_.waiting(kClient), 1u);
  EXPECT_TRUE(held_.ColumnsReady(kClient, held_.front().ticket));
  EXPECT_EQ(ReceiveInPlace(), 2);
}

TEST_F(HeldAddsTest, TakeAllLeavesTheOwedColumnsToBeDroppedAsTheyCome) {
  held_.Hold(AddApart(1));
  held_.Hold(AddApart(2));
  EXPECT_EQ(held_.count(kClient), 2);
  EXPECT_EQ(held_.TakeAll().size(), 2u);
  EXPECT_EQ(held_.count(kClient), 0);
  PushColumns(1);
  PushColumns(2);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kDropped);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kDropped);
  PushColumns(3);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kEarly) << "nothing owed any more: kept for the next add apart";
}

// Issue 33, finding 8: a columns message that comes before its append
// request is kept (kEarly) for the client's next append apart, in order;
// more than max_early waiting is stray. An early message never goes to an
// add whose columns the ledger owes: the ledger's adds come first.
TEST_F(HeldAddsTest, ColumnsBeforeTheirAppendAreKeptForTheClientsNextAppendsApartInOrder) {
  PushColumns(1);
  PushColumns(2);
  PushColumns(3);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kEarly);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kEarly);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kStray) << "a third one past the 2 kept";
  EXPECT_EQ(held_.early(), 2u);
  EXPECT_FALSE(held_.Owes(kClient)) << "early columns are nobody's debt";
  std::optional<std::vector<std::byte>> first = held_.TakeEarly(kClient);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->at(0), std::byte{1});
  // An add apart held meanwhile owes its columns: the next message is its, not kept early.
  held_.Hold(AddApart(5));
  PushColumns(9);
  EXPECT_EQ(ReceiveAndRoute(), HeldAdds::Routed::kKept);
  EXPECT_EQ(held_.front().columns->at(0), std::byte{9});
  std::optional<std::vector<std::byte>> second = held_.TakeEarly(kClient);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->at(0), std::byte{2});
  EXPECT_FALSE(held_.TakeEarly(kClient));
  EXPECT_EQ(held_.early(), 0u);
  // Another client's early columns are its own.
  LoopbackTransport two(2);
  HeldAdds held(&two, 2);
  EXPECT_EQ(held.Route(1, Columns(4), 1), HeldAdds::Routed::kEarly);
  EXPECT_FALSE(held.TakeEarly(0));
  EXPECT_EQ(held.TakeEarly(1)->at(0), std::byte{4});
}

TEST_F(HeldAddsTest, AnAddAppliedAtOnceOwesItsColumnsOnlyWhileApplied) {
  const uint64_t ticket = held_.Owe(kClient);
  EXPECT_FALSE(held_.ColumnsReady(kClient, ticket)) << "not arrived";
  PushColumns(7);
  ASSERT_TRUE(held_.ColumnsReady(kClient, ticket));
  EXPECT_EQ(ReceiveInPlace(), 7);
  held_.Settle(kClient, ticket, /*taken=*/true);
  EXPECT_FALSE(held_.Owes(kClient));
}

}  // namespace
}  // namespace perserve::service
