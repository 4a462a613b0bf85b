// OrphanGuard: makes sure nothing a worker started outlives collie-run, even
// when collie-run is SIGKILLed.
//
// Each worker leads its own process group, and PR_SET_PDEATHSIG kills the
// worker itself with the launcher; but what the worker started (`sleep 321 &`
// in a worker script, a data-loader process) would be left under init. So
// before it starts any thread, collie-run forks a small guard process that
// holds the read end of a pipe. Every worker announces its process group on
// the pipe before it execs ("+<pgid>", written by the child itself, see
// SpawnOptions::announce_fd), and the launcher withdraws it ("-<pgid>") once
// it has killed the group and before it reaps the leader. When the pipe's
// write end closes (the launcher exited, by any means, SIGKILL included:
// the kernel closes it) the guard SIGKILLs every group still announced and
// exits. The guard leads its own group and ignores the terminal's signals,
// so a Ctrl-C or a kill of the launcher's group does not take it first.
//
// A descendant that leaves its group (setsid, a daemon) escapes this, as it
// escapes torchrun; docs/launcher.md says so.
#pragma once

#include <sys/types.h>

#include "collie/base/unique_fd.h"

namespace collie::launcher {

class OrphanGuard {
 public:
  // Forks the guard. Call while this process has one thread. On failure
  // (no fork, no pipe) the guard is off and fd() is -1: workers are still
  // killed by PDEATHSIG and by the launcher, only their children may escape
  // a SIGKILLed launcher.
  OrphanGuard();
  // Closes the pipe and waits for the guard to exit.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  // The write end workers announce themselves on (SpawnOptions::announce_fd).
  int fd() const { return write_fd_.get(); }
  pid_t pid() const { return pid_; }
  // The group is dead (killed and about to be reaped): forget it.
  void withdraw(pid_t pgid);

 private:
  UniqueFd write_fd_;
  pid_t pid_ = -1;
};

}  // namespace collie::launcher
