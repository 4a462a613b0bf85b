#include "rendezvous/tcp_store/tcp_store_reply.h"

#include <algorithm>

#include "rendezvous/tcp_store/store_protocol.h"

namespace collie {

ReplyQueue::Chunk& ReplyQueue::push() {
  if (!chunks_.empty()) sealed_ += chunks_.back().size() - chunks_.back().sent;
  return chunks_.emplace_back();
}

Bytes& ReplyQueue::fields() {
  if (chunks_.empty() || chunks_.back().shared) return push().owned;
  return chunks_.back().owned;
}

void ReplyQueue::append(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  Bytes& out = fields();
  out.insert(out.end(), bytes.begin(), bytes.end());
}

void ReplyQueue::value(SharedValue v) {
  store_protocol::Writer w(fields());
  if (v->size() <= kInlineValueBytes) {
    w.bytes(*v);
    return;
  }
  w.u64(v->size());
  push().shared = std::move(v);
}

void ReplyQueue::encoded(SharedValue bytes) {
  if (bytes->size() <= kInlineValueBytes) {
    append(*bytes);
    return;
  }
  push().shared = std::move(bytes);
}

void ReplyQueue::splice(ReplyQueue&& other) {
  for (Chunk& c : other.chunks_) {
    if (c.size() == c.sent) continue;
    push() = std::move(c);
  }
  other.clear();
}

size_t ReplyQueue::size() const {
  if (chunks_.empty()) return 0;
  return sealed_ + chunks_.back().size() - chunks_.back().sent;
}

size_t ReplyQueue::front(std::span<std::span<const uint8_t>> out) const {
  size_t n = 0;
  for (auto it = chunks_.begin(); it != chunks_.end() && n < out.size(); ++it) {
    if (it->size() == it->sent) continue;
    out[n++] = {it->data() + it->sent, it->size() - it->sent};
  }
  return n;
}

void ReplyQueue::consume(size_t n) {
  while (!chunks_.empty()) {
    Chunk& c = chunks_.front();
    const size_t take = std::min(n, c.size() - c.sent);
    c.sent += take;
    n -= take;
    if (chunks_.size() > 1) sealed_ -= take;
    if (c.sent < c.size()) return;
    chunks_.pop_front();
  }
  sealed_ = 0;
}

void ReplyQueue::clear() {
  chunks_.clear();
  sealed_ = 0;
}

}  // namespace collie
