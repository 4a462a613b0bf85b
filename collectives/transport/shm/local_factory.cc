// The local channel's factory (channel_factory.h): an abstract Unix socket
// for the peers with this rank's host id, over which each pair sets up its
// shared memory, keeping the socket itself as the channel when that does not
// work.
#include <cstring>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/transport/channel_factory.h"
#include "collie/collectives/transport/shm/shm_channel.h"
#include "collie/collectives/transport/shm/shm_ring.h"
#include "collie/collectives/transport/sockets.h"
#include "collie/collectives/transport/tcp/tcp_channel.h"

namespace collie {
namespace {

// CommunicatorOptions::shm_buffer_bytes: 0 is the default.
size_t shm_ring_bytes(size_t option) {
  if (option == 0) return kDefaultShmRingBytes;
  if (option < 4096 || option > (size_t{1} << 34))
    throw InvalidArgument(str_cat("CommunicatorOptions::shm_buffer_bytes (COLLIE_SHM_BYTES) ",
                                  option, ": expected 4096 to 2^34"));
  // Whole lines: the second ring of a segment stays aligned.
  return option & ~(kShmLineBytes - 1);
}

class LocalFactory final : public ChannelFactory {
 public:
  LocalFactory(const std::string& name, std::string host_id, size_t ring_bytes, int rank)
      : host_id_(std::move(host_id)),
        ring_bytes_(ring_bytes),
        rank_(rank),
        listener_(listen_unix(name)),
        name_(listener_ ? name : std::string()) {}

  std::string_view key() const override { return "unix"; }
  std::string address() const override { return name_; }
  int listen_fd() const override { return listener_ ? listener_.get() : -1; }
  bool wants(const PeerRecord& record) const override {
    return record.host() == host_id_ && !record.get("unix").empty();
  }

  std::unique_ptr<Channel> connect(const PeerRecord& record, int peer, const Deadline& deadline,
                                   const Introduce& introduce, std::string* why) override {
    const std::string who = str_cat("rank ", peer, " (", record.tcp(), ")");
    int err = 0;
    UniqueFd fd = connect_unix_to(record.get("unix"), deadline, &err);
    if (!fd) {
      *why = str_cat(who, " has this rank's host id but its local socket is out of reach (",
                     std::strerror(err), ")");
      return nullptr;
    }
    introduce(fd.get());
    std::string no_shm;
    if (auto channel = shm_connect(fd, ring_bytes_, deadline, who, &no_shm)) return channel;
    COLLIE_LOG(kWarn) << "rank " << rank_ << ": shared memory with " << who << " does not work ("
                      << no_shm << "); using the socket instead";
    return make_local_channel(std::move(fd), who);
  }

  // A peer that fails the shared-memory set-up (it died, or it was not a
  // peer) is dropped with a WARN: a real peer that died is found by the
  // collective that waits for it.
  std::unique_ptr<Channel> accept(UniqueFd fd, const Deadline& deadline,
                                  const std::string& who) override {
    std::string no_shm;
    std::unique_ptr<Channel> channel;
    try {
      channel = shm_accept(fd, deadline, who, &no_shm);
    } catch (const Error& e) {
      COLLIE_LOG(kWarn) << "rank " << rank_ << ": dropped the local connection of " << who
                        << " during the shared-memory set-up: " << e.what();
      return nullptr;
    }
    if (channel) return channel;
    COLLIE_LOG(kWarn) << "rank " << rank_ << ": shared memory with " << who << " does not work ("
                      << no_shm << "); using the socket instead";
    return make_local_channel(std::move(fd), who);
  }

 private:
  const std::string host_id_;
  const size_t ring_bytes_;
  const int rank_;
  UniqueFd listener_;
  const std::string name_;  // "" when not listening
};

}  // namespace

std::unique_ptr<ChannelFactory> make_local_factory(const std::string& name,
                                                   const std::string& host_id, size_t ring_bytes,
                                                   int rank) {
  return std::make_unique<LocalFactory>(name, host_id, shm_ring_bytes(ring_bytes), rank);
}

}  // namespace collie
