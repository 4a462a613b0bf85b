// Two jobs on one machine asking for the same --master-port at the same
// time. The only acceptable outcomes: both complete with their own correct
// results, or one refuses to start with a message naming the port while the
// other completes. Never a mix: every rank's all_reduce input carries its
// job's token, so a rank that rendezvoused with the other job's ranks would
// compute a wrong sum and fail.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>

#include "collie/base/check.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/faults/fault_harness.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

// A port that was free a moment ago. Binding port 0 and closing is racy in
// general (someone else may take the port before collie-run binds it); it
// is acceptable only here, because this test needs one fixed port number
// for two launchers on purpose, and a lost race only makes both launchers
// refuse the port, which the test reports rather than hides.
uint16_t free_port_now() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

// args: job token. 50 all_reduces whose inputs carry the token.
COLLIE_TEST_CHILD(token_job) {
  const int64_t token = std::stoll(args.at(0));
  init_process_group({.backend = "cpu", .timeout = std::chrono::seconds(60)});
  const int rank = get_rank(), world = get_world_size();
  COLLIE_CHECK(world == 2, "joined a group of ", world);
  for (int k = 0; k < 50; ++k) {
    std::vector<int64_t> v(4096, token * 1000 + rank + k);
    all_reduce(view(v.data(), v.size()));
    const int64_t want = 2 * (token * 1000 + k) + 1;
    COLLIE_CHECK(v[0] == want && v[4095] == want, "job ", token, " all_reduce #", k, " got ", v[0],
                 ", expected ", want, ": data from another job");
  }
  std::printf("job %lld done\n", static_cast<long long>(token));
  destroy_process_group();
  return 0;
}

TEST_CASE(
    "two collie-run jobs asking for the same master port: both correct or one refuses, never a mix",
    "[faults][ports][launcher]") {
  const uint16_t port = free_port_now();
  auto flags = [&] {
    return std::vector<std::string>{
        "--nnodes",      "1",         "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port",    std::to_string(port)};
  };
  auto a = Subprocess::spawn(collie_run_argv(flags(), "token_job", {"1"}),
                             {.env = clean_env(), .new_process_group = true});
  auto b = Subprocess::spawn(collie_run_argv(flags(), "token_job", {"2"}),
                             {.env = clean_env(), .new_process_group = true});
  auto sa = a.wait(std::chrono::seconds(90));
  auto sb = b.wait(std::chrono::seconds(90));
  INFO("job 1: " << sa.describe() << "\n"
                 << a.err() << a.out() << "\njob 2: " << sb.describe() << "\n"
                 << b.err() << b.out());
  const bool a_done = sa.ok() && a.out().find("job 1 done") != std::string::npos;
  const bool b_done = sb.ok() && b.out().find("job 2 done") != std::string::npos;
  const std::string port_text = std::to_string(port);
  const bool a_refused = !sa.ok() && a.err().find(port_text) != std::string::npos;
  const bool b_refused = !sb.ok() && b.err().find(port_text) != std::string::npos;
  CHECK(((a_done && b_done) || (a_done && b_refused) || (b_done && a_refused)));
  // Nobody computed with the other job's data.
  CHECK_THAT(a.err() + a.out() + b.err() + b.out(), !Contains("data from another job"));
  std::string refusal;
  for (Subprocess* p : {&a, &b})
    if (size_t at = p->err().find(port_text);
        at != std::string::npos && !(p == &a ? sa : sb).ok()) {
      size_t s = p->err().rfind('\n', at);
      refusal = p->err().substr(s == std::string::npos ? 0 : s + 1,
                                p->err().find('\n', at) - (s == std::string::npos ? 0 : s + 1));
    }
  record("two collie-run jobs, same --master-port",
         a_done && b_done ? std::string("both completed correctly")
                          : str_cat("one completed, the other refused: ", refusal));
}
