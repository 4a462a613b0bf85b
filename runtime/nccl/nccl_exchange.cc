// NcclProcessGroup's point-to-point operations and the collectives NCCL
// builds from them (gather, scatter, all_to_all): ncclSend/ncclRecv inside
// one ncclGroupStart/End, as ProcessGroupNCCL does, so that every pair's
// transfer runs at once and no ordering among them can deadlock.
#include "collie/runtime/nccl/nccl_impl.h"
#include "collie/runtime/process_group/monitored_barrier.h"

namespace collie {
namespace {

std::string peer_name(int peer) {
  return peer == kAnySource ? std::string("any rank") : str_cat("rank ", peer);
}

}  // namespace

void NcclProcessGroup::Impl::grouped(ncclComm_t c, std::span<const P2POp> ops,
                                     const Deadline& deadline) {
  settle(ncclGroupStart(), "ncclGroupStart", deadline);
  for (const P2POp& op : ops) {
    const TensorView& t = op.tensor;
    const bool send = op.type == P2POpType::kIsend;
    const ncclResult_t r = send ? ncclSend(t.data, t.count, to_nccl(t.dtype), op.peer, c, stream)
                                : ncclRecv(t.data, t.count, to_nccl(t.dtype), op.peer, c, stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      ncclGroupEnd();
      settle(r, send ? "ncclSend" : "ncclRecv", deadline);
    }
  }
  settle(ncclGroupEnd(), "ncclGroupEnd", deadline);
}

void NcclProcessGroup::Impl::copy_local(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync (own part)");
}

std::shared_ptr<Work> NcclProcessGroup::gather(std::span<const TensorView> outputs,
                                               TensorView input, const GatherOptions& options) {
  const CallSite where = impl_->site("gather");
  impl_->check_tensor(where, "input", input);
  check_root(where, options.root, size());
  const bool root = rank() == options.root;
  check_tensor_list(where, "outputs", outputs, input, root ? size() : 0, DeviceType::kCUDA);
  for (const auto& o : outputs) impl_->check_tensor(where, "outputs[i]", o);
  check_timeout(where, options.timeout);
  std::vector<P2POp> ops;
  if (root) {
    for (int p = 0; p < size(); ++p)
      if (p != rank()) ops.push_back({P2POpType::kIrecv, outputs[p], p});
  } else {
    ops.push_back({P2POpType::kIsend, input, options.root});
  }
  return impl_->run_with(
      {str_cat("gather(", input.dtype, ", ", input.count, ", root ", options.root, ")")}, options,
      [&](ncclComm_t comm, const Deadline& d) {
        impl_->grouped(comm, ops, d);
        if (root) impl_->copy_local(outputs[rank()].data, input.data, input.nbytes());
      });
}

std::shared_ptr<Work> NcclProcessGroup::scatter(TensorView output,
                                                std::span<const TensorView> inputs,
                                                const ScatterOptions& options) {
  const CallSite where = impl_->site("scatter");
  impl_->check_tensor(where, "output", output);
  check_root(where, options.root, size());
  const bool root = rank() == options.root;
  check_tensor_list(where, "inputs", inputs, output, root ? size() : 0, DeviceType::kCUDA);
  for (const auto& i : inputs) impl_->check_tensor(where, "inputs[i]", i);
  check_timeout(where, options.timeout);
  std::vector<P2POp> ops;
  if (root) {
    for (int p = 0; p < size(); ++p)
      if (p != rank()) ops.push_back({P2POpType::kIsend, inputs[p], p});
  } else {
    ops.push_back({P2POpType::kIrecv, output, options.root});
  }
  return impl_->run_with(
      {str_cat("scatter(", output.dtype, ", ", output.count, ", root ", options.root, ")")},
      options, [&](ncclComm_t comm, const Deadline& d) {
        impl_->grouped(comm, ops, d);
        if (root) impl_->copy_local(output.data, inputs[rank()].data, output.nbytes());
      });
}

std::shared_ptr<Work> NcclProcessGroup::all_to_all(std::span<const TensorView> outputs,
                                                   std::span<const TensorView> inputs,
                                                   const AllToAllOptions& options) {
  const CallSite where = impl_->site("all_to_all");
  if (inputs.empty())
    throw InvalidArgument(str_cat("all_to_all on rank ", rank(), ": inputs holds no buffer"));
  check_tensor_list(where, "inputs", inputs, inputs[0], size(), DeviceType::kCUDA, true);
  check_tensor_list(where, "outputs", outputs, inputs[0], size(), DeviceType::kCUDA, true);
  for (const auto& t : inputs) impl_->check_tensor(where, "inputs[i]", t);
  for (const auto& t : outputs) impl_->check_tensor(where, "outputs[i]", t);
  if (inputs[rank()].count != outputs[rank()].count)
    throw InvalidArgument(str_cat("all_to_all on rank ", rank(), ": inputs[", rank(), "] has ",
                                  inputs[rank()].count, " elements but outputs[", rank(), "] has ",
                                  outputs[rank()].count));
  check_timeout(where, options.timeout);
  std::vector<P2POp> ops;
  for (int p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    ops.push_back({P2POpType::kIsend, inputs[p], p});
    ops.push_back({P2POpType::kIrecv, outputs[p], p});
  }
  return impl_->run_with({str_cat("all_to_all(", inputs[0].dtype, ")")}, options,
                         [&](ncclComm_t comm, const Deadline& d) {
                           impl_->grouped(comm, ops, d);
                           impl_->copy_local(outputs[rank()].data, inputs[rank()].data,
                                             inputs[rank()].nbytes());
                         });
}

std::shared_ptr<Work> NcclProcessGroup::all_to_all_single(
    TensorView output, TensorView input, std::span<const size_t> output_split_sizes,
    std::span<const size_t> input_split_sizes, const AllToAllOptions& options) {
  const CallSite where = impl_->site("all_to_all_single");
  impl_->check_tensor(where, "input", input);
  impl_->check_tensor(where, "output", output);
  const auto in = split_buffer(where, "input", input, input_split_sizes, size());
  const auto out = split_buffer(where, "output", output, output_split_sizes, size());
  return all_to_all(out, in, options);
}

std::shared_ptr<Work> NcclProcessGroup::send(TensorView tensor, int dst,
                                             const P2POptions& options) {
  const P2POp op{P2POpType::kIsend, tensor, dst, options.tag};
  auto work = batch_isend_irecv(std::span<const P2POp>(&op, 1), options.timeout);
  if (!options.async_op) work->synchronize();
  return work;
}

std::shared_ptr<Work> NcclProcessGroup::recv(TensorView tensor, int src,
                                             const P2POptions& options) {
  if (src == kAnySource)
    throw InvalidArgument(str_cat("recv on rank ", rank(),
                                  ": the nccl backend cannot receive from any source (NCCL "
                                  "matches a receive with one named peer); pass the source rank, "
                                  "or use a cpu tensor on the cpu backend"));
  const P2POp op{P2POpType::kIrecv, tensor, src, options.tag};
  auto work = batch_isend_irecv(std::span<const P2POp>(&op, 1), options.timeout);
  if (!options.async_op) work->synchronize();
  return work;
}

std::shared_ptr<Work> NcclProcessGroup::batch_isend_irecv(std::span<const P2POp> ops,
                                                          Timeout timeout) {
  const CallSite where = impl_->site(
      ops.size() == 1 ? (ops[0].type == P2POpType::kIsend ? "send" : "recv") : "batch_isend_irecv");
  std::vector<std::string> parts;
  for (const P2POp& op : ops) {
    impl_->check_tensor(where, "tensor", op.tensor);
    check_peer(where, op.peer, size(), false);
    parts.push_back(str_cat(op.type == P2POpType::kIsend ? "send to " : "recv from ",
                            peer_name(op.peer), " (", op.tensor.dtype, " x ", op.tensor.count,
                            ")"));
  }
  check_timeout(where, timeout);
  Impl::Launch launch{
      ops.size() == 1 ? parts[0] : str_cat("batch_isend_irecv [", join(parts, ", "), "]"),
      /*collective=*/false, ops.size() == 1 && ops[0].type == P2POpType::kIrecv ? ops[0].peer : -1};
  return impl_->run(launch, timeout,
                    [&](ncclComm_t comm, const Deadline& d) { impl_->grouped(comm, ops, d); });
}

void NcclProcessGroup::monitored_barrier(const MonitoredBarrierOptions& options) {
  check_timeout(impl_->site("monitored_barrier"), options.timeout);
  collie::monitored_barrier(
      *impl_->store, impl_->options.group_name + "/", rank(), size(), ++impl_->monitored_barriers,
      resolve_timeout(options.timeout, impl_->timeout), options.wait_all_ranks);
}

}  // namespace collie
