// CUDA device queries that CPU code may call without including CUDA headers.
#pragma once

#include <string>

namespace collie::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no device
// (never throws).
int device_count();
// Why device_count() is 0, e.g. "cudaGetDeviceCount: no CUDA-capable device
// is detected"; empty when devices exist.
std::string no_device_reason();

}  // namespace collie::cuda
