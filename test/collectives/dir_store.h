// DirStore: the smallest Store that processes can share, for the
// multi-process tests of this folder only: a key is a file in a directory,
// written to a temporary name and renamed into place (so a reader sees all
// of a value or nothing), and waits poll for the file with a short back-off.
// It supports what Communicator::connect uses (set, get, wait, check).
#pragma once

#include <string>

#include "rendezvous/store.h"

namespace collie::test {

class DirStore : public Store {
 public:
  explicit DirStore(std::string dir, Timeout timeout = std::chrono::seconds(60))
      : Store(timeout), dir_(std::move(dir)) {}

  void set(const std::string& key, std::span<const uint8_t> value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Timeout timeout = kUnsetTimeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                    std::span<const uint8_t> desired) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

 private:
  std::string path(const std::string& key) const;
  std::string dir_;
};

}  // namespace collie::test
