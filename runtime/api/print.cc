#include "collie/runtime/api/print.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>

#include "collie/base/logging.h"

namespace collie {
namespace {

std::atomic<bool> g_print_enabled{true};

}  // namespace

void setup_for_distributed(bool is_master) {
  g_print_enabled.store(is_master);
  if (!is_master && log_level() < LogLevel::kWarn) set_log_level(LogLevel::kWarn);
}

bool print_enabled() { return g_print_enabled.load(); }

namespace detail {

void write_stdout_line(const std::string& line) {
  // Whatever the program already put in stdio's buffer goes first, then the
  // line with one write(2), so that the launcher sees it whole.
  static std::mutex mu;
  std::lock_guard lock(mu);
  std::fflush(stdout);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // stdout closed: printing is best effort, like Python's
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace detail
}  // namespace collie
