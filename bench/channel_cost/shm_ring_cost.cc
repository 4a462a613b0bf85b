// shm_ring_cost: what one exchange through a pair of shared-memory rings
// (collectives/transport/shm/shm_ring.h) costs between two processes, the ring alone:
// no connection, no transport, no sleeping. Both processes write a frame of
// F bytes into their ring and then read the peer's F bytes from the other,
// as the two ranks of a small all_reduce do; the figure is ns per exchange,
// median (and first quartile) over blocks. Each frame's first and last
// bytes carry the exchange's number, and each side checks the peer's (exit
// 1 on a wrong byte), so a run is also a test that frames arrive whole and
// in order, across many laps of the ring.
//
// It uses only ShmRing's constructor, write() and read(), which the ring has
// had since it was written, so the same file builds against an older tree
// for a before/after comparison:
//
//   shm_ring_cost [frame bytes=44] [exchanges per block=100000] [blocks=31]
//   g++ -O2 -std=c++20 -I OLD_TREE bench/channel_cost/shm_ring_cost.cc -o /tmp/old_ring_cost
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "collie/collectives/transport/shm/shm_ring.h"

using collie::ShmRing;
using collie::ShmRingControl;

namespace {

constexpr size_t kRingBytes = size_t{1} << 20;  // the default COLLIE_SHM_BYTES

struct Segment {
  ShmRingControl control[2];
  alignas(64) uint8_t data[2][kRingBytes];
};

// Both sides spin; a peer that stopped (exited on a wrong byte, or was
// killed) is given up on after this long without progress.
constexpr auto kStuck = std::chrono::seconds(10);

void check_stuck(uint64_t* spins) {
  static std::chrono::steady_clock::time_point since;
  if (++*spins % (1 << 20) != 1) return;
  const auto now = std::chrono::steady_clock::now();
  if (*spins == 1) {
    since = now;
  } else if (now - since > kStuck) {
    std::fprintf(stderr, "shm_ring_cost: the peer made no progress for 10 s\n");
    std::exit(1);
  }
}

void send(ShmRing& ring, const uint8_t* p, size_t n) {
  uint64_t spins = 0;
  for (size_t done = 0; done < n;) {
    iovec iov{const_cast<uint8_t*>(p + done), n - done};
    uint32_t wake = 0;
    const size_t w = ring.write(&iov, 1, &wake);
    if (w == 0) check_stuck(&spins);
    done += w;
  }
}

void recv(ShmRing& ring, uint8_t* p, size_t n) {
  uint64_t spins = 0;
  for (size_t done = 0; done < n;) {
    uint32_t wake = 0;
    const ssize_t r = ring.read(p + done, n - done, true, &wake);
    if (r < 0) {
      std::perror("shm_ring_cost: read");
      std::exit(1);
    }
    if (r == 0) check_stuck(&spins);
    done += static_cast<size_t>(r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t frame = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 44;
  const int per_block = argc > 2 ? std::atoi(argv[2]) : 100000;
  const int blocks = argc > 3 ? std::atoi(argv[3]) : 31;
  if (frame == 0 || frame > kRingBytes / 2 || per_block <= 0 || blocks <= 0) {
    std::fprintf(stderr,
                 "usage: shm_ring_cost [frame bytes 1..%zu] [exchanges per block] [blocks]\n",
                 kRingBytes / 2);
    return 2;
  }
  void* mem =
      mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("shm_ring_cost: mmap");
    return 1;
  }
  auto* seg = new (mem) Segment;
  const pid_t child = fork();
  if (child < 0) {
    std::perror("shm_ring_cost: fork");
    return 1;
  }
  const int me = child == 0 ? 1 : 0;
  ShmRing tx(&seg->control[me], seg->data[me], kRingBytes);
  ShmRing rx(&seg->control[1 - me], seg->data[1 - me], kRingBytes);
  std::vector<uint8_t> out(frame, static_cast<uint8_t>(me)), in(frame);
  std::vector<double> ns;
  for (int b = 0; b < blocks; ++b) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < per_block; ++i) {
      out.front() = out.back() = static_cast<uint8_t>(i + me);
      send(tx, out.data(), frame);
      recv(rx, in.data(), frame);
      const auto want = static_cast<uint8_t>(i + 1 - me);
      if (in.front() != want || in.back() != want) {
        std::fprintf(stderr, "shm_ring_cost: exchange %d of block %d: got %d and %d, want %d\n", i,
                     b, in.front(), in.back(), want);
        return 1;
      }
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    ns.push_back(took.count() / per_block);
  }
  if (child == 0) return 0;
  int status = 0;
  waitpid(child, &status, 0);
  std::sort(ns.begin(), ns.end());
  std::printf("frame %zu B: %.1f ns an exchange (q1 %.1f, min %.1f) over %d blocks of %d\n", frame,
              ns[ns.size() / 2], ns[ns.size() / 4], ns.front(), blocks, per_block);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
