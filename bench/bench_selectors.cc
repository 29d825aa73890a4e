// perserve_bench_selectors: each selector's hot operations on a full table.
//
//   perserve_bench_selectors [--capacity 2097152] [--repeats 9] [--alpha 0.6] [--out FILE]
//
// For every kind (server/table/selector.h): fills `capacity` slots with
// priorities uniform in [0.01, 10), then times, each `repeats` times:
//   insert            one insert at the full table, as a remover makes room:
//                     Delete(the oldest slot) then Insert(it, a new priority)
//   insert_batch50    the same for 50 oldest slots at once
//   draw_batch512     Select of 512 fractions uniform in [0, 1)
//   update_batch512   Update of 512 random held slots to new priorities
// and reports the median, in ns per item (an insert counts its delete), and
// each kind's insert and draw costs over the prioritized selector's, measured
// in the same run (the machines these run on are noisy; ratios within one
// run hold better than times across runs). Inputs are drawn before the
// timing, in 64 rotating sets. Writes JSON to stdout and to --out (exit 1
// where --out cannot be written).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "table/selector.h"

namespace {

using Clock = std::chrono::steady_clock;
using perserve::Status;
using perserve::table::Selector;
using perserve::table::SelectorKind;
using perserve::table::SelectorKindName;
using perserve::table::SelectorOptions;

constexpr SelectorKind kKinds[] = {SelectorKind::kPrioritized, SelectorKind::kUniform, SelectorKind::kFifo,
                                   SelectorKind::kLifo,        SelectorKind::kMaxHeap, SelectorKind::kMinHeap};
constexpr int kInputSets = 64;
constexpr int64_t kDrawBatch = 512;
constexpr int64_t kUpdateBatch = 512;
constexpr int64_t kInsertBatch = 50;
// Item operations a repeat times for each measure (an insert batch rounds down to whole batches).
constexpr int64_t kItemsPerRepeat = 32768;

void Check(const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "perserve_bench_selectors: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Costs {
  double fill_s = 0;
  double insert_ns = 0;
  double insert_batch50_ns = 0;
  double draw_batch512_ns = 0;
  double update_batch512_ns = 0;
};

// One kind's measures over a full selector of `capacity` slots.
class SelectorBench {
 public:
  SelectorBench(SelectorKind kind, int64_t capacity, double alpha) : capacity_(capacity), rng_(1) {
    Check(Selector::Create(kind, SelectorOptions{capacity, alpha, perserve::tree::Device::kCpu}, &selector_),
          "create");
  }

  double Fill() {
    const Clock::time_point start = Clock::now();
    constexpr int64_t kFillBatch = 4096;
    std::vector<int64_t> slots;
    std::vector<double> priorities;
    for (int64_t first = 0; first < capacity_; first += kFillBatch) {
      slots.clear();
      priorities.clear();
      for (int64_t slot = first; slot < std::min(capacity_, first + kFillBatch); ++slot) {
        slots.push_back(slot);
        priorities.push_back(Priority());
      }
      Check(selector_->Insert(slots, priorities), "fill");
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  // Delete + Insert of the `batch` oldest slots (slots were filled in order,
  // and each goes back in as the newest, so the oldest cycle through them).
  double InsertAtFull(int64_t batch) {
    const int64_t batches = std::max<int64_t>(1, kItemsPerRepeat / batch);
    std::vector<std::vector<double>> priorities(kInputSets, std::vector<double>(static_cast<size_t>(batch)));
    for (auto& set : priorities) {
      for (double& p : set) p = Priority();
    }
    std::vector<int64_t> slots(static_cast<size_t>(batch));
    const Clock::time_point start = Clock::now();
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t j = 0; j < batch; ++j) {
        slots[static_cast<size_t>(j)] = oldest_;
        oldest_ = oldest_ + 1 == capacity_ ? 0 : oldest_ + 1;
      }
      Check(selector_->Delete(slots), "delete");
      Check(selector_->Insert(slots, priorities[static_cast<size_t>(b % kInputSets)]), "insert");
    }
    return NanosecondsPerItem(Clock::now() - start, batches * batch);
  }

  double Draw() {
    std::vector<std::vector<double>> fractions(kInputSets, std::vector<double>(kDrawBatch));
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (auto& set : fractions) {
      for (double& u : set) u = unit(rng_);
    }
    std::vector<int64_t> slots(kDrawBatch);
    std::vector<double> probabilities(kDrawBatch);
    const int64_t batches = kItemsPerRepeat / kDrawBatch;
    const Clock::time_point start = Clock::now();
    for (int64_t b = 0; b < batches; ++b) {
      Check(selector_->Select(fractions[static_cast<size_t>(b % kInputSets)], slots, probabilities), "select");
    }
    return NanosecondsPerItem(Clock::now() - start, batches * kDrawBatch);
  }

  double Update() {
    std::vector<std::vector<int64_t>> slots(kInputSets, std::vector<int64_t>(kUpdateBatch));
    std::vector<std::vector<double>> priorities(kInputSets, std::vector<double>(kUpdateBatch));
    std::uniform_int_distribution<int64_t> slot(0, capacity_ - 1);
    for (int set = 0; set < kInputSets; ++set) {
      for (int64_t j = 0; j < kUpdateBatch; ++j) {
        slots[set][j] = slot(rng_);
        priorities[set][j] = Priority();
      }
    }
    const int64_t batches = kItemsPerRepeat / kUpdateBatch;
    const Clock::time_point start = Clock::now();
    for (int64_t b = 0; b < batches; ++b) {
      const size_t set = static_cast<size_t>(b % kInputSets);
      Check(selector_->Update(slots[set], priorities[set]), "update");
    }
    return NanosecondsPerItem(Clock::now() - start, batches * kUpdateBatch);
  }

 private:
  double Priority() { return std::uniform_real_distribution<double>(0.01, 10.0)(rng_); }

  static double NanosecondsPerItem(Clock::duration elapsed, int64_t items) {
    return std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(items);
  }

  int64_t capacity_;
  std::mt19937_64 rng_;
  std::unique_ptr<Selector> selector_;
  int64_t oldest_ = 0;
};

Costs Measure(SelectorKind kind, int64_t capacity, double alpha, int repeats) {
  SelectorBench bench(kind, capacity, alpha);
  Costs costs;
  costs.fill_s = bench.Fill();
  std::vector<double> insert, insert_batch, draw, update;
  for (int r = 0; r < repeats; ++r) {
    insert.push_back(bench.InsertAtFull(1));
    insert_batch.push_back(bench.InsertAtFull(kInsertBatch));
    draw.push_back(bench.Draw());
    update.push_back(bench.Update());
  }
  costs.insert_ns = Median(insert);
  costs.insert_batch50_ns = Median(insert_batch);
  costs.draw_batch512_ns = Median(draw);
  costs.update_batch512_ns = Median(update);
  return costs;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"perserve selector benchmark: insert, draw and update costs of each selector on a full table"};
  int64_t capacity = int64_t{1} << 21;
  int repeats = 9;
  double alpha = 0.6;
  std::string out;
  app.add_option("--capacity", capacity, "slots, all filled")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed repeats of each measure (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--alpha", alpha, "the prioritized selector's exponent")->check(CLI::NonNegativeNumber);
  app.add_option("--out", out, "JSON result file");
  CLI11_PARSE(app, argc, argv);

  std::vector<Costs> costs;
  for (const SelectorKind kind : kKinds) {
    costs.push_back(Measure(kind, capacity, alpha, repeats));
    std::fprintf(stderr, "%-11s insert %7.1f ns  insert/50 %7.1f ns  draw/512 %7.1f ns  update/512 %7.1f ns\n",
                 std::string(SelectorKindName(kind)).c_str(), costs.back().insert_ns, costs.back().insert_batch50_ns,
                 costs.back().draw_batch512_ns, costs.back().update_batch512_ns);
  }

  const Costs& prioritized = costs[0];
  std::string kinds, ratios;
  for (size_t k = 0; k < costs.size(); ++k) {
    const std::string name(SelectorKindName(kKinds[k]));
    const Costs& c = costs[k];
    kinds += fmt::format(
        "{}    \"{}\": {{\"fill_s\": {:.3f}, \"insert_ns\": {:.1f}, \"insert_batch50_ns\": {:.1f}, "
        "\"draw_batch512_ns\": {:.1f}, \"update_batch512_ns\": {:.1f}}}",
        k == 0 ? "" : ",\n", name, c.fill_s, c.insert_ns, c.insert_batch50_ns, c.draw_batch512_ns,
        c.update_batch512_ns);
    ratios += fmt::format(
        "{}    \"{}\": {{\"insert\": {:.3f}, \"insert_batch50\": {:.3f}, \"draw_batch512\": {:.3f}}}",
        k == 0 ? "" : ",\n", name, c.insert_ns / prioritized.insert_ns,
        c.insert_batch50_ns / prioritized.insert_batch50_ns, c.draw_batch512_ns / prioritized.draw_batch512_ns);
  }
  const std::string json = fmt::format(
      "{{\n  \"benchmark\": \"selectors\",\n  \"capacity\": {},\n  \"repeats\": {},\n  \"alpha\": {},\n"
      "  \"unit\": \"ns per item, median of repeats\",\n  \"selectors\": {{\n{}\n  }},\n"
      "  \"relative_to_prioritized\": {{\n{}\n  }}\n}}\n",
      capacity, repeats, alpha, kinds, ratios);
  std::fputs(json.c_str(), stdout);
  if (!out.empty()) {
    std::FILE* file = std::fopen(out.c_str(), "w");
    if (file == nullptr || std::fputs(json.c_str(), file) < 0 || std::fclose(file) != 0) {
      std::fprintf(stderr, "perserve_bench_selectors: cannot write %s\n", out.c_str());
      return 1;
    }
  }
  return 0;
}
