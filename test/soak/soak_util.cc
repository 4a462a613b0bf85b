#include "collie/test/soak/soak_util.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace collie::test {

ProcessSample sample_process() {
  ProcessSample s;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = std::stoll(line.substr(6));
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++s.fds;
  return s;
}

double soak_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::stod(v) : fallback;
}

void soak_record(const std::string& name, const std::string& text) {
  std::string block = "[soak] " + name + ":\n" + text;
  if (block.back() != '\n') block += '\n';
  std::fputs(block.c_str(), stdout);
  std::fflush(stdout);
  if (const char* path = std::getenv("COLLIE_FAULTS_RECORD"); path && *path) {
    std::ofstream out(path, std::ios::app);
    out << block;
  }
}

}  // namespace collie::test
