// FileSystem: every file and directory operation a checkpoint's writing and
// restoring make, behind one small interface (as LevelDB's Env), so tests
// and the simulation can run them over a file system of their own: one kept
// in memory that models what a crash keeps and injects the faults a disk
// has (tests/server/service/checkpoint/memory_file_system.h).
//
// PosixFileSystem() is the real one: the calls the checkpoint code made
// directly before (open, write, fsync, rename, std::filesystem), with the
// same error texts: "<operation> <path>: <strerror>", RESOURCE_EXHAUSTED for
// a full disk or quota (ENOSPC, EDQUOT), UNAVAILABLE for the rest.
//
// What a crash keeps (the contract the checkpoint writer relies on, and the
// memory file system enforces): bytes written to a file are durable once
// the file is synced (WritableFile::Sync); a directory entry made or changed
// (a file or directory created, a rename, a removal) is durable once that
// directory is synced (SyncDirectory). Anything else may be lost, and a
// file's unsynced bytes may be kept in part.
//
// Thread safety: a FileSystem may be used from several threads at once (the
// writer syncs and renames on a helper thread); a file object from one
// thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "perserve/status.h"

namespace perserve::service {

// A file open for writing, created empty. Closed when destroyed.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes a prefix of `bytes` at the file's end, at least one byte of a
  // non-empty span: *written says how many (fewer than asked is no error;
  // the caller writes the rest). Errors: "write <path>: <reason>".
  virtual Status Write(std::span<const std::byte> bytes, size_t* written) = 0;
  // Makes the bytes written so far durable (fsync). Errors: "fsync <path>: <reason>".
  virtual Status Sync() = 0;
};

// A file open for reading, from its start. Closed when destroyed.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Reads the next out.size() bytes, all of them: UNAVAILABLE "cannot read
  // <path>" when the file ends first or a read fails.
  virtual Status Read(std::span<std::byte> out) = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates `path` (or empties it) for writing. Errors: "create <path>: <reason>".
  virtual Status NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* file) = 0;
  // Opens `path` for reading. Errors: UNAVAILABLE "cannot read <path>".
  virtual Status NewSequentialFile(const std::string& path, std::unique_ptr<SequentialFile>* file) = 0;
  // The size of file `path`. Errors: NOT_FOUND "cannot read <path>: <reason>".
  virtual Status FileSize(const std::string& path, uint64_t* size) = 0;
  // Whether `path` names a file or directory (false when it cannot be told).
  virtual bool Exists(const std::string& path) = 0;
  // *names gets the names in directory `path` (no "." or ".."), in no
  // particular order.
  // Errors: "list <path>: <reason>".
  virtual Status ListDirectory(const std::string& path, std::vector<std::string>* names) = 0;

  // Creates directory `path`, whose parent exists. Errors: "cannot create
  // <path>: <reason>" ("exists" when it does).
  virtual Status CreateDirectory(const std::string& path) = 0;
  // Creates directory `path` and every missing parent; none missing is no
  // error. Errors: "cannot create <path>: <reason>".
  virtual Status CreateDirectories(const std::string& path) = 0;
  // Makes directory `path`'s entries durable (open and fsync it). Errors:
  // "open <path>: <reason>", "fsync <path>: <reason>".
  virtual Status SyncDirectory(const std::string& path) = 0;
  // Renames `from` to `to` (replacing an empty directory or a file there).
  // Errors: "rename <from> to <to>: <reason>".
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Removes `path` and, for a directory, everything in it; a missing path
  // is no error. Errors: "remove <path>: <reason>".
  virtual Status RemoveAll(const std::string& path) = 0;
};

// The process's real file system (POSIX calls); lives as long as the process.
FileSystem* PosixFileSystem();

// "<what>: <strerror(error)>": RESOURCE_EXHAUSTED for ENOSPC and EDQUOT (a
// full disk or quota), UNAVAILABLE otherwise. Every FileSystem's errors.
Status FileSystemError(const std::string& what, int error);

// Writes all of `bytes` to `file`, however many writes it takes.
Status WriteAll(WritableFile* file, std::span<const std::byte> bytes);

}  // namespace perserve::service
