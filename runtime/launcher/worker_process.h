// WorkerProcess: one worker, started with fork/exec. Its stdout and stderr are
// pipes the launcher reads; its stdin is /dev/null. It leads its own process
// group, so that a signal the launcher sends reaches whatever the worker
// started too, and a Ctrl-C on the terminal reaches the launcher only (which
// forwards it once, to everyone). PR_SET_PDEATHSIG(SIGKILL) is the backstop:
// a worker dies with the launcher even when the launcher is SIGKILLed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace collie::launcher {

// How a worker ended.
struct ExitInfo {
  int exit_code = -1;  // valid when signal == 0
  int signal = 0;      // the signal that killed it, or 0
  bool ok() const { return signal == 0 && exit_code == 0; }
  // "exit code 3", "signal 9 (SIGKILL)"
  std::string describe() const;
};

class WorkerProcess {
 public:
  // Starts `path` with `argv` (argv[0] included) and `env` ("K=V"). Throws
  // Error naming the program when fork or the pipes fail.
  static std::unique_ptr<WorkerProcess> spawn(const std::string& path,
                                              const std::vector<std::string>& argv,
                                              const std::vector<std::string>& env);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Read ends (non-blocking), -1 once closed.
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  void close_stdout();
  void close_stderr();

  // True once the worker has exited (never blocks). The worker is left a
  // zombie until reap(): while it is one its pid, and so its process group
  // id, cannot be reused, and signal_group() can never hit a stranger.
  bool poll_exit();
  // Whether the worker, not exited yet, is already dying: its exit is under
  // way (the kernel's PF_EXITING) or a SIGKILL is pending. A process closes
  // its sockets during its exit, before its parent can see the exit, so a
  // peer that lost its connection may exit first; see WorkerGroup.
  bool dying() const;
  // Waits up to `limit` for the worker to exit; true if it has.
  bool wait_exit(std::chrono::milliseconds limit);
  // Collects the exited worker (after the last signal_group()).
  void reap();
  bool exited() const { return exited_; }
  const ExitInfo& exit_info() const { return exit_; }
  std::chrono::system_clock::time_point exit_time() const { return exit_time_; }

  // Sends sig to the worker's process group (the worker and its children);
  // a group that is already gone is not an error.
  void signal_group(int sig);

 private:
  WorkerProcess() = default;

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool exited_ = false;
  bool reaped_ = false;
  ExitInfo exit_;
  std::chrono::system_clock::time_point exit_time_;
};

// The signal's short name: 9 -> "SIGKILL".
std::string signal_name(int sig);

// Finds `program` like a shell would (a path with '/' as is, else on PATH)
// and checks it can be executed; throws InvalidArgument naming it otherwise.
std::string resolve_program(const std::string& program);

}  // namespace collie::launcher
