#include "test/support/skip.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

}  // namespace collie::test
