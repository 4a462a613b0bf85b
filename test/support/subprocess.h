// Subprocess: a child process for multi-process tests. Its stdout and stderr
// go to files (never pipes, so that many children writing a lot can never
// block each other while the test waits on one of them); wait() has a
// deadline and kills the child when it passes. The destructor kills and reaps
// a child that is still running, so a failing test leaves no process behind.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/deadline.h"

namespace collie::test {

struct ExitStatus {
  int exit_code = -1;  // valid when signal == 0
  int signal = 0;      // the signal that killed it, or 0
  bool ok() const { return signal == 0 && exit_code == 0; }
  std::string describe() const;  // "exit 3", "killed by SIGKILL"
};

struct SpawnOptions {
  // Variables to set (value) or remove (std::nullopt) on top of this
  // process's environment.
  std::map<std::string, std::optional<std::string>> env;
  std::string cwd;
  // Put the child in a new process group (kill_group() reaches its children).
  bool new_process_group = false;
};

class Subprocess {
 public:
  static Subprocess spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running();
  // Waits for the exit; on timeout kills the child (SIGKILL), then throws
  // TimeoutError with the child's command line and the tail of its output.
  ExitStatus wait(Timeout timeout);
  void kill(int sig);
  void kill_group(int sig);  // needs new_process_group

  // Everything written so far.
  std::string out() const;
  std::string err() const;
  // Waits until stdout contains `needle`; returns stdout. Throws TimeoutError
  // (showing the output) if it never does, or Error if the child exits first.
  std::string wait_for_output(const std::string& needle, Timeout timeout);
  std::string command_line() const;

 private:
  Subprocess() = default;
  void reap_blocking();

  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
  std::string dir_;  // holds out.txt and err.txt
  std::vector<std::string> argv_;
};

}  // namespace collie::test
