#include "collie/rendezvous/tcp_store/tcp_store_client.h"

#include <unistd.h>

#include <algorithm>
#include <random>
#include <string_view>
#include <thread>

#include "collie/base/backoff.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/store_auth.h"
#include "collie/rendezvous/tcp_store/tcp_store_detect.h"

namespace collie {

using store_protocol::Dialect;
using store_protocol::Writer;

TcpStoreClient::SlowWaitLog::SlowWaitLog(const Deadline& deadline, Timeout first)
    : start_(deadline.start()), next_(start_ + std::max<Timeout>(first, Timeout(1))) {}

void TcpStoreClient::SlowWaitLog::report(const std::string& line) {
  COLLIE_LOG(kWarn) << line;
  // The next line when the wait has doubled, or in 5 min.
  const auto now = Clock::now();
  next_ = now + std::min<Clock::duration>(now - start_, std::chrono::minutes(5));
}

TcpStoreClient::TcpStoreClient(std::string host, uint16_t port, const TcpStoreOptions& options,
                               std::unique_ptr<TcpStoreServer> server)
    : TcpStore(options.timeout),
      host_(std::move(host)),
      port_(port),
      options_(options),
      server_(std::move(server)) {
  std::lock_guard lock(mu_);
  open(Deadline(timeout_));
}

std::shared_ptr<Store> TcpStoreClient::clone(Timeout timeout) {
  TcpStoreOptions options = options_;
  options.timeout = resolve_timeout(timeout);
  return std::make_shared<TcpStoreClient>(host_, port_, options);
}

TcpStoreClient::~TcpStoreClient() {
  // Close our socket before the server (if we host it) stops.
  socket_.close();
}

StoreProtocol TcpStoreClient::protocol() const {
  std::lock_guard lock(mu_);
  return dialect_ == Dialect::kV1_13 ? StoreProtocol::kV1_13 : StoreProtocol::kV2;
}

std::string TcpStoreClient::describe(const std::string& what) const {
  return str_cat("TcpStore ", host_, ":", port_, ": ", what);
}

void TcpStoreClient::check_size(const std::string& key, size_t value_bytes) const {
  const size_t cap = options_.max_value_bytes;
  if (key.size() > cap || value_bytes > cap) {
    throw InvalidArgument(describe(str_cat("key '", key.substr(0, 64), key.size() > 64 ? "..." : "",
                                           "' (", key.size(), " bytes) with a value of ",
                                           value_bytes, " bytes is over the cap of ", cap,
                                           " bytes (TcpStoreOptions::max_value_bytes)")));
  }
}

void TcpStoreClient::open(const Deadline& deadline) {
  // The server may not be up yet: back off exponentially (capped at 1 s), with
  // full jitter (uniform in [0, pause]) so that thousands of ranks that start
  // together spread their retries instead of coming back in lock-step.
  Backoff backoff(
      {.initial = std::chrono::milliseconds(10), .max = std::chrono::seconds(1), .jitter = 1.0});
  int attempts = 0;
  std::string last_error;
  SlowWaitLog slow(deadline, options_.report_after);
  for (;;) {
    ++attempts;
    StoreSocket socket;
    // An attempt ends by the next report at the latest, so that one towards
    // an unreachable host (SYNs unanswered) is reported too.
    const IoResult r =
        StoreSocket::connect(host_, port_, std::min(deadline.when(), slow.next()), &socket);
    if (r.ok()) {
      const Handshake h = handshake(socket, deadline);
      if (h == Handshake::kDone) {
        socket_ = std::move(socket);
        awaiting_first_answer_ = true;
        return;
      }
      if (h == Handshake::kRetryIn2x) continue;
      last_error = describe_store_refusal(kStoreRefusedBusy);
    } else {
      last_error = r.describe();
    }
    if (deadline.expired()) break;
    if (attempts == 1) {
      COLLIE_LOG(kInfo) << describe(str_cat("cannot connect yet (", last_error,
                                            "); retrying until the deadline, in ",
                                            format_duration(deadline.remaining())));
    } else if (slow.due()) {
      slow.report(describe(str_cat("still cannot connect ", deadline.describe(), " (", attempts,
                                   " attempts; last error: ", last_error, ")")));
    }
    backoff.sleep(deadline);
  }
  throw TimeoutError(describe(str_cat("could not connect ", deadline.describe(), " (", attempts,
                                      " attempts; last error: ", last_error, ")")));
}

IoResult TcpStoreClient::await_answer(const std::vector<std::string>& keys,
                                      const Deadline& deadline, const std::string& awaited) {
  SlowWaitLog slow(deadline, options_.report_after);
  for (;;) {
    IoResult r = socket_.wait_readable(std::min(deadline.when(), slow.next()));
    if (r.kind != IoResult::Kind::kTimeout || deadline.expired()) return r;
    if (!awaited.empty()) {
      slow.report(describe(str_cat("still waiting for ", awaited, " ", deadline.describe())));
      continue;
    }
    constexpr size_t kShown = 8;
    std::vector<std::string> shown(keys.begin(), keys.begin() + std::min(keys.size(), kShown));
    slow.report(describe(str_cat(
        "still waiting for key(s) [", join(shown, ", "),
        keys.size() > kShown ? str_cat(", ... ", keys.size() - kShown, " more") : std::string(),
        "] ", deadline.describe())));
  }
}

void TcpStoreClient::refused_by_server(uint8_t notice) {
  socket_.close();
  throw StoreError(describe(describe_store_refusal(notice)));
}

bool TcpStoreClient::refused(uint8_t answer) const {
  if (!is_store_refusal(answer)) return false;
  if (answer == kStoreRefusedBusy) return true;
  throw StoreError(describe(describe_store_refusal(answer)));
}

TcpStoreClient::Handshake TcpStoreClient::handshake(StoreSocket& socket, const Deadline& deadline) {
  auto check_io = [&](const IoResult& r, const char* step) {
    if (r.ok()) return;
    if (r.kind == IoResult::Kind::kTimeout)
      throw TimeoutError(describe(str_cat(step, " got no answer ", deadline.describe())));
    throw StoreError(describe(str_cat(step, " failed: ", r.describe())));
  };
  // With a job secret, prove it before anything else (store_auth.h).
  if (const JobSecret& secret = options_.secret ? *options_.secret : JobSecret::from_env();
      secret && authenticate_store_client(socket, secret, deadline, [this](const std::string& w) {
                  return describe(w);
                }) == StoreAuthResult::kBusy)
    return Handshake::kBusy;
  if (dialect_ == Dialect::kUnknown && options_.protocol == StoreProtocol::kV1_13)
    dialect_ = Dialect::kV1_13;
  if (dialect_ == Dialect::kUnknown && options_.protocol == StoreProtocol::kDetect) {
    // The probe (store_protocol.h): a 1.13 CHECK of a reserved key, harmless
    // to every server that could be listening.
    Bytes probe;
    Writer(probe)
        .u8(static_cast<uint8_t>(store_protocol::V1Query::kCheck))
        .keys({store_protocol::kProbeKey});
    check_io(socket.send_all(probe.data(), probe.size(), deadline.when()), "dialect probe");
    const ProbeOutcome outcome = await_probe_answer(socket, host_, port_, deadline);
    if (outcome.echoed) {
      COLLIE_LOG(kDebug) << describe("a PyTorch 2.x server (libuv); speaking 2.x");
      dialect_ = Dialect::kV2;
      return Handshake::kRetryIn2x;
    }
    const IoResult& r = outcome.io;
    const uint8_t answer = outcome.answer;
    if (r.kind == IoResult::Kind::kClosed) {
      COLLIE_LOG(kDebug) << describe("a PyTorch 2.x server; speaking 2.x");
      dialect_ = Dialect::kV2;
      return Handshake::kRetryIn2x;
    }
    check_io(r, "dialect probe");
    if (refused(answer)) return Handshake::kBusy;
    if (answer == store_protocol::kCheckReady || answer == store_protocol::kCheckNotReady) {
      COLLIE_LOG(kDebug) << describe("a PyTorch 1.13 server; speaking 1.13");
      dialect_ = Dialect::kV1_13;
      return Handshake::kDone;
    }
    if (answer != store_protocol::kProbeBothDialects) {
      throw StoreError(describe(str_cat("unexpected answer ", int{answer},
                                        " to the dialect probe: is this a TCPStore server?")));
    }
    // collie's server: it serves both, and 2.x has every operation.
    server_parks_gets_ = true;
  }
  if (dialect_ == Dialect::kV1_13) return Handshake::kDone;
  dialect_ = Dialect::kV2;
  // 2.x: VALIDATE then PING, whose nonce must come back. Its first byte is
  // never a refusal notice (0xB0-0xBF), which a server may send instead.
  const uint32_t nonce = ((static_cast<uint32_t>(::getpid()) << 8) ^ 0x5a5a0000u) | 0x2Au;
  Bytes hello;
  Writer(hello)
      .u8(static_cast<uint8_t>(store_protocol::V2Query::kValidate))
      .u32(store_protocol::kValidationMagic)
      .u8(static_cast<uint8_t>(store_protocol::V2Query::kPing))
      .u32(nonce);
  check_io(socket.send_all(hello.data(), hello.size(), deadline.when()), "2.x handshake");
  uint8_t echoed[4];
  IoResult r = socket.recv_exact(echoed, 1, deadline.when());
  if (r.ok() && refused(echoed[0])) return Handshake::kBusy;
  if (r.ok()) r = socket.recv_exact(echoed + 1, 3, deadline.when());
  if (r.kind == IoResult::Kind::kClosed) {
    throw StoreError(
        describe("the server closed the connection during the 2.x handshake (VALIDATE, PING); "
                 "if it is a PyTorch 1.13 server, use StoreProtocol::kV1_13 or kDetect"));
  }
  check_io(r, "2.x handshake");
  if (store_protocol::load_u32(echoed) != nonce)
    throw StoreError(describe("PING answered with the wrong nonce: is this a TCPStore server?"));
  return Handshake::kDone;
}

void TcpStoreClient::ensure_open() {
  if (!socket_.is_open()) open(Deadline(timeout_));
}

Bytes TcpStoreClient::begin(Op op) {
  Bytes request;
  request.push_back(store_protocol::query_byte(op, dialect_));
  return request;
}

namespace {

// Why a server may close the connection on one of torch's later queries:
// it predates them (or is torch's classic backend, which has no queues).
std::string closed_hint(const char* what) {
  const std::string_view op = what;
  if (op.starts_with("QUEUE_"))
    return "; if the server is torch's, it needs torch >= 2.11 and its libuv backend (the "
           "default) for queues";
  if (op == "LIST_KEYS") return "; if the server is torch's, it needs torch >= 2.11 for LIST_KEYS";
  if (op == "BARRIER") return "; if the server is torch's, it needs torch >= 2.15 for BARRIER";
  return {};
}

}  // namespace

void TcpStoreClient::fail(const IoResult& r, const char* what, const Deadline& deadline) {
  socket_.close();  // whatever was in flight, the stream is out of step now
  if (r.kind == IoResult::Kind::kTimeout)
    throw TimeoutError(describe(str_cat(what, " got no answer ", deadline.describe())));
  throw NetworkError(describe(
      str_cat(what, " failed: ", r.describe(), " (after ", format_duration(deadline.elapsed()), ")",
              r.kind == IoResult::Kind::kClosed ? closed_hint(what) : std::string())));
}

void TcpStoreClient::send(const Bytes& request, const char* what, const Deadline& deadline) {
  if (IoResult r = socket_.send_all(request.data(), request.size(), deadline.when()); !r.ok())
    fail(r, what, deadline);
}

void TcpStoreClient::recv(void* data, size_t n, const char* what, const Deadline& deadline) {
  if (n == 0) return;
  uint8_t* p = static_cast<uint8_t*>(data);
  if (awaiting_first_answer_) {
    // A server that refuses a connection without a handshake (1.13, no
    // secret) sends one notice byte and closes. No one-byte answer is ever
    // a notice's value; a longer one is a notice only if the close follows.
    awaiting_first_answer_ = false;
    if (IoResult r = socket_.recv_exact(p, 1, deadline.when()); !r.ok()) fail(r, what, deadline);
    if (is_store_refusal(p[0])) {
      IoResult rest = n > 1 ? socket_.recv_exact(p + 1, n - 1, deadline.when()) : IoResult{};
      if (n == 1 || rest.kind == IoResult::Kind::kClosed) refused_by_server(p[0]);
      if (!rest.ok()) fail(rest, what, deadline);
      return;
    }
    ++p;
    --n;
  }
  if (IoResult r = socket_.recv_exact(p, n, deadline.when()); !r.ok()) fail(r, what, deadline);
}

uint8_t TcpStoreClient::recv_u8(const char* what, const Deadline& deadline) {
  uint8_t v = 0;
  recv(&v, 1, what, deadline);
  return v;
}

int64_t TcpStoreClient::recv_i64(const char* what, const Deadline& deadline) {
  uint8_t b[8];
  recv(b, 8, what, deadline);
  return static_cast<int64_t>(store_protocol::load_u64(b));
}

Bytes TcpStoreClient::recv_bytes(const char* what, const Deadline& deadline) {
  uint64_t len = static_cast<uint64_t>(recv_i64(what, deadline));
  if (len > options_.max_value_bytes) {
    socket_.close();
    throw StoreError(describe(str_cat(what, ": the server sent a value of ", len,
                                      " bytes, over the cap of ", options_.max_value_bytes)));
  }
  Bytes value(static_cast<size_t>(len));
  recv(value.data(), value.size(), what, deadline);
  return value;
}

}  // namespace collie
