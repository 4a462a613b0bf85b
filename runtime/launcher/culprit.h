// The rank the workers' error records blame. When one rank stops responding
// (SIGSTOP, a hung GPU, a dead link), it does not exit: its peers do, each
// with a timeout whose probe found it silent. The first worker to exit is
// then only the first to notice; the root cause is the rank they name.
// collie-run reads the error records (base/error_record.h) of the workers
// that failed, never the text of their errors: a record whose cause is
// timeout_unresponsive names its culprits as data (global rank, address).
// When one rank is named, collie-run blames it in the failure summary and
// in what it reports to the other nodes.
#pragma once

#include <optional>
#include <vector>

#include "collie/runtime/launcher/worker_group.h"

namespace collie::launcher {

// The rank the most failed workers' records name as unresponsive (not
// counting a worker naming itself), when one is named at all; ties go to
// the lowest rank. Records of any other cause name no culprit here: a peer
// that closed its connection exited, and its own exit is seen directly.
std::optional<NamedCulprit> find_named_culprit(const std::vector<WorkerResult>& workers);

// Makes a named culprit the root cause of a failed attempt: when it is a
// worker of this node, first_failure points at it; either way
// result.culprit holds it for the summary. Nothing changes when no rank is
// named or the named one is the root cause already.
void blame_named_culprit(AttemptResult& result);

}  // namespace collie::launcher
