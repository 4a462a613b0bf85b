// The PeerLinker of one communicator (transport.h): the channel factories
// (channel_factory.h) that listen for and reach peers, the gates that
// authenticate what connects to their listeners (peer_auth.h), and the
// records of the peers read from the store so far. A peer is reached
// through the first factory that wants it (the local channel, shared memory
// when it works, for a peer with this rank's host id; TCP otherwise).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collie/collectives/communicator.h"
#include "collie/collectives/transport/channel_factory.h"
#include "collie/collectives/transport/transport.h"
#include "collie/rendezvous/store.h"

namespace collie {

enum class TransportChoice { kAuto, kTcp, kShm };

struct LinkerSetup {
  std::string base;     // "<prefix>/collectives/<round>": where the records are
  std::string host_id;  // this rank's
  std::string address;  // this rank's "host:port", as published
  // Most preferred first; each listens already, and reaches the peers it
  // wants.
  std::vector<std::unique_ptr<ChannelFactory>> factories;
};

// The linker of rank `rank` of `size`, knowing the records in `known`
// already (the others are read from the store when first needed).
std::unique_ptr<PeerLinker> make_linker(Store& store, int rank, int size,
                                        const CommunicatorOptions& options, TransportChoice choice,
                                        LinkerSetup setup, std::map<int, PeerRecord> known);

}  // namespace collie
