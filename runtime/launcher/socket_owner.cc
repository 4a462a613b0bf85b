#include "collie/runtime/launcher/socket_owner.h"

#include <dirent.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "collie/base/str_cat.h"

namespace collie::launcher {
namespace {

// "0100007F:BE42" -> 0xBE42.
std::optional<uint16_t> port_of(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  unsigned port = 0;
  const char* first = address.data() + colon + 1;
  const char* last = address.data() + address.size();
  if (std::from_chars(first, last, port, 16).ec != std::errc() || port > 0xffff)
    return std::nullopt;
  return static_cast<uint16_t>(port);
}

std::optional<std::string> socket_inode(uint16_t local_port, uint16_t remote_port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
      std::istringstream fields(line);
      std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      if (!(fields >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode))
        continue;
      if (port_of(local) == local_port && port_of(remote) == remote_port && inode != "0")
        return inode;
    }
  }
  return std::nullopt;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  const std::string tasks = str_cat("/proc/", pid, "/task");
  DIR* dir = ::opendir(tasks.c_str());
  if (dir == nullptr) return out;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(str_cat(tasks, "/", e->d_name, "/children"));
    pid_t child = 0;
    while (in >> child) out.push_back(child);
  }
  ::closedir(dir);
  return out;
}

bool holds(pid_t pid, const std::string& target) {
  const std::string fds = str_cat("/proc/", pid, "/fd");
  DIR* dir = ::opendir(fds.c_str());
  if (dir == nullptr) return false;
  bool found = false;
  char link[64];
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const ssize_t n = ::readlink(str_cat(fds, "/", e->d_name).c_str(), link, sizeof link);
    if (n > 0 && std::string(link, static_cast<size_t>(n)) == target) {
      found = true;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace

std::optional<pid_t> descendant_holding_socket(uint16_t local_port, uint16_t remote_port) {
  const std::optional<std::string> inode = socket_inode(local_port, remote_port);
  if (!inode) return std::nullopt;
  const std::string target = str_cat("socket:[", *inode, "]");
  std::vector<pid_t> todo = children_of(::getpid());
  for (size_t i = 0; i < todo.size() && i < 100000; ++i) {
    if (holds(todo[i], target)) return todo[i];
    for (pid_t grandchild : children_of(todo[i])) todo.push_back(grandchild);
  }
  return std::nullopt;
}

std::optional<int> rank_of_process(pid_t pid) {
  std::ifstream in(str_cat("/proc/", pid, "/environ"), std::ios::binary);
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    if (!entry.starts_with("RANK=")) continue;
    int rank = -1;
    const char* first = entry.data() + 5;
    if (std::from_chars(first, entry.data() + entry.size(), rank).ec == std::errc() && rank >= 0)
      return rank;
  }
  return std::nullopt;
}

}  // namespace collie::launcher
