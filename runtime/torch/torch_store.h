// TorchStore: the c10d::Store that torch.distributed hands a backend, seen
// as a collie::Store, so that collie's cpu backend meets its peers through
// whatever store torch set up: a PrefixStore over a TCPStore (env://,
// tcp://), a FileStore (file://) or torchrun's agent store. Only rendezvous
// runs over it (each rank publishes its data address and reads its peers');
// the data connections are collie's own, authenticated with the job secret
// when one is set (docs/security.md).
//
// Every call is forwarded unchanged. torch's own errors (c10::Error or
// std::runtime_error, whose texts differ by store and version) become
// collie's: TimeoutError naming the keys when the store's timeout had passed,
// StoreError naming the operation and key otherwise.
//
// Header-only: it is compiled into the one translation unit that builds the
// process group, so that only two of the module's files parse torch's
// headers.
#pragma once

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/store.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

namespace collie {

class TorchStore final : public Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<::c10d::Store> store)
      : Store(to_timeout(store->getTimeout())), store_(std::move(store)) {}

  void set(const std::string& key, std::span<const uint8_t> value) override {
    call("set", key, [&] { store_->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
  }
  using Store::set;

  Bytes get(const std::string& key) override {
    Bytes value;
    Deadline deadline(timeout());
    call(
        "get", key, [&] { value = store_->get(key); }, &deadline);
    return value;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t value = 0;
    call("add", key, [&] { value = store_->add(key, delta); });
    return value;
  }

  Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                    std::span<const uint8_t> desired) override {
    Bytes value;
    call("compare_set", key, [&] {
      value = store_->compareSet(key, std::vector<uint8_t>(expected.begin(), expected.end()),
                                 std::vector<uint8_t>(desired.begin(), desired.end()));
    });
    return value;
  }

  bool check(const std::vector<std::string>& keys) override {
    bool found = false;
    call("check", join(keys, ", "), [&] { found = store_->check(keys); });
    return found;
  }

  void wait(const std::vector<std::string>& keys, Timeout timeout = kUnsetTimeout) override {
    Deadline deadline(resolve_timeout(timeout, this->timeout()));
    call(
        "wait", join(keys, ", "), [&] { store_->wait(keys, deadline.limit()); }, &deadline);
  }

  bool delete_key(const std::string& key) override {
    bool existed = false;
    call("delete_key", key, [&] { existed = store_->deleteKey(key); });
    return existed;
  }

  int64_t num_keys() override {
    int64_t n = 0;
    call("num_keys", "", [&] { n = store_->getNumKeys(); });
    return n;
  }

  // A connection of its own (collie's client of a TCPStore's server, else
  // torch's clone() under the same prefixes) whose calls wait at most
  // `timeout`: the flight recorder's dump thread polls it for other ranks'
  // requests to dump.
  // nullptr for a FileStore, whose clone would count as one more user of
  // the file (torch deletes it when the last user is destroyed), and for a
  // store torch cannot clone.
  std::shared_ptr<Store> clone(Timeout timeout) override {
    try {
      c10::intrusive_ptr<::c10d::Store> base = store_;
      if (auto* prefixed = dynamic_cast<::c10d::PrefixStore*>(base.get()))
        base = prefixed->getUnderlyingNonPrefixStore();
      if (dynamic_cast<::c10d::FileStore*>(base.get()) != nullptr) return nullptr;
      if (auto* tcp = dynamic_cast<::c10d::TCPStore*>(base.get())) {
        // collie's own client of the same server (the poller and the ranks
        // that ask all use one, so they share its keys): torch's prints a
        // warning with a stack trace when the server's process exits first,
        // which is how most jobs end.
        TcpStoreOptions options;
        options.timeout = resolve_timeout(timeout);
        return std::shared_ptr<Store>(TcpStore::connect(tcp->getHost(), tcp->getPort(), options));
      }
      auto copy = store_->clone();
      if (!copy) return nullptr;
      copy->setTimeout(resolve_timeout(timeout));
      return std::make_shared<TorchStore>(std::move(copy));
    } catch (const std::exception&) {
      return nullptr;
    }
  }

  // The torch store's own timeout is the one its blocking calls use.
  Timeout timeout() const override { return to_timeout(store_->getTimeout()); }
  void set_timeout(Timeout timeout) override {
    store_->setTimeout(resolve_timeout(timeout));
    Store::set_timeout(timeout);
  }

 private:
  static Timeout to_timeout(std::chrono::milliseconds ms) {
    // c10d's kNoTimeout (0) means "wait forever"; collie always bounds waits.
    return ms.count() > 0 ? Timeout(ms) : kDefaultTimeout;
  }

  // Runs `fn`, turning torch's exceptions into collie's. A failure after
  // `deadline` expired is the store's timeout, whatever torch called it.
  template <typename Fn>
  static void call(const char* op, const std::string& keys, Fn&& fn,
                   const Deadline* deadline = nullptr) {
    try {
      fn();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      if (deadline != nullptr && deadline->expired())
        throw TimeoutError(str_cat("torch store ", op, " of key(s) ", keys, " did not complete ",
                                   deadline->describe(), ": ", e.what()));
      throw StoreError(str_cat("torch store ", op, keys.empty() ? "" : " of key(s) ", keys,
                               " failed: ", e.what()));
    }
  }

  c10::intrusive_ptr<::c10d::Store> store_;
};

}  // namespace collie
