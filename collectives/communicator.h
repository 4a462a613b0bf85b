// Communicator: a connected group of ranks running collie's CPU collectives
// over shared memory between ranks on one host and TCP between hosts. It is the synchronous layer
// under the socket ProcessGroup (which adds the worker thread and Work objects): every call blocks
// until the collective is finished on this rank, fails, or its deadline passes.
//
//   auto comm = Communicator::connect(store, rank, size, {.store_prefix = "default_pg"});
//   comm->all_reduce(view(grads), view(grads), ReduceOp::kSum, Deadline(std::chrono::seconds(60)));
//
// A Communicator is NOT thread-safe: one collective at a time, and every rank
// must call the same collectives in the same order (as in torch). Each message
// carries a header naming the call that sent it, so a rank that receives data
// from a different call (another collective, dtype, count, root or op) fails,
// tells every peer, and every rank throws an error naming both calls instead
// of mixing data or hanging. See docs/algorithms.md for the algorithms, the
// wire format and the failure behaviour.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/types.h"
#include "collie/collectives/all_reduce_algorithm.h"
#include "collie/rendezvous/store.h"

namespace collie {

// What a communicator is told. The library reads no environment variable:
// from_env() is where the COLLIE_* variables (docs/environment.md) become
// options, once, at the API boundary (the cpu backend calls it; so may a
// program that connects a Communicator itself).
struct CommunicatorOptions {
  // Address to listen on and publish (IPv4 or IPv6). "": the address of
  // `interface`, else the local address that routes to `route_host`, else
  // 127.0.0.1.
  std::string bind_host;
  std::string interface;   // from_env: COLLIE_SOCKET_IFNAME
  std::string route_host;  // from_env: MASTER_ADDR
  // The channels: "auto" (shared memory between ranks with the same host id,
  // TCP otherwise), "tcp" (TCP everywhere) or "shm" (shared memory, an error
  // for a peer on another host). "": auto. from_env: COLLIE_TRANSPORT.
  std::string transport;
  // Which ranks count as one host: ranks with equal host ids share memory
  // and form one host of the hierarchical algorithms. "": hostname + boot id
  // + network namespace inode. from_env: COLLIE_HOST_ID. (Tests give threads
  // of one process different ids to fake several hosts.)
  std::string host_id;
  // Bytes of each of a shared-memory pair's two rings, from 4096 to 2^34
  // (rounded down to whole cache lines); 0: 1 MiB. from_env: COLLIE_SHM_BYTES.
  size_t shm_buffer_bytes = 0;
  // Across hosts, the hierarchical algorithms where a host runs two or more
  // ranks; false: the flat ones. from_env: COLLIE_HIERARCHICAL=0 turns them off.
  bool hierarchical = true;
  // A call still waiting after this long logs a WARN line (then each time
  // its wait doubles, at most every 5 min). from_env: COLLIE_REPORT_AFTER.
  Timeout report_after = std::chrono::seconds(30);
  // Measurement switches (bench/collectives_tune has them as flags; no
  // environment variable sets them). Connect every peer at init (the full
  // mesh) instead of on first use:
  bool connect_all = false;
  // A wait on shared-memory channels sleeps on their futex words; false:
  // in poll() on their doorbells.
  bool futex_wait = true;
  // Key namespace of this group in the store ("default_pg", "group_3"); also
  // hashed into every message header so that groups never cross-talk.
  std::string store_prefix = "collie";
  // Deadline for wiring up the connections.
  Timeout timeout = kDefaultTimeout;
  // Whether the collectives check their arguments (dtypes, reduce ops,
  // roots, peers, list sizes and counts) and throw InvalidArgument naming
  // the culprit. A process group checks them once, at the top of the call
  // (runtime/process_group/collective_checks.h), and connects with false:
  // then only what no caller can check (buffers that overlap, an algorithm
  // this group cannot run) is checked here. true for direct users.
  bool check_arguments = true;

  // Tuning knobs; the defaults are measured (docs/algorithms.md).
  // Bytes per pipelined ring message.
  size_t segment_bytes = size_t{256} << 10;
  // kAuto all_reduce uses the small-message algorithm up to this many bytes.
  size_t small_message_bytes = size_t{32} << 10;
  // Above small_message_bytes, kAuto all_reduce on one host runs the ring
  // over the shared-memory channels, except with at least
  // shm_all_reduce_ranks ranks and fewer than shm_ring_bytes bytes: there
  // reading the peers' memory (kShm, 3 rounds whatever the rank count) beats
  // the ring's 2(P-1) steps. Measured on 2 cores: the ring is faster at 2-4
  // ranks at every size, kShm at 8 ranks up to 1 MiB (docs/performance.md).
  int shm_all_reduce_ranks = 5;
  size_t shm_ring_bytes = size_t{4} << 20;
  // Across hosts (the hierarchical all_reduce), up to this many bytes per
  // exchange the ranks that talk across hosts (a leader per host up to
  // small_message_bytes, above it every rank with its slice) send the whole
  // buffer to each other in one hop, (H-1) times it per rank (H hosts).
  // Above it they run a direct reduce_scatter and all_gather: two hops,
  // 2 (H-1)/H of it per rank. The right value depends on the link (1 and
  // 10 Gbit/s in docs/performance.md); COLLIE_HIERARCHICAL_SMALL_BYTES.
  size_t hierarchical_small_bytes = size_t{4} << 10;
  // On one host, a send of at least this many bytes goes as a descriptor,
  // and the receiver reads the message from the sender's buffer with
  // process_vm_readv: one copy, not two through the ring (0: never; needs
  // cross-memory attach, which the channel probes at connect). Such a send
  // completes once the receiver has read it, as gloo's and MPI's large
  // sends do: a blocking send waits for the matching recv. Smaller
  // messages are buffered by the receiver if need be (a blocking send never
  // waits for the recv). Measured in docs/performance.md;
  // COLLIE_P2P_SINGLE_COPY_BYTES.
  size_t p2p_single_copy_bytes = size_t{512} << 10;
  // How long a waiting call busy-polls its sockets before sleeping in poll()
  // (adaptive: spins that fail are backed off, see transport.h).
  std::chrono::microseconds spin = std::chrono::microseconds(50);
  // The same when this host runs more ranks than it has cores: shorter, as
  // the spinner may hold the core its peer needs.
  std::chrono::microseconds oversubscribed_spin = std::chrono::microseconds(20);
  // The first part of a spin polls memory without yielding the core, when
  // every rank on this host has a core of its own (see TransportOptions).
  std::chrono::microseconds busy_poll = std::chrono::microseconds(5);
  // SO_SNDBUF/SO_RCVBUF for the data connections; 0 keeps the kernel's.
  int socket_buffer_bytes = 4 << 20;

  // `base` with the COLLIE_* variables read into the fields it leaves unset
  // (transport, host_id, interface, route_host, shm_buffer_bytes) and into
  // hierarchical, hierarchical_small_bytes, p2p_single_copy_bytes and
  // report_after (those override the defaults). InvalidArgument naming the
  // variable for a bad value.
  static CommunicatorOptions from_env(CommunicatorOptions base);
  static CommunicatorOptions from_env();
};

// A batch of point-to-point ops posted by Communicator::post_p2p.
struct P2PBatch {
  virtual ~P2PBatch() = default;
  bool done = false;
  std::vector<int> sources;  // per op, once done: a receive's sender (-1: a send)
};

class Communicator {
 public:
  // Listens, publishes this rank's record under the store prefix and waits
  // until every rank has, all within options.timeout (peers are connected
  // when first used, with that call's deadline). Throws TimeoutError naming
  // the ranks that never joined, NetworkError when a rank joined twice (on
  // every rank). size == 1 opens no socket.
  static std::unique_ptr<Communicator> connect(Store& store, int rank, int size,
                                               const CommunicatorOptions& options = {});
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's published "host:port" (empty when size == 1).
  virtual std::string address() const = 0;
  // The channel kind to every connected peer ("tcp" or "shm"; "" for self
  // and for peers not connected yet). With `connect`, connects them all
  // first (a collective call then: every rank must make it).
  virtual std::vector<std::string> channel_kinds(const Deadline& deadline, bool connect) = 0;

  // Every collective below: `deadline` bounds the whole call; CPU buffers only
  // (InvalidArgument for device buffers); counts may be 0. Errors: an
  // InvalidArgument for bad arguments leaves the communicator usable; any
  // other error (NetworkError, TimeoutError, BackendError for a mismatch or a
  // peer's failure) breaks it.

  // out = reduction of every rank's in. In place when in.data == out.data.
  // float16/bfloat16 are reduced in float32 and rounded once. AVG is for
  // floating-point types only.
  virtual void all_reduce(TensorView in, TensorView out, ReduceOp op, const Deadline& deadline,
                          AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto) = 0;
  // tensor on every rank becomes root's.
  virtual void broadcast(TensorView tensor, int root, const Deadline& deadline) = 0;
  // Returns once every rank has entered the barrier.
  virtual void barrier(const Deadline& deadline) = 0;
  // out.count == size() * in.count; rank r's in lands at out[r * in.count].
  // in may be exactly that slot of out (in place).
  virtual void all_gather(TensorView in, TensorView out, const Deadline& deadline) = 0;
  // in.count == size() * out.count; out = reduction of every rank's slot
  // in[rank() * out.count]. out may be exactly that slot of in (in place).
  virtual void reduce_scatter(TensorView in, TensorView out, ReduceOp op,
                              const Deadline& deadline) = 0;
  // The list forms: out (all_gather) or in (reduce_scatter) is size()
  // buffers of the other argument's dtype and count; in may be out[rank()]
  // (all_gather), out may be in[rank()] (reduce_scatter).
  virtual void all_gather(TensorView in, std::span<const TensorView> out,
                          const Deadline& deadline) = 0;
  virtual void reduce_scatter(std::span<const TensorView> in, TensorView out, ReduceOp op,
                              const Deadline& deadline) = 0;
  // root's out = reduction of every rank's in (in place when the same
  // buffer); no other rank's out is written (it may be empty there).
  virtual void reduce(TensorView in, TensorView out, ReduceOp op, int root,
                      const Deadline& deadline) = 0;
  // On root, out is size() buffers like in and out[p] receives rank p's in
  // (in may be out[root]); elsewhere out is empty.
  virtual void gather(TensorView in, std::span<const TensorView> out, int root,
                      const Deadline& deadline) = 0;
  // On root, in is size() buffers like out and rank p's out receives in[p]
  // (out may be in[root]); elsewhere in is empty.
  virtual void scatter(std::span<const TensorView> in, TensorView out, int root,
                       const Deadline& deadline) = 0;
  // in[p] goes to rank p, out[p] comes from rank p (size() buffers each, one
  // dtype, any counts; rank p's in[r] must be as long as rank r's out[p]).
  virtual void all_to_all(std::span<const TensorView> in, std::span<const TensorView> out,
                          const Deadline& deadline) = 0;

  // Point-to-point, outside the collectives' order: every send and receive
  // of `ops` at once; returns when all are done. A receive's peer may be
  // kAnySource; the result holds, per op, the rank a receive's message came
  // from (-1 for sends). Messages are matched by (peer, tag) in FIFO order,
  // and must have the receive's size (else BackendError naming both).
  virtual std::vector<int> send_recv(std::span<const P2POp> ops, const Deadline& deadline) = 0;
  // One op: send_recv's, returning the receive's sender (-1 for a send).
  // The cpu communicator's allocates nothing (a blocking send or recv).
  virtual int send_recv_one(const P2POp& op, const Deadline& deadline) {
    return send_recv(std::span<const P2POp>(&op, 1), deadline)[0];
  }
  // The same, posted without waiting: the batch moves during every later
  // call of this communicator (collectives included, whose order it does
  // not enter) and while wait_p2p() drives it. Its buffers must stay valid
  // until p2p_done() or cancel_p2p(). Checks the ops first (a refused batch
  // posts nothing). The default runs send_recv(), done at once.
  virtual std::shared_ptr<P2PBatch> post_p2p(std::span<const P2POp> ops, const Deadline& deadline);
  // Whether `batch` is done; then batch.sources is set. Only where calls
  // run (the thread of the call in progress, or between calls).
  virtual bool p2p_done(P2PBatch& batch) { return batch.done; }
  // Drives the connections until `batch` is done (throws like a call).
  virtual void wait_p2p(P2PBatch& batch, const Deadline& deadline);
  // Moves posted batches a step without waiting.
  virtual void poll_p2p(const Deadline& deadline) { (void)deadline; }
  // Gives every posted batch up (the group failed or goes away).
  virtual void cancel_p2p() {}

  // The ranks this rank saw fail (ascending): a connect that failed, a
  // rank silent through a timeout probe, and a rank whose connection closed
  // without an abort frame or goodbye once its listener refuses a
  // connection by `until` (Transport::failed_peers()). What shrinking a
  // group reports to the agreement; only on a communicator no call runs on.
  virtual std::vector<int> failed_ranks(Clock::time_point until) = 0;
  // Of `ranks`, those whose process is gone: their listener refuses a
  // connection by `until` (Transport::find_dead_peers()). Only on a
  // communicator no call runs on (shrink's agreement asks it about the
  // ranks nobody reported).
  virtual std::vector<int> find_dead(const std::vector<int>& ranks, Clock::time_point until) = 0;

  // True after a network error, timeout, mismatch or abort(): every later
  // call throws BackendError at once, naming the original error.
  virtual bool broken() const = 0;
  // Thread-safe: shuts every socket down so that a call blocked in another
  // thread returns promptly with an error; the communicator is broken after.
  virtual void abort() = 0;

 protected:
  Communicator() = default;
};

}  // namespace collie
