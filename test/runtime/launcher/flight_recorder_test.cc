// The flight recorder end to end, in C++ jobs under the real collie-run:
// one rank of four stops calling collectives (a hung data loader), the
// others time out, and every rank's dump lands in TORCH_FR_DUMP_TEMP_FILE's
// folder, where torch 2.15's own analyser (`torchfrtrace`, from the
// environment COLLIE_TORCH2_PYTHON names) reads them and names the rank that
// never joined the collective.
#include <signal.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/child.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using collie::SpawnOptions;
using test::Subprocess;
using test::TempDir;

// args: the rank that hangs, the call it never makes (1-based), and the
// collective timeout in seconds (default 2). Every rank all_reduces 4 times;
// the hung rank says so on stderr and blocks before its call number
// `hang_at` until the launcher stops it.
COLLIE_TEST_CHILD(fr_hang) {
  const int hung = std::stoi(args.at(0));
  const int hang_at = std::stoi(args.at(1));
  const int timeout_s = args.size() > 2 ? std::stoi(args[2]) : 2;
  init_process_group({.backend = "cpu", .timeout = std::chrono::seconds(timeout_s)});
  float x = 1;
  for (int call = 1; call <= 4; ++call) {
    if (get_rank() == hung && call == hang_at) {
      std::fprintf(stderr, "fr_hang: rank %d hangs before all_reduce #%d\n", hung, call);
      std::fflush(stderr);
      for (;;) ::pause();  // the hang itself: collie-run ends it
    }
    all_reduce(view(&x, 1));
  }
  destroy_process_group();
  return 0;
}

// Rank 1 broadcasts where the others all_reduce (their 2nd call): the
// headers catch the mismatch at once, and every rank dumps.
COLLIE_TEST_CHILD(fr_mismatch) {
  init_process_group({.backend = "cpu", .timeout = 20s});
  float x = 1;
  all_reduce(view(&x, 1));
  if (get_rank() == 1) {
    broadcast(view(&x, 1), 0);
  } else {
    all_reduce(view(&x, 1));
  }
  destroy_process_group();
  return 0;
}

std::string torchfrtrace() {
  const char* python = std::getenv("COLLIE_TORCH2_PYTHON");
  if (python == nullptr || *python == '\0')
    test::skip_test(
        "COLLIE_TORCH2_PYTHON is not set (tools/collie.sh makes the torch 2.x "
        "environments; ctest sets it from COLLIE_TORCH_VENVS)");
  const std::string tool = (std::filesystem::path(python).parent_path() / "torchfrtrace").string();
  if (::access(tool.c_str(), X_OK) != 0)
    test::skip_test(str_cat(tool, " is missing (torch 2.15's wheel ships it)"));
  return tool;
}

TEST_CASE("a hung C++ job's dumps name the missing rank in torchfrtrace", "[launcher][fr]") {
  const std::string tool = torchfrtrace();
  TempDir dumps;
  const auto start = std::chrono::steady_clock::now();
  auto p = test::start_launcher({"--standalone", "--nproc-per-node", "4"}, "fr_hang", {"2", "3"},
                                {{"TORCH_FR_DUMP_TEMP_FILE", dumps.file("collie_rank_")}});
  auto st = p.wait(test::kLaunchTimeout);
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string err = p.err();
  INFO(err);
  CHECK(st.exit_code == 1);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(std::filesystem::exists(dumps.file(str_cat("collie_rank_", r))));
  }
  CHECK(took < 30s);

  auto analysis = Subprocess::spawn({tool, dumps.path()});
  auto ast = analysis.wait(120s);
  const std::string out = analysis.out() + analysis.err();
  INFO(out);
  CHECK(ast.exit_code == 0);
  CHECK_THAT(out, Contains("all_reduce"));
  CHECK_THAT(out, Contains("{2}"));
}

TEST_CASE("a mismatched call dumps every rank and torchfrtrace sees both calls", "[launcher][fr]") {
  const std::string tool = torchfrtrace();
  TempDir dumps;
  auto p = test::start_launcher({"--standalone", "--nproc-per-node", "3"}, "fr_mismatch", {},
                                {{"TORCH_FR_DUMP_TEMP_FILE", dumps.file("collie_rank_")}});
  auto st = p.wait(test::kLaunchTimeout);
  INFO(p.err());
  CHECK(st.exit_code == 1);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(std::filesystem::exists(dumps.file(str_cat("collie_rank_", r))));
  }
  auto analysis = Subprocess::spawn({tool, dumps.path()});
  auto ast = analysis.wait(120s);
  const std::string out = analysis.out() + analysis.err();
  INFO(out);
  CHECK(ast.exit_code == 0);
  CHECK_THAT(out, Contains("Culprit rank 1"));
  CHECK_THAT(out, Contains("COLLECTIVE_TYPE_MISMATCH"));
  CHECK_THAT(out, Contains("'broadcast'"));
}

TEST_CASE("without collie-run the failing ranks ask the hung one to dump through the store",
          "[launcher][fr]") {
  // torchrun's way: every rank started by hand (env://); no launcher
  // collects anything, so the ranks that time out ask rank 1 through the
  // store and wait for its dump before they fail.
  TempDir dumps;
  const std::string port = std::to_string(test::probe_free_port());
  std::vector<Subprocess> ranks;
  for (int r = 0; r < 3; ++r) {
    SpawnOptions options;
    options.env = {{"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", port},
                   {"WORLD_SIZE", "3"},
                   {"RANK", std::to_string(r)},
                   {"LOCAL_RANK", std::to_string(r)},
                   {"TORCH_FR_DUMP_TEMP_FILE", dumps.file("collie_rank_")},
                   {"COLLIE_RUN_COLLECTS_DUMPS", std::nullopt}};
    ranks.push_back(Subprocess::spawn(test::child_argv("fr_hang", {"1", "2"}), options));
  }
  ranks[1].wait_for_stderr("fr_hang: rank 1 hangs before all_reduce #2", test::kLaunchTimeout);
  CHECK(ranks[0].wait(test::kLaunchTimeout).exit_code == 1);
  CHECK(ranks[2].wait(test::kLaunchTimeout).exit_code == 1);
  // Rank 1 dumped before they exited: they waited for it.
  INFO(ranks[0].err());
  CHECK(std::filesystem::exists(dumps.file("collie_rank_1")));
  ::kill(ranks[1].pid(), SIGKILL);
  ranks[1].wait(test::kLaunchTimeout);
  CHECK(std::filesystem::exists(dumps.file("collie_rank_0")));
  CHECK(std::filesystem::exists(dumps.file("collie_rank_2")));
}

TEST_CASE("collie-run prints the hung rank and the call within the timeout plus 2 s at 8 ranks",
          "[launcher][fr]") {
  auto p = test::start_launcher({"--standalone", "--nproc-per-node", "8"}, "fr_hang", {"5", "3"});
  test::wait_for_stderr(p, "fr_hang: rank 5 hangs before all_reduce #3");
  const auto hung_at = std::chrono::steady_clock::now();
  const std::string err = test::wait_for_stderr(p, "the flight recorders");
  const auto told_at = std::chrono::steady_clock::now();
  auto st = p.wait(test::kLaunchTimeout);
  const std::string all = p.err();
  INFO(all);
  CHECK(st.exit_code == 1);
  // The others enter all_reduce #3 when rank 5 stops: 2 s of timeout, then
  // at most 2 s more for the probe, the records and the flight recorders.
  CHECK(told_at - hung_at < 2s + 2s);
  CHECK_THAT(all, Contains("root cause: rank 5 "));
  CHECK_THAT(all,
             Contains("group 0 (default_pg): all_reduce #3: rank 5 never entered all_reduce "
                      "#3 (last completed: 5: all_reduce #2); ranks 0,1,2,3,4,6,7 wait in it"));
}

TEST_CASE("collie-run --status shows every rank's calls in a live job", "[launcher][fr]") {
  // A long timeout: the job stays hung while it is asked, until stopped.
  auto p =
      test::start_launcher({"--standalone", "--nproc-per-node", "4"}, "fr_hang", {"2", "3", "120"});
  test::wait_for_stderr(p, "fr_hang: rank 2 hangs before all_reduce #3");
  // The others enter all_reduce #3 soon after; ask until they are seen in it.
  std::string out;
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < until) {
    auto q = Subprocess::spawn({test::collie_run_path(), "--status", std::to_string(p.pid())});
    auto qs = q.wait(30s);
    out = q.out() + q.err();
    REQUIRE(qs.exit_code == 0);
    if (out.find("ranks 0,1,3 wait in it") != std::string::npos) break;
  }
  INFO(out);
  CHECK_THAT(out, Contains("4 worker(s) on this node, 4 answered"));
  CHECK_THAT(out, Contains("rank 2, group 0 (default_pg): last completed all_reduce #2"));
  CHECK_THAT(out, Contains("nothing pending"));
  CHECK_THAT(out, Contains("rank 0, group 0 (default_pg): last completed all_reduce #2"));
  CHECK_THAT(out, Contains("pending all_reduce #3 started, waiting"));
  CHECK_THAT(out, Contains("group 0 (default_pg): all_reduce #3: rank 2 never entered"));
  CHECK_THAT(out, Contains("ranks 0,1,3 wait in it"));
  ::kill(p.pid(), SIGTERM);
  p.wait(test::kLaunchTimeout);
}

TEST_CASE("collie-run --status names a pid that runs no job", "[launcher][fr]") {
  auto q = Subprocess::spawn({test::collie_run_path(), "--status", "999999999"});
  auto st = q.wait(30s);
  CHECK(st.exit_code == 1);
  CHECK_THAT(q.err(), Contains("is 999999999 a running collie-run"));
}

}  // namespace
}  // namespace collie
