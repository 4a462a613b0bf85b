// SmoothedValue and MetricLogger, BLIP's utils.py in C++: values smoothed
// over a window (median, average) and over the whole epoch (global average),
// synchronised across ranks with one all_reduce of counts and totals, and a
// progress line every N iterations on the main process.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "collie/nn/device_ops.h"
#include "collie/runtime/process_group/process_group.h"

namespace collie::samples {

// Sums `values` over every rank of `pg` through a buffer on `device`, in
// place (torch: all_reduce of a tensor made on the training device).
void all_reduce_values(ProcessGroup& pg, nn::DeviceOps& device, std::span<double> values);

class SmoothedValue {
 public:
  explicit SmoothedValue(size_t window = 20, std::string fmt = "{median:.4f} ({global_avg:.4f})")
      : window_(window), fmt_(std::move(fmt)) {}

  void update(double value, int64_t n = 1);
  double median() const;
  double avg() const;
  double global_avg() const { return count_ ? total_ / static_cast<double>(count_) : 0.0; }
  double max() const;
  double value() const { return deque_.empty() ? 0.0 : deque_.back(); }
  int64_t count() const { return count_; }
  double total() const { return total_; }

  // Sums count and total over every rank of `pg` (the window stays local,
  // as in BLIP). The two numbers travel in a buffer on `device` (BLIP puts
  // them in a cuda tensor; the nccl backend takes no host buffers).
  void synchronize_between_processes(ProcessGroup& pg,
                                     nn::DeviceOps& device = nn::HostOps::instance());
  // The format: "{median:.4f} ({global_avg:.4f})", "{value:.6f}", "{avg:.4f}".
  std::string str() const;

 private:
  size_t window_;
  std::string fmt_;
  std::deque<double> deque_;
  int64_t count_ = 0;
  double total_ = 0.0;
};

class MetricLogger {
 public:
  explicit MetricLogger(std::string delimiter = "  ") : delimiter_(std::move(delimiter)) {}

  SmoothedValue& meter(const std::string& name, size_t window = 20,
                       const std::string& fmt = "{median:.4f} ({global_avg:.4f})");
  void update(const std::string& name, double value, int64_t n = 1);
  const SmoothedValue& at(const std::string& name) const;
  void synchronize_between_processes(ProcessGroup& pg,
                                     nn::DeviceOps& device = nn::HostOps::instance());
  // "loss: 0.4123 (0.5012)  lr: 0.000100"
  std::string str() const;
  // "Averaged stats: lr: 0.000100  loss: 0.5012": global averages.
  std::string global_avg_str() const;

  // Runs body(i) for i in [0, total); every print_freq iterations (and at the
  // last) calls print(line) with BLIP's progress line: header, step/total,
  // eta, the meters, time per iteration and data time. data_time is what the
  // caller measured waiting for the batch.
  struct Progress {
    std::string header;
    int64_t total = 0;
    int64_t print_freq = 50;
  };
  void log_every(const Progress& progress, const std::function<double(int64_t)>& body,
                 const std::function<void(const std::string&)>& print);

 private:
  std::string delimiter_;
  std::map<std::string, SmoothedValue> meters_;
};

// "0:01:23" like Python's str(datetime.timedelta(seconds=int(s))).
std::string format_eta(double seconds);

}  // namespace collie::samples
