// WorkerStream: where one stream (stdout or stderr) of one worker goes. Each
// whole line is written, with the rank prefix, to the launcher's own stream
// of the same kind (when the console wants it), and without the prefix to the
// worker's log file (when there is a log directory). The last lines of stderr
// are kept for the failure summary.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <utility>

#include "collie/base/unique_fd.h"
#include "collie/runtime/launcher/line_splitter.h"

namespace collie::launcher {

struct WorkerStreamOptions {
  int console_fd = -1;    // 1 or 2; -1: not shown on the console
  std::string prefix;     // e.g. "[rank3]: "
  std::string log_path;   // empty: no file
  bool append = false;    // keep what the file has (a replacement's predecessor wrote it)
  size_t tail_lines = 0;  // how many last lines to keep
  // Where lines go when the log file cannot be written (a full disk): 1 or
  // 2, so that no line is lost; -1: nowhere.
  int fallback_fd = -1;
};

class WorkerStream {
 public:
  // Opens (truncating, unless append) the log file; throws Error naming the path.
  explicit WorkerStream(WorkerStreamOptions options);
  WorkerStream(const WorkerStream&) = delete;
  WorkerStream& operator=(const WorkerStream&) = delete;

  // Whole lines are collected while the chunk is split and written with one
  // write() per destination afterwards: many lines, few system calls.
  void feed(std::string_view bytes);
  // Flushes a last partial line (the worker exited without a newline).
  void finish();
  const std::deque<std::string>& tail() const { return tail_; }
  // Why the log file could not be written ("cannot write PATH: No space
  // left on device"), empty while it can. After the first failure the file
  // is closed and every line, the unwritten ones included, goes to
  // fallback_fd with the prefix.
  const std::string& log_error() const { return log_error_; }

 private:
  void on_line(std::string_view line);
  void flush();
  void fail_log(int err, std::string_view unwritten);

  WorkerStreamOptions options_;
  UniqueFd log_fd_;
  std::string log_error_;
  std::deque<std::string> tail_;
  std::string console_batch_;
  std::string log_batch_;
  LineSplitter splitter_;
};

// Writes all of `data` (retrying short writes and EINTR); errors such as a
// closed console are ignored, the job must not die because nobody reads.
void write_all(int fd, std::string_view data);

// Writes all of `data`; returns how many bytes were written and, when that
// is not all of it, the errno of the write that failed.
std::pair<size_t, int> write_fully(int fd, std::string_view data);

}  // namespace collie::launcher
