// The wire protocol between perserve clients and replay ranks.
//
// Every message is one MPI message (tag kRequestTag client -> server,
// kReplyTag server -> client) holding one frame:
//
//   offset  size  field
//        0     4  magic        0x56525350 ("PSRV" little-endian)
//        4     2  version      kProtocolVersion
//        6     2  kind         MessageKind
//        8     8  request_id   chosen by the client; a reply repeats it
//       16     4  meta_bytes   length of the cereal-encoded meta struct
//       20     4  reserved     0
//       24     8  bulk_bytes   length of the raw bulk region after the meta
//       32     .  meta         cereal BinaryArchive of the kind's struct below
//        .     .  bulk         raw column bytes, keys, priorities (layout per kind)
//
// Bulk data (transition columns, keys, priorities, weights) is never put
// through cereal: it is laid out raw after the meta, so it is copied once into
// the send buffer and read in place on the other side. Integers and doubles
// are in the sender's native (little-endian) byte order.
#pragma once

#include <cstdint>
#include <string>

#include <cereal/types/string.hpp>

namespace perserve::proto {

constexpr uint32_t kMagic = 0x56525350;
// 2: timeouts on adds and samples, dropped priorities; 3: shards (keys carry
// their shard, shard samples, servers' alpha and capacity in the join); 4: an
// add's columns may follow in their own message (AddRequest::columns_follow);
// 5: a sample request says whether its reply is awaited (rows from the store);
// 6: step streams (the join broadcasts ServedSchemas, AddRequest appends steps);
// 7: the join's schemas carry a restored server's streams' step counts
// (ServedSchemas::stream_steps); 8: one item model: every add is an append
// (kAppendRequest, proto/append.h; kAddRequest is gone), an append's step
// columns may come apart, and the join says how many steps may
// (ServedSchemas::max_steps_apart); 9: several tables over one step store
// (the join lists them, ServedSchemas::tables; samples, updates and info
// name their table by index; an append's items come in groups, one a table:
// proto/append.h).
constexpr uint16_t kProtocolVersion = 9;
constexpr int kRequestTag = 7301;
constexpr int kReplyTag = 7302;
// An append's step columns sent apart: no frame, only the bytes (each step
// column's rows, in schema order), right after the append request with
// columns_follow, so the server can receive them straight into its ring.
constexpr int kAddColumnsTag = 7303;
constexpr size_t kFrameHeaderBytes = 32;

enum class MessageKind : uint16_t {
  // 1: the add request of protocol 7 and before (an append now).
  kAddReply = 2,       // AddReply: an append's items
  kSampleRequest = 3,  // SampleRequest
  kSampleReply = 4,    // SampleReply; bulk: count uint64 keys, count double IS weights,
                       // count double probabilities, then each column in schema order
  kUpdateRequest = 5,  // UpdateRequest; bulk: count uint64 keys, then count double priorities
  kUpdateReply = 6,    // UpdateReply
  kCloseRequest = 7,   // Empty; the server replies kCloseReply after everything sent before it
  kCloseReply = 8,     // Empty
  kErrorReply = 9,     // ErrorReply: the request failed and nothing of it was applied
  kShardSampleRequest = 10,  // ShardSampleRequest; bulk: count doubles, the fractions of the shard's
                             // total to draw at (a learner's share of a sample over several shards)
  kShardSampleReply = 11,    // ShardSampleReply; bulk: count uint64 keys, count double leaves, then
                             // each column in schema order, items in the request's order
  kCheckpointRequest = 12,   // Empty; answered once a checkpoint begun after it is durable
  kCheckpointReply = 13,     // CheckpointReply
  kAppendRequest = 14,       // AppendMeta (proto/append.h, which states the bulk); answered kAddReply
};

// Keys carry their shard: the top kShardKeyBits bits hold the index of the
// server rank (in rank order among the servers) that issued the key, the rest
// its sequence number there. With one server every key is its sequence number.
constexpr int kShardKeyBits = 10;
constexpr int kShardKeyShift = 64 - kShardKeyBits;
constexpr int kMaxShards = 1 << kShardKeyBits;
constexpr uint64_t kLocalKeyMask = (uint64_t{1} << kShardKeyShift) - 1;
constexpr int ShardOfKey(uint64_t key) { return static_cast<int>(key >> kShardKeyShift); }
constexpr uint64_t LocalKey(uint64_t key) { return key & kLocalKeyMask; }
constexpr uint64_t ShardKey(int shard, uint64_t local) {
  return (static_cast<uint64_t>(shard) << kShardKeyShift) | local;
}

struct FrameHeader {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  uint16_t kind = 0;
  uint64_t request_id = 0;
  uint32_t meta_bytes = 0;
  uint32_t reserved = 0;
  uint64_t bulk_bytes = 0;
};
static_assert(sizeof(FrameHeader) == kFrameHeaderBytes, "the frame header is 32 bytes, no padding");

struct Empty {
  template <class Archive>
  void serialize(Archive&) {}
};

struct AddReply {
  uint64_t first_key = 0;  // the items' keys are first_key .. first_key + count - 1
  int64_t count = 0;       // the items the append created
  template <class Archive>
  void serialize(Archive& ar) { ar(first_key, count); }
};

struct SampleRequest {
  int64_t batch_size = 0;
  double beta = 0.0;
  // > 0: the server answers DEADLINE_EXCEEDED (and drops the request) if it
  // still waits this many seconds after it arrived.
  double timeout_seconds = 0.0;
  // The learner waits for this reply now (it receives every reply up to it
  // before leaving the library), so the reply's rows may go from the store,
  // pinned until received. A prefetched request's reply may be left unread
  // while the learner waits on others (a barrier with the actors): its rows
  // are copied, so no add ever waits on it.
  bool awaited = false;
  // The table to draw from: its index in the join's ServedSchemas::tables
  // (0: the default table).
  int32_t table = 0;
  template <class Archive>
  void serialize(Archive& ar) { ar(batch_size, beta, timeout_seconds, awaited, table); }
};

struct SampleReply {
  int64_t count = 0;
  template <class Archive>
  void serialize(Archive& ar) { ar(count); }
};

// A learner's share of a sample drawn over several shards: `count` items, the
// i-th at mass fractions[i] * (the shard's total when it draws). count 0 asks
// only for the shard's state: at once, or with `wait` once the shard holds
// its --min-size-to-sample items (FAILED_PRECONDITION if it never can). All
// of it about `table` (a learner's Info too: a count of 0, no wait).
struct ShardSampleRequest {
  int64_t count = 0;
  bool wait = false;
  double timeout_seconds = 0.0;  // as SampleRequest's
  bool awaited = false;          // as SampleRequest's
  int32_t table = 0;             // as SampleRequest's
  template <class Archive>
  void serialize(Archive& ar) { ar(count, wait, timeout_seconds, awaited, table); }
};

// The items drawn (keys, leaf values, columns) and the shard's state when it
// drew them: what the learner needs for global probabilities and weights.
struct ShardSampleReply {
  int64_t count = 0;
  int64_t size = 0;         // items the shard holds
  int64_t items_added = 0;  // items it ever stored
  double total = 0.0;       // its tree's total
  double min_leaf = 0.0;    // its smallest leaf ever set (+inf when none)
  bool ready = false;       // size >= its --min-size-to-sample
  template <class Archive>
  void serialize(Archive& ar) { ar(count, size, items_added, total, min_leaf, ready); }
};

// New priorities for keys of `table` (an index, as SampleRequest's): a key
// names an item only together with its table.
struct UpdateRequest {
  int64_t count = 0;
  int32_t table = 0;
  template <class Archive>
  void serialize(Archive& ar) { ar(count, table); }
};

struct UpdateReply {
  int64_t applied = 0;
  int64_t stale = 0;    // keys whose items had been overwritten: dropped
  int64_t dropped = 0;  // bad priorities dropped under --drop-bad-priorities
  template <class Archive>
  void serialize(Archive& ar) { ar(applied, stale, dropped); }
};

struct CheckpointReply {
  std::string path;  // the checkpoint's directory on the server's file system
  template <class Archive>
  void serialize(Archive& ar) { ar(path); }
};

struct ErrorReply {
  int32_t code = 0;  // perserve::Status::Code
  std::string message;
  template <class Archive>
  void serialize(Archive& ar) { ar(code, message); }
};

// What every rank contributes to the collective join (MPI_Allgather of two
// int32 per rank), before the server ranks broadcast their schemas.
enum class Role : int32_t { kServer = 1, kActor = 2, kLearner = 3, kBystander = 4 };

}  // namespace perserve::proto
