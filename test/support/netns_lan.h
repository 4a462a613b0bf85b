// N network namespaces on one bridge: N "hosts" on a LAN, for tests of jobs
// across several launchers (an elastic job losing and regaining a node).
// The bridge lives in a namespace of its own, so nothing touches the
// machine's own network. Host i holds <subnet>.<i+1>/24 and has its loopback
// up. Everything is removed on destruction (deleting a namespace takes its
// veth ends with it). Needs root; where that or `ip netns add` is not
// allowed, ok is false and why says so.
#pragma once

#include <string>
#include <vector>

namespace collie::test {

struct NetnsLan {
  // `label` (one letter) and this process's pid name the namespaces:
  // collie-<label>h<pid> for the bridge, collie-<label><i><pid> for host i.
  NetnsLan(const std::string& label, const std::string& subnet, int hosts);
  ~NetnsLan();
  NetnsLan(const NetnsLan&) = delete;
  NetnsLan& operator=(const NetnsLan&) = delete;

  // {ip, "netns", "exec", <host i's namespace>}: the prefix of a command
  // that runs on host i.
  std::vector<std::string> exec_in(int host) const;

  std::string hub;                 // the bridge's namespace
  std::vector<std::string> names;  // host namespaces
  std::vector<std::string> addrs;  // host addresses
  bool ok = false;
  std::string why;  // when !ok
};

}  // namespace collie::test
