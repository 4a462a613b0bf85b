#include "collie/test/support/netns_lan.h"

#include <unistd.h>

#include "collie/test/support/netns_pair.h"

namespace collie::test {

NetnsLan::NetnsLan(const std::string& label, const std::string& subnet, int hosts) {
  const std::string tag = std::to_string(::getpid() % 100000);
  hub = "collie-" + label + "h" + tag;
  for (int i = 0; i < hosts; ++i) {
    names.push_back("collie-" + label + std::to_string(i) + tag);
    addrs.push_back(subnet + "." + std::to_string(i + 1));
  }
  std::vector<std::string> steps{"ip netns add " + hub,
                                 "ip -n " + hub + " link add b" + label + tag + " type bridge",
                                 "ip -n " + hub + " link set b" + label + tag + " up"};
  for (int i = 0; i < hosts; ++i) {
    // veth ends: c<label><i><tag> on the host, h<label><i><tag> on the bridge.
    const std::string host_end = "c" + label + std::to_string(i) + tag;
    const std::string hub_end = "h" + label + std::to_string(i) + tag;
    for (const std::string& step :
         {"ip netns add " + names[i], "ip link add " + host_end + " type veth peer name " + hub_end,
          "ip link set " + host_end + " netns " + names[i],
          "ip link set " + hub_end + " netns " + hub,
          "ip -n " + hub + " link set " + hub_end + " master b" + label + tag,
          "ip -n " + hub + " link set " + hub_end + " up",
          "ip -n " + names[i] + " addr add " + addrs[i] + "/24 dev " + host_end,
          "ip -n " + names[i] + " link set " + host_end + " up",
          "ip -n " + names[i] + " link set lo up"})
      steps.push_back(step);
  }
  ok = make_namespaces(steps, &why);
}

NetnsLan::~NetnsLan() {
  for (const auto& n : names) shell("ip netns del " + n + " 2>/dev/null");
  shell("ip netns del " + hub + " 2>/dev/null");
}

std::vector<std::string> NetnsLan::exec_in(int host) const {
  return {ip_path(), "netns", "exec", names[host]};
}

}  // namespace collie::test
