// BackendCollie's all_reduce of a sparse COO tensor, the way torch's gloo
// does it (ProcessGroupGloo's AsyncSparseAllreduceWork): what DDP runs for
// the gradients of nn.Embedding(sparse=True) and nn.EmbeddingBag(sparse=True).
//
// The ranks' tensors have the same sizes but different non-zeros, so an
// element-wise all_reduce of their storage does not fit. Instead, on the
// queue, in one operation:
//
//  1. Each rank coalesces its tensor (sorted, unique indices) and the ranks
//     all_gather one row of int64 metadata each: sparse and dense dims,
//     dtype, nnz and sizes. Every rank checks every other rank's row against
//     its own; all of them see the same rows, so a mismatch is refused alike
//     on every rank (InvalidArgument) and the group stays usable.
//  2. One all_gather of each rank's indices (int64, sparse_dim x nnz) and
//     values (nnz x the dense sizes) packed as bytes into a slot the size of
//     the largest rank's (collie's all_gather takes equal slots; gloo's
//     allgatherv takes each rank's own size). Nothing when no rank has a
//     non-zero.
//  3. Each rank sums the tensors locally in gloo's order (rank 0's, then +=
//     rank 1's, ..., then coalesce), so the sum has gloo's bits, and copies
//     it into the caller's tensor with copy_, as gloo does: the tensor's
//     indices and values are replaced, and it is coalesced afterwards.
//
// Sum only, as gloo: an element that is absent on a rank is a zero there,
// which min, max and product would have to see; a dense tensor
// (to_dense()) takes every op. CPU tensors only.
#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/torch/backend_collie.h"

namespace collie::torch_adapter {
namespace {

using ::c10d::OpType;

// The metadata row: kHeader fields, then up to kMaxDims sizes (zeros past
// the tensor's dims).
enum Field : int64_t { kSparseDim, kDenseDim, kDtype, kNnz, kHeader };
constexpr int64_t kMaxDims = 12;
constexpr int64_t kRow = kHeader + kMaxDims;

const char* op_name(const ::c10d::ReduceOp& op) {
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM: return "SUM";
    case ::c10d::ReduceOp::AVG: return "AVG";
    case ::c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case ::c10d::ReduceOp::MIN: return "MIN";
    case ::c10d::ReduceOp::MAX: return "MAX";
    case ::c10d::ReduceOp::BAND: return "BAND";
    case ::c10d::ReduceOp::BOR: return "BOR";
    case ::c10d::ReduceOp::BXOR: return "BXOR";
    case ::c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown op";
  }
}

// "float32 [10, 4] (sparse_dim 1)": one rank's tensor, from its row.
std::string describe(const int64_t* row) {
  std::vector<int64_t> sizes(row + kHeader, row + kHeader + row[kSparseDim] + row[kDenseDim]);
  return str_cat(c10::toString(static_cast<at::ScalarType>(row[kDtype])), " [", join(sizes, ", "),
                 "] (sparse_dim ", row[kSparseDim], ")");
}

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Steps 1-3 above on the group `g`; `where` prefixes messages.
void sparse_sum(collie::ProcessGroup& g, const at::Tensor& tensor, const std::string& where,
                AllGatherOptions options) {
  // As gloo: sparse tensors made here are no autograd variables.
  at::AutoDispatchBelowAutograd below_autograd;
  const at::Tensor input = tensor.coalesce();
  const int rank = g.rank(), size = g.size();
  const int64_t sparse_dim = input.sparse_dim(), dense_dim = input.dense_dim();

  at::Tensor meta = at::zeros({size, kRow}, at::kLong);
  int64_t* rows = meta.data_ptr<int64_t>();
  int64_t* mine = rows + rank * kRow;
  mine[kSparseDim] = sparse_dim;
  mine[kDenseDim] = dense_dim;
  mine[kDtype] = static_cast<int64_t>(input.scalar_type());
  mine[kNnz] = input._nnz();
  for (int64_t d = 0; d < sparse_dim + dense_dim; ++d) mine[kHeader + d] = input.size(d);
  g.all_gather(data_view(meta), data_view(meta.select(0, rank)), options)->synchronize();

  int64_t max_nnz = 0;
  for (int r = 0; r < size; ++r) {
    const int64_t* row = rows + r * kRow;
    // Everything but nnz alike: dims, dtype, sizes.
    if (!std::equal(row, row + kNnz, mine) ||
        !std::equal(row + kHeader, row + kRow, mine + kHeader))
      throw InvalidArgument(str_cat(where, ": rank ", r, "'s sparse tensor is ", describe(row),
                                    " but this rank's is ", describe(mine),
                                    "; every rank must pass one of the same sizes, dims and "
                                    "dtype"));
    max_nnz = std::max(max_nnz, row[kNnz]);
  }

  // Each rank's indices, then its values, as bytes in a slot of the
  // largest rank's size (8-byte aligned, so the indices stay aligned).
  int64_t dense_numel = 1;
  for (int64_t d = sparse_dim; d < sparse_dim + dense_dim; ++d) dense_numel *= input.size(d);
  const int64_t element = static_cast<int64_t>(input.element_size());
  const int64_t index_bytes = max_nnz * sparse_dim * static_cast<int64_t>(sizeof(int64_t));
  const int64_t slot = round_up(index_bytes + max_nnz * dense_numel * element, 8);
  std::vector<at::Tensor> indices, values;
  std::vector<int64_t> value_shape{0};
  for (int64_t d = sparse_dim; d < sparse_dim + dense_dim; ++d)
    value_shape.push_back(input.size(d));
  at::Tensor packed;
  if (slot > 0) {
    packed = at::empty({size * slot}, at::kByte);
    uint8_t* own = packed.data_ptr<uint8_t>() + rank * slot;
    const at::Tensor my_indices = input._indices().contiguous();
    const at::Tensor my_values = input._values().contiguous();
    std::memcpy(own, my_indices.data_ptr(), my_indices.nbytes());
    std::memcpy(own + index_bytes, my_values.data_ptr(), my_values.nbytes());
    g.all_gather(data_view(packed), data_view(packed.narrow(0, rank * slot, slot)), options)
        ->synchronize();
  }
  for (int r = 0; r < size; ++r) {
    const int64_t nnz = rows[r * kRow + kNnz];
    at::Tensor i = at::empty({sparse_dim, nnz}, at::kLong);
    value_shape[0] = nnz;
    at::Tensor v = at::empty(value_shape, input.options().layout(at::kStrided));
    if (nnz > 0 && packed.defined()) {
      const uint8_t* from = packed.data_ptr<uint8_t>() + r * slot;
      std::memcpy(i.data_ptr(), from, i.nbytes());
      std::memcpy(v.data_ptr(), from + index_bytes, v.nbytes());
    }
    indices.push_back(std::move(i));
    values.push_back(std::move(v));
  }

  // gloo's sum, in gloo's order.
  at::Tensor output = at::sparse_coo_tensor(indices[0], values[0], input.sizes(), input.options());
  for (int r = 1; r < size; ++r)
    output += at::sparse_coo_tensor(indices[r], values[r], input.sizes(), input.options());
  output = output.coalesce();
  tensor.copy_(output);
}

}  // namespace

c10::intrusive_ptr<::c10d::Work> BackendCollie::allreduce_sparse_coo(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceOptions& opts) {
  const Site where = site("allreduce");
  const at::Tensor& tensor = tensors.at(0);
  if (!tensor.is_cpu())
    throw InvalidArgument(str_cat(where, ": a sparse tensor on ", tensor.device(),
                                  "; collie sums sparse tensors on the CPU only (move it there "
                                  "with .cpu(), or pass a dense tensor)"));
  if (opts.reduceOp.op_ != ::c10d::ReduceOp::SUM)
    throw InvalidArgument(str_cat(where, ": ReduceOp.", op_name(opts.reduceOp),
                                  " of a sparse tensor; collie sums sparse tensors only "
                                  "(ReduceOp.SUM, as gloo does): pass a dense tensor "
                                  "(to_dense()) for other ops"));
  if (tensor.sparse_dim() + tensor.dense_dim() > kMaxDims)
    throw InvalidArgument(str_cat(where, ": a sparse tensor of ", tensor.dim(),
                                  " dims; collie sums sparse tensors of at most ", kMaxDims));
  AllGatherOptions options{.timeout = timeout(opts.timeout), .async_op = false};
  return launch({where.op, OpType::ALLREDUCE, Device::cpu(), opts.asyncOp, tensors, {}},
                [tensor, options, where = str_cat(where)](collie::ProcessGroup& g) {
                  sparse_sum(g, tensor, where, options);
                  return std::shared_ptr<Work>();
                });
}

}  // namespace collie::torch_adapter
