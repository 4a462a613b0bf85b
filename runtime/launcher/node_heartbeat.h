// NodeHeartbeat: how the launchers of a static job notice that one of them
// is gone (SIGKILLed, its machine lost) within seconds, instead of waiting
// for it at the next barrier for the whole --rdzv-timeout.
//
// Each launcher of a job of several nodes bumps its counter
// /collie-run/<run id>/node/<i>/alive every `interval` from a thread of its
// own over a store connection of its own, so that nothing the launcher's
// main loop does (stopping workers for a long --grace-period, a long store
// wait) can hold a beat up. Node 0's launcher watches the others' counters
// while it waits at a barrier and while its workers run: one that has not
// moved for `interval` x `misses` (as node 0's clock measures it) belongs to
// a launcher that is gone, and node 0 records that for the others. A node
// whose counter is still 0 has not started yet, and is waited for as
// before (the join's timeout names it).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collie/rendezvous/store.h"

namespace collie::launcher {

struct HeartbeatOptions {
  std::chrono::milliseconds interval = std::chrono::seconds(1);
  int misses = 5;  // beats a node may miss before it counts as gone
};

// The beating half: a thread bumping `key` on `store` (a connection of its
// own) until destroyed. A failed beat ends the thread quietly: the store is
// gone, which the launcher's own connection reports.
class NodeHeartbeat {
 public:
  NodeHeartbeat(std::unique_ptr<Store> store, std::string key, std::chrono::milliseconds interval);
  ~NodeHeartbeat();
  NodeHeartbeat(const NodeHeartbeat&) = delete;
  NodeHeartbeat& operator=(const NodeHeartbeat&) = delete;

 private:
  void run();

  std::unique_ptr<Store> store_;
  std::string key_;
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// The watching half: looks at the other nodes' counters at most once per
// interval and names the first that stood still too long.
class HeartbeatWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // keys[i]: node i's counter; `self` is not watched.
  HeartbeatWatch(std::vector<std::string> keys, int self, HeartbeatOptions options);
  // The node that is gone and for how long it has been silent, or nullopt.
  struct Silent {
    int node = -1;
    std::chrono::milliseconds silent_for{0};
  };
  std::optional<Silent> look(Store& store);
  // interval x misses, for the messages.
  std::chrono::milliseconds limit() const { return options_.interval * options_.misses; }

 private:
  std::vector<std::string> keys_;
  int self_;
  HeartbeatOptions options_;
  std::optional<Clock::time_point> last_look_;
  std::vector<int64_t> seen_;             // the counter last seen, 0: never beat
  std::vector<Clock::time_point> since_;  // when it last changed
};

}  // namespace collie::launcher
