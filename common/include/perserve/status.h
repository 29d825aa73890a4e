// Status: the error value every perserve layer returns instead of throwing.
//
// A Status is either OK or carries a code and a human-readable message. It is
// cheap to copy when OK (no allocation). Functions that can fail return Status
// and write results through output parameters.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace perserve {

class Status {
 public:
  enum class Code : int {
    kOk = 0,
    kInvalidArgument = 1,   // the caller passed something malformed
    kOutOfRange = 2,        // an index or size outside what the object holds
    kFailedPrecondition = 3,  // the object is not in a state to do this
    kUnavailable = 4,       // a resource (device, peer) is not there
    kInternal = 5,          // a bug or a failed system call
    kNotFound = 6,          // a key or name that does not exist
    kUnimplemented = 7,     // a message kind or feature this build does not know
    kResourceExhausted = 8,  // a memory or per-client allowance would be exceeded
    kDeadlineExceeded = 9,  // a request's timeout passed before it could be served
  };

  Status() = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }
  static Status OutOfRange(std::string message) { return Status(Code::kOutOfRange, std::move(message)); }
  static Status FailedPrecondition(std::string message) { return Status(Code::kFailedPrecondition, std::move(message)); }
  static Status Unavailable(std::string message) { return Status(Code::kUnavailable, std::move(message)); }
  static Status Internal(std::string message) { return Status(Code::kInternal, std::move(message)); }
  static Status NotFound(std::string message) { return Status(Code::kNotFound, std::move(message)); }
  static Status Unimplemented(std::string message) { return Status(Code::kUnimplemented, std::move(message)); }
  static Status ResourceExhausted(std::string message) {
    return Status(Code::kResourceExhausted, std::move(message));
  }
  static Status DeadlineExceeded(std::string message) {
    return Status(Code::kDeadlineExceeded, std::move(message));
  }
  // Rebuilds a status from a code received on the wire; unknown codes become kInternal.
  static Status FromCode(int code, std::string message) {
    if (code <= 0 || code > static_cast<int>(Code::kDeadlineExceeded)) {
      return code == 0 ? Ok() : Internal("unknown status code " + std::to_string(code) + ": " + message);
    }
    return Status(static_cast<Code>(code), std::move(message));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "OK" or "<code name>: <message>".
  std::string ToString() const {
    if (ok()) return "OK";
    return std::string(CodeName(code_)) + ": " + message_;
  }

  static std::string_view CodeName(Code code) {
    switch (code) {
      case Code::kOk: return "OK";
      case Code::kInvalidArgument: return "INVALID_ARGUMENT";
      case Code::kOutOfRange: return "OUT_OF_RANGE";
      case Code::kFailedPrecondition: return "FAILED_PRECONDITION";
      case Code::kUnavailable: return "UNAVAILABLE";
      case Code::kInternal: return "INTERNAL";
      case Code::kNotFound: return "NOT_FOUND";
      case Code::kUnimplemented: return "UNIMPLEMENTED";
      case Code::kResourceExhausted: return "RESOURCE_EXHAUSTED";
      case Code::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    }
    return "UNKNOWN";
  }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace perserve

// Returns early from the enclosing function when `expr` is not OK.
#define PERSERVE_RETURN_IF_ERROR(expr)           \
  do {                                           \
    ::perserve::Status perserve_status_ = (expr); \
    if (!perserve_status_.ok()) return perserve_status_; \
  } while (0)
