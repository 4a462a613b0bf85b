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
// socket backend's per-message headers have no NCCL equivalent. Instead
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

#include "rendezvous/store.h"
#include "runtime/base/deadline.h"
#include "runtime/nccl/nccl_comm.h"
#include "runtime/process_group/call_log.h"
#include "runtime/process_group/work.h"

namespace collie {

class NcclWork : public Work {
 public:
  // `seq` is the collective's CallLog number (0 for point-to-point);
  // `source_rank` the peer a receive reads from (-1 otherwise).
  NcclWork(std::shared_ptr<NcclComm> comm, cudaEvent_t done, Deadline deadline,
           std::string description, bool blocking, uint64_t seq, int source_rank);
  ~NcclWork() override;

  const std::string& description() const { return description_; }
  const Deadline& deadline() const { return deadline_; }
  uint64_t seq() const { return seq_; }

  bool is_completed() const override { return failed() || event_done(); }
  bool is_success() const override { return !failed() && event_done(); }
  std::exception_ptr exception() const override;
  int source_rank() const override { return source_rank_; }
  // Makes the caller's current stream wait for the launch; with blocking
  // wait also blocks the host until it finished or its deadline passed.
  void wait(Timeout timeout) override;

  void fail(std::exception_ptr error);

 private:
  bool failed() const;
  bool event_done() const;
  void throw_if_failed() const;

  std::shared_ptr<NcclComm> comm_;
  cudaEvent_t done_;
  const Deadline deadline_;
  const std::string description_;
  const bool blocking_;
  const uint64_t seq_;
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
