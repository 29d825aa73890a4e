#include "service/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include <cereal/archives/binary.hpp>
#include <fmt/format.h>

#include "service/checkpoint/checkpoint_layout.h"

namespace perserve::service {
namespace fs = std::filesystem;
using namespace checkpoint_layout;

namespace {

constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

Status Errno(const std::string& what) {
  const int error = errno;
  const std::string text = fmt::format("{}: {}", what, std::strerror(error));
  return error == ENOSPC || error == EDQUOT ? Status::ResourceExhausted(text) : Status::Unavailable(text);
}

Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + path);
  const int synced = ::fsync(fd);
  const Status status = synced == 0 ? Status::Ok() : Errno("fsync " + path);
  ::close(fd);
  return status;
}

}  // namespace

namespace checkpoint_layout {

int64_t CheckpointNumber(const std::string& name) {
  constexpr std::string_view prefix = "checkpoint-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t number = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    number = number * 10 + (name[i] - '0');
  }
  return number;
}

std::string ColumnFile(size_t column) { return fmt::format("column-{}.bin", column); }

std::string NewestComplete(const std::string& shard_dir) {
  std::error_code error;
  int64_t newest = -1;
  std::string path;
  for (const auto& entry : fs::directory_iterator(shard_dir, error)) {
    const int64_t number = CheckpointNumber(entry.path().filename().string());
    if (number > newest && fs::exists(entry.path() / kManifest)) {
      newest = number;
      path = entry.path().string();
    }
  }
  return path;
}

int64_t RowsPerSlice(const Schema& schema) {
  return std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, schema.ItemBytes()));
}

}  // namespace checkpoint_layout

void Hash64::Update(std::span<const std::byte> bytes) {
  size_t i = 0;
  while (carried_ > 0 && carried_ < 8 && i < bytes.size()) carry_[carried_++] = bytes[i++];
  if (carried_ == 8) {
    uint64_t word = 0;
    std::memcpy(&word, carry_, 8);
    hash_ = (hash_ ^ word) * kFnvPrime;
    carried_ = 0;
  }
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes.data() + i, 8);
    hash_ = (hash_ ^ word) * kFnvPrime;
  }
  while (i < bytes.size()) carry_[carried_++] = bytes[i++];
}

uint64_t Hash64::Finish() const {
  uint64_t hash = hash_;
  for (size_t i = 0; i < carried_; ++i) hash = (hash ^ static_cast<uint64_t>(carry_[i])) * kFnvPrime;
  return hash;
}

std::string ShardDirectory(const std::string& dir, int shard, int shards) {
  return (fs::path(dir) / fmt::format("shard-{}-of-{}", shard, shards)).string();
}

CheckpointWriter::CheckpointWriter(std::string dir, int shard, int shards, int64_t item_capacity)
    : shard_dir_(ShardDirectory(dir, shard, shards)),
      shard_(shard),
      shards_(shards),
      last_path_(NewestComplete(shard_dir_)),
      keys_(static_cast<size_t>(std::max<int64_t>(0, item_capacity))),
      leaves_(static_cast<size_t>(std::max<int64_t>(0, item_capacity))),
      pending_(static_cast<size_t>(std::max<int64_t>(0, item_capacity))) {}

CheckpointWriter::~CheckpointWriter() {
  if (finishing_.valid()) finishing_.wait();
  if (phase_ != Phase::kIdle) Abandon();
}

template <class Write>
Status CheckpointWriter::Timed(Write&& write) {
  const auto start = std::chrono::steady_clock::now();
  const Status status = write();
  longest_step_ = std::max(longest_step_, std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - start));
  if (!status.ok()) Abandon();
  return status;
}

Status CheckpointWriter::Begin(const replay::StepReplay& replay, CheckpointState state) {
  if (active()) return Status::FailedPrecondition("a checkpoint is being written already");
  began_ = std::chrono::steady_clock::now();
  std::error_code error;
  // A directory created here is durable only once its parent is synced: else
  // a crash could lose the shard directory, and a checkpoint with it.
  std::vector<fs::path> created;
  for (fs::path dir = shard_dir_; !dir.empty() && !fs::exists(dir, error); dir = dir.parent_path()) {
    created.push_back(dir);
  }
  fs::create_directories(shard_dir_, error);
  if (error) return Status::Unavailable(fmt::format("cannot create {}: {}", shard_dir_, error.message()));
  for (const fs::path& dir : created) {
    const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
    PERSERVE_RETURN_IF_ERROR(FsyncPath(parent.string()));
  }
  int64_t number = 0;
  for (const auto& entry : fs::directory_iterator(shard_dir_, error)) {
    std::string name = entry.path().filename().string();
    if (name.ends_with(kPartialSuffix)) {
      fs::remove_all(entry.path(), error);  // a write cut short earlier: never complete
      name.resize(name.size() - std::string_view(kPartialSuffix).size());
    }
    number = std::max(number, CheckpointNumber(name) + 1);
  }
  path_ = (fs::path(shard_dir_) / fmt::format("checkpoint-{:06}", number)).string();
  partial_ = path_ + kPartialSuffix;
  if (!fs::create_directory(partial_, error) || error) {
    return Status::Unavailable(fmt::format("cannot create {}: {}", partial_, error ? error.message() : "exists"));
  }
  phase_ = Phase::kItems;
  parts_.clear();
  parts_.emplace_back("state.bin");
  ring_parts_ = parts_.size();
  parts_.emplace_back(kStepStateFile);
  for (const std::string& name : StepRingWriter::RowPartNames(replay.step_schema())) parts_.emplace_back(name);
  item_parts_ = parts_.size();
  parts_.emplace_back(kItemSlotsFile);
  parts_.emplace_back("leaves.bin");
  const replay::Replay& items = replay.items();
  for (size_t c = 0; c < items.store().schema().columns.size(); ++c) parts_.emplace_back(ColumnFile(c));
  parts_.emplace_back(kFreeSlotsFile);
  for (Part& part : parts_) {
    const std::string file = (fs::path(partial_) / part.name).string();
    part.fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (part.fd < 0) {
      const Status status = Errno("create " + file);
      Abandon();
      return status;
    }
  }
  // The snapshot: which slot holds which key, and the leaves as they are now
  // (priority updates change them, not the rows).
  slots_ = items.slots_used();
  cursor_ = 0;
  if (static_cast<int64_t>(keys_.size()) < slots_) {
    keys_.resize(static_cast<size_t>(items.capacity()));
    leaves_.resize(static_cast<size_t>(items.capacity()));
    pending_.resize(static_cast<size_t>(items.capacity()));
  }
  for (int64_t slot = 0; slot < slots_; ++slot) {
    keys_[slot] = items.KeyAt(slot);
    pending_[slot] = keys_[slot] != replay::Replay::kNoKey ? 1 : 0;
  }
  free_slots_.assign(1, slots_);
  free_slots_.insert(free_slots_.end(), items.free_slots().begin(), items.free_slots().end());
  Status status = items.tree().ReadLeaves(0, std::span(leaves_).first(static_cast<size_t>(slots_)));
  // The small state goes first, whole.
  state.format = kCheckpointFormat;
  state.schema = replay.step_schema().ToString();
  state.capacity = replay.options().step_capacity;
  state.alpha = items.alpha();
  state.size = items.size();
  state.replay = items.State();
  std::ostringstream bytes;
  {
    cereal::BinaryOutputArchive archive(bytes);
    archive(state);
  }
  const std::string encoded = bytes.str();
  if (status.ok()) status = Append(&parts_[0], std::as_bytes(std::span(encoded.data(), encoded.size())));
  if (status.ok()) {
    const std::string ring_state = ring_.Begin(replay);
    status = Append(&parts_[ring_parts_], std::as_bytes(std::span(ring_state.data(), ring_state.size())));
  }
  longest_step_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began_);
  if (!status.ok()) Abandon();
  return status;
}

Status CheckpointWriter::Append(Part* part, std::span<const std::byte> bytes) {
  part->hash.Update(bytes);
  part->bytes += static_cast<int64_t>(bytes.size());
  if (part->buffer.size() + bytes.size() <= static_cast<size_t>(kSliceBytes)) {
    part->buffer.insert(part->buffer.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  }
  PERSERVE_RETURN_IF_ERROR(Flush(part));
  while (!bytes.empty()) {
    const ssize_t wrote = ::write(part->fd, bytes.data(), bytes.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return Errno(fmt::format("write {}/{}", partial_, part->name));
    bytes = bytes.subspan(static_cast<size_t>(wrote));
  }
  return Status::Ok();
}

Status CheckpointWriter::Flush(Part* part) {
  std::span<const std::byte> bytes = part->buffer;
  while (!bytes.empty()) {
    const ssize_t wrote = ::write(part->fd, bytes.data(), bytes.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return Errno(fmt::format("write {}/{}", partial_, part->name));
    bytes = bytes.subspan(static_cast<size_t>(wrote));
  }
  part->buffer.clear();
  return Status::Ok();
}

Status CheckpointWriter::WriteItem(const replay::Replay& items, int64_t slot) {
  pending_[slot] = 0;
  const struct {
    uint64_t key;
    int64_t slot;
  } record{keys_[slot], slot};
  static_assert(sizeof(record) == 16);
  PERSERVE_RETURN_IF_ERROR(Append(&parts_[item_parts_], std::as_bytes(std::span(&record, 1))));
  PERSERVE_RETURN_IF_ERROR(Append(&parts_[item_parts_ + 1], std::as_bytes(std::span(&leaves_[slot], 1))));
  for (size_t c = 0; c < items.store().schema().columns.size(); ++c) {
    PERSERVE_RETURN_IF_ERROR(Append(&parts_[item_parts_ + 2 + c], items.store().Rows(static_cast<int>(c), slot, 1)));
  }
  return Status::Ok();
}

Status CheckpointWriter::WriteItems(const replay::StepReplay& replay, int64_t until) {
  for (; cursor_ < until; ++cursor_) {
    if (pending_[cursor_] != 0) PERSERVE_RETURN_IF_ERROR(WriteItem(replay.items(), cursor_));
  }
  return Status::Ok();
}

StepRingWriter::Sink CheckpointWriter::StepSink() {
  return [this](size_t part, std::span<const std::byte> bytes) { return Append(&parts_[ring_parts_ + 1 + part], bytes); };
}

Status CheckpointWriter::BeforeWrite(const replay::StepReplay& replay, int64_t steps,
                                     std::span<const int64_t> item_slots) {
  if (phase_ != Phase::kItems && phase_ != Phase::kSteps) return Status::Ok();
  return Timed([&] {
    if (steps > 0 && !ring_.done()) PERSERVE_RETURN_IF_ERROR(ring_.BeforeWrite(replay.steps(), steps, StepSink()));
    for (const int64_t slot : item_slots) {
      if (slot < slots_ && pending_[slot] != 0) PERSERVE_RETURN_IF_ERROR(WriteItem(replay.items(), slot));
    }
    return Status::Ok();
  });
}

Status CheckpointWriter::Step(const replay::StepReplay& replay, std::chrono::microseconds budget, bool* done) {
  *done = false;
  if (phase_ == Phase::kIdle) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  const int64_t items_per_slice =
      std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, replay.items().store().schema().ItemBytes() + 24));
  return Timed([&] {
    do {
      if (phase_ == Phase::kItems) {
        PERSERVE_RETURN_IF_ERROR(WriteItems(replay, std::min(slots_, cursor_ + items_per_slice)));
        if (cursor_ == slots_) {
          PERSERVE_RETURN_IF_ERROR(Append(&parts_.back(), std::as_bytes(std::span(free_slots_))));
          phase_ = Phase::kSteps;
        }
      } else if (phase_ == Phase::kSteps) {
        PERSERVE_RETURN_IF_ERROR(ring_.WriteSlice(replay.steps(), StepSink()));
        if (ring_.done()) {
          for (Part& part : parts_) PERSERVE_RETURN_IF_ERROR(Flush(&part));
          phase_ = Phase::kFinishing;
          finishing_ = std::async(std::launch::async, [this] { return Finish(); });
        }
      } else if (finishing_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        PERSERVE_RETURN_IF_ERROR(finishing_.get());
        last_path_ = path_;
        last_duration_ =
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began_);
        last_bytes_ = 0;
        for (const Part& part : parts_) last_bytes_ += part.bytes;
        parts_.clear();
        phase_ = Phase::kIdle;
        *done = true;
        break;
      } else {
        break;  // the helper thread still syncs
      }
    } while (std::chrono::steady_clock::now() - start < budget);
    return Status::Ok();
  });
}

Status CheckpointWriter::Finish() {
  std::ostringstream manifest;
  manifest << "perserve-checkpoint " << kCheckpointFormat << "\n"
           << "shard " << shard_ << " of " << shards_ << "\n";
  for (Part& part : parts_) {
    if (::fsync(part.fd) != 0) return Errno(fmt::format("fsync {}/{}", partial_, part.name));
    ::close(part.fd);
    part.fd = -1;
    manifest << fmt::format("part {} {} {:016x}\n", part.name, part.bytes, part.hash.Finish());
  }
  manifest << "end\n";
  const std::string text = manifest.str();
  const std::string file = (fs::path(partial_) / kManifest).string();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create " + file);
  const bool wrote = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool synced = wrote && ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) return Errno("write " + file);
  PERSERVE_RETURN_IF_ERROR(FsyncPath(partial_));
  if (::rename(partial_.c_str(), path_.c_str()) != 0) return Errno(fmt::format("rename {} to {}", partial_, path_));
  PERSERVE_RETURN_IF_ERROR(FsyncPath(shard_dir_));
  // The new one is durable: the older ones go.
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(shard_dir_, error)) {
    const int64_t number = CheckpointNumber(entry.path().filename().string());
    if (number >= 0 && entry.path().string() != path_) fs::remove_all(entry.path(), error);
  }
  return Status::Ok();
}

void CheckpointWriter::Abandon() {
  if (finishing_.valid()) finishing_.wait();
  for (Part& part : parts_) {
    if (part.fd >= 0) ::close(part.fd);
    part.fd = -1;
  }
  parts_.clear();
  std::error_code error;
  if (!partial_.empty()) fs::remove_all(partial_, error);
  phase_ = Phase::kIdle;
}

}  // namespace perserve::service
