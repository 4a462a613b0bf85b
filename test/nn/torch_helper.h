// Runs a snippet under Debian's /usr/bin/python3 with torch 1.13 and returns
// its stdout. When /usr/bin/python3 has no torch package the test is skipped
// (exit 77, test/support/skip.h), and fails under CI=true, where torch is
// installed; a torch that is installed but broken fails the test.
#pragma once

#include <string>
#include <vector>

namespace collie::test {

std::string run_torch(const std::string& script);
// Whitespace-separated numbers, one row per line.
std::vector<std::vector<double>> parse_float_rows(const std::string& text);
std::vector<std::vector<int64_t>> parse_int_rows(const std::string& text);

}  // namespace collie::test
