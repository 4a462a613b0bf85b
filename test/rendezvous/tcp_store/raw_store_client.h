// What the TcpStore server tests share: a raw client socket that writes the
// exact bytes a hostile or careless client would, and collie-store run as a
// process of its own (so that its memory can be measured apart from the
// test's).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collie/rendezvous/store.h"
#include "collie/rendezvous/tcp_store/tcp_store_socket.h"
#include "collie/test/support/subprocess.h"

namespace collie::test {

StoreSocket raw_connect(uint16_t port);
// Sends what it can: the server may already have dropped us (that is often
// the point of the test); the check is on what comes back.
void send_raw(StoreSocket& s, const Bytes& b);
// True when the server closes the connection (EOF/reset) within 10s.
bool closed_by_server(StoreSocket& s);
// A 2.x VALIDATE followed by a PING with `nonce`.
Bytes v2_hello(uint32_t nonce);
// A well-behaved client still gets answers.
void check_still_serving(uint16_t port);

// The resident set of a process (default: this one) in KiB, from
// /proc/<pid>/status; `field` "VmRSS" (now) or "VmHWM" (peak).
size_t resident_kib(pid_t pid = 0, const std::string& field = "VmRSS");

// build/bin/collie-store
std::string collie_store_path();
// Starts collie-store on 127.0.0.1, port 0, with `args` added; returns the
// process, the port it printed in *port.
Subprocess start_collie_store(const std::vector<std::string>& args, uint16_t* port,
                              const SpawnOptions& options = {});
// Reads the port from collie-store's "listening on" line.
uint16_t listening_port(Subprocess& p);

}  // namespace collie::test
