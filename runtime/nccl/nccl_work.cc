#include "collie/runtime/nccl/nccl_work.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/cuda/cuda_device.h"
#include "collie/runtime/process_group/flight_recorder.h"

namespace collie {

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t EventPool::take() {
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

void EventPool::give(cudaEvent_t event) {
  std::lock_guard lock(mu_);
  free_.push_back(event);
}

NcclWork::NcclWork(std::shared_ptr<NcclComm> comm, std::shared_ptr<EventPool> events,
                   cudaEvent_t done, Deadline deadline, std::string signature, bool blocking,
                   uint64_t seq, uint64_t p2p_seq, int source_rank)
    : comm_(std::move(comm)),
      events_(std::move(events)),
      done_(done),
      deadline_(deadline),
      signature_(std::move(signature)),
      blocking_(blocking),
      seq_(seq),
      p2p_seq_(p2p_seq),
      source_rank_(source_rank) {}

NcclWork::~NcclWork() {
  // An event whose launch may still be pending is only ever recorded again
  // after a later launch on the same stream, so reusing it is safe.
  if (done_ != nullptr) events_->give(done_);
}

std::string NcclWork::description() const {
  if (seq_ > 0) return str_cat(signature_, " #", seq_, " on rank ", comm_->rank());
  return str_cat(signature_, " (p2p #", p2p_seq_, ") on rank ", comm_->rank());
}

std::exception_ptr NcclWork::exception() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void NcclWork::fail(std::exception_ptr error) {
  std::lock_guard lock(mu_);
  if (failure_) return;
  failure_ = std::move(error);
  try {
    std::rethrow_exception(failure_);
  } catch (const std::exception& e) {
    FlightRecorder::get().failed(fr_id_, e.what());
  } catch (...) {
    FlightRecorder::get().failed(fr_id_, "unknown exception");
  }
}

bool NcclWork::failed() const {
  std::lock_guard lock(mu_);
  return failure_ != nullptr;
}

bool NcclWork::event_done() const {
  const cudaError_t e = cudaEventQuery(done_);
  if (e == cudaErrorNotReady) return false;
  if (e != cudaSuccess) {
    const_cast<NcclWork*>(this)->fail(std::make_exception_ptr(
        BackendError(str_cat(description(), ": cudaEventQuery: ", cudaGetErrorString(e)))));
    return false;
  }
  return true;
}

void NcclWork::throw_if_failed() const {
  std::lock_guard lock(mu_);
  if (failure_) std::rethrow_exception(failure_);
}

void NcclWork::synchronize() {
  if (blocking_) return wait(kUnsetTimeout);
  throw_if_failed();
  // Order the caller's current stream after the launch: the host goes on.
  auto caller = static_cast<cudaStream_t>(cuda::current_stream());
  cuda::check(cudaStreamWaitEvent(caller, done_, 0), "cudaStreamWaitEvent");
}

void NcclWork::wait(Timeout timeout) {
  throw_if_failed();
  Deadline own(timeout == kUnsetTimeout ? deadline_.remaining() : timeout);
  // Spin briefly (a small collective finishes in microseconds), then sleep
  // in growing steps up to a millisecond: a long one costs no core.
  std::chrono::microseconds nap{0};
  while (!event_done()) {
    throw_if_failed();
    if (comm_->broken()) std::rethrow_exception(comm_->broken_error());
    if (deadline_.expired()) {
      const std::string why = str_cat(description(), " timed out ", deadline_.describe());
      comm_->abort(why, NcclFailure::kTimeout);
      throw TimeoutError(str_cat("nccl backend rank ", comm_->rank(), ": ", why));
    }
    if (own.expired())
      throw TimeoutError(str_cat("Work::wait on ", description(), " timed out ", own.describe()));
    if (nap.count() == 0) {
      std::this_thread::yield();
      if (own.elapsed() > std::chrono::microseconds(200)) nap = std::chrono::microseconds(20);
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
    }
  }
  throw_if_failed();
}

NcclWatchdog::Options NcclWatchdog::options_from_env() {
  Options o;
  if (const char* v = std::getenv("COLLIE_NCCL_PROGRESS"))
    o.publish_progress = !(std::strcmp(v, "0") == 0 || std::strcmp(v, "false") == 0);
  return o;
}

std::string NcclWatchdog::record_key(const std::string& group, int rank) {
  return str_cat(group, "/nccl/calls/", rank);
}

std::string NcclWatchdog::mismatch_key(const std::string& group) {
  return str_cat(group, "/nccl/mismatch");
}

NcclWatchdog::NcclWatchdog(std::shared_ptr<NcclComm> comm, std::shared_ptr<Store> store,
                           std::shared_ptr<CallLog> calls, const Options& options)
    : comm_(std::move(comm)),
      store_(std::move(store)),
      calls_(std::move(calls)),
      options_(options) {
  watcher_ = std::thread([this] { watch_loop(); });
  if (options_.publish_progress && store_ && comm_->size() > 1)
    reporter_ = std::thread([this] { report_loop(); });
}

NcclWatchdog::~NcclWatchdog() { stop(); }

void NcclWatchdog::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (reporter_.joinable()) reporter_.join();
}

void NcclWatchdog::watch(std::shared_ptr<NcclWork> work) {
  std::lock_guard lock(mu_);
  pending_.push_back(std::move(work));
}

void NcclWatchdog::watch_loop() {
  cudaSetDevice(comm_->device());
  // Querying events while another thread captures a CUDA graph is refused in
  // the default (global) capture mode; this thread never captures.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.period);
    if (stopping_) break;
    lock.unlock();
    const bool broken = comm_->poll_async_error();
    lock.lock();
    if (broken) break;
    // One stream: launches complete in order, so the last completed
    // collective's number is how far this rank got.
    std::erase_if(pending_, [&](const auto& w) {
      if (!w->is_completed()) return false;
      if (w->seq() > 0) calls_->complete(w->seq());
      if (w->is_success()) FlightRecorder::get().completed(w->fr_id());
      return true;
    });
    for (const auto& w : pending_) {
      if (!w->deadline().expired()) continue;
      std::shared_ptr<NcclWork> late = w;
      lock.unlock();
      const std::string why = describe_timeout(*late);
      dump_on_failure(why, true);  // this rank's flight recorder, and the others'
      comm_->abort(why, NcclFailure::kTimeout);
      lock.lock();
      break;
    }
    if (comm_->broken()) break;
  }
  // Broken: fail whatever is still pending so that waiters stop waiting.
  if (comm_->broken()) {
    const std::exception_ptr error = comm_->broken_error();
    for (const auto& w : pending_) w->fail(error);
    pending_.clear();
  }
}

std::string NcclWatchdog::describe_timeout(const NcclWork& w) {
  std::string why =
      str_cat(w.description(), " timed out ", w.deadline().describe(), " (NCCL watchdog)");
  if (w.seq() == 0)
    return str_cat(why, ": the peer never made the matching call, or it hangs or died");
  if (!reporter_.joinable()) return str_cat(why, "; a peer may have died or hung");
  return str_cat(why, "; ", progress_report(w.seq()));
}

std::string NcclWatchdog::progress_report(uint64_t seq) {
  std::unique_lock lock(mu_);
  report_request_ = seq;
  report_ready_ = false;
  cv_.notify_all();
  if (!cv_.wait_for(lock, options_.report_wait, [&] { return report_ready_ || stopping_; }) ||
      !report_ready_)
    return str_cat("the other ranks' progress is unknown: the store did not answer within ",
                   format_duration(options_.report_wait));
  return report_;
}

void NcclWatchdog::publish() {
  store_->set(record_key(comm_->group_name(), comm_->rank()), calls_->record());
}

std::optional<CallLog::Record> NcclWatchdog::read_record(int rank) {
  const std::string key = record_key(comm_->group_name(), rank);
  if (!store_->check({key})) return std::nullopt;
  const Bytes bytes = store_->get(key);
  return CallLog::parse(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

void NcclWatchdog::check_neighbour() {
  const int rank = comm_->rank(), next = (rank + 1) % comm_->size();
  const auto mine = CallLog::parse(calls_->record());
  const auto theirs = read_record(next);
  if (!mine || !theirs) return;
  const auto m = first_mismatch(*mine, *theirs);
  if (!m) return;
  const std::string message =
      str_cat("collective mismatch: rank ", next, " called ", m->b, " as op #", m->seq, ", rank ",
              rank, " called ", m->a,
              " (every rank must call the same collectives in the same order; found by "
              "comparing the ranks' call records in the store)");
  store_->set(mismatch_key(comm_->group_name()), message);
  comm_->abort(message, NcclFailure::kBackend);
}

void NcclWatchdog::check_announced_mismatch() {
  const std::string key = mismatch_key(comm_->group_name());
  if (!store_->check({key})) return;
  comm_->abort(to_string(store_->get(key)), NcclFailure::kBackend);
}

void NcclWatchdog::report_loop() {
  std::unique_lock lock(mu_);
  bool store_failed = false;
  while (!stopping_) {
    cv_.wait_for(lock, options_.publish_period, [&] { return stopping_ || report_request_ != 0; });
    if (stopping_) break;
    const uint64_t request = report_request_;
    lock.unlock();
    std::string report;
    try {
      if (request != 0) {
        publish();
        std::vector<std::optional<CallLog::Record>> records(comm_->size());
        for (int r = 0; r < comm_->size(); ++r)
          if (r != comm_->rank()) records[r] = read_record(r);
        report = describe_progress(request, comm_->rank(), records);
      } else if (!comm_->broken()) {
        // The neighbour is read every period, not only when this rank
        // moved: in a mismatch both ranks may be stuck, the second one to
        // publish its call after the first one last looked.
        if (calls_->changed()) publish();
        if (calls_->issued() > 0) check_neighbour();
        if (!comm_->broken()) check_announced_mismatch();
      }
    } catch (const std::exception& e) {
      if (!store_failed) {
        COLLIE_LOG(kWarn) << "nccl backend: progress record: " << e.what();
      }
      store_failed = true;
      report = str_cat("the other ranks' progress is unknown: ", e.what());
    }
    lock.lock();
    if (request != 0) {
      report_ = report;
      report_ready_ = true;
      report_request_ = 0;
      cv_.notify_all();
    }
  }
}

}  // namespace collie
