// Log lines worth repeating in the failure summary. The agent store (a
// thread of collie-run) logs why it refused a worker once, among what may be
// dozens of "Connection reset by peer" lines from the workers; a log tap
// (set_log_tap) keeps the first warning that names --store-compat, and the
// summary ends with it. When that warning refuses a torch client, the
// launcher finds the worker holding the connection and says at once which
// rank it is and what to do (socket_owner.h); that line comes first.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "collie/base/logging.h"

namespace collie::launcher {

// The tap: pass to set_log_tap(). Thread-safe.
void collect_hint(LogLevel level, std::string_view line);

// What was collected so far, without the log prefix.
std::vector<std::string> collected_hints();

}  // namespace collie::launcher
