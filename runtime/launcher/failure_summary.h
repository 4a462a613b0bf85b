// The failure summary collie-run prints when an attempt fails: one table row
// per worker that did not exit 0 (global and local rank, node, pid, exit code
// or signal, time), the root cause marked, and the last lines of stderr of
// every worker that failed on its own (not the ones the launcher stopped).
#pragma once

#include <string>
#include <vector>

#include "collie/runtime/launcher/worker_group.h"

namespace collie::launcher {

struct SummaryContext {
  int node_rank = 0;
  std::string hostname;
  int attempt = 0;
  int max_restarts = 0;
  std::string run_id;
  // Lines worth repeating at the end of the summary, where a user looks
  // first (e.g. the agent store refusing workers without the job secret).
  std::vector<std::string> hints;
};

std::string format_failure_summary(const AttemptResult& result, const SummaryContext& context);

// "rank 2 (local rank 2, pid 42) stopped responding: ranks 0,1 named it in
// their error records"; result.culprit must be set.
std::string describe_culprit(const AttemptResult& result);

// What this node reports to the others: "rank 3 (local rank 1 on node 1,
// host h, pid 42) ended with exit code 3", the culprit, or the signal the
// launcher got.
std::string describe_failure(const AttemptResult& result, int node_rank, const std::string& host);

// "2026-12-02 12:50:01.234 UTC"
std::string format_utc(std::chrono::system_clock::time_point t);

}  // namespace collie::launcher
