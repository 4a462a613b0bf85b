// init_method URLs, torch's way of telling a process group where to
// rendezvous, and the Store each one opens:
//
//   env://                      MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
//   env://?rank=1&world_size=4  the query overrides RANK and WORLD_SIZE
//   tcp://10.0.0.1:29500?rank=1&world_size=4   rank 0 hosts the store there
//   tcp://[::1]:29500           IPv6 literals in brackets
//   file:///shared/rdzv?rank=1&world_size=4    a FileStore on a shared disk
//
//   InitMethod m = parse_init_method("tcp://127.0.0.1:29500?rank=0&world_size=2");
//   std::shared_ptr<Store> store = create_store(m, std::chrono::minutes(5));
//
// parse_init_method throws InvalidArgument naming the part that is wrong: the
// scheme, the host, the port, a query key or value, a missing variable. Rank
// and world size may be left out of the URL (and, for env://, the
// environment); rank_given/world_size_given say so, and the caller supplies
// them (init_process_group(rank=, world_size=)) before create_store.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "collie/rendezvous/env/launch_env.h"
#include "collie/rendezvous/store.h"

namespace collie {

enum class InitScheme { kEnv, kTcp, kFile };

// "env", "tcp", "file".
const char* to_string(InitScheme scheme);

struct InitMethod {
  InitScheme scheme = InitScheme::kEnv;
  std::string host;   // tcp/env: without brackets for IPv6 ("::1")
  uint16_t port = 0;  // tcp/env: 0 only makes sense for rank 0 (an ephemeral port)
  std::string path;   // file: absolute
  int rank = -1;
  int world_size = -1;
  bool rank_given = false;
  bool world_size_given = false;
  std::string url;  // as given, for messages

  // "host:port" with brackets around IPv6 literals.
  std::string address() const;
  // Throws InvalidArgument when rank or world size is still missing or
  // inconsistent (rank >= world size, port 0 on a rank other than 0).
  void validate_complete() const;
};

// Parses a URL; env:// also reads MASTER_ADDR, MASTER_PORT, RANK and
// WORLD_SIZE through `env`.
InitMethod parse_init_method(std::string_view url, const EnvLookup& env = process_env);

// Opens the store an init method names, after validate_complete():
//   tcp/env: rank 0 hosts a TcpStoreServer on host:port (port 0: ephemeral,
//            see TcpStore::port()) and connects to it; the others connect,
//            retrying until `timeout`.
//   file:    a FileStore on path, removed when world_size users have closed it.
// `timeout` is the connect deadline and the store's get/wait timeout.
std::shared_ptr<Store> create_store(const InitMethod& method, Timeout timeout = kDefaultTimeout);

}  // namespace collie
