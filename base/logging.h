// One logging header. Lines go to stderr, one write per line (so lines from
// several threads or ranks never interleave mid-line), prefixed with the rank:
//
//   [collie rank 3] W 12:01:02.345 tcp_store.cc:120] dropped connection ...
//
// The level comes from COLLIE_LOG_LEVEL (TRACE, DEBUG, INFO, WARN, ERROR, OFF;
// default WARN). The rank is set by init_process_group, or read from RANK.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace collie {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

LogLevel log_level();
void set_log_level(LogLevel level);
// Parses "INFO", "info", "2"...; throws InvalidArgument naming the text.
LogLevel parse_log_level(const std::string& text);
// -1 means unknown (no prefix rank).
void set_log_rank(int rank);
int log_rank();

// A function that sees every line logged, after it went to stderr (without
// its newline), on the thread that logged it: collie-run uses one to repeat
// a line that explains a failure in its failure summary. One at a time;
// nullptr removes it. It must be thread-safe and must not log.
using LogTap = void (*)(LogLevel level, std::string_view line);
void set_log_tap(LogTap tap);

namespace detail {

class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  template <typename T>
  LogLine& operator<<(const T& value) {
    out_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream out_;
};

}  // namespace detail
}  // namespace collie

#define COLLIE_LOG_ENABLED(level) (::collie::LogLevel::level >= ::collie::log_level())

// COLLIE_LOG(kInfo) << "connected to " << addr;
#define COLLIE_LOG(level)           \
  if (!COLLIE_LOG_ENABLED(level)) { \
  } else                            \
    ::collie::detail::LogLine(::collie::LogLevel::level, __FILE__, __LINE__)
