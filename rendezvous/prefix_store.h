// PrefixStore: a view of another Store in which every key is "prefix/key",
// torch's c10d::PrefixStore. Process groups use it to give each group (and
// each generation of a restarted job) its own key space inside one shared
// store:
//
//   auto store = std::make_shared<PrefixStore>("default_pg", tcp_store);
//   store->set("rank_0", addr);   // the underlying store sees "default_pg/rank_0"
//
// Every operation is forwarded with its keys prefixed, so the underlying
// store's own (possibly atomic or server-side) append/multi_get/multi_set are
// used. Blocking calls run under the underlying store's timeout: timeout() and
// set_timeout() read and change that one, there is no second clock.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collie/rendezvous/store.h"

namespace collie {

class PrefixStore : public Store {
 public:
  // Throws InvalidArgument when store is null.
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

  void set(const std::string& key, std::span<const uint8_t> value) override;
  using Store::set;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                    std::span<const uint8_t> desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Timeout timeout = kUnsetTimeout) override;
  bool delete_key(const std::string& key) override;
  // Like torch: the number of keys in the whole underlying store, not only
  // those under this prefix (a store cannot count by prefix cheaply).
  int64_t num_keys() override;
  void append(const std::string& key, std::span<const uint8_t> value) override;
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;

  Timeout timeout() const override { return store_->timeout(); }
  void set_timeout(Timeout timeout) override { store_->set_timeout(timeout); }

  const std::string& prefix() const { return prefix_; }
  // The same prefix over a clone of the store below; nullptr when it has none.
  std::shared_ptr<Store> clone(Timeout timeout) override;
  const std::shared_ptr<Store>& underlying() const { return store_; }

 private:
  std::string join_key(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> join_keys(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace collie
