#include "collie/runtime/launcher/agent.h"

#include <exception>
#include <optional>

#include "collie/base/error_record.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/launcher/culprit.h"
#include "collie/runtime/launcher/failure_events.h"
#include "collie/runtime/launcher/failure_summary.h"
#include "collie/runtime/launcher/log_hints.h"

namespace collie::launcher {
namespace {

class Agent {
 public:
  Agent(Membership& rdzv, const RunWorkers& run_workers, const AgentOptions& options,
        const Say& say)
      : rdzv_(rdzv),
        run_workers_(run_workers),
        options_(options),
        say_(say),
        summary_{.hostname = options.hostname,
                 .max_restarts = options.max_restarts,
                 .run_id = options.run_id} {}

  int run();

 private:
  // Runs the round's workers and settles the round with the other nodes.
  // Returns an exit status when this launcher stops whatever the others do.
  std::optional<int> run_round(const Round& round, bool& membership_change,
                               std::optional<std::string>& failure);
  // Prints why the round failed (the summary, or that it failed elsewhere)
  // and returns the reason for the messages that follow.
  std::string say_round_failed(const Round& round, const std::optional<std::string>& failure);
  // The round ended for a termination signal (the other nodes are told, and
  // 128 + the signal) or because the store is gone (1); nullopt otherwise.
  std::optional<int> stop_status(const Round& round);
  // The exit status once every worker succeeded: 0, or 1 (saying why) when
  // some of their output could not be written to the log files.
  int success_status();
  // Why next_round() threw, said, and the exit status for it.
  int join_error_status(const std::exception_ptr& error);
  // The exit status when the rendezvous failed during a round (`error` is a
  // MembershipInterrupted or another Error): what went wrong, and the
  // failure summary if this node's workers had failed.
  int rendezvous_error_status(const std::exception_ptr& error);
  void close(const std::string& outcome);
  // Like torchrun's agent: the root cause's error record, copied into
  // collie-run's own TORCHELASTIC_ERROR_FILE when it was given one (a
  // record of its own when the root cause left none).
  void record_job_failure(const std::string& reason);
  void say_line(const std::string& line) {
    if (!line.empty()) say_(line + "\n");
  }

  Membership& rdzv_;
  const RunWorkers& run_workers_;
  const AgentOptions& options_;
  const Say& say_;
  SummaryContext summary_;
  AttemptResult result_;  // of the current round
};

int Agent::run() {
  const RoundWords words = rdzv_.words();
  int failures = 0;  // rounds ended by a failure: they use up --max-restarts
  for (;;) {
    Round round;
    try {
      round = rdzv_.next_round();
    } catch (const Error&) {
      return join_error_status(std::current_exception());
    }
    say_line(rdzv_.round_line());
    round.restarts_used = failures;
    bool membership_change = false;
    std::optional<std::string> failure;
    try {
      if (std::optional<int> rc = run_round(round, membership_change, failure)) return *rc;
    } catch (const Error&) {
      // The store went away, a barrier timed out or Ctrl-C came: the job
      // cannot go on, and this node's workers are already stopped.
      return rendezvous_error_status(std::current_exception());
    }
    // --on-failure replace: every replacement used one of the restarts.
    failures += result_.replacements;
    if (result_.outcome == AttemptOutcome::kSucceeded && !failure) {
      close("succeeded");
      say_(survived_line(result_));
      return success_status();
    }
    if (membership_change && result_.outcome == AttemptOutcome::kRemoteFailed) {
      say_line(str_cat("collie-run: ", words.round, " ", round.number, " ends: ",
                       result_.remote_reason, "; stopping the workers to rendezvous again"));
      continue;
    }
    const std::string reason = say_round_failed(round, failure);
    if (result_.replacements > 0 && failures >= options_.max_restarts) {
      say_line(str_cat("collie-run: job failed: ", reason, ", with no restart left after ",
                       result_.replacements, " replacement", result_.replacements == 1 ? "" : "s",
                       " (--on-failure replace, --max-restarts ", options_.max_restarts, ")"));
      record_job_failure(reason);
      close(str_cat("failed: ", reason));
      return 1;
    }
    if (failures >= options_.max_restarts) {
      say_line(str_cat("collie-run: job failed after ", failures + 1, " ", words.failed_round,
                       failures == 0 ? "" : "s", " (--max-restarts ", options_.max_restarts,
                       "): ", reason));
      record_job_failure(reason);
      close(str_cat("failed: ", reason));
      return 1;
    }
    ++failures;
    say_line(str_cat("collie-run: ", words.round, " ", round.number, " failed (", reason, "); ",
                     words.again, ", restart ", failures, " of ", options_.max_restarts));
  }
}

std::optional<int> Agent::run_round(const Round& round, bool& membership_change,
                                    std::optional<std::string>& failure) {
  summary_.node_rank = round.node_rank;
  summary_.attempt = round.number;
  result_ = AttemptResult{};
  result_ = run_workers_(round, [&]() -> std::optional<std::string> {
    std::optional<RoundEnd> end = rdzv_.check();
    if (!end) return std::nullopt;
    membership_change = membership_change || end->membership_change;
    return end->reason;
  });
  blame_named_culprit(result_);
  summary_.hints = collected_hints();
  if (std::optional<int> rc = stop_status(round)) return rc;
  if (result_.outcome == AttemptOutcome::kFailed) {
    if (std::optional<std::string> why = rdzv_.membership_change()) {
      membership_change = true;
      result_.outcome = AttemptOutcome::kRemoteFailed;
      result_.remote_reason = *why;
    } else {
      rdzv_.report_failure(describe_failure(result_, round.node_rank, options_.hostname));
    }
  }
  failure = rdzv_.finish(result_.outcome == AttemptOutcome::kSucceeded);
  return std::nullopt;
}

std::string Agent::say_round_failed(const Round& round, const std::optional<std::string>& failure) {
  // The failure the round recorded first wins: every node of a static job
  // then names the same one.
  if (result_.outcome == AttemptOutcome::kRemoteFailed && failure) result_.remote_reason = *failure;
  std::string reason;
  if (failure)
    reason = *failure;
  else if (result_.outcome == AttemptOutcome::kRemoteFailed)
    reason = result_.remote_reason;
  else if (result_.outcome == AttemptOutcome::kFailed)
    reason = describe_failure(result_, round.node_rank, options_.hostname);
  else
    reason = "another node failed";
  if (result_.outcome != AttemptOutcome::kSucceeded)
    say_(format_failure_summary(result_, summary_));
  else
    say_line(rdzv_.failed_elsewhere_line(reason));
  return reason;
}

std::optional<int> Agent::stop_status(const Round& round) {
  if (result_.outcome == AttemptOutcome::kInterrupted) {
    // This node leaves; the others are told why.
    say_(format_failure_summary(result_, summary_));
    try {
      rdzv_.report_failure(describe_failure(result_, round.node_rank, options_.hostname));
    } catch (const Error&) {
    }
    return 128 + result_.signal;
  }
  if (result_.store_lost) {
    // Without the store no round can end or begin: give up at once rather
    // than retry the connection for the whole rendezvous timeout.
    say_(format_failure_summary(result_, summary_));
    say_line(rdzv_.store_lost_line());
    return 1;
  }
  return std::nullopt;
}

int Agent::success_status() {
  if (result_.log_errors.empty()) return 0;
  // The workers did their job, but what they wrote is not all where the
  // user will look for it: that must not pass as a success.
  say_(str_cat("collie-run: the workers succeeded, but ", result_.log_errors.size(),
               " of their log files could not be written (", result_.log_errors.front(),
               "); the lines that did not fit went to the console. Exit status 1.\n"));
  return 1;
}

int Agent::join_error_status(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const JobOver& e) {
    say_(str_cat(e.what(), "\n"));
    return e.succeeded() ? 0 : 1;
  } catch (const MembershipInterrupted& e) {
    say_(str_cat(e.what(), "\n"));
    return 128 + e.signal();
  } catch (const InvalidArgument& e) {
    say_(str_cat(e.what(), "\n"));  // launchers started with inconsistent flags
    return 2;
  } catch (const Error& e) {
    say_(str_cat(e.what(), "\n"));
    return 1;
  }
}

int Agent::rendezvous_error_status(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const MembershipInterrupted& e) {
    say_(str_cat(e.what(), "\n"));
    return 128 + e.signal();
  } catch (const Error& e) {
    if (!result_.workers.empty() && result_.outcome != AttemptOutcome::kSucceeded)
      say_(format_failure_summary(result_, summary_));
    say_(str_cat(e.what(), "\n"));
    return 1;
  }
}

void Agent::record_job_failure(const std::string& reason) {
  ErrorRecord record;
  const int root = result_.first_failure;
  if (result_.outcome == AttemptOutcome::kFailed && root >= 0 &&
      root < static_cast<int>(result_.workers.size()) &&
      result_.workers[static_cast<size_t>(root)].error_record)
    record = *result_.workers[static_cast<size_t>(root)].error_record;
  if (record.message.empty()) {
    record = ErrorRecord{};
    record.error_type = "ChildFailedError";
    record.message = str_cat("collie-run: job failed: ", reason);
    if (result_.culprit) {
      record.cause = FailureCause::kTimeoutUnresponsive;
      record.culprits = {{.rank = result_.culprit->rank,
                          .global_rank = result_.culprit->rank,
                          .address = result_.culprit->address}};
    }
  }
  record_failure(std::move(record));
}

void Agent::close(const std::string& outcome) {
  try {
    rdzv_.close(outcome);
  } catch (const Error&) {
    // The job is over either way.
  }
}

}  // namespace

int run_agent(Membership& membership, const RunWorkers& run_workers, const AgentOptions& options,
              const Say& say) {
  return Agent(membership, run_workers, options, say).run();
}

}  // namespace collie::launcher
