// ChildProcess: the one way collie starts another program. collie-run's
// workers, the tests' child processes, collie-bench's and the tuning tool's
// local ranks and the rendezvous demo's workers all "spawn N copies of a
// program with a few variables changed", and they all want the same care:
//
//   - everything the child needs (argv, the environment) is built before
//     fork, and the child runs only async-signal-safe calls until exec, so
//     spawning from a process with threads (a store server) is safe;
//   - every signal is blocked across fork and the child puts every signal
//     disposition back to the default before unblocking, so a signal meant
//     for the child never runs the parent's handler in it, and an ignored
//     SIGPIPE does not leak into the program;
//   - optionally its own process group (signal_group() reaches whatever the
//     child starts; a terminal's Ctrl-C reaches only the parent) and
//     PR_SET_PDEATHSIG(SIGKILL) (the child dies with the spawning thread);
//   - its stdout and stderr inherited, piped to the parent, sent to files or
//     to /dev/null; stdin is /dev/null (no child reads the terminal);
//   - an exited child is kept a zombie until reap(): its pid, and so its
//     process group id, cannot be reused meanwhile, and signal_group() can
//     never hit a stranger. The destructor kills and reaps a child that is
//     still running, so no error path leaves one behind.
//
//   auto p = ChildProcess::spawn({"/bin/echo", "hi"}, {.env = {{"RANK", "0"}}});
//   std::optional<ExitStatus> st = p.wait_for(std::chrono::seconds(10));
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collie/base/unique_fd.h"

namespace collie {

// How a child ended.
struct ExitStatus {
  int exit_code = -1;  // valid when signal == 0
  int signal = 0;      // the signal that killed it, or 0
  bool ok() const { return signal == 0 && exit_code == 0; }
  // What a shell's $? would be: the exit code, or 128 + the signal.
  int shell_code() const { return signal != 0 ? 128 + signal : exit_code; }
  // "exit code 3", "signal 9 (SIGKILL)"
  std::string describe() const;
};

// The signal's short name: 9 -> "SIGKILL".
std::string signal_name(int sig);

// Where one of the child's output streams goes.
enum class ChildOutput {
  kInherit,  // this process's own stream
  kPipe,     // a pipe this process reads (stdout_fd() / stderr_fd(), non-blocking)
  kFile,     // a file, truncated (stdout_path / stderr_path)
  kNull,     // /dev/null
};

struct SpawnOptions {
  // Variables to set (a value) or remove (std::nullopt) on top of this
  // process's environment.
  std::map<std::string, std::optional<std::string>> env;
  // The child's working directory; empty: ours.
  std::string cwd;
  // Make the child the leader of a new process group.
  bool new_process_group = false;
  // PR_SET_PDEATHSIG(SIGKILL): the child is killed when the thread that
  // spawned it exits (so spawn from a thread that lives as long as the
  // child should, e.g. the main thread). A parent that died before the
  // child could ask for this makes the child exit 126 at once.
  bool die_with_parent = false;
  ChildOutput stdout_to = ChildOutput::kInherit;
  ChildOutput stderr_to = ChildOutput::kInherit;
  std::string stdout_path, stderr_path;  // for ChildOutput::kFile
  // The program to run; empty: argv[0]. Never searched on PATH.
  std::string path;
  // When >= 0, the child writes "+<pid>\n" to this fd (a pipe) after it has
  // become the leader of its group and before exec: whoever reads it knows
  // the group before the program can start anything (see OrphanGuard in
  // the launcher).
  int announce_fd = -1;
};

class ChildProcess {
 public:
  // Starts the child. Throws Error naming the program when a pipe, a file
  // or fork fails; an exec that fails shows as exit code 127 with a line on
  // the child's stderr.
  static ChildProcess spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Read ends of ChildOutput::kPipe streams (non-blocking), -1 otherwise or
  // once closed.
  int stdout_fd() const { return out_fd_.get(); }
  int stderr_fd() const { return err_fd_.get(); }
  void close_stdout();
  void close_stderr();

  // True once the child has exited; never blocks, and leaves the zombie.
  bool poll_exit();
  // Waits up to `limit` for the child to exit (a pidfd, else short naps);
  // true if it has. Leaves the zombie.
  bool wait_exit(std::chrono::milliseconds limit);
  // Blocks until the child has exited, collects it and returns its status.
  // After reap() the pid means nothing any more.
  const ExitStatus& reap();

  bool exited() const { return exited_; }
  bool reaped() const { return reaped_; }
  // Valid once exited().
  const ExitStatus& status() const { return status_; }
  std::chrono::system_clock::time_point exit_time() const { return exit_time_; }

  // Whether the child, not exited yet, is already dying: its exit is under
  // way (the kernel's PF_EXITING) or a SIGKILL is pending. A process closes
  // its sockets during its exit, before its parent can see the exit.
  bool dying() const;

  // Sends sig to the child; nothing once it is reaped.
  void signal(int sig);
  // Sends sig to the child's process group (the child and what it started;
  // needs new_process_group). The group outlives its leader while the
  // leader's children run, so this works after the child exited too, until
  // it is reaped. A group that is gone is not an error.
  void signal_group(int sig);

 private:
  void release();

  pid_t pid_ = -1;
  bool own_group_ = false;
  UniqueFd out_fd_;
  UniqueFd err_fd_;
  bool exited_ = false;
  bool reaped_ = false;
  ExitStatus status_;
  std::chrono::system_clock::time_point exit_time_;
};

// Waits up to `limit` until one of `children` that had not exited yet
// exits (or at once when none is running); false when the limit passed
// first. Which ones exited: their exited(). Leaves the zombies.
bool wait_for_any_exit(std::span<ChildProcess> children, std::chrono::milliseconds limit);

// The environment of this process with `overrides` applied, as "K=V"
// strings sorted by name.
std::vector<std::string> environment_with(
    const std::map<std::string, std::optional<std::string>>& overrides);

}  // namespace collie
