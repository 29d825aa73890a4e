#include "scan/episodic_prefix_sum.h"

namespace perserve::scan {

template <typename T>
Status EpisodicPrefixSumCuda(const ScanArrays<T>&, Boundary) {
  return Status::Unavailable("perserve was built without CUDA");
}

template Status EpisodicPrefixSumCuda<float>(const ScanArrays<float>&, Boundary);
template Status EpisodicPrefixSumCuda<double>(const ScanArrays<double>&, Boundary);

}  // namespace perserve::scan
