#include "collie/runtime/process_group/flight_recorder.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/process_group/fr_clock.h"
#include "collie/runtime/process_group/fr_pickle.h"

namespace collie {
namespace {

constexpr int kMaxGroups = 4096;
constexpr auto kFailureDumpInterval = std::chrono::seconds(5);
constexpr const char* kDumpRequestKey = "collie/flight_recorder/dump_requests";
constexpr const char* kDumpedKey = "collie/flight_recorder/dumped/";  // + request number
// How long a failing rank waits for the others to dump (they poll the store
// every kPollInterval) before it goes on to fail.
constexpr auto kPollInterval = std::chrono::milliseconds(500);
constexpr auto kAckWait = std::chrono::milliseconds(1500);
// Each call of the dump thread's own store connection gives up after this.
constexpr auto kStoreCallLimit = std::chrono::seconds(2);
constexpr const char* kDefaultDumpPrefix = "/tmp/collie_trace_rank_";

// The ring's size: a power of two, so that a slot is found with a mask.
size_t ring_size(size_t capacity) {
  size_t n = 1;
  while (n < capacity) n <<= 1;
  return capacity == 0 ? 0 : n;
}

// torch's switch for its recorder's durations, and collie's.
bool timing_from_env() {
  for (const char* name : {"COLLIE_FR_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING"}) {
    const char* v = std::getenv(name);
    if (v && (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0)) return true;
  }
  return false;
}

size_t capacity_from_env() {
  for (const char* name :
       {"COLLIE_FR_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0' || n < 0) {
      COLLIE_LOG(kWarn) << name << "=\"" << v << "\" is not a number of entries; using 2000";
      return 2000;
    }
    return static_cast<size_t>(n);
  }
  return 2000;
}

const char* state_name(FrState s, bool torch) {
  switch (s) {
    case FrState::kScheduled: return "scheduled";
    case FrState::kStarted: return "started";
    case FrState::kCompleted: return "completed";
    case FrState::kFailed:
      // torch has no "failed": a call that never finished reads "started".
      return torch ? "started" : "failed";
  }
  return "scheduled";
}

std::string ranks_string(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) out += str_cat(i ? ", " : "", ranks[i]);
  return out + "]";
}

std::string profiling_name(const FrGroupInfo& g, const FrCall& c) {
  const std::string backend = g.backend.empty() ? "collie" : g.backend;
  if (c.p2p) {
    const std::string peer = c.peer < 0 ? "?" : std::to_string(c.peer);
    if (std::strcmp(c.op, "recv") == 0) return str_cat(backend, ":recv ", g.rank, "<-", peer);
    return str_cat(backend, ":", c.op, " ", g.rank, "->", peer);
  }
  return str_cat(backend, ":", c.op);
}

}  // namespace

const char* torch_dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "Float";
    case DataType::kFloat64: return "Double";
    case DataType::kFloat16: return "Half";
    case DataType::kBFloat16: return "BFloat16";
    case DataType::kInt32: return "Int";
    case DataType::kInt64: return "Long";
    case DataType::kUInt8: return "Byte";
    case DataType::kInt8: return "Char";
    case DataType::kBool: return "Bool";
  }
  return "Undefined";
}

// One ring slot. The writer of a slot bumps `version` to odd, writes, and
// bumps it to even; a reader copies the fields between two equal, even
// reads of it. The id of the entry the slot holds tells a completion
// whether its entry is still there (the ring may have wrapped).
struct alignas(64) FlightRecorder::Slot {
  // Two cache lines: what a call writes when it is issued and completes.
  std::atomic<uint32_t> version{0};
  std::atomic<uint8_t> state{0};
  bool precise = false;  // its times are fr_clock ticks (timing on), else coarse ns
  uint16_t pg_id = 0;
  std::atomic<uint64_t> id{0};
  std::atomic<int64_t> started{0}, completed{0};  // 0: not yet
  int64_t created = 0;
  uint64_t collective_seq = 0, p2p_seq = 0;  // op_id is their sum
  int32_t timeout_ms = 0;
  FrCall call;
};
static_assert(sizeof(FrCall) == 64, "FrCall's fields are ordered to leave no padding");

namespace {
// A slot's clock, and its times in CLOCK_REALTIME nanoseconds.
int64_t slot_now(bool precise) { return precise ? fr_clock::now() : fr_clock::coarse_now(); }
int64_t slot_ns(int64_t t, bool precise, const fr_clock::Anchor& a) {
  return precise ? fr_clock::to_realtime_ns(t, a) : t;
}
}  // namespace

struct FlightRecorder::Group {
  FrGroupInfo info;
  std::atomic<uint64_t> collectives{0}, p2p{0};
  // pg_status: the last collective enqueued, started, completed.
  std::atomic<uint64_t> last_started{0}, last_completed{0};
};

namespace {
std::mutex g_groups_mu;                    // register_group, groups(), error texts
std::map<uint64_t, std::string> g_errors;  // record id -> error text (failed entries)
}  // namespace

FlightRecorder& FlightRecorder::get() {
  static FlightRecorder* recorder = new FlightRecorder(capacity_from_env());  // never destroyed:
  return *recorder;  // calls on other threads may record during exit
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(ring_size(capacity)),
      timing_(timing_from_env()),
      slots_(capacity_ ? std::make_unique<Slot[]>(capacity_) : nullptr),
      groups_(std::make_unique<Group[]>(kMaxGroups)) {
  fr_clock::calibrate();
}

FlightRecorder::~FlightRecorder() = default;

void FlightRecorder::reset(size_t capacity) {
  capacity_ = ring_size(capacity);
  slots_ = capacity_ ? std::make_unique<Slot[]>(capacity_) : nullptr;
  next_id_.store(0);
  std::lock_guard lock(g_groups_mu);
  g_errors.clear();
}

int FlightRecorder::register_group(FrGroupInfo info) {
  int id;
  {
    std::lock_guard lock(g_groups_mu);
    id = group_count_.load(std::memory_order_relaxed);
    if (id >= kMaxGroups) return -1;  // recorded no more: calls of pg_id -1 are skipped
    groups_[id].info = std::move(info);
    group_count_.store(id + 1, std::memory_order_release);
  }
  install_dump_signal();
  return id;
}

FlightRecorder::Slot* FlightRecorder::slot_for(uint64_t id) const {
  if (id == 0 || capacity_ == 0) return nullptr;
  Slot* s = &slots_[(id - 1) & (capacity_ - 1)];
  return s->id.load(std::memory_order_relaxed) == id ? s : nullptr;
}

uint64_t FlightRecorder::record(int pg_id, const FrCall& call, int64_t timeout_ms, bool running) {
  if (capacity_ == 0 || pg_id < 0) return 0;
  Group& g = groups_[pg_id];
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
  Slot& s = slots_[(id - 1) & (capacity_ - 1)];
  Slot* next = &slots_[id & (capacity_ - 1)];  // the next call's slot, into the cache
  __builtin_prefetch(next, 1);
  __builtin_prefetch(reinterpret_cast<const char*>(next) + 64, 1);
  const uint32_t v = s.version.load(std::memory_order_relaxed);
  s.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.id.store(id, std::memory_order_relaxed);
  s.state.store(static_cast<uint8_t>(running ? FrState::kStarted : FrState::kScheduled),
                std::memory_order_relaxed);
  s.started.store(0, std::memory_order_relaxed);
  s.completed.store(0, std::memory_order_relaxed);
  s.pg_id = static_cast<uint16_t>(pg_id);
  // A group's calls are issued one at a time (record()'s contract): its
  // counters have one writer, and need no read-modify-write.
  if (call.p2p) {
    s.p2p_seq = g.p2p.load(std::memory_order_relaxed) + 1;
    g.p2p.store(s.p2p_seq, std::memory_order_relaxed);
    s.collective_seq = g.collectives.load(std::memory_order_relaxed);
  } else {
    s.collective_seq = g.collectives.load(std::memory_order_relaxed) + 1;
    g.collectives.store(s.collective_seq, std::memory_order_relaxed);
    if (running) g.last_started.store(s.collective_seq, std::memory_order_relaxed);
    s.p2p_seq = g.p2p.load(std::memory_order_relaxed);
  }
  s.call = call;
  s.precise = timing_.load(std::memory_order_relaxed);
  s.created = slot_now(s.precise);
  s.timeout_ms = static_cast<int32_t>(std::min<int64_t>(timeout_ms, INT32_MAX));
  s.version.store(v + 2, std::memory_order_release);
  return id;
}

void FlightRecorder::started(uint64_t id) {
  Slot* s = slot_for(id);
  if (s == nullptr) return;
  s->started.store(slot_now(s->precise), std::memory_order_relaxed);
  s->state.store(static_cast<uint8_t>(FrState::kStarted), std::memory_order_release);
  if (!s->call.p2p)
    groups_[s->pg_id].last_started.store(s->collective_seq, std::memory_order_relaxed);
}

void FlightRecorder::completed(uint64_t id) {
  Slot* s = slot_for(id);
  if (s == nullptr) return;
  const int64_t now = slot_now(s->precise);
  if (s->started.load(std::memory_order_relaxed) == 0)
    s->started.store(s->created, std::memory_order_relaxed);
  s->completed.store(now, std::memory_order_relaxed);
  s->state.store(static_cast<uint8_t>(FrState::kCompleted), std::memory_order_release);
  Group& g = groups_[s->pg_id];
  if (!s->call.p2p) {
    g.last_started.store(s->collective_seq, std::memory_order_relaxed);
    g.last_completed.store(s->collective_seq, std::memory_order_relaxed);
  }
  if (FrObserver observer = detail_fr_observer()) {
    const uint64_t seq = s->call.p2p ? s->p2p_seq : s->collective_seq;
    const fr_clock::Anchor a = fr_clock::anchor();
    observer(g.info, s->call, seq, slot_ns(s->started.load(), s->precise, a),
             slot_ns(now, s->precise, a), true);
  }
}

void FlightRecorder::failed(uint64_t id, const std::string& error) {
  Slot* s = slot_for(id);
  if (s == nullptr) return;
  if (s->started.load(std::memory_order_relaxed) == 0)
    s->started.store(s->created, std::memory_order_relaxed);
  {
    std::lock_guard lock(g_groups_mu);
    g_errors[id] = error;
    while (g_errors.size() > 64) g_errors.erase(g_errors.begin());
  }
  s->state.store(static_cast<uint8_t>(FrState::kFailed), std::memory_order_release);
  if (FrObserver observer = detail_fr_observer()) {
    const Group& g = groups_[s->pg_id];
    const uint64_t seq = s->call.p2p ? s->p2p_seq : s->collective_seq;
    const fr_clock::Anchor a = fr_clock::anchor();
    observer(g.info, s->call, seq, slot_ns(s->started.load(), s->precise, a),
             slot_ns(slot_now(s->precise), s->precise, a), false);
  }
}

std::vector<FrEntry> FlightRecorder::entries() const {
  std::vector<FrEntry> out;
  if (capacity_ == 0) return out;
  const uint64_t last = next_id_.load(std::memory_order_acquire);
  const uint64_t first = last > capacity_ ? last - capacity_ + 1 : 1;
  out.reserve(last - first + 1);
  std::map<uint64_t, std::string> errors;
  {
    std::lock_guard lock(g_groups_mu);
    errors = g_errors;
  }
  const fr_clock::Anchor a = fr_clock::anchor();
  for (uint64_t id = first; id <= last; ++id) {
    const Slot& s = slots_[(id - 1) & (capacity_ - 1)];
    for (int attempt = 0; attempt < 100; ++attempt) {
      const uint32_t v1 = s.version.load(std::memory_order_acquire);
      if (v1 & 1) continue;
      FrEntry e;
      e.record_id = s.id.load(std::memory_order_relaxed);
      e.pg_id = s.pg_id;
      e.collective_seq_id = s.collective_seq;
      e.p2p_seq_id = s.p2p_seq;
      e.op_id = s.collective_seq + s.p2p_seq;
      e.call = s.call;
      e.timeout_ms = s.timeout_ms;
      const int64_t created = s.created;
      e.timed = s.precise;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.version.load(std::memory_order_relaxed) != v1) continue;
      if (e.record_id != id) break;  // rewritten since: a newer entry
      e.state = static_cast<FrState>(s.state.load(std::memory_order_acquire));
      const int64_t started = s.started.load(std::memory_order_relaxed);
      const int64_t completed = s.completed.load(std::memory_order_relaxed);
      e.time_created_ns = slot_ns(created, e.timed, a);
      e.time_started_ns = started                          ? slot_ns(started, e.timed, a)
                          : e.state != FrState::kScheduled ? e.time_created_ns
                                                           : 0;
      e.time_completed_ns =
          (completed && e.state == FrState::kCompleted) ? slot_ns(completed, e.timed, a) : 0;
      if (e.state == FrState::kFailed) {
        auto it = errors.find(id);
        if (it != errors.end()) e.error = it->second;
      }
      out.push_back(std::move(e));
      break;
    }
  }
  return out;
}

int FlightRecorder::world_size() const {
  std::lock_guard lock(g_groups_mu);
  const int n = group_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (groups_[i].info.desc == "default_pg")
      return static_cast<int>(groups_[i].info.global_ranks.size());
  return n > 0 ? static_cast<int>(groups_[0].info.global_ranks.size()) : 1;
}

std::vector<FrGroupInfo> FlightRecorder::groups() const {
  std::lock_guard lock(g_groups_mu);
  std::vector<FrGroupInfo> out;
  const int n = group_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) out.push_back(groups_[i].info);
  return out;
}

std::string FlightRecorder::dump_pickle(bool include_collectives, bool only_active) const {
  const std::vector<FrGroupInfo> gs = groups();
  PickleWriter w;
  w.begin_dict();
  w.str("version");
  w.str("2.10");
  w.str("comm_lib_version");
  w.str("");
  w.str("pg_config");
  w.begin_dict();
  std::map<std::string, size_t> seen;  // a name once (shrunk groups keep theirs)
  for (size_t i = 0; i < gs.size(); ++i) {
    if (!seen.emplace(gs[i].name, i).second) continue;
    w.str(gs[i].name);
    w.begin_dict();
    w.str("name");
    w.str(gs[i].name);
    w.str("desc");
    w.str(gs[i].desc);
    w.str("ranks");
    w.str(ranks_string(gs[i].global_ranks));
    w.end_dict();
  }
  w.end_dict();
  w.str("pg_status");
  w.begin_dict();
  for (size_t i = 0; i < gs.size(); ++i) {
    const Group& g = groups_[i];
    w.str(std::to_string(i));
    w.begin_dict();
    w.str("last_enqueued_collective");
    w.integer(static_cast<int64_t>(g.collectives.load()));
    w.str("last_started_collective");
    w.integer(static_cast<int64_t>(g.last_started.load()));
    w.str("last_completed_collective");
    w.integer(static_cast<int64_t>(g.last_completed.load()));
    w.end_dict();
  }
  w.end_dict();
  if (include_collectives) {
    w.str("entries");
    w.begin_list();
    for (const FrEntry& e : entries()) {
      if (only_active && e.state == FrState::kCompleted) continue;
      if (e.pg_id < 0 || static_cast<size_t>(e.pg_id) >= gs.size()) continue;
      const FrGroupInfo& g = gs[e.pg_id];
      w.begin_dict();
      w.str("record_id");
      w.integer(static_cast<int64_t>(e.record_id - 1));
      w.str("pg_id");
      w.integer(e.pg_id);
      w.str("process_group");
      w.tuple2(g.name, g.desc);
      w.str("collective_seq_id");
      w.integer(static_cast<int64_t>(e.collective_seq_id));
      w.str("p2p_seq_id");
      w.integer(static_cast<int64_t>(e.p2p_seq_id));
      w.str("op_id");
      w.integer(static_cast<int64_t>(e.op_id));
      w.str("profiling_name");
      w.str(profiling_name(g, e.call));
      w.str("time_created_ns");
      w.integer(e.time_created_ns);
      if (e.time_completed_ns && e.timed) {
        w.str("duration_ms");
        w.real(static_cast<double>(e.time_completed_ns - e.time_started_ns) / 1e6);
      }
      auto sizes = [&](uint32_t n, int64_t numel) {
        w.begin_list();
        for (uint32_t i = 0; i < n; ++i) {
          w.begin_list();
          w.integer(numel);
          w.end_list();
        }
        w.end_list();
      };
      auto dtypes = [&](uint32_t n, DataType d) {
        w.begin_list();
        for (uint32_t i = 0; i < n; ++i) w.str(torch_dtype_name(d));
        w.end_list();
      };
      w.str("input_sizes");
      sizes(e.call.in_tensors, e.call.in_numel);
      w.str("input_dtypes");
      dtypes(e.call.in_tensors, e.call.in_dtype);
      w.str("output_sizes");
      sizes(e.call.out_tensors, e.call.out_numel);
      w.str("output_dtypes");
      dtypes(e.call.out_tensors, e.call.out_dtype);
      w.str("state");
      w.str(state_name(e.state, true));
      w.str("time_discovered_started_ns");
      if (e.time_started_ns) {
        w.integer(e.time_started_ns);
      } else {
        w.none();
      }
      w.str("time_discovered_completed_ns");
      if (e.time_completed_ns) {
        w.integer(e.time_completed_ns);
      } else {
        w.none();
      }
      w.str("retired");
      w.boolean(e.state == FrState::kCompleted);
      w.str("timeout_ms");
      w.integer(e.timeout_ms);
      w.str("is_p2p");
      w.boolean(e.call.p2p);
      w.str("frames");
      w.begin_list();
      w.end_list();
      w.end_dict();
    }
    w.end_list();
  }
  w.end_dict();
  return w.finish();
}

std::string FlightRecorder::state_json() const {
  using nlohmann::json;
  const std::vector<FrGroupInfo> gs = groups();
  const std::vector<FrEntry> es = entries();
  const int64_t now = fr_clock::to_realtime_ns(fr_clock::now());
  json groups = json::array();
  for (size_t i = 0; i < gs.size(); ++i) {
    json last_completed = nullptr;
    json pending = json::array();
    for (const FrEntry& e : es) {
      if (e.pg_id != static_cast<int>(i)) continue;
      json j = {{"op", e.call.op},
                {"seq", e.call.p2p ? e.p2p_seq_id : e.collective_seq_id},
                {"p2p", e.call.p2p},
                {"profiling_name", profiling_name(gs[i], e.call)},
                {"state", state_name(e.state, false)},
                {"dtype", torch_dtype_name(e.call.in_dtype)},
                {"numel", e.call.in_numel},
                {"algorithm", e.call.algorithm},
                {"transport", e.call.transport},
                {"time_created_ns", e.time_created_ns}};
      if (e.call.peer >= 0) j["peer"] = e.call.peer;
      if (e.call.root >= 0) j["root"] = e.call.root;
      if (!e.error.empty()) j["error"] = e.error;
      if (e.state == FrState::kCompleted) {
        if (e.timed)
          j["duration_ms"] = static_cast<double>(e.time_completed_ns - e.time_started_ns) / 1e6;
        last_completed = std::move(j);
      } else {
        j["waited_ms"] = static_cast<double>(now - e.time_created_ns) / 1e6;
        pending.push_back(std::move(j));
      }
    }
    groups.push_back({{"pg_id", i},
                      {"name", gs[i].name},
                      {"desc", gs[i].desc},
                      {"backend", gs[i].backend},
                      {"ranks", gs[i].global_ranks},
                      {"rank", gs[i].rank},
                      {"last_enqueued_collective", groups_[i].collectives.load()},
                      {"last_completed_collective", groups_[i].last_completed.load()},
                      {"last_completed", std::move(last_completed)},
                      {"pending", std::move(pending)}});
  }
  json out = {{"version", 1},
              {"rank", global_rank()},
              {"pid", static_cast<int64_t>(::getpid())},
              {"time_ns", now},
              {"groups", std::move(groups)}};
  return out.dump(1);
}

namespace {

std::mutex g_listeners_mu;
std::map<int, std::function<void()>> g_listeners;
int g_next_listener = 0;
std::atomic<FrObserver> g_observer{nullptr};

bool write_file(const std::string& path, const std::string& bytes) {
  // Written beside it, then renamed: a reader never sees half a file. The
  // temporary name holds neither the dump's prefix nor a trailing number,
  // so that torchfrtrace skips one a killed process left behind.
  const std::string tmp = str_cat(std::filesystem::path(path).parent_path().string(),
                                  "/.collie-fr-", ::getpid(), ".part");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

}  // namespace

FrObserver detail_fr_observer() { return g_observer.load(std::memory_order_relaxed); }
void set_fr_observer(FrObserver observer) {
  // An observer (the timeline) needs every call's own times.
  if (observer) FlightRecorder::get().set_timing(true);
  g_observer.store(observer);
}

int add_dump_listener(std::function<void()> listener) {
  std::lock_guard lock(g_listeners_mu);
  g_listeners[g_next_listener] = std::move(listener);
  return g_next_listener++;
}

void remove_dump_listener(int id) {
  std::lock_guard lock(g_listeners_mu);
  g_listeners.erase(id);
}

std::string FlightRecorder::dump_to_files(const std::string& why) const {
  static std::mutex dump_mu;
  std::lock_guard dump_lock(dump_mu);
  if (!enabled()) return "";
  const int rank = global_rank() >= 0 ? global_rank() : 0;
  const char* prefix_env = std::getenv("TORCH_FR_DUMP_TEMP_FILE");
  const std::string prefix = prefix_env && *prefix_env
                                 ? prefix_env
                                 : (std::getenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
                                        ? std::getenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
                                        : kDefaultDumpPrefix);
  const std::string path = str_cat(prefix, rank);
  std::vector<std::function<void()>> listeners;
  {
    std::lock_guard lock(g_listeners_mu);
    for (auto& [id, l] : g_listeners) listeners.push_back(l);
  }
  if (listeners.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    if (!write_file(path, dump_pickle())) {
      COLLIE_LOG(kWarn) << "flight recorder: could not write " << path << ": "
                        << std::strerror(errno);
    }
  } else {
    for (auto& l : listeners) {
      try {
        l();
      } catch (const std::exception& e) {
        COLLIE_LOG(kWarn) << "flight recorder: a dump listener failed: " << e.what();
      }
    }
  }
  if (const char* dir = std::getenv("COLLIE_FR_STATE_DIR"); dir && *dir) {
    const std::string state = str_cat(dir, "/rank", rank, ".json");
    if (!write_file(state, state_json())) {
      COLLIE_LOG(kWarn) << "flight recorder: could not write " << state;
    }
  }
  COLLIE_LOG(kInfo) << "flight recorder: rank " << rank << " dumped "
                    << (listeners.empty() ? path : std::string("through torch's recorder")) << " ("
                    << why << ")";
  return path;
}

std::string dump_flight_recorder(const std::string& why) {
  return FlightRecorder::get().dump_to_files(why);
}

// The dump thread: woken by SIGUSR2 (through a pipe, the only thing a
// handler may do), and polling the watched store for other ranks' requests.
namespace {

struct DumpThread {
  int pipe_rd = -1, pipe_wr = -1;
  std::mutex mu;
  std::shared_ptr<Store> store;
  int64_t requests_seen = -1;
  std::chrono::steady_clock::time_point last_failure_dump{};
  bool failure_dumped = false;
  int64_t acked = 0;  // requests up to this one are answered by a dump of ours
  // dump_on_failure's request to the other ranks, made on the dump thread
  // (a store that died with its host blocks a call for its whole timeout;
  // the failing caller waits at most kAckWait): pending until the thread
  // took it, done when the others dumped or it gave up.
  bool request_pending = false, request_done = false;
  std::condition_variable request_cv;
};

DumpThread& dump_thread() {
  static DumpThread* t = new DumpThread();  // never destroyed (threads outlive exit)
  return *t;
}

// The pipe's bytes: a dump (SIGUSR2), or a failure's request to the others.
constexpr char kSignalByte = 'S', kRequestByte = 'R';

void on_sigusr2(int) {
  const int saved = errno;
  const char byte = kSignalByte;
  [[maybe_unused]] ssize_t n = ::write(dump_thread().pipe_wr, &byte, 1);
  errno = saved;
}

// Tells the ranks that asked (requests acked+1..n) that this rank has dumped.
void ack_up_to(Store& store, int64_t n) {
  DumpThread& t = dump_thread();
  int64_t from;
  {
    std::lock_guard lock(t.mu);
    from = t.acked + 1;
    t.acked = std::max(t.acked, n);
  }
  for (int64_t r = from; r <= n; ++r) store.add(str_cat(kDumpedKey, r), 1);
}

// dump_on_failure's request, on the dump thread: asks the other ranks
// through the store, then waits up to kAckWait for their dumps (answering
// the requests of ranks failing at the same time meanwhile).
void send_request(Store& store) {
  DumpThread& t = dump_thread();
  const auto until = std::chrono::steady_clock::now() + kAckWait;
  try {
    const int64_t request = store.add(kDumpRequestKey, 1);
    {
      std::lock_guard lock(t.mu);
      t.requests_seen = std::max(t.requests_seen, request);  // not a request for this rank
    }
    const int64_t world = FlightRecorder::get().world_size();
    const std::string key = str_cat(kDumpedKey, request);
    ack_up_to(store, request);
    while (std::chrono::steady_clock::now() < until) {
      ack_up_to(store, store.add(kDumpRequestKey, 0));
      if (store.add(key, 0) >= world) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the store
    }
  } catch (const std::exception& e) {
    COLLIE_LOG(kWarn) << "flight recorder: could not ask the other ranks to dump: " << e.what();
  }
}

void run_dump_thread() {
  DumpThread& t = dump_thread();
  // This thread's malloc arena, now: made on its first allocation, it would
  // otherwise appear as new mappings whenever that comes.
  void* volatile warm = std::malloc(256);
  std::free(warm);
  for (;;) {
    pollfd p{t.pipe_rd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(kPollInterval.count()));
    if (n > 0) {
      char buf[64];
      const ssize_t r = ::read(t.pipe_rd, buf, sizeof buf);
      bool signalled = false, request = false;
      for (ssize_t i = 0; i < r; ++i) {
        signalled |= buf[i] == kSignalByte;
        request |= buf[i] == kRequestByte;
      }
      if (signalled) dump_flight_recorder("SIGUSR2");
      if (request) {
        std::shared_ptr<Store> store;
        {
          std::lock_guard lock(t.mu);
          store = t.store;
          t.request_pending = false;
        }
        if (store) send_request(*store);
        std::lock_guard lock(t.mu);
        t.request_done = true;
        t.request_cv.notify_all();
      }
      continue;
    }
    std::shared_ptr<Store> store;
    int64_t seen;
    {
      std::lock_guard lock(t.mu);
      store = t.store;
      seen = t.requests_seen;
    }
    if (!store) continue;
    int64_t now_requests = 0;
    try {
      // check() first: polling must not create the key in a store whose
      // keys a program counts (num_keys).
      if (store->check({kDumpRequestKey})) now_requests = store->add(kDumpRequestKey, 0);
    } catch (const std::exception&) {
      std::lock_guard lock(t.mu);  // the store is gone (its host exited): stop asking it
      t.store.reset();
      continue;
    }
    bool dump = false;
    {
      std::lock_guard lock(t.mu);
      if (t.requests_seen < 0) {
        t.requests_seen = now_requests;
      } else if (now_requests > t.requests_seen) {
        t.requests_seen = now_requests;
        dump = seen >= 0;
      }
    }
    if (dump) {
      dump_flight_recorder("another rank's collective failed");
      try {
        ack_up_to(*store, now_requests);
      } catch (const std::exception&) {
      }
    }
  }
}

}  // namespace

void install_dump_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    DumpThread& t = dump_thread();
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
    t.pipe_rd = fds[0];
    t.pipe_wr = fds[1];
    struct sigaction old {};
    if (::sigaction(SIGUSR2, nullptr, &old) == 0 && old.sa_handler == SIG_DFL &&
        !(old.sa_flags & SA_SIGINFO)) {
      struct sigaction sa {};
      sa.sa_handler = on_sigusr2;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      ::sigaction(SIGUSR2, &sa, nullptr);
    }
    // The thread must not take signals meant for the program's threads.
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    std::thread(run_dump_thread).detach();
    pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  });
}

void watch_for_dump_requests(std::shared_ptr<Store> store) {
  install_dump_signal();
  DumpThread& t = dump_thread();
  {
    std::lock_guard lock(t.mu);
    if (t.store || !store) return;
  }
  // A connection of the thread's own: sharing the group's would let its
  // polls take the error a failure leaves on the connection (a store that
  // died) from the call that must report it, and wait behind that call.
  std::shared_ptr<Store> own;
  try {
    own = store->clone(kStoreCallLimit);
  } catch (const std::exception& e) {
    COLLIE_LOG(kInfo) << "flight recorder: no connection of its own to the store (" << e.what()
                      << "): another rank's failure will not ask this one to dump";
  }
  if (!own) return;  // a file or in-process store: collie-run asks the workers instead
  std::lock_guard lock(t.mu);
  if (!t.store) t.store = std::move(own);
}

void dump_on_failure(const std::string& why, bool wait_for_others) {
  DumpThread& t = dump_thread();
  bool ask;
  {
    std::lock_guard lock(t.mu);
    const auto now = std::chrono::steady_clock::now();
    if (t.failure_dumped && now - t.last_failure_dump < kFailureDumpInterval) return;
    t.failure_dumped = true;
    t.last_failure_dump = now;
    ask = t.store != nullptr && t.pipe_wr >= 0;
    if (ask) {
      t.request_pending = true;
      t.request_done = false;
    }
  }
  if (ask) {
    const char byte = kRequestByte;
    ask = ::write(t.pipe_wr, &byte, 1) == 1;
  }
  dump_flight_recorder(why);
  if (!ask || !wait_for_others) return;
  // collie-run asks every worker for its state itself when one fails.
  if (const char* v = std::getenv("COLLIE_RUN_COLLECTS_DUMPS"); v && std::strcmp(v, "1") == 0)
    return;
  // Give the others a moment to dump before this rank fails and its
  // launcher stops them (torch's watchdog waits the same way): at most
  // kAckWait, whatever the store does.
  std::unique_lock lock(t.mu);
  t.request_cv.wait_for(lock, kAckWait + std::chrono::milliseconds(100),
                        [&] { return t.request_done; });
}

}  // namespace collie
