// perserve-server: a replay rank. Launched in the same MPI job as the actors
// and learners (mpirun -np 1 perserve-server [flags] : -np N actor : -np M learner),
// joins them collectively, serves until every client has closed.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "mpi/join.h"
#include "replay/replay.h"
#include "replay/step_replay.h"
#include "service/checkpoint/checkpoint.h"
#include "service/replay_service.h"
#include "service/table_flags.h"
#include "service/transport/mpi_transport.h"

namespace {

struct Flags {
  int64_t capacity = int64_t{1} << 21;
  int64_t max_items = 0;  // 0: --capacity
  int assembly_threads = 0;  // 0: half the cores this rank may use, 1 to 8
  double alpha = 0.6;
  std::vector<std::string> columns;
  std::string device = "auto";
  uint64_t seed = 0x5eed;
  std::string log_level = "info";
  bool prefault_store = false;
  // Baselines' learners add 1e-6 to |TD error| (prioritized_replay_eps): the
  // same default here, so a zero TD error is a valid priority (docs/operations.md).
  double priority_eps = 1e-6;
  bool drop_bad_priorities = false;
  bool max_priority_from_adds = false;
  std::string restore;
  bool min_size_given = false;
  // The default table (docs/steps.md for its layouts: n-step transitions or
  // sequences over the actors' appended steps, with stacked columns and item
  // columns; transitions without them) ...
  perserve::service::TableFlags single;
  double discount = 0.99;
  // ... or several tables, one --table spec each (docs/tables.md).
  std::vector<std::string> tables;
  // The service loop's flags bind straight to its options; the minimum size
  // defaults to 1000 here (capped to the capacity unless given).
  perserve::service::ServiceOptions service = [] {
    perserve::service::ServiceOptions options;
    options.min_size_to_sample = 1000;
    return options;
  }();
};

// This server rank's sampling seed: --seed mixed with its world rank by
// SplitMix64's bijective finalizer, so no two server ranks of a job share a
// seed, and a server rank started again with the same --seed (and rank)
// repeats its samples.
uint64_t ShardSeed(uint64_t seed, int world_rank) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(world_rank) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The last SIGUSR1 or SIGTERM, taken by the service loop each pass; and
// whether SIGTERM ever came (the transport stops waiting for a dead sender).
// SIGINT is taken as SIGTERM: srun forwards a double Ctrl-C to every task
// as SIGINT, and a server started by hand is stopped with Ctrl-C. SIGUSR2
// too: perserve-launch's stop, which mpirun and srun forward to every rank
// at once (SIGTERM they do not forward: mpirun sends it only after its
// grace), while the clients it starts ignore it (docs/launch.md).
std::atomic<int> pending_signal{0};
std::atomic<bool> terminating{false};
void OnSignal(int signal) {
  if (signal == SIGINT || signal == SIGUSR2) signal = SIGTERM;
  if (signal == SIGTERM) terminating.store(true);
  pending_signal.store(signal);
}

// From SIGTERM until its final checkpoint is complete the server makes no
// MPI call (MpiTransport pauses): over TCP, Open MPI reports a peer that
// died (every client gets the launcher's SIGTERM too) through mpirun, which
// answers nothing while it waits to kill the job, so the call would block
// until the SIGKILL (docs/checkpoints.md). SIGTERM is handed to the service
// only while no checkpoint is being written, so its final one begins at
// once, and the pause ends when nothing is being written again. The loop
// thread alone calls both.
class FinalCheckpointPause {
 public:
  void Watch(const perserve::service::ReplayService* service) { service_ = service; }
  // The service's take_signal.
  int TakeSignal() {
    if (!terminating.load()) return pending_signal.exchange(0);
    if (sigterm_taken_ || Writing()) return 0;  // a SIGUSR1 pending as well: the final checkpoint covers it
    sigterm_taken_ = true;
    pending_signal.store(0);
    return SIGTERM;
  }
  bool Paused() const { return terminating.load() && (!sigterm_taken_ || Writing()); }

 private:
  bool Writing() const {
    return service_ != nullptr && service_->checkpoints() != nullptr && service_->checkpoints()->active();
  }
  const perserve::service::ReplayService* service_ = nullptr;
  bool sigterm_taken_ = false;
};

// Ends the whole job with a message: every other rank is waiting in the join.
[[noreturn]] void Abort(const std::string& message) {
  std::fprintf(stderr, "perserve-server: %s\n", message.c_str());
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

// Each table's flags: the single-table flags' one table, or the --table specs.
std::vector<perserve::service::TableFlags> TableFlagsOf(const Flags& flags) {
  if (flags.tables.empty()) return {flags.single};
  std::vector<perserve::service::TableFlags> tables;
  for (const std::string& spec : flags.tables) {
    perserve::service::TableFlags table;
    if (const perserve::Status s = perserve::service::ParseTableSpec(spec, &table); !s.ok()) Abort(s.ToString());
    tables.push_back(std::move(table));
  }
  return tables;
}

// "apex: 3-step transitions, discount 0.99, prioritized (alpha 0.6), 1000000 items at most, min size 1000;
// a sample returns ..." for the start-up log.
std::string DescribeTable(const perserve::replay::ItemTable& table, const perserve::service::RateLimiterOptions& limit) {
  using perserve::replay::StepOptions;
  const StepOptions& o = table.options();
  const perserve::replay::ReplayOptions& items = table.items().options();
  const std::string kind =
      o.kind == StepOptions::Kind::kNStep      ? fmt::format("{}-step transitions, discount {}", o.n_step, o.discount)
      : o.kind == StepOptions::Kind::kSequence ? fmt::format("sequences of {} steps every {} steps", o.sequence_length,
                                                             o.sequence_period)
                                               : std::string("transitions");
  std::string text = fmt::format("table {}: {}, {} sampler", table.name(), kind,
                                 perserve::table::SelectorKindName(items.sampler));
  if (items.sampler == perserve::table::SelectorKind::kPrioritized) text += fmt::format(" (alpha {})", items.alpha);
  text += fmt::format(", {} items at most ({} first out), min size to sample {}", items.capacity,
                      items.remover == perserve::replay::RemoverKind::kOldestFirst ? "oldest" : "lowest priority",
                      limit.min_size_to_sample);
  if (items.max_times_sampled > 0) text += fmt::format(", each item sampled at most {} times", items.max_times_sampled);
  if (limit.samples_per_insert > 0) {
    text += fmt::format(", rate limiter: {} samples per insert, error buffer {} items", limit.samples_per_insert,
                        limit.error_buffer);
  }
  text += fmt::format("; a sample returns {} ({} bytes an item)", table.sample_schema().ToString(),
                      table.SampleItemBytes());
  if (table.ItemColumnBytes() > 0) {
    text += "; items carry " + perserve::Schema{table.options().item_columns}.ToString();
  }
  return text;
}

// Joins, serves until every client has closed; everything MPI is freed on return.
int Serve(const Flags& flags, const perserve::Schema& schema, perserve::replay::ReplayOptions options) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  options.seed = ShardSeed(flags.seed, world_rank);
  spdlog::set_pattern(fmt::format("[%H:%M:%S.%e] [rank {} server] [%l] %v", world_rank));
  spdlog::set_level(spdlog::level::from_str(flags.log_level));

  // The replay first (allocation, store prefault, the tree's auto calibration):
  // clients wait in the join meanwhile, so no request waits for it. A
  // stream per rank of the job at most (its clients are fewer).
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  perserve::service::TableDefaults defaults;
  defaults.items = options;
  defaults.limiter = {flags.service.samples_per_insert, flags.service.error_buffer,
                      flags.service.min_size_to_sample};
  defaults.min_size_given = flags.min_size_given;
  defaults.reward_column = flags.service.reward_column;
  defaults.done_column = flags.service.done_column;
  defaults.step_capacity = flags.capacity;
  defaults.streams = world_size;
  defaults.prefault = flags.prefault_store;
  std::unique_ptr<perserve::replay::StepReplay> replay;
  perserve::service::ServiceOptions service_options = flags.service;
  perserve::Status status =
      perserve::service::TablesOf(TableFlagsOf(flags), defaults, schema, &replay, &service_options.tables);
  if (!status.ok()) Abort(status.ToString());
  const perserve::replay::ItemTable& first = replay->table(0);
  perserve::proto::ServedSchemas served;
  status = perserve::service::ServedSchemasOf(perserve::service::TableConfigsOf(*replay), schema,
                                              replay->steps().slack(), &served);
  if (!status.ok()) Abort(status.ToString());
  // By default half the cores this rank may use (the other half for MPI's
  // progress and ranks beside it), at most 8: a sample's copy is memory-bound.
  replay->SetAssemblyThreads(flags.assembly_threads > 0
                                 ? flags.assembly_threads
                                 : std::clamp(perserve::replay::AssemblyPool::UsableCores() / 2, 1, 8));
  perserve::mpi::Communicator comm;
  perserve::mpi::JoinResult joined;
  perserve::mpi::ServerInfo info{served, first.items().options().alpha, flags.capacity, {}};
  // Restored in the join, once the shard is known (clients wait in it
  // meanwhile), so the join tells each actor its stream's steps. A
  // checkpoint that does not fit or is damaged ends the job before anything
  // is served.
  perserve::service::CheckpointState restored;  // the service's parts of a restored checkpoint
  if (!flags.restore.empty()) {
    info.before_broadcast = [&](int shard, int shards, std::vector<int64_t>* stream_steps) {
      std::string loaded;
      const auto started = std::chrono::steady_clock::now();
      const perserve::Status loaded_status =
          perserve::service::LoadCheckpoint(flags.restore, shard, shards, replay.get(), &restored, &loaded);
      if (!loaded_status.ok()) Abort("--restore " + flags.restore + ": " + loaded_status.ToString());
      const perserve::store::StepStore& ring = replay->steps();
      std::string tables;
      for (int t = 0; t < replay->tables(); ++t) {
        const perserve::replay::Replay& items = replay->table(t).items();
        tables += fmt::format("{}{}: {} items, next key {}", t == 0 ? "" : "; ", replay->table(t).name(),
                              items.size(), items.next_key());
      }
      spdlog::info("restored {}: {}; {} steps held, next step key {}, in {:.2f} s", loaded,
                   replay->tables() > 1 ? tables
                                        : fmt::format("{} items, next key {}", replay->items().size(),
                                                      replay->items().next_key()),
                   ring.held(), ring.next_key(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      for (int s = 0; s < ring.streams(); ++s) stream_steps->push_back(ring.stream_steps(s));
      return perserve::Status::Ok();
    };
  }
  status = perserve::mpi::Join(MPI_COMM_WORLD, perserve::proto::Role::kServer, &info, &comm, &joined,
                               [](const std::string& message) { spdlog::warn("{}", message); });
  if (!status.ok()) Abort("join failed: " + status.ToString());
  std::string shard_warning;
  const std::string shard = perserve::mpi::DescribeShard(joined, &shard_warning);
  spdlog::info("serving {} clients ({}); {}{} steps, tree on {}, {} assembly threads, schema {} ({} bytes a step)",
               joined.client_ranks.size(), perserve::mpi::DescribeRoles(joined), shard.empty() ? "" : shard + "; ",
               flags.capacity, first.items().tree().device_name(), replay->assembly_threads(), schema.ToString(),
               schema.ItemBytes());
  for (int t = 0; t < replay->tables(); ++t) {
    const perserve::replay::ItemTable& table = replay->table(t);
    const perserve::service::RateLimiterOptions& limit = service_options.tables[static_cast<size_t>(t)];
    spdlog::info("{}", DescribeTable(table, limit));
    if (limit.min_size_to_sample > table.ReachableItems()) {
      spdlog::warn("table {}: min size to sample {}: a ring of {} steps holds at most {} whole items while each "
                   "stream's episodes run long (more only with short episodes); sampling may wait for ever",
                   table.name(), limit.min_size_to_sample, flags.capacity, table.ReachableItems());
    }
  }
  if (!shard_warning.empty()) spdlog::warn("{}", shard_warning);
  perserve::service::MpiTransport transport(comm.get(), joined.client_ranks,
                                               perserve::service::MpiTransport::ClientRoles(joined));
  // mpirun and srun send SIGTERM to every rank at once: a client may die
  // mid-message, and the final checkpoint must not wait for it, nor for MPI.
  FinalCheckpointPause pause;
  transport.SetStopWaiting({.terminating = [] { return terminating.load(); },
                            .paused = [&pause] { return pause.Paused(); }});
  service_options.shard = std::max(0, joined.shard);
  service_options.shards = static_cast<int>(joined.server_ranks.size());
  service_options.take_signal = [&pause] { return pause.TakeSignal(); };
  perserve::service::ReplayService service(replay.get(), &transport, service_options);
  pause.Watch(&service);
  if (!flags.restore.empty()) service.Restore(restored);
  status = service.Run();
  if (!status.ok()) Abort("stopped: " + status.ToString());  // clients would wait for replies forever
  // After SIGTERM the transport gives up on receives it was making (a live
  // client's add columns straight into the ring, under perserve-launch,
  // whose clients outlive the stop): MPI may still complete them, into the
  // ring, until MPI_Finalize. So the ring is not freed before it; the
  // process's exit frees it. (Freed here, MPI_Finalize wrote into freed
  // rows and crashed the server.)
  if (terminating.load()) (void)replay.release();
  return 0;
}

}  // namespace

static int Main(int argc, char** argv) {
  // perserve-launch's stop may come while the server starts (a large
  // --prefault-store takes seconds): taken from the first line, acted on at
  // the loop's first pass, as SIGTERM during the start-up is.
  std::signal(SIGUSR2, OnSignal);
  CLI::App app{"perserve-server: a prioritized experience replay rank"};
  Flags flags;
  app.set_config("--config", "", "TOML/INI file with any of these options (column = [\"obs:uint8:84,84,4\", ...])");
  app.add_option("--capacity", flags.capacity,
                 "steps the ring holds (all actors together; a transition is a step), oldest dropped first")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--max-items", flags.single.max_items,
                 "items the table holds at most (default: --capacity); past it the oldest items leave first. An item "
                 "also leaves when a step it needs leaves the ring")
      ->check(CLI::PositiveNumber);
  app.add_option("--alpha", flags.alpha, "priority exponent: leaf = priority^alpha")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--assembly-threads", flags.assembly_threads,
                 "threads that copy a sample's items into its reply, the service loop's one of them (default: half "
                 "the cores this rank may use, 1 to 8); the loop waits for them, so nothing changes under them")
      ->check(CLI::PositiveNumber);
  app.add_option("--min-size-to-sample", flags.service.min_size_to_sample,
                 "sample requests wait until the table holds this many items, in [1, --max-items] (default 1000 as "
                 "in Baselines, or fewer where the ring cannot hold so many whole items: half of those it can)")
      ->capture_default_str();
  app.add_option("--column", flags.columns,
                 "a schema column name:dtype:shape (repeat; dtypes uint8 int32 int64 float32 float64); "
                 "default: " + perserve::Schema::Default().ToString());
  app.add_option("--stats-interval", flags.service.stats_interval_seconds, "seconds between stats lines (0: none)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--messages-per-client-pass", flags.service.messages_per_client_pass,
                 "the most requests the round-robin loop takes from one client per pass (1: strict alternation)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--bytes-per-client-pass", flags.service.bytes_per_client_pass,
                 "no further request from a client in a pass once this many bytes came from it (one always does)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--device", flags.device, "priority tree device")->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--seed", flags.seed,
                 "sampling seed; each server rank mixes it with its MPI rank, so ranks never share a seed and a "
                 "rerun with the same seed repeats its samples")->capture_default_str();
  app.add_option("--priority-eps", flags.priority_eps,
                 "added to every priority (adds and updates) before the exponent: leaf = (p + eps)^alpha, as "
                 "Baselines' learners add 1e-6; with eps > 0 a zero priority is valid, with 0 it is refused")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--drop-bad-priorities", flags.drop_bad_priorities,
               "an update's NaN, infinite or negative priorities are dropped and counted (stats, update reply) "
               "instead of refusing the whole update; with --priority-eps 0 a zero gets the smallest leaf");
  app.add_flag("--max-priority-from-adds", flags.max_priority_from_adds,
               "an actor's explicit priorities also raise the running max priority that priority-less adds get; "
               "off by default, as in Baselines: actors' priorities come from a stale network, and one outlier "
               "would become every later priority-less add's priority (learner updates always raise it)");
  app.add_flag("--prefault-store", flags.prefault_store,
               "write every store page at start: steady intake from the first item, memory committed up front");
  app.add_option("--reward-column", flags.service.reward_column,
                 "scalar column whose per-actor episode returns the stats lines report")->capture_default_str();
  app.add_option("--done-column", flags.service.done_column, "scalar column that marks an episode's last step")
      ->capture_default_str();
  app.add_option("--max-unread-sample-replies", flags.service.max_unread_sample_replies,
                 "sample replies a client may have sent to it but not received; its next samples wait")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--max-unread-reply-bytes", flags.service.max_unread_reply_bytes,
                 "bytes of sample replies a client may have unreceived (one reply always goes when none is)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--max-deferred-samples", flags.service.max_deferred_samples,
                 "sample requests of one client that may wait; one more is refused (RESOURCE_EXHAUSTED)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--max-deferred-adds", flags.service.max_deferred_adds,
                 "adds of one client the server may hold (rate limiter, rows of replies in flight); one more is "
                 "refused (RESOURCE_EXHAUSTED)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--zero-copy-min-row-bytes", flags.service.zero_copy_min_row_bytes,
                 "sample replies whose rows (all columns of one item) are this many bytes or more are sent from "
                 "the store without a gather copy (-1: never)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()))->capture_default_str();
  app.add_option("--samples-per-insert", flags.service.samples_per_insert,
                 "rate limiter (0: off): sampled items per inserted item the server keeps to, within "
                 "--error-buffer; samples wait while the learners are ahead, adds while the actors are")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--error-buffer", flags.service.error_buffer,
                 "rate limiter: how many sampled items the ratio may stray either way (needs 2 E >= an add's "
                 "items x R + a sample's items, or an add is let through)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--checkpoint-dir", flags.service.checkpoint_dir,
                 "take checkpoints under this directory (when asked by a learner, on SIGUSR1, on SIGTERM, SIGINT "
                 "or SIGUSR2, and with --checkpoint-every); each server rank writes DIR/shard-S-of-K/checkpoint-N");
  app.add_option("--checkpoint-every", flags.service.checkpoint_every_seconds,
                 "seconds between checkpoints (0: only when asked); needs --checkpoint-dir")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--restore", flags.restore,
                 "start from a checkpoint: a checkpoint directory, or a --checkpoint-dir (its newest complete one "
                 "for this shard); the schema and capacity flags must match it");
  app.add_option("--n-step", flags.single.n_step,
                 "step streams (docs/steps.md): actors append steps, each item an n-step transition computed at "
                 "sample time (obs, action, return, discount, next_obs)")
      ->check(CLI::PositiveNumber);
  app.add_option("--discount", flags.discount, "the n-step return's discount G, in [0, 1]")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--sequence-length", flags.single.sequence_length,
                 "step streams: each item a sequence of this many steps (R2D2: 80), with a mask past its episode")
      ->check(CLI::PositiveNumber);
  app.add_option("--sequence-period", flags.single.sequence_period,
                 "sequences start every this many steps of an episode (R2D2: 40; default: the length)")
      ->check(CLI::PositiveNumber);
  app.add_option("--stack", flags.single.stacks,
                 "step streams: a column stored one frame a step and returned stacked, name:depth (obs:4 returns "
                 "84,84 frames as 84,84,4); n-step items also return it at the next step as next_<name>");
  app.add_option("--stack-axis", flags.single.stack_axis,
                 "where stacked frames go: last (obs:4 of 84,84 frames: 84,84,4, as Dopamine keeps them) or first "
                 "(4,84,84, as PyTorch's DQN does; replies then go out from the ring without assembling them)")
      ->check(CLI::IsMember({"first", "last"}));
  app.add_option("--item-column", flags.single.item_columns,
                 "step streams: a column an actor sends with each item it creates, name:dtype:shape (repeat)");
  app.add_option("--table", flags.tables,
                 "a table, NAME:key=value,... (repeat for several tables over the one step ring; docs/tables.md): "
                 "n_step, discount, sequence_length, sequence_period, stack, stack_axis, item_column, sampler (prioritized, "
                 "uniform, fifo, lifo, max_heap, min_heap), remover (fifo, min_heap), max_items, max_times_sampled, "
                 "alpha, min_size, samples_per_insert, error_buffer. Without it the flags above make one table, "
                 "\"default\"");
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    Abort("bad command line");
  }
  flags.min_size_given = app.count("--min-size-to-sample") > 0;
  if (app.count("--discount") > 0) flags.single.discount = flags.discount;
  if (flags.tables.empty()) {
    // The single table's flags, checked as flags (the --table specs' keys are checked alike, by TablesOf).
    const int64_t max_items = flags.single.max_items > 0 ? flags.single.max_items : flags.capacity;
    if (flags.min_size_given &&
        (flags.service.min_size_to_sample < 1 || flags.service.min_size_to_sample > max_items)) {
      Abort(fmt::format("--min-size-to-sample {} must be in [1, {}]: the table holds at most {} items (--max-items, "
                        "else --capacity); no sample could ever be served",
                        flags.service.min_size_to_sample, max_items, max_items));
    }
    // The layout's flags without a layout: refused rather than ignored.
    if (flags.single.n_step == 0 && flags.single.sequence_length == 0) {
      for (const char* flag : {"--stack", "--stack-axis", "--item-column", "--sequence-period", "--discount"}) {
        if (app.count(flag) > 0) {
          Abort(fmt::format("{} shapes n-step items or sequences: give --n-step or --sequence-length too (without "
                            "them the server stores transitions)",
                            flag));
        }
      }
    }
    if (flags.single.n_step > 0 && app.count("--sequence-period") > 0) {
      Abort("--sequence-period is for sequences (--sequence-length), not n-step items");
    }
    if (flags.single.sequence_length > 0 && app.count("--discount") > 0) {
      Abort("--discount is for n-step items (--n-step); a sequence returns its rewards as they are");
    }
  } else {
    for (const char* flag : {"--n-step", "--sequence-length", "--sequence-period", "--discount", "--stack",
                             "--stack-axis", "--item-column", "--max-items"}) {
      if (app.count(flag) > 0) {
        Abort(fmt::format("{} shapes the one table the flags make; with --table give it in each table's spec "
                          "(docs/tables.md)",
                          flag));
      }
    }
  }
  if (flags.service.checkpoint_every_seconds > 0 && flags.service.checkpoint_dir.empty()) {
    Abort("--checkpoint-every needs --checkpoint-dir");
  }

  perserve::Schema schema = flags.columns.empty() ? perserve::Schema::Default() : perserve::Schema{};
  for (const std::string& spec : flags.columns) {
    perserve::Column column;
    if (const perserve::Status s = perserve::ParseColumn(spec, &column); !s.ok()) Abort(s.ToString());
    schema.columns.push_back(column);
  }
  if (const perserve::Status s = schema.Validate(); !s.ok()) Abort(s.ToString());
  perserve::replay::ReplayOptions options{flags.capacity, flags.alpha, perserve::tree::Device::kAuto, flags.seed,
                                          flags.prefault_store};
  options.priority_eps = flags.priority_eps;
  options.drop_bad_priorities = flags.drop_bad_priorities;
  options.max_priority_from_adds = flags.max_priority_from_adds;
  if (const perserve::Status s = perserve::tree::ParseDevice(flags.device, &options.device); !s.ok()) {
    Abort(s.ToString());
  }

  MPI_Init(&argc, &argv);
  // Taken from here on (Open MPI's own handlers are set up in MPI_Init): a
  // SIGTERM during the start-up is acted on at the first pass of the loop.
  std::signal(SIGUSR1, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const int code = Serve(flags, schema, options);
  MPI_Finalize();
  return code;
}

// No exception leaves main: one that escapes the server's own handling (an
// allocation at start-up, a library's) ends the job with its message and
// exit code 2, as every other start-up error does, instead of terminate().
int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    Abort(std::string("stopped by an unexpected error: ") + e.what());
  } catch (...) {
    Abort("stopped by an unexpected error");
  }
}
