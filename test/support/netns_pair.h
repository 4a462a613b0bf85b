// Two network namespaces joined by a veth pair: two "hosts" on one machine,
// for tests of what happens between nodes (a job across two launchers, a
// link that loses packets or goes down). Namespace a holds <subnet>.1 on its
// veth end, b holds <subnet>.2; each has its loopback up. Everything is
// removed on destruction (deleting a namespace takes its veth end, rules and
// qdiscs with it), also when the test fails. Creating namespaces needs root;
// where that or `ip netns add` is not allowed, ok is false and why says so,
// and the test skips with that reason (namespaces_or_skip below).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collie/test/support/skip.h"

namespace collie::test {

struct NetnsPair {
  // `label` keeps concurrent users apart (with this process's pid): label
  // "f" makes namespaces collie-fa<pid> and collie-fb<pid> and veth ends
  // cfa<pid> / cfb<pid>. `subnet` is the first three octets ("10.231.9").
  NetnsPair(const std::string& label, const std::string& subnet);
  ~NetnsPair();
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  // {ip, "netns", "exec", ns}: what to put in front of a command's argv to
  // run it inside namespace `ns` (a or b).
  std::vector<std::string> exec_in(const std::string& ns) const;

  std::string a, b;          // namespace names
  std::string dev_a, dev_b;  // the veth ends inside a and b
  std::string addr_a, addr_b;
  bool ok = false;
  std::string why;  // when !ok
};

// A NetnsPair or NetnsLan (test/support/netns_lan.h) made from `args`;
// where it cannot be made, removes what was made and skips the test with
// the reason (skip_test: a failure under CI=true). Call it before the test
// starts processes: a skip exits without unwinding.
template <typename Namespaces, typename... Args>
std::unique_ptr<Namespaces> namespaces_or_skip(Args&&... args) {
  auto made = std::make_unique<Namespaces>(std::forward<Args>(args)...);
  if (!made->ok) {
    const std::string why = made->why;
    made.reset();
    skip_test(why);
  }
  return made;
}

// The `ip` binary (/usr/sbin/ip or /bin/ip).
const std::string& ip_path();

// Runs `cmd` through /bin/sh; returns its exit status and combined output.
std::pair<int, std::string> shell(const std::string& cmd);

// Makes namespaces: root is needed, then each step runs through shell() in
// order. False, with *why saying which step failed and how (or that root
// is missing, or that `ip netns add` is not permitted), at the first failure.
bool make_namespaces(const std::vector<std::string>& steps, std::string* why);

}  // namespace collie::test
