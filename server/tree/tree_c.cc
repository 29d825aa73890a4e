// The C ABI of perserve/tree_c.h over PriorityTree. The one place where tree
// Status values become C return codes and perserve_last_error() messages; no
// C++ exception crosses this boundary.
#include "perserve/tree_c.h"

#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "scan/episodic_prefix_sum.h"
#include "tree/priority_tree.h"

struct perserve_tree {
  std::unique_ptr<perserve::tree::PriorityTree> tree;
};

namespace {

thread_local std::string last_error;

int Fail(const std::string& message) {
  last_error = message;
  return 1;
}

int Report(const perserve::Status& status) {
  if (status.ok()) return 0;
  return Fail(status.ToString());
}

// Checks the handle, the count and that pointers are present when k > 0.
int CheckCall(const perserve_tree* t, int64_t k, const void* a, const void* b) {
  if (t == nullptr) return Fail("INVALID_ARGUMENT: tree handle is NULL");
  if (k < 0) return Fail("INVALID_ARGUMENT: k = " + std::to_string(k) + " is negative");
  if (k > 0 && (a == nullptr || b == nullptr)) return Fail("INVALID_ARGUMENT: NULL array with k > 0");
  return 0;
}

template <typename T>
std::span<T> Span(T* data, int64_t k) {
  return k == 0 ? std::span<T>() : std::span<T>(data, static_cast<size_t>(k));
}

template <typename Body>
int Guarded(Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return Fail(std::string("INTERNAL: ") + e.what());
  }
}

}  // namespace

extern "C" {

perserve_tree* perserve_tree_create(int64_t capacity, const char* device) {
  perserve::tree::Device parsed;
  perserve::Status status = perserve::tree::ParseDevice(device == nullptr ? "" : device, &parsed);
  auto handle = std::make_unique<perserve_tree>();
  if (status.ok()) status = perserve::tree::PriorityTree::Create(capacity, parsed, &handle->tree);
  if (!status.ok()) {
    Report(status);
    return nullptr;
  }
  return handle.release();
}

void perserve_tree_destroy(perserve_tree* t) { delete t; }

int perserve_tree_set_strategy(perserve_tree* t, const char* strategy) {
  if (t == nullptr) return Fail("INVALID_ARGUMENT: tree handle is NULL");
  perserve::tree::UpdateStrategy parsed;
  const perserve::Status status = perserve::tree::ParseUpdateStrategy(strategy == nullptr ? "" : strategy, &parsed);
  if (status.ok()) t->tree->SetStrategy(parsed);
  return Report(status);
}

int perserve_tree_update(perserve_tree* t, const int64_t* indices, const double* values, int64_t k) {
  if (CheckCall(t, k, indices, values) != 0) return 1;
  return Guarded([&] { return Report(t->tree->Update(Span(indices, k), Span(values, k))); });
}

int perserve_tree_update_with_exponent(perserve_tree* t, const int64_t* indices, const double* priorities,
                                       int64_t k, double alpha) {
  if (CheckCall(t, k, indices, priorities) != 0) return 1;
  return Guarded(
      [&] { return Report(t->tree->UpdateWithExponent(Span(indices, k), Span(priorities, k), alpha)); });
}

int perserve_tree_sample(perserve_tree* t, uint64_t seed, uint64_t counter, int64_t* out_indices,
                         double* out_values, int64_t k) {
  if (CheckCall(t, k, out_indices, out_values) != 0) return 1;
  return Guarded(
      [&] { return Report(t->tree->Sample(seed, counter, Span(out_indices, k), Span(out_values, k))); });
}

int perserve_tree_find_prefixsum(perserve_tree* t, const double* masses, int64_t* out_indices, int64_t k) {
  if (CheckCall(t, k, masses, out_indices) != 0) return 1;
  return Guarded([&] { return Report(t->tree->FindPrefixSum(Span(masses, k), Span(out_indices, k))); });
}

int perserve_tree_get(perserve_tree* t, const int64_t* indices, double* out_values, int64_t k) {
  if (CheckCall(t, k, indices, out_values) != 0) return 1;
  return Guarded([&] { return Report(t->tree->Get(Span(indices, k), Span(out_values, k))); });
}

double perserve_tree_total(perserve_tree* t) {
  if (t == nullptr) return Fail("INVALID_ARGUMENT: tree handle is NULL"), std::nan("");
  return t->tree->Total();
}

double perserve_tree_min(perserve_tree* t) {
  if (t == nullptr) return Fail("INVALID_ARGUMENT: tree handle is NULL"), std::nan("");
  return t->tree->Min();
}

int64_t perserve_tree_capacity(perserve_tree* t) {
  if (t == nullptr) return Fail("INVALID_ARGUMENT: tree handle is NULL"), -1;
  return t->tree->capacity();
}

int perserve_episodic_prefix_sum(const double* x, const uint8_t* dones, int64_t streams, int64_t length,
                                 int boundary, double* carry_sum, uint8_t* carry_done, double* out,
                                 const char* device) {
  if (streams < 0 || length < 0) return Fail("INVALID_ARGUMENT: streams and length must be >= 0");
  const int64_t elements = streams * length;
  if ((elements > 0 && (x == nullptr || dones == nullptr || out == nullptr)) ||
      (streams > 0 && (carry_sum == nullptr || carry_done == nullptr))) {
    return Fail("INVALID_ARGUMENT: NULL array with a non-zero size");
  }
  perserve::tree::Device parsed;
  const perserve::Status parsed_device = perserve::tree::ParseDevice(device == nullptr ? "" : device, &parsed);
  if (!parsed_device.ok()) return Report(parsed_device);
  return Guarded([&] {
    const perserve::scan::ScanArrays<double> arrays{Span(x, elements), Span(dones, elements), streams, length,
                                                    Span(carry_sum, streams), Span(carry_done, streams),
                                                    Span(out, elements)};
    return Report(perserve::scan::EpisodicPrefixSum(arrays, static_cast<perserve::scan::Boundary>(boundary), parsed));
  });
}

const char* perserve_last_error(void) { return last_error.c_str(); }

}  // extern "C"
