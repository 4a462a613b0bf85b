// FakeCommunicator: a Communicator of one rank, for testing what the process
// group layer adds on top (queueing, ordering, Work, broken groups, shutdown)
// without sockets. It records every call, and a test can make a call block
// until released (or aborted) or fail with a chosen error.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/communicator.h"

namespace collie::test {

// Shared with the test, which keeps it after the group owns the communicator.
struct FakeControl {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> calls;        // "all_reduce", "broadcast 0", ... in run order
  std::vector<std::thread::id> threads;  // the thread each call ran on
  bool hold = false;                     // calls block while true (until released or aborted)
  int blocked = 0;                       // calls blocked right now
  bool aborted = false;
  int running = 0;      // calls inside run() right now
  int max_running = 0;  // the most at once: a process group runs one at a time
  // Thrown by the next call when set (then cleared).
  std::function<void()> fail_next;

  void release() {
    std::lock_guard lock(mu);
    hold = false;
    cv.notify_all();
  }
  // Waits until `n` calls have been recorded.
  bool wait_calls(size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return calls.size() >= n; });
  }
  bool wait_blocked(std::chrono::milliseconds limit) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return blocked > 0; });
  }
};

class FakeCommunicator : public Communicator {
 public:
  explicit FakeCommunicator(std::shared_ptr<FakeControl> control) : control_(std::move(control)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string address() const override { return ""; }
  std::vector<std::string> channel_kinds(const Deadline&, bool) override { return {}; }

  void all_reduce(TensorView in, TensorView out, ReduceOp op, const Deadline& deadline,
                  AllReduceAlgorithm) override {
    run(str_cat("all_reduce ", op), deadline);
  }
  void broadcast(TensorView, int root, const Deadline& deadline) override {
    run(str_cat("broadcast ", root), deadline);
  }
  void barrier(const Deadline& deadline) override { run("barrier", deadline); }
  void all_gather(TensorView in, TensorView out, const Deadline& deadline) override {
    run("all_gather", deadline);
  }
  void reduce_scatter(TensorView, TensorView, ReduceOp op, const Deadline& deadline) override {
    run(str_cat("reduce_scatter ", op), deadline);
  }
  void all_gather(TensorView, std::span<const TensorView>, const Deadline& deadline) override {
    run("all_gather list", deadline);
  }
  void reduce_scatter(std::span<const TensorView>, TensorView, ReduceOp op,
                      const Deadline& deadline) override {
    run(str_cat("reduce_scatter list ", op), deadline);
  }
  void reduce(TensorView, TensorView, ReduceOp op, int root, const Deadline& deadline) override {
    run(str_cat("reduce ", op, " ", root), deadline);
  }
  void gather(TensorView, std::span<const TensorView>, int root,
              const Deadline& deadline) override {
    run(str_cat("gather ", root), deadline);
  }
  void scatter(std::span<const TensorView>, TensorView, int root,
               const Deadline& deadline) override {
    run(str_cat("scatter ", root), deadline);
  }
  void all_to_all(std::span<const TensorView>, std::span<const TensorView>,
                  const Deadline& deadline) override {
    run("all_to_all", deadline);
  }
  std::vector<int> send_recv(std::span<const P2POp> ops, const Deadline& deadline) override {
    run(str_cat("send_recv ", ops.size()), deadline);
    return std::vector<int>(ops.size(), -1);
  }
  std::vector<int> failed_ranks(Clock::time_point) override { return {}; }
  std::vector<int> find_dead(const std::vector<int>&, Clock::time_point) override { return {}; }
  bool broken() const override {
    std::lock_guard lock(control_->mu);
    return control_->aborted;
  }
  void abort() override {
    std::lock_guard lock(control_->mu);
    control_->aborted = true;
    control_->cv.notify_all();
  }

 private:
  void run(const std::string& what, const Deadline& deadline) {
    std::unique_lock lock(control_->mu);
    ++control_->running;
    control_->max_running = std::max(control_->max_running, control_->running);
    struct Leave {
      FakeControl& c;
      std::unique_lock<std::mutex>& lock;
      ~Leave() {
        if (!lock.owns_lock()) lock.lock();
        --c.running;
      }
    } leave{*control_, lock};
    // Outside the lock for a moment, as a real collective is: a second call
    // let in meanwhile would be counted above.
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
    if (control_->aborted) throw BackendError("fake communicator: aborted");
    control_->calls.push_back(what);
    control_->threads.push_back(std::this_thread::get_id());
    control_->cv.notify_all();
    if (control_->fail_next) {
      auto fail = std::move(control_->fail_next);
      control_->fail_next = nullptr;
      fail();
    }
    ++control_->blocked;
    control_->cv.notify_all();
    bool done = control_->cv.wait_until(lock, deadline.when(),
                                        [&] { return !control_->hold || control_->aborted; });
    --control_->blocked;
    if (control_->aborted) throw NetworkError(str_cat("fake communicator: ", what, " aborted"));
    if (!done)
      throw TimeoutError(str_cat("fake communicator: ", what, " timed out ", deadline.describe()));
  }

  std::shared_ptr<FakeControl> control_;
};

}  // namespace collie::test
