#include "collie/rendezvous/tcp_store/tcp_store_reply.h"

#include <algorithm>
#include <unordered_set>

#include "collie/rendezvous/tcp_store/store_protocol.h"

namespace collie {

void ReplyLedger::retire(SharedValue buffer) {
  // Only the caller holds it: it goes away now.
  if (!buffer || buffer.use_count() <= 1) return;
  const Bytes* key = buffer.get();
  auto [it, inserted] = retired_.try_emplace(key);
  if (!inserted) {
    if (!it->second.buffer.expired()) return;  // retired already
    // A buffer freed without a word, its address now reused.
    retired_bytes_ -= it->second.bytes;
  }
  it->second = {buffer, buffer->size()};
  retired_bytes_ += buffer->size();
}

void ReplyLedger::released(const Bytes* buffer) {
  auto it = retired_.find(buffer);
  if (it == retired_.end() || !it->second.buffer.expired()) return;
  retired_bytes_ -= it->second.bytes;
  retired_.erase(it);
}

size_t ReplyLedger::retired_size(const Bytes* buffer) const {
  auto it = retired_.find(buffer);
  return it == retired_.end() || it->second.buffer.expired() ? 0 : it->second.bytes;
}

void ReplyLedger::sweep() {
  std::erase_if(retired_, [this](const auto& entry) {
    if (!entry.second.buffer.expired()) return false;
    retired_bytes_ -= entry.second.bytes;
    return true;
  });
}

ReplyQueue& ReplyQueue::operator=(ReplyQueue&& other) noexcept {
  if (this == &other) return *this;
  clear();
  chunks_ = std::move(other.chunks_);
  sealed_ = std::exchange(other.sealed_, 0);
  shared_unsent_ = std::exchange(other.shared_unsent_, 0);
  ledger_ = other.ledger_;
  other.chunks_.clear();
  return *this;
}

ReplyQueue::Chunk& ReplyQueue::push() {
  if (!chunks_.empty()) sealed_ += chunks_.back().size() - chunks_.back().sent;
  return chunks_.emplace_back();
}

void ReplyQueue::push_shared(SharedValue buffer, size_t length) {
  Chunk& c = push();
  c.shared = std::move(buffer);
  c.length = length;
  shared_unsent_ += length;
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
  const size_t length = v->size();
  w.u64(length);
  push_shared(std::move(v), length);
}

void ReplyQueue::encoded(SharedValue bytes) {
  if (bytes->size() <= kInlineValueBytes) {
    append(*bytes);
    return;
  }
  const size_t length = bytes->size();
  push_shared(std::move(bytes), length);
}

void ReplyQueue::splice(ReplyQueue&& other) {
  for (Chunk& c : other.chunks_) {
    if (c.size() == c.sent) continue;
    if (c.shared) shared_unsent_ += c.size() - c.sent;
    push() = std::move(c);
  }
  other.clear();
}

size_t ReplyQueue::size() const {
  if (chunks_.empty()) return 0;
  return sealed_ + chunks_.back().size() - chunks_.back().sent;
}

size_t ReplyQueue::held(const ReplyLedger& ledger) const {
  size_t bytes = owned_size();
  if (ledger.retired_count() == 0) return bytes;
  std::unordered_set<const Bytes*> seen;
  for (const Chunk& c : chunks_) {
    if (!c.shared || c.sent == c.size()) continue;
    const size_t retired = ledger.retired_size(c.shared.get());
    if (retired && seen.insert(c.shared.get()).second) bytes += retired;
  }
  return bytes;
}

size_t ReplyQueue::front(std::span<std::span<const uint8_t>> out) const {
  size_t n = 0;
  for (auto it = chunks_.begin(); it != chunks_.end() && n < out.size(); ++it) {
    if (it->size() == it->sent) continue;
    out[n++] = {it->data() + it->sent, it->size() - it->sent};
  }
  return n;
}

void ReplyQueue::pop_front() {
  Chunk& c = chunks_.front();
  if (c.shared) shared_unsent_ -= c.size() - c.sent;
  const Bytes* buffer = c.shared.get();
  chunks_.pop_front();
  if (buffer && ledger_) ledger_->released(buffer);
}

void ReplyQueue::consume(size_t n) {
  while (!chunks_.empty()) {
    Chunk& c = chunks_.front();
    const size_t take = std::min(n, c.size() - c.sent);
    c.sent += take;
    if (c.shared) shared_unsent_ -= take;
    n -= take;
    if (chunks_.size() > 1) sealed_ -= take;
    if (c.sent < c.size()) return;
    pop_front();
  }
  sealed_ = 0;
}

void ReplyQueue::clear() {
  while (!chunks_.empty()) pop_front();
  sealed_ = 0;
  shared_unsent_ = 0;
}

}  // namespace collie
