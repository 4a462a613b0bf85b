#include "collie/collectives/transport/shm/shm_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "collie/base/error.h"
#include "collie/base/socket_io.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/transport/shm/futex.h"
#include "collie/collectives/transport/shm/memory_headroom.h"
#include "collie/collectives/transport/shm/shm_ring.h"

namespace collie {
namespace {

constexpr uint64_t kSegmentMagic = 0x434c49534d454732;  // "CLISMEG2"
constexpr uint64_t kProofMagic = 0x70726f6f66;          // "proof"
constexpr uint32_t kOfferMagic = 0x434c4953;            // "CLIS"

struct SegmentHeader {
  uint64_t magic;
  uint64_t ring_bytes;
  uint64_t nonce;
  std::atomic<uint64_t> proof;  // the acceptor writes nonce ^ kProofMagic
  uint8_t pad[32];
};
static_assert(sizeof(SegmentHeader) == 64);

// Each side's futex word, on its own cache line: the side sleeps on it, the
// other side bumps it and wakes it (0: the connector's, 1: the acceptor's).
struct Bells {
  struct alignas(64) Bell {
    std::atomic<uint32_t> word{0};
  };
  Bell bell[2];
};
static_assert(sizeof(Bells) == 128);

// header | bells | control of ring 0 (connector -> acceptor) | control of
// ring 1 | data of ring 0 | data of ring 1
constexpr size_t kBellsOffset = sizeof(SegmentHeader);
constexpr size_t kControlOffset = kBellsOffset + sizeof(Bells);
constexpr size_t kDataOffset = kControlOffset + 2 * sizeof(ShmRingControl);

// The set-up messages on the pair's socket. Every byte of each is set
// (no padding, no field left as it was), and an address of this process
// (the probe word's) goes only to a peer that needs it: the connector's
// with a segment it offers, the acceptor's with an answer that mapped and
// proved that segment and read the connector's probe word. A refused or
// forged offer gets zeros back, never an address that would undo ASLR.
struct Offer {  // connector -> acceptor, with the memfd (or none: status != 0)
  uint32_t magic;
  uint32_t status;  // kOfferAttached: a segment is attached
  uint64_t ring_bytes;
  uint64_t probe_address;  // where the connector's probe word lives (0 without a segment)
  uint64_t probe_value;
};
constexpr uint32_t kOfferAttached = 0;
constexpr uint32_t kOfferNone = 1;      // no segment: making it failed
constexpr uint32_t kOfferNoMemory = 2;  // no segment: it would not fit in the memory limit
struct Answer {                         // acceptor -> connector, then the connector's verdict back
  uint32_t magic;
  uint32_t status;  // 0: mapped and proven
  uint32_t cma;     // 1: this side read the other's probe word with process_vm_readv
  uint32_t reserved;
  uint64_t probe_address;  // 0 unless status is 0 and cma is 1
  uint64_t probe_value;
};
static_assert(sizeof(Offer) == 32 && sizeof(Answer) == 32, "no padding on the wire");

// The word each process's peers read to find out whether cross-memory
// attach works between them.
uint64_t probe_word() {
  static const uint64_t word = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  return word;
}
const volatile uint64_t* probe_address() {
  static volatile uint64_t word = probe_word();
  return &word;
}

pid_t peer_pid_of(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.pid;
}

bool cma_reads(pid_t pid, uint64_t address, uint64_t expected) {
  if (pid <= 0) return false;
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(address), sizeof got};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof got && got == expected;
}

void send_exact(int fd, const void* data, size_t n, const Deadline& deadline,
                const std::string& who, const char* what) {
  const IoResult r = send_all(fd, data, n, deadline.when());
  if (!r.ok()) {
    if (r.kind == IoResult::Kind::kTimeout)
      throw TimeoutError(
          str_cat("sending the ", what, " to ", who, " ", r.describe(), " ", deadline.describe()));
    throw NetworkError(str_cat("sending the ", what, " to ", who, " failed: ", r.describe()));
  }
}

void recv_exact_or_throw(int fd, void* data, size_t n, const Deadline& deadline,
                         const std::string& who, const char* what) {
  const IoResult r = recv_exact(fd, data, n, deadline.when());
  if (!r.ok()) {
    if (r.kind == IoResult::Kind::kTimeout)
      throw TimeoutError(str_cat("reading the ", what, " from ", who, " ", r.describe(), " ",
                                 deadline.describe()));
    throw NetworkError(str_cat("reading the ", what, " from ", who, " failed: ", r.describe()));
  }
}

// Sends `offer` with `fd` attached (fd < 0: none).
void send_with_fd(int sock, const Offer& offer, int fd, const Deadline& deadline,
                  const std::string& who) {
  iovec iov{const_cast<Offer*>(&offer), sizeof offer};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  for (;;) {
    // The socket is fresh and empty: the small offer goes in one call.
    const ssize_t r = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (r == static_cast<ssize_t>(sizeof offer)) return;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_socket(sock, POLLOUT, deadline.when()).kind == IoResult::Kind::kTimeout)
        throw TimeoutError(str_cat("sending the shared-memory offer to ", who, " timed out ",
                                   deadline.describe()));
      continue;
    }
    throw NetworkError(str_cat("sending the shared-memory offer to ", who,
                               " failed: ", r < 0 ? std::strerror(errno) : "short write"));
  }
}

// Receives an Offer and the fd that came with it (UniqueFd() if none).
UniqueFd recv_with_fd(int sock, Offer* offer, const Deadline& deadline, const std::string& who) {
  if (wait_socket(sock, POLLIN, deadline.when()).kind == IoResult::Kind::kTimeout)
    throw TimeoutError(str_cat("waiting for the shared-memory offer from ", who, " timed out ",
                               deadline.describe()));
  iovec iov{offer, sizeof *offer};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r;
  do {
    r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  } while (r < 0 && errno == EINTR);
  UniqueFd fd;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c), sizeof got);
      fd.reset(got);
    }
  }
  if (r != static_cast<ssize_t>(sizeof *offer)) {
    size_t have = r > 0 ? static_cast<size_t>(r) : 0;
    if (r < 0 && errno != EAGAIN)
      throw NetworkError(
          str_cat("reading the shared-memory offer from ", who, " failed: ", std::strerror(errno)));
    recv_exact_or_throw(sock, reinterpret_cast<uint8_t*>(offer) + have, sizeof *offer - have,
                        deadline, who, "shared-memory offer");
  }
  return fd;
}

class Mapping {
 public:
  Mapping() = default;
  Mapping(void* p, size_t n) : p_(p), n_(n) {}
  ~Mapping() {
    if (p_) ::munmap(p_, n_);
  }
  Mapping(Mapping&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
  Mapping& operator=(Mapping&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  uint8_t* get() const { return static_cast<uint8_t*>(p_); }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

class ShmChannel final : public Channel, public SharedMemoryAbilities {
 public:
  ShmChannel(UniqueFd socket, Mapping mapping, size_t ring_bytes, bool connector, pid_t cma_pid)
      : socket_(std::move(socket)), mapping_(std::move(mapping)), cma_pid_(cma_pid) {
    uint8_t* base = mapping_.get();
    auto* control = reinterpret_cast<ShmRingControl*>(base + kControlOffset);
    ShmRing ring0(&control[0], base + kDataOffset, ring_bytes);
    ShmRing ring1(&control[1], base + kDataOffset + ring_bytes, ring_bytes);
    tx_ = connector ? ring0 : ring1;
    rx_ = connector ? ring1 : ring0;
    auto* bells = reinterpret_cast<Bells*>(base + kBellsOffset);
    my_bell_ = &bells->bell[connector ? 0 : 1].word;
    peer_bell_ = &bells->bell[connector ? 1 : 0].word;
  }

  ~ShmChannel() override {
    // A peer asleep on its futex learns of the close from the fds it polls
    // once awake: close first, then wake it.
    socket_.reset();
    bump(peer_bell_);
  }

  ChannelKind kind() const override { return ChannelKind::kShm; }
  SharedMemoryAbilities* shared_memory() override { return this; }
  pid_t peer_pid() const override { return cma_pid_; }
  void wake_peer() override {
    // As if bytes had arrived for its reads: a peer that armed them is
    // woken the way it asked; one that spins needs no syscall.
    if (const uint32_t how = tx_.take_consumer_waiting()) ring(how);
  }

  ssize_t write(const iovec* iov, int count) override {
    // Only a peer that is gone refuses bytes (a socket's EPIPE); one that
    // shut its side down after a goodbye or an abort still reads.
    if (gone_) {
      errno = EPIPE;
      return -1;
    }
    size_t wanted = 0;
    for (int i = 0; i < count; ++i) wanted += iov[i].iov_len;
    if (wanted == 0) return 0;  // as a socket's writev: nothing to move is no error
    uint32_t wake = 0;
    const size_t n = tx_.write(iov, count, &wake);
    if (wake) ring(wake);
    if (n == 0) {
      errno = EAGAIN;
      return -1;
    }
    return static_cast<ssize_t>(n);
  }
  ssize_t read(void* data, size_t bytes) override { return take(data, bytes, true); }
  ssize_t read_to(size_t bytes, const ReadSink& sink) override {
    uint32_t wake = 0;
    const ssize_t n = rx_.read_view(bytes, sink, &wake);
    if (wake) ring(wake);
    if (n != 0) return n;
    if (eof_) return 0;
    errno = EAGAIN;
    return -1;
  }
  ssize_t peek(void* data, size_t bytes) override { return take(data, bytes, false); }

  int take_frame(const void* header, size_t header_bytes, void* payload,
                 size_t payload_bytes) override {
    uint32_t wake = 0;
    const ssize_t r = rx_.take_whole(
        header_bytes + payload_bytes,
        [&](const uint8_t* p) {
          if (std::memcmp(p, header, header_bytes) != 0) return false;
          if (payload_bytes > 0) std::memcpy(payload, p + header_bytes, payload_bytes);
          return true;
        },
        &wake);
    if (wake) ring(wake);
    return r > 0 ? 1 : r == 0 ? 0 : -1;
  }
  int fd() const override { return socket_.get(); }
  short arm(bool want_read, bool want_write, bool* ready) override {
    *ready = arm_rings(want_read, want_write, kWaitPoll);
    // The doorbell and the hang-up both arrive on the socket.
    return POLLIN | POLLRDHUP;
  }
  std::atomic<uint32_t>* futex_word() override { return my_bell_; }
  void arm_futex(bool want_read, bool want_write, bool* ready, uint32_t* value) override {
    // The value first: a wake that comes after it (the peer saw our flag)
    // changes the word, so the futex wait cannot miss it.
    *value = my_bell_->load(std::memory_order_seq_cst);
    *ready = arm_rings(want_read, want_write, kWaitFutex);
  }
  short disarm(short revents) override {
    rx_.disarm_read();
    tx_.disarm_write();
    if (revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR)) drain_doorbells();
    // POLLHUP: both directions are shut: the peer closed (or died), or we
    // shut down in abort().
    if (revents & (POLLHUP | POLLERR)) gone_ = eof_ = true;
    short ready = 0;
    if (rx_.readable() || eof_) ready |= POLLIN;
    if (tx_.writable() || gone_) ready |= POLLOUT;
    if (eof_) ready |= POLLRDHUP | POLLHUP;
    return ready;
  }

  // Each also wakes a futex sleeper, which then finds the shutdown through
  // the fds: the peer (its EOF), or this side (an abort from another thread).
  void shutdown_write() override {
    ::shutdown(socket_.get(), SHUT_WR);
    bump(peer_bell_);
  }
  void shutdown_both() override {
    ::shutdown(socket_.get(), SHUT_RDWR);
    bump(my_bell_);
  }

 private:
  ssize_t take(void* data, size_t bytes, bool consume) {
    uint32_t wake = 0;
    const ssize_t n = rx_.read(data, bytes, consume, &wake);
    if (wake) ring(wake);
    if (n != 0) return n;
    // Nothing buffered: the peer's end is known closed only through the
    // socket (drained by disarm() after poll() saw it).
    if (eof_) return 0;
    errno = EAGAIN;
    return -1;
  }
  // Asks the peer to wake us (`how`) for what is wanted; true when it can
  // already be done (then there is no need to sleep).
  bool arm_rings(bool want_read, bool want_write, uint32_t how) {
    bool ready = false;
    if (want_read && (rx_.arm_read(how) || eof_)) ready = true;
    if (want_write && (tx_.arm_write(how) || gone_)) ready = true;
    return ready;
  }
  // Wakes the peer the way it asked to be woken.
  void ring(uint32_t how) {
    if (how == kWaitFutex) {
      bump(peer_bell_);
      return;
    }
    // A full socket buffer already holds a doorbell: nothing is lost.
    const char bell = 'b';
    (void)::send(socket_.get(), &bell, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  static void bump(std::atomic<uint32_t>* bell) {
    bell->fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(bell);
  }
  void drain_doorbells() {
    char buf[256];
    for (;;) {
      const ssize_t r = ::recv(socket_.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) continue;
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) eof_ = true;
      return;
    }
  }

  UniqueFd socket_;
  Mapping mapping_;
  ShmRing tx_, rx_;
  std::atomic<uint32_t>* my_bell_ = nullptr;    // we sleep on it
  std::atomic<uint32_t>* peer_bell_ = nullptr;  // the peer sleeps on it
  pid_t cma_pid_;
  bool eof_ = false;   // the peer shut its side down (or is gone)
  bool gone_ = false;  // the peer closed its socket: it exited or died
};

// Whether the memfd a peer sent can back a segment of `bytes`: it is at
// least that long now (fstat, not what the offer claims) and sealed against
// shrinking, so that it stays that long under our mapping. A segment cut
// short under a mapping is a SIGBUS on the next access.
bool segment_fits(int fd, size_t bytes, const std::string& who, std::string* why) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    *why = str_cat("fstat of the segment from ", who, " failed: ", std::strerror(errno));
    return false;
  }
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < bytes) {
    *why = str_cat("the segment from ", who, " is ", st.st_size, " bytes, but its offer needs ",
                   bytes);
    return false;
  }
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    *why = str_cat("the segment from ", who,
                   " is not sealed against shrinking (F_SEAL_SHRINK): it could be cut short "
                   "under the mapping");
    return false;
  }
  return true;
}

// MAP_POPULATE: the page tables are filled now, at set-up. Otherwise each
// side takes a page fault on each 4 KiB page of the rings the first time
// it writes or reads there: every 32nd to 64th small message of a job's
// first pass through a 1 MiB ring, a fault costing microseconds on a VM.
// That was most of the first thousands of calls' time: a 64-byte
// all_gather at 2 ranks took 0.7-1.2 us per call over a job's first 5000
// calls, 0.45-0.5 with the rings populated (the steady state).
Mapping map_segment(int fd, size_t bytes, std::string* why) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    *why = str_cat("mmap of a ", bytes, "-byte segment failed: ", std::strerror(errno));
    return Mapping();
  }
  return Mapping(p, bytes);
}

// A memfd of `bytes` with every page reserved, or none with *why and
// *status (kOfferNone, kOfferNoMemory) set. The pages are charged to this
// process's memory cgroup, and past its memory.max the kernel does not fail
// the reservation: its OOM killer SIGKILLs a rank. So the room under every
// limit is checked first (memory_headroom.h), under the limiting cgroup's
// lock, held until the pages are reserved (and no longer: never while
// waiting for a peer), so that the other local ranks count them.
UniqueFd reserve_segment(size_t bytes, size_t ring_bytes, const Deadline& deadline,
                         std::string* why, uint32_t* status) {
  MemoryHeadroom room = memory_headroom();
  const CgroupReservationLock lock(room.cgroup_dir, deadline);
  if (lock.held()) room = memory_headroom();
  if (std::string no_room = shm_memory_refusal(bytes, ring_bytes, room); !no_room.empty()) {
    *why = std::move(no_room);
    *status = kOfferNoMemory;
    return UniqueFd();
  }
  *status = kOfferNone;
  // memfd: the segment has no name anywhere, so nothing can be left behind
  // in /dev/shm, whoever dies when.
  UniqueFd memfd(::memfd_create("collie-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memfd) {
    *why = str_cat("memfd_create failed: ", std::strerror(errno));
    return UniqueFd();
  }
  if (::ftruncate(memfd.get(), static_cast<off_t>(bytes)) != 0) {
    *why = str_cat("sizing the ", bytes, "-byte segment failed: ", std::strerror(errno));
    return UniqueFd();
  }
  // The pages now, not at first touch: memory a memfd cannot get is a
  // fallback to the socket here, not a SIGBUS mid-collective. /dev/shm's
  // size does not apply.
  if (const int e = ::posix_fallocate(memfd.get(), 0, static_cast<off_t>(bytes)); e != 0) {
    *why = str_cat("reserving the ", bytes, "-byte segment's memory failed: ", std::strerror(e),
                   " (the memory cgroup's limit, or RAM; COLLIE_SHM_BYTES makes the rings "
                   "smaller)");
    return UniqueFd();
  }
  return memfd;
}

}  // namespace

size_t shm_segment_bytes(size_t ring_bytes) { return kDataOffset + 2 * ring_bytes; }

std::unique_ptr<Channel> shm_connect(UniqueFd& socket, size_t ring_bytes, const Deadline& deadline,
                                     const std::string& who, std::string* why) {
  const size_t bytes = shm_segment_bytes(ring_bytes);
  Offer offer{kOfferMagic, kOfferNone, ring_bytes, 0, 0};
  UniqueFd memfd = reserve_segment(bytes, ring_bytes, deadline, why, &offer.status);
  Mapping mapping;
  uint64_t nonce = 0;
  if (memfd) {
    if (::fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      *why = str_cat("sealing the segment failed: ", std::strerror(errno));
    } else {
      mapping = map_segment(memfd.get(), bytes, why);
    }
  }
  if (mapping.get()) {
    nonce = probe_word() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    auto* header = new (mapping.get()) SegmentHeader{kSegmentMagic, ring_bytes, nonce, {0}, {}};
    (void)header;
    new (mapping.get() + kBellsOffset) Bells;
    new (mapping.get() + kControlOffset) ShmRingControl[2];
    offer.status = kOfferAttached;
    offer.probe_address = reinterpret_cast<uint64_t>(probe_address());
    offer.probe_value = probe_word();
  }
  send_with_fd(socket.get(), offer, offer.status == kOfferAttached ? memfd.get() : -1, deadline,
               who);
  memfd.reset();  // the mapping keeps the segment alive
  Answer answer{};
  recv_exact_or_throw(socket.get(), &answer, sizeof answer, deadline, who, "shared-memory answer");
  const pid_t pid = peer_pid_of(socket.get());
  Answer verdict{kOfferMagic, 1, 0, 0, 0, 0};
  if (answer.magic != kOfferMagic) {
    *why = str_cat(who, " answered the shared-memory offer with garbage");
  } else if (answer.status != 0) {
    if (why->empty()) *why = str_cat(who, " could not map the segment");
  } else if (reinterpret_cast<SegmentHeader*>(mapping.get())->proof.load() !=
             (nonce ^ kProofMagic)) {
    *why = str_cat(who, " answered, but its proof is not in the segment (not the same memory)");
  } else {
    verdict.status = 0;
    // An acceptor that could not read our probe word sent no address of its
    // own: cross-memory attach needs both directions.
    verdict.cma = answer.cma && cma_reads(pid, answer.probe_address, answer.probe_value) ? 1 : 0;
  }
  send_exact(socket.get(), &verdict, sizeof verdict, deadline, who, "shared-memory verdict");
  if (verdict.status != 0) return nullptr;
  const pid_t cma_pid = verdict.cma && answer.cma ? pid : 0;
  return std::make_unique<ShmChannel>(std::move(socket), std::move(mapping), ring_bytes, true,
                                      cma_pid);
}

std::unique_ptr<Channel> shm_accept(UniqueFd& socket, const Deadline& deadline,
                                    const std::string& who, std::string* why) {
  Offer offer{};
  UniqueFd memfd = recv_with_fd(socket.get(), &offer, deadline, who);
  const pid_t pid = peer_pid_of(socket.get());
  // Zeros until the segment is proven: a refused offer learns nothing.
  Answer answer{kOfferMagic, 1, 0, 0, 0, 0};
  Mapping mapping;
  size_t ring_bytes = 0;
  if (offer.magic == kOfferMagic && offer.status == kOfferNoMemory) {
    *why = str_cat(who, " reserved no shared-memory segment: its rings of ",
                   format_memory_bytes(offer.ring_bytes),
                   " would not fit in its memory limit (its WARN names the limit; "
                   "COLLIE_SHM_BYTES makes the rings smaller)");
  } else if (offer.magic != kOfferMagic || offer.status != kOfferAttached || !memfd) {
    *why = str_cat(who, " offered no shared-memory segment");
  } else if (offer.ring_bytes < kShmRingMinBytes || offer.ring_bytes % kShmLineBytes != 0 ||
             offer.ring_bytes > (size_t{1} << 34)) {
    *why = str_cat(who, " offered rings of ", offer.ring_bytes, " bytes");
  } else {
    ring_bytes = offer.ring_bytes;
    if (segment_fits(memfd.get(), shm_segment_bytes(ring_bytes), who, why))
      mapping = map_segment(memfd.get(), shm_segment_bytes(ring_bytes), why);
  }
  memfd.reset();
  if (mapping.get()) {
    auto* header = reinterpret_cast<SegmentHeader*>(mapping.get());
    if (header->magic != kSegmentMagic || header->ring_bytes != ring_bytes) {
      *why = str_cat("the segment from ", who, " does not start with collie's header");
    } else {
      header->proof.store(header->nonce ^ kProofMagic);
      answer.status = 0;
      answer.cma = cma_reads(pid, offer.probe_address, offer.probe_value) ? 1 : 0;
      // Our address only for a peer whose memory we could read: one we
      // cannot read gets no cross-memory attach either way.
      if (answer.cma) {
        answer.probe_address = reinterpret_cast<uint64_t>(probe_address());
        answer.probe_value = probe_word();
      }
    }
  }
  send_exact(socket.get(), &answer, sizeof answer, deadline, who, "shared-memory answer");
  Answer verdict{};
  recv_exact_or_throw(socket.get(), &verdict, sizeof verdict, deadline, who,
                      "shared-memory verdict");
  if (answer.status != 0) return nullptr;
  if (verdict.magic != kOfferMagic || verdict.status != 0) {
    *why = str_cat(who, " did not find our proof in the segment");
    return nullptr;
  }
  const pid_t cma_pid = verdict.cma && answer.cma ? pid : 0;
  return std::make_unique<ShmChannel>(std::move(socket), std::move(mapping), ring_bytes, false,
                                      cma_pid);
}

}  // namespace collie
