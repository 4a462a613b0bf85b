// The data connections' wire format. Every message is a fixed 40-byte header
// followed by `payload_bytes` of payload. The header names the call that sent
// it (group, sequence number, collective, dtype, count, root, op), so that a
// receiver compares it with its own call before it touches the payload: that
// comparison is what turns a mismatched program into an error on every rank
// instead of mixed data or a hang. Besides data there are three control
// frames: kAbort carries the text of an error that broke the sender (the
// payload), kGoodbye says the sender closed its communicator in an orderly
// way, and kProbe (header only) says "my call timed out, or I heard that one
// did: who is still running?"; every rank that reads one answers with its
// own, so that the ranks that never answer are the ones to blame for a hang
// (collectives/transport/transport_failure.cc, docs/algorithms.md "When a peer fails").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/base/types.h"
#include "collie/collectives/all_reduce_algorithm.h"

namespace collie {

enum class CollectiveKind : uint8_t {
  kAllReduce = 0,
  kBroadcast = 1,
  kBarrier = 2,
  kAllGather = 3,
  kReduceScatter = 4,
  kReduce = 5,
  kGather = 6,
  kScatter = 7,
  kAllToAll = 8,
  kPointToPoint = 9,  // kP2P frames: send/recv, outside the collectives' sequence
};
std::string_view to_string(CollectiveKind kind);

// kP2P: a point-to-point message (send/recv), matched by (sender, tag) in
// the receiver's inbox (p2p_inbox.h), not by the collective sequence.
enum class FrameType : uint8_t { kData = 0, kAbort = 1, kGoodbye = 2, kProbe = 3, kP2P = 4 };

// A kP2P frame's `algorithm`: kP2PInline carries the message as its payload;
// kP2PSingleCopy carries a P2PCopyDescriptor instead (payload_bytes is its
// size, count and dtype are the message's), and the receiver reads the
// message from the sender's memory with process_vm_readv (shared-memory
// channels whose pair may; Transport::post_p2p).
inline constexpr uint8_t kP2PInline = 0;
inline constexpr uint8_t kP2PSingleCopy = 1;
// Where a single-copy message lives in the sender, and the word the
// receiver sets to done_value (process_vm_writev) once it has read it; the
// sender's send completes then, and its buffer is its own again.
struct P2PCopyDescriptor {
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t done_address = 0;
  uint64_t done_value = 0;
};
static_assert(sizeof(P2PCopyDescriptor) == 32);
// What a sender writes into the done word of a single-copy send it gives up
// (its transport failed, or was destroyed with the send unread) before its
// caller may free the buffer: a receiver that finds it there after its read
// drops what it read.
inline constexpr uint64_t kP2PCopyAbandoned = UINT64_MAX;

// Why a probe frame was sent: the sender's own deadline passed, or it answers
// (and spreads) a probe it received.
enum class ProbeReason : uint8_t { kTimedOut = 1, kAnswer = 2 };

// Which collie exception an abort frame re-raises on the peers.
enum class ErrorKind : uint8_t { kNetwork = 0, kTimeout = 1, kBackend = 2 };

// One collective call as every rank must agree on it. `seq` numbers the
// communicator's calls from 1.
struct CallInfo {
  CollectiveKind kind = CollectiveKind::kBarrier;
  DataType dtype = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = 0;
  uint64_t count = 0;
  uint64_t seq = 0;
  // all_reduce only: the algorithm actually run (AllReduceAlgorithm, never
  // kAuto), since ranks that disagree on it would exchange different messages.
  uint8_t algorithm = 0;

  // "all_reduce(float32, 1024, sum)", "broadcast(float32, 1000, root 0)".
  std::string describe() const;
  // describe() + " as op #17".
  std::string describe_with_seq() const;
  friend bool operator==(const CallInfo&, const CallInfo&) = default;
};

inline constexpr uint32_t kWireMagic = 0x434c4931;  // "CLI1"
inline constexpr size_t kHeaderBytes = 40;

// Little-endian on the wire; collie runs on little-endian hosts only, so the
// struct is memcpy'd (static_asserts in wire.cc pin the layout).
struct WireHeader {
  uint32_t magic = kWireMagic;
  uint32_t group = 0;  // hash of the store prefix
  uint64_t seq = 0;
  uint64_t count = 0;
  int32_t root = 0;
  uint8_t kind = 0;   // CollectiveKind
  uint8_t dtype = 0;  // DataType
  uint8_t op = 0;     // ReduceOp
  uint8_t frame = 0;  // FrameType
  uint32_t payload_bytes = 0;
  uint8_t error_kind = 0;  // ErrorKind, abort frames only
  uint8_t algorithm = 0;   // CallInfo::algorithm
  uint8_t probe = 0;       // ProbeReason, probe frames only (0 otherwise)
  uint8_t reserved = 0;

  static WireHeader data(uint32_t group, const CallInfo& call, uint32_t payload_bytes);
  static WireHeader control(uint32_t group, FrameType frame, uint32_t payload_bytes,
                            ErrorKind error_kind = ErrorKind::kNetwork);
  // A probe: no payload; the call fields name the sender's current call.
  static WireHeader make_probe(uint32_t group, const CallInfo& call, ProbeReason why);
  // A point-to-point message: `tag` in root, the sender's count of messages
  // to this peer in seq (for messages only), the element type and count.
  static WireHeader p2p(uint32_t group, uint64_t seq, int tag, DataType dtype, uint64_t count,
                        uint32_t payload_bytes);
  bool is_p2p(uint32_t group) const;
  CallInfo call() const;
  // Whether this data header announces exactly `call` in `group`.
  bool matches(uint32_t group, const CallInfo& call) const;
  // Whether this is a well-formed probe of `group`: our magic and group,
  // frame kProbe, no payload, a known reason, the other control fields zero.
  // Anything else claiming to be a probe is treated as a mismatch.
  bool is_probe(uint32_t group) const;
};
static_assert(sizeof(WireHeader) == kHeaderBytes);

// FNV-1a of the store prefix: the group id in every header.
uint32_t group_hash(std::string_view prefix);

}  // namespace collie
