// A buffer the contract suite hands to a backend: host memory for the
// cpu backend, CUDA device memory for NCCL (built only with NCCL, where
// the suite's GPU run needs it). The expected values are always computed and
// compared on the host: make it from host bytes, read() it back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collie/base/types.h"

namespace collie::test {

class Buffer {
 public:
  // Holds `bytes` (count = bytes.size() / element_size(dtype)) on the CPU,
  // or on this thread's current CUDA device when on_gpu.
  Buffer(const std::vector<uint8_t>& bytes, DataType dtype, bool on_gpu);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer& operator=(Buffer&&) = delete;

  size_t count() const { return count_; }
  // Elements [offset, offset + count) (count SIZE_MAX: to the end).
  TensorView view(size_t offset = 0, size_t count = SIZE_MAX);
  // The current contents, copied to the host (after the device's queued work).
  std::vector<uint8_t> read() const;

 private:
  DataType dtype_;
  size_t count_;
  Device device_;
  std::vector<uint8_t> host_;  // the data itself on the CPU
  void* device_data_ = nullptr;
};

// The CUDA devices this process sees (0 in a build without NCCL).
int visible_gpus();
// Makes `device` this thread's current CUDA device, where Buffers go.
void use_gpu(int device);

}  // namespace collie::test
