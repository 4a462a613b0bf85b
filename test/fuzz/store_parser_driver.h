// The store parser's fuzz driver, shared by the libFuzzer target
// (store_parser_fuzz.cc, COLLIE_FUZZ=ON with clang) and the corpus replay
// test that every normal build runs (test/rendezvous/tcp_store/tcp_store_parser_test.cc).
//
// Input layout: byte 0 picks the starting dialect (bits 0-1) and a small or
// default cap (bit 2); byte 1 picks how the rest is cut into chunks, as a
// socket would deliver it. The rest is the byte stream of one connection.
// The driver feeds it to parse_request exactly as StoreConnection does and
// checks the parser's promises:
//   - a request consumes at least one byte and no more than is buffered;
//   - "need more" asks for more than is buffered;
//   - cutting the stream differently never changes the requests parsed;
//   - every key and value respects the cap.
// A broken promise throws std::logic_error (the fuzzer turns it into a crash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "collie/rendezvous/tcp_store/store_protocol.h"

namespace collie::fuzz {

struct ParsedStream {
  std::vector<store_protocol::Request> requests;
  bool error = false;
};

inline void require(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("store parser broke a promise: ") + what);
}

// Parses `stream` delivered in chunks of `chunk` bytes (0: all at once).
inline ParsedStream parse_stream(const uint8_t* data, size_t size, store_protocol::Dialect dialect,
                                 const store_protocol::Limits& limits, size_t chunk) {
  using store_protocol::ParseResult;
  ParsedStream out;
  std::vector<uint8_t> buffer;
  size_t fed = 0, begin = 0, need = 0;
  while (fed < size || (buffer.size() > begin && buffer.size() - begin >= need)) {
    if (buffer.size() - begin < need || buffer.size() == begin) {
      if (fed >= size) break;
      size_t n = chunk == 0 ? size - fed : std::min(chunk, size - fed);
      buffer.insert(buffer.end(), data + fed, data + fed + n);
      fed += n;
      continue;
    }
    std::span<const uint8_t> in(buffer.data() + begin, buffer.size() - begin);
    ParseResult r = store_protocol::parse_request(in, dialect, limits);
    if (r.status == ParseResult::Status::kError) {
      require(!r.error.empty(), "an error without a message");
      out.error = true;
      return out;
    }
    if (r.status == ParseResult::Status::kNeedMore) {
      require(r.need_bytes > in.size(), "need_bytes not beyond what is buffered");
      require(r.need_bytes <= limits.request_cap(), "need_bytes beyond the request cap");
      need = r.need_bytes;
      continue;
    }
    require(r.consumed > 0 && r.consumed <= in.size(), "consumed outside (0, buffered]");
    for (const auto& k : r.request.keys)
      require(k.size() <= limits.max_value_bytes, "key over cap");
    for (const auto& v : r.request.values)
      require(v.size() <= limits.max_value_bytes, "value over cap");
    if (dialect == store_protocol::Dialect::kUnknown &&
        r.request.op != store_protocol::Op::kProbe) {
      dialect = r.request.dialect;
    }
    begin += r.consumed;
    need = 0;
    out.requests.push_back(std::move(r.request));
  }
  return out;
}

inline bool same_requests(const ParsedStream& a, const ParsedStream& b) {
  if (a.error != b.error || a.requests.size() != b.requests.size()) return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const auto& x = a.requests[i];
    const auto& y = b.requests[i];
    if (x.op != y.op || x.dialect != y.dialect || x.keys != y.keys || x.values != y.values ||
        x.delta != y.delta || x.nonce != y.nonce)
      return false;
  }
  return true;
}

// Runs one fuzz input; throws std::logic_error when a promise breaks.
inline void fuzz_store_parser(const uint8_t* data, size_t size) {
  if (size < 2) return;
  static constexpr store_protocol::Dialect kDialects[] = {
      store_protocol::Dialect::kUnknown, store_protocol::Dialect::kV2,
      store_protocol::Dialect::kV1_13, store_protocol::Dialect::kUnknown};
  const store_protocol::Dialect dialect = kDialects[data[0] & 3];
  store_protocol::Limits limits;
  if (data[0] & 4) {
    limits.max_value_bytes = 64;
    limits.max_keys = 8;
  }
  const size_t chunk = 1 + data[1] % 17;
  const ParsedStream whole = parse_stream(data + 2, size - 2, dialect, limits, 0);
  const ParsedStream cut = parse_stream(data + 2, size - 2, dialect, limits, chunk);
  require(same_requests(whole, cut), "chunking changed the parsed requests");
}

}  // namespace collie::fuzz
