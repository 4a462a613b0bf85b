// WorkerGroup's side of the workers' output: where each stream goes (the
// console with the rank prefix, a log file, both), and the poll() loop that
// forwards it as it comes.
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/worker_group.h"

namespace collie::launcher {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kTick{100};  // wake-up for reaping and deadlines
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kStderrTailLines = 12;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// Reads what one pipe has (at most one chunk, so no worker can starve the
// others); returns false at EOF or on an error.
bool pump(int fd, WorkerStream& stream) {
  char buf[kReadChunk];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      stream.feed(std::string_view(buf, static_cast<size_t>(n)));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;
  }
}

// Everything left in a pipe right now, without waiting for EOF: a grandchild
// may hold the write end open long after the worker itself exited.
void drain(int fd, WorkerStream& stream) {
  char buf[kReadChunk];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      stream.feed(std::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;
  }
}

}  // namespace

std::string WorkerGroup::expand_prefix(const std::string& tmpl, const WorkerPlace& place,
                                       const std::string& role) {
  std::string s = tmpl;
  replace_all(s, "${rank}", std::to_string(place.global_rank));
  replace_all(s, "${local_rank}", std::to_string(place.local_rank));
  replace_all(s, "${role_name}", role);
  return s;
}

void WorkerGroup::open_streams(Slot& slot, bool append) {
  const GroupSpec& s = spec_;
  const int lr = slot.place.local_rank;
  bool shown = s.local_ranks_filter.empty() || s.local_ranks_filter.count(lr) > 0;
  bool files = !s.attempt_log_dir.empty();
  std::string dir;
  if (files) {
    dir = str_cat(s.attempt_log_dir, "/", slot.place.global_rank);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(str_cat("collie-run: cannot create log folder ", dir, ": ", ec.message()));
  }
  std::string prefix = expand_prefix(s.line_prefix_template, slot.place, s.env.role);
  slot.out = std::make_unique<WorkerStream>(
      WorkerStreamOptions{.console_fd = (shown && (!files || (s.tee & 1))) ? STDOUT_FILENO : -1,
                          .prefix = prefix,
                          .log_path = files ? dir + "/stdout.log" : "",
                          .append = append,
                          .tail_lines = 0,
                          .fallback_fd = shown ? STDOUT_FILENO : -1});
  slot.err = std::make_unique<WorkerStream>(
      WorkerStreamOptions{.console_fd = (shown && (!files || (s.tee & 2))) ? STDERR_FILENO : -1,
                          .prefix = prefix,
                          .log_path = files ? dir + "/stderr.log" : "",
                          .append = append,
                          .tail_lines = kStderrTailLines,
                          .fallback_fd = shown ? STDERR_FILENO : -1});
}

void WorkerGroup::pump_streams(int relay_fd) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Slot*, bool>> owners;  // which slot and stream (true: stderr)
  fds.push_back({relay_fd, POLLIN, 0});
  owners.emplace_back(nullptr, false);
  for (Slot& slot : slots_) {
    if (slot.proc->stdout_fd() >= 0) {
      fds.push_back({slot.proc->stdout_fd(), POLLIN, 0});
      owners.emplace_back(&slot, false);
    }
    if (slot.proc->stderr_fd() >= 0) {
      fds.push_back({slot.proc->stderr_fd(), POLLIN, 0});
      owners.emplace_back(&slot, true);
    }
  }
  milliseconds wait = kTick;
  if (stopping_ && !killed_) {
    auto left = std::chrono::duration_cast<milliseconds>(kill_at_ - Clock::now());
    wait = std::max(milliseconds(0), std::min(wait, left));
  }
  int ready = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  if (ready < 0 && errno != EINTR) throw Error(str_cat("collie-run: poll: ", strerror(errno)));

  for (size_t i = 1; ready > 0 && i < fds.size(); ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    auto [slot, is_err] = owners[i];
    WorkerStream& stream = is_err ? *slot->err : *slot->out;
    if (!pump(fds[i].fd, stream)) {
      stream.finish();
      is_err ? slot->proc->close_stderr() : slot->proc->close_stdout();
    }
    report_log_error(*slot, is_err);
  }
}

void WorkerGroup::report_log_error(Slot& slot, bool is_err) {
  WorkerStream& stream = is_err ? *slot.err : *slot.out;
  if (stream.log_error().empty() || slot.log_error_reported[is_err]) return;
  slot.log_error_reported[is_err] = true;
  const char* name = is_err ? "stderr" : "stdout";
  std::string message =
      str_cat("collie-run: rank ", slot.place.global_rank, "'s ", name, ": ", stream.log_error());
  write_all(STDERR_FILENO,
            str_cat(message, "; its ", name, " goes to the console from here on", "\n"));
  result_.log_errors.push_back(std::move(message));
}

void WorkerGroup::flush_streams(Slot& slot) {
  if (slot.proc->stdout_fd() >= 0) drain(slot.proc->stdout_fd(), *slot.out);
  if (slot.proc->stderr_fd() >= 0) drain(slot.proc->stderr_fd(), *slot.err);
  slot.out->finish();
  slot.err->finish();
  report_log_error(slot, false);
  report_log_error(slot, true);
}

}  // namespace collie::launcher
