// Network trouble between two hosts: two network namespaces joined by a
// veth pair (test/support/netns_pair.h), one rank in each, the data
// connections over the veth (COLLIE_SOCKET_IFNAME). This
// kernel has no tc netem, so: packet loss is an nftables rule inside
// namespace b dropping a random share of incoming packets (numgen random),
// a rate limit is a tc tbf qdisc on b's side of the link, and the link is
// finally taken down mid-collective. Results must stay exactly right under
// loss and rate limits (the time is recorded); a dead link must end in a
// clear error at the call's deadline, not a hang. Skipped, with the reason,
// where namespaces cannot be created. The namespaces (and with them the
// veth, the rules and the qdisc) are removed at the end, even on failure.
// Added latency: no netem either, so each namespace redirects its outgoing
// connections into a small delaying proxy (delay_proxy.cc) with nftables.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/netns_pair.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

// Rank 0 in namespace a, rank 1 in b, each bound to its veth end.
std::vector<Subprocess> start_pair(NetnsPair& ns, const std::string& rdzv,
                                   const std::vector<std::string>& args) {
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> argv = ns.exec_in(rank == 0 ? ns.a : ns.b);
    std::vector<std::string> child_args{rdzv, std::to_string(rank)};
    child_args.insert(child_args.end(), args.begin(), args.end());
    for (auto& s : child_argv("net_rank", child_args)) argv.push_back(s);
    procs.push_back(Subprocess::spawn(
        argv, {.env = clean_env({{"COLLIE_SOCKET_IFNAME", rank == 0 ? ns.dev_a : ns.dev_b}})}));
  }
  return procs;
}

// Runs `iterations` all_reduces of `count` floats on both ranks; returns
// the seconds rank 0 took, failing the test on any error.
double timed_run(NetnsPair& ns, const std::string& what, int iterations, int count) {
  TempDir dir;
  auto procs =
      start_pair(ns, dir.file("rdzv"), {std::to_string(iterations), std::to_string(count), "0"});
  std::string report;
  bool ok = true;
  for (int rank = 0; rank < 2; ++rank) {
    auto st = procs[rank].wait(std::chrono::seconds(120));
    ok = ok && st.ok();
    report +=
        str_cat("rank ", rank, " ", st.describe(), "\n", procs[rank].out(), procs[rank].err());
  }
  INFO(what << "\n" << report);
  REQUIRE(ok);
  auto ms = find_int(procs[0].out(), "run_ms");
  REQUIRE(ms.has_value());
  record(str_cat("netns: ", what), str_cat(iterations, " all_reduces of ", count * 4 / 1024,
                                           " KiB exactly right in ", *ms, " ms"));
  return static_cast<double>(*ms);
}

}  // namespace

// args: rdzv path, rank, iterations (0: until an error), float count,
// per-call timeout ms (0: the group's 60 s).
COLLIE_TEST_CHILD(net_rank) {
  const int rank = std::stoi(args.at(1));
  const int iterations = std::stoi(args.at(2));
  const size_t count = std::stoul(args.at(3));
  const int call_ms = std::stoi(args.at(4));
  init_process_group({.backend = "cpu",
                      .init_method = "file://" + args.at(0),
                      .world_size = 2,
                      .rank = rank,
                      .timeout = std::chrono::seconds(60)});
  const auto start = Clock::now();
  std::vector<float> v(count);
  try {
    for (int k = 0; iterations == 0 || k < iterations; ++k) {
      for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(rank * 5 + (i + k) % 11);
      get_default_group()
          ->all_reduce(view(v.data(), count),
                       {.timeout = call_ms > 0 ? Timeout(call_ms) : kUnsetTimeout})
          ->wait();
      for (size_t i = 0; i < count; ++i)
        COLLIE_CHECK(v[i] == static_cast<float>(5 + 2 * ((i + k) % 11)), "all_reduce #", k,
                     " element ", i, " is ", v[i]);
      if (k == 3) {
        std::printf("looping\n");
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    print_caught(e);
    std::_Exit(3);
  }
  std::printf(
      "run_ms=%lld\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
  std::fflush(stdout);
  std::_Exit(0);  // no teardown handshake: the scenarios below may have cut the link
}

TEST_CASE(
    "between network namespaces: loss and rate limits keep results exact, a downed link errors",
    "[faults][netns][slow]") {
  // a (10.231.9.1) and b (10.231.9.2).
  auto pair = namespaces_or_skip<NetnsPair>("f", "10.231.9");
  NetnsPair& ns = *pair;
  constexpr int kIters = 10, kCount = 1 << 18;  // 1 MiB per call
  timed_run(ns, "clean veth (baseline)", kIters, kCount);

  SECTION("10% of b's incoming packets dropped (nftables numgen random)") {
    for (const char* step :
         {"nft add table inet collie_faults",
          "nft add chain inet collie_faults in '{ type filter hook input priority 0; }'",
          "nft add rule inet collie_faults in numgen random mod 100 '<' 10 counter drop"}) {
      auto [rc, out] = shell(str_cat(ip_path(), " netns exec ", ns.b, " ", step));
      INFO(step << ": " << out);
      REQUIRE(rc == 0);
    }
    // veth segments are large (GRO), so 10% of packets is a modest share
    // of the bytes; the counter records how many were really dropped.
    timed_run(ns, "10% packet loss into b", 3 * kIters, kCount);
    auto [rc, out] =
        shell(str_cat(ip_path(), " netns exec ", ns.b, " nft list table inet collie_faults"));
    const size_t at = out.find("packets");
    REQUIRE(at != std::string::npos);
    CHECK(std::stoll(out.substr(at + 8)) > 0);
    record("netns: 10% packet loss into b",
           "nftables dropped " + out.substr(at, out.find(" drop", at) - at));
  }
  SECTION("5 ms added each way by a delaying proxy in both namespaces") {
    // No netem here: each namespace redirects its outgoing connections to
    // the other's address into a local delaying proxy (delay_proxy.cc).
    std::vector<Subprocess> proxies;
    for (const auto& [in_ns, peer] : {std::pair{ns.a, ns.addr_b}, std::pair{ns.b, ns.addr_a}}) {
      std::vector<std::string> argv = ns.exec_in(in_ns);
      for (auto& s : child_argv("delay_proxy", {"5"})) argv.push_back(s);
      proxies.push_back(Subprocess::spawn(argv));
      std::string out = proxies.back().wait_for_output("\n", std::chrono::seconds(30));
      const auto port = *find_int(out, "port");
      for (const std::string& step :
           {std::string("nft add table ip collie_delay"),
            std::string(
                "nft add chain ip collie_delay out '{ type nat hook output priority -100; }'"),
            str_cat("nft add rule ip collie_delay out meta mark != 0x2a ip daddr ", peer,
                    " tcp dport 1-65535 redirect to :", port)}) {
        auto [rc, sout] = shell(str_cat(ip_path(), " netns exec ", in_ns, " ", step));
        INFO(step << ": " << sout);
        REQUIRE(rc == 0);
      }
    }
    timed_run(ns, "5 ms each way through delaying proxies", kIters, kCount);
    size_t proxied = 0;
    for (auto& p : proxies)
      for (size_t at = p.out().find("proxied"); at != std::string::npos;
           at = p.out().find("proxied", at + 1))
        ++proxied;
    CHECK(proxied >= 1);
    record("netns: 5 ms each way through delaying proxies",
           str_cat(proxied, " connection(s) went through the proxies"));
  }
  SECTION("b's egress limited to 100 Mbit/s (tc tbf)") {
    auto [rc, out] = shell(str_cat("ip -n ", ns.b, " link set ", ns.dev_b, " up && tc -n ", ns.b,
                                   " qdisc add dev ", ns.dev_b,
                                   " root tbf rate 100mbit burst 64kb latency 200ms"));
    INFO(out);
    REQUIRE(rc == 0);
    timed_run(ns, "b's egress at 100 Mbit/s (tbf)", kIters, kCount);
  }
  SECTION("the link goes down mid-all_reduce: a clear error at the call's deadline, no hang") {
    TempDir dir;
    constexpr int kCallMs = 3000;
    auto procs =
        start_pair(ns, dir.file("rdzv"), {"0", std::to_string(kCount), std::to_string(kCallMs)});
    wait_all_output(procs, {0, 1}, "looping", std::chrono::seconds(60));
    const int64_t fault_ns = monotonic_ns();
    auto [rc, out] = shell(str_cat("ip -n ", ns.b, " link set ", ns.dev_b, " down"));
    REQUIRE(rc == 0);
    for (int rank = 0; rank < 2; ++rank) {
      auto st = procs[rank].wait(std::chrono::seconds(60));
      std::string o = procs[rank].out();
      INFO("rank " << rank << " " << st.describe() << "\n" << o << procs[rank].err());
      CHECK(st.exit_code == 3);
      CHECK_THAT(o, Contains("all_reduce"));
      CHECK_THAT(o, Contains(str_cat("rank ", 1 - rank)));
      const double ms = detection_ms(o, fault_ns);
      CHECK(ms < kCallMs + 10000);
      size_t t = o.find("type=");
      record("netns: link down mid-all_reduce (call timeout 3 s)",
             str_cat("rank ", rank, " failed after ", static_cast<int64_t>(ms),
                     " ms: ", o.substr(t, o.find('\n', t) - t)));
    }
  }
}
