#include "collie/rendezvous/tcp_store/tcp_store_os_limits.h"

#include <sys/resource.h>

#include <fstream>

#include "collie/base/logging.h"

namespace collie {
namespace {

// The first integer in a /proc file, or `fallback`.
long long read_proc_number(const char* path, long long fallback) {
  std::ifstream in(path);
  long long v = 0;
  return (in >> v) && v > 0 ? v : fallback;
}

}  // namespace

size_t raise_open_files_limit(size_t wanted, const std::string& who, const std::string& what) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return wanted;
  const rlim_t before = lim.rlim_cur;
  if (lim.rlim_cur < wanted && lim.rlim_cur < lim.rlim_max) {
    // An unlimited hard limit still stops at fs.nr_open.
    lim.rlim_cur = lim.rlim_max != RLIM_INFINITY
                       ? lim.rlim_max
                       : static_cast<rlim_t>(read_proc_number("/proc/sys/fs/nr_open", 1 << 20));
    if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) {
      COLLIE_LOG(kInfo) << "TcpStoreServer " << who << ": raised the open-files limit "
                        << "(RLIMIT_NOFILE) from " << before << " to " << lim.rlim_cur << " for "
                        << what;
    } else {
      lim.rlim_cur = before;
    }
  }
  if (lim.rlim_cur < wanted) {
    COLLIE_LOG(kWarn) << "TcpStoreServer " << who << ": the open-files limit (RLIMIT_NOFILE) is "
                      << lim.rlim_cur << " (hard limit "
                      << (lim.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                                        : std::to_string(lim.rlim_max))
                      << "), below the " << wanted << " descriptors " << what
                      << " may need: clients past it will fail to connect. Raise the hard limit "
                         "(ulimit -Hn, LimitNOFILE= in a systemd unit, nofile in "
                         "/etc/security/limits.conf) or lower --max-connections";
  }
  return static_cast<size_t>(lim.rlim_cur);
}

int listen_backlog() {
  return static_cast<int>(read_proc_number("/proc/sys/net/core/somaxconn", 4096));
}

}  // namespace collie
