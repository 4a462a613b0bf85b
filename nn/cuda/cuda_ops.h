// CudaOps: DeviceOps (nn/device_ops.h) on one CUDA device, everything queued
// on one stream -- the compute stream of the model that owns it -- so that
// DDP's bucket copies and scaling run in order with the model's kernels, and
// collectives launched inside with_compute_stream() are ordered after them
// by the nccl backend's events. No CUDA header is included here: the stream
// travels as void* (a cudaStream_t), as in runtime/cuda/cuda_device.h.
#pragma once

#include "collie/nn/device_ops.h"

namespace collie::nn::cuda {

class CudaOps final : public DeviceOps {
 public:
  // `stream` must outlive this object.
  CudaOps(int device, void* stream) : device_(device), stream_(stream) {}

  Device device() const override { return Device::cuda(device_); }
  void* stream() const { return stream_; }

  // cudaMalloc, zeroed on the stream; returns when the zeros are there.
  void* allocate(size_t bytes) override;
  // Waits for the stream (a bucket may still be read by queued work), then
  // cudaFree. Errors are logged, never thrown.
  void deallocate(void* data) noexcept override;
  // cudaMemcpyAsync(cudaMemcpyDefault) on the stream, then waits for it:
  // used at construction and teardown only, never per step.
  void copy(void* dst, const void* src, size_t bytes) override;
  // A kernel on the stream; the host does not wait.
  void scale(float* data, size_t count, float factor) override;
  void with_compute_stream(const std::function<void()>& f) override;

 private:
  int device_;
  void* stream_;
};

// Makes `stream` this thread's current stream (collie::cuda::current_stream)
// for the guard's lifetime: collectives issued meanwhile are ordered after
// it, and Work::wait() orders it after them.
class CurrentStreamGuard {
 public:
  explicit CurrentStreamGuard(void* stream);
  ~CurrentStreamGuard();
  CurrentStreamGuard(const CurrentStreamGuard&) = delete;
  CurrentStreamGuard& operator=(const CurrentStreamGuard&) = delete;

 private:
  void* previous_;
};

}  // namespace collie::nn::cuda
