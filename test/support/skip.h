// Honest skips. A test that cannot run here says why and exits 77, which
// ctest (SKIP_RETURN_CODE 77, see test/CMakeLists.txt) reports as Skipped,
// never as Passed. ctest runs each Catch2 case in its own process, so exiting
// from inside a case skips that case only.
//
// Under CI=true the test command installs every prerequisite (torch, mpirun,
// network namespaces, nftables, tmpfs as root), so a missing one is a
// failure there: skip_test() then exits 1 with the same reason. Only a
// missing GPU may skip in CI (skip_gpu_test()).
//
// Call these before the test starts processes or makes files: they exit
// without unwinding, so destructors (Subprocess, TempDir) do not run.
//
//   require_or_skip(torch_missing().empty(), torch_missing());
#pragma once

#include <string>

namespace collie::test {

// True when the environment variable CI is exactly "true".
bool running_in_ci();

// Prints "SKIP: <reason>" and exits 77; under CI=true prints "FAIL: <reason>
// (CI=true: ...)" and exits 1.
[[noreturn]] void skip_test(const std::string& reason);

// skip_test(reason) unless `condition` holds.
void require_or_skip(bool condition, const std::string& reason);

// Prints "SKIP: <reason>" and exits 77, also under CI=true: for tests that
// need a GPU, which CI machines need not have.
[[noreturn]] void skip_gpu_test(const std::string& reason);

// Empty when /usr/bin/python3 has the torch package, else why not. Only the
// package is looked up (importing torch takes seconds); a torch that is
// installed but broken fails the tests that use it, visibly.
const std::string& torch_missing();

}  // namespace collie::test
