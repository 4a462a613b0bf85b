#include "collie/runtime/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::cuda {
namespace {
thread_local cudaStream_t t_current_stream = nullptr;
}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

std::string no_device_reason() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
  }
  return n == 0 ? "no CUDA device is visible" : "";
}

void check(int err, const char* what) {
  if (err == cudaSuccess) return;
  auto e = static_cast<cudaError_t>(err);
  throw BackendError(str_cat(what, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

void set_device(int device) {
  check(cudaSetDevice(device), str_cat("cudaSetDevice(", device, ")").c_str());
}

int current_device() {
  int d = -1;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

void* current_stream() { return t_current_stream; }
void set_current_stream(void* stream) { t_current_stream = static_cast<cudaStream_t>(stream); }

}  // namespace collie::cuda
