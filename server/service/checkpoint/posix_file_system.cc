// PosixFileSystem (file_system.h): open, write, fsync and rename, and
// std::filesystem for sizes, listings, directories and removal.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "service/checkpoint/file_system.h"

namespace perserve::service {
namespace {

namespace fs = std::filesystem;

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override { ::close(fd_); }

  Status Write(std::span<const std::byte> bytes, size_t* written) override {
    *written = 0;
    while (true) {
      const ssize_t wrote = ::write(fd_, bytes.data(), bytes.size());
      if (wrote < 0 && errno == EINTR) continue;
      // 0 of a non-empty span: nothing more fits (errno says why, if it was set).
      if (wrote <= 0 && !bytes.empty()) return FileSystemError("write " + path_, errno);
      *written = static_cast<size_t>(std::max<ssize_t>(wrote, 0));
      return Status::Ok();
    }
  }

  Status Sync() override {
    if (::fsync(fd_) != 0) return FileSystemError("fsync " + path_, errno);
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixSequentialFile : public SequentialFile {
 public:
  PosixSequentialFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixSequentialFile() override { ::close(fd_); }

  Status Read(std::span<std::byte> out) override {
    while (!out.empty()) {
      const ssize_t got = ::read(fd_, out.data(), out.size());
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return Status::Unavailable(fmt::format("cannot read {}", path_));
      out = out.subspan(static_cast<size_t>(got));
    }
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_;
};

class Posix : public FileSystem {
 public:
  Status NewWritableFile(const std::string& path, std::unique_ptr<WritableFile>* file) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return FileSystemError("create " + path, errno);
    *file = std::make_unique<PosixWritableFile>(path, fd);
    return Status::Ok();
  }

  Status NewSequentialFile(const std::string& path, std::unique_ptr<SequentialFile>* file) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::Unavailable(fmt::format("cannot read {}", path));
    *file = std::make_unique<PosixSequentialFile>(path, fd);
    return Status::Ok();
  }

  Status FileSize(const std::string& path, uint64_t* size) override {
    std::error_code error;
    const uintmax_t bytes = fs::file_size(path, error);
    if (error) return Status::NotFound(fmt::format("cannot read {}: {}", path, error.message()));
    *size = bytes;
    return Status::Ok();
  }

  bool Exists(const std::string& path) override {
    std::error_code error;
    return fs::exists(path, error);
  }

  Status ListDirectory(const std::string& path, std::vector<std::string>* names) override {
    names->clear();
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(path, error)) names->push_back(entry.path().filename().string());
    if (error) return FileSystemError("list " + path, error.value());
    return Status::Ok();
  }

  Status CreateDirectory(const std::string& path) override {
    std::error_code error;
    if (!fs::create_directory(path, error) || error) {
      return Status::Unavailable(fmt::format("cannot create {}: {}", path, error ? error.message() : "exists"));
    }
    return Status::Ok();
  }

  Status CreateDirectories(const std::string& path) override {
    std::error_code error;
    fs::create_directories(path, error);
    if (error) return Status::Unavailable(fmt::format("cannot create {}: {}", path, error.message()));
    return Status::Ok();
  }

  Status SyncDirectory(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return FileSystemError("open " + path, errno);
    const int synced = ::fsync(fd);
    const Status status = synced == 0 ? Status::Ok() : FileSystemError("fsync " + path, errno);
    ::close(fd);
    return status;
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return FileSystemError(fmt::format("rename {} to {}", from, to), errno);
    }
    return Status::Ok();
  }

  Status RemoveAll(const std::string& path) override {
    std::error_code error;
    fs::remove_all(path, error);
    if (error) return FileSystemError("remove " + path, error.value());
    return Status::Ok();
  }
};

}  // namespace

FileSystem* PosixFileSystem() {
  static Posix* const posix = new Posix();  // never destroyed: a helper thread may still use it at exit
  return posix;
}

Status FileSystemError(const std::string& what, int error) {
  const std::string text = fmt::format("{}: {}", what, std::strerror(error));
  return error == ENOSPC || error == EDQUOT ? Status::ResourceExhausted(text) : Status::Unavailable(text);
}

Status WriteAll(WritableFile* file, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    size_t written = 0;
    PERSERVE_RETURN_IF_ERROR(file->Write(bytes, &written));
    bytes = bytes.subspan(written);
  }
  return Status::Ok();
}

}  // namespace perserve::service
