// collie-store: a standalone TcpStore server (PyTorch's TCPStore protocol,
// 2.x and 1.13 clients alike) for jobs whose ranks should not host it.
//
//   collie-store --host 0.0.0.0 --port 29500
//   collie-store listening on 0.0.0.0:29500
//
// Port 0 picks a free port; the line on stdout says which. SIGTERM or SIGINT
// stop it cleanly (exit 0). --timeout stops it after that many seconds, for
// jobs that must not leave a server behind. Every number is range-checked
// as text before it is converted, so a value that does not fit is refused
// with the flag's name and its range instead of wrapping.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/tcp_store/store_protocol.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

namespace {

// A whole number in [min, max], checked on the text so that nothing wraps.
CLI::Validator whole_number_in(uint64_t min, uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        uint64_t v = 0;
        const char* end = text.data() + text.size();
        auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (ec == std::errc() && ptr == end && v >= min && v <= max) return {};
        return collie::str_cat("'", text, "' is not a whole number from ", min, " to ", max);
      },
      collie::str_cat("INT in [", min, " - ", max, "]"));
}

// Seconds in [0, max], finite.
CLI::Validator seconds_in(uint64_t max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (!text.empty() && *end == '\0' && std::isfinite(v) && v >= 0 &&
            v <= static_cast<double>(max))
          return {};
        return collie::str_cat("'", text, "' is not a number of seconds from 0 to ", max);
      },
      collie::str_cat("SECONDS in [0 - ", max, "]"));
}

constexpr uint64_t kMaxSeconds = uint64_t{366} * 24 * 3600;  // a year: far past any job

constexpr const char* kFooter = R"(
How workers reach it:
  Every worker connects as a client, so that no rank hosts a store of its own:
    MASTER_ADDR=<this host> MASTER_PORT=<port> TORCHELASTIC_USE_AGENT_STORE=True
  with RANK and WORLD_SIZE (init_method env://, the default), or
  init_method tcp://<this host>:<port> with TORCHELASTIC_USE_AGENT_STORE=True.
  The workers' keys then live under /worker/attempt_<TORCHELASTIC_RESTART_COUNT>/.
  torch's TCPStore(<this host>, <port>, is_master=False) connects as well.

The job secret:
  With COLLIE_JOB_SECRET (64 hex digits) in its environment, collie-store
  serves only clients that prove the same secret (an HMAC exchange; the secret
  never crosses the wire): export the same value to every worker. Others are
  refused with a line naming their address, and connections that have not
  proven it within --handshake-timeout, or beyond --max-unauthenticated at
  once, are closed, so strangers cannot hold the job's slots.
  torch's TCPStore has no secret: COLLIE_STORE_COMPAT=1 also serves clients
  without one, unauthenticated. Without COLLIE_JOB_SECRET anyone who can reach
  the port can read and write every key. See docs/security.md.
)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "collie-store: a standalone TcpStore server speaking PyTorch's TCPStore protocol "
      "(2.x and 1.13 clients)");
  collie::TcpStoreServerOptions options;
  double timeout_s = 0;
  app.add_option("--host", options.host, "Address to bind")->capture_default_str();
  app.add_option("--port", options.port, "Port to bind (0: a free one, printed)")
      ->check(whole_number_in(0, 65535))
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "Stop after this many seconds (0: run until signalled)")
      ->check(seconds_in(kMaxSeconds));
  app.add_option("--max-value-bytes", options.max_value_bytes,
                 "Largest key or value a client may send")
      ->check(whole_number_in(1, collie::store_protocol::kMaxValueBytesLimit))
      ->capture_default_str();
  app.add_option("--max-connections", options.max_connections,
                 "Clients served at once (raise the open-files limit to match: ulimit -n)")
      ->check(whole_number_in(1, collie::kMaxConnectionsLimit))
      ->capture_default_str();
  app.add_option("--max-unauthenticated", options.max_unauthenticated,
                 "With COLLIE_JOB_SECRET: connections not yet authenticated held at once (a new "
                 "one closes the oldest)")
      ->check(whole_number_in(1, collie::kMaxConnectionsLimit))
      ->capture_default_str();
  app.add_option("--max-reply-bytes", options.max_reply_bytes,
                 "Memory unsent replies may hold beyond the store's values (0: 256 MiB or 4 x "
                 "--max-value-bytes, the larger); past it the clients holding the most, which do "
                 "not read their replies, are dropped")
      ->check(whole_number_in(0, uint64_t{1} << 50))
      ->capture_default_str();
  double handshake_s = std::chrono::duration<double>(options.handshake_timeout).count();
  app.add_option("--handshake-timeout", handshake_s,
                 "With COLLIE_JOB_SECRET: seconds a connection has to prove it")
      ->check(seconds_in(3600))
      ->capture_default_str();
  app.footer(kFooter);
  CLI11_PARSE(app, argc, argv);
  options.handshake_timeout = std::max(
      collie::Timeout(1),
      std::chrono::duration_cast<collie::Timeout>(std::chrono::duration<double>(handshake_s)));

  // Block the stop signals in every thread (the server's loop thread
  // inherits the mask) and take them synchronously below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<collie::TcpStoreServer> server;
  try {
    server = collie::TcpStoreServer::start(options);
  } catch (const collie::Error& e) {
    std::cerr << "collie-store: " << e.what() << "\n";
    return 1;
  }
  std::cout << "collie-store listening on " << server->address() << std::endl;

  int sig = 0;
  if (timeout_s > 0) {
    timespec limit{static_cast<time_t>(timeout_s),
                   static_cast<long>((timeout_s - static_cast<time_t>(timeout_s)) * 1e9)};
    siginfo_t info;
    sig = sigtimedwait(&stop_signals, &info, &limit);
  } else {
    sigwait(&stop_signals, &sig);
  }
  server->stop();
  if (sig > 0)
    std::cerr << "collie-store: stopped by signal " << sig << "\n";
  else
    std::cerr << "collie-store: stopped after --timeout " << timeout_s << "s\n";
  return 0;
}
