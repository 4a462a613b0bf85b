// The rank the workers' own errors blame. When one rank stops responding
// (SIGSTOP, a hung GPU, a dead link), it does not exit: its peers do, each
// with a timeout that names it ("... rank 2 (10.0.0.3:4711) did not within
// 1.00s: it is stopped, hung or unreachable ..."). The first worker to exit
// is then only the first to notice; the root cause is the rank they name.
// collie-run reads the stderr tails of the workers that failed on their own
// for collie's wording of that verdict and, when one rank is named, blames
// it in the failure summary and in what it reports to the other nodes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/launcher/worker_group.h"

namespace collie::launcher {

// Ranks that one error line names as unresponsive: "rank 2 (addr) did not
// within ...", "ranks 2 (addr), 5 (addr) did not ...", "rank 2 (addr) did
// not answer a timeout probe ..." on a line that says "stopped, hung or
// unreachable". Empty for any other line.
std::vector<int> ranks_named_unresponsive(std::string_view line);

// The rank named by the most failed workers (not counting a worker naming
// itself), when one is named at all; ties go to the lowest rank.
std::optional<NamedCulprit> find_named_culprit(const std::vector<WorkerResult>& workers);

// Makes a named culprit the root cause of a failed attempt: when it is a
// worker of this node, first_failure points at it; either way
// result.culprit holds it for the summary. Nothing changes when no rank is
// named or the named one is the root cause already.
void blame_named_culprit(AttemptResult& result);

}  // namespace collie::launcher
