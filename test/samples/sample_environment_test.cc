// The samples in a bad environment or without a store: a message naming the
// culprit and exit code 1, never std::terminate, and --timeout (or
// COLLIE_TIMEOUT) bounds the wait for a store that is not there.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <optional>

#include "collie/base/str_cat.h"
#include "collie/test/samples/blip_job.h"
#include "collie/test/support/subprocess.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

const std::string kBin = COLLIE_BIN_DIR;

// A TCP port on 127.0.0.1 that refuses connections for as long as this
// lives: bound, never listening, so no one else can take it.
class RefusingPort {
 public:
  RefusingPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

// Each sample's command line, run as a rank by hand (no launcher).
const std::vector<std::pair<std::string, std::vector<std::string>>> kSamples = {
    {"hello_allreduce", {kBin + "/hello_allreduce"}},
    {"blip_train", {kBin + "/blip_train", "--synthetic", "--epochs", "1"}},
    {"rendezvous_demo", {kBin + "/rendezvous_demo", "--worker"}},
};

using Env = std::map<std::string, std::optional<std::string>>;

Subprocess run_with(const std::vector<std::string>& argv, const Env& env) {
  SpawnOptions o = without_launcher();
  for (const auto& [k, v] : env) o.env[k] = v;
  o.env["COLLIE_DEMO_T0_MS"] = "0";  // what rendezvous_demo's parent would set
  return Subprocess::spawn(argv, o);
}

}  // namespace

TEST_CASE("the samples refuse a bad launch environment with a message and exit code 1") {
  struct Case {
    Env env;
    std::string culprit;
  };
  const std::vector<Case> cases = {
      {{{"RANK", "abc"}, {"WORLD_SIZE", "2"}}, "RANK='abc'"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0'"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "99999"}},
       "MASTER_PORT='99999'"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}, "MASTER_ADDR"},
  };
  for (const auto& [name, argv] : kSamples) {
    for (const auto& c : cases) {
      auto p = run_with(argv, c.env);
      auto st = p.wait(std::chrono::minutes(1));
      INFO(name << " expecting " << c.culprit << "\nstdout:\n"
                << p.out() << "\nstderr:\n"
                << p.err());
      CHECK(st.signal == 0);  // not std::terminate's SIGABRT
      CHECK(st.exit_code == 1);
      CHECK_THAT(p.err(), Contains(name) && Contains(c.culprit));
      CHECK_THAT(p.err(), !Contains("terminate called"));
    }
  }
}

TEST_CASE("hello_allreduce and blip_train refuse a --timeout or COLLIE_TIMEOUT that is not one") {
  for (const auto& [name, argv] : kSamples) {
    if (name == "rendezvous_demo") continue;  // its --timeout is the parent's job deadline
    auto with_flag = argv;
    with_flag.insert(with_flag.end(), {"--timeout", "soon"});
    auto p = run_with(with_flag, {});
    auto q = run_with(argv, {{"COLLIE_TIMEOUT", "0s"}});
    INFO(name << "\n" << p.err() << q.err());
    CHECK(p.wait(std::chrono::minutes(1)).exit_code == 1);
    CHECK_THAT(p.err(), Contains("--timeout 'soon'"));
    CHECK(q.wait(std::chrono::minutes(1)).exit_code == 1);
    CHECK_THAT(q.err(), Contains("COLLIE_TIMEOUT '0s'"));
  }
}

TEST_CASE("with no store to reach, --timeout 2s or COLLIE_TIMEOUT=2s ends the wait, naming it") {
  RefusingPort store;
  const std::string address = str_cat("127.0.0.1:", store.port());
  const Env rank1 = {{"RANK", "1"},
                     {"WORLD_SIZE", "2"},
                     {"MASTER_ADDR", "127.0.0.1"},
                     {"MASTER_PORT", std::to_string(store.port())}};
  for (const auto& [name, argv] : kSamples) {
    if (name == "rendezvous_demo") continue;
    auto with_flag = argv;
    with_flag.insert(with_flag.end(), {"--timeout", "2s"});
    Env with_env = rank1;
    with_env["COLLIE_TIMEOUT"] = "2s";
    std::vector<Subprocess> runs;
    runs.push_back(run_with(with_flag, rank1));
    runs.push_back(run_with(argv, with_env));
    for (auto& p : runs) {
      // The limit is what ends the wait: a deadline far below the 30-minute
      // default, not a speed claim (2s plus start-up, on a loaded machine).
      auto st = p.wait(std::chrono::minutes(2));
      INFO(name << ": " << p.command_line() << "\n" << p.out() << p.err());
      CHECK(st.exit_code == 1);
      CHECK_THAT(p.err(), Contains(address));
      CHECK_THAT(p.err(), Contains("limit 2.00s"));
    }
  }
}
