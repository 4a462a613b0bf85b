// CUDA device queries and the per-thread "current stream" that CPU code may
// use without including CUDA headers. Streams travel as opaque void*
// (a cudaStream_t); nullptr is the legacy default stream.
#pragma once

#include <string>

namespace collie::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no device
// (never throws).
int device_count();
// Why device_count() is 0, e.g. "cudaGetDeviceCount: no CUDA-capable device
// is detected"; empty when devices exist.
std::string no_device_reason();

// Makes `device` current for this thread; throws BackendError.
void set_device(int device);
int current_device();

// The stream collectives order themselves after (torch's "current stream").
// Per thread; defaults to nullptr (the legacy default stream).
void* current_stream();
void set_current_stream(void* stream);

// Throws BackendError naming `what` when err (a cudaError_t) is not success.
void check(int err, const char* what);

}  // namespace collie::cuda
