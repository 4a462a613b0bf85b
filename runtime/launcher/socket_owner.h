// Which of this launcher's workers holds a loopback TCP connection: so that
// a refusal the agent store logs by the client's address ("dropping
// connection from 127.0.0.1:48708") can name the worker's rank.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace collie::launcher {

// The descendant of this process that holds the TCP socket whose local
// port is `local_port` and remote port `remote_port` (/proc/net/tcp and
// tcp6 give the socket's inode, the descendants' /proc/<pid>/fd the
// holder), or nullopt when none does (or /proc cannot tell).
std::optional<pid_t> descendant_holding_socket(uint16_t local_port, uint16_t remote_port);

// The RANK in a process's environment, when it has one.
std::optional<int> rank_of_process(pid_t pid);

}  // namespace collie::launcher
