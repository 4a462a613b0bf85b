// BackendCollie: torch 2.x's c10d::Backend over collie. It is what
// torch.distributed runs when a program says init_process_group("collie")
// (module.cc registers it for the devices "cpu" and "cuda").
//
//  * CPU tensors go to collie's cpu backend (shared memory between the
//    ranks of a host, TCP between hosts). Each operation runs on the cpu
//    group's SerialExecutor (runtime/process_group/serial_executor.h), the
//    one that runs the group's own calls: a blocking call (torch's asyncOp
//    false) on the caller's thread at once when the group is idle, an
//    asynchronous one on the executor's worker or a waiting thread, all in
//    issue order; the collie calls an operation makes run inside it.
//  * CUDA tensors go to collie's NCCL backend on torch's current stream
//    (cuda_path.h), where this build has one.
//  * A sparse COO tensor's allreduce is summed as torch's gloo does it
//    (backend_sparse.cc): what DDP needs for nn.Embedding(sparse=True).
//
// Like the C++ API, a group is called from one thread at a time: a call
// issued while another thread's blocking call is in progress breaks the
// group with a DistBackendError naming both calls (the executor's rule 5).
//
// An adapter only: every method checks its arguments on the caller's thread
// (collie::InvalidArgument, a Python RuntimeError naming the call and the
// rank), stages tensors collie cannot use as they are into contiguous
// buffers, and hands one Body (launch.h) to the path of its device. Between
// startCoalescing() and endCoalescing() the Bodies are kept and run as one
// operation at the end, the point-to-point ones as one collie
// batch_isend_irecv (what torch's batch_isend_irecv and _coalescing_manager
// use). docs/torch.md maps every method onto collie.
//
// Under torch 2.15 (C10D_BACKEND_HAS_HOOKS), torch's own flight recorder
// (c10d::FlightRecorderHook, attached to every collie group) records
// collie's calls: the completion hooks tell it when each one completed and
// how long it ran (CollieWork), and the abort hooks run when collie detects
// a failed collective (a timeout, a mismatch, a lost peer: collie's flight
// recorder's dump listener), so that torch writes the dump. Without them
// (torch 2.11, or TORCH_FR_BUFFER_SIZE=0) collie's own recorder writes it
// (runtime/process_group/flight_recorder.h; docs/torch.md, "Flight
// recorder").
//
// torch.distributed.shrink_group (torch 2.11 and later) reaches shrink():
// the survivors of a failed rank agree through the group's store on whom to
// leave out and continue in a new BackendCollie (CpuProcessGroup::shrink).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

// Backend::supportsShrinking and Backend::shrink: torch 2.11 has them (and
// 2.15); older releases are built without shrink.
#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#elif __has_include(<torch/version.h>)
#include <torch/version.h>
#endif
#if defined(TORCH_VERSION_MAJOR) && defined(TORCH_VERSION_MINOR) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11))
#define COLLIE_TORCH_HAS_SHRINK 1
#else
#define COLLIE_TORCH_HAS_SHRINK 0
#endif

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/runtime/process_group/process_group.h"
#include "collie/runtime/process_group/serial_executor.h"
#include "collie/runtime/torch/collie_work.h"
#include "collie/runtime/torch/cuda_path.h"
#include "collie/runtime/torch/launch.h"
#include "collie/runtime/torch/torch_tensors.h"

namespace collie {
class CpuProcessGroup;
}

namespace collie::torch_adapter {

class BackendCollie final : public ::c10d::Backend {
 public:
  static constexpr const char* kBackendName = "collie";

  // Who a group is, for the flight recorders: torch's group name ("0",
  // "1", ...), its description ("default_pg", "undefined", a user's) and its
  // members' ranks in the world, by group rank.
  struct Identity {
    std::string group_name;
    std::string group_desc = "undefined";
    std::vector<int> global_ranks;
  };

  // Collective (every member calls it): rendezvous through torch's `store`
  // (already prefixed for this group) and connect collie's cpu backend
  // within `timeout`, which is also every operation's default deadline.
  // `who.global_ranks` empty: 0..size-1.
  static c10::intrusive_ptr<BackendCollie> create(const c10::intrusive_ptr<::c10d::Store>& store,
                                                  int rank, int size, Timeout timeout,
                                                  Identity who);

  BackendCollie(std::shared_ptr<CpuProcessGroup> cpu, std::unique_ptr<CudaPath> cuda,
                std::string no_cuda_reason, c10::intrusive_ptr<::c10d::Store> store,
                Timeout timeout, Identity who);
  // Runs what was issued (each operation is bounded by its deadline), then
  // shuts the collie groups down.
  ~BackendCollie() override;

  const std::string getBackendName() const override { return kBackendName; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  // The default deadline of the operations issued after the call.
  void setTimeout(std::chrono::milliseconds timeout) override;
  void startCoalescing() override;
  c10::intrusive_ptr<::c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                          const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const ::c10d::GatherOptions& opts) override;
#ifdef COLLIE_TORCH_HAS_GATHER_INTO_TENSOR
  c10::intrusive_ptr<::c10d::Work> gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                      const ::c10d::GatherOptions& opts) override;
#endif
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                            std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                                 int tag) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;
  // Rank 0 names the ranks that did not arrive within the timeout (every
  // one of them with wait_all_ranks). torch 2.15's dist.monitored_barrier()
  // takes any CPU group; 2.11's only gloo's (there: pg.monitored_barrier()).
  void monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // Sequence numbers count the collectives issued on this group; every rank
  // starts at 0.
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  // A group of the ranks `ranks` (sorted group ranks of this one) through
  // `store`, or nullptr on a rank not among them: collie's new_group under
  // torch's ProcessGroup.split_group and DeviceMesh.
  c10::intrusive_ptr<::c10d::Backend> split(const c10::intrusive_ptr<::c10d::Store>& store,
                                            const std::vector<int>& ranks,
                                            const c10::intrusive_ptr<Options>& opts) override;

  // torch's shrink flags (distributed_c10d.py's SHRINK_DEFAULT and
  // SHRINK_ABORT).
  static constexpr int kShrinkDefault = 0x00;
  static constexpr int kShrinkAbort = 0x01;
  // Whether shrink() can run: true unless an operation on a CUDA tensor has
  // made this group an NCCL communicator, which collie cannot shrink.
  bool can_shrink() const;
  // Collective among the ranks that stay (torch's shrink_group): revokes
  // this group, agrees with the others through the store on the ranks to
  // leave out, which must be exactly `ranks_to_exclude` (group ranks; else
  // a RuntimeError naming the ranks the survivors agreed on, so that the
  // caller can shrink again with them), and returns a new BackendCollie of
  // the survivors, renumbered in the old order. SHRINK_DEFAULT lets the
  // operations already issued finish within the deadline; SHRINK_ABORT
  // fails them at once. The deadline, and the new group's timeout, is
  // `opts_override`'s timeout when it has one, else this group's.
  c10::intrusive_ptr<BackendCollie> shrink_to(const std::vector<int64_t>& ranks_to_exclude,
                                              int shrink_flags,
                                              const c10::intrusive_ptr<Options>& opts_override);
#if COLLIE_TORCH_HAS_SHRINK
  bool supportsShrinking() const override { return can_shrink(); }
  c10::intrusive_ptr<::c10d::Backend> shrink(
      const std::vector<int64_t>& ranks_to_exclude, int shrink_flags = kShrinkDefault,
      const c10::intrusive_ptr<Options>& opts_override = nullptr) override {
    return shrink_to(ranks_to_exclude, shrink_flags, opts_override);
  }
#endif

#ifdef C10D_BACKEND_HAS_HOOKS
  // torch 2.15's hooks (Hooks.hpp). A completion hook runs once per Work
  // that completed successfully, on the thread that ran it, with no lock
  // of this backend held. Abort hooks run when an operation of this group
  // fails (a timeout, a mismatch, a lost peer; not a refused argument, nor
  // abort(), which a caller asked for), and, while torch's recorder is
  // attached, on every dump of collie's flight recorder (a failure of
  // another group, another rank's request): its abort hook writes torch's
  // dump, in place of collie's.
  bool supportsCompletionHooks() const override { return true; }
  void registerCompletionHook(int64_t hook_id, ::c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t hook_id) override;
  bool supportsAbortHooks() const override { return true; }
  void registerAbortHook(int64_t hook_id, ::c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t hook_id) override;
#endif
  // Whether torch's flight recorder is attached to a live group: then a
  // dump is torch's (collie_torch.dump_flight_recorder).
  static bool torch_recorder_attached();

  // Breaks the group at once, from any thread: a call blocked in a
  // collective returns with an error within milliseconds (the peers see the
  // connection close), and every later call fails.
  void abort() override;
  // Runs what was issued (bounded by its deadlines), then closes the group.
  void shutdown() override;
  void waitForPendingWorks() override;
  ::c10d::ErrorType getError() override;

  // How shutdown() waits for the operations issued (`wait`): module.cc
  // runs it with Python's GIL released, since completing an operation may
  // run a Python callback chained on its future, and a group is often
  // destroyed by Python's garbage collector, which holds the GIL.
  using Blocking = void (*)(const std::function<void()>& wait);
  static void set_blocking(Blocking blocking);

  // At the interpreter's exit (module.cc registers it with atexit): lets
  // every live group finish what it is running, for at most `grace`, then
  // aborts the groups that have not. Python's finalization kills a thread
  // that takes the GIL, so an operation that ends after it has begun (and
  // drops the last reference to a tensor Python knows) would end the
  // process in std::terminate instead.
  static void quiesce_all(std::chrono::milliseconds grace);

  // For the benchmark that measures what the adapter adds to collie's own
  // call, and for the tests.
  collie::ProcessGroup& cpu_group();
  const SerialExecutor& executor() const { return *executor_; }
  const std::string& group_name() const { return who_.group_name; }
  const Identity& identity() const { return who_; }
  // The default deadline of the next operation (the group's timeout, or
  // what setTimeout set).
  std::chrono::milliseconds default_timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load());
  }

 private:
  Site site(const char* op) const { return Site{op, rank_, who_.group_name}; }
  Timeout timeout(std::chrono::milliseconds requested) const;
  // Runs (or, while coalescing, keeps) one operation on its device's path.
  // `also_completed`: the completion keys of the Works of a coalescing
  // block the operation runs, which complete with it.
  c10::intrusive_ptr<::c10d::Work> launch(Launch call, Body body,
                                          std::vector<uint64_t> also_completed = {});
  c10::intrusive_ptr<::c10d::Work> run_cpu(Launch call, Body body,
                                           std::vector<uint64_t> also_completed);
  // Completes a CPU operation's Work once the executor has run it (or
  // refused it: `verdict`, the executor's error for it), running the abort
  // hooks for a failed collective.
  void settle_cpu(CollieWork& work, std::exception_ptr verdict);
  static void settle_cpu(CollieWork& work, std::exception_ptr verdict, const AbortHooks* aborts,
                         const std::atomic<bool>* torch_dumps);
  // While torch's recorder is attached to this group (it registered both a
  // completion and an abort hook: FlightRecorderHook; HealthCheckHook
  // registers an abort hook alone), collie's flight recorder runs the abort
  // hooks on a dump instead of writing its own (add_dump_listener).
  void update_dump_listener();
  CudaPath& cuda_path(const Site& where);
  // allreduce of one sparse COO tensor (backend_sparse.cc): gloo's
  // all_gather of every rank's indices and values, summed locally.
  c10::intrusive_ptr<::c10d::Work> allreduce_sparse_coo(std::vector<at::Tensor>& tensors,
                                                        const ::c10d::AllreduceOptions& opts);
  // send/recv/recvAnysource: one collie P2POp, alone or in a coalesced batch.
  c10::intrusive_ptr<::c10d::Work> point_to_point(const Site& where, ::c10d::OpType type,
                                                  std::vector<at::Tensor>& tensors, int peer,
                                                  int tag);
  // Runs point-to-point ops on the CPU path without holding up the
  // executor: the operation only posts them (`post` returns collie's Work of the batch,
  // which is not waited for), and the torch Work completes when that Work
  // does, after `finish` (copies out of staging buffers) ran.
  using PostP2P = std::function<std::shared_ptr<collie::Work>(collie::ProcessGroup&)>;
  c10::intrusive_ptr<::c10d::Work> run_cpu_p2p(Launch call, PostP2P post,
                                               std::function<void()> finish,
                                               std::vector<uint64_t> also_completed = {});
  // Keeps a point-to-point operation of an open coalescing block; requires
  // coalescing_mu_.
  c10::intrusive_ptr<::c10d::Work> launch_deferred_p2p_locked(Launch call, const P2POp& op,
                                                              const at::Tensor& user,
                                                              const at::Tensor& buffer);
  // The tensors of a coalesced list call: one per pair, one device.
  Device check_pairs(const Site& where, const std::vector<at::Tensor>& outputs,
                     const std::vector<at::Tensor>& inputs);

  // An operation kept between startCoalescing and endCoalescing.
  struct Deferred {
    Launch call;
    Body body;                              // a collective, or
    std::optional<P2POp> p2p;               // a point-to-point operation,
    at::Tensor p2p_user, p2p_buffer;        // with a receive's staging buffer
    c10::intrusive_ptr<::c10d::Work> work;  // handed out for it
  };

  const std::shared_ptr<CpuProcessGroup> cpu_;
  std::unique_ptr<CudaPath> cuda_;
  const std::string no_cuda_reason_;
  const c10::intrusive_ptr<::c10d::Store> store_;
  const Identity who_;
  std::atomic<int64_t> timeout_ms_;
  std::atomic<uint64_t> sequence_{0};
  // The cpu group's executor, which runs this adapter's CPU operations;
  // the point-to-point Works hold it weakly (an alias of cpu_).
  SerialExecutor* const executor_;
  const std::weak_ptr<SerialExecutor> executor_ref_;
  std::mutex coalescing_mu_;
  bool coalescing_ = false;
  std::vector<Deferred> deferred_;
  // torch's hooks; the Works and the dump listener hold them too.
  const std::shared_ptr<CompletionHooks> completion_hooks_ = std::make_shared<CompletionHooks>();
  const std::shared_ptr<AbortHooks> abort_hooks_ = std::make_shared<AbortHooks>();
  std::mutex listener_mu_;
  int dump_listener_ = -1;  // guarded by listener_mu_
  // Whether the listener is registered (read by the tasks, which run the
  // abort hooks on a failure themselves when it is not).
  const std::shared_ptr<std::atomic<bool>> torch_dumps_ =
      std::make_shared<std::atomic<bool>>(false);
};

}  // namespace collie::torch_adapter
