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
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "base/str_cat.h"
#include "runtime/api/distributed.h"
#include "test/runtime/launcher/launcher_harness.h"
#include "test/support/child.h"
#include "test/support/skip.h"
#include "test/support/subprocess.h"
#include "test/support/temp_dir.h"

namespace collie {
namespace {

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using test::Subprocess;
using test::TempDir;

// args: the rank that hangs, the call it never makes (1-based). Every rank
// all_reduces 4 times, with a 2 s timeout; the hung rank blocks before its
// call number `hang_at` until the launcher stops it.
COLLIE_TEST_CHILD(fr_hang) {
  const int hung = std::stoi(args.at(0));
  const int hang_at = std::stoi(args.at(1));
  init_process_group({.backend = "cpu", .timeout = 2s});
  float x = 1;
  for (int call = 1; call <= 4; ++call) {
    if (get_rank() == hung && call == hang_at) {
      for (;;) ::pause();  // the hang itself: collie-run ends it
    }
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
  TempDir dumps, state;
  const auto start = std::chrono::steady_clock::now();
  auto p = test::start_launcher({"--standalone", "--nproc-per-node", "4"}, "fr_hang", {"2", "3"},
                                {{"TORCH_FR_DUMP_TEMP_FILE", dumps.file("collie_rank_")},
                                 {"COLLIE_FR_STATE_DIR", state.path()}});
  auto st = p.wait(test::kLaunchTimeout);
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string err = p.err();
  INFO(err);
  CHECK(st.exit_code == 1);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(std::filesystem::exists(dumps.file(str_cat("collie_rank_", r))));
    CHECK(std::filesystem::exists(str_cat(state.path(), "/rank", r, ".json")));
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

}  // namespace
}  // namespace collie
