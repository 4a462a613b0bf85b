#include "collie/bench/store_servers/server_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "collie/base/error.h"
#include "collie/base/socket_io.h"
#include "collie/base/str_cat.h"

namespace collie::bench {

void ServerProcess::start_collie(const TcpStoreServerOptions& options) {
  int port_pipe[2], control_pipe[2];
  if (::pipe(port_pipe) != 0 || ::pipe(control_pipe) != 0) throw Error("pipe failed");
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(port_pipe[0]);
    ::close(control_pipe[1]);
    TcpStoreServerOptions o = options;
    o.host = "127.0.0.1";
    o.port = 0;
    auto server = TcpStoreServer::start(o);
    uint16_t port = server->port();
    if (::write(port_pipe[1], &port, sizeof(port)) != sizeof(port)) _exit(1);
    char byte;
    while (::read(control_pipe[0], &byte, 1) > 0) {
    }
    server->stop();
    _exit(0);
  }
  ::close(port_pipe[1]);
  ::close(control_pipe[0]);
  pid_ = pid;
  control_fd_.reset(control_pipe[1]);
  const bool ok = ::read(port_pipe[0], &port_, sizeof(port_)) == sizeof(port_);
  ::close(port_pipe[0]);
  if (!ok) throw Error("collie's server child did not report its port");
}

bool ServerProcess::start_torch(int world_size, std::string* why) {
  const std::string script = str_cat(
      "import signal, sys, datetime\n"
      "import torch.distributed as d\n"
      "s = d.TCPStore('127.0.0.1', 0, ",
      world_size,
      ", True, timeout=datetime.timedelta(seconds=3600), wait_for_workers=False)\n"
      "print(s.port, flush=True)\n"
      "signal.sigwait([signal.SIGTERM])\n");
  torch_ =
      ChildProcess::spawn({"/usr/bin/python3", "-c", script}, {.stdout_to = ChildOutput::kPipe});
  // Its first line is the port; importing torch takes seconds on a loaded
  // machine, so the wait is generous, but bounded.
  const Deadline deadline(std::chrono::minutes(2));
  std::string line;
  for (char c = 0; c != '\n';) {
    if (!wait_socket(torch_.stdout_fd(), POLLIN, deadline.when()).ok()) break;
    const ssize_t n = ::read(torch_.stdout_fd(), &c, 1);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;
    if (c != '\n') line += c;
  }
  torch_.close_stdout();
  if (line.empty()) {
    torch_.signal(SIGKILL);
    const ExitStatus& status = torch_.reap();
    torch_ = ChildProcess();
    if (why) {
      *why = status.exit_code == 127
                 ? "no /usr/bin/python3"
                 : "/usr/bin/python3 could not start torch's TCPStore (no torch package?)";
    }
    return false;
  }
  pid_ = torch_.pid();
  port_ = static_cast<uint16_t>(std::stoi(line));
  return true;
}

void ServerProcess::stop() {
  control_fd_.reset();
  if (torch_.pid() > 0) {
    torch_.signal(SIGTERM);
    torch_.reap();
    torch_ = ChildProcess();
  } else if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
}

double ServerProcess::cpu_seconds() const {
  FILE* f = std::fopen(str_cat("/proc/", pid_, "/stat").c_str(), "r");
  if (f == nullptr) return 0;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // Fields after the ")" closing the command name: state is field 3, utime
  // and stime are fields 14 and 15.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  unsigned long utime = 0, stime = 0;
  std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime);
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double ServerProcess::peak_rss_mib() const {
  std::ifstream status(str_cat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  return 0;
}

}  // namespace collie::bench
