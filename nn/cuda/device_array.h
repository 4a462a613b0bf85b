// DeviceArray<T>: an owning array of T in the memory of the current CUDA
// device. It grows and never shrinks, and growing does not keep the
// contents: the model's activations and the optimizers' state are sized
// once (or per larger batch) and then reused. No CUDA header is included
// here (the allocation is in device_array.cc), so a class that holds one can
// be used from CPU code.
#pragma once

#include <cstddef>

namespace collie::nn::cuda {

namespace detail {
// cudaMalloc; throws BackendError.
void* device_allocate(size_t bytes);
// cudaFree; throws BackendError.
void device_free(void* data);
// cudaFree, ignoring errors: for destructors.
void device_free_noexcept(void* data) noexcept;
}  // namespace detail

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() {
    if (data_) detail::device_free_noexcept(data_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  // Makes room for n elements; throws BackendError.
  void reserve(size_t n) {
    if (n <= size_) return;
    if (data_) detail::device_free(data_);
    data_ = nullptr;
    data_ = static_cast<T*>(detail::device_allocate(n * sizeof(T)));
    size_ = n;
  }
  T* get() const { return data_; }
  size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace collie::nn::cuda
