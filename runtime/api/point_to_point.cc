// torch.distributed's point-to-point functions on a Group (declared in
// distributed.h). Peers are default-group ranks, as in torch; a receive
// reports its sender as one.
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/runtime/api/group_call.h"

namespace collie {

std::shared_ptr<Work> isend(TensorView tensor, int dst, const Group& group, int tag) {
  auto pg = resolve_group(group, "isend");
  if (!pg) return non_member_work("isend");
  return pg->send(tensor, group_rank_of(group, dst, "isend", "dst"), {.tag = tag});
}

std::shared_ptr<Work> irecv(TensorView tensor, int src, const Group& group, int tag) {
  auto pg = resolve_group(group, "irecv");
  if (!pg) return non_member_work("irecv");
  return pg->recv(tensor, group_rank_of(group, src, "irecv", "src"), {.tag = tag});
}

void send(TensorView tensor, int dst, const Group& group, int tag) {
  auto pg = resolve_group(group, "send");
  if (!pg) return;
  pg->send(tensor, group_rank_of(group, dst, "send", "dst"), {.tag = tag, .async_op = false})
      ->wait();
}

int recv(TensorView tensor, int src, const Group& group, int tag) {
  auto pg = resolve_group(group, "recv");
  if (!pg) return -1;
  auto work =
      pg->recv(tensor, group_rank_of(group, src, "recv", "src"), {.tag = tag, .async_op = false});
  work->wait();
  return global_rank_of(group, work->source_rank());
}

std::vector<std::shared_ptr<Work>> batch_isend_irecv(std::span<const P2POp> p2p_op_list,
                                                     const Group& group) {
  if (p2p_op_list.empty())
    throw InvalidArgument("batch_isend_irecv: the list of operations is empty");
  auto pg = resolve_group(group, "batch_isend_irecv");
  if (!pg) return {};
  std::vector<P2POp> ops(p2p_op_list.begin(), p2p_op_list.end());
  for (P2POp& op : ops) op.peer = group_rank_of(group, op.peer, "batch_isend_irecv", "peer");
  // One Work for the batch; torch hands back one request per operation.
  auto work = pg->batch_isend_irecv(ops);
  return std::vector<std::shared_ptr<Work>>(ops.size(), work);
}

}  // namespace collie
