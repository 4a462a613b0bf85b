// The collectives of torch.distributed on a Group (declared in
// distributed.h): each resolves the group, translates src/dst, calls the
// group's ProcessGroup and waits unless async_op.
#include <algorithm>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/runtime/api/group_call.h"

namespace collie {

std::shared_ptr<Work> non_member_work(const char* call) {
  COLLIE_LOG(kDebug) << call << " on a group this rank is not a member of: nothing to do";
  auto work = std::make_shared<CompletionWork>(str_cat(call, " (not a member)"));
  work->mark_completed();
  return work;
}

std::shared_ptr<Work> finish(std::shared_ptr<Work> work, bool async_op) {
  if (!async_op) work->wait();
  return work;
}

int group_rank_of(const Group& group, int global, const char* call, const char* what) {
  const auto& ranks = group.global_ranks();
  if (ranks.empty() || global == kAnySource) return global;
  auto it = std::find(ranks.begin(), ranks.end(), global);
  if (it == ranks.end())
    throw InvalidArgument(str_cat(call, ": ", what, " rank ", global, " is not in the group [",
                                  join(ranks, ", "), "]"));
  return static_cast<int>(it - ranks.begin());
}

int global_rank_of(const Group& group, int rank) {
  const auto& ranks = group.global_ranks();
  if (ranks.empty() || rank < 0 || rank >= static_cast<int>(ranks.size())) return rank;
  return ranks[rank];
}

std::shared_ptr<Work> all_reduce(TensorView tensor, ReduceOp op, const Group& group,
                                 bool async_op) {
  auto pg = resolve_group(group, "all_reduce");
  if (!pg) return non_member_work("all_reduce");
  return finish(pg->all_reduce(tensor, {.op = op, .async_op = async_op}), async_op);
}

std::shared_ptr<Work> broadcast(TensorView tensor, int src, const Group& group, bool async_op) {
  auto pg = resolve_group(group, "broadcast");
  if (!pg) return non_member_work("broadcast");
  const int root = group_rank_of(group, src, "broadcast", "src");
  return finish(pg->broadcast(tensor, {.root = root, .async_op = async_op}), async_op);
}

std::shared_ptr<Work> barrier(const Group& group, bool async_op) {
  auto pg = resolve_group(group, "barrier");
  if (!pg) return non_member_work("barrier");
  return finish(pg->barrier({.async_op = async_op}), async_op);
}

std::shared_ptr<Work> all_gather(TensorView output, TensorView input, const Group& group,
                                 bool async_op) {
  auto pg = resolve_group(group, "all_gather");
  if (!pg) return non_member_work("all_gather");
  return finish(pg->all_gather(output, input, {.async_op = async_op}), async_op);
}

std::shared_ptr<Work> reduce_scatter(TensorView output, TensorView input, ReduceOp op,
                                     const Group& group, bool async_op) {
  auto pg = resolve_group(group, "reduce_scatter");
  if (!pg) return non_member_work("reduce_scatter");
  return finish(pg->reduce_scatter(output, input, {.op = op, .async_op = async_op}), async_op);
}

std::shared_ptr<Work> all_gather(std::span<const TensorView> tensor_list, TensorView tensor,
                                 const Group& group, bool async_op) {
  auto pg = resolve_group(group, "all_gather");
  if (!pg) return non_member_work("all_gather");
  return finish(pg->all_gather(tensor_list, tensor, {.async_op = async_op}), async_op);
}

std::shared_ptr<Work> reduce_scatter(TensorView output, std::span<const TensorView> input_list,
                                     ReduceOp op, const Group& group, bool async_op) {
  auto pg = resolve_group(group, "reduce_scatter");
  if (!pg) return non_member_work("reduce_scatter");
  return finish(pg->reduce_scatter(output, input_list, {.op = op, .async_op = async_op}), async_op);
}

std::shared_ptr<Work> reduce(TensorView tensor, int dst, ReduceOp op, const Group& group,
                             bool async_op) {
  auto pg = resolve_group(group, "reduce");
  if (!pg) return non_member_work("reduce");
  const int root = group_rank_of(group, dst, "reduce", "dst");
  return finish(pg->reduce(tensor, {.op = op, .root = root, .async_op = async_op}), async_op);
}

std::shared_ptr<Work> gather(TensorView tensor, std::span<const TensorView> gather_list, int dst,
                             const Group& group, bool async_op) {
  auto pg = resolve_group(group, "gather");
  if (!pg) return non_member_work("gather");
  const int root = group_rank_of(group, dst, "gather", "dst");
  return finish(pg->gather(gather_list, tensor, {.root = root, .async_op = async_op}), async_op);
}

std::shared_ptr<Work> scatter(TensorView tensor, std::span<const TensorView> scatter_list, int src,
                              const Group& group, bool async_op) {
  auto pg = resolve_group(group, "scatter");
  if (!pg) return non_member_work("scatter");
  const int root = group_rank_of(group, src, "scatter", "src");
  return finish(pg->scatter(tensor, scatter_list, {.root = root, .async_op = async_op}), async_op);
}

std::shared_ptr<Work> all_to_all(std::span<const TensorView> output_tensor_list,
                                 std::span<const TensorView> input_tensor_list, const Group& group,
                                 bool async_op) {
  auto pg = resolve_group(group, "all_to_all");
  if (!pg) return non_member_work("all_to_all");
  return finish(pg->all_to_all(output_tensor_list, input_tensor_list, {.async_op = async_op}),
                async_op);
}

std::shared_ptr<Work> all_to_all_single(TensorView output, TensorView input,
                                        std::span<const size_t> output_split_sizes,
                                        std::span<const size_t> input_split_sizes,
                                        const Group& group, bool async_op) {
  auto pg = resolve_group(group, "all_to_all_single");
  if (!pg) return non_member_work("all_to_all_single");
  return finish(pg->all_to_all_single(output, input, output_split_sizes, input_split_sizes,
                                      {.async_op = async_op}),
                async_op);
}

void monitored_barrier(const Group& group, Timeout timeout, bool wait_all_ranks) {
  auto pg = resolve_group(group, "monitored_barrier");
  if (!pg) return;
  pg->monitored_barrier({.timeout = timeout, .wait_all_ranks = wait_all_ranks});
}

}  // namespace collie
