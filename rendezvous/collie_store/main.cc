// collie-store: a standalone TcpStore server (PyTorch's TCPStore protocol,
// 2.x and 1.13 clients alike) for jobs whose ranks should not host it.
//
//   collie-store --host 0.0.0.0 --port 29500
//   collie-store listening on 0.0.0.0:29500
//
// Port 0 picks a free port; the line on stdout says which. SIGTERM or SIGINT
// stop it cleanly (exit 0). --timeout stops it after that many seconds, for
// jobs that must not leave a server behind.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "rendezvous/tcp_store.h"
#include "runtime/base/error.h"

int main(int argc, char** argv) {
  CLI::App app("collie-store: a standalone TcpStore server speaking PyTorch's TCPStore protocol");
  collie::TcpStoreServerOptions options;
  double timeout_s = 0;
  app.add_option("--host", options.host, "Address to bind")->capture_default_str();
  app.add_option("--port", options.port, "Port to bind (0: a free one, printed)")
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "Stop after this many seconds (0: run until signalled)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-value-bytes", options.max_value_bytes,
                 "Largest key or value a client may send")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

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
  std::cout << "collie-store listening on " << server->host() << ":" << server->port() << std::endl;

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
