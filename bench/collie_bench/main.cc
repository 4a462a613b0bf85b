// collie-bench: nccl-tests' all_reduce_perf for collie. One process per rank:
//
//   collie-run --nproc-per-node 4 collie-bench -b 8 -e 256M -f 2   # under the launcher
//   collie-bench --nproc 4 -b 8 -e 256M -f 2 --json out.json       # its own ranks
//
// For each size it checks one result against a locally computed reference
// (-c 1), then times -n back-to-back asynchronous collectives after -w
// warm-up ones, averages the time over the ranks and prints nccl-tests'
// columns: algbw = size / time, busbw = algbw x nccl-tests' bus factor.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/bench/collie_bench/bench_data.h"
#include "collie/bench/collie_bench/bench_options.h"
#include "collie/bench/collie_bench/bench_report.h"
#include "collie/bench/collie_bench/local_launch.h"
#include "collie/bench/compare/peer_sweep.h"
#include "collie/runtime/api/distributed.h"
#include "collie/runtime/api/per_device_process_group.h"
#include "collie/runtime/cpu/cpu_process_group.h"

namespace collie::bench {
namespace {

class Runner {
 public:
  Runner(const Options& o, const Settings& s)
      : o_(o),
        dtype_(s.dtype),
        op_(s.op),
        pg_(get_default_group()),
        rank_(get_rank()),
        world_(get_world_size()),
        timeout_(s.timeout),
        iter_bytes_(s.iter_bytes) {
    if ((o.collective == "sendrecv" || o.collective == "stream") && world_ < 2)
      throw InvalidArgument(str_cat("collie-bench -C ", o.collective,
                                    ": it runs between ranks 0 and 1, and needs at least 2 ranks"));
    std::shared_ptr<ProcessGroup> host = pg_;
    if (auto per_device = std::dynamic_pointer_cast<PerDeviceProcessGroup>(pg_))
      host = per_device->backend(DeviceType::kCPU);
    if (auto socket = std::dynamic_pointer_cast<CpuProcessGroup>(host))
      socket->set_all_reduce_algorithm(s.algo);
    else if (s.algo != AllReduceAlgorithm::kAuto)
      throw InvalidArgument(str_cat("collie-bench: --algo ", o.algo, " needs the cpu backend, not ",
                                    pg_->backend_name()));
  }

  // One size: check once, then time. Returns the row (rank 0's view), or
  // nothing when the size holds no whole element per rank.
  std::optional<Row> run(uint64_t bytes) {
    const size_t es = element_size(dtype_);
    size_t per_rank = bytes / es;  // elements each rank contributes or receives
    // gather/scatter: big is the root's whole buffer (P parts), small each
    // rank's part, as for all_gather.
    const bool gathers = o_.collective == "all_gather" || o_.collective == "reduce_scatter" ||
                         o_.collective == "gather" || o_.collective == "scatter";
    const bool uneven = o_.collective == "all_to_all_uneven";
    const bool exchanges = o_.collective == "all_to_all" || uneven;
    if (gathers || exchanges) per_rank /= static_cast<size_t>(world_);
    const size_t total = gathers || exchanges ? per_rank * world_ : per_rank;
    if (total == 0 && o_.collective != "barrier")
      return std::nullopt;  // nccl-tests skips these too
    // all_to_all_uneven: the router's split of this rank's `total` elements
    // (the same in every peer's program) and what it receives.
    send_splits_.clear();
    recv_splits_.clear();
    size_t received = total;
    if (uneven) {
      send_splits_ = peer_sweep::router_splits(total, world_, rank_);
      recv_splits_ = peer_sweep::router_receives(total, world_, rank_);
      received = 0;
      for (size_t c : recv_splits_) received += c;
    }
    // all_to_all: big is the input, small the output (both P parts).
    HostBuffer big(dtype_, total), small(dtype_, gathers ? per_rank : exchanges ? received : 0);

    Row row;
    row.count = o_.collective == "barrier" ? 0 : total;
    row.bytes = row.count * es;
    row.dtype = std::string(to_string(dtype_));
    row.op = (o_.collective == "all_reduce" || o_.collective == "reduce_scatter" ||
              o_.collective == "reduce")
                 ? std::string(to_string(op_))
                 : "-";
    row.root = o_.collective == "broadcast" || o_.collective == "reduce" ||
                       o_.collective == "gather" || o_.collective == "scatter"
                   ? o_.root
                   : -1;
    if (o_.check) row.wrong = check(big, small, per_rank);
    big.zero();
    small.zero();

    // --iter-bytes: fewer calls at the sizes where -n of them would take long.
    int iters = o_.iters;
    if (iter_bytes_ > 0 && row.bytes > 0)
      iters = static_cast<int>(
          std::clamp<uint64_t>(iter_bytes_ / row.bytes, 1, static_cast<uint64_t>(o_.iters)));
    const int warmup = iter_bytes_ > 0 ? std::min(o_.warmup, iters) : o_.warmup;
    row.iters = iters;
    for (int i = 0; i < warmup; ++i) issue(big, small)->wait();
    acknowledge();
    pg_->barrier({.timeout = timeout_})->wait();
    auto start = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<Work>> works;
    works.reserve(iters);
    std::vector<double> calls_us;
    if (o_.blocking && o_.per_call) {
      calls_us.reserve(static_cast<size_t>(iters));
      for (int i = 0; i < iters; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        issue(big, small)->wait();
        calls_us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
      }
    } else if (o_.blocking) {
      for (int i = 0; i < iters; ++i) issue(big, small)->wait();
    } else {
      for (int i = 0; i < iters; ++i) works.push_back(issue(big, small));
      for (auto& w : works) w->wait();
    }
    acknowledge();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                    .count() /
                std::max(1, iters);
    // Average over the ranks, like nccl-tests' default; sendrecv and stream
    // the pair's slower clock (the other ranks idle).
    double avg = us;
    pg_->all_reduce(TensorView{&avg, 1, DataType::kFloat64},
                    {.op = p2p_ ? ReduceOp::kMax : ReduceOp::kAvg, .timeout = timeout_})
        ->wait();
    // sendrecv: one iteration is a round trip; the row shows the one-way
    // latency, as osu_latency does.
    row.time_us = o_.collective == "sendrecv" ? avg / 2 : avg;
    if (!calls_us.empty()) {
      std::nth_element(calls_us.begin(), calls_us.begin() + calls_us.size() / 2, calls_us.end());
      double median = calls_us[calls_us.size() / 2];
      pg_->all_reduce(TensorView{&median, 1, DataType::kFloat64},
                      {.op = ReduceOp::kMax, .timeout = timeout_})
          ->wait();
      row.median_us = o_.collective == "sendrecv" ? median / 2 : median;
    }
    row.algbw_gbps = row.time_us > 0 ? static_cast<double>(row.bytes) / (row.time_us * 1e3) : 0;
    row.busbw_gbps = row.algbw_gbps * bus_factor(o_.collective, world_);
    return row;
  }

 private:
  std::shared_ptr<Work> issue(HostBuffer& big, HostBuffer& small) {
    // --blocking: the caller waits at once, as torch's async_op=False.
    const bool async_op = !o_.blocking;
    // The collective is decided once (kind_): comparing its name on every
    // call cost the timed loop tens of ns of a 4-byte call's few hundred.
    switch (kind_) {
      case Kind::kAllReduce:
        return pg_->all_reduce(big.view(), {.op = op_, .timeout = timeout_, .async_op = async_op});
      case Kind::kBroadcast:
        return pg_->broadcast(big.view(),
                              {.root = o_.root, .timeout = timeout_, .async_op = async_op});
      case Kind::kAllGather:
        return pg_->all_gather(big.view(), small.view(),
                               {.timeout = timeout_, .async_op = async_op});
      case Kind::kReduceScatter:
        return pg_->reduce_scatter(small.view(), big.view(),
                                   {.op = op_, .timeout = timeout_, .async_op = async_op});
      case Kind::kReduce:
        return pg_->reduce(big.view(),
                           {.op = op_, .root = o_.root, .timeout = timeout_, .async_op = async_op});
      case Kind::kAllToAll:
        return pg_->all_to_all_single(small.view(), big.view(), recv_splits_, send_splits_,
                                      {.timeout = timeout_, .async_op = async_op});
      case Kind::kGather:
      case Kind::kScatter:
        // The root's P parts of big; the other ranks pass none.
        parts_.clear();
        if (rank_ == o_.root)
          for (int p = 0; p < world_; ++p)
            parts_.push_back(big.view(static_cast<size_t>(p) * small.count(), small.count()));
        if (kind_ == Kind::kGather)
          return pg_->gather(parts_, small.view(),
                             {.root = o_.root, .timeout = timeout_, .async_op = async_op});
        return pg_->scatter(small.view(), parts_,
                            {.root = o_.root, .timeout = timeout_, .async_op = async_op});
      case Kind::kSendRecv: return ping_pong(big);
      case Kind::kStream: return stream(big);
      case Kind::kBarrier: break;
    }
    return pg_->barrier({.timeout = timeout_, .async_op = async_op});
  }

  enum class Kind {
    kAllReduce,
    kBroadcast,
    kAllGather,
    kReduceScatter,
    kReduce,
    kAllToAll,
    kGather,
    kScatter,
    kSendRecv,
    kStream,
    kBarrier
  };
  static Kind kind_of(const std::string& c) {
    if (c == "all_reduce") return Kind::kAllReduce;
    if (c == "broadcast") return Kind::kBroadcast;
    if (c == "all_gather") return Kind::kAllGather;
    if (c == "reduce_scatter") return Kind::kReduceScatter;
    if (c == "reduce") return Kind::kReduce;
    if (c == "all_to_all" || c == "all_to_all_uneven") return Kind::kAllToAll;
    if (c == "gather") return Kind::kGather;
    if (c == "scatter") return Kind::kScatter;
    if (c == "sendrecv") return Kind::kSendRecv;
    if (c == "stream") return Kind::kStream;
    return Kind::kBarrier;
  }

  // osu_latency's ping-pong between ranks 0 and 1 (the others idle): rank 0
  // sends and waits for the buffer back, rank 1 returns it.
  std::shared_ptr<Work> ping_pong(HostBuffer& buf) {
    const P2POptions p2p{.timeout = timeout_, .async_op = false};
    if (rank_ == 0) {
      pg_->send(buf.view(), 1, p2p)->wait();
      return pg_->recv(buf.view(), 1, p2p);
    }
    if (rank_ == 1) {
      pg_->recv(buf.view(), 0, p2p)->wait();
      return pg_->send(buf.view(), 0, p2p);
    }
    auto idle = std::make_shared<CompletionWork>("sendrecv (not in the pair)");
    idle->mark_completed();
    return idle;
  }

  // osu_bw's direction without its window: rank 0 sends back to back, rank
  // 1 receives (-b 1: each call waited for before the next, as MPI_Send and
  // MPI_Recv in the peers' stream; -b 0: all posted, then waited for).
  std::shared_ptr<Work> stream(HostBuffer& buf) {
    const P2POptions p2p{.timeout = timeout_, .async_op = !o_.blocking};
    if (rank_ == 0) return pg_->send(buf.view(), 1, p2p);
    if (rank_ == 1) return pg_->recv(buf.view(), 0, p2p);
    auto idle = std::make_shared<CompletionWork>("stream (not in the pair)");
    idle->mark_completed();
    return idle;
  }

  // stream: rank 1's word that the last message is in, so that rank 0's
  // clock covers every delivery (a send may complete once it is buffered).
  void acknowledge() {
    if (o_.collective != "stream" || rank_ > 1) return;
    int32_t done = 0;
    const P2POptions p2p{.tag = 1, .timeout = timeout_};
    if (rank_ == 1) pg_->send(TensorView{&done, 1, DataType::kInt32}, 0, p2p)->wait();
    if (rank_ == 0) pg_->recv(TensorView{&done, 1, DataType::kInt32}, 1, p2p)->wait();
  }

  // Runs the collective once on known inputs and counts wrong elements over
  // all ranks.
  int64_t check(HostBuffer& big, HostBuffer& small, size_t per_rank) {
    const std::string& c = o_.collective;
    int64_t wrong = 0;
    if (c == "all_reduce") {
      big.fill_input(op_, rank_, 0, big.count());
      issue(big, small)->wait();
      wrong = count_wrong(big, 0, big.count(), dtype_,
                          [&](size_t i) { return reduced_value(op_, world_, i, dtype_); });
    } else if (c == "broadcast") {
      big.fill_input(ReduceOp::kSum, rank_, 0, big.count());
      issue(big, small)->wait();
      wrong = count_wrong(big, 0, big.count(), dtype_,
                          [&](size_t i) { return input_value(ReduceOp::kSum, o_.root, i); });
    } else if (c == "all_gather") {
      small.fill_input(ReduceOp::kSum, rank_, 0, per_rank);
      issue(big, small)->wait();
      wrong = count_wrong(big, 0, big.count(), dtype_, [&](size_t i) {
        return input_value(ReduceOp::kSum, static_cast<int>(i / per_rank), i % per_rank);
      });
    } else if (c == "reduce_scatter") {
      big.fill_input(op_, rank_, 0, big.count());
      issue(big, small)->wait();
      wrong = count_wrong(small, 0, per_rank, dtype_, [&](size_t i) {
        return reduced_value(op_, world_, rank_ * per_rank + i, dtype_);
      });
    } else if (c == "reduce") {
      big.fill_input(op_, rank_, 0, big.count());
      issue(big, small)->wait();
      if (rank_ == o_.root)
        wrong = count_wrong(big, 0, big.count(), dtype_,
                            [&](size_t i) { return reduced_value(op_, world_, i, dtype_); });
    } else if (c == "gather") {
      // Rank p's part lands at [p n, (p+1) n) of the root's buffer.
      small.fill_input(ReduceOp::kSum, rank_, 0, per_rank);
      issue(big, small)->wait();
      if (rank_ == o_.root)
        wrong = count_wrong(big, 0, big.count(), dtype_, [&](size_t i) {
          return input_value(ReduceOp::kSum, static_cast<int>(i / per_rank), i % per_rank);
        });
    } else if (c == "scatter") {
      // The root's element j goes to rank j / n: here its [r n, (r+1) n).
      if (rank_ == o_.root) big.fill_input(ReduceOp::kSum, o_.root, 0, big.count());
      issue(big, small)->wait();
      wrong = count_wrong(small, 0, per_rank, dtype_, [&](size_t i) {
        return input_value(ReduceOp::kSum, o_.root, rank_ * per_rank + i);
      });
    } else if (c == "all_to_all") {
      // Rank p's input element j is input_value(p, j); part r of it goes to
      // rank r, so output part p here is rank p's elements [r n, (r+1) n).
      big.fill_input(ReduceOp::kSum, rank_, 0, big.count());
      issue(big, small)->wait();
      wrong = count_wrong(small, 0, small.count(), dtype_, [&](size_t i) {
        return input_value(ReduceOp::kSum, static_cast<int>(i / per_rank),
                           rank_ * per_rank + i % per_rank);
      });
    } else if (c == "all_to_all_uneven") {
      // Output part p here is rank p's input elements from where its split
      // for this rank starts.
      big.fill_input(ReduceOp::kSum, rank_, 0, big.count());
      issue(big, small)->wait();
      std::vector<int> from(small.count());
      std::vector<size_t> at(small.count());
      for (int p = 0, i = 0; p < world_; ++p) {
        const auto theirs = peer_sweep::router_splits(big.count(), world_, p);
        size_t start = 0;
        for (int r = 0; r < rank_; ++r) start += theirs[r];
        for (size_t j = 0; j < recv_splits_[p]; ++j, ++i) {
          from[i] = p;
          at[i] = start + j;
        }
      }
      wrong = count_wrong(small, 0, small.count(), dtype_,
                          [&](size_t i) { return input_value(ReduceOp::kSum, from[i], at[i]); });
    } else if (c == "stream") {
      // Rank 0's data lands on rank 1.
      big.fill_input(ReduceOp::kSum, 0, 0, big.count());
      if (rank_ == 1) big.zero();
      issue(big, small)->wait();
      acknowledge();
      if (rank_ == 1)
        wrong = count_wrong(big, 0, big.count(), dtype_,
                            [&](size_t i) { return input_value(ReduceOp::kSum, 0, i); });
    } else if (c == "sendrecv") {
      // Rank 0's data goes to rank 1 and comes back: both end with it.
      big.fill_input(ReduceOp::kSum, 0, 0, big.count());
      if (rank_ == 1) big.zero();
      issue(big, small)->wait();
      if (rank_ <= 1)
        wrong = count_wrong(big, 0, big.count(), dtype_,
                            [&](size_t i) { return input_value(ReduceOp::kSum, 0, i); });
    } else {
      issue(big, small)->wait();
    }
    pg_->all_reduce(TensorView{&wrong, 1, DataType::kInt64}, {.timeout = timeout_})->wait();
    return wrong;
  }

  const Options& o_;
  DataType dtype_;
  ReduceOp op_;
  std::shared_ptr<ProcessGroup> pg_;
  int rank_, world_;
  const Kind kind_ = kind_of(o_.collective);
  const bool p2p_ = o_.collective == "sendrecv" || o_.collective == "stream";
  Timeout timeout_;
  uint64_t iter_bytes_;
  std::vector<TensorView> parts_;  // gather/scatter: the root's parts of big
  // all_to_all_uneven: elements to and from each rank (empty: equal parts).
  std::vector<size_t> send_splits_, recv_splits_;
};

// "# channels at init (shm/tcp peers per rank): 0:3/0 ...; init max 12.3 ms":
// each rank's connected channels (lazy: they grow with the algorithms run).
// Every rank calls it.
void print_channels_line(double init_ms, const char* when) {
  auto socket = std::dynamic_pointer_cast<CpuProcessGroup>(get_default_group());
  if (!socket) return;
  const auto kinds = socket->channel_kinds();
  std::vector<int32_t> mine{0, 0, static_cast<int32_t>(init_ms * 1000)};
  std::vector<int32_t> all(3 * get_world_size());
  for (const auto& k : kinds) mine[k == "shm" ? 0 : 1] += !k.empty();
  socket
      ->all_gather(TensorView{all.data(), all.size(), DataType::kInt32},
                   TensorView{mine.data(), 3, DataType::kInt32})
      ->wait();
  if (get_rank() == 0) print_channels(all, when);
}

int run_rank(const Options& o, const Settings& s) {
  const auto init_start = std::chrono::steady_clock::now();
  init_process_group({.backend = o.backend,
                      .init_method = o.init_method,
                      .timeout = s.timeout,
                      .transport = o.transport});
  const bool main_rank = get_rank() == 0;
  RunInfo info{o.collective, get_backend(), o.algo, get_world_size(), o.iters, o.warmup};
  const double init_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - init_start)
          .count();
  if (main_rank) print_header(info, o.blocking);
  print_channels_line(init_ms, "at init");
  Runner runner(o, s);
  std::vector<Row> rows;
  int64_t wrong = 0;
  for (uint64_t bytes = s.min_bytes; bytes <= s.max_bytes;) {
    if (auto row = runner.run(bytes)) {
      if (row->wrong > 0) wrong += row->wrong;
      if (main_rank) print_row(*row);
      rows.push_back(*row);
    }
    if (o.collective == "barrier") break;
    uint64_t next = static_cast<uint64_t>(static_cast<double>(bytes) * o.factor);
    bytes = next > bytes ? next : bytes + 1;
  }
  print_channels_line(init_ms, "after the run");
  if (main_rank) {
    print_footer(rows);
    if (!o.json.empty()) write_json(o.json, info, rows);
  }
  destroy_process_group();
  return wrong > 0 ? kWrongResultsExit : 0;
}

}  // namespace
}  // namespace collie::bench

int main(int argc, char** argv) {
  using namespace collie::bench;
  Options o;
  CLI::App app{
      "collie-bench: nccl-tests-style collective benchmark for collie.\n"
      "Example: collie-bench --nproc 4 -b 8 -e 256M -f 2 -C all_reduce --json out.json"};
  add_options(app, o);
  // Bad flags: one line and exit 2, before any rank starts.
  Settings settings;
  try {
    app.parse(argc, argv);
    settings = validate_options(o);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "collie-bench: %s (see --help)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collie-bench: %s\n", e.what());
    return 2;
  }

  try {
    const bool launched = std::getenv("RANK") != nullptr ||
                          std::getenv("SLURM_PROCID") != nullptr ||
                          std::getenv("OMPI_COMM_WORLD_RANK") != nullptr;
    if (o.nproc > 0 || (!launched && o.init_method.empty())) {
      // Re-run ourselves once per rank, with the same arguments minus --nproc.
      std::vector<std::string> child{"/proc/self/exe"};
      for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--nproc") {
          ++i;
          continue;
        }
        if (a.rfind("--nproc=", 0) == 0) continue;
        child.push_back(a);
      }
      return run_local_ranks(std::max(1, o.nproc), child);
    }
    return run_rank(o, settings);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collie-bench: %s\n", e.what());
    return 1;
  }
}
