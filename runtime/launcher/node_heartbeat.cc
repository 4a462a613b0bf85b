#include "collie/runtime/launcher/node_heartbeat.h"

#include "collie/base/error.h"

namespace collie::launcher {

NodeHeartbeat::NodeHeartbeat(std::unique_ptr<Store> store, std::string key,
                             std::chrono::milliseconds interval)
    : store_(std::move(store)), key_(std::move(key)), interval_(interval) {
  thread_ = std::thread([this] { run(); });
}

NodeHeartbeat::~NodeHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void NodeHeartbeat::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    try {
      store_->add(key_, 1);
    } catch (const Error&) {
      return;  // the store is gone: the launcher's own connection says so
    }
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

HeartbeatWatch::HeartbeatWatch(std::vector<std::string> keys, int self, HeartbeatOptions options)
    : keys_(std::move(keys)),
      self_(self),
      options_(options),
      seen_(keys_.size(), 0),
      since_(keys_.size(), Clock::now()) {}

std::optional<HeartbeatWatch::Silent> HeartbeatWatch::look(Store& store) {
  const Clock::time_point now = Clock::now();
  if (last_look_ && now - *last_look_ < options_.interval) return std::nullopt;
  last_look_ = now;
  // add(0) reads a counter (and makes it 0 when a node has not beaten yet)
  // in one request each; multi_get would wait for the missing ones.
  std::optional<Silent> silent;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (static_cast<int>(i) == self_) continue;
    const int64_t beats = store.add(keys_[i], 0);
    if (beats != seen_[i]) {
      seen_[i] = beats;
      since_[i] = now;
    } else if (beats > 0 && now - since_[i] >= limit() && !silent) {
      silent = Silent{
          .node = static_cast<int>(i),
          .silent_for = std::chrono::duration_cast<std::chrono::milliseconds>(now - since_[i])};
    }
  }
  return silent;
}

}  // namespace collie::launcher
