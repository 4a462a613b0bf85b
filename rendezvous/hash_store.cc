#include "collie/rendezvous/hash_store.h"

#include <algorithm>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/store_util.h"

namespace collie {

void HashStore::set(const std::string& key, std::span<const uint8_t> value) {
  {
    std::lock_guard lock(mu_);
    map_[key] = Bytes(value.begin(), value.end());
  }
  cv_.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  std::unique_lock lock(mu_);
  wait_locked(lock, {key}, Deadline(timeout_));
  return map_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t value;
  {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    value = add_counter(key, it == map_.end() ? nullptr : &it->second, delta);
    map_[key] = to_bytes(std::to_string(value));
  }
  cv_.notify_all();
  return value;
}

Bytes HashStore::compare_set(const std::string& key, std::span<const uint8_t> expected,
                             std::span<const uint8_t> desired) {
  Bytes result;
  {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      if (!expected.empty()) return Bytes(expected.begin(), expected.end());
      result = map_[key] = Bytes(desired.begin(), desired.end());
    } else if (std::ranges::equal(it->second, expected)) {
      result = it->second = Bytes(desired.begin(), desired.end());
    } else {
      return it->second;
    }
  }
  cv_.notify_all();
  return result;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  return std::ranges::all_of(keys, [&](const std::string& k) { return map_.contains(k); });
}

void HashStore::wait(const std::vector<std::string>& keys, Timeout timeout) {
  std::unique_lock lock(mu_);
  wait_locked(lock, keys, Deadline(resolve_timeout(timeout, timeout_)));
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard lock(mu_);
  return map_.erase(key) > 0;
}

int64_t HashStore::num_keys() {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(map_.size());
}

void HashStore::append(const std::string& key, std::span<const uint8_t> value) {
  {
    std::lock_guard lock(mu_);
    Bytes& v = map_[key];
    v.insert(v.end(), value.begin(), value.end());
  }
  cv_.notify_all();
}

void HashStore::wait_locked(std::unique_lock<std::mutex>& lock,
                            const std::vector<std::string>& keys, const Deadline& deadline) {
  auto all_present = [&] {
    return std::ranges::all_of(keys, [&](const std::string& k) { return map_.contains(k); });
  };
  if (cv_.wait_until(lock, deadline.when(), all_present)) return;
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (!map_.contains(k)) missing.push_back(k);
  throw TimeoutError(str_cat("HashStore: timed out waiting for key(s) [", join(missing, ", "), "] ",
                             deadline.describe()));
}

}  // namespace collie
