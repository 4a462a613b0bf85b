// Where this rank is: the address it listens on, and the host id that says
// which ranks share memory.
#pragma once

#include <string>

namespace collie {

// `option` (CommunicatorOptions::host_id), else hostname + boot id +
// network namespace inode: ranks with the same host id
// share memory; different network namespaces count as different hosts
// (which is how the tests make several "hosts").
std::string host_id(const std::string& option = "");

// The address to listen on: `bind_host`, else the address of `interface`
// (InvalidArgument naming COLLIE_SOCKET_IFNAME, where it comes from, when it
// has none), else the one that routes to `route_host`, else 127.0.0.1.
std::string resolve_bind_host(const std::string& bind_host, const std::string& interface = "",
                              const std::string& route_host = "");

}  // namespace collie
