// How many workers this host can run at all. collie-run holds a few file
// descriptors per worker (its stdout and stderr pipes, the worker's
// connections to the agent store node 0 hosts, its two log files) and each
// worker is at least one task, so --nproc-per-node is bounded by the fd limit
// (RLIMIT_NOFILE; collie-run raises its soft limit to the hard one), the
// user's process limit (RLIMIT_NPROC, which does not apply to root), the
// kernel's pid_max and threads-max less the tasks already running, and the
// pids cgroup's pids.max. A count beyond them is refused before anything is
// allocated: 100,000,000 workers used to allocate 24 GB of bookkeeping until
// the OOM killer stopped collie-run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace collie::launcher {

struct HostLimits {
  uint64_t fd_limit = 0;                     // RLIMIT_NOFILE (soft, after raise_fd_limit())
  uint64_t fds_open = 0;                     // descriptors this process has open now
  std::optional<uint64_t> nproc_limit;       // RLIMIT_NPROC; unset when unlimited or root
  uint64_t pid_max = 0;                      // /proc/sys/kernel/pid_max
  uint64_t threads_max = 0;                  // /proc/sys/kernel/threads-max
  uint64_t tasks_now = 0;                    // tasks (threads) on the host now
  std::optional<uint64_t> cgroup_pids_left;  // pids.max - pids.current, when limited
};

// Raises this process's soft RLIMIT_NOFILE to its hard limit (best effort).
void raise_fd_limit();

// Reads the limits of this process and host.
HostLimits read_host_limits();

// Descriptors collie-run holds per worker: 2 pipes and up to 2 store
// connections (torch's client opens two), plus 2 log files with --log-dir.
int fds_per_worker(bool log_files);

// Throws InvalidArgument when `nproc` workers do not fit in `limits`: the
// message gives the largest count that does and every limit that binds,
// with its name and how to raise it.
void check_worker_count(int nproc, const HostLimits& limits, bool log_files);

}  // namespace collie::launcher
