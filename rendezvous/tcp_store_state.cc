#include "rendezvous/tcp_store_state.h"

#include <algorithm>

#include "rendezvous/store_util.h"
#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie {

using store_protocol::Op;
using store_protocol::Writer;

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
        reply.value(std::make_shared<const Bytes>(std::move(values[0])));
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
      int64_t value = request.delta;
      if (it != map_.end()) value += parse_counter(keys[0], *it->second);
      Writer(reply.fields()).i64(value);
      write(keys[0], to_bytes(std::to_string(value)));
      return Outcome::kDone;
    }

    case Op::kAppend: {
      auto it = map_.find(keys[0]);
      if (it == map_.end()) {
        write(keys[0], std::move(values[0]));
      } else if (it->second.use_count() == 1) {
        it->second->insert(it->second->end(), values[0].begin(), values[0].end());
        wake(keys[0]);
      } else {
        // A reply still being sent holds the old value: leave it as it is.
        auto grown = std::make_shared<Bytes>();
        grown->reserve(it->second->size() + values[0].size());
        grown->assign(it->second->begin(), it->second->end());
        grown->insert(grown->end(), values[0].begin(), values[0].end());
        write(keys[0], std::move(grown));
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
      Writer(reply.fields())
          .u8(has_all(keys) ? store_protocol::kCheckReady : store_protocol::kCheckNotReady);
      return Outcome::kDone;

    case Op::kWait: {
      if (has_all(keys)) {
        Writer(reply.fields()).u8(store_protocol::kStopWaiting);
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
      Writer(reply.fields()).u8(store_protocol::kWaitCanceled);
      return Outcome::kDone;

    case Op::kNumKeys:
      Writer(reply.fields()).i64(static_cast<int64_t>(map_.size()));
      return Outcome::kDone;

    case Op::kDeleteKey:
      Writer(reply.fields()).i64(static_cast<int64_t>(map_.erase(keys[0])));
      return Outcome::kDone;

    case Op::kPing: Writer(reply.fields()).u32(request.nonce); return Outcome::kDone;

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
  write(key, std::make_shared<Bytes>(std::move(value)));
}

void TcpStoreState::write(const std::string& key, std::shared_ptr<Bytes> value) {
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
    ReplyQueue reply;
    if (p.op == Op::kWait) {
      Writer(reply.fields()).u8(store_protocol::kStopWaiting);
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
    // A key listed twice is awaited once. Nothing else runs while one
    // request parks, so this connection, if already listed, is last: no
    // search through the thousands of ranks that may wait on a barrier key.
    if (!list.empty() && list.back() == connection) continue;
    list.push_back(connection);
    ++missing;
  }
  return missing;
}

bool TcpStoreState::has_all(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return map_.contains(k); });
}

void TcpStoreState::append_values(const std::vector<std::string>& keys, ReplyQueue& reply) const {
  for (const auto& key : keys) reply.value(map_.at(key));
}

}  // namespace collie
