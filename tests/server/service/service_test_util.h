// Helpers the service tests share: frames to push into a LoopbackTransport
// and replies popped from it, checked for kind and request id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <initializer_list>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "proto/codec.h"
#include "replay/replay.h"
#include "server/replay/step_test_util.h"
#include "server/service/loopback_transport.h"
#include "service/replay_service.h"

namespace perserve::service::service_test {

template <class Meta>
std::vector<std::byte> Frame(proto::MessageKind kind, uint64_t request_id, const Meta& meta,
                             std::initializer_list<std::span<const std::byte>> bulk = {}) {
  std::vector<std::byte> frame;
  proto::EncodeFrame(kind, request_id, meta, bulk, &frame);
  return frame;
}

// An append request's frame: `count` steps (bulk: the wire layout, each
// column's rows; empty with columns_follow) from index `first_step` of the
// sender's stream, each its own item (a transition add), with priorities
// (empty: none).
inline std::vector<std::byte> AddFrame(uint64_t request_id, int64_t first_step, int64_t count,
                                       std::span<const std::byte> columns, std::span<const double> priorities = {},
                                       double timeout_seconds = 0.0, bool columns_follow = false) {
  proto::AppendMeta meta;
  meta.first_step = first_step;
  meta.steps = count;
  meta.groups = {proto::ItemGroup{0, 0, /*item_per_step=*/true, /*has_priorities=*/!priorities.empty()}};
  meta.columns_follow = columns_follow;
  meta.timeout_seconds = timeout_seconds;
  const std::span<const std::byte> one[] = {columns};
  const proto::ItemGroupSpans group{{}, priorities, {}};
  std::vector<std::byte> frame;
  proto::EncodeAppend(request_id, meta, columns_follow ? std::span<const std::span<const std::byte>>{} : one,
                      std::span(&group, 1), &frame);
  return frame;
}

// Pops `client`'s oldest reply into `kept` (the decoded frame points into it)
// and checks its kind and request id; an empty frame when there is none.
inline proto::Frame PopReply(LoopbackTransport& transport, int client, proto::MessageKind kind, uint64_t request_id,
                             std::deque<std::vector<std::byte>>& kept) {
  std::deque<std::vector<std::byte>>& outbox = transport.outbox(client);
  EXPECT_FALSE(outbox.empty()) << "client " << client << ": no reply for request " << request_id;
  if (outbox.empty()) return {};
  kept.push_back(std::move(outbox.front()));
  outbox.pop_front();
  proto::Frame frame;
  EXPECT_TRUE(proto::DecodeFrame(kept.back(), &frame).ok());
  EXPECT_EQ(frame.kind(), kind) << "client " << client << ", request " << request_id;
  EXPECT_EQ(frame.header.request_id, request_id) << "client " << client;
  return frame;
}

// A replay of transitions (CPU tree, alpha 1) behind a ReplayService on a
// LoopbackTransport, and the steps and replies a test needs.
class ServiceFixture : public ::testing::Test {
 protected:
  // roles: what each client joined as (empty: unknown, counted as both).
  void Start(int clients, int64_t capacity, const Schema& schema, ServiceOptions options,
             const std::vector<ClientRole>& roles = {}) {
    transport_ = std::make_unique<LoopbackTransport>(clients);
    for (size_t client = 0; client < roles.size(); ++client) transport_->SetRole(static_cast<int>(client), roles[client]);
    replay::step_test::StepFixture fixture;
    const Status created = replay::step_test::MakeTransitionReplay(schema, capacity, clients, &fixture);
    ASSERT_TRUE(created.ok()) << created.ToString();
    replay_ = std::move(fixture.steps);
    service_ = std::make_unique<ReplayService>(replay_.get(), transport_.get(), options);
    sent_steps_.assign(static_cast<size_t>(clients), 0);
  }

  // The table's items.
  replay::Replay& items() { return replay_->mutable_items(); }

  // An add of `count` transitions from `client`, pushed into its inbox; its
  // stream goes on after them (RefusedSteps: not, when the server refuses it).
  void PushAdd(int client, uint64_t request_id, int64_t count, std::span<const std::byte> columns,
               std::span<const double> priorities = {}, double timeout_seconds = 0.0) {
    transport_->Push(client, AddFrame(request_id, sent_steps_[client], count, columns, priorities, timeout_seconds));
    sent_steps_[client] += count;
  }
  // `client`'s add of `count` steps was refused: its stream stays where it was.
  void RefusedSteps(int client, int64_t count) { sent_steps_[client] -= count; }

  // Default options but for the minimum size, and no stats lines.
  static ServiceOptions Options(int64_t min_size) {
    ServiceOptions options;
    options.min_size_to_sample = min_size;
    options.stats_interval_seconds = 0.0;
    return options;
  }

  void Step() {
    bool handled = false;
    ASSERT_TRUE(service_->Step(&handled).ok());
  }

  proto::Frame Reply(int client, proto::MessageKind kind, uint64_t request_id) {
    return PopReply(*transport_, client, kind, request_id, kept_);
  }

  // The add reply to request_id.
  proto::AddReply Added(int client, uint64_t request_id) {
    proto::AddReply added;
    EXPECT_TRUE(proto::DecodeMeta(Reply(client, proto::MessageKind::kAddReply, request_id), &added).ok());
    return added;
  }

  // The first column (an int64 id) of the held item `key`, read where the
  // table says its row is: its step's, in the ring (-1: not held).
  int64_t StoredId(uint64_t key) {
    const int64_t item_slot = items().SlotOf(key);
    if (item_slot < 0) return -1;
    std::vector<int64_t> step_slots;
    replay_->StepSlots(std::span<const int64_t>(&item_slot, 1), &step_slots);
    int64_t id = -1;
    std::memcpy(&id, replay_->steps().columns().Rows(0, step_slots[0], 1).data(), sizeof(id));
    return id;
  }

  // The status an error reply to request_id carries.
  Status ErrorStatus(int client, uint64_t request_id) {
    proto::ErrorReply error;
    EXPECT_TRUE(proto::DecodeMeta(Reply(client, proto::MessageKind::kErrorReply, request_id), &error).ok());
    return Status::FromCode(error.code, error.message);
  }

  std::unique_ptr<LoopbackTransport> transport_;
  std::unique_ptr<replay::StepReplay> replay_;
  std::unique_ptr<ReplayService> service_;
  std::vector<int64_t> sent_steps_;  // per client: the steps its pushed adds carried
  std::deque<std::vector<std::byte>> kept_;  // the replies' bytes, which decoded frames point into
};

}  // namespace perserve::service::service_test
