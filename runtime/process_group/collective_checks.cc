#include "collie/runtime/process_group/collective_checks.h"

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

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
  if (!reduction_supported(op, dtype))
    throw InvalidArgument(str_cat(where(site), ": ", unsupported_reduction(op, dtype)));
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

void check_tensor_list(const CallSite& site, std::string_view name,
                       std::span<const TensorView> list, const TensorView& like, size_t size,
                       DeviceType device_type, bool any_count) {
  if (list.size() != size)
    throw InvalidArgument(
        str_cat(where(site), ": ", name, " holds ", list.size(), " buffer(s), expected ", size,
                size == 0 ? " on a rank that is not the root" : " (one per rank of the group)"));
  for (size_t i = 0; i < list.size(); ++i) {
    const TensorView& t = list[i];
    // The common case decided without formatting the element's name: a
    // str_cat per element was most of a small gather's or scatter's time.
    if (is_valid(t.dtype) && t.device.type == device_type && (t.count == 0 || t.data != nullptr) &&
        t.dtype == like.dtype && t.device == like.device && (any_count || t.count == like.count))
      continue;
    const std::string item = str_cat(name, "[", i, "]");
    check_tensor(site, item, list[i], device_type);
    if (list[i].dtype != like.dtype)
      throw InvalidArgument(str_cat(where(site), ": ", item, " is ", list[i].dtype, " but ",
                                    like.dtype,
                                    " was expected; every buffer of the call must "
                                    "have one dtype"));
    if (!(list[i].device == like.device))
      throw InvalidArgument(
          str_cat(where(site), ": ", item, " is on ", list[i].device, ", not ", like.device));
    if (!any_count && list[i].count != like.count)
      throw InvalidArgument(str_cat(where(site), ": ", item, " has ", list[i].count,
                                    " elements but ", like.count, " were expected"));
  }
}

SmallVector<TensorView> split_buffer(const CallSite& site, std::string_view name,
                                     const TensorView& t, std::span<const size_t> splits,
                                     int size) {
  SmallVector<TensorView> parts;
  const size_t es = element_size(t.dtype);
  size_t offset = 0;
  auto part = [&](size_t count) {
    parts.push_back(
        TensorView{static_cast<uint8_t*>(t.data) + offset * es, count, t.dtype, t.device});
    offset += count;
  };
  if (splits.empty()) {
    if (t.count % static_cast<size_t>(size) != 0)
      throw InvalidArgument(str_cat(where(site), ": ", name, " has ", t.count,
                                    " elements, which do not split evenly over ", size,
                                    " ranks; pass split sizes"));
    for (int r = 0; r < size; ++r) part(t.count / static_cast<size_t>(size));
    return parts;
  }
  if (splits.size() != static_cast<size_t>(size))
    throw InvalidArgument(str_cat(where(site), ": ", name, " split sizes list ", splits.size(),
                                  " parts but the group has ", size, " ranks"));
  size_t total = 0;
  for (size_t s : splits) total += s;
  if (total != t.count)
    throw InvalidArgument(str_cat(where(site), ": ", name, " split sizes [", join(splits, ", "),
                                  "] sum to ", total, " but ", name, " has ", t.count,
                                  " elements"));
  for (size_t s : splits) part(s);
  return parts;
}

void check_peer(const CallSite& site, int peer, int size, bool any_source) {
  if (any_source && peer == kAnySource) return;
  if (peer < 0 || peer >= size)
    throw InvalidArgument(str_cat(where(site), ": peer ", peer, " is out of range for a group of ",
                                  size, " rank(s) (valid: 0..", size - 1,
                                  any_source ? ", or kAnySource)" : ")"));
  if (peer == site.rank)
    throw InvalidArgument(
        str_cat(where(site), ": the peer is this rank itself; send/recv need another rank"));
}

}  // namespace collie
