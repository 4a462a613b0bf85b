#include "collie/test/runtime/contract/buffers.h"

#include <utility>

#include "collie/base/error.h"

#if COLLIE_HAVE_NCCL
#include <cuda_runtime.h>

#include "collie/runtime/cuda/cuda_device.h"
#endif

namespace collie::test {

int visible_gpus() {
#if COLLIE_HAVE_NCCL
  return cuda::device_count();
#else
  return 0;
#endif
}

void use_gpu([[maybe_unused]] int device) {
#if COLLIE_HAVE_NCCL
  cuda::set_device(device);
#else
  throw BackendError("the contract suite's GPU buffers need a build with NCCL");
#endif
}

Buffer::Buffer(const std::vector<uint8_t>& bytes, DataType dtype, bool on_gpu)
    : dtype_(dtype), count_(bytes.size() / element_size(dtype)) {
  if (!on_gpu) {
    host_ = bytes;
    return;
  }
#if COLLIE_HAVE_NCCL
  device_ = Device::cuda(cuda::current_device());
  // One byte at least, so that even an empty buffer has an address.
  cuda::check(cudaMalloc(&device_data_, bytes.empty() ? 1 : bytes.size()), "cudaMalloc");
  if (!bytes.empty())
    cuda::check(cudaMemcpy(device_data_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
                "cudaMemcpy to the device");
#else
  throw BackendError("the contract suite's GPU buffers need a build with NCCL");
#endif
}

Buffer::~Buffer() {
#if COLLIE_HAVE_NCCL
  if (device_data_ != nullptr) cudaFree(device_data_);
#endif
}

Buffer::Buffer(Buffer&& other) noexcept
    : dtype_(other.dtype_),
      count_(other.count_),
      device_(other.device_),
      host_(std::move(other.host_)),
      device_data_(std::exchange(other.device_data_, nullptr)) {}

TensorView Buffer::view(size_t offset, size_t count) {
  if (count == SIZE_MAX) count = count_ - offset;
  if (offset + count > count_)
    throw InvalidArgument("Buffer::view: elements past the end of the buffer");
  const size_t es = element_size(dtype_);
  uint8_t* base = device_data_ != nullptr ? static_cast<uint8_t*>(device_data_) : host_.data();
  return TensorView{base + offset * es, count, dtype_, device_};
}

std::vector<uint8_t> Buffer::read() const {
  if (device_data_ == nullptr) return host_;
  std::vector<uint8_t> out(count_ * element_size(dtype_));
#if COLLIE_HAVE_NCCL
  // On the caller's stream (the legacy default stream here), with no
  // device-wide synchronisation: a result reads right only when the backend
  // ordered that stream after the collective (Work::synchronize, a blocking
  // call) or the host waited for it (Work::wait).
  cuda::check(cudaStreamSynchronize(static_cast<cudaStream_t>(cuda::current_stream())),
              "cudaStreamSynchronize(current stream)");
  if (!out.empty())
    cuda::check(cudaMemcpy(out.data(), device_data_, out.size(), cudaMemcpyDeviceToHost),
                "cudaMemcpy to the host");
#endif
  return out;
}

}  // namespace collie::test
