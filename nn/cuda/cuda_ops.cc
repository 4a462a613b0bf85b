#include "collie/nn/cuda/cuda_ops.h"

#include <cuda_runtime.h>

#include "collie/base/logging.h"
#include "collie/nn/cuda/mlp_kernels.h"
#include "collie/runtime/cuda/cuda_device.h"

namespace collie::nn::cuda {

namespace {
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

void* CudaOps::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  collie::cuda::set_device(device_);
  void* data = nullptr;
  collie::cuda::check(cudaMalloc(&data, bytes), "cudaMalloc (DDP bucket)");
  cudaError_t e = cudaMemsetAsync(data, 0, bytes, as_stream(stream_));
  if (e == cudaSuccess) e = cudaStreamSynchronize(as_stream(stream_));
  if (e != cudaSuccess) {
    cudaFree(data);
    collie::cuda::check(e, "cudaMemsetAsync (DDP bucket)");
  }
  return data;
}

void CudaOps::deallocate(void* data) noexcept {
  if (data == nullptr) return;
  cudaSetDevice(device_);
  cudaError_t e = cudaStreamSynchronize(as_stream(stream_));
  if (e != cudaSuccess) {
    COLLIE_LOG(kWarn) << "CudaOps: cudaStreamSynchronize before cudaFree: "
                      << cudaGetErrorString(e);
  }
  e = cudaFree(data);
  if (e != cudaSuccess) {
    COLLIE_LOG(kWarn) << "CudaOps: cudaFree: " << cudaGetErrorString(e);
  }
}

void CudaOps::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  collie::cuda::set_device(device_);
  collie::cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream_)),
                      "cudaMemcpyAsync");
  collie::cuda::check(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize (copy)");
}

void CudaOps::scale(float* data, size_t count, float factor) {
  collie::cuda::set_device(device_);
  launch_scale(data, factor, static_cast<int64_t>(count), as_stream(stream_));
  collie::cuda::check(cudaGetLastError(), "scale kernel launch");
}

void CudaOps::with_compute_stream(const std::function<void()>& f) {
  collie::cuda::set_device(device_);
  CurrentStreamGuard guard(stream_);
  f();
}

CurrentStreamGuard::CurrentStreamGuard(void* stream) : previous_(collie::cuda::current_stream()) {
  collie::cuda::set_current_stream(stream);
}

CurrentStreamGuard::~CurrentStreamGuard() { collie::cuda::set_current_stream(previous_); }

}  // namespace collie::nn::cuda
