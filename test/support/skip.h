// Tests that cannot run here. A test whose prerequisite is missing (torch
// for /usr/bin/python3, a program that was not built, a resource limit)
// says why and exits 77, which ctest reports as Skipped (SKIP_RETURN_CODE
// 77), never as Passed. Under CI=true the test command installs every
// prerequisite, so a missing one fails the test instead.
//
//   if (!test::torch_missing().empty()) test::skip(test::torch_missing());
#pragma once

#include <string>

namespace collie::test {

// True when the environment says CI=true.
bool in_ci();

// Prints "SKIP: <reason>" and exits 77 (ctest: Skipped); under CI=true
// fails the running test case instead. Call it before starting children:
// it ends this process at once.
[[noreturn]] void skip(const std::string& reason);

// Empty when /usr/bin/python3 has the torch package, else why not. Only the
// package is looked up (importing torch takes seconds); a torch that is
// installed but broken fails the tests that use it, visibly.
const std::string& torch_missing();

}  // namespace collie::test
