// What the operating system allows a TcpStore server that many clients
// connect to at once: open files (one per client) and the listen backlog
// (connections the kernel queues before the server accepts them).
#pragma once

#include <cstddef>
#include <string>

namespace collie {

// Raises this process's soft RLIMIT_NOFILE to its hard limit when the soft
// one is below `wanted` descriptors. Logs what it did at INFO, and at WARN
// when even the hard limit is below `wanted`, naming `who` (the server's
// address), `what` (the options that ask for so many) and the remedy.
// Returns the soft limit in force afterwards.
size_t raise_open_files_limit(size_t wanted, const std::string& who, const std::string& what);

// The listen backlog to ask for: net.core.somaxconn, which caps whatever
// listen() is given (4096 where it cannot be read).
int listen_backlog();

}  // namespace collie
