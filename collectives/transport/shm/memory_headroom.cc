#include "collie/collectives/transport/shm/memory_headroom.h"

#include <fcntl.h>
#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "collie/base/str_cat.h"

namespace collie {
namespace {

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
// cgroup v1 says "no limit" with a page-rounded LONG_MAX; anything this
// large is no limit in practice.
constexpr uint64_t kNoLimitAbove = uint64_t{1} << 60;

std::string read_small_file(const std::string& path, bool* ok) {
  std::ifstream in(path);
  std::ostringstream out;
  if (in) out << in.rdbuf();
  *ok = static_cast<bool>(in) || in.eof();
  return out.str();
}

// The leading unsigned number of `text` (after blanks), or nullopt.
std::optional<uint64_t> parse_u64(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  return v;
}

// A limit file's value: a number, or "max" (v2) / a huge number (v1) for
// none; nullopt when the file is missing or unreadable.
std::optional<uint64_t> read_limit(const std::string& path) {
  bool ok = false;
  const std::string text = read_small_file(path, &ok);
  if (!ok || text.empty()) return std::nullopt;
  if (text.rfind("max", 0) == 0) return kUnlimited;
  const auto v = parse_u64(text);
  if (!v) return std::nullopt;
  return *v >= kNoLimitAbove ? kUnlimited : *v;
}

std::optional<uint64_t> read_number(const std::string& path) {
  bool ok = false;
  const std::string text = read_small_file(path, &ok);
  if (!ok) return std::nullopt;
  return parse_u64(text);
}

// The value of `key` in a "key value" file (memory.stat), 0 when absent.
uint64_t stat_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ' ') {
      if (auto v = parse_u64(std::string_view(line).substr(key.size() + 1))) return *v;
    }
  }
  return 0;
}

// mountinfo escapes blanks and backslashes in paths as \ooo.
std::string unescape_mount_path(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string oct = s.substr(i + 1, 3);
      if (oct.size() == 3 &&
          std::all_of(oct.begin(), oct.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out.push_back(static_cast<char>(std::stoi(oct, nullptr, 8)));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

struct CgroupMount {
  bool v2 = false;
  std::string root;   // the hierarchy's path that is mounted
  std::string point;  // where
};

std::vector<CgroupMount> memory_mounts(const std::string& mountinfo) {
  std::vector<CgroupMount> mounts;
  std::ifstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, dev, root, point, type, source, super;
    if (!(head >> id >> parent >> dev >> root >> point)) continue;
    if (!(tail >> type >> source)) continue;
    tail >> super;
    CgroupMount m{type == "cgroup2", unescape_mount_path(root), unescape_mount_path(point)};
    if (type == "cgroup2") {
      mounts.push_back(std::move(m));
    } else if (type == "cgroup") {
      std::istringstream opts(super);
      std::string opt;
      while (std::getline(opts, opt, ','))
        if (opt == "memory") mounts.push_back(std::move(m));
    }
  }
  return mounts;
}

// This process's path in the v2 hierarchy ("0::/path") and in the v1 one
// with the memory controller ("N:...memory...:/path").
void own_cgroups(const std::string& file, std::string* v2, std::string* v1_memory) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      *v2 = path;
      continue;
    }
    std::istringstream list(controllers);
    std::string c;
    while (std::getline(list, c, ','))
      if (c == "memory") *v1_memory = path;
  }
}

struct Candidate {
  uint64_t room = kUnlimited;
  std::string limit;
  std::string dir;
};

void consider(Candidate* best, uint64_t limit, uint64_t working, const std::string& what,
              const std::string& dir) {
  if (limit == kUnlimited) return;
  const uint64_t room = limit > working ? limit - working : 0;
  if (room >= best->room) return;
  best->room = room;
  best->limit = str_cat("the memory cgroup ", dir, " (", what, " ", format_memory_bytes(limit),
                        ", ", format_memory_bytes(working), " in use)");
  best->dir = dir;
}

// From this process's cgroup in `m` up to the mount's root, every limit.
void walk_cgroups(const CgroupMount& m, const std::string& own, Candidate* best) {
  if (own.empty()) return;
  std::string rel;
  if (m.root == "/") {
    rel = own;
  } else if (own == m.root || own.rfind(m.root + "/", 0) == 0) {
    rel = own.substr(m.root.size());
  }
  // Not under the mounted root (another cgroup namespace's view): only the
  // mount point itself, the closest cgroup that can be seen.
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  for (;;) {
    const std::string dir = m.point + rel;
    if (m.v2) {
      const auto current = read_number(dir + "/memory.current");
      if (current) {
        const uint64_t inactive = stat_value(dir + "/memory.stat", "inactive_file");
        const uint64_t working = *current > inactive ? *current - inactive : 0;
        if (auto max = read_limit(dir + "/memory.max"))
          consider(best, *max, working, "memory.max", dir);
        if (auto high = read_limit(dir + "/memory.high"))
          consider(best, *high, working, "memory.high", dir);
      }
    } else {
      const auto usage = read_number(dir + "/memory.usage_in_bytes");
      const auto limit = read_limit(dir + "/memory.limit_in_bytes");
      if (usage && limit) {
        uint64_t inactive = stat_value(dir + "/memory.stat", "total_inactive_file");
        if (inactive == 0) inactive = stat_value(dir + "/memory.stat", "inactive_file");
        const uint64_t working = *usage > inactive ? *usage - inactive : 0;
        consider(best, *limit, working, "memory.limit_in_bytes", dir);
      }
    }
    if (rel.empty()) break;
    rel.resize(rel.rfind('/'));
  }
}

}  // namespace

std::string format_memory_bytes(uint64_t bytes) {
  constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  auto unit = [&](uint64_t u, const char* name) {
    if (bytes % u == 0) return str_cat(bytes / u, " ", name);
    // One decimal, rounded down, so that a limit is never overstated.
    const uint64_t tenths = bytes / (u / 10);
    return str_cat(tenths / 10, ".", tenths % 10, " ", name);
  };
  if (bytes >= kGiB) return unit(kGiB, "GiB");
  if (bytes >= kMiB) return unit(kMiB, "MiB");
  return str_cat(bytes, " bytes");
}

MemoryHeadroom memory_headroom(const MemorySources& sources) {
  Candidate best;
  std::string v2, v1;
  own_cgroups(sources.cgroup, &v2, &v1);
  for (const CgroupMount& m : memory_mounts(sources.mountinfo))
    walk_cgroups(m, m.v2 ? v2 : v1, &best);
  MemoryHeadroom out;
  out.bytes = best.room;
  out.limit = best.limit;
  out.cgroup_dir = best.dir;
  // The machine's own limit: a cgroup allowed more than there is still
  // runs out of RAM first.
  const uint64_t available = stat_value(sources.meminfo, "MemAvailable:") * 1024;
  if (available > 0 && available < out.bytes) {
    out.bytes = available;
    out.limit = str_cat("the machine (MemAvailable in ", sources.meminfo, ": ",
                        format_memory_bytes(available), ")");
  }
  return out;
}

std::string shm_memory_refusal(uint64_t segment_bytes, uint64_t ring_bytes,
                               const MemoryHeadroom& room) {
  if (room.bytes == kUnlimited) return "";
  const uint64_t share = room.bytes / kShmHeadroomShareDen * kShmHeadroomShareNum;
  if (segment_bytes <= share) return "";
  // The largest rings that would fit: two of them and the segment's header
  // (segment_bytes - 2 * ring_bytes) in the share, in whole 64-byte lines.
  const uint64_t header = segment_bytes - 2 * ring_bytes;
  const uint64_t fit = share > header ? ((share - header) / 2) & ~uint64_t{63} : 0;
  return str_cat("the pair's two rings of ", format_memory_bytes(ring_bytes), " (a ",
                 format_memory_bytes(segment_bytes), " segment) would not fit in the ",
                 format_memory_bytes(room.bytes), " this process may still use under ", room.limit,
                 ": a segment may take at most ", kShmHeadroomShareNum, "/", kShmHeadroomShareDen,
                 " of it (reserving more gets a rank SIGKILLed by the cgroup's OOM killer, not "
                 "an error); ",
                 fit >= 4096 ? str_cat("set COLLIE_SHM_BYTES to at most ", fit, " (",
                                       format_memory_bytes(fit), ") or raise the limit")
                             : std::string("raise the limit to use shared memory"));
}

CgroupReservationLock::CgroupReservationLock(const std::string& dir, const Deadline& deadline) {
  if (dir.empty()) return;
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
      fd_ = std::move(fd);
      return;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) return;
    if (deadline.expired()) return;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20'000));
  }
}

}  // namespace collie
