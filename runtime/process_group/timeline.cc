#include "collie/runtime/process_group/timeline.h"

#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "collie/base/deadline.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/base/types.h"
#include "collie/runtime/process_group/flight_recorder.h"

namespace collie::timeline {
namespace {

using nlohmann::json;

// Round trips per rank and measurement; the fastest one is kept.
constexpr int kRounds = 5;
// How long rank 0 waits for a rank's clock answers and trace part at
// finish() (the store's timeout when shorter): a rank that died is left out
// after it, not waited for for 30 minutes.
constexpr Timeout kFinishTimeout = std::chrono::seconds(120);
// Parts go through the store in chunks below its value limit (64 MiB).
constexpr size_t kChunkBytes = size_t{16} << 20;
// Events kept per rank; later ones are counted, not kept (~200 bytes each
// in the file).
constexpr size_t kMaxEvents = 2'000'000;

struct Event {
  int track = 0;
  std::string name;          // a span's
  const char* op = nullptr;  // a collective's name (a string literal): no copy
  const char* cat = "user";
  int64_t start_ns = 0, end_ns = 0;
  std::array<Arg, 4> args{};
  uint8_t nargs = 0;
  // A collective's fields (from the flight recorder).
  bool collective = false;
  bool ok = true;
  uint64_t seq = 0;
  int64_t bytes = 0;
  int peer = -1;
  DataType dtype = DataType::kFloat32;
  const char* algorithm = "";
  const char* transport = "";
  // span_until_all_reduce: ends with the first all_reduce of this many
  // bytes that ends after it starts (0: a plain span).
  int64_t until_all_reduce_bytes = 0;
};

// Events in chunks that never grow: recording one moves no other.
class EventLog {
 public:
  static constexpr size_t kChunk = 4096;
  Event& add() {
    if (chunks_.empty() || chunks_.back().size() == kChunk) {
      chunks_.emplace_back();
      chunks_.back().reserve(kChunk);
    }
    ++size_;
    return chunks_.back().emplace_back();
  }
  size_t size() const { return size_; }
  void clear() {
    chunks_.clear();
    size_ = 0;
  }
  std::vector<Event> take() {
    std::vector<Event> all;
    all.reserve(size_);
    for (auto& chunk : chunks_)
      for (Event& e : chunk) all.push_back(std::move(e));
    clear();
    return all;
  }

 private:
  std::vector<std::vector<Event>> chunks_;
  size_t size_ = 0;
};

struct State {
  std::atomic<bool> on{false};
  std::mutex mu;  // everything below
  EventLog events;
  size_t dropped = 0;
  std::vector<std::string> tracks;  // by track id
  std::map<std::string, int, std::less<>> track_ids;
  std::map<std::string, int, std::less<>> group_tracks;  // group name -> track id
  // The last groups seen, by address (the recorder's groups never move):
  // the observer's usual lookup, without comparing names.
  std::array<std::pair<const FrGroupInfo*, int>, 8> recent_groups{};
  // The session start() opened.
  std::string path;
  int rank = 0, world = 1;
  std::shared_ptr<Store> store;
  std::string prefix;  // the session's store keys
  ClockOffset begin;
  int64_t base_ns = 0;  // rank 0's clock at start: the file's time 0
  int generation = 0;
};

State& state() {
  static State s;
  return s;
}

int track_locked(State& s, std::string_view name) {
  if (auto it = s.track_ids.find(name); it != s.track_ids.end()) return it->second;
  const int id = static_cast<int>(s.tracks.size());
  s.tracks.emplace_back(name);
  s.track_ids.emplace(std::string(name), id);
  return id;
}

// Whether an event may be added: the timeline is on and not full (a full
// one counts the event as dropped). On true, `lock` holds s.mu.
bool room_for_event(State& s, std::unique_lock<std::mutex>& lock) {
  if (!s.on.load(std::memory_order_relaxed)) return false;
  lock = std::unique_lock(s.mu);
  if (!s.on.load(std::memory_order_relaxed)) return false;
  if (s.events.size() >= kMaxEvents) {
    ++s.dropped;
    return false;
  }
  return true;
}

// The flight recorder's observer: one span per completed or failed call,
// on its group's track.
void on_call(const FrGroupInfo& group, const FrCall& call, uint64_t seq, int64_t start_ns,
             int64_t end_ns, bool ok) {
  State& s = state();
  std::unique_lock<std::mutex> lock;
  if (!room_for_event(s, lock)) return;
  int track = -1;
  for (const auto& [info, id] : s.recent_groups)
    if (info == &group) track = id;
  if (track < 0) {
    if (auto it = s.group_tracks.find(group.name); it != s.group_tracks.end()) {
      track = it->second;
    } else {
      std::string name = "group " + group.name;
      if (!group.desc.empty() && group.desc != "undefined") name += " " + group.desc;
      track = track_locked(s, name);
      s.group_tracks.emplace(group.name, track);
    }
    std::move_backward(s.recent_groups.begin(), s.recent_groups.end() - 1, s.recent_groups.end());
    s.recent_groups[0] = {&group, track};
  }
  Event& e = s.events.add();
  e.track = track;
  e.op = call.op != nullptr ? call.op : "";
  e.cat = "collective";
  e.start_ns = start_ns > 0 ? start_ns : end_ns;
  e.end_ns = std::max(e.start_ns, end_ns);
  e.collective = true;
  e.ok = ok;
  e.seq = seq;
  const int64_t tensors = std::max<int64_t>(1, call.in_tensors);
  e.bytes = call.in_numel * tensors * static_cast<int64_t>(element_size(call.in_dtype));
  e.peer = call.peer;
  e.dtype = call.in_dtype;
  e.algorithm = call.algorithm != nullptr ? call.algorithm : "";
  e.transport = call.transport != nullptr ? call.transport : "";
}

// Tracks in the viewer's order: steps, then DDP, then everything else, the
// groups' collectives last.
int sort_index(const std::string& track, int id) {
  if (track == "step") return 0;
  if (track == "ddp") return 1;
  if (track.rfind("ddp bucket ", 0) == 0) return 10 + id;
  if (track.rfind("group ", 0) == 0) return 10000 + id;
  return 1000 + id;
}

int64_t parse_int(const Bytes& bytes) { return std::stoll(to_string(bytes)); }

// Measures every rank's offset to rank 0 (see the header); returns this
// rank's. Rank 0 times kRounds round trips with each rank in turn and
// publishes the results, with its clock (`*base_ns`) when asked.
ClockOffset measure(Store& store, const std::string& prefix, int rank, int world, Timeout timeout,
                    int64_t* base_ns) {
  if (rank == 0) {
    std::vector<ClockOffset> all(static_cast<size_t>(world));
    all[0].at_ns = now_ns();
    for (int r = 1; r < world; ++r) {
      std::vector<ClockSample> samples;
      for (int k = 0; k < kRounds; ++k) {
        const std::string key = str_cat(prefix, "/", r, "/", k);
        const int64_t t0 = now_ns();
        store.set(key + "/ping", std::string_view("1"));
        store.wait({key + "/pong"}, timeout);
        const int64_t t2 = now_ns();
        samples.push_back({t0, parse_int(store.get(key + "/pong")), t2});
        store.delete_key(key + "/ping");
        store.delete_key(key + "/pong");
      }
      all[static_cast<size_t>(r)] = estimate_offset(samples);
    }
    json out = json::array();
    for (const ClockOffset& o : all) out.push_back({o.offset_ns, o.rtt_ns, o.at_ns});
    const int64_t base = now_ns();
    store.set(prefix + "/offsets", json{{"offsets", out}, {"base", base}}.dump());
    if (base_ns != nullptr) *base_ns = base;
    return all[0];
  }
  for (int k = 0; k < kRounds; ++k) {
    const std::string key = str_cat(prefix, "/", rank, "/", k);
    store.wait({key + "/ping"}, timeout);
    const int64_t t1 = now_ns();
    store.set(key + "/pong", std::to_string(t1));
  }
  store.wait({prefix + "/offsets"}, timeout);
  const json in = json::parse(to_string(store.get(prefix + "/offsets")));
  const auto& mine = in.at("offsets").at(static_cast<size_t>(rank));
  if (base_ns != nullptr) *base_ns = in.at("base").get<int64_t>();
  return {mine.at(0).get<int64_t>(), mine.at(1).get<int64_t>(), mine.at(2).get<int64_t>()};
}

Timeout finish_timeout(const Store& store) { return std::min(store.timeout(), kFinishTimeout); }

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(str_cat("timeline: cannot write ", tmp));
    out << text;
    if (!out.flush()) throw Error(str_cat("timeline: cannot write ", tmp));
  }
  std::filesystem::rename(tmp, path);
}

// `text` as a JSON string (quotes, backslashes and control characters
// escaped; UTF-8 passes through).
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[16];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// Nanoseconds as microseconds with three decimals, exactly.
void append_us(std::string& out, int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  char frac[16];
  std::snprintf(frac, sizeof frac, "%03d", static_cast<int>(ns % 1000));
  out += std::to_string(ns / 1000);
  out += '.';
  out += frac;
}

// This rank's part: a line of JSON with its clock offsets, then its events
// (each a JSON object, comma-separated), times on rank 0's clock in
// microseconds since the session's base.
std::string serialise_part(const std::vector<Event>& events, const std::vector<std::string>& tracks,
                           size_t dropped, int rank, const ClockOffset& begin,
                           const ClockOffset& end, int64_t base_ns) {
  json clock = {{"rank", rank},
                {"offset_begin_ns", begin.offset_ns},
                {"rtt_begin_ns", begin.rtt_ns},
                {"offset_end_ns", end.offset_ns},
                {"rtt_end_ns", end.rtt_ns},
                {"events", events.size()},
                {"dropped_events", dropped}};
  std::string out = clock.dump();
  out += '\n';
  std::string sep;
  auto add = [&](const json& e) {
    out += sep;
    out += e.dump();
    sep = ",\n";
  };
  add({{"name", "process_name"},
       {"ph", "M"},
       {"pid", rank},
       {"tid", 0},
       {"args", {{"name", str_cat("rank ", rank)}}}});
  add({{"name", "process_sort_index"},
       {"ph", "M"},
       {"pid", rank},
       {"tid", 0},
       {"args", {{"sort_index", rank}}}});
  for (size_t id = 0; id < tracks.size(); ++id) {
    const int tid = static_cast<int>(id) + 1;
    add({{"name", "thread_name"},
         {"ph", "M"},
         {"pid", rank},
         {"tid", tid},
         {"args", {{"name", tracks[id]}}}});
    add({{"name", "thread_sort_index"},
         {"ph", "M"},
         {"pid", rank},
         {"tid", tid},
         {"args", {{"sort_index", sort_index(tracks[id], tid)}}}});
  }
  // The events, written directly (nlohmann's objects cost ~7 us an event,
  // this well under 1): keys are known, strings escaped by json_string().
  out.reserve(out.size() + events.size() * 200);
  for (const Event& e : events) {
    const int64_t start = to_reference_clock(e.start_ns, begin, end) - base_ns;
    const int64_t stop = to_reference_clock(e.end_ns, begin, end) - base_ns;
    out += sep;
    out += "{\"name\":";
    append_json_string(out, e.op != nullptr ? std::string_view(e.op) : std::string_view(e.name));
    out += ",\"cat\":";
    append_json_string(out, e.cat);
    out += ",\"ph\":\"X\",\"ts\":";
    append_us(out, start);
    out += ",\"dur\":";
    append_us(out, std::max<int64_t>(0, stop - start));
    out += str_cat(",\"pid\":", rank, ",\"tid\":", e.track + 1, ",\"args\":{");
    std::string_view comma;
    auto key = [&](std::string_view k) {
      out += comma;
      append_json_string(out, k);
      out += ':';
      comma = ",";
    };
    for (uint8_t i = 0; i < e.nargs; ++i) {
      key(e.args[i].first);
      out += std::to_string(e.args[i].second);
    }
    if (e.collective) {
      const std::string& track = tracks[static_cast<size_t>(e.track)];
      // The track is "group <name> [<desc>]".
      const size_t space = track.find(' ', 6);
      key("group");
      append_json_string(out, std::string_view(track).substr(
                                  6, space == std::string::npos ? std::string::npos : space - 6));
      key("seq");
      out += std::to_string(e.seq);
      key("bytes");
      out += std::to_string(e.bytes);
      key("dtype");
      append_json_string(out, to_string(e.dtype));
      if (e.peer >= 0) {
        key("peer");
        out += std::to_string(e.peer);
      }
      if (*e.algorithm != '\0') {
        key("algorithm");
        append_json_string(out, e.algorithm);
      }
      if (*e.transport != '\0') {
        key("transport");
        append_json_string(out, e.transport);
      }
      if (!e.ok) {
        key("failed");
        out += "true";
      }
    }
    out += "}}";
  }
  return out;
}

// Rank 0: the job's file from every rank's part (`parts[r]` empty: missing).
std::string merge_parts(const std::vector<std::string>& parts, int64_t base_ns) {
  std::string events;
  json clocks = json::array();
  std::vector<int> missing;
  for (size_t r = 0; r < parts.size(); ++r) {
    const std::string& part = parts[r];
    const size_t nl = part.find('\n');
    if (part.empty() || nl == std::string::npos) {
      missing.push_back(static_cast<int>(r));
      continue;
    }
    clocks.push_back(json::parse(part.substr(0, nl)));
    if (nl + 1 < part.size()) {
      if (!events.empty()) events += ",\n";
      events.append(part, nl + 1, std::string::npos);
    }
  }
  json other = {{"producer", "collie timeline (runtime/process_group/timeline.h)"},
                {"clock", "CLOCK_REALTIME of each rank, shifted onto rank 0's"},
                {"base_realtime_ns", base_ns},
                {"world_size", parts.size()},
                {"missing_ranks", missing},
                {"ranks", clocks}};
  return str_cat("{\"displayTimeUnit\":\"ms\",\"otherData\":", other.dump(),
                 ",\n\"traceEvents\":[\n", events, "\n]}\n");
}

void send_part(Store& store, const std::string& prefix, int rank, const std::string& part) {
  const size_t chunks = std::max<size_t>(1, (part.size() + kChunkBytes - 1) / kChunkBytes);
  for (size_t i = 0; i < chunks; ++i) {
    const size_t at = i * kChunkBytes;
    store.set(str_cat(prefix, "/part/", rank, "/", i),
              std::string_view(part).substr(at, std::min(kChunkBytes, part.size() - at)));
  }
  store.set(str_cat(prefix, "/part/", rank, "/chunks"), std::to_string(chunks));
}

std::string receive_part(Store& store, const std::string& prefix, int rank, Timeout timeout) {
  const std::string key = str_cat(prefix, "/part/", rank);
  store.wait({key + "/chunks"}, timeout);
  const int64_t chunks = parse_int(store.get(key + "/chunks"));
  std::string part;
  for (int64_t i = 0; i < chunks; ++i) {
    part += to_string(store.get(str_cat(key, "/", i)));
    store.delete_key(str_cat(key, "/", i));
  }
  store.delete_key(key + "/chunks");
  return part;
}

}  // namespace

int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

ClockOffset estimate_offset(std::span<const ClockSample> samples) {
  ClockOffset best{0, -1, 0};
  for (const ClockSample& s : samples) {
    const int64_t rtt = s.t2 - s.t0;
    if (rtt < 0) continue;
    if (best.rtt_ns < 0 || rtt < best.rtt_ns) best = {s.t1 - (s.t0 + rtt / 2), rtt, s.t1};
  }
  if (best.rtt_ns < 0) best.rtt_ns = 0;
  return best;
}

int64_t to_reference_clock(int64_t t, const ClockOffset& begin, const ClockOffset& end) {
  if (end.at_ns == 0 || end.at_ns == begin.at_ns) return t - begin.offset_ns;
  // The offset at t, on the line through (begin.at, begin.offset) and
  // (end.at, end.offset); long double keeps the product exact enough.
  const long double slope = static_cast<long double>(end.offset_ns - begin.offset_ns) /
                            static_cast<long double>(end.at_ns - begin.at_ns);
  const long double offset =
      static_cast<long double>(begin.offset_ns) + slope * static_cast<long double>(t - begin.at_ns);
  return t - static_cast<int64_t>(offset < 0 ? offset - 0.5L : offset + 0.5L);
}

void start(const std::string& path, int rank, int world_size, std::shared_ptr<Store> store) {
  State& s = state();
  {
    std::lock_guard lock(s.mu);
    if (s.on.load()) {
      COLLIE_LOG(kWarn) << "timeline: already recording to " << s.path << "; ignoring start("
                        << path << ")";
      return;
    }
    s.path = path;
    s.rank = rank;
    s.world = std::max(1, world_size);
    s.store = world_size > 1 ? std::move(store) : nullptr;
    s.prefix = str_cat("collie_timeline/", s.generation++);
    s.begin = {0, 0, now_ns()};
    s.base_ns = s.begin.at_ns;
    s.events.clear();
    s.dropped = 0;
    s.recent_groups = {};
    s.tracks.clear();
    s.track_ids.clear();
    s.group_tracks.clear();
    // The viewer's first rows, in this order on every rank.
    track_locked(s, "step");
    track_locked(s, "ddp");
  }
  if (s.store) {
    // Collective. A trace never fails the job: without offsets (a rank
    // that timed out makes every rank time out, rank 0 publishing none),
    // each rank writes its own part, unaligned.
    try {
      s.begin =
          measure(*s.store, s.prefix + "/begin", s.rank, s.world, s.store->timeout(), &s.base_ns);
    } catch (const std::exception& e) {
      COLLIE_LOG(kWarn) << "timeline: could not measure the clock offset to rank 0 (" << e.what()
                        << "); each rank writes " << path << ".rank<N>.json, unaligned";
      s.store.reset();
    }
  }
  s.on.store(true);
  set_fr_observer(&on_call);
  COLLIE_LOG(kInfo) << "timeline: recording; rank 0 writes " << path << " at the end"
                    << (s.world > 1 ? str_cat(" (clock offset to rank 0: ", s.begin.offset_ns,
                                              " ns, round trip ", s.begin.rtt_ns, " ns)")
                                    : std::string());
}

bool enabled() { return state().on.load(std::memory_order_relaxed); }

namespace {

void add_span(std::string_view track, std::string_view name, int64_t start_ns, int64_t end_ns,
              std::span<const Arg> args, const char* cat, int64_t until_all_reduce_bytes) {
  State& s = state();
  std::unique_lock<std::mutex> lock;
  if (!room_for_event(s, lock)) return;
  Event& e = s.events.add();
  e.track = track_locked(s, track);
  e.name = name;
  e.cat = cat;
  e.start_ns = start_ns;
  e.end_ns = std::max(start_ns, end_ns);
  for (const Arg& a : args) {
    if (e.nargs == e.args.size()) break;
    e.args[e.nargs++] = a;
  }
  e.until_all_reduce_bytes = until_all_reduce_bytes;
}

// Ends each span_until_all_reduce span at its all_reduce's completion.
// Both come in order (buckets launch in order, a group completes its calls
// in order): one cursor per size over the all_reduces by end time.
void link_all_reduces(std::vector<Event>& events) {
  std::map<int64_t, std::vector<const Event*>> by_bytes;
  for (const Event& e : events)
    if (e.collective && e.ok && std::string_view(e.op) == "all_reduce")
      by_bytes[e.bytes].push_back(&e);
  for (auto& [bytes, calls] : by_bytes)
    std::sort(calls.begin(), calls.end(),
              [](const Event* a, const Event* b) { return a->end_ns < b->end_ns; });
  std::map<int64_t, size_t> cursor;
  for (Event& e : events) {  // by start time
    if (e.until_all_reduce_bytes == 0) continue;
    auto it = by_bytes.find(e.until_all_reduce_bytes);
    if (it == by_bytes.end()) continue;
    size_t& next = cursor[e.until_all_reduce_bytes];
    while (next < it->second.size() && it->second[next]->end_ns < e.start_ns) ++next;
    if (next == it->second.size()) continue;
    e.end_ns = std::min(e.end_ns, it->second[next++]->end_ns);
  }
}

}  // namespace

void span(std::string_view track, std::string_view name, int64_t start_ns, int64_t end_ns,
          std::span<const Arg> args, const char* cat) {
  add_span(track, name, start_ns, end_ns, args, cat, 0);
}

void span_until_all_reduce(std::string_view track, std::string_view name, int64_t start_ns,
                           int64_t end_ns, int64_t bytes, std::initializer_list<Arg> args,
                           const char* cat) {
  add_span(track, name, start_ns, end_ns, std::span<const Arg>(args.begin(), args.size()), cat,
           bytes > 0 ? bytes : 0);
}

std::string finish() {
  State& s = state();
  if (!s.on.exchange(false)) return "";
  set_fr_observer(nullptr);
  std::vector<Event> events;
  std::vector<std::string> tracks;
  size_t dropped = 0;
  {
    std::lock_guard lock(s.mu);
    events = s.events.take();
    tracks = s.tracks;
    dropped = s.dropped;
  }
  std::shared_ptr<Store> store = std::move(s.store);
  s.store.reset();
  const std::string& path = s.path;
  const int rank = s.rank, world = s.world;
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.start_ns < b.start_ns; });
  link_all_reduces(events);
  if (dropped > 0) {
    COLLIE_LOG(kWarn) << "timeline: kept the first " << kMaxEvents << " events; dropped "
                      << dropped;
  }

  ClockOffset end{};
  if (store) {
    try {
      end = measure(*store, s.prefix + "/end", rank, world, finish_timeout(*store), nullptr);
    } catch (const std::exception& e) {
      COLLIE_LOG(kWarn) << "timeline: could not measure the clock offset again at the end ("
                        << e.what() << "); using the one from the start";
      end = {};
    }
  }
  const std::string part = serialise_part(events, tracks, dropped, rank, s.begin, end, s.base_ns);
  if (!store) {
    const std::string file = world > 1 ? str_cat(path, ".rank", rank, ".json") : path;
    try {
      write_file(file, merge_parts({part}, s.base_ns));
      return file;
    } catch (const std::exception& e) {
      COLLIE_LOG(kError) << "timeline: " << e.what();
      return "";
    }
  }
  try {
    if (rank != 0) {
      send_part(*store, s.prefix, rank, part);
      // Rank 0 says when the file is written; if it never does (it died,
      // its store with it), this rank's part is written here instead.
      store->wait({s.prefix + "/written"}, finish_timeout(*store));
      return "";
    }
    std::vector<std::string> parts(static_cast<size_t>(world));
    parts[0] = part;
    const Deadline deadline(finish_timeout(*store));
    for (int r = 1; r < world; ++r) {
      try {
        const auto left = std::max(Timeout(1), deadline.remaining());
        parts[static_cast<size_t>(r)] = receive_part(*store, s.prefix, r, left);
      } catch (const std::exception& e) {
        COLLIE_LOG(kWarn) << "timeline: rank " << r << "'s part did not arrive (" << e.what()
                          << "); the trace leaves it out";
      }
    }
    write_file(path, merge_parts(parts, s.base_ns));
    COLLIE_LOG(kInfo) << "timeline: wrote " << path;
    store->set(s.prefix + "/written", std::string_view("1"));
    return path;
  } catch (const std::exception& e) {
    const std::string file = str_cat(path, ".rank", rank, ".json");
    COLLIE_LOG(kError) << "timeline: " << e.what() << "; writing this rank's part to " << file;
    try {
      write_file(file, merge_parts({part}, s.base_ns));
    } catch (const std::exception& e2) {
      COLLIE_LOG(kError) << "timeline: " << e2.what();
      return "";
    }
    return file;
  }
}

}  // namespace collie::timeline
