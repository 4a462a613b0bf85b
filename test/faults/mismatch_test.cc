// Mismatched calls across ranks through the public API (init_process_group
// and the torch-named collectives), end to end over real processes: a
// different collective, dtype, count or root must fail on every rank with a
// message naming the mismatch, promptly, and leave every buffer untouched
// (never the other call's data). A broadcast whose ranks disagree on the
// root can "succeed" on a rank that only sent (each thinks it is the root);
// the error then arrives on the next call, which must fail. test/collectives/multiprocess_test.cc
// covers the same protocol one layer down on a bare communicator; this is
// the version a user sees.
#include <catch2/catch.hpp>

#include <cstdio>

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/test/faults/fault_harness.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::test;
using Catch::Matchers::Contains;

// args: rdzv path, rank, kind (collective | dtype | count | root).
// Rank 0 always calls all_reduce(float32, 1000) (broadcast root 0 for
// "root"); rank 1 makes the mismatched call.
COLLIE_TEST_CHILD(mismatch_rank) {
  const int rank = std::stoi(args.at(1));
  const std::string kind = args.at(2);
  init_process_group({.backend = "cpu",
                      .init_method = "file://" + args.at(0),
                      .world_size = 2,
                      .rank = rank,
                      .timeout = std::chrono::seconds(30)});
  std::vector<float> f(1001, static_cast<float>(rank + 10));
  std::vector<double> d(1000, rank + 10.0);
  const auto start = Clock::now();
  try {
    if (rank == 0) {
      if (kind == "root")
        broadcast(view(f.data(), 1000), 0);
      else
        all_reduce(view(f.data(), 1000));
    } else if (kind == "collective") {
      broadcast(view(f.data(), 1000), 0);
    } else if (kind == "dtype") {
      all_reduce(view(d.data(), 1000));
    } else if (kind == "count") {
      all_reduce(view(f.data(), 1001));
    } else if (kind == "root") {
      broadcast(view(f.data(), 1000), 1);
    }
    std::printf("mismatched call succeeded\n");
  } catch (const std::exception& e) {
    print_caught(e);
  }
  // A call that only sends (a broadcast root) can finish before anyone has
  // seen the mismatch; the next call must then fail instead.
  try {
    barrier();
    std::printf("next call succeeded\n");
  } catch (const std::exception& e) {
    std::printf("next ");
    print_caught(e);
  }
  std::printf(
      "call_ms=%lld\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
  bool intact = true;
  for (size_t i = 0; i < f.size(); ++i)
    if (intact && f[i] != static_cast<float>(rank + 10)) {
      intact = false;
      std::printf("buffer changed: float element %zu is %g, was %d\n", i, static_cast<double>(f[i]),
                  rank + 10);
    }
  for (double x : d) intact = intact && x == rank + 10.0;
  std::printf("data_intact=%d\n", intact ? 1 : 0);
  std::fflush(stdout);
  std::_Exit(0);
}

TEST_CASE("mismatched calls through the public API fail on every rank, data untouched",
          "[faults][mismatch]") {
  for (const std::string kind : {"collective", "dtype", "count", "root"}) {
    TempDir dir;
    auto procs = spawn_ranks(2, "mismatch_rank", [&](int rank) {
      return std::vector<std::string>{dir.file("rdzv"), std::to_string(rank), kind};
    });
    int64_t worst = 0;
    for (int rank = 0; rank < 2; ++rank) {
      auto st = procs[rank].wait(std::chrono::seconds(60));
      std::string out = procs[rank].out();
      INFO(kind << " rank " << rank << " " << st.describe() << "\n" << out << procs[rank].err());
      CHECK(st.ok());
      // The mismatched call fails, or (a rank whose part was only sending)
      // the next one does; either way the message names the mismatch.
      CHECK_THAT(out, Contains("error_ns=") && Contains("mismatch"));
      CHECK_THAT(out, !Contains("next call succeeded"));
      // The header is checked before any payload byte is read into the
      // user's buffer, so the failed call leaves it as it was (it used to
      // hold the peer's payload: one readv took header and payload at once).
      CHECK_THAT(out, Contains("data_intact=1"));
      auto ms = find_int(out, "call_ms");
      REQUIRE(ms.has_value());
      CHECK(*ms < 10000);
      worst = std::max(worst, *ms);
      if (rank == 0) {
        size_t t = out.find("type=");
        const bool first_failed = out.find("mismatched call succeeded") == std::string::npos;
        record(str_cat("mismatch (", kind, ")"),
               str_cat("rank 0, ", first_failed ? "the mismatched call" : "the next call", ": ",
                       t == std::string::npos ? out : out.substr(t, out.find('\n', t) - t)));
      }
    }
    record(str_cat("mismatch (", kind, ")"),
           str_cat("both ranks failed, slowest after ", worst, " ms"));
  }
}
