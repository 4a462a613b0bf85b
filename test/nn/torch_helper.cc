#include "test/nn/torch_helper.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "test/support/skip.h"
#include "test/support/subprocess.h"
#include "test/support/temp_dir.h"

namespace collie::test {

namespace {

constexpr const char* kPython = "/usr/bin/python3";

// Skips (or fails under CI=true) when torch cannot be imported; the reason
// carries python's last line of stderr ("ModuleNotFoundError: ...").
void require_torch() {
  ExitStatus status;
  std::string err;
  {  // the Subprocess is gone (its output files removed) before a skip exits
    auto p = Subprocess::spawn({kPython, "-c", "import torch"});
    status = p.wait(std::chrono::seconds(120));
    err = p.err();
  }
  while (!err.empty() && err.back() == '\n') err.pop_back();
  err = err.substr(err.find_last_of('\n') + 1);  // npos + 1 == 0: the whole text
  require_or_skip(status.ok(), std::string(kPython) + " cannot import torch (" + status.describe() +
                                   ": " + err + ")");
}

}  // namespace

std::string run_torch(const std::string& script) {
  require_torch();
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
