#include "collie/base/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "collie/base/backoff.h"
#include "collie/base/deadline.h"
#include "collie/base/error.h"
#include "collie/base/str_cat.h"

extern char** environ;

namespace collie {
namespace {

// The file descriptors one spawn sets up; invalid where unused. Closed on
// every path (the child's ends after fork, everything on an error before it).
struct Fds {
  UniqueFd out_r, out_w, err_r, err_w, in;
};

// Sets up one output stream: `read_end` gets the parent's end of a pipe.
void open_output(ChildOutput to, const std::string& path, const std::string& program,
                 const char* name, UniqueFd& write_end, UniqueFd& read_end) {
  switch (to) {
    case ChildOutput::kInherit: return;
    case ChildOutput::kPipe: {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0)
        throw Error(
            str_cat("cannot start '", program, "': pipe for its ", name, ": ", strerror(errno)));
      read_end.reset(p[0]);
      write_end.reset(p[1]);
      return;
    }
    case ChildOutput::kFile:
    case ChildOutput::kNull: {
      const std::string& target = to == ChildOutput::kNull ? std::string("/dev/null") : path;
      write_end.reset(::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!write_end)
        throw Error(str_cat("cannot start '", program, "': cannot open ", target, " for its ", name,
                            ": ", strerror(errno)));
      return;
    }
  }
}

// fd becomes `target` in the child, open across exec.
void move_fd(int fd, int target) {
  if (fd < 0) return;
  if (fd == target)
    ::fcntl(fd, F_SETFD, 0);  // dup2 would keep O_CLOEXEC
  else
    ::dup2(fd, target);
}

void write_str(int fd, const char* s) {
  ssize_t unused = ::write(fd, s, ::strlen(s));
  (void)unused;
}

// "+<pid>\n" without printf (not async-signal-safe).
void announce(int fd) {
  char buf[24];
  char* end = buf + sizeof buf;
  char* p = end;
  *--p = '\n';
  for (long v = ::getpid(); v > 0; v /= 10) *--p = static_cast<char>('0' + v % 10);
  *--p = '+';
  ssize_t unused = ::write(fd, p, static_cast<size_t>(end - p));
  (void)unused;
}

// The child between fork and exec: only async-signal-safe calls (the parent
// may have other threads, and only this one exists here).
[[noreturn]] void exec_child(const SpawnOptions& o, pid_t parent, const Fds& fds, const char* path,
                             char* const* argv, char* const* envp) {
  // Every signal is blocked (see spawn). Handlers are reset by exec anyway,
  // but until then a signal meant for the child would run the parent's
  // handler here; an ignored signal (SIGPIPE) would survive exec.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  if (o.new_process_group) ::setpgid(0, 0);
  if (o.die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);  // the parent died before prctl
  }
  if (o.announce_fd >= 0) announce(o.announce_fd);
  move_fd(fds.in.get(), STDIN_FILENO);
  move_fd(fds.out_w.get(), STDOUT_FILENO);
  move_fd(fds.err_w.get(), STDERR_FILENO);
  if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) {
    write_str(STDERR_FILENO, "cannot change to the working directory ");
    write_str(STDERR_FILENO, o.cwd.c_str());
    write_str(STDERR_FILENO, "\n");
    ::_exit(126);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, argv, envp);
  write_str(STDERR_FILENO, "execve of ");
  write_str(STDERR_FILENO, path);
  write_str(STDERR_FILENO, " failed: ");
  write_str(STDERR_FILENO, ::strerror(errno));
  write_str(STDERR_FILENO, "\n");
  ::_exit(127);
}

ExitStatus status_from_siginfo(const siginfo_t& info) {
  ExitStatus s;
  if (info.si_code == CLD_EXITED)
    s.exit_code = info.si_status;
  else
    s.signal = info.si_status;
  return s;
}

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? str_cat("SIG", abbrev) : str_cat("signal ", sig);
}

std::string ExitStatus::describe() const {
  if (signal != 0) return str_cat("signal ", signal, " (", signal_name(signal), ")");
  return str_cat("exit code ", exit_code);
}

std::vector<std::string> environment_with(
    const std::map<std::string, std::optional<std::string>>& overrides) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : overrides) {
    if (v)
      env[k] = *v;
    else
      env.erase(k);
  }
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv,
                                 const SpawnOptions& options) {
  if (argv.empty()) throw InvalidArgument("ChildProcess::spawn: empty argv");
  const std::string path = options.path.empty() ? argv.front() : options.path;

  // Everything the child touches is built before fork.
  std::vector<std::string> env = environment_with(options.env);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  Fds fds;
  open_output(options.stdout_to, options.stdout_path, path, "stdout", fds.out_w, fds.out_r);
  open_output(options.stderr_to, options.stderr_path, path, "stderr", fds.err_w, fds.err_r);
  fds.in.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));

  const pid_t parent = ::getpid();
  sigset_t all, previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(options, parent, fds, path.c_str(), args.data(), envp.data());
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw Error(str_cat("cannot start '", path, "': fork: ", strerror(fork_errno)));
  // Also from here, so that the group exists before we might signal it.
  if (options.new_process_group) ::setpgid(pid, pid);

  ChildProcess p;
  p.pid_ = pid;
  p.own_group_ = options.new_process_group;
  p.out_fd_ = std::move(fds.out_r);
  p.err_fd_ = std::move(fds.err_r);
  if (p.out_fd_) ::fcntl(p.out_fd_.get(), F_SETFL, O_NONBLOCK);
  if (p.err_fd_) ::fcntl(p.err_fd_.get(), F_SETFL, O_NONBLOCK);
  return p;  // the child's ends are closed here, with `fds`
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    release();
    pid_ = std::exchange(other.pid_, -1);
    own_group_ = other.own_group_;
    out_fd_ = std::move(other.out_fd_);
    err_fd_ = std::move(other.err_fd_);
    exited_ = other.exited_;
    reaped_ = other.reaped_;
    status_ = other.status_;
    exit_time_ = other.exit_time_;
  }
  return *this;
}

ChildProcess::~ChildProcess() { release(); }

void ChildProcess::release() {
  if (pid_ > 0 && !reaped_) {
    // Never leave a child behind, whatever path led here.
    if (own_group_) signal_group(SIGKILL);
    signal(SIGKILL);
    reap();
  }
  close_stdout();
  close_stderr();
  pid_ = -1;
}

void ChildProcess::close_stdout() { out_fd_.reset(); }

void ChildProcess::close_stderr() { err_fd_.reset(); }

bool ChildProcess::poll_exit() {
  if (exited_) return true;
  if (pid_ <= 0) return false;
  siginfo_t info{};
  // WNOWAIT: learn the status but keep the zombie (see the header).
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0)
    return false;
  if (info.si_pid != pid_) return false;
  exited_ = true;
  exit_time_ = std::chrono::system_clock::now();
  status_ = status_from_siginfo(info);
  return true;
}

bool ChildProcess::wait_exit(std::chrono::milliseconds limit) {
  return wait_for_any_exit(std::span<ChildProcess>(this, 1), limit);
}

bool wait_for_any_exit(std::span<ChildProcess> children, std::chrono::milliseconds limit) {
  using SteadyClock = std::chrono::steady_clock;
  const auto deadline = SteadyClock::now() + limit;
  auto left = [&] {
    return std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now())
               .count());
  };
  std::vector<ChildProcess*> running;
  for (ChildProcess& c : children) {
    if (c.exited()) continue;
    if (c.poll_exit()) return true;
    if (c.pid() > 0) running.push_back(&c);
  }
  if (running.empty()) return true;
  auto any_exited = [&] {
    bool any = false;
    for (ChildProcess* c : running) any = c->poll_exit() || any;
    return any;
  };

  // A pidfd turns readable when its process exits; EINTR restarts the poll
  // with what is left of the limit.
  std::vector<pollfd> fds;
  for (ChildProcess* c : running) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, c->pid(), 0));
    if (fd < 0) break;
    fds.push_back({fd, POLLIN, 0});
  }
  if (fds.size() == running.size()) {
    while (::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left(), INT32_MAX))) <
               0 &&
           errno == EINTR) {
    }
  }
  for (const pollfd& p : fds) ::close(p.fd);
  if (fds.size() == running.size()) return any_exited();

  // Kernels without pidfd_open (before 5.3): short naps, growing to 20 ms.
  Backoff naps({.initial = std::chrono::microseconds(200), .max = std::chrono::milliseconds(20)});
  const Deadline until{std::chrono::milliseconds(left())};
  while (!any_exited()) {
    if (!naps.sleep(until)) return false;
  }
  return true;
}

const ExitStatus& ChildProcess::reap() {
  if (reaped_ || pid_ <= 0) return status_;
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  if (!exited_) {
    exited_ = true;
    exit_time_ = std::chrono::system_clock::now();
    if (WIFSIGNALED(st))
      status_.signal = WTERMSIG(st);
    else
      status_.exit_code = WEXITSTATUS(st);
  }
  return status_;
}

bool ChildProcess::dying() const {
  if (exited_ || pid_ <= 0) return false;
  // /proc/<pid>/stat: "pid (comm) state ppid ... flags" with flags the 9th
  // field; comm may hold spaces and parentheses, so count from the last ')'.
  std::ifstream stat_file(str_cat("/proc/", pid_, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream fields(stat.substr(paren + 1));
    std::string field;
    unsigned long flags = 0;
    for (int i = 3; i <= 9 && fields >> field; ++i) {
      if (i == 9) flags = std::strtoul(field.c_str(), nullptr, 10);
    }
    constexpr unsigned long kPfExiting = 0x4;
    if (flags & kPfExiting) return true;
  }
  std::ifstream status(str_cat("/proc/", pid_, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("SigPnd:", 0) != 0 && line.rfind("ShdPnd:", 0) != 0) continue;
    const unsigned long long pending = std::strtoull(line.c_str() + 7, nullptr, 16);
    if (pending & (1ULL << (SIGKILL - 1))) return true;
  }
  return false;
}

void ChildProcess::signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

void ChildProcess::signal_group(int sig) {
  if (pid_ <= 0 || reaped_) return;
  if (!own_group_ || (::kill(-pid_, sig) != 0 && errno == ESRCH)) ::kill(pid_, sig);
}

}  // namespace collie
