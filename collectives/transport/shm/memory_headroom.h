// How much memory this process may still use, and whether a pair's
// shared-memory segment fits in it.
//
// A segment is a memfd: tmpfs pages, charged to the memory cgroup of the
// process that reserves them. Past the cgroup's memory.max a reservation does
// not fail with ENOMEM: the kernel's cgroup OOM killer SIGKILLs a process of
// the cgroup (a rank, silently, in the middle of set-up). So the connector
// compares the segment with the room left under every limit that applies
// before it reserves a page, and falls back to the pair's socket, with a WARN
// naming the sizes and the limit, when the segment would not fit comfortably.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "collie/base/deadline.h"
#include "collie/base/unique_fd.h"

namespace collie {

// Where the limits are read from; tests point these at a fake tree.
struct MemorySources {
  std::string mountinfo = "/proc/self/mountinfo";  // where the cgroup hierarchies are mounted
  std::string cgroup = "/proc/self/cgroup";        // this process's cgroup in each
  std::string meminfo = "/proc/meminfo";           // MemAvailable
};

struct MemoryHeadroom {
  // Bytes this process may still use under the tightest limit; max() when
  // nothing limits it (no readable limit at all).
  uint64_t bytes = std::numeric_limits<uint64_t>::max();
  // The tightest limit, for messages: "the memory cgroup /sys/fs/cgroup/job
  // (memory.max 256 MiB, 20 MiB in use)" or "the machine (MemAvailable in
  // /proc/meminfo: 3 GiB)". Empty when nothing limits.
  std::string limit;
  // The directory of the cgroup with the least room (of those with a
  // limit), "" if none: local ranks reserving segments lock it, so that two
  // of them never both count the same room.
  std::string cgroup_dir;
};

// Reads the cgroup v2 limits (memory.max and memory.high, from this
// process's cgroup up to the hierarchy's root), the cgroup v1 ones
// (memory.limit_in_bytes) and MemAvailable. Usage is the working set (as
// Kubernetes counts it): memory.current (v1: memory.usage_in_bytes) less the
// inactive page cache, which the kernel reclaims before it kills. A file
// that is missing or unreadable is skipped: never throws.
MemoryHeadroom memory_headroom(const MemorySources& sources = {});

// The share of the headroom a segment may take: 3/4, leaving the program
// (its tensors, its other pairs) at least a quarter of what was left.
inline constexpr uint64_t kShmHeadroomShareNum = 3, kShmHeadroomShareDen = 4;

// "" when a segment of `segment_bytes` (two rings of `ring_bytes`) fits in
// `room`, else a sentence saying why not, with the sizes, the limit and the
// COLLIE_SHM_BYTES that would fit.
std::string shm_memory_refusal(uint64_t segment_bytes, uint64_t ring_bytes,
                               const MemoryHeadroom& room);

// "256 MiB", "1.5 GiB", "4096 bytes".
std::string format_memory_bytes(uint64_t bytes);

// An exclusive flock on a cgroup's directory, held while a rank checks the
// room and reserves its segment, so that the local ranks of one cgroup
// reserve one after the other, each counting the others' segments. Best
// effort: no directory, or no lock by `deadline`, holds nothing.
class CgroupReservationLock {
 public:
  CgroupReservationLock(const std::string& dir, const Deadline& deadline);
  bool held() const { return fd_.valid(); }

 private:
  UniqueFd fd_;  // closing it releases the lock
};

}  // namespace collie
