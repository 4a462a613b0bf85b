// The CUDA path of a build without it (collie without NCCL, or a torch
// without CUDA): CUDA tensors are refused with the reason, which CMake
// passes as COLLIE_TORCH_NO_CUDA_REASON.
#include "collie/runtime/torch/cuda_path.h"

#ifndef COLLIE_TORCH_NO_CUDA_REASON
#define COLLIE_TORCH_NO_CUDA_REASON "this build of collie_torch has no CUDA path"
#endif

namespace collie::torch_adapter {

std::unique_ptr<CudaPath> make_cuda_path(const CudaPathConfig&, std::string* why_not) {
  *why_not = COLLIE_TORCH_NO_CUDA_REASON;
  return nullptr;
}

}  // namespace collie::torch_adapter
