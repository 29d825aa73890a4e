// MemoryFileSystem: what a crash keeps (synced bytes and synced directory
// entries, a prefix of the rest), its faults, and errors worded as the
// POSIX file system words them.
#include "server/service/checkpoint/memory_file_system.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace perserve::service::checkpoint_test {
namespace {

namespace fs = std::filesystem;
using Operation = MemoryFileSystem::Operation;

std::span<const std::byte> Bytes(const std::string& text) { return std::as_bytes(std::span(text.data(), text.size())); }

// Creates `path` holding `text` (not synced).
void WriteFile(FileSystem* file_system, const std::string& path, const std::string& text,
               std::unique_ptr<WritableFile>* kept = nullptr) {
  std::unique_ptr<WritableFile> file;
  ASSERT_TRUE(file_system->NewWritableFile(path, &file).ok());
  const Status wrote = WriteAll(file.get(), Bytes(text));
  ASSERT_TRUE(wrote.ok()) << wrote.ToString();
  if (kept != nullptr) *kept = std::move(file);
}

TEST(MemoryFileSystemTest, SyncedBytesSurviveACrashAndOfTheRestAPrefixAtMost) {
  bool some_lost = false, some_kept = false;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    MemoryFileSystem memory(seed);
    ASSERT_TRUE(memory.CreateDirectory("/d").ok());
    std::unique_ptr<WritableFile> file;
    WriteFile(&memory, "/d/f", "synced|", &file);
    ASSERT_TRUE(file->Sync().ok());
    ASSERT_TRUE(WriteAll(file.get(), Bytes("volatile")).ok());
    ASSERT_TRUE(memory.SyncDirectory("/").ok());
    ASSERT_TRUE(memory.SyncDirectory("/d").ok());
    memory.Crash();
    const std::string after = memory.Contents("/d/f");
    ASSERT_TRUE(after.starts_with("synced|")) << "seed " << seed << ": " << after;
    EXPECT_TRUE(std::string("synced|volatile").starts_with(after)) << "seed " << seed << ": " << after;
    some_lost |= after.size() < 15;
    some_kept |= after.size() > 7;
    EXPECT_FALSE(file->Sync().ok()) << "a file opened before the crash is gone with it";
  }
  EXPECT_TRUE(some_lost && some_kept) << "unsynced bytes are neither always lost nor always kept";
}

TEST(MemoryFileSystemTest, ADirectoryEntryIsDurableOnlyOnceItsDirectoryIsSynced) {
  MemoryFileSystem memory;
  ASSERT_TRUE(memory.CreateDirectories("/a/b").ok());
  std::unique_ptr<WritableFile> file;
  WriteFile(&memory, "/a/b/f", "x", &file);
  ASSERT_TRUE(file->Sync().ok());
  ASSERT_TRUE(memory.SyncDirectory("/a/b").ok());
  ASSERT_TRUE(memory.SyncDirectory("/").ok());
  memory.Crash();  // /a's entry b was never synced: b, and f in it, are gone
  EXPECT_TRUE(memory.Exists("/a"));
  EXPECT_FALSE(memory.Exists("/a/b"));

  ASSERT_TRUE(memory.CreateDirectories("/a/b").ok());
  WriteFile(&memory, "/a/b/f", "x", &file);
  ASSERT_TRUE(file->Sync().ok());
  for (const char* dir : {"/a/b", "/a"}) ASSERT_TRUE(memory.SyncDirectory(dir).ok());
  memory.Crash();
  EXPECT_EQ(memory.Contents("/a/b/f"), "x");
}

TEST(MemoryFileSystemTest, ARenameOrRemovalNotSyncedIsUndoneByACrash) {
  MemoryFileSystem memory;
  ASSERT_TRUE(memory.CreateDirectory("/d").ok());
  ASSERT_TRUE(memory.CreateDirectory("/d/old").ok());
  ASSERT_TRUE(memory.CreateDirectory("/d/new.partial").ok());
  for (const char* dir : {"/", "/d"}) ASSERT_TRUE(memory.SyncDirectory(dir).ok());
  ASSERT_TRUE(memory.Rename("/d/new.partial", "/d/new").ok());
  ASSERT_TRUE(memory.RemoveAll("/d/old").ok());
  EXPECT_TRUE(memory.Exists("/d/new"));
  EXPECT_FALSE(memory.Exists("/d/old"));
  memory.Crash();
  EXPECT_TRUE(memory.Exists("/d/new.partial"));
  EXPECT_FALSE(memory.Exists("/d/new"));
  EXPECT_TRUE(memory.Exists("/d/old"));

  ASSERT_TRUE(memory.Rename("/d/new.partial", "/d/new").ok());
  ASSERT_TRUE(memory.SyncDirectory("/d").ok());
  memory.Crash();
  EXPECT_TRUE(memory.Exists("/d/new"));
  EXPECT_FALSE(memory.Exists("/d/new.partial"));
}

TEST(MemoryFileSystemTest, AScheduledCrashFailsItsOperationAndEveryCallUntilRestart) {
  MemoryFileSystem memory;
  ASSERT_TRUE(memory.CreateDirectory("/d").ok());
  ASSERT_TRUE(memory.SyncDirectory("/").ok());
  memory.CrashBeforeOperation(2);
  std::unique_ptr<WritableFile> file;
  ASSERT_TRUE(memory.NewWritableFile("/d/f", &file).ok());  // operation 1
  size_t written = 0;
  const Status write = file->Write(Bytes("abc"), &written);  // operation 2: the crash comes first
  EXPECT_EQ(write.message(), "write /d/f: Input/output error");
  EXPECT_TRUE(memory.down());
  EXPECT_FALSE(memory.Exists("/d"));
  EXPECT_FALSE(memory.CreateDirectory("/e").ok());
  memory.Restart();
  EXPECT_TRUE(memory.Exists("/d"));
  EXPECT_FALSE(memory.Exists("/d/f")) << "its entry was never synced";
  const std::vector<std::string> log = memory.operation_log();
  ASSERT_GE(log.size(), 4u);
  EXPECT_EQ(log[log.size() - 1], "write /d/f 3");
}

TEST(MemoryFileSystemTest, AProcessCrashLosesNothingWrittenButItsOpenFiles) {
  MemoryFileSystem memory;
  memory.CrashBeforeOperation(3, MemoryFileSystem::CrashKind::kProcess);
  std::unique_ptr<WritableFile> file;
  WriteFile(&memory, "/f", "unsynced", &file);  // operations 1 and 2
  EXPECT_FALSE(memory.CreateDirectory("/d").ok());  // 3: the process is gone
  memory.Restart();
  EXPECT_EQ(memory.Contents("/f"), "unsynced");
  size_t written = 0;
  EXPECT_FALSE(file->Write(Bytes("more"), &written).ok()) << "its files went with it";
}

TEST(MemoryFileSystemTest, ShortWritesAreCompletedByWriteAllAndAFullDiskWritesWhatFits) {
  MemoryFileSystem memory(3);
  memory.SetFaultRates({.short_write = 1.0});
  const std::string text(1000, 'z');
  WriteFile(&memory, "/f", text);
  EXPECT_EQ(memory.Contents("/f"), text);
  EXPECT_GT(memory.operations(), 3) << "every write was short: it took several";

  memory.ClearFaults();
  memory.FillDiskAfter(10);
  std::unique_ptr<WritableFile> file;
  ASSERT_TRUE(memory.NewWritableFile("/g", &file).ok());
  size_t written = 0;
  ASSERT_TRUE(file->Write(Bytes("0123456789abc"), &written).ok());
  EXPECT_EQ(written, 10u);
  const Status full = file->Write(Bytes("abc"), &written);
  EXPECT_EQ(full.code(), Status::Code::kResourceExhausted);
  EXPECT_EQ(full.message(), "write /g: No space left on device");

  memory.ClearFaults();
  memory.LimitFileSize(12);  // as RLIMIT_FSIZE: per file
  ASSERT_TRUE(file->Write(Bytes("abc"), &written).ok());
  EXPECT_EQ(written, 2u);
  EXPECT_EQ(file->Write(Bytes("abc"), &written).message(), "write /g: File too large");
  WriteFile(&memory, "/h", "another file");
}

TEST(MemoryFileSystemTest, TheNthOperationOfAKindFailsWithItsErrno) {
  MemoryFileSystem memory;
  memory.FailNth(Operation::kSync, 2, EIO);
  memory.FailNth(Operation::kRename, 1, EXDEV);
  std::unique_ptr<WritableFile> file;
  WriteFile(&memory, "/f", "a", &file);
  EXPECT_TRUE(file->Sync().ok());
  EXPECT_EQ(file->Sync().message(), "fsync /f: Input/output error");
  EXPECT_TRUE(file->Sync().ok());
  EXPECT_EQ(memory.Rename("/f", "/g").message(), "rename /f to /g: Invalid cross-device link");
  EXPECT_TRUE(memory.Rename("/f", "/g").ok());
}

// The same mistakes, on the real file system and in memory: the same texts.
TEST(MemoryFileSystemTest, ErrorsReadAsThePosixFileSystemsDo) {
  const fs::path root = fs::temp_directory_path() / fmt::format("perserve-memory-fs-test-{}", ::getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  MemoryFileSystem memory;
  ASSERT_TRUE(memory.CreateDirectories(root.string()).ok());
  const auto at = [&](const char* name) { return (root / name).string(); };
  for (FileSystem* file_system : {static_cast<FileSystem*>(&memory), PosixFileSystem()}) {
    ASSERT_TRUE(file_system->CreateDirectory(at("d")).ok());
    std::unique_ptr<WritableFile> file;
    std::unique_ptr<SequentialFile> in;
    uint64_t size = 0;
    std::vector<Status> errors{file_system->CreateDirectory(at("d")),
                               file_system->NewWritableFile(at("missing/f"), &file),
                               file_system->NewSequentialFile(at("missing/f"), &in),
                               file_system->FileSize(at("missing/f"), &size),
                               file_system->Rename(at("missing"), at("there")),
                               file_system->SyncDirectory(at("missing"))};
    std::vector<std::string> texts;
    for (const Status& error : errors) texts.push_back(error.ToString());
    EXPECT_EQ(texts, (std::vector<std::string>{
                         fmt::format("UNAVAILABLE: cannot create {}: exists", at("d")),
                         fmt::format("UNAVAILABLE: create {}: No such file or directory", at("missing/f")),
                         fmt::format("UNAVAILABLE: cannot read {}", at("missing/f")),
                         fmt::format("NOT_FOUND: cannot read {}: No such file or directory", at("missing/f")),
                         fmt::format("UNAVAILABLE: rename {} to {}: No such file or directory", at("missing"),
                                     at("there")),
                         fmt::format("UNAVAILABLE: open {}: No such file or directory", at("missing"))}))
        << (file_system == PosixFileSystem() ? "posix" : "memory");
    EXPECT_TRUE(file_system->RemoveAll(at("missing")).ok());
    EXPECT_TRUE(file_system->RemoveAll(at("d")).ok());
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace perserve::service::checkpoint_test
