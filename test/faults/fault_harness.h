// Helpers for the fault-injection tests: start ranks as child processes of
// this test executable (or under the real collie-run), find out when each
// survivor noticed the fault, check that no process is left, and record the
// measured detection latencies for docs/reliability.md.
//
// Latency: every child prints the moment it caught its error as
// "error_ns=<CLOCK_MONOTONIC ns>" (steady_clock is CLOCK_MONOTONIC on Linux,
// one clock for every process on the machine), so the parent subtracts the
// moment it injected the fault and gets the detection latency exactly,
// without any child having to know when the fault happened.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collie/test/support/child.h"
#include "collie/test/support/netns_pair.h"  // shell()
#include "collie/test/support/pid_files.h"
#include "collie/test/support/subprocess.h"

namespace collie::test {

using EnvOverrides = std::map<std::string, std::optional<std::string>>;

// steady_clock now, in nanoseconds since its epoch.
int64_t monotonic_ns();

// Prints "[faults] <name>: <text>" and appends the same line to the file
// named by $COLLIE_FAULTS_RECORD when set (how the doc's table is filled).
void record(const std::string& name, const std::string& text);

// An environment with the launch variables of whatever runs the tests
// removed, plus `extra`.
EnvOverrides clean_env(EnvOverrides extra = {});

// Spawns one child of this executable per rank: child_argv(child, args(rank)).
std::vector<Subprocess> spawn_ranks(int world, const std::string& child,
                                    const std::function<std::vector<std::string>(int rank)>& args,
                                    const EnvOverrides& env = {});

// `world` loop_rank children (fault_children.cc) that rendezvous through the
// file `rdzv` and run `op` in a loop until killed; each call's limit is
// `call_timeout_ms` (0: the group's), the group's 60 s.
std::vector<Subprocess> spawn_loop_ranks(int world, const std::string& rdzv, const std::string& op,
                                         int call_timeout_ms = 0, const EnvOverrides& env = {});

// Waits until every listed process has printed `needle` on stdout.
void wait_all_output(std::vector<Subprocess>& procs, const std::vector<int>& which,
                     const std::string& needle, Timeout timeout);

// The integer after "<key>=" in text, or nullopt.
std::optional<int64_t> find_int(const std::string& text, const std::string& key);

// Milliseconds between the fault (fault_ns) and a child's "error_ns=".
// Fails the test when the child printed none.
double detection_ms(const std::string& child_out, int64_t fault_ns);

// {build/bin/collie-run, flags..., this exe, --collie-child, child, args...}
std::vector<std::string> collie_run_argv(const std::vector<std::string>& flags,
                                         const std::string& child,
                                         const std::vector<std::string>& args = {});
// The port in collie-run's "agent store listening on HOST:PORT".
uint16_t agent_store_port(const std::string& launcher_stderr);

// In a child: prints "error_ns=<now> type=<collie type> msg=<what>" on one
// line of stdout and flushes.
void print_caught(const std::exception& e);

// In a child: one all_reduce of `n` floats on the default group (rank r's
// element i of call k is small integers, so sums are exact), every 97th
// element checked against the sum of every rank's (Error naming the call,
// element and ranks when wrong).
void checked_all_reduce(int64_t k, size_t n, Timeout timeout);

}  // namespace collie::test
