#include "collie/runtime/launcher/signal_relay.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::launcher {
namespace {

constexpr int kSignals[5] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};
std::atomic<int> g_write_fd{-1};

void on_signal(int sig) {
  int saved = errno;
  int fd = g_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    unsigned char byte = static_cast<unsigned char>(sig);
    ssize_t unused = ::write(fd, &byte, 1);  // a full pipe drops the byte: still woken
    (void)unused;
  }
  errno = saved;
}

}  // namespace

SignalRelay::SignalRelay() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(str_cat("collie-run: pipe for signals: ", strerror(errno)));
  read_fd_.reset(fds[0]);
  write_fd_.reset(fds[1]);
  g_write_fd.store(write_fd_.get());
  for (int i = 0; i < 5; ++i) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | (kSignals[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
    ::sigaction(kSignals[i], &sa, &previous_[i]);
  }
}

SignalRelay::~SignalRelay() {
  for (int i = 0; i < 5; ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  g_write_fd.store(-1);  // before the pipe closes (with the members)
}

std::vector<int> SignalRelay::drain() {
  std::vector<int> received;
  unsigned char buf[64];
  for (;;) {
    ssize_t n = ::read(read_fd_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i)
      if (buf[i] != SIGCHLD) received.push_back(buf[i]);
  }
  return received;
}

}  // namespace collie::launcher
