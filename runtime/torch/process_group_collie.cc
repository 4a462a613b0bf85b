#include "runtime/torch/process_group_collie.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <optional>
#include <ostream>

#include "runtime/api/backend_registry.h"
#include "runtime/base/error.h"
#include "runtime/base/parse_duration.h"
#include "runtime/base/str_cat.h"
#include "runtime/process_group/collective_checks.h"
#include "runtime/torch/collie_work.h"
#include "runtime/torch/torch_store.h"

namespace collie {
namespace {

using ::c10d::OpType;

// Where a call was made, for messages: "allreduce on rank 1 of group \"0\"
// (collie)". Built into a string only when a message needs it.
struct Site {
  const char* op;
  int rank;
  const std::string& group;
};

std::ostream& operator<<(std::ostream& out, const Site& s) {
  return out << s.op << " on rank " << s.rank << " of group \"" << s.group << "\" (collie)";
}

CallSite call_site(const Site& s) { return CallSite{s.op, s.rank, s.group, "collie"}; }

// collie's element type for a torch dtype, when collie has that type.
std::optional<DataType> collie_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kByte: return DataType::kUInt8;
    default: return std::nullopt;
  }
}

// A complex number is a pair of its real type in memory.
std::optional<DataType> complex_part_type(at::ScalarType type) {
  switch (type) {
    case at::kComplexHalf: return DataType::kFloat16;
    case at::kComplexFloat: return DataType::kFloat32;
    case at::kComplexDouble: return DataType::kFloat64;
    default: return std::nullopt;
  }
}

TensorView view_of(const at::Tensor& t, DataType type, size_t count) {
  return TensorView{t.data_ptr(), count, type, Device::cpu()};
}

// A contiguous tensor as collie elements for an operation that only moves
// data: collie's own type when it has one (so that the message headers
// catch a dtype mismatch), complex as pairs of its part type, anything else
// (bool, int8, int16) as bytes.
TensorView data_view(const at::Tensor& t) {
  if (auto type = collie_type(t.scalar_type())) return view_of(t, *type, t.numel());
  if (auto part = complex_part_type(t.scalar_type())) return view_of(t, *part, 2 * t.numel());
  return view_of(t, DataType::kUInt8, t.nbytes());
}

// A contiguous tensor as collie elements for a reduction. Complex tensors
// reduce as pairs of their part type under sum and avg, which act on the
// real and imaginary parts independently; no other op is defined on them.
TensorView reduce_view(const Site& site, const at::Tensor& t, ReduceOp op) {
  TensorView v;
  if (auto type = collie_type(t.scalar_type())) {
    v = view_of(t, *type, t.numel());
  } else if (auto part = complex_part_type(t.scalar_type())) {
    if (op != ReduceOp::kSum && op != ReduceOp::kAvg)
      throw InvalidArgument(str_cat(site, ": ReduceOp ", op, " is not defined on ", t.scalar_type(),
                                    " tensors (only sum and avg are)"));
    v = view_of(t, *part, 2 * t.numel());
  } else if (t.scalar_type() == at::kChar || t.scalar_type() == at::kBool) {
    throw BackendError(str_cat(site, ": collie does not provide reducing ", t.scalar_type(),
                               " tensors yet (it has no int8 and bool types yet)"));
  } else {
    throw InvalidArgument(str_cat(site, ": collie cannot reduce ", t.scalar_type(),
                                  " tensors (it reduces float32, float64, float16, bfloat16, "
                                  "int32, int64, uint8 and complex)"));
  }
  check_reduce_op(call_site(site), op, v.dtype);
  return v;
}

ReduceOp collie_op(const Site& site, const ::c10d::ReduceOp& op) {
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case ::c10d::ReduceOp::AVG: return ReduceOp::kAvg;
    case ::c10d::ReduceOp::PRODUCT: return ReduceOp::kProduct;
    case ::c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case ::c10d::ReduceOp::MAX: return ReduceOp::kMax;
    case ::c10d::ReduceOp::BAND:
    case ::c10d::ReduceOp::BOR:
    case ::c10d::ReduceOp::BXOR:
      throw BackendError(str_cat(site,
                                 ": collie does not provide the bitwise ReduceOps "
                                 "BAND, BOR and BXOR yet"));
    default:
      throw InvalidArgument(str_cat(site, ": ReduceOp ", static_cast<int>(op.op_),
                                    " is not supported by collie (PREMUL_SUM is NCCL's)"));
  }
}

void check_tensor(const Site& site, const char* name, const at::Tensor& t) {
  if (!t.defined()) throw InvalidArgument(str_cat(site, ": ", name, " is an undefined tensor"));
  if (!t.is_cpu())
    throw InvalidArgument(
        str_cat(site, ": ", name, " is on ", t.device(), "; the collie backend takes CPU tensors"));
  if (t.layout() != at::kStrided)
    throw InvalidArgument(str_cat(site, ": ", name, " is a ", t.layout(),
                                  " tensor; the collie backend takes dense (strided) tensors"));
}

// c10d passes lists (one tensor per device in torch's multi-GPU API); collie
// takes one tensor per process.
const at::Tensor& single(const Site& site, const char* name, const std::vector<at::Tensor>& list) {
  if (list.size() != 1)
    throw InvalidArgument(str_cat(site, ": expected exactly one ", name, " tensor, got ",
                                  list.size(),
                                  " (collie takes one tensor per process; torch's "
                                  "*_multigpu lists are not supported)"));
  check_tensor(site, name, list[0]);
  return list[0];
}

// `t` must have the dtype and element count of `like` (torch's rule for the
// slots of list-form collectives).
void check_like(const Site& site, const std::string& name, const at::Tensor& t,
                const char* like_name, const at::Tensor& like) {
  check_tensor(site, name.c_str(), t);
  if (t.scalar_type() != like.scalar_type() || t.numel() != like.numel())
    throw InvalidArgument(str_cat(site, ": ", name, " is ", t.scalar_type(), " x ", t.numel(),
                                  " but ", like_name, " is ", like.scalar_type(), " x ",
                                  like.numel(), "; they must match"));
}

// A list of one slot per rank, each like `like`.
void check_slots(const Site& site, const char* name, const std::vector<at::Tensor>& slots, int size,
                 const char* like_name, const at::Tensor& like) {
  if (static_cast<int>(slots.size()) != size)
    throw InvalidArgument(str_cat(site, ": ", name, " has ", slots.size(),
                                  " tensors; expected one per rank (", size, ")"));
  for (size_t i = 0; i < slots.size(); ++i)
    check_like(site, str_cat(name, "[", i, "]"), slots[i], like_name, like);
}

void check_root(const Site& site, int64_t root, int64_t root_tensor, int size) {
  collie::check_root(call_site(site), static_cast<int>(root), size);
  if (root_tensor != 0)
    throw InvalidArgument(str_cat(site, ": rootTensor ", root_tensor,
                                  " given; collie takes one tensor per process (rootTensor 0)"));
}

// `big` must hold `size` times `small`'s elements, of its dtype: the flat
// side of _allgather_base (the output) and _reduce_scatter_base (the input).
void check_flat(const Site& site, const char* big_name, const at::Tensor& big,
                const char* small_name, const at::Tensor& small, int size) {
  check_tensor(site, small_name, small);
  check_tensor(site, big_name, big);
  if (big.scalar_type() != small.scalar_type() || big.numel() != size * small.numel())
    throw InvalidArgument(str_cat(site, ": ", big_name, " is ", big.scalar_type(), " x ",
                                  big.numel(), " but must be ", small.scalar_type(), " x ",
                                  size * small.numel(), " (world size ", size, " x ", small_name,
                                  " ", small.numel(), ")"));
}

// The tensor itself when collie can use its memory as it is, else a
// contiguous copy (with conjugate and negative views resolved).
at::Tensor dense(const at::Tensor& t) {
  if (t.is_contiguous() && !t.is_conj() && !t.is_neg()) return t;
  return t.resolve_conj().resolve_neg().contiguous();
}

// A contiguous buffer collie may overwrite completely: the tensor itself
// when possible (its contents are not needed), else a fresh one.
at::Tensor output_buffer(const at::Tensor& t) {
  if (t.is_contiguous() && !t.is_conj() && !t.is_neg()) return t;
  return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
}

// Copies a staging buffer back into the caller's tensor, which is
// non-contiguous (torch's semantics: the collective acts on its elements).
void copy_back(const at::Tensor& user, const at::Tensor& buffer) {
  if (!buffer.is_same(user)) user.copy_(buffer);
}

// Tensors of one dtype, flattened one after another into one new buffer.
at::Tensor concat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Element i of a flat buffer of equal slots, shaped like `like`.
at::Tensor slot(const at::Tensor& flat, size_t i, const at::Tensor& like) {
  const int64_t n = like.numel();
  return flat.narrow(0, static_cast<int64_t>(i) * n, n).view(like.sizes());
}

// Tensors of any dtypes laid out one after another in one byte buffer, each
// at a 16-byte aligned offset so that its bytes can be viewed as its dtype.
class BytePacking {
 public:
  explicit BytePacking(const std::vector<at::Tensor>& tensors) {
    for (const auto& t : tensors) {
      offsets_.push_back(bytes_);
      bytes_ += (static_cast<int64_t>(t.nbytes()) + 15) / 16 * 16;
    }
  }
  int64_t bytes() const { return bytes_; }
  // Tensor i's slot in `block` (one packed copy), viewed as `like`.
  at::Tensor slot(const at::Tensor& block, size_t i, const at::Tensor& like) const {
    return block.narrow(0, offsets_[i], static_cast<int64_t>(like.nbytes()))
        .view(like.scalar_type())
        .view(like.sizes());
  }

 private:
  std::vector<int64_t> offsets_;
  int64_t bytes_ = 0;
};

}  // namespace

c10::intrusive_ptr<ProcessGroupCollie> ProcessGroupCollie::create(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size, Timeout timeout,
    const std::string& group_name) {
  BackendContext context;
  context.store = std::make_shared<TorchStore>(store);
  context.rank = rank;
  context.size = size;
  context.timeout = resolve_timeout(timeout);
  context.group_name = group_name;
  std::chrono::microseconds grace = WorkQueue::kDefaultInlineGrace;
  if (const char* env = std::getenv("COLLIE_TORCH_INLINE_GRACE"); env && *env)
    grace = parse_duration(env, "COLLIE_TORCH_INLINE_GRACE");
  return c10::make_intrusive<ProcessGroupCollie>(create_backend("socket", context), group_name,
                                                 grace);
}

ProcessGroupCollie::ProcessGroupCollie(std::shared_ptr<collie::ProcessGroup> group,
                                       std::string group_name,
                                       std::chrono::microseconds inline_grace)
    : ::c10d::ProcessGroup(group->rank(), group->size()),
      group_(std::move(group)),
      group_name_(std::move(group_name)),
      queue_(std::make_shared<WorkQueue>(inline_grace)) {}

ProcessGroupCollie::~ProcessGroupCollie() {
  // What was issued runs to its end (or to its deadline) first, as torch's
  // gloo backend does; then collie's group stops.
  queue_->drain();
  group_->shutdown();
}

std::string ProcessGroupCollie::where(const char* op) const {
  return str_cat(Site{op, rank_, group_name_});
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::enqueue(OpType type, const char* op,
                                                             std::vector<at::Tensor> outputs,
                                                             std::function<void()> body) {
  auto work =
      c10::make_intrusive<CollieWork>(rank_, type, op, std::move(outputs), queue_, std::move(body));
  work->set_ticket(queue_->push([work] { work->run(); }));
  return work;
}

void ProcessGroupCollie::not_yet_supported(const char* op, const char* why) const {
  throw BackendError(str_cat(where(op), ": collie does not provide ", op, " yet (", why, ")"));
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::broadcast(
    std::vector<at::Tensor>& tensors, const ::c10d::BroadcastOptions& opts) {
  const Site site{"broadcast", rank_, group_name_};
  const at::Tensor& tensor = single(site, "tensor", tensors);
  check_root(site, opts.rootRank, opts.rootTensor, size_);
  at::Tensor buffer = dense(tensor);
  BroadcastOptions options{
      .root = static_cast<int>(opts.rootRank), .timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::BROADCAST, site.op, tensors, [group = group_, tensor, buffer, options] {
    group->broadcast(data_view(buffer), options)->wait();
    copy_back(tensor, buffer);
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::allreduce(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceOptions& opts) {
  const Site site{"allreduce", rank_, group_name_};
  const at::Tensor& tensor = single(site, "tensor", tensors);
  const ReduceOp op = collie_op(site, opts.reduceOp);
  at::Tensor buffer = dense(tensor);
  const TensorView view = reduce_view(site, buffer, op);
  AllReduceOptions options{.op = op, .timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::ALLREDUCE, site.op, tensors,
                 [group = group_, tensor, buffer, view, options] {
                   group->all_reduce(view, options)->wait();
                   copy_back(tensor, buffer);
                 });
}

// One all_reduce over the tensors flattened into one buffer (torch's gloo
// backend flattens the same way); the results are copied back.
c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  const Site site{"allreduce_coalesced", rank_, group_name_};
  if (tensors.empty()) throw InvalidArgument(str_cat(site, ": the tensor list is empty"));
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(site, "tensor", tensors[i]);
    if (tensors[i].scalar_type() != tensors[0].scalar_type())
      throw InvalidArgument(str_cat(site, ": tensor ", i, " is ", tensors[i].scalar_type(),
                                    " but tensor 0 is ", tensors[0].scalar_type(),
                                    "; coalesced tensors must share one dtype"));
  }
  const ReduceOp op = collie_op(site, opts.reduceOp);
  at::Tensor flat = concat(tensors);
  const TensorView view = reduce_view(site, flat, op);
  AllReduceOptions options{.op = op, .timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::ALLREDUCE_COALESCED, site.op, tensors,
                 [group = group_, tensors, flat, view, options] {
                   group->all_reduce(view, options)->wait();
                   int64_t offset = 0;
                   for (const auto& t : tensors) {
                     t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
                     offset += t.numel();
                   }
                 });
}

// reduce, gather and scatter refuse rather than emulate: collie's own
// reduce, gather and scatter (issue 13) move fewer bytes than an all_reduce,
// all_gather or reduce_scatter would, and the adapter maps each c10d method
// onto the collie collective of the same meaning (docs/torch.md).
c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::reduce(std::vector<at::Tensor>&,
                                                            const ::c10d::ReduceOptions&) {
  not_yet_supported("reduce", "all_reduce, which collie has, gives every rank the result");
}

// collie's all_gather into one flat buffer, then copied into the list.
c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions& opts) {
  const Site site{"allgather", rank_, group_name_};
  const at::Tensor& input = single(site, "input", inputs);
  if (outputs.size() != 1)
    throw InvalidArgument(str_cat(site, ": expected one output list, got ", outputs.size()));
  check_slots(site, "output", outputs[0], size_, "input", input);
  at::Tensor in = dense(input);
  at::Tensor flat = at::empty({size_ * input.numel()}, in.options());
  AllGatherOptions options{.timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::ALLGATHER, site.op, outputs[0],
                 [group = group_, list = outputs[0], in, flat, options] {
                   group->all_gather(data_view(flat), data_view(in), options)->wait();
                   for (size_t i = 0; i < list.size(); ++i) list[i].copy_(slot(flat, i, list[i]));
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::_allgather_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::AllgatherOptions& opts) {
  const Site site{"_allgather_base", rank_, group_name_};
  check_flat(site, "output", output, "input", input, size_);
  at::Tensor in = dense(input);
  at::Tensor out = output_buffer(output);
  AllGatherOptions options{.timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::_ALLGATHER_BASE, site.op, {output},
                 [group = group_, output, in, out, options] {
                   group->all_gather(data_view(out), data_view(in), options)->wait();
                   copy_back(output, out);
                 });
}

// The inputs packed into one byte buffer (any mix of dtypes), one all_gather
// of those bytes, and each rank's block unpacked into its output list.
c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions& opts) {
  const Site site{"allgather_coalesced", rank_, group_name_};
  if (static_cast<int>(output_lists.size()) != size_)
    throw InvalidArgument(str_cat(site, ": expected one output list per rank (", size_, "), got ",
                                  output_lists.size()));
  for (size_t i = 0; i < inputs.size(); ++i) check_tensor(site, "input", inputs[i]);
  for (size_t r = 0; r < output_lists.size(); ++r) {
    if (output_lists[r].size() != inputs.size())
      throw InvalidArgument(str_cat(site, ": output list ", r, " has ", output_lists[r].size(),
                                    " tensors but there are ", inputs.size(), " inputs"));
    for (size_t i = 0; i < inputs.size(); ++i)
      check_like(site, str_cat("output[", r, "][", i, "]"), output_lists[r][i], "its input",
                 inputs[i]);
  }
  BytePacking packing(inputs);
  auto byte_options = at::TensorOptions().dtype(at::kByte);
  at::Tensor block = at::empty({packing.bytes()}, byte_options);
  for (size_t i = 0; i < inputs.size(); ++i) packing.slot(block, i, inputs[i]).copy_(inputs[i]);
  at::Tensor gathered = at::empty({size_ * packing.bytes()}, byte_options);
  std::vector<at::Tensor> flat_outputs;
  for (const auto& list : output_lists)
    flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  AllGatherOptions options{.timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::ALLGATHER_COALESCED, site.op, flat_outputs,
                 [group = group_, output_lists, inputs, packing, block, gathered, options] {
                   group->all_gather(data_view(gathered), data_view(block), options)->wait();
                   for (size_t r = 0; r < output_lists.size(); ++r) {
                     at::Tensor rank_block =
                         gathered.narrow(0, r * packing.bytes(), packing.bytes());
                     for (size_t i = 0; i < inputs.size(); ++i)
                       output_lists[r][i].copy_(
                           packing.slot(rank_block, i, inputs[i]).view(output_lists[r][i].sizes()));
                   }
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::gather(std::vector<std::vector<at::Tensor>>&,
                                                            std::vector<at::Tensor>&,
                                                            const ::c10d::GatherOptions&) {
  not_yet_supported("gather", "all_gather, which collie has, gives every rank the list");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::scatter(std::vector<at::Tensor>&,
                                                             std::vector<std::vector<at::Tensor>>&,
                                                             const ::c10d::ScatterOptions&) {
  not_yet_supported("scatter",
                    "broadcast, which collie has, sends the root's tensor to every rank");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  const Site site{"reduce_scatter", rank_, group_name_};
  const at::Tensor& output = single(site, "output", outputs);
  if (inputs.size() != 1)
    throw InvalidArgument(str_cat(site, ": expected one input list, got ", inputs.size()));
  check_slots(site, "input", inputs[0], size_, "output", output);
  const ReduceOp op = collie_op(site, opts.reduceOp);
  at::Tensor in = concat(inputs[0]);
  at::Tensor out = output_buffer(output);
  const TensorView in_view = reduce_view(site, in, op);
  ReduceScatterOptions options{.op = op, .timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::REDUCE_SCATTER, site.op, outputs,
                 [group = group_, output, out, in_view, in, options] {
                   TensorView out_view = in_view;
                   out_view.data = out.data_ptr();
                   out_view.count = in_view.count / group->size();
                   group->reduce_scatter(out_view, in_view, options)->wait();
                   copy_back(output, out);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) {
  const Site site{"_reduce_scatter_base", rank_, group_name_};
  check_flat(site, "input", input, "output", output, size_);
  const ReduceOp op = collie_op(site, opts.reduceOp);
  at::Tensor in = dense(input);
  at::Tensor out = output_buffer(output);
  const TensorView in_view = reduce_view(site, in, op);
  ReduceScatterOptions options{.op = op, .timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::_REDUCE_SCATTER_BASE, site.op, {output},
                 [group = group_, output, out, in, in_view, options] {
                   TensorView out_view = in_view;
                   out_view.data = out.data_ptr();
                   out_view.count = in_view.count / group->size();
                   group->reduce_scatter(out_view, in_view, options)->wait();
                   copy_back(output, out);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::alltoall_base(at::Tensor&, at::Tensor&,
                                                                   std::vector<int64_t>&,
                                                                   std::vector<int64_t>&,
                                                                   const ::c10d::AllToAllOptions&) {
  not_yet_supported("alltoall_base", "collie's all_to_all is not implemented yet");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::alltoall(std::vector<at::Tensor>&,
                                                              std::vector<at::Tensor>&,
                                                              const ::c10d::AllToAllOptions&) {
  not_yet_supported("alltoall", "collie's all_to_all is not implemented yet");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::send(std::vector<at::Tensor>&, int, int) {
  not_yet_supported("send", "collie's point-to-point operations are not implemented yet");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::recv(std::vector<at::Tensor>&, int, int) {
  not_yet_supported("recv", "collie's point-to-point operations are not implemented yet");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::recvAnysource(std::vector<at::Tensor>&, int) {
  not_yet_supported("recvAnysource", "collie's point-to-point operations are not implemented yet");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::barrier(const ::c10d::BarrierOptions& opts) {
  BarrierOptions options{.timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::BARRIER, "barrier", {},
                 [group = group_, options] { group->barrier(options)->wait(); });
}

}  // namespace collie
