#include "collie/test/support/subprocess.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <utility>

#include "collie/base/backoff.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::test {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string tail(const std::string& s, size_t n = 4000) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

}  // namespace

Subprocess Subprocess::spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  Subprocess p;
  p.argv_ = argv;
  char tmpl[] = "/tmp/collie-proc-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw Error(str_cat("mkdtemp: ", strerror(errno)));
  p.dir_ = tmpl;
  SpawnOptions o = options;
  o.stdout_to = o.stderr_to = ChildOutput::kFile;
  o.stdout_path = p.dir_ + "/out.txt";
  o.stderr_path = p.dir_ + "/err.txt";
  p.process_ = ChildProcess::spawn(argv, o);
  return p;
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    process_ = std::move(other.process_);  // kills and reaps ours first
    remove_files();
    dir_ = std::exchange(other.dir_, std::string());
    argv_ = std::move(other.argv_);
  }
  return *this;
}

Subprocess::~Subprocess() {
  process_ = ChildProcess();  // kills and reaps a child still running
  remove_files();
}

void Subprocess::remove_files() {
  if (dir_.empty()) return;
  ::unlink((dir_ + "/out.txt").c_str());
  ::unlink((dir_ + "/err.txt").c_str());
  ::rmdir(dir_.c_str());
  dir_.clear();
}

ExitStatus Subprocess::wait(Timeout timeout) {
  Deadline deadline(timeout);
  if (!process_.wait_exit(timeout)) {
    process_.signal(SIGKILL);
    process_.reap();
    throw TimeoutError(str_cat("child `", command_line(), "` did not exit ", deadline.describe(),
                               "; killed it.\n--- stdout ---\n", tail(out()), "\n--- stderr ---\n",
                               tail(err())));
  }
  return process_.status();
}

std::string Subprocess::out() const { return read_file(dir_ + "/out.txt"); }
std::string Subprocess::err() const { return read_file(dir_ + "/err.txt"); }

std::string Subprocess::wait_for_output(const std::string& needle, Timeout timeout) {
  return wait_for(&Subprocess::out, "stdout", needle, timeout);
}

std::string Subprocess::wait_for_stderr(const std::string& needle, Timeout timeout) {
  return wait_for(&Subprocess::err, "stderr", needle, timeout);
}

// Polls the stream's file, with short naps growing to 10 ms.
std::string Subprocess::wait_for(std::string (Subprocess::*read)() const, const char* stream,
                                 const std::string& needle, Timeout timeout) {
  Deadline deadline(timeout);
  Backoff naps({.initial = std::chrono::microseconds(200), .max = std::chrono::milliseconds(10)});
  for (;;) {
    std::string text = (this->*read)();
    if (text.find(needle) != std::string::npos) return text;
    const bool exited = !running();
    if (exited || deadline.expired()) {
      const std::string what =
          exited ? str_cat("exited (", process_.status().describe(), ") before printing '", needle,
                           "' to ", stream)
                 : str_cat("did not print '", needle, "' to ", stream, " ", deadline.describe());
      const std::string message =
          str_cat("child `", command_line(), "` ", what, "\n--- stdout ---\n", tail(out()),
                  "\n--- stderr ---\n", tail(err()));
      if (exited) throw Error(message);
      throw TimeoutError(message);
    }
    naps.sleep(deadline);
  }
}

std::string Subprocess::command_line() const { return join(argv_, " "); }

}  // namespace collie::test
