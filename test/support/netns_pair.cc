#include "collie/test/support/netns_pair.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace collie::test {

NetnsPair::NetnsPair(const std::string& label, const std::string& subnet) {
  const std::string tag = std::to_string(::getpid() % 100000);
  a = "collie-" + label + "a" + tag;
  b = "collie-" + label + "b" + tag;
  dev_a = "c" + label + "a" + tag;
  dev_b = "c" + label + "b" + tag;
  addr_a = subnet + ".1";
  addr_b = subnet + ".2";
  ok = make_namespaces(
      {"ip netns add " + a, "ip netns add " + b,
       "ip link add " + dev_a + " type veth peer name " + dev_b,
       "ip link set " + dev_a + " netns " + a, "ip link set " + dev_b + " netns " + b,
       "ip -n " + a + " addr add " + addr_a + "/24 dev " + dev_a,
       "ip -n " + b + " addr add " + addr_b + "/24 dev " + dev_b, "ip -n " + a + " link set lo up",
       "ip -n " + b + " link set lo up", "ip -n " + a + " link set " + dev_a + " up",
       "ip -n " + b + " link set " + dev_b + " up"},
      &why);
}

NetnsPair::~NetnsPair() {
  shell("ip netns del " + a);  // takes the veth pair with it
  shell("ip netns del " + b);
}

std::vector<std::string> NetnsPair::exec_in(const std::string& ns) const {
  return {ip_path(), "netns", "exec", ns};
}

const std::string& ip_path() {
  static const std::string p = ::access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/bin/ip";
  return p;
}

bool make_namespaces(const std::vector<std::string>& steps, std::string* why) {
  if (::geteuid() != 0) {
    *why = "network namespaces need root";
    return false;
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    auto [rc, out] = shell(steps[i]);
    if (rc == 0) continue;
    *why =
        i == 0 ? "ip netns add is not permitted here: " + out : "`" + steps[i] + "` failed: " + out;
    return false;
  }
  return true;
}

std::pair<int, std::string> shell(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) return {-1, "popen failed"};
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  const int st = ::pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace collie::test
