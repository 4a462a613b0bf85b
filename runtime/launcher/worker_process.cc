#include "runtime/launcher/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie::launcher {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Only async-signal-safe calls from here on: the launcher has other threads
// (the store server), and after fork only this one exists in the child.
[[noreturn]] void exec_child(pid_t parent, int out_w, int err_w, int null_fd, const char* path,
                             char* const* argv, char* const* envp) {
  // Every signal is blocked across fork (see spawn). The launcher's handlers
  // write to its self-pipe, which this child still shares until exec: put
  // them back to the default first, so that a SIGTERM meant for this worker
  // kills it rather than posing as a signal to the launcher. SIGPIPE is
  // ignored by the launcher, and "ignore" would survive exec.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE}) ::signal(sig, SIG_DFL);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(126);  // the launcher died before prctl
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(out_w, STDOUT_FILENO);
  ::dup2(err_w, STDERR_FILENO);
  ::execve(path, argv, envp);
  const char msg[] = "collie-run: execve of the worker program failed\n";
  ssize_t unused = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)unused;
  ::_exit(127);
}

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? str_cat("SIG", abbrev) : str_cat("signal ", sig);
}

std::string ExitInfo::describe() const {
  if (signal != 0) return str_cat("signal ", signal, " (", signal_name(signal), ")");
  return str_cat("exit code ", exit_code);
}

std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (!is_executable_file(program))
      throw InvalidArgument(
          str_cat("collie-run: program '", program, "' is not an executable file"));
    return program;
  }
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir =
        path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw InvalidArgument(
      str_cat("collie-run: program '", program, "' not found on PATH (", path, ")"));
}

std::unique_ptr<WorkerProcess> WorkerProcess::spawn(const std::string& path,
                                                    const std::vector<std::string>& argv,
                                                    const std::vector<std::string>& env) {
  // Everything the child touches is built before fork.
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    throw Error(str_cat("collie-run: pipe: ", strerror(errno)));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    throw Error(str_cat("collie-run: pipe: ", strerror(errno)));
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t parent = ::getpid();
  sigset_t all, previous;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t pid = ::fork();
  if (pid == 0)
    exec_child(parent, out_pipe[1], err_pipe[1], null_fd, path.c_str(), args.data(), envp.data());
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    throw Error(str_cat("collie-run: fork for '", path, "' failed: ", strerror(fork_errno)));
  }
  // Also from the parent, so that the group exists before we might signal it.
  ::setpgid(pid, pid);
  ::fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  std::unique_ptr<WorkerProcess> w(new WorkerProcess());
  w->pid_ = pid;
  w->out_fd_ = out_pipe[0];
  w->err_fd_ = err_pipe[0];
  return w;
}

WorkerProcess::~WorkerProcess() {
  if (pid_ > 0 && !reaped_) {
    // Never leave a worker behind, whatever path led here.
    signal_group(SIGKILL);
    reap();
  }
  close_stdout();
  close_stderr();
}

void WorkerProcess::close_stdout() {
  if (out_fd_ >= 0) ::close(out_fd_);
  out_fd_ = -1;
}

void WorkerProcess::close_stderr() {
  if (err_fd_ >= 0) ::close(err_fd_);
  err_fd_ = -1;
}

bool WorkerProcess::poll_exit() {
  if (exited_) return true;
  siginfo_t info{};
  // WNOWAIT: learn the status but keep the zombie (see the header).
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0)
    return false;
  if (info.si_pid != pid_) return false;
  exited_ = true;
  exit_time_ = std::chrono::system_clock::now();
  if (info.si_code == CLD_EXITED)
    exit_.exit_code = info.si_status;
  else
    exit_.signal = info.si_status;
  return true;
}

bool WorkerProcess::dying() const {
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

bool WorkerProcess::wait_exit(std::chrono::milliseconds limit) {
  if (poll_exit()) return true;
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd < 0) return poll_exit();
  pollfd p{pidfd, POLLIN, 0};
  int r;
  while ((r = ::poll(&p, 1, static_cast<int>(limit.count()))) < 0 && errno == EINTR) {
  }
  ::close(pidfd);
  return poll_exit();
}

void WorkerProcess::reap() {
  if (reaped_ || pid_ <= 0) return;
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  if (!exited_) {
    exited_ = true;
    exit_time_ = std::chrono::system_clock::now();
    if (WIFSIGNALED(st))
      exit_.signal = WTERMSIG(st);
    else
      exit_.exit_code = WEXITSTATUS(st);
  }
}

void WorkerProcess::signal_group(int sig) {
  if (pid_ <= 0 || reaped_) return;
  // The group outlives its leader while the leader's children run, so it is
  // signalled even after the worker itself exited (it is still a zombie).
  if (::kill(-pid_, sig) != 0 && errno == ESRCH) ::kill(pid_, sig);
}

}  // namespace collie::launcher
