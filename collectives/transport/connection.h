// Connection: the frames exchanged with one peer over one Channel (a TCP
// socket or a shared-memory ring pair), with a FIFO of posted sends and a
// FIFO of posted receives that the Transport advances without ever
// blocking. The Connection owns the frame format (wire.h): a send writes
// header and payload in one call; a receive reads the header alone, checks
// it against the call it expected, and only then reads the payload straight
// into the caller's buffer, so that a mismatched call never writes a byte of
// another call's data there. On the failure paths it walks the stream frame
// by frame (skim()) to find the control frame that says what happened.
//
// Bytes that arrive while nothing is posted stay in the channel, except
// after the peer hung up: then absorb() reads them into a stash (so that an
// abort frame behind them can be found), and later receives take from the
// stash first.
//
// A Connection may exist before its channel does (lazy connections: a rank
// posts to a peer that has not connected yet); operations then queue until
// attach().
//
// Its definitions are split by concern: the frames of the data path
// (posting, sending, receiving, the express path, point-to-point frames) in
// connection.cc; the failure forensics (absorb(), skim(), the abort text,
// the error path's raw writes) in connection_failure.cc; the poll support
// (arm(), disarm()) with the wait itself in waiting.cc.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collie/base/fifo.h"
#include "collie/collectives/transport/channel.h"
#include "collie/collectives/transport/wire.h"

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
  // Its payload has arrived entirely. False when the message cannot be
  // taken (a single-copy message of the wrong size, or whose read failed;
  // the sink says why).
  virtual bool end_frame(int peer) = 0;
  // Whether a posted receive may take a frame from `peer` now.
  virtual bool wants(int peer) const = 0;
};

class Connection {
 public:
  // `channel` may be null: attach() it when the peer connects.
  Connection(std::unique_ptr<Channel> channel, int peer, std::string address);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void attach(std::unique_ptr<Channel> channel, std::string address);
  bool connected() const { return channel_ != nullptr; }
  ChannelKind kind() const { return channel_ ? channel_->kind() : ChannelKind::kTcp; }
  pid_t peer_pid() const { return shm_ ? shm_->peer_pid() : 0; }
  // SharedMemoryAbilities::wake_peer(); nothing on a socket.
  void wake_peer() {
    if (shm_) shm_->wake_peer();
  }
  int peer() const { return peer_; }
  const std::string& address() const { return address_; }
  // "rank 3 (10.0.0.7:41234)"
  std::string name() const;

  void post_send(const WireHeader& header, const void* payload);
  // Expects a data frame equal to `expected` (payload_bytes included).
  void post_recv(const WireHeader& expected, void* data);
  // The same, but the payload (elements of `dtype`) is reduced on arrival
  // instead of copied: out[i] = in[i] op payload[i] (not for half types;
  // out may be in). Over shared memory it is read where it lies in the
  // ring, saving the copy into a staging buffer.
  void post_recv_reduce(const WireHeader& expected, void* out, const void* in, DataType dtype,
                        ReduceOp op);
  // The express path (Transport::exchange): a frame written or taken
  // straight through the channel, with no operation posted, when nothing
  // else is posted or half-read on this connection.
  bool idle() const {
    return channel_ && sends_.empty() && recvs_.empty() && stash_pos_ == stash_.size() &&
           !p2p_.open && !eof_;
  }
  // Writes header and payload now. True when all of it went (the send is
  // complete); otherwise the send is posted with what went, for
  // progress_send() to finish (or to report the channel's error).
  bool send_now(const WireHeader& header, const void* payload);
  // Takes the frame `expected` with its payload into `data` if all of it
  // has arrived: 1 (the receive is complete), 0 (not all there yet;
  // nothing consumed), -1 (something else comes first, or the channel
  // failed: post the receive and let progress_recv() say what).
  int take_now(const WireHeader& expected, void* data);
  bool send_pending() const { return !sends_.empty(); }
  bool recv_pending() const { return !recvs_.empty(); }
  uint64_t sends_completed() const { return sends_completed_; }
  uint64_t recvs_completed() const { return recvs_completed_; }
  size_t sends_queued() const { return sends_.size(); }
  size_t recvs_queued() const { return recvs_.size(); }

  // Write as much as the channel takes. Returns bytes moved; on an error
  // returns -1 with the errno in *err.
  long progress_send(int* err);
  // Read as much as is there into the posted receives. Returns bytes moved,
  // or -1 with *problem set (and *err for kError). After kMismatch, kAbort or
  // kGoodbye, received_header() is what arrived.
  long progress_recv(RecvProblem* problem, int* err);
  const WireHeader& received_header() const { return problem_header_; }
  // After kMismatch in progress_recv(): the header the receive expected.
  const WireHeader& expected_header() const { return problem_expected_; }

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
  // is next (*other_next) or the socket has nothing more; `wanted_only`:
  // also stops before a frame once the sink no longer wants this peer's
  // (a receive waits for them; a frame read with none posted would be
  // buffered and copied twice, while one left in the stream is read
  // straight into the receive posted later). Returns bytes moved, or -1
  // with *problem: kEof, kError (*err), or kMismatch when the sink refused a
  // frame (received_header() is its header).
  long progress_p2p(RecvProblem* problem, int* err, bool* other_next, bool wanted_only);
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

  // The failure paths' reading: frames are walked until a control frame,
  // data frames going into the receives still posted, or skipped. What
  // skim() found:
  enum class Skimmed {
    kNothingYet,  // the channel has nothing more for now
    kProbe,
    kAbort,
    kGoodbye,
    kGone,       // closed or reset without a control frame: the peer died
    kGarbled,    // bytes that are no frame of `group`
    kOtherCall,  // a data frame of another call where a receive was posted
  };
  // kOtherCall: other_call() is the header that came.
  Skimmed skim(uint32_t group);
  const WireHeader& other_call() const { return problem_header_; }

  // Error-path writes of raw bytes (probe, abort notice): writes what the
  // channel takes of bytes[*sent, size). True when the rest has to wait; a
  // peer that is gone counts as done (*sent = size).
  bool write_raw(const void* bytes, size_t size, size_t* sent);
  // An orderly goodbye frame, then shutdown for writing (best effort).
  void say_goodbye(uint32_t group);
  void shutdown_write();
  void shutdown_both();  // thread-safe

  // For an abort notice: the bytes still owed on a half-written message
  // (the receiver is mid-frame and needs them to find the next header).
  size_t partial_send_remaining() const;
  // Drops every posted operation (after an error).
  void clear();

  // poll() support (see Channel; waiting.h): the pollfd to wait on for the wanted
  // directions (a hang-up is always watched), and what the returned events
  // mean for the stream. *ready: no need to sleep.
  struct PollRequest {
    int fd;
    short events;
  };
  // With `futex_value`, arms for a futex wait on futex_word() instead
  // (SharedMemoryAbilities::arm_futex) and sets the value to wait on.
  PollRequest arm(bool want_read, bool want_write, bool* ready, uint32_t* futex_value = nullptr);
  // The channel's futex word, null if it has none (not shared memory).
  std::atomic<uint32_t>* futex_word() { return shm_ && futex_wait_ ? shm_->futex_word() : nullptr; }
  // false: waits poll() the channel's fd even where a futex word exists
  // (CommunicatorOptions::futex_wait, a measurement switch).
  void set_futex_wait(bool on) { futex_wait_ = on; }
  short disarm(short revents);

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
    // post_recv_reduce: the other input (null: a plain receive), and the
    // bytes of an element split between two pieces of the stream.
    const uint8_t* reduce_in = nullptr;
    DataType dtype = DataType::kFloat32;
    ReduceOp op = ReduceOp::kSum;
    alignas(16) uint8_t carry[16];
    size_t carry_len = 0;
  };
  // The buffers of what is left to write of `op` (header, payload): their
  // count, 1 or 2.
  static int unsent(SendOp& op, iovec iov[2]);
  // Hands payload bytes [off, off + n) to the receive:
  // copied, or reduced (whole elements; a split one waits in op.carry).
  static void deliver(RecvOp& op, size_t off, const uint8_t* src, size_t n);
  size_t take_from_stash(RecvOp& op);
  // Frames with at most this much payload are read with one read() into a
  // bounce buffer (header checked before the payload is copied out).
  static constexpr size_t kBounceBytes = 4096;
  ssize_t read_small_frame(RecvOp& op);
  // One read from the stash, else the channel.
  ssize_t read_some(void* data, size_t bytes);

  // The p2p frame whose payload is being read into the sink's buffer.
  struct P2PFrame {
    bool open = false;
    WireHeader header;
    uint8_t* dest = nullptr;
    size_t got = 0;  // payload bytes
  };
  bool open_p2p(const WireHeader& header);
  long read_p2p_payload(RecvProblem* problem, int* err);
  // A whole header from the stash (topped up from the channel); false when
  // it is not all there yet (or *problem is set: kEof, kError).
  bool stash_header(WireHeader* h, RecvProblem* problem, int* err);

  std::unique_ptr<Channel> channel_;
  SharedMemoryAbilities* shm_ = nullptr;  // channel_->shared_memory(), asked once
  bool futex_wait_ = true;
  int peer_;
  P2PSink* sink_ = nullptr;
  P2PFrame p2p_;
  std::string address_;
  Fifo<SendOp> sends_;
  Fifo<RecvOp> recvs_;
  uint64_t sends_completed_ = 0;
  uint64_t recvs_completed_ = 0;
  std::vector<uint8_t> stash_;
  size_t stash_pos_ = 0;
  bool eof_ = false;
  WireHeader problem_header_;
  WireHeader problem_expected_;
  std::string problem_text_;  // abort text bytes already read
  // skim()'s place in the stream once it walks frames itself.
  bool skimming_ = false;
  uint8_t skim_head_[kHeaderBytes];
  size_t skim_got_ = 0;
  uint64_t skim_skip_ = 0;  // payload bytes of a data frame still to discard
};

}  // namespace collie
