#include "collie/rendezvous/prefix_store.h"

#include <utility>

#include "collie/base/check.h"

namespace collie {

namespace {

const std::shared_ptr<Store>& require_store(const std::shared_ptr<Store>& store,
                                            const std::string& prefix) {
  COLLIE_ARG_CHECK(store != nullptr, "PrefixStore '", prefix, "' needs an underlying store");
  return store;
}

}  // namespace

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : Store(require_store(store, prefix)->timeout()),
      prefix_(std::move(prefix)),
      store_(std::move(store)) {}

std::vector<std::string> PrefixStore::join_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> joined;
  joined.reserve(keys.size());
  for (const auto& key : keys) joined.push_back(join_key(key));
  return joined;
}

void PrefixStore::set(const std::string& key, std::span<const uint8_t> value) {
  store_->set(join_key(key), value);
}

Bytes PrefixStore::get(const std::string& key) { return store_->get(join_key(key)); }

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return store_->add(join_key(key), delta);
}

Bytes PrefixStore::compare_set(const std::string& key, std::span<const uint8_t> expected,
                               std::span<const uint8_t> desired) {
  return store_->compare_set(join_key(key), expected, desired);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  return store_->check(join_keys(keys));
}

void PrefixStore::wait(const std::vector<std::string>& keys, Timeout timeout) {
  // kUnsetTimeout passes through, so the underlying store applies its own.
  store_->wait(join_keys(keys), timeout);
}

bool PrefixStore::delete_key(const std::string& key) { return store_->delete_key(join_key(key)); }

int64_t PrefixStore::num_keys() { return store_->num_keys(); }

void PrefixStore::append(const std::string& key, std::span<const uint8_t> value) {
  store_->append(join_key(key), value);
}

std::vector<Bytes> PrefixStore::multi_get(const std::vector<std::string>& keys) {
  return store_->multi_get(join_keys(keys));
}

void PrefixStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<Bytes>& values) {
  store_->multi_set(join_keys(keys), values);
}

std::shared_ptr<Store> PrefixStore::clone(Timeout timeout) {
  auto inner = store_->clone(timeout);
  return inner ? std::make_shared<PrefixStore>(prefix_, std::move(inner)) : nullptr;
}

}  // namespace collie
