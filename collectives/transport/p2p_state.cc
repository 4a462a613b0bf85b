#include "collie/collectives/transport/p2p_state.h"

#include "collie/base/str_cat.h"

namespace collie {

std::string P2PState::describe() const {
  const std::span<const P2POp> ops = ops_;
  if (ops.empty()) return "send/recv";
  auto one = [](const P2POp& op) {
    const bool send = op.type == P2POpType::kIsend;
    return str_cat(send ? "send to " : "recv from ",
                   op.peer == kAnySource ? std::string("any rank") : str_cat("rank ", op.peer),
                   " (", op.tensor.dtype, " x ", op.tensor.count, ", tag ", op.tag, ")");
  };
  if (ops.size() == 1) return one(ops[0]);
  std::vector<std::string> parts;
  for (const auto& op : ops) parts.push_back(one(op));
  return str_cat("batch_isend_irecv [", join(parts, ", "), "]");
}

}  // namespace collie
