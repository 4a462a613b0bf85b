// BackendCollie's operations: each checks its arguments here, on the caller's
// thread, stages the tensors collie cannot use as they are, and launches one
// Body (launch.h) that makes the collie call and copies results back.
#include <utility>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/cpu/cpu_process_group.h"
#include "collie/runtime/process_group/collective_checks.h"
#include "collie/runtime/torch/backend_collie.h"

namespace collie::torch_adapter {
namespace {

using ::c10d::OpType;
using Tensors = std::vector<at::Tensor>;

// What the CUDA path must keep alive on NCCL's stream; nothing on the CPU.
Tensors in_use(const Device& device, std::initializer_list<at::Tensor> tensors) {
  if (!device.is_cuda()) return {};
  return Tensors(tensors);
}

Tensors in_use(const Device& device, const Tensors& a, const Tensors& b = {}) {
  if (!device.is_cuda()) return {};
  Tensors all(a);
  all.insert(all.end(), b.begin(), b.end());
  return all;
}

// A view of `like`'s dtype and `count` elements at `data` (an output slot of
// an input's view).
TensorView with_data(TensorView like, void* data, size_t count) {
  like.data = data;
  like.count = count;
  return like;
}

// The end of a Body whose last collie call `w` wrote `buffer`: nothing more
// when that is the caller's tensor itself (the Body returns `w`), else wait
// for it (on a GPU: order the current stream after it) and copy the buffer
// into the caller's tensor (the Body has waited).
std::shared_ptr<Work> finish(std::shared_ptr<Work> w, const at::Tensor& user,
                             const at::Tensor& buffer) {
  if (buffer.is_same(user)) return w;
  w->synchronize();
  copy_back(user, buffer);
  return nullptr;
}

// The same for several outputs written by the calls that ended with `last`.
std::shared_ptr<Work> finish(std::shared_ptr<Work> last, const Tensors& users,
                             const Tensors& buffers) {
  bool staged = false;
  for (size_t i = 0; i < users.size(); ++i) staged |= !buffers[i].is_same(users[i]);
  if (!staged || !last) return last;
  last->synchronize();
  for (size_t i = 0; i < users.size(); ++i) copy_back(users[i], buffers[i]);
  return nullptr;
}

// reduce_scatter's and _reduce_scatter_base's Body: `in` (the flat input,
// of `in_view`'s dtype and count) into `out`, then into `output`.
Body reduce_scatter_body(const at::Tensor& output, const at::Tensor& out, const at::Tensor& in,
                         TensorView in_view, ReduceScatterOptions options) {
  return [output, out, in, in_view, options](collie::ProcessGroup& g) {
    return finish(g.reduce_scatter(with_data(in_view, out.data_ptr(), in_view.count / g.size()),
                                   with_data(in_view, in.data_ptr(), in_view.count), options),
                  output, out);
  };
}

}  // namespace

c10::intrusive_ptr<::c10d::Work> BackendCollie::broadcast(std::vector<at::Tensor>& tensors,
                                                          const ::c10d::BroadcastOptions& opts) {
  const Site where = site("broadcast");
  const at::Tensor& tensor = single(where, "tensor", tensors);
  check_root(where, opts.rootRank, opts.rootTensor, size_);
  const Device device = device_of(where, "tensor", tensor);
  at::Tensor buffer = dense(tensor);
  BroadcastOptions options{
      .root = static_cast<int>(opts.rootRank), .timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op, OpType::BROADCAST, device, opts.asyncOp, tensors,
                 in_use(device, {tensor, buffer})},
                [tensor, buffer, options](collie::ProcessGroup& g) {
                  return finish(g.broadcast(data_view(buffer), options), tensor, buffer);
                });
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::allreduce(std::vector<at::Tensor>& tensors,
                                                          const ::c10d::AllreduceOptions& opts) {
  // One sparse COO tensor: summed as gloo does (backend_sparse.cc).
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].layout() == at::kSparse)
    return allreduce_sparse_coo(tensors, opts);
  const Site where = site("allreduce");
  const at::Tensor& tensor = single(where, "tensor", tensors);
  const Device device = device_of(where, "tensor", tensor);
  const Reduction r = reduction(where, opts.reduceOp);
  at::Tensor buffer = dense(tensor);
  const TensorView view = reduce_view(where, buffer, r);
  if (r.premul()) buffer = premultiplied(buffer, r, /*in_place=*/true);
  AllReduceOptions options{.op = r.op, .timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op, OpType::ALLREDUCE, device, opts.asyncOp, tensors,
                 in_use(device, {tensor, buffer})},
                [tensor, buffer, view, options](collie::ProcessGroup& g) {
                  return finish(g.all_reduce(view, options), tensor, buffer);
                });
}

// One all_reduce over the tensors flattened into one buffer (gloo flattens
// the same way); the results are copied back.
c10::intrusive_ptr<::c10d::Work> BackendCollie::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  const Site where = site("allreduce_coalesced");
  if (tensors.empty()) throw InvalidArgument(str_cat(where, ": the tensor list is empty"));
  const Device device = check_tensor(where, "tensor", tensors[0]);
  check_same_device(where, "tensor", tensors, device);
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].scalar_type() != tensors[0].scalar_type())
      throw InvalidArgument(str_cat(where, ": tensor ", i, " is ", tensors[i].scalar_type(),
                                    " but tensor 0 is ", tensors[0].scalar_type(),
                                    "; coalesced tensors must share one dtype"));
  const Reduction r = reduction(where, opts.reduceOp);
  at::Tensor flat = concat(tensors);
  const TensorView view = reduce_view(where, flat, r);
  if (r.premul()) flat = premultiplied(flat, r, /*in_place=*/true);
  AllReduceOptions options{.op = r.op, .timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op, OpType::ALLREDUCE_COALESCED, device, opts.asyncOp, tensors,
                 in_use(device, tensors, {flat})},
                [tensors, flat, view, options](collie::ProcessGroup& g) -> std::shared_ptr<Work> {
                  g.all_reduce(view, options)->synchronize();
                  int64_t offset = 0;
                  for (const auto& t : tensors) {
                    write_into(t, flat.narrow(0, offset, t.numel()).view(t.sizes()));
                    offset += t.numel();
                  }
                  return nullptr;
                });
}

// torch's reduce: the root's tensor becomes the reduction; the others keep
// theirs (collie's reduce leaves them as they were).
c10::intrusive_ptr<::c10d::Work> BackendCollie::reduce(std::vector<at::Tensor>& tensors,
                                                       const ::c10d::ReduceOptions& opts) {
  const Site where = site("reduce");
  const at::Tensor& tensor = single(where, "tensor", tensors);
  check_root(where, opts.rootRank, opts.rootTensor, size_);
  const Device device = device_of(where, "tensor", tensor);
  const Reduction r = reduction(where, opts.reduceOp);
  at::Tensor buffer = dense(tensor);
  const TensorView view = reduce_view(where, buffer, r);
  // A premultiplied copy: a rank other than the root keeps its tensor.
  if (r.premul()) buffer = premultiplied(tensor, r, /*in_place=*/false);
  const bool root = opts.rootRank == rank_;
  ReduceOptions options{.op = r.op,
                        .root = static_cast<int>(opts.rootRank),
                        .timeout = timeout(opts.timeout),
                        .async_op = false};
  return launch(
      {where.op, OpType::REDUCE, device, opts.asyncOp, tensors, in_use(device, {tensor, buffer})},
      [tensor, buffer, view, options, root](collie::ProcessGroup& g) {
        auto w = g.reduce(with_data(view, buffer.data_ptr(), view.count), options);
        if (buffer.is_same(tensor)) return w;
        w->synchronize();
        if (root) copy_back(tensor, buffer);
        return std::shared_ptr<Work>();
      });
}

// collie's all_gather into one flat buffer, then copied into the list.
c10::intrusive_ptr<::c10d::Work> BackendCollie::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions& opts) {
  const Site where = site("allgather");
  const at::Tensor& input = single(where, "input", inputs);
  if (outputs.size() != 1)
    throw InvalidArgument(str_cat(where, ": expected one output list, got ", outputs.size()));
  check_slots(where, "output", outputs[0], size_, "input", input);
  const Device device = device_of(where, "input", input);
  at::Tensor in = dense(input);
  at::Tensor flat = at::empty({size_ * input.numel()}, in.options());
  AllGatherOptions options{.timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op, OpType::ALLGATHER, device, opts.asyncOp, outputs[0],
                 in_use(device, outputs[0], {in, flat})},
                [list = outputs[0], in, flat, options](collie::ProcessGroup& g) {
                  g.all_gather(data_view(flat), data_view(in), options)->synchronize();
                  for (size_t i = 0; i < list.size(); ++i)
                    write_into(list[i], slot(flat, i, list[i]));
                  return std::shared_ptr<Work>();
                });
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::_allgather_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::AllgatherOptions& opts) {
  const Site where = site("_allgather_base");
  check_flat(where, "output", output, "input", input, size_);
  const Device device = device_of(where, "input", input);
  at::Tensor in = dense(input);
  at::Tensor out = output_buffer(output);
  AllGatherOptions options{.timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op,
                 OpType::_ALLGATHER_BASE,
                 device,
                 opts.asyncOp,
                 {output},
                 in_use(device, {input, in, output, out})},
                [output, in, out, options](collie::ProcessGroup& g) {
                  return finish(g.all_gather(data_view(out), data_view(in), options), output, out);
                });
}

// The inputs packed into one byte buffer (any mix of dtypes), one all_gather
// of those bytes, and each rank's block unpacked into its output list.
c10::intrusive_ptr<::c10d::Work> BackendCollie::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions& opts) {
  const Site where = site("allgather_coalesced");
  if (static_cast<int>(output_lists.size()) != size_)
    throw InvalidArgument(str_cat(where, ": expected one output list per rank (", size_, "), got ",
                                  output_lists.size()));
  if (inputs.empty()) throw InvalidArgument(str_cat(where, ": the input list is empty"));
  const Device device = check_tensor(where, "input", inputs[0]);
  check_same_device(where, "input", inputs, device);
  Tensors flat_outputs;
  for (size_t r = 0; r < output_lists.size(); ++r) {
    if (output_lists[r].size() != inputs.size())
      throw InvalidArgument(str_cat(where, ": output list ", r, " has ", output_lists[r].size(),
                                    " tensors but there are ", inputs.size(), " inputs"));
    for (size_t i = 0; i < inputs.size(); ++i)
      check_like(where, str_cat("output[", r, "][", i, "]"), output_lists[r][i], "its input",
                 inputs[i]);
    flat_outputs.insert(flat_outputs.end(), output_lists[r].begin(), output_lists[r].end());
  }
  BytePacking packing(inputs);
  auto bytes = inputs[0].options().dtype(at::kByte);
  at::Tensor block = at::empty({packing.bytes()}, bytes);
  for (size_t i = 0; i < inputs.size(); ++i) packing.slot(block, i, inputs[i]).copy_(inputs[i]);
  at::Tensor gathered = at::empty({size_ * packing.bytes()}, bytes);
  AllGatherOptions options{.timeout = timeout(opts.timeout), .async_op = false};
  return launch(
      {where.op, OpType::ALLGATHER_COALESCED, device, opts.asyncOp, flat_outputs,
       in_use(device, flat_outputs, {block, gathered})},
      [output_lists, inputs, packing, block, gathered, options](collie::ProcessGroup& g) {
        g.all_gather(data_view(gathered), data_view(block), options)->synchronize();
        for (size_t r = 0; r < output_lists.size(); ++r) {
          at::Tensor rank_block = gathered.narrow(0, r * packing.bytes(), packing.bytes());
          for (size_t i = 0; i < inputs.size(); ++i)
            write_into(output_lists[r][i],
                       packing.slot(rank_block, i, inputs[i]).view(output_lists[r][i].sizes()));
        }
        return std::shared_ptr<Work>();
      });
}

Device BackendCollie::check_pairs(const Site& where, const std::vector<at::Tensor>& outputs,
                                  const std::vector<at::Tensor>& inputs) {
  if (inputs.empty() || outputs.size() != inputs.size())
    throw InvalidArgument(str_cat(where,
                                  ": expected as many outputs as inputs (at least one), got ",
                                  outputs.size(), " and ", inputs.size()));
  const Device device = check_tensor(where, "input", inputs[0]);
  check_same_device(where, "input", inputs, device);
  check_same_device(where, "output", outputs, device);
  return device;
}

// FSDP's and _coalescing_manager's all_gather_into_tensor of several
// tensors: one all_gather each, in one operation.
c10::intrusive_ptr<::c10d::Work> BackendCollie::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions& opts) {
  const Site where = site("allgather_into_tensor_coalesced");
  const Device device = check_pairs(where, outputs, inputs);
  Tensors ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_flat(where, "output", outputs[i], "input", inputs[i], size_);
    ins.push_back(dense(inputs[i]));
    outs.push_back(output_buffer(outputs[i]));
  }
  AllGatherOptions options{.timeout = timeout(opts.timeout), .async_op = false};
  return launch(
      {where.op, OpType::COALESCED, device, opts.asyncOp, outputs, in_use(device, ins, outs)},
      [outputs, ins, outs, options](collie::ProcessGroup& g) {
        std::shared_ptr<Work> last;
        for (size_t i = 0; i < ins.size(); ++i)
          last = g.all_gather(data_view(outs[i]), data_view(ins[i]), options);
        return finish(last, outputs, outs);
      });
}

// gather's outputs and scatter's inputs: on the root one list of a tensor
// per rank, each like `like`; elsewhere no list (or one empty list).
static Tensors root_list(const Site& where, int size, const char* name,
                         const std::vector<Tensors>& lists, int64_t root, const char* like_name,
                         const at::Tensor& like) {
  check_root(where, root, 0, size);
  if (root != where.rank) {
    if (!lists.empty() && !(lists.size() == 1 && lists[0].empty()))
      throw InvalidArgument(str_cat(where, ": only the root (rank ", root, ") passes ", name,
                                    " tensors; this rank passed ", lists.size(), " list(s)"));
    return {};
  }
  if (lists.size() != 1)
    throw InvalidArgument(
        str_cat(where, ": the root expects one ", name, " list, got ", lists.size()));
  check_slots(where, name, lists[0], size, like_name, like);
  return lists[0];
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::GatherOptions& opts) {
  const Site where = site("gather");
  const at::Tensor& input = single(where, "input", inputs);
  const Device device = device_of(where, "input", input);
  const Tensors list = root_list(where, size_, "output", outputs, opts.rootRank, "input", input);
  at::Tensor in = dense(input);
  Tensors buffers;
  std::vector<TensorView> views;
  for (const auto& t : list) {
    buffers.push_back(output_buffer(t));
    views.push_back(data_view(buffers.back()));
  }
  GatherOptions options{
      .root = static_cast<int>(opts.rootRank), .timeout = timeout(opts.timeout), .async_op = false};
  return launch(
      {where.op, OpType::GATHER, device, opts.asyncOp, list, in_use(device, buffers, {input, in})},
      [list, buffers, views, in, options](collie::ProcessGroup& g) {
        g.gather(views, data_view(in), options)->synchronize();
        for (size_t i = 0; i < list.size(); ++i) copy_back(list[i], buffers[i]);
        return std::shared_ptr<Work>();
      });
}

#ifdef COLLIE_TORCH_HAS_GATHER_INTO_TENSOR
// The root's output is one flat buffer of a slot per rank.
c10::intrusive_ptr<::c10d::Work> BackendCollie::gather_into_tensor(
    at::Tensor& output, at::Tensor& input, const ::c10d::GatherOptions& opts) {
  const Site where = site("gather_into_tensor");
  check_root(where, opts.rootRank, 0, size_);
  const bool root = opts.rootRank == rank_;
  if (root) check_flat(where, "output", output, "input", input, size_);
  const Device device = check_tensor(where, "input", input);
  at::Tensor in = dense(input);
  at::Tensor out = root ? output_buffer(output) : at::Tensor();
  std::vector<TensorView> views;
  if (root) {
    const TensorView whole = data_view(out);
    const size_t part = whole.count / size_;
    for (int r = 0; r < size_; ++r)
      views.push_back(with_data(
          whole, static_cast<char*>(whole.data) + r * part * element_size(whole.dtype), part));
  }
  GatherOptions options{
      .root = static_cast<int>(opts.rootRank), .timeout = timeout(opts.timeout), .async_op = false};
  Tensors outputs = root ? Tensors{output} : Tensors{};
  return launch({where.op, OpType::GATHER, device, opts.asyncOp, outputs,
                 in_use(device, {input, in}, root ? Tensors{output, out} : Tensors{})},
                [output, out, views, in, options, root](collie::ProcessGroup& g) {
                  g.gather(views, data_view(in), options)->synchronize();
                  if (root) copy_back(output, out);
                  return std::shared_ptr<Work>();
                });
}
#endif

c10::intrusive_ptr<::c10d::Work> BackendCollie::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ScatterOptions& opts) {
  const Site where = site("scatter");
  const at::Tensor& output = single(where, "output", outputs);
  const Device device = device_of(where, "output", output);
  Tensors buffers;
  for (const auto& t : root_list(where, size_, "input", inputs, opts.rootRank, "output", output))
    buffers.push_back(dense(t));
  std::vector<TensorView> views;
  for (const auto& b : buffers) views.push_back(data_view(b));
  at::Tensor out = output_buffer(output);
  ScatterOptions options{
      .root = static_cast<int>(opts.rootRank), .timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op, OpType::SCATTER, device, opts.asyncOp, outputs,
                 in_use(device, buffers, {output, out})},
                [output, out, buffers, views, options](collie::ProcessGroup& g) {
                  g.scatter(data_view(out), views, options)->synchronize();
                  copy_back(output, out);
                  return std::shared_ptr<Work>();
                });
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  const Site where = site("reduce_scatter");
  const at::Tensor& output = single(where, "output", outputs);
  if (inputs.size() != 1)
    throw InvalidArgument(str_cat(where, ": expected one input list, got ", inputs.size()));
  check_slots(where, "input", inputs[0], size_, "output", output);
  const Device device = device_of(where, "output", output);
  const Reduction r = reduction(where, opts.reduceOp);
  at::Tensor in = concat(inputs[0]);  // a new buffer: premultiplied in place
  const TensorView in_view = reduce_view(where, in, r);
  if (r.premul()) in = premultiplied(in, r, /*in_place=*/true);
  at::Tensor out = output_buffer(output);
  ReduceScatterOptions options{.op = r.op, .timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op, OpType::REDUCE_SCATTER, device, opts.asyncOp, outputs,
                 in_use(device, {output, out, in})},
                reduce_scatter_body(output, out, in, in_view, options));
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) {
  const Site where = site("_reduce_scatter_base");
  check_flat(where, "input", input, "output", output, size_);
  const Device device = device_of(where, "input", input);
  const Reduction r = reduction(where, opts.reduceOp);
  const TensorView in_view = reduce_view(where, dense(input), r);
  at::Tensor in = premultiplied(input, r, /*in_place=*/false);
  at::Tensor out = output_buffer(output);
  ReduceScatterOptions options{.op = r.op, .timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op,
                 OpType::_REDUCE_SCATTER_BASE,
                 device,
                 opts.asyncOp,
                 {output},
                 in_use(device, {input, in, output, out})},
                reduce_scatter_body(output, out, in, in_view, options));
}

// FSDP's gradient reduce_scatter of several tensors: one reduce_scatter
// each, in one operation.
c10::intrusive_ptr<::c10d::Work> BackendCollie::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  const Site where = site("reduce_scatter_tensor_coalesced");
  const Device device = check_pairs(where, outputs, inputs);
  const Reduction r = reduction(where, opts.reduceOp);
  Tensors ins, outs;
  std::vector<TensorView> views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_flat(where, "input", inputs[i], "output", outputs[i], size_);
    views.push_back(reduce_view(where, dense(inputs[i]), r));
    ins.push_back(premultiplied(inputs[i], r, /*in_place=*/false));
    outs.push_back(output_buffer(outputs[i]));
  }
  ReduceScatterOptions options{.op = r.op, .timeout = timeout(opts.timeout), .async_op = false};
  return launch(
      {where.op, OpType::COALESCED, device, opts.asyncOp, outputs, in_use(device, ins, outs)},
      [outputs, ins, outs, views, options](collie::ProcessGroup& g) {
        std::shared_ptr<Work> last;
        for (size_t i = 0; i < ins.size(); ++i)
          last =
              g.reduce_scatter(with_data(views[i], outs[i].data_ptr(), views[i].count / g.size()),
                               with_data(views[i], ins[i].data_ptr(), views[i].count), options);
        return finish(last, outputs, outs);
      });
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const ::c10d::AllToAllOptions& opts) {
  const Site where = site("alltoall_base");
  const Device device = check_tensor(where, "input", input);
  check_tensor(where, "output", output);
  if (input.scalar_type() != output.scalar_type() || input.device() != output.device())
    throw InvalidArgument(str_cat(where, ": input is ", input.scalar_type(), " on ", input.device(),
                                  " but output is ", output.scalar_type(), " on ", output.device(),
                                  "; they must match"));
  at::Tensor in = dense(input);
  at::Tensor out = output_buffer(output);
  const TensorView in_view = data_view(in), out_view = data_view(out);
  std::vector<size_t> out_splits = element_splits(where, "output_split_sizes", output,
                                                  output_split_sizes, out_view.count, size_);
  std::vector<size_t> in_splits =
      element_splits(where, "input_split_sizes", input, input_split_sizes, in_view.count, size_);
  AllToAllOptions options{.timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op,
                 OpType::ALLTOALL_BASE,
                 device,
                 opts.asyncOp,
                 {output},
                 in_use(device, {input, in, output, out})},
                [output, out, in, in_view, out_view, out_splits, in_splits,
                 options](collie::ProcessGroup& g) {
                  return finish(
                      g.all_to_all_single(out_view, in_view, out_splits, in_splits, options),
                      output, out);
                });
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const ::c10d::AllToAllOptions& opts) {
  const Site where = site("alltoall");
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_)
    throw InvalidArgument(str_cat(where, ": expected one input and one output tensor per rank (",
                                  size_, "), got ", inputs.size(), " and ", outputs.size()));
  const Device device = check_tensor(where, "input", inputs[0]);
  check_same_device(where, "input", inputs, device);
  check_same_device(where, "output", outputs, device);
  Tensors in_buffers, out_buffers;
  std::vector<TensorView> in_views, out_views;
  for (int r = 0; r < size_; ++r) {
    if (inputs[r].scalar_type() != inputs[0].scalar_type() ||
        outputs[r].scalar_type() != inputs[0].scalar_type())
      throw InvalidArgument(str_cat(
          where, ": every input and output must be ", inputs[0].scalar_type(), "; input[", r,
          "] is ", inputs[r].scalar_type(), " and output[", r, "] is ", outputs[r].scalar_type()));
    in_buffers.push_back(dense(inputs[r]));
    out_buffers.push_back(output_buffer(outputs[r]));
    in_views.push_back(data_view(in_buffers.back()));
    out_views.push_back(data_view(out_buffers.back()));
  }
  AllToAllOptions options{.timeout = timeout(opts.timeout), .async_op = false};
  return launch(
      {where.op, OpType::ALLTOALL, device, opts.asyncOp, outputs,
       in_use(device, in_buffers, out_buffers)},
      [outputs, in_buffers, out_buffers, in_views, out_views, options](collie::ProcessGroup& g) {
        g.all_to_all(out_views, in_views, options)->synchronize();
        for (size_t r = 0; r < outputs.size(); ++r) copy_back(outputs[r], out_buffers[r]);
        return std::shared_ptr<Work>();
      });
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::point_to_point(const Site& where, OpType type,
                                                               std::vector<at::Tensor>& tensors,
                                                               int peer, int tag) {
  const at::Tensor& tensor = single(where, "tensor", tensors);
  const Device device = device_of(where, "tensor", tensor);
  const bool sending = type == OpType::SEND;
  at::Tensor buffer = sending ? dense(tensor) : output_buffer(tensor);
  const P2POp op{sending ? P2POpType::kIsend : P2POpType::kIrecv, data_view(buffer), peer, tag};
  Launch call{where.op, type, device, /*async=*/true, tensors, in_use(device, {tensor, buffer})};
  {
    std::lock_guard lock(coalescing_mu_);
    if (coalescing_) {
      if (type == OpType::RECVANYSOURCE)
        throw InvalidArgument(str_cat(where, ": a receive from any source cannot be batched"));
      check_peer(call_site(where), peer, size_, false);
      auto work = launch_deferred_p2p_locked(std::move(call), op, tensor, buffer);
      return work;
    }
  }
  check_peer(call_site(where), peer, size_, type == OpType::RECVANYSOURCE);
  const Timeout deadline = timeout(kUnsetTimeout);
  if (!device.is_cuda()) {
    call.in_use = {tensor, buffer};  // alive until the message is in or out
    P2POptions options{.tag = op.tag, .timeout = deadline, .async_op = true};
    std::function<void()> finish;
    if (!buffer.is_same(tensor)) finish = [tensor, buffer] { copy_back(tensor, buffer); };
    return run_cpu_p2p(
        std::move(call),
        [op, options, sending](collie::ProcessGroup& g) {
          return sending ? g.send(op.tensor, op.peer, options)
                         : g.recv(op.tensor, op.peer, options);
        },
        std::move(finish));
  }
  auto work = launch(
      std::move(call),
      [tensor, buffer, op, deadline, sending](collie::ProcessGroup& g) -> std::shared_ptr<Work> {
        P2POptions options{.tag = op.tag, .timeout = deadline, .async_op = false};
        auto w =
            sending ? g.send(op.tensor, op.peer, options) : g.recv(op.tensor, op.peer, options);
        if (buffer.is_same(tensor)) return w;
        w->synchronize();
        copy_back(tensor, buffer);
        return w;  // complete: it carries a receive's source rank
      });
  return work;
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::run_cpu_p2p(Launch call, PostP2P post,
                                                            std::function<void()> finish,
                                                            std::vector<uint64_t> also_completed) {
  const char* op = call.op;
  auto work = c10::make_intrusive<CollieWork>(rank_, call.type, op, std::move(call.outputs),
                                              executor_ref_, completion_hooks_);
  work->set_also_completed(std::move(also_completed));
  work->set_p2p();
  work->set_ticket(executor_->submitted() + 1);
  // Kept alive until the operation completes, by the callback below.
  auto in_use = std::make_shared<std::vector<at::Tensor>>(std::move(call.in_use));
  // Posts on the executor (the group's send or recv, made inside it, posts
  // at once: the executor's rule 4); collie's Work of the post completes
  // this one through on_completed.
  auto run = [work, post = std::move(post), finish = std::move(finish), group = cpu_.get(),
              in_use](const Deadline&) {
    work->start();
    try {
      std::shared_ptr<collie::Work> posted = post(*group);
      auto* completion = dynamic_cast<CompletionWork*>(posted.get());
      if (completion == nullptr) {
        posted->wait();  // a backend that completes it right here
        if (finish) finish();
        work->complete(nullptr);
        return;
      }
      work->set_inner(posted);
      collie::Work* raw = posted.get();
      completion->on_completed([work, finish, in_use, raw](std::exception_ptr error) {
        if (!error && finish) {
          try {
            at::NoGradGuard no_grad;
            finish();
          } catch (...) {
            error = std::current_exception();
          }
        }
        if (!error && work->is_receive_from_any()) work->set_source_rank(raw->source_rank());
        work->complete(error);
      });
    } catch (...) {
      work->set_op_error(std::current_exception());
    }
  };
  std::shared_ptr<CompletionWork> ran;
  try {
    ran = executor_->submit(op, {}, kUnsetTimeout, SerialExecutor::to_op_fn(std::move(run)));
  } catch (...) {  // a call that met another thread's: DistBackendError
    std::rethrow_exception(as_torch_error(std::current_exception()));
  }
  // A failed or refused post fails the Work; a posted one completes with
  // collie's Work of the batch, above.
  work->set_queued(ran);
  ran->on_completed([work](std::exception_ptr error) {
    if (auto own = work->op_error()) error = own;
    if (error) work->complete(error);
  });
  return work;
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::send(std::vector<at::Tensor>& tensors, int dst,
                                                     int tag) {
  return point_to_point(site("send"), OpType::SEND, tensors, dst, tag);
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::recv(std::vector<at::Tensor>& tensors, int src,
                                                     int tag) {
  return point_to_point(site("recv"), OpType::RECV, tensors, src, tag);
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::recvAnysource(std::vector<at::Tensor>& tensors,
                                                              int tag) {
  return point_to_point(site("recvAnysource"), OpType::RECVANYSOURCE, tensors, kAnySource, tag);
}

c10::intrusive_ptr<::c10d::Work> BackendCollie::barrier(const ::c10d::BarrierOptions& opts) {
  Device device = Device::cpu();
  if (opts.device && opts.device->is_cuda()) device = Device::cuda(opts.device->index());
  BarrierOptions options{.timeout = timeout(opts.timeout), .async_op = false};
  return launch({"barrier", OpType::BARRIER, device, opts.asyncOp, {}, {}},
                [options](collie::ProcessGroup& g) { return g.barrier(options); });
}

void BackendCollie::monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) {
  // Through the group's executor, behind whatever was issued before.
  cpu_->monitored_barrier({.timeout = timeout(opts.timeout), .wait_all_ranks = wait_all_ranks});
}

}  // namespace collie::torch_adapter
