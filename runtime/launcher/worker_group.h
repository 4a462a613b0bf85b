// WorkerGroup: one attempt of this node's workers, from spawn to the last
// exit. It forwards their output line by line, and supervises them: when a
// worker fails (non-zero exit or a signal), when another node reports a
// failure, or when the launcher itself gets SIGINT/SIGTERM, every remaining
// worker is signalled (SIGTERM, or the launcher's own signal), given the grace
// period, then SIGKILLed. run() returns only once every worker is reaped.
// With --on-failure shrink or replace a worker's failure does not stop the
// others: it is an event, printed, and in replace mode a new process takes
// the dead one's place (worker_survival.cc).
// worker_group.cc has the processes, worker_output.cc their output.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collie/base/child_process.h"
#include "collie/base/error_record.h"
#include "collie/runtime/launcher/on_failure.h"
#include "collie/runtime/launcher/worker_env.h"
#include "collie/runtime/launcher/worker_stream.h"

namespace collie::launcher {

class OrphanGuard;
class SignalRelay;

struct GroupSpec {
  std::string program_path;               // resolved executable
  std::vector<std::string> program_argv;  // argv[0] as the user wrote it, then the arguments
  bool use_env = true;                    // false: pass --local_rank=N (legacy launch)

  int node_rank = 0;
  int nnodes = 1;
  int nproc = 1;
  int rank_base = 0;  // global rank of local rank 0
  int world_size = 1;
  AttemptEnv env;

  std::string attempt_log_dir;  // LOG_DIR/RUN_ID/attempt_N, or empty
  int tee = 0;                  // console mask when logging to files
  std::set<int> local_ranks_filter;
  std::string line_prefix_template = "[rank${rank}]: ";
  std::chrono::milliseconds grace_period{5000};
  // What a worker's failure does (on_failure.h); replacements use the
  // restarts --max-restarts (env.max_restarts) has left after
  // restarts_used.
  OnFailure on_failure = OnFailure::kStop;
  int restarts_used = 0;
  // Where workers announce their process groups; nullptr: no guard.
  OrphanGuard* guard = nullptr;
};

// A rank the failed workers' error records name as unresponsive
// (culprit.h).
struct NamedCulprit {
  int rank = -1;
  std::string address;        // as the records give it
  std::vector<int> named_by;  // the failed workers whose records name it, ascending
  std::string message;        // one such record's message, for the summary
};

struct WorkerResult {
  WorkerPlace place;
  int pid = -1;
  ExitStatus exit;
  std::chrono::system_clock::time_point exit_time;
  bool replacement = false;          // started with COLLIE_REPLACEMENT=1
  bool stopped_by_launcher = false;  // signalled by us before it exited
  bool was_stopped = false;          // in the stopped state (SIGSTOP) when we signalled it
  std::deque<std::string> stderr_tail;
  // What the worker wrote to its TORCHELASTIC_ERROR_FILE (base/error_record.h).
  std::optional<ErrorRecord> error_record;
};

enum class AttemptOutcome {
  kSucceeded,     // every worker exited 0
  kFailed,        // a worker of this node failed
  kRemoteFailed,  // another node reported a failure (or its store went away)
  kInterrupted,   // the launcher got a termination signal
};

struct AttemptResult {
  AttemptOutcome outcome = AttemptOutcome::kSucceeded;
  int first_failure = -1;     // index into workers of the root cause
  int signal = 0;             // kInterrupted: the signal
  std::string remote_reason;  // kRemoteFailed: what the other node said
  bool store_lost = false;    // kRemoteFailed because the agent store went away
  std::chrono::system_clock::time_point start_time;
  std::vector<WorkerResult> workers;
  // kFailed: the rank the workers' error records name, when that is not
  // the first to fail (blame_named_culprit()).
  std::optional<NamedCulprit> culprit;
  // kFailed: what the workers' flight recorders said when the first one
  // failed (fr_status.h, analyse_hang): which ranks never entered the call
  // the others wait in. Empty when nothing waits or no worker answered.
  std::vector<std::string> hang_analysis;
  // Log files that could not be written (each already reported on stderr).
  std::vector<std::string> log_errors;
  // --on-failure shrink or replace: the workers whose failure the others
  // survived (shrink: they are in `workers` too; replace: the processes
  // that were replaced), in the order they failed, and how many
  // replacements were started (each used one of --max-restarts).
  OnFailure on_failure = OnFailure::kStop;
  std::vector<WorkerResult> losses;
  int replacements = 0;
};

// Polled every ~200 ms while workers run; returns a reason when another node
// has failed. May throw (the store is gone), which counts as a failure too.
using RemoteCheck = std::function<std::optional<std::string>()>;

class WorkerGroup {
 public:
  explicit WorkerGroup(GroupSpec spec) : spec_(std::move(spec)) {}
  // Starts the workers, supervises them, and returns once every one is
  // reaped. Once per group.
  AttemptResult run(SignalRelay& relay, const RemoteCheck& remote_check);

  // "[rank${rank}]: " with the worker's values substituted.
  static std::string expand_prefix(const std::string& tmpl, const WorkerPlace& place,
                                   const std::string& role);

 private:
  using Clock = std::chrono::steady_clock;

  // One worker with its two output streams.
  struct Slot {
    WorkerPlace place;
    std::unique_ptr<WorkerStream> out, err;
    std::unique_ptr<ChildProcess> proc;
    std::string error_file;    // its TORCHELASTIC_ERROR_FILE
    bool replacement = false;  // started in a dead worker's place
    bool signalled = false;
    bool was_stopped = false;
    bool recorded = false;
    bool log_error_reported[2] = {false, false};  // stdout, stderr
  };

  // Start: every worker's streams (worker_output.cc), then every process,
  // rank by rank.
  void start();
  // append: a replacement's lines go on in its predecessor's log files.
  void open_streams(Slot& slot, bool append = false);
  void spawn(Slot& slot);
  // Pump streams: waits at most one tick (less when the SIGKILL is due) for
  // output or a signal, and forwards what the ready pipes have.
  void pump_streams(int relay_fd);
  // Says at once that a log file cannot be written, and keeps it for the
  // exit status.
  void report_log_error(Slot& slot, bool is_err);
  // The launcher's own termination signals, forwarded to the workers.
  void take_signals(SignalRelay& relay);
  // Pick the root cause: records the exits seen in this pass and returns
  // the index of the worker whose failure ends the attempt, or -1.
  // *all_exited says whether every worker has exited.
  int pick_root_cause(bool* all_exited);
  // Ends a worker's slot: its last output flushed, whatever it started
  // killed, the process reaped and its streams closed; returns its record.
  WorkerResult retire(Slot& slot);
  // Polls every worker: clears *all_exited while one still runs, and calls
  // on_exit(index, slot) once for each exit not recorded before (then
  // recorded).
  template <typename Fn>
  void for_each_new_exit(bool* all_exited, Fn&& on_exit) {
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (!slot.proc->poll_exit()) {
        *all_exited = false;
        continue;
      }
      if (slot.recorded) continue;
      slot.recorded = true;
      on_exit(i, slot);
    }
  }
  // --on-failure shrink/replace (worker_survival.cc): records the exits
  // seen in this pass, says each as an event, and replaces a failed worker
  // while restarts are left; one with none left stops the group as a root
  // cause does in stop mode. *all_exited as for pick_root_cause.
  void survive_exits(bool* all_exited);
  void replace_worker(Slot& slot);
  // Once every worker is reaped: the attempt succeeded when at least one
  // worker exited 0 (shrink) or every worker's last process did (replace).
  void settle_survival();
  // One event line on collie-run's stderr, timed from the last failure.
  void say_event(std::chrono::system_clock::time_point at, const std::string& what) const;
  // Another node's failure (or the store gone), every ~200 ms.
  void check_remote(const RemoteCheck& remote_check);
  // Signals every worker still running, then SIGKILL after the grace period.
  void stop_all(int sig);
  void kill_when_due();
  // Reap: flushes what is left in the pipes, kills what each worker started
  // and reaps it, into result_.workers.
  void reap();
  void flush_streams(Slot& slot);
  // What a reaped worker leaves in the result, its error record included.
  WorkerResult record(const Slot& slot) const;
  // The folder of the workers' flight-recorder states (COLLIE_FR_STATE_DIR:
  // fr_state_dir(), found by `collie-run --status PID`) and its "workers"
  // list, rewritten whenever a worker starts.
  void make_state_dir();
  void remove_state_dir();
  void write_worker_list();
  // Asks the workers for their states and keeps the analysis (kFailed).
  void analyse_failure();
  std::string state_dir_;
  // The workers' error files (TORCHELASTIC_ERROR_FILE): one per worker in
  // a folder of the attempt's own, removed with them once the attempt is
  // over.
  void make_error_dir();
  void remove_error_dir();
  std::string error_dir_;

  GroupSpec spec_;
  std::vector<Slot> slots_;
  AttemptResult result_;
  bool stopping_ = false;  // every worker was signalled
  bool killed_ = false;    // and then SIGKILLed
  Clock::time_point kill_at_{};
  Clock::time_point last_remote_{};
  // The last failure seen (its time and "rank 1 failed"), which event
  // lines are timed from; unset before the first.
  std::optional<std::pair<std::chrono::system_clock::time_point, std::string>> last_failure_;
};

}  // namespace collie::launcher
