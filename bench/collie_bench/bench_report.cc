#include "collie/bench/collie_bench/bench_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/api/build_info.h"

namespace collie::bench {

double bus_factor(const std::string& collective, int world) {
  const double n = world;
  if (collective == "all_reduce") return 2 * (n - 1) / n;
  if (collective == "all_gather" || collective == "reduce_scatter") return (n - 1) / n;
  // The root moves (n - 1)/n of the whole buffer, as nccl-tests counts them.
  if (collective == "gather" || collective == "scatter") return (n - 1) / n;
  if (collective == "all_to_all" || collective == "all_to_all_uneven") return (n - 1) / n;
  if (collective == "broadcast" || collective == "reduce" || collective == "sendrecv" ||
      collective == "stream")
    return 1;
  return 0;  // barrier moves no payload
}

void print_header(const RunInfo& info, bool blocking) {
  std::printf(
      "# collie-bench: %s, %d ranks, backend %s, algorithm %s, %d %s iterations after %d warm-up\n",
      info.collective.c_str(), info.world, info.backend.c_str(), info.algorithm.c_str(), info.iters,
      blocking ? "blocking" : "back-to-back", info.warmup);
  std::printf("# %s\n#\n", build_info().c_str());
  std::printf("#%12s %13s %9s %7s %7s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong");
  std::printf("#%12s %13s %9s %7s %7s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

void print_channels(const std::vector<int32_t>& per_rank, const char* when) {
  std::string line = str_cat("# channels ", when, " (shm/tcp peers per rank):");
  int32_t init_us = 0;
  for (size_t r = 0; r + 2 < per_rank.size(); r += 3) {
    line += str_cat(" ", r / 3, ":", per_rank[r], "/", per_rank[r + 1]);
    init_us = std::max(init_us, per_rank[r + 2]);
  }
  line += str_cat("; init_process_group took up to ", init_us / 1000.0, " ms");
  std::printf("%s\n#\n", line.c_str());
  std::fflush(stdout);
}

void print_row(const Row& r) {
  std::string wrong = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
  std::printf(" %12llu %13llu %9s %7s %7d %10.2f %8.2f %8.2f %7s\n",
              static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.count),
              r.dtype.c_str(), r.op.c_str(), r.root, r.time_us, r.algbw_gbps, r.busbw_gbps,
              wrong.c_str());
  if (r.median_us >= 0)
    std::printf("# %llu B: median call %.2f us (the slowest rank's)\n",
                static_cast<unsigned long long>(r.bytes), r.median_us);
  std::fflush(stdout);
}

void print_footer(const std::vector<Row>& rows) {
  double sum = 0;
  int64_t wrong = 0;
  for (const auto& r : rows) {
    sum += r.busbw_gbps;
    if (r.wrong > 0) wrong += r.wrong;
  }
  std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong),
              wrong ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g\n#\n", rows.empty() ? 0.0 : sum / rows.size());
  std::fflush(stdout);
}

std::string results_json(const RunInfo& info, const std::vector<Row>& rows) {
  // Ordered so that the file reads in the order of the table's columns.
  using json = nlohmann::ordered_json;
  json results = json::array();
  for (const Row& r : rows) {
    results.push_back({{"bytes", r.bytes},
                       {"count", r.count},
                       {"dtype", r.dtype},
                       {"op", r.op},
                       {"root", r.root},
                       {"time_us", r.time_us},
                       {"algbw_gbps", r.algbw_gbps},
                       {"busbw_gbps", r.busbw_gbps},
                       {"wrong", r.wrong},
                       {"iters", r.iters}});
    if (r.median_us >= 0) results.back()["median_us"] = r.median_us;
  }
  const json doc = {{"collective", info.collective}, {"backend", info.backend},
                    {"algorithm", info.algorithm},   {"world_size", info.world},
                    {"iters", info.iters},           {"warmup", info.warmup},
                    {"build", build_info()},         {"results", std::move(results)}};
  // Invalid UTF-8 (a name is whatever the user typed) is replaced, not
  // thrown on: the file is a report, and the rest of it is still good.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

void write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows) {
  const std::string text = results_json(info, rows);
  std::ofstream out(path);
  if (!out) throw Error(str_cat("cannot write --json file ", path));
  out << text;
  if (!out.flush()) throw Error(str_cat("writing --json file ", path, " failed"));
}

}  // namespace collie::bench
