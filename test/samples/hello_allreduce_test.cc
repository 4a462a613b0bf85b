// hello_allreduce, the README's quick start: it runs under collie-run and
// prints what the README says, and the README shows its code as it is.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "collie/base/str_cat.h"
#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

const std::string kBin = COLLIE_BIN_DIR;
const std::string kSource = COLLIE_SOURCE_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  INFO(path);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The body of the first ```<lang> block after `from` in `text`.
std::string fenced_block(const std::string& text, size_t from, const std::string& lang,
                         size_t* end = nullptr) {
  const std::string open = "```" + lang + "\n";
  const size_t start = text.find(open, from);
  REQUIRE(start != std::string::npos);
  const size_t body = start + open.size();
  const size_t close = text.find("\n```", body);
  REQUIRE(close != std::string::npos);
  if (end != nullptr) *end = close + 4;
  return text.substr(body, close + 1 - body);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

struct QuickStart {
  std::string code;     // the ```cpp block
  std::string command;  // the ```sh block's first line
  std::string output;   // its "# " line, without the "# "
};

QuickStart readme_quick_start() {
  const std::string readme = read_text(kSource + "/README.md");
  const size_t section = readme.find("\n## Quick start\n");
  REQUIRE(section != std::string::npos);
  QuickStart q;
  size_t after_code = 0;
  q.code = fenced_block(readme, section, "cpp", &after_code);
  const auto sh = lines(fenced_block(readme, after_code, "sh"));
  REQUIRE(sh.size() == 2);
  REQUIRE(sh[1].rfind("# ", 0) == 0);
  q.command = sh[0];
  q.output = sh[1].substr(2);
  return q;
}

// Runs a README command line: "build/bin/" is this build's bin folder.
Subprocess run_readme_command(const std::string& command) {
  std::vector<std::string> argv;
  std::istringstream words(command);
  for (std::string w; words >> w;)
    argv.push_back(w.rfind("build/bin/", 0) == 0 ? kBin + w.substr(9) : w);
  return Subprocess::spawn(argv);
}

}  // namespace

TEST_CASE("hello_allreduce on 3 ranks under collie-run prints the sum on rank 0 only") {
  auto p = Subprocess::spawn(
      {kBin + "/collie-run", "--standalone", "--nproc-per-node", "3", kBin + "/hello_allreduce"});
  auto st = p.wait(std::chrono::minutes(2));
  INFO(p.out() << p.err());
  REQUIRE(st.ok());
  const std::string out = p.out();
  CHECK_THAT(out, Contains("[rank0]: world size 3 all_reduce -> 6 expected 6\n"));
  // setup_for_distributed(is_main_process()): ranks 1 and 2 print nothing.
  size_t lines = 0;
  for (size_t at = out.find("all_reduce ->"); at != std::string::npos;
       at = out.find("all_reduce ->", at + 1))
    ++lines;
  CHECK(lines == 1);
}

// The shared-memory segments are memfds: /dev/shm's size does not limit
// them, so a 1 MiB /dev/shm (Docker's default is 64 MiB) must not refuse a
// job whose segments are 2 MiB each, nor make it fall back to sockets.
TEST_CASE("a 1 MiB /dev/shm neither refuses a job nor keeps it off shared memory") {
  const std::string job =
      str_cat("mount -t tmpfs -o size=1m tmpfs /dev/shm && exec ", kBin,
              "/collie-run --standalone --nproc-per-node 2 ", kBin, "/hello_allreduce");
  auto probe = Subprocess::spawn({"/usr/bin/unshare", "--mount", "--propagation", "private", "sh",
                                  "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"});
  const auto can = probe.wait(std::chrono::seconds(30));
  require_or_skip(can.ok(), str_cat("a private mount namespace with a 1 MiB /dev/shm cannot be "
                                    "made here (unshare --mount as root): ",
                                    probe.err()));
  auto p = Subprocess::spawn(
      {"/usr/bin/unshare", "--mount", "--propagation", "private", "sh", "-c", job},
      {.env = {{"COLLIE_LOG_LEVEL", "INFO"}}});
  auto st = p.wait(std::chrono::minutes(2));
  INFO(p.out() << p.err());
  REQUIRE(st.ok());
  CHECK_THAT(p.out(), Contains("all_reduce -> 3 expected 3"));
  CHECK_THAT(p.err(), !Contains("/dev/shm") && !Contains("does not work"));
}

TEST_CASE("the README's quick start is samples/hello_allreduce/hello_allreduce.cc") {
  // The file's leading comment (what it is, how to run it) is the README's
  // prose; everything from the first #include on must be the same text.
  std::string source = read_text(kSource + "/samples/hello_allreduce/hello_allreduce.cc");
  while (source.rfind("//", 0) == 0) source.erase(0, source.find('\n') + 1);
  const QuickStart q = readme_quick_start();
  CHECK(q.code == source);
}

TEST_CASE("the README's quick start prints the line the README shows") {
  const QuickStart q = readme_quick_start();
  INFO(q.command);
  auto p = run_readme_command(q.command);
  auto st = p.wait(std::chrono::minutes(2));
  INFO(p.out() << p.err());
  REQUIRE(st.ok());
  const auto out = lines(p.out());
  CHECK(std::count(out.begin(), out.end(), q.output) == 1);
}
