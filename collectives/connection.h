// Connection: one non-blocking TCP connection to one peer, with a FIFO of
// posted sends and a FIFO of posted receives that the Transport advances
// without ever blocking. A send writes header and payload with one sendmsg;
// a receive reads the header alone, checks it against the call it expected,
// and only then reads the payload straight into the caller's buffer, so that
// a mismatched call never writes a byte of another call's data there.
//
// Bytes that arrive while nothing is posted stay in the kernel, except after
// the peer hung up: then absorb() reads them into a stash (so that an abort
// frame behind them can be found), and later receives take from the stash
// first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <sys/types.h>

#include "collectives/wire.h"

namespace collie {

// What a receive found instead of the data it expected.
enum class RecvProblem { kNone, kMismatch, kAbort, kGoodbye, kEof, kError };

// Where a connection puts a point-to-point frame (FrameType::kP2P) it meets
// in the stream, whatever it was reading for: the Transport's inbox
// (p2p_inbox.h), which matches it with a posted receive or buffers it.
class P2PSink {
 public:
  virtual ~P2PSink() = default;
  // The header of a p2p frame from `peer` has arrived: sets where its
  // payload goes (may be null when it has none), or returns false to refuse
  // it (a size mismatch with the matching receive; the sink says why).
  virtual bool begin_frame(int peer, const WireHeader& header, void** payload) = 0;
  // Its payload has arrived entirely.
  virtual void end_frame(int peer) = 0;
};

class Connection {
 public:
  Connection(int fd, int peer, std::string address);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd() const { return fd_; }
  int peer() const { return peer_; }
  const std::string& address() const { return address_; }
  // "rank 3 (10.0.0.7:41234)"
  std::string name() const;

  void post_send(const WireHeader& header, const void* payload);
  // Expects a data frame equal to `expected` (payload_bytes included).
  void post_recv(const WireHeader& expected, void* data);
  bool send_pending() const { return !sends_.empty(); }
  bool recv_pending() const { return !recvs_.empty(); }
  uint64_t sends_completed() const { return sends_completed_; }
  uint64_t recvs_completed() const { return recvs_completed_; }
  size_t sends_queued() const { return sends_.size(); }
  size_t recvs_queued() const { return recvs_.size(); }

  // Write as much as the socket takes. Returns bytes moved; on a socket
  // error returns -1 with the errno in *err.
  long progress_send(int* err);
  // Read as much as is there into the posted receives. Returns bytes moved,
  // or -1 with *problem set (and *err for kError). After kMismatch, kAbort or
  // kGoodbye, received_header() is what arrived.
  long progress_recv(RecvProblem* problem, int* err);
  const WireHeader& received_header() const { return problem_header_; }

  // The text of the abort frame progress_recv() reported, read to its end
  // with a short deadline; empty if it cannot be read.
  std::string read_abort_text();

  // After a hang-up with nothing posted: read everything left into the stash
  // and look for a control frame. Returns kAbort (text in *abort_text),
  // kGoodbye, kEof (closed without either: the peer died) or kNone (the
  // peer has not finished sending yet).
  RecvProblem absorb(std::string* abort_text);
  bool finished() const { return eof_; }

  // Point-to-point frames go to `sink` (set once, before any traffic):
  // progress_recv() hands one that comes ahead of a posted receive's frame to
  // it and reads on; progress_p2p() reads them when nothing is posted.
  void set_p2p_sink(P2PSink* sink) { sink_ = sink; }
  // With no receive posted: reads the p2p frames at the head of the stream
  // (and the rest of one begun) into the sink, until a frame of another kind
  // is next (*other_next) or the socket has nothing more. Returns bytes
  // moved, or -1 with *problem: kEof, kError (*err), or kMismatch when the
  // sink refused a frame (received_header() is its header).
  long progress_p2p(RecvProblem* problem, int* err, bool* other_next);
  // A p2p frame's payload is still being read.
  bool p2p_frame_open() const { return p2p_.open; }

  // Whether the stream is between frames (nothing of the next one read).
  bool at_frame_boundary() const {
    return !p2p_.open && (recvs_.empty() || recvs_.front().got == 0);
  }
  // At a frame boundary: the header of the next frame, without consuming
  // it. False when fewer than kHeaderBytes have arrived.
  bool peek_header(WireHeader* header);
  // With nothing posted and an abort frame next: consumes it and returns
  // its text.
  std::string take_abort_frame();

  // For an abort notice: the bytes still owed on a half-written message
  // (the receiver is mid-frame and needs them to find the next header).
  size_t partial_send_remaining() const;
  // Drops every posted operation (after an error).
  void clear();

 private:
  struct SendOp {
    WireHeader header;
    const uint8_t* data;
    size_t sent = 0;  // header bytes included
  };
  struct RecvOp {
    WireHeader expected;
    uint8_t* data;
    WireHeader header;  // what arrived
    size_t got = 0;     // header bytes included
  };
  size_t take_from_stash(RecvOp& op);
  // Frames with at most this much payload are read with one read() into a
  // bounce buffer (header checked before the payload is copied out).
  static constexpr size_t kBounceBytes = 4096;
  ssize_t read_small_frame(RecvOp& op);

  // The p2p frame whose payload is being read into the sink's buffer.
  struct P2PFrame {
    bool open = false;
    WireHeader header;
    uint8_t* dest = nullptr;
    size_t got = 0;  // payload bytes
  };
  bool open_p2p(const WireHeader& header);
  long read_p2p_payload(RecvProblem* problem, int* err);

  int fd_;
  int peer_;
  P2PSink* sink_ = nullptr;
  P2PFrame p2p_;
  std::string address_;
  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  uint64_t sends_completed_ = 0;
  uint64_t recvs_completed_ = 0;
  std::vector<uint8_t> stash_;
  size_t stash_pos_ = 0;
  bool eof_ = false;
  WireHeader problem_header_;
  std::string problem_text_;  // abort text bytes already read
};

}  // namespace collie
