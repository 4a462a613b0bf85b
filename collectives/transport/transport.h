// Transport: the Connections of one communicator (one per peer it talks to,
// each over a TCP or shared-memory channel), driven from the calling thread. An algorithm posts
// sends and receives for its current call and calls progress(), which advances every connection at
// once (so a rank sends to its right while it receives from its left: full duplex without a second
// thread) and returns as soon as any operation completes.
//
// Waiting: progress() first busy-polls its sockets for `spin` (a blocking
// wake-up costs tens of microseconds, more than a small message's whole
// round trip), yielding the CPU between polls so that oversubscribed ranks
// still run, then sleeps in poll() (or on futex words) until data, the
// deadline or abort(). A yield that gives the core away for long (to
// another program) makes the next waits sleep at once (adaptive back-off,
// SpinPolicy in waiting.h), so a busy machine is not made worse.
//
// Failure: every error goes through fail(), which marks the transport broken,
// sends an abort frame carrying the error text to every peer (finishing a
// half-written message first so that the peer can find the frame), shuts the
// sockets for writing and throws. Peers learn of the failure from the abort
// frame or, if the process died, from the socket's EOF; either way within
// one poll of it happening, whichever connection they were waiting on.
// The first failure is also written as data (base/error_record.h): the
// cause and the peers it blames, for the launcher to read.
//
// Structure. Transport is the facade the algorithms use; each concern is a
// concrete class it holds by value, or its own file of Transport's members,
// so that the hot path makes no virtual call per message:
//   - posting and progress (send, recv, exchange, progress, the completion
//     counters' restarts): transport.cc;
//   - peer numbering: PeerNumbering (peer_numbering.h), rank(), size() and
//     the world rank of a peer, in the world or an open SubgroupScope;
//   - waiting: SpinPolicy, poll_connections() (waiting.h), and the sleeping
//     wait and slow-wait reports (transport_wait.cc);
//   - frames: Connection (connection.h), its data path in connection.cc and
//     its failure forensics in connection_failure.cc;
//   - failure: FailureState (failure.h), the one owner of the verdict (the
//     broken flag, the failed peers as data, the error record, the abort
//     frames and the timeout probe); which error a situation is stays here,
//     in transport_failure.cc;
//   - point-to-point: P2PState (p2p_state.h), the book-keeping (the inbox
//     of p2p_inbox.h, the queued sends, the connections a receive reads,
//     what runs), and transport_p2p.cc, which drives the connections;
//   - set-up: the PeerLinker (peer_linker.h; linker.cc implements it) over
//     the channel factories (channel_factory.h), join.cc, host.cc,
//     peer_auth.cc and sockets.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/error_record.h"
#include "collie/base/types.h"
#include "collie/base/unique_fd.h"
#include "collie/collectives/transport/connection.h"
#include "collie/collectives/transport/failure.h"
#include "collie/collectives/transport/p2p_state.h"
#include "collie/collectives/transport/peer_linker.h"
#include "collie/collectives/transport/peer_numbering.h"
#include "collie/collectives/transport/waiting.h"
#include "collie/collectives/transport/wire.h"

namespace collie {

struct TransportOptions {
  std::chrono::microseconds spin{50};
  // The first `busy_poll` of a spin polls memory without giving up the core
  // (no sched_yield, which is a syscall that also delays noticing the data).
  // Only for ranks that have a core each: oversubscribed, the spinner may
  // hold the core its peer needs.
  std::chrono::microseconds busy_poll{0};
  // First slow-wait report, then each time the wait doubles (<= 5 min).
  std::chrono::milliseconds report_after = std::chrono::seconds(30);
  // Shared-memory waits sleep on futex words (Connection::set_futex_wait).
  bool futex_wait = true;
  // The CPU of this rank's slot among its host's ranks when each has a core
  // of its own (-1: none). A rank that finds itself sharing a CPU with the
  // peer it waits for moves there (SpinPolicy::note_wait, move_to_cpu).
  int home_cpu = -1;
  // The group's name in the error record of a failure ("socket/0").
  std::string group_name;
  // A point-to-point message of at least this many bytes to a peer whose
  // memory this rank's pair may read (shared memory, cross-memory attach
  // allowed) is read by the receiver straight from the sender's buffer:
  // one copy instead of two through the ring (0: never).
  size_t p2p_single_copy_bytes = size_t{512} << 10;
};

class Transport {
 public:
  // connections[rank] is null for this rank; so is any peer not connected
  // yet, which `linker` connects on first use (linker may be null when
  // every peer is connected).
  Transport(int rank, int size, uint32_t group,
            std::vector<std::unique_ptr<Connection>> connections,
            std::unique_ptr<PeerLinker> linker, const TransportOptions& options);
  ~Transport();  // says goodbye to every peer unless broken

  // This rank and the world size; inside a SubgroupScope, this rank's
  // index in the sub-group and the sub-group's size.
  int rank() const { return numbering_.rank(); }
  int size() const { return numbering_.size(); }
  // This rank in the world, in a sub-group too (for messages).
  int world_rank() const { return numbering_.world_rank(); }

  // A sub-group for the hierarchical algorithms (hierarchical.cc): while the
  // scope lives, rank(), size() and the peer numbers that send(), recv(),
  // sends_done(), recvs_done(), peer_pid(), peer_name() and
  // all_peers_readable() take are in the numbering of `members` (world
  // ranks, this rank among them): peer p is world rank members[p]. The
  // completion counters restart at zero when the scope opens and closes, so
  // any algorithm runs on the sub-group as on a world of its own, in the
  // middle of the same call (its frames carry the call's header, so a
  // mismatch is still caught). Every operation posted inside the scope must
  // be complete when it opens and closes. Scopes nest (members are world
  // ranks either way); closing one restores the numbering before it and
  // restarts the counters again.
  class SubgroupScope {
   public:
    SubgroupScope(Transport& t, std::span<const int> members);
    ~SubgroupScope();
    SubgroupScope(const SubgroupScope&) = delete;
    SubgroupScope& operator=(const SubgroupScope&) = delete;

   private:
    Transport& t_;
    PeerNumbering::Saved outer_;  // the numbering to restore
  };

  // Starts a call: throws BackendError at once if broken. The deadline must
  // outlive the call. `linking`: the call only connects peers (the
  // communicator's wiring at init) and exchanges no data, so a peer's data
  // frame of the same op #0 is its next internal call, already started,
  // not a mismatch; it is left for that call to read.
  void begin(const CallInfo& call, const Deadline& deadline, bool linking = false);
  const CallInfo& call() const { return call_; }
  // Throws BackendError naming the original error when broken; `what` is
  // the collective being refused ("all_reduce").
  void check_usable(std::string_view what) const;

  // Posts a message of `bytes` to / from `peer` for the current call; the
  // buffer must stay valid until the operation completes.
  void send(int peer, const void* data, size_t bytes);
  void recv(int peer, void* data, size_t bytes);
  // send(peer, out, bytes), recv(peer, in, bytes) and wait_all(), for
  // when these two are the call's only operations (a pairwise exchange:
  // the direct all_reduce at two ranks). Over shared memory with nothing
  // else posted to the peer, and at most kExpressBytes, the frame goes
  // straight into the ring and the peer's is taken where it lies, in a
  // short spin with no operation posted: the posted path's bookkeeping and
  // bounce copy cost a 4-byte all_reduce a third of its time
  // (docs/performance.md). Anything else (a full ring, a frame not there
  // within the spin, another frame first, TCP) continues on the posted
  // path, which checks and reports as always.
  void exchange(int peer, const void* out, void* in, size_t bytes);
  // send() then wait_all(), and recv() then wait_all(), for a call whose
  // only operation is this one message (the small broadcast, scatter,
  // gather and reduce at two ranks): express like exchange()'s halves
  // when the peer's channel allows it, else the posted path.
  void send_one(int peer, const void* data, size_t bytes);
  void recv_one(int peer, void* data, size_t bytes);
  static constexpr size_t kExpressBytes = 1024;
  struct ExpressCounts {
    uint64_t tried = 0;   // exchanges and recv_one()s that started on the express path
    uint64_t taken = 0;   // finished there: the peer's frame taken in the spin
    uint64_t handed = 0;  // handed over to the posted path (tried = taken + handed)
  };
  // Thread-safe: a test reads one rank's while that rank waits.
  ExpressCounts express_counts() const {
    return {express_tried_.load(std::memory_order_relaxed),
            express_taken_.load(std::memory_order_relaxed),
            express_handed_.load(std::memory_order_relaxed)};
  }
  // A receive of `count` elements reduced on arrival: out[i] = in[i] op
  // received[i] (Connection::post_recv_reduce; not for half types).
  void recv_reduce(int peer, void* out, const void* in, size_t count, DataType dtype, ReduceOp op);
  // Operations completed on the connection to `peer` since begin().
  uint64_t sends_done(int peer) const;
  uint64_t recvs_done(int peer) const;
  // The channel to `peer` (a world rank, in a sub-group too), connecting it
  // if needed.
  ChannelKind channel_kind(int peer);
  // The channel to `peer` if connected.
  std::optional<ChannelKind> connected_kind(int peer) const {
    const auto& c = connections_[peer];
    if (!c || !c->connected()) return std::nullopt;
    return c->kind();
  }
  // Whether group peer `peer` is connected, over shared memory.
  bool shm_connected(int peer) const {
    const auto kind = connected_kind(world(peer));
    return kind && *kind == ChannelKind::kShm;
  }
  // Peers currently connected over `kind`.
  int connected_peers(ChannelKind kind) const;
  // Whether every peer is connected over shared memory and its memory can
  // be read with process_vm_readv (then peer_pid() is its pid).
  bool all_peers_readable() const;
  pid_t peer_pid(int peer) const;
  // "rank 3 (10.0.0.7:41234)"
  std::string peer_name(int peer) const { return conn(world(peer)).name(); }

  // Point-to-point (transport_p2p.cc), outside the collectives' sequence.
  // A batch of sends and receives that start_p2p() posted: its receives
  // wait in the inbox, its sends in their connections' queues (ahead of any
  // later collective's), and both move during every later call of this
  // transport, collective or not, until done. The buffers must stay valid
  // until then (or until the transport is destroyed).
  // The largest piece of a point-to-point message on the wire: a message
  // over one frame's 4 GiB goes as several (a multiple of every element
  // size, 16 bytes at most).
  static constexpr size_t kP2PPiece = (size_t{UINT32_MAX} / 16) * 16;
  // A posted batch: its ops, receives and sends (p2p_state.h, where
  // P2PState keeps the one wait_p2p() waits for).
  using P2PRequest = collie::P2PRequest;
  // Checks and posts every op of `ops` (a receive's peer may be kAnySource)
  // and returns at once. Checks come first: a refused batch posts nothing.
  // `deadline` bounds the connects to new peers.
  std::shared_ptr<P2PRequest> start_p2p(std::span<const P2POp> ops, const Deadline& deadline);
  // Whether every op of `r` is done (the transport's thread only).
  bool p2p_done(const P2PRequest& r) const;
  // Who sent each op's message (receives; -1 for sends), once done, into
  // *sources (resized to r's ops).
  static void p2p_sources(const P2PRequest& r, std::vector<int>* sources);
  // start_p2p's posting, of `ops` into `r` (r.ops is left alone: `ops`
  // must outlive r's receives).
  void post_p2p(P2PRequest& r, std::span<const P2POp> ops, const Deadline& deadline);
  // Drives every connection until `r` is done. Throws like a collective; a
  // timeout names the peers still owing a message or not taking one (there
  // is no probe: the other ranks are not in this call).
  // `ops` names the ops in messages when r.ops is empty.
  void wait_p2p(const P2PRequest& r, const Deadline& deadline, std::span<const P2POp> ops = {});
  // One pass over the connections that moves posted point-to-point ops,
  // without waiting (a poll between calls).
  void poll_p2p(const Deadline& deadline);
  // Drops every posted receive and gives up the single-copy sends not read
  // yet: their batches are given up (the group failed or is going away) and
  // their buffers may go.
  void cancel_p2p();
  // start_p2p + wait_p2p into blocking_p2p(), a request kept for these
  // blocking runs so that they allocate nothing once its vectors have grown.
  void run_p2p(std::span<const P2POp> ops, const Deadline& deadline);
  // The last run_p2p()'s request (p2p_sources() reads who sent what).
  const P2PRequest& blocking_p2p() const { return blocking_p2p_; }

  // Blocks until at least one posted operation completes (returns at once
  // when none is posted). Throws on error, timeout or abort(). The progress
  // loop is in transport.cc, next to progress_all(), which it inlines.
  void progress();
  // progress() until every posted operation has completed.
  void wait_all();

  // Breaks the transport, tells the peers, throws the matching collie error.
  [[noreturn]] void fail(ErrorKind kind, const std::string& message);

  bool broken() const { return failure_.broken(); }
  void abort();  // thread-safe

  // The peers (world ranks, ascending) this rank saw fail, as data, not
  // text (shrinking a group reports them: runtime/process_group/
  // shrink_agreement.h). Two kinds: a connect that was refused or timed
  // out, and a peer silent through a timeout probe, count as they are; a
  // connection that closed or reset without an abort frame or goodbye
  // counts only if the peer's listener refuses a connection by `until`
  // (find_dead_peers), since a live peer that aborted its communicator
  // (shrink's SHRINK_ABORT, abort()) closes its connections the same way.
  // A peer that relayed another's failure in an abort frame is alive and
  // not listed. The list is FailureState's (failure.h). Not while a call
  // runs on this transport.
  std::vector<int> failed_peers(Clock::time_point until);
  // Of `peers` (world ranks), those whose process is gone by the test of
  // PeerLinker::refusing(); they join failed_peers(). Not while a call runs.
  std::vector<int> find_dead_peers(const std::vector<int>& peers, Clock::time_point until);

 private:
  Connection& conn(int peer) const;
  // The world rank of `peer` in the current numbering (SubgroupScope).
  int world(int peer) const { return numbering_.world(peer); }
  int world_size() const { return numbering_.world_size(); }
  // Restarts the completion counters (begin(), SubgroupScope); `check`:
  // nothing may be posted.
  void rebase(bool check = true);
  // Whether a message of `bytes` on `c` may take the express path: shared
  // memory, nothing posted or half-read on it, at most kExpressBytes.
  bool express(const Connection& c, size_t bytes) const;
  // The express receive of exchange() and recv_one(): takes the frame
  // `header` into `in` if it is there within a short spin (`spin` false:
  // no look), else posts the receive and waits for everything posted.
  void take_express(Connection& c, const WireHeader& header, void* in, bool spin);
  // The connection to `peer`, created and (as the connecting side)
  // connected on first use (link_slow()). The connected case, every send's
  // and receive's, is inline.
  Connection& link(int peer) {
    if (static_cast<unsigned>(peer) < static_cast<unsigned>(world_size()) && peer != world_rank()) {
      Connection* c = connections_[peer].get();
      if (c != nullptr && c->connected()) [[likely]]
        return *c;
    }
    return link_slow(peer);
  }
  Connection& link_slow(int peer);
  void accept_arrivals();
  bool progress_all();  // one non-blocking pass; true if bytes moved
  // Any operation of the running call not done: the collective's sends and
  // receives, or wait_p2p()'s batch.
  bool pending() const;
  // Point-to-point reads on a connection with no receive posted (p2p frames
  // at its head go to the inbox); true if bytes moved.
  // `wanted_only`: Connection::progress_p2p's (a receive's read, not a
  // drain ahead of a collective's frame).
  bool progress_p2p_reads(Connection& c, bool wanted_only);
  // The next frame on `c` is not a p2p message while a receive waits.
  void on_p2p_blocked(Connection& c);
  // poll() (or futex) until something happens or the deadline
  // (transport_wait.cc).
  void wait_for_io();
  // The failure paths (transport_failure.cc): which error a situation is
  // and its message; the verdict goes to failure_.
  [[noreturn]] void fail(ErrorKind kind, const std::string& message, Blame blame);

  void on_recv_problem(Connection& c, RecvProblem problem, int err);
  void on_hangup(Connection& c);            // an idle connection's peer hung up
  void on_unexpected_input(Connection& c);  // data where nothing is posted
  [[noreturn]] void fail_mismatch(const Connection& c, const WireHeader& h);
  [[noreturn]] void fail_impl(ErrorKind kind, const std::string& message,
                              const std::string& forward, const Blame& blame);
  [[noreturn]] void fail_from_peer(Connection& c, const std::string& text);
  [[noreturn]] void fail_timeout();
  // "receive from rank 2 (...) (1 message(s) outstanding)" for every
  // connection but `except` with an operation still posted.
  std::vector<std::string> waiting_for(const Connection* except) const;
  [[noreturn]] void fail_aborted();
  std::string context() const;  // "all_reduce(...) as op #3 on rank 1"
  // Writes what `c`'s channel takes of its posted sends (fail() on an
  // error); true when bytes moved.
  bool push_sends(Connection& c);
  // The first slow-wait report's time, report_after from the deadline's
  // start, unless set (begin() and run_p2p() unset it).
  void arm_report();
  void report_slow_wait();

  // The timeout probe (FailureState::probe(), failure_probe.cc) over this
  // transport's connections and call; returns the verdict for the message.
  std::string probe_peers(const Connection* trigger, std::vector<FailureCulprit>* silent);
  [[noreturn]] void fail_probed(Connection& c, const WireHeader& probe);
  // The probe's grace: half the call's limit, 20 ms to 1 s.
  std::chrono::milliseconds probe_grace() const;

  // rank(), size() and world(): the world's, or an open SubgroupScope's.
  PeerNumbering numbering_;
  const uint32_t group_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::unique_ptr<PeerLinker> linker_;
  int awaiting_ = 0;  // connections waiting for their peer to connect
  const std::chrono::milliseconds report_after_;
  const bool futex_wait_;
  Clock::time_point next_report_{};
  SpinPolicy spin_;
  // exchange()'s spin for the peer's frame, in looks at the ring, before it
  // hands over to the posted path (a few microseconds).
  static constexpr int kExpressPolls = 256;
  std::vector<uint64_t> send_base_, recv_base_;  // completion counters at begin()
  // peeked_seq_[p] == call_.seq: rank p's next frame was looked at during
  // this call and is legitimately early (a later round, or the next call).
  std::vector<uint64_t> peeked_seq_;
  bool linking_ = false;  // see begin()
  CallInfo call_;
  const Deadline* deadline_ = nullptr;
  uint64_t completed_ = 0;  // operations completed, all connections
  // exchange()'s counts. One writer, the call's thread: a relaxed load and
  // store each, no locked instruction on the path.
  std::atomic<uint64_t> express_tried_{0}, express_taken_{0}, express_handed_{0};
  static void count(std::atomic<uint64_t>& n) {
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  FailureState failure_;
  // Point-to-point (p2p_state.h): the inbox, the sends queued, the
  // connections receives read, and the ops running (for error messages,
  // formatted only then; not running inside a collective).
  P2PRequest blocking_p2p_;  // run_p2p()'s, reused
  // The inbox's way to the peers of single-copy messages.
  class CopyPeers final : public P2PCopyPeers {
   public:
    explicit CopyPeers(Transport* t) : t_(t) {}
    pid_t copy_pid(int peer) const override;
    void wake(int peer) override;

   private:
    Transport* t_;
  };
  CopyPeers copy_peers_{this};
  const size_t single_copy_bytes_;
  P2PState p2p_;
};

}  // namespace collie
