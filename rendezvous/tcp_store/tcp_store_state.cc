#include "collie/rendezvous/tcp_store/tcp_store_state.h"

#include <algorithm>
#include <limits>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/store_util.h"

namespace collie {

using store_protocol::Op;
using store_protocol::Writer;

namespace {

ReplyQueue stop_waiting() {
  ReplyQueue reply;
  Writer(reply.fields()).u8(store_protocol::kStopWaiting);
  return reply;
}

}  // namespace

TcpStoreState::Outcome TcpStoreState::handle(ConnectionId connection,
                                             store_protocol::Request&& request, ReplyQueue& reply) {
  auto& keys = request.keys;
  auto& values = request.values;
  switch (request.op) {
    case Op::kSet: write(keys[0], std::move(values[0])); return Outcome::kDone;

    case Op::kCompareSet: {
      // torch's semantics, including the missing-key cases: a missing key
      // with an empty `expected` is created; a missing key otherwise is
      // reported as `expected` (torch's "lie"), and nothing changes.
      auto it = map_.find(keys[0]);
      if (it == map_.end() && !values[0].empty()) {
        auto expected = std::make_shared<const Bytes>(std::move(values[0]));
        reply.value(expected);
        retire(std::move(expected));  // the reply's alone
      } else if (it == map_.end() || *it->second == values[0]) {
        auto desired = std::make_shared<Bytes>(std::move(values[1]));
        reply.value(desired);
        write(keys[0], std::move(desired));
      } else {
        reply.value(it->second);
      }
      return Outcome::kDone;
    }

    case Op::kAdd: {
      auto it = map_.find(keys[0]);
      const int64_t value =
          add_counter(keys[0], it == map_.end() ? nullptr : it->second.get(), request.delta);
      Writer(reply.fields()).i64(value);
      write(keys[0], to_bytes(std::to_string(value)));
      return Outcome::kDone;
    }

    case Op::kAppend: {
      auto it = map_.find(keys[0]);
      const size_t before = it == map_.end() ? 0 : it->second->size();
      if (values[0].size() > max_value_bytes_ - std::min(before, max_value_bytes_))
        throw StoreError(str_cat("append on key '", keys[0], "': the value would grow from ",
                                 before, " to ", before + values[0].size(),
                                 " bytes, past the server's cap of ", max_value_bytes_,
                                 " (max_value_bytes); it stays as it was"));
      if (it == map_.end()) {
        write(keys[0], std::move(values[0]));
      } else {
        append(keys[0], it->second, values[0]);
      }
      return Outcome::kDone;
    }

    case Op::kMultiSet:
      for (size_t i = 0; i < keys.size(); ++i) write(keys[i], std::move(values[i]));
      return Outcome::kDone;

    case Op::kGet:
    case Op::kMultiGet: {
      if (has_values(keys)) {
        append_values(keys, reply);
        return Outcome::kDone;
      }
      drop(connection);
      Parked& p = parked_[connection];
      p.op = request.op;
      p.keys = std::move(keys);
      p.remaining = park_on_missing(connection, p.keys, /*values=*/true);
      return Outcome::kBlocked;
    }

    case Op::kCheck:
      Writer(reply.fields())
          .u8(all_exist(keys) ? store_protocol::kCheckReady : store_protocol::kCheckNotReady);
      return Outcome::kDone;

    case Op::kWait: {
      if (all_exist(keys)) {
        Writer(reply.fields()).u8(store_protocol::kStopWaiting);
        return Outcome::kDone;
      }
      // One parked wait per connection, as in torch: a new WAIT replaces it.
      drop(connection);
      Parked& p = parked_[connection];
      p.op = Op::kWait;
      p.keys = std::move(keys);
      p.remaining = park_on_missing(connection, p.keys, /*values=*/false);
      return Outcome::kParked;
    }

    case Op::kCancelWait:
      // torch answers WAIT_CANCELED whether or not a wait was parked (the
      // STOP_WAITING may already be on its way); its client expects both.
      drop(connection);
      Writer(reply.fields()).u8(store_protocol::kWaitCanceled);
      return Outcome::kDone;

    case Op::kNumKeys:
      // Keys only: queues are not counted, as in torch.
      Writer(reply.fields()).i64(static_cast<int64_t>(map_.size()));
      return Outcome::kDone;

    case Op::kDeleteKey: {
      auto it = map_.find(keys[0]);
      const size_t erased = it == map_.end() ? 0 : 1;
      if (erased) {
        retire(std::move(it->second));
        map_.erase(it);
        forget_key_list();
      }
      Writer(reply.fields()).i64(static_cast<int64_t>(erased));
      return Outcome::kDone;
    }

    case Op::kPing: Writer(reply.fields()).u32(request.nonce); return Outcome::kDone;

    case Op::kQueuePush:
      queues_[keys[0]].push_back(std::make_shared<const Bytes>(std::move(values[0])));
      wake_one(keys[0]);
      return Outcome::kDone;

    case Op::kQueuePop: {
      // torch's reply: the queue's length before the pop, then, when it was
      // not empty, the value popped. An empty queue is answered at once
      // (length 0); a client that wants to block WAITs on the name first.
      auto it = queues_.find(keys[0]);
      Writer(reply.fields()).i64(it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size()));
      if (it == queues_.end()) return Outcome::kDone;
      SharedValue popped = std::move(it->second.front());
      it->second.pop_front();
      reply.value(popped);
      retire(std::move(popped));  // the reply's alone
      if (it->second.empty()) queues_.erase(it);
      return Outcome::kDone;
    }

    case Op::kQueueLen: {
      auto it = queues_.find(keys[0]);
      Writer(reply.fields()).i64(it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size()));
      return Outcome::kDone;
    }

    case Op::kListKeys: append_key_list(reply); return Outcome::kDone;

    case Op::kBarrier: return barrier(connection, keys[0], request.delta, reply);

    case Op::kValidate:
    case Op::kProbe:
    case Op::kWatchKey: break;
  }
  throw StoreError(str_cat("TcpStoreState cannot serve ", store_protocol::op_name(request.op)));
}

TcpStoreState::Outcome TcpStoreState::barrier(ConnectionId connection, const std::string& key,
                                              int64_t world_size, ReplyQueue& reply) {
  // torch's BARRIER: the key holds the number of arrivals as ASCII decimal
  // (an ordinary key: GET, ADD and LIST_KEYS see it). Each arrival counts
  // itself; the one that brings the count to world_size (or past it: the
  // key is never reset, so later arrivals pass at once) is answered, and
  // everything parked on the key is woken. Until then the count is stored
  // without waking anyone, so the earlier arrivals stay parked, and so does
  // a WAIT on the key, just as with torch's server.
  auto it = map_.find(key);
  const int64_t before = it == map_.end() ? 0 : parse_counter(key, *it->second, "barrier");
  const int64_t count = std::min(before, std::numeric_limits<int64_t>::max() - 1) + 1;
  store(key, std::make_shared<Bytes>(to_bytes(std::to_string(count))));
  if (count >= world_size) {
    Writer(reply.fields()).u8(store_protocol::kStopWaiting);
    wake(key);
    return Outcome::kDone;
  }
  // Parked like a WAIT on the key (so CANCEL_WAIT cancels it, and any write
  // to the key releases it, as in torch), whether or not the key exists.
  drop(connection);
  Parked& p = parked_[connection];
  p.op = Op::kWait;
  p.keys = {key};
  p.remaining = 1;
  waiting_on_[key].push_back(connection);
  return Outcome::kParked;
}

void TcpStoreState::append_key_list(ReplyQueue& reply) {
  if (!key_list_) {
    std::vector<const std::string*> keys;
    keys.reserve(map_.size());
    size_t bytes = 8;
    for (const auto& [key, value] : map_) {
      keys.push_back(&key);
      bytes += 8 + key.size();
    }
    // torch lists in hash order; sorted costs little more and reads better.
    std::sort(keys.begin(), keys.end(), [](const auto* a, const auto* b) { return *a < *b; });
    auto list = std::make_shared<Bytes>();
    list->reserve(bytes);
    Writer w(*list);
    w.i64(static_cast<int64_t>(keys.size()));
    for (const std::string* key : keys) w.str(*key);
    key_list_ = std::move(list);
  }
  reply.encoded(key_list_);
}

void TcpStoreState::append(const std::string& key, std::shared_ptr<Bytes>& value,
                           std::span<const uint8_t> tail) {
  Bytes& bytes = *value;
  if (value.use_count() == 1 || bytes.size() + tail.size() <= bytes.capacity()) {
    // Nobody else holds it, or it has room: replies that refer to it send
    // only the bytes they were given, and those stay where they are (no
    // reallocation below capacity).
    bytes.insert(bytes.end(), tail.begin(), tail.end());
    wake(key);
    return;
  }
  // Full, and a reply still being sent holds it: a new buffer, with room
  // to grow (up to the cap), so that the next APPENDs need no copy.
  const size_t size = bytes.size() + tail.size();
  auto grown = std::make_shared<Bytes>();
  grown->reserve(std::min(std::max(size, 2 * bytes.size()), std::max(size, max_value_bytes_)));
  grown->assign(bytes.begin(), bytes.end());
  grown->insert(grown->end(), tail.begin(), tail.end());
  write(key, std::move(grown));
}

void TcpStoreState::retire(SharedValue buffer) {
  if (ledger_) ledger_->retire(std::move(buffer));
}

void TcpStoreState::drop(ConnectionId connection) {
  auto it = parked_.find(connection);
  if (it == parked_.end()) return;
  for (const auto& key : it->second.keys) {
    auto w = waiting_on_.find(key);
    if (w == waiting_on_.end()) continue;
    std::erase(w->second, connection);
    if (w->second.empty()) waiting_on_.erase(w);
  }
  parked_.erase(it);
}

void TcpStoreState::write(const std::string& key, Bytes value) {
  write(key, std::make_shared<Bytes>(std::move(value)));
}

void TcpStoreState::write(const std::string& key, std::shared_ptr<Bytes> value) {
  store(key, std::move(value));
  wake(key);
}

void TcpStoreState::store(const std::string& key, std::shared_ptr<Bytes> value) {
  auto [it, inserted] = map_.try_emplace(key);
  if (inserted) {
    forget_key_list();
  } else if (it->second != value) {
    retire(std::move(it->second));
  }
  it->second = std::move(value);
}

void TcpStoreState::wake(const std::string& key) {
  auto w = waiting_on_.find(key);
  if (w == waiting_on_.end()) return;
  std::vector<ConnectionId> waiters = std::move(w->second);
  waiting_on_.erase(w);
  for (ConnectionId connection : waiters) {
    auto it = parked_.find(connection);
    if (it == parked_.end() || --it->second.remaining > 0) continue;
    Parked& p = it->second;
    if (p.op == Op::kWait) {
      parked_.erase(it);
      deliver_(connection, stop_waiting(), false);
      continue;
    }
    // A GET whose key was written, then deleted before another key came,
    // parks again on what is missing now.
    if (!has_values(p.keys)) {
      const Op op = p.op;
      std::vector<std::string> keys = std::move(p.keys);
      parked_.erase(it);
      Parked& again = parked_[connection];
      again.op = op;
      again.keys = std::move(keys);
      again.remaining = park_on_missing(connection, again.keys, /*values=*/true);
      continue;
    }
    ReplyQueue reply;
    append_values(p.keys, reply);
    parked_.erase(it);
    deliver_(connection, std::move(reply), true);
  }
}

void TcpStoreState::wake_one(const std::string& key) {
  auto w = waiting_on_.find(key);
  if (w == waiting_on_.end()) return;
  std::vector<ConnectionId>& line = w->second;
  for (auto at = line.begin(); at != line.end(); ++at) {
    auto it = parked_.find(*at);
    // A parked GET reads stored values, which a push does not make.
    if (it == parked_.end() || it->second.op != Op::kWait) continue;
    const ConnectionId connection = *at;
    line.erase(at);
    if (line.empty()) waiting_on_.erase(w);
    if (--it->second.remaining > 0) return;
    parked_.erase(it);
    deliver_(connection, stop_waiting(), false);
    return;
  }
}

size_t TcpStoreState::park_on_missing(ConnectionId connection, const std::vector<std::string>& keys,
                                      bool values) {
  size_t missing = 0;
  for (const auto& key : keys) {
    if (values ? map_.contains(key) : exists(key)) continue;
    auto& list = waiting_on_[key];
    // A key listed twice is awaited once. Nothing else runs while one
    // request parks, so this connection, if already listed, is last: no
    // search through the thousands of ranks that may wait on a barrier key.
    if (!list.empty() && list.back() == connection) continue;
    list.push_back(connection);
    ++missing;
  }
  return missing;
}

bool TcpStoreState::exists(const std::string& key) const {
  return map_.contains(key) || queues_.contains(key);
}

bool TcpStoreState::all_exist(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return exists(k); });
}

bool TcpStoreState::has_values(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return map_.contains(k); });
}

void TcpStoreState::append_values(const std::vector<std::string>& keys, ReplyQueue& reply) const {
  for (const auto& key : keys) reply.value(map_.at(key));
}

}  // namespace collie
