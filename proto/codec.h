// Frames (messages.h) to bytes and back. Decoding checks everything a peer
// could get wrong (short buffers, bad magic, another protocol version, sizes
// that do not add up, meta that cereal cannot read) and says which.
#pragma once

#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <cereal/archives/binary.hpp>

#include "perserve/schema.h"
#include "perserve/status.h"
#include "proto/bounded_input_archive.h"
#include "proto/messages.h"

namespace perserve::proto {

struct Frame {
  FrameHeader header;
  std::span<const std::byte> meta;
  std::span<const std::byte> bulk;
  MessageKind kind() const { return static_cast<MessageKind>(header.kind); }
};

// Parses the header and slices meta and bulk out of `bytes` (no copy). A frame
// of another protocol version fails with kFailedPrecondition, but `frame`'s
// header is still filled in, so the caller can answer its request id.
Status DecodeFrame(std::span<const std::byte> bytes, Frame* frame);

// Encodes header + meta + the bulk parts, concatenated, into `out` (resized;
// its capacity is reused across calls).
void EncodeFrameMeta(MessageKind kind, uint64_t request_id, const std::string& meta,
                     std::initializer_list<std::span<const std::byte>> bulk, std::vector<std::byte>* out);

// Like EncodeFrameMeta, with `tail_bytes` more bulk bytes left for the caller
// to fill in place (returned), so large payloads are written straight into the
// frame instead of being copied there.
std::span<std::byte> EncodeFrameWithTail(MessageKind kind, uint64_t request_id, const std::string& meta,
                                         std::initializer_list<std::span<const std::byte>> bulk, size_t tail_bytes,
                                         std::vector<std::byte>* out);

// The frame up to its tail: the header counts the tail's `tail_bytes`, which
// the sender sends right after these bytes in the same message (a sample
// reply's rows, sent from the store through an MPI datatype). `out` ends
// `room_bytes` after where EncodeFrameWithTail's tail would begin: room for
// the sender's own use (the reply's rows it copies), not zeroed where `out`
// already held that many bytes, as a recycled buffer does.
void EncodeFrameHead(MessageKind kind, uint64_t request_id, const std::string& meta,
                     std::initializer_list<std::span<const std::byte>> bulk, size_t tail_bytes,
                     std::vector<std::byte>* out, size_t room_bytes = 0);

template <class Meta>
std::string SerializeMeta(const Meta& meta) {
  std::ostringstream stream;
  {
    cereal::BinaryOutputArchive archive(stream);
    archive(meta);
  }
  return std::move(stream).str();
}

template <class Meta>
void EncodeFrame(MessageKind kind, uint64_t request_id, const Meta& meta,
                 std::initializer_list<std::span<const std::byte>> bulk, std::vector<std::byte>* out) {
  EncodeFrameMeta(kind, request_id, SerializeMeta(meta), bulk, out);
}

// Reads the frame's meta as `Meta` with every length and boolean range-checked
// (BoundedInputArchive); a truncated or garbled meta, or trailing bytes, is an
// error, never an exception.
template <class Meta>
Status DecodeMeta(const Frame& frame, Meta* meta) {
  try {
    BoundedInputArchive archive(frame.meta);
    archive(*meta);
    if (archive.bytes_left() != 0) return Status::InvalidArgument("message meta has trailing bytes");
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("message meta is truncated or garbled: ") + e.what());
  }
  return Status::Ok();
}

// The schema as sent at join (cereal), and back.
std::string SerializeSchema(const Schema& schema);
Status DeserializeSchema(std::span<const std::byte> bytes, Schema* schema);

// One table of a server, as the join tells the clients (protocol 9): its
// name, what its samples return, the columns an actor sends with each item it
// creates in it, its sampler, whether it takes priority updates and how many
// draws an item takes before it leaves (a learner over several shards splits
// a sample by them: docs/shards.md).
struct TableSchemas {
  std::string name;
  // Its items are computed over steps (n-step transitions, sequences):
  // actors name them; false: its items are the steps themselves
  // (transitions: actors add them).
  bool steps = false;
  Schema samples;
  Schema items;  // may have no columns
  // "prioritized", "uniform", "fifo", "lifo", "max_heap" or "min_heap".
  std::string sampler = "prioritized";
  // Priority updates accepted (prioritized and the heaps; not uniform, fifo
  // or lifo, which keep no priorities).
  bool updatable = true;
  // An item leaves after this many draws (1: a queue); 0: never.
  int64_t max_times_sampled = 0;
  std::string ToString() const;
};

// What a server serves, as every server broadcasts it at join: the schema its
// adds take (a transition's; a step's when it stores step streams), the
// schema its samples return (the same for transitions; the item layout of
// docs/steps.md for step streams), and the columns an actor sends with each
// item it creates over its steps (none for transitions). `steps`, `samples`
// and `items` are the default table's (tables[0]'s): single-table code reads
// them.
struct ServedSchemas {
  // Items are computed over steps (n-step transitions, sequences): actors
  // append steps and name the items; false: the items are the steps
  // themselves (transitions: actors add them, and may append).
  bool steps = false;
  Schema adds;
  Schema samples;
  Schema items;  // may have no columns
  // Step streams restored from a checkpoint: each stream's steps so far, by
  // stream (a server's client index: its actors first); empty: all at 0.
  // An actor's steps_appended starts at its stream's. Not part of ToString
  // (servers agree on schemas, not on their streams).
  std::vector<int64_t> stream_steps;
  // An append of at most this many steps may send its step columns apart
  // (AppendMeta::columns_follow): the ring's free slots past its newest step.
  int64_t max_steps_apart = 0;
  // Every table over the server's steps, in the server's order: requests name
  // a table by its index here. tables[0] is the default table; at least one.
  std::vector<TableSchemas> tables = {};
  // The index of the table named `name`, or -1.
  int TableIndex(std::string_view name) const;
  // Servers agree on this (shards serve the same tables).
  std::string ToString() const;
};
// The default table (named "default") of a server of one table, from the
// top-level fields: what a server of one table sets `tables` to.
TableSchemas DefaultTable(const ServedSchemas& served, std::string sampler = "prioritized", bool updatable = true);
// A server of transitions, one prioritized table: it samples what it adds.
ServedSchemas TransitionSchemas(const Schema& schema);
// A server of one table over steps (`steps`: its items are computed over
// them), with max_steps_apart 0: the top-level fields and its DefaultTable.
ServedSchemas OneTableSchemas(bool steps, const Schema& adds, const Schema& samples, const Schema& items);
std::string SerializeServedSchemas(const ServedSchemas& served);
// Decodes and validates (adds and samples as Schema::Validate; items too when
// it has columns; transitions: samples equal to adds, no items, no stream
// steps; stream steps >= 0; at least one table, each table's schemas as the
// top level's, names non-empty and unique, samplers known, max_times_sampled
// >= 0, tables[0] equal to the top-level steps, samples and items).
Status DeserializeServedSchemas(std::span<const std::byte> bytes, ServedSchemas* served);

// Copies `count` values of T from the front of a bulk region (which need not
// be aligned for T) into `out`, and advances the region past them. Fails if
// the region is shorter.
template <typename T>
Status TakeArray(std::span<const std::byte>* bulk, size_t count, std::vector<T>* out) {
  if (bulk->size() / sizeof(T) < count) return Status::InvalidArgument("message bulk is shorter than its count says");
  out->resize(count);
  if (count > 0) std::memcpy(out->data(), bulk->data(), count * sizeof(T));
  *bulk = bulk->subspan(count * sizeof(T));
  return Status::Ok();
}

}  // namespace perserve::proto
