// A job that loses a rank keeps going: the survivors shrink the group
// (shrink_group) and their next all_reduce, on the new group, is right. Real
// processes and real faults: SIGKILL (one and two ranks, 4 and 8 ranks, on
// one host and across two fake hosts, whose new group runs the hierarchical
// algorithms), SIGSTOP (the stopped rank is left out at the call's timeout
// and told so when it wakes), a store that died with its rank (a clear
// error at once), and 100 shrinks in a row that leak nothing. Under
// "faults [tcp]" every case runs again with TCP channels.
#include <signal.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "collie/base/str_cat.h"
#include "collie/rendezvous/env/job_secret.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/pid_files.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

namespace {

struct Recovery {
  int new_rank = -1, new_size = -1;
  std::string excluded;
  int64_t shrunk_ns = 0, next_ns = 0, old_group_ms = -1;
};

Recovery parse_recovery(const std::string& out) {
  static const std::regex re(
      "recovered old_rank=\\d+ new_rank=(\\d+) new_size=(\\d+) excluded=(\\S*) "
      "shrunk_ns=(\\d+) next_ns=(\\d+)");
  std::smatch m;
  Recovery r;
  if (std::regex_search(out, m, re)) {
    r.new_rank = std::stoi(m[1]);
    r.new_size = std::stoi(m[2]);
    r.excluded = m[3];
    r.shrunk_ns = std::stoll(m[4]);
    r.next_ns = std::stoll(m[5]);
  }
  if (auto ms = find_int(out, "old_group_ms")) r.old_group_ms = *ms;
  return r;
}

std::vector<Subprocess> spawn_shrink_ranks(int world, const std::string& how, int call_timeout_ms,
                                           const std::vector<std::string>& host_ids = {},
                                           EnvOverrides env = {}) {
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < world; ++rank) {
    EnvOverrides e = env;
    if (!host_ids.empty()) e["COLLIE_HOST_ID"] = host_ids[rank];
    if (how == "env") e["RANK"] = std::to_string(rank);
    procs.push_back(Subprocess::spawn(
        child_argv("shrink_rank", {how, std::to_string(rank), std::to_string(world),
                                   std::to_string(call_timeout_ms), "30000"}),
        {.env = clean_env(e)}));
  }
  return procs;
}

// Kills `victims` mid-loop; every survivor must shrink to the others, in
// the old order, and complete its next all_reduce. Returns the worst time
// from the kill to a survivor's next completed all_reduce, in ms.
double kill_and_recover(int world, const std::vector<int>& victims,
                        const std::vector<std::string>& host_ids = {}) {
  TempDir dir;
  auto procs = spawn_shrink_ranks(world, "file:" + dir.file("rdzv"), 0, host_ids);
  std::vector<int> all(world);
  for (int r = 0; r < world; ++r) all[r] = r;
  wait_all_output(procs, all, "looping", std::chrono::seconds(120));
  const int64_t fault_ns = monotonic_ns();
  for (int v : victims) procs[v].kill(SIGKILL);
  std::vector<int> survivors;
  for (int r = 0; r < world; ++r)
    if (std::find(victims.begin(), victims.end(), r) == victims.end()) survivors.push_back(r);
  double worst = 0;
  for (size_t i = 0; i < survivors.size(); ++i) {
    auto& p = procs[survivors[i]];
    auto st = p.wait(std::chrono::seconds(90));
    const std::string out = p.out();
    INFO("rank " << survivors[i] << " " << st.describe() << "\n" << out << p.err());
    REQUIRE(st.exit_code == 0);
    const Recovery r = parse_recovery(out);
    CHECK(r.new_rank == static_cast<int>(i));  // renumbered densely, old order kept
    CHECK(r.new_size == static_cast<int>(survivors.size()));
    CHECK(r.excluded == join(victims, ","));
    CHECK(r.old_group_ms >= 0);
    CHECK(r.old_group_ms < 1000);  // the old group is revoked: refused at once
    worst = std::max(worst, static_cast<double>(r.next_ns - fault_ns) / 1e6);
  }
  return worst;
}

}  // namespace

TEST_CASE("survivors of a SIGKILLed rank shrink to a group of the others and carry on",
          "[faults][shrink]") {
  const double ms = kill_and_recover(4, {1});
  // Generous for a loaded 2-core machine: the point is no timeout is waited.
  CHECK(ms < 10000);
  record("shrink: SIGKILL rank 1 of 4, survivors' next all_reduce",
         str_cat(static_cast<int64_t>(ms), " ms after the kill"));
}

TEST_CASE("two of 8 ranks SIGKILLed at once: the 6 survivors agree on both and carry on",
          "[faults][shrink]") {
  const double ms = kill_and_recover(8, {2, 5});
  CHECK(ms < 20000);
  record("shrink: SIGKILL ranks 2 and 5 of 8", str_cat(static_cast<int64_t>(ms), " ms"));
}

TEST_CASE("rank 0 SIGKILLed: the survivors shrink through a store that outlived it",
          "[faults][shrink]") {
  const double ms = kill_and_recover(3, {0});
  CHECK(ms < 10000);
}

TEST_CASE("across two hosts, the shrunk group's first calls run the hierarchical algorithms",
          "[faults][shrink]") {
  // Hosts A (ranks 0, 1) and B (ranks 2, 3): after rank 3 dies the new
  // group is 0, 1 on A and 2 on B, shared memory within A, TCP between.
  const double ms = kill_and_recover(4, {3}, {"hostA", "hostA", "hostB", "hostB"});
  CHECK(ms < 10000);
}

TEST_CASE("a SIGSTOPped rank is left out at the call's timeout, and told so when it wakes",
          "[faults][shrink]") {
  TempDir dir;
  constexpr int kWorld = 4, kStopped = 2, kCallMs = 1500;
  auto procs = spawn_shrink_ranks(kWorld, "file:" + dir.file("rdzv"), kCallMs);
  wait_all_output(procs, {0, 1, 2, 3}, "looping", std::chrono::seconds(120));
  const int64_t fault_ns = monotonic_ns();
  procs[kStopped].kill(SIGSTOP);
  double worst = 0;
  int new_rank = 0;
  for (int r : {0, 1, 3}) {
    auto st = procs[r].wait(std::chrono::seconds(90));
    const std::string out = procs[r].out();
    INFO("rank " << r << " " << st.describe() << "\n" << out << procs[r].err());
    REQUIRE(st.exit_code == 0);
    CHECK_THAT(out, Contains("type=TimeoutError"));
    const Recovery rec = parse_recovery(out);
    CHECK(rec.new_rank == new_rank++);
    CHECK(rec.new_size == 3);
    CHECK(rec.excluded == "2");
    worst = std::max(worst, static_cast<double>(rec.next_ns - fault_ns) / 1e6);
  }
  // Within the call's timeout, its probe and the agreement: not the 30 s
  // shrink timeout, and not the group's 60 s.
  CHECK(worst < kCallMs + 10000);
  record("shrink: SIGSTOP rank 2 of 4 (call timeout 1.5 s)",
         str_cat("survivors' next all_reduce ", static_cast<int64_t>(worst), " ms after the stop"));
  procs[kStopped].kill(SIGCONT);
  auto st = procs[kStopped].wait(std::chrono::seconds(90));
  const std::string out = procs[kStopped].out();
  INFO(st.describe() << "\n" << out << procs[kStopped].err());
  CHECK(st.exit_code == 4);
  CHECK_THAT(out, Contains("shrink_error type=BackendError") &&
                      Contains("rank 2 was left out of the shrunk group") &&
                      Contains("reported it failed"));
}

TEST_CASE("when the store died with the rank that hosted it, shrink says so at once",
          "[faults][shrink]") {
  // The ranks are clients of a store this test hosts, as under torchrun's
  // agent store; stopping it as rank 0 dies is what env:// does when rank 0,
  // which hosts the store, is killed.
  auto server = TcpStoreServer::start({.host = "127.0.0.1"});
  constexpr int kWorld = 3;
  auto procs = spawn_shrink_ranks(kWorld, "env", 0, {},
                                  {{"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                   {"TORCHELASTIC_RESTART_COUNT", "0"},
                                   {"MASTER_ADDR", "127.0.0.1"},
                                   {"MASTER_PORT", std::to_string(server->port())},
                                   {"WORLD_SIZE", std::to_string(kWorld)}});
  wait_all_output(procs, {0, 1, 2}, "looping", std::chrono::seconds(120));
  server->stop();
  const int64_t fault_ns = monotonic_ns();
  procs[0].kill(SIGKILL);
  for (int r : {1, 2}) {
    auto st = procs[r].wait(std::chrono::seconds(60));
    const std::string out = procs[r].out();
    INFO("rank " << r << " " << st.describe() << "\n" << out << procs[r].err());
    CHECK(st.exit_code == 4);
    CHECK_THAT(out, Contains("shrink_error type=BackendError") &&
                        Contains("the store is unreachable") && Contains("outlives every worker"));
    CHECK(monotonic_ns() - fault_ns < int64_t{15'000'000'000});
  }
}

TEST_CASE("100 shrinks in a row leak no descriptor, thread or mapping", "[faults][shrink]") {
  TempDir dir;
  constexpr int kWorld = 3;
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < kWorld; ++rank)
    procs.push_back(Subprocess::spawn(
        child_argv("shrink_repeat", {"file:" + dir.file("rdzv"), std::to_string(rank),
                                     std::to_string(kWorld), "100"}),
        {.env = clean_env()}));
  static const std::regex warm("warm fds=(\\d+) threads=(\\d+) maps=(\\d+)");
  static const std::regex last("last fds=(\\d+) threads=(\\d+) maps=(\\d+)");
  for (int rank = 0; rank < kWorld; ++rank) {
    auto st = procs[rank].wait(std::chrono::seconds(240));
    const std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    REQUIRE(st.exit_code == 0);
    std::smatch w, l;
    REQUIRE(std::regex_search(out, w, warm));
    REQUIRE(std::regex_search(out, l, last));
    CHECK(l[1] == w[1]);  // descriptors: sockets, shared memory, eventfds
    CHECK(l[2] == w[2]);  // threads: each generation's worker is joined
    CHECK(l[3] == w[3]);  // mappings: the shared-memory rings are unmapped
    if (rank == 0)
      record("shrink: 100 shrinks of 3 ranks",
             str_cat("after the 5th and the 100th: ", w[0].str(), " / ", l[0].str()));
  }
}

TEST_CASE("a replacement joins the survivors, gets a live rank's state by broadcast and trains on",
          "[faults][shrink][grow]") {
  TempDir dir;
  constexpr int kWorld = 4, kVictim = 1;
  const std::string how = "file:" + dir.file("rdzv");
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < kWorld; ++rank)
    procs.push_back(Subprocess::spawn(
        child_argv("grow_rank", {how, std::to_string(rank), std::to_string(kWorld), "member"}),
        {.env = clean_env()}));
  wait_all_output(procs, {0, 1, 2, 3}, "looping", std::chrono::seconds(120));
  const int64_t fault_ns = monotonic_ns();
  procs[kVictim].kill(SIGKILL);
  // The launcher's part (collie-run --on-failure=replace): start a process
  // that joins in the dead one's place.
  auto replacement = Subprocess::spawn(
      child_argv("grow_rank", {how, std::to_string(kVictim), std::to_string(kWorld), "join"}),
      {.env = clean_env()});
  auto st = replacement.wait(std::chrono::seconds(120));
  const std::string out = replacement.out();
  INFO("replacement " << st.describe() << "\n" << out << replacement.err());
  REQUIRE(st.exit_code == 0);
  CHECK_THAT(out, Contains("final rank=3 world=4") && Contains("same=1"));
  const auto first = find_int(out, "first_step_ns");
  REQUIRE(first.has_value());
  const double ms = static_cast<double>(*first - fault_ns) / 1e6;
  CHECK(ms < 20000);
  for (int r : {0, 2, 3}) {
    auto s = procs[r].wait(std::chrono::seconds(60));
    INFO("rank " << r << " " << s.describe() << "\n" << procs[r].out() << procs[r].err());
    CHECK(s.exit_code == 0);
    CHECK_THAT(procs[r].out(), Contains("admitted world=4") && Contains("same=1"));
  }
  record("grow: SIGKILL rank 1 of 4, a replacement joins",
         str_cat("its first step ", static_cast<int64_t>(ms),
                 " ms after the kill, process start included"));
}

TEST_CASE("a process without the job secret cannot join a running group",
          "[faults][shrink][grow]") {
  // The members and the store share a job secret, as under collie-run; a
  // stranger who can reach the store but does not know it is refused, and
  // the members' admit_joiners finds nobody.
  const JobSecret secret = JobSecret::generate();
  auto server = TcpStoreServer::start({.host = "127.0.0.1", .secret = secret});
  EnvOverrides env{{"TORCHELASTIC_USE_AGENT_STORE", "True"},
                   {"TORCHELASTIC_RESTART_COUNT", "0"},
                   {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(server->port())},
                   {"WORLD_SIZE", "2"},
                   {"COLLIE_TIMEOUT", "5s"}};
  EnvOverrides stranger = env;
  stranger["RANK"] = "1";
  stranger["COLLIE_REPLACEMENT"] = "1";
  auto p = Subprocess::spawn(child_argv("grow_rank", {"env", "1", "2", "join"}),
                             {.env = clean_env(stranger)});
  auto st = p.wait(std::chrono::seconds(60));
  const std::string err = p.err() + p.out();
  INFO(st.describe() << "\n" << err);
  CHECK(st.exit_code != 0);
  CHECK_THAT(err, Contains("secret") || Contains("refused"));
  // It never took a ticket: nothing asks to join.
  env["COLLIE_JOB_SECRET"] = secret.to_hex();
  auto store = TcpStore::connect("127.0.0.1", server->port(),
                                 {.timeout = std::chrono::seconds(5), .secret = secret});
  CHECK(store->add("/worker/attempt_0/default_pg/socket/0/join/n", 0) == 0);
}

TEST_CASE("collie-run --on-failure=replace: a replacement joins the running job and it finishes",
          "[faults][shrink][grow][launcher]") {
  TempDir pids;
  auto launcher =
      Subprocess::spawn(collie_run_argv({"--standalone", "--nproc-per-node", "4", "--on-failure",
                                         "replace", "--max-restarts", "1"},
                                        "grow_rank", {"env", "0", "4", "member", pids.path()}),
                        {.env = clean_env(), .new_process_group = true});
  auto workers = wait_for_pid_files(pids.path(), 4, std::chrono::seconds(120));
  for (int rank = 0; rank < 4; ++rank)
    launcher.wait_for_output(str_cat("[rank", rank, "]: looping rank ", rank),
                             std::chrono::seconds(120));
  const int64_t fault_ns = monotonic_ns();
  REQUIRE(::kill(workers[1], SIGKILL) == 0);
  auto st = launcher.wait(std::chrono::seconds(120));
  const std::string out = launcher.out(), err = launcher.err();
  INFO(st.describe() << "\n" << out << err);
  CHECK(st.exit_code == 0);
  CHECK_THAT(err, Contains("failure seen: rank 1") && Contains("replacement started: rank 1"));
  // The replacement (collie-run's rank 1 slot) joined as rank 3 of 4, and
  // every rank ended with the same model.
  CHECK_THAT(out, Contains("[rank1]: final rank=3 world=4") && Contains("[rank1]: first_step_ns="));
  for (int rank : {0, 2, 3})
    CHECK_THAT(out, Contains(str_cat("[rank", rank, "]: admitted world=4")));
  CHECK(out.find("same=0") == std::string::npos);
  const auto first = find_int(out.substr(out.find("[rank1]: first_step_ns=")), "first_step_ns");
  REQUIRE(first.has_value());
  record("collie-run --on-failure=replace: SIGKILL rank 1 of 4",
         str_cat("the replacement's first step ", (*first - fault_ns) / 1000000,
                 " ms after the kill, process start and the launcher's detection included"));
}

TEST_CASE("SHRINK_ABORT with calls pending: the aborting survivors do not take each other for dead",
          "[faults][shrink]") {
  TempDir dir;
  constexpr int kWorld = 3;
  std::vector<Subprocess> procs;
  for (int rank = 0; rank < kWorld; ++rank)
    procs.push_back(Subprocess::spawn(
        child_argv("abort_shrink_rank",
                   {"file:" + dir.file("rdzv"), std::to_string(rank), std::to_string(kWorld)}),
        {.env = clean_env()}));
  for (int rank : {0, 1}) {
    auto st = procs[rank].wait(std::chrono::seconds(90));
    const std::string out = procs[rank].out();
    INFO("rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
    REQUIRE(st.exit_code == 0);
    CHECK_THAT(out, Contains(str_cat("aborted rank=", rank,
                                     " new_size=2 excluded=2 "
                                     "pending_failed=1")));
  }
}
