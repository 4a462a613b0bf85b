// Store: the key-value store processes rendezvous through, torch's c10d::Store
// in C++. Values are bytes. Every blocking call has a deadline: get() and
// wait() without an explicit timeout use the store's timeout(), which starts
// at kDefaultTimeout (30 min) and is overridable per store.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collie/base/deadline.h"

namespace collie {

using Bytes = std::vector<uint8_t>;

inline Bytes to_bytes(std::string_view s) { return Bytes(s.begin(), s.end()); }
inline std::string to_string(std::span<const uint8_t> b) { return std::string(b.begin(), b.end()); }
inline std::span<const uint8_t> as_span(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

class Store {
 public:
  explicit Store(Timeout timeout = kDefaultTimeout) : timeout_(resolve_timeout(timeout)) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual void set(const std::string& key, std::span<const uint8_t> value) = 0;
  void set(const std::string& key, std::string_view value) { set(key, as_span(value)); }

  // Waits (up to timeout()) for the key to exist, then returns its value.
  // Throws TimeoutError naming the key.
  virtual Bytes get(const std::string& key) = 0;

  // Adds delta to the integer stored (as ASCII decimal) under key, creating
  // it at 0; returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // torch's semantics: if key is missing and expected is empty, sets desired
  // and returns desired; if key is missing otherwise, returns expected; if the
  // current value equals expected, sets desired and returns desired; else
  // returns the current value.
  virtual Bytes compare_set(const std::string& key, std::span<const uint8_t> expected,
                            std::span<const uint8_t> desired) = 0;

  // True when every key exists (no waiting).
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Waits until every key exists. kUnsetTimeout means timeout(). Throws
  // TimeoutError naming the keys that never came.
  virtual void wait(const std::vector<std::string>& keys, Timeout timeout = kUnsetTimeout) = 0;

  // True when the key existed.
  virtual bool delete_key(const std::string& key) = 0;

  virtual int64_t num_keys() = 0;

  // Appends to the value (creating it). Default: a compare_set loop.
  virtual void append(const std::string& key, std::span<const uint8_t> value);
  // Default: get() each key in turn.
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys);
  // Default: set() each pair in turn.
  virtual void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values);

  // Virtual so that a wrapper (PrefixStore) can report and change the
  // timeout of the store it wraps, which is the one its calls actually use.
  // A connection of its own to the same store, whose calls give up after
  // `timeout`: for a thread whose calls must neither disturb nor wait
  // behind this connection's (the flight recorder's dump thread). nullptr:
  // this kind of store has none (the file and in-process stores).
  virtual std::shared_ptr<Store> clone(Timeout timeout) { return nullptr; }

  virtual Timeout timeout() const { return timeout_; }
  virtual void set_timeout(Timeout timeout) { timeout_ = resolve_timeout(timeout); }

 protected:
  Timeout timeout_;
};

}  // namespace collie
