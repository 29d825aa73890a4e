// The loopback transport's model of MPI (server/service/loopback_transport.h
// lists the rules): the service's tests are only as faithful as this.
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "server/service/service_test_util.h"

namespace perserve::service {
namespace {

constexpr int kClient = 0;

std::vector<std::byte> Bytes(size_t size, int value) { return std::vector<std::byte>(size, std::byte(value)); }

// What TryReceive takes next: its first byte and tag (-1, -1 when nothing).
std::pair<int, int> ReceiveNext(LoopbackTransport& transport) {
  std::vector<std::byte> buffer;
  int tag = 0;
  bool received = false;
  EXPECT_TRUE(transport.TryReceive(kClient, &buffer, &tag, &received).ok());
  if (!received) return {-1, -1};
  return {static_cast<int>(buffer.at(0)), tag};
}

// ProbeColumns then ReceiveColumns: the first byte of the columns message (-1 when none).
int ReceiveColumns(LoopbackTransport& transport) {
  bool arrived = false;
  int64_t bytes = 0;
  EXPECT_TRUE(transport.ProbeColumns(kClient, &arrived, &bytes).ok());
  if (!arrived) return -1;
  std::vector<std::byte> into(static_cast<size_t>(bytes));
  const std::span<std::byte> region(into);
  EXPECT_TRUE(transport.ReceiveColumns(kClient, std::span(&region, 1)).ok());
  return static_cast<int>(into.at(0));
}

TEST(LoopbackTransportTest, AMatchedProbeClaimsItsMessageForReceiveColumnsAlone) {
  LoopbackTransport transport(1);
  transport.Push(kClient, Bytes(8, 1), proto::kAddColumnsTag);
  bool arrived = false;
  int64_t bytes = 0;
  ASSERT_TRUE(transport.ProbeColumns(kClient, &arrived, &bytes).ok());
  EXPECT_TRUE(arrived);
  EXPECT_EQ(bytes, 8);
  EXPECT_EQ(transport.claimed(kClient), 1u);
  EXPECT_EQ(ReceiveNext(transport), std::make_pair(-1, -1)) << "a claimed message is no longer TryReceive's";
  EXPECT_EQ(transport.waiting(kClient), 1u);
  EXPECT_EQ(ReceiveColumns(transport), 1);
  EXPECT_EQ(transport.waiting(kClient), 0u);
}

TEST(LoopbackTransportTest, ProbingAgainAnswersTheClaimedMessageAndTheNextGoesToTryReceive) {
  LoopbackTransport transport(1);
  transport.Push(kClient, Bytes(8, 1), proto::kAddColumnsTag);
  transport.Push(kClient, Bytes(16, 2), proto::kAddColumnsTag);
  bool arrived = false;
  int64_t bytes = 0;
  ASSERT_TRUE(transport.ProbeColumns(kClient, &arrived, &bytes).ok());
  ASSERT_TRUE(transport.ProbeColumns(kClient, &arrived, &bytes).ok());
  EXPECT_EQ(bytes, 8) << "the message claimed first, not the next";
  EXPECT_EQ(transport.claimed(kClient), 1u);
  // What made issue 24's defect 1: the second columns message is the loop's.
  EXPECT_EQ(ReceiveNext(transport), std::make_pair(2, proto::kAddColumnsTag));
  EXPECT_EQ(ReceiveColumns(transport), 1);
}

TEST(LoopbackTransportTest, ReceiveColumnsNeedsAClaimFirst) {
  LoopbackTransport transport(1);
  transport.Push(kClient, Bytes(8, 1), proto::kAddColumnsTag);
  EXPECT_EQ(transport.ReceiveColumns(kClient, {}).code(), Status::Code::kInternal);
  EXPECT_EQ(transport.waiting(kClient), 1u);
}

TEST(LoopbackTransportTest, OneTagIsNonOvertakingWhileAnotherTagMayPassIt) {
  LoopbackTransport transport(1);
  transport.Push(kClient, Bytes(4, 1));  // add 1
  transport.Push(kClient, Bytes(4, 2));  // add 2
  transport.Push(kClient, Bytes(8, 3), proto::kAddColumnsTag);
  transport.Push(kClient, Bytes(8, 4), proto::kAddColumnsTag);
  EXPECT_EQ(ReceiveColumns(transport), 3) << "the columns pass both requests, in their own order";
  EXPECT_EQ(ReceiveNext(transport), std::make_pair(1, proto::kRequestTag));
  EXPECT_EQ(ReceiveNext(transport), std::make_pair(2, proto::kRequestTag));
  EXPECT_EQ(ReceiveNext(transport), std::make_pair(4, proto::kAddColumnsTag));
  EXPECT_EQ(ReceiveNext(transport), std::make_pair(-1, -1));
}

TEST(LoopbackTransportTest, AReceiveMatchesAMessageThatArrivedAfterAProbeFoundNothing) {
  LoopbackTransport transport(1);
  EXPECT_EQ(ReceiveColumns(transport), -1);
  transport.Push(kClient, Bytes(8, 5), proto::kAddColumnsTag);
  EXPECT_EQ(ReceiveNext(transport), std::make_pair(5, proto::kAddColumnsTag));
}

TEST(LoopbackTransportTest, ALargeSendCompletesOnlyWhenTheClientTakesIt) {
  LoopbackTransport transport(1);
  transport.SetEagerLimit(1000);
  const auto reply = [](size_t bulk) {
    return service_test::Frame(proto::MessageKind::kSampleReply, 1, proto::SampleReply{1},
                               {std::span<const std::byte>(Bytes(bulk, 0))});
  };
  ASSERT_TRUE(transport.SendSampleReply(kClient, reply(10)).ok());
  EXPECT_EQ(transport.UnreadSampleReplies(kClient).replies, 0) << "eager: complete at once";
  ASSERT_TRUE(transport.SendSampleReply(kClient, reply(2000)).ok());
  EXPECT_EQ(transport.UnreadSampleReplies(kClient).replies, 1) << "rendezvous: waits for the client";
  transport.outbox(kClient).pop_front();
  EXPECT_EQ(transport.UnreadSampleReplies(kClient).replies, 1);
  transport.outbox(kClient).pop_front();
  EXPECT_EQ(transport.UnreadSampleReplies(kClient).replies, 0);
}

// Several shards' transports index a client differently: the simulation
// names each by its own number, which the service's descriptions then use.
TEST(LoopbackTransportTest, AClientIsNamedAsSetAndOthersByIndex) {
  LoopbackTransport transport(2);
  transport.SetName(1, "client 4");
  EXPECT_EQ(transport.ClientName(0), "client 0");
  EXPECT_EQ(transport.ClientName(1), "client 4");
}

// A shard sample's reply with rows goes through SendSampleReply, which
// MpiTransport tracks until received: unread as a sample's reply is. A shard's
// state (no rows) is not.
TEST(LoopbackTransportTest, AShardSampleReplyWithRowsCountsAsUnreadAndAStateDoesNot) {
  LoopbackTransport transport(1);
  const auto reply = [](int64_t count) {
    return service_test::Frame(proto::MessageKind::kShardSampleReply, 1, proto::ShardSampleReply{count},
                               {std::span<const std::byte>(Bytes(static_cast<size_t>(count) * 24, 0))});
  };
  ASSERT_TRUE(transport.Send(kClient, reply(0)).ok());
  EXPECT_EQ(transport.UnreadSampleReplies(kClient).replies, 0);
  ASSERT_TRUE(transport.SendSampleReply(kClient, reply(2)).ok());
  EXPECT_EQ(transport.UnreadSampleReplies(kClient).replies, 1);
}

// The client library's sends: past the eager limit one completes only when
// the service receives it, and lent bytes are read only then (an actor that
// changed them before sees them stored changed); up to it they are copied at
// once and the send is complete.
TEST(LoopbackTransportTest, ALentSendPastTheEagerLimitIsReadWhenReceivedAndCompletesThen) {
  LoopbackTransport transport(1);
  transport.SetEagerLimit(4);
  std::vector<std::byte> lent = Bytes(8, 1);
  const uint64_t token = transport.PushLent(kClient, {std::span<const std::byte>(lent)}, proto::kAddColumnsTag);
  EXPECT_FALSE(transport.SendCompleted(token));
  lent[0] = std::byte(7);  // what the rule forbids: the bytes change before the send completes
  EXPECT_EQ(ReceiveColumns(transport), 7) << "read where they lie when received";
  EXPECT_TRUE(transport.SendCompleted(token));

  std::vector<std::byte> small = Bytes(4, 2);
  const uint64_t eager = transport.PushLent(kClient, {std::span<const std::byte>(small)}, proto::kAddColumnsTag);
  EXPECT_TRUE(transport.SendCompleted(eager)) << "eager: copied and complete at once";
  small[0] = std::byte(9);
  EXPECT_EQ(ReceiveNext(transport), std::make_pair(2, proto::kAddColumnsTag));

  const uint64_t frame = transport.PushTracked(kClient, Bytes(5, 3));
  EXPECT_FALSE(transport.SendCompleted(frame));
  EXPECT_EQ(ReceiveNext(transport), std::make_pair(3, proto::kRequestTag));
  EXPECT_TRUE(transport.SendCompleted(frame));
}

// A client receives its replies in the order they were sent: a reply whose
// rows are read only when it is received (in flight) goes ahead of the replies
// sent after it, and NextReplyInFlight says when it is the next.
TEST(LoopbackTransportTest, AReplyInFlightIsReceivedBeforeTheRepliesSentAfterIt) {
  std::unique_ptr<replay::Replay> replay;
  ASSERT_TRUE(replay::Replay::Create(replay::ReplayOptions{4, 1.0, tree::Device::kCpu, 1},
                                     Schema{{{"x", DType::kUInt8, {}}}}, &replay)
                  .ok());
  LoopbackTransport transport(1);
  transport.SendRowsInPlace(true);
  ASSERT_TRUE(transport.Send(kClient, Bytes(1, 1)).ok());
  const std::span<const std::byte> row = replay->store().Rows(0, 0, 1);
  const ReplyBlock block{row.data(), row.size()};
  uint64_t token = 0;
  ASSERT_TRUE(transport.SendSampleReplyBlocks(kClient, Bytes(1, 2), 1, std::span(&block, 1), &token).ok());
  ASSERT_TRUE(transport.Send(kClient, Bytes(1, 3)).ok());
  EXPECT_FALSE(transport.NextReplyInFlight(kClient)) << "the first reply, sent before it, is next";
  transport.outbox(kClient).pop_front();
  EXPECT_TRUE(transport.NextReplyInFlight(kClient)) << "sent before the third reply";
  ASSERT_TRUE(transport.Deliver(kClient));
  ASSERT_EQ(transport.outbox(kClient).size(), 2u);
  EXPECT_EQ(transport.outbox(kClient).front().at(0), std::byte(2)) << "the delivered reply goes ahead of the third";
  EXPECT_EQ(transport.outbox(kClient).front().size(), 2u) << "its head, then its row from the store";
  EXPECT_FALSE(transport.NextReplyInFlight(kClient));
}

}  // namespace
}  // namespace perserve::service
