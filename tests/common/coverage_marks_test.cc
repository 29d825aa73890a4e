// Coverage marks: counted per name, known from their first hit, reset to 0.
#include "common/coverage_marks.h"

#include <gtest/gtest.h>

namespace perserve {
namespace {

void HitHere() { PERSERVE_MARK("test: one name at two places"); }
void HitThere() { PERSERVE_MARK("test: one name at two places"); }

int64_t HitsOf(const std::string& name) {
  const std::map<std::string, int64_t> hits = CoverageMarkHits();
  const auto found = hits.find(name);
  return found == hits.end() ? -1 : found->second;
}

TEST(CoverageMarksTest, AMarkIsKnownFromItsFirstHitAndOneNameAddsUp) {
  EXPECT_EQ(HitsOf("test: one name at two places"), -1) << "never hit: not known";
  HitHere();
  HitHere();
  EXPECT_EQ(HitsOf("test: one name at two places"), 2);
  HitThere();
  EXPECT_EQ(HitsOf("test: one name at two places"), 3) << "both places count under the name";
  ResetCoverageMarks();
  EXPECT_EQ(HitsOf("test: one name at two places"), 0) << "reset: known, not hit";
  for (int i = 0; i < 1000; ++i) HitThere();
  EXPECT_EQ(HitsOf("test: one name at two places"), 1000);
}

}  // namespace
}  // namespace perserve
