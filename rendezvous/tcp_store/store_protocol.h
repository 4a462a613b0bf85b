// The bytes of PyTorch's TCPStore protocol, in both dialects collie speaks
// (docs/store-protocol.md has the full layout):
//
//   2.x   every connection opens with VALIDATE (0x00, uint32 magic), then
//         query types VALIDATE=0 ... PING=13, and the later additions
//         QUEUE_PUSH=14 ... LIST_KEYS=17 (torch 2.11) and BARRIER=18 (2.15).
//   1.13  no VALIDATE; query types SET=0 ... DELETE_KEY=8.
//
// Integers are little-endian (torch sends host order; every machine it runs on
// is little-endian). Strings and values are a uint64 length then the bytes;
// key lists are a uint64 count then strings.
//
// parse_request() is the server's whole parser: a pure function from the
// bytes received so far on one connection to "need more", "one request" or
// "bad input". It never allocates a declared length before checking it
// against the caps, and it can be driven by a fuzzer without any socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collie/rendezvous/store.h"

namespace collie::store_protocol {

inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

// Wire values of the 2.x dialect (torch's QueryType since 2.0; the queue
// operations and LIST_KEYS are in torch 2.11, BARRIER in 2.15).
enum class V2Query : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kGetNumKeys = 7,
  kDeleteKey = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
  kQueuePush = 14,
  kQueuePop = 15,
  kQueueLen = 16,
  kListKeys = 17,
  kBarrier = 18,
};

// Wire values of the 1.13 dialect.
enum class V1Query : uint8_t {
  kSet = 0,
  kCompareSet = 1,
  kGet = 2,
  kAdd = 3,
  kCheck = 4,
  kWait = 5,
  kGetNumKeys = 6,
  kWatchKey = 7,
  kDeleteKey = 8,
};

// Reply bytes (the same in both dialects).
inline constexpr uint8_t kCheckReady = 0;
inline constexpr uint8_t kCheckNotReady = 1;
inline constexpr uint8_t kStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;

// kDetect's probe: a 1.13 CHECK of this reserved key as a connection's first
// message. A 1.13 server answers NOT_READY (nothing changes), a 2.x torch
// server drops the connection (first message is not VALIDATE), and collie's
// server answers kProbeBothDialects and waits for the real first message.
inline constexpr const char* kProbeKey = "__collie_dialect_probe__";
inline constexpr uint8_t kProbeBothDialects = 0xC0;

// The dialect of one connection. kUnknown until its first message is read.
enum class Dialect : uint8_t { kUnknown, kV2, kV1_13 };
const char* dialect_name(Dialect d);

// What a request asks, independent of the dialect's numbering.
enum class Op : uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
  kBarrier,
  kWatchKey,
  kProbe,
};
const char* op_name(Op op);

struct Request {
  Op op = Op::kPing;
  Dialect dialect = Dialect::kUnknown;  // the dialect this request was read in
  std::vector<std::string> keys;        // one key for single-key ops
  std::vector<Bytes> values;            // SET/APPEND/QUEUE_PUSH: 1; COMPARE_SET: 2
  // ADD: the increment; BARRIER: the world size (a BARRIER is laid out as
  // an ADD: a key, then an i64).
  int64_t delta = 0;
  uint32_t nonce = 0;  // PING
};

// The largest max_value_bytes a server or client accepts: 512 MiB. It
// keeps request_cap() far from overflow, and keeps a 1.13 SET from ever
// declaring a key of the ~1 GiB that VALIDATE's magic would read as.
inline constexpr size_t kMaxValueBytesLimit = size_t{512} << 20;

struct Limits {
  size_t max_value_bytes = size_t{64} << 20;  // any one key or value
  size_t max_keys = size_t{1} << 20;          // keys in one CHECK/WAIT/MULTI_*
  // A whole request; 0 means 2 * max_value_bytes + 1 MiB (a COMPARE_SET
  // carries two values).
  size_t max_request_bytes = 0;
  size_t request_cap() const {
    return max_request_bytes ? max_request_bytes : 2 * max_value_bytes + (size_t{1} << 20);
  }
};

struct ParseResult {
  enum class Status { kNeedMore, kRequest, kError };
  Status status = Status::kNeedMore;
  size_t consumed = 0;    // kRequest: bytes the request used
  size_t need_bytes = 0;  // kNeedMore: parse again once this many bytes are buffered
  Request request;        // kRequest
  std::string error;      // kError: what was wrong, for the log
};

// Parses the first request in `in`, a connection's buffered bytes whose
// dialect so far is `dialect` (kUnknown for its first message). A first
// message decides the dialect: 0x00 + magic is a 2.x VALIDATE; 1..8, or 0x00
// not followed by the magic, is 1.13; anything else is an error. In kUnknown
// only a VALIDATE, a 1.13 query, the probe, or a 2.x PING (which leaves the
// dialect undecided, as the probe does) are accepted.
ParseResult parse_request(std::span<const uint8_t> in, Dialect dialect, const Limits& limits);

// Appends wire encodings to a buffer (requests for the client, replies for
// the server).
class Writer {
 public:
  explicit Writer(Bytes& out) : out_(out) {}
  Writer& u8(uint8_t v) {
    out_.push_back(v);
    return *this;
  }
  Writer& u32(uint32_t v);
  Writer& u64(uint64_t v);
  Writer& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Writer& bytes(std::span<const uint8_t> b);  // uint64 length + bytes
  Writer& str(const std::string& s) { return bytes(as_span(s)); }
  Writer& keys(const std::vector<std::string>& ks);  // uint64 count + strings

 private:
  Bytes& out_;
};

// The wire byte for `op` in `dialect`; throws InvalidArgument when the
// dialect has no such query (e.g. APPEND in 1.13).
uint8_t query_byte(Op op, Dialect dialect);
bool dialect_has(Op op, Dialect dialect);

uint64_t load_u64(const uint8_t* p);
uint32_t load_u32(const uint8_t* p);

}  // namespace collie::store_protocol
