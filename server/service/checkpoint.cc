#include "service/checkpoint.h"

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

#include "service/checkpoint_layout.h"

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

CheckpointWriter::CheckpointWriter(std::string dir, int shard, int shards, int64_t capacity)
    : shard_dir_(ShardDirectory(dir, shard, shards)),
      shard_(shard),
      shards_(shards),
      last_path_(NewestComplete(shard_dir_)),
      leaves_(static_cast<size_t>(std::max<int64_t>(0, capacity))) {}

CheckpointWriter::~CheckpointWriter() {
  if (finishing_.valid()) finishing_.wait();
  if (phase_ != Phase::kIdle) Abandon();
}

Status CheckpointWriter::Begin(const replay::Replay& replay, CheckpointState state,
                               const replay::StepReplay* steps) {
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
  parts_.emplace_back("leaves.bin");
  for (size_t c = 0; c < replay.store().schema().columns.size(); ++c) parts_.emplace_back(ColumnFile(c));
  steps_ = steps;
  format_ = steps != nullptr ? kStepFormat : kCheckpointFormat;
  step_parts_ = parts_.size();
  if (steps != nullptr) {
    parts_.emplace_back(kStepStateFile);
    for (const std::string& name : StepRingWriter::RowPartNames(steps->step_schema())) parts_.emplace_back(name);
  }
  for (Part& part : parts_) {
    const std::string file = (fs::path(partial_) / part.name).string();
    part.fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (part.fd < 0) {
      const Status status = Errno("create " + file);
      Abandon();
      return status;
    }
  }
  oldest_key_ = replay.oldest_key();
  next_key_ = replay.next_key();
  size_ = replay.size();
  capacity_ = replay.capacity();
  written_ = 0;
  leaves_written_ = 0;
  // The leaves as they are now (priority updates change them, not the rows),
  // oldest key first: at most two runs of slots.
  const int64_t first_slot = static_cast<int64_t>(oldest_key_ % static_cast<uint64_t>(capacity_));
  const int64_t first_run = std::min(size_, capacity_ - first_slot);
  if (leaves_.size() < static_cast<size_t>(size_)) leaves_.resize(static_cast<size_t>(capacity_));
  const std::span<double> leaves = std::span(leaves_).first(static_cast<size_t>(size_));
  Status status = replay.tree().ReadLeaves(first_slot, leaves.first(static_cast<size_t>(first_run)));
  if (status.ok() && first_run < size_) {
    status = replay.tree().ReadLeaves(0, leaves.subspan(static_cast<size_t>(first_run)));
  }
  // The small state goes first, whole.
  state.size = size_;
  state.format = format_;
  std::ostringstream bytes;
  {
    cereal::BinaryOutputArchive archive(bytes);
    archive(state);
  }
  const std::string encoded = bytes.str();
  if (status.ok()) status = Append(&parts_[0], std::as_bytes(std::span(encoded.data(), encoded.size())));
  if (status.ok() && steps != nullptr) {
    const std::string ring_state = ring_.Begin(*steps);
    status = Append(&parts_[step_parts_], std::as_bytes(std::span(ring_state.data(), ring_state.size())));
  }
  longest_step_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began_);
  if (!status.ok()) Abandon();
  return status;
}

Status CheckpointWriter::Append(Part* part, std::span<const std::byte> bytes) {
  part->hash.Update(bytes);
  part->bytes += static_cast<int64_t>(bytes.size());
  while (!bytes.empty()) {
    const ssize_t wrote = ::write(part->fd, bytes.data(), bytes.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return Errno(fmt::format("write {}/{}", partial_, part->name));
    bytes = bytes.subspan(static_cast<size_t>(wrote));
  }
  return Status::Ok();
}

Status CheckpointWriter::WriteItems(const replay::Replay& replay, int64_t until) {
  const store::TransitionStore& store = replay.store();
  const int64_t rows_per_slice = RowsPerSlice(store.schema());
  while (written_ < until) {
    const int64_t slot = static_cast<int64_t>((oldest_key_ + written_) % capacity_);
    const int64_t rows = std::min({until - written_, rows_per_slice, capacity_ - slot});  // no wrap in a slice
    for (size_t c = 0; c < store.schema().columns.size(); ++c) {
      PERSERVE_RETURN_IF_ERROR(Append(&parts_[2 + c], store.Rows(static_cast<int>(c), slot, rows)));
    }
    written_ += rows;
  }
  return Status::Ok();
}

StepRingWriter::Sink CheckpointWriter::StepSink() {
  return [this](size_t part, std::span<const std::byte> bytes) { return Append(&parts_[step_parts_ + 1 + part], bytes); };
}

Status CheckpointWriter::BeforeAppend(const replay::Replay& replay, int64_t steps, int64_t items) {
  if (steps_ != nullptr && (phase_ == Phase::kItems || phase_ == Phase::kSteps) && !ring_.done()) {
    const auto start = std::chrono::steady_clock::now();
    const Status status = ring_.BeforeAppend(steps_->steps(), steps, StepSink());
    longest_step_ = std::max(longest_step_, std::chrono::duration_cast<std::chrono::microseconds>(
                                                std::chrono::steady_clock::now() - start));
    if (!status.ok()) {
      Abandon();
      return status;
    }
  }
  return BeforeAdd(replay, items);
}

Status CheckpointWriter::BeforeAdd(const replay::Replay& replay, int64_t count) {
  if (phase_ != Phase::kItems) return Status::Ok();
  // The add overwrites the items with keys next - capacity .. next + count - 1
  // - capacity (those below the snapshot's oldest were never in it).
  const int64_t overwritten_end = static_cast<int64_t>(replay.next_key() + static_cast<uint64_t>(count)) - capacity_ -
                                  static_cast<int64_t>(oldest_key_);
  if (overwritten_end <= written_) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  const Status status = WriteItems(replay, std::min(overwritten_end, size_));
  longest_step_ = std::max(longest_step_, std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - start));
  if (!status.ok()) Abandon();
  return status;
}

Status CheckpointWriter::Step(const replay::Replay& replay, std::chrono::microseconds budget, bool* done) {
  *done = false;
  if (phase_ == Phase::kIdle) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  Status status;
  do {
    if (phase_ == Phase::kItems) {
      status = WriteItems(replay, std::min(size_, written_ + RowsPerSlice(replay.store().schema())));
      if (status.ok() && written_ == size_) phase_ = steps_ != nullptr ? Phase::kSteps : Phase::kLeaves;
    } else if (phase_ == Phase::kSteps) {
      status = ring_.WriteSlice(steps_->steps(), StepSink());
      if (status.ok() && ring_.done()) phase_ = Phase::kLeaves;
    } else if (phase_ == Phase::kLeaves) {
      const size_t count = std::min(static_cast<size_t>(size_) - leaves_written_, static_cast<size_t>(kSliceBytes / 8));
      status = Append(&parts_[1], std::as_bytes(std::span(leaves_.data() + leaves_written_, count)));
      leaves_written_ += count;
      if (status.ok() && leaves_written_ == static_cast<size_t>(size_)) {
        phase_ = Phase::kFinishing;
        finishing_ = std::async(std::launch::async, [this] { return Finish(); });
      }
    } else if (finishing_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      status = finishing_.get();
      if (status.ok()) {
        last_path_ = path_;
        last_duration_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                               began_);
        last_bytes_ = 0;
        for (const Part& part : parts_) last_bytes_ += part.bytes;
        parts_.clear();
        phase_ = Phase::kIdle;
        *done = true;
      }
      break;
    } else {
      break;  // the helper thread still syncs
    }
  } while (status.ok() && std::chrono::steady_clock::now() - start < budget);
  longest_step_ = std::max(longest_step_, std::chrono::duration_cast<std::chrono::microseconds>(
                                              std::chrono::steady_clock::now() - start));
  if (!status.ok()) Abandon();
  return status;
}

Status CheckpointWriter::Finish() {
  std::ostringstream manifest;
  manifest << "perserve-checkpoint " << format_ << "\n"
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
