// NcclProcessGroup: ProcessGroup over raw NCCL, the way ProcessGroupNCCL is
// in PyTorch. NCCL moves the data; this class does the rendezvous (rank 0
// publishes the ncclUniqueId through the store), the streams, the errors and
// the timeouts.
//
// Streams: each collective runs on the group's own CUDA stream, ordered after
// the caller's current stream (collie::cuda::current_stream()) with an event,
// so no copy is needed. Work (runtime/process_group/work.h, NcclWork):
// synchronize() makes the caller's current stream wait for the collective and
// returns at once (the host is not blocked); a blocking call (async_op =
// false) does that before it returns; wait() blocks the host until the
// device finished. With NcclOptions::blocking_wait (or
// COLLIE_NCCL_BLOCKING_WAIT=1) synchronize() blocks the host too.
//
// CUDA graphs: an operation issued while the caller's stream captures a
// graph is captured (NCCL supports capture) and runs at each replay; its
// Work is complete at once. barrier() waits on the host and is refused
// during a capture.
//
// Errors: a watchdog thread polls ncclCommGetAsyncError and every pending
// collective's deadline. On an error or timeout it calls ncclCommAbort (never
// ncclCommDestroy, which can block forever on a dead peer), marks the group
// broken, fails every pending Work, and every later call throws at once.
//
// No CUDA or NCCL header is included here: CPU code may include this file.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "collie/rendezvous/store.h"
#include "collie/runtime/process_group/process_group.h"

namespace collie {

struct NcclOptions {
  // CUDA device for this rank; -1: LOCAL_RANK, else rank % device_count.
  int device = -1;
  // Per-collective deadline and init deadline; kUnsetTimeout: COLLIE_NCCL_TIMEOUT
  // (seconds) when set, else kDefaultTimeout.
  Timeout timeout = kUnsetTimeout;
  // Block the host in Work::synchronize() (and so in blocking calls) until
  // the collective finished.
  bool blocking_wait = false;
  // Key namespace in the store (one communicator per group).
  std::string group_name = "default_pg";
};

class NcclProcessGroup : public ProcessGroup {
 public:
  // Collective over `size` ranks; every rank calls it with the same store and
  // group_name. Throws BackendError when no CUDA device exists, naming why.
  static std::shared_ptr<NcclProcessGroup> create(std::shared_ptr<Store> store, int rank, int size,
                                                  const NcclOptions& options = {});
  ~NcclProcessGroup() override;

  std::string backend_name() const override { return "nccl"; }
  int device() const;
  // The group's own CUDA stream (a cudaStream_t) that every collective runs
  // on: callers that manage memory with a caching allocator (torch) record
  // their buffers' use on it.
  void* stream() const;

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
  // ncclSend/ncclRecv in one NCCL group. NCCL has no tags (messages between
  // two ranks match in order; the tag is ignored, as in torch) and no
  // receive from any source (refused with InvalidArgument).
  std::shared_ptr<Work> send(TensorView tensor, int dst, const P2POptions& options = {}) override;
  std::shared_ptr<Work> recv(TensorView tensor, int src, const P2POptions& options = {}) override;
  std::shared_ptr<Work> batch_isend_irecv(std::span<const P2POp> ops,
                                          Timeout timeout = kUnsetTimeout) override;
  // Through the store (runtime/process_group/monitored_barrier.h): it
  // names the ranks whose host never reached the call.
  void monitored_barrier(const MonitoredBarrierOptions& options = {}) override;

  // Several all_reduces in one ncclGroupStart/End launch (DDP's buckets).
  std::shared_ptr<Work> all_reduce_coalesced(std::span<const TensorView> tensors,
                                             const AllReduceOptions& options = {});

  // Waits up to `timeout` for issued work, then finalizes the communicator
  // (ncclCommFinalize + ncclCommDestroy) or, when work cannot finish in time,
  // aborts it. Later calls throw. Idempotent.
  void shutdown(Timeout timeout = kUnsetTimeout) override;

  // Aborts the communicator: pending and later calls fail with `reason`.
  void abort(const std::string& reason);
  bool broken() const;

  // The NCCL library version, e.g. "2.28.3" (nccl::version_string()).
  static std::string nccl_version();

 private:
  struct Impl;
  explicit NcclProcessGroup(int rank, int size, std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace collie
