// collie-run end to end on one node: the workers' environment, the rank
// prefix on every line, --local-ranks-filter, --log-dir/--tee, and the legacy
// --local_rank mode. Every test runs the real launcher with this executable
// as the worker program.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "collie/base/str_cat.h"
#include "collie/test/runtime/launcher/launcher_harness.h"
#include "collie/test/support/child.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

// "[rank2]: KEY=value" lines -> per rank, per key.
std::map<int, std::map<std::string, std::string>> parse_env_dump(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> env;
  static const std::regex re(R"(^\[rank(\d+)\]: ([A-Z_]+)=(.*)$)");
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) env[std::stoi(m[1])][m[2]] = m[3];
  }
  return env;
}

}  // namespace

TEST_CASE("workers get torchrun's environment", "[launcher][env]") {
  auto p = start_launcher({"--standalone", "--nproc-per-node", "3", "--run-id", "envtest",
                           "--max-restarts", "2", "--role", "trainer"},
                          "env_dump");
  auto st = p.wait(kLaunchTimeout);
  INFO(p.err());
  REQUIRE(st.ok());
  auto env = parse_env_dump(p.out());
  REQUIRE(env.size() == 3);
  uint16_t port = agent_store_port(p.err());
  for (int r = 0; r < 3; ++r) {
    auto& e = env[r];
    INFO("rank " << r);
    CHECK(e["RANK"] == std::to_string(r));
    CHECK(e["LOCAL_RANK"] == std::to_string(r));
    CHECK(e["WORLD_SIZE"] == "3");
    CHECK(e["LOCAL_WORLD_SIZE"] == "3");
    CHECK(e["GROUP_RANK"] == "0");
    CHECK(e["GROUP_WORLD_SIZE"] == "1");
    CHECK(e["ROLE_RANK"] == std::to_string(r));
    CHECK(e["ROLE_WORLD_SIZE"] == "3");
    CHECK(e["ROLE_NAME"] == "trainer");
    CHECK(e["MASTER_ADDR"] == "127.0.0.1");
    CHECK(e["MASTER_PORT"] == std::to_string(port));
    CHECK(port != 0);
    CHECK(e["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(e["TORCHELASTIC_MAX_RESTARTS"] == "2");
    CHECK(e["TORCHELASTIC_RUN_ID"] == "envtest");
    CHECK(e["TORCHELASTIC_USE_AGENT_STORE"] == "True");
    CHECK(e["OMP_NUM_THREADS"] == "1");
  }
  // torchrun's notice, word for word, once.
  const std::string notice =
      "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
      "your system being overloaded, please further tune the variable for optimal performance in "
      "your application as needed.";
  CHECK_THAT(p.err(), Contains(notice));

  // A user's OMP_NUM_THREADS is kept and no notice is printed; one worker
  // gets no default at all.
  auto q = start_launcher({"--standalone", "--nproc-per-node", "2"}, "env_dump", {},
                          {{"OMP_NUM_THREADS", "7"}});
  REQUIRE(q.wait(kLaunchTimeout).ok());
  CHECK(parse_env_dump(q.out())[1]["OMP_NUM_THREADS"] == "7");
  CHECK(q.err().find("OMP_NUM_THREADS") == std::string::npos);
  auto one = start_launcher({"--standalone"}, "env_dump");
  REQUIRE(one.wait(kLaunchTimeout).ok());
  CHECK(parse_env_dump(one.out())[0]["OMP_NUM_THREADS"] == "<unset>");
  CHECK(parse_env_dump(one.out())[0]["TORCHELASTIC_RUN_ID"] == "none");
}

TEST_CASE("every line arrives whole with its rank prefix, and partial last lines are flushed",
          "[launcher][output]") {
  const int lines = 150, nproc = 3;
  // 5000-byte lines, written in three pieces each: larger than PIPE_BUF, so
  // the launcher must join pieces and never interleave two ranks mid-line.
  auto p = start_launcher({"--standalone", "--nproc-per-node", std::to_string(nproc)}, "chatter",
                          {std::to_string(lines), "5000"});
  REQUIRE(p.wait(kLaunchTimeout).ok());
  std::string out = p.out(), err = p.err();
  static const std::regex line_re(R"(^\[rank(\d)\]: rank (\d) line (\d+) ([a-z]+) end$)");
  std::map<int, int> count;
  std::istringstream in(out);
  std::string line;
  int partial = 0;
  while (std::getline(in, line)) {
    if (line.find("partial last line") != std::string::npos) {
      CHECK(std::regex_match(line, std::regex(R"(^\[rank(\d)\]: partial last line of rank \1$)")));
      ++partial;
      continue;
    }
    std::smatch m;
    INFO(line.substr(0, 200));
    REQUIRE(std::regex_match(line, m, line_re));
    CHECK(m[1] == m[2]);                               // the prefix names the writer
    CHECK(m[4].length() == 5000);                      // nothing lost or mixed in
    CHECK(count[std::stoi(m[1])] == std::stoi(m[3]));  // in order
    ++count[std::stoi(m[1])];
  }
  CHECK(partial == nproc);
  for (int r = 0; r < nproc; ++r) CHECK(count[r] == lines);
  for (int r = 0; r < nproc; ++r)
    CHECK(lines_with_prefix(err, str_cat("[rank", r, "]: err ", r, " line")).size() == lines);
}

TEST_CASE("the local ranks filter keeps only those ranks on the console", "[launcher][output]") {
  auto p = start_launcher({"--standalone", "--nproc-per-node", "3", "--local-ranks-filter", "1"},
                          "chatter", {"5", "10"});
  REQUIRE(p.wait(kLaunchTimeout).ok());
  CHECK(lines_with_prefix(p.out(), "[rank1]: ").size() == 6);
  CHECK(lines_with_prefix(p.err(), "[rank1]: ").size() == 5);
  CHECK(lines_with_prefix(p.out(), "[rank0]").empty());
  CHECK(lines_with_prefix(p.out(), "[rank2]").empty());
  CHECK(lines_with_prefix(p.err(), "[rank0]").empty());
}

TEST_CASE("a log dir gets one file per rank and stream per attempt, and tee also shows them",
          "[launcher][output]") {
  TempDir dir;
  auto p = start_launcher(
      {"--standalone", "--nproc-per-node", "2", "--log-dir", dir.path(), "--run-id", "logs"},
      "chatter", {"4", "3"});
  REQUIRE(p.wait(kLaunchTimeout).ok());
  CHECK(lines_with_prefix(p.out(), "[rank").empty());  // files only
  for (int r = 0; r < 2; ++r) {
    std::string base = str_cat(dir.path(), "/logs/attempt_0/", r, "/");
    std::string out = read_text_file(base + "stdout.log"),
                err = read_text_file(base + "stderr.log");
    CHECK(lines_with_prefix(out, str_cat("rank ", r, " line ")).size() == 4);
    CHECK_THAT(out, Contains(str_cat("partial last line of rank ", r)));
    CHECK(lines_with_prefix(err, str_cat("err ", r, " line ")).size() == 4);
    CHECK(out.find("[rank") == std::string::npos);  // files carry no prefix
  }

  auto t = start_launcher({"--standalone", "--nproc-per-node", "2", "--log-dir", dir.path(),
                           "--run-id", "teed", "--tee", "--local-ranks-filter", "0"},
                          "chatter", {"4", "3"});
  REQUIRE(t.wait(kLaunchTimeout).ok());
  CHECK(lines_with_prefix(t.out(), "[rank0]: rank 0 line").size() == 4);
  CHECK(lines_with_prefix(t.out(), "[rank1]").empty());
  // The filter is for the console only: rank 1 still has its files.
  CHECK(
      lines_with_prefix(read_text_file(dir.path() + "/teed/attempt_0/1/stdout.log"), "rank 1 line")
          .size() == 4);

  // --tee 2: stderr on the console and in the file, stdout in the file only.
  auto e =
      start_launcher({"--standalone", "--log-dir", dir.path(), "--run-id", "tee2", "--tee", "2"},
                     "chatter", {"2", "3"});
  REQUIRE(e.wait(kLaunchTimeout).ok());
  CHECK(lines_with_prefix(e.out(), "[rank0]").empty());
  CHECK(lines_with_prefix(e.err(), "[rank0]: err 0 line").size() == 2);
}

TEST_CASE("legacy torch.distributed.launch mode passes --local_rank=N first",
          "[launcher][legacy]") {
  // The flag goes right after the program path, as torch.distributed.launch
  // does, so the worker here is a script that hands it on to the test child.
  TempDir dir;
  std::string script = dir.file("worker.sh");
  {
    std::ofstream s(script);
    s << "#!/bin/sh\nexec '" << self_exe() << "' --collie-child argv_dump \"$@\"\n";
  }
  ::chmod(script.c_str(), 0755);
  auto env = clean_launch_env();
  std::vector<std::string> argv{collie_run_path(), "--standalone", "--nproc-per-node", "2",
                                "--legacy",        script,         "--epochs",         "3"};
  auto p = Subprocess::spawn(argv, {.env = env});
  REQUIRE(p.wait(kLaunchTimeout).ok());
  CHECK(lines_with_prefix(p.out(), "[rank0]: args=--local_rank=0 --epochs 3").size() == 1);
  CHECK(lines_with_prefix(p.out(), "[rank1]: args=--local_rank=1 --epochs 3").size() == 1);

  // The default (--use-env): no extra argument, LOCAL_RANK in the environment.
  argv = {collie_run_path(), "--standalone", "--nproc-per-node", "2", script, "--epochs", "3"};
  auto q = Subprocess::spawn(argv, {.env = env});
  REQUIRE(q.wait(kLaunchTimeout).ok());
  CHECK(lines_with_prefix(q.out(), "[rank1]: args=--epochs 3").size() == 1);
  CHECK(lines_with_prefix(q.out(), "[rank1]: LOCAL_RANK=1").size() == 1);
}

TEST_CASE("usage errors and a missing program exit 2 with a message", "[launcher][options]") {
  auto p = Subprocess::spawn({collie_run_path(), "--nproc-per-node", "x", "./train"});
  CHECK(p.wait(kLaunchTimeout).exit_code == 2);
  CHECK_THAT(p.err(), Contains("--nproc-per-node"));
  auto q = Subprocess::spawn({collie_run_path(), "--standalone", "/no/such/program"});
  CHECK(q.wait(kLaunchTimeout).exit_code == 2);
  CHECK_THAT(q.err(), Contains("/no/such/program"));
  auto h = Subprocess::spawn({collie_run_path(), "--help"});
  CHECK(h.wait(kLaunchTimeout).ok());
  CHECK_THAT(h.out(), Contains("--nproc-per-node"));
}

TEST_CASE("tee without a log dir logs to a temporary folder it names, like torchrun",
          "[launcher][output]") {
  auto p = start_launcher({"--standalone", "--tee", "1"}, "chatter", {"2", "3"});
  REQUIRE(p.wait(kLaunchTimeout).ok());
  std::smatch m;
  std::string err = p.err();
  REQUIRE(std::regex_search(err, m, std::regex("logging to (/tmp/collie-run-[A-Za-z0-9]+)")));
  const std::string dir = m[1];
  CHECK(lines_with_prefix(read_text_file(dir + "/none/attempt_0/0/stdout.log"), "rank 0 line")
            .size() == 2);
  CHECK(lines_with_prefix(p.out(), "[rank0]: rank 0 line").size() == 2);  // teed
  CHECK(lines_with_prefix(p.err(), "[rank0]: err 0").empty());            // stderr: file only
  std::filesystem::remove_all(dir);
}
