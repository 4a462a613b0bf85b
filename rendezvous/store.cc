#include "collie/rendezvous/store.h"

#include "collie/base/check.h"

namespace collie {

void Store::append(const std::string& key, std::span<const uint8_t> value) {
  // Optimistic loop: read the current value (empty when missing) and swap in
  // current + value; retry when another writer got there first.
  Bytes expected;
  if (check({key})) expected = get(key);
  for (;;) {
    Bytes desired = expected;
    desired.insert(desired.end(), value.begin(), value.end());
    Bytes actual = compare_set(key, expected, desired);
    if (actual == desired) return;
    expected = std::move(actual);
  }
}

std::vector<Bytes> Store::multi_get(const std::vector<std::string>& keys) {
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(get(key));
  return values;
}

void Store::multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  COLLIE_ARG_CHECK_EQ(keys.size(), values.size(), "multi_set needs one value per key");
  for (size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
}

}  // namespace collie
