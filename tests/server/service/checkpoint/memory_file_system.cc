#include "server/service/checkpoint/memory_file_system.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <string_view>

#include <fmt/format.h>

namespace perserve::service::checkpoint_test {
namespace {

// A path's components, "" and "." skipped.
std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = std::min(path.find('/', start), path.size());
    const std::string part = path.substr(start, slash - start);
    if (!part.empty() && part != ".") parts.push_back(part);
    start = slash + 1;
  }
  return parts;
}

std::string_view OperationName(MemoryFileSystem::Operation kind) {
  using Operation = MemoryFileSystem::Operation;
  switch (kind) {
    case Operation::kCreateFile: return "create";
    case Operation::kWrite: return "write";
    case Operation::kSync: return "fsync";
    case Operation::kCreateDirectory: return "mkdir";
    case Operation::kSyncDirectory: return "fsync directory";
    case Operation::kRename: return "rename";
    case Operation::kRemove: return "remove";
  }
  return "?";
}

}  // namespace

class MemoryFileSystem::File : public WritableFile {
 public:
  File(MemoryFileSystem* owner, int64_t node, uint64_t generation, std::string path)
      : owner_(owner), node_(node), generation_(generation), path_(std::move(path)) {}
  Status Write(std::span<const std::byte> bytes, size_t* written) override {
    return owner_->Write(node_, generation_, path_, bytes, written);
  }
  Status Sync() override { return owner_->Sync(node_, generation_, path_); }

 private:
  MemoryFileSystem* owner_;
  int64_t node_;
  uint64_t generation_;
  std::string path_;
};

namespace {

// A copy of the file's bytes when it was opened.
class MemorySequentialFile : public SequentialFile {
 public:
  MemorySequentialFile(std::string path, std::string data) : path_(std::move(path)), data_(std::move(data)) {}
  Status Read(std::span<std::byte> out) override {
    if (data_.size() - offset_ < out.size()) return Status::Unavailable(fmt::format("cannot read {}", path_));
    std::copy_n(reinterpret_cast<const std::byte*>(data_.data()) + offset_, out.size(), out.data());
    offset_ += out.size();
    return Status::Ok();
  }

 private:
  std::string path_, data_;
  size_t offset_ = 0;
};

}  // namespace

MemoryFileSystem::MemoryFileSystem(uint64_t seed) : random_(seed) { nodes_[0].directory = true; }

MemoryFileSystem::~MemoryFileSystem() = default;

int64_t MemoryFileSystem::Find(const std::string& path, int64_t* parent, std::string* name) const {
  const std::vector<std::string> parts = Components(path);
  int64_t node = 0, above = -1;
  for (const std::string& part : parts) {
    above = node;
    const Node& dir = nodes_.at(node);
    const auto found = dir.directory ? dir.entries.find(part) : dir.entries.end();
    node = found == dir.entries.end() ? -1 : found->second;
    if (node < 0 && &part != &parts.back()) above = -1;  // a missing directory on the way: no parent either
    if (node < 0) break;
  }
  if (parent != nullptr) *parent = above >= 0 && nodes_.at(above).directory ? above : -1;
  if (name != nullptr) *name = parts.empty() ? "" : parts.back();
  return node;
}

int MemoryFileSystem::StartOperation(Operation kind, const std::string& description) {
  if (down_) return EIO;
  ++operations_;
  log_.push_back(fmt::format("{} {}", OperationName(kind), description));
  if (crash_at_ == operations_) {
    if (crash_kind_ == CrashKind::kMachine) CrashLocked();
    ++generation_;  // the files open before it are gone with the process
    down_ = true;
    return EIO;
  }
  for (auto it = scheduled_.begin(); it != scheduled_.end(); ++it) {
    if (it->kind == kind && --it->nth == 0) {
      const int error = it->error;
      scheduled_.erase(it);
      return error;
    }
  }
  std::uniform_real_distribution<double> chance(0.0, 1.0);
  const double rate = kind == Operation::kWrite                                          ? rates_.write_error
                      : kind == Operation::kSync || kind == Operation::kSyncDirectory ? rates_.sync_error
                      : kind == Operation::kRename                                        ? rates_.rename_error
                                                                                          : 0.0;
  if (rate > 0.0 && chance(random_) < rate) return EIO;
  return 0;
}

int64_t MemoryFileSystem::NewNode(bool directory) {
  const int64_t id = next_node_++;
  nodes_[id].directory = directory;
  return id;
}

Status MemoryFileSystem::NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* file) {
  std::lock_guard lock(mutex_);
  const int error = StartOperation(Operation::kCreateFile, path);
  if (error != 0) return FileSystemError("create " + path, error);
  int64_t parent = -1;
  std::string name;
  const int64_t existing = Find(path, &parent, &name);
  if (parent < 0) return FileSystemError("create " + path, ENOENT);
  if (existing >= 0 && nodes_.at(existing).directory) return FileSystemError("create " + path, EISDIR);
  const int64_t node = NewNode(false);
  nodes_.at(parent).entries[name] = node;
  *file = std::make_unique<File>(this, node, generation_, path);
  return Status::Ok();
}

Status MemoryFileSystem::Write(int64_t node, uint64_t generation, const std::string& path,
                               std::span<const std::byte> bytes, size_t* written) {
  std::lock_guard lock(mutex_);
  *written = 0;
  int error = StartOperation(Operation::kWrite, fmt::format("{} {}", path, bytes.size()));
  if (error == 0 && generation != generation_) error = EIO;  // opened before a crash
  if (error != 0) return FileSystemError("write " + path, error);
  size_t take = bytes.size();
  std::uniform_real_distribution<double> chance(0.0, 1.0);
  if (rates_.short_write > 0.0 && take > 1 && chance(random_) < rates_.short_write) {
    take = std::uniform_int_distribution<size_t>(1, take - 1)(random_);
  }
  std::string& data = nodes_.at(node).data;
  if (file_limit_ >= 0) {
    const size_t room = static_cast<size_t>(std::max<int64_t>(0, file_limit_ - static_cast<int64_t>(data.size())));
    if (room == 0 && take > 0) return FileSystemError("write " + path, EFBIG);
    take = std::min(take, room);
  }
  if (disk_left_ >= 0) {
    if (disk_left_ == 0 && take > 0) return FileSystemError("write " + path, ENOSPC);
    take = std::min<size_t>(take, static_cast<size_t>(disk_left_));
    disk_left_ -= static_cast<int64_t>(take);
  }
  data.append(reinterpret_cast<const char*>(bytes.data()), take);
  *written = take;
  return Status::Ok();
}

Status MemoryFileSystem::Sync(int64_t node, uint64_t generation, const std::string& path) {
  std::lock_guard lock(mutex_);
  int error = StartOperation(Operation::kSync, path);
  if (error == 0 && generation != generation_) error = EIO;
  if (error != 0) return FileSystemError("fsync " + path, error);
  Node& file = nodes_.at(node);
  file.synced = file.data.size();
  return Status::Ok();
}

Status MemoryFileSystem::NewSequentialFile(const std::string& path, std::unique_ptr<SequentialFile>* file) {
  std::lock_guard lock(mutex_);
  const int64_t node = down_ ? -1 : Find(path);
  if (node < 0 || nodes_.at(node).directory) return Status::Unavailable(fmt::format("cannot read {}", path));
  *file = std::make_unique<MemorySequentialFile>(path, nodes_.at(node).data);
  return Status::Ok();
}

Status MemoryFileSystem::FileSize(const std::string& path, uint64_t* size) {
  std::lock_guard lock(mutex_);
  const int64_t node = down_ ? -1 : Find(path);
  const int error = node < 0 ? (down_ ? EIO : ENOENT) : nodes_.at(node).directory ? EISDIR : 0;
  if (error != 0) return Status::NotFound(fmt::format("cannot read {}: {}", path, std::strerror(error)));
  *size = nodes_.at(node).data.size();
  return Status::Ok();
}

bool MemoryFileSystem::Exists(const std::string& path) {
  std::lock_guard lock(mutex_);
  return !down_ && Find(path) >= 0;
}

Status MemoryFileSystem::ListDirectory(const std::string& path, std::vector<std::string>* names) {
  std::lock_guard lock(mutex_);
  names->clear();
  const int64_t node = down_ ? -1 : Find(path);
  if (node < 0) return FileSystemError("list " + path, down_ ? EIO : ENOENT);
  if (!nodes_.at(node).directory) return FileSystemError("list " + path, ENOTDIR);
  for (const auto& [name, child] : nodes_.at(node).entries) names->push_back(name);
  return Status::Ok();
}

Status MemoryFileSystem::CreateDirectory(const std::string& path) {
  std::lock_guard lock(mutex_);
  const auto cannot = [&](std::string_view reason) {
    return Status::Unavailable(fmt::format("cannot create {}: {}", path, reason));
  };
  const int error = StartOperation(Operation::kCreateDirectory, path);
  if (error != 0) return cannot(std::strerror(error));
  int64_t parent = -1;
  std::string name;
  const int64_t existing = Find(path, &parent, &name);
  if (existing >= 0) return cannot(nodes_.at(existing).directory ? "exists" : std::strerror(EEXIST));
  if (parent < 0) return cannot(std::strerror(ENOENT));
  nodes_.at(parent).entries[name] = NewNode(true);
  return Status::Ok();
}

Status MemoryFileSystem::CreateDirectories(const std::string& path) {
  std::lock_guard lock(mutex_);
  const int error = StartOperation(Operation::kCreateDirectory, path + " (and parents)");
  if (error != 0) return Status::Unavailable(fmt::format("cannot create {}: {}", path, std::strerror(error)));
  int64_t node = 0;
  for (const std::string& part : Components(path)) {
    Node& dir = nodes_.at(node);
    if (!dir.directory) return Status::Unavailable(fmt::format("cannot create {}: {}", path, std::strerror(ENOTDIR)));
    const auto found = dir.entries.find(part);
    if (found != dir.entries.end()) {
      node = found->second;
      continue;
    }
    const int64_t child = NewNode(true);
    nodes_.at(node).entries[part] = child;
    node = child;
  }
  if (!nodes_.at(node).directory) {
    return Status::Unavailable(fmt::format("cannot create {}: {}", path, std::strerror(EEXIST)));
  }
  return Status::Ok();
}

Status MemoryFileSystem::SyncDirectory(const std::string& path) {
  std::lock_guard lock(mutex_);
  const int error = StartOperation(Operation::kSyncDirectory, path);
  if (error != 0) return FileSystemError("fsync " + path, error);
  const int64_t node = Find(path);
  if (node < 0) return FileSystemError("open " + path, ENOENT);
  Node& dir = nodes_.at(node);
  dir.durable_entries = dir.entries;
  return Status::Ok();
}

Status MemoryFileSystem::Rename(const std::string& from, const std::string& to) {
  std::lock_guard lock(mutex_);
  const std::string what = fmt::format("rename {} to {}", from, to);
  const int error = StartOperation(Operation::kRename, fmt::format("{} to {}", from, to));
  if (error != 0) return FileSystemError(what, error);
  int64_t from_parent = -1, to_parent = -1;
  std::string from_name, to_name;
  const int64_t node = Find(from, &from_parent, &from_name);
  const int64_t replaced = Find(to, &to_parent, &to_name);
  if (node < 0 || to_parent < 0) return FileSystemError(what, ENOENT);
  if (replaced >= 0) {
    const Node& there = nodes_.at(replaced);
    if (there.directory && !nodes_.at(node).directory) return FileSystemError(what, EISDIR);
    if (!there.directory && nodes_.at(node).directory) return FileSystemError(what, ENOTDIR);
    if (there.directory && !there.entries.empty()) return FileSystemError(what, ENOTEMPTY);
  }
  nodes_.at(from_parent).entries.erase(from_name);
  nodes_.at(to_parent).entries[to_name] = node;
  return Status::Ok();
}

Status MemoryFileSystem::RemoveAll(const std::string& path) {
  std::lock_guard lock(mutex_);
  const int error = StartOperation(Operation::kRemove, path);
  if (error != 0) return FileSystemError("remove " + path, error);
  int64_t parent = -1;
  std::string name;
  if (Find(path, &parent, &name) < 0 || parent < 0) return Status::Ok();
  // Unlinked: what it held stays reachable only through durable entries a crash may bring back.
  nodes_.at(parent).entries.erase(name);
  return Status::Ok();
}

void MemoryFileSystem::Crash() {
  std::lock_guard lock(mutex_);
  CrashLocked();
}

void MemoryFileSystem::CrashLocked() {
  std::map<int64_t, Node> kept;
  std::vector<int64_t> pending{0};
  std::set<int64_t> seen{0};
  while (!pending.empty()) {
    const int64_t id = pending.back();
    pending.pop_back();
    Node node = std::move(nodes_.at(id));
    if (node.directory) {
      node.entries = node.durable_entries;
      for (const auto& [name, child] : node.entries) {
        if (seen.insert(child).second) pending.push_back(child);
      }
    } else {
      // Synced bytes stay; of the rest none, all or a random prefix (a torn write).
      const size_t unsynced = node.data.size() - node.synced;
      size_t torn = 0;
      switch (std::uniform_int_distribution<int>(0, 3)(random_)) {
        case 0: torn = 0; break;
        case 1: torn = unsynced; break;
        default: torn = std::uniform_int_distribution<size_t>(0, unsynced)(random_);
      }
      node.data.resize(node.synced + torn);
      node.synced = node.data.size();
    }
    kept.emplace(id, std::move(node));
  }
  nodes_ = std::move(kept);
  ++generation_;
}

void MemoryFileSystem::CrashNow(CrashKind kind) {
  std::lock_guard lock(mutex_);
  if (kind == CrashKind::kMachine) CrashLocked();
  ++generation_;
  down_ = true;
}

void MemoryFileSystem::CrashBeforeOperation(int64_t k, CrashKind kind) {
  std::lock_guard lock(mutex_);
  crash_at_ = operations_ + k;
  crash_kind_ = kind;
}

bool MemoryFileSystem::down() const {
  std::lock_guard lock(mutex_);
  return down_;
}

void MemoryFileSystem::Restart() {
  std::lock_guard lock(mutex_);
  down_ = false;
  crash_at_ = -1;
}

void MemoryFileSystem::SetFaultRates(const FaultRates& rates) {
  std::lock_guard lock(mutex_);
  rates_ = rates;
}

void MemoryFileSystem::FailNth(Operation kind, int nth, int error) {
  std::lock_guard lock(mutex_);
  scheduled_.push_back({kind, nth, error});
}

void MemoryFileSystem::FillDiskAfter(int64_t bytes) {
  std::lock_guard lock(mutex_);
  disk_left_ = bytes;
}

void MemoryFileSystem::LimitFileSize(int64_t bytes) {
  std::lock_guard lock(mutex_);
  file_limit_ = bytes < 0 ? -1 : bytes;
}

void MemoryFileSystem::ClearFaults() {
  std::lock_guard lock(mutex_);
  rates_ = {};
  scheduled_.clear();
  disk_left_ = -1;
  file_limit_ = -1;
}

int64_t MemoryFileSystem::operations() const {
  std::lock_guard lock(mutex_);
  return operations_;
}

std::vector<std::string> MemoryFileSystem::operation_log() const {
  std::lock_guard lock(mutex_);
  return log_;
}

std::string MemoryFileSystem::Contents(const std::string& path) const {
  std::lock_guard lock(mutex_);
  const int64_t node = Find(path);
  return node < 0 || nodes_.at(node).directory ? "" : nodes_.at(node).data;
}

}  // namespace perserve::service::checkpoint_test
