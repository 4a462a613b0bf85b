// libFuzzer target for the shared-memory ring (collectives/transport/shm/shm_ring.h):
// the control words live in memory the peer process can write, so the ring
// must survive any values there.
//
// Input layout: byte 0 picks the capacity (128 + 64 x (byte 0 % 32):
// 128..2112 bytes,
// small so that every operation wraps); the rest is a program of steps,
// each an opcode byte and its operands:
//   0 n       producer writes n bytes (two iovecs, split at n/2) of a counter
//   1 n       consumer reads up to n bytes, consuming them
//   2 n       consumer peeks at up to n bytes
//   3 o[2] v[8]  a hostile peer stores v at byte o % capacity of the ring's
//             data (a record header or the bytes of one)
//   4 v[8]    a hostile peer stores v in head
//   5 f       the waiting flags: arm/disarm read or write (bits of f; bit
//             16 arms for a futex wake rather than a doorbell)
// Promises checked:
//   - while nobody has tampered with the shared memory, the consumer gets
//     exactly the producer's bytes, in order (a model queue is kept), never
//     more than asked, and a write takes at most what it was given, and at
//     least one byte when writable() said it would;
//   - a write that moves bytes reports exactly how the consumer asked to be
//     woken (or 0), and so does a consuming read for the producer;
//   - after tampering, read() returns either EPROTO or at most what was
//     asked, no access leaves the ring's buffer (ASan in the fuzz build;
//     the buffer is bracketed by guard bytes checked after every step in
//     the replay build), and write() takes at most what it was given.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "collie/collectives/transport/shm/shm_ring.h"
#include "collie/test/fuzz/fuzz_check.h"

namespace {

constexpr const char* kTarget = "shm_ring_fuzz";
constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;

using collie::fuzz::check;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t capacity = 128 + 64 * static_cast<size_t>(data[0] % 32);
  std::vector<uint8_t> memory(capacity + 2 * kGuard, kGuardByte);
  uint8_t* ring_data = memory.data() + kGuard;
  std::memset(ring_data, 0, capacity);
  collie::ShmRingControl control;
  collie::ShmRing producer(&control, ring_data, capacity);
  collie::ShmRing consumer(&control, ring_data, capacity);

  std::deque<uint8_t> model;  // bytes written and not yet consumed
  uint8_t next = 0;           // the producer's counter
  bool tampered = false;
  size_t pos = 1;
  auto take = [&](size_t n) -> const uint8_t* {
    if (pos + n > size) return nullptr;
    const uint8_t* p = data + pos;
    pos += n;
    return p;
  };
  std::vector<uint8_t> out(512);
  uint32_t consumer_armed = 0, producer_armed = 0;  // how each side asked to be woken
  while (pos < size) {
    const uint8_t op = data[pos++] % 6;
    switch (op) {
      case 0: {
        const uint8_t* n = take(1);
        if (n == nullptr) break;
        std::vector<uint8_t> bytes(*n);
        for (auto& b : bytes) b = next++;
        iovec iov[2] = {{bytes.data(), bytes.size() / 2},
                        {bytes.data() + bytes.size() / 2, bytes.size() - bytes.size() / 2}};
        uint32_t wake = 0;
        const bool writable = producer.writable();
        const size_t wrote = producer.write(iov, 2, &wake);
        check(wrote <= bytes.size(), kTarget, "write took more than it was given");
        if (wrote > 0) {
          check(wake == consumer_armed, kTarget, "a write woke the consumer the wrong way");
          consumer_armed = 0;
        }
        if (!tampered) {
          check(wrote > 0 || !writable || bytes.empty(), kTarget,
                "write took nothing of " + std::to_string(bytes.size()) +
                    " bytes after writable() said it would take some");
          model.insert(model.end(), bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(wrote));
          check(model.size() <= capacity, kTarget, "more bytes buffered than the capacity");
        }
        next = static_cast<uint8_t>(next - (bytes.size() - wrote));  // unwritten ones again
        break;
      }
      case 1:
      case 2: {
        const uint8_t* n = take(1);
        if (n == nullptr) break;
        uint32_t wake = 0;
        errno = 0;
        // A count of 3 mod 4 consumes through take_whole (all the bytes in
        // one record or none; refused when the first is odd), 1 mod 4
        // through read_view (the bytes handed out where they lie in the
        // ring, in one or two pieces), else through read.
        if (op == 1 && (*n & 3) == 3) {
          bool looked = false, refused = false;
          const ssize_t took = consumer.take_whole(
              *n,
              [&](const uint8_t* p) {
                looked = true;
                std::memcpy(out.data(), p, *n);
                refused = (out[0] & 1) != 0;
                return !refused;
              },
              &wake);
          if (took < 0 && took != -2) {
            check(errno == EPROTO, kTarget, "take_whole failed with an errno other than EPROTO");
            check(tampered, kTarget, "take_whole reported corruption of honest control words");
            break;
          }
          check(took == -2  ? refused
                : took == 0 ? !looked
                            : took == *n && looked && !refused,
                kTarget, "take_whole's result disagrees with what it handed out");
          if (took > 0) {
            check(wake == producer_armed, kTarget, "a take woke the producer the wrong way");
            producer_armed = 0;
          }
          if (!tampered) {
            check(took <= 0 || model.size() >= *n, kTarget, "take_whole took bytes never written");
            for (ssize_t i = 0; looked && i < *n; ++i)
              check(out[static_cast<size_t>(i)] == model[static_cast<size_t>(i)], kTarget,
                    "take_whole handed out a byte out of order at " + std::to_string(i));
            if (took > 0) model.erase(model.begin(), model.begin() + took);
          }
          break;
        }
        size_t viewed = 0;
        const ssize_t got =
            op == 1 && (*n & 1)
                ? consumer.read_view(
                      *n,
                      [&](const uint8_t* p, size_t len) {
                        check(viewed + len <= *n, kTarget, "read_view handed out more than asked");
                        std::memcpy(out.data() + viewed, p, len);
                        viewed += len;
                      },
                      &wake)
                : consumer.read(out.data(), *n, op == 1, &wake);
        if (op == 1 && (*n & 1) && got >= 0)
          check(viewed == static_cast<size_t>(got), kTarget,
                "read_view's pieces are not its count");
        if (got < 0) {
          check(errno == EPROTO, kTarget, "read failed with an errno other than EPROTO");
          check(tampered, kTarget, "read reported corruption of honest control words");
          break;
        }
        check(static_cast<size_t>(got) <= *n, kTarget, "read returned more than asked");
        if (op == 1 && got > 0) {
          check(wake == producer_armed, kTarget, "a read woke the producer the wrong way");
          producer_armed = 0;
        }
        if (!tampered) {
          check(static_cast<size_t>(got) == std::min<size_t>(*n, model.size()), kTarget,
                "read returned " + std::to_string(got) + " of " + std::to_string(model.size()) +
                    " buffered bytes, asked " + std::to_string(*n));
          for (ssize_t i = 0; i < got; ++i)
            check(out[static_cast<size_t>(i)] == model[static_cast<size_t>(i)], kTarget,
                  "read a byte out of order at " + std::to_string(i));
          if (op == 1) model.erase(model.begin(), model.begin() + got);
        }
        break;
      }
      case 3: {
        const uint8_t* o = take(2);
        const uint8_t* v = take(8);
        if (o == nullptr || v == nullptr) break;
        const size_t at = std::min<size_t>((o[0] | o[1] << 8) % capacity, capacity - 8);
        std::memcpy(ring_data + at, v, 8);
        tampered = true;
        break;
      }
      case 4: {
        const uint8_t* v = take(8);
        if (v == nullptr) break;
        uint64_t value = 0;
        std::memcpy(&value, v, 8);
        control.head.store(value);
        tampered = true;
        break;
      }
      case 5: {
        const uint8_t* f = take(1);
        if (f == nullptr) break;
        const uint32_t how = (*f & 16) ? collie::kWaitFutex : collie::kWaitPoll;
        if (*f & 1) consumer.arm_read(how), consumer_armed = how;
        if (*f & 2) producer.arm_write(how), producer_armed = how;
        if (*f & 4) consumer.disarm_read(), consumer_armed = 0;
        if (*f & 8) producer.disarm_write(), producer_armed = 0;
        if (!tampered) {
          check(consumer.readable() == !model.empty(), kTarget, "readable() disagrees");
          check(!producer.writable() || model.size() < capacity, kTarget,
                "writable() with the ring full");
        }
        break;
      }
    }
    for (size_t i = 0; i < kGuard; ++i)
      check(memory[i] == kGuardByte && memory[kGuard + capacity + i] == kGuardByte, kTarget,
            "a write left the ring's buffer");
  }
  return 0;
}
