#include "runtime/process_group/collective_checks.h"

#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie {
namespace {

std::string where(const CallSite& site) {
  return str_cat(site.op, " on rank ", site.rank, " of group \"", site.group, "\"");
}

}  // namespace

void check_tensor(const CallSite& site, std::string_view name, const TensorView& t,
                  DeviceType device_type) {
  if (!is_valid(t.dtype))
    throw InvalidArgument(str_cat(where(site), ": ", name, " has an unknown dtype (",
                                  static_cast<int>(t.dtype), ")"));
  if (t.device.type != device_type)
    throw InvalidArgument(str_cat(
        where(site), ": ", name, " is on ", t.device, " but the ", site.backend, " backend takes ",
        device_type == DeviceType::kCPU ? "host (cpu)" : "cuda", " memory"));
  if (t.count > 0 && t.data == nullptr)
    throw InvalidArgument(
        str_cat(where(site), ": ", name, " has ", t.count, " elements but a null data pointer"));
}

void check_reduce_op(const CallSite& site, ReduceOp op, DataType dtype) {
  if (std::string why = unsupported_reduction(op, dtype); !why.empty())
    throw InvalidArgument(str_cat(where(site), ": ", why));
}

void check_root(const CallSite& site, int root, int size) {
  if (root < 0 || root >= size)
    throw InvalidArgument(str_cat(where(site), ": root ", root, " is out of range for a group of ",
                                  size, " rank(s) (valid: 0..", size - 1, ")"));
}

void check_timeout(const CallSite& site, Timeout timeout) {
  if (timeout != kUnsetTimeout && timeout.count() < 0)
    throw InvalidArgument(str_cat(where(site), ": timeout ", timeout.count(),
                                  "ms is negative (use kUnsetTimeout for the group's timeout)"));
}

void check_gather_shapes(const CallSite& site, const TensorView& big, std::string_view big_name,
                         const TensorView& small, std::string_view small_name, int size) {
  if (big.dtype != small.dtype)
    throw InvalidArgument(str_cat(where(site), ": ", big_name, " is ", big.dtype, " but ",
                                  small_name, " is ", small.dtype, "; they must match"));
  if (!(big.device == small.device))
    throw InvalidArgument(str_cat(where(site), ": ", big_name, " is on ", big.device, " but ",
                                  small_name, " is on ", small.device));
  if (big.count != small.count * static_cast<size_t>(size))
    throw InvalidArgument(str_cat(
        where(site), ": ", big_name, " has ", big.count, " elements but ", small_name, " has ",
        small.count, " and the group has ", size, " ranks; expected ", big_name, ".count == ", size,
        " * ", small_name, ".count = ", small.count * static_cast<size_t>(size)));
}

}  // namespace collie
