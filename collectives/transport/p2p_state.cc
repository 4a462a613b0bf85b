#include "collie/collectives/transport/p2p_state.h"

#include "collie/base/str_cat.h"

namespace collie {

P2PState::CopySlot* P2PState::copy_slot(int peer, const void* address, size_t bytes) {
  auto& slots = copy_slots_[peer];
  if (!slots) slots = std::make_unique<CopySlot[]>(kCopySlots);
  // Message v uses slot v % kCopySlots, free once message v - kCopySlots
  // (if any) was read.
  const uint64_t v = copies_[peer] + 1;
  CopySlot& slot = slots[v % kCopySlots];
  if (slot.done.load(std::memory_order_acquire) != (v > kCopySlots ? v - kCopySlots : 0))
    return nullptr;
  copies_[peer] = v;
  slot.descriptor = P2PCopyDescriptor{reinterpret_cast<uint64_t>(address), bytes,
                                      reinterpret_cast<uint64_t>(&slot.done), v};
  return &slot;
}

P2PState::~P2PState() {
  // A receiver that has not read a message yet will still set its done
  // word: that peer's slots outlive this object (a deliberate leak, only
  // after sends that nobody waited for).
  for (size_t p = 0; p < copy_slots_.size(); ++p) {
    if (!copy_slots_[p]) continue;
    const uint64_t last = copies_[p];
    for (uint64_t i = 0; i < kCopySlots; ++i) {
      // The last message slot i carried (0: none).
      const uint64_t expected = last < i ? 0 : last - (last - i) % kCopySlots;
      if (copy_slots_[p][i].done.load(std::memory_order_acquire) != expected) {
        (void)copy_slots_[p].release();
        break;
      }
    }
  }
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
