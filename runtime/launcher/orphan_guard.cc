#include "collie/runtime/launcher/orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>

#include "collie/base/str_cat.h"

namespace collie::launcher {
namespace {

// The guard's whole life: collect "+pgid\n" / "-pgid\n" until EOF, then
// kill what is left. It runs in a fork of a single-threaded launcher.
[[noreturn]] void guard_main(int read_fd) {
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2})
    ::signal(sig, SIG_IGN);
  ::prctl(PR_SET_NAME, "collie-run-guard");
  // Keep only the pipe: the guard must not hold the launcher's other
  // descriptors open (its console, a listening socket, a worker's pipe).
  if (read_fd != 3) {
    ::dup2(read_fd, 3);
    read_fd = 3;
  }
  ::close_range(4, ~0U, 0);
  const int null_fd = ::open("/dev/null", O_RDWR);
  for (int fd : {0, 1, 2}) ::dup2(null_fd, fd);
  if (null_fd > 3) ::close(null_fd);
  std::set<pid_t> groups;
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      const pid_t pgid = static_cast<pid_t>(std::strtol(pending.c_str() + 1, nullptr, 10));
      if (pgid <= 1) continue;
      if (pending[0] == '+') groups.insert(pgid);
      if (pending[0] == '-') groups.erase(pgid);
    }
  }
  for (pid_t pgid : groups) ::kill(-pgid, SIGKILL);
  ::_exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[1]);
    guard_main(p[0]);
  }
  ::close(p[0]);
  if (pid < 0) {
    ::close(p[1]);
    return;
  }
  pid_ = pid;
  write_fd_.reset(p[1]);
}

OrphanGuard::~OrphanGuard() {
  write_fd_.reset();  // the guard sees the pipe close and exits: reap it
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

void OrphanGuard::withdraw(pid_t pgid) {
  if (!write_fd_) return;
  const std::string line = str_cat("-", pgid, "\n");
  // One write of a few bytes into a pipe is atomic; a full pipe (a guard
  // that stopped reading) must not block the launcher.
  ssize_t unused = ::write(write_fd_.get(), line.data(), line.size());
  (void)unused;
}

}  // namespace collie::launcher
