// collectives_tune: measures collie's CPU collectives over loopback.
//
//   collectives_tune -n 4 -b 4 -e 256M -f 4 --collective all_reduce --algo ring
//   collectives_tune --stream          # one loopback TCP stream (T)
//
// The parent hosts a TcpStore on port 0 and re-runs itself once per rank;
// rank 0 prints one line per size: bytes, time per call (the slowest rank's
// mean), algbw and busbw in GB/s (nccl-tests' factors).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "collie/base/child_process.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/communicator.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

using namespace collie;

namespace {

// CPU seconds (user + system) this process has used: on a shared machine
// it shows the cost of a collective far more steadily than the wall clock.
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Args {
  int ranks = 2;
  int rank = -1;
  int port = 0;
  std::string min_bytes = "4", max_bytes = "64M";
  double factor = 4;
  int iters = 0;  // 0: by size
  int warmup = 3;
  std::string collective = "all_reduce";
  std::string algo = "auto";
  std::string dtype = "float32";
  size_t segment = 0, small = SIZE_MAX;
  long spin_us = -1;
  int sockbuf = -1;
  bool stream = false;
  bool rtt = false;
  bool connect_all = false;        // the full mesh at init instead of on first use
  std::string shm_wait = "futex";  // or "poll": how shared-memory waits sleep
};

size_t parse_size(const std::string& s) {
  size_t mult = 1;
  std::string num = s;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'M' || s.back() == 'G')) {
    mult = s.back() == 'K' ? 1 << 10 : s.back() == 'M' ? 1 << 20 : size_t{1} << 30;
    num.pop_back();
  }
  return static_cast<size_t>(std::stod(num) * mult);
}

// T: one loopback TCP stream, 4 MiB writes, as the ring's ceiling.
void measure_stream() {
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  ::listen(ls, 1);
  socklen_t len = sizeof sa;
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&sa), &len);
  const size_t chunk = 4 << 20, total = size_t{4} << 30;
  std::thread reader([&] {
    int fd = ::accept(ls, nullptr, nullptr);
    std::vector<char> buf(chunk);
    size_t got = 0;
    while (got < total) {
      ssize_t r = ::recv(fd, buf.data(), buf.size(), 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    ::close(fd);
  });
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  std::vector<char> buf(chunk, 1);
  const auto start = Clock::now();
  const double cpu_start = cpu_seconds();
  for (size_t sent = 0; sent < total;) {
    ssize_t r = ::send(fd, buf.data(), std::min(chunk, total - sent), 0);
    if (r <= 0) break;
    sent += static_cast<size_t>(r);
  }
  ::shutdown(fd, SHUT_WR);
  reader.join();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = cpu_seconds() - cpu_start;
  std::printf(
      "one loopback TCP stream: %.2f GB/s (%zu MiB in %.2f s); %.2f GB per CPU-second "
      "(both ends together)\n",
      total / s / 1e9, total >> 20, s, total / cpu / 1e9);
  ::close(fd);
  ::close(ls);
}

// Round trips of `bytes` over one loopback connection between two threads,
// blocking in recv() or busy-polling with MSG_DONTWAIT: the price of a
// wake-up, and of the 40-byte header on a tiny message.
double round_trip_us(size_t bytes, bool busy, int iters) {
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  ::listen(ls, 1);
  socklen_t len = sizeof sa;
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&sa), &len);
  auto exchange = [&](int fd, bool first) {
    std::vector<char> buf(bytes, 1);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto recv_all = [&] {
      size_t got = 0;
      while (got < bytes) {
        ssize_t r = ::recv(fd, buf.data() + got, bytes - got, busy ? MSG_DONTWAIT : 0);
        if (r > 0)
          got += static_cast<size_t>(r);
        else if (r == 0)
          return;
      }
    };
    for (int i = 0; i < iters; ++i) {
      if (first) {
        ::send(fd, buf.data(), bytes, 0);
        recv_all();
      } else {
        recv_all();
        ::send(fd, buf.data(), bytes, 0);
      }
    }
  };
  std::thread echo([&] {
    int fd = ::accept(ls, nullptr, nullptr);
    exchange(fd, false);
    ::close(fd);
  });
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  const auto start = Clock::now();
  exchange(fd, true);
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
  echo.join();
  ::close(fd);
  ::close(ls);
  return us;
}

double busbw_factor(const std::string& collective, int P) {
  if (collective == "all_reduce") return 2.0 * (P - 1) / P;
  if (collective == "all_gather" || collective == "reduce_scatter") return (P - 1.0) / P;
  return 1.0;
}

int run_rank(const Args& a) {
  auto store = TcpStore::connect("127.0.0.1", static_cast<uint16_t>(a.port));
  CommunicatorOptions o = CommunicatorOptions::from_env();
  o.store_prefix = "tune";
  o.connect_all = a.connect_all;
  o.futex_wait = a.shm_wait == "futex";
  if (a.segment) o.segment_bytes = a.segment;
  if (a.small != SIZE_MAX) o.small_message_bytes = a.small;
  if (a.spin_us >= 0) o.spin = o.oversubscribed_spin = std::chrono::microseconds(a.spin_us);
  if (a.sockbuf >= 0) o.socket_buffer_bytes = a.sockbuf;
  auto comm = Communicator::connect(*store, a.rank, a.ranks, o);
  const int P = a.ranks;
  const DataType dt = *parse_data_type(a.dtype);
  const size_t es = element_size(dt);
  const auto algo = a.algo == "ring"    ? AllReduceAlgorithm::kRing
                    : a.algo == "small" ? AllReduceAlgorithm::kSmall
                    : a.algo == "shm"   ? AllReduceAlgorithm::kShm
                                        : AllReduceAlgorithm::kAuto;
  const Deadline d(std::chrono::minutes(10));
  if (a.rank == 0) {
    std::printf("# %s, %d ranks, %s, algo %s, segment %zu, small %zu, spin %lldus, sockbuf %d\n",
                a.collective.c_str(), P, a.dtype.c_str(), a.algo.c_str(), o.segment_bytes,
                o.small_message_bytes, static_cast<long long>(o.spin.count()),
                o.socket_buffer_bytes);
    std::printf("%12s %10s %10s %10s %12s %12s\n", "bytes", "time_us", "algbw", "busbw",
                "cpu_us/call", "busB/cpu_ns");
  }
  for (size_t bytes = parse_size(a.min_bytes); bytes <= parse_size(a.max_bytes);
       bytes = std::max(bytes + es, static_cast<size_t>(bytes * a.factor))) {
    const size_t count = std::max<size_t>(1, bytes / es);
    const size_t per_rank = a.collective == "all_gather" || a.collective == "reduce_scatter"
                                ? std::max<size_t>(1, count / P)
                                : count;
    std::vector<uint8_t> in(per_rank * P * es + count * es, 1),
        out(per_rank * P * es + count * es, 0);
    auto call = [&] {
      if (a.collective == "all_reduce") {
        comm->all_reduce({in.data(), count, dt}, {in.data(), count, dt}, ReduceOp::kSum, d, algo);
      } else if (a.collective == "broadcast") {
        comm->broadcast({in.data(), count, dt}, 0, d);
      } else if (a.collective == "all_gather") {
        comm->all_gather({in.data(), per_rank, dt}, {out.data(), per_rank * P, dt}, d);
      } else if (a.collective == "reduce_scatter") {
        comm->reduce_scatter({in.data(), per_rank * P, dt}, {out.data(), per_rank, dt},
                             ReduceOp::kSum, d);
      } else {
        comm->barrier(d);
      }
    };
    const int iters =
        a.iters > 0
            ? a.iters
            : static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / (bytes * 4 + 1), 5, 2000));
    for (int i = 0; i < a.warmup; ++i) call();
    comm->barrier(d);
    const auto start = Clock::now();
    const double cpu_start = cpu_seconds();
    for (int i = 0; i < iters; ++i) call();
    double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
    double cpu_us = (cpu_seconds() - cpu_start) * 1e6 / iters;
    comm->all_reduce(view(&us, 1), view(&us, 1), ReduceOp::kMax, d);
    comm->all_reduce(view(&cpu_us, 1), view(&cpu_us, 1), ReduceOp::kSum, d);
    const size_t total = a.collective == "all_gather" || a.collective == "reduce_scatter"
                             ? per_rank * P * es
                             : count * es;
    const double algbw = total / us / 1e3;
    if (a.rank == 0) {
      // Bus bytes per CPU nanosecond of all ranks together: compare with the
      // stream's bytes per CPU-second to see how much work a byte costs.
      const double bus_bytes = total * busbw_factor(a.collective, P);
      std::printf("%12zu %10.2f %10.3f %10.3f %12.1f %12.3f\n", total, us, algbw,
                  algbw * busbw_factor(a.collective, P), cpu_us, bus_bytes / (cpu_us * 1e3));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("collectives_tune: collie CPU collectives over loopback");
  app.add_option("-n,--ranks", a.ranks);
  app.add_option("--rank", a.rank);
  app.add_option("--port", a.port);
  app.add_option("-b,--min", a.min_bytes);
  app.add_option("-e,--max", a.max_bytes);
  app.add_option("-f,--factor", a.factor);
  app.add_option("-i,--iters", a.iters);
  app.add_option("-w,--warmup", a.warmup);
  app.add_option("--collective", a.collective);
  app.add_option("--algo", a.algo);
  app.add_option("-d,--dtype", a.dtype);
  app.add_option("--segment", a.segment);
  app.add_option("--small", a.small);
  app.add_option("--spin-us", a.spin_us);
  app.add_option("--sockbuf", a.sockbuf);
  app.add_flag("--stream", a.stream);
  app.add_flag("--rtt", a.rtt);
  app.add_flag("--connect-all", a.connect_all, "connect every peer at init (the full mesh)");
  app.add_option("--shm-wait", a.shm_wait, "futex or poll: how waits on shared memory sleep")
      ->check(CLI::IsMember({"futex", "poll"}));
  CLI11_PARSE(app, argc, argv);
  if (a.stream) {
    measure_stream();
    return 0;
  }
  if (a.rtt) {
    for (size_t bytes : {size_t{1}, size_t{4}, size_t{44}, size_t{1024}}) {
      std::printf("loopback round trip, %4zu bytes: blocking %6.1f us, busy-polling %6.1f us\n",
                  bytes, round_trip_us(bytes, false, 20000), round_trip_us(bytes, true, 20000));
    }
    return 0;
  }
  if (a.rank >= 0) return run_rank(a);

  auto server = TcpStoreServer::start({.host = "127.0.0.1", .port = 0});
  std::vector<ChildProcess> ranks;
  for (int r = 0; r < a.ranks; ++r) {
    std::vector<std::string> args(argv, argv + argc);
    args.push_back("--rank=" + std::to_string(r));
    args.push_back("--port=" + std::to_string(server->port()));
    ranks.push_back(ChildProcess::spawn(args, {.path = "/proc/self/exe"}));
  }
  int rc = 0;
  for (ChildProcess& rank : ranks)
    if (!rank.reap().ok()) rc = 1;
  return rc;
}
