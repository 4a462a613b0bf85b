#include "test/support/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

extern char** environ;

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

std::string ExitStatus::describe() const {
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return str_cat("killed by SIG", name ? name : std::to_string(signal));
  }
  return str_cat("exit ", exit_code);
}

Subprocess Subprocess::spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  if (argv.empty()) throw InvalidArgument("Subprocess::spawn: empty argv");
  Subprocess p;
  p.argv_ = argv;
  char tmpl[] = "/tmp/collie-proc-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw Error(str_cat("mkdtemp: ", strerror(errno)));
  p.dir_ = tmpl;
  const std::string out_path = p.dir_ + "/out.txt", err_path = p.dir_ + "/err.txt";

  // Build everything the child needs before fork: after fork only
  // async-signal-safe calls are allowed.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options.env) {
    if (v)
      env[k] = *v;
    else
      env.erase(k);
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : p.argv_) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);

  int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) throw Error(str_cat("open ", out_path, ": ", strerror(errno)));

  pid_t pid = ::fork();
  if (pid < 0) throw Error(str_cat("fork: ", strerror(errno)));
  if (pid == 0) {
    if (options.new_process_group) ::setpgid(0, 0);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) ::_exit(126);
    ::signal(SIGPIPE, SIG_DFL);
    ::execve(args[0], args.data(), envp.data());
    const char msg[] = "execve failed\n";
    ssize_t unused = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)unused;
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  p.pid_ = pid;
  return p;
}

Subprocess::Subprocess(Subprocess&& other) noexcept { *this = std::move(other); }

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      reap_blocking();
    }
    pid_ = std::exchange(other.pid_, -1);
    status_ = std::exchange(other.status_, std::nullopt);
    dir_ = std::move(other.dir_);
    argv_ = std::move(other.argv_);
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    reap_blocking();
  }
  if (!dir_.empty()) {
    ::unlink((dir_ + "/out.txt").c_str());
    ::unlink((dir_ + "/err.txt").c_str());
    ::rmdir(dir_.c_str());
  }
}

void Subprocess::reap_blocking() {
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  ExitStatus s;
  if (WIFSIGNALED(st))
    s.signal = WTERMSIG(st);
  else
    s.exit_code = WEXITSTATUS(st);
  status_ = s;
}

bool Subprocess::running() {
  if (status_ || pid_ <= 0) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    ExitStatus s;
    if (WIFSIGNALED(st))
      s.signal = WTERMSIG(st);
    else
      s.exit_code = WEXITSTATUS(st);
    status_ = s;
    return false;
  }
  return true;
}

ExitStatus Subprocess::wait(Timeout timeout) {
  Deadline deadline(timeout);
  // Poll with a short back-off: waitpid has no timed variant, and a pidfd
  // would tie us to newer kernels than CI may have.
  auto pause = std::chrono::microseconds(200);
  while (running()) {
    if (deadline.expired()) {
      kill(SIGKILL);
      reap_blocking();
      throw TimeoutError(str_cat("child `", command_line(), "` did not exit ", deadline.describe(),
                                 "; killed it.\n--- stdout ---\n", tail(out()),
                                 "\n--- stderr ---\n", tail(err())));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
  return *status_;
}

void Subprocess::kill(int sig) {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

void Subprocess::kill_group(int sig) {
  if (pid_ > 0) ::kill(-pid_, sig);
}

std::string Subprocess::out() const { return read_file(dir_ + "/out.txt"); }
std::string Subprocess::err() const { return read_file(dir_ + "/err.txt"); }

std::string Subprocess::wait_for_output(const std::string& needle, Timeout timeout) {
  Deadline deadline(timeout);
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    std::string o = out();
    if (o.find(needle) != std::string::npos) return o;
    if (!running())
      throw Error(str_cat("child `", command_line(), "` exited (", status_->describe(),
                          ") before printing '", needle, "'\n--- stdout ---\n", tail(o),
                          "\n--- stderr ---\n", tail(err())));
    if (deadline.expired())
      throw TimeoutError(str_cat("child `", command_line(), "` did not print '", needle, "' ",
                                 deadline.describe(), "\n--- stdout ---\n", tail(o),
                                 "\n--- stderr ---\n", tail(err())));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

std::string Subprocess::command_line() const { return join(argv_, " "); }

}  // namespace collie::test
