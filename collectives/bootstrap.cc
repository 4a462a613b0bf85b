#include "collectives/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "collectives/peer_auth.h"
#include "collectives/wire.h"
#include "runtime/base/backoff.h"
#include "runtime/base/check.h"
#include "runtime/base/error.h"
#include "runtime/base/logging.h"
#include "runtime/base/socket_io.h"
#include "runtime/base/str_cat.h"
#include "runtime/base/unique_fd.h"

namespace collie {
namespace {

struct Hello {
  uint32_t magic;
  uint32_t group;
  int32_t rank;
  int32_t size;
  uint32_t address_bytes;
};

std::string addr_key(const std::string& prefix, int rank) {
  return str_cat(prefix, "/collectives/addr/", rank);
}

// A new TCP socket, or a NetworkError naming why there is none.
UniqueFd open_socket(int type, std::string_view purpose, int rank, int size) {
  const int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    throw NetworkError(str_cat("rank ", rank, " cannot open a socket ", purpose, ": ",
                               describe_fd_failure("socket()", err, size)));
  }
  return UniqueFd(fd);
}

void set_buffers(int fd, int bytes) {
  if (bytes <= 0) return;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

void set_data_options(int fd, const std::string& who) {
  int one = 1;
  // TCP_NODELAY only costs latency if it fails; the mode is essential: the
  // transport never blocks in a read or a write.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw NetworkError(
        str_cat("making the connection to ", who, " non-blocking failed: ", std::strerror(errno)));
  }
}

void write_all(int fd, const void* data, size_t n, const Deadline& deadline,
               const std::string& who) {
  const IoResult r = send_all(fd, data, n, deadline.when());
  if (r.kind == IoResult::Kind::kTimeout)
    throw TimeoutError(str_cat("sending the hello to ", who, " timed out ", deadline.describe()));
  if (!r.ok())
    throw NetworkError(str_cat("sending the hello to ", who, " failed: ", std::strerror(r.error)));
}

void read_all(int fd, void* data, size_t n, const Deadline& deadline, const std::string& who) {
  const IoResult r = recv_exact(fd, data, n, deadline.when());
  if (r.kind == IoResult::Kind::kTimeout)
    throw TimeoutError(str_cat("reading the hello from ", who, " timed out ", deadline.describe()));
  if (!r.ok()) {
    throw NetworkError(str_cat("reading the hello from ", who, " failed: ",
                               r.error == 0 ? "connection closed" : std::strerror(r.error)));
  }
}

std::pair<std::string, uint16_t> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw StoreError(str_cat("malformed address '", address, "'"));
  return {address.substr(0, colon), static_cast<uint16_t>(std::stoi(address.substr(colon + 1)))};
}

// Connects to a peer's listener, retrying refusals until the deadline. Each
// attempt re-reads the address: a stale one left in the store by an earlier
// group of the same name is replaced when the peer publishes its new one.
UniqueFd connect_to(const std::function<std::string()>& read_address, int rank, int size, int peer,
                    int buffer_bytes, const Deadline& deadline, std::string* address_out) {
  Backoff backoff({.initial = std::chrono::milliseconds(1), .max = std::chrono::milliseconds(200)});
  for (;;) {
    const std::string address = read_address();
    *address_out = address;
    const auto [host, port] = split_address(address);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
      throw NetworkError(str_cat("rank ", peer, " published the address '", address,
                                 "', which is not an IPv4 address"));
    }
    UniqueFd fd = open_socket(SOCK_STREAM | SOCK_NONBLOCK,
                              str_cat("to connect to rank ", peer, " at ", address), rank, size);
    set_buffers(fd.get(), buffer_bytes);
    int err = 0;
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        // A poll error falls through: SO_ERROR below reports it.
        if (wait_socket(fd.get(), POLLOUT, deadline.when()).kind == IoResult::Kind::kTimeout) {
          throw TimeoutError(str_cat("connecting to rank ", peer, " at ", address, " timed out ",
                                     deadline.describe()));
        }
        socklen_t len = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) return fd;
    if (deadline.expired() || (err != ECONNREFUSED && err != ETIMEDOUT && err != EAGAIN)) {
      throw NetworkError(str_cat("connecting to rank ", peer, " at ", address,
                                 " failed: ", std::strerror(err), " ", deadline.describe()));
    }
    backoff.sleep(deadline);
  }
}

std::string ipv4_of_interface(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw NetworkError(str_cat("getifaddrs: ", std::strerror(errno)));
  std::string found;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && ifname == i->ifa_name) {
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      found = buf;
      break;
    }
  }
  ::freeifaddrs(list);
  if (found.empty()) {
    throw InvalidArgument(
        str_cat("COLLIE_SOCKET_IFNAME=", ifname, ": no such interface with an IPv4 address"));
  }
  return found;
}

// The local address the kernel would use to reach `host` (a UDP connect
// sends nothing).
std::string route_to(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  // Without a socket there is no route to ask for: the caller falls back.
  if (fd.get() >= 0 && ::connect(fd.get(), res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
      out = buf;
    }
  }
  ::freeaddrinfo(res);
  return out;
}

}  // namespace

std::string describe_fd_failure(std::string_view call, int err, int size) {
  std::string text = str_cat(call, ": ", std::strerror(err));
  if (err == EMFILE || err == ENFILE) {
    rlimit rl{};
    const std::string limit = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                                  ? std::to_string(static_cast<unsigned long long>(rl.rlim_cur))
                                  : std::string("unknown");
    text += str_cat(" (RLIMIT_NOFILE is ", limit, "; a world of ", size, " needs ", size,
                    " descriptors per rank for the mesh, a listener and ", size - 1,
                    " peer sockets, on top of what the process already holds: raise `ulimit -n`)");
  }
  return text;
}

std::string resolve_bind_host(const std::string& bind_host) {
  if (!bind_host.empty()) return bind_host;
  if (const char* ifname = std::getenv("COLLIE_SOCKET_IFNAME"); ifname && *ifname) {
    return ipv4_of_interface(ifname);
  }
  if (const char* master = std::getenv("MASTER_ADDR"); master && *master) {
    const std::string routed = route_to(master);
    if (!routed.empty()) return routed;
  }
  return "127.0.0.1";
}

Mesh build_mesh(Store& store, int rank, int size, const CommunicatorOptions& options) {
  const Deadline deadline(options.timeout);
  const uint32_t group = group_hash(options.store_prefix);
  const std::string host = resolve_bind_host(options.bind_host);

  // Listen first, publish second: a peer that reads our address can connect
  // at once (the kernel queues it until we accept).
  UniqueFd listener = open_socket(SOCK_STREAM | SOCK_NONBLOCK, "to listen on", rank, size);
  set_buffers(listener.get(), options.socket_buffer_bytes);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    throw InvalidArgument(str_cat("bind host '", host, "' is not an IPv4 address"));
  }
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    throw NetworkError(
        str_cat("rank ", rank, " cannot listen on ", host, ":0: bind(): ", std::strerror(errno)));
  }
  if (::listen(listener.get(), std::max(size, 16)) != 0) {
    throw NetworkError(
        str_cat("rank ", rank, " cannot listen on ", host, ":0: listen(): ", std::strerror(errno)));
  }
  socklen_t len = sizeof sa;
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    throw NetworkError(str_cat("rank ", rank, " cannot read its listening port on ", host,
                               ": getsockname(): ", std::strerror(errno)));
  }
  Mesh mesh;
  mesh.address = str_cat(host, ":", ntohs(sa.sin_port));
  mesh.connections.resize(size);
  const JobSecret& secret = JobSecret::from_env();
  const PeerIdentity identity{group, size, rank, mesh.address};
  store.set(addr_key(options.store_prefix, rank), mesh.address);

  // Connect to every lower rank.
  for (int peer = 0; peer < rank; ++peer) {
    const std::string key = addr_key(options.store_prefix, peer);
    try {
      store.wait({key}, deadline.remaining());
    } catch (const TimeoutError& e) {
      throw TimeoutError(str_cat("rank ", rank, " waited ", deadline.describe(), " for rank ", peer,
                                 " to publish its address under '", key, "': ", e.what()));
    }
    std::string address;
    UniqueFd fd = connect_to([&] { return to_string(store.get(key)); }, rank, size, peer,
                             options.socket_buffer_bytes, deadline, &address);
    const Hello hello{kWireMagic, group, rank, size, static_cast<uint32_t>(mesh.address.size())};
    const std::string who = str_cat("rank ", peer, " (", address, ")");
    // With a job secret, prove it (and check the peer's) before the hello.
    authenticate_to_peer(fd.get(), secret, identity, peer, deadline, who);
    write_all(fd.get(), &hello, sizeof hello, deadline, who);
    write_all(fd.get(), mesh.address.data(), mesh.address.size(), deadline, who);
    set_data_options(fd.get(), who);
    mesh.connections[peer] = std::make_unique<Connection>(fd.release(), peer, address);
  }

  // Accept every higher rank; each says who it is. The gate authenticates
  // them when there is a job secret, refusing strangers without stopping.
  PeerGate gate(listener.get(), secret, identity);
  for (int accepted = 0; accepted < size - 1 - rank; ++accepted) {
    UniqueFd fd;
    int authenticated_rank = -1;
    for (;;) {
      if (auto admitted = gate.accept(deadline)) {
        fd = UniqueFd(admitted->fd);
        authenticated_rank = admitted->rank;
        break;
      }
      {
        std::vector<int> missing;
        for (int p = rank + 1; p < size; ++p) {
          if (!mesh.connections[p]) missing.push_back(p);
        }
        throw TimeoutError(
            str_cat("rank ", rank, " (", mesh.address, ") waited ", deadline.describe(),
                    " for rank(s) ", join(missing, ", "), " to connect",
                    gate.last_refusal().empty() ? "" : "; last refused: ", gate.last_refusal()));
      }
    }
    Hello hello{};
    read_all(fd.get(), &hello, sizeof hello, deadline, "a connecting peer");
    if (hello.magic != kWireMagic || hello.group != group || hello.size != size ||
        hello.rank <= rank || hello.rank >= size || mesh.connections[hello.rank] ||
        hello.address_bytes > 256 ||
        (authenticated_rank >= 0 && hello.rank != authenticated_rank)) {
      throw NetworkError(
          str_cat("rank ", rank, " (", mesh.address, ", group '", options.store_prefix, "', size ",
                  size, ") got an unexpected hello: rank ", hello.rank, ", size ", hello.size,
                  ", group hash ", hello.group, " (expected ", group, ")"));
    }
    std::string address(hello.address_bytes, '\0');
    read_all(fd.get(), address.data(), address.size(), deadline, str_cat("rank ", hello.rank));
    set_data_options(fd.get(), str_cat("rank ", hello.rank, " (", address, ")"));
    mesh.connections[hello.rank] = std::make_unique<Connection>(fd.release(), hello.rank, address);
  }
  COLLIE_LOG(kDebug) << "rank " << rank << " connected to " << size - 1 << " peers from "
                     << mesh.address;
  return mesh;
}

}  // namespace collie
