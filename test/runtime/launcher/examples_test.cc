// The cluster examples hold their contract: examples/slurm/train_collie_run.sbatch runs
// as sbatch would run it, under a stand-in srun that starts one task per
// "node" with srun's step variables, and trains blip_train on two nodes;
// examples/kubernetes/jobset.yaml sets exactly the variables collie-run reads,
// and two collie-runs given those variables, as the two pods would be, form
// one job.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/job_secret.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

const std::string kSource = COLLIE_SOURCE_DIR;
const std::string kBin = COLLIE_BIN_DIR;

// srun for two nodes on this machine: each task gets the step variables
// srun sets, and its output goes to NODE_OUT_DIR/node<i>.out.
void write_fake_srun(const std::string& path) {
  std::ofstream s(path);
  s << "#!/bin/sh\n"
       "[ \"$1\" = --ntasks-per-node=1 ] || { echo \"srun: want --ntasks-per-node=1, got $1\" >&2; "
       "exit 2; }\n"
       "shift\n"
       "[ \"$1\" = --kill-on-bad-exit=1 ] && shift\n"
       "for i in 0 1; do\n"
       "  SLURM_STEP_NUM_NODES=2 SLURM_STEP_NUM_TASKS=2 SLURM_NODEID=$i SLURM_PROCID=$i \\\n"
       "  SLURM_LOCALID=0 SLURM_STEP_NODELIST=localhost,localhost SLURM_JOB_NODELIST=localhost \\\n"
       "    \"$@\" > \"$NODE_OUT_DIR/node$i.out\" 2>&1 &\n"
       "  pids=\"$pids $!\"\n"
       "done\n"
       "rc=0\n"
       "for pid in $pids; do wait \"$pid\" || rc=1; done\n"
       "exit $rc\n";
  s.close();
  ::chmod(path.c_str(), 0755);
}

}  // namespace

TEST_CASE("examples/slurm/train_collie_run.sbatch trains on two nodes under srun's variables",
          "[launcher][examples][slurm]") {
  require_or_skip(::access((kBin + "/blip_train").c_str(), X_OK) == 0,
                  "blip_train is not built (COLLIE_BUILD_SAMPLES=OFF?)");
  TempDir dir;
  write_fake_srun(dir.file("srun"));
  const std::string home = dir.file("home"), runs = dir.file("runs");
  std::filesystem::create_directories(home);
  auto env = clean_launch_env();
  env["PATH"] = dir.path() + ":" + std::string(std::getenv("PATH"));
  env["HOME"] = home;
  env["SLURM_JOB_ID"] = "8642";
  env["COLLIE_SOURCE"] = kSource;
  env["COLLIE_BUILD"] = std::filesystem::path(kBin).parent_path().string();
  env["NPROC_PER_NODE"] = "1";
  env["OUTPUT_DIR"] = runs;
  env["NODE_OUT_DIR"] = dir.path();
  env["MASTER_PORT"] = std::to_string(probe_free_port());  // not the job-id port, on a shared box
  env["TRAIN_ARGS"] = "--synthetic --synthetic-size 512 --epochs 2 --hidden 16 --print-freq 1000";
  env["COLLIE_JOB_SECRET"] = std::nullopt;
  auto p = Subprocess::spawn({"/bin/bash", kSource + "/examples/slurm/train_collie_run.sbatch"},
                             {.env = env});
  auto st = p.wait(kLaunchTimeout);
  const std::string node0 = read_text_file(dir.file("node0.out")),
                    node1 = read_text_file(dir.file("node1.out"));
  INFO(p.err() << "\n--- node 0 ---\n" << node0 << "\n--- node 1 ---\n" << node1);
  CHECK(st.ok());
  CHECK_THAT(node0, Contains("agent store listening on 0.0.0.0:" + *env["MASTER_PORT"] +
                             " (node 0 of 2, run id '8642'; workers reach it at localhost)"));
  const std::string log = read_text_file(runs + "/log.txt");
  CHECK_THAT(log, Contains("\"epoch\": 1,"));
  CHECK_THAT(log, Contains("\"world_size\": 2"));
  // The secret came from the file the first launcher made (no derived-secret
  // notice), and the script removed it at the end.
  CHECK_THAT(node0 + node1, !Contains("job secret derived"));
  CHECK_FALSE(std::filesystem::exists(home + "/.collie/job-8642.secret"));
}

TEST_CASE("examples/kubernetes/jobset.yaml sets the variables collie-run reads",
          "[launcher][examples][kubernetes]") {
  const std::string manifest = read_text_file(kSource + "/examples/kubernetes/jobset.yaml");
  std::set<std::string> names;
  static const std::regex env_name(R"(- name: ([A-Z_]+)\n\s+value)");
  for (auto it = std::sregex_iterator(manifest.begin(), manifest.end(), env_name);
       it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  CHECK(names == std::set<std::string>{"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK",
                                       "PET_MASTER_ADDR", "PET_MASTER_PORT", "COLLIE_JOB_SECRET"});
  CHECK_THAT(manifest, Contains("/opt/collie/build/bin/collie-run"));
  CHECK_THAT(manifest, Contains("job-completion-index"));
  CHECK_THAT(manifest, Contains("secretKeyRef"));

  // Two "pods" with what the manifest gives them (the master's name
  // replaced by loopback; the late-resolving name is cluster_test.cc's
  // case), and one secret from "the Kubernetes Secret".
  const uint16_t port = probe_free_port();
  const std::string secret = JobSecret::generate().to_hex();
  auto pod = [&](int index) {
    return start_launcher({}, "env_dump", {},
                          {{"PET_NNODES", "2"},
                           {"PET_NPROC_PER_NODE", "2"},
                           {"PET_NODE_RANK", std::to_string(index)},
                           {"PET_MASTER_ADDR", "127.0.0.1"},
                           {"PET_MASTER_PORT", std::to_string(port)},
                           {"COLLIE_JOB_SECRET", secret}});
  };
  auto pod0 = pod(0), pod1 = pod(1);
  auto s1 = pod1.wait(kLaunchTimeout), s0 = pod0.wait(kLaunchTimeout);
  INFO(pod0.err() << "\n--- pod 1 ---\n" << pod1.err());
  CHECK(s0.ok());
  CHECK(s1.ok());
  CHECK(lines_with_prefix(pod1.out(), "[rank3]: WORLD_SIZE=4").size() == 1);
  CHECK(lines_with_prefix(pod1.out(), "[rank2]: GROUP_RANK=1").size() == 1);
  CHECK_THAT(pod0.err() + pod1.err(), !Contains("job secret derived"));
}

TEST_CASE("examples/resume_latest.sh resumes the highest epoch, counted as a number",
          "[launcher][examples]") {
  TempDir dir;
  for (const char* name :
       {"checkpoint_09.pth", "checkpoint_99.pth", "checkpoint_100.pth", "checkpoint_best.pth"})
    std::ofstream(dir.file(name)) << "x";
  auto p = Subprocess::spawn({"/bin/sh", kSource + "/examples/resume_latest.sh", dir.path(),
                              "/bin/echo", "--epochs", "200"});
  REQUIRE(p.wait(std::chrono::seconds(30)).ok());
  CHECK_THAT(p.out(), Contains("--resume " + dir.file("checkpoint_100.pth")));
  // The last epoch's checkpoint: nothing left to train.
  auto done = Subprocess::spawn({"/bin/sh", kSource + "/examples/resume_latest.sh", dir.path(),
                                 "/bin/echo", "--epochs", "101"});
  REQUIRE(done.wait(std::chrono::seconds(30)).ok());
  CHECK_THAT(done.out(), Contains("nothing left to train"));
}
