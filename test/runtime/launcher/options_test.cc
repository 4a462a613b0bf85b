// Unit tests of the launcher's pieces that need no process: flag parsing in
// torchrun's spellings, the line splitter, prefixes and the failure summary.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "collie/base/error.h"
#include "collie/runtime/launcher/failure_summary.h"
#include "collie/runtime/launcher/launch_options.h"
#include "collie/runtime/launcher/line_splitter.h"
#include "collie/runtime/launcher/worker_env.h"
#include "collie/runtime/launcher/worker_group.h"

using namespace collie;
using namespace collie::launcher;
using Catch::Matchers::Contains;

namespace {

LaunchOptions parse_ok(std::vector<std::string> args) {
  args.insert(args.begin(), "collie-run");
  auto r = parse_launch_options(args);
  INFO(r.message);
  REQUIRE(r.options);
  return *r.options;
}

ParseResult parse_bad(std::vector<std::string> args) {
  args.insert(args.begin(), "collie-run");
  auto r = parse_launch_options(args);
  REQUIRE_FALSE(r.options);
  CHECK(r.exit_code == 2);
  return r;
}

}  // namespace

TEST_CASE("flags parse in torchrun's dash and underscore spellings", "[launcher][options]") {
  auto a = parse_ok({"--nproc-per-node", "4", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                     "10.0.0.1", "--master-port", "1234", "--max-restarts", "3", "./train", "--lr",
                     "0.1"});
  auto b =
      parse_ok({"--nproc_per_node=4", "--nnodes=2:2", "--node_rank=1", "--master_addr=10.0.0.1",
                "--master_port=1234", "--max_restarts=3", "./train", "--lr", "0.1"});
  for (const auto& o : {a, b}) {
    CHECK(o.nproc_per_node == 4);
    CHECK(o.nnodes == 2);
    CHECK(o.node_rank == 1);
    CHECK(o.master_addr == "10.0.0.1");
    CHECK(o.master_port == 1234);
    CHECK(o.max_restarts == 3);
    CHECK(o.program == std::vector<std::string>{"./train", "--lr", "0.1"});
  }
  auto d = parse_ok({"./train"});
  CHECK(d.master_port == 29500);
  CHECK(d.master_addr == "127.0.0.1");
  CHECK(d.use_env);
  CHECK(d.run_id == "none");
  CHECK(d.role == "default");
}

TEST_CASE("the program's own flags are passed through untouched", "[launcher][options]") {
  auto o =
      parse_ok({"--nproc-per-node", "2", "./train", "--nproc-per-node", "9", "--tee", "--help"});
  CHECK(o.nproc_per_node == 2);
  CHECK(o.tee == 0);
  CHECK(o.program ==
        std::vector<std::string>{"./train", "--nproc-per-node", "9", "--tee", "--help"});
  auto p = parse_ok({"--standalone", "--", "./train", "-x"});
  CHECK(p.program == std::vector<std::string>{"./train", "-x"});
}

TEST_CASE("standalone, tee, filter, legacy mode, durations and the rdzv spellings",
          "[launcher][options]") {
  auto s = parse_ok({"--standalone", "--nproc-per-node", "2", "./t"});
  CHECK(s.master_port == 0);
  CHECK(s.master_addr == "127.0.0.1");
  CHECK(parse_ok({"--tee", "./t"}).tee == 3);
  CHECK(parse_ok({"--tee", "1", "./t"}).tee == 1);
  CHECK(parse_ok({"--tee=2", "--log-dir", "/tmp/x", "./t"}).tee == 2);
  CHECK(parse_ok({"--local-ranks-filter", "0,3", "./t"}).local_ranks_filter == std::set<int>{0, 3});
  CHECK(parse_ok({"--local_ranks_filter=1", "./t"}).local_ranks_filter == std::set<int>{1});
  CHECK_FALSE(parse_ok({"--legacy", "./t"}).use_env);
  CHECK_FALSE(parse_ok({"--no-use-env", "./t"}).use_env);
  CHECK_FALSE(parse_ok({"--no_use_env", "./t"}).use_env);
  CHECK(parse_ok({"--use_env", "--no_python", "./t"}).use_env);
  CHECK(parse_ok({"--grace-period", "250ms", "./t"}).grace_period ==
        std::chrono::milliseconds(250));
  CHECK(parse_ok({"--grace_period", "2", "./t"}).grace_period == std::chrono::seconds(2));
  CHECK(parse_ok({"--rdzv-timeout", "1.5s", "./t"}).rdzv_timeout ==
        std::chrono::milliseconds(1500));
  CHECK(parse_ok({"--rdzv_conf", "timeout=90", "./t"}).rdzv_timeout == std::chrono::seconds(90));
  auto e = parse_ok({"--rdzv_endpoint", "node0:4000", "--rdzv_id", "job7", "./t"});
  CHECK(e.master_addr == "node0");
  CHECK(e.master_port == 4000);
  CHECK(e.run_id == "job7");
  CHECK(parse_ok({"--run-id", "abc", "./t"}).run_id == "abc");
  CHECK(parse_nproc_per_node("cpu") >= 1);
  CHECK(parse_nproc_per_node("auto") >= 1);
}

TEST_CASE("bad flags are usage errors that name the flag", "[launcher][options]") {
  CHECK_THAT(parse_bad({"--nproc-per-node", "two", "./t"}).message, Contains("--nproc-per-node"));
  CHECK_THAT(parse_bad({"--nnodes", "1:4", "./t"}).message, Contains("elastic"));
  CHECK_THAT(parse_bad({"--nnodes", "2", "--node-rank", "2", "./t"}).message,
             Contains("--node-rank 2"));
  CHECK_THAT(parse_bad({"--nproc-per-node", "2"}).message, Contains("no program"));
  CHECK_THAT(parse_bad({"--nproc-per-nod", "2", "./t"}).message, Contains("--nproc-per-nod"));
  CHECK_THAT(parse_bad({"--standalone", "--nnodes", "2", "./t"}).message, Contains("--standalone"));
  CHECK_THAT(parse_bad({"--tee=7", "./t"}).message, Contains("--tee"));
  CHECK_THAT(parse_bad({"-m", "train", "./t"}).message, Contains("--module"));
  CHECK_THAT(parse_bad({"--grace-period", "5 parsecs", "./t"}).message, Contains("--grace-period"));
  CHECK_THAT(parse_bad({"--master-port", "70000", "./t"}).message, Contains("70000"));
}

TEST_CASE("a --master-addr or --rdzv-endpoint no host can have is refused before any worker starts",
          "[launcher][options]") {
  const auto bad = [](const std::string& flag, const std::string& value) {
    return parse_bad({"--nnodes", "2", flag, value, "./t"}).message;
  };
  CHECK_THAT(bad("--master-addr", "127.0.0.1:29500"),
             Contains("--master-addr '127.0.0.1:29500'") && Contains("--master-port"));
  CHECK_THAT(bad("--master-addr", "[::1"), Contains("--master-addr '[::1'") && Contains("']'"));
  CHECK_THAT(bad("--master-addr", "[node0]"), Contains("not an IPv6 address"));
  CHECK_THAT(bad("--master-addr", std::string(5000, 'a')),
             Contains("5000 characters") && Contains("at most 253"));
  CHECK_THAT(bad("--master-addr", "node 0"), Contains("' '"));
  CHECK_THAT(bad("--master-addr", ""), Contains("--master-addr is empty"));
  CHECK_THAT(bad("--rdzv-endpoint", "[::1:29400"), Contains("--rdzv-endpoint"));
  CHECK_THAT(bad("--rdzv-endpoint", "no$such:29400"), Contains("--rdzv-endpoint 'no$such'"));
  // Names and literals pass as they are; brackets go.
  CHECK(parse_ok({"--nnodes", "2", "--master-addr", "[::1]", "./t"}).master_addr == "::1");
  CHECK(parse_ok({"--nnodes", "2", "--master-addr", "::1", "./t"}).master_addr == "::1");
  CHECK(parse_ok({"--nnodes", "2", "--master-addr", "node-0.cluster_a", "./t"}).master_addr ==
        "node-0.cluster_a");
}

TEST_CASE("durations are range-checked and refused naming the flag, never wrapped",
          "[launcher][options]") {
  // Before: 3000000h overflowed a nanosecond deadline ("within
  // -7646744073709551616ns"), 99999999999h became a grace period of 0 and a
  // timeout of 0 failed in the rendezvous with a confusing message.
  CHECK_THAT(parse_bad({"--rdzv-timeout", "3000000h", "./t"}).message,
             Contains("--rdzv-timeout '3000000h' is longer than the limit of 8760h"));
  CHECK_THAT(parse_bad({"--grace-period", "99999999999h", "./t"}).message,
             Contains("--grace-period '99999999999h' is longer than the limit"));
  CHECK_THAT(parse_bad({"--rdzv-timeout", "0", "./t"}).message,
             Contains("--rdzv-timeout '0' is no time at all"));
  CHECK_THAT(parse_bad({"--rdzv-conf", "timeout=0s", "./t"}).message,
             Contains("--rdzv-conf timeout '0s' is no time at all"));
  CHECK_THAT(parse_bad({"--rdzv-timeout", "0.1ms", "./t"}).message, Contains("at least 1ms"));
  for (const char* bad : {"-5", "1.2.3s", "nan", "inf", "1e9", "s", "5 h"}) {
    INFO(bad);
    CHECK_THAT(parse_bad({"--rdzv-timeout", bad, "./t"}).message, Contains("--rdzv-timeout"));
  }
  CHECK(parse_ok({"--grace-period", "0", "./t"}).grace_period == std::chrono::milliseconds(0));
  CHECK(parse_ok({"--rdzv-timeout", "8760h", "./t"}).rdzv_timeout == std::chrono::hours(8760));
  CHECK_THAT(parse_bad({"--rdzv-timeout", "8761h", "./t"}).message, Contains("longer than"));
  CHECK(parse_ok({"--rdzv-timeout", " 90s ", "./t"}).rdzv_timeout == std::chrono::seconds(90));
}

TEST_CASE("the c10d backend: MIN:MAX nodes, the endpoint's forms and torchrun's rdzv-conf keys",
          "[launcher][options][elastic]") {
  auto e = parse_ok({"--rdzv-backend", "c10d", "--rdzv-endpoint", "node0:29401", "--rdzv-id", "job",
                     "--nnodes", "2:4", "--rdzv-conf",
                     "last_call_timeout=5,join_timeout=90s,keep_alive_interval=2s,"
                     "keep_alive_max_attempt=4,is_host=false,read_timeout=60",
                     "./t"});
  CHECK(e.elastic);
  CHECK(e.min_nodes == 2);
  CHECK(e.max_nodes == 4);
  CHECK(e.master_addr == "node0");
  CHECK(e.master_port == 29401);
  CHECK(e.run_id == "job");
  CHECK(e.last_call_timeout == std::chrono::seconds(5));
  CHECK(e.rdzv_timeout == std::chrono::seconds(90));
  CHECK(e.keep_alive_interval == std::chrono::seconds(2));
  CHECK(e.keep_alive_max_attempt == 4);
  CHECK(e.is_host == std::optional<bool>(false));
  // torchrun's default port, IPv6 literals with and without a port.
  CHECK(parse_ok({"--rdzv-backend=c10d", "--rdzv-endpoint=node0", "./t"}).master_port == 29400);
  auto v6 = parse_ok({"--rdzv-backend=c10d", "--rdzv-endpoint=[fd00::1]:5000", "./t"});
  CHECK(v6.master_addr == "fd00::1");
  CHECK(v6.master_port == 5000);
  CHECK(parse_ok({"--rdzv-backend=c10d", "--rdzv-endpoint=[fd00::1]", "./t"}).master_port == 29400);
  CHECK(parse_ok({"--nnodes", "3", "./t"}).min_nodes == 3);
  CHECK_FALSE(parse_ok({"./t"}).elastic);

  CHECK_THAT(parse_bad({"--rdzv-backend", "c10d", "./t"}).message,
             Contains("--rdzv-backend c10d needs --rdzv-endpoint HOST:PORT"));
  CHECK_THAT(parse_bad({"--rdzv-backend", "etcd", "./t"}).message,
             Contains("--rdzv-backend 'etcd' is not supported"));
  CHECK_THAT(
      parse_bad({"--nnodes", "3:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "./t"})
          .message,
      Contains("--nnodes 3:2: MIN is above MAX"));
  CHECK_THAT(parse_bad({"--nnodes", "0:2", "./t"}).message, Contains("at least 1 node"));
  CHECK_THAT(parse_bad({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:0", "./t"}).message,
             Contains("needs a fixed port"));
  CHECK_THAT(parse_bad({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--node-rank", "1",
                        "--nnodes", "2", "./t"})
                 .message,
             Contains("--node-rank is assigned on arrival"));
  CHECK_THAT(parse_bad({"--rdzv-conf", "last_cal_timeout=3", "./t"}).message,
             Contains("--rdzv-conf: unknown key 'last_cal_timeout'"));
  CHECK_THAT(parse_bad({"--rdzv-conf", "is_host=maybe", "./t"}).message,
             Contains("--rdzv-conf is_host='maybe' is not true or false"));
  CHECK_THAT(parse_bad({"--rdzv-conf", "keep_alive_interval=0", "./t"}).message,
             Contains("--rdzv-conf keep_alive_interval '0' is no time at all"));
  CHECK_THAT(parse_bad({"--rdzv-endpoint", "[fd00::1", "./t"}).message, Contains("no closing ']'"));
}

TEST_CASE("help documents every flag with an example", "[launcher][options]") {
  auto r = parse_launch_options({"collie-run", "--help"});
  REQUIRE_FALSE(r.options);
  CHECK(r.exit_code == 0);
  for (const char* flag :
       {"--nnodes", "--node-rank", "--nproc-per-node", "--master-addr", "--master-port",
        "--standalone", "--max-restarts", "--log-dir", "--tee", "--local-ranks-filter", "--run-id",
        "--no-python", "--legacy", "--use-env", "--grace-period", "--rdzv-timeout",
        "--rdzv-endpoint", "--role"}) {
    INFO(flag);
    CHECK_THAT(r.message, Contains(flag));
  }
  // Every option but --help/--version carries an "(e.g. ...)" example.
  std::vector<std::string> blocks;
  std::istringstream in(r.message);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  -", 0) == 0)
      blocks.push_back(line);
    else if (!blocks.empty() && line.rfind("      ", 0) == 0)
      blocks.back() += line;
    else if (line.empty() && !blocks.empty())
      break;
  }
  CHECK(blocks.size() >= 25);
  for (const auto& b : blocks) {
    if (b.rfind("  -h,--help", 0) == 0 || b.rfind("  --version", 0) == 0) continue;
    INFO(b);
    CHECK_THAT(b, Contains("e.g."));
  }
  CHECK_THAT(r.message, Contains("e.g. --nproc-per-node 4"));
  CHECK_THAT(r.message, Contains("Examples:"));
}

TEST_CASE("LineSplitter hands on whole lines whatever the chunking", "[launcher][output]") {
  std::vector<std::string> lines;
  LineSplitter s([&](std::string_view l) { lines.emplace_back(l); }, 8);
  s.feed("ab");
  s.feed("c\nde");
  CHECK(lines == std::vector<std::string>{"abc"});
  s.feed("f\n\ng");
  CHECK(lines == std::vector<std::string>{"abc", "def", ""});
  s.feed("hijklmnopq");  // a 11-byte line: split at the 8-byte cap
  CHECK(lines.back() == "ghijklmn");
  s.finish();
  CHECK(lines.back() == "opq");
  s.finish();
  CHECK(lines.size() == 5);
}

TEST_CASE("worker variables and line prefixes", "[launcher][env]") {
  WorkerPlace p{.local_rank = 1,
                .global_rank = 5,
                .world_size = 8,
                .local_world_size = 4,
                .group_rank = 1,
                .group_world_size = 2};
  AttemptEnv a{.master_addr = "10.1.1.1",
               .master_port = 4242,
               .restart_count = 2,
               .max_restarts = 3,
               .run_id = "j",
               .role = "trainer",
               .default_omp_threads = true};
  auto v = worker_variables(p, a);
  CHECK(v.at("RANK") == "5");
  CHECK(v.at("LOCAL_RANK") == "1");
  CHECK(v.at("GROUP_RANK") == "1");
  CHECK(v.at("ROLE_RANK") == "5");
  CHECK(v.at("ROLE_NAME") == "trainer");
  CHECK(v.at("MASTER_PORT") == "4242");
  CHECK(v.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(v.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
  CHECK(v.at("OMP_NUM_THREADS") == "1");
  CHECK(WorkerGroup::expand_prefix("[rank${rank}]: ", p, "trainer") == "[rank5]: ");
  CHECK(WorkerGroup::expand_prefix("[${role_name}${local_rank}]:", p, "trainer") == "[trainer1]:");
}

TEST_CASE("the failure summary names the root cause and shows its stderr", "[launcher][summary]") {
  AttemptResult r;
  r.outcome = AttemptOutcome::kFailed;
  r.start_time = std::chrono::system_clock::now();
  for (int i = 0; i < 3; ++i) {
    WorkerResult w;
    w.place = {.local_rank = i,
               .global_rank = 4 + i,
               .world_size = 8,
               .local_world_size = 3,
               .group_rank = 1,
               .group_world_size = 2};
    w.pid = 100 + i;
    w.exit_time = r.start_time + std::chrono::milliseconds(1500);
    r.workers.push_back(w);
  }
  r.workers[1].exit.exit_code = 3;
  r.workers[1].stderr_tail = {"Traceback", "ValueError: bad batch"};
  r.workers[0].exit.signal = 15;
  r.workers[0].stopped_by_launcher = true;
  r.workers[2].exit.exit_code = 0;
  r.first_failure = 1;
  std::string s = format_failure_summary(
      r, {.node_rank = 1, .hostname = "h", .attempt = 0, .max_restarts = 0, .run_id = "j"});
  CHECK_THAT(s, Contains("root cause: rank 5 (local rank 1, pid 101) ended with exit code 3"));
  CHECK_THAT(s, Contains("1.50s after the start"));
  CHECK_THAT(s, Contains("signal 15 (SIGTERM)"));
  CHECK_THAT(s, Contains("(stopped by collie-run)"));
  CHECK_THAT(s, Contains("<- root cause"));
  CHECK_THAT(s, Contains("ValueError: bad batch"));
  CHECK_THAT(s, Contains("(1 other worker exited 0)"));
  CHECK_THAT(s, Contains("node 1 (h)"));
}
