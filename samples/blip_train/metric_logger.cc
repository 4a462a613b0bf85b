#include "collie/samples/blip_train/metric_logger.h"

#include <algorithm>
#include <cstdio>
#include <regex>
#include <vector>

#include "collie/base/error.h"
#include "collie/base/str_cat.h"

namespace collie::samples {

void SmoothedValue::update(double value, int64_t n) {
  deque_.push_back(value);
  if (deque_.size() > window_) deque_.pop_front();
  count_ += n;
  total_ += value * static_cast<double>(n);
}

double SmoothedValue::median() const {
  if (deque_.empty()) return 0.0;
  std::vector<double> v(deque_.begin(), deque_.end());
  // torch.tensor(list).median() returns the lower of the two middle values.
  auto mid = v.begin() + static_cast<std::ptrdiff_t>((v.size() - 1) / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

double SmoothedValue::avg() const {
  if (deque_.empty()) return 0.0;
  double s = 0;
  for (double d : deque_) s += d;
  return s / static_cast<double>(deque_.size());
}

double SmoothedValue::max() const {
  return deque_.empty() ? 0.0 : *std::max_element(deque_.begin(), deque_.end());
}

void all_reduce_values(ProcessGroup& pg, nn::DeviceOps& device, std::span<double> values) {
  nn::DeviceBuffer<double> buffer(device, values.size());
  buffer.copy_from_host(values.data());
  device.with_compute_stream([&] { pg.all_reduce(buffer.view())->wait(); });
  buffer.copy_to_host(values.data());
}

void SmoothedValue::synchronize_between_processes(ProcessGroup& pg, nn::DeviceOps& device) {
  double buf[2] = {static_cast<double>(count_), total_};
  all_reduce_values(pg, device, buf);
  count_ = static_cast<int64_t>(buf[0]);
  total_ = buf[1];
}

std::string SmoothedValue::str() const {
  // Replace each {name:.Nf} with the value, as Python's str.format would.
  static const std::regex field(R"(\{(median|avg|global_avg|max|value)(?::\.(\d+)f)?\})");
  std::string out;
  auto begin = std::sregex_iterator(fmt_.begin(), fmt_.end(), field);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    out += fmt_.substr(last, static_cast<size_t>(m.position()) - last);
    const std::string name = m[1];
    double v = name == "median"       ? median()
               : name == "avg"        ? avg()
               : name == "global_avg" ? global_avg()
               : name == "max"        ? max()
                                      : value();
    int precision = m[2].matched ? std::stoi(m[2]) : 6;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", precision, v);
    out += buf;
    last = static_cast<size_t>(m.position() + m.length());
  }
  return out + fmt_.substr(last);
}

SmoothedValue& MetricLogger::meter(const std::string& name, size_t window, const std::string& fmt) {
  auto it = meters_.find(name);
  if (it == meters_.end()) it = meters_.emplace(name, SmoothedValue(window, fmt)).first;
  return it->second;
}

void MetricLogger::update(const std::string& name, double value, int64_t n) {
  meter(name).update(value, n);
}

const SmoothedValue& MetricLogger::at(const std::string& name) const {
  auto it = meters_.find(name);
  if (it == meters_.end()) throw InvalidArgument("MetricLogger has no meter named '" + name + "'");
  return it->second;
}

void MetricLogger::synchronize_between_processes(ProcessGroup& pg, nn::DeviceOps& device) {
  // std::map iterates in the same (sorted) order on every rank, so the
  // all_reduces pair up.
  for (auto& [name, m] : meters_) m.synchronize_between_processes(pg, device);
}

std::string MetricLogger::str() const {
  std::vector<std::string> parts;
  for (const auto& [name, m] : meters_) parts.push_back(name + ": " + m.str());
  return join(parts, delimiter_);
}

std::string MetricLogger::global_avg_str() const {
  std::vector<std::string> parts;
  for (const auto& [name, m] : meters_) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", m.global_avg());
    parts.push_back(name + ": " + buf);
  }
  return "Averaged stats: " + join(parts, delimiter_);
}

std::string format_eta(double seconds) {
  auto s = static_cast<int64_t>(seconds < 0 ? 0 : seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                static_cast<long long>((s / 60) % 60), static_cast<long long>(s % 60));
  return buf;
}

void MetricLogger::log_every(const Progress& progress, const std::function<double(int64_t)>& body,
                             const std::function<void(const std::string&)>& print) {
  using Clock = std::chrono::steady_clock;
  SmoothedValue iter_time(20, "{avg:.4f}"), data_time(20, "{avg:.4f}");
  const auto start = Clock::now();
  auto end = start;
  const int width = static_cast<int>(std::to_string(progress.total).size());
  for (int64_t i = 0; i < progress.total; ++i) {
    double waited = body(i);
    data_time.update(waited);
    auto now = Clock::now();
    iter_time.update(std::chrono::duration<double>(now - end).count());
    end = now;
    if (i % progress.print_freq == 0 || i == progress.total - 1) {
      double eta = iter_time.global_avg() * static_cast<double>(progress.total - i - 1);
      char step[64];
      std::snprintf(step, sizeof step, "[%*lld/%lld]", width, static_cast<long long>(i),
                    static_cast<long long>(progress.total));
      print(str_cat(progress.header, "  ", step, "  eta: ", format_eta(eta), delimiter_, str(),
                    delimiter_, "time: ", iter_time.str(), delimiter_, "data: ", data_time.str()));
    }
  }
  double total = std::chrono::duration<double>(Clock::now() - start).count();
  char per[32];
  std::snprintf(per, sizeof per, "%.4f",
                progress.total ? total / static_cast<double>(progress.total) : 0.0);
  print(str_cat(progress.header, " Total time: ", format_eta(total), " (", per, " s / it)"));
}

}  // namespace collie::samples
