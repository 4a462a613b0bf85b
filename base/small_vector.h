// SmallVector<T, N>: a vector of trivially copyable elements whose first N
// live inside the object; only a longer one allocates. The list-taking
// calls (scatter, gather, all_to_all, all_to_all_single) build per-rank
// lists of views on every call: at 2 ranks a std::vector paid 8 mallocs and
// frees for them, about a tenth of a 64-byte all_to_all_single's time. With
// N = kInlineRanks (8) no group of up to 8 ranks allocates.
//
// Only what those calls use: push_back, indexing, iteration, a span. Moving
// or copying copies the elements (they are trivially copyable), so an
// inline vector can be captured by value into a lambda.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>

namespace collie {

// The ranks' lists of one call fit inline up to this many ranks.
inline constexpr size_t kInlineRanks = 8;

template <typename T, size_t N = kInlineRanks>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
  static_assert(N > 0);

 public:
  SmallVector() = default;
  // n elements, zero bytes.
  explicit SmallVector(size_t n) {
    reserve(n);
    if (n > 0) std::memset(data(), 0, n * sizeof(T));
    size_ = n;
  }
  template <typename It>
  SmallVector(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }
  SmallVector(const SmallVector& o) { assign(o); }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) assign(o);
    return *this;
  }
  // A long one hands its buffer over; an inline one is copied (its
  // elements are trivially copyable).
  SmallVector(SmallVector&& o) noexcept { take(o); }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) take(o);
    return *this;
  }

  void push_back(const T& value) {
    if (size_ == capacity_) grow(2 * capacity_);
    data()[size_++] = value;
  }
  void reserve(size_t n) {
    if (n > capacity_) grow(n);
  }
  void clear() { size_ = 0; }

  T* data() { return heap_ ? heap_.get() : reinterpret_cast<T*>(inline_); }
  const T* data() const { return heap_ ? heap_.get() : reinterpret_cast<const T*>(inline_); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  // Whether the elements are in the object itself (no allocation).
  bool is_inline() const { return !heap_; }

  operator std::span<T>() { return {data(), size_}; }
  operator std::span<const T>() { return {data(), size_}; }
  operator std::span<const T>() const { return {data(), size_}; }

 private:
  void assign(const SmallVector& o) {
    size_ = 0;
    reserve(o.size_);
    if (o.size_ > 0) std::memcpy(data(), o.data(), o.size_ * sizeof(T));
    size_ = o.size_;
  }
  void take(SmallVector& o) {
    if (!o.heap_) {
      assign(o);
    } else {
      heap_ = std::move(o.heap_);
      capacity_ = o.capacity_;
      size_ = o.size_;
    }
    o.capacity_ = N;
    o.size_ = 0;
  }
  void grow(size_t capacity) {
    auto bigger = std::make_unique_for_overwrite<T[]>(capacity);
    if (size_ > 0) std::memcpy(bigger.get(), data(), size_ * sizeof(T));
    heap_ = std::move(bigger);
    capacity_ = capacity;
  }

  // Raw bytes, not T[N]: a T with member initializers would have all N
  // constructed on every call.
  alignas(T) unsigned char inline_[N * sizeof(T)];
  std::unique_ptr<T[]> heap_;
  size_t capacity_ = N;
  size_t size_ = 0;
};

}  // namespace collie
