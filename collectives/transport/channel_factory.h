// ChannelFactory: one kind of channel as the linker (linker.h) reaches peers
// through it: it listens, says what to publish in this rank's record,
// decides whether a peer is for it, connects, and turns an admitted
// connection into a channel. The linker holds a list of them, most preferred
// first, and names none of them: a third kind of channel is a third factory.
// Built by the folders' factories, declared below and defined in shm/ and
// tcp/: the factories are the only code that names a channel type (the
// join and the linker include this header, never a channel's).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "collie/base/deadline.h"
#include "collie/base/str_cat.h"
#include "collie/base/unique_fd.h"
#include "collie/collectives/transport/channel.h"

namespace collie {

// What each rank publishes in the store, one "key=value" line each:
// "tcp=<host:port>" (its address), "host=<id>", each factory's address
// under the factory's key ("unix=<name>"), and "pid=<pid>".
struct PeerRecord {
  std::map<std::string, std::string, std::less<>> fields;

  std::string get(std::string_view key) const {
    auto it = fields.find(key);
    return it == fields.end() ? std::string() : it->second;
  }
  std::string tcp() const { return get("tcp"); }
  std::string host() const { return get("host"); }
  // "tcp=...\nhost=...\n<the factories' keys>...\npid=...": the address first,
  // for people reading the store.
  std::string encode() const {
    std::string out = str_cat("tcp=", tcp(), "\nhost=", host());
    for (const auto& [k, v] : fields)
      if (k != "tcp" && k != "host" && k != "pid") out += str_cat("\n", k, "=", v);
    return str_cat(out, "\npid=", get("pid"));
  }
  static PeerRecord decode(const std::string& text) {
    PeerRecord r;
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(pos, end - pos);
      if (const auto eq = line.find('='); eq != std::string::npos)
        r.fields[line.substr(0, eq)] = line.substr(eq + 1);
      pos = end + 1;
    }
    return r;
  }
  // "10.0.0.7:41234 (pid 123, host id ab12...)"
  std::string describe() const {
    return str_cat(tcp(), " (pid ", get("pid"), ", host id ", host().substr(0, 16), ")");
  }
};

class ChannelFactory {
 public:
  virtual ~ChannelFactory() = default;

  // The record key of this factory's address ("tcp", "unix").
  virtual std::string_view key() const = 0;
  // What this rank publishes under key(); "" when it does not listen.
  virtual std::string address() const = 0;
  // The listening socket the linker's PeerGate accepts on; -1: none.
  virtual int listen_fd() const = 0;

  // Whether to reach the peer of `record` through this factory.
  virtual bool wants(const PeerRecord& record) const = 0;
  // Sends this rank's handshake and hello on a connected socket.
  using Introduce = std::function<void(int fd)>;
  // Connects to the peer of `record`, introduces this rank and returns the
  // channel; null with *why when the peer is out of this factory's reach
  // (the linker tries the next one). Throws what a failure to reach the
  // peer at all is (NetworkError, TimeoutError).
  virtual std::unique_ptr<Channel> connect(const PeerRecord& record, int peer,
                                           const Deadline& deadline, const Introduce& introduce,
                                           std::string* why) = 0;
  // The channel over a connection the gate admitted from `who`; null (and
  // a WARN) when its set-up failed: the peer died, or it was none.
  virtual std::unique_ptr<Channel> accept(UniqueFd fd, const Deadline& deadline,
                                          const std::string& who) = 0;
};

// The local factory (shm/local_factory.cc): listens on the abstract Unix
// socket `name` (with a WARN, and no listener, when it cannot: the peers on
// this host then use TCP) and reaches the peers with host id `host_id`,
// setting up shared memory over the socket with rings of `ring_bytes`
// (CommunicatorOptions::shm_buffer_bytes: 0 is the default; InvalidArgument
// outside 4096 to 2^34).
std::unique_ptr<ChannelFactory> make_local_factory(const std::string& name,
                                                   const std::string& host_id, size_t ring_bytes,
                                                   int rank);

// The TCP factory (tcp/tcp_factory.cc): listens on `host` (a name or a
// literal: its first address) at a port the kernel picks; with `connects`,
// reaches every peer that published a TCP address (without, it only
// accepts: COLLIE_TRANSPORT=shm). `rank` and `size` are for messages.
std::unique_ptr<ChannelFactory> make_tcp_factory(const std::string& host, int rank, int size,
                                                 int buffer_bytes, bool connects);

}  // namespace collie
