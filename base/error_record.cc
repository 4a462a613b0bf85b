#include "collie/base/error_record.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace collie {
namespace {

using nlohmann::json;

constexpr int kFormatVersion = 1;

struct CauseName {
  FailureCause cause;
  std::string_view name;
};
constexpr CauseName kCauseNames[] = {
    {FailureCause::kUnknown, "unknown"},
    {FailureCause::kTimeoutUnresponsive, "timeout_unresponsive"},
    {FailureCause::kTimeout, "timeout"},
    {FailureCause::kPeerClosed, "peer_closed"},
    {FailureCause::kPeerFailed, "peer_failed"},
    {FailureCause::kMismatch, "mismatch"},
    {FailureCause::kNetwork, "network"},
    {FailureCause::kAborted, "aborted"},
    {FailureCause::kBackend, "backend"},
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 0 && n <= 1 << 30 ? static_cast<int>(n) : -1;
}

int64_t micros(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

// "2026-12-06T19:22:01.123456Z"
std::string iso_utc(std::chrono::system_clock::time_point t) {
  const int64_t us = micros(t);
  const std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(us % 1000000));
  return buf;
}

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<T>();
}

// Writes `text` to `path` whole: into a temporary file beside it, then
// renamed over it, so that a reader never sees half a record.
bool write_whole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

std::string_view failure_cause_name(FailureCause cause) {
  for (const CauseName& c : kCauseNames)
    if (c.cause == cause) return c.name;
  return "unknown";
}

FailureCause parse_failure_cause(std::string_view name) {
  for (const CauseName& c : kCauseNames)
    if (c.name == name) return c.cause;
  return FailureCause::kUnknown;
}

std::vector<int> ErrorRecord::culprit_ranks() const {
  std::vector<int> ranks;
  for (const FailureCulprit& c : culprits)
    if (c.global_rank >= 0 && c.global_rank != global_rank) ranks.push_back(c.global_rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::string error_record_json(const ErrorRecord& r) {
  const std::string text = r.error_type + ": " + r.message;
  json culprits = json::array();
  for (const FailureCulprit& c : r.culprits) {
    culprits.push_back({{"rank", c.rank},
                        {"global_rank", c.global_rank >= 0 ? json(c.global_rank) : json()},
                        {"address", c.address}});
  }
  auto or_null = [](int64_t v) { return v >= 0 ? json(v) : json(); };
  const int64_t seconds =
      std::chrono::duration_cast<std::chrono::seconds>(r.time.time_since_epoch()).count();
  // torchrun's part: "message" is what its summary prints as the error
  // (a C++ rank has no Python stack: py_callstack holds the message, which
  // torchrun shows in its place), "timestamp" the whole seconds as a string,
  // by which its agent picks the first failure.
  json j = {
      {"message",
       {{"message", text},
        {"extraInfo", {{"py_callstack", text}, {"timestamp", std::to_string(seconds)}}}}},
      {"collie",
       {{"version", kFormatVersion},
        {"rank", or_null(r.global_rank)},
        {"group", r.group},
        {"group_rank", or_null(r.group_rank)},
        {"group_size", or_null(r.group_size)},
        {"call", r.call},
        {"seq", or_null(r.seq)},
        {"cause", std::string(failure_cause_name(r.cause))},
        {"culprits", std::move(culprits)},
        {"error_type", r.error_type},
        {"message", r.message},
        {"timestamp_us", micros(r.time)},
        {"time", iso_utc(r.time)},
        {"pid", r.pid}}},
  };
  return j.dump(2) + "\n";
}

std::optional<ErrorRecord> parse_error_record(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message")) return std::nullopt;
  ErrorRecord r;
  try {
    // torchrun's two shapes: {"message": {"message", "extraInfo": {timestamp}}}
    // and {"message": "...", "timestamp": ...}.
    const json& m = j.at("message");
    int64_t seconds = 0;
    if (m.is_string()) {
      r.message = m.get<std::string>();
      if (j.contains("timestamp")) {
        const json& ts = j.at("timestamp");
        seconds = ts.is_string() ? std::stoll(ts.get<std::string>()) : ts.get<int64_t>();
      }
    } else if (m.is_object()) {
      r.message = get_or<std::string>(m, "message", "");
      if (m.contains("extraInfo") && m.at("extraInfo").contains("timestamp")) {
        const json& ts = m.at("extraInfo").at("timestamp");
        seconds = ts.is_string() ? std::stoll(ts.get<std::string>()) : ts.get<int64_t>();
      }
    } else {
      return std::nullopt;
    }
    r.time = std::chrono::system_clock::time_point(std::chrono::seconds(seconds));
    auto it = j.find("collie");
    if (it == j.end() || !it->is_object()) return r;
    const json& c = *it;
    r.error_type = get_or<std::string>(c, "error_type", r.error_type);
    r.message = get_or<std::string>(c, "message", r.message);
    r.cause = parse_failure_cause(get_or<std::string>(c, "cause", ""));
    r.global_rank = get_or<int>(c, "rank", -1);
    r.group = get_or<std::string>(c, "group", "");
    r.group_rank = get_or<int>(c, "group_rank", -1);
    r.group_size = get_or<int>(c, "group_size", -1);
    r.call = get_or<std::string>(c, "call", "");
    r.seq = get_or<int64_t>(c, "seq", -1);
    r.pid = get_or<int64_t>(c, "pid", 0);
    if (c.contains("timestamp_us"))
      r.time = std::chrono::system_clock::time_point(
          std::chrono::microseconds(c.at("timestamp_us").get<int64_t>()));
    if (c.contains("culprits")) {
      for (const json& x : c.at("culprits")) {
        r.culprits.push_back({.rank = get_or<int>(x, "rank", -1),
                              .global_rank = get_or<int>(x, "global_rank", -1),
                              .address = get_or<std::string>(x, "address", "")});
      }
    }
  } catch (const std::exception&) {  // a field of the wrong type, a bad number
    return std::nullopt;
  }
  return r;
}

std::optional<ErrorRecord> read_error_record(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_error_record(text);
}

void fill_from_environment(ErrorRecord& r) {
  if (r.global_rank < 0) r.global_rank = env_int("RANK");
  const int world = env_int("WORLD_SIZE");
  const bool whole_job = world > 0 && r.group_size == world;
  for (FailureCulprit& c : r.culprits)
    if (c.global_rank < 0 && whole_job) c.global_rank = c.rank;
}

bool ErrorFile::record(ErrorRecord r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (written_ || path_.empty()) return false;
  written_ = true;  // even if the write fails: a later record is no root cause either
  if (r.time == std::chrono::system_clock::time_point{}) r.time = std::chrono::system_clock::now();
  if (r.pid == 0) r.pid = ::getpid();
  try {
    fill_from_environment(r);
    return write_whole(path_, error_record_json(r));
  } catch (const std::exception&) {
    return false;
  }
}

bool ErrorFile::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

ErrorFile& ErrorFile::process() {
  static ErrorFile* file = [] {
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    return new ErrorFile(path != nullptr ? path : "");
  }();
  return *file;
}

bool record_failure(ErrorRecord record) { return ErrorFile::process().record(std::move(record)); }

}  // namespace collie
