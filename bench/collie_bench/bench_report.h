// collie-bench's output: nccl-tests' table (size, count, type, redop, root,
// time, algbw, busbw, #wrong) on rank 0's stdout, and the same rows as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace collie::bench {

struct Row {
  uint64_t bytes = 0;  // the collective's full buffer (all_gather: output; reduce_scatter: input)
  uint64_t count = 0;  // elements in that buffer
  std::string dtype;
  std::string op;      // "sum", "-" where the collective takes none
  int root = -1;       // broadcast's root, -1 otherwise
  double time_us = 0;  // per iteration, averaged over the ranks
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  int64_t wrong = -1;     // -1: not checked
  int iters = 0;          // timed calls (fewer than -n above --iter-bytes)
  double median_us = -1;  // --per-call: the median call, the slowest rank's; -1: not timed
};

// nccl-tests' bus bandwidth factor: what each rank must move over its
// slowest link, relative to the buffer size, for an optimal algorithm.
double bus_factor(const std::string& collective, int world);

struct RunInfo {
  std::string collective;
  std::string backend;
  std::string algorithm;
  int world = 0;
  int iters = 0;
  int warmup = 0;
};

void print_header(const RunInfo& info, bool blocking);
// "# channels at init (shm/tcp peers per rank): 0:3/0 1:3/0 ...; init
// took up to 12 ms": per rank, shm peers, tcp peers, init time in us.
void print_channels(const std::vector<int32_t>& per_rank, const char* when);
void print_row(const Row& row);
void print_footer(const std::vector<Row>& rows);
// The rows as one JSON document (nlohmann's writer: names are escaped):
// the run's fields, the build, and "results", one object per size.
std::string results_json(const RunInfo& info, const std::vector<Row>& rows);
// results_json() into `path`; throws Error naming the path when it cannot be
// written.
void write_json(const std::string& path, const RunInfo& info, const std::vector<Row>& rows);

}  // namespace collie::bench
