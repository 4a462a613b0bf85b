// torch tensors as collie buffers: the dtype and ReduceOp mapping, the
// argument checks every BackendCollie method runs on the caller's thread, and
// the staging helpers for tensors collie cannot use as they are
// (non-contiguous ones, lists, PREMUL_SUM's scaled copies).
//
// Every check throws collie::InvalidArgument (a Python RuntimeError) whose
// message starts with the call site: "allreduce on rank 1 of group \"0\"
// (collie)".
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "collie/base/types.h"
#include "collie/runtime/process_group/collective_checks.h"

namespace collie::torch_adapter {

// Where a call was made. Formatted into a string only when a message needs it.
struct Site {
  const char* op;
  int rank;
  const std::string& group;
};
std::ostream& operator<<(std::ostream& out, const Site& s);
CallSite call_site(const Site& s);

// What a torch ReduceOp asks of collie: the op collie runs, and for
// PREMUL_SUM the factor every rank's input is multiplied by first (NCCL's
// semantics: sum over ranks of factor * input). PREMUL_SUM runs as kSum.
struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  std::optional<double> factor;  // PREMUL_SUM with a scalar
  at::Tensor tensor_factor;      // PREMUL_SUM with a one-element tensor
  bool premul() const { return factor.has_value() || tensor_factor.defined(); }
};
Reduction reduction(const Site& site, const ::c10d::ReduceOp& op);

// collie's Device for a torch tensor (cpu or cuda:i); others are refused.
Device device_of(const Site& site, const char* name, const at::Tensor& t);
// A tensor collie can take: defined, dense (strided), on the CPU or a CUDA
// device. Returns its device.
Device check_tensor(const Site& site, const char* name, const at::Tensor& t);
// c10d passes lists (one tensor per device in torch's old multi-GPU API);
// collie takes one tensor per process.
const at::Tensor& single(const Site& site, const char* name, const std::vector<at::Tensor>& list);
// `t` has the dtype, element count and device of `like` (list slots).
void check_like(const Site& site, const std::string& name, const at::Tensor& t,
                const char* like_name, const at::Tensor& like);
// A list of one slot per rank, each like `like`.
void check_slots(const Site& site, const char* name, const std::vector<at::Tensor>& slots, int size,
                 const char* like_name, const at::Tensor& like);
// `big` holds `size` times `small`'s elements, of its dtype and device (the
// flat side of _allgather_base and _reduce_scatter_base).
void check_flat(const Site& site, const char* big_name, const at::Tensor& big,
                const char* small_name, const at::Tensor& small, int size);
void check_root(const Site& site, int64_t root, int64_t root_tensor, int size);
// Every tensor of `list` on `device` (a call's tensors share one device).
void check_same_device(const Site& site, const char* name, const std::vector<at::Tensor>& list,
                       const Device& device);

// A contiguous tensor as collie elements for an operation that only moves
// data: collie's own type when it has one (so that message headers catch a
// dtype mismatch), complex as pairs of its part type, anything else as bytes.
TensorView data_view(const at::Tensor& t);
// A contiguous tensor as collie elements for a reduction; refuses dtypes
// collie cannot reduce, and ops the dtype does not allow (complex: sum, avg
// and premul_sum only).
TensorView reduce_view(const Site& site, const at::Tensor& t, const Reduction& r);

// The tensor itself when collie can use its memory as it is (contiguous,
// no lazy conjugate or negative view), else a contiguous copy.
at::Tensor dense(const at::Tensor& t);
// A contiguous buffer collie may overwrite completely: the tensor itself
// when possible, else a fresh one.
at::Tensor output_buffer(const at::Tensor& t);
// Writes `src` into the caller's tensor `user` the way a collective writes
// its output: through the memory, without bumping the tensor's autograd
// version counter (torch's own backends write through data_ptr()). A bump
// inside a blocking call would make autograd refuse a view made under
// no_grad as "modified inplace with grad mode enabled".
void write_into(const at::Tensor& user, const at::Tensor& src);
// Copies a staging buffer back into the caller's tensor (nothing when the
// buffer is the tensor).
void copy_back(const at::Tensor& user, const at::Tensor& buffer);
// The input a PREMUL_SUM reduces: `in_place` scaled where it lies (an
// all_reduce's own buffer), else a scaled copy of `input` (the input of a
// reduce_scatter must stay as it was). Without premul: `input` itself, as
// dense() gives it.
at::Tensor premultiplied(const at::Tensor& input, const Reduction& r, bool in_place);
// Tensors of one dtype, flattened one after another into one new buffer.
at::Tensor concat(const std::vector<at::Tensor>& tensors);
// Slot i of a flat buffer of equal slots, shaped like `like`.
at::Tensor slot(const at::Tensor& flat, size_t i, const at::Tensor& like);

// Tensors of any dtypes laid out one after another in one byte buffer, each
// at a 16-byte aligned offset so that its bytes can be viewed as its dtype.
class BytePacking {
 public:
  explicit BytePacking(const std::vector<at::Tensor>& tensors);
  int64_t bytes() const { return bytes_; }
  // Tensor i's slot in `block` (one packed copy), viewed as `like`.
  at::Tensor slot(const at::Tensor& block, size_t i, const at::Tensor& like) const;

 private:
  std::vector<int64_t> offsets_;
  int64_t bytes_ = 0;
};

// alltoall_base's split sizes (rows along dim 0) as element counts of a view
// of `view_count` elements; empty stays empty (equal parts).
std::vector<size_t> element_splits(const Site& site, const char* name, const at::Tensor& t,
                                   const std::vector<int64_t>& rows, size_t view_count, int size);

}  // namespace collie::torch_adapter
