// Process liveness checks for tests that must prove no process survives:
// workers write their pid to dir/<rank>, the test reads them back and waits
// (with a deadline) until none of them is alive.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "collie/base/deadline.h"

namespace collie::test {

// A process that exists and is not a zombie.
bool process_alive(pid_t pid);
// Waits (with a deadline) until none of the pids is alive; returns the live ones.
std::vector<pid_t> wait_until_dead(const std::vector<pid_t>& pids, Timeout timeout);
// Writes this process's pid to dir/<rank> atomically (temporary file + rename).
void write_pid_file(const std::string& dir, int rank);
// Waits until dir holds `count` pid files (0..count-1); returns the pids.
// Throws TimeoutError naming how many appeared.
std::vector<pid_t> wait_for_pid_files(const std::string& dir, int count,
                                      Timeout timeout = std::chrono::seconds(60));

}  // namespace collie::test
