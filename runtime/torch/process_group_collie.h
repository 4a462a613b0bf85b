// ProcessGroupCollie: torch's c10d::ProcessGroup (the 1.13 interface) over
// collie's socket backend: what torch.distributed calls when a program says
// init_process_group("collie") after `import collie_torch` (module.cc).
//
// An adapter only: every operation checks its arguments on the caller's
// thread (throwing InvalidArgument, a Python RuntimeError, naming the call
// and the rank), turns the tensors into contiguous buffers, and queues one
// task that calls collie's ProcessGroup and copies results back where torch's
// semantics ask for it (non-contiguous tensors, list forms). The tasks run in
// issue order on a WorkQueue (work_queue.h): on its worker, or on the thread
// that waits. Their Work (CollieWork, in the .cc) implements wait (with and
// without timeout), isCompleted, isSuccess, exception, result and
// getFuture, the future torch's DDP chains its gradient buckets on.
//
// Every method of torch 1.13's ProcessGroup maps onto the collie collective
// of the same meaning (point-to-point included); docs/torch.md lists them,
// and the plan for torch 2.x's c10d::Backend.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/deadline.h"
#include "runtime/process_group/process_group.h"
#include "runtime/torch/work_queue.h"

namespace collie {

class ProcessGroupCollie final : public ::c10d::ProcessGroup {
 public:
  static constexpr const char* kBackendName = "collie";

  // Collective (every member calls it): rendezvous through torch's `store`
  // (already prefixed for this group) and connect collie's socket backend,
  // within `timeout`, which is also every operation's default deadline.
  static c10::intrusive_ptr<ProcessGroupCollie> create(
      const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size, Timeout timeout,
      const std::string& group_name);

  // `inline_grace`: see WorkQueue; create() takes COLLIE_TORCH_INLINE_GRACE
  // (a duration, "0" hands every operation to the worker) or the default.
  ProcessGroupCollie(std::shared_ptr<collie::ProcessGroup> group, std::string group_name,
                     std::chrono::microseconds inline_grace = WorkQueue::kDefaultInlineGrace);
  // Runs what was issued (each operation is bounded by its deadline), then
  // shuts the collie group down.
  ~ProcessGroupCollie() override;

  const std::string getBackendName() const override { return kBackendName; }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                          const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const ::c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                            std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                                 int tag) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;

  // The collie group underneath and the queue in front of it: for the
  // benchmark that measures what the adapter adds to collie's own call.
  collie::ProcessGroup& collie_group() { return *group_; }
  const WorkQueue& queue() const { return *queue_; }
  const std::string& group_name() const { return group_name_; }

 private:
  // "allreduce on rank 1 of group \"0\" (collie)": the head of messages.
  std::string where(const char* op) const;
  // Queues `body` (which calls collie and finishes the outputs) and returns
  // its Work; `outputs` is what Work::result() and the future hold.
  c10::intrusive_ptr<::c10d::Work> enqueue(::c10d::OpType type, const char* op,
                                           std::vector<at::Tensor> outputs,
                                           std::function<void()> body);
  // recv and recvAnysource (src kAnySource): the Work records the sender.
  c10::intrusive_ptr<::c10d::Work> receive(std::vector<at::Tensor>& tensors, int src_rank, int tag,
                                           const char* op);
  // alltoall_base's split sizes (rows along dim 0) as element counts of a
  // view of `view_count` elements; empty stays empty (equal parts).
  std::vector<size_t> element_splits(const char* op, const char* name, const at::Tensor& t,
                                     const std::vector<int64_t>& rows, size_t view_count) const;

  std::shared_ptr<collie::ProcessGroup> group_;
  const std::string group_name_;
  // Shared with the Works (weakly), which run their task inline when waited
  // for; the group holds the only strong reference.
  std::shared_ptr<WorkQueue> queue_;
};

}  // namespace collie
