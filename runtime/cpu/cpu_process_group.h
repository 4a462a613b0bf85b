// CpuProcessGroup: the CPU backend ("cpu"; "socket" is its old name, still
// accepted). It runs collie's own
// collectives (collectives/communicator.h, ring and small-message algorithms
// over TCP) on a worker thread, so that every collective is asynchronous:
//
//   auto work = group->all_reduce(view(grads.data(), grads.size()));
//   ... overlap other work ...
//   work->wait();   // rethrows the collective's error
//
// Calls come from one thread at a time (MPI's THREAD_SERIALIZED): a call
// made while another thread's blocking call runs breaks the group with an
// error naming both, on both threads, rather than let the two threads' calls
// reach the ranks in different orders and mix their data. Asynchronous calls
// hold the group only while they are queued, so two threads issuing only
// those are caught only when their calls meet.
//
// Calls are checked once, on the caller's thread (collective_checks.h;
// InvalidArgument: bad counts, device buffers, AVG on integers, root out of
// range; the communicator below does not check them again), and then handed
// to the group's SerialExecutor (runtime/process_group/serial_executor.h,
// which states the rules), which runs them one at a time in issue order,
// each under its own deadline (the option's timeout, else the group's). The buffers must stay alive
// and untouched until the Work completes. The first failure (a dead or hung peer, a mismatched
// call) breaks the group: everything queued behind it and every later call fails at once with a
// BackendError naming that failure.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/collectives/all_reduce_algorithm.h"
#include "collie/collectives/communicator.h"
#include "collie/rendezvous/store.h"
#include "collie/runtime/cpu/p2p_work.h"
#include "collie/runtime/process_group/backend_context.h"
#include "collie/runtime/process_group/collective_checks.h"
#include "collie/runtime/process_group/flight_recorder.h"
#include "collie/runtime/process_group/process_group.h"
#include "collie/runtime/process_group/serial_executor.h"

namespace collie {

class CpuProcessGroup : public ProcessGroup, public Shrinkable, public Growable, private P2POwner {
 public:
  static constexpr const char* kBackendName = "cpu";

  // Connects the group's Communicator through context.store (collective:
  // every member calls it) within context.timeout.
  static std::shared_ptr<CpuProcessGroup> create(const BackendContext& context,
                                                 const CommunicatorOptions& options = {});

  // `callers`: kOneAtATime (the default) breaks the group when a call
  // meets another thread's blocking call (see SerialExecutor); kAnyThread is for
  // callers that order their calls themselves.
  // `options`: what the communicator was connected with (its store_prefix
  // names the group's keys; shrink connects the next group with the rest);
  // `generation`: how many shrinks led to this group.
  CpuProcessGroup(std::unique_ptr<Communicator> communicator, std::shared_ptr<Store> store,
                  Timeout timeout, std::string group_name,
                  SerialExecutor::CallerPolicy callers = SerialExecutor::CallerPolicy::kOneAtATime,
                  CommunicatorOptions options = {}, int generation = 0,
                  std::vector<int> global_ranks = {}, std::string group_desc = {});
  // A process that joins a running group (a replacement for a failed
  // rank): asks the members through context.store (the group's, as
  // create() gets it; context.rank and context.size are ignored) and waits
  // within context.timeout for them to admit it (Growable::grow), then
  // connects with them. Throws TimeoutError when no member admits it in
  // time (they do at their next grow()).
  static std::shared_ptr<CpuProcessGroup> join(const BackendContext& context,
                                               const CommunicatorOptions& options = {});

  // Shuts down with the group's timeout as the grace period.
  ~CpuProcessGroup() override;

  std::string backend_name() const override { return kBackendName; }
  const std::string& group_name() const { return group_name_; }
  Timeout timeout() const { return timeout_; }
  // This rank's data address ("host:port"; empty for a group of one).
  std::string address() const { return communicator_ ? communicator_->address() : ""; }
  // 0 for a group made by create(); a group shrink() returned is one more
  // than the group it replaced.
  int generation() const { return generation_; }
  // The channel kind to every connected peer ("shm", "tcp"; "" for self
  // and peers not connected). Call it while no collective is in flight (it
  // runs on the caller's thread, not the worker's).
  std::vector<std::string> channel_kinds() {
    if (!communicator_) return std::vector<std::string>(size_);
    return communicator_->channel_kinds(Deadline(timeout()), false);
  }
  bool broken() const { return executor_.broken(); }
  // The executor that runs this group's calls one at a time. The torch
  // adapter issues its operations on it: their calls to this group, made
  // from inside them, run at once, in the adapter's order.
  SerialExecutor& executor() { return executor_; }
  // Which all_reduce later calls run (kAuto picks by message size); for
  // benchmarks and tests. Other backends have no such choice, so it is not
  // part of AllReduceOptions.
  void set_all_reduce_algorithm(AllReduceAlgorithm algorithm) {
    all_reduce_algorithm_.store(algorithm, std::memory_order_relaxed);
  }

  std::shared_ptr<Work> all_reduce(TensorView tensor,
                                   const AllReduceOptions& options = {}) override;
  std::shared_ptr<Work> broadcast(TensorView tensor, const BroadcastOptions& options = {}) override;
  std::shared_ptr<Work> barrier(const BarrierOptions& options = {}) override;
  std::shared_ptr<Work> all_gather(TensorView output, TensorView input,
                                   const AllGatherOptions& options = {}) override;
  std::shared_ptr<Work> reduce_scatter(TensorView output, TensorView input,
                                       const ReduceScatterOptions& options = {}) override;
  std::shared_ptr<Work> all_gather(std::span<const TensorView> outputs, TensorView input,
                                   const AllGatherOptions& options = {}) override;
  std::shared_ptr<Work> reduce_scatter(TensorView output, std::span<const TensorView> inputs,
                                       const ReduceScatterOptions& options = {}) override;
  std::shared_ptr<Work> reduce(TensorView tensor, const ReduceOptions& options = {}) override;
  std::shared_ptr<Work> gather(std::span<const TensorView> outputs, TensorView input,
                               const GatherOptions& options = {}) override;
  std::shared_ptr<Work> scatter(TensorView output, std::span<const TensorView> inputs,
                                const ScatterOptions& options = {}) override;
  std::shared_ptr<Work> all_to_all(std::span<const TensorView> outputs,
                                   std::span<const TensorView> inputs,
                                   const AllToAllOptions& options = {}) override;
  std::shared_ptr<Work> all_to_all_single(TensorView output, TensorView input,
                                          std::span<const size_t> output_split_sizes,
                                          std::span<const size_t> input_split_sizes,
                                          const AllToAllOptions& options = {}) override;
  std::shared_ptr<Work> send(TensorView tensor, int dst, const P2POptions& options = {}) override;
  std::shared_ptr<Work> recv(TensorView tensor, int src, const P2POptions& options = {}) override;
  std::shared_ptr<Work> batch_isend_irecv(std::span<const P2POp> ops,
                                          Timeout timeout = kUnsetTimeout) override;
  void monitored_barrier(const MonitoredBarrierOptions& options = {}) override;
  void shutdown(Timeout timeout = kUnsetTimeout) override;
  // Breaks the group at once, from any thread: the collective running now
  // (on the worker or inline on a caller's thread) fails within
  // milliseconds, its peers learn of it from the connection, and every
  // queued and later call fails with a BackendError carrying `reason`.
  void abort(const std::string& reason);
  // See Shrinkable (process_group.h). The new group is connected through
  // the same store under the next generation's keys, over the same
  // channels (shared memory, TCP, hierarchical) as this one.
  ShrinkResult shrink(std::span<const int> exclude, const ShrinkOptions& options = {}) override;
  // See Growable (process_group.h).
  GrowResult grow(Timeout timeout = kUnsetTimeout) override;

 private:
  // The options create() and join() connect with: `options` and the
  // COLLIE_* variables, the context's transport and store host, the keys
  // "socket/<group name>".
  static CommunicatorOptions connect_options(const BackendContext& context,
                                             const CommunicatorOptions& options);
  // "process group \"0\" (cpu, rank 1 of 4, generation 2)", for messages.
  static std::string describe_what(const std::string& group_name, int rank, int size,
                                   int generation);
  CallSite site(std::string_view op) const;
  Timeout op_timeout(Timeout requested) const { return resolve_timeout(requested, timeout_); }
  // async_op false: run on this thread when the group is idle.
  // `details` describes the call in its Work, formatted only on demand.
  // `op`: a SerialExecutor::OpFn, or a callable taking only the Deadline (see
  // SerialExecutor::run_or_submit). Defined in the .cc, its only user.
  // `call` describes it to the flight recorder (call.op is its kind).
  template <typename DetailsFn, typename Fn>
  std::shared_ptr<Work> enqueue(bool async_op, const FrCall& call, DetailsFn&& details,
                                Timeout timeout, Fn&& op);
  // The recorder's description of a call on this group's transport.
  FrCall fr_call(const char* op, const TensorView& in, uint32_t in_tensors, const TensorView& out,
                 uint32_t out_tensors) const;
  std::shared_ptr<Work> run_p2p(bool async_op, SerialExecutor::Details details, Timeout timeout,
                                std::vector<P2POp> ops);
  // The recorder's description of a send, recv or batch of them.
  FrCall fr_p2p_call(std::span<const P2POp> ops) const;
  // A blocking send, or a blocking recv from a named peer: no allocation
  // when it runs inline (run_p2p's path makes a Work, a batch and vectors).
  template <typename DetailsFn>
  std::shared_ptr<Work> run_p2p_blocking(DetailsFn&& details, Timeout timeout, const P2POp& op);

  // Point-to-point batches posted and not done yet (p2p_work.h). Touched
  // only where the group's ops run (one at a time), and after shutdown.
  struct Outstanding {
    std::shared_ptr<P2PWork> work;
    std::shared_ptr<P2PBatch> batch;
    bool single_recv;  // a recv: its Work carries the sender's rank
  };
  std::vector<Outstanding> outstanding_;
  // Completes the outstanding batches that are done (after every op).
  void reap_p2p();
  // After an op failed: if the communicator is broken, so is every
  // outstanding batch (failed with `error`).
  void after_failure(std::exception_ptr error);
  void fail_outstanding(std::exception_ptr error);
  // P2POwner.
  std::shared_ptr<Work> drive(const std::shared_ptr<P2PWork>& work, Timeout timeout) override;
  std::exception_ptr poll() override;
  std::atomic<bool> poll_queued_{false};
  const std::shared_ptr<P2PLink> p2p_link_ = std::make_shared<P2PLink>();

  // Makes a running call fail promptly; nothing once shrink or grow
  // released the communicator. From any thread (abort(), the queue).
  void abort_communicator() {
    std::lock_guard lock(communicator_mu_);
    if (communicator_) communicator_->abort();
  }
  // Closes the connections, shared memory and listener of a generation
  // that shrink or grow retired.
  void release_communicator() {
    fail_outstanding(std::make_exception_ptr(
        BackendError("the group was shrunk or grown before a point-to-point operation completed")));
    std::unique_ptr<Communicator> old;
    {
      std::lock_guard lock(communicator_mu_);
      old = std::move(communicator_);
    }
  }

  const std::string group_name_;
  const Timeout timeout_;
  // The members' ranks in the world and the group's description (the
  // flight recorder's pg_config; shrink and grow pass them on).
  const std::vector<int> global_ranks_;
  const std::string group_desc_;
  const char* const fr_transport_;  // options_.transport, as the recorder's literal
  const int fr_group_;              // this group's pg_id in the flight recorder
  const CommunicatorOptions options_;
  const int generation_;
  // Shrinks tried on this group (each retry agrees under fresh keys).
  uint64_t shrink_attempts_ = 0;
  // The store's keys for processes asking to join: the same for every
  // generation of the group, so that a joiner need not know the current
  // one ("socket/<name>/join/").
  std::string join_prefix() const { return str_cat("socket/", group_name_, "/join/"); }
  std::shared_ptr<Store> store_;
  std::atomic<AllReduceAlgorithm> all_reduce_algorithm_{AllReduceAlgorithm::kAuto};
  std::atomic<uint64_t> monitored_barriers_{0};
  // Used only by the worker thread, except abort() (thread-safe); reset
  // (release_communicator) under communicator_mu_, which abort takes.
  std::mutex communicator_mu_;
  std::unique_ptr<Communicator> communicator_;
  // Declared last: destroyed (and its worker joined) before the communicator.
  SerialExecutor executor_;
};

}  // namespace collie
