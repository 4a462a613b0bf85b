// AllReduceAlgorithm: which all_reduce a Communicator runs. kAuto picks the
// small-message algorithm below CommunicatorOptions::small_message_bytes and
// the pipelined ring above it (kShm, reading the peers' memory, instead of
// the ring when every rank is on one host, with at least
// CommunicatorOptions::shm_all_reduce_ranks ranks and fewer than
// shm_ring_bytes bytes; kHierarchical when the group spans
// hosts of equal rank counts: shared memory inside each host, TCP between
// them); the explicit values exist for benchmarking and tests.
#pragma once

#include <cstdint>
#include <string_view>

namespace collie {

enum class AllReduceAlgorithm : uint8_t { kAuto, kRing, kSmall, kShm, kHierarchical };

std::string_view to_string(
    AllReduceAlgorithm algorithm);  // "auto", "ring", "small", "shm", "hierarchical"

}  // namespace collie
