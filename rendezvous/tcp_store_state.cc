#include "rendezvous/tcp_store_state.h"

#include <algorithm>

#include "rendezvous/store_util.h"
#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie {

using store_protocol::Op;
using store_protocol::Writer;

TcpStoreState::Outcome TcpStoreState::handle(ConnectionId connection,
                                             store_protocol::Request&& request, Bytes& reply) {
  Writer w(reply);
  auto& keys = request.keys;
  auto& values = request.values;
  switch (request.op) {
    case Op::kSet: write(keys[0], std::move(values[0])); return Outcome::kDone;

    case Op::kCompareSet: {
      // torch's semantics, including the missing-key cases: a missing key
      // with an empty `expected` is created; a missing key otherwise is
      // reported as `expected` (torch's "lie"), and nothing changes.
      auto it = map_.find(keys[0]);
      if (it == map_.end()) {
        if (values[0].empty()) {
          w.bytes(values[1]);
          write(keys[0], std::move(values[1]));
        } else {
          w.bytes(values[0]);
        }
      } else if (it->second == values[0]) {
        w.bytes(values[1]);
        write(keys[0], std::move(values[1]));
      } else {
        w.bytes(it->second);
      }
      return Outcome::kDone;
    }

    case Op::kAdd: {
      auto it = map_.find(keys[0]);
      int64_t value = request.delta;
      if (it != map_.end()) value += parse_counter(keys[0], it->second);
      w.i64(value);
      write(keys[0], to_bytes(std::to_string(value)));
      return Outcome::kDone;
    }

    case Op::kAppend: {
      auto it = map_.find(keys[0]);
      if (it == map_.end()) {
        write(keys[0], std::move(values[0]));
      } else {
        it->second.insert(it->second.end(), values[0].begin(), values[0].end());
        wake(keys[0]);
      }
      return Outcome::kDone;
    }

    case Op::kMultiSet:
      for (size_t i = 0; i < keys.size(); ++i) write(keys[i], std::move(values[i]));
      return Outcome::kDone;

    case Op::kGet:
    case Op::kMultiGet: {
      if (has_all(keys)) {
        append_values(keys, reply);
        return Outcome::kDone;
      }
      drop(connection);
      Parked& p = parked_[connection];
      p.op = request.op;
      p.keys = std::move(keys);
      p.remaining = park_on_missing(connection, p.keys);
      return Outcome::kBlocked;
    }

    case Op::kCheck:
      w.u8(has_all(keys) ? store_protocol::kCheckReady : store_protocol::kCheckNotReady);
      return Outcome::kDone;

    case Op::kWait: {
      if (has_all(keys)) {
        w.u8(store_protocol::kStopWaiting);
        return Outcome::kDone;
      }
      // One parked wait per connection, as in torch: a new WAIT replaces it.
      drop(connection);
      Parked& p = parked_[connection];
      p.op = Op::kWait;
      p.keys = std::move(keys);
      p.remaining = park_on_missing(connection, p.keys);
      return Outcome::kParked;
    }

    case Op::kCancelWait:
      // torch answers WAIT_CANCELED whether or not a wait was parked (the
      // STOP_WAITING may already be on its way); its client expects both.
      drop(connection);
      w.u8(store_protocol::kWaitCanceled);
      return Outcome::kDone;

    case Op::kNumKeys: w.i64(static_cast<int64_t>(map_.size())); return Outcome::kDone;

    case Op::kDeleteKey: w.i64(static_cast<int64_t>(map_.erase(keys[0]))); return Outcome::kDone;

    case Op::kPing: w.u32(request.nonce); return Outcome::kDone;

    case Op::kValidate:
    case Op::kProbe:
    case Op::kWatchKey: break;
  }
  throw StoreError(str_cat("TcpStoreState cannot serve ", store_protocol::op_name(request.op)));
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
  map_[key] = std::move(value);
  wake(key);
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
    Bytes reply;
    if (p.op == Op::kWait) {
      reply.push_back(store_protocol::kStopWaiting);
      parked_.erase(it);
      deliver_(connection, std::move(reply), false);
      continue;
    }
    // A GET whose key was written, then deleted before another key came,
    // parks again on what is missing now.
    if (!has_all(p.keys)) {
      const Op op = p.op;
      std::vector<std::string> keys = std::move(p.keys);
      parked_.erase(it);
      Parked& again = parked_[connection];
      again.op = op;
      again.keys = std::move(keys);
      again.remaining = park_on_missing(connection, again.keys);
      continue;
    }
    append_values(p.keys, reply);
    parked_.erase(it);
    deliver_(connection, std::move(reply), true);
  }
}

size_t TcpStoreState::park_on_missing(ConnectionId connection,
                                      const std::vector<std::string>& keys) {
  size_t missing = 0;
  for (const auto& key : keys) {
    if (map_.contains(key)) continue;
    auto& list = waiting_on_[key];
    // A key listed twice is awaited once.
    if (std::find(list.begin(), list.end(), connection) != list.end()) continue;
    list.push_back(connection);
    ++missing;
  }
  return missing;
}

bool TcpStoreState::has_all(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return map_.contains(k); });
}

void TcpStoreState::append_values(const std::vector<std::string>& keys, Bytes& reply) const {
  Writer w(reply);
  for (const auto& key : keys) w.bytes(map_.at(key));
}

}  // namespace collie
