// P2PState: a Transport's point-to-point book-keeping, apart from the
// connections it drives (transport_p2p.cc). It holds:
//
//   - the inbox (p2p_inbox.h), where messages meet their receives;
//   - the send side: each peer's count of messages sent to it (the p2p
//     frames' sequence numbers) and where its connection's queued p2p sends
//     end (sends_queued()), so that a collective's completion counters
//     leave them out;
//   - the read side: which connections a posted receive may take a frame
//     from (wants()), less those whose next frame is a later collective's
//     (block());
//   - what is running, for error messages: the batch wait_p2p() waits for
//     and its ops, formatted only when a message needs them (describe());
//   - the single-copy sends' slots (copy_slot()): a descriptor the frame
//     carries and the done word the receiver sets, kCopySlots per peer,
//     owned here so that a receiver that answers late never writes into
//     memory that is gone (~P2PState keeps the slots a receiver may still
//     set).
//
// The hot path (Transport::progress_all(), pending(), rebase()) calls the
// inline methods here on a member held by value: no virtual call, no
// indirection. Touched by the transport's thread only.
// Invariants: a connection's p2p sends are a prefix of its send queue (a
// call's own sends are out before the call ends), so the sends queued on it
// up to queued_until()'s mark are point-to-point ones; running() is false
// inside a collective, and waiting() is set only inside wait_p2p().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collie/base/types.h"
#include "collie/collectives/transport/connection.h"
#include "collie/collectives/transport/p2p_inbox.h"

namespace collie {

// A batch of sends and receives that Transport::start_p2p() posted
// (Transport::P2PRequest).
struct P2PRequest {
  std::vector<P2POp> ops;  // start_p2p's copy (empty: the caller's)
  size_t op_count = 0;
  std::vector<P2PInbox::Recv> recvs;  // sized once: the inbox points into it
  std::vector<size_t> recv_op;        // recvs[k] is ops[recv_op[k]]
  struct Send {
    int peer;
    uint64_t completed;  // the connection's sends_completed() once it is out
    // A single-copy send is done once the receiver has set *done to
    // done_value (P2PState::CopySlot); null for one that travels inline.
    const std::atomic<uint64_t>* done = nullptr;
    uint64_t done_value = 0;
    uint64_t bytes = 0;  // the message's (for a timeout's message)
    bool out() const {
      return done == nullptr || done->load(std::memory_order_acquire) == done_value;
    }
  };
  std::vector<Send> sends;
};

class P2PState {
 public:
  explicit P2PState(int size)
      : inbox_(size),
        sent_(size, 0),
        sends_until_(size, 0),
        blocked_(size, UINT64_MAX),
        copy_slots_(size),
        copies_(size, 0) {}
  ~P2PState();
  P2PState(const P2PState&) = delete;
  P2PState& operator=(const P2PState&) = delete;

  // A single-copy send's slot: the frame's payload is `descriptor`, and the
  // receiver sets `done` to descriptor.done_value once it has read the
  // message. Slots are reused round robin, each only once its last
  // message was read.
  struct CopySlot {
    std::atomic<uint64_t> done{0};
    P2PCopyDescriptor descriptor;
  };
  static constexpr size_t kCopySlots = 64;
  // A free slot for a send of `bytes` at `address` to `peer`, its
  // descriptor filled in; null when the next one is still in use (the send
  // then travels inline).
  CopySlot* copy_slot(int peer, const void* address, size_t bytes);
  // Marks every single-copy send not read yet as given up
  // (kP2PCopyAbandoned in its done word, which no receiver's answer turns
  // back into "done" for a later message: the slot is never reused). Before
  // a failure reaches the caller, who may then free the buffers.
  void abandon_copies();
  P2PInbox& inbox() { return inbox_; }
  const P2PInbox& inbox() const { return inbox_; }

  // Sends. The sequence number of the next message to `peer`.
  uint64_t next_seq(int peer) { return ++sent_[peer]; }
  // Every p2p send queued on the connection to `peer` is out once its
  // sends_completed() reaches `completed`.
  void queued_until(int peer, uint64_t completed) { sends_until_[peer] = completed; }
  // Point-to-point sends still queued on `c` (ahead of any collective's,
  // which queue behind them).
  uint64_t sends_queued(const Connection& c) const {
    const uint64_t done = c.sends_completed();
    const uint64_t until = sends_until_[c.peer()];
    return until > done ? until - done : 0;
  }
  // Whether `c` has sends queued that are a collective's.
  bool call_sends_pending(const Connection& c) const { return c.sends_queued() > sends_queued(c); }

  // Reads. Whether `c` must be read for point-to-point during the call of
  // sequence number `seq`: a p2p frame is half read, or a posted receive may
  // take its next frame and that frame was not found to be a collective's.
  bool wants(const Connection& c, uint64_t seq) const {
    return c.p2p_frame_open() || (inbox_.wants(c.peer()) && blocked_[c.peer()] != seq);
  }
  // The next frame from `peer` is no p2p message (a later collective's
  // data): nothing behind it can be read before that collective, so
  // receives from any source stop reading the connection for the call of
  // sequence number `seq`.
  void block(int peer, uint64_t seq) { blocked_[peer] = seq; }

  // What runs. enter(): a point-to-point operation runs, on `ops` (empty:
  // unnamed, "send/recv"); leave(): none does (a collective, or between
  // calls). begin_wait(): wait_p2p() waits for `r`, named by `ops`;
  // end_wait() undoes it.
  void enter(std::span<const P2POp> ops) {
    running_ = true;
    ops_ = ops;
  }
  void leave() {
    running_ = false;
    ops_ = {};
  }
  void begin_wait(const P2PRequest& r, std::span<const P2POp> ops) {
    enter(ops);
    waiting_ = &r;
  }
  void end_wait() {
    waiting_ = nullptr;
    leave();
  }
  bool running() const { return running_; }
  const P2PRequest* waiting() const { return waiting_; }
  // The running ops for messages: "send to rank 1 (float32 x 4, tag 0)",
  // "batch_isend_irecv [...]", or "send/recv" when unnamed.
  std::string describe() const;

 private:
  P2PInbox inbox_;
  std::vector<uint64_t> sent_;         // by peer: messages sent to it
  std::vector<uint64_t> sends_until_;  // by peer: see queued_until()
  // blocked_[p] == a call's seq: rank p's next frame during that call is a
  // collective's (block()).
  std::vector<uint64_t> blocked_;
  // The last message to `peer` that slot `slot` carried (0: none), whose
  // value its done word holds once that message was read.
  uint64_t last_on_slot(size_t peer, uint64_t slot) const;
  // Whether `peer` had sends not read yet (now given up).
  bool abandon_copies_of(size_t peer);
  std::vector<std::unique_ptr<CopySlot[]>> copy_slots_;  // by peer, made on first use
  std::vector<uint64_t> copies_;                         // by peer: single-copy sends so far
  bool running_ = false;
  std::span<const P2POp> ops_;
  const P2PRequest* waiting_ = nullptr;  // wait_p2p()'s batch
};

}  // namespace collie
