// Helpers for the launcher tests: run the real collie-run with this test
// executable as the worker program, wait for text on its stderr, and check
// that processes are gone.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collie/test/support/pid_files.h"
#include "collie/test/support/subprocess.h"

namespace collie::test {

inline constexpr std::chrono::seconds kLaunchTimeout{60};

std::string collie_run_path();

// {collie-run, flags..., <this exe>, --collie-child, child, child_args...}
std::vector<std::string> launcher_argv(const std::vector<std::string>& flags,
                                       const std::string& child,
                                       const std::vector<std::string>& child_args = {});

// Starts collie-run in its own process group, with the launch variables of
// any enclosing launcher removed from its environment.
Subprocess start_launcher(const std::vector<std::string>& flags, const std::string& child,
                          const std::vector<std::string>& child_args = {},
                          std::map<std::string, std::optional<std::string>> env = {});

// start_launcher() run through `prefix` (NetnsPair/NetnsLan::exec_in(): a
// command that runs it inside a network namespace).
Subprocess start_launcher_in(const std::vector<std::string>& prefix,
                             const std::vector<std::string>& flags, const std::string& child,
                             const std::vector<std::string>& child_args = {});

// Polls the child's stderr until it contains needle; returns stderr.
std::string wait_for_stderr(Subprocess& p, const std::string& needle,
                            Timeout timeout = kLaunchTimeout);

// The port in "agent store listening on HOST:PORT".
uint16_t agent_store_port(const std::string& launcher_stderr);

// Lines of `text` that start with prefix.
std::vector<std::string> lines_with_prefix(const std::string& text, const std::string& prefix);
std::string read_text_file(const std::string& path);
// A TCP port that was free a moment ago (for peers like torchrun that need
// the port before anyone binds it).
uint16_t probe_free_port();
// (epoch, world_size) of every line of blip_train's log.txt.
std::vector<std::pair<int, int>> epochs_in_log(const std::string& path);
// The world sizes of the successive runs of epochs in `epochs` (an
// elastic job that lost a node and got it back: 3, 2, 3).
std::vector<int> world_size_runs(const std::vector<std::pair<int, int>>& epochs);
// Waits until log.txt has an epoch at `world` after its first `after`
// lines; fails the test (with the epochs seen and the output of any of
// `launchers` that exited) when one exits first or the timeout passes.
void wait_for_epoch_at(const std::string& log, int world, size_t after, Timeout timeout,
                       const std::vector<Subprocess*>& launchers);
// An environment without the launch variables of whatever runs the tests.
std::map<std::string, std::optional<std::string>> clean_launch_env();

}  // namespace collie::test
