// Runs a snippet under Debian's /usr/bin/python3 with torch 1.13 and returns
// its stdout; std::nullopt (with the reason printed) when torch cannot be
// imported here, so that the comparison tests skip rather than fail.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace collie::test {

std::optional<std::string> run_torch(const std::string& script);
// Whitespace-separated numbers, one row per line.
std::vector<std::vector<double>> parse_float_rows(const std::string& text);
std::vector<std::vector<int64_t>> parse_int_rows(const std::string& text);

}  // namespace collie::test
