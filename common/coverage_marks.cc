#include "common/coverage_marks.h"

#include <mutex>
#include <vector>

namespace perserve {
namespace {

struct Registry {
  std::mutex mutex;  // registrations only: a hit takes no lock
  std::vector<CoverageMark*> marks;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: marks are hit until the process ends
  return *registry;
}

}  // namespace

CoverageMark::CoverageMark(const char* name) : name_(name) {
  Registry& registry = TheRegistry();
  const std::lock_guard<std::mutex> lock(registry.mutex);
  registry.marks.push_back(this);
}

std::map<std::string, int64_t> CoverageMarkHits() {
  Registry& registry = TheRegistry();
  const std::lock_guard<std::mutex> lock(registry.mutex);
  std::map<std::string, int64_t> hits;
  for (const CoverageMark* mark : registry.marks) hits[mark->name()] += mark->hits();
  return hits;
}

void ResetCoverageMarks() {
  Registry& registry = TheRegistry();
  const std::lock_guard<std::mutex> lock(registry.mutex);
  for (CoverageMark* mark : registry.marks) mark->Reset();
}

}  // namespace perserve
