#include "collie/runtime/launcher/program_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::launcher {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (!is_executable_file(program))
      throw InvalidArgument(
          str_cat("collie-run: program '", program, "' is not an executable file"));
    return program;
  }
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir =
        path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw InvalidArgument(
      str_cat("collie-run: program '", program, "' not found on PATH (", path, ")"));
}

}  // namespace collie::launcher
