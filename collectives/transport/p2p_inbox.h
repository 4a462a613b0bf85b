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
// receive never deadlock, whatever the size, but for single-copy messages.
//
// A single-copy message (wire.h, kP2PSingleCopy) brings only a descriptor:
// it is matched when the descriptor is in, and its receive reads the
// message from the sender's memory (process_vm_readv) straight into the
// receive's buffer, sets the sender's done word (process_vm_writev) and
// wakes it (P2PCopyPeers). Unmatched, only the descriptor is buffered: the
// sender's send waits for the read, as a rendezvous protocol's does.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "collie/collectives/transport/connection.h"
#include "collie/collectives/transport/wire.h"

namespace collie {

// What the inbox needs of the transport for single-copy messages.
class P2PCopyPeers {
 public:
  // The pid whose memory a message from `peer` is read from (0: none).
  virtual pid_t copy_pid(int peer) const = 0;
  // Wakes `peer`, whose done word was just set.
  virtual void wake(int peer) = 0;

 protected:
  ~P2PCopyPeers() = default;
};

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

  explicit P2PInbox(int size) : in_flight_(size), staged_(size) {}
  // Set once, before any single-copy message can arrive.
  void set_copy_peers(P2PCopyPeers* peers) { peers_ = peers; }

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
  bool end_frame(int peer) override;

 private:
  struct Message {
    int peer;
    WireHeader header;
    // Not zero-filled: the frame's payload overwrites every byte. Null for
    // a single-copy message, whose descriptor is `copy`.
    std::unique_ptr<uint8_t[]> payload;
    bool complete = false;
    Recv* claimed = nullptr;  // a receive matched while the payload was arriving
    bool single_copy = false;
    P2PCopyDescriptor copy;
    size_t bytes() const { return single_copy ? copy.bytes : header.payload_bytes; }
  };
  struct InFlight {
    Recv* recv = nullptr;
    Message* message = nullptr;
    bool single_copy = false;  // its descriptor is in staged_[peer]
  };
  void finish(Recv* recv, int peer);
  // The earliest posted receive that takes a message of `tag` from `peer`.
  std::vector<Recv*>::iterator find_posted(int peer, int tag);
  // Reads a single-copy message into `recv` and releases its sender.
  bool copy_in(int peer, const WireHeader& h, const P2PCopyDescriptor& d, Recv* recv);
  // Takes the single-copy message staged from `peer`: into a posted
  // receive, or buffered.
  bool end_single_copy(int peer);
  std::string size_mismatch(int peer, const WireHeader& h, size_t bytes, const Recv& r) const;

  std::list<Message> buffered_;      // in arrival order, across peers
  std::vector<Recv*> posted_;        // in posting order
  std::vector<InFlight> in_flight_;  // by sender: the frame being read
  // By sender: the single-copy frame whose descriptor is being read.
  struct Staged {
    WireHeader header;
    P2PCopyDescriptor copy;
  };
  std::vector<Staged> staged_;
  P2PCopyPeers* peers_ = nullptr;
  size_t pending_ = 0;
  uint64_t completed_ = 0;
  std::string error_;
};

}  // namespace collie
