// ShardSampler's samples of a table drawn by its own selector over the
// shards (ShardSplit::kBySize, kByTotal): a part a shard, each drawn through
// a plain sample request (see shard_sampler.h).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "client/src/portable_shuffle.h"
#include "common/coverage_marks.h"
#include "client/src/shard_sampler.h"

namespace perserve::client_internal {

Status PlanShardParts(std::span<const size_t> positions, ShardSplit split, std::span<const ShardState> shards,
                      std::mt19937_64* rng, ShardParts* parts) {
  const bool by_size = split == ShardSplit::kBySize;
  const size_t count = shards.size();
  std::vector<uint64_t> sizes(count, 0);  // kBySize: exact integer odds
  std::vector<double> totals(count, 0.0);
  uint64_t size_sum = 0;
  double total_sum = 0.0;
  for (size_t s = 0; s < count; ++s) {
    if (!shards[s].CanServe(by_size)) continue;
    sizes[s] = static_cast<uint64_t>(shards[s].size);
    totals[s] = shards[s].total;
    size_sum += sizes[s];
    total_sum += totals[s];
  }
  if (by_size ? size_sum == 0 : !(total_sum > 0.0)) {
    return Status::FailedPrecondition(WhyNoShardServes(shards, by_size));
  }
  if (positions.empty()) return Status::Internal("a split of no positions");
  const size_t last = *std::max_element(positions.begin(), positions.end());
  if (parts->shard_of.size() <= last) {
    parts->shard_of.resize(last + 1, -1);
    parts->share.resize(last + 1, 0.0);
  }
  parts->positions.assign(positions.begin(), positions.end());
  parts->counts.assign(count, 0);
  for (const size_t position : positions) {
    size_t s = 0;
    if (by_size) {
      // A uniform item of the union, and the shard holding it.
      uint64_t item = PortableBelow(rng, size_sum);
      while (item >= sizes[s]) item -= sizes[s++];
    } else {
      // A uniform point of the total mass (53 bits), and the shard whose share holds it.
      double mass = static_cast<double>((*rng)() >> 11) * 0x1.0p-53 * total_sum;
      size_t with_mass = count;
      for (s = 0; s < count; ++s) {
        if (!(totals[s] > 0.0)) continue;
        with_mass = s;
        if (mass < totals[s]) break;
        mass -= totals[s];
      }
      s = std::min(s, with_mass);  // rounding past the last share: the last shard with mass
    }
    parts->shard_of[position] = static_cast<int>(s);
    parts->share[position] = by_size ? static_cast<double>(sizes[s]) / static_cast<double>(size_sum)
                                     : totals[s] / total_sum;
    ++parts->counts[s];
  }
  return Status::Ok();
}

Status ShardSampler::SendParts(Connection* connection, ShardedRequest* request, bool awaited) {
  double time_left = 0.0;
  PERSERVE_RETURN_IF_ERROR(TimeLeft(*connection, request, "before its parts were asked of the shards", &time_left));
  request->planned = true;
  const size_t shards = shards_.size();
  request->ids.assign(shards, 0);
  request->part_ids.assign(shards, 0);
  for (size_t s = 0; s < shards; ++s) {
    const int64_t count = request->parts.counts[s];
    if (count == 0) continue;
    uint64_t& id = request->part_ids[s];
    id = connection->NextRequestId();
    std::vector<std::byte> frame = connection->AcquireBuffer(64);
    proto::EncodeFrame(proto::MessageKind::kSampleRequest, id,
                       proto::SampleRequest{count, request->beta, time_left, awaited, table_}, {}, &frame);
    PERSERVE_RETURN_IF_ERROR(connection->SendTo(static_cast<int>(s), std::move(frame)));
  }
  // Every shard's state, answered at once (after a part served at once: its
  // size after those draws), for the next sample's split.
  for (size_t s = 0; s < shards; ++s) {
    PERSERVE_RETURN_IF_ERROR(SendShardSample(connection, static_cast<int>(s), table_, {}, /*wait=*/false, 0.0,
                                             /*awaited=*/false, &request->ids[s]));
  }
  return Status::Ok();
}

Status ShardSampler::TakeParts(Connection* connection, const Schema& schema, ShardedRequest* request,
                               SampleBatch* batch, std::vector<size_t>* redraw) {
  redraw->clear();
  const ShardParts& parts = request->parts;
  const size_t batch_size = static_cast<size_t>(request->batch_size);
  const uint64_t item_bytes = static_cast<uint64_t>(schema.ItemBytes());
  Status first_error;
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (request->part_ids[s] == 0) continue;
    proto::Frame& frame = frames_[s];
    Status taken = connection->AwaitReply(std::exchange(request->part_ids[s], 0), &messages_[s], &frame);
    if (taken.code() == Status::Code::kFailedPrecondition) {  // never servable: it leaves, its part is drawn again
      PERSERVE_MARK("learner: a shard left a sample's plan");
      shards_[s].ready = false;
      shards_[s].why_not = taken.message();
      for (const size_t position : parts.positions) {
        if (parts.shard_of[position] == static_cast<int>(s)) redraw->push_back(position);
      }
      continue;
    }
    proto::SampleReply reply;
    if (taken.ok() && frame.kind() != proto::MessageKind::kSampleReply) {
      taken = Status::Internal(fmt::format("shard {} answered a sample with message kind {}", s, frame.header.kind));
    }
    if (taken.ok()) taken = proto::DecodeMeta(frame, &reply);
    const uint64_t count = static_cast<uint64_t>(parts.counts[s]);
    if (taken.ok() && (reply.count != parts.counts[s] || frame.bulk.size() != count * (24 + item_bytes))) {
      taken = Status::Internal(fmt::format("shard {} answered {} items ({} bulk bytes) to a request for {}", s,
                                           reply.count, frame.bulk.size(), count));
    }
    if (!taken.ok()) {
      if (first_error.ok()) first_error = taken;
      continue;
    }
    // Keys, weights, probabilities, then each column's rows, as on the wire,
    // into the positions this shard drew for, in order.
    const std::byte* bulk = frame.bulk.data();
    size_t i = 0;
    for (const size_t position : parts.positions) {
      if (parts.shard_of[position] != static_cast<int>(s)) continue;
      double probability = 0.0;
      std::memcpy(&batch->keys[position], bulk + i * 8, 8);
      std::memcpy(&batch->weights[position], bulk + (count + i) * 8, 8);
      std::memcpy(&probability, bulk + (2 * count + i) * 8, 8);
      batch->probabilities[position] = parts.share[position] * probability;
      const std::byte* source = bulk + 3 * count * 8;
      std::byte* target = batch->message.data();
      for (const Column& column : schema.columns) {
        const size_t row = static_cast<size_t>(column.ItemBytes());
        std::memcpy(target + position * row, source + i * row, row);
        source += count * row;
        target += batch_size * row;
      }
      ++i;
    }
  }
  const Status states = TakeAll(connection, request);
  return first_error.ok() ? states : first_error;
}

Status ShardSampler::ReceiveParts(Connection* connection, const Schema& schema, ShardedRequest* request,
                                  SampleBatch* batch) {
  const size_t batch_size = static_cast<size_t>(request->batch_size);
  batch->size = request->batch_size;
  batch->keys.resize(batch_size);
  batch->weights.resize(batch_size);
  batch->probabilities.resize(batch_size);
  batch->message.resize(batch_size * static_cast<size_t>(schema.ItemBytes()));
  std::vector<size_t> redraw;
  while (true) {
    PERSERVE_RETURN_IF_ERROR(TakeParts(connection, schema, request, batch, &redraw));
    if (redraw.empty()) break;
    // Shards left the plan: their positions alone are drawn again over the
    // others (each position's shard is drawn independently, so the kept parts
    // stay a sample of the shards that serve), waiting for one if none serves.
    PERSERVE_RETURN_IF_ERROR(AwaitAServingShard(connection, request));
    PERSERVE_RETURN_IF_ERROR(PlanShardParts(redraw, split_, shards_, &rng_, &request->parts));
    PERSERVE_RETURN_IF_ERROR(SendParts(connection, request, /*awaited=*/true));  // taken just above, next round
  }
  ViewColumns(schema, batch_size, batch);
  return Status::Ok();
}

}  // namespace perserve::client_internal
