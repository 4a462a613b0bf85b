// The object collectives (torch's broadcast_object_list, all_gather_object,
// gather_object, scatter_object_list) over byte strings, as torch does them
// over pickles: the lengths travel first (so every rank can size its
// buffers), then the bytes, padded to the longest, in one collective of
// uint8 host buffers on the group's host backend.
#include <algorithm>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/runtime/api/group_call.h"
#include "collie/runtime/api/per_device_process_group.h"

namespace collie {
namespace {

// The backend for host buffers in `group`, or BackendError saying why none.
std::shared_ptr<ProcessGroup> host_group(const Group& group, const char* call) {
  auto pg = resolve_group(group, call);
  if (!pg) return nullptr;
  if (auto per_device = std::dynamic_pointer_cast<PerDeviceProcessGroup>(pg)) {
    auto host = per_device->backend(DeviceType::kCPU);
    if (!host)
      throw BackendError(str_cat(call, ": objects travel in host memory, but group (backend \"",
                                 pg->backend_name(),
                                 "\") has no backend for cpu buffers; use backend \"auto\" or "
                                 "\"cpu:cpu,cuda:nccl\""));
    return host;
  }
  return pg;
}

TensorView bytes_view(std::string& s) {
  return TensorView{s.data(), s.size(), DataType::kUInt8, Device::cpu()};
}

// Every rank's length, in group rank order.
std::vector<int64_t> all_lengths(ProcessGroup& pg, size_t mine) {
  std::vector<int64_t> lengths(static_cast<size_t>(pg.size()));
  int64_t own = static_cast<int64_t>(mine);
  pg.all_gather(view(lengths.data(), lengths.size()), view(&own, 1), {.async_op = false})->wait();
  return lengths;
}

}  // namespace

void broadcast_object(std::string& object, int src, const Group& group) {
  auto pg = host_group(group, "broadcast_object");
  if (!pg) return;
  const int root = group_rank_of(group, src, "broadcast_object", "src");
  int64_t length = static_cast<int64_t>(object.size());
  pg->broadcast(view(&length, 1), {.root = root, .async_op = false})->wait();
  if (pg->rank() != root) object.assign(static_cast<size_t>(length), '\0');
  pg->broadcast(bytes_view(object), {.root = root, .async_op = false})->wait();
}

std::vector<std::string> all_gather_object(const std::string& object, const Group& group) {
  auto pg = host_group(group, "all_gather_object");
  if (!pg) return {};
  const auto lengths = all_lengths(*pg, object.size());
  const size_t longest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::string mine = object, all(longest * lengths.size(), '\0');
  mine.resize(longest, '\0');
  pg->all_gather(bytes_view(all), bytes_view(mine), {.async_op = false})->wait();
  std::vector<std::string> objects;
  for (size_t r = 0; r < lengths.size(); ++r)
    objects.push_back(all.substr(r * longest, static_cast<size_t>(lengths[r])));
  return objects;
}

std::vector<std::string> gather_object(const std::string& object, int dst, const Group& group) {
  auto pg = host_group(group, "gather_object");
  if (!pg) return {};
  const int root = group_rank_of(group, dst, "gather_object", "dst");
  const auto lengths = all_lengths(*pg, object.size());
  const size_t longest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::string mine = object;
  mine.resize(longest, '\0');
  const bool is_root = pg->rank() == root;
  std::vector<std::string> slots(is_root ? lengths.size() : 0, std::string(longest, '\0'));
  std::vector<TensorView> views;
  for (auto& s : slots) views.push_back(bytes_view(s));
  pg->gather(views, bytes_view(mine), {.root = root, .async_op = false})->wait();
  for (size_t r = 0; r < slots.size(); ++r) slots[r].resize(static_cast<size_t>(lengths[r]));
  return slots;
}

std::string scatter_object(std::span<const std::string> objects, int src, const Group& group) {
  auto pg = host_group(group, "scatter_object");
  if (!pg) return {};
  const int root = group_rank_of(group, src, "scatter_object", "src");
  const bool is_root = pg->rank() == root;
  if (is_root && objects.size() != static_cast<size_t>(pg->size()))
    throw InvalidArgument(str_cat("scatter_object: the source holds ", objects.size(),
                                  " object(s) for a group of ", pg->size(), " ranks"));
  if (!is_root && !objects.empty())
    throw InvalidArgument(str_cat("scatter_object: rank ", get_rank(),
                                  " is not the source but passed ", objects.size(), " object(s)"));
  // The source's longest length, then each rank's own length, then the bytes.
  int64_t longest = 0;
  std::vector<int64_t> lengths;
  for (const auto& o : objects) {
    lengths.push_back(static_cast<int64_t>(o.size()));
    longest = std::max(longest, lengths.back());
  }
  pg->broadcast(view(&longest, 1), {.root = root, .async_op = false})->wait();
  int64_t length = 0;
  std::vector<TensorView> length_views;
  for (auto& l : lengths) length_views.push_back(view(&l, 1));
  pg->scatter(view(&length, 1), length_views, {.root = root, .async_op = false})->wait();
  std::vector<std::string> padded;
  for (const auto& o : objects) {
    padded.push_back(o);
    padded.back().resize(static_cast<size_t>(longest), '\0');
  }
  std::vector<TensorView> views;
  for (auto& p : padded) views.push_back(bytes_view(p));
  std::string mine(static_cast<size_t>(longest), '\0');
  pg->scatter(bytes_view(mine), views, {.root = root, .async_op = false})->wait();
  mine.resize(static_cast<size_t>(length));
  return mine;
}

}  // namespace collie
