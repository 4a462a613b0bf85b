// SerialExecutor's rules (runtime/process_group/serial_executor.h), one
// test case each: issue order, the inline path when idle, the waiting
// thread running the queue, nested calls, one caller at a time (and the
// kLocal exemption), failures, deadlines and shutdown. Every wait is
// bounded: a broken executor fails a test, it does not hang it.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/process_group/serial_executor.h"

using namespace collie;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

// Holds the op that waits at it until the test (or an abort) opens it.
class Gate {
 public:
  // Called by the op. False when `until` passed first.
  bool pass(std::chrono::steady_clock::time_point until) {
    std::unique_lock lock(mu_);
    entered_ = true;
    cv_.notify_all();
    return cv_.wait_until(lock, until, [&] { return open_; });
  }
  bool pass() { return pass(std::chrono::steady_clock::now() + 30s); }
  bool wait_entered() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 30s, [&] { return entered_; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool open_ = false;
};

// What ran, in order, on which thread; and whether two ops ever overlapped.
struct Log {
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  void add(int i) {
    if (running.fetch_add(1) != 0) overlapped = true;
    {
      std::lock_guard lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    }
    running.fetch_sub(1);
  }
};

SerialExecutor::OpFn logged(Log& log, int i) {
  return [&log, i](const Deadline&, CompletionWork&) { log.add(i); };
}

SerialExecutor::OpFn nothing() {
  return [](const Deadline&, CompletionWork&) {};
}

std::string error_of(const std::shared_ptr<Work>& work) {
  try {
    work->wait(30s);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Rule 3's rounds. An op holds the worker at a gate; `queue()` submits ops
// behind it and returns the Work to wait for; this thread waits for that
// Work while another thread opens the gate. The worker then stands by and
// the waiter runs the queued ops, but only when the opening lands inside
// the waiter's spin, which depends on the scheduler: rounds are tried (at
// least 50, for up to 20 s: a loaded machine may miss the spin dozens of
// times in a row) until `waiter_ran()` says this thread ran them. `check()`
// runs after every round. Returns how many rounds the waiter ran (1, or 0
// if none did).
template <typename Queue, typename WaiterRan>
int waiter_rounds(SerialExecutor& ex, Queue queue, WaiterRan waiter_ran) {
  int rounds = 0;
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  for (int round = 0; rounds == 0 && (round < 50 || std::chrono::steady_clock::now() < give_up);
       ++round) {
    Gate gate;
    auto held = ex.submit("held", {}, 30s, [&](const Deadline&, CompletionWork&) { gate.pass(); });
    REQUIRE(gate.wait_entered());
    const std::shared_ptr<Work> last = queue();
    std::atomic<bool> waiting{false};
    std::thread opener([&] {
      while (!waiting.load()) std::this_thread::yield();
      gate.open();
    });
    waiting.store(true);
    last->wait();
    opener.join();
    REQUIRE_NOTHROW(held->wait(30s));
    rounds += waiter_ran() ? 1 : 0;
  }
  return rounds;
}

}  // namespace

TEST_CASE("serial executor: ops run one at a time in submission order", "[executor]") {
  SerialExecutor ex("test executor");
  Log log;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 300; ++i) {
    if (i % 10 == 5) {  // blocking calls among them: inline when idle, else queued
      works.push_back(ex.run_or_submit(
          "blocking", [] { return std::string(); }, 30s,
          [&log, i](const Deadline&) { log.add(i); }));
    } else {
      works.push_back(ex.submit(
          "op", [i] { return str_cat("item ", i); }, 30s, logged(log, i)));
    }
  }
  for (auto& w : works) w->wait(30s);
  std::lock_guard lock(log.mu);
  REQUIRE(log.order.size() == 300);
  for (int i = 0; i < 300; ++i) CHECK(log.order[i] == i);
  CHECK_FALSE(log.overlapped);
  CHECK(ex.submitted() == 300);
  // A queued op's Work: "kind #seq (details)", numbered from 1.
  CHECK(static_cast<CompletionWork&>(*works[0]).description() == "op #1 (item 0)");
  CHECK(static_cast<CompletionWork&>(*works[299]).description() == "op #300 (item 299)");
}

TEST_CASE("serial executor: a blocking call on an idle executor runs inline", "[executor]") {
  SerialExecutor ex("test executor");
  int formatted = 0;
  std::thread::id ran_on;
  const uint64_t before = ex.inline_runs();
  auto w = ex.run_or_submit(
      "blocking",
      [&] {
        ++formatted;
        return std::string("details");
      },
      30s, [&](const Deadline&) { ran_on = std::this_thread::get_id(); });
  // Done on return, on this thread, with the one shared completed Work; the
  // details were never formatted.
  CHECK(w->is_completed());
  CHECK(w->is_success());
  CHECK(w.get() == completed_work().get());
  CHECK(ran_on == std::this_thread::get_id());
  CHECK(formatted == 0);
  CHECK(ex.inline_runs() == before + 1);
  CHECK(ex.worker_runs() == 0);

  // Busy (an op holds the worker): the call is queued instead, behind it.
  Gate gate;
  auto held = ex.submit("held", {}, 30s, [&](const Deadline&, CompletionWork&) { gate.pass(); });
  REQUIRE(gate.wait_entered());
  bool ran = false;
  auto queued = ex.run_or_submit(
      "blocking", [] { return std::string(); }, 30s, [&](const Deadline&) { ran = true; });
  CHECK_FALSE(queued->is_completed());
  CHECK(queued.get() != completed_work().get());
  gate.open();
  queued->wait(30s);
  CHECK(ran);
  CHECK(held->is_success());
}

TEST_CASE("serial executor: a thread that waits for a queued op runs the queue itself",
          "[executor]") {
  // 20 ops queue behind the held one; this thread waits for the last. Once
  // the waiter took over it ran every later one (the worker stood by); the
  // order is checked in every round.
  SerialExecutor ex("test executor");
  const auto me = std::this_thread::get_id();
  std::unique_ptr<Log> log;
  const int rounds = waiter_rounds(
      ex,
      [&] {
        log = std::make_unique<Log>();
        std::shared_ptr<CompletionWork> last;
        for (int i = 0; i < 20; ++i) last = ex.submit("op", {}, 30s, logged(*log, i));
        return last;
      },
      [&] {
        std::lock_guard lock(log->mu);
        REQUIRE(log->order.size() == 20);
        bool helped = false;
        for (int i = 0; i < 20; ++i) {
          CHECK(log->order[i] == i);
          const bool mine = log->threads[i] == me;
          if (helped) CHECK(mine);
          helped |= mine;
        }
        return helped;
      });
  CHECK(rounds == 1);
}

TEST_CASE("serial executor: a call made from inside a running op runs at once nested in it",
          "[executor]") {
  SerialExecutor ex("test executor", SerialExecutor::CallerPolicy::kOneAtATime);
  Log log;
  CHECK_FALSE(ex.running_here());
  // Run inline, on this thread (Catch's checks need it).
  auto outer = ex.run_or_submit(
      "outer", [] { return std::string(); }, 30s,
      [&](const Deadline&) {
        CHECK(ex.running_here());
        log.add(1);
        // Neither queues behind the op that waits for it.
        auto blocking = ex.run_or_submit(
            "inner", [] { return std::string(); }, 30s, [&](const Deadline&) { log.add(2); });
        CHECK(blocking->is_success());
        auto async = ex.submit("inner async", {}, 30s, logged(log, 3));
        CHECK(async->is_success());
        auto local = ex.run_or_submit<true>(
            "inner local", [] { return std::string(); }, 30s, [&](const Deadline&) { log.add(4); });
        CHECK(local->is_success());
        log.add(5);
      });
  CHECK_FALSE(ex.running_here());
  auto after = ex.submit("after", {}, 30s, logged(log, 6));
  after->wait(30s);
  CHECK(outer->is_success());
  {
    std::lock_guard lock(log.mu);
    CHECK(log.order == std::vector<int>{1, 2, 3, 4, 5, 6});
  }
  CHECK_FALSE(ex.broken());

  // A nested call that fails breaks the executor under its own name, even
  // though the op that made it goes on.
  auto failing = ex.run_or_submit(
      "outer", [] { return std::string(); }, 30s,
      [&](const Deadline&) {
        auto inner = ex.run_or_submit(
            "inner", [] { return std::string("float32 x 4"); }, 30s,
            [](const Deadline&) { throw NetworkError("rank 1 closed the connection"); });
        CHECK_THAT(error_of(inner), Contains("rank 1 closed the connection"));
        // Later nested calls of the same op are refused.
        auto refused = ex.submit("inner async", {}, 30s, logged(log, 7));
        CHECK_THAT(error_of(refused), Contains("is broken since inner #"));
      });
  CHECK(ex.broken());
  CHECK_THAT(error_of(ex.submit("later", {}, 30s, logged(log, 8))),
             Contains("is broken since inner #") && Contains("(float32 x 4) failed") &&
                 Contains("rank 1 closed the connection"));
  std::lock_guard lock(log.mu);
  CHECK(log.order.size() == 6);
}

TEST_CASE(
    "serial executor: a call meeting another thread's blocking call breaks it but kLocal calls "
    "do not",
    "[executor]") {
  Gate gate;
  std::atomic<bool> aborted{false};
  SerialExecutor ex("group \"t\"", SerialExecutor::CallerPolicy::kOneAtATime, [&] {
    aborted = true;
    gate.open();  // the running op fails promptly, as a communicator's abort makes it
  });
  std::shared_ptr<Work> blocking;
  std::thread a([&] {
    blocking = ex.run_or_submit(
        "all_reduce", [] { return std::string("float32 x 1"); }, 30s,
        [&](const Deadline&) { gate.pass(); });
  });
  REQUIRE(gate.wait_entered());
  // Waiting for this rank's posted point-to-point ops (kLocal) stays allowed.
  auto local = ex.run_or_submit<true>(
      "send/recv wait", [] { return std::string(); }, 30s, [](const Deadline&) {});
  auto local_async = ex.submit_local("send/recv poll", {}, 30s, nothing());
  CHECK_FALSE(aborted);
  CHECK_FALSE(ex.broken());
  // Another thread's collective while the blocking call runs: refused, both named.
  std::string message;
  try {
    ex.submit(
        "broadcast", [] { return std::string("int8 x 3"); }, 30s, nothing());
  } catch (const BackendError& e) {
    message = e.what();
  }
  a.join();
  CHECK_THAT(message, Contains("group \"t\": broadcast (int8 x 3) was called on thread") &&
                          Contains("while all_reduce #1 ran on thread") &&
                          Contains("a blocking call") && Contains("new_group"));
  CHECK(aborted);
  // The blocking call returned normally, yet fails: its data may be another call's.
  REQUIRE(blocking);
  CHECK_THAT(error_of(blocking), Contains("was called on thread"));
  CHECK(ex.broken());
  // Queued behind the blocking call, they complete (refused: the calls met).
  CHECK_THAT(error_of(local), Contains("refused"));
  CHECK_THAT(error_of(local_async), Contains("refused"));
  CHECK_THAT(error_of(ex.submit_local("later", {}, 30s, nothing())), Contains("refused"));
}

TEST_CASE(
    "serial executor: a blocking call queued behind async ops still refuses another thread's call",
    "[executor]") {
  Gate gate;
  std::atomic<bool> aborted{false};
  SerialExecutor ex("group \"t\"", SerialExecutor::CallerPolicy::kOneAtATime, [&] {
    aborted = true;
    gate.open();
  });
  // An async op holds the executor (on the worker); thread a's blocking
  // call queues behind it and a waits for it.
  auto async =
      ex.submit("all_gather", {}, 30s, [&](const Deadline&, CompletionWork&) { gate.pass(); });
  REQUIRE(gate.wait_entered());
  std::mutex mu;
  std::condition_variable cv;
  bool queued = false;
  std::shared_ptr<Work> blocking;
  std::thread a([&] {
    auto w = ex.run_or_submit(
        "all_reduce", [] { return std::string("float32 x 1"); }, 30s, [](const Deadline&) {});
    {
      std::lock_guard lock(mu);
      blocking = w;
      queued = true;
      cv.notify_all();
    }
    try {
      w->wait();
    } catch (const Error&) {
    }
  });
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 30s, [&] { return queued; }));
  }
  CHECK_FALSE(blocking->is_completed());
  // Another thread's call while a's blocking call waits: refused, both named.
  std::string message;
  try {
    ex.run_or_submit(
        "broadcast", [] { return std::string("int8 x 3"); }, 30s, [](const Deadline&) {});
  } catch (const BackendError& e) {
    message = e.what();
  }
  a.join();
  CHECK_THAT(message, Contains("group \"t\": broadcast (int8 x 3) was called on thread") &&
                          Contains("while all_reduce #2 ran on thread") &&
                          Contains("a blocking call"));
  CHECK(aborted);
  CHECK(ex.broken());
  CHECK_FALSE(error_of(blocking).empty());
  CHECK_FALSE(error_of(async).empty());
}

TEST_CASE("serial executor: the first failure breaks it but a refused argument does not",
          "[executor]") {
  SerialExecutor ex("test executor");
  Log log;
  // InvalidArgument fails that op alone.
  auto bad = ex.run_or_submit(
      "all_reduce", [] { return std::string("int32 x 4, avg"); }, 30s,
      [](const Deadline&) { throw InvalidArgument("avg of int32"); });
  CHECK_THROWS_AS(bad->wait(30s), InvalidArgument);
  CHECK_FALSE(ex.broken());
  ex.submit("op", {}, 30s, logged(log, 0))->wait(30s);

  // Anything else breaks it: what is queued behind and every later call fail.
  Gate gate;
  auto failing = ex.submit(
      "boom", [] { return std::string("float32 x 8"); }, 30s,
      [&](const Deadline&, CompletionWork&) {
        gate.pass();
        throw NetworkError("peer gone");
      });
  REQUIRE(gate.wait_entered());
  auto behind = ex.submit(
      "op", [] { return std::string("behind"); }, 30s, logged(log, 1));
  gate.open();
  CHECK_THROWS_AS(failing->wait(30s), NetworkError);
  CHECK_THAT(error_of(behind), Contains("op #4 (behind) refused") &&
                                   Contains("is broken since boom #3 (float32 x 8) failed") &&
                                   Contains("peer gone"));
  auto later = ex.run_or_submit(
      "op", [] { return std::string(); }, 30s, [&](const Deadline&) { log.add(2); });
  CHECK(later->is_completed());
  CHECK_THAT(error_of(later), Contains("peer gone"));
  CHECK(ex.broken());
  CHECK_THROWS_AS(std::rethrow_exception(ex.broken_error()), NetworkError);
  std::lock_guard lock(log.mu);
  CHECK(log.order == std::vector<int>{0});
}

TEST_CASE("serial executor: deadlines and shutdown - every Work completes and nothing hangs",
          "[executor]") {
  SerialExecutor ex("test executor");
  // An op runs under a deadline of its own timeout, started on first use.
  Gate never;
  auto timed = ex.submit("slow", {}, 100ms, [&](const Deadline& deadline, CompletionWork&) {
    if (!never.pass(deadline.when()))
      throw TimeoutError(str_cat("slow timed out ", deadline.describe()));
  });
  CHECK_THAT(error_of(timed), Contains("slow timed out after"));
  CHECK(ex.broken());  // a timeout breaks it like any failure

  // drain() runs what is queued; wait_idle_until sees it idle.
  SerialExecutor drained("drained executor");
  Log log;
  std::vector<std::shared_ptr<CompletionWork>> works;
  for (int i = 0; i < 50; ++i) works.push_back(drained.submit("op", {}, 30s, logged(log, i)));
  drained.drain();
  for (auto& w : works) CHECK(w->is_success());
  CHECK(drained.wait_idle_until(std::chrono::steady_clock::now() + 30s));

  // Shutdown with an op stuck past the grace period: aborted, the rest fail.
  SerialExecutor stuck("stuck executor");
  Gate gate;
  auto held = stuck.submit("held", {}, 30s, [&](const Deadline&, CompletionWork&) {
    if (!gate.pass()) throw TimeoutError("never opened");
    throw BackendError("aborted");
  });
  REQUIRE(gate.wait_entered());
  std::vector<std::shared_ptr<CompletionWork>> queued;
  for (int i = 0; i < 3; ++i) queued.push_back(stuck.submit("op", {}, 30s, logged(log, 100 + i)));
  CHECK_FALSE(stuck.wait_idle_until(std::chrono::steady_clock::now() + 10ms));
  bool abort_called = false;
  stuck.shutdown(50ms, [&] {
    abort_called = true;
    gate.open();
  });
  CHECK(abort_called);
  CHECK_THAT(error_of(held), Contains("aborted"));
  for (auto& w : queued) CHECK_THAT(error_of(w), Contains("was shut down with collectives"));
  CHECK_THAT(error_of(stuck.submit("later", {}, 30s, nothing())), Contains("refused"));
  stuck.drain();               // returns at once on a shut-down executor
  stuck.shutdown(0ms, [] {});  // idempotent
}

TEST_CASE("serial executor: a completion callback may wait for another Work of the executor",
          "[executor]") {
  // torch's futures run their callbacks on the thread that completes the
  // Work, and a callback may wait for another collective of the same group.
  // When that thread is a waiter running the queue (rule 3), the wait
  // enters the executor again from inside a completion: it runs the other
  // op there, it must not lock itself out. The rounds that take the
  // worker's path must work too.
  SerialExecutor ex("test executor");
  const auto me = std::this_thread::get_id();
  std::unique_ptr<Log> log;
  // Set at the callback's end (first->wait() may return before it runs on
  // another thread: completion wakes waiters first).
  std::unique_ptr<std::promise<std::pair<std::thread::id, bool>>> callback;
  const int rounds = waiter_rounds(
      ex,
      [&] {
        log = std::make_unique<Log>();
        callback = std::make_unique<std::promise<std::pair<std::thread::id, bool>>>();
        auto first = ex.submit("first", {}, 30s, logged(*log, 1));
        auto second = ex.submit("second", {}, 30s, logged(*log, 2));
        first->on_completed([&callback, second](std::exception_ptr) {
          second->wait();  // enters the executor again on this thread
          callback->set_value({std::this_thread::get_id(), second->is_success()});
        });
        return first;
      },
      [&] {
        auto done = callback->get_future();
        REQUIRE(done.wait_for(30s) == std::future_status::ready);
        const auto [thread, second_succeeded] = done.get();
        CHECK(second_succeeded);
        std::lock_guard lock(log->mu);
        CHECK(log->order == std::vector<int>{1, 2});
        return thread == me;
      });
  CHECK(rounds == 1);
}

TEST_CASE("serial executor: a completion callback that throws is logged and the rest go on",
          "[executor]") {
  // One Work: the throw does not skip the callback after it.
  CompletionWork work("work under test");
  bool later_ran = false;
  work.on_completed([](std::exception_ptr) { throw BackendError("callback failed"); });
  work.on_completed([&](std::exception_ptr) { later_ran = true; });
  work.mark_completed();
  CHECK(later_ran);
  CHECK_NOTHROW(work.wait(1s));

  // On the executor's worker, which a throw would unwind (and so end the
  // process): the worker goes on with the next op.
  SerialExecutor ex("test executor");
  Gate gate;
  auto held = ex.submit("held", {}, 30s, [&](const Deadline&, CompletionWork&) { gate.pass(); });
  REQUIRE(gate.wait_entered());
  auto throwing = ex.submit("throwing", {}, 30s, nothing());
  throwing->on_completed([](std::exception_ptr) { throw BackendError("callback failed"); });
  auto after = ex.submit("after", {}, 30s, nothing());
  gate.open();
  // Waits with a timeout of their own do not run the queue: the worker does.
  CHECK_NOTHROW(throwing->wait(30s));
  CHECK_NOTHROW(after->wait(30s));
  CHECK_FALSE(ex.broken());
  held->wait(30s);
}

TEST_CASE("serial executor: callbacks that wait for a later op without running the queue",
          "[executor]") {
  // Rule 8. A torch future's wait() does not run collie's queue: a callback
  // that issues an op and waits for it that way needs another thread to run
  // it. Here such waits are Work::wait with a timeout, which runs nothing.
  SerialExecutor ex("test executor");
  auto issue_and_wait = [&](const char* kind) {
    auto later = ex.submit(kind, {}, 30s, nothing());
    later->wait(20s);  // throws TimeoutError if nobody runs it
  };
  {
    // On the worker: nobody else waits for `first`, so the worker runs it
    // and its callback.
    Gate gate;
    auto held = ex.submit("held", {}, 30s, [&](const Deadline&, CompletionWork&) { gate.pass(); });
    REQUIRE(gate.wait_entered());
    auto first = ex.submit("first", {}, 30s, nothing());
    std::promise<std::pair<std::thread::id, std::string>> result;
    first->on_completed([&](std::exception_ptr) {
      std::string error;
      try {
        issue_and_wait("from the worker's callback");
      } catch (const std::exception& e) {
        error = e.what();
      }
      result.set_value({std::this_thread::get_id(), error});
    });
    gate.open();
    auto done = result.get_future();
    REQUIRE(done.wait_for(30s) == std::future_status::ready);
    const auto [thread, error] = done.get();
    CHECK(thread != std::this_thread::get_id());
    CHECK(error.empty());
    CHECK(held->is_success());
  }
  {
    // On a waiter running the queue (rule 3): it stops standing in for the
    // worker while the callback waits.
    const auto me = std::this_thread::get_id();
    std::unique_ptr<std::promise<std::pair<std::thread::id, std::string>>> result;
    const int rounds = waiter_rounds(
        ex,
        [&] {
          result = std::make_unique<std::promise<std::pair<std::thread::id, std::string>>>();
          auto first = ex.submit("first", {}, 30s, nothing());
          first->on_completed([&](std::exception_ptr) {
            std::string error;
            try {
              issue_and_wait("from a waiter's callback");
            } catch (const std::exception& e) {
              error = e.what();
            }
            result->set_value({std::this_thread::get_id(), error});
          });
          return first;
        },
        [&] {
          auto done = result->get_future();
          REQUIRE(done.wait_for(30s) == std::future_status::ready);
          const auto [thread, error] = done.get();
          CHECK(error.empty());
          return thread == me;
        });
    CHECK(rounds == 1);
  }
  CHECK_FALSE(ex.broken());
}
