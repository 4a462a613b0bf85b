// Finding the program collie-run starts. The workers themselves are
// ChildProcesses (base/child_process.h): their own process group,
// PR_SET_PDEATHSIG(SIGKILL), pipes for stdout and stderr.
#pragma once

#include <string>

namespace collie::launcher {

// Finds `program` like a shell would (a path with '/' as is, else on PATH)
// and checks it can be executed; throws InvalidArgument naming it otherwise.
std::string resolve_program(const std::string& program);

}  // namespace collie::launcher
