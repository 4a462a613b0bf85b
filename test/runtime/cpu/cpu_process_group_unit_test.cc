// What CpuProcessGroup adds over a Communicator, tested against a fake
// communicator in one process: argument checks on the caller's thread, issue
// order, asynchronous Work, a failure breaking the group, shutdown. The real
// multi-process runs are in distributed_test.cc.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "collie/runtime/cpu/cpu_process_group.h"
#include "collie/test/runtime/cpu/fake_communicator.h"

using namespace collie;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using collie::test::FakeCommunicator;
using collie::test::FakeControl;

namespace {

std::shared_ptr<CpuProcessGroup> fake_group(
    const std::shared_ptr<FakeControl>& control, Timeout timeout = std::chrono::seconds(60),
    SerialExecutor::CallerPolicy callers = SerialExecutor::CallerPolicy::kOneAtATime) {
  return std::make_shared<CpuProcessGroup>(std::make_unique<FakeCommunicator>(control), nullptr,
                                           timeout, "7", callers);
}

}  // namespace

TEST_CASE("cpu group: bad arguments throw InvalidArgument on the caller's thread", "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  auto pg = fake_group(control);
  std::vector<float> f(8);
  std::vector<int32_t> i(8);

  TensorView gpu = view(f.data(), f.size());
  gpu.device = Device::cuda(0);
  CHECK_THROWS_AS(pg->all_reduce(gpu), InvalidArgument);
  CHECK_THROWS_WITH(pg->all_reduce(gpu), Contains("cuda:0") && Contains("cpu backend") &&
                                             Contains("rank 0") && Contains("group \"7\""));
  CHECK_THROWS_WITH(pg->all_reduce(view(i.data(), i.size()), {.op = ReduceOp::kAvg}),
                    Contains("avg") && Contains("int32"));
  CHECK_THROWS_WITH(pg->broadcast(view(f.data(), f.size()), {.root = 1}),
                    Contains("root 1 is out of range"));
  CHECK_THROWS_AS(pg->broadcast(view(f.data(), f.size()), {.root = -1}), InvalidArgument);
  CHECK_THROWS_WITH(pg->all_reduce(TensorView{nullptr, 4, DataType::kFloat32}),
                    Contains("null data pointer"));
  CHECK_THROWS_WITH(pg->all_reduce(view(f.data(), f.size()), {.timeout = Timeout(-5)}),
                    Contains("negative"));
  // all_gather: output must hold size() * input; reduce_scatter the reverse.
  CHECK_THROWS_WITH(pg->all_gather(view(f.data(), 3), view(f.data(), 2)),
                    Contains("expected output.count == 1 * input.count = 2"));
  CHECK_THROWS_WITH(pg->all_gather(view(f.data(), 2), view(i.data(), 2)), Contains("must match"));
  CHECK_THROWS_WITH(pg->reduce_scatter(view(f.data(), 2), view(f.data(), 3)),
                    Contains("input.count == 1 * output.count"));
  TensorView bad_dtype = view(f.data(), f.size());
  bad_dtype.dtype = static_cast<DataType>(42);
  CHECK_THROWS_WITH(pg->all_reduce(bad_dtype), Contains("unknown dtype"));
  TensorView bad_op = view(f.data(), f.size());
  CHECK_THROWS_WITH(pg->all_reduce(bad_op, {.op = static_cast<ReduceOp>(9)}),
                    Contains("unknown reduce op"));

  // None of that reached the communicator or broke the group.
  CHECK(control->calls.empty());
  CHECK_FALSE(pg->broken());
  pg->all_reduce(view(f.data(), f.size()))->wait();
  CHECK(control->calls.size() == 1);
}

TEST_CASE("cpu group: collectives run in issue order and Work completes asynchronously",
          "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  control->hold = true;
  auto pg = fake_group(control);
  std::vector<float> f(4);
  std::vector<std::shared_ptr<Work>> works;
  works.push_back(pg->all_reduce(view(f.data(), 4), {.op = ReduceOp::kMax}));
  works.push_back(pg->broadcast(view(f.data(), 4)));
  works.push_back(pg->barrier());
  works.push_back(pg->all_gather(view(f.data(), 4), view(f.data(), 4)));
  works.push_back(pg->reduce_scatter(view(f.data(), 4), view(f.data(), 4), {.op = ReduceOp::kMin}));

  // The first is running (held), the others are queued: none has completed.
  REQUIRE(control->wait_blocked(10s));
  for (auto& w : works) CHECK_FALSE(w->is_completed());
  // A wait with its own short timeout gives up without touching the op.
  CHECK_THROWS_AS(works[0]->wait(20ms), TimeoutError);
  CHECK_THROWS_WITH(works[0]->wait(20ms), Contains("all_reduce #1 (float32 x 4, max, auto)"));

  control->release();
  for (auto& w : works) {
    w->wait(30s);
    CHECK(w->is_success());
    CHECK(w->exception() == nullptr);
  }
  std::lock_guard lock(control->mu);
  CHECK(control->calls == std::vector<std::string>{"all_reduce max", "broadcast 0", "barrier",
                                                   "all_gather", "reduce_scatter min"});
}

// The queue under a group is safe for any thread; the group's default
// refuses overlapping calls from two threads (next cases), so these run with
// kAnyThread, as a caller that orders its calls itself would.
TEST_CASE("cpu group: collectives issued from many threads all complete", "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  auto pg = fake_group(control, std::chrono::seconds(60), SerialExecutor::CallerPolicy::kAnyThread);
  constexpr int kThreads = 4, kPerThread = 50;
  std::vector<std::thread> threads;
  std::vector<float> data(kThreads);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::shared_ptr<Work>> works;
      for (int k = 0; k < kPerThread; ++k) works.push_back(pg->all_reduce(view(&data[t], 1)));
      for (auto& w : works) w->wait(30s);
    });
  for (auto& t : threads) t.join();
  CHECK(control->calls.size() == kThreads * kPerThread);
}

TEST_CASE("cpu group: blocking and queued calls from many threads run one at a time", "[cpu_pg]") {
  // Blocking calls start on the caller's thread without a lock when the
  // queue is idle (SerialExecutor's state word); here they race with each other,
  // with queued calls, the worker and waiters that help (waits without a
  // timeout of their own).
  auto control = std::make_shared<FakeControl>();
  auto pg = fake_group(control, std::chrono::seconds(60), SerialExecutor::CallerPolicy::kAnyThread);
  constexpr int kThreads = 4, kPerThread = 400;
  std::vector<std::thread> threads;
  std::vector<float> data(kThreads);
  std::atomic<int> failed{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::shared_ptr<Work>> works;
      // A wait without its own timeout runs queued ops on this thread
      // (helping); one with a timeout leaves them to the worker.
      auto finish = [&](const std::shared_ptr<Work>& w, bool help) {
        try {
          if (help) {
            w->wait();
          } else {
            w->wait(30s);
          }
          if (!w->is_success()) ++failed;
        } catch (...) {
          ++failed;
        }
      };
      for (int k = 0; k < kPerThread; ++k) {
        // All blocking first (racing for the inline path), then mixed.
        const bool blocking = k < kPerThread / 2 || (k + t) % 3 != 0;
        works.push_back(pg->all_reduce(view(&data[t], 1), {.async_op = !blocking}));
        if (blocking && !works.back()->is_completed()) finish(works.back(), k % 2 == 0);
      }
      for (size_t k = 0; k < works.size(); ++k) finish(works[k], k % 2 == 1);
    });
  for (auto& t : threads) t.join();
  CHECK(failed == 0);
  std::lock_guard lock(control->mu);
  CHECK(control->calls.size() == kThreads * kPerThread);
  CHECK(control->max_running == 1);
  CHECK(control->running == 0);
}

TEST_CASE("cpu group: a call meeting another thread's blocking call breaks the group, naming both",
          "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  control->hold = true;
  auto pg = fake_group(control);
  float a = 1, b = 2;
  std::shared_ptr<Work> first;
  std::thread holder([&] { first = pg->broadcast(view(&a, 1), {.root = 0, .async_op = false}); });
  REQUIRE(control->wait_blocked(30s));
  std::string refused;
  try {
    pg->all_reduce(view(&b, 1), {.async_op = false});
  } catch (const BackendError& e) {
    refused = e.what();
  }
  holder.join();
  CHECK_THAT(refused, Contains("all_reduce (float32 x 1, sum, auto) was called on thread") &&
                          Contains("while broadcast #1 ran on thread") &&
                          Contains("process group \"7\""));
  // The blocking call it met fails too, with the same error, and so does
  // every later call: the ranks may have paired the two threads' calls.
  REQUIRE(first->is_completed());
  CHECK_FALSE(first->is_success());
  CHECK_THROWS_WITH(first->wait(), Contains("was called on thread"));
  CHECK(pg->broken());
  CHECK_THROWS_WITH(pg->barrier({.async_op = false})->wait(),
                    Contains("refused") && Contains("was called on thread"));
  std::lock_guard lock(control->mu);
  CHECK(control->calls == std::vector<std::string>{"broadcast 0"});
}

TEST_CASE("cpu group: one thread after another, and async calls between them, are fine",
          "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  auto pg = fake_group(control);
  float x = 1;
  for (int round = 0; round < 20; ++round) {
    std::thread t([&] {
      pg->all_reduce(view(&x, 1), {.async_op = false})->wait();
      pg->all_reduce(view(&x, 1))->wait();
    });
    t.join();
    pg->broadcast(view(&x, 1), {.root = 0, .async_op = false})->wait();
  }
  CHECK_FALSE(pg->broken());
  CHECK(control->calls.size() == 60);
}

TEST_CASE("cpu group: a failed collective breaks the group; queued and later calls fail at once",
          "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  control->hold = true;
  auto pg = fake_group(control);
  std::vector<float> f(4);
  control->fail_next = [] { throw NetworkError("rank 1 (127.0.0.1:4242) reset the connection"); };
  auto failing = pg->all_reduce(view(f.data(), 4));
  auto queued = pg->broadcast(view(f.data(), 4));

  CHECK_THROWS_AS(failing->wait(30s), NetworkError);  // the original error, type kept
  CHECK_THROWS_WITH(queued->wait(30s), Contains("broadcast #2") &&
                                           Contains("broken since all_reduce #1") &&
                                           Contains("127.0.0.1:4242"));
  CHECK_THROWS_AS(queued->wait(30s), BackendError);
  CHECK(pg->broken());
  CHECK_FALSE(queued->is_success());

  auto later = pg->barrier();
  CHECK(later->is_completed());  // refused without queueing
  CHECK_THROWS_AS(later->wait(), BackendError);
  CHECK_THROWS_WITH(later->wait(), Contains("barrier #3") && Contains("reset the connection"));
  std::lock_guard lock(control->mu);
  CHECK(control->calls.size() == 1);  // nothing ran after the failure
}

TEST_CASE("cpu group: a collective past its deadline fails with TimeoutError and breaks the group",
          "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  control->hold = true;
  auto pg = fake_group(control, std::chrono::seconds(60));
  std::vector<float> f(1);
  auto start = Clock::now();
  // The per-op timeout overrides the group's 60 s.
  auto w = pg->all_reduce(view(f.data(), 1), {.timeout = 100ms});
  CHECK_THROWS_AS(w->wait(), TimeoutError);
  CHECK(Clock::now() - start < 20s);
  CHECK(pg->broken());
}

TEST_CASE("cpu group: shutdown waits for issued work, aborts it after the grace period",
          "[cpu_pg]") {
  std::vector<float> f(1);
  SECTION("drains what is queued when it finishes in time") {
    auto control = std::make_shared<FakeControl>();
    auto pg = fake_group(control);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 20; ++k) works.push_back(pg->all_reduce(view(f.data(), 1)));
    pg->shutdown(30s);
    for (auto& w : works) CHECK(w->is_success());
    auto after = pg->all_reduce(view(f.data(), 1));
    CHECK_THROWS_WITH(after->wait(), Contains("shut down"));
  }
  SECTION("aborts a hung collective") {
    auto control = std::make_shared<FakeControl>();
    control->hold = true;
    auto pg = fake_group(control);
    auto hung = pg->all_reduce(view(f.data(), 1));
    auto queued = pg->barrier();
    REQUIRE(control->wait_blocked(10s));
    auto start = Clock::now();
    // Two threads shutting down at once (destroy_process_group racing a
    // destructor): both return, the worker is joined once.
    std::thread other([&] { pg->shutdown(100ms); });
    pg->shutdown(100ms);
    other.join();
    CHECK(Clock::now() - start < 10s);
    CHECK(control->aborted);
    CHECK_THROWS_AS(hung->wait(), NetworkError);
    CHECK_THROWS_AS(queued->wait(), BackendError);
    CHECK_THROWS_WITH(queued->wait(), Contains("barrier #2 (1 rank) refused") &&
                                          Contains("shut down with collectives still running"));
    pg->shutdown(100ms);  // idempotent
  }
}

TEST_CASE("cpu group: a blocking call (async_op false) runs on the caller's thread when idle",
          "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  auto pg = fake_group(control);
  std::vector<float> f(4);
  auto w = pg->all_reduce(view(f.data(), 4), {.async_op = false});
  CHECK(w->is_completed());  // done before the call returned
  // A success inline has nothing of its own to keep: the shared Work.
  CHECK(w == completed_work());
  CHECK(w->is_success());
  w->wait();
  pg->barrier({.async_op = false});
  // The ordinary path: the worker (a wait without its own timeout could
  // run it here, helping; the test below covers that).
  auto queued = pg->all_reduce(view(f.data(), 4));
  REQUIRE(control->wait_calls(3, 10s));
  queued->wait(30s);
  {
    std::lock_guard lock(control->mu);
    REQUIRE(control->threads.size() == 3);
    CHECK(control->threads[0] == std::this_thread::get_id());
    CHECK(control->threads[1] == std::this_thread::get_id());
    CHECK(control->threads[2] != std::this_thread::get_id());
  }

  // Behind queued work a blocking call queues too, keeping the issue order.
  control->hold = true;
  auto first = pg->broadcast(view(f.data(), 4));
  REQUIRE(control->wait_blocked(10s));
  auto second = pg->all_reduce(view(f.data(), 4), {.op = ReduceOp::kMin, .async_op = false});
  CHECK_FALSE(second->is_completed());
  control->release();
  second->wait(30s);
  CHECK(first->is_success());
  std::lock_guard lock(control->mu);
  CHECK(control->calls.back() == "all_reduce min");
  CHECK(control->threads.back() != std::this_thread::get_id());
}

TEST_CASE("cpu group: a blocking call refused by the backend (InvalidArgument) keeps the group",
          "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  auto pg = fake_group(control);
  std::vector<float> f(4);
  control->fail_next = [] { throw InvalidArgument("all_reduce: the algorithm is not available"); };
  auto w = pg->all_reduce(view(f.data(), 4), {.async_op = false});
  CHECK(w->is_completed());
  CHECK_FALSE(w->is_success());
  CHECK(w != completed_work());
  CHECK_THROWS_WITH(w->wait(), Contains("not available"));
  CHECK_FALSE(pg->broken());
  auto next = pg->all_reduce(view(f.data(), 4), {.async_op = false});
  CHECK(next->is_success());
  pg->shutdown(30s);
}

TEST_CASE("cpu group: a blocking call that fails breaks the group like a queued one", "[cpu_pg]") {
  auto control = std::make_shared<FakeControl>();
  auto pg = fake_group(control);
  std::vector<float> f(4);
  control->fail_next = [] { throw NetworkError("rank 1 (127.0.0.1:9) closed the connection"); };
  auto w = pg->all_reduce(view(f.data(), 4), {.async_op = false});
  CHECK(w->is_completed());
  CHECK_THROWS_AS(w->wait(), NetworkError);
  CHECK(pg->broken());
  CHECK_THROWS_WITH(pg->barrier({.async_op = false})->wait(),
                    Contains("broken since all_reduce #1"));
  // Shutdown with nothing running returns at once.
  pg->shutdown(30s);
}

TEST_CASE("cpu group: a thread waiting for queued collectives runs them itself, in order",
          "[cpu_pg]") {
  // The first collective holds the worker; 20 more queue behind it; the
  // caller waits for the last while another thread releases the first. The
  // worker then stands by and the waiting thread runs the queued ones (no
  // hand-off per collective). Whether the release lands inside the waiter's
  // spin depends on the scheduler, so this tries rounds (at least 50, for up
  // to 20 s) and needs the waiter to have run collectives in at least one;
  // order, completion and the thread of every call are checked in every
  // round.
  auto control = std::make_shared<FakeControl>();
  auto pg = fake_group(control);
  std::vector<float> f(4);
  const auto me = std::this_thread::get_id();
  int rounds_helped = 0;
  // Rounds take milliseconds; a loaded machine (other jobs on 2 cores) may
  // miss the spin in dozens of rounds in a row, so the bound is time.
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  for (int round = 0;
       rounds_helped == 0 && (round < 50 || std::chrono::steady_clock::now() < give_up); ++round) {
    size_t first_call;
    {
      std::lock_guard lock(control->mu);
      control->hold = true;
      first_call = control->calls.size();
    }
    auto first = pg->barrier();
    REQUIRE(control->wait_blocked(10s));
    std::vector<std::shared_ptr<Work>> works;
    const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
    for (int i = 0; i < 20; ++i)
      works.push_back(pg->all_reduce(view(f.data(), 4), {.op = ops[i % 3]}));
    std::atomic<bool> waiting{false};
    std::thread releaser([&] {
      while (!waiting.load()) std::this_thread::yield();
      control->release();
    });
    waiting.store(true);
    works.back()->wait();
    releaser.join();
    first->wait(30s);
    for (auto& w : works) CHECK(w->is_success());
    std::lock_guard lock(control->mu);
    REQUIRE(control->calls.size() == first_call + 21);
    CHECK(control->calls[first_call] == "barrier");
    CHECK(control->threads[first_call] != me);  // the worker's
    bool helped = false;
    for (int i = 0; i < 20; ++i) {
      CHECK(control->calls[first_call + 1 + i] == str_cat("all_reduce ", ops[i % 3]));
      // Once the waiter took over it ran every later one: the worker stood by.
      const bool mine = control->threads[first_call + 1 + i] == me;
      if (helped) CHECK(mine);
      helped |= mine;
    }
    rounds_helped += helped;
  }
  CHECK(rounds_helped == 1);
}

TEST_CASE("cpu group: a waiter that stops helping leaves the rest to the worker", "[cpu_pg]") {
  // Works waited for out of order: the waiter helps up to the one it waits
  // for, and the worker completes what is left without anyone waiting.
  auto control = std::make_shared<FakeControl>();
  auto pg = fake_group(control);
  std::vector<float> f(4);
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 200; ++i) works.push_back(pg->all_reduce(view(f.data(), 4)));
  works[10]->wait();
  // No wait on the others: they complete anyway (bounded by the test's
  // limit, not by a sleep).
  REQUIRE(control->wait_calls(200, 30s));
  for (auto& w : works) {
    w->wait(30s);
    CHECK(w->is_success());
  }
  // Shutdown while a waiter helps: nothing hangs, every Work completes.
  control->hold = true;
  auto held = pg->barrier();
  REQUIRE(control->wait_blocked(10s));
  std::vector<std::shared_ptr<Work>> more;
  for (int i = 0; i < 5; ++i) more.push_back(pg->all_reduce(view(f.data(), 4)));
  std::thread waiter([&] { more.back()->wait(); });
  control->release();
  pg->shutdown(30s);
  waiter.join();
  for (auto& w : more) CHECK(w->is_completed());
}
