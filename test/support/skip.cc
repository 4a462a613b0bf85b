#include "test/support/skip.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "test/support/subprocess.h"

namespace collie::test {

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::strcmp(ci, "true") == 0;
}

void skip(const std::string& reason) {
  if (in_ci()) {
    FAIL("cannot run: " << reason << " (CI=true: every prerequisite must be installed)");
    std::abort();  // FAIL throws; this only tells the compiler
  }
  std::printf("SKIP: %s\n", reason.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(77);
}

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
