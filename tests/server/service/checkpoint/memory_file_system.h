// MemoryFileSystem: a FileSystem (service/checkpoint/file_system.h) kept in
// memory, for tests and the simulation, that models what a crash leaves and
// injects the faults a disk has.
//
// The crash model, per file and per directory, as file_system.h states the
// contract: bytes written to a file are volatile until the file is synced;
// a directory's entries (files and directories created in it, renames into
// and out of it, removals) are volatile until the directory is synced.
// Crash() leaves what a crash would: every directory reachable from the root
// through synced entries, with those entries only; every file with its
// synced bytes and a random prefix of the rest (a torn write: none, all or
// some, drawn from the seeded generator). A write or sync error loses
// nothing that was synced.
//
// Faults, each driven by the seed or scheduled: short writes and write,
// sync and rename errors at given rates; the n-th next operation of a kind
// failing with a given errno; a full disk (ENOSPC once a number of bytes
// more has been written); a file size limit (EFBIG, as RLIMIT_FSIZE); and a crash just before the k-th operation that
// changes anything (CrashBeforeOperation: of the machine, as above, or of
// the process alone, which loses nothing written), after which every call
// fails (EIO) until Restart(), as a dead machine's would.
//
// Paths: '/'-separated, absolute or relative to the root, "" and "."
// components skipped. Errors use FileSystemError, as the POSIX one does.
// Thread-safe (one lock); cost O(path depth) per call, Crash() O(bytes).
// What is removed stays allocated until a Crash() (which may bring it back).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "service/checkpoint/file_system.h"

namespace perserve::service::checkpoint_test {

class MemoryFileSystem : public FileSystem {
 public:
  // The operations that change something: what schedules count and name.
  enum class Operation { kCreateFile, kWrite, kSync, kCreateDirectory, kSyncDirectory, kRename, kRemove };
  // What dies: the machine (power lost: only what was synced is sure to
  // stay) or the process (killed: everything it wrote stays, page cache and
  // all).
  enum class CrashKind { kMachine, kProcess };

  // Faults drawn per operation from the seeded generator.
  struct FaultRates {
    double short_write = 0.0;  // a write takes a random part of its bytes (never none)
    double write_error = 0.0;  // EIO
    double sync_error = 0.0;   // EIO from a file's or a directory's sync
    double rename_error = 0.0;  // EIO
  };

  explicit MemoryFileSystem(uint64_t seed = 1);
  ~MemoryFileSystem() override;

  Status NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* file) override;
  Status NewSequentialFile(const std::string& path, std::unique_ptr<SequentialFile>* file) override;
  Status FileSize(const std::string& path, uint64_t* size) override;
  bool Exists(const std::string& path) override;
  Status ListDirectory(const std::string& path, std::vector<std::string>* names) override;
  Status CreateDirectory(const std::string& path) override;
  Status CreateDirectories(const std::string& path) override;
  Status SyncDirectory(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status RemoveAll(const std::string& path) override;

  // Leaves the state a crash would leave now (above). Files open before it
  // fail every call after it (EIO).
  void Crash();
  // A crash just before the `k`-th operation from now (1: the next), that
  // operation failing (EIO) and every call after it until Restart().
  void CrashBeforeOperation(int64_t k, CrashKind kind = CrashKind::kMachine);
  // The machine or the process dies now: what Crash() leaves (kMachine) or
  // everything written (kProcess); open files and every call fail (EIO)
  // until Restart(), as after a scheduled crash.
  void CrashNow(CrashKind kind);
  // Whether a crash (scheduled, or CrashNow) has happened (and Restart not yet called).
  bool down() const;
  // After a crash: serves again, from what the crash left.
  void Restart();

  void SetFaultRates(const FaultRates& rates);
  // The `nth` next operation of `kind` (1: the next one) fails with `error` (an errno).
  void FailNth(Operation kind, int nth, int error);
  // Writes of `bytes` more succeed; the one that crosses it writes what
  // fits (a short write), and every later one fails with ENOSPC.
  void FillDiskAfter(int64_t bytes);
  // Files may not grow past `bytes` (< 0: no limit), as under RLIMIT_FSIZE:
  // a write that would writes what fits (a short write), one at the limit
  // fails with EFBIG.
  void LimitFileSize(int64_t bytes);
  // No rates, schedules or full disk any more (a scheduled crash stays).
  void ClearFaults();

  // Operations that changed something (or were to: a failed one counts),
  // since construction, and each one's description ("write PATH 123").
  int64_t operations() const;
  std::vector<std::string> operation_log() const;

  // For tests: a file's bytes as the running system sees them ("" if none).
  std::string Contents(const std::string& path) const;

 private:
  class File;
  struct Node {
    bool directory = false;
    std::string data;     // a file's bytes, as the running system sees them
    size_t synced = 0;    // of them, durable: a prefix (files are only appended to)
    std::map<std::string, int64_t> entries;          // a directory's, as the running system sees them
    std::map<std::string, int64_t> durable_entries;  // as of its last sync
  };
  struct Scheduled {
    Operation kind;
    int nth;
    int error;
  };

  // The node `path` names, or -1; *parent its parent directory's (-1: none), *name its last component.
  int64_t Find(const std::string& path, int64_t* parent = nullptr, std::string* name = nullptr) const;
  // Counts an operation and decides its fault: 0, or the errno it fails
  // with (EIO once down; a crash scheduled for it happens first).
  int StartOperation(Operation kind, const std::string& description);
  int64_t NewNode(bool directory);
  void CrashLocked();
  // Writes for File (under the lock).
  Status Write(int64_t node, uint64_t generation, const std::string& path, std::span<const std::byte> bytes,
               size_t* written);
  Status Sync(int64_t node, uint64_t generation, const std::string& path);

  mutable std::mutex mutex_;
  std::mt19937_64 random_;
  std::map<int64_t, Node> nodes_;  // 0: the root
  int64_t next_node_ = 1;
  uint64_t generation_ = 0;  // bumped by a crash: open files of an older one are stale
  int64_t operations_ = 0;
  std::vector<std::string> log_;
  int64_t crash_at_ = -1;  // the operation a crash comes before; -1: none
  CrashKind crash_kind_ = CrashKind::kMachine;
  bool down_ = false;
  FaultRates rates_;
  std::vector<Scheduled> scheduled_;
  int64_t disk_left_ = -1;  // bytes that still fit; -1: no limit
  int64_t file_limit_ = -1;  // bytes a file may hold; -1: no limit
};

}  // namespace perserve::service::checkpoint_test
