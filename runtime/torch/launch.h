// What one BackendCollie operation hands to the path that runs it: the CPU
// path (collie's cpu backend, on its SerialExecutor) or the CUDA path
// (collie's NCCL backend on torch's streams, cuda_path.h).
//
// A Body makes the collie calls of one operation on the group it is given
// and finishes the outputs (copies out of staging buffers). It returns the
// Work of its last collie call when nothing follows that call, so that the
// CUDA path can leave the caller's stream free of it until Work.wait() (the
// overlap DDP's buckets need), or nullptr when it waited itself. On the CPU
// every collie call is made with async_op false and is complete when it
// returns; on CUDA, collie's Work::wait() makes the current stream wait.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "collie/base/types.h"
#include "collie/runtime/process_group/process_group.h"

namespace collie::torch_adapter {

using Body = std::function<std::shared_ptr<collie::Work>(collie::ProcessGroup&)>;

struct Launch {
  const char* op;  // "allreduce": a string literal
  ::c10d::OpType type;
  Device device;
  bool async = true;  // torch's asyncOp
  // What Work::result() and the future hold.
  std::vector<at::Tensor> outputs;
  // Every tensor the collective reads or writes, staging buffers included:
  // the CUDA path tells the caching allocator they are in use on its stream.
  std::vector<at::Tensor> in_use;
};

}  // namespace collie::torch_adapter
