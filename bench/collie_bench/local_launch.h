// collie-bench --nproc N: a tiny launcher so the bench runs without
// collie-run. It re-runs this executable N times with torchrun's variables
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/MASTER_PORT and
// TORCHELASTIC_USE_AGENT_STORE) while hosting their TcpStore itself, as
// collie-run does; it waits for all of them, and stops the rest
// as soon as one fails, so that a broken rank never leaves the others
// hanging until their collective timeout.
#pragma once

#include <string>
#include <vector>

#include "collie/base/deadline.h"

namespace collie::bench {

// A rank's exit code when it ran to the end but counted wrong results; the
// other ranks are left to finish (and rank 0 to print its table).
inline constexpr int kWrongResultsExit = 2;

// `argv` is the child's command line (without --nproc). Returns 0 when every rank exited
// 0, else the first failing rank's exit code (or 128 + signal).
int run_local_ranks(int nproc, std::vector<std::string> argv);

}  // namespace collie::bench
