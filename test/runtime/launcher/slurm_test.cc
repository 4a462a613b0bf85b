// Jobs started by a real Slurm scheduler (test/support/slurm_cluster.h:
// munged, slurmctld and three slurmd nodes, each in its own network
// namespace), running the job scripts users submit, examples/slurm/*.sbatch,
// unchanged: blip_train with srun starting every rank, the same with one
// collie-run per node, a node whose ranks are killed mid-epoch and the job
// resumed by a new sbatch, and an elastic job that a later job's node joins.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "collie/base/str_cat.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/samples/blip_job.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/slurm_cluster.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

const std::string kSource = COLLIE_SOURCE_DIR;
const std::string kBin = COLLIE_BIN_DIR;
constexpr std::chrono::seconds kJobTimeout{180};

// Real Fashion-MNIST, a few seconds per epoch at 6 ranks on 2 cores.
const std::string kTrainArgs =
    "--batch-size 32 --hidden 64 --max-steps 40 --dist-eval --print-freq 100000";

void require_blip_train() {
  require_or_skip(::access((kBin + "/blip_train").c_str(), X_OK) == 0,
                  "blip_train is not built (COLLIE_BUILD_SAMPLES=OFF?)");
}

// What every job script gets from the test: where collie is, where its
// output and secret go (never the real home directory), and no launch
// variables of whatever runs the tests.
std::map<std::string, std::optional<std::string>> job_env(const TempDir& dir,
                                                          const std::string& output_dir,
                                                          const std::string& train_args) {
  auto env = clean_launch_env();
  env["COLLIE_SOURCE"] = kSource;
  env["COLLIE_BUILD"] = std::filesystem::path(kBin).parent_path().string();
  env["COLLIE_SECRET_DIR"] = dir.file("secrets");
  env["OUTPUT_DIR"] = output_dir;
  env["TRAIN_ARGS"] = train_args;
  env["HOME"] = dir.path();
  env["COLLIE_JOB_SECRET"] = std::nullopt;
  env["COLLIE_TIMEOUT"] = "60s";  // a rank that waits for a dead one gives up in time
  return env;
}

// sbatch --parsable [--wait] <flags> <script>, from the controller's
// namespace; the job's output goes to <dir>/job-<id>.out.
Subprocess sbatch(const SlurmCluster& cluster, const TempDir& dir, const std::string& script,
                  const std::vector<std::string>& flags,
                  const std::map<std::string, std::optional<std::string>>& env, bool wait) {
  std::vector<std::string> argv = cluster.client();
  for (const std::string& a :
       {std::string("/usr/bin/sbatch"), std::string("--parsable"), "--chdir=" + dir.path(),
        "--output=" + dir.file("job-%j.out"), std::string("--time=5")})
    argv.push_back(a);
  if (wait) argv.push_back("--wait");
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(kSource + "/examples/slurm/" + script);
  return Subprocess::spawn(argv, {.env = env, .new_process_group = true});
}

// The job id sbatch --parsable printed.
std::string job_id(Subprocess& sbatch_process) {
  const std::string out = sbatch_process.wait_for_output("\n", std::chrono::seconds(30));
  std::smatch m;
  INFO(out << sbatch_process.err());
  REQUIRE(std::regex_search(out, m, std::regex(R"(^(\d+))")));
  return m[1];
}

// Seconds until `scontrol show job` reports job `id` in a final state
// (COMPLETED, FAILED, CANCELLED, ...: not PENDING, RUNNING or COMPLETING,
// which still has processes to clean up).
double seconds_until_ended(const SlurmCluster& cluster, const std::string& id, Timeout timeout) {
  const auto start = std::chrono::steady_clock::now();
  Deadline deadline(timeout);
  static const std::regex state(R"(JobState=(\w+))");
  std::string last;
  while (!deadline.expired()) {
    auto [rc, out] = cluster.run({"scontrol", "show", "job", "-o", id});
    std::smatch m;
    if (rc == 0 && std::regex_search(out, m, state)) {
      last = m[1];
      if (last != "PENDING" && last != "RUNNING" && last != "COMPLETING" && last != "CONFIGURING")
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  FAIL("job " << id << " still " << last << " " << deadline.describe());
  return 0;
}

std::string job_output(const TempDir& dir, const std::string& id) {
  return read_text_file(dir.file("job-" + id + ".out"));
}

// Runs a job to its end; its id and output.
std::pair<std::string, std::string> run_job(
    const SlurmCluster& cluster, const TempDir& dir, const std::string& script,
    const std::vector<std::string>& flags, const std::string& output_dir,
    const std::string& train_args,
    std::map<std::string, std::optional<std::string>> more_env = {}) {
  auto env = job_env(dir, output_dir, train_args);
  for (auto& [k, v] : more_env) env[k] = v;
  auto p = sbatch(cluster, dir, script, flags, env, /*wait=*/true);
  const std::string id = job_id(p);
  const ExitStatus st = p.wait(kJobTimeout);
  const std::string out = job_output(dir, id);
  INFO("job " << id << " (" << script << "):\n" << out << p.err());
  CHECK(st.ok());
  return {id, out};
}

}  // namespace

TEST_CASE(
    "sbatch: srun starting every rank, and srun collie-run per node, reach one host's "
    "accuracy at the same global batch",
    "[launcher][slurm][netns]") {
  require_blip_train();
  auto cluster = slurm_cluster_or_skip("s", "10.231.21", 3);
  TempDir dir;
  const std::string train = kTrainArgs + " --epochs 2";

  // One host, 6 ranks: the reference.
  const std::string one_host = dir.file("one-host");
  std::vector<std::string> args{"--output-dir", one_host};
  std::istringstream words(train);
  for (std::string w; words >> w;) args.push_back(w);
  auto ref = Subprocess::spawn(blip_job(6, args), {.env = clean_launch_env()});
  const ExitStatus ref_status = ref.wait(kJobTimeout);
  INFO(ref.err());
  REQUIRE(ref_status.ok());
  const auto ref_log = lines_of(one_host + "/log.txt");
  REQUIRE(ref_log.size() == 2);

  // srun starts the 6 ranks itself (3 nodes x 2 tasks).
  const std::string direct = dir.file("direct");
  auto [direct_id, direct_out] = run_job(*cluster, dir, "train.sbatch", {}, direct, train);
  CHECK_THAT(direct_out, Contains("6 ranks on node[1-3]"));
  // One collie-run per node, 2 workers each.
  const std::string launched = dir.file("launched");
  auto [launched_id, launched_out] =
      run_job(*cluster, dir, "train_collie_run.sbatch", {}, launched, train);
  // Node 0's launcher hosts the store on the first node of the node list.
  CHECK_THAT(launched_out, Contains("workers reach it at node1)"));
  CHECK_THAT(launched_out, Contains("run id '" + launched_id + "'"));

  for (const std::string& run : {direct, launched}) {
    const auto log = lines_of(run + "/log.txt");
    INFO(run);
    REQUIRE(log.size() == 2);
    for (size_t e = 0; e < 2; ++e) {
      INFO("epoch " << e << ": " << log[e] << "\none host: " << ref_log[e]);
      CHECK(json_number(log[e], "world_size") == 6);
      CHECK(json_number(log[e], "test_count") == 10000);
      // The same global batch and seeds; only the order of the float sums
      // across hosts differs from one host's.
      CHECK(json_number(log[e], "test_acc") ==
            Approx(json_number(ref_log[e], "test_acc")).margin(0.01));
      CHECK(json_number(log[e], "train_loss") ==
            Approx(json_number(ref_log[e], "train_loss")).epsilon(0.01));
    }
    CHECK(json_number(log[1], "test_acc") > 0.6);  // chance is 0.1
  }
  // Every job removed its secret file.
  CHECK(std::filesystem::is_empty(dir.file("secrets")));
}

TEST_CASE(
    "sbatch: a node's ranks killed mid-epoch end the job within seconds naming rank and "
    "node, and a new sbatch resumes from the last finished epoch",
    "[launcher][slurm][netns][failure]") {
  require_blip_train();
  auto cluster = slurm_cluster_or_skip("k", "10.231.22", 3);
  TempDir dir;
  const std::string out = dir.file("run"), log = out + "/log.txt";
  // Long enough epochs that the kill lands inside epoch 1.
  const std::string train = "--batch-size 8 --hidden 64 --dist-eval --print-freq 100000 --epochs 3";
  auto job = sbatch(*cluster, dir, "train.sbatch", {}, job_env(dir, out, train), /*wait=*/true);
  const std::string id = job_id(job);
  wait_for_epoch_at(log, 6, 0, kJobTimeout, {&job});
  REQUIRE(epochs_in_log(log).size() == 1);

  // Node 2 (node2) loses its two ranks: SIGKILL, as the OOM killer or a
  // dying machine would.
  const auto victims = cluster->pids_on_node(1, "blip_train");
  REQUIRE(victims.size() == 2);
  for (pid_t pid : victims) ::kill(pid, SIGKILL);
  // When Slurm says the job has ended (sbatch --wait itself polls with a
  // back-off of up to 30 s, so its exit says nothing about how fast).
  const double took = seconds_until_ended(*cluster, id, kJobTimeout);
  const ExitStatus st = job.wait(kJobTimeout);
  const std::string text = job_output(dir, id);
  INFO("job " << id << " ended " << took << " s after the kill:\n" << text);
  CHECK_FALSE(st.ok());
  CHECK(took < 20);
  // Slurm names the node and its tasks; the surviving ranks name the rank
  // that died and its node.
  // srun names the two tasks together, or each on its own line when they
  // end in different polls of its step.
  for (const char* task : {"2", "3"}) {
    INFO("task " << task);
    CHECK(std::regex_search(
        text, std::regex(std::string(R"(node2: (tasks 2-3|task )") + task + R"(): Killed)")));
  }
  CHECK(std::regex_search(text, std::regex(R"(rank [23]\b[^\n]*10\.231\.22\.3)")));
  CHECK(epochs_in_log(log).size() == 1);  // epoch 1 never finished

  // A new job with the same output folder resumes from checkpoint_00.
  auto [again, again_out] = run_job(*cluster, dir, "train.sbatch", {}, out, train);
  CHECK_THAT(again_out, Contains("checkpoint_00.pth"));
  const auto epochs = epochs_in_log(log);
  CHECK(epochs == std::vector<std::pair<int, int>>{{0, 6}, {1, 6}, {2, 6}});
}

TEST_CASE(
    "sbatch: an elastic job (c10d, --nnodes 2:3) admits a later job's node at the next "
    "round",
    "[launcher][slurm][netns][elastic]") {
  require_blip_train();
  auto cluster = slurm_cluster_or_skip("e", "10.231.23", 3);
  TempDir dir;
  const std::string out = dir.file("run"), log = out + "/log.txt";
  const std::string train =
      "--batch-size 32 --hidden 64 --max-steps 60 --print-freq 100000 --epochs 12";
  auto env = job_env(dir, out, train);
  env["RDZV_CONF"] = "last_call_timeout=1s,keep_alive_interval=1s";
  // Job A: two nodes, world size 4; its first node hosts the rendezvous.
  auto a = sbatch(*cluster, dir, "elastic.sbatch", {"--nodes=2"}, env, /*wait=*/true);
  const std::string a_id = job_id(a);
  wait_for_epoch_at(log, 4, 0, kJobTimeout, {&a});

  // Job B: one more node, joining A's rendezvous.
  env["RDZV_JOB"] = a_id;
  env["RDZV_HOST"] = "node1";
  auto b = sbatch(*cluster, dir, "elastic.sbatch", {"--nodes=1"}, env, /*wait=*/true);
  const std::string b_id = job_id(b);
  const ExitStatus sa = a.wait(kJobTimeout), sb = b.wait(kJobTimeout);
  const std::string a_out = job_output(dir, a_id), b_out = job_output(dir, b_id);
  INFO("job " << a_id << ":\n" << a_out << "\njob " << b_id << ":\n" << b_out);
  CHECK(sa.ok());
  CHECK(sb.ok());
  CHECK_THAT(b_out, Contains("joins rendezvous " + a_id + " at node1:29400"));
  CHECK_THAT(a_out, Contains("waiting to join"));
  CHECK_THAT(b_out, Contains("of world size 6"));

  // World size 4, then 6 once B's node is in; every epoch trained, in order.
  const auto seen = epochs_in_log(log);
  std::set<int> trained;
  for (size_t i = 0; i < seen.size(); ++i) {
    trained.insert(seen[i].first);
    if (i > 0) CHECK(seen[i].first >= seen[i - 1].first);
  }
  CHECK(world_size_runs(seen) == std::vector<int>{4, 6});
  CHECK(trained.size() == 12);
}
