// The collective algorithms, one file each (docs/algorithms.md has the steps
// and the bytes each rank puts on the wire). They run over a Transport whose
// current call has been begun, take validated arguments (the Communicator
// checks them) and world size >= 2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "collie/base/types.h"
#include "collie/collectives/transport/transport.h"

namespace collie {

// Grow-only scratch buffers, kept by the communicator between calls so that
// a training loop allocates once.
class Workspace {
 public:
  void* get(int slot, size_t bytes) {
    if (buffers_.size() <= static_cast<size_t>(slot)) buffers_.resize(slot + 1);
    auto& b = buffers_[slot];
    // Round up so that float32 views of the buffer are aligned.
    if (b.size() < bytes) b.resize((bytes + 63) / 64 * 64);
    return b.data();
  }

 private:
  std::vector<std::vector<uint8_t>> buffers_;
};

// Elements [begin(c), begin(c + 1)) of `count` cut into `parts` near-equal
// contiguous pieces (the first count % parts one element longer).
inline size_t part_begin(size_t count, size_t parts, size_t c) {
  return count / parts * c + std::min(c, count % parts);
}

// Above this world size the algorithms that talk to every peer (the direct
// small all_reduce and broadcast) give way to the ring and the chain, so
// that lazy connections stay O(2 + log2 P) per rank over TCP.
inline constexpr int kDirectPeers = 8;

struct AlgorithmConfig {
  size_t segment_bytes;
  size_t small_message_bytes;
  int shm_all_reduce_ranks;
  size_t shm_ring_bytes;
  size_t hierarchical_small_bytes;
};

// A byte range a message is sent from / received into.
struct Span {
  const void* data;
  size_t bytes;
};
struct MutableSpan {
  void* data;
  size_t bytes;
};
// A receive for run_ring_pipeline: into `data`, or, with reduce_in set,
// reduced on arrival: data[i] = reduce_in[i] op received[i]
// (Transport::recv_reduce).
struct RecvTarget {
  void* data;
  size_t bytes;
  const void* reduce_in = nullptr;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

// out = the P slots (slot p at slots + p * slot_bytes, out.count elements
// each) reduced in rank order 0, 1, ..., P-1, so that every rank that does
// this computes bitwise the same result; half types in float32, rounded
// once; AVG divides once. The direct-exchange algorithms end with it.
void reduce_in_rank_order(Workspace& ws, const uint8_t* slots, size_t slot_bytes, int P,
                          TensorView out, ReduceOp op);

void ring_all_reduce(Transport& t, Workspace& ws, const AlgorithmConfig& cfg, TensorView in,
                     TensorView out, ReduceOp op);
void small_all_reduce(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op);
// The direct exchange in 2 hops with 2 (P-1)/P of the buffer per rank
// (a direct reduce_scatter, then a direct all_gather).
void two_step_all_reduce(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op);
void broadcast(Transport& t, const AlgorithmConfig& cfg, TensorView tensor, int root);
void dissemination_barrier(Transport& t);
// The list forms: slots[p] holds rank p's part (in.nbytes() / out.nbytes()
// bytes each); the tensor forms pass the P consecutive slots of one buffer.
void all_gather(Transport& t, const AlgorithmConfig& cfg, TensorView in,
                std::span<uint8_t* const> slots);
void reduce_scatter(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                    std::span<const uint8_t* const> slots, TensorView out, ReduceOp op);
// Root's out = every rank's in reduced; the other ranks' out is not written.
void reduce(Transport& t, Workspace& ws, const AlgorithmConfig& cfg, TensorView in, TensorView out,
            ReduceOp op, int root);
// On the root, slots[p] receives rank p's in; elsewhere slots is empty.
void gather(Transport& t, Workspace& ws, const AlgorithmConfig& cfg, TensorView in,
            std::span<uint8_t* const> slots, int root);
// Rank p's out receives the root's slots[p]; slots is empty off the root.
void scatter(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
             std::span<const uint8_t* const> slots, TensorView out, int root);
// Rank r sends in[p] to rank p and receives out[p] from it, for every p
// (in[r] is copied to out[r]); sizes may differ per peer.
void all_to_all(Transport& t, const AlgorithmConfig& cfg, std::span<const Span> in,
                std::span<const MutableSpan> out);

// Every rank on one host and Transport::all_peers_readable() (cma_algorithms.cc).
// shm_all_reduce calls `between(lo, hi)`, when given, once this rank has
// reduced its slice (out's elements [lo, hi)) and before any peer reads it:
// the hierarchical all_reduce's inter-host step.
void shm_all_reduce(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op,
                    const std::function<void(size_t, size_t)>& between = nullptr);
void shm_reduce_scatter(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op);
void shm_all_gather(Transport& t, TensorView in, TensorView out);
void shm_broadcast(Transport& t, TensorView tensor, int root);
// scatter's contract: every rank reads its slot of the root's.
void shm_scatter(Transport& t, std::span<const uint8_t* const> slots, TensorView out, int root);
// all_to_all's contract (sizes may differ per peer; a size mismatch fails
// on the receiver, naming the sender and both sizes, before any read). A
// pair whose two parts are both up to `direct_bytes` sends them instead.
void shm_all_to_all(Transport& t, size_t direct_bytes, std::span<const Span> in,
                    std::span<const MutableSpan> out);
// The host steps of the hierarchical algorithms (every rank on one host):
// - shm_reduce_chunks: out's k-th piece of `count` elements = the host's
//   inputs' elements [begins[k], begins[k] + count) reduced in rank order.
//   Each rank passes its own begins; every rank reads the others' inputs.
// - shm_copy_peer_chunks: every rank's `buffer` has the same layout; rank r
//   copies from each peer p the chunk_bytes at each byte offset in
//   offsets(p) into the same offsets of its own buffer.
// - shm_gather_parts: the root copies each rank p's `part` into out at
//   part_of(p) = {byte offset, bytes}; the others wait until it has.
void shm_reduce_chunks(Transport& t, Workspace& ws, TensorView in, std::span<const size_t> begins,
                       size_t count, void* out, ReduceOp op);
void shm_copy_peer_chunks(Transport& t, void* buffer, size_t chunk_bytes,
                          const std::function<std::vector<size_t>(int)>& offsets);
void shm_gather_parts(Transport& t, const void* part, void* out, int root,
                      const std::function<std::pair<size_t, size_t>(int)>& part_of);

// The hosts of a group that spans several (hierarchical.cc), the same on
// every rank: built from the host ids every rank published at join.
struct HostMap {
  // host_of[r]: rank r's host, the hosts numbered in the order of their
  // lowest rank (transport/join.h, Bootstrap::host_of).
  explicit HostMap(std::vector<int> host_of);
  std::vector<int> host_of;
  std::vector<std::vector<int>> hosts;  // each host's ranks, ascending
  std::vector<int> local_index;         // local_index[r]: r's position on its host
  bool uniform = true;                  // every host runs the same number of ranks
  int max_local = 0;                    // the most ranks on one host
};

// The hierarchical algorithms (hierarchical.cc): shared memory inside each
// host, TCP between hosts. They need every rank able to read its host
// peers' memory (Transport::peer_pid); the all_reduce needs a uniform map.
void hierarchical_all_reduce(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                             const HostMap& map, TensorView in, TensorView out, ReduceOp op);
void hierarchical_broadcast(Transport& t, const AlgorithmConfig& cfg, const HostMap& map,
                            TensorView tensor, int root);
void hierarchical_barrier(Transport& t, const HostMap& map);
// The tensor forms (one buffer of world x in / world x out), uniform maps:
// the bytes between hosts cross once, by the ranks of equal local index.
void hierarchical_all_gather(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                             const HostMap& map, TensorView in, TensorView out);
void hierarchical_reduce_scatter(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                                 const HostMap& map, TensorView in, TensorView out, ReduceOp op);
void hierarchical_reduce(Transport& t, Workspace& ws, const AlgorithmConfig& cfg,
                         const HostMap& map, TensorView in, TensorView out, ReduceOp op, int root);

}  // namespace collie
