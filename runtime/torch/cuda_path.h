// The CUDA tensors' path of BackendCollie: collie's NCCL backend on torch's
// current stream. Built only where collie has NCCL and torch has CUDA
// (cuda_path.cc); elsewhere cuda_path_none.cc says why CUDA tensors are
// refused. No CUDA header is included here.
//
// One NcclProcessGroup per CUDA device a group's tensors use, created by the
// first operation on that device (a collective call, as torch's NCCL
// backend does). Each operation:
//  * orders NCCL's stream after torch's current stream (collie does that
//    with an event) and tells the caching allocator that every tensor it
//    touches is in use on NCCL's stream (recordStream);
//  * returns a Work whose wait() and synchronize() make the caller's current
//    stream wait for the operation and return at once; isCompleted() polls
//    its event; getFuture() is a CUDA-aware future completed on NCCL's
//    stream (torch's c10::ivalue::Future with the device).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>
#include <string>

#include "collie/base/deadline.h"
#include "collie/rendezvous/store.h"
#include "collie/runtime/torch/launch.h"

namespace collie::torch_adapter {

class CudaPath {
 public:
  virtual ~CudaPath() = default;
  virtual c10::intrusive_ptr<::c10d::Work> launch(Launch call, const Body& body) = 0;
  // Aborts every communicator: pending and later calls fail with `reason`.
  virtual void abort(const std::string& reason) = 0;
  // Finishes every communicator (bounded by the group's timeout).
  virtual void shutdown() = 0;
  // Whether an operation on a CUDA tensor has made the group's NCCL
  // communicator (which collie cannot shrink: BackendCollie::shrink).
  virtual bool has_communicator() = 0;
};

struct CudaPathConfig {
  std::shared_ptr<Store> store;  // the group's, prefixed for the CUDA path
  int rank = -1;
  int size = -1;
  Timeout timeout = kDefaultTimeout;
  std::string group_name;
};

// The CUDA path, or nullptr with *why_not saying why this build has none.
std::unique_ptr<CudaPath> make_cuda_path(const CudaPathConfig& config, std::string* why_not);

}  // namespace collie::torch_adapter
