#include "runtime/launcher/worker_stream.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/base/error.h"
#include "runtime/base/str_cat.h"

namespace collie::launcher {
namespace {

// Long lines are kept in the summary, but only this much of each.
constexpr size_t kMaxTailLineBytes = 400;

}  // namespace

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

WorkerStream::WorkerStream(WorkerStreamOptions options)
    : options_(std::move(options)), splitter_([this](std::string_view line) { on_line(line); }) {
  if (!options_.log_path.empty()) {
    log_fd_ = ::open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd_ < 0)
      throw Error(str_cat("collie-run: cannot open log file ", options_.log_path, ": ", strerror(errno)));
  }
}

WorkerStream::~WorkerStream() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void WorkerStream::on_line(std::string_view line) {
  // One write per line, prefix included: a line is atomic on the console as
  // long as the console is a pipe and the line fits in PIPE_BUF, and always
  // whole with respect to the other workers since only this thread writes.
  if (options_.console_fd >= 0) {
    scratch_.assign(options_.prefix);
    scratch_.append(line);
    scratch_.push_back('\n');
    write_all(options_.console_fd, scratch_);
  }
  if (log_fd_ >= 0) {
    scratch_.assign(line);
    scratch_.push_back('\n');
    write_all(log_fd_, scratch_);
  }
  if (options_.tail_lines > 0) {
    tail_.emplace_back(line.substr(0, kMaxTailLineBytes));
    if (tail_.size() > options_.tail_lines) tail_.pop_front();
  }
}

}  // namespace collie::launcher
