#include "collie/test/support/child.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <map>

namespace collie::test {
namespace {

std::map<std::string, ChildFn>& registry() {
  static std::map<std::string, ChildFn> r;
  return r;
}

}  // namespace

ChildRegistrar::ChildRegistrar(const char* name, ChildFn fn) { registry()[name] = fn; }

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  buf[n] = '\0';
  return buf;
}

std::vector<std::string> child_argv(const std::string& name, std::vector<std::string> args) {
  std::vector<std::string> argv{self_exe(), "--collie-child", name};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

int run_child_if_requested(int argc, char** argv) {
  if (argc < 3 || std::strcmp(argv[1], "--collie-child") != 0) return -1;
  auto it = registry().find(argv[2]);
  if (it == registry().end()) {
    std::fprintf(stderr, "unknown test child '%s'\n", argv[2]);
    return 2;
  }
  std::vector<std::string> args(argv + 3, argv + argc);
  try {
    return it->second(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test child '%s' failed: %s\n", argv[2], e.what());
    return 1;
  }
}

}  // namespace collie::test
