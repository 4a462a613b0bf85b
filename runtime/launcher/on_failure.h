// What collie-run does when one of its workers fails (--on-failure).
//
//   stop     torchrun's behaviour, the default: the failed worker is the root
//            cause, every other worker is stopped, and the whole group is
//            restarted (--max-restarts) or the job fails.
//   shrink   the other workers go on without it (they call
//            collie::shrink_group and carry on in a smaller group); the
//            dead worker is not restarted. The job succeeds when at least
//            one worker finishes with exit 0.
//   replace  a new process takes the dead worker's place, with the same
//            environment plus COLLIE_REPLACEMENT=1 (its init_process_group
//            joins the running group); each replacement uses one of
//            --max-restarts, and a failure with none left ends the job as
//            `stop` does.
//
// torchrun has no such mode: the other workers of a torchrun job are always
// stopped.
#pragma once

#include <optional>
#include <string>

namespace collie::launcher {

enum class OnFailure { kStop, kShrink, kReplace };

// "stop", "shrink", "replace".
const char* on_failure_name(OnFailure mode);

// The mode named by `text`, or nullopt for anything else.
std::optional<OnFailure> parse_on_failure(const std::string& text);

// The variable that tells a replacement worker that it joins a running
// group rather than starting one (the runtime's side of the contract).
inline constexpr const char* kReplacementVariable = "COLLIE_REPLACEMENT";

}  // namespace collie::launcher
