// ProcessGroup: the collectives a training loop calls, on one group of ranks.
// Backends (socket, nccl) implement it. Every collective is asynchronous and
// returns a Work; collectives on one group run in the order they were issued
// (the same order on every rank, as in torch).
#pragma once

#include <memory>
#include <string>

#include "runtime/base/deadline.h"
#include "runtime/base/types.h"
#include "runtime/process_group/work.h"

namespace collie {

struct AllReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Timeout timeout = kUnsetTimeout;  // kUnsetTimeout: the group's timeout
  // false: the caller will wait at once (torch's async_op=False), so a
  // backend may run the collective on the caller's thread when the group is
  // idle, saving two thread hand-offs; the Work it returns is complete.
  bool async_op = true;
};

struct BroadcastOptions {
  int root = 0;
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct BarrierOptions {
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct AllGatherOptions {
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  Timeout timeout = kUnsetTimeout;
  bool async_op = true;  // see AllReduceOptions::async_op
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend_name() const = 0;

  // In place: every rank ends with the reduction of all ranks' `tensor`.
  virtual std::shared_ptr<Work> all_reduce(TensorView tensor,
                                           const AllReduceOptions& options = {}) = 0;
  // `tensor` on every rank becomes root's.
  virtual std::shared_ptr<Work> broadcast(TensorView tensor,
                                          const BroadcastOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> barrier(const BarrierOptions& options = {}) = 0;
  // output.count == size() * input.count; rank r's input lands at offset
  // r * input.count. input may alias its slot in output (in place).
  virtual std::shared_ptr<Work> all_gather(TensorView output, TensorView input,
                                           const AllGatherOptions& options = {}) = 0;
  // input.count == size() * output.count; rank r gets the reduction of every
  // rank's slot r.
  virtual std::shared_ptr<Work> reduce_scatter(TensorView output, TensorView input,
                                               const ReduceScatterOptions& options = {}) = 0;

  // Stops the group: waits up to `timeout` (kUnsetTimeout: the group's
  // timeout) for the collectives already issued, then aborts what is still
  // running. Every later call fails with BackendError. Idempotent;
  // destroy_process_group calls it.
  virtual void shutdown(Timeout timeout = kUnsetTimeout) = 0;

 protected:
  const int rank_;
  const int size_;
};

}  // namespace collie
