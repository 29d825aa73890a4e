#include "server/service/simulation/step_stream.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace perserve::service::simulation {
namespace {

replay::StepOptions OneStream(replay::StepOptions options) {
  options.streams = 1;
  return options;
}

uint8_t Mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a * 0x9e3779b97f4a7c15ULL ^ b * 0xbf58476d1ce4e5b9ULL ^ c * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  x *= 0xd6e8feb86659fd93ULL;
  return static_cast<uint8_t>(x >> 40);
}

}  // namespace

StepStream::StepStream(const StepStreamsConfig& config, int client, const std::vector<replay::step_test::RefStep>& held,
                       int run)
    : config_(config), client_(client), drawn_(static_cast<int64_t>(run) << 32) {
  const int tables = std::max<int>(1, static_cast<int>(config.tables.size()));
  for (int table = 0; table < tables; ++table) views_.emplace_back(OneStream(layout(table)), config.step_schema);
  items_.resize(static_cast<size_t>(tables));
  if (held.empty()) return;
  StepRows rows;
  for (const replay::step_test::RefStep& step : held) rows.push_back(step.columns);
  for (replay::step_test::StepReference& view : views_) {
    view.Append(0, rows);
    view.StartNewEpisode(0);
  }
  for (std::set<int64_t>& items : items_) {
    for (int64_t t = 0; t < size(); ++t) items.insert(items.end(), t);
  }
}

const replay::StepOptions& StepStream::layout(int table) const {
  return table == 0 ? config_.options : config_.tables[static_cast<size_t>(table)].layout;
}

StepRows StepStream::Draw(PortableRandom& rng, int64_t count) {
  StepRows rows;
  for (int64_t j = 0; j < count; ++j, ++drawn_) {
    std::vector<std::vector<std::byte>> step;
    for (size_t c = 0; c < config_.step_schema.columns.size(); ++c) {
      const Column& column = config_.step_schema.columns[c];
      std::vector<std::byte> row(static_cast<size_t>(column.ItemBytes()));
      if (column.name == "done") {
        row[0] = std::byte{DrawEpisodeEnd(rng, config_.episode_end)};
      } else if (column.name == "reward") {
        const double reward = rng.Real(-3.0, 3.0);
        const float reward32 = static_cast<float>(reward);
        std::memcpy(row.data(), column.dtype == DType::kFloat32 ? static_cast<const void*>(&reward32) : &reward,
                    row.size());
      } else {  // obs and action: bytes of this actor's step drawn_ and this column only
        for (size_t b = 0; b < row.size(); ++b) {
          row[b] = std::byte{Mix(static_cast<uint64_t>(client_) + 1, static_cast<uint64_t>(drawn_), (c << 16) + b)};
        }
      }
      step.push_back(std::move(row));
    }
    rows.push_back(std::move(step));
  }
  return rows;
}

void StepStream::Commit(int64_t kept, const StepRows& rows) {
  for (std::set<int64_t>& items : items_) items.erase(items.lower_bound(kept), items.end());
  const int64_t dropped = size() - kept;
  for (replay::step_test::StepReference& view : views_) {
    view.Unappend(0, dropped);
    view.Append(0, rows);
  }
}

std::vector<int64_t> StepStream::PickItems(PortableRandom& rng, int64_t most, int table) const {
  std::vector<int64_t> items;
  const int64_t have = size();
  if (have == 0) return items;
  const replay::StepOptions& o = layout(table);
  const std::set<int64_t>& sent = items_[static_cast<size_t>(table)];
  const int64_t span = o.kind == replay::StepOptions::Kind::kNStep ? o.n_step : o.sequence_length;
  const int64_t oldest = std::max<int64_t>(0, have - span - 4);
  for (int tries = 0; tries < 12 && static_cast<int64_t>(items.size()) < most; ++tries) {
    const int64_t t = rng.Int(oldest, have - 1);
    if (Creatable(t, table) && sent.count(t) == 0 && std::find(items.begin(), items.end(), t) == items.end()) {
      items.push_back(t);
    }
  }
  return items;
}

int64_t StepStream::RecentItem(PortableRandom& rng) const {
  const std::set<int64_t>& sent = items_[0];
  if (sent.empty()) return -1;
  const int64_t newest = *sent.rbegin();
  const auto first = sent.lower_bound(newest - 8);
  const int64_t recent = std::distance(first, sent.end());
  return *std::next(first, rng.Int(0, recent - 1));
}

int64_t StepStream::OffPeriod(PortableRandom& rng) const {
  const replay::StepOptions& o = config_.options;
  if (config_.n_step() || o.sequence_period == 1 || size() == 0) return -1;
  const int64_t oldest = std::max<int64_t>(0, size() - 12);
  for (int tries = 0; tries < 12; ++tries) {
    const int64_t t = rng.Int(oldest, size() - 1);
    if ((t - views_[0].EpisodeStart(0, t)) % o.sequence_period != 0) return t;
  }
  return -1;
}

int64_t StepStream::RecentBootstrap() const {
  for (int64_t t = size() - 1; t >= std::max<int64_t>(0, size() - 16); --t) {
    if (views_[0].Bootstrap(0, t)) return t;
  }
  return -1;
}

StepRows StepStream::ItemRows(PortableRandom& rng, int64_t count, int table) const {
  StepRows rows;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<std::vector<std::byte>> item;
    for (const Column& column : layout(table).item_columns) {
      std::vector<std::byte> row(static_cast<size_t>(column.ItemBytes()));
      for (auto& b : row) b = static_cast<std::byte>(rng.Int(0, 255));
      item.push_back(std::move(row));
    }
    rows.push_back(std::move(item));
  }
  return rows;
}

std::vector<std::byte> StepStream::Wire(const StepRows& rows, size_t columns) {
  std::vector<std::byte> bulk;
  for (size_t c = 0; c < columns; ++c) {
    for (const auto& row : rows) bulk.insert(bulk.end(), row[c].begin(), row[c].end());
  }
  return bulk;
}

}  // namespace perserve::service::simulation
