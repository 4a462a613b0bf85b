// The collective algorithms, one file each (docs/algorithms.md has the steps
// and the bytes each rank puts on the wire). They run over a Transport whose
// current call has been begun, take validated arguments (the Communicator
// checks them) and world size >= 2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/transport.h"
#include "runtime/base/types.h"

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
};

void ring_all_reduce(Transport& t, Workspace& ws, const AlgorithmConfig& cfg, TensorView in,
                     TensorView out, ReduceOp op);
void small_all_reduce(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op);
void broadcast(Transport& t, const AlgorithmConfig& cfg, TensorView tensor, int root);
void dissemination_barrier(Transport& t);
void all_gather(Transport& t, const AlgorithmConfig& cfg, TensorView in, TensorView out);
void reduce_scatter(Transport& t, Workspace& ws, const AlgorithmConfig& cfg, TensorView in,
                    TensorView out, ReduceOp op);

// Every rank on one host and Transport::all_peers_readable() (shm_algorithms.cc).
void shm_all_reduce(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op);
void shm_reduce_scatter(Transport& t, Workspace& ws, TensorView in, TensorView out, ReduceOp op);
void shm_all_gather(Transport& t, TensorView in, TensorView out);
void shm_broadcast(Transport& t, TensorView tensor, int root);

}  // namespace collie
