#include "collie/rendezvous/tcp_store/store_protocol.h"

#include <cstring>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::store_protocol {
namespace {

// Maps a wire byte of a known dialect to an Op; false for an unknown byte.
bool op_of(uint8_t type, Dialect dialect, Op* op) {
  static constexpr Op kV2Ops[] = {Op::kValidate,   Op::kSet,      Op::kCompareSet, Op::kGet,
                                  Op::kAdd,        Op::kCheck,    Op::kWait,       Op::kNumKeys,
                                  Op::kDeleteKey,  Op::kAppend,   Op::kMultiGet,   Op::kMultiSet,
                                  Op::kCancelWait, Op::kPing,     Op::kQueuePush,  Op::kQueuePop,
                                  Op::kQueueLen,   Op::kListKeys, Op::kBarrier};
  static constexpr Op kV1Ops[] = {Op::kSet,     Op::kCompareSet, Op::kGet,
                                  Op::kAdd,     Op::kCheck,      Op::kWait,
                                  Op::kNumKeys, Op::kWatchKey,   Op::kDeleteKey};
  if (dialect == Dialect::kV2 && type < std::size(kV2Ops)) {
    *op = kV2Ops[type];
    return true;
  }
  if (dialect == Dialect::kV1_13 && type < std::size(kV1Ops)) {
    *op = kV1Ops[type];
    return true;
  }
  return false;
}

std::string describe_byte(uint8_t b) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "0x";
  s += kHex[b >> 4];
  s += kHex[b & 15];
  if (b >= 0x20 && b < 0x7f) s += str_cat(" ('", static_cast<char>(b), "')");
  return s;
}

// Walks one request's fields. It runs twice over a complete request: first
// to check that every byte is there and every length is within the caps
// (extract = false, nothing is copied), then to copy the fields out. So a
// partial request costs a scan of its length fields, never a copy, and a
// declared length is never allocated before it has been checked and arrived.
class FieldReader {
 public:
  FieldReader(std::span<const uint8_t> in, size_t pos, const Limits& limits, bool extract,
              Request* request)
      : in_(in), pos_(pos), limits_(limits), extract_(extract), request_(request) {}

  // Each reader returns false when the request is incomplete or bad;
  // status() tells which.
  bool have(size_t n) {
    if (n > limits_.request_cap() || pos_ + n > limits_.request_cap()) {
      return fail(str_cat("request of at least ", pos_ + n, " bytes exceeds the cap of ",
                          limits_.request_cap(), " bytes"));
    }
    if (pos_ + n <= in_.size()) return true;
    need_ = pos_ + n;
    return false;
  }
  bool u32(uint32_t* v) {
    if (!have(4)) return false;
    *v = load_u32(in_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool u64(uint64_t* v) {
    if (!have(8)) return false;
    *v = load_u64(in_.data() + pos_);
    pos_ += 8;
    return true;
  }
  // A length-prefixed blob; `what` names it in errors ("key", "value").
  bool blob(const char* what, Bytes* out_value, std::string* out_key) {
    uint64_t len = 0;
    if (!u64(&len)) return false;
    if (len > limits_.max_value_bytes) {
      return fail(str_cat(what, " of ", len, " bytes exceeds the cap of ", limits_.max_value_bytes,
                          " bytes"));
    }
    if (!have(static_cast<size_t>(len))) return false;
    const uint8_t* p = in_.data() + pos_;
    if (extract_ && out_value) out_value->assign(p, p + len);
    if (extract_ && out_key) out_key->assign(reinterpret_cast<const char*>(p), len);
    pos_ += static_cast<size_t>(len);
    return true;
  }
  bool key() {
    std::string k;
    if (!blob("key", nullptr, &k)) return false;
    if (extract_) request_->keys.push_back(std::move(k));
    return true;
  }
  bool value() {
    Bytes v;
    if (!blob("value", &v, nullptr)) return false;
    if (extract_) request_->values.push_back(std::move(v));
    return true;
  }
  bool count(uint64_t* n) {
    if (!u64(n)) return false;
    if (*n > limits_.max_keys) {
      return fail(str_cat("key count ", *n, " exceeds the cap of ", limits_.max_keys));
    }
    return true;
  }
  bool fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  size_t pos() const { return pos_; }
  size_t need() const { return need_; }
  const std::string& error() const { return error_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_;
  const Limits& limits_;
  bool extract_;
  Request* request_;
  size_t need_ = 0;
  std::string error_;
};

// Reads the body of `op` (the type byte and, for VALIDATE, the magic are
// already consumed).
bool read_body(Op op, FieldReader& r, Request* request) {
  uint64_t n = 0;
  switch (op) {
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush: return r.key() && r.value();
    case Op::kCompareSet: return r.key() && r.value() && r.value();
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
    case Op::kWatchKey: return r.key();
    case Op::kAdd:
    case Op::kBarrier: {
      uint64_t delta = 0;
      if (!(r.key() && r.u64(&delta))) return false;
      request->delta = static_cast<int64_t>(delta);
      return true;
    }
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
    case Op::kProbe:
      if (!r.count(&n)) return false;
      for (uint64_t i = 0; i < n; ++i)
        if (!r.key()) return false;
      return true;
    case Op::kMultiSet:
      if (!r.count(&n)) return false;
      for (uint64_t i = 0; i < n; ++i)
        if (!(r.key() && r.value())) return false;
      return true;
    case Op::kPing: return r.u32(&request->nonce);
    case Op::kNumKeys:
    case Op::kListKeys:
    case Op::kCancelWait:
    case Op::kValidate: return true;
  }
  return r.fail("unhandled op");
}

// True when the buffered 1.13 CHECK is exactly the dialect probe.
bool is_probe(std::span<const uint8_t> in, const Limits& limits) {
  const size_t key_len = std::strlen(kProbeKey);
  const size_t size = 1 + 8 + 8 + key_len;
  if (in.size() < size) return false;
  return load_u64(in.data() + 1) == 1 && load_u64(in.data() + 9) == key_len &&
         std::memcmp(in.data() + 17, kProbeKey, key_len) == 0;
}

}  // namespace

const char* dialect_name(Dialect d) {
  switch (d) {
    case Dialect::kUnknown: return "unknown";
    case Dialect::kV2: return "2.x";
    case Dialect::kV1_13: return "1.13";
  }
  return "?";
}

const char* op_name(Op op) {
  static constexpr const char* kNames[] = {
      "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",       "WAIT",
      "GETNUMKEYS", "DELETE_KEY", "APPEND",      "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",
      "QUEUE_PUSH", "QUEUE_POP",  "QUEUE_LEN",   "LIST_KEYS", "BARRIER",   "WATCH_KEY",   "PROBE"};
  static_assert(std::size(kNames) == static_cast<size_t>(Op::kProbe) + 1, "one name per Op");
  return kNames[static_cast<size_t>(op)];
}

uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

ParseResult parse_request(std::span<const uint8_t> in, Dialect dialect, const Limits& limits) {
  ParseResult result;
  if (in.empty()) {
    result.need_bytes = 1;
    return result;
  }
  const uint8_t type = in[0];
  size_t pos = 1;
  Op op{};
  Dialect request_dialect = dialect;
  if (dialect == Dialect::kUnknown) {
    // The first message decides the dialect. 0x00 is a 2.x VALIDATE when the
    // magic follows and a 1.13 SET otherwise: a SET whose key length began
    // with the magic's bytes would declare a key of over 1 GiB, beyond any
    // sane cap, so the two never collide.
    if (type == 0) {
      if (in.size() < 5) {
        result.need_bytes = 5;
        return result;
      }
      if (load_u32(in.data() + 1) == kValidationMagic) {
        op = Op::kValidate;
        request_dialect = Dialect::kV2;
        pos = 5;
      } else {
        op = Op::kSet;
        request_dialect = Dialect::kV1_13;
      }
    } else if (type == static_cast<uint8_t>(V2Query::kPing)) {
      // A 2.x PING before VALIDATE: what collie's client sends, on a second
      // connection, when it looks for torch's libuv server (the detection,
      // docs/store-protocol.md). Answered; the dialect stays undecided.
      op = Op::kPing;
      request_dialect = Dialect::kUnknown;
    } else if (op_of(type, Dialect::kV1_13, &op)) {
      request_dialect = Dialect::kV1_13;
      if (op == Op::kCheck && is_probe(in, limits)) {
        op = Op::kProbe;
        request_dialect = Dialect::kUnknown;
      }
    } else {
      result.status = ParseResult::Status::kError;
      result.error = str_cat("first message is not a TCPStore query (first byte ",
                             describe_byte(type), "; expected VALIDATE 0x00 + magic)");
      return result;
    }
  } else if (!op_of(type, dialect, &op) || op == Op::kValidate) {
    result.status = ParseResult::Status::kError;
    result.error = str_cat("unknown ", dialect_name(dialect), " query type ", describe_byte(type));
    return result;
  }

  Request scratch;
  FieldReader scan(in, pos, limits, /*extract=*/false, &scratch);
  if (!read_body(op, scan, &scratch)) {
    if (!scan.error().empty()) {
      result.status = ParseResult::Status::kError;
      result.error = str_cat(op_name(op), ": ", scan.error());
    } else {
      result.need_bytes = scan.need();
    }
    return result;
  }
  result.status = ParseResult::Status::kRequest;
  result.consumed = scan.pos();
  Request& request = result.request;
  request.op = op;
  request.dialect = request_dialect;
  FieldReader copy(in, pos, limits, /*extract=*/true, &request);
  read_body(op, copy, &request);
  return result;
}

Writer& Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

Writer& Writer::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

Writer& Writer::bytes(std::span<const uint8_t> b) {
  u64(b.size());
  out_.insert(out_.end(), b.begin(), b.end());
  return *this;
}

Writer& Writer::keys(const std::vector<std::string>& ks) {
  u64(ks.size());
  for (const auto& k : ks) str(k);
  return *this;
}

bool dialect_has(Op op, Dialect dialect) {
  for (int b = 0; b < 256; ++b) {
    Op o;
    if (op_of(static_cast<uint8_t>(b), dialect, &o) && o == op) return true;
  }
  return false;
}

uint8_t query_byte(Op op, Dialect dialect) {
  for (int b = 0; b < 256; ++b) {
    Op o;
    if (op_of(static_cast<uint8_t>(b), dialect, &o) && o == op) return static_cast<uint8_t>(b);
  }
  throw InvalidArgument(
      str_cat("TCPStore ", dialect_name(dialect), " has no ", op_name(op), " query"));
}

}  // namespace collie::store_protocol
