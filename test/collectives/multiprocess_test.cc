// Multi-process tests: each rank is a child process (this executable re-run,
// test/support/child.h) and the ranks rendezvous through a FileStore in a
// temporary directory. Covers correctness across processes, the mismatch
// protocol (every rank learns of a mismatch and the message names both
// calls), a peer killed mid-collective (SIGKILL), a hung peer (SIGSTOP) with
// a short deadline, and a broken communicator refusing later calls.
//
// A child reports each call it makes as one stdout line:
//   RESULT <phase> <OK|TimeoutError|NetworkError|BackendError|...> <ms> | <message>
#include <catch2/catch.hpp>

#include <signal.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <sstream>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/file_store.h"
#include "collie/test/collectives/harness.h"
#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

std::string type_name(const std::exception& e) {
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const NetworkError*>(&e)) return "NetworkError";
  if (dynamic_cast<const BackendError*>(&e)) return "BackendError";
  if (dynamic_cast<const InvalidArgument*>(&e)) return "InvalidArgument";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return "std::exception";
}

// Runs fn, prints its RESULT line; returns whether it succeeded.
template <typename Fn>
bool report(const char* phase, Fn&& fn) {
  const auto start = Clock::now();
  std::string type = "OK", message;
  try {
    fn();
  } catch (const std::exception& e) {
    type = type_name(e);
    message = e.what();
    for (char& c : message) {
      if (c == '\n') c = ' ';
    }
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  std::printf("RESULT %s %s %lld | %s\n", phase, type.c_str(), static_cast<long long>(ms),
              message.c_str());
  std::fflush(stdout);
  return type == "OK";
}

void check_same(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DataType dt,
                const std::string& what) {
  const std::string diff = compare(got, want, dt);
  if (!diff.empty()) throw std::runtime_error(what + ": " + diff);
}

void run_correct(Communicator& c) {
  const int P = c.size(), r = c.rank();
  const Deadline d(60s);
  for (size_t n : {size_t{5}, size_t{300001}}) {
    for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
      auto buf = make_data(dt, n, r, ReduceOp::kMax);
      c.all_reduce(view_of(buf, dt), view_of(buf, dt), ReduceOp::kMax, d);
      check_same(buf, reference_reduce(dt, ReduceOp::kMax, P, n), dt,
                 str_cat("all_reduce ", dt, " ", n));
    }
    auto in = make_data(DataType::kFloat32, n, r, ReduceOp::kSum);
    std::vector<uint8_t> out(in.size() * P);
    c.all_gather(view_of(in, DataType::kFloat32), view_of(out, DataType::kFloat32), d);
    auto big = make_data(DataType::kFloat32, n * P, r, ReduceOp::kSum);
    std::vector<uint8_t> mine(in.size());
    c.reduce_scatter(view_of(big, DataType::kFloat32), view_of(mine, DataType::kFloat32),
                     ReduceOp::kSum, d);
    check_same(mine, reference_reduce(DataType::kFloat32, ReduceOp::kSum, P, n, n * r),
               DataType::kFloat32, "reduce_scatter");
    auto b = make_data(DataType::kUInt8, n, r == P - 1 ? 99 : r, ReduceOp::kSum);
    c.broadcast(view_of(b, DataType::kUInt8), P - 1, d);
    check_same(b, make_data(DataType::kUInt8, n, 99, ReduceOp::kSum), DataType::kUInt8,
               "broadcast");
  }
  c.barrier(d);
}

// The last rank calls something different from the others.
void run_mismatch(Communicator& c, const std::string& what) {
  const bool culprit = c.rank() == c.size() - 1;
  std::vector<float> buf(1024, 1.0f);
  const Deadline d(20s);
  report("first", [&] {
    if (what == "kind") {
      if (culprit) {
        c.broadcast(view(buf.data(), 1000), 0, d);
      } else {
        c.all_reduce(view(buf.data(), 1024), view(buf.data(), 1024), ReduceOp::kSum, d);
      }
    } else if (what == "dtype") {
      std::vector<double> wide(1024, 1.0);
      if (culprit) {
        c.all_reduce(view(wide.data(), 1024), view(wide.data(), 1024), ReduceOp::kSum, d);
      } else {
        c.all_reduce(view(buf.data(), 1024), view(buf.data(), 1024), ReduceOp::kSum, d);
      }
    } else if (what == "count") {
      const size_t n = culprit ? 1000 : 1024;
      c.all_reduce(view(buf.data(), n), view(buf.data(), n), ReduceOp::kSum, d);
    } else if (what == "op") {
      c.all_reduce(view(buf.data(), 1024), view(buf.data(), 1024),
                   culprit ? ReduceOp::kMax : ReduceOp::kSum, d);
    } else if (what == "root") {
      c.broadcast(view(buf.data(), 1000), culprit ? 1 : 0, d);
    } else if (what == "ring_count") {  // large: the ring, not the direct exchange
      std::vector<float> big(1 << 20, 1.0f);
      const size_t n = culprit ? big.size() - 1 : big.size();
      c.all_reduce(view(big.data(), n), view(big.data(), n), ReduceOp::kSum, d);
    }
  });
  report("next", [&] { c.barrier(d); });
}

}  // namespace

COLLIE_TEST_CHILD(collectives_rank) {
  const int rank = std::stoi(args.at(1)), size = std::stoi(args.at(2));
  const std::string scenario = args.at(3);
  FileStore store(args.at(0) + "/store", size, {.timeout = 60s});
  CommunicatorOptions o;
  o.store_prefix = "mp";
  o.timeout = 30s;
  std::unique_ptr<Communicator> comm;
  try {
    comm = Communicator::connect(store, rank, size, CommunicatorOptions::from_env(o));
  } catch (const Error&) {
    // Over TCP a rank may still be accepting a peer's connection at init
    // when two others, wired up already, have run the first call and found
    // the mismatch: the abort frame reaches it in connect. That is its
    // failure of the first call (and there is no next one).
    if (scenario.rfind("mismatch_", 0) != 0) throw;
    const std::exception_ptr error = std::current_exception();
    for (const char* phase : {"first", "next"})
      report(phase, [&] { std::rethrow_exception(error); });
    return 0;
  }
  if (scenario == "correct") {
    report("main", [&] { run_correct(*comm); });
  } else if (scenario.rfind("mismatch_", 0) == 0) {
    run_mismatch(*comm, scenario.substr(9));
  } else if (scenario == "kill") {
    // Loops 4 MiB all_reduces until a peer dies under us.
    std::vector<float> buf(1 << 20, 1.0f);
    report("main", [&] {
      for (int i = 0; i < 100000; ++i) {
        comm->all_reduce(view(buf.data(), buf.size()), view(buf.data(), buf.size()), ReduceOp::kMax,
                         Deadline(60s));
        if (i == 0) {
          std::printf("STARTED\n");
          std::fflush(stdout);
        }
      }
    });
    report("later", [&] { comm->barrier(Deadline(60s)); });
    // The survivors (0 and 2) stay up until both have reported: one that
    // exited first would be the peer the slower one finds gone, and named.
    store.add(str_cat("kill_reported_", rank), 1);
    store.wait({"kill_reported_0", "kill_reported_2"}, 30s);
  } else if (scenario == "hang") {
    comm->barrier(Deadline(30s));
    if (rank == 1) raise(SIGSTOP);  // hangs here until the parent kills it
    report("main", [&] { comm->barrier(Deadline(1500ms)); });
    report("later", [&] { comm->barrier(Deadline(60s)); });
  }
  return 0;
}

namespace {

struct Result {
  std::string type;
  long long ms = 0;
  std::string message;
};

// Parses a child's RESULT lines by phase.
std::map<std::string, Result> results_of(const std::string& out) {
  std::map<std::string, Result> r;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RESULT ", 0) != 0) continue;
    std::istringstream fields(line.substr(7));
    std::string phase;
    Result res;
    fields >> phase >> res.type >> res.ms;
    const auto bar = line.find(" | ");
    res.message = bar == std::string::npos ? "" : line.substr(bar + 3);
    r[phase] = res;
  }
  return r;
}

std::vector<Subprocess> spawn_ranks(const TempDir& dir, int size, const std::string& scenario) {
  std::vector<Subprocess> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.push_back(Subprocess::spawn(child_argv(
        "collectives_rank", {dir.path(), std::to_string(r), std::to_string(size), scenario})));
  }
  return ranks;
}

}  // namespace

TEST_CASE("collectives are correct across processes", "[multiprocess]") {
  TempDir dir;
  auto ranks = spawn_ranks(dir, 3, "correct");
  for (auto& p : ranks) {
    auto status = p.wait(120s);
    INFO(p.err());
    REQUIRE(status.ok());
    auto res = results_of(p.out());
    INFO(p.out());
    CHECK(res["main"].type == "OK");
  }
}

TEST_CASE("a mismatched call fails on every rank with both calls named",
          "[multiprocess][mismatch]") {
  struct Case {
    const char* scenario;
    const char* others;
    const char* culprit;
  };
  const Case c = GENERATE(
      Case{"mismatch_kind", "all_reduce(float32, 1024, sum", "broadcast(float32, 1000, root 0)"},
      Case{"mismatch_dtype", "all_reduce(float32, 1024, sum", "all_reduce(float64, 1024, sum"},
      Case{"mismatch_count", "all_reduce(float32, 1024, sum", "all_reduce(float32, 1000, sum"},
      Case{"mismatch_op", "all_reduce(float32, 1024, sum", "all_reduce(float32, 1024, max"},
      Case{"mismatch_root", "broadcast(float32, 1000, root 0)", "broadcast(float32, 1000, root 1)"},
      // ", ring)" over TCP, ", shm)" when every rank shares memory.
      Case{"mismatch_ring_count", "all_reduce(float32, 1048576, sum, ",
           "all_reduce(float32, 1048575, sum, "});
  INFO(c.scenario);
  TempDir dir;
  auto ranks = spawn_ranks(dir, 3, c.scenario);
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto status = ranks[r].wait(60s);
    INFO("rank " << r << " stdout:\n" << ranks[r].out() << "stderr:\n" << ranks[r].err());
    REQUIRE(status.ok());
    auto res = results_of(ranks[r].out());
    // The first call fails, or (for a rank that finished its part before the
    // culprit noticed) the next one does: nobody hangs, nobody gets mixed data.
    const Result& failed = res["first"].type != "OK" ? res["first"] : res["next"];
    CHECK(failed.type == "BackendError");
    CHECK_THAT(failed.message, Contains("mismatch") && Contains(c.others) && Contains(c.culprit));
    CHECK(failed.ms < 5000);
    CHECK(res["next"].type != "OK");
  }
}

TEST_CASE("a peer killed mid-collective is reported at once, naming it",
          "[multiprocess][failure]") {
  TempDir dir;
  auto ranks = spawn_ranks(dir, 3, "kill");
  for (auto& p : ranks) p.wait_for_output("STARTED", 60s);
  const auto killed_at = Clock::now();
  ranks[1].kill(SIGKILL);
  for (int r : {0, 2}) {
    auto status = ranks[r].wait(30s);
    const auto elapsed = Clock::now() - killed_at;
    INFO("rank " << r << " stdout:\n" << ranks[r].out() << "stderr:\n" << ranks[r].err());
    REQUIRE(status.ok());
    CHECK(elapsed < 10s);  // the collective's deadline is 60 s
    auto res = results_of(ranks[r].out());
    CHECK(res["main"].type == "NetworkError");
    CHECK_THAT(res["main"].message, Contains("rank 1 (127.0.0.1:") && Contains("all_reduce"));
    // Broken: the next call is refused at once, naming the original error.
    CHECK(res["later"].type == "BackendError");
    CHECK(res["later"].ms < 500);  // refused at once (the deadline is 60 s)
    CHECK_THAT(res["later"].message, Contains("broken") && Contains("rank 1 (127.0.0.1:"));
  }
}

TEST_CASE("a hung peer trips the deadline, naming the call and the missing peer",
          "[multiprocess][failure]") {
  TempDir dir;
  auto ranks = spawn_ranks(dir, 3, "hang");
  for (int r : {0, 2}) {
    auto status = ranks[r].wait(30s);
    INFO("rank " << r << " stdout:\n" << ranks[r].out() << "stderr:\n" << ranks[r].err());
    REQUIRE(status.ok());
    auto res = results_of(ranks[r].out());
    CHECK(res["main"].type == "TimeoutError");
    CHECK(res["main"].ms >= 1400);
    CHECK(res["main"].ms < 5000);
    CHECK_THAT(res["main"].message,
               Contains("barrier() as op #2") && Contains("rank 1 (127.0.0.1:"));
    CHECK(res["later"].type == "BackendError");
    CHECK(res["later"].ms < 500);  // refused at once (the deadline is 60 s)
  }
  ranks[1].kill(SIGKILL);
}
