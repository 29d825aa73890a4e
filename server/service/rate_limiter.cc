#include "service/rate_limiter.h"

#include <cmath>

#include <fmt/format.h>

namespace perserve::service {

Status RateLimiter::Validate(const RateLimiterOptions& options) {
  if (!std::isfinite(options.samples_per_insert) || options.samples_per_insert < 0.0) {
    return Status::InvalidArgument(
        fmt::format("--samples-per-insert {} must be finite and >= 0", options.samples_per_insert));
  }
  if (!std::isfinite(options.error_buffer) || options.error_buffer < 0.0) {
    return Status::InvalidArgument(fmt::format("--error-buffer {} must be finite and >= 0", options.error_buffer));
  }
  if (options.min_size_to_sample < 1) {
    return Status::InvalidArgument(
        fmt::format("--min-size-to-sample {} must be >= 1", options.min_size_to_sample));
  }
  return Status::Ok();
}

bool RateLimiter::CanSample(int64_t items, int64_t size) const {
  if (size < options_.min_size_to_sample) return false;
  if (!enabled()) return true;
  return diff() - static_cast<double>(items) >=
         options_.samples_per_insert * static_cast<double>(options_.min_size_to_sample) - options_.error_buffer;
}

bool RateLimiter::CanInsert(int64_t items, int64_t size) const {
  if (!enabled() || size < options_.min_size_to_sample) return true;
  return diff() + static_cast<double>(items) * options_.samples_per_insert <=
         options_.samples_per_insert * static_cast<double>(options_.min_size_to_sample) + options_.error_buffer;
}

void RateLimiter::Inserted(int64_t items, int64_t size_after) {
  inserted_ += items;
  if (size_after >= options_.min_size_to_sample) observed_ = true;
  Observe();
}

void RateLimiter::Sampled(int64_t items) {
  sampled_ += items;
  Observe();
}

void RateLimiter::Observe() {
  if (!observed_ || !enabled()) return;
  lowest_ = std::min(lowest_, offset());
  highest_ = std::max(highest_, offset());
}

std::string RateLimiter::Describe() const {
  if (!enabled()) return "off";
  return fmt::format("samples per insert {} +- {} items: offset now {:.0f}, seen [{:.0f}, {:.0f}]",
                     options_.samples_per_insert, options_.error_buffer, offset(), lowest_offset(),
                     highest_offset());
}

}  // namespace perserve::service
