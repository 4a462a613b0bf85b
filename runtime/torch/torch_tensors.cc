#include "collie/runtime/torch/torch_tensors.h"

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::torch_adapter {
namespace {

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
  const at::Device d = t.device();
  return TensorView{t.data_ptr(), count, type,
                    d.is_cuda() ? Device::cuda(d.index()) : Device::cpu()};
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Site& s) {
  return out << s.op << " on rank " << s.rank << " of group \"" << s.group << "\" (collie)";
}

CallSite call_site(const Site& s) { return CallSite{s.op, s.rank, s.group, "collie"}; }

Reduction reduction(const Site& site, const ::c10d::ReduceOp& op) {
  Reduction r;
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM: r.op = ReduceOp::kSum; return r;
    case ::c10d::ReduceOp::AVG: r.op = ReduceOp::kAvg; return r;
    case ::c10d::ReduceOp::PRODUCT: r.op = ReduceOp::kProduct; return r;
    case ::c10d::ReduceOp::MIN: r.op = ReduceOp::kMin; return r;
    case ::c10d::ReduceOp::MAX: r.op = ReduceOp::kMax; return r;
    case ::c10d::ReduceOp::BAND: r.op = ReduceOp::kBand; return r;
    case ::c10d::ReduceOp::BOR: r.op = ReduceOp::kBor; return r;
    case ::c10d::ReduceOp::BXOR: r.op = ReduceOp::kBxor; return r;
    case ::c10d::ReduceOp::PREMUL_SUM: {
      const auto* s = dynamic_cast<const ::c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      if (s == nullptr)
        throw InvalidArgument(str_cat(site,
                                      ": a PREMUL_SUM without its factor (make it with "
                                      "torch.distributed._make_nccl_premul_sum)"));
      if (s->tensor_factor.defined())
        r.tensor_factor = s->tensor_factor;
      else
        r.factor = s->double_factor;
      r.op = ReduceOp::kSum;
      return r;
    }
    default:
      throw InvalidArgument(
          str_cat(site, ": ReduceOp ", static_cast<int>(op.op_), " is not one collie knows"));
  }
}

Device device_of(const Site& site, const char* name, const at::Tensor& t) {
  if (t.is_cpu()) return Device::cpu();
  if (t.is_cuda()) return Device::cuda(t.device().index());
  throw InvalidArgument(str_cat(site, ": ", name, " is on ", t.device(),
                                "; the collie backend takes CPU and CUDA tensors"));
}

Device check_tensor(const Site& site, const char* name, const at::Tensor& t) {
  if (!t.defined()) throw InvalidArgument(str_cat(site, ": ", name, " is an undefined tensor"));
  if (t.layout() != at::kStrided)
    throw InvalidArgument(str_cat(site, ": ", name, " is a ", t.layout(),
                                  " tensor; the collie backend takes dense (strided) tensors"));
  return device_of(site, name, t);
}

const at::Tensor& single(const Site& site, const char* name, const std::vector<at::Tensor>& list) {
  if (list.size() != 1)
    throw InvalidArgument(str_cat(site, ": expected exactly one ", name, " tensor, got ",
                                  list.size(),
                                  " (collie takes one tensor per process; torch's "
                                  "*_multigpu lists are not supported)"));
  check_tensor(site, name, list[0]);
  return list[0];
}

void check_like(const Site& site, const std::string& name, const at::Tensor& t,
                const char* like_name, const at::Tensor& like) {
  check_tensor(site, name.c_str(), t);
  if (t.scalar_type() != like.scalar_type() || t.numel() != like.numel())
    throw InvalidArgument(str_cat(site, ": ", name, " is ", t.scalar_type(), " x ", t.numel(),
                                  " but ", like_name, " is ", like.scalar_type(), " x ",
                                  like.numel(), "; they must match"));
  if (t.device() != like.device())
    throw InvalidArgument(str_cat(site, ": ", name, " is on ", t.device(), " but ", like_name,
                                  " is on ", like.device(), "; they must be on one device"));
}

void check_slots(const Site& site, const char* name, const std::vector<at::Tensor>& slots, int size,
                 const char* like_name, const at::Tensor& like) {
  if (static_cast<int>(slots.size()) != size)
    throw InvalidArgument(str_cat(site, ": ", name, " has ", slots.size(),
                                  " tensors; expected one per rank (", size, ")"));
  for (size_t i = 0; i < slots.size(); ++i)
    check_like(site, str_cat(name, "[", i, "]"), slots[i], like_name, like);
}

void check_flat(const Site& site, const char* big_name, const at::Tensor& big,
                const char* small_name, const at::Tensor& small, int size) {
  check_tensor(site, small_name, small);
  check_tensor(site, big_name, big);
  if (big.scalar_type() != small.scalar_type() || big.numel() != size * small.numel())
    throw InvalidArgument(str_cat(site, ": ", big_name, " is ", big.scalar_type(), " x ",
                                  big.numel(), " but must be ", small.scalar_type(), " x ",
                                  size * small.numel(), " (world size ", size, " x ", small_name,
                                  " ", small.numel(), ")"));
  if (big.device() != small.device())
    throw InvalidArgument(str_cat(site, ": ", big_name, " is on ", big.device(), " but ",
                                  small_name, " is on ", small.device(),
                                  "; they must be on one device"));
}

void check_root(const Site& site, int64_t root, int64_t root_tensor, int size) {
  collie::check_root(call_site(site), static_cast<int>(root), size);
  if (root_tensor != 0)
    throw InvalidArgument(str_cat(site, ": rootTensor ", root_tensor,
                                  " given; collie takes one tensor per process (rootTensor 0)"));
}

void check_same_device(const Site& site, const char* name, const std::vector<at::Tensor>& list,
                       const Device& device) {
  for (size_t i = 0; i < list.size(); ++i) {
    const Device d = check_tensor(site, name, list[i]);
    if (!(d == device))
      throw InvalidArgument(str_cat(site, ": ", name, "[", i, "] is on ", list[i].device(),
                                    " but the call's first tensor is on ", to_string(device),
                                    "; one call takes tensors of one device"));
  }
}

TensorView data_view(const at::Tensor& t) {
  if (auto type = collie_type(t.scalar_type())) return view_of(t, *type, t.numel());
  if (auto part = complex_part_type(t.scalar_type())) return view_of(t, *part, 2 * t.numel());
  return view_of(t, DataType::kUInt8, t.nbytes());
}

TensorView reduce_view(const Site& site, const at::Tensor& t, const Reduction& r) {
  TensorView v;
  if (auto type = collie_type(t.scalar_type())) {
    v = view_of(t, *type, t.numel());
    if (r.premul() && !is_floating_point(*type))
      throw InvalidArgument(
          str_cat(site, ": PREMUL_SUM needs a floating-point tensor, not ", t.scalar_type()));
  } else if (auto part = complex_part_type(t.scalar_type())) {
    // Sum, avg and a real factor act on the real and imaginary parts alike.
    if (r.op != ReduceOp::kSum && r.op != ReduceOp::kAvg)
      throw InvalidArgument(str_cat(site, ": ReduceOp ", r.op, " is not defined on ",
                                    t.scalar_type(), " tensors (only sum and avg are)"));
    v = view_of(t, *part, 2 * t.numel());
  } else {
    throw InvalidArgument(str_cat(site, ": collie cannot reduce ", t.scalar_type(),
                                  " tensors (it reduces float32, float64, float16, bfloat16, "
                                  "int32, int64, uint8, int8, bool and complex)"));
  }
  // The same check as the cpu and nccl groups' (collective_checks.h), here
  // so that torch's call raises on the caller's thread before anything is
  // queued, async_op or not; the group's own, at the top of its C++ call,
  // is the C++ API's. The communicator below checks nothing again.
  check_reduce_op(call_site(site), r.op, v.dtype);
  return v;
}

at::Tensor dense(const at::Tensor& t) {
  if (t.is_contiguous() && !t.is_conj() && !t.is_neg()) return t;
  return t.resolve_conj().resolve_neg().contiguous();
}

at::Tensor output_buffer(const at::Tensor& t) {
  if (t.is_contiguous() && !t.is_conj() && !t.is_neg()) return t;
  return at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
}

void write_into(const at::Tensor& user, const at::Tensor& src) {
  // variable_data(): the same memory, a version counter of its own.
  user.variable_data().copy_(src);
}

void copy_back(const at::Tensor& user, const at::Tensor& buffer) {
  if (!buffer.is_same(user)) write_into(user, buffer);
}

at::Tensor premultiplied(const at::Tensor& input, const Reduction& r, bool in_place) {
  at::Tensor in = dense(input);
  if (!r.premul()) return in;
  // In place only where `in` is a buffer of this call's own: the caller's
  // all_reduce tensor, or a staging copy made above.
  if (in_place || !in.is_same(input)) {
    at::Tensor scaled = in.variable_data();  // as write_into: no version bump
    if (r.factor)
      scaled.mul_(*r.factor);
    else
      scaled.mul_(r.tensor_factor.to(in.device()));
    return in;
  }
  if (r.factor) return at::mul(in, *r.factor);
  return at::mul(in, r.tensor_factor.to(in.device()));
}

at::Tensor concat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

at::Tensor slot(const at::Tensor& flat, size_t i, const at::Tensor& like) {
  const int64_t n = like.numel();
  return flat.narrow(0, static_cast<int64_t>(i) * n, n).view(like.sizes());
}

BytePacking::BytePacking(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    offsets_.push_back(bytes_);
    bytes_ += (static_cast<int64_t>(t.nbytes()) + 15) / 16 * 16;
  }
}

at::Tensor BytePacking::slot(const at::Tensor& block, size_t i, const at::Tensor& like) const {
  return block.narrow(0, offsets_[i], static_cast<int64_t>(like.nbytes()))
      .view(like.scalar_type())
      .view(like.sizes());
}

std::vector<size_t> element_splits(const Site& site, const char* name, const at::Tensor& t,
                                   const std::vector<int64_t>& rows, size_t view_count, int size) {
  std::vector<size_t> out;
  if (rows.empty()) return out;  // equal parts
  if (static_cast<int>(rows.size()) != size)
    throw InvalidArgument(str_cat(site, ": ", name, " has ", rows.size(),
                                  " entries; expected one per rank (", size, ")"));
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

}  // namespace collie::torch_adapter
