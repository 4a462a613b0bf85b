// P2PInbox: where point-to-point messages meet their receives. A send is a
// kP2P frame on the connection to its peer, between (never inside) the
// collectives' frames; whichever of the receiving rank's calls is reading
// that connection when the frame comes hands it here (Connection's
// P2PSink). A frame that matches a posted receive is read straight into the
// receive's buffer; one that arrives first is buffered, and the receive
// posted later takes it. Matching is torch's: by sender and tag, in FIFO
// order per (sender, tag), a receive from any source taking the earliest
// arrival of its tag. Unmatched messages are buffered without a bound (as
// an eager MPI protocol does), so that two ranks that both send before they
// receive never deadlock, whatever the size.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "collie/collectives/transport/connection.h"

namespace collie {

class P2PInbox final : public P2PSink {
 public:
  // One receive, owned by the caller until it is done or clear() is called.
  struct Recv {
    int peer;  // a rank, or kAnySource
    int tag;
    void* data;
    size_t bytes;
    bool done = false;
    int source = -1;  // who sent the message, once done
  };

  explicit P2PInbox(int size) : in_flight_(size) {}

  // Takes the earliest buffered message that matches, else waits for one.
  // False when the matching message's size differs (error() says how).
  bool post(Recv* recv);
  // Receives posted and not done yet.
  bool has_pending() const { return pending_ > 0; }
  // Whether a posted receive may take a frame from `peer`: the connections
  // the Transport must read while point-to-point operations wait.
  bool wants(int peer) const override;
  // Whether a posted receive names `peer` itself (not any source).
  bool wants_exactly(int peer) const;
  // "receive from rank 1 (tag 0, 40 bytes)" for each posted receive.
  std::vector<std::string> describe_posted() const;
  // Receives completed so far (the Transport's progress counter).
  uint64_t completed() const { return completed_; }
  const std::string& error() const { return error_; }
  // Drops every posted receive (after an error; buffered messages stay).
  void clear();

  bool begin_frame(int peer, const WireHeader& header, void** payload) override;
  void end_frame(int peer) override;

 private:
  struct Message {
    int peer;
    WireHeader header;
    // Not zero-filled: the frame's payload overwrites every byte.
    std::unique_ptr<uint8_t[]> payload;
    bool complete = false;
    Recv* claimed = nullptr;  // a receive matched while the payload was arriving
  };
  struct InFlight {
    Recv* recv = nullptr;
    Message* message = nullptr;
  };
  void finish(Recv* recv, int peer);
  std::string size_mismatch(int peer, const WireHeader& h, const Recv& r) const;

  std::list<Message> buffered_;      // in arrival order, across peers
  std::vector<Recv*> posted_;        // in posting order
  std::vector<InFlight> in_flight_;  // by sender: the frame being read
  size_t pending_ = 0;
  uint64_t completed_ = 0;
  std::string error_;
};

}  // namespace collie
