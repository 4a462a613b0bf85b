// A TcpStore server in a process of its own, for the store benchmarks:
// collie's TcpStoreServer in a forked child (fork without exec: the child
// runs this program's code), or torch 1.13's TCPStore in /usr/bin/python3
// (a ChildProcess). Each is measured from outside (CPU time, peak memory)
// and stopped when the ServerProcess goes away.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/base/child_process.h"
#include "collie/base/unique_fd.h"
#include "collie/rendezvous/tcp_store/tcp_store.h"

namespace collie::bench {

class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess() { stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Forks collie's server on 127.0.0.1 (port 0). Call it while this process
  // has no other thread (fork copies only the caller's).
  void start_collie(const TcpStoreServerOptions& options);
  // Starts torch 1.13's server, TCPStore("127.0.0.1", 0, world_size,
  // is_master=True, wait_for_workers=False). Returns false, with the
  // reason in *why, when /usr/bin/python3 cannot start it (no torch).
  bool start_torch(int world_size, std::string* why);

  // SIGTERM, then reaps it (idempotent).
  void stop();

  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_; }
  // CPU seconds (user + system) it has used so far, from /proc.
  double cpu_seconds() const;
  // Its peak resident set (VmHWM) so far, in MiB.
  double peak_rss_mib() const;

 private:
  pid_t pid_ = -1;  // either server's
  ChildProcess torch_;
  uint16_t port_ = 0;
  UniqueFd control_fd_;  // collie's child exits when this closes
};

}  // namespace collie::bench
