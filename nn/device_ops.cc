#include "collie/nn/device_ops.h"

#include <cstring>
#include <new>

namespace collie::nn {

void* HostOps::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  // Zero-filled, float-aligned (new's alignment is enough for any scalar).
  void* data = ::operator new(bytes);
  std::memset(data, 0, bytes);
  return data;
}

void HostOps::deallocate(void* data) noexcept { ::operator delete(data); }

void HostOps::copy(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
}

void HostOps::scale(float* data, size_t count, float factor) {
  for (size_t i = 0; i < count; ++i) data[i] *= factor;
}

HostOps& HostOps::instance() {
  static HostOps ops;
  return ops;
}

}  // namespace collie::nn
