// The episodic prefix sum against the recurrence as the issue states it, in
// both boundary modes, chunked with carries, batched over streams, in float
// and double, and on the GPU where there is one.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "scan/episodic_prefix_sum.h"
#include "tree/cuda/cuda_device.h"

namespace perserve::scan {
namespace {

struct Data {
  int64_t streams, length;
  std::vector<double> x;
  std::vector<uint8_t> dones;
};

Data RandomData(int64_t streams, int64_t length, double done_rate, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  std::bernoulli_distribution done(done_rate);
  Data data{streams, length, {}, {}};
  for (int64_t i = 0; i < streams * length; ++i) {
    data.x.push_back(value(rng));
    data.dones.push_back(done(rng) ? 1 : 0);
  }
  return data;
}

// The recurrence exactly as written in the issue, one element at a time:
// ends_at C_t = x_t + (1 - d_{t-1}) C_{t-1} with d_{-1} = 0; starts_at C_t = x_t + (1 - d_t) C_{t-1}.
std::vector<double> Recurrence(const Data& data, Boundary boundary) {
  std::vector<double> out(data.x.size());
  for (int64_t s = 0; s < data.streams; ++s) {
    double c = 0.0;
    uint8_t previous = 0;
    for (int64_t t = 0; t < data.length; ++t) {
      const int64_t i = s * data.length + t;
      const double keep = boundary == Boundary::kEndsAt ? 1.0 - previous : 1.0 - data.dones[i];
      c = data.x[i] + keep * c;
      previous = data.dones[i];
      out[i] = c;
    }
  }
  return out;
}

template <typename T>
struct ScanRun {
  std::vector<T> out, carry_sum;
  std::vector<uint8_t> carry_done;
};

// Scans data in chunks of `chunk` time steps, carrying state between calls.
template <typename T>
ScanRun<T> Scan(const Data& data, Boundary boundary, int64_t chunk, tree::Device device, bool loop = false) {
  ScanRun<T> run{std::vector<T>(data.x.size()), std::vector<T>(data.streams, T(0)),
             std::vector<uint8_t>(data.streams, 0)};
  for (int64_t start = 0; start < data.length; start += chunk) {
    const int64_t n = std::min(chunk, data.length - start);
    std::vector<T> x(data.streams * n), out(data.streams * n);
    std::vector<uint8_t> dones(data.streams * n);
    for (int64_t s = 0; s < data.streams; ++s) {
      for (int64_t t = 0; t < n; ++t) {
        x[s * n + t] = static_cast<T>(data.x[s * data.length + start + t]);
        dones[s * n + t] = data.dones[s * data.length + start + t];
      }
    }
    const ScanArrays<T> arrays{x, dones, data.streams, n, run.carry_sum, run.carry_done, out};
    if (loop) {
      EpisodicPrefixSumLoop(arrays, boundary);
    } else {
      const Status status = EpisodicPrefixSum(arrays, boundary, device);
      EXPECT_TRUE(status.ok()) << status.ToString();
    }
    for (int64_t s = 0; s < data.streams; ++s) {
      for (int64_t t = 0; t < n; ++t) run.out[s * data.length + start + t] = out[s * n + t];
    }
  }
  return run;
}

// A rigorous first-order bound for a recursively summed episode in type T:
// (terms - 1) * eps * sum of |terms|, with 1% to spare.
template <typename T>
std::vector<double> ErrorBounds(const Data& data, Boundary boundary) {
  std::vector<double> bounds(data.x.size());
  for (int64_t s = 0; s < data.streams; ++s) {
    double abs_sum = 0.0;
    int64_t terms = 0;
    uint8_t previous = 0;
    for (int64_t t = 0; t < data.length; ++t) {
      const int64_t i = s * data.length + t;
      const bool reset = boundary == Boundary::kEndsAt ? previous != 0 : data.dones[i] != 0;
      abs_sum = reset ? std::abs(data.x[i]) : abs_sum + std::abs(data.x[i]);
      terms = reset ? 1 : terms + 1;
      previous = data.dones[i];
      bounds[i] = 1.01 * static_cast<double>(terms) * std::numeric_limits<T>::epsilon() * abs_sum + 1e-300;
    }
  }
  return bounds;
}

class EpisodicPrefixSumTest : public ::testing::TestWithParam<Boundary> {};

TEST_P(EpisodicPrefixSumTest, DoublesMatchTheRecurrenceExactlyWholeOrChunkedWithCarries) {
  const Boundary boundary = GetParam();
  for (auto [streams, length] : {std::pair<int64_t, int64_t>{1, 1}, {3, 17}, {64, 50}, {37, 203}, {1024, 300}}) {
    const Data data = RandomData(streams, length, 0.05, 11 + streams);
    const std::vector<double> expected = Recurrence(data, boundary);
    for (int64_t chunk : {length, int64_t{1}, int64_t{7}, (length + 1) / 2}) {
      EXPECT_EQ(Scan<double>(data, boundary, chunk, tree::Device::kCpu).out, expected)
          << streams << "x" << length << " in chunks of " << chunk;
      EXPECT_EQ(Scan<double>(data, boundary, chunk, tree::Device::kCpu, /*loop=*/true).out, expected);
    }
  }
}

TEST_P(EpisodicPrefixSumTest, FloatsStayWithinTheStatedBound) {
  const Boundary boundary = GetParam();
  const Data data = RandomData(16, 4000, 0.002, 5);
  const std::vector<double> expected = Recurrence(data, boundary);
  const std::vector<double> bounds = ErrorBounds<float>(data, boundary);
  const ScanRun<float> run = Scan<float>(data, boundary, 333, tree::Device::kCpu);
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_LE(std::abs(run.out[i] - expected[i]), bounds[i]) << "element " << i;
  }
}

TEST_P(EpisodicPrefixSumTest, CudaMatchesTheCpuWithinRounding) {
  std::string why;
  if (tree::UsableCudaDeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  const Boundary boundary = GetParam();
  for (auto [streams, length] : {std::pair<int64_t, int64_t>{64, 50}, {1024, 1000}, {1, int64_t{1} << 21}}) {
    const Data data = RandomData(streams, length, 0.01, 3);
    const std::vector<double> expected = Recurrence(data, boundary);
    const std::vector<double> bounds = ErrorBounds<double>(data, boundary);
    const ScanRun<double> gpu = Scan<double>(data, boundary, length / 3 + 1, tree::Device::kCuda);
    const ScanRun<double> cpu = Scan<double>(data, boundary, length / 3 + 1, tree::Device::kCpu);
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_LE(std::abs(gpu.out[i] - expected[i]), bounds[i]) << streams << "x" << length << " element " << i;
    }
    EXPECT_EQ(gpu.carry_done, cpu.carry_done);
    const std::vector<double> float_bounds = ErrorBounds<float>(data, boundary);
    const ScanRun<float> gpu_float = Scan<float>(data, boundary, length, tree::Device::kCuda);
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_LE(std::abs(gpu_float.out[i] - expected[i]), float_bounds[i]) << "float element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothBoundaries, EpisodicPrefixSumTest,
                         ::testing::Values(Boundary::kEndsAt, Boundary::kStartsAt),
                         [](const auto& info) { return info.param == Boundary::kEndsAt ? "ends_at" : "starts_at"; });

// Scanning ones counts steps within an episode.
TEST(EpisodeCounterTest, ResetsToOneAtEachNewEpisode) {
  const std::vector<double> ones(8, 1.0);
  const std::vector<uint8_t> dones = {0, 0, 1, 0, 1, 1, 0, 0};
  std::vector<double> out(8), carry_sum(1, 0.0);
  std::vector<uint8_t> carry_done(1, 0);
  ASSERT_TRUE(EpisodicPrefixSum(ScanArrays<double>{ones, dones, 1, 8, carry_sum, carry_done, out},
                                Boundary::kEndsAt).ok());
  EXPECT_EQ(out, (std::vector<double>{1, 2, 3, 1, 2, 1, 1, 2}));  // the step after each done starts at 1
  EXPECT_EQ(carry_sum[0], 2.0);
  EXPECT_EQ(carry_done[0], 0);
  carry_sum = {0.0};
  carry_done = {0};
  ASSERT_TRUE(EpisodicPrefixSum(ScanArrays<double>{ones, dones, 1, 8, carry_sum, carry_done, out},
                                Boundary::kStartsAt).ok());
  EXPECT_EQ(out, (std::vector<double>{1, 2, 1, 2, 1, 1, 2, 3}));  // the flagged step itself is 1
  // A carry with its done flag set: the next call (ends_at) starts a new episode at once.
  carry_sum = {5.0};
  carry_done = {1};
  ASSERT_TRUE(EpisodicPrefixSum(ScanArrays<double>{std::span(ones).first(2), std::span(dones).first(2), 1, 2,
                                                   carry_sum, carry_done, std::span(out).first(2)},
                                Boundary::kEndsAt).ok());
  EXPECT_EQ(out[0], 1.0);
  EXPECT_EQ(out[1], 2.0);
}

TEST(EpisodicPrefixSumValidationTest, RejectsInconsistentShapesAndUnknownOptions) {
  std::vector<double> x(6), out(6), carry(2);
  std::vector<uint8_t> dones(6), carry_done(2);
  EXPECT_EQ(EpisodicPrefixSum(ScanArrays<double>{x, dones, 2, 4, carry, carry_done, out}, Boundary::kEndsAt).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(EpisodicPrefixSum(ScanArrays<double>{x, dones, 3, 2, carry, carry_done, out}, Boundary::kEndsAt).code(),
            Status::Code::kInvalidArgument);  // carries sized for 2 streams
  EXPECT_EQ(EpisodicPrefixSum(ScanArrays<double>{x, dones, -2, -3, carry, carry_done, out}, Boundary::kEndsAt).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(EpisodicPrefixSum(ScanArrays<double>{x, dones, 2, 3, carry, carry_done, out}, static_cast<Boundary>(7))
                .code(),
            Status::Code::kInvalidArgument);
  std::string why;
  if (tree::UsableCudaDeviceCount(&why) == 0) {
    EXPECT_EQ(EpisodicPrefixSum(ScanArrays<double>{x, dones, 2, 3, carry, carry_done, out}, Boundary::kEndsAt,
                                tree::Device::kCuda).code(),
              Status::Code::kUnavailable);
  }
  EXPECT_TRUE(EpisodicPrefixSum(ScanArrays<double>{{}, {}, 0, 0, {}, {}, {}}, Boundary::kEndsAt).ok());
}

}  // namespace
}  // namespace perserve::scan
