#include "collie/bench/store_scale/simulated_ranks.h"

#include <netinet/in.h>

#include <asio.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "collie/base/backoff.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"

namespace collie::bench {
namespace {

using asio::ip::tcp;
using store_protocol::Dialect;
using store_protocol::Op;
using store_protocol::Writer;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// What every rank of this process shares.
struct Job {
  asio::io_context& io;
  tcp::endpoint server;
  int world = 0;
  SimDialect dialect = SimDialect::kV2;
  SimulationReport& report;
  int64_t running = 0;

  Dialect wire() const { return dialect == SimDialect::kV2 ? Dialect::kV2 : Dialect::kV1_13; }
  void note_error(const std::string& what) {
    if (report.first_error[0] == 0)
      std::snprintf(report.first_error, sizeof(report.first_error), "%s", what.c_str());
  }
  void finished() {
    if (--running == 0) io.stop();
  }
};

Writer& request(Writer& w, const Job& job, Op op) {
  return w.u8(store_protocol::query_byte(op, job.wire()));
}

class SimRank : public std::enable_shared_from_this<SimRank> {
 public:
  SimRank(Job& job, int rank) : job_(job), rank_(rank), socket_(job.io), timer_(job.io) {}

  void connect() {
    if (connect_began_ns_ == 0) connect_began_ns_ = now_ns();
    // Thousands of connections from one address to one port make every
    // connect() search the ephemeral ports for one not yet used towards it,
    // which grows with the ports in use (a second and more per thousand at
    // 16384). A real job's ranks come from hundreds of hosts, so the ranks
    // here come from 200 loopback addresses; the port is then picked at
    // connect (IP_BIND_ADDRESS_NO_PORT) and is almost always free.
    std::error_code ec;
    socket_.open(tcp::v4(), ec);
    const int one = 1;
    ::setsockopt(socket_.native_handle(), IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    socket_.bind(
        tcp::endpoint(asio::ip::address_v4(0x7f000002u + static_cast<uint32_t>(rank_ % 200)), 0),
        ec);
    if (ec) return retry_connect(ec);
    socket_.async_connect(job_.server, [self = shared_from_this()](std::error_code ec) {
      if (ec) return self->retry_connect(ec);
      self->connected();
      self->join();
    });
  }

 private:
  void connected() {
    SimulationReport& r = job_.report;
    const int64_t now = now_ns();
    r.last_connected_ns = std::max(r.last_connected_ns, now);
    if (now - connect_began_ns_ > 900'000'000) ++r.slow_connects[0];
    if (now - connect_began_ns_ > 2'900'000'000) ++r.slow_connects[1];
    std::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
  }

  // The server may be busy accepting thousands: back off (10 ms doubling to
  // 1 s, full jitter) and try again.
  void retry_connect(std::error_code ec) {
    ++job_.report.connect_retries;
    job_.note_error(str_cat("rank ", rank_, ": connect failed (retried): ", ec.message()));
    std::error_code ignored;
    socket_.close(ignored);
    timer_.expires_after(backoff_.next_pause());
    timer_.async_wait([self = shared_from_this()](std::error_code e) {
      if (!e) self->connect();
    });
  }

  // Step 1: [VALIDATE] SET addr/<rank>, ADD count 1.
  void join() {
    Writer w(out_);
    if (job_.dialect == SimDialect::kV2)
      w.u8(static_cast<uint8_t>(store_protocol::V2Query::kValidate))
          .u32(store_protocol::kValidationMagic);
    request(w, job_, Op::kSet).str(str_cat("addr/", rank_)).str(simulated_address(rank_));
    request(w, job_, Op::kAdd).str("count").i64(1);
    send([self = shared_from_this()] {
      self->read_u64([self](uint64_t count) { self->barrier(static_cast<int64_t>(count)); });
    });
  }

  // Step 2: the last to arrive sets the barrier; everyone waits for it.
  void barrier(int64_t count) {
    Writer w(out_);
    if (count == job_.world) request(w, job_, Op::kSet).str("barrier").str("1");
    request(w, job_, Op::kWait).keys({"barrier"});
    send([self = shared_from_this()] {
      asio::async_read(self->socket_, asio::buffer(self->header_, 1),
                       [self](std::error_code ec, size_t) {
                         if (ec) return self->fail("WAIT", ec);
                         self->fetch_neighbours();
                       });
    });
  }

  // Step 3: the two ring neighbours' addresses.
  void fetch_neighbours() {
    neighbours_ = {(rank_ + job_.world - 1) % job_.world, (rank_ + 1) % job_.world};
    Writer w(out_);
    if (job_.dialect == SimDialect::kV2) {
      request(w, job_, Op::kMultiGet)
          .keys({str_cat("addr/", neighbours_[0]), str_cat("addr/", neighbours_[1])});
    } else {
      for (int n : neighbours_) request(w, job_, Op::kGet).str(str_cat("addr/", n));
    }
    send([self = shared_from_this()] { self->read_neighbour(0); });
  }

  void read_neighbour(size_t i) {
    if (i == neighbours_.size()) return finish();
    read_u64([self = shared_from_this(), i](uint64_t len) {
      if (len > 4096) return self->fail("GET", asio::error::message_size);
      self->value_.resize(static_cast<size_t>(len));
      asio::async_read(self->socket_, asio::buffer(self->value_),
                       [self, i](std::error_code ec, size_t) {
                         if (ec) return self->fail("GET", ec);
                         const std::string want = simulated_address(self->neighbours_[i]);
                         if (self->value_ != Bytes(want.begin(), want.end()))
                           ++self->job_.report.wrong_values;
                         self->read_neighbour(i + 1);
                       });
    });
  }

  void finish() {
    ++job_.report.done;
    job_.report.last_done_ns = std::max(job_.report.last_done_ns, now_ns());
    close();
    job_.finished();
  }

  // A rank that lost its connection may have added to the counter or not:
  // the job cannot complete, so this process stops and reports at once.
  void fail(const char* step, std::error_code ec) {
    ++job_.report.failed;
    job_.note_error(str_cat("rank ", rank_, ": ", step, " failed: ", ec.message()));
    close();
    job_.io.stop();
  }

  // Closes with a reset rather than a FIN: a run leaves no TIME_WAIT
  // sockets behind to hold ephemeral ports the next run needs.
  void close() {
    std::error_code ignored;
    socket_.set_option(asio::socket_base::linger(true, 0), ignored);
    socket_.close(ignored);
  }

  template <typename Then>
  void send(Then then) {
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), then](std::error_code ec, size_t) {
                        self->out_.clear();
                        if (ec) return self->fail("write", ec);
                        then();
                      });
  }

  template <typename Then>
  void read_u64(Then then) {
    asio::async_read(socket_, asio::buffer(header_, 8),
                     [self = shared_from_this(), then](std::error_code ec, size_t) {
                       if (ec) return self->fail("read", ec);
                       then(store_protocol::load_u64(self->header_));
                     });
  }

  Job& job_;
  const int rank_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  Backoff backoff_{
      {.initial = std::chrono::milliseconds(10), .max = std::chrono::seconds(1), .jitter = 1.0}};
  int64_t connect_began_ns_ = 0;
  Bytes out_;
  uint8_t header_[8] = {};
  Bytes value_;
  std::vector<int> neighbours_;
};

}  // namespace

std::string simulated_address(int rank) {
  return str_cat("10.", (rank >> 16) & 255, ".", (rank >> 8) & 255, ".", rank & 255, ":",
                 29500 + rank % 1000);
}

SimulationReport simulate_ranks(uint16_t port, int first, int last, int world, SimDialect dialect,
                                Timeout limit) {
  SimulationReport report;
  asio::io_context io(1);
  Job job{io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), world, dialect, report};
  job.running = last - first;
  std::vector<std::shared_ptr<SimRank>> ranks;
  ranks.reserve(static_cast<size_t>(last - first));
  for (int r = first; r < last; ++r) ranks.push_back(std::make_shared<SimRank>(job, r));
  for (auto& r : ranks) r->connect();
  asio::steady_timer deadline(io, limit);
  deadline.async_wait([&](std::error_code ec) {
    if (!ec) io.stop();
  });
  if (job.running > 0) io.run();
  report.unfinished = (last - first) - report.done - report.failed;
  if (report.unfinished > 0) {
    job.note_error(
        str_cat(report.unfinished, " rank(s) still running after ", format_duration(limit)));
  }
  return report;
}

}  // namespace collie::bench
