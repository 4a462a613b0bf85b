#include "collie/base/logging.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include "collie/base/error.h"

namespace collie {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("COLLIE_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return LogLevel::kWarn;
  try {
    return parse_log_level(env);
  } catch (const InvalidArgument&) {
    return LogLevel::kWarn;
  }
}

int rank_from_env() {
  const char* env = std::getenv("RANK");
  if (env == nullptr) return -1;
  char* end = nullptr;
  long v = std::strtol(env, &end, 10);
  return (end != env && *end == '\0' && v >= 0 && v < (1 << 30)) ? static_cast<int>(v) : -1;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

std::atomic<int>& rank_storage() {
  static std::atomic<int> rank{rank_from_env()};
  return rank;
}

std::atomic<LogTap>& tap_storage() {
  static std::atomic<LogTap> tap{nullptr};
  return tap;
}

const char* basename_of(const char* path) {
  const char* slash = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') slash = p + 1;
  return slash;
}

}  // namespace

LogLevel log_level() {
  return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed));
}
void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }
void set_log_rank(int rank) { rank_storage().store(rank); }
int log_rank() { return rank_storage().load(std::memory_order_relaxed); }
void set_log_tap(LogTap tap) { tap_storage().store(tap, std::memory_order_release); }

LogLevel parse_log_level(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::toupper(c); });
  if (t == "TRACE" || t == "0") return LogLevel::kTrace;
  if (t == "DEBUG" || t == "1") return LogLevel::kDebug;
  if (t == "INFO" || t == "2") return LogLevel::kInfo;
  if (t == "WARN" || t == "WARNING" || t == "3") return LogLevel::kWarn;
  if (t == "ERROR" || t == "4") return LogLevel::kError;
  if (t == "OFF" || t == "NONE" || t == "5") return LogLevel::kOff;
  throw InvalidArgument("COLLIE_LOG_LEVEL='" + text +
                        "' is not a log level: expected TRACE, DEBUG, INFO, WARN, ERROR or OFF");
}

namespace detail {

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  static const char kLetters[] = "TDIWE";
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms));
  int rank = log_rank();
  out_ << "[collie";
  if (rank >= 0) out_ << " rank " << rank;
  out_ << "] " << kLetters[static_cast<int>(level_)] << ' ' << stamp << ' ' << basename_of(file)
       << ':' << line << "] ";
}

LogLine::~LogLine() {
  out_ << '\n';
  const std::string s = out_.str();
  // One write(2) per line: atomic with respect to other writers of stderr.
  ssize_t unused = ::write(STDERR_FILENO, s.data(), s.size());
  (void)unused;
  if (LogTap tap = tap_storage().load(std::memory_order_acquire))
    tap(level_, std::string_view(s).substr(0, s.size() - 1));
}

}  // namespace detail
}  // namespace collie
