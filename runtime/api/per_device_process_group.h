// PerDeviceProcessGroup: one process group, one backend per device type,
// as torch 2.x runs them ("cpu:gloo,cuda:nccl"): every call goes to the
// backend of its buffers' device (host buffers to "cpu", CUDA buffers to
// "nccl"), so a program can mix host and device tensors on one group.
//
// A device type without a backend says why when a call uses it, not
// before: with backend "auto" on a machine without a GPU the group serves
// host buffers, and a CUDA buffer is refused with the reason NCCL cannot
// run here. Calls that name no buffer (barrier, monitored_barrier) go to
// the host backend when there is one. Calls on different backends are not
// ordered with respect to each other (as in torch).
#pragma once

#include <memory>
#include <string>

#include "collie/runtime/process_group/process_group.h"

namespace collie {

class PerDeviceProcessGroup final : public ProcessGroup, public Shrinkable {
 public:
  // One device type's backend: null with `missing` saying why there is none.
  struct Slot {
    std::shared_ptr<ProcessGroup> backend;
    std::string missing;
  };
  // `spec` is the backend string as given ("auto", "cpu:cpu,cuda:nccl").
  PerDeviceProcessGroup(int rank, int size, std::string spec, Slot cpu, Slot cuda);
  ~PerDeviceProcessGroup() override;

  // "cpu" or "nccl" when one device type is served, else
  // "cpu:cpu,cuda:nccl" (torch's get_backend() of such a group).
  std::string backend_name() const override;
  // The backend serving `type`, or null.
  std::shared_ptr<ProcessGroup> backend(DeviceType type) const;

  std::shared_ptr<Work> all_reduce(TensorView tensor, const AllReduceOptions& options) override;
  std::shared_ptr<Work> broadcast(TensorView tensor, const BroadcastOptions& options) override;
  std::shared_ptr<Work> barrier(const BarrierOptions& options) override;
  std::shared_ptr<Work> all_gather(TensorView output, TensorView input,
                                   const AllGatherOptions& options) override;
  std::shared_ptr<Work> reduce_scatter(TensorView output, TensorView input,
                                       const ReduceScatterOptions& options) override;
  std::shared_ptr<Work> all_gather(std::span<const TensorView> outputs, TensorView input,
                                   const AllGatherOptions& options) override;
  std::shared_ptr<Work> reduce_scatter(TensorView output, std::span<const TensorView> inputs,
                                       const ReduceScatterOptions& options) override;
  std::shared_ptr<Work> reduce(TensorView tensor, const ReduceOptions& options) override;
  std::shared_ptr<Work> gather(std::span<const TensorView> outputs, TensorView input,
                               const GatherOptions& options) override;
  std::shared_ptr<Work> scatter(TensorView output, std::span<const TensorView> inputs,
                                const ScatterOptions& options) override;
  std::shared_ptr<Work> all_to_all(std::span<const TensorView> outputs,
                                   std::span<const TensorView> inputs,
                                   const AllToAllOptions& options) override;
  std::shared_ptr<Work> all_to_all_single(TensorView output, TensorView input,
                                          std::span<const size_t> output_split_sizes,
                                          std::span<const size_t> input_split_sizes,
                                          const AllToAllOptions& options) override;
  std::shared_ptr<Work> send(TensorView tensor, int dst, const P2POptions& options) override;
  std::shared_ptr<Work> recv(TensorView tensor, int src, const P2POptions& options) override;
  std::shared_ptr<Work> batch_isend_irecv(std::span<const P2POp> ops, Timeout timeout) override;
  void monitored_barrier(const MonitoredBarrierOptions& options) override;
  // Shuts down every backend.
  void shutdown(Timeout timeout) override;
  // Shrinks the host backend (the only one that can); a group with a cuda
  // backend throws BackendError saying so.
  ShrinkResult shrink(std::span<const int> exclude, const ShrinkOptions& options) override;

 private:
  // The backend for `device`, or BackendError naming the call, the device
  // and why this group has no backend for it.
  ProcessGroup& on(const char* op, const Device& device) const;
  // The backend of calls without a buffer: the host one, else the other.
  ProcessGroup& any(const char* op) const;

  const std::string spec_;
  Slot cpu_, cuda_;
};

}  // namespace collie
