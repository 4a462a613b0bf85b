#include "collie/collectives/transport/linker.h"

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "collie/base/error.h"
#include "collie/base/host_port.h"
#include "collie/base/logging.h"
#include "collie/base/socket_io.h"
#include "collie/base/str_cat.h"
#include "collie/base/unique_fd.h"
#include "collie/collectives/transport/peer_auth.h"
#include "collie/collectives/transport/sockets.h"
#include "collie/collectives/transport/wire.h"

namespace collie {
namespace {

// What a connecting rank sends after the handshake (then its address).
struct Hello {
  uint32_t magic;
  uint32_t group;
  int32_t rank;
  int32_t size;
  uint32_t address_bytes;
};

// CommunicatorOptions::shm_buffer_bytes: 0 is the default.
class Linker final : public PeerLinker {
 public:
  Linker(Store& store, int rank, int size, const CommunicatorOptions& options,
         TransportChoice choice, LinkerSetup setup, std::map<int, PeerRecord> known)
      : store_(store),
        rank_(rank),
        size_(size),
        group_(group_hash(options.store_prefix)),
        prefix_(options.store_prefix),
        choice_(choice),
        base_(std::move(setup.base)),
        host_(std::move(setup.host_id)),
        identity_{group_, size, rank, setup.address},
        secret_(JobSecret::from_env()),
        factories_(std::move(setup.factories)),
        records_(std::move(known)) {
    for (size_t i = 0; i < factories_.size(); ++i) {
      const ChannelFactory& f = *factories_[i];
      if (f.listen_fd() < 0) continue;
      // The gate of a listener other than the rank's address names both.
      PeerIdentity self = identity_;
      if (f.address() != setup.address)
        self.address = str_cat(setup.address, " (", f.key(), " ", f.address(), ")");
      gates_.push_back(
          {i, std::make_unique<PeerGate>(f.listen_fd(), secret_, std::move(self), hello_format())});
    }
  }

  std::string address_of(int peer) const override {
    auto it = records_.find(peer);
    return it == records_.end() ? std::string("address not read yet") : it->second.tcp();
  }

  std::string last_refusal() const override {
    // The first listener's refusal that there is (the local one's are as
    // telling as TCP's).
    for (const auto& g : gates_)
      if (!g.gate->last_refusal().empty()) return g.gate->last_refusal();
    return "";
  }

  std::vector<int> refusing(const std::vector<int>& peers, Clock::time_point until) override {
    std::vector<int> dead;
    for (int peer : peers) {
      if (peer < 0 || peer >= size_ || peer == rank_) continue;
      try {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        if (left.count() <= 0) break;
        const HostPort hp =
            split_host_port(record(peer, Deadline(left)).tcp(), PortRule::kRequired);
        UniqueFd fd;
        const IoResult r =
            connect_tcp(hp.host, static_cast<uint16_t>(std::stoi(hp.port)), until, &fd);
        if (!r.ok() && r.error == ECONNREFUSED) dead.push_back(peer);
      } catch (const std::exception&) {
        // No record, or none readable: no evidence either way.
      }
    }
    return dead;
  }

  void poll_fds(std::vector<int>* fds) const override {
    for (const auto& g : gates_) {
      fds->push_back(factories_[g.factory]->listen_fd());
      // Handshakes in progress too: without them a peer's proof would wait
      // for the next arrival or the deadline before it is read.
      g.gate->pending_fds(fds);
    }
  }

  std::unique_ptr<Channel> connect(int peer, const Deadline& deadline,
                                   std::string* address) override {
    const PeerRecord& r = record(peer, deadline);
    *address = r.tcp();
    const std::string who = str_cat("rank ", peer, " (", r.tcp(), ")");
    if (choice_ == TransportChoice::kShm && r.host() != host_) {
      throw InvalidArgument(str_cat("COLLIE_TRANSPORT=shm, but rank ", peer, " (", r.tcp(),
                                    ", host id ", r.host(), ") is not on this rank's host (", host_,
                                    "): use COLLIE_TRANSPORT=auto or tcp"));
    }
    const ChannelFactory::Introduce introduce = [&](int fd) {
      this->introduce(fd, peer, deadline, who);
    };
    std::vector<std::string> missed;
    for (auto& f : factories_) {
      if (!f->wants(r)) continue;
      std::string why;
      if (auto channel = f->connect(r, peer, deadline, introduce, &why)) return channel;
      COLLIE_LOG(kWarn) << "rank " << rank_ << ": " << why << "; trying the next channel";
      missed.push_back(std::move(why));
    }
    throw NetworkError(str_cat(choice_ == TransportChoice::kShm ? "COLLIE_TRANSPORT=shm, but " : "",
                               "rank ", rank_, " has no channel to ", who,
                               missed.empty() ? std::string() : ": " + join(missed, "; ")));
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
        if (!store_.check({keys[r]})) missing[r] = record(r, quick).tcp();
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
    for (auto& g : gates_) {
      while (auto a = g.gate->accept(now))
        if (auto arrival = admit(*a, *factories_[g.factory], deadline))
          out.push_back(std::move(*arrival));
    }
    return out;
  }

 private:
  const PeerRecord& record(int peer, const Deadline& deadline) {
    auto it = records_.find(peer);
    if (it != records_.end()) return it->second;
    const std::string key = str_cat(base_, "/addr/", peer);
    try {
      store_.wait({key}, deadline.remaining());
    } catch (const TimeoutError& e) {
      throw TimeoutError(str_cat("rank ", rank_, " waited ", deadline.describe(), " for rank ",
                                 peer, "'s address under '", key, "': ", e.what()));
    }
    return records_[peer] = PeerRecord::decode(to_string(store_.get(key)));
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

  // A connection a gate admitted: its hello is read and fits; the factory
  // of its listener makes the channel (or drops it, saying why).
  std::optional<Arrival> admit(PeerGate::Admitted& admitted, ChannelFactory& factory,
                               const Deadline& deadline) {
    UniqueFd fd(admitted.fd);
    Hello hello{};
    std::memcpy(&hello, admitted.hello.data(), sizeof hello);
    const std::string address(admitted.hello.begin() + sizeof hello, admitted.hello.end());
    const std::string who = str_cat("rank ", hello.rank, " (", address, ")");
    auto channel = factory.accept(std::move(fd), deadline, who);
    if (!channel) return std::nullopt;
    return Arrival{hello.rank, std::move(channel), address};
  }

  struct Gate {
    size_t factory;  // index into factories_
    std::unique_ptr<PeerGate> gate;
  };

  Store& store_;
  const int rank_, size_;
  const uint32_t group_;
  const std::string prefix_;
  const TransportChoice choice_;
  const std::string base_;  // "<prefix>/collectives/<round>": where the records are
  const std::string host_;
  const PeerIdentity identity_;
  const JobSecret& secret_;
  std::vector<std::unique_ptr<ChannelFactory>> factories_;
  std::vector<Gate> gates_;
  std::map<int, PeerRecord> records_;
};

}  // namespace

std::unique_ptr<PeerLinker> make_linker(Store& store, int rank, int size,
                                        const CommunicatorOptions& options, TransportChoice choice,
                                        LinkerSetup setup, std::map<int, PeerRecord> known) {
  return std::make_unique<Linker>(store, rank, size, options, choice, std::move(setup),
                                  std::move(known));
}

}  // namespace collie
