// TcpStoreClient's share of torch 2.x's later TCPStore operations: the
// queues and LIST_KEYS (torch 2.11), BARRIER (torch 2.15). Each encodes as
// torch's client does, so that the same bytes work against collie's server
// and torch's (docs/store-protocol.md has the layouts).
#include <algorithm>
#include <utility>

#include "collie/base/backoff.h"
#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/tcp_store_client.h"

namespace collie {

using store_protocol::Writer;

void TcpStoreClient::queue_push(const std::string& key, std::span<const uint8_t> value) {
  check_size(key, value.size());
  std::lock_guard lock(mu_);
  ensure_open();
  Bytes req = begin(Op::kQueuePush);
  Writer(req).str(key).bytes(value);
  send(req, "QUEUE_PUSH", Deadline(timeout_));
}

std::optional<Bytes> TcpStoreClient::pop_locked(const std::string& key, const Deadline& deadline) {
  ensure_open();
  Bytes req = begin(Op::kQueuePop);
  Writer(req).str(key);
  send(req, "QUEUE_POP", deadline);
  // The queue's length before the pop, then the element when there was one.
  const int64_t length = recv_i64("QUEUE_POP", deadline);
  if (length < 0) {
    socket_.close();
    throw StoreError(describe(str_cat("QUEUE_POP of queue '", key, "' answered the length ", length,
                                      " (expected 0 or more)")));
  }
  if (length == 0) return std::nullopt;
  return recv_bytes("QUEUE_POP", deadline);
}

std::optional<Bytes> TcpStoreClient::try_queue_pop(const std::string& key) {
  std::lock_guard lock(mu_);
  return pop_locked(key, Deadline(timeout_));
}

Bytes TcpStoreClient::queue_pop(const std::string& key, Timeout timeout) {
  std::lock_guard lock(mu_);
  const Deadline deadline(resolve_timeout(timeout, timeout_));
  ensure_open();
  begin(Op::kQueuePop);  // 1.13 has no queues: InvalidArgument now, not after a WAIT
  // As torch's client does: WAIT on the queue's name, which a push answers
  // (one waiter per push), then QUEUE_POP. Another client may take the
  // element in between (torch's client then fails, "queue is empty"), or a
  // key of the same name may satisfy the WAIT while the queue is empty: so
  // an empty pop pauses briefly and waits again, until the deadline.
  Backoff backoff({.initial = std::chrono::milliseconds(1), .max = std::chrono::milliseconds(100)});
  for (;;) {
    if (wait_locked({key}, deadline)) {
      if (std::optional<Bytes> value = pop_locked(key, deadline)) return std::move(*value);
    }
    if (deadline.expired() || !backoff.sleep(deadline)) {
      throw TimeoutError(describe(str_cat(
          "queue_pop of queue '", key, "' timed out: nothing was pushed ", deadline.describe())));
    }
  }
}

int64_t TcpStoreClient::queue_len(const std::string& key) {
  std::lock_guard lock(mu_);
  ensure_open();
  Deadline deadline(timeout_);
  Bytes req = begin(Op::kQueueLen);
  Writer(req).str(key);
  send(req, "QUEUE_LEN", deadline);
  return recv_i64("QUEUE_LEN", deadline);
}

std::vector<std::string> TcpStoreClient::list_keys() {
  std::lock_guard lock(mu_);
  ensure_open();
  Deadline deadline(timeout_);
  send(begin(Op::kListKeys), "LIST_KEYS", deadline);
  const int64_t count = recv_i64("LIST_KEYS", deadline);
  if (count < 0) {
    socket_.close();
    throw StoreError(describe(str_cat("LIST_KEYS answered a count of ", count)));
  }
  std::vector<std::string> keys;
  // Reserve no more than a sane share of what a server claims: each key
  // must still arrive, and recv_bytes caps each one.
  keys.reserve(static_cast<size_t>(std::min<int64_t>(count, 1 << 16)));
  for (int64_t i = 0; i < count; ++i) keys.push_back(to_string(recv_bytes("LIST_KEYS", deadline)));
  return keys;
}

void TcpStoreClient::barrier(const std::string& key, int64_t world_size, Timeout timeout) {
  COLLIE_ARG_CHECK(world_size >= 1, "barrier '", key, "' needs a world size of at least 1, not ",
                   world_size);
  check_size(key, 0);
  std::lock_guard lock(mu_);
  const Deadline deadline(resolve_timeout(timeout, timeout_));
  ensure_open();
  Bytes req = begin(Op::kBarrier);
  Writer(req).str(key).i64(world_size);
  send(req, "BARRIER", deadline);
  const std::string awaited = str_cat("barrier '", key, "' (world size ", world_size, ")");
  if (await_stop_waiting("BARRIER", {key}, deadline, awaited)) return;
  // Best effort, for the message: the key holds the number of arrivals.
  std::string arrived = "unknown";
  try {
    Deadline cleanup(kCleanupTimeout);
    Bytes get = begin(Op::kGet);
    Writer(get).str(key);
    send(get, "GET", cleanup);
    arrived = to_string(recv_bytes("GET", cleanup));
  } catch (const Error&) {
  }
  throw TimeoutError(describe(str_cat(awaited, " timed out ", deadline.describe(), "; ", arrived,
                                      " of ", world_size, " arrived")));
}

}  // namespace collie
