// Subprocess: a child process for multi-process tests, a ChildProcess
// (base/child_process.h) whose stdout and stderr go to files (never
// pipes, so that many children writing a lot can never block each other
// while the test waits on one of them). wait() has a deadline and kills the
// child when it passes. The destructor kills and reaps a child that is still
// running, so a failing test leaves no process behind.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "collie/base/child_process.h"
#include "collie/base/deadline.h"

namespace collie::test {

using collie::ExitStatus;
using collie::SpawnOptions;

class Subprocess {
 public:
  // argv[0] is the program's path. The output fields of `options` are
  // replaced: stdout and stderr always go to this Subprocess's files.
  static Subprocess spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

  Subprocess(Subprocess&& other) noexcept { *this = std::move(other); }
  Subprocess& operator=(Subprocess&& other) noexcept;
  ~Subprocess();

  pid_t pid() const { return process_.pid(); }
  bool running() { return !process_.poll_exit(); }
  // Waits for the exit; on timeout kills the child (SIGKILL), then throws
  // TimeoutError with the child's command line and the tail of its output.
  ExitStatus wait(Timeout timeout);
  void kill(int sig) { process_.signal(sig); }
  void kill_group(int sig) { process_.signal_group(sig); }  // needs new_process_group

  // Everything written so far.
  std::string out() const;
  std::string err() const;
  // Waits until stdout contains `needle`; returns stdout. Throws TimeoutError
  // (showing the output) if it never does, or Error if the child exits first.
  std::string wait_for_output(const std::string& needle, Timeout timeout);
  // The same for stderr; returns stderr.
  std::string wait_for_stderr(const std::string& needle, Timeout timeout);
  std::string command_line() const;

 private:
  Subprocess() = default;
  void remove_files();
  std::string wait_for(std::string (Subprocess::*read)() const, const char* stream,
                       const std::string& needle, Timeout timeout);

  ChildProcess process_;
  std::string dir_;  // holds out.txt and err.txt
  std::vector<std::string> argv_;
};

}  // namespace collie::test
