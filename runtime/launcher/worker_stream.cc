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
    log_fd_ = ::open(options_.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                     0644);
    if (log_fd_ < 0)
      throw Error(
          str_cat("collie-run: cannot open log file ", options_.log_path, ": ", strerror(errno)));
  }
}

WorkerStream::~WorkerStream() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void WorkerStream::feed(std::string_view bytes) {
  splitter_.feed(bytes);
  flush();
}

void WorkerStream::finish() {
  splitter_.finish();
  flush();
}

void WorkerStream::on_line(std::string_view line) {
  if (options_.console_fd >= 0) {
    console_batch_.append(options_.prefix);
    console_batch_.append(line);
    console_batch_.push_back('\n');
  }
  if (log_fd_ >= 0) {
    log_batch_.append(line);
    log_batch_.push_back('\n');
  }
  if (options_.tail_lines > 0) {
    tail_.emplace_back(line.substr(0, kMaxTailLineBytes));
    if (tail_.size() > options_.tail_lines) tail_.pop_front();
  }
}

void WorkerStream::flush() {
  // Only whole lines are ever in a batch, and only the launcher's one
  // supervision thread writes to the console, so lines of different workers
  // never mix.
  if (!console_batch_.empty()) write_all(options_.console_fd, console_batch_);
  if (!log_batch_.empty()) write_all(log_fd_, log_batch_);
  console_batch_.clear();
  log_batch_.clear();
}

}  // namespace collie::launcher
