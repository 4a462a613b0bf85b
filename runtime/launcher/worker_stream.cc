#include "collie/runtime/launcher/worker_stream.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::launcher {
namespace {

// Long lines are kept in the summary, but only this much of each.
constexpr size_t kMaxTailLineBytes = 2048;

}  // namespace

std::pair<size_t, int> write_fully(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return {done, errno};
    if (n == 0) return {done, EIO};
    done += static_cast<size_t>(n);
  }
  return {done, 0};
}

void write_all(int fd, std::string_view data) { write_fully(fd, data); }

WorkerStream::WorkerStream(WorkerStreamOptions options)
    : options_(std::move(options)), splitter_([this](std::string_view line) { on_line(line); }) {
  if (!options_.log_path.empty()) {
    log_fd_.reset(
        ::open(options_.log_path.c_str(),
               O_WRONLY | O_CREAT | (options_.append ? 0 : O_TRUNC) | O_APPEND | O_CLOEXEC, 0644));
    if (!log_fd_)
      throw Error(
          str_cat("collie-run: cannot open log file ", options_.log_path, ": ", strerror(errno)));
  }
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
  if (log_fd_) {
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
  console_batch_.clear();
  if (!log_batch_.empty()) {
    const auto [written, err] = write_fully(log_fd_.get(), log_batch_);
    if (err != 0) fail_log(err, std::string_view(log_batch_).substr(written));
  }
  log_batch_.clear();
}

void WorkerStream::fail_log(int err, std::string_view unwritten) {
  log_error_ = str_cat("cannot write ", options_.log_path, ": ", strerror(err));
  log_fd_.reset();
  // The console has had every line already, or gets them from now on: the
  // ones the file did not take first, whole (a line cut by the failed write
  // is repeated from its start), then every later line.
  if (options_.console_fd >= 0 || options_.fallback_fd < 0) return;
  options_.console_fd = options_.fallback_fd;
  const std::string_view batch = log_batch_;
  const size_t written = batch.size() - unwritten.size();
  const size_t newline = written == 0 ? std::string_view::npos : batch.rfind('\n', written - 1);
  std::string_view rest = batch.substr(newline == std::string_view::npos ? 0 : newline + 1);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    console_batch_.append(options_.prefix);
    console_batch_.append(rest.substr(0, nl));
    console_batch_.push_back('\n');
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  }
  write_all(options_.console_fd, console_batch_);
  console_batch_.clear();
}

}  // namespace collie::launcher
