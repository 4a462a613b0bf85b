// NcclWork, the Work of one NCCL launch, and NcclWatchdog, the thread that
// watches every pending Work (internal to the nccl layer).
//
// The watchdog polls ncclCommGetAsyncError and every pending Work's
// deadline (every 100 ms). On an error or a timeout it aborts the
// communicator and fails every pending Work with the group's typed error:
// TimeoutError for a collective that did not finish in time, NetworkError
// when NCCL reports a remote or system error (a peer died), BackendError
// otherwise; later calls throw the same at once.
//
// Naming the culprit. NCCL's data never passes through collie, so the
// cpu backend's per-message headers have no NCCL equivalent. Instead
// each rank's CallLog (what it issued and completed, and the signatures of
// its recent collectives) goes to the store, from a second thread so that
// the watchdog itself never waits on the store:
//  * when something changed, at most once a second (COLLIE_NCCL_PROGRESS=0
//    turns this off), and at once when a collective times out;
//  * once a second, the reporter reads its neighbour's record (rank + 1) and
//    compares the signatures both hold under the same sequence number: a
//    difference is a mismatched program, which the reporter announces in
//    the store (every rank's reporter looks there) and turns into an abort
//    naming both calls, instead of NCCL hanging on it for the whole timeout;
//  * a timed-out collective's error names the ranks that are behind (their
//    last issued call is older than the stuck one), stuck in it too, or
//    silent, from everyone's records.
#pragma once

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/rendezvous/store.h"
#include "collie/runtime/nccl/nccl_comm.h"
#include "collie/runtime/process_group/call_log.h"
#include "collie/runtime/process_group/work.h"

namespace collie {

// Completion events, reused: creating and destroying a CUDA event for every
// call was a measurable part of a small collective's host time. Thread-safe;
// shared by a group and its Works (a Work may outlive the group).
class EventPool {
 public:
  EventPool() = default;
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  cudaEvent_t take();  // a pooled event, or a new one (timing disabled)
  void give(cudaEvent_t event);

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

// The Work of one NCCL launch. Its contract (runtime/process_group/work.h,
// docs/architecture.md "Work"):
//  * is_completed(): the launch finished on the device (its event has
//    fired), or it failed; never blocks.
//  * is_success(): finished on the device, without error.
//  * wait(timeout): blocks the host until is_completed(); then rethrows the
//    failure with its cause (NCCL's error string, the CUDA error, or the
//    timeout naming the deadline). Returns only when is_success().
//  * synchronize(): the caller's current stream waits for the launch; the
//    host goes on (torch's Work.wait() on CUDA). With blocking_wait it is
//    wait().
class NcclWork : public Work {
 public:
  // `seq` is the collective's CallLog number (0 for point-to-point, then
  // `p2p_seq` counts them); `source_rank` the peer a receive reads from (-1
  // otherwise). `done` comes from `events` and goes back there.
  NcclWork(std::shared_ptr<NcclComm> comm, std::shared_ptr<EventPool> events, cudaEvent_t done,
           Deadline deadline, std::string signature, bool blocking, uint64_t seq, uint64_t p2p_seq,
           int source_rank);
  ~NcclWork() override;

  // "all_reduce(float32, 1024, sum) #17 on rank 0", formatted on demand.
  std::string description() const;
  const Deadline& deadline() const { return deadline_; }
  uint64_t seq() const { return seq_; }
  // Its flight-recorder entry (set once, before the watchdog sees it).
  void set_fr_id(uint64_t id) { fr_id_ = id; }
  uint64_t fr_id() const { return fr_id_; }

  bool is_completed() const override { return failed() || event_done(); }
  bool is_success() const override { return !failed() && event_done(); }
  std::exception_ptr exception() const override;
  int source_rank() const override { return source_rank_; }
  void wait(Timeout timeout) override;
  void synchronize() override;

  void fail(std::exception_ptr error);

 private:
  bool failed() const;
  bool event_done() const;
  void throw_if_failed() const;

  std::shared_ptr<NcclComm> comm_;
  std::shared_ptr<EventPool> events_;
  cudaEvent_t done_;
  const Deadline deadline_;
  const std::string signature_;
  const bool blocking_;
  const uint64_t seq_, p2p_seq_;
  uint64_t fr_id_ = 0;
  const int source_rank_;
  mutable std::mutex mu_;
  std::exception_ptr failure_;
};

class NcclWatchdog {
 public:
  struct Options {
    std::chrono::milliseconds period{100};
    // Progress records in the store (see above); also the mismatch check.
    bool publish_progress = true;
    std::chrono::milliseconds publish_period{1000};
    // How long a timeout waits for the other ranks' records.
    std::chrono::milliseconds report_wait{3000};
  };
  // Reads COLLIE_NCCL_PROGRESS ("0" turns publishing off).
  static Options options_from_env();

  NcclWatchdog(std::shared_ptr<NcclComm> comm, std::shared_ptr<Store> store,
               std::shared_ptr<CallLog> calls, const Options& options);
  ~NcclWatchdog();  // stop()
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  void watch(std::shared_ptr<NcclWork> work);
  // Joins both threads; pending Works are left to the caller. Idempotent.
  void stop();

  // The store keys, under the group's name.
  static std::string record_key(const std::string& group, int rank);
  static std::string mismatch_key(const std::string& group);

 private:
  void watch_loop();
  void report_loop();
  // The reporter's answer for a timed-out collective (bounded wait).
  std::string progress_report(uint64_t seq);
  void publish();
  std::optional<CallLog::Record> read_record(int rank);
  void check_neighbour();
  void check_announced_mismatch();
  std::string describe_timeout(const NcclWork& w);

  const std::shared_ptr<NcclComm> comm_;
  const std::shared_ptr<Store> store_;
  const std::shared_ptr<CallLog> calls_;
  const Options options_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<std::shared_ptr<NcclWork>> pending_;
  // A timed-out collective's seq the reporter is asked about, and its answer.
  uint64_t report_request_ = 0;
  bool report_ready_ = false;
  std::string report_;
  std::thread watcher_, reporter_;
};

}  // namespace collie
