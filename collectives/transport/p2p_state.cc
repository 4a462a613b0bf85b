#include "collie/collectives/transport/p2p_state.h"

#include "collie/base/str_cat.h"

namespace collie {

uint64_t P2PState::last_on_slot(size_t peer, uint64_t slot) const {
  const uint64_t last = copies_[peer];
  return last < slot ? 0 : last - (last - slot) % kCopySlots;
}

P2PState::CopySlot* P2PState::copy_slot(int peer, const void* address, size_t bytes) {
  auto& slots = copy_slots_[peer];
  if (!slots) slots = std::make_unique<CopySlot[]>(kCopySlots);
  // Message v uses slot v % kCopySlots, free once message v - kCopySlots
  // (if any) was read.
  const uint64_t v = copies_[peer] + 1;
  CopySlot& slot = slots[v % kCopySlots];
  if (slot.done.load(std::memory_order_acquire) != last_on_slot(peer, v % kCopySlots))
    return nullptr;
  copies_[peer] = v;
  slot.descriptor = P2PCopyDescriptor{reinterpret_cast<uint64_t>(address), bytes,
                                      reinterpret_cast<uint64_t>(&slot.done), v};
  return &slot;
}

bool P2PState::abandon_copies_of(size_t peer) {
  if (!copy_slots_[peer]) return false;
  bool any = false;
  for (uint64_t i = 0; i < kCopySlots; ++i) {
    std::atomic<uint64_t>& done = copy_slots_[peer][i].done;
    if (done.load(std::memory_order_acquire) == last_on_slot(peer, i)) continue;
    done.store(kP2PCopyAbandoned, std::memory_order_seq_cst);
    any = true;
  }
  return any;
}

void P2PState::abandon_copies() {
  for (size_t p = 0; p < copy_slots_.size(); ++p) abandon_copies_of(p);
}

P2PState::~P2PState() {
  // A receiver that has not read a message yet may still read its done
  // word and write it: that peer's slots outlive this object (a deliberate
  // leak, only after sends that nobody waited for).
  for (size_t p = 0; p < copy_slots_.size(); ++p)
    if (abandon_copies_of(p)) (void)copy_slots_[p].release();
}

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
