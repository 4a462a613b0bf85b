// NcclProcessGroup's internals, shared by its source files (the group's
// lifecycle in nccl_process_group.cc, the collectives in
// nccl_collectives.cc). Internal: it includes CUDA and NCCL headers.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"
#include "collie/rendezvous/store.h"
#include "collie/runtime/cuda/cuda_device.h"
#include "collie/runtime/nccl/nccl_comm.h"
#include "collie/runtime/nccl/nccl_process_group.h"
#include "collie/runtime/nccl/nccl_work.h"
#include "collie/runtime/process_group/call_log.h"
#include "collie/runtime/process_group/collective_checks.h"
#include "collie/runtime/process_group/flight_recorder.h"

namespace collie {

// NCCL's names for collie's types. bool travels as uint8 (0/1), as in torch.
ncclDataType_t to_nccl(DataType dtype);
// The NCCL op for `op` on `dtype` (Impl::check_reduce refuses the pairs NCCL
// has no op for, before anything is launched).
ncclRedOp_t to_nccl(ReduceOp op, DataType dtype);

struct NcclProcessGroup::Impl {
  std::shared_ptr<NcclComm> comm;
  std::shared_ptr<Store> store;
  std::shared_ptr<CallLog> calls = std::make_shared<CallLog>();
  int fr_group = -1;  // this group's pg_id in the flight recorder
  std::unique_ptr<NcclWatchdog> watchdog;
  NcclOptions options;
  Timeout timeout{};
  bool blocking_wait = false;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;     // recorded on the caller's stream at each launch
  cudaEvent_t captured = nullptr;  // the join of a launch captured in a CUDA graph
  std::shared_ptr<EventPool> events = std::make_shared<EventPool>();
  float* barrier_buffer = nullptr;
  uint64_t p2p_seq = 0;
  std::mutex launch_mu;  // one launch at a time: stream order = issue order

  // What a launch is: a collective (numbered in the CallLog, its signature
  // compared across ranks) or a point-to-point operation (not numbered: only
  // two ranks make it).
  struct Launch {
    std::string signature;  // "all_reduce(float32, 1024, sum)"
    bool collective = true;
    int source_rank = -1;      // a receive's peer
    bool synchronize = false;  // wait on the host before returning (barrier)
    bool async_op = true;      // false: the caller's stream waits before the return
  };

  // An operation's options (timeout, async_op) onto run() below.
  template <typename Options, typename Enqueue>
  std::shared_ptr<Work> run_with(Launch launch, const Options& options, Enqueue&& enqueue) {
    launch.async_op = options.async_op;
    return run(launch, options.timeout, std::forward<Enqueue>(enqueue));
  }

  // The path of every operation: refuse when broken, order the group's
  // stream after the caller's, enqueue `enqueue(comm, deadline)` holding the
  // communicator's lock (it calls NCCL through settle()), record the
  // completion event and hand the Work to the watchdog. While the caller's
  // stream captures a CUDA graph, the launch is captured instead (run_captured).
  template <typename Enqueue>
  std::shared_ptr<Work> run(const Launch& launch, Timeout timeout, Enqueue&& enqueue) {
    if (comm->broken()) std::rethrow_exception(comm->broken_error());
    const Deadline deadline(resolve_timeout(timeout, this->timeout));
    std::lock_guard lock(launch_mu);
    cuda::check(cudaSetDevice(comm->device()), "cudaSetDevice");
    auto caller = static_cast<cudaStream_t>(cuda::current_stream());
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cuda::check(cudaStreamIsCapturing(caller, &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone)
      return run_captured(launch, caller, capture, deadline, enqueue);
    cuda::check(cudaEventRecord(ready, caller), "cudaEventRecord(caller stream)");
    cuda::check(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent(nccl stream)");
    // The signature is formatted once and kept by the Work; the CallLog
    // keeps a copy only for collectives.
    const uint64_t seq = launch.collective ? calls->issue(launch.signature) : 0;
    const uint64_t p2p = launch.collective ? 0 : ++p2p_seq;
    comm->with_comm([&](ncclComm_t c) { enqueue(c, deadline); });
    // Recorded as started once launched (collie does not time NCCL's
    // kernels); completed when the watchdog sees its event.
    FlightRecorder& fr = FlightRecorder::get();
    const uint64_t fr_id = fr.record(fr_group, fr_call(launch), deadline.limit().count());
    fr.started(fr_id);
    cudaEvent_t done = events->take();
    cuda::check(cudaEventRecord(done, stream), "cudaEventRecord(nccl stream)");
    auto work = std::make_shared<NcclWork>(comm, events, done, deadline, launch.signature,
                                           blocking_wait || launch.synchronize, seq, p2p,
                                           launch.source_rank);
    work->set_fr_id(fr_id);
    watchdog->watch(work);
    if (launch.synchronize)
      work->wait(kUnsetTimeout);
    else if (!launch.async_op)
      work->synchronize();
    return work;
  }

  // A launch into the CUDA graph the caller's stream is capturing: the
  // group's stream joins the capture (fork), NCCL's kernels are captured on
  // it, and the caller's stream waits for them (join, which the capture
  // needs to end). Nothing runs now, so nothing is numbered or watched: the
  // Work is complete, and each replay is a collective on every rank that
  // replays it. An operation that waits on the host (barrier) cannot be
  // captured.
  template <typename Enqueue>
  std::shared_ptr<Work> run_captured(const Launch& launch, cudaStream_t caller,
                                     cudaStreamCaptureStatus capture, const Deadline& deadline,
                                     Enqueue& enqueue) {
    if (capture != cudaStreamCaptureStatusActive)
      throw BackendError(str_cat(launch.signature, " on rank ", comm->rank(),
                                 ": the caller's stream is in an invalidated CUDA graph capture"));
    if (launch.synchronize)
      throw InvalidArgument(str_cat(launch.signature, " on rank ", comm->rank(),
                                    " cannot be captured in a CUDA graph: it waits on the host; "
                                    "end the capture first"));
    cuda::check(cudaEventRecord(ready, caller), "cudaEventRecord(capture fork)");
    cuda::check(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent(capture fork)");
    comm->with_comm([&](ncclComm_t c) { enqueue(c, deadline); });
    cuda::check(cudaEventRecord(captured, stream), "cudaEventRecord(capture join)");
    cuda::check(cudaStreamWaitEvent(caller, captured, 0), "cudaStreamWaitEvent(capture join)");
    return completed_work();
  }

  // The recorder's description of a launch, read off its signature
  // ("all_reduce(float32, 1024, sum)").
  static FrCall fr_call(const Launch& launch);

  // Inside an enqueue: NCCL's result, settled (see NcclComm::settle_locked).
  void settle(ncclResult_t r, const char* op, const Deadline& deadline) {
    comm->settle_locked(r, op, deadline);
  }

  CallSite site(std::string_view op) const {
    return CallSite{op, comm->rank(), options.group_name, "nccl"};
  }

  // The shared checks (runtime/process_group/collective_checks.h), then what
  // only NCCL needs: the buffer is on this rank's device and really is device
  // memory.
  void check_tensor(const CallSite& where, std::string_view name, const TensorView& t);
  // The shared reduce-op check, then the pairs NCCL cannot do (bitwise ops
  // other than band/bor on bool).
  void check_reduce(const CallSite& where, ReduceOp op, DataType dtype);

  // Inside an enqueue: `ops` as ncclSend/ncclRecv in one NCCL group.
  void grouped(ncclComm_t comm, std::span<const P2POp> ops, const Deadline& deadline);
  // Inside an enqueue: a device-to-device copy on the group's stream (a
  // rank's own part of gather, scatter, all_to_all), unless dst is src.
  void copy_local(void* dst, const void* src, size_t bytes);
  uint64_t monitored_barriers = 0;
};

}  // namespace collie
