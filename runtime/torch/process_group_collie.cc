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
    case at::kChar: return DataType::kInt8;
    case at::kBool: return DataType::kBool;
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
// (int16) as bytes.
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
  } else {
    throw InvalidArgument(str_cat(site, ": collie cannot reduce ", t.scalar_type(),
                                  " tensors (it reduces float32, float64, float16, bfloat16, "
                                  "int32, int64, uint8, int8, bool and complex)"));
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
    case ::c10d::ReduceOp::BAND: return ReduceOp::kBand;
    case ::c10d::ReduceOp::BOR: return ReduceOp::kBor;
    case ::c10d::ReduceOp::BXOR: return ReduceOp::kBxor;
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

// torch's reduce: the root's tensor becomes the reduction; the others keep
// theirs (collie's reduce leaves them as they were).
c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::reduce(std::vector<at::Tensor>& tensors,
                                                            const ::c10d::ReduceOptions& opts) {
  const Site site{"reduce", rank_, group_name_};
  const at::Tensor& tensor = single(site, "tensor", tensors);
  check_root(site, opts.rootRank, opts.rootTensor, size_);
  const ReduceOp op = collie_op(site, opts.reduceOp);
  at::Tensor buffer = dense(tensor);
  const TensorView view = reduce_view(site, buffer, op);
  ReduceOptions options{.op = op,
                        .root = static_cast<int>(opts.rootRank),
                        .timeout = opts.timeout,
                        .async_op = false};
  return enqueue(OpType::REDUCE, site.op, tensors, [group = group_, tensor, buffer, view, options] {
    group->reduce(view, options)->wait();
    copy_back(tensor, buffer);
  });
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

// gather's outputs and scatter's inputs: on the root one list of a tensor
// per rank, each like `like`; elsewhere no list (or one empty list), and
// nothing is returned.
static std::vector<at::Tensor> root_list(const Site& site, int size, const char* name,
                                         const std::vector<std::vector<at::Tensor>>& lists,
                                         int64_t root, const char* like_name,
                                         const at::Tensor& like) {
  check_root(site, root, 0, size);
  if (root != site.rank) {
    if (!lists.empty() && !(lists.size() == 1 && lists[0].empty()))
      throw InvalidArgument(str_cat(site, ": only the root (rank ", root, ") passes ", name,
                                    " tensors; this rank passed ", lists.size(), " list(s)"));
    return {};
  }
  if (lists.size() != 1)
    throw InvalidArgument(
        str_cat(site, ": the root expects one ", name, " list, got ", lists.size()));
  check_slots(site, name, lists[0], size, like_name, like);
  return lists[0];
}

// torch's gather: on the root one output list of a tensor per rank, like
// the input; elsewhere no list (or an empty one).
c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::GatherOptions& opts) {
  const Site site{"gather", rank_, group_name_};
  const at::Tensor& input = single(site, "input", inputs);
  const std::vector<at::Tensor> list =
      root_list(site, size_, "output", outputs, opts.rootRank, "input", input);
  at::Tensor in = dense(input);
  std::vector<at::Tensor> buffers;
  std::vector<TensorView> views;
  for (const auto& t : list) {
    buffers.push_back(output_buffer(t));
    views.push_back(data_view(buffers.back()));
  }
  GatherOptions options{
      .root = static_cast<int>(opts.rootRank), .timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::GATHER, site.op, list,
                 [group = group_, list, buffers, views, in, options] {
                   group->gather(views, data_view(in), options)->wait();
                   for (size_t i = 0; i < list.size(); ++i) copy_back(list[i], buffers[i]);
                 });
}

// torch's scatter: on the root one input list of a tensor per rank, like
// the output; elsewhere no list (or an empty one).
c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ScatterOptions& opts) {
  const Site site{"scatter", rank_, group_name_};
  const at::Tensor& output = single(site, "output", outputs);
  std::vector<at::Tensor> buffers;
  for (const auto& t : root_list(site, size_, "input", inputs, opts.rootRank, "output", output))
    buffers.push_back(dense(t));
  std::vector<TensorView> views;
  for (const auto& b : buffers) views.push_back(data_view(b));
  at::Tensor out = output_buffer(output);
  ScatterOptions options{
      .root = static_cast<int>(opts.rootRank), .timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::SCATTER, site.op, outputs,
                 [group = group_, output, out, buffers, views, options] {
                   group->scatter(data_view(out), views, options)->wait();
                   copy_back(output, out);
                 });
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

// torch's split sizes count rows (slices along dim 0); collie's count
// elements of the view, so each is scaled by the view's elements per row.
std::vector<size_t> ProcessGroupCollie::element_splits(const char* op, const char* name,
                                                       const at::Tensor& t,
                                                       const std::vector<int64_t>& rows,
                                                       size_t view_count) const {
  std::vector<size_t> out;
  if (rows.empty()) return out;  // equal parts
  const Site site{op, rank_, group_name_};
  if (static_cast<int>(rows.size()) != size_)
    throw InvalidArgument(str_cat(site, ": ", name, " has ", rows.size(),
                                  " entries; expected one per rank (", size_, ")"));
  const int64_t dim0 = t.dim() == 0 ? 1 : t.size(0);
  int64_t total = 0;
  for (int64_t r : rows) {
    if (r < 0) throw InvalidArgument(str_cat(site, ": ", name, " has a negative entry ", r));
    total += r;
  }
  if (total != dim0)
    throw InvalidArgument(str_cat(site, ": ", name, " sums to ", total, " rows but the tensor has ",
                                  dim0, " along dim 0"));
  const size_t per_row = dim0 == 0 ? 0 : view_count / static_cast<size_t>(dim0);
  for (int64_t r : rows) out.push_back(static_cast<size_t>(r) * per_row);
  return out;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const ::c10d::AllToAllOptions& opts) {
  const Site site{"alltoall_base", rank_, group_name_};
  check_tensor(site, "input", input);
  check_tensor(site, "output", output);
  if (input.scalar_type() != output.scalar_type())
    throw InvalidArgument(str_cat(site, ": input is ", input.scalar_type(), " but output is ",
                                  output.scalar_type(), "; they must match"));
  at::Tensor in = dense(input);
  at::Tensor out = output_buffer(output);
  const TensorView in_view = data_view(in), out_view = data_view(out);
  std::vector<size_t> out_splits =
      element_splits(site.op, "output_split_sizes", output, output_split_sizes, out_view.count);
  std::vector<size_t> in_splits =
      element_splits(site.op, "input_split_sizes", input, input_split_sizes, in_view.count);
  AllToAllOptions options{.timeout = opts.timeout, .async_op = false};
  return enqueue(
      OpType::ALLTOALL_BASE, site.op, {output},
      [group = group_, output, out, in, in_view, out_view, out_splits, in_splits, options] {
        group->all_to_all_single(out_view, in_view, out_splits, in_splits, options)->wait();
        copy_back(output, out);
      });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::alltoall(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const ::c10d::AllToAllOptions& opts) {
  const Site site{"alltoall", rank_, group_name_};
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_)
    throw InvalidArgument(str_cat(site, ": expected one input and one output tensor per rank (",
                                  size_, "), got ", inputs.size(), " and ", outputs.size()));
  std::vector<at::Tensor> in_buffers, out_buffers;
  std::vector<TensorView> in_views, out_views;
  for (int r = 0; r < size_; ++r) {
    check_tensor(site, "input", inputs[r]);
    check_tensor(site, "output", outputs[r]);
    if (inputs[r].scalar_type() != inputs[0].scalar_type() ||
        outputs[r].scalar_type() != inputs[0].scalar_type())
      throw InvalidArgument(str_cat(
          site, ": every input and output must be ", inputs[0].scalar_type(), "; input[", r,
          "] is ", inputs[r].scalar_type(), " and output[", r, "] is ", outputs[r].scalar_type()));
    in_buffers.push_back(dense(inputs[r]));
    out_buffers.push_back(output_buffer(outputs[r]));
    in_views.push_back(data_view(in_buffers.back()));
    out_views.push_back(data_view(out_buffers.back()));
  }
  AllToAllOptions options{.timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::ALLTOALL, site.op, outputs,
                 [group = group_, outputs, in_buffers, out_buffers, in_views, out_views, options] {
                   group->all_to_all(out_views, in_views, options)->wait();
                   for (size_t r = 0; r < outputs.size(); ++r)
                     copy_back(outputs[r], out_buffers[r]);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::send(std::vector<at::Tensor>& tensors,
                                                          int dst_rank, int tag) {
  const Site site{"send", rank_, group_name_};
  const at::Tensor& tensor = single(site, "tensor", tensors);
  at::Tensor buffer = dense(tensor);
  P2POptions options{.tag = tag, .async_op = false};
  return enqueue(OpType::SEND, site.op, tensors, [group = group_, buffer, dst_rank, options] {
    group->send(data_view(buffer), dst_rank, options)->wait();
  });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::receive(std::vector<at::Tensor>& tensors,
                                                             int src_rank, int tag,
                                                             const char* op) {
  const Site site{op, rank_, group_name_};
  const at::Tensor& tensor = single(site, "tensor", tensors);
  at::Tensor buffer = output_buffer(tensor);
  P2POptions options{.tag = tag, .async_op = false};
  auto source = std::make_shared<std::atomic<int>>(src_rank);
  auto work = enqueue(src_rank == kAnySource ? OpType::RECVANYSOURCE : OpType::RECV, op, tensors,
                      [group = group_, tensor, buffer, src_rank, options, source] {
                        auto w = group->recv(data_view(buffer), src_rank, options);
                        w->wait();
                        if (src_rank == kAnySource) source->store(w->source_rank());
                        copy_back(tensor, buffer);
                      });
  static_cast<CollieWork*>(work.get())->set_source(source);
  return work;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::recv(std::vector<at::Tensor>& tensors,
                                                          int src_rank, int tag) {
  return receive(tensors, src_rank, tag, "recv");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                   int tag) {
  return receive(tensors, kAnySource, tag, "recvAnysource");
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupCollie::barrier(const ::c10d::BarrierOptions& opts) {
  BarrierOptions options{.timeout = opts.timeout, .async_op = false};
  return enqueue(OpType::BARRIER, "barrier", {},
                 [group = group_, options] { group->barrier(options)->wait(); });
}

}  // namespace collie
