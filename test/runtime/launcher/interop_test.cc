// collie workers under other launchers: torch's own torchrun (1.13, whose
// agent store speaks the 1.13 TCPStore protocol), a SLURM-style start (only
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID and MASTER_ADDR/MASTER_PORT), and
// Open MPI's mpirun. The workers detect the launcher, rendezvous through the
// store, and all_reduce through init_process_group.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>

#include "collie/base/str_cat.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/child.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

bool executable(const char* path) { return ::access(path, X_OK) == 0; }

}  // namespace

TEST_CASE("collie workers rendezvous through torchrun's agent store",
          "[launcher][interop][torchrun]") {
  require_or_skip(torch_missing().empty(), torch_missing());
  // torchrun's static rendezvous hands its port to the workers as given, so
  // it needs a concrete port: one that was free a moment ago.
  uint16_t port = probe_free_port();
  std::vector<std::string> argv{"/usr/bin/python3", "-m", "torch.distributed.run",
                                "--nproc_per_node", "2", "--master_port", std::to_string(port),
                                // torch 1.13 on Python 3.11 cannot map the
                                // default redirects "0" (IntFlag iteration
                                // skips 0 since 3.11, Std.from_str returns
                                // None); a single-bit value works: stdout
                                // goes to its log file and, tee'd, to ours.
                                "--redirects", "1", "--tee", "1", "--no_python"};
  for (auto& a : child_argv("store_rdv", {"-1", "allreduce"})) argv.push_back(a);
  auto env = clean_launch_env();
  auto p = Subprocess::spawn(argv, {.env = env, .new_process_group = true});
  auto st = p.wait(std::chrono::seconds(120));
  INFO(p.out() << "\n--- stderr ---\n" << p.err());
  REQUIRE(st.ok());
  for (int r = 0; r < 2; ++r) {
    CHECK_THAT(p.out(), Contains(str_cat("rdv ok rank ", r, " of 2 local ", r,
                                         " attempt 0 via agent store protocol 1.13")));
    CHECK_THAT(p.out(), Contains(str_cat("allreduce ok rank ", r, " sum 3")));
  }
}

TEST_CASE("workers started SLURM-style rendezvous on rank 0's store",
          "[launcher][interop][slurm]") {
  const int n = 3;
  uint16_t port = probe_free_port();
  std::vector<Subprocess> ranks;
  for (int r = 0; r < n; ++r) {
    auto env = clean_launch_env();
    env["SLURM_PROCID"] = std::to_string(r);
    env["SLURM_NTASKS"] = std::to_string(n);
    env["SLURM_LOCALID"] = std::to_string(r);
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(port);
    ranks.push_back(Subprocess::spawn(child_argv("store_rdv", {"-1", "allreduce"}), {.env = env}));
  }
  for (int r = 0; r < n; ++r) {
    auto st = ranks[r].wait(kLaunchTimeout);
    INFO("rank " << r << "\n" << ranks[r].out() << ranks[r].err());
    REQUIRE(st.ok());
    CHECK_THAT(ranks[r].out(), Contains(str_cat("rdv ok rank ", r, " of 3 local ", r,
                                                " attempt 0 via store hosted by rank 0 (slurm)")));
    CHECK_THAT(ranks[r].out(), Contains(str_cat("allreduce ok rank ", r, " sum 6")));
  }
}

TEST_CASE("workers started by mpirun rendezvous on rank 0's store", "[launcher][interop][mpi]") {
  require_or_skip(executable("/usr/bin/mpirun"), "mpirun (openmpi-bin) is not installed");
  uint16_t port = probe_free_port();
  std::vector<std::string> argv{"/usr/bin/mpirun",
                                "--allow-run-as-root",
                                "--oversubscribe",
                                "-np",
                                "2",
                                "-x",
                                "MASTER_ADDR=127.0.0.1",
                                "-x",
                                str_cat("MASTER_PORT=", port)};
  for (auto& a : child_argv("store_rdv", {"-1", "allreduce"})) argv.push_back(a);
  auto p = Subprocess::spawn(argv, {.env = clean_launch_env(), .new_process_group = true});
  auto st = p.wait(std::chrono::seconds(120));
  INFO(p.out() << "\n--- stderr ---\n" << p.err());
  REQUIRE(st.ok());
  for (int r = 0; r < 2; ++r) {
    CHECK_THAT(p.out(), Contains(str_cat("rdv ok rank ", r, " of 2 local ", r,
                                         " attempt 0 via store hosted by rank 0 (openmpi)")));
    CHECK_THAT(p.out(), Contains(str_cat("allreduce ok rank ", r, " sum 3")));
  }
}

TEST_CASE("torch workers under collie-run find its agent store", "[launcher][interop][torchrun]") {
  require_or_skip(torch_missing().empty(), torch_missing());
  // torch 1.13's env:// rendezvous with TORCHELASTIC_USE_AGENT_STORE=True:
  // a 1.13-protocol TCPStore client of collie's server, under
  // /worker/attempt_0, then a gloo all_reduce.
  TempDir dir;
  std::string script = dir.file("worker.py");
  {
    std::ofstream s(script);
    s << "import os, torch, torch.distributed as dist\n"
         "dist.init_process_group('gloo')\n"
         "t = torch.ones(4) * (dist.get_rank() + 1)\n"
         "dist.all_reduce(t)\n"
         "print(f'torch rank {dist.get_rank()} of {dist.get_world_size()} sum {int(t[0])}', "
         "flush=True)\n"
         "dist.destroy_process_group()\n";
  }
  // torch's TCPStore cannot prove the job secret collie-run generates, so
  // its agent store admits torch workers only with --store-compat
  // (docs/security.md).
  SECTION("with --store-compat they are served") {
    std::vector<std::string> argv{
        collie_run_path(),  "--standalone", "--store-compat", "--nproc-per-node", "2",
        "/usr/bin/python3", script};
    auto p = Subprocess::spawn(argv, {.env = clean_launch_env(), .new_process_group = true});
    auto st = p.wait(std::chrono::seconds(120));
    INFO(p.out() << "\n--- stderr ---\n" << p.err());
    REQUIRE(st.ok());
    CHECK(lines_with_prefix(p.out(), "[rank0]: torch rank 0 of 2 sum 3").size() == 1);
    CHECK(lines_with_prefix(p.out(), "[rank1]: torch rank 1 of 2 sum 3").size() == 1);
  }
  SECTION("without it the store refuses them, naming their address and the flag") {
    std::vector<std::string> argv{collie_run_path(),  "--standalone", "--nproc-per-node", "2",
                                  "/usr/bin/python3", script};
    auto p = Subprocess::spawn(argv, {.env = clean_launch_env(), .new_process_group = true});
    auto st = p.wait(std::chrono::seconds(120));
    INFO(p.out() << "\n--- stderr ---\n" << p.err());
    CHECK_FALSE(st.ok());
    CHECK_THAT(p.err(), Contains("dropping connection from 127.0.0.1:"));
    CHECK_THAT(p.err(), Contains("requires the job secret"));
    CHECK_THAT(p.err(), Contains("--store-compat"));
    CHECK(lines_with_prefix(p.out(), "[rank0]: torch rank 0 of 2 sum 3").empty());
  }
}
