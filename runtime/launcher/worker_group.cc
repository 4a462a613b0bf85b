#include "collie/runtime/launcher/worker_group.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/fr_status.h"
#include "collie/runtime/launcher/orphan_guard.h"
#include "collie/runtime/launcher/signal_relay.h"

namespace collie::launcher {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kDyingGrace{1000};  // how long a dying worker may take to exit
constexpr milliseconds kRemoteCheckInterval{200};

// Whether a process is stopped (state T: SIGSTOP, SIGTSTP; t: a debugger).
bool in_stopped_state(pid_t pid) {
  std::ifstream stat_file(str_cat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'T' || stat[paren + 2] == 't');
}

}  // namespace

AttemptResult WorkerGroup::run(SignalRelay& relay, const RemoteCheck& remote_check) {
  result_.start_time = std::chrono::system_clock::now();
  result_.on_failure = spec_.on_failure;
  make_error_dir();
  struct RemoveErrorDir {
    WorkerGroup* group;
    ~RemoveErrorDir() { group->remove_error_dir(); }
  } remove_error_dir_at_exit{this};
  make_state_dir();
  struct RemoveStateDir {
    WorkerGroup* group;
    ~RemoveStateDir() { group->remove_state_dir(); }
  } remove_state_dir_at_exit{this};
  start();
  last_remote_ = Clock::now();
  // Supervise until every worker is reaped.
  for (;;) {
    pump_streams(relay.fd());
    take_signals(relay);
    bool all_exited = true;
    if (spec_.on_failure != OnFailure::kStop) {
      survive_exits(&all_exited);
    } else if (const int root = pick_root_cause(&all_exited); root >= 0) {
      result_.outcome = AttemptOutcome::kFailed;
      result_.first_failure = root;
      analyse_failure();
      stop_all(SIGTERM);
    }
    check_remote(remote_check);
    kill_when_due();
    if (all_exited) break;
  }
  reap();
  if (spec_.on_failure != OnFailure::kStop) settle_survival();
  return std::move(result_);
}

void WorkerGroup::start() {
  const GroupSpec& s = spec_;
  slots_.resize(static_cast<size_t>(s.nproc));
  for (int lr = 0; lr < s.nproc; ++lr) {
    Slot& slot = slots_[lr];
    slot.place = {.local_rank = lr,
                  .global_rank = s.rank_base + lr,
                  .world_size = s.world_size,
                  .local_world_size = s.nproc,
                  .group_rank = s.node_rank,
                  .group_world_size = s.nnodes};
    slot.error_file = str_cat(error_dir_, "/rank_", slot.place.global_rank, ".json");
    open_streams(slot);
  }
  for (Slot& slot : slots_) spawn(slot);
}

void WorkerGroup::spawn(Slot& slot) {
  const GroupSpec& s = spec_;
  std::vector<std::string> argv = s.program_argv;
  if (!s.use_env) argv.insert(argv.begin() + 1, str_cat("--local_rank=", slot.place.local_rank));
  SpawnOptions options{.new_process_group = true,
                       .die_with_parent = true,
                       .stdout_to = ChildOutput::kPipe,
                       .stderr_to = ChildOutput::kPipe,
                       .path = s.program_path,
                       .announce_fd = s.guard ? s.guard->fd() : -1};
  for (const auto& [k, v] : worker_variables(slot.place, s.env)) options.env[k] = v;
  // Always the worker's own file, as torchrun does (a TORCHELASTIC_ERROR_FILE
  // collie-run itself was given is its own: the agent's, not the workers').
  options.env["TORCHELASTIC_ERROR_FILE"] = slot.error_file;
  // Where each worker's flight recorder writes its state (fr_status.h); the
  // launcher collects the states itself, so a failing worker need not wait
  // for the others' dumps before it exits.
  if (!state_dir_.empty()) {
    options.env["COLLIE_FR_STATE_DIR"] = state_dir_;
    options.env["COLLIE_RUN_COLLECTS_DUMPS"] = "1";
  }
  // A replacement joins the running group; no other worker may think it
  // does because collie-run itself runs with the variable set.
  options.env[kReplacementVariable] =
      slot.replacement ? std::optional<std::string>("1") : std::nullopt;
  slot.proc = std::make_unique<ChildProcess>(ChildProcess::spawn(argv, options));
  write_worker_list();
}

void WorkerGroup::make_state_dir() {
  state_dir_ = fr_state_dir(::getpid());
  std::error_code ec;
  std::filesystem::create_directories(state_dir_, ec);
  if (ec) {  // the job runs; only its live query and hang analysis are lost
    std::fprintf(stderr, "collie-run: cannot create %s (%s): no live query or hang analysis\n",
                 state_dir_.c_str(), ec.message().c_str());
    state_dir_.clear();
  }
}

void WorkerGroup::remove_state_dir() {
  if (state_dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(state_dir_, ec);
  state_dir_.clear();
}

void WorkerGroup::write_worker_list() {
  if (state_dir_.empty()) return;
  std::vector<WorkerPid> pids;
  for (const Slot& slot : slots_)
    if (slot.proc) pids.push_back({slot.place.global_rank, slot.proc->pid()});
  write_worker_pids(state_dir_, pids);
}

void WorkerGroup::analyse_failure() {
  if (state_dir_.empty()) return;
  std::vector<WorkerPid> pids;
  std::vector<int> ranks;
  for (const Slot& slot : slots_) {
    // A worker that is exiting wrote its state when it failed.
    const bool exiting = slot.proc->exited() || slot.proc->dying();
    pids.push_back({slot.place.global_rank, exiting ? -1 : slot.proc->pid()});
    ranks.push_back(slot.place.global_rank);
  }
  // Bounded: a worker whose dump thread cannot run (SIGSTOP) never answers.
  request_states(state_dir_, pids, std::chrono::milliseconds(1000));
  result_.hang_analysis = analyse_hang(state_dir_, ranks);
}

void WorkerGroup::take_signals(SignalRelay& relay) {
  for (int sig : relay.drain()) {
    if (result_.outcome != AttemptOutcome::kInterrupted) {
      result_.outcome = AttemptOutcome::kInterrupted;
      result_.signal = sig;
      // Forward the launcher's own signal, as torchrun does.
      stop_all(sig);
    } else if (!killed_) {
      // A second Ctrl-C: the user does not want to wait for the grace period.
      kill_at_ = Clock::now();
    }
  }
}

int WorkerGroup::pick_root_cause(bool* all_exited) {
  // Failures first seen in the same pass exited within one poll period of
  // each other, too close to order by time. A worker killed by a signal
  // (a crash, the OOM killer, a kill -9) is then the likelier root cause:
  // its peers typically exit with an error because its sockets closed.
  int root = -1;
  for_each_new_exit(all_exited, [&](size_t i, Slot& slot) {
    if (!slot.proc->status().ok() && !slot.signalled && !stopping_) {
      const bool by_signal = slot.proc->status().signal != 0;
      if (root < 0 || (by_signal && slots_[static_cast<size_t>(root)].proc->status().signal == 0))
        root = static_cast<int>(i);
    }
  });
  if (root < 0 || slots_[static_cast<size_t>(root)].proc->status().signal != 0) return root;
  // A worker that exited with an error because a peer's connection closed
  // can be seen exiting before that peer, killed by a signal, is: a
  // process closes its sockets during its exit, before the exit is
  // reported. So before blaming an error exit, wait briefly for any worker
  // that is dying already (not by our hand) and prefer it if a signal
  // killed it. Bounded: a dying process is gone in milliseconds.
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (slot.recorded || slot.signalled || !slot.proc->dying()) continue;
    if (!slot.proc->wait_exit(kDyingGrace)) continue;
    slot.recorded = true;
    if (slot.proc->status().signal != 0) return static_cast<int>(i);
  }
  return root;
}

void WorkerGroup::check_remote(const RemoteCheck& remote_check) {
  if (stopping_ || !remote_check || Clock::now() - last_remote_ < kRemoteCheckInterval) return;
  last_remote_ = Clock::now();
  std::optional<std::string> reason;
  try {
    reason = remote_check();
  } catch (const std::exception& e) {
    reason = str_cat("lost contact with the agent store: ", e.what());
    result_.store_lost = true;
  }
  if (reason) {
    result_.outcome = AttemptOutcome::kRemoteFailed;
    result_.remote_reason = *reason;
    stop_all(SIGTERM);
  }
}

void WorkerGroup::stop_all(int sig) {
  stopping_ = true;
  kill_at_ = Clock::now() + spec_.grace_period;
  for (Slot& slot : slots_) {
    if (slot.proc->exited()) continue;
    slot.signalled = true;
    slot.was_stopped = in_stopped_state(slot.proc->pid());
    slot.proc->signal_group(sig);
  }
}

void WorkerGroup::kill_when_due() {
  if (!stopping_ || killed_ || Clock::now() < kill_at_) return;
  killed_ = true;
  for (Slot& slot : slots_)
    if (!slot.proc->exited()) slot.proc->signal_group(SIGKILL);
}

void WorkerGroup::reap() {
  // Flush what is left, including a last line without a newline, and make
  // sure nothing a worker started outlives the attempt.
  for (Slot& slot : slots_) result_.workers.push_back(retire(slot));
}

WorkerResult WorkerGroup::retire(Slot& slot) {
  flush_streams(slot);
  slot.proc->signal_group(SIGKILL);
  // Withdrawn while the zombie still holds the process group id.
  if (spec_.guard) spec_.guard->withdraw(slot.proc->pid());
  slot.proc->reap();
  slot.proc->close_stdout();
  slot.proc->close_stderr();
  WorkerResult result = record(slot);
  // A replacement starts with no record of its own.
  std::remove(slot.error_file.c_str());
  return result;
}

WorkerResult WorkerGroup::record(const Slot& slot) const {
  return {.place = slot.place,
          .pid = slot.proc->pid(),
          .exit = slot.proc->status(),
          .exit_time = slot.proc->exit_time(),
          .replacement = slot.replacement,
          .stopped_by_launcher = slot.signalled,
          .was_stopped = slot.was_stopped,
          .stderr_tail = slot.err->tail(),
          .error_record = read_error_record(slot.error_file)};
}

void WorkerGroup::make_error_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      str_cat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/collie-run-errors-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw Error(str_cat("collie-run: cannot create a folder for the workers' error files in ",
                        tmpl.substr(0, tmpl.rfind('/')), ": ", std::strerror(errno)));
  error_dir_ = tmpl;
}

void WorkerGroup::remove_error_dir() {
  if (error_dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(error_dir_, ec);
  error_dir_.clear();
}

}  // namespace collie::launcher
