// TcpStore's factories and the client's operations: each encodes one
// request in the connection's dialect, sends it and reads the reply, with
// the store's deadline (or the caller's, for wait and get).
#include "collie/rendezvous/tcp_store/tcp_store.h"

#include <algorithm>
#include <utility>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/store_util.h"
#include "collie/rendezvous/tcp_store/store_auth.h"
#include "collie/rendezvous/tcp_store/tcp_store_client.h"

namespace collie {

using store_protocol::Dialect;
using store_protocol::Op;
using store_protocol::Writer;

namespace {

// Where a client on this machine reaches a server bound to `host`.
std::string local_address_for(const std::string& host) {
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

}  // namespace

std::unique_ptr<TcpStore> TcpStore::connect(const std::string& host, uint16_t port,
                                            const TcpStoreOptions& options) {
  COLLIE_ARG_CHECK(!host.empty(), "TcpStore::connect needs a host");
  COLLIE_ARG_CHECK_NE(port, 0, "TcpStore::connect needs the server's port");
  check_option_range("TcpStoreOptions::max_value_bytes", options.max_value_bytes, 1,
                     store_protocol::kMaxValueBytesLimit);
  return std::make_unique<TcpStoreClient>(host, port, options);
}

std::unique_ptr<TcpStore> TcpStore::create(const std::string& host, uint16_t port, bool is_master,
                                           const TcpStoreOptions& options) {
  if (!is_master) return connect(host, port, options);
  TcpStoreServerOptions server_options;
  server_options.host = host.empty() ? "0.0.0.0" : host;
  server_options.port = port;
  server_options.max_value_bytes = options.max_value_bytes;
  auto server = TcpStoreServer::start(server_options);
  const uint16_t bound = server->port();
  return std::make_unique<TcpStoreClient>(local_address_for(host), bound, options,
                                          std::move(server));
}

void TcpStoreClient::set(const std::string& key, std::span<const uint8_t> value) {
  check_size(key, value.size());
  std::lock_guard lock(mu_);
  ensure_open();
  Bytes req = begin(Op::kSet);
  Writer(req).str(key).bytes(value);
  send(req, "SET", Deadline(timeout_));
}

Bytes TcpStoreClient::get(const std::string& key) {
  std::lock_guard lock(mu_);
  return std::move(fetch_locked(Op::kGet, {key}, Deadline(timeout_)).front());
}

std::vector<Bytes> TcpStoreClient::fetch_locked(Op op, const std::vector<std::string>& keys,
                                                const Deadline& deadline) {
  const char* what = store_protocol::op_name(op);
  auto timed_out = [&] {
    if (op == Op::kGet) {
      return TimeoutError(describe(str_cat(
          "get of key '", keys[0], "' timed out: the key never came ", deadline.describe())));
    }
    return TimeoutError(
        describe(str_cat("multi_get timed out ", deadline.describe(), "; key(s) that never came: [",
                         join(missing_locked(keys), ", "), "]")));
  };
  ensure_open();
  if (!server_parks_gets_) {
    // As torch's client does: WAIT for the keys, then read them (a torch
    // server drops a GET of a missing key): two round trips.
    if (!wait_locked(keys, deadline)) throw timed_out();
  }
  Bytes req = begin(op);
  if (op == Op::kGet)
    Writer(req).str(keys[0]);
  else
    Writer(req).keys(keys);
  send(req, what, deadline);
  if (server_parks_gets_) {
    // collie's server parks the request until every key exists: one round
    // trip. It cannot be cancelled, so a timeout closes the connection (the
    // server forgets it; the next call reconnects).
    IoResult r = await_answer(keys, deadline);
    if (r.kind == IoResult::Kind::kTimeout) {
      socket_.close();
      throw timed_out();
    }
    if (!r.ok()) fail(r, what, deadline);
  }
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) values.push_back(recv_bytes(what, deadline));
  return values;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  std::lock_guard lock(mu_);
  ensure_open();
  Deadline deadline(timeout_);
  Bytes req = begin(Op::kAdd);
  Writer(req).str(key).i64(delta);
  send(req, "ADD", deadline);
  return recv_i64("ADD", deadline);
}

Bytes TcpStoreClient::compare_set(const std::string& key, std::span<const uint8_t> expected,
                                  std::span<const uint8_t> desired) {
  check_size(key, std::max(expected.size(), desired.size()));
  std::lock_guard lock(mu_);
  ensure_open();
  Deadline deadline(timeout_);
  Bytes req = begin(Op::kCompareSet);
  Writer(req).str(key).bytes(expected).bytes(desired);
  send(req, "COMPARE_SET", deadline);
  return recv_bytes("COMPARE_SET", deadline);
}

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  ensure_open();
  Deadline deadline(timeout_);
  Bytes req = begin(Op::kCheck);
  Writer(req).keys(keys);
  send(req, "CHECK", deadline);
  const uint8_t answer = recv_u8("CHECK", deadline);
  if (answer != store_protocol::kCheckReady && answer != store_protocol::kCheckNotReady) {
    socket_.close();
    throw StoreError(describe(str_cat("CHECK answered ", int{answer}, " (expected 0 or 1)")));
  }
  return answer == store_protocol::kCheckReady;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, Timeout timeout) {
  std::lock_guard lock(mu_);
  Deadline deadline(resolve_timeout(timeout, timeout_));
  if (wait_locked(keys, deadline)) return;
  std::vector<std::string> missing = missing_locked(keys);
  throw TimeoutError(describe(str_cat("wait timed out ", deadline.describe(),
                                      "; key(s) that never came: [", join(missing, ", "), "]")));
}

bool TcpStoreClient::wait_locked(const std::vector<std::string>& keys, const Deadline& deadline) {
  ensure_open();
  Bytes req = begin(Op::kWait);
  Writer(req).keys(keys);
  send(req, "WAIT", deadline);
  return await_stop_waiting("WAIT", keys, deadline);
}

bool TcpStoreClient::await_stop_waiting(const char* what, const std::vector<std::string>& keys,
                                        const Deadline& deadline, const std::string& awaited) {
  uint8_t answer = 0;
  IoResult r = await_answer(keys, deadline, awaited);
  if (r.ok()) r = socket_.recv_exact(&answer, 1, deadline.when());
  if (r.ok() && std::exchange(awaiting_first_answer_, false) && is_store_refusal(answer))
    refused_by_server(answer);
  if (r.ok()) {
    if (answer != store_protocol::kStopWaiting) {
      socket_.close();
      throw StoreError(
          describe(str_cat(what, " answered ", int{answer}, " (expected STOP_WAITING)")));
    }
    return true;
  }
  if (r.kind != IoResult::Kind::kTimeout) fail(r, what, deadline);
  if (dialect_ == Dialect::kV1_13) {
    // 1.13 cannot cancel a wait, and its late STOP_WAITING would be read as
    // the answer to a later request: start over on a new connection.
    socket_.close();
    return false;
  }
  // 2.x: cancel, as torch's client does. The server answers WAIT_CANCELED,
  // after a STOP_WAITING if the keys came just as we gave up.
  Deadline cleanup(kCleanupTimeout);
  send(begin(Op::kCancelWait), "CANCEL_WAIT", cleanup);
  answer = recv_u8("CANCEL_WAIT", cleanup);
  if (answer == store_protocol::kStopWaiting) answer = recv_u8("CANCEL_WAIT", cleanup);
  if (answer != store_protocol::kWaitCanceled) {
    socket_.close();
    throw StoreError(describe(str_cat("CANCEL_WAIT answered ", int{answer})));
  }
  return false;
}

std::vector<std::string> TcpStoreClient::missing_locked(const std::vector<std::string>& keys) {
  // Best effort, for the error message: if the server is gone, every key
  // counts as missing.
  try {
    if (!socket_.is_open()) open(Deadline(kCleanupTimeout));
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      Deadline deadline(kCleanupTimeout);
      Bytes req = begin(Op::kCheck);
      Writer(req).keys({key});
      send(req, "CHECK", deadline);
      if (recv_u8("CHECK", deadline) != store_protocol::kCheckReady) missing.push_back(key);
    }
    return missing;
  } catch (const Error&) {
    return keys;
  }
}

bool TcpStoreClient::delete_key(const std::string& key) {
  std::lock_guard lock(mu_);
  ensure_open();
  Deadline deadline(timeout_);
  Bytes req = begin(Op::kDeleteKey);
  Writer(req).str(key);
  send(req, "DELETE_KEY", deadline);
  return recv_i64("DELETE_KEY", deadline) > 0;
}

int64_t TcpStoreClient::num_keys() {
  std::lock_guard lock(mu_);
  ensure_open();
  Deadline deadline(timeout_);
  send(begin(Op::kNumKeys), "GETNUMKEYS", deadline);
  return recv_i64("GETNUMKEYS", deadline);
}

void TcpStoreClient::append(const std::string& key, std::span<const uint8_t> value) {
  check_size(key, value.size());
  {
    std::lock_guard lock(mu_);
    if (dialect_ == Dialect::kV2) {
      ensure_open();
      Bytes req = begin(Op::kAppend);
      Writer(req).str(key).bytes(value);
      send(req, "APPEND", Deadline(timeout_));
      return;
    }
  }
  Store::append(key, value);  // 1.13 has no APPEND: a compare_set loop
}

std::vector<Bytes> TcpStoreClient::multi_get(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  {
    std::lock_guard lock(mu_);
    if (dialect_ == Dialect::kV2) return fetch_locked(Op::kMultiGet, keys, Deadline(timeout_));
  }
  return Store::multi_get(keys);  // 1.13 has no MULTI_GET: one get per key
}

void TcpStoreClient::multi_set(const std::vector<std::string>& keys,
                               const std::vector<Bytes>& values) {
  COLLIE_ARG_CHECK_EQ(keys.size(), values.size(), "multi_set needs one value per key");
  for (size_t i = 0; i < keys.size(); ++i) check_size(keys[i], values[i].size());
  {
    std::lock_guard lock(mu_);
    if (dialect_ == Dialect::kV2) {
      ensure_open();
      Bytes req = begin(Op::kMultiSet);
      Writer w(req);
      w.u64(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) w.str(keys[i]).bytes(values[i]);
      send(req, "MULTI_SET", Deadline(timeout_));
      return;
    }
  }
  Store::multi_set(keys, values);
}

}  // namespace collie
