// perserve_bench_apex: the Ape-X load on one replay rank. A actors append
// Atari steps, each at a set rate, while L learners ask for samples of 512,
// each at a rate that rises phase by phase; the result is the highest sample
// rate the rank sustains with the intake held, its sample latencies, and the
// headroom: that rate over the 9.7K transitions a second the Ape-X paper's
// learner consumes (19 batches of 512). A client program over the public
// client library only (system/apex_roles.h), run beside a perserve-server
// of Atari n-step items (scripts/bench-apex.sh runs the sweep):
//
//   mpirun -np 1 perserve-server --column obs:uint8:84,84 --column action:int32
//            --column reward:float32 --column done:uint8 --n-step 3 --discount 0.99
//            --stack obs:4 --capacity 262144 --stats-interval 0 :
//          -np $((A + L)) perserve_bench_apex --learners L --fill-steps 262144 --out apex.json
//
// The last L ranks of the job are learners, this program's other ranks
// actors. First the actors fill the ring (--fill-steps in all, untimed) so
// that appends evict as in a full replay, and each learner takes one sample
// untimed. Then phases of --seconds each: every actor appends at
// --intake-steps-per-s / A, every learner samples at the phase's rate in
// batches/s: --start-rate, times --rate-factor each phase until a phase
// fails, then --refine phases halving the gap (geometric) between the last
// that held and the first that failed, then one phase with the learners
// unthrottled (back to back). A phase holds when every actor appended at
// least --sustain of its rate and every learner sampled at least --sustain
// of its own (the unthrottled phase: the actors alone). The sustained rate
// is the most samples/s of a phase that held. The peers' rank 0 (an actor)
// prints the phases and writes the JSON (--out).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "perserve/client.h"
#include "system/apex_roles.h"
#include "system/job_errors.h"

namespace perserve::bench {
namespace {

// The Ape-X paper's learner: 19 batches of 512 transitions a second.
constexpr double kApexLearnerSamplesPerSecond = 19.0 * 512.0;

[[noreturn]] void Die(const std::string& what) { AbortJob("perserve_bench_apex", what); }
void Check(const Status& status, const char* what) { CheckOrAbortJob("perserve_bench_apex", status, what); }

struct Options {
  int learners = 1;
  double intake_steps_per_second = 12500;
  int64_t fill_steps = 262144;
  int64_t batch = 512;
  double seconds = 4;
  double start_rate = 4, rate_factor = 1.5, sustain = 0.95;
  int refine = 2, max_phases = 20;
  std::string out;
};

// One phase, as the peers' rank 0 sums it up.
struct Phase {
  double rate = 0;  // batches/s each learner was asked for (0: unthrottled)
  double samples_per_second = 0, intake_steps_per_second = 0;
  double worst_actor = 0, worst_learner = 0;  // the lowest fraction of its rate a rank reached
  bool intake_held = false, samples_held = false;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;  // sample latency, ms, over every learner's samples
  bool held() const { return intake_held && samples_held; }
};

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())))];
}

// The phases' rates: up by the factor until one fails, then halving the gap
// between the last that held and the first that failed, then unthrottled (0),
// then done (-1).
class Ramp {
 public:
  explicit Ramp(const Options& options) : options_(options), rate_(options.start_rate) {}
  double rate() const { return rate_; }
  void Record(bool held) {
    if (rate_ == 0) {
      rate_ = -1;
      return;
    }
    if (held) {
      passed_ = std::max(passed_, rate_);
    } else {
      failed_ = failed_ > 0 ? std::min(failed_, rate_) : rate_;
    }
    if (failed_ == 0) {
      rate_ *= options_.rate_factor;
    } else if (refined_++ < options_.refine) {
      rate_ = passed_ > 0 ? std::sqrt(passed_ * failed_) : failed_ / 2;
    } else {
      rate_ = 0;
    }
  }

 private:
  const Options& options_;
  double rate_;
  double passed_ = 0, failed_ = 0;
  int refined_ = 0;
};

// Gathers every peer's counts at rank 0 and sums them up there.
Phase Summarize(MPI_Comm peers, bool is_learner, double rate, double actor_rate, const Options& options,
                const PhaseCounts& counts) {
  int rank = 0, size = 0;
  MPI_Comm_rank(peers, &rank);
  MPI_Comm_size(peers, &size);
  const double mine[4] = {is_learner ? 1.0 : 0.0, counts.seconds, is_learner ? counts.samples : counts.steps,
                          static_cast<double>(counts.latencies_ms.size())};
  std::vector<double> all(rank == 0 ? 4 * static_cast<size_t>(size) : 0);
  MPI_Gather(mine, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, 0, peers);
  std::vector<int> lengths(rank == 0 ? size : 0), offsets(rank == 0 ? size : 0);
  if (rank == 0) {
    for (int r = 0; r < size; ++r) {
      lengths[r] = static_cast<int>(all[4 * r + 3]);
      offsets[r] = r == 0 ? 0 : offsets[r - 1] + lengths[r - 1];
    }
  }
  std::vector<double> latencies(rank == 0 ? static_cast<size_t>(offsets.back() + lengths.back()) : 0);
  MPI_Gatherv(counts.latencies_ms.data(), static_cast<int>(counts.latencies_ms.size()), MPI_DOUBLE,
              latencies.data(), lengths.data(), offsets.data(), MPI_DOUBLE, 0, peers);
  Phase phase;
  phase.rate = rate;
  if (rank != 0) return phase;
  phase.worst_actor = phase.worst_learner = 1e300;
  for (int r = 0; r < size; ++r) {
    const double per_second = all[4 * r + 2] / all[4 * r + 1];
    if (all[4 * r] == 1.0) {
      phase.samples_per_second += per_second;
      if (rate > 0) phase.worst_learner = std::min(phase.worst_learner, per_second / (rate * options.batch));
    } else {
      phase.intake_steps_per_second += per_second;
      phase.worst_actor = std::min(phase.worst_actor, per_second / actor_rate);
    }
  }
  if (rate == 0) phase.worst_learner = 1;
  phase.intake_held = phase.worst_actor >= options.sustain;
  phase.samples_held = phase.worst_learner >= options.sustain;
  std::sort(latencies.begin(), latencies.end());
  phase.p50 = Percentile(latencies, 0.50);
  phase.p90 = Percentile(latencies, 0.90);
  phase.p99 = Percentile(latencies, 0.99);
  phase.max = latencies.empty() ? 0 : latencies.back();
  return phase;
}

std::string LoadAverage() {
  std::ifstream file("/proc/loadavg");
  double one = 0, five = 0, fifteen = 0;
  file >> one >> five >> fifteen;
  return fmt::format("[{:.2f}, {:.2f}, {:.2f}]", one, five, fifteen);
}

std::string PhaseJson(const Phase& p) {
  return fmt::format(
      "{{\"rate_batches_per_s_per_learner\": {}, \"samples_per_s\": {:.1f}, \"intake_steps_per_s\": {:.1f}, "
      "\"worst_actor_fraction\": {:.4f}, \"worst_learner_fraction\": {:.4f}, \"intake_held\": {}, "
      "\"samples_held\": {}, \"latency_ms\": {{\"p50\": {:.3f}, \"p90\": {:.3f}, \"p99\": {:.3f}, \"max\": {:.3f}}}}}",
      p.rate == 0 ? "null" : fmt::format("{:.3f}", p.rate), p.samples_per_second, p.intake_steps_per_second,
      p.worst_actor, p.worst_learner, p.intake_held, p.samples_held, p.p50, p.p90, p.p99, p.max);
}

void Report(const Options& options, int actors, const std::string& load_before, const std::vector<Phase>& phases) {
  const Phase* best = nullptr;
  for (const Phase& phase : phases) {
    if (phase.held() && (best == nullptr || phase.samples_per_second > best->samples_per_second)) best = &phase;
  }
  const double sustained = best ? best->samples_per_second : 0;
  fmt::print("perserve_bench_apex | {} actors at {:.0f} steps/s each | {} learners, batches of {}\n", actors,
             options.intake_steps_per_second / actors, options.learners, options.batch);
  fmt::print("  {:>14} {:>12} {:>12} {:>9} {:>9} {:>8} {:>8} {:>8}\n", "batches/s/lrn", "samples/s", "intake st/s",
             "actors", "learners", "p50 ms", "p90 ms", "p99 ms");
  for (const Phase& p : phases) {
    fmt::print("  {:>14} {:>12.0f} {:>12.0f} {:>8.2f}{} {:>8.2f}{} {:>8.1f} {:>8.1f} {:>8.1f}\n",
               p.rate == 0 ? std::string("unthrottled") : fmt::format("{:.2f}", p.rate), p.samples_per_second,
               p.intake_steps_per_second, p.worst_actor, p.intake_held ? ' ' : '!', p.worst_learner,
               p.samples_held ? ' ' : '!', p.p50, p.p90, p.p99);
  }
  fmt::print("  sustained {:.0f} samples/s with the intake held: headroom {:.2f}x the Ape-X learner's {:.0f}\n",
             sustained, sustained / kApexLearnerSamplesPerSecond, kApexLearnerSamplesPerSecond);
  if (options.out.empty()) return;
  std::string phase_json;
  for (const Phase& p : phases) phase_json += (phase_json.empty() ? "" : ", ") + PhaseJson(p);
  const std::string json = fmt::format(
      "{{\"benchmark\": \"apex\", \"actors\": {}, \"learners\": {}, \"batch\": {}, \"intake_steps_per_s\": {}, "
      "\"actor_steps_per_s\": {:.1f}, \"phase_seconds\": {}, \"sustain\": {}, \"fill_steps\": {}, "
      "\"apex_learner_samples_per_s\": {}, \"sustained_samples_per_s\": {:.1f}, \"headroom\": {:.4f}, "
      "\"sustained_phase\": {}, \"load_average_before\": {}, \"load_average_after\": {}, \"phases\": [{}]}}\n",
      actors, options.learners, options.batch, options.intake_steps_per_second,
      options.intake_steps_per_second / actors, options.seconds, options.sustain, options.fill_steps,
      kApexLearnerSamplesPerSecond, sustained, sustained / kApexLearnerSamplesPerSecond,
      best ? PhaseJson(*best) : "null", load_before, LoadAverage(), phase_json);
  std::FILE* file = std::fopen(options.out.c_str(), "w");
  if (file == nullptr) Die("cannot write " + options.out);
  std::fputs(json.c_str(), file);
  std::fclose(file);
}

}  // namespace
}  // namespace perserve::bench

int main(int argc, char** argv) {
  using namespace perserve;
  using namespace perserve::bench;
  Options options;
  CLI::App app{"perserve Ape-X load: paced actors appending Atari steps, learners sampling at rising rates"};
  app.add_option("--learners", options.learners, "the job's last L ranks are learners")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--intake-steps-per-s", options.intake_steps_per_second,
                 "steps a second all actors append together, split evenly")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--fill-steps", options.fill_steps, "steps appended before the phases, untimed (the ring's capacity)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--batch", options.batch, "items a sample")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seconds", options.seconds, "seconds a phase")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--start-rate", options.start_rate, "each learner's batches/s in the first phase")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--rate-factor", options.rate_factor, "each phase's rate over the last, until one fails")
      ->check(CLI::Range(1.01, 100.0))->capture_default_str();
  app.add_option("--refine", options.refine, "phases halving the gap after the first that fails")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--sustain", options.sustain, "the fraction of its rate each rank must reach for a phase to hold")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--max-phases", options.max_phases, "phases at most (the last one unthrottled)")
      ->check(CLI::Range(2, 1000))->capture_default_str();
  app.add_option("--out", options.out, "JSON result file (written by the peers' rank 0)");
  CLI11_PARSE(app, argc, argv);

  MPI_Init(&argc, &argv);
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const bool is_learner = world_rank >= world_size - options.learners;
  ClientOptions client_options;
  client_options.max_in_flight = kApexInFlight;
  std::unique_ptr<ActorClient> actor;
  std::unique_ptr<LearnerClient> learner;
  MPI_Comm peers = MPI_COMM_NULL;
  if (is_learner) {
    Check(LearnerClient::Join(MPI_COMM_WORLD, client_options, &learner), "learner join");
    Check(learner->Peers(&peers), "peers");
  } else {
    Check(ActorClient::Join(MPI_COMM_WORLD, client_options, &actor), "actor join");
    Check(actor->Peers(&peers), "peers");
  }
  int peer_rank = 0, peer_size = 0;
  MPI_Comm_rank(peers, &peer_rank);
  MPI_Comm_size(peers, &peer_size);
  const int actors = peer_size - options.learners;
  if (actors < 1) Die(fmt::format("{} clients cannot hold {} learners and an actor", peer_size, options.learners));
  const double actor_rate = options.intake_steps_per_second / actors;
  const std::string load_before = LoadAverage();

  std::optional<ApexActor> apex_actor;
  std::optional<ApexLearner> apex_learner;
  if (is_learner) {
    apex_learner.emplace(learner.get(), options.batch, static_cast<uint64_t>(world_rank));
  } else {
    apex_actor.emplace(actor.get(), static_cast<uint64_t>(world_rank));
    Check(apex_actor->Fill((options.fill_steps + actors - 1) / actors), "fill");
  }
  MPI_Barrier(peers);
  if (is_learner) {  // waits for the minimum size and faults in the reply buffer
    PhaseCounts untimed;
    Check(apex_learner->SampleOnce(&untimed), "first sample");
  }
  std::vector<Phase> phases;
  Ramp ramp(options);
  for (double rate = ramp.rate(); rate >= 0;) {
    MPI_Barrier(peers);
    PhaseCounts counts;
    if (is_learner) {
      Check(apex_learner->RunPhase(rate, options.seconds, &counts), "learner phase");
    } else {
      Check(apex_actor->RunPhase(actor_rate, options.seconds, &counts), "actor phase");
    }
    const Phase phase = Summarize(peers, is_learner, rate, actor_rate, options, counts);
    if (peer_rank == 0) {
      phases.push_back(phase);
      ramp.Record(phase.held());
      rate = static_cast<int>(phases.size()) + 1 == options.max_phases && ramp.rate() > 0 ? 0 : ramp.rate();
      if (static_cast<int>(phases.size()) >= options.max_phases) rate = -1;
    }
    MPI_Bcast(&rate, 1, MPI_DOUBLE, 0, peers);
  }
  Check(is_learner ? learner->Close() : actor->Close(), "close");
  if (peer_rank == 0) Report(options, actors, load_before, phases);
  MPI_Comm_free(&peers);
  MPI_Finalize();
  return 0;
}
