// HashStore: an in-process Store (a map under a mutex), for threads of one
// process and for tests. Blocking calls wait on a condition variable with the
// store's deadline.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "collie/rendezvous/store.h"

namespace collie {

class HashStore : public Store {
 public:
  explicit HashStore(Timeout timeout = kDefaultTimeout) : Store(timeout) {}

  void set(const std::string& key, std::span<const uint8_t> value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                    std::span<const uint8_t> desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Timeout timeout = kUnsetTimeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  void append(const std::string& key, std::span<const uint8_t> value) override;

 private:
  // Waits with mu_ held until all keys exist; throws TimeoutError.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   const Deadline& deadline);

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> map_;
};

}  // namespace collie
