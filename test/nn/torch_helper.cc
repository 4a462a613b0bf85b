#include "collie/test/nn/torch_helper.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "collie/test/support/skip.h"
#include "collie/test/support/subprocess.h"
#include "collie/test/support/temp_dir.h"

namespace collie::test {

constexpr const char* kPython = "/usr/bin/python3";

std::string run_torch(const std::string& script) {
  require_or_skip(torch_missing().empty(), torch_missing());
  TempDir dir;
  const std::string path = dir.file("script.py");
  std::ofstream(path) << script;
  auto p = Subprocess::spawn({kPython, path});
  auto status = p.wait(std::chrono::seconds(120));
  INFO("python stderr: " << p.err());
  REQUIRE(status.ok());
  return p.out();
}

std::vector<std::vector<double>> parse_float_rows(const std::string& text) {
  std::vector<std::vector<double>> rows;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::vector<double> row;
    double v;
    while (in >> v) row.push_back(v);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<std::vector<int64_t>> parse_int_rows(const std::string& text) {
  std::vector<std::vector<int64_t>> rows;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::vector<int64_t> row;
    int64_t v;
    while (in >> v) row.push_back(v);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace collie::test
