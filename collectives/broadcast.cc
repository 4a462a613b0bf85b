// Broadcast. Small messages go straight from the root to every other rank
// (one hop; the root sends P-1 copies). Larger ones flow down a pipelined
// chain root -> root+1 -> ... -> root-1: the buffer is cut into segments and
// each rank forwards segment k to its successor as soon as it has received
// it, while segment k+1 is still arriving, so the time is about one buffer's
// transfer plus (P-2) segments' worth, not (P-1) buffers. Every rank but the
// root receives the buffer once and every rank but the last sends it once:
// the bytes per rank are the bandwidth optimum, and segments are received
// straight into the user's tensor and sent from it (no copies).
#include "collie/collectives/algorithms.h"

namespace collie {

void broadcast(Transport& t, const AlgorithmConfig& cfg, TensorView tensor, int root) {
  const int P = t.size();
  const int r = t.rank();
  const size_t bytes = tensor.nbytes();
  auto* data = static_cast<uint8_t*>(tensor.data);

  if (bytes <= cfg.small_message_bytes && P <= kDirectPeers) {
    if (P == 2) {  // one message: express when the pair shares memory
      if (r == root) {
        t.send_one(1 - r, data, bytes);
      } else {
        t.recv_one(root, data, bytes);
      }
      return;
    }
    if (r == root) {
      for (int p = 0; p < P; ++p) {
        if (p != root) t.send(p, data, bytes);
      }
    } else {
      t.recv(root, data, bytes);
    }
    t.wait_all();
    return;
  }

  const int position = (r - root + P) % P;
  const int next = position < P - 1 ? (r + 1) % P : -1;
  const int prev = position > 0 ? (r + P - 1) % P : -1;
  const size_t segment = std::max<size_t>(element_size(tensor.dtype), cfg.segment_bytes);
  const size_t segments = (bytes + segment - 1) / segment;
  auto piece = [&](size_t k) { return std::min(segment, bytes - k * segment); };

  if (prev < 0) {  // the root
    for (size_t k = 0; k < segments; ++k) t.send(next, data + k * segment, piece(k));
    t.wait_all();
    return;
  }
  constexpr size_t kWindow = 8;  // receives posted ahead
  size_t posted = 0, forwarded = 0;
  for (;;) {
    while (posted < segments && posted < forwarded + kWindow) {
      t.recv(prev, data + posted * segment, piece(posted));
      ++posted;
    }
    while (forwarded < t.recvs_done(prev)) {
      if (next >= 0) t.send(next, data + forwarded * segment, piece(forwarded));
      ++forwarded;
    }
    if (forwarded == segments && (next < 0 || t.sends_done(next) == segments)) return;
    t.progress();
  }
}

}  // namespace collie
