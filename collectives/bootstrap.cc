#include "collectives/bootstrap.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <utility>

#include "collectives/peer_auth.h"
#include "collectives/shm/shm_channel.h"
#include "collectives/shm/shm_ring.h"
#include "collectives/tcp/tcp_channel.h"
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

// What each rank publishes: "tcp=<host:port>\nhost=<id>\nunix=<name>\npid=<pid>".
struct Record {
  std::string tcp;
  std::string host;
  std::string unix_name;  // abstract Unix socket name ("" when not listening)
  std::string pid;
  std::string encode() const {
    return str_cat("tcp=", tcp, "\nhost=", host, "\nunix=", unix_name, "\npid=", pid);
  }
  static Record decode(const std::string& text) {
    Record r;
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(pos, end - pos);
      const auto eq = line.find('=');
      if (eq != std::string::npos) {
        const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
        if (k == "tcp") r.tcp = v;
        if (k == "host") r.host = v;
        if (k == "unix") r.unix_name = v;
        if (k == "pid") r.pid = v;
      }
      pos = end + 1;
    }
    return r;
  }
  // "10.0.0.7:41234 (pid 123 on host ab12...)"
  std::string describe() const {
    return str_cat(tcp, " (pid ", pid, ", host id ", host.substr(0, 16), ")");
  }
};

using asio::ip::tcp;

// SO_ERROR, the result of a non-blocking connect (Asio has no option type
// for it): a GettableSocketOption.
struct PendingError {
  int value = 0;
  int level(const tcp&) const { return SOL_SOCKET; }
  int name(const tcp&) const { return SO_ERROR; }
  int* data(const tcp&) { return &value; }
  size_t size(const tcp&) const { return sizeof value; }
  void resize(const tcp&, size_t) {}
};

// On a socket or an acceptor (which passes them on to what it accepts).
template <typename Socket>
void set_buffers(Socket& socket, int bytes) {
  if (bytes <= 0) return;
  asio::error_code ignored;  // the kernel's default size is no error
  socket.set_option(asio::socket_base::send_buffer_size(bytes), ignored);
  socket.set_option(asio::socket_base::receive_buffer_size(bytes), ignored);
}

// TCP_NODELAY only costs latency if it fails; the channel sets the
// non-blocking mode, which is essential (make_tcp_channel).
void set_no_delay(tcp::socket& socket) {
  asio::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
}

void write_all(int fd, const void* data, size_t n, const Deadline& deadline,
               const std::string& who) {
  const IoResult r = send_all(fd, data, n, deadline.when());
  if (r.kind == IoResult::Kind::kTimeout)
    throw TimeoutError(str_cat("sending the hello to ", who, " timed out ", deadline.describe()));
  if (!r.ok())
    throw NetworkError(str_cat("sending the hello to ", who, " failed: ", std::strerror(r.error)));
}

// "host:port" or "[v6]:port" -> host, port.
std::pair<std::string, std::string> split_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw StoreError(str_cat("malformed address '", address, "'"));
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host, address.substr(colon + 1)};
}

// A socket or an acceptor of the data plane for `protocol`, opened
// close-on-exec and non-blocking (Asio's open() sets neither: a process
// started meanwhile would inherit the descriptor) and handed to Asio.
template <typename Socket>
Socket new_socket(const tcp& protocol, std::string_view purpose, int rank, int size) {
  const int fd = ::socket(protocol.family(), protocol.type() | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          protocol.protocol());
  if (fd < 0) {
    const int err = errno;
    throw NetworkError(str_cat("rank ", rank, " cannot open a socket ", purpose, ": ",
                               describe_fd_failure("socket()", err, size)));
  }
  Socket socket(data_io_context());
  asio::error_code ec;
  socket.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    throw NetworkError(
        str_cat("rank ", rank, " cannot use its socket ", purpose, ": ", ec.message()));
  }
  return socket;
}

// One connect within the deadline. Asio's connect() waits for the handshake
// without a limit, so the socket's native handle connects and poll() waits,
// as every wait in the data plane does; TimeoutError at the deadline.
asio::error_code connect_within(tcp::socket& socket, const tcp::endpoint& to,
                                const Deadline& deadline, const std::string& what) {
  if (::connect(socket.native_handle(), to.data(), static_cast<socklen_t>(to.size())) == 0)
    return {};
  if (errno != EINPROGRESS) return {errno, asio::system_category()};
  if (wait_socket(socket.native_handle(), POLLOUT, deadline.when()).kind ==
      IoResult::Kind::kTimeout) {
    throw TimeoutError(str_cat(what, " timed out ", deadline.describe()));
  }
  PendingError pending;
  asio::error_code ec;
  socket.get_option(pending, ec);
  return ec ? ec : asio::error_code(pending.value, asio::system_category());
}

// Connects to `address` (a name or an IPv4/IPv6 literal, each resolved
// address in turn), retrying refusals and names that do not resolve yet
// (DNS may lag a new node) until the deadline.
tcp::socket connect_tcp_to(const std::string& address, int rank, int size, int peer,
                           int buffer_bytes, const Deadline& deadline) {
  const auto [host, port] = split_address(address);
  const std::string what = str_cat("connecting to rank ", peer, " at ", address);
  tcp::resolver resolver(data_io_context());
  Backoff backoff({.initial = std::chrono::milliseconds(1), .max = std::chrono::milliseconds(200)});
  for (;;) {
    asio::error_code ec;
    const tcp::resolver::results_type endpoints =
        resolver.resolve(host, port, tcp::resolver::numeric_service, ec);
    const bool resolved = !ec;
    for (const auto& entry : endpoints) {
      tcp::socket socket = new_socket<tcp::socket>(
          entry.endpoint().protocol(), str_cat("to connect to rank ", peer, " at ", address), rank,
          size);
      set_buffers(socket, buffer_bytes);
      ec = connect_within(socket, entry.endpoint(), deadline, what);
      if (!ec) return socket;
    }
    if (resolved && endpoints.empty()) ec = asio::error::host_not_found;
    const bool retry = !resolved || ec == asio::error::connection_refused ||
                       ec == asio::error::timed_out || ec == asio::error::try_again ||
                       ec == asio::error::host_unreachable;
    if (deadline.expired() || !retry) {
      throw NetworkError(str_cat(what, " failed: ", ec.message(), " ", deadline.describe()));
    }
    backoff.sleep(deadline);
  }
}

sockaddr_un abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof sa.sun_path - 1);
  std::memcpy(sa.sun_path + 1, name.data(), n);  // sun_path[0] = 0: the abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return sa;
}

// Connects to a peer's abstract Unix socket (no file anywhere: the name
// lives in the network namespace and dies with the listener).
UniqueFd connect_unix_to(const std::string& name, const Deadline& deadline, int* err_out) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) {
    *err_out = errno;
    return fd;
  }
  socklen_t len;
  const sockaddr_un sa = abstract_address(name, &len);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), len) == 0) return fd;
  int err = errno;
  if (err == EINPROGRESS || err == EAGAIN) {
    // A full backlog: wait for room (the listener accepts as it progresses).
    if (wait_socket(fd.get(), POLLOUT, deadline.when()).kind == IoResult::Kind::kOk) {
      socklen_t l = sizeof err;
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &l) != 0) err = errno;
      if (err == 0) return fd;
    }
  }
  *err_out = err;
  return UniqueFd();
}

std::string ip_of_interface(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw NetworkError(str_cat("getifaddrs: ", std::strerror(errno)));
  std::string v4, v6;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || ifname != i->ifa_name) continue;
    if (i->ifa_addr->sa_family == AF_INET && v4.empty()) v4 = numeric_host(i->ifa_addr);
    if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const auto* a6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (!IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) v6 = numeric_host(i->ifa_addr);
    }
  }
  ::freeifaddrs(list);
  if (v4.empty() && v6.empty()) {
    throw InvalidArgument(
        str_cat("COLLIE_SOCKET_IFNAME=", ifname, ": no such interface with an IP address"));
  }
  return v4.empty() ? v6 : v4;
}

// The local address the kernel would use to reach `host` (a UDP connect
// sends nothing).
std::string route_to(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  UniqueFd fd(::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  // Without a socket there is no route to ask for: the caller falls back.
  if (fd.get() >= 0 && ::connect(fd.get(), res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      out = numeric_host(reinterpret_cast<sockaddr*>(&local));
    }
  }
  ::freeaddrinfo(res);
  return out;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string random_hex() {
  std::random_device rd;
  return str_cat(std::hex, rd(), rd());
}

size_t shm_ring_bytes() {
  const char* env = std::getenv("COLLIE_SHM_BYTES");
  if (!env || !*env) return kDefaultShmRingBytes;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(env, &end, 10);
  if (!end || *end != '\0' || v < 4096 || v > (1ull << 34)) {
    throw InvalidArgument(str_cat("COLLIE_SHM_BYTES='", env,
                                  "': expected the bytes of each shared-memory ring, from 4096 "
                                  "to 2^34"));
  }
  // Whole lines: the second ring of a segment stays aligned.
  return static_cast<size_t>(v) & ~(kShmLineBytes - 1);
}

// The PeerLinker of one communicator: its listeners, the gates that
// authenticate what connects to them, and the records of the peers read so
// far.
class Linker final : public PeerLinker {
 public:
  Linker(Store& store, int rank, int size, const CommunicatorOptions& options,
         TransportChoice choice, std::string base, std::string host, tcp::acceptor tcp_listener,
         UniqueFd unix_listener, std::string address, const std::string& unix_name)
      : store_(store),
        rank_(rank),
        size_(size),
        group_(group_hash(options.store_prefix)),
        prefix_(options.store_prefix),
        buffer_bytes_(options.socket_buffer_bytes),
        choice_(choice),
        base_(std::move(base)),
        host_(std::move(host)),
        tcp_listener_(std::move(tcp_listener)),
        tcp_listener_fd_(tcp_listener_.native_handle()),
        tcp_protocol_(tcp_listener_.local_endpoint().protocol()),
        unix_listener_(std::move(unix_listener)),
        ring_bytes_(choice == TransportChoice::kTcp ? 0 : shm_ring_bytes()),
        identity_{group_, size, rank, address},
        unix_identity_{group_, size, rank, str_cat(address, " (unix ", unix_name, ")")},
        secret_(JobSecret::from_env()),
        tcp_gate_(tcp_listener_fd_, secret_, identity_, hello_format()) {
    if (unix_listener_)
      unix_gate_.emplace(unix_listener_.get(), secret_, unix_identity_, hello_format());
  }

  void remember(int peer, Record r) { records_[peer] = std::move(r); }

  std::string address_of(int peer) const override {
    auto it = records_.find(peer);
    return it == records_.end() ? std::string("address not read yet") : it->second.tcp;
  }

  std::string last_refusal() const override {
    // The Unix gate's refusals are as telling as TCP's: report the one seen.
    if (unix_gate_ && !unix_gate_->last_refusal().empty()) return unix_gate_->last_refusal();
    return tcp_gate_.last_refusal();
  }

  void poll_fds(std::vector<int>* fds) const override {
    fds->push_back(tcp_listener_fd_);
    if (unix_listener_) fds->push_back(unix_listener_.get());
    // Handshakes in progress too: without them a peer's proof would wait
    // for the next arrival or the deadline before it is read.
    tcp_gate_.pending_fds(fds);
    if (unix_gate_) unix_gate_->pending_fds(fds);
  }

  std::unique_ptr<Channel> connect(int peer, const Deadline& deadline,
                                   std::string* address) override {
    const Record& r = record(peer, deadline);
    *address = r.tcp;
    const std::string who = str_cat("rank ", peer, " (", r.tcp, ")");
    const bool same_host = r.host == host_;
    if (choice_ == TransportChoice::kShm && !same_host) {
      throw InvalidArgument(str_cat("COLLIE_TRANSPORT=shm, but rank ", peer, " (", r.tcp,
                                    ", host id ", r.host, ") is not on this rank's host (", host_,
                                    "): use COLLIE_TRANSPORT=auto or tcp"));
    }
    if (choice_ != TransportChoice::kTcp && same_host && !r.unix_name.empty()) {
      int err = 0;
      UniqueFd fd = connect_unix_to(r.unix_name, deadline, &err);
      if (fd) {
        introduce(fd.get(), peer, deadline, who);
        std::string why;
        auto channel = shm_connect(fd, ring_bytes_, deadline, who, &why);
        if (channel) return channel;
        COLLIE_LOG(kWarn) << "rank " << rank_ << ": shared memory with " << who
                          << " does not work (" << why << "); using the socket instead";
        return make_local_channel(std::move(fd), who);
      }
      if (choice_ == TransportChoice::kShm) {
        throw NetworkError(str_cat("COLLIE_TRANSPORT=shm, but connecting to ", who,
                                   "'s local socket failed: ", std::strerror(err)));
      }
      COLLIE_LOG(kWarn) << "rank " << rank_ << ": " << who
                        << " has this rank's host id but its local socket is out of reach ("
                        << std::strerror(err) << "); using TCP";
    }
    tcp::socket socket = connect_tcp_to(r.tcp, rank_, size_, peer, buffer_bytes_, deadline);
    // Before the handshake: AUTH3 and the hello go out back to back, and
    // Nagle would hold the hello for the acceptor's delayed ACK.
    set_no_delay(socket);
    introduce(socket.native_handle(), peer, deadline, who);
    return make_tcp_channel(std::move(socket), who);
  }

  std::map<int, std::string> roll_call(uint64_t seq, Clock::time_point until, bool wait) override {
    std::map<int, std::string> missing;
    // One key per rank, not per call: ranks may be one call apart when the
    // group stalls, and a timeout breaks the group for good, so there is
    // only ever one roll call.
    (void)seq;
    auto key = [&](int r) { return str_cat(base_, "/probe/", r); };
    try {
      store_.set(key(rank_), "answered");
      if (!wait) return missing;
      std::vector<std::string> keys;
      for (int r = 0; r < size_; ++r) keys.push_back(key(r));
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      try {
        store_.wait(keys, std::max(left, std::chrono::milliseconds(1)));
        return missing;
      } catch (const TimeoutError&) {
      }
      const Deadline quick(std::chrono::seconds(5));
      for (int r = 0; r < size_; ++r) {
        if (!store_.check({keys[r]})) missing[r] = record(r, quick).tcp;
      }
    } catch (const Error& e) {
      COLLIE_LOG(kWarn) << "rank " << rank_ << ": the timeout probe's roll call in the store "
                        << "failed: " << e.what();
    }
    return missing;
  }

  std::vector<Arrival> accept_ready(const Deadline& deadline) override {
    std::vector<Arrival> out;
    // One pass: an expired deadline makes each gate look once and return.
    const Deadline now(std::chrono::milliseconds(0));
    while (auto a = tcp_gate_.accept(now))
      if (auto arrival = admit(*a, false, deadline)) out.push_back(std::move(*arrival));
    if (unix_gate_) {
      while (auto a = unix_gate_->accept(now))
        if (auto arrival = admit(*a, true, deadline)) out.push_back(std::move(*arrival));
    }
    return out;
  }

 private:
  const Record& record(int peer, const Deadline& deadline) {
    auto it = records_.find(peer);
    if (it != records_.end()) return it->second;
    const std::string key = str_cat(base_, "/addr/", peer);
    try {
      store_.wait({key}, deadline.remaining());
    } catch (const TimeoutError& e) {
      throw TimeoutError(str_cat("rank ", rank_, " waited ", deadline.describe(), " for rank ",
                                 peer, "'s address under '", key, "': ", e.what()));
    }
    return records_[peer] = Record::decode(to_string(store_.get(key)));
  }

  // An accepted TCP connection, as an Asio socket of the listener's protocol.
  tcp::socket adopt(UniqueFd fd, const std::string& who) {
    tcp::socket socket(data_io_context());
    asio::error_code ec;
    socket.assign(tcp_protocol_, fd.get(), ec);
    if (ec) {
      throw NetworkError(
          str_cat("rank ", rank_, " cannot use the connection from ", who, ": ", ec.message()));
    }
    fd.release();
    set_no_delay(socket);
    return socket;
  }

  void introduce(int fd, int peer, const Deadline& deadline, const std::string& who) {
    // With a job secret, prove it (and check the peer's) before the hello.
    authenticate_to_peer(fd, secret_, identity_, peer, deadline, who);
    const Hello hello{kWireMagic, group_, rank_, size_,
                      static_cast<uint32_t>(identity_.address.size())};
    write_all(fd, &hello, sizeof hello, deadline, who);
    write_all(fd, identity_.address.data(), identity_.address.size(), deadline, who);
  }

  // What the gates check before they hand a connection over: a hello of
  // this group and size from a higher rank (the one it authenticated as,
  // with a secret), and a sane address length.
  PeerGate::Hello hello_format() {
    return {sizeof(Hello),
            [this](std::span<const uint8_t> bytes, int authenticated,
                   std::string* why) -> std::optional<size_t> {
              Hello hello{};
              std::memcpy(&hello, bytes.data(), sizeof hello);
              if (hello.magic != kWireMagic || hello.group != group_ || hello.size != size_ ||
                  hello.rank <= rank_ || hello.rank >= size_ || hello.address_bytes > 256 ||
                  (authenticated >= 0 && hello.rank != authenticated)) {
                *why =
                    str_cat("its hello does not fit rank ", rank_, " (group '", prefix_, "', size ",
                            size_, "): ", hello.magic == kWireMagic ? "" : "not collie's magic; ",
                            "rank ", hello.rank, ", size ", hello.size, ", group hash ",
                            hello.group, " (expected ", group_, ")");
                return std::nullopt;
              }
              return hello.address_bytes;
            }};
  }

  // A connection the gate admitted: its hello is read and fits. Over the
  // Unix socket the shared-memory set-up follows; a peer that fails it
  // (it died, or it was not a peer) is dropped with a WARN: a real peer
  // that died is found by the collective that waits for it.
  std::optional<Arrival> admit(PeerGate::Admitted& admitted, bool local, const Deadline& deadline) {
    UniqueFd fd(admitted.fd);
    Hello hello{};
    std::memcpy(&hello, admitted.hello.data(), sizeof hello);
    const std::string address(admitted.hello.begin() + sizeof hello, admitted.hello.end());
    const std::string who = str_cat("rank ", hello.rank, " (", address, ")");
    if (!local)
      return Arrival{hello.rank, make_tcp_channel(adopt(std::move(fd), who), who), address};
    std::string why;
    std::unique_ptr<Channel> channel;
    try {
      channel = shm_accept(fd, deadline, who, &why);
    } catch (const Error& e) {
      COLLIE_LOG(kWarn) << "rank " << rank_ << ": dropped the local connection of " << who
                        << " during the shared-memory set-up: " << e.what();
      return std::nullopt;
    }
    if (!channel) {
      COLLIE_LOG(kWarn) << "rank " << rank_ << ": shared memory with " << who << " does not work ("
                        << why << "); using the socket instead";
      channel = make_local_channel(std::move(fd), who);
    }
    return Arrival{hello.rank, std::move(channel), address};
  }

  Store& store_;
  const int rank_, size_;
  const uint32_t group_;
  const std::string prefix_;
  const int buffer_bytes_;
  const TransportChoice choice_;
  const std::string base_;  // "<prefix>/collectives/<round>": where the records are
  const std::string host_;
  tcp::acceptor tcp_listener_;
  const int tcp_listener_fd_;
  const tcp tcp_protocol_;  // what tcp_listener_ accepts: v4 or v6
  UniqueFd unix_listener_;
  const size_t ring_bytes_;
  const PeerIdentity identity_, unix_identity_;
  const JobSecret& secret_;
  PeerGate tcp_gate_;
  std::optional<PeerGate> unix_gate_;
  std::map<int, Record> records_;
};

// Listens on `host` (a name or a literal: its first address) at a port the
// kernel picks. The acceptor's socket stays non-blocking: PeerGate accepts
// on its native handle when poll() says a peer is waiting.
tcp::acceptor listen_tcp(const std::string& host, int rank, int size, int buffer_bytes,
                         std::string* address) {
  tcp::resolver resolver(data_io_context());
  asio::error_code ec;
  const tcp::resolver::results_type endpoints =
      resolver.resolve(host, "0", tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    throw InvalidArgument(str_cat("rank ", rank, " cannot listen on '", host,
                                  "': ", ec ? ec.message() : "it has no address"));
  }
  const tcp::endpoint at = endpoints.begin()->endpoint();
  tcp::acceptor acceptor = new_socket<tcp::acceptor>(at.protocol(), "to listen on", rank, size);
  set_buffers(acceptor, buffer_bytes);
  if (acceptor.bind(at, ec); ec) {
    throw NetworkError(
        str_cat("rank ", rank, " cannot listen on ", host, ":0: bind(): ", ec.message()));
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    throw NetworkError(
        str_cat("rank ", rank, " cannot listen on ", host, ":0: listen(): ", ec.message()));
  }
  const tcp::endpoint bound = acceptor.local_endpoint(ec);
  if (ec) {
    throw NetworkError(str_cat("rank ", rank, " cannot read its listening port on ", host,
                               ": getsockname(): ", ec.message()));
  }
  *address = join_address(bound.address().to_string(), bound.port());
  return acceptor;
}

UniqueFd listen_unix(const std::string& name) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fd;
  socklen_t len;
  const sockaddr_un sa = abstract_address(name, &len);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), len) != 0 ||
      ::listen(fd.get(), SOMAXCONN) != 0) {
    COLLIE_LOG(kWarn) << "cannot listen on the local socket @" << name << ": "
                      << std::strerror(errno) << "; peers on this host will use TCP";
    return UniqueFd();
  }
  return fd;
}

}  // namespace

std::string join_address(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? str_cat("[", host, "]:", port)
                                             : str_cat(host, ":", port);
}

std::string numeric_host(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  } else {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  }
  return buf;
}

std::string tcp_address(const sockaddr* sa) {
  const uint16_t port =
      ntohs(sa->sa_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port
                                      : reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
  return join_address(numeric_host(sa), port);
}

TransportChoice resolve_transport(const std::string& option) {
  std::string v = option;
  if (v.empty()) {
    const char* env = std::getenv("COLLIE_TRANSPORT");
    v = env ? env : "";
  }
  if (v.empty() || v == "auto") return TransportChoice::kAuto;
  if (v == "tcp") return TransportChoice::kTcp;
  if (v == "shm") return TransportChoice::kShm;
  throw InvalidArgument(str_cat("transport '", v,
                                "' (COLLIE_TRANSPORT or the transport option): expected auto, "
                                "tcp or shm"));
}

std::string host_id(const std::string& option) {
  if (!option.empty()) return option;
  if (const char* env = std::getenv("COLLIE_HOST_ID"); env && *env) return env;
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  struct stat st {};
  const unsigned long long netns =
      ::stat("/proc/self/ns/net", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
  return str_cat(name, "/", read_first_line("/proc/sys/kernel/random/boot_id"), "/", netns);
}

std::string describe_fd_failure(std::string_view call, int err, int size) {
  std::string text = str_cat(call, ": ", std::strerror(err));
  if (err == EMFILE || err == ENFILE) {
    rlimit rl{};
    const std::string limit = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                                  ? std::to_string(static_cast<unsigned long long>(rl.rlim_cur))
                                  : std::string("unknown");
    text +=
        str_cat(" (RLIMIT_NOFILE is ", limit, "; a rank of a world of ", size,
                " holds two listeners and one descriptor per peer it talks to, up to ", size - 1,
                " when its algorithms talk to every peer, on top of what the "
                "process already holds: raise `ulimit -n`)");
  }
  return text;
}

std::string resolve_bind_host(const std::string& bind_host) {
  if (!bind_host.empty()) return bind_host;
  if (const char* ifname = std::getenv("COLLIE_SOCKET_IFNAME"); ifname && *ifname) {
    return ip_of_interface(ifname);
  }
  if (const char* master = std::getenv("MASTER_ADDR"); master && *master) {
    const std::string routed = route_to(master);
    if (!routed.empty()) return routed;
  }
  return "127.0.0.1";
}

Bootstrap join_group(Store& store, int rank, int size, const CommunicatorOptions& options) {
  const Deadline deadline(options.timeout);
  const TransportChoice choice = resolve_transport(options.transport);
  const std::string host = resolve_bind_host(options.bind_host);
  const std::string me = host_id(options.host_id);

  // Listen first, publish second: a peer that reads our record can connect
  // at once (the kernel queues it until we accept).
  Bootstrap out;
  tcp::acceptor tcp_listener =
      listen_tcp(host, rank, size, options.socket_buffer_bytes, &out.address);
  std::string unix_name;
  UniqueFd unix_listener;
  if (choice != TransportChoice::kTcp) {
    unix_name = str_cat("collie-", group_hash(options.store_prefix), "-", rank, "-", random_hex());
    unix_listener = listen_unix(unix_name);
    if (!unix_listener) unix_name.clear();
  }
  const Record mine{out.address, me, unix_name, std::to_string(::getpid())};

  // The join round: the n-th arrival at this prefix joins round (n-1)/size,
  // so a group re-created under the same name never reads an earlier
  // group's records.
  const std::string prefix = str_cat(options.store_prefix, "/collectives");
  const int64_t arrival = store.add(str_cat(prefix, "/arrivals"), 1);
  const std::string base = str_cat(prefix, "/", (arrival - 1) / size);
  auto key = [&](std::string_view what) { return str_cat(base, "/", what); };
  const std::string ready_key = key("ready");

  // Publishing with compare_set catches a second process with this rank:
  // it finds the first one's record and tells every rank.
  const std::string mine_text = mine.encode();
  const std::string addr_key = key(str_cat("addr/", rank));
  const std::string current = to_string(store.compare_set(addr_key, {}, to_bytes(mine_text)));
  if (current != mine_text) {
    const Record first = Record::decode(current);
    const std::string error = str_cat("rank ", rank, " joined group '", options.store_prefix,
                                      "' twice, from ", first.describe(), " and from ",
                                      mine.describe(), ": two processes were given the same RANK");
    // The extra process also pushed a rank of this group into the next
    // round: tell that one too.
    store.set(ready_key, str_cat("error: ", error));
    store.set(str_cat(prefix, "/", (arrival - 1) / size + 1, "/ready"), str_cat("error: ", error));
    throw NetworkError(error);
  }
  const std::string host_key = key(str_cat("host/", me));
  store.add(host_key, 1);
  if (store.add(key("joined"), 1) == size) store.set(ready_key, "ok");
  try {
    store.wait({ready_key}, deadline.remaining());
  } catch (const TimeoutError&) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(key(str_cat("addr/", r)));
    std::vector<std::string> missing;
    for (int r = 0; r < size; ++r) {
      if (!store.check({keys[r]})) missing.push_back(std::to_string(r));
    }
    // Leave no trace, so that a retry under the same name is no duplicate.
    store.delete_key(addr_key);
    store.add(key("joined"), -1);
    throw TimeoutError(str_cat("rank ", rank, " (", out.address, ") waited ", deadline.describe(),
                               " for rank(s) ", join(missing, ", "), " to join group '",
                               options.store_prefix,
                               "' (they never published their address "
                               "under '",
                               base, "/addr/<rank>')"));
  }
  const std::string ready = to_string(store.get(ready_key));
  if (ready.rfind("error: ", 0) == 0) throw NetworkError(ready.substr(7));
  out.local_ranks = static_cast<int>(store.add(host_key, 0));

  auto linker = std::make_unique<Linker>(store, rank, size, options, choice, base, me,
                                         std::move(tcp_listener), std::move(unix_listener),
                                         out.address, unix_name);
  // The ring neighbours, which nearly every algorithm talks to, in one
  // request; other peers are read when first needed. A group spanning hosts
  // reads every record instead: the hierarchical algorithms need the host
  // of every rank (and talk to most of them).
  const int left = (rank + size - 1) % size, right = (rank + 1) % size;
  std::vector<int> peers{left};
  if (right != left) peers.push_back(right);
  const bool host_map =
      out.local_ranks < size && choice != TransportChoice::kTcp && size <= kHostMapMaxRanks;
  if (host_map) {
    peers.clear();
    for (int p = 0; p < size; ++p) peers.push_back(p);
  }
  std::vector<std::string> keys;
  for (int p : peers) keys.push_back(key(str_cat("addr/", p)));
  const std::vector<Bytes> values = store.multi_get(keys);
  std::map<std::string, int> hosts;  // host id -> host number
  for (size_t i = 0; i < peers.size(); ++i) {
    Record r = Record::decode(to_string(values[i]));
    if (host_map) out.host_of.push_back(hosts.emplace(r.host, hosts.size()).first->second);
    if (peers[i] != rank) linker->remember(peers[i], std::move(r));
  }
  out.linker = std::move(linker);
  COLLIE_LOG(kDebug) << "rank " << rank << " joined as " << out.address << " with "
                     << out.local_ranks << " rank(s) on its host";
  return out;
}

}  // namespace collie
