// Argument checks every backend runs on the caller's thread before it queues
// a collective, so that a wrong call throws InvalidArgument where it was made
// (with a message naming the call, the rank and the values), instead of
// failing later inside a worker and breaking the group.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/small_vector.h"
#include "collie/base/types.h"

namespace collie {

// Where the check runs, for messages: "all_reduce on rank 2 of group \"0\"".
struct CallSite {
  std::string_view op;
  int rank;
  std::string_view group;
  std::string_view backend;
};

// A buffer the collective reads or writes: a known dtype, data when count > 0,
// and on a device type this backend serves (`device_type`).
void check_tensor(const CallSite& site, std::string_view name, const TensorView& t,
                  DeviceType device_type);
// A known op that can reduce `dtype` (unsupported_reduction(): AVG only on
// floating-point types, the bitwise ops only on integer and bool ones).
void check_reduce_op(const CallSite& site, ReduceOp op, DataType dtype);
void check_root(const CallSite& site, int root, int size);
// kUnsetTimeout or a non-negative duration.
void check_timeout(const CallSite& site, Timeout timeout);
// all_gather: output.count == size * input.count, same dtype and device.
// reduce_scatter: input.count == size * output.count. `big` is the buffer
// holding all ranks' slots, `small` the one holding this rank's.
void check_gather_shapes(const CallSite& site, const TensorView& big, std::string_view big_name,
                         const TensorView& small, std::string_view small_name, int size);
// A list of `size` buffers (size 0: must be empty, as off the root), each
// passing check_tensor and having `like`'s dtype and device, and its count
// unless any_count (all_to_all's parts may differ).
void check_tensor_list(const CallSite& site, std::string_view name,
                       std::span<const TensorView> list, const TensorView& like, size_t size,
                       DeviceType device_type, bool any_count = false);
// all_to_all_single: `t` cut into size() consecutive parts; `splits` empty
// means equal parts (t.count divisible by size), else size() counts
// summing to t.count.
SmallVector<TensorView> split_buffer(const CallSite& site, std::string_view name,
                                     const TensorView& t, std::span<const size_t> splits, int size);
// A point-to-point peer: a rank of the group other than this one, or
// kAnySource where `any_source` allows it.
void check_peer(const CallSite& site, int peer, int size, bool any_source);

}  // namespace collie
