#include "collie/collectives/transport/host.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/base/unique_fd.h"
#include "collie/collectives/transport/sockets.h"

namespace collie {
namespace {

std::string ip_of_interface(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw NetworkError(str_cat("getifaddrs: ", std::strerror(errno)));
  std::string v4, v6;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || ifname != i->ifa_name) continue;
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) v4 = numeric_host(i->ifa_addr);
    if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const auto* a6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (!IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) v6 = numeric_host(i->ifa_addr);
    }
  }
  ::freeifaddrs(list);
  if (v4.empty() && v6.empty()) {
    throw InvalidArgument(
        str_cat("COLLIE_SOCKET_IFNAME=", ifname, ": no such interface with an IP address"));
  }
  return v4.empty() ? v6 : v4;
}

// The local address the kernel would use to reach `host` (a UDP connect
// sends nothing).
std::string route_to(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  UniqueFd fd(::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  // Without a socket there is no route to ask for: the caller falls back.
  if (fd.get() >= 0 && ::connect(fd.get(), res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      out = numeric_host(reinterpret_cast<sockaddr*>(&local));
    }
  }
  ::freeaddrinfo(res);
  return out;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::string host_id(const std::string& option) {
  if (!option.empty()) return option;
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  struct stat st {};
  const unsigned long long netns =
      ::stat("/proc/self/ns/net", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
  return str_cat(name, "/", read_first_line("/proc/sys/kernel/random/boot_id"), "/", netns);
}

std::string resolve_bind_host(const std::string& bind_host, const std::string& interface,
                              const std::string& route_host) {
  if (!bind_host.empty()) return bind_host;
  if (!interface.empty()) return ip_of_interface(interface);
  if (!route_host.empty()) {
    const std::string routed = route_to(route_host);
    if (!routed.empty()) return routed;
  }
  return "127.0.0.1";
}

}  // namespace collie
