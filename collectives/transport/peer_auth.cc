#include "collie/collectives/transport/peer_auth.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/socket_io.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/transport/sockets.h"

namespace collie {
namespace {

constexpr size_t kAuth1Bytes = 24 + kNonceBytes;  // 56
constexpr size_t kAuth2Bytes = kNonceBytes + 32;  // 64
constexpr size_t kAuth3Bytes = 32;
constexpr const char* kAcceptorLabel = "collie data acceptor v1";
constexpr const char* kConnectorLabel = "collie data connector v1";
// Refused connections: the first few each get a WARN line, then at most one
// a second per gate (with the count of those not logged).
constexpr int kWarnFirst = 8;
constexpr auto kWarnPeriod = std::chrono::seconds(1);

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

// The transcript both proofs cover: AUTH1 (both ranks, group, size, Nc)
// followed by Na.
static_assert(kAuth1Bytes == 56 && kAuth3Bytes == 32, "PeerAuthAcceptor's buffers");

std::array<uint8_t, kAuth1Bytes + kNonceBytes> transcript(const uint8_t* auth1, const uint8_t* na) {
  std::array<uint8_t, kAuth1Bytes + kNonceBytes> t;
  std::memcpy(t.data(), auth1, kAuth1Bytes);
  std::memcpy(t.data() + kAuth1Bytes, na, kNonceBytes);
  return t;
}

void send_exact(int fd, const uint8_t* p, size_t n, const Deadline& deadline,
                const std::string& who) {
  const IoResult r = send_all(fd, p, n, deadline.when());
  if (r.kind == IoResult::Kind::kTimeout)
    throw TimeoutError(str_cat("authenticating to ", who, " timed out ", deadline.describe()));
  if (!r.ok())
    throw NetworkError(
        str_cat("authenticating to ", who, ": send failed: ", std::strerror(r.error)));
}

void recv_exact(int fd, uint8_t* p, size_t n, const Deadline& deadline, const std::string& who) {
  const IoResult r = collie::recv_exact(fd, p, n, deadline.when());
  if (r.kind == IoResult::Kind::kTimeout)
    throw TimeoutError(str_cat("authenticating to ", who, ": no answer ", deadline.describe()));
  if (!r.ok()) {
    throw NetworkError(str_cat(
        "authenticating to ", who, ": ",
        r.error == 0 ? "it closed the connection (it has no COLLIE_JOB_SECRET, or refused us)"
                     : std::strerror(r.error)));
  }
}

// "host:port" of a TCP peer; "pid N (unix socket)" of a local one, whose
// address is empty (the kernel vouches for its pid).
std::string remote_of(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return "?";
  if (sa.ss_family == AF_INET || sa.ss_family == AF_INET6)
    return tcp_address(reinterpret_cast<const sockaddr*>(&sa));
  if (sa.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t clen = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) {
      return str_cat("pid ", cred.pid, " (unix socket)");
    }
    return "a local process (unix socket)";
  }
  return "?";
}

}  // namespace

void authenticate_to_peer(int fd, const JobSecret& secret, const PeerIdentity& self, int peer,
                          const Deadline& deadline, const std::string& who) {
  if (!secret) return;
  uint8_t auth1[kAuth1Bytes];
  put_u32(auth1 + 0, kPeerAuthMagic);
  put_u32(auth1 + 4, kPeerAuthVersion);
  put_u32(auth1 + 8, self.group);
  put_u32(auth1 + 12, static_cast<uint32_t>(self.size));
  put_u32(auth1 + 16, static_cast<uint32_t>(self.rank));
  put_u32(auth1 + 20, static_cast<uint32_t>(peer));
  const Nonce nc = random_nonce();
  std::memcpy(auth1 + 24, nc.data(), kNonceBytes);
  send_exact(fd, auth1, sizeof auth1, deadline, who);

  uint8_t auth2[kAuth2Bytes];
  recv_exact(fd, auth2, sizeof auth2, deadline, who);
  const auto t = transcript(auth1, auth2);
  if (!secret.verify(kAcceptorLabel, t, {auth2 + kNonceBytes, 32})) {
    throw NetworkError(
        str_cat("rank ", self.rank, " (", self.address, "): ", who,
                " failed to prove knowledge of the job secret: it runs with a "
                "different COLLIE_JOB_SECRET (another job, or a misconfigured rank)"));
  }
  const Sha256Digest proof = secret.prove(kConnectorLabel, t);
  send_exact(fd, proof.data(), proof.size(), deadline, who);
}

size_t PeerAuthAcceptor::wanted() const {
  if (decided_) return 0;
  return (answered_ ? kAuth3Bytes : kAuth1Bytes) - have_;
}

PeerAuthAcceptor::Step PeerAuthAcceptor::feed(std::span<const uint8_t> in) {
  using S = Step::Status;
  Step step;
  if (decided_) {
    step.status = rank_ >= 0 ? S::kDone : S::kRefuse;
    if (rank_ < 0) step.error = "the handshake was already refused";
    return step;
  }
  auto refuse = [&](std::string why) {
    decided_ = true;
    step.status = S::kRefuse;
    step.error = std::move(why);
    return step;
  };
  uint8_t* buf = answered_ ? auth3_ : auth1_;
  const size_t n = std::min(in.size(), wanted());
  if (n > 0) std::memcpy(buf + have_, in.data(), n);
  have_ += n;
  step.consumed = n;
  // The magic decides as soon as it is in: an unauthenticated hello is
  // shorter than AUTH1, and its sender waits for nothing.
  if (!answered_ && have_ >= 4 && get_u32(auth1_) != kPeerAuthMagic) {
    return refuse(get_u32(auth1_) == 0x434c4931
                      ? "it sent an unauthenticated hello (that rank has no "
                        "COLLIE_JOB_SECRET, this one does)"
                      : "it is not a collie peer (unexpected first bytes)");
  }
  if (wanted() > 0) return step;
  have_ = 0;
  if (!answered_) {
    const uint32_t version = get_u32(auth1_ + 4);
    const uint32_t group = get_u32(auth1_ + 8);
    const int size = static_cast<int>(get_u32(auth1_ + 12));
    const int rank = static_cast<int>(get_u32(auth1_ + 16));
    const int target = static_cast<int>(get_u32(auth1_ + 20));
    if (version != kPeerAuthVersion || group != self_.group || size != self_.size ||
        target != self_.rank || rank <= self_.rank || rank >= self_.size) {
      return refuse(str_cat("its introduction does not fit this rank (version ", version,
                            ", group hash ", group, " vs ", self_.group, ", size ", size, " vs ",
                            self_.size, ", from rank ", rank, " to rank ", target, ")"));
    }
    na_ = random_nonce();
    const Sha256Digest proof = secret_.prove(kAcceptorLabel, transcript(auth1_, na_.data()));
    step.reply.assign(na_.begin(), na_.end());
    step.reply.insert(step.reply.end(), proof.begin(), proof.end());
    step.status = S::kReply;
    answered_ = true;
    return step;
  }
  if (!secret_.verify(kConnectorLabel, transcript(auth1_, na_.data()), auth3_)) {
    return refuse(
        str_cat("its proof is wrong: it claims rank ", get_u32(auth1_ + 16),
                " but does not hold this job's secret (another job, or a misconfigured rank)"));
  }
  decided_ = true;
  rank_ = static_cast<int>(get_u32(auth1_ + 16));
  step.status = S::kDone;
  return step;
}

struct PeerGate::Pending {
  Pending(int fd_, std::string remote_, const JobSecret& secret, const PeerIdentity& self,
          Clock::time_point until_)
      : fd(fd_), remote(std::move(remote_)), acceptor(secret, self), until(until_) {}
  int fd = -1;
  std::string remote;
  PeerAuthAcceptor acceptor;
  const Clock::time_point until;  // arrival + the handshake limit
  bool authenticated = false;     // (or no secret): reading the hello
  int rank = -1;
  std::vector<uint8_t> hello;  // received so far
  size_t hello_bytes = 0;      // expected in all, once the header is in
};

PeerGate::PeerGate(int listener_fd, const JobSecret& secret, PeerIdentity self, Hello hello,
                   Limits limits)
    : listener_(listener_fd),
      secret_(secret),
      self_(std::move(self)),
      hello_(std::move(hello)),
      limits_(limits) {}

PeerGate::~PeerGate() {
  for (auto& p : pending_) {
    if (p->fd >= 0) ::close(p->fd);
  }
  for (auto& a : ready_) ::close(a.fd);
}

void PeerGate::refuse(Pending& p, const std::string& why) {
  ++refused_;
  last_refusal_ = str_cat(p.remote, ": ", why);
  const auto now = Clock::now();
  if (refused_ <= kWarnFirst || now - last_warn_ >= kWarnPeriod) {
    COLLIE_LOG(kWarn) << "rank " << self_.rank << " (" << self_.address
                      << "): refused a data connection from " << p.remote << ": " << why
                      << (unlogged_ > 0
                              ? str_cat(" (and ", unlogged_, " more since the last such warning)")
                              : std::string());
    last_warn_ = now;
    unlogged_ = 0;
  } else {
    ++unlogged_;
  }
  ::close(p.fd);
  p.fd = -1;
}

void PeerGate::accept_new() {
  for (;;) {
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return;
      throw NetworkError(str_cat("rank ", self_.rank, " accept on ", self_.address, ": ",
                                 describe_fd_failure("accept()", errno, self_.size)));
    }
    auto p = std::make_unique<Pending>(fd, remote_of(fd), secret_, self_,
                                       Clock::now() + limits_.handshake);
    p->authenticated = !secret_;
    // Full: first every held connection reads what it has sent, so that a
    // peer whose hello arrived while the gate was not looking is admitted,
    // not closed for a stranger's sake; then the oldest that has sent
    // nothing goes (idle strangers), else the oldest.
    if (pending_.size() >= limits_.max_pending) drain();
    while (pending_.size() >= limits_.max_pending) {
      auto victim = std::find_if(pending_.begin(), pending_.end(), [](const auto& q) {
        return q->hello.empty() && q->acceptor.have() == 0;
      });
      const bool silent = victim != pending_.end();
      if (!silent) victim = pending_.begin();
      refuse(**victim, str_cat("closed to make room: ", limits_.max_pending,
                               " connections were already waiting, and it was the oldest ",
                               silent ? "that had sent nothing" : "(each had sent something)"));
      pending_.erase(victim);
    }
    pending_.push_back(std::move(p));
  }
}

void PeerGate::drain() {
  for (auto& p : pending_) {
    if (p->fd >= 0 && advance(*p)) {
      ready_.push_back(Admitted{p->fd, p->rank, p->remote, std::move(p->hello)});
      p->fd = -1;
    }
  }
  std::erase_if(pending_, [](const auto& p) { return p->fd < 0; });
}

void PeerGate::expire() {
  const auto now = Clock::now();
  for (auto& p : pending_) {
    if (p->fd >= 0 && now >= p->until)
      refuse(*p, str_cat("it did not finish its handshake and hello within ",
                         format_duration(limits_.handshake)));
  }
  std::erase_if(pending_, [](const auto& p) { return p->fd < 0; });
}

bool PeerGate::read_hello(Pending& p) {
  const size_t want = (p.hello_bytes ? p.hello_bytes : hello_.header_bytes) - p.hello.size();
  const size_t have = p.hello.size();
  p.hello.resize(have + want);
  const ssize_t r = ::recv(p.fd, p.hello.data() + have, want, MSG_DONTWAIT);
  p.hello.resize(have + static_cast<size_t>(std::max<ssize_t>(r, 0)));
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  if (r <= 0) {
    refuse(p, str_cat(r == 0 ? "it closed the connection" : std::strerror(errno), " after ",
                      p.hello.size(), " bytes of its hello (", hello_.header_bytes,
                      " bytes or more expected)"));
    return false;
  }
  if (p.hello_bytes == 0) {
    if (p.hello.size() < hello_.header_bytes) return false;
    std::string why;
    const auto tail = hello_.check(p.hello, p.rank, &why);
    if (!tail) {
      refuse(p, why);
      return false;
    }
    p.hello_bytes = hello_.header_bytes + *tail;
  }
  return p.hello.size() == p.hello_bytes;
}

bool PeerGate::advance(Pending& p) {
  if (p.authenticated) return read_hello(p);
  // Exactly the handshake's bytes: the hello behind AUTH3 is read next.
  uint8_t buf[kAuth1Bytes];
  const ssize_t r = ::recv(p.fd, buf, p.acceptor.wanted(), MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  if (r <= 0) {
    refuse(p, str_cat(r == 0 ? "it closed the connection" : std::strerror(errno),
                      " before authenticating (", p.acceptor.have(), " bytes of ",
                      p.acceptor.answered() ? "its proof" : "its introduction", " received)"));
    return false;
  }
  const PeerAuthAcceptor::Step step = p.acceptor.feed({buf, static_cast<size_t>(r)});
  switch (step.status) {
    case PeerAuthAcceptor::Step::Status::kRefuse: refuse(p, step.error); return false;
    case PeerAuthAcceptor::Step::Status::kReply:
      // 64 bytes into a fresh socket's empty send buffer: all or an error.
      if (::send(p.fd, step.reply.data(), step.reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
          static_cast<ssize_t>(step.reply.size())) {
        refuse(p, str_cat("sending our challenge failed: ", std::strerror(errno)));
      }
      return false;
    case PeerAuthAcceptor::Step::Status::kNeedMore: return false;
    case PeerAuthAcceptor::Step::Status::kDone:
      p.authenticated = true;
      p.rank = p.acceptor.rank();
      // The hello may already be here, behind AUTH3.
      return read_hello(p);
  }
  return false;
}

void PeerGate::pending_fds(std::vector<int>* fds) const {
  for (auto& p : pending_) fds->push_back(p->fd);
}

std::optional<PeerGate::Admitted> PeerGate::accept(const Deadline& deadline) {
  for (;;) {
    if (!ready_.empty()) {
      Admitted a = std::move(ready_.front());
      ready_.pop_front();
      return a;
    }
    expire();
    std::vector<pollfd> fds;
    fds.push_back({listener_, POLLIN, 0});
    for (auto& p : pending_) fds.push_back({p->fd, POLLIN, 0});
    // Wake for the deadline or the oldest handshake's limit, whichever is
    // first (pending_ is in arrival order).
    auto until = deadline.when();
    if (!pending_.empty()) until = std::min(until, pending_.front()->until);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(left + 1, 0, 60'000));
    const int r = ::poll(fds.data(), fds.size(), wait_ms);
    if (r < 0 && errno != EINTR) {
      throw NetworkError(
          str_cat("rank ", self_.rank, " poll on ", self_.address, ": ", std::strerror(errno)));
    }
    std::optional<Admitted> done;
    if (r > 0) {
      for (size_t i = 1; i < fds.size() && !done; ++i) {
        if (!fds[i].revents) continue;
        Pending& p = *pending_[i - 1];
        if (p.fd >= 0 && advance(p)) {
          done = Admitted{p.fd, p.rank, p.remote, std::move(p.hello)};
          p.fd = -1;
        }
      }
      std::erase_if(pending_, [](const auto& p) { return p->fd < 0; });
      if (done) return done;
      if (fds[0].revents) accept_new();
      if (!ready_.empty()) continue;
    }
    if (deadline.expired()) return std::nullopt;
  }
}

}  // namespace collie
