#include "collie/test/support/skip.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "collie/test/support/subprocess.h"

namespace collie::test {

namespace {

// Both streams: ctest --output-on-failure shows either, and Catch2 writes its
// own report to stdout.
[[noreturn]] void report_and_exit(const std::string& line, int code) {
  std::fflush(stdout);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(nullptr);
  std::exit(code);
}

}  // namespace

bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::strcmp(ci, "true") == 0;
}

void skip_test(const std::string& reason) {
  if (running_in_ci())
    report_and_exit("FAIL: " + reason +
                        " (CI=true: the test command installs this prerequisite, so it may "
                        "not skip)",
                    1);
  report_and_exit("SKIP: " + reason, 77);
}

void require_or_skip(bool condition, const std::string& reason) {
  if (!condition) skip_test(reason);
}

void skip_gpu_test(const std::string& reason) { report_and_exit("SKIP: " + reason, 77); }

const std::string& torch_missing() {
  static const std::string reason = [] {
    constexpr const char* kPython = "/usr/bin/python3";
    if (::access(kPython, X_OK) != 0) return std::string("no /usr/bin/python3");
    auto p = Subprocess::spawn(
        {kPython, "-c",
         "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"});
    const ExitStatus status = p.wait(std::chrono::seconds(60));
    return status.ok() ? std::string()
                       : "/usr/bin/python3 has no torch package (Debian: python3-torch)" + p.err();
  }();
  return reason;
}

}  // namespace collie::test
