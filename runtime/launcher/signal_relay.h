// SignalRelay: turns SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGCHLD into bytes
// on a pipe (the self-pipe trick), so that the supervision loop sees them in
// the same poll() as the workers' output and handles them outside of signal
// context. Only one SignalRelay may exist at a time; it restores the previous
// handlers when destroyed.
#pragma once

#include <signal.h>

#include <vector>

#include "collie/base/unique_fd.h"

namespace collie::launcher {

class SignalRelay {
 public:
  SignalRelay();
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  // The read end to poll for POLLIN.
  int fd() const { return read_fd_.get(); }
  // Drains the pipe; returns the termination signals received (SIGCHLD is
  // only a wake-up and is left out).
  std::vector<int> drain();
  // Drains the pipe; the first termination signal received, or 0. What the
  // rendezvous waits poll to stay responsive to Ctrl-C.
  int first_signal() {
    const std::vector<int> signals = drain();
    return signals.empty() ? 0 : signals.front();
  }

 private:
  UniqueFd read_fd_;
  UniqueFd write_fd_;
  struct sigaction previous_[5];
};

}  // namespace collie::launcher
