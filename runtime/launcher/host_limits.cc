#include "collie/runtime/launcher/host_limits.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::launcher {
namespace {

// Descriptors kept aside for everything else collie-run opens: the agent
// store's listener and client, the signal pipe, the orphan guard, and the
// three descriptors each spawn holds until its fork returns.
constexpr uint64_t kSpareFds = 64;

std::optional<uint64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  if (in >> v) return v;
  return std::nullopt;
}

// "4/126" in /proc/loadavg: running/total scheduling entities.
uint64_t tasks_on_host() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c, tasks;
  if (!(in >> a >> b >> c >> tasks)) return 0;
  const size_t slash = tasks.find('/');
  return slash == std::string::npos ? 0 : std::strtoull(tasks.c_str() + slash + 1, nullptr, 10);
}

// The pids controller's folder of this process: cgroup v2 ("0::/path") or
// v1 ("N:pids:/path").
std::optional<uint64_t> cgroup_pids_left() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    std::string dir;
    if (line.rfind("0::", 0) == 0)
      dir = "/sys/fs/cgroup" + line.substr(3);
    else if (const size_t at = line.find(":pids:"); at != std::string::npos)
      dir = "/sys/fs/cgroup/pids" + line.substr(at + 6);
    else
      continue;
    const auto max = read_number(dir + "/pids.max");  // "max" reads as nothing: unlimited
    const auto current = read_number(dir + "/pids.current");
    if (max && current) return *max > *current ? *max - *current : 0;
  }
  return std::nullopt;
}

}  // namespace

void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

HostLimits read_host_limits() {
  HostLimits h;
  rlimit rl{};
  h.fd_limit = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++h.fds_open;
  if (::geteuid() != 0 && ::getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    h.nproc_limit = rl.rlim_cur;
  h.pid_max = read_number("/proc/sys/kernel/pid_max").value_or(32768);
  h.threads_max = read_number("/proc/sys/kernel/threads-max").value_or(h.pid_max);
  h.tasks_now = tasks_on_host();
  h.cgroup_pids_left = cgroup_pids_left();
  return h;
}

int fds_per_worker(bool log_files) { return log_files ? 6 : 4; }

void check_worker_count(int nproc, const HostLimits& h, bool log_files) {
  struct Bound {
    uint64_t workers;
    std::string what;
  };
  std::vector<Bound> bounds;
  const uint64_t per = static_cast<uint64_t>(fds_per_worker(log_files));
  const uint64_t reserved = h.fds_open + kSpareFds;
  bounds.push_back(
      {h.fd_limit > reserved ? (h.fd_limit - reserved) / per : 0,
       str_cat("RLIMIT_NOFILE ", h.fd_limit, " descriptors (", h.fds_open, " open, ", kSpareFds,
               " spare, ", per, " per worker: its output pipes, its store connections",
               log_files ? ", its log files" : "", "; raise it with ulimit -n)")});
  // The kernel's task table is shared by every user; the launcher itself and
  // a few spare tasks stay out of it.
  const uint64_t task_cap = std::min(h.pid_max, h.threads_max);
  const uint64_t used = h.tasks_now + 16;
  bounds.push_back({task_cap > used ? task_cap - used : 0,
                    str_cat("kernel.pid_max ", h.pid_max, " / kernel.threads-max ", h.threads_max,
                            " with ", h.tasks_now, " tasks running")});
  if (h.nproc_limit)
    bounds.push_back({*h.nproc_limit > 1 ? *h.nproc_limit - 1 : 0,
                      str_cat("RLIMIT_NPROC ", *h.nproc_limit, " processes (ulimit -u)")});
  if (h.cgroup_pids_left)
    bounds.push_back(
        {*h.cgroup_pids_left > 1 ? *h.cgroup_pids_left - 1 : 0,
         str_cat("the pids cgroup, which has room for ", *h.cgroup_pids_left, " more tasks")});
  uint64_t most = UINT64_MAX;
  for (const auto& b : bounds) most = std::min(most, b.workers);
  if (static_cast<uint64_t>(nproc) <= most) return;
  std::string binding;
  for (const auto& b : bounds) {
    if (b.workers >= static_cast<uint64_t>(nproc)) continue;
    binding += str_cat(binding.empty() ? "" : "; ", b.what, " allow ", b.workers);
  }
  throw InvalidArgument(str_cat("--nproc-per-node ", nproc,
                                " is more workers than this host can run: at most ", most, " (",
                                binding, ")"));
}

}  // namespace collie::launcher
