// PeerLinker: how a Transport opens connections to its peers on demand
// (lazy connections), and what it asks the rest of the group through the
// store when a peer cannot be asked directly. The interface is the seam
// between the data path and the set-up: the Transport (transport.h) calls
// it only on a peer's first use, on the accepting side's poll, and on the
// failure paths, never per message. make_linker() (linker.h, linker.cc)
// builds the one implementation, over the channel factories
// (channel_factory.h); tests may pass their own, or none when every peer is
// connected up front.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/collectives/transport/channel.h"

namespace collie {

class PeerLinker {
 public:
  virtual ~PeerLinker() = default;
  // The connecting side (peer < own rank): the channel to `peer`, connected
  // and introduced within the deadline; *address gets the peer's address.
  virtual std::unique_ptr<Channel> connect(int peer, const Deadline& deadline,
                                           std::string* address) = 0;
  // The accepting side: listener (and pending handshake) fds to poll for
  // readability, and the peers whose connections completed since.
  virtual void poll_fds(std::vector<int>* fds) const = 0;
  struct Arrival {
    int peer;
    std::unique_ptr<Channel> channel;
    std::string address;
  };
  virtual std::vector<Arrival> accept_ready(const Deadline& deadline) = 0;
  // The published address of `peer`, for messages ("" if unknown).
  virtual std::string address_of(int peer) const = 0;
  // The last connection this rank's listeners refused, as "address: why"
  // ("" if none): a peer that never connects may be the one refused.
  virtual std::string last_refusal() const = 0;
  // The timeout probe's roll call, for the peers a rank has no connection
  // to: checks this rank in for call `seq`; with `wait`, waits until `until`
  // for the others and returns those that never checked in, with their
  // addresses (empty when the store cannot be reached).
  virtual std::map<int, std::string> roll_call(uint64_t seq, Clock::time_point until,
                                               bool wait) = 0;
  // Of `peers`, those whose listener refuses a TCP connection by `until`:
  // their process is gone (the kernel closed its socket). A peer that
  // accepts, or does not answer in time (stopped, or its link is down), is
  // not listed. For shrink's agreement; reads the peers' records from the
  // store where needed.
  virtual std::vector<int> refusing(const std::vector<int>& peers, Clock::time_point until) = 0;
};

}  // namespace collie
