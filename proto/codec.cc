#include "proto/codec.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string_view>

#include <cereal/types/vector.hpp>
#include <fmt/format.h>

namespace perserve {

template <class Archive>
void serialize(Archive& ar, Column& column) {
  uint8_t dtype = static_cast<uint8_t>(column.dtype);
  ar(column.name, dtype, column.shape);
  column.dtype = static_cast<DType>(dtype);
}

template <class Archive>
void serialize(Archive& ar, Schema& schema) {
  ar(schema.columns);
}

namespace proto {

Status DecodeFrame(std::span<const std::byte> bytes, Frame* frame) {
  if (bytes.size() < kFrameHeaderBytes) {
    return Status::InvalidArgument(fmt::format("message of {} bytes is shorter than a frame header ({} bytes)",
                                               bytes.size(), kFrameHeaderBytes));
  }
  std::memcpy(&frame->header, bytes.data(), kFrameHeaderBytes);
  const FrameHeader& header = frame->header;
  if (header.magic != kMagic) {
    return Status::InvalidArgument(fmt::format("message has bad magic {:#x}: not a perserve frame", header.magic));
  }
  if (header.version != kProtocolVersion) {
    return Status::FailedPrecondition(fmt::format("message speaks protocol version {}, this side speaks {}",
                                                  header.version, kProtocolVersion));
  }
  if (header.reserved != 0) {
    return Status::InvalidArgument(fmt::format("message header's reserved field is {:#x}, not 0", header.reserved));
  }
  const uint64_t body = bytes.size() - kFrameHeaderBytes;
  if (header.meta_bytes > body || header.bulk_bytes != body - header.meta_bytes) {
    return Status::InvalidArgument(fmt::format("message sizes do not add up: header says {} meta + {} bulk bytes, "
                                               "{} bytes follow the header",
                                               header.meta_bytes, header.bulk_bytes, body));
  }
  frame->meta = bytes.subspan(kFrameHeaderBytes, header.meta_bytes);
  frame->bulk = bytes.subspan(kFrameHeaderBytes + header.meta_bytes);
  return Status::Ok();
}

void EncodeFrameMeta(MessageKind kind, uint64_t request_id, const std::string& meta,
                     std::initializer_list<std::span<const std::byte>> bulk, std::vector<std::byte>* out) {
  EncodeFrameWithTail(kind, request_id, meta, bulk, 0, out);
}

namespace {

// The frame's header, meta and bulk parts into `out`, followed by
// `room_bytes` more bytes of room; the header counts `tail_bytes` of tail.
std::byte* EncodeFrameParts(MessageKind kind, uint64_t request_id, const std::string& meta,
                            std::initializer_list<std::span<const std::byte>> bulk, size_t tail_bytes,
                            size_t room_bytes, std::vector<std::byte>* out) {
  FrameHeader header;
  header.kind = static_cast<uint16_t>(kind);
  header.request_id = request_id;
  header.meta_bytes = static_cast<uint32_t>(meta.size());
  for (const auto& part : bulk) header.bulk_bytes += part.size();
  const size_t head_bytes = kFrameHeaderBytes + meta.size() + header.bulk_bytes;
  header.bulk_bytes += tail_bytes;
  out->resize(head_bytes + room_bytes);
  std::byte* cursor = out->data();
  std::memcpy(cursor, &header, kFrameHeaderBytes);
  cursor += kFrameHeaderBytes;
  std::memcpy(cursor, meta.data(), meta.size());
  cursor += meta.size();
  for (const auto& part : bulk) {
    if (!part.empty()) std::memcpy(cursor, part.data(), part.size());
    cursor += part.size();
  }
  return cursor;
}

}  // namespace

std::span<std::byte> EncodeFrameWithTail(MessageKind kind, uint64_t request_id, const std::string& meta,
                                         std::initializer_list<std::span<const std::byte>> bulk, size_t tail_bytes,
                                         std::vector<std::byte>* out) {
  return {EncodeFrameParts(kind, request_id, meta, bulk, tail_bytes, /*room_bytes=*/tail_bytes, out), tail_bytes};
}

void EncodeFrameHead(MessageKind kind, uint64_t request_id, const std::string& meta,
                     std::initializer_list<std::span<const std::byte>> bulk, size_t tail_bytes,
                     std::vector<std::byte>* out, size_t room_bytes) {
  EncodeFrameParts(kind, request_id, meta, bulk, tail_bytes, room_bytes, out);
}

std::string SerializeSchema(const Schema& schema) { return SerializeMeta(schema); }

namespace {

constexpr std::string_view kSamplers[] = {"prioritized", "uniform", "fifo", "lifo", "max_heap", "min_heap"};

// A table's schemas as a server's top level has them: samples valid, items
// valid when it has columns, a table of transitions sampling what actors add
// with no item columns. `what` names the table in the error.
Status CheckTableSchemas(bool steps, const Schema& adds, const Schema& samples, const Schema& items,
                         const std::string& what) {
  const auto named = [&what](const Status& status) {
    return status.ok() ? status : Status::InvalidArgument(fmt::format("{}: {}", what, status.message()));
  };
  PERSERVE_RETURN_IF_ERROR(named(samples.Validate()));
  if (!items.columns.empty()) PERSERVE_RETURN_IF_ERROR(named(items.Validate()));
  if (!steps && (samples.ToString() != adds.ToString() || !items.columns.empty())) {
    return Status::InvalidArgument(
        fmt::format("{}: a table of transitions must sample what it adds, with no item columns", what));
  }
  return Status::Ok();
}

}  // namespace

std::string TableSchemas::ToString() const {
  return fmt::format("table \"{}\" ({}, {}{}{}): samples {}; item columns {}", name,
                     steps ? "over steps" : "transitions", sampler, updatable ? "" : ", no updates",
                     max_times_sampled > 0 ? fmt::format(", max_times_sampled {}", max_times_sampled) : "",
                     samples.ToString(), items.columns.empty() ? "none" : items.ToString());
}

int ServedSchemas::TableIndex(std::string_view name) const {
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].name == name) return static_cast<int>(t);
  }
  return -1;
}

std::string ServedSchemas::ToString() const {
  std::string text = !steps ? adds.ToString()
                            : fmt::format("steps {}; samples {}; item columns {}", adds.ToString(), samples.ToString(),
                                          items.columns.empty() ? "none" : items.ToString());
  // One table named "default" is what every server before protocol 9 served: said as before.
  if (tables.size() == 1 && tables[0].name == "default" && tables[0].sampler == "prioritized" && tables[0].updatable &&
      tables[0].max_times_sampled == 0) {
    return text;
  }
  for (const TableSchemas& table : tables) text += "; " + table.ToString();
  return text;
}

TableSchemas DefaultTable(const ServedSchemas& served, std::string sampler, bool updatable) {
  return TableSchemas{"default", served.steps, served.samples, served.items, std::move(sampler), updatable};
}

ServedSchemas TransitionSchemas(const Schema& schema) { return OneTableSchemas(false, schema, schema, Schema{}); }

ServedSchemas OneTableSchemas(bool steps, const Schema& adds, const Schema& samples, const Schema& items) {
  ServedSchemas served{steps, adds, samples, items, {}, 0, {}};
  served.tables.push_back(DefaultTable(served));
  return served;
}

template <class Archive>
void serialize(Archive& ar, TableSchemas& table) {
  ar(table.name, table.steps, table.samples, table.items, table.sampler, table.updatable, table.max_times_sampled);
}

template <class Archive>
void serialize(Archive& ar, ServedSchemas& served) {
  ar(served.steps, served.adds, served.samples, served.items, served.stream_steps, served.max_steps_apart,
     served.tables);
}

std::string SerializeServedSchemas(const ServedSchemas& served) { return SerializeMeta(served); }

Status DeserializeServedSchemas(std::span<const std::byte> bytes, ServedSchemas* served) {
  Frame frame;
  frame.meta = bytes;
  PERSERVE_RETURN_IF_ERROR(DecodeMeta(frame, served));
  PERSERVE_RETURN_IF_ERROR(served->adds.Validate());
  PERSERVE_RETURN_IF_ERROR(served->samples.Validate());
  if (!served->items.columns.empty()) PERSERVE_RETURN_IF_ERROR(served->items.Validate());
  if (!served->steps && (served->samples.ToString() != served->adds.ToString() || !served->items.columns.empty())) {
    return Status::InvalidArgument("a server of transitions must sample what it adds, with no item columns");
  }
  if (served->max_steps_apart < 0) {
    return Status::InvalidArgument(fmt::format("{} steps apart: a count is >= 0", served->max_steps_apart));
  }
  for (size_t s = 0; s < served->stream_steps.size(); ++s) {
    if (served->stream_steps[s] < 0) {
      return Status::InvalidArgument(
          fmt::format("stream {} holds {} steps: a count is >= 0", s, served->stream_steps[s]));
    }
  }
  if (served->tables.empty()) return Status::InvalidArgument("a server serves at least one table; it listed none");
  for (size_t t = 0; t < served->tables.size(); ++t) {
    const TableSchemas& table = served->tables[t];
    if (table.name.empty()) return Status::InvalidArgument(fmt::format("table {} has an empty name", t));
    if (served->TableIndex(table.name) != static_cast<int>(t)) {
      return Status::InvalidArgument(fmt::format("tables {} and {} are both named \"{}\": a name is a table's own",
                                                 served->TableIndex(table.name), t, table.name));
    }
    if (std::find(std::begin(kSamplers), std::end(kSamplers), table.sampler) == std::end(kSamplers)) {
      return Status::InvalidArgument(fmt::format("table \"{}\" samples by \"{}\", not one of prioritized, uniform, "
                                                 "fifo, lifo, max_heap, min_heap",
                                                 table.name, table.sampler));
    }
    if (table.max_times_sampled < 0) {
      return Status::InvalidArgument(fmt::format("table \"{}\" has max_times_sampled {}: a count is >= 0 (0: none)",
                                                 table.name, table.max_times_sampled));
    }
    PERSERVE_RETURN_IF_ERROR(CheckTableSchemas(table.steps, served->adds, table.samples, table.items,
                                               fmt::format("table \"{}\"", table.name)));
  }
  const TableSchemas& first = served->tables[0];
  if (first.steps != served->steps || first.samples.ToString() != served->samples.ToString() ||
      first.items.ToString() != served->items.ToString()) {
    TableSchemas expected = first;
    expected.steps = served->steps;
    expected.samples = served->samples;
    expected.items = served->items;
    return Status::InvalidArgument(fmt::format("the default table (\"{}\", the first) must be what the top level "
                                               "says: {}; it is {}",
                                               first.name, expected.ToString(), first.ToString()));
  }
  return Status::Ok();
}

Status DeserializeSchema(std::span<const std::byte> bytes, Schema* schema) {
  Frame frame;
  frame.meta = bytes;
  PERSERVE_RETURN_IF_ERROR(DecodeMeta(frame, schema));
  return schema->Validate();
}

}  // namespace proto
}  // namespace perserve
