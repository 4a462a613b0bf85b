#include "runtime/launcher/worker_group.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>

#include "base/error.h"
#include "base/str_cat.h"
#include "runtime/launcher/orphan_guard.h"
#include "runtime/launcher/signal_relay.h"
#include "runtime/launcher/worker_stream.h"

namespace collie::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{100};         // wake-up for reaping and deadlines
constexpr milliseconds kDyingGrace{1000};  // how long a dying worker may take to exit
constexpr milliseconds kRemoteCheckInterval{200};
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kStderrTailLines = 12;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// One worker with its two output streams.
struct Slot {
  WorkerPlace place;
  std::unique_ptr<WorkerStream> out, err;
  std::unique_ptr<ChildProcess> proc;
  bool signalled = false;
  bool was_stopped = false;
  bool recorded = false;
  bool log_error_reported[2] = {false, false};  // stdout, stderr
};

// Says at once, on the launcher's stderr, that a log file cannot be
// written, and remembers it for the exit status.
void report_log_error(Slot& slot, bool is_err, AttemptResult& result) {
  WorkerStream& stream = is_err ? *slot.err : *slot.out;
  if (stream.log_error().empty() || slot.log_error_reported[is_err]) return;
  slot.log_error_reported[is_err] = true;
  const char* name = is_err ? "stderr" : "stdout";
  std::string message =
      str_cat("collie-run: rank ", slot.place.global_rank, "'s ", name, ": ", stream.log_error());
  write_all(STDERR_FILENO,
            str_cat(message, "; its ", name, " goes to the console from here on", "\n"));
  result.log_errors.push_back(std::move(message));
}

// Whether a process is stopped (state T: SIGSTOP, SIGTSTP; t: a debugger).
bool in_stopped_state(pid_t pid) {
  std::ifstream stat_file(str_cat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'T' || stat[paren + 2] == 't');
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

AttemptResult WorkerGroup::run(SignalRelay& relay, const RemoteCheck& remote_check) {
  AttemptResult result;
  result.start_time = std::chrono::system_clock::now();
  const GroupSpec& s = spec_;

  // Set up every worker's streams and start them, rank by rank.
  std::vector<Slot> slots(static_cast<size_t>(s.nproc));
  for (int lr = 0; lr < s.nproc; ++lr) {
    Slot& slot = slots[lr];
    slot.place = {.local_rank = lr,
                  .global_rank = s.rank_base + lr,
                  .world_size = s.world_size,
                  .local_world_size = s.nproc,
                  .group_rank = s.node_rank,
                  .group_world_size = s.nnodes};
    bool shown = s.local_ranks_filter.empty() || s.local_ranks_filter.count(lr) > 0;
    bool files = !s.attempt_log_dir.empty();
    std::string dir;
    if (files) {
      dir = str_cat(s.attempt_log_dir, "/", slot.place.global_rank);
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec)
        throw Error(str_cat("collie-run: cannot create log folder ", dir, ": ", ec.message()));
    }
    std::string prefix = expand_prefix(s.line_prefix_template, slot.place, s.env.role);
    slot.out = std::make_unique<WorkerStream>(
        WorkerStreamOptions{.console_fd = (shown && (!files || (s.tee & 1))) ? STDOUT_FILENO : -1,
                            .prefix = prefix,
                            .log_path = files ? dir + "/stdout.log" : "",
                            .tail_lines = 0,
                            .fallback_fd = shown ? STDOUT_FILENO : -1});
    slot.err = std::make_unique<WorkerStream>(
        WorkerStreamOptions{.console_fd = (shown && (!files || (s.tee & 2))) ? STDERR_FILENO : -1,
                            .prefix = prefix,
                            .log_path = files ? dir + "/stderr.log" : "",
                            .tail_lines = kStderrTailLines,
                            .fallback_fd = shown ? STDERR_FILENO : -1});
  }
  for (Slot& slot : slots) {
    std::vector<std::string> argv = s.program_argv;
    if (!s.use_env) argv.insert(argv.begin() + 1, str_cat("--local_rank=", slot.place.local_rank));
    SpawnOptions options{.new_process_group = true,
                         .die_with_parent = true,
                         .stdout_to = ChildOutput::kPipe,
                         .stderr_to = ChildOutput::kPipe,
                         .path = s.program_path,
                         .announce_fd = s.guard ? s.guard->fd() : -1};
    for (const auto& [k, v] : worker_variables(slot.place, s.env)) options.env[k] = v;
    slot.proc = std::make_unique<ChildProcess>(ChildProcess::spawn(argv, options));
  }

  // Supervise until every worker is reaped.
  bool stopping = false, killed = false;
  Clock::time_point kill_at{};
  auto last_remote = Clock::now();
  auto stop_all = [&](int sig) {
    stopping = true;
    kill_at = Clock::now() + s.grace_period;
    for (Slot& slot : slots) {
      if (slot.proc->exited()) continue;
      slot.signalled = true;
      slot.was_stopped = in_stopped_state(slot.proc->pid());
      slot.proc->signal_group(sig);
    }
  };

  std::vector<pollfd> fds;
  std::vector<std::pair<Slot*, bool>> owners;  // which slot and stream (true: stderr)
  for (;;) {
    fds.clear();
    owners.clear();
    fds.push_back({relay.fd(), POLLIN, 0});
    owners.emplace_back(nullptr, false);
    for (Slot& slot : slots) {
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
    if (stopping && !killed) {
      auto left = std::chrono::duration_cast<milliseconds>(kill_at - Clock::now());
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
      report_log_error(*slot, is_err, result);
    }

    for (int sig : relay.drain()) {
      if (result.outcome != AttemptOutcome::kInterrupted) {
        result.outcome = AttemptOutcome::kInterrupted;
        result.signal = sig;
        // Forward the launcher's own signal, as torchrun does.
        stop_all(sig);
      } else if (!killed) {
        // A second Ctrl-C: the user does not want to wait for the grace period.
        kill_at = Clock::now();
      }
    }

    bool all_exited = true;
    // Failures first seen in the same pass exited within one poll period of
    // each other, too close to order by time. A worker killed by a signal
    // (a crash, the OOM killer, a kill -9) is then the likelier root cause:
    // its peers typically exit with an error because its sockets closed.
    int root = -1;
    for (size_t i = 0; i < slots.size(); ++i) {
      Slot& slot = slots[i];
      if (!slot.proc->poll_exit()) {
        all_exited = false;
        continue;
      }
      if (slot.recorded) continue;
      slot.recorded = true;
      if (!slot.proc->status().ok() && !slot.signalled && !stopping) {
        const bool by_signal = slot.proc->status().signal != 0;
        if (root < 0 || (by_signal && slots[static_cast<size_t>(root)].proc->status().signal == 0))
          root = static_cast<int>(i);
      }
    }
    // A worker that exited with an error because a peer's connection closed
    // can be seen exiting before that peer, killed by a signal, is: a
    // process closes its sockets during its exit, before the exit is
    // reported. So before blaming an error exit, wait briefly for any worker
    // that is dying already (not by our hand) and prefer it if a signal
    // killed it. Bounded: a dying process is gone in milliseconds.
    if (root >= 0 && slots[static_cast<size_t>(root)].proc->status().signal == 0) {
      for (size_t i = 0; i < slots.size(); ++i) {
        Slot& slot = slots[i];
        if (slot.recorded || slot.signalled || !slot.proc->dying()) continue;
        if (!slot.proc->wait_exit(kDyingGrace)) continue;
        slot.recorded = true;
        if (slot.proc->status().signal != 0) {
          root = static_cast<int>(i);
          break;
        }
      }
    }
    if (root >= 0) {
      result.outcome = AttemptOutcome::kFailed;
      result.first_failure = root;
      stop_all(SIGTERM);
    }

    if (!stopping && remote_check && Clock::now() - last_remote >= kRemoteCheckInterval) {
      last_remote = Clock::now();
      std::optional<std::string> reason;
      try {
        reason = remote_check();
      } catch (const std::exception& e) {
        reason = str_cat("lost contact with the agent store: ", e.what());
        result.store_lost = true;
      }
      if (reason) {
        result.outcome = AttemptOutcome::kRemoteFailed;
        result.remote_reason = *reason;
        stop_all(SIGTERM);
      }
    }

    if (stopping && !killed && Clock::now() >= kill_at) {
      killed = true;
      for (Slot& slot : slots)
        if (!slot.proc->exited()) slot.proc->signal_group(SIGKILL);
    }
    if (all_exited) break;
  }

  // Flush what is left, including a last line without a newline, and make
  // sure nothing a worker started outlives the attempt.
  for (Slot& slot : slots) {
    if (slot.proc->stdout_fd() >= 0) drain(slot.proc->stdout_fd(), *slot.out);
    if (slot.proc->stderr_fd() >= 0) drain(slot.proc->stderr_fd(), *slot.err);
    slot.out->finish();
    slot.err->finish();
    report_log_error(slot, false, result);
    report_log_error(slot, true, result);
    slot.proc->signal_group(SIGKILL);
    if (s.guard) s.guard->withdraw(slot.proc->pid());  // while the zombie still holds the pgid
    slot.proc->reap();
    slot.proc->close_stdout();
    slot.proc->close_stderr();
    result.workers.push_back({.place = slot.place,
                              .pid = slot.proc->pid(),
                              .exit = slot.proc->status(),
                              .exit_time = slot.proc->exit_time(),
                              .stopped_by_launcher = slot.signalled,
                              .was_stopped = slot.was_stopped,
                              .stderr_tail = slot.err->tail()});
  }
  return result;
}

}  // namespace collie::launcher
