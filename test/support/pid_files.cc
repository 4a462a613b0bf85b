#include "collie/test/support/pid_files.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::test {

bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  // kill(0) succeeds on a zombie: read its state from /proc.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  return !(paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z');
}

std::vector<pid_t> wait_until_dead(const std::vector<pid_t>& pids, Timeout timeout) {
  Deadline deadline(timeout);
  for (;;) {
    std::vector<pid_t> alive;
    for (pid_t p : pids)
      if (process_alive(p)) alive.push_back(p);
    if (alive.empty() || deadline.expired()) return alive;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void write_pid_file(const std::string& dir, int rank) {
  std::string tmp = str_cat(dir, "/.", rank, ".tmp"), final_path = str_cat(dir, "/", rank);
  {
    std::ofstream out(tmp);
    out << ::getpid() << "\n";
  }
  std::filesystem::rename(tmp, final_path);
}

std::vector<pid_t> wait_for_pid_files(const std::string& dir, int count, Timeout timeout) {
  Deadline deadline(timeout);
  for (;;) {
    std::vector<pid_t> pids;
    for (int r = 0; r < count; ++r) {
      std::ifstream in(str_cat(dir, "/", r));
      pid_t pid = 0;
      if (in >> pid) pids.push_back(pid);
    }
    if (static_cast<int>(pids.size()) == count) return pids;
    if (deadline.expired())
      throw TimeoutError(str_cat("only ", pids.size(), " of ", count, " pid files appeared in ",
                                 dir, " ", deadline.describe()));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace collie::test
