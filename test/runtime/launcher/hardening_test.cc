// collie-run under careless and hostile use: a worker count the host cannot
// run, what the workers start outliving a SIGKILLed launcher, a full disk
// under --log-dir, and a failure summary that must name the rank the
// workers' errors name. Each case reproduces what used to go wrong.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/failure_summary.h"
#include "collie/runtime/launcher/host_limits.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/child.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/temp_dir.h"
#include "collie/test/support/tmpfs.h"

using namespace collie;
using namespace collie::test;
using namespace collie::launcher;
using Catch::Matchers::Contains;

namespace {

// collie-run with resource limits set by prlimit(1) (util-linux).
std::vector<std::string> with_prlimit(const std::vector<std::string>& limits,
                                      const std::vector<std::string>& argv) {
  std::vector<std::string> out{"/usr/bin/prlimit"};
  out.insert(out.end(), limits.begin(), limits.end());
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

void require_prlimit() {
  require_or_skip(::access("/usr/bin/prlimit", X_OK) == 0,
                  "/usr/bin/prlimit (util-linux) is not installed");
}

std::string after(const std::string& text, const std::string& marker) {
  const size_t at = text.find(marker);
  return at == std::string::npos ? std::string() : text.substr(at);
}

}  // namespace

TEST_CASE(
    "a worker count beyond the host's fd and task limits is refused, "
    "naming them",
    "[launcher][limits]") {
  HostLimits h{.fd_limit = 1024,
               .fds_open = 10,
               .nproc_limit = std::nullopt,
               .pid_max = 32768,
               .threads_max = 100000,
               .tasks_now = 500};
  CHECK_NOTHROW(check_worker_count(200, h, false));  // (1024 - 10 - 64) / 4 = 237
  CHECK_THROWS_WITH(check_worker_count(238, h, false),
                    Contains("--nproc-per-node 238 is more workers than this host can run: at "
                             "most 237") &&
                        Contains("RLIMIT_NOFILE 1024 descriptors") && Contains("ulimit -n"));
  // Log files take two descriptors more per worker.
  CHECK_THROWS_WITH(check_worker_count(200, h, true), Contains("at most 158"));
  h.fd_limit = 1 << 20;
  // Only the limits that bind are named.
  CHECK_THROWS_WITH(check_worker_count(40000, h, false), Contains("at most 32252") &&
                                                             Contains("kernel.pid_max 32768") &&
                                                             !Contains("RLIMIT_NOFILE"));
  CHECK_THROWS_WITH(check_worker_count(100000000, h, false),
                    Contains("kernel.pid_max 32768") && Contains("RLIMIT_NOFILE"));
  h.nproc_limit = 100;
  CHECK_THROWS_WITH(check_worker_count(150, h, false),
                    Contains("at most 99") && Contains("RLIMIT_NPROC 100 processes (ulimit -u)"));
  h.nproc_limit.reset();
  h.cgroup_pids_left = 11;
  CHECK_THROWS_WITH(check_worker_count(11, h, false),
                    Contains("at most 10") && Contains("pids cgroup"));
  // The real host runs at least a few.
  raise_fd_limit();
  CHECK_NOTHROW(check_worker_count(2, read_host_limits(), true));
}

TEST_CASE(
    "collie-run refuses --nproc-per-node 100000000 at once instead of "
    "eating memory",
    "[launcher][limits]") {
  require_prlimit();
  // Before: 24 GB of bookkeeping until the OOM killer (with a memory limit,
  // "std::bad_alloc"). The address-space limit keeps a regression from
  // taking the machine down with it.
  auto huge = Subprocess::spawn(
      with_prlimit({"--as=4294967296"},
                   launcher_argv({"--standalone", "--nproc-per-node", "100000000"}, "env_dump")),
      {.env = clean_launch_env(), .new_process_group = true});
  auto st = huge.wait(std::chrono::seconds(30));
  INFO(huge.err());
  CHECK(st.exit_code == 2);
  CHECK_THAT(huge.err(), Contains("--nproc-per-node 100000000 is more workers "
                                  "than this host can run: at most"));
  CHECK_THAT(huge.err(), !Contains("bad_alloc"));

  // With 100 descriptors, 40 workers do not fit and the message says why;
  // 2 still run.
  auto forty = Subprocess::spawn(
      with_prlimit({"--nofile=100"},
                   launcher_argv({"--standalone", "--nproc-per-node", "40"}, "env_dump")),
      {.env = clean_launch_env(), .new_process_group = true});
  CHECK(forty.wait(kLaunchTimeout).exit_code == 2);
  CHECK_THAT(forty.err(), Contains("RLIMIT_NOFILE 100 descriptors"));
  auto two = Subprocess::spawn(
      with_prlimit({"--nofile=100"},
                   launcher_argv({"--standalone", "--nproc-per-node", "2"}, "env_dump")),
      {.env = clean_launch_env(), .new_process_group = true});
  INFO(two.err());
  CHECK(two.wait(kLaunchTimeout).ok());
}

TEST_CASE("nothing the workers started outlives a SIGKILLed launcher", "[launcher][orphans]") {
  // Each worker is a script that leaves `sleep 321 &` behind, as a careless
  // worker would (or a data loader's helper process).
  TempDir dir;
  const std::string script = dir.file("worker.sh");
  {
    std::ofstream s(script);
    s << "#!/bin/sh\n"
         "d=\"$1\"\n"
         "sleep 321 &\n"
         "echo $! > \"$d/sleep/$RANK.tmp\" && mv \"$d/sleep/$RANK.tmp\" "
         "\"$d/sleep/$RANK\"\n"
         "echo $$ > \"$d/worker/$RANK.tmp\" && mv \"$d/worker/$RANK.tmp\" "
         "\"$d/worker/$RANK\"\n"
         "[ \"$2\" = exit ] && exit 0\n"
         "wait\n";
  }
  ::chmod(script.c_str(), 0755);
  for (const char* mode : {"sigkill", "exit"}) {
    SECTION(mode) {
      const std::string run = dir.file(mode);
      std::filesystem::create_directories(run + "/sleep");
      std::filesystem::create_directories(run + "/worker");
      std::vector<std::string> argv{collie_run_path(),
                                    "--standalone",
                                    "--nproc-per-node",
                                    "2",
                                    script,
                                    run,
                                    std::string(mode) == "exit" ? "exit" : "wait"};
      auto p = Subprocess::spawn(argv, {.env = clean_launch_env(), .new_process_group = true});
      std::vector<pid_t> pids = wait_for_pid_files(run + "/sleep", 2);
      for (pid_t w : wait_for_pid_files(run + "/worker", 2)) pids.push_back(w);
      if (std::string(mode) == "sigkill") {
        p.kill(SIGKILL);
        p.wait(kLaunchTimeout);
      } else {
        INFO(p.err());
        CHECK(p.wait(kLaunchTimeout).ok());
      }
      const std::vector<pid_t> survivors = wait_until_dead(pids, std::chrono::seconds(10));
      for (pid_t pid : survivors) ::kill(pid, SIGKILL);  // leave nothing behind either way
      INFO("survivors: " << join(survivors, " "));
      CHECK(survivors.empty());
    }
  }
}

TEST_CASE("a full disk under --log-dir fails loudly and loses no line",
          "[launcher][output][tmpfs]") {
  Tmpfs disk(64 << 10);
  const std::string& mnt = disk.path();

  // 2 ranks x 120 lines of ~1 KB: about 240 KB into 64 KB. Before: the
  // lines that did not fit were dropped and collie-run exited 0.
  const int lines = 120;
  auto p = start_launcher(
      {"--standalone", "--nproc-per-node", "2", "--log-dir", mnt, "--run-id", "full"}, "chatter",
      {std::to_string(lines), "1000"});
  auto st = p.wait(kLaunchTimeout);
  const std::string err = p.err(), out = p.out();
  INFO(err.substr(0, 4000));
  CHECK(st.exit_code == 1);
  CHECK_THAT(err, Contains(str_cat("cannot write ", mnt, "/full/attempt_0/")));
  CHECK_THAT(err, Contains("No space left on device"));
  CHECK_THAT(err, Contains("its stdout goes to the console from here on"));
  CHECK_THAT(err, Contains("the workers succeeded, but"));
  // Every line is in the file or, from the failed write on, on the console.
  for (int r = 0; r < 2; ++r) {
    std::string file;
    try {
      file = read_text_file(str_cat(mnt, "/full/attempt_0/", r, "/stdout.log"));
    } catch (const Error&) {
    }
    std::set<int> seen;
    for (const std::string& text : {file, out}) {
      std::istringstream in(text);
      const std::string own = str_cat("rank ", r, " line "), prefixed = str_cat("[rank", r, "]: ");
      for (std::string line; std::getline(in, line);) {
        if (line.rfind(prefixed, 0) == 0) line = line.substr(prefixed.size());
        if (line.rfind(own, 0) != 0 || line.size() < 1000 || line.substr(line.size() - 4) != " end")
          continue;
        seen.insert(std::stoi(line.substr(own.size())));
      }
    }
    INFO("rank " << r);
    CHECK(seen.size() == static_cast<size_t>(lines));
    CHECK_THAT(file + out, Contains(str_cat("partial last line of rank ", r)));
  }
}

TEST_CASE("a SIGSTOPped worker is the root cause, as every survivor says", "[launcher][blame]") {
  // Rank 2 stops mid-all_reduce; ranks 0 and 1 time out naming it. Before:
  // the summary blamed rank 0, the first to exit.
  TempDir pids;
  auto p = start_launcher({"--standalone", "--nproc-per-node", "3", "--grace-period", "1s"},
                          "allreduce_loop", {pids.path(), "2000"});
  auto workers = wait_for_pid_files(pids.path(), 3);
  p.wait_for_output("looping rank 2", kLaunchTimeout);
  ::kill(workers[2], SIGSTOP);
  auto st = p.wait(kLaunchTimeout);
  const std::string err = p.err();
  INFO(err);
  CHECK(st.exit_code == 1);
  CHECK_THAT(err, Contains("root cause: rank 2 (local rank 2, pid "));
  // Both survivors name it; on a loaded machine the first one's exit may
  // get the other stopped before it has said so.
  CHECK_THAT(err, Contains(") stopped responding: rank"));
  CHECK_THAT(err, Contains("; it was in the stopped state"));
  CHECK_THAT(err, Contains("it ended with signal 9 (SIGKILL)"));
  CHECK_THAT(err, !Contains("root cause: rank 0"));
  CHECK_THAT(err, !Contains("root cause: rank 1"));
  CHECK(wait_until_dead(workers, std::chrono::seconds(10)).empty());
}

TEST_CASE("the summary repeats the agent store's one line about --store-compat",
          "[launcher][interop][torchrun]") {
  require_or_skip(torch_missing().empty(), torch_missing());
  TempDir dir;
  const std::string script = dir.file("worker.py");
  {
    std::ofstream s(script);
    s << "import torch.distributed as dist\n"
         "dist.init_process_group('gloo')\n";
  }
  // Before: dozens of "Connection reset by peer" lines from torch, and the
  // one line naming the flag somewhere above them.
  auto p = Subprocess::spawn(
      {collie_run_path(), "--standalone", "--nproc-per-node", "2", "/usr/bin/python3", script},
      {.env = clean_launch_env(), .new_process_group = true});
  auto st = p.wait(std::chrono::seconds(120));
  const std::string summary = after(p.err(), "collie-run: workers failed");
  INFO(p.err());
  CHECK_FALSE(st.ok());
  CHECK_THAT(summary, Contains("note: TcpStoreServer"));
  CHECK_THAT(summary, Contains("requires the job secret"));
  CHECK_THAT(summary, Contains("--store-compat"));
}

// The launcher's store sockets are close-on-exec, so no worker holds the
// listening port or the server end of the launcher's own store connection;
// and a one-node job's agent store listens on loopback only, printed as it
// is bound, with the workers pointed at it.
TEST_CASE("workers inherit no store socket; a one-node agent store listens on loopback",
          "[launcher][hardening]") {
  TempDir dir;
  const std::string script = dir.file("worker.sh");
  {
    std::ofstream s(script);
    // Every descriptor this process holds, as "fd -> target" lines.
    s << "#!/bin/sh\nfor f in /proc/$$/fd/*; do echo \"fd $(basename $f) -> $(readlink $f)\"; "
         "done\necho \"MASTER_ADDR=$MASTER_ADDR\"\n";
  }
  ::chmod(script.c_str(), 0755);
  auto p =
      Subprocess::spawn({collie_run_path(), "--nproc-per-node", "2", "--master-port", "0", script},
                        {.env = clean_launch_env()});
  REQUIRE(p.wait(kLaunchTimeout).ok());
  INFO(p.out() << p.err());
  CHECK(lines_with_prefix(p.out(), "[rank0]: fd ").size() >= 3);
  CHECK_THAT(p.out(), !Contains("socket:"));
  CHECK(lines_with_prefix(p.out(), "[rank1]: MASTER_ADDR=127.0.0.1").size() == 1);
  CHECK_THAT(p.err(), Contains("agent store listening on 127.0.0.1:") &&
                          Contains("workers reach it at 127.0.0.1)"));
}

// Node 0 of a multi-node job whose --master-addr never resolves: its
// workers would reach the store at that name and wait their whole timeout
// in silence. The launcher waits for the name up to --rdzv-timeout, says
// so, and fails naming it before any worker starts.
TEST_CASE("node 0 with a --master-addr that never resolves fails within --rdzv-timeout",
          "[launcher][hardening]") {
  const auto t0 = std::chrono::steady_clock::now();
  auto p = Subprocess::spawn(
      {collie_run_path(), "--nnodes", "2", "--node-rank", "0", "--master-addr",
       "nonexistent.invalid", "--master-port", "0", "--rdzv-timeout", "3", "/bin/true"},
      {.env = clean_launch_env()});
  const auto st = p.wait(kLaunchTimeout);
  const auto took = std::chrono::steady_clock::now() - t0;
  INFO(p.out() << p.err());
  CHECK(st.exit_code != 0);
  CHECK_THAT(p.err(), Contains("nonexistent.invalid"));
  CHECK(took < std::chrono::seconds(60));
}
