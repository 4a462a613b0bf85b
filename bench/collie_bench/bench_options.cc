#include "collie/bench/collie_bench/bench_options.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>

#include "collie/base/error.h"
#include "collie/base/parse_duration.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/init_method.h"

namespace collie::bench {

namespace {

// Physical memory: no buffer of one size step can be larger.
uint64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

AllReduceAlgorithm parse_algo(const std::string& name) {
  if (name == "ring") return AllReduceAlgorithm::kRing;
  if (name == "small") return AllReduceAlgorithm::kSmall;
  if (name == "shm") return AllReduceAlgorithm::kShm;
  if (name == "hierarchical") return AllReduceAlgorithm::kHierarchical;
  if (name == "auto") return AllReduceAlgorithm::kAuto;
  throw InvalidArgument(
      str_cat("--algo '", name, "': expected ring, small, shm, hierarchical or auto"));
}

// The URL alone is judged here: the variables env:// reads come from the
// launcher, later, so stand-ins take their place.
void check_init_method(const std::string& url) {
  if (url.empty()) return;
  const EnvLookup stand_ins = [](const std::string& name) -> std::optional<std::string> {
    if (name == "MASTER_ADDR") return "127.0.0.1";
    if (name == "MASTER_PORT" || name == "RANK") return "0";
    if (name == "WORLD_SIZE") return "1";
    return std::nullopt;
  };
  try {
    parse_init_method(url, stand_ins);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(str_cat("--init-method: ", e.what()));
  }
}

// The --json file is written after the last size: a folder that is missing
// or not writable is better found before the first.
void check_json_path(const std::string& path) {
  if (path.empty()) return;
  std::string dir = path.substr(0, path.find_last_of('/') + 1);
  if (dir.empty()) dir = ".";
  if (::access(dir.c_str(), W_OK) != 0)
    throw InvalidArgument(
        str_cat("--json ", path, ": cannot write in '", dir, "': ", std::strerror(errno)));
}

}  // namespace

uint64_t parse_bytes(const std::string& text, const std::string& flag) {
  const std::string what = str_cat(flag, " '", text, "'");
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 19)  // 19 digits always fit in 64 bits
    throw InvalidArgument(str_cat(what, " is not a size (e.g. 8, 64K, 4M, 1G)"));
  const uint64_t v = std::stoull(text.substr(0, digits));
  const std::string suffix = text.substr(digits);
  int shift = 0;
  if (suffix == "K" || suffix == "k")
    shift = 10;
  else if (suffix == "M" || suffix == "m")
    shift = 20;
  else if (suffix == "G" || suffix == "g")
    shift = 30;
  else if (!suffix.empty())
    throw InvalidArgument(
        str_cat(what, " has an unknown suffix '", suffix, "' (use K, M or G: powers of 1024)"));
  const uint64_t limit = host_memory_bytes();
  if (v > (limit >> shift))
    throw InvalidArgument(str_cat(what, " is more than this host's memory (", limit, " bytes)"));
  return v << shift;
}

void add_options(CLI::App& app, Options& o) {
  app.add_option("-b,--minbytes", o.min_bytes, "smallest size in bytes (K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", o.max_bytes, "largest size in bytes")->capture_default_str();
  app.add_option("-f,--stepfactor", o.factor, "multiply the size by this each step")
      ->capture_default_str()
      ->check(CLI::Range(1.0001, 1e6));
  app.add_option("-n,--iters", o.iters, "timed iterations per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("-w,--warmup_iters", o.warmup, "warm-up iterations per size")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--iter-bytes", o.iter_bytes,
                 "at most this many bytes' worth of timed calls per size (at least 1 call, at most "
                 "-n; the warm-up at most as many): a sweep to 256M over a slow link ends in "
                 "minutes. 0: -n calls at every size")
      ->capture_default_str();
  app.add_option("-o,--op", o.op, "sum, prod, min, max, avg, band, bor, bxor")
      ->capture_default_str();
  app.add_option("-d,--datatype", o.dtype,
                 "float, double, half, bfloat16, int32, int64, uint8, int8, bool")
      ->capture_default_str();
  app.add_option("-c,--check", o.check, "check results (0/1)")->capture_default_str();
  app.add_option("-r,--root", o.root, "broadcast, reduce, gather and scatter root")
      ->capture_default_str();
  app.add_option("-C,--collective", o.collective,
                 "collective to time (sendrecv: a ping-pong between ranks 0 and 1, one-way time, "
                 "like osu_latency; stream: rank 0 sends to rank 1 back to back, time per "
                 "message, rank 1 acknowledging the last; all_to_all_uneven: all_to_all_single "
                 "with a router's "
                 "fixed skewed split sizes, bench/compare/peer_sweep.h's router_splits)")
      ->capture_default_str()
      ->check(CLI::IsMember({"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier",
                             "reduce", "gather", "scatter", "all_to_all", "all_to_all_uneven",
                             "sendrecv", "stream"}));
  app.add_option("--algo", o.algo, "all_reduce algorithm (cpu backend)")
      ->capture_default_str()
      ->check(CLI::IsMember({"ring", "small", "shm", "hierarchical", "auto"}));
  app.add_option("--transport", o.transport,
                 "cpu backend channels: auto (shared memory on one host), tcp or shm (default: "
                 "COLLIE_TRANSPORT, else auto)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "tcp", "shm"}));
  app.add_flag(
      "--blocking", o.blocking,
      "wait for each collective before issuing the next (latency as a blocking caller sees "
      "it); default: issue all -n, then wait");
  app.add_flag("--per-call", o.per_call,
               "with --blocking: also time each call and report the median call (the slowest "
               "rank's) after each row and in --json (costs two clock reads a call)")
      ->needs("--blocking");
  app.add_option("--backend", o.backend, "cpu (alias socket), nccl or auto")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "socket", "nccl", "auto"}));
  app.add_option("--init-method", o.init_method,
                 "init_method URL (default env://, or the launcher's store)");
  app.add_option("--json", o.json, "also write the results as JSON to this file");
  app.add_option("--nproc", o.nproc, "start this many local ranks itself (no launcher needed)")
      ->check(CLI::Range(1, 256));
  app.add_option("--timeout", o.timeout, "per-collective timeout: seconds, or a duration (90s, 5m)")
      ->capture_default_str();
}

Settings validate_options(const Options& o) {
  Settings s;
  const auto dtype = parse_data_type(o.dtype);
  if (!dtype)
    throw InvalidArgument(str_cat("-d '", o.dtype,
                                  "': unknown dtype (float, double, half, bfloat16, int32, "
                                  "int64, uint8, int8, bool)"));
  s.dtype = *dtype;
  const auto op = parse_reduce_op(o.op);
  if (!op)
    throw InvalidArgument(
        str_cat("-o '", o.op, "': unknown op (sum, prod, min, max, avg, band, bor, bxor)"));
  s.op = *op;
  const bool reduces =
      o.collective == "all_reduce" || o.collective == "reduce_scatter" || o.collective == "reduce";
  if (std::string why = unsupported_reduction(s.op, s.dtype); reduces && !why.empty())
    throw InvalidArgument(str_cat("-o ", o.op, " -d ", o.dtype, ": ", why));
  s.min_bytes = parse_bytes(o.min_bytes, "-b");
  s.max_bytes = parse_bytes(o.max_bytes, "-e");
  s.iter_bytes = parse_bytes(o.iter_bytes, "--iter-bytes");
  if (s.min_bytes > s.max_bytes)
    throw InvalidArgument(str_cat("-b ", o.min_bytes, " (", s.min_bytes,
                                  " bytes) is larger than -e ", o.max_bytes, " (", s.max_bytes,
                                  " bytes): no size to run"));
  if (o.check != 0 && o.check != 1)
    throw InvalidArgument(str_cat("-c ", o.check, ": expected 0 (no check) or 1"));
  if (o.root < 0) throw InvalidArgument(str_cat("-r ", o.root, ": a root is a rank, at least 0"));
  if (o.nproc > 0 && o.root >= o.nproc)
    throw InvalidArgument(
        str_cat("-r ", o.root, ": there are only ", o.nproc, " ranks (--nproc ", o.nproc, ")"));
  s.algo = parse_algo(o.algo);
  check_init_method(o.init_method);
  check_json_path(o.json);
  s.timeout = timeout_from_flag_or_env(o.timeout);  // "": COLLIE_TIMEOUT, else 30 min
  return s;
}

}  // namespace collie::bench
