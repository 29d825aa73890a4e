// The join's checks on what a server rank announces (mpi/join.h), without
// MPI: alpha and capacity arrive as doubles and are checked before the
// capacity becomes an integer; more than 1024 servers would wrap the shard
// bits of their keys. (tests/mpi/mpi_hardening_client.cc drives the same
// checks through a real join.)
#include <cmath>
#include <limits>
#include <span>
#include <string>

#include <gtest/gtest.h>

#include "mpi/join.h"

namespace perserve::mpi {
namespace {

TEST(JoinChecksTest, AServersAlphaAndCapacityAreCheckedBeforeUse) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(CheckServerInfo(0, 0.6, 1 << 21).ok());
  EXPECT_TRUE(CheckServerInfo(0, 0.0, 1.0).ok());
  EXPECT_TRUE(CheckServerInfo(0, 2.0, static_cast<double>(kMaxServerCapacity)).ok());
  struct Case {
    double alpha, capacity;
    const char* mention;
  };
  for (const Case& c : {Case{0.6, kNaN, "capacity of nan"}, Case{0.6, 1e300, "capacity of 1e+300"},
                        Case{0.6, -3.0, "capacity of -3"}, Case{0.6, 0.0, "capacity of 0"},
                        Case{0.6, 10.5, "capacity of 10.5"}, Case{0.6, kInf, "capacity of inf"},
                        Case{0.6, 2.0 * static_cast<double>(kMaxServerCapacity), "capacity of"},
                        Case{kNaN, 64.0, "alpha nan"}, Case{-0.5, 64.0, "alpha -0.5"}, Case{kInf, 64.0, "alpha inf"}}) {
    const Status status = CheckServerInfo(3, c.alpha, c.capacity);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << c.mention;
    EXPECT_NE(status.message().find("server rank 3"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(c.mention), std::string::npos) << status.message();
  }
}

TEST(JoinChecksTest, MoreThan1024ServersAreRefused) {
  EXPECT_TRUE(CheckServerCount(1).ok());
  EXPECT_TRUE(CheckServerCount(1024).ok());
  const Status status = CheckServerCount(1025);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("1025 ranks joined as perserve servers; at most 1024"), std::string::npos)
      << status.message();
}

// A restored server's stream counts travel in its schemas: decoded as sent;
// a negative count, or counts from a server of transitions, refused.
TEST(JoinChecksTest, StreamStepCountsAreCheckedWhenDecoded) {
  const Schema step{{{"obs", DType::kUInt8, {2}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
  proto::ServedSchemas served{true, step, step, {}, {437, 0, 12}};
  std::string bytes = proto::SerializeServedSchemas(served);
  proto::ServedSchemas decoded;
  ASSERT_TRUE(proto::DeserializeServedSchemas(std::as_bytes(std::span(bytes.data(), bytes.size())), &decoded).ok());
  EXPECT_EQ(decoded.stream_steps, served.stream_steps);
  served.stream_steps[1] = -1;
  bytes = proto::SerializeServedSchemas(served);
  Status status = proto::DeserializeServedSchemas(std::as_bytes(std::span(bytes.data(), bytes.size())), &decoded);
  EXPECT_NE(status.message().find("stream 1 holds -1 steps"), std::string::npos) << status.ToString();
  served = proto::TransitionSchemas(step);
  served.stream_steps = {3};
  bytes = proto::SerializeServedSchemas(served);
  status = proto::DeserializeServedSchemas(std::as_bytes(std::span(bytes.data(), bytes.size())), &decoded);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
}

}  // namespace
}  // namespace perserve::mpi
