// The shared-memory algorithms: every rank on one host, every pair able to
// read the other's memory with process_vm_readv (cross-memory attach, CMA;
// the pair's channel probed it at connect). Data then moves once, from the
// owner's buffer straight into the reader's, and only small frames cross
// the rings: an address descriptor per peer and two "done" rounds. Those
// frames carry the usual header, so a mismatched call is found when the
// descriptors are read, before any byte is read from a peer or written to
// the user's buffer.
//
// all_reduce (bytes B, P ranks): (1) every rank sends its in/out addresses
// to every peer (16 bytes each); (2) rank r reduces slice r (B/P) of every
// rank's input, in rank order 0..P-1 so that every element is computed by
// one rank in one order (bit-identical to the small algorithm and the
// sweep's reference), reading peers' inputs chunk by chunk into a staging
// buffer that stays in cache; (3) a "ready" round; (4) rank r reads every
// other slice from its owner's output into its own; (5) a "done" round, after
// which no peer reads this rank's buffers and the call may return. Each rank
// copies (P-1)/P B in (2) and (P-1)/P B in (4): the ring's byte count, but
// memory to memory, one copy, with no kernel socket in between.
//
// reduce_scatter is steps (1), (2) and (5); all_gather is (1), a read of
// every peer's input into its slot and (5); broadcast is the root's
// descriptor, one read of the root's buffer by every other rank, a "done"
// to the root and the root's "release" back. scatter is broadcast with a
// descriptor per rank, the address of its slot. gather has no such path:
// the root would make every read itself, from memory, where over the rings
// the senders copy in parallel and the root reads from cache (measured
// 0.71-0.75x the ring's time at N=4 from 64 MiB); a push (the senders
// writing into the root) would let a late writer corrupt a root that
// failed meanwhile.
//
// all_to_all: a pair of ranks whose parts for each other are both small
// (up to `direct_bytes`) sends them over its channel, as the transport
// all_to_all does; every other pair reads: (1) each rank sends the other the
// address and size of its part for it (24 bytes); (2) each reads its part
// from the other's buffer into its output, once, after checking the size;
// (3) a "done" message each way. Everything is posted at once: one round of
// messages, the reads, one round of "done".
//
// A read is only good if its owner was still in the call when it ended: a
// rank that fails (another rank died) throws, and its buffers may be freed
// while a peer still reads them. So every read is followed by a receive
// from the owner that a failing owner never sends (the done round; the
// broadcast root's release): the reader then fails too, instead of
// returning what it read from freed memory.
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "collie/base/str_cat.h"
#include "collie/collectives/algorithms.h"
#include "collie/collectives/reduce_kernels.h"

namespace collie {
namespace {

// Peer buffers are reduced in chunks of this many bytes: a few of them fit
// in L2 together with the output.
constexpr size_t kChunkBytes = 128 << 10;

struct Descriptor {
  uint64_t in;
  uint64_t out;
};

// Sends our descriptor to every peer and reads theirs (header-checked).
std::vector<Descriptor> exchange(Transport& t, const void* in, const void* out) {
  const int P = t.size();
  std::vector<Descriptor> d(P);
  d[t.rank()] = {reinterpret_cast<uint64_t>(in), reinterpret_cast<uint64_t>(out)};
  for (int p = 0; p < P; ++p) {
    if (p == t.rank()) continue;
    t.recv(p, &d[p], sizeof(Descriptor));
    t.send(p, &d[t.rank()], sizeof(Descriptor));
  }
  t.wait_all();
  return d;
}

// An empty message to every peer and one from each: every peer has
// finished the step before.
void round_trip(Transport& t) {
  for (int p = 0; p < t.size(); ++p) {
    if (p == t.rank()) continue;
    t.recv(p, nullptr, 0);
    t.send(p, nullptr, 0);
  }
  t.wait_all();
}

// Copies `bytes` from `address` in rank `peer`'s memory to `dst`.
void read_peer(Transport& t, int peer, uint64_t address, void* dst, size_t bytes) {
  auto* d = static_cast<uint8_t*>(dst);
  while (bytes > 0) {
    iovec local{d, bytes};
    iovec remote{reinterpret_cast<void*>(address), bytes};
    const ssize_t r = ::process_vm_readv(t.peer_pid(peer), &local, 1, &remote, 1, 0);
    if (r <= 0) {
      const int err = r < 0 ? errno : EIO;
      // The peer died (ESRCH) or its buffer went away: the channel's EOF
      // usually says so first; this is the fallback.
      t.fail(ErrorKind::kNetwork, str_cat(t.call().describe_with_seq(), " on rank ", t.world_rank(),
                                          ": reading ", bytes, " bytes from the memory of ",
                                          t.peer_name(peer), " failed: ", std::strerror(err),
                                          " (the peer process exited, crashed or aborted)"));
    }
    d += r;
    address += static_cast<uint64_t>(r);
    bytes -= static_cast<size_t>(r);
  }
}

// out[i - begin] = in_0[i] op in_1[i] op ... op in_{P-1}[i] for the
// elements [begin, end), the inputs' addresses in `d` (rank order).
void reduce_slice(Transport& t, Workspace& ws, const std::vector<Descriptor>& d, size_t begin,
                  size_t end, void* out, DataType dtype, ReduceOp op) {
  const int P = t.size();
  const size_t es = element_size(dtype);
  const size_t chunk = std::max<size_t>(1, kChunkBytes / es);
  auto* staging = static_cast<uint8_t*>(ws.get(2, static_cast<size_t>(P) * chunk * es));
  float* acc = is_half(dtype) ? static_cast<float*>(ws.get(3, chunk * sizeof(float))) : nullptr;
  for (size_t lo = begin; lo < end; lo += chunk) {
    const size_t m = std::min(chunk, end - lo);
    std::vector<const void*> src(P);
    for (int p = 0; p < P; ++p) {
      const uint64_t at = d[p].in + lo * es;
      if (p == t.rank()) {
        src[p] = reinterpret_cast<const void*>(at);
      } else {
        void* slot = staging + static_cast<size_t>(p) * chunk * es;
        read_peer(t, p, at, slot, m * es);
        src[p] = slot;
      }
    }
    void* dst = static_cast<uint8_t*>(out) + (lo - begin) * es;
    if (acc) {
      // dst is written once, last: in place (our input is dst) needs no copy.
      widen(acc, src[0], m, dtype);
      for (int p = 1; p < P - 1; ++p) reduce_widen(acc, src[p], acc, m, dtype, op);
      reduce_narrow(dst, src[P - 1], acc, m, dtype, op,
                    op == ReduceOp::kAvg ? static_cast<float>(P) : 1.0f);
      continue;
    }
    // Element-wise kernels may write the element they read, so dst may be
    // an input of the first step or of the last, not of one in between
    // (dst would hold a partial sum by then). In place at rank >= 2 our
    // input is such a middle one: accumulate in our (unused) staging slot
    // and write dst in the last step only. No copy either way.
    const bool own_in_middle = src[t.rank()] == dst && t.rank() >= 2;
    void* sum = own_in_middle ? staging + static_cast<size_t>(t.rank()) * chunk * es : dst;
    if (P == 2) {
      reduce(dst, src[0], src[1], m, dtype, op);
    } else {
      reduce(sum, src[0], src[1], m, dtype, op);
      for (int p = 2; p < P - 1; ++p) reduce(sum, sum, src[p], m, dtype, op);
      reduce(dst, sum, src[P - 1], m, dtype, op);
    }
    if (op == ReduceOp::kAvg) divide(dst, m, dtype, P);
  }
}

}  // namespace

void shm_all_reduce(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op,
                    const std::function<void(size_t, size_t)>& between) {
  const size_t P = static_cast<size_t>(t.size());
  const size_t r = static_cast<size_t>(t.rank());
  const size_t n = out.count, es = element_size(out.dtype);
  const auto d = exchange(t, in.data, out.data);
  const size_t lo = part_begin(n, P, r), hi = part_begin(n, P, r + 1);
  reduce_slice(t, ws, d, lo, hi, static_cast<uint8_t*>(out.data) + lo * es, out.dtype, op);
  if (between) between(lo, hi);
  round_trip(t);  // every slice is final
  for (size_t p = 0; p < P; ++p) {
    if (p == r) continue;
    const size_t lo = part_begin(n, P, p), hi = part_begin(n, P, p + 1);
    if (hi > lo) {
      read_peer(t, static_cast<int>(p), d[p].out + lo * es,
                static_cast<uint8_t*>(out.data) + lo * es, (hi - lo) * es);
    }
  }
  round_trip(t);  // no peer reads our buffers any more
}

void shm_reduce_scatter(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op) {
  const size_t n = out.count;
  const size_t r = static_cast<size_t>(t.rank());
  const auto d = exchange(t, in.data, out.data);
  // Rank r's result is slot r of the inputs, reduced into out (which may be
  // that very slot of its own input: each element is read before written).
  reduce_slice(t, ws, d, r * n, (r + 1) * n, out.data, out.dtype, op);
  round_trip(t);
}

void shm_reduce_chunks(Transport& t, Workspace& ws, TensorView in, std::span<const size_t> begins,
                       size_t count, void* out, ReduceOp op) {
  const size_t es = element_size(in.dtype);
  const auto d = exchange(t, in.data, out);
  for (size_t k = 0; k < begins.size(); ++k) {
    reduce_slice(t, ws, d, begins[k], begins[k] + count,
                 static_cast<uint8_t*>(out) + k * count * es, in.dtype, op);
  }
  round_trip(t);  // no peer reads our input any more
}

void shm_copy_peer_chunks(Transport& t, void* buffer, size_t chunk_bytes,
                          const std::function<std::vector<size_t>(int)>& offsets) {
  const auto d = exchange(t, buffer, buffer);
  auto* b = static_cast<uint8_t*>(buffer);
  for (int p = 0; p < t.size(); ++p) {
    if (p == t.rank() || chunk_bytes == 0) continue;
    for (size_t at : offsets(p)) read_peer(t, p, d[p].out + at, b + at, chunk_bytes);
  }
  round_trip(t);
}

void shm_gather_parts(Transport& t, const void* part, void* out, int root,
                      const std::function<std::pair<size_t, size_t>(int)>& part_of) {
  if (t.rank() != root) {
    Descriptor mine{reinterpret_cast<uint64_t>(part), 0};
    t.send(root, &mine, sizeof mine);
    t.recv(root, nullptr, 0);  // the root has read it: `part` may change again
    t.wait_all();
    return;
  }
  const int P = t.size();
  std::vector<Descriptor> d(P);
  for (int p = 0; p < P; ++p)
    if (p != root) t.recv(p, &d[p], sizeof(Descriptor));
  t.wait_all();
  auto* o = static_cast<uint8_t*>(out);
  for (int p = 0; p < P; ++p) {
    const auto [at, bytes] = part_of(p);
    if (bytes == 0) continue;
    if (p == root) {
      if (o + at != part) std::memcpy(o + at, part, bytes);
    } else {
      read_peer(t, p, d[p].in, o + at, bytes);
    }
  }
  for (int p = 0; p < P; ++p)
    if (p != root) t.send(p, nullptr, 0);
  t.wait_all();
}

void shm_all_gather(Transport& t, TensorView in, TensorView out) {
  const int P = t.size();
  const size_t bytes = in.nbytes();
  const auto d = exchange(t, in.data, out.data);
  auto* o = static_cast<uint8_t*>(out.data);
  for (int p = 0; p < P; ++p) {
    if (p == t.rank()) {
      if (o + p * bytes != in.data && bytes > 0) std::memcpy(o + p * bytes, in.data, bytes);
    } else if (bytes > 0) {
      read_peer(t, p, d[p].in, o + p * bytes, bytes);
    }
  }
  round_trip(t);
}

void shm_all_to_all(Transport& t, size_t direct_bytes, std::span<const Span> in,
                    std::span<const MutableSpan> out) {
  const int P = t.size();
  const int r = t.rank();
  // What a pair that reads sends instead of its part. The magic tells a
  // descriptor from a 24-byte part should the two ranks disagree about the
  // pair (their sizes differ: the receiver then fails naming both).
  struct Part {
    uint64_t magic;
    uint64_t address;
    uint64_t bytes;
  };
  constexpr uint64_t kPartMagic = 0xc011e2a2a11d35c1ull;
  // Both ranks of a pair see the same two sizes (r's part for p, p's for r),
  // so they agree on whether the pair reads: no extra message decides it.
  auto reads = [&](int p) { return std::max(in[p].bytes, out[p].bytes) > direct_bytes; };
  if (out[r].bytes > 0 && out[r].data != in[r].data)
    std::memcpy(out[r].data, in[r].data, out[r].bytes);
  if (P == 2 && !reads(1 - r) && in[1 - r].bytes == out[1 - r].bytes) {
    // Two small parts of one size: the express exchange (the pair sees the
    // same two sizes, so both take it).
    t.exchange(1 - r, in[1 - r].data, out[1 - r].data, in[1 - r].bytes);
    return;
  }
  std::vector<Part> mine(P), theirs(P);
  bool any_read = false;
  // Sends first: each starts as it is posted, the receives are posted while
  // the data travels.
  for (int k = 1; k < P; ++k) {
    const int to = (r + k) % P;
    if (reads(to)) {
      mine[to] = {kPartMagic, reinterpret_cast<uint64_t>(in[to].data), in[to].bytes};
      t.send(to, &mine[to], sizeof(Part));
      any_read = true;
    } else {
      t.send(to, in[to].data, in[to].bytes);
    }
  }
  for (int k = 1; k < P; ++k) {
    const int from = (r - k + P) % P;
    if (reads(from)) {
      t.recv(from, &theirs[from], sizeof(Part));
    } else {
      t.recv(from, out[from].data, out[from].bytes);
    }
  }
  t.wait_all();
  if (!any_read) return;
  for (int p = 0; p < P; ++p) {
    if (p == r || !reads(p)) continue;
    if (theirs[p].magic != kPartMagic || theirs[p].bytes != out[p].bytes) {
      t.fail(ErrorKind::kBackend,
             str_cat(t.call().describe_with_seq(), " on rank ", t.world_rank(), ": ",
                     t.peer_name(p), " sends this rank ",
                     theirs[p].magic == kPartMagic ? str_cat(theirs[p].bytes, " bytes")
                                                   : std::string("a part of another size"),
                     " but this rank's output for it holds ", out[p].bytes,
                     " bytes (a rank's split for a peer must equal that peer's split for it)"));
    }
  }
  for (int k = 1; k < P; ++k) {
    const int p = (r - k + P) % P;  // staggered: the ranks read different owners at once
    if (reads(p) && out[p].bytes > 0) read_peer(t, p, theirs[p].address, out[p].data, out[p].bytes);
  }
  // No peer reads our parts any more (only the pairs that read).
  for (int p = 0; p < P; ++p) {
    if (p == r || !reads(p)) continue;
    t.recv(p, nullptr, 0);
    t.send(p, nullptr, 0);
  }
  t.wait_all();
}

namespace {

// The root hands each other rank the address of what it reads
// (address_of(p)) and runs `meanwhile`; each reads `bytes` from there into
// `out` and says "done"; the root's "release" back ends the call (a root
// that failed before it never sends it, so no reader returns data read
// after the buffer was freed).
void read_from_root(Transport& t, int root, const std::function<const void*(int)>& address_of,
                    void* out, size_t bytes, const std::function<void()>& meanwhile = nullptr) {
  const int P = t.size();
  if (t.rank() == root) {
    std::vector<Descriptor> d(P);
    for (int p = 0; p < P; ++p) {
      if (p == root) continue;
      d[p] = {reinterpret_cast<uint64_t>(address_of(p)), 0};
      t.send(p, &d[p], sizeof(Descriptor));  // goes out now (Transport::send)
      t.recv(p, nullptr, 0);
    }
    if (meanwhile) meanwhile();
    t.wait_all();
    for (int p = 0; p < P; ++p) {
      if (p != root) t.send(p, nullptr, 0);
    }
    t.wait_all();
    return;
  }
  Descriptor theirs{};
  t.recv(root, &theirs, sizeof theirs);
  t.wait_all();
  if (bytes > 0) read_peer(t, root, theirs.in, out, bytes);
  t.send(root, nullptr, 0);
  t.recv(root, nullptr, 0);
  t.wait_all();
}

}  // namespace

void shm_scatter(Transport& t, std::span<const uint8_t* const> slots, TensorView out, int root) {
  const size_t bytes = out.nbytes();
  // The root copies its own slot while the others read theirs.
  read_from_root(
      t, root, [&](int p) { return static_cast<const void*>(slots[p]); }, out.data, bytes,
      [&] {
        if (slots[root] != out.data && bytes > 0) std::memcpy(out.data, slots[root], bytes);
      });
}

void shm_broadcast(Transport& t, TensorView tensor, int root) {
  read_from_root(
      t, root, [&](int) { return static_cast<const void*>(tensor.data); }, tensor.data,
      tensor.nbytes());
}

}  // namespace collie
