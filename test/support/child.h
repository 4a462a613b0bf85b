// Multi-process tests re-run their own test executable as a child:
//
//   COLLIE_TEST_CHILD(store_client) {        // args: what the parent passed
//     auto store = TcpStore::connect(...);
//     return 0;                              // the child's exit code
//   }
//   ...
//   auto p = Subprocess::spawn(child_argv("store_client", {"127.0.0.1", port}));
//
// main() (support/main.cc) sees "--collie-child NAME ARGS..." and runs the
// registered function instead of Catch2. An exception escaping the function
// is printed to stderr and exits 1.
#pragma once

#include <string>
#include <vector>

namespace collie::test {

using ChildFn = int (*)(const std::vector<std::string>& args);

struct ChildRegistrar {
  ChildRegistrar(const char* name, ChildFn fn);
};

// {path of this executable, "--collie-child", name, args...}
std::vector<std::string> child_argv(const std::string& name, std::vector<std::string> args = {});

// Runs the child named argv[2] when argv[1] is "--collie-child"; returns -1
// when this is not a child invocation.
int run_child_if_requested(int argc, char** argv);

// The path of the running executable (/proc/self/exe, resolved).
std::string self_exe();

}  // namespace collie::test

#define COLLIE_TEST_CHILD_CAT2_(a, b) a##b
#define COLLIE_TEST_CHILD_CAT_(a, b) COLLIE_TEST_CHILD_CAT2_(a, b)
#define COLLIE_TEST_CHILD(name)                                                              \
  static int collie_child_##name(const std::vector<std::string>& args);                      \
  static ::collie::test::ChildRegistrar COLLIE_TEST_CHILD_CAT_(collie_child_reg_, __LINE__)( \
      #name, &collie_child_##name);                                                          \
  static int collie_child_##name([[maybe_unused]] const std::vector<std::string>& args)
