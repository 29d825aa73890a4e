// The importance-sampling weight of prioritized replay (Schaul et al. 2016),
// the one formula the replay rank (one shard) and a learner's sample over
// several shards both compute, so a sharded replay gives the same weights as
// one rank holding everything, to the last bit.
#pragma once

#include <cmath>

namespace perserve {

// w = (N P(i))^-beta / max_w with max_w = (N P_min)^-beta, which is
// (leaf / min_leaf)^-beta: N and the total cancel, leaf >= min_leaf makes
// every weight <= 1, and the item holding the minimum gets exactly 1.
// `min_leaf` is the smallest positive leaf (> 0; the tree never has a zero
// min while it holds a drawable item). Leaves more than 2^1024 apart (a leaf
// clamped to 2^-1022 beside one of 4 or more) overflow the ratio: the weight
// then comes from logarithms, tiny but not 0, instead of inf^-beta = 0.
inline double ImportanceWeight(double leaf, double min_leaf, double beta) {
  const double ratio = leaf / min_leaf;
  if (std::isfinite(ratio)) return std::pow(ratio, -beta);
  return std::exp(-beta * (std::log(leaf) - std::log(min_leaf)));
}

}  // namespace perserve
