// What the workers' flight recorders say, read by collie-run: each worker
// writes its state (runtime/process_group/flight_recorder.h, state_json())
// to <dir>/rank<N>.json when it dumps (on SIGUSR2, on a failure, on demand).
//
//  * A live query (`collie-run --status PID`): the launcher PID keeps
//    <dir>/workers ("rank pid" lines); the query sends every worker SIGUSR2,
//    waits for their fresh states and prints, per rank and group, the last
//    completed call and the pending ones with how long each has waited.
//  * A hang's analysis: when a job fails, collie-run asks the workers still
//    running for their states and prints, per group, which ranks never
//    entered the oldest call others wait in, and which wait in it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace collie::launcher {

// The folder collie-run PID keeps its workers' states in (under TMPDIR).
std::string fr_state_dir(pid_t launcher_pid);

// A worker's rank and pid, as <dir>/workers lists them.
struct WorkerPid {
  int rank = -1;
  pid_t pid = -1;
};
void write_worker_pids(const std::string& dir, const std::vector<WorkerPid>& workers);
std::vector<WorkerPid> read_worker_pids(const std::string& dir);

// Sends SIGUSR2 to every worker that is alive and waits up to `wait` for
// each one's state written after the request. Returns the ranks that
// answered (a worker that had already exited counts when its last state is
// there).
std::vector<int> request_states(const std::string& dir, const std::vector<WorkerPid>& workers,
                                std::chrono::milliseconds wait);

// One line per rank and group: "rank 2, group 0 (default_pg): last completed
// all_reduce #2 (0.06 ms); pending all_reduce #3, started 12.3 s ago".
std::vector<std::string> describe_states(const std::string& dir, const std::vector<int>& ranks);

// Per group with a pending call: "group 0 (default_pg): rank 2 never entered
// all_reduce #3 (its last call: all_reduce #2); ranks 0,1,3 wait in it (up
// to 2.1 s)". Empty when no rank waits in anything.
std::vector<std::string> analyse_hang(const std::string& dir, const std::vector<int>& ranks);

// The ranks `analyse_hang` finds missing from a call others wait in (all
// groups), ascending.
std::vector<int> ranks_missing_from_calls(const std::string& dir, const std::vector<int>& ranks);

// `collie-run --status PID`: the query above, printed to stdout; the exit
// code (1 when PID keeps no states).
int run_status_query(pid_t launcher_pid);

}  // namespace collie::launcher
