#include "scan/episodic_prefix_sum.h"

namespace perserve::scan {

struct CudaScanWorkspace::State {};

CudaScanWorkspace::CudaScanWorkspace(std::unique_ptr<State> state) : state_(std::move(state)) {}
CudaScanWorkspace::~CudaScanWorkspace() = default;

Status CudaScanWorkspace::Create(std::unique_ptr<CudaScanWorkspace>*) {
  return Status::Unavailable("perserve was built without CUDA");
}

template <typename T>
Status EpisodicPrefixSumCuda(const ScanArrays<T>&, Boundary, CudaScanWorkspace*) {
  return Status::Unavailable("perserve was built without CUDA");
}

template <typename T>
Status EpisodicPrefixSumCuda(const ScanArrays<T>&, Boundary) {
  return Status::Unavailable("perserve was built without CUDA");
}

template Status EpisodicPrefixSumCuda<float>(const ScanArrays<float>&, Boundary, CudaScanWorkspace*);
template Status EpisodicPrefixSumCuda<double>(const ScanArrays<double>&, Boundary, CudaScanWorkspace*);
template Status EpisodicPrefixSumCuda<float>(const ScanArrays<float>&, Boundary);
template Status EpisodicPrefixSumCuda<double>(const ScanArrays<double>&, Boundary);

}  // namespace perserve::scan
