#include "collie/nn/cuda/device_array.h"

#include <cuda_runtime.h>

#include "collie/runtime/cuda/cuda_device.h"

namespace collie::nn::cuda::detail {

void* device_allocate(size_t bytes) {
  void* data = nullptr;
  collie::cuda::check(cudaMalloc(&data, bytes), "cudaMalloc");
  return data;
}

void device_free(void* data) { collie::cuda::check(cudaFree(data), "cudaFree"); }

void device_free_noexcept(void* data) noexcept { cudaFree(data); }

}  // namespace collie::nn::cuda::detail
