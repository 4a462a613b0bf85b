// collie-bench's flags (nccl-tests' names) and their checks. Whatever can be
// judged without ranks is judged by validate_options() before any rank
// starts, so that a typo costs one line naming the flag and exit code 2,
// not N ranks each failing (or a sweep that wraps around 2^64 and runs for
// hours).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "collie/base/deadline.h"
#include "collie/base/types.h"
#include "collie/collectives/all_reduce_algorithm.h"
#include "collie/runtime/process_group/process_group.h"

namespace collie::bench {

// The flags as typed.
struct Options {
  std::string min_bytes = "32M", max_bytes = "32M";
  double factor = 2;
  int iters = 20, warmup = 5;
  std::string iter_bytes = "0";  // 0: -n at every size
  std::string op = "sum", dtype = "float", collective = "all_reduce", algo = "auto";
  std::string transport;  // "": COLLIE_TRANSPORT, else auto
  std::string backend = "cpu", init_method, json;
  int check = 1, root = 0, nproc = 0;
  std::string timeout = "300";
  bool blocking = false;
  bool per_call = false;
};

// The flags parsed and checked.
struct Settings {
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint64_t min_bytes = 0, max_bytes = 0, iter_bytes = 0;
  AllReduceAlgorithm algo = AllReduceAlgorithm::kAuto;
  Timeout timeout = kUnsetTimeout;
};

// Registers every flag on `app`, with CLI11's range and set checks.
void add_options(CLI::App& app, Options& o);

// Throws InvalidArgument naming the flag and its value: an unknown dtype or
// op, a size that is not one (or overflows, or exceeds this host's memory),
// -b above -e, -c other than 0/1, a root outside the ranks, an unknown
// backend, a malformed --init-method or --timeout, a --json file in a
// folder that cannot be written.
Settings validate_options(const Options& o);

// "8", "64K", "4M", "1G" (powers of 1024, as nccl-tests reads them).
uint64_t parse_bytes(const std::string& text, const std::string& flag);

}  // namespace collie::bench
