// DeviceOps: the handful of memory operations DistributedDataParallel needs
// on the device its model lives on, besides the collectives themselves --
// the part of ATen's device dispatch that c10d's Reducer uses (allocate a
// flat bucket, copy into it, scale it, order a collective after the compute
// stream). HostOps is the CPU one; the CUDA one lives with the CUDA model
// (nn/cuda/cuda_mlp.cc), so no CPU file names CUDA.
//
// Ordering. On a GPU every operation is queued on the model's compute
// stream, after whatever the model queued before it. A collective is ordered
// after that stream by running its launch (and its Work::wait) inside
// with_compute_stream(): the NCCL backend records an event on the thread's
// current stream and makes its own stream wait for it, and Work::wait makes
// the current stream wait for the collective -- never a device-wide sync.
#pragma once

#include <cstddef>
#include <functional>
#include <utility>

#include "collie/base/types.h"

namespace collie::nn {

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;

  virtual Device device() const = 0;
  // `bytes` zero-filled bytes on device(); nullptr for 0 bytes. Throws
  // (BackendError on a GPU) when the memory is not there.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* data) noexcept = 0;
  // Copies between host memory and device() memory in any direction, after
  // the work queued so far; when it returns, host memory involved is
  // written (or may be reused).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // data[i] *= factor for i < count, queued after the work so far.
  virtual void scale(float* data, size_t count, float factor) = 0;
  // Runs f with the model's compute stream as this thread's current stream
  // (nothing to do on the CPU); restores the previous one, also on throw.
  virtual void with_compute_stream(const std::function<void()>& f) { f(); }
};

// The CPU: new/delete, memcpy, a loop.
class HostOps final : public DeviceOps {
 public:
  Device device() const override { return Device::cpu(); }
  void* allocate(size_t bytes) override;
  void deallocate(void* data) noexcept override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void scale(float* data, size_t count, float factor) override;

  static HostOps& instance();
};

// An owning buffer of `count` elements of T on an ops' device.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceOps& ops, size_t count)
      : ops_(&ops), data_(static_cast<T*>(ops.allocate(count * sizeof(T)))), count_(count) {}
  ~DeviceBuffer() {
    if (ops_ != nullptr) ops_->deallocate(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ops_(std::exchange(other.ops_, nullptr)),
        data_(std::exchange(other.data_, nullptr)),
        count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ops_, other.ops_);
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  size_t size() const { return count_; }
  // For the collectives.
  TensorView view() const { return TensorView{data_, count_, data_type_of<T>(), ops_->device()}; }
  void copy_from_host(const T* host) { ops_->copy(data_, host, count_ * sizeof(T)); }
  void copy_to_host(T* host) const { ops_->copy(host, data_, count_ * sizeof(T)); }

 private:
  DeviceOps* ops_ = nullptr;
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace collie::nn
