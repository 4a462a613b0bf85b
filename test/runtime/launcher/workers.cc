// The worker programs the launcher tests start: this test executable run as
// `test_launcher --collie-child NAME ARGS...` (test/support/child.h).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/child.h"

using namespace collie;
using namespace collie::test;

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) throw Error(str_cat("worker: ", name, " is not set"));
  return std::stoi(v);
}

void raw_write(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

[[noreturn]] void wait_forever() {
  for (;;) ::pause();
}

}  // namespace

// Prints every launcher variable as NAME=value (or NAME=<unset>).
COLLIE_TEST_CHILD(env_dump) {
  for (const char* k :
       {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS"})
    std::printf("%s=%s\n", k, env_or(k, "<unset>").c_str());
  return 0;
}

// args: lines payload_bytes. Writes each stdout line in three write() calls
// (so the pipe delivers pieces), a stderr line per stdout line, and a last
// stdout line without a newline.
COLLIE_TEST_CHILD(chatter) {
  int rank = env_int("RANK");
  int lines = std::stoi(args.at(0));
  size_t payload = std::stoul(args.at(1));
  std::string fill(payload, static_cast<char>('a' + rank % 26));
  for (int i = 0; i < lines; ++i) {
    std::string line = str_cat("rank ", rank, " line ", i, " ", fill, " end\n");
    size_t third = line.size() / 3;
    raw_write(1, line.substr(0, third));
    raw_write(1, line.substr(third, third));
    raw_write(1, line.substr(2 * third));
    raw_write(2, str_cat("err ", rank, " line ", i, "\n"));
  }
  raw_write(1, str_cat("partial last line of rank ", rank));
  return 0;
}

// Prints its arguments (legacy --local_rank mode) and LOCAL_RANK.
COLLIE_TEST_CHILD(argv_dump) {
  std::printf("args=%s\n", join(args, " ").c_str());
  std::printf("LOCAL_RANK=%s\n", env_or("LOCAL_RANK", "<unset>").c_str());
  return 0;
}

// args: pid_dir fail_rank mode others [fail_on_attempt]
//   mode:   exit3 | sigkill | none     (what fail_rank does)
//   others: wait | ignore_term          (what everyone else does)
// Every worker first writes its pid and waits for all the others' pids, so
// that the failure happens with the whole group running.
COLLIE_TEST_CHILD(fail) {
  const std::string dir = args.at(0);
  const int fail_rank = std::stoi(args.at(1));
  const std::string mode = args.at(2), others = args.at(3);
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  if (others == "ignore_term" && rank != fail_rank) ::signal(SIGTERM, SIG_IGN);
  write_pid_file(dir, rank);
  wait_for_pid_files(dir, world);
  std::printf("rank %d running\n", rank);
  std::fflush(stdout);
  if (rank == fail_rank && mode == "exit3") {
    std::fprintf(stderr, "rank %d: loss is NaN at step 7 (a deliberate test failure)\n", rank);
    return 3;
  }
  if (rank == fail_rank && mode == "sigkill") ::raise(SIGKILL);
  wait_forever();
}

// Fails (exit 5) as rank fail_rank on attempt 0 only; prints its attempt.
COLLIE_TEST_CHILD(flaky) {
  int rank = env_int("RANK"), attempt = env_int("TORCHELASTIC_RESTART_COUNT");
  int fail_rank = std::stoi(args.at(0));
  bool always = args.size() > 1 && args[1] == "always";
  std::printf("restart_count=%d\n", attempt);
  std::fflush(stdout);
  if (rank == fail_rank && (attempt == 0 || always)) {
    std::fprintf(stderr, "rank %d failing on attempt %d\n", rank, attempt);
    return 5;
  }
  return 0;
}

// args: pid_dir call_timeout_ms. init_process_group through the agent store,
// then all_reduce in a loop, each call under the timeout; prints "looping"
// once under way and the error, whole, on stderr when a call fails.
COLLIE_TEST_CHILD(allreduce_loop) {
  init_process_group({.backend = "cpu", .timeout = std::chrono::seconds(60)});
  const int rank = get_rank();
  write_pid_file(args.at(0), rank);
  const Timeout call_timeout(std::stoi(args.at(1)));
  try {
    for (int k = 0;; ++k) {
      std::vector<float> v(1 << 16, static_cast<float>(rank + 1));
      get_default_group()->all_reduce(view(v.data(), v.size()), {.timeout = call_timeout})->wait();
      if (k == 3) {
        std::printf("looping rank %d\n", rank);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d failed: %s\n", rank, e.what());
    return 1;
  }
}

// args: exit_world [fail_rank [always]]. Prints where it runs; exits 0 once
// the world has exit_world ranks, else waits to be stopped. fail_rank exits
// 3 on round 0 (or on every round with "always").
COLLIE_TEST_CHILD(elastic_child) {
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  const int round = env_int("TORCHELASTIC_RESTART_COUNT");
  std::printf("elastic rank %d of %d node %d/%d restart %d\n", rank, world, env_int("GROUP_RANK"),
              env_int("GROUP_WORLD_SIZE"), round);
  std::fflush(stdout);
  const int fail_rank = args.size() > 1 ? std::stoi(args[1]) : -1;
  const bool always = args.size() > 2 && args[2] == "always";
  if (rank == fail_rank && (round == 0 || always)) {
    std::fprintf(stderr, "rank %d failing on round %d\n", rank, round);
    return 3;
  }
  if (world == std::stoi(args.at(0))) return 0;
  wait_forever();
}
