#include "collie/runtime/api/per_device_process_group.h"

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {

PerDeviceProcessGroup::PerDeviceProcessGroup(int rank, int size, std::string spec, Slot cpu,
                                             Slot cuda)
    : ProcessGroup(rank, size),
      spec_(std::move(spec)),
      cpu_(std::move(cpu)),
      cuda_(std::move(cuda)) {}

PerDeviceProcessGroup::~PerDeviceProcessGroup() = default;

std::string PerDeviceProcessGroup::backend_name() const {
  if (cpu_.backend && cuda_.backend)
    return str_cat("cpu:", cpu_.backend->backend_name(), ",cuda:", cuda_.backend->backend_name());
  return cpu_.backend ? cpu_.backend->backend_name() : cuda_.backend->backend_name();
}

std::shared_ptr<ProcessGroup> PerDeviceProcessGroup::backend(DeviceType type) const {
  return type == DeviceType::kCPU ? cpu_.backend : cuda_.backend;
}

ProcessGroup& PerDeviceProcessGroup::on(const char* op, const Device& device) const {
  const Slot& slot = device.is_cpu() ? cpu_ : cuda_;
  if (slot.backend) return *slot.backend;
  throw BackendError(str_cat(op, " on rank ", rank_, ": no backend serves ", device,
                             " buffers in this group (backend \"", spec_, "\"): ", slot.missing));
}

ProcessGroup& PerDeviceProcessGroup::any(const char* op) const {
  return cpu_.backend ? *cpu_.backend : on(op, Device::cuda(0));
}

std::shared_ptr<Work> PerDeviceProcessGroup::all_reduce(TensorView t, const AllReduceOptions& o) {
  return on("all_reduce", t.device).all_reduce(t, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::broadcast(TensorView t, const BroadcastOptions& o) {
  return on("broadcast", t.device).broadcast(t, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::barrier(const BarrierOptions& o) {
  return any("barrier").barrier(o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::all_gather(TensorView out, TensorView in,
                                                        const AllGatherOptions& o) {
  return on("all_gather", in.device).all_gather(out, in, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::reduce_scatter(TensorView out, TensorView in,
                                                            const ReduceScatterOptions& o) {
  return on("reduce_scatter", in.device).reduce_scatter(out, in, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::all_gather(std::span<const TensorView> outs,
                                                        TensorView in, const AllGatherOptions& o) {
  return on("all_gather", in.device).all_gather(outs, in, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::reduce_scatter(TensorView out,
                                                            std::span<const TensorView> ins,
                                                            const ReduceScatterOptions& o) {
  return on("reduce_scatter", out.device).reduce_scatter(out, ins, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::reduce(TensorView t, const ReduceOptions& o) {
  return on("reduce", t.device).reduce(t, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::gather(std::span<const TensorView> outs, TensorView in,
                                                    const GatherOptions& o) {
  return on("gather", in.device).gather(outs, in, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::scatter(TensorView out,
                                                     std::span<const TensorView> ins,
                                                     const ScatterOptions& o) {
  return on("scatter", out.device).scatter(out, ins, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::all_to_all(std::span<const TensorView> outs,
                                                        std::span<const TensorView> ins,
                                                        const AllToAllOptions& o) {
  if (ins.empty())
    throw InvalidArgument(str_cat("all_to_all on rank ", rank_, ": inputs holds no buffer"));
  return on("all_to_all", ins[0].device).all_to_all(outs, ins, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::all_to_all_single(TensorView out, TensorView in,
                                                               std::span<const size_t> out_splits,
                                                               std::span<const size_t> in_splits,
                                                               const AllToAllOptions& o) {
  return on("all_to_all_single", in.device).all_to_all_single(out, in, out_splits, in_splits, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::send(TensorView t, int dst, const P2POptions& o) {
  return on("send", t.device).send(t, dst, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::recv(TensorView t, int src, const P2POptions& o) {
  return on("recv", t.device).recv(t, src, o);
}
std::shared_ptr<Work> PerDeviceProcessGroup::batch_isend_irecv(std::span<const P2POp> ops,
                                                               Timeout timeout) {
  if (ops.empty())
    throw InvalidArgument(str_cat("batch_isend_irecv on rank ", rank_, ": no operation given"));
  for (const P2POp& op : ops) {
    if (op.tensor.device.type != ops[0].tensor.device.type)
      throw InvalidArgument(str_cat("batch_isend_irecv on rank ", rank_, ": ops on ",
                                    ops[0].tensor.device, " and ", op.tensor.device,
                                    "; one batch runs on one backend (one device type)"));
  }
  return on("batch_isend_irecv", ops[0].tensor.device).batch_isend_irecv(ops, timeout);
}
void PerDeviceProcessGroup::monitored_barrier(const MonitoredBarrierOptions& o) {
  any("monitored_barrier").monitored_barrier(o);
}
void PerDeviceProcessGroup::shutdown(Timeout timeout) {
  if (cuda_.backend) cuda_.backend->shutdown(timeout);
  if (cpu_.backend) cpu_.backend->shutdown(timeout);
}

ShrinkResult PerDeviceProcessGroup::shrink(std::span<const int> exclude,
                                           const ShrinkOptions& options) {
  if (cuda_.backend)
    throw BackendError(str_cat("shrink on rank ", rank_, ": the group's cuda backend (",
                               cuda_.backend->backend_name(),
                               ") cannot shrink; only the cpu backend can"));
  auto* host = dynamic_cast<Shrinkable*>(cpu_.backend.get());
  if (host == nullptr)
    throw BackendError(str_cat("shrink on rank ", rank_, ": the group's backend (",
                               cpu_.backend ? cpu_.backend->backend_name() : spec_,
                               ") cannot shrink; the cpu backend can"));
  ShrinkResult result = host->shrink(exclude, options);
  const int rank = result.group->rank(), size = result.group->size();
  result.group = std::make_shared<PerDeviceProcessGroup>(
      rank, size, spec_, Slot{std::move(result.group), ""}, Slot{nullptr, cuda_.missing});
  return result;
}

}  // namespace collie
