// The join's checks on what a server rank announces (mpi/join.h), without
// MPI: alpha and capacity arrive as doubles and are checked before the
// capacity becomes an integer; more than 1024 servers would wrap the shard
// bits of their keys. (tests/mpi/mpi_hardening_client.cc drives the same
// checks through a real join.)
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

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

// A restored server's stream counts travel in its schemas, and the steps an
// append may send apart (the ring's slack): decoded as sent; a negative
// count refused. A server of transitions has streams too (the one item
// model: an add is an append), so its counts travel as well; it samples what
// it adds, with no item columns.
TEST(JoinChecksTest, StreamStepCountsAndStepsApartAreCheckedWhenDecoded) {
  const Schema step{{{"obs", DType::kUInt8, {2}}, {"reward", DType::kFloat32, {}}, {"done", DType::kUInt8, {}}}};
  proto::ServedSchemas served = proto::OneTableSchemas(true, step, step, {});
  served.stream_steps = {437, 0, 12};
  served.max_steps_apart = 256;
  const auto decode = [](const proto::ServedSchemas& sent, proto::ServedSchemas* decoded) {
    const std::string bytes = proto::SerializeServedSchemas(sent);
    return proto::DeserializeServedSchemas(std::as_bytes(std::span(bytes.data(), bytes.size())), decoded);
  };
  proto::ServedSchemas decoded;
  ASSERT_TRUE(decode(served, &decoded).ok());
  EXPECT_EQ(decoded.stream_steps, served.stream_steps);
  EXPECT_EQ(decoded.max_steps_apart, 256);
  served.stream_steps[1] = -1;
  Status status = decode(served, &decoded);
  EXPECT_NE(status.message().find("stream 1 holds -1 steps"), std::string::npos) << status.ToString();
  served.stream_steps[1] = 0;
  served.max_steps_apart = -1;
  status = decode(served, &decoded);
  EXPECT_NE(status.message().find("-1 steps apart"), std::string::npos) << status.ToString();

  served = proto::TransitionSchemas(step);
  served.stream_steps = {3};
  served.max_steps_apart = 64;
  ASSERT_TRUE(decode(served, &decoded).ok());
  EXPECT_FALSE(decoded.steps);
  EXPECT_EQ(decoded.stream_steps, std::vector<int64_t>{3});
  EXPECT_EQ(decoded.max_steps_apart, 64);
  served.samples = Schema{{{"obs", DType::kUInt8, {2}}}};
  status = decode(served, &decoded);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("must sample what it adds"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace perserve::mpi
