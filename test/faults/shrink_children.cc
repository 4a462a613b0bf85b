// The ranks of the shrink tests. Each joins the default group through the
// public API, runs all_reduce in a loop until a fault breaks the group, then
// does what a training script that survives does: shrink_group, check that
// the old group is revoked, and run the next all_reduce on the new group,
// printing when it completed so that the parent can time the recovery.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/launch_env.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/pid_files.h"

using namespace collie;
using namespace std::chrono_literals;

namespace {

InitOptions init_options(const std::string& how, int rank, int world) {
  InitOptions options{.backend = "cpu", .timeout = std::chrono::seconds(60)};
  if (how.rfind("file:", 0) == 0) {
    options.rank = rank;
    options.world_size = world;
    options.init_method = "file://" + how.substr(5);
  }
  return options;  // "env": the agent store in the environment
}

size_t count_entries(const char* dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

size_t count_lines(const char* path) {
  size_t n = 0;
  if (FILE* f = std::fopen(path, "r")) {
    for (int c; (c = std::fgetc(f)) != EOF;)
      if (c == '\n') ++n;
    std::fclose(f);
  }
  return n;
}

}  // namespace

// args: how ("file:<path>" | "env"), rank, world, per-call timeout in ms (0:
// the group's), shrink timeout in ms. Exits 0 after a good recovery, 4 when
// shrink refused this rank (printing "shrink_error ..."), 3 on anything else.
COLLIE_TEST_CHILD(shrink_rank) {
  const int rank = std::stoi(args.at(1)), world = std::stoi(args.at(2));
  init_process_group(init_options(args.at(0), rank, world));
  const Timeout call_timeout =
      std::stoi(args.at(3)) > 0 ? Timeout(std::stoi(args.at(3))) : kUnsetTimeout;
  const Timeout shrink_timeout(std::stoi(args.at(4)));
  const int old_rank = get_rank();
  try {
    for (int64_t k = 0;; ++k) {
      test::checked_all_reduce(k, k % 2 ? 1 << 18 : 5, call_timeout);
      if (k == 3) {
        std::printf("looping rank %d\n", old_rank);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    test::print_caught(e);
  }
  auto old_group = get_default_group();
  std::vector<int> excluded;
  try {
    shrink_group({}, {}, {.timeout = shrink_timeout}, &excluded);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    std::printf("shrink_error type=%s msg=%s\n",
                dynamic_cast<const BackendError*>(&e) ? "BackendError" : "other", msg.c_str());
    std::fflush(stdout);
    return 4;
  }
  const int64_t shrunk_ns = test::monotonic_ns();
  // The old group is revoked: a call on it fails at once.
  const auto start = Clock::now();
  try {
    old_group->barrier({.timeout = 30s})->wait();
    std::printf("old group barrier succeeded\n");
  } catch (const BackendError& e) {
    std::printf(
        "old_group_ms=%lld\n",
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
  }
  old_group.reset();
  // The next step, on the new group: small (the leader path across hosts)
  // and large (the sliced one), every result checked.
  test::checked_all_reduce(1000, 5, call_timeout);
  const int64_t next_ns = test::monotonic_ns();
  test::checked_all_reduce(1001, 1 << 18, call_timeout);
  std::printf(
      "recovered old_rank=%d new_rank=%d new_size=%d excluded=%s shrunk_ns=%lld "
      "next_ns=%lld\n",
      old_rank, get_rank(), get_world_size(), join(excluded, ",").c_str(),
      static_cast<long long>(shrunk_ns), static_cast<long long>(next_ns));
  std::fflush(stdout);
  barrier();
  destroy_process_group();
  return 0;
}

// args: "file:<path>", rank, world, shrinks. Shrinks a healthy group again
// and again (no rank excluded), with an all_reduce on every generation, and
// prints this process's open descriptors, threads and memory mappings after
// the fifth generation and after the last: a shrink that leaked sockets,
// shared memory or its worker thread shows as a difference.
COLLIE_TEST_CHILD(shrink_repeat) {
  const int rank = std::stoi(args.at(1)), world = std::stoi(args.at(2));
  const int shrinks = std::stoi(args.at(3));
  init_process_group(init_options(args.at(0), rank, world));
  size_t fds = 0, threads = 0, maps = 0;
  for (int i = 1; i <= shrinks; ++i) {
    test::checked_all_reduce(i, i % 2 ? 1 << 16 : 3, 30s);
    shrink_group({}, {}, {.timeout = 30s});
    COLLIE_CHECK(get_world_size() == world, "generation ", i, " has ", get_world_size(), " ranks");
    test::checked_all_reduce(i, 1 << 16, 30s);
    if (i == 5) {
      fds = count_entries("/proc/self/fd");
      threads = count_entries("/proc/self/task");
      maps = count_lines("/proc/self/maps");
    }
  }
  std::printf("warm fds=%zu threads=%zu maps=%zu\n", fds, threads, maps);
  std::printf("last fds=%zu threads=%zu maps=%zu\n", count_entries("/proc/self/fd"),
              count_entries("/proc/self/task"), count_lines("/proc/self/maps"));
  std::fflush(stdout);
  destroy_process_group();
  return 0;
}

// args: "file:<path>" | "env", rank, world, role ("member" | "join"; under
// collie-run --on-failure=replace, COLLIE_REPLACEMENT=1 makes a joiner of a
// "member"), and optionally a folder for pid files. The members
// train a toy model (a vector every step's all_reduce moves), admit
// joiners at every step boundary and shrink when a rank dies; the first
// growth sets the step they all stop at, 20 steps on. A joiner gets the
// model and the step from rank 0 by broadcast, then trains with them. Each
// prints the model's checksum at the end ("final ..."), and a joiner the
// time of its first completed step ("first_step_ns=").
COLLIE_TEST_CHILD(grow_rank) {
  const int rank = std::stoi(args.at(1)), world = std::stoi(args.at(2));
  const bool joiner = args.at(3) == "join" || process_env("COLLIE_REPLACEMENT").value_or("") == "1";
  InitOptions options = init_options(args.at(0), rank, world);
  options.join = joiner;
  init_process_group(options);
  // Under collie-run: a pid file per rank (the first generation's), so
  // that the test can kill one.
  if (args.size() > 4 && process_env("COLLIE_REPLACEMENT").value_or("") != "1")
    test::write_pid_file(args.at(4), get_rank());
  std::vector<double> model(1024, 0.0);
  // state[0]: the step; state[1]: the step to stop at (0: not yet set).
  std::vector<double> state(2, 0.0);
  auto hand_over = [&] {
    get_default_group()->broadcast(view(model.data(), model.size()), {.root = 0})->wait();
    get_default_group()->broadcast(view(state.data(), state.size()), {.root = 0})->wait();
  };
  if (joiner) hand_over();
  bool first = joiner;
  const Deadline deadline(std::chrono::seconds(120));
  while (state[1] == 0 || state[0] < state[1]) {
    COLLIE_CHECK(!deadline.expired(), "rank ", get_rank(), " still at step ", state[0]);
    try {
      std::vector<double> grad(model.size(), 1.0 + get_rank());
      get_default_group()->all_reduce(view(grad.data(), grad.size()))->wait();
      const double n = get_world_size();
      for (size_t i = 0; i < model.size(); ++i) model[i] += grad[i] / n + 1e-3 * i;
      state[0] += 1;
      if (first) {
        std::printf("first_step_ns=%lld\n", static_cast<long long>(test::monotonic_ns()));
        std::fflush(stdout);
        first = false;
      }
      if (state[0] == 4 && !joiner) {
        std::printf("looping rank %d\n", get_rank());
        std::fflush(stdout);
      }
      if (admit_joiners(std::chrono::seconds(30)) > 0) {
        if (state[1] == 0) state[1] = state[0] + 20;
        std::printf("admitted world=%d\n", get_world_size());
        std::fflush(stdout);
        hand_over();
      }
    } catch (const BackendError&) {
      shrink_group({}, {}, {.timeout = std::chrono::seconds(30)});
      // The step in flight may have completed on some ranks only: the
      // lowest rank's model and step are everyone's (a real trainer picks
      // the most advanced rank; see nn's recovery).
      hand_over();
    } catch (const NetworkError&) {
      shrink_group({}, {}, {.timeout = std::chrono::seconds(30)});
      hand_over();
    }
  }
  double sum = 0;
  for (double v : model) sum += v;
  std::vector<double> sums(get_world_size());
  get_default_group()->all_gather(view(sums.data(), sums.size()), view(&sum, 1))->wait();
  bool same = true;
  for (double s : sums) same &= s == sums[0];
  std::printf("final rank=%d world=%d step=%.0f same=%d\n", get_rank(), get_world_size(), state[0],
              same ? 1 : 0);
  std::fflush(stdout);
  destroy_process_group();
  return same ? 0 : 5;
}

// args: "file:<path>", rank, world. Rank 2 joins and then never calls
// anything (a hung rank); ranks 0 and 1 each leave an all_reduce pending on
// it and shrink it away with ShrinkMode::kAbort (torch's SHRINK_ABORT): the
// abort closes their connections to each other too, which must not make
// either take the other for dead.
COLLIE_TEST_CHILD(abort_shrink_rank) {
  const int rank = std::stoi(args.at(1)), world = std::stoi(args.at(2));
  init_process_group(init_options(args.at(0), rank, world));
  test::checked_all_reduce(0, 1 << 16, 30s);
  std::printf("ready rank %d\n", rank);
  std::fflush(stdout);
  if (rank == 2)
    for (;;) ::pause();
  std::vector<float> pending(1 << 16, 1.0f);
  auto work = get_default_group()->all_reduce(view(pending.data(), pending.size()));
  std::vector<int> excluded;
  bool pending_failed = false;
  auto wait_pending = [&] {
    try {
      work->wait();
    } catch (const Error&) {
      pending_failed = true;
    }
  };
  // Rank 1 shrinks only once its pending call failed, which rank 0's
  // abort makes happen: rank 1 has then seen rank 0's connections close.
  if (rank == 1) wait_pending();
  shrink_group({2}, {}, {.mode = ShrinkMode::kAbort, .timeout = 30s}, &excluded);
  if (rank == 0) wait_pending();
  test::checked_all_reduce(1, 1 << 16, 30s);
  std::printf("aborted rank=%d new_size=%d excluded=%s pending_failed=%d\n", get_rank(),
              get_world_size(), join(excluded, ",").c_str(), pending_failed ? 1 : 0);
  std::fflush(stdout);
  destroy_process_group();
  return 0;
}
