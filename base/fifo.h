// Fifo<T>: a queue in one growable ring of slots. Unlike std::deque, which
// allocates a block every few push_backs and frees it on pop_front (for a
// large T, one of each per element), a Fifo that has reached its high-water
// mark never allocates again: the transport posts and retires a send and a
// receive per peer on every call, and a 4-byte all_reduce at 2 ranks paid
// a malloc and a free for each (about 100 of its 2100 instructions).
//
// References to elements stay valid until the element is popped or until a
// push_back that grows the ring (the queue is full); a caller that holds a
// reference across a push_back must not rely on it.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace collie {

template <typename T>
class Fifo {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }
  T& back() { return slots_[(head_ + size_ - 1) & (slots_.size() - 1)]; }

  void push_back(T value) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(value);
    ++size_;
  }
  void pop_front() {
    if constexpr (!std::is_trivially_destructible_v<T>) slots_[head_] = T{};  // release it now
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }
  void clear() {
    while (!empty()) pop_front();
    head_ = 0;
  }

 private:
  // Doubles the ring (the slot count stays a power of two), unrolling the
  // elements to the front of the new one.
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 4 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i)
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;  // a power of two of them, or none
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace collie
