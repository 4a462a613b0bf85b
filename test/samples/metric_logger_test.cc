// MetricLogger's cross-rank synchronisation (BLIP's
// synchronize_between_processes) over real processes and the socket
// backend: counts and totals become the sums over every rank, so the global
// averages are the job's and the same on every rank; the windows (median,
// avg, value) stay each rank's own, as in BLIP.
#include <catch2/catch.hpp>

#include <cstdio>

#include "collie/base/deadline.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/distributed.h"
#include "collie/samples/blip_train/metric_logger.h"
#include "collie/test/support/child.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

using namespace collie;
using namespace collie::samples;
using test::Subprocess;

namespace {

constexpr int kWorld = 3;

// What rank r logs: 2(r + 1) losses 10r, 10r + 1, ...; one lr of 0.1(r + 1)
// counted r + 1 times; "skipped" only on ranks other than 0.
void log_rank(MetricLogger& logger, int r) {
  logger.meter("loss", 4, "{median:.4f} ({global_avg:.4f})");
  logger.meter("skipped");
  for (int i = 0; i < 2 * (r + 1); ++i) logger.update("loss", 10.0 * r + i);
  logger.update("lr", 0.1 * (r + 1), r + 1);
  if (r != 0) logger.update("skipped", 7.0 * r);
}

}  // namespace

// args: rank, rendezvous file.
COLLIE_TEST_CHILD(metric_logger_rank) {
  const int rank = std::stoi(args.at(0));
  init_process_group({.backend = "cpu",
                      .init_method = "file://" + args.at(1),
                      .world_size = kWorld,
                      .rank = rank,
                      .timeout = std::chrono::seconds(60)});
  MetricLogger logger;
  log_rank(logger, rank);
  const SmoothedValue before = logger.at("loss");
  logger.synchronize_between_processes(*get_default_group());
  // One line per fact, for the parent to compare across ranks.
  for (const char* name : {"loss", "lr", "skipped"}) {
    const SmoothedValue& m = logger.at(name);
    std::printf("%s count=%lld total=%.6f global_avg=%.6f\n", name,
                static_cast<long long>(m.count()), m.total(), m.global_avg());
  }
  std::printf("global_avg_str=%s\n", logger.global_avg_str().c_str());
  const SmoothedValue& after = logger.at("loss");
  const bool window_kept = after.median() == before.median() && after.avg() == before.avg() &&
                           after.max() == before.max() && after.value() == before.value();
  std::printf("loss window unchanged=%d\n", window_kept ? 1 : 0);
  std::fflush(stdout);
  destroy_process_group();
  return 0;
}

TEST_CASE("MetricLogger::synchronize_between_processes sums counts and totals over 3 ranks") {
  test::TempDir dir;
  std::vector<Subprocess> ranks;
  test::SpawnOptions options;
  for (const char* name :
       {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE"})
    options.env.emplace(name, std::nullopt);
  for (int r = 0; r < kWorld; ++r)
    ranks.push_back(Subprocess::spawn(
        test::child_argv("metric_logger_rank", {std::to_string(r), dir.file("rdzv")}), options));
  Deadline deadline(std::chrono::minutes(2));
  for (int r = 0; r < kWorld; ++r) {
    auto st = ranks[r].wait(deadline.remaining());
    INFO("rank " << r << ": " << st.describe() << "\n" << ranks[r].out() << ranks[r].err());
    REQUIRE(st.ok());
  }

  // The sums, worked out by hand: losses 0,1 | 10..13 | 20..25 -> 12 values
  // totalling 1 + 46 + 135 = 182; lr 0.1x1 + 0.2x2 + 0.3x3 = 1.4 over 6;
  // "skipped" 7 + 14 = 21 over 2 (rank 0 had none).
  MetricLogger expected;
  for (int r = 0; r < kWorld; ++r) log_rank(expected, r);
  const std::string want =
      str_cat("loss count=12 total=182.000000 global_avg=15.166667\n",
              "lr count=6 total=1.400000 global_avg=0.233333\n",
              "skipped count=2 total=21.000000 global_avg=10.500000\n",
              "global_avg_str=Averaged stats: loss: 15.166667  lr: 0.233333  skipped: 10.500000\n",
              "loss window unchanged=1\n");
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r);
    CHECK(ranks[r].out() == want);  // the same job-wide figures on every rank
  }
  // And the single-process logger of every rank's values agrees.
  CHECK(expected.at("loss").count() == 12);
  CHECK(expected.at("loss").total() == 182.0);
}
