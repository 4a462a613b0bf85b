// NcclProcessGroup's operations: the shared argument checks, then one NCCL
// launch each through Impl::run (nccl_impl.h), which orders it after the
// caller's stream and hands its Work to the watchdog.
#include "collie/runtime/nccl/nccl_impl.h"

namespace collie {

std::shared_ptr<Work> NcclProcessGroup::all_reduce(TensorView t, const AllReduceOptions& options) {
  const CallSite where = impl_->site("all_reduce");
  impl_->check_tensor(where, "tensor", t);
  impl_->check_reduce(where, options.op, t.dtype);
  check_timeout(where, options.timeout);
  return impl_->run_with({str_cat("all_reduce(", t.dtype, ", ", t.count, ", ", options.op, ")")},
                         options, [&](ncclComm_t comm, const Deadline& d) {
                           impl_->settle(
                               ncclAllReduce(t.data, t.data, t.count, to_nccl(t.dtype),
                                             to_nccl(options.op, t.dtype), comm, impl_->stream),
                               "ncclAllReduce", d);
                         });
}

std::shared_ptr<Work> NcclProcessGroup::all_reduce_coalesced(std::span<const TensorView> tensors,
                                                             const AllReduceOptions& options) {
  const CallSite where = impl_->site("all_reduce_coalesced");
  check_timeout(where, options.timeout);
  for (const auto& t : tensors) {
    impl_->check_tensor(where, "tensor", t);
    impl_->check_reduce(where, options.op, t.dtype);
  }
  return impl_->run_with(
      {str_cat("all_reduce_coalesced(", tensors.size(), " tensors, ", options.op, ")")}, options,
      [&](ncclComm_t comm, const Deadline& d) {
        impl_->settle(ncclGroupStart(), "ncclGroupStart", d);
        for (const auto& t : tensors) {
          ncclResult_t r = ncclAllReduce(t.data, t.data, t.count, to_nccl(t.dtype),
                                         to_nccl(options.op, t.dtype), comm, impl_->stream);
          if (r != ncclSuccess && r != ncclInProgress) {
            ncclGroupEnd();
            impl_->settle(r, "ncclAllReduce (coalesced)", d);
          }
        }
        impl_->settle(ncclGroupEnd(), "ncclGroupEnd", d);
      });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(TensorView t, const BroadcastOptions& options) {
  const CallSite where = impl_->site("broadcast");
  impl_->check_tensor(where, "tensor", t);
  check_root(where, options.root, size());
  check_timeout(where, options.timeout);
  return impl_->run_with(
      {str_cat("broadcast(", t.dtype, ", ", t.count, ", root ", options.root, ")")}, options,
      [&](ncclComm_t comm, const Deadline& d) {
        impl_->settle(ncclBroadcast(t.data, t.data, t.count, to_nccl(t.dtype), options.root, comm,
                                    impl_->stream),
                      "ncclBroadcast", d);
      });
}

std::shared_ptr<Work> NcclProcessGroup::barrier(const BarrierOptions& options) {
  check_timeout(impl_->site("barrier"), options.timeout);
  // Like ProcessGroupNCCL: an all_reduce of one element, waited on the host.
  return impl_->run({"barrier()", true, -1, /*synchronize=*/true}, options.timeout,
                    [&](ncclComm_t comm, const Deadline& d) {
                      impl_->settle(ncclAllReduce(impl_->barrier_buffer, impl_->barrier_buffer, 1,
                                                  ncclFloat32, ncclSum, comm, impl_->stream),
                                    "ncclAllReduce (barrier)", d);
                    });
}

std::shared_ptr<Work> NcclProcessGroup::all_gather(TensorView output, TensorView input,
                                                   const AllGatherOptions& options) {
  const CallSite where = impl_->site("all_gather");
  impl_->check_tensor(where, "input", input);
  impl_->check_tensor(where, "output", output);
  check_gather_shapes(where, output, "output", input, "input", size());
  check_timeout(where, options.timeout);
  return impl_->run_with({str_cat("all_gather(", input.dtype, ", ", input.count, ")")}, options,
                         [&](ncclComm_t comm, const Deadline& d) {
                           impl_->settle(ncclAllGather(input.data, output.data, input.count,
                                                       to_nccl(input.dtype), comm, impl_->stream),
                                         "ncclAllGather", d);
                         });
}

std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(TensorView output, TensorView input,
                                                       const ReduceScatterOptions& options) {
  const CallSite where = impl_->site("reduce_scatter");
  impl_->check_tensor(where, "input", input);
  impl_->check_tensor(where, "output", output);
  check_gather_shapes(where, input, "input", output, "output", size());
  impl_->check_reduce(where, options.op, input.dtype);
  check_timeout(where, options.timeout);
  return impl_->run_with(
      {str_cat("reduce_scatter(", input.dtype, ", ", output.count, ", ", options.op, ")")}, options,
      [&](ncclComm_t comm, const Deadline& d) {
        impl_->settle(ncclReduceScatter(input.data, output.data, output.count, to_nccl(input.dtype),
                                        to_nccl(options.op, input.dtype), comm, impl_->stream),
                      "ncclReduceScatter", d);
      });
}

std::shared_ptr<Work> NcclProcessGroup::reduce(TensorView t, const ReduceOptions& options) {
  const CallSite where = impl_->site("reduce");
  impl_->check_tensor(where, "tensor", t);
  impl_->check_reduce(where, options.op, t.dtype);
  check_root(where, options.root, size());
  check_timeout(where, options.timeout);
  return impl_->run_with(
      {str_cat("reduce(", t.dtype, ", ", t.count, ", ", options.op, ", root ", options.root, ")")},
      options, [&](ncclComm_t comm, const Deadline& d) {
        impl_->settle(ncclReduce(t.data, t.data, t.count, to_nccl(t.dtype),
                                 to_nccl(options.op, t.dtype), options.root, comm, impl_->stream),
                      "ncclReduce", d);
      });
}

std::shared_ptr<Work> NcclProcessGroup::all_gather(std::span<const TensorView> outputs,
                                                   TensorView input,
                                                   const AllGatherOptions& options) {
  const CallSite where = impl_->site("all_gather");
  impl_->check_tensor(where, "input", input);
  check_tensor_list(where, "outputs", outputs, input, size(), DeviceType::kCUDA);
  for (const auto& o : outputs) impl_->check_tensor(where, "outputs[i]", o);
  check_timeout(where, options.timeout);
  // One ncclAllGather when the outputs are consecutive in memory (the
  // common case); else every rank broadcasts its input into outputs[rank].
  bool consecutive = true;
  for (size_t p = 1; p < outputs.size(); ++p)
    consecutive &= outputs[p].data == static_cast<uint8_t*>(outputs[0].data) + p * input.nbytes();
  return impl_->run_with({str_cat("all_gather(", input.dtype, ", ", input.count, ")")}, options,
                         [&](ncclComm_t comm, const Deadline& d) {
                           if (consecutive) {
                             impl_->settle(ncclAllGather(input.data, outputs[0].data, input.count,
                                                         to_nccl(input.dtype), comm, impl_->stream),
                                           "ncclAllGather", d);
                             return;
                           }
                           impl_->settle(ncclGroupStart(), "ncclGroupStart", d);
                           for (int p = 0; p < size(); ++p) {
                             const ncclResult_t r =
                                 ncclBroadcast(input.data, outputs[p].data, input.count,
                                               to_nccl(input.dtype), p, comm, impl_->stream);
                             if (r != ncclSuccess && r != ncclInProgress) {
                               ncclGroupEnd();
                               impl_->settle(r, "ncclBroadcast (all_gather)", d);
                             }
                           }
                           impl_->settle(ncclGroupEnd(), "ncclGroupEnd", d);
                         });
}

std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(TensorView output,
                                                       std::span<const TensorView> inputs,
                                                       const ReduceScatterOptions& options) {
  const CallSite where = impl_->site("reduce_scatter");
  impl_->check_tensor(where, "output", output);
  check_tensor_list(where, "inputs", inputs, output, size(), DeviceType::kCUDA);
  for (const auto& i : inputs) impl_->check_tensor(where, "inputs[i]", i);
  impl_->check_reduce(where, options.op, output.dtype);
  check_timeout(where, options.timeout);
  // Rank p's part is the reduction of every rank's inputs[p] at root p.
  return impl_->run_with(
      {str_cat("reduce_scatter(", output.dtype, ", ", output.count, ", ", options.op, ")")},
      options, [&](ncclComm_t comm, const Deadline& d) {
        impl_->settle(ncclGroupStart(), "ncclGroupStart", d);
        for (int p = 0; p < size(); ++p) {
          void* dst = p == rank() ? output.data : inputs[p].data;  // only the root's is written
          const ncclResult_t r =
              ncclReduce(inputs[p].data, dst, output.count, to_nccl(output.dtype),
                         to_nccl(options.op, output.dtype), p, comm, impl_->stream);
          if (r != ncclSuccess && r != ncclInProgress) {
            ncclGroupEnd();
            impl_->settle(r, "ncclReduce (reduce_scatter)", d);
          }
        }
        impl_->settle(ncclGroupEnd(), "ncclGroupEnd", d);
      });
}

}  // namespace collie
