#include "collie/rendezvous/store_util.h"

#include <charconv>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie {

int64_t parse_counter(const std::string& key, std::span<const uint8_t> value, const char* op) {
  const char* begin = reinterpret_cast<const char*>(value.data());
  const char* end = begin + value.size();
  if (begin != end && *begin == '+') ++begin;
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(begin, end, out);
  if (ec != std::errc() || ptr != end || begin == end) {
    std::string shown(reinterpret_cast<const char*>(value.data()),
                      std::min<size_t>(value.size(), 32));
    throw StoreError(str_cat(op, " on key '", key, "': the stored value '", shown,
                             value.size() > 32 ? "..." : "", "' is not an integer"));
  }
  return out;
}

int64_t add_counter(const std::string& key, const Bytes* current, int64_t delta, const char* op) {
  const int64_t before = current == nullptr ? 0 : parse_counter(key, *current, op);
  int64_t after = 0;
  if (__builtin_add_overflow(before, delta, &after))
    throw StoreError(str_cat(op, " on key '", key, "': ", before, " + ", delta,
                             " does not fit a signed 64-bit counter; the value stays ", before));
  return after;
}

void check_option_range(const char* what, uint64_t value, uint64_t min, uint64_t max) {
  if (value < min || value > max)
    throw InvalidArgument(str_cat(what, " is ", value, ": allowed ", min, " to ", max));
}

}  // namespace collie
